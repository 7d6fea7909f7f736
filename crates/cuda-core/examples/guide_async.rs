//! The program of the guide's chapter on async (`docs/guide/05-async.md`): futures that complete
//! with GPU work, on a one-thread tokio runtime.

use cuda_core::{CodeType, Device, EventOptions, LaunchConfig, Program, ProgramOptions, SourceType, TypedBuffer};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    device.set_current()?;
    let source = r#"extern "C" __global__ void scale(float* x, float a, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
    let scale = code.get_kernel("scale")?.typed::<(*mut f32, f32, u32)>()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    runtime.block_on(async {
        let n: u32 = 1 << 20;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let (a, b) = (
            device.create_stream(Default::default())?,
            device.create_stream(Default::default())?,
        );
        let x = TypedBuffer::<f32>::allocate(&device, n as usize, &a)?;
        let y = TypedBuffer::<f32>::allocate(&device, n as usize, &b)?;
        // The vectors are kept until their copies are done; nothing blocks the thread.
        x.copy_from_vec_async(vec![1.0; n as usize], &a)?.await?;
        y.copy_from_vec_async(vec![2.0; n as usize], &b)?.await?;
        // SAFETY: scale touches n floats of each buffer, which hold n.
        unsafe {
            scale.launch(&a, &config, (&x, 3.0f32, n))?;
            scale.launch(&b, &config, (&y, 4.0f32, n))?;
        }
        // Wait for both streams at once, on one thread.
        let (on_a, on_b) = (a.synchronized()?, b.synchronized()?);
        let (done_a, done_b) = tokio::join!(on_a, on_b);
        done_a?;
        done_b?;
        // An event's completion, and a copy back into a new Vec.
        b.record_new(EventOptions::default())?.completed()?.await?;
        let xs = x.to_vec_async(&a)?.await?;
        let ys = y.to_vec_async(&b)?.await?;
        assert!(xs.iter().all(|v| *v == 3.0) && ys.iter().all(|v| *v == 8.0));
        Ok::<(), Box<dyn Error>>(())
    })?;
    println!("awaited copies, streams and an event: verified");
    Ok(())
}
