//! Serving many GPU requests from one async thread (beyond cuda.core: Rust services run on async
//! runtimes). Each request uploads its input without blocking (`copy_from_vec_async`), squares
//! it with a kernel on one of four streams, and awaits the result (`to_vec_async`); a tokio
//! runtime on a single thread keeps every request in flight at once, woken by the driver when
//! its stream gets there. Every result is checked.
mod common;
use common::main_with;
use cuda_core::{launch, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream};
use std::rc::Rc;
use std::time::Instant;

const SOURCE: &str = r#"
extern "C" __global__ void square(const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}"#;

const REQUESTS: usize = 256;
const N: usize = 1 << 16;

/// One request: its input up, the kernel, its output back, all awaited.
async fn serve(id: usize, device: Device, stream: Stream, kernel: Rc<Kernel>) -> cuda_core::Result<()> {
    let input: Vec<f32> = (0..N).map(|i| ((i + id) % 1024) as f32 * 0.25).collect();
    let x = device.allocate(N * 4, &stream)?;
    let y = device.allocate(N * 4, &stream)?;
    // The vector is kept until the copy is done; the thread goes on meanwhile.
    x.copy_from_vec_async(input.clone(), &stream)?.await?;
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);
    // SAFETY: square(x, y, n) reads n floats of x and writes n floats of y; both hold N floats.
    unsafe { launch(&stream, &config, &kernel, (&x, &y, N as u32)) }?;
    let out = y.to_vec_async::<f32>(&stream)?.await?;
    for (i, (a, b)) in input.iter().zip(&out).enumerate() {
        if a * a != *b {
            return Err(cuda_core::CudaError::InvalidArgument(format!(
                "request {id}: element {i} is {b}, not {}",
                a * a
            )));
        }
    }
    Ok(())
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let streams: Vec<Stream> = (0..4)
            .map(|_| device.create_stream(Default::default()))
            .collect::<cuda_core::Result<_>>()?;
        let code = Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let kernel = Rc::new(code.get_kernel("square")?);

        // One thread: tasks interleave at their awaits.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let local = tokio::task::LocalSet::new();
        let started = Instant::now();
        let results = local.block_on(&runtime, async {
            let tasks: Vec<_> = (0..REQUESTS)
                .map(|id| {
                    let stream = streams[id % streams.len()].clone();
                    tokio::task::spawn_local(serve(id, device, stream, kernel.clone()))
                })
                .collect();
            let mut results = Vec::with_capacity(tasks.len());
            for t in tasks {
                results.push(t.await);
            }
            results
        });
        let elapsed = started.elapsed();
        for (id, r) in results.into_iter().enumerate() {
            r.map_err(|e| format!("request {id} panicked: {e}"))??;
        }
        println!(
            "{REQUESTS} requests of {N} floats served on one thread over {} streams in {:.1} ms; every result checked",
            streams.len(),
            elapsed.as_secs_f64() * 1e3
        );
        Ok(())
    })
}
