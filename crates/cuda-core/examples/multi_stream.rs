//! Work on several streams at once, joined by events (cuda.core's `simple_multi_gpu_example.py`
//! on one GPU).
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, EventOptions, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"extern "C" __global__ void fill(float* x, float v, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = v;
        }
        extern "C" __global__ void sum2(const float* a, const float* b, float* c, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i];
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let fill = code.get_kernel("fill")?.typed::<(*mut f32, f32, u32)>()?;
        let sum2 = code
            .get_kernel("sum2")?
            .typed::<(*mut f32, *mut f32, *mut f32, u32)>()?;
        let n = 1u32 << 22;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let (s1, s2) = (
            device.create_stream(Default::default())?,
            device.create_stream(Default::default())?,
        );
        let (a, b, c) = (
            zeroed::<f32>(&device, &s1, n as usize)?,
            zeroed::<f32>(&device, &s2, n as usize)?,
            zeroed::<f32>(&device, &s1, n as usize)?,
        );
        let (va, vb, vc) = (a.view_as::<f32>()?, b.view_as::<f32>()?, c.view_as::<f32>()?);
        let b_ready = device.create_event(EventOptions::default())?;
        // SAFETY: the views hold n floats; the sum waits for both fills (the event below; each
        // buffer's uses on other streams are ordered by the launches themselves).
        unsafe {
            fill.launch(&s1, &config, (va, 1.5, n))?;
            fill.launch(&s2, &config, (vb, 2.5, n))?;
            s2.record(&b_ready)?;
            s1.wait_event(&b_ready)?;
            sum2.launch(&s1, &config, (va, vb, vc, n))?;
        }
        assert!(c.to_vec::<f32>(&s1)?.iter().all(|v| *v == 4.0));
        println!("two streams filled a and b; the sum waited for both: verified");
        Ok(())
    })
}
