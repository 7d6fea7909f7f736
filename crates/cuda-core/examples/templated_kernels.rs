//! Template kernels picked by name expression (cuda.core's `saxpy.py` with templates).
mod common;
use common::{buffer_from, main_with};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"template <typename T> __global__ void saxpy(T a, const T* x, T* y, size_t n) {
            size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i] + y[i];
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?
            .compile(CodeType::Cubin, &["saxpy<float>", "saxpy<double>"])?;
        for (expr, lowered) in code.symbol_mapping() {
            println!("{expr} -> {lowered}");
        }
        let stream = device.create_stream(Default::default())?;
        let n = 4096usize;
        let config = LaunchConfig::new((n as u32).div_ceil(128), 128);
        let f = code
            .get_kernel("saxpy<float>")?
            .typed::<(f32, *mut f32, *mut f32, usize)>()?;
        let (x, y) = (
            buffer_from(&device, &stream, &vec![1.0f32; n])?,
            buffer_from(&device, &stream, &vec![1.0f32; n])?,
        );
        let d = code
            .get_kernel("saxpy<double>")?
            .typed::<(f64, *mut f64, *mut f64, usize)>()?;
        let (xd, yd) = (
            buffer_from(&device, &stream, &vec![1.0f64; n])?,
            buffer_from(&device, &stream, &vec![1.0f64; n])?,
        );
        // SAFETY: the views hold n values of the kernels' types.
        unsafe {
            f.launch(&stream, &config, (2.0, x.view_as::<f32>()?, y.view_as::<f32>()?, n))?;
            d.launch(&stream, &config, (3.0, xd.view_as::<f64>()?, yd.view_as::<f64>()?, n))?;
        }
        assert!(
            y.to_vec::<f32>(&stream)?.iter().all(|v| *v == 3.0) && yd.to_vec::<f64>(&stream)?.iter().all(|v| *v == 4.0)
        );
        println!("saxpy<float> and saxpy<double> verified");
        Ok(())
    })
}
