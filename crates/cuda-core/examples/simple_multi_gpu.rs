//! Work on two GPUs (cuda.core's `simple_multi_gpu_example.py`): each device computes half, and
//! the halves meet on the first device. Skips (successfully) with fewer than two GPUs.
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

const SOURCE: &str = r#"extern "C" __global__ void square(const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}"#;

fn main() {
    main_with(|| {
        let devices = Device::all()?;
        if devices.len() < 2 {
            println!(
                "simple_multi_gpu: {} GPU(s) here, two are needed; skipped",
                devices.len()
            );
            return Ok(());
        }
        let n = 1u32 << 20;
        let half = n / 2;
        let input: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
        let mut parts = Vec::new();
        for (k, device) in devices.iter().take(2).enumerate() {
            device.set_current()?;
            // Compiled for each device's own architecture (the default: the current device's).
            let code =
                Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
            let square = code.get_kernel("square")?.typed::<(*mut f32, *mut f32, u32)>()?;
            let stream = device.create_stream(Default::default())?;
            let start = k * half as usize;
            let x = device.allocate_from_slice(&input[start..start + half as usize], &stream)?;
            let y = zeroed::<f32>(device, &stream, half as usize)?;
            // SAFETY: the kernel reads and writes half floats of views that hold half floats.
            unsafe {
                square.launch(
                    &stream,
                    &LaunchConfig::new(half.div_ceil(256), 256),
                    (x.view_as::<f32>()?, y.view_as::<f32>()?, half),
                )?
            };
            parts.push((device, stream, y));
        }
        // The second half moves to the first device (peer copy), then both are checked there.
        let (d0, s0, first) = &parts[0];
        let (_, s1, second) = &parts[1];
        d0.set_current()?;
        let gathered = zeroed::<f32>(d0, s0, half as usize)?;
        s0.wait(s1)?;
        second.copy_to_peer(&gathered, s0)?;
        let mut out = first.to_vec::<f32>(s0)?;
        out.extend(gathered.to_vec::<f32>(s0)?);
        assert!(out.iter().zip(&input).all(|(o, i)| *o == i * i), "wrong squares");
        println!("two GPUs squared {half} floats each; gathered on device 0: verified");
        Ok(())
    })
}
