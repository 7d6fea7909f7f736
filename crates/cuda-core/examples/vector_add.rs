//! Vector addition: compile, launch, verify (cuda.core's `vector_add.py`).
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"extern "C" __global__ void vector_add(const float* a, const float* b, float* c, size_t n) {
            size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i];
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let kernel = code
            .get_kernel("vector_add")?
            .typed::<(*mut f32, *mut f32, *mut f32, usize)>()?;
        let n = 1_000_000usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
        let stream = device.create_stream(Default::default())?;
        let (da, db, dc) = (
            device.allocate_from_slice(&a, &stream)?,
            device.allocate_from_slice(&b, &stream)?,
            zeroed::<f32>(&device, &stream, n)?,
        );
        // SAFETY: the kernel reads and writes n floats of views that hold n floats.
        unsafe {
            kernel.launch(
                &stream,
                &LaunchConfig::new((n as u32).div_ceil(256), 256),
                (da.view_as::<f32>()?, db.view_as::<f32>()?, dc.view_as::<f32>()?, n),
            )?
        };
        let c = dc.to_vec::<f32>(&stream)?;
        assert!((0..n).all(|i| c[i] == a[i] + b[i]), "wrong sums");
        println!("vector_add: {n} sums verified");
        Ok(())
    })
}
