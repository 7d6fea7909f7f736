//! Quickstart, after `cuda.core`'s 10-minute tutorial: pick a device, compile a kernel at run
//! time, launch it, verify it, time 100 launches with events, join two streams, and capture and
//! replay a graph.
//!
//! Run it with `cargo xtask quickstart` (it provides NVRTC from NVIDIA's wheels when no toolkit is
//! installed). Memory is `Buffer`s from the device's default pool, passed to kernels as typed
//! views; the only `unsafe` is the launches themselves (the kernel is trusted to stay inside the
//! buffers it is given).

use cuda_core::{
    launch, system, CodeType, Device, EventOptions, FileStreamProgramCache, LaunchConfig, Program, ProgramOptions,
    SourceType, StreamOptions,
};
use std::error::Error;

const SOURCE: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    // Compile first: this needs no GPU (the architecture is given when there is none).
    let device = Device::new(0);
    let arch = match &device {
        Ok(d) => format!("sm_{}", d.arch()?),
        Err(_) => "sm_90".to_string(),
    };
    let cache = FileStreamProgramCache::new(None, Some(256 << 20))?;
    let mut program = Program::new(
        SOURCE,
        SourceType::Cxx,
        ProgramOptions {
            arch: Some(arch.clone()),
            ..Default::default()
        },
    )?;
    let started = std::time::Instant::now();
    let code = program.compile_cached(CodeType::Cubin, &[], &cache)?;
    println!(
        "compiled saxpy for {arch} in {:.1} ms ({} bytes of cubin, cached in {})",
        started.elapsed().as_secs_f64() * 1e3,
        code.bytes()?.len(),
        cache.path().display()
    );
    let device = device.map_err(|e| format!("no GPU to run it on: {e}"))?;

    let (major, minor) = system::get_user_mode_driver_version()?;
    println!("CUDA driver {major}.{minor}, {} GPU(s)", system::get_num_devices()?);
    device.set_current()?;
    println!(
        "device {}: {} (compute capability {}, {} SMs)",
        device.device_id(),
        device.name()?,
        device.compute_capability()?,
        device.multiprocessor_count()?
    );

    // Pointer parameters are typed: the kernel takes views of f32s (a view of bytes would not
    // compile), and each launch keeps the buffers it is given alive until it has run.
    let kernel = code.get_kernel("saxpy")?.typed::<(f32, *mut f32, *mut f32, u32)>()?;
    let stream = device.create_stream(StreamOptions::default())?;

    const N: usize = 1 << 24;
    let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32).collect();
    let dx = device.allocate(N * 4, &stream)?;
    dx.copy_from_host(&x, &stream)?;
    let dy = device.allocate(N * 4, &stream)?;
    dy.copy_from_host(&vec![1.0f32; N], &stream)?;
    let (vx, vy) = (dx.view_as::<f32>()?, dy.view_as::<f32>()?);
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);

    // One launch, verified.
    // SAFETY: the kernel reads and writes N floats of views that hold N floats (their buffers
    // stay alive until the launches that take them have run).
    unsafe { kernel.launch(&stream, &config, (2.0, vx, vy, N as u32))? };
    stream.sync()?;
    let y = dy.to_vec::<f32>(&stream)?;
    let wrong = (0..N).filter(|&i| y[i] != 1.0 + 2.0 * x[i]).count();
    println!(
        "saxpy over {N} floats: {}",
        if wrong == 0 {
            "verified".to_string()
        } else {
            format!("{wrong} WRONG")
        }
    );

    // 100 launches, timed with events.
    let timing = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let (start, end) = (device.create_event(timing)?, device.create_event(timing)?);
    stream.record(&start)?;
    for _ in 0..100 {
        // SAFETY: as above.
        unsafe { kernel.launch(&stream, &config, (2.0, vx, vy, N as u32))? };
    }
    stream.record(&end)?;
    end.sync()?;
    let ms = end.elapsed_time_since(&start)?;
    println!(
        "100 launches: {:.3} ms each, {:.0} GB/s",
        ms / 100.0,
        (3 * N * 4) as f64 * 100.0 / (ms as f64 * 1e6)
    );

    // Two streams: the second waits for the first.
    let other = device.create_stream(StreamOptions::default())?;
    // SAFETY: as above.
    unsafe { launch(&stream, &config, kernel.kernel(), (1.0f32, vx, vy, N as u32))? };
    other.wait(&stream)?;
    // SAFETY: as above; ordered after the launch on `stream` by the wait.
    unsafe { kernel.launch(&other, &config, (-1.0, vx, vy, N as u32))? };
    other.sync()?;
    let y = dy.to_vec::<f32>(&stream)?;
    // The same sequence of fused multiply-adds on the host: 1, then 101 times a = 2, then 1, then -1.
    let expected = |i: usize| {
        let mut v = 1.0f32;
        for a in std::iter::repeat_n(2.0f32, 101).chain([1.0, -1.0]) {
            v = a.mul_add(x[i], v);
        }
        v
    };
    let joined = (0..N).all(|i| y[i] == expected(i));
    println!(
        "two streams joined with wait: {}",
        if joined { "verified" } else { "WRONG" }
    );
    // Capture ten launches into a graph and replay it: one call for all ten.
    let graph = stream.capture_graph(cuda_core::graph::CaptureMode::ThreadLocal, |s| {
        for _ in 0..10 {
            // SAFETY: as above; the graph holds the buffers its launches take.
            unsafe { kernel.launch(s, &config, (1.0, vx, vy, N as u32))? };
        }
        Ok(())
    })?;
    let before = dy.to_vec::<f32>(&stream)?;
    graph.launch(&stream)?;
    stream.sync()?;
    let after = dy.to_vec::<f32>(&stream)?;
    let replayed = (0..N).all(|i| {
        let mut v = before[i];
        for _ in 0..10 {
            v = 1.0f32.mul_add(x[i], v);
        }
        after[i] == v
    });
    println!(
        "graph of 10 launches replayed: {}",
        if replayed { "verified" } else { "WRONG" }
    );
    if wrong != 0 || !joined || !replayed {
        return Err("saxpy computed wrong results".into());
    }
    Ok(())
}
