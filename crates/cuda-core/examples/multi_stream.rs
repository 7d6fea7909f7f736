//! Work on several streams at once, joined by events (cuda.core's `simple_multi_gpu_example.py`
//! on one GPU).
mod common;
use common::{main_with, DeviceArray};
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
        let fill = code.get_kernel("fill")?.typed::<(u64, f32, u32)>()?;
        let sum2 = code.get_kernel("sum2")?.typed::<(u64, u64, u64, u32)>()?;
        let n = 1u32 << 22;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let (a, b, c) = (
            DeviceArray::<f32>::zeroed(n as usize)?,
            DeviceArray::<f32>::zeroed(n as usize)?,
            DeviceArray::<f32>::zeroed(n as usize)?,
        );
        let (s1, s2) = (
            device.create_stream(Default::default())?,
            device.create_stream(Default::default())?,
        );
        let b_ready = device.create_event(EventOptions::default())?;
        // SAFETY: the arrays hold n floats; every use is ordered and synchronised below.
        unsafe {
            fill.launch(&s1, &config, (a.ptr, 1.5, n))?;
            fill.launch(&s2, &config, (b.ptr, 2.5, n))?;
            s2.record(&b_ready)?;
            s1.wait_event(&b_ready)?;
            sum2.launch(&s1, &config, (a.ptr, b.ptr, c.ptr, n))?;
        }
        s1.sync()?;
        assert!(c.to_host()?.iter().all(|v| *v == 4.0));
        println!("two streams filled a and b; the sum waited for both: verified");
        Ok(())
    })
}
