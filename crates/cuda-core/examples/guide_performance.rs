//! The program of the guide's chapter on performance (`docs/guide/09-performance.md`): measures,
//! on this machine, a cold compile against a cache hit, launches one by one against the same
//! launches as a graph, and a pool allocation. It prints the figures and checks only results
//! (timings vary with the machine and its load).

use cuda_core::graph::CaptureMode;
use cuda_core::{CodeType, Device, EventOptions, InMemoryProgramCache, LaunchConfig, Program, ProgramOptions};
use cuda_core::{SourceType, TypedBuffer};
use std::error::Error;
use std::time::Instant;

const SOURCE: &str = r#"extern "C" __global__ void add(unsigned* x, unsigned v, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}"#;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    device.set_current()?;

    // Compiles: NVRTC takes milliseconds; a cache hit takes microseconds.
    let cache = InMemoryProgramCache::new(None);
    let mut program = Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())?;
    let started = Instant::now();
    let code = program.compile_cached(CodeType::Cubin, &[], &cache)?;
    let cold = started.elapsed();
    let started = Instant::now();
    program.compile_cached(CodeType::Cubin, &[], &cache)?;
    println!("compile: {cold:.2?} cold, {:.2?} from the cache", started.elapsed());

    let add = code.get_kernel("add")?.typed::<(*mut u32, u32, u32)>()?;
    let stream = device.create_stream(Default::default())?;
    let n: u32 = 1024;
    let config = LaunchConfig::new(n.div_ceil(256), 256);
    let x = TypedBuffer::<u32>::allocate(&device, n as usize, &stream)?;
    x.fill(0, &stream)?;
    // The first launch loads the kernel.
    // SAFETY: add touches n words of x, which holds n (so for every launch below).
    unsafe { add.launch(&stream, &config, (&x, 1u32, n))? };
    stream.sync()?;

    // Ten launches one by one, against the same ten as one graph launch: host time per call.
    let rounds = 1000;
    let started = Instant::now();
    for _ in 0..rounds {
        for _ in 0..10 {
            // SAFETY: as above.
            unsafe { add.launch(&stream, &config, (&x, 1u32, n))? };
        }
        stream.sync()?;
    }
    let one_by_one = started.elapsed() / rounds;
    let graph = stream.capture_graph(CaptureMode::Relaxed, |s| {
        for _ in 0..10 {
            // SAFETY: as above.
            unsafe { add.launch(s, &config, (&x, 1u32, n))? };
        }
        Ok(())
    })?;
    graph.upload(&stream)?;
    let started = Instant::now();
    for _ in 0..rounds {
        graph.launch(&stream)?;
        stream.sync()?;
    }
    let as_graph = started.elapsed() / rounds;
    println!("10 kernels and a sync: {one_by_one:.2?} launched one by one, {as_graph:.2?} as a graph");
    let expected = 1 + 2 * 10 * rounds;
    assert!(x.to_vec_blocking(&stream)?.iter().all(|v| *v == expected));

    // A stream-ordered pool allocation and free, and GPU time with timing events.
    let timing = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let start = stream.record_new(timing)?;
    let started = Instant::now();
    for _ in 0..rounds {
        drop(device.allocate(1 << 20, &stream)?);
    }
    let per_allocation = started.elapsed() / rounds;
    let end = stream.record_new(timing)?;
    end.sync()?;
    println!(
        "1 MiB pool allocate + free: {per_allocation:.2?} of host time each; the stream spent {:.3} ms on all {rounds}",
        end.elapsed_time_since(&start)?
    );
    Ok(())
}
