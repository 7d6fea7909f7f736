//! A templated kernel instantiated for `float` and `double` by name expressions, then launched
//! on buffers and checked against the host (cuda.core's `saxpy.py`).
mod common;
use common::main_with;
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

// out = a * x + y
const SOURCE: &str = r#"
template<typename T>
__global__ void saxpy(const T a, const T* x, const T* y, T* out, size_t N) {
    const unsigned int tid = threadIdx.x + blockIdx.x * blockDim.x;
    for (size_t i = tid; i < N; i += gridDim.x * blockDim.x) {
        out[i] = a * x[i] + y[i];
    }
}
"#;

/// Values in [0, 1) from a small linear congruential generator (no dependency for an example).
fn random(seed: &mut u64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (*seed >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;

        let options = ProgramOptions {
            std: Some("c++11".into()),
            arch: Some(format!("sm_{}", device.arch()?)),
            ..Default::default()
        };
        let mut program = Program::new(SOURCE, SourceType::Cxx, options)?;
        // The name expressions name the template instantiations to keep; for a kernel that is
        // not a template they would simply be its name.
        let code = program.compile(CodeType::Cubin, &["saxpy<float>", "saxpy<double>"])?;
        if !program.log().is_empty() {
            println!("{}", program.log());
        }
        let mut seed = 0x5eed;

        // Single precision.
        let saxpy = code
            .get_kernel("saxpy<float>")?
            .typed::<(f32, *mut f32, *mut f32, *mut f32, usize)>()?;
        let n = 64usize;
        let a = 10.0f32;
        let x: Vec<f32> = random(&mut seed, n).into_iter().map(|v| v as f32).collect();
        let y: Vec<f32> = random(&mut seed, n).into_iter().map(|v| v as f32).collect();
        let (dx, dy) = (
            device.allocate_from_slice(&x, &stream)?,
            device.allocate_from_slice(&y, &stream)?,
        );
        let out = device.allocate(n * size_of::<f32>(), &stream)?;
        let block = 32;
        let config = LaunchConfig::new((n as u32).div_ceil(block), block);
        // SAFETY: saxpy<float> reads n floats of x and y and writes n floats of out, each of
        // which holds exactly n floats.
        unsafe {
            saxpy.launch(
                &stream,
                &config,
                (a, dx.view_as::<f32>()?, dy.view_as::<f32>()?, out.view_as::<f32>()?, n),
            )?
        };
        let got = out.to_vec::<f32>(&stream)?;
        for i in 0..n {
            let want = a * x[i] + y[i];
            assert!(
                (got[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
                "saxpy<float>[{i}] = {}, want {want}",
                got[i]
            );
        }

        // Double precision, into a buffer allocated from the device's default pool.
        let daxpy = code
            .get_kernel("saxpy<double>")?
            .typed::<(f64, *mut f64, *mut f64, *mut f64, usize)>()?;
        let n = 128usize;
        let a = 42.0f64;
        let x = random(&mut seed, n);
        let y = random(&mut seed, n);
        let (dx, dy) = (
            device.allocate_from_slice(&x, &stream)?,
            device.allocate_from_slice(&y, &stream)?,
        );
        let out = device.allocate(n * size_of::<f64>(), &stream)?;
        let block = 64;
        let config = LaunchConfig::new((n as u32).div_ceil(block), block);
        // SAFETY: as above, with n doubles.
        unsafe {
            daxpy.launch(
                &stream,
                &config,
                (a, dx.view_as::<f64>()?, dy.view_as::<f64>()?, out.view_as::<f64>()?, n),
            )?
        };
        let got = out.to_vec::<f64>(&stream)?;
        for i in 0..n {
            let want = a * x[i] + y[i];
            assert!(
                (got[i] - want).abs() <= 1e-12 * want.abs().max(1.0),
                "saxpy<double>[{i}] = {}, want {want}",
                got[i]
            );
        }

        // Buffers free themselves on their deallocation stream when dropped; close says so.
        out.close(Some(&stream))?;
        stream.close()?;
        println!("saxpy<float> and saxpy<double> verified");
        Ok(())
    })
}
