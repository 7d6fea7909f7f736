//! The program of the guide's first chapter (`docs/guide/01-first-kernel.md`): pick a device,
//! compile a kernel at run time, allocate typed buffers, launch, read the result back; and the
//! errors a wrong kernel signature and an impossible launch configuration give.

use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType, TypedBuffer};
use cuda_sys::driver;
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    // Where NVRTC comes from (a wheel, a toolkit, the system loader).
    let nvrtc = cuda_pathfinder::load_nvidia_dynamic_lib("nvrtc")?;
    println!("{:?} found via {}", nvrtc.abs_path, nvrtc.found_via);

    // The raw bindings: every driver function, `unsafe`, returning the C status.
    let mut count = 0;
    // SAFETY: cuInit takes flags 0; the count is written to a live local.
    unsafe {
        driver::cuInit(0).result()?;
        driver::cuDeviceGetCount(&mut count).result()?;
    }
    println!("{count} device(s)");

    let device = Device::new(0)?;
    device.set_current()?;
    println!("device 0: {} (sm_{})", device.name()?, device.arch()?);

    let source = r#"
        extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i] + y[i];
        }"#;
    // NVRTC compiles for the current device's architecture unless the options name one.
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
    // The parameter types, checked against the kernel's once, here.
    let saxpy = code.get_kernel("saxpy")?.typed::<(f32, *const f32, *mut f32, u32)>()?;

    let stream = device.create_stream(Default::default())?;
    let n: usize = 1 << 20;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    // Both from the device's default memory pool, ordered on `stream`.
    let x = TypedBuffer::from_host_blocking(&device, &xs, &stream)?;
    let y = TypedBuffer::<f32>::allocate(&device, n, &stream)?;
    y.fill(1.0, &stream)?;

    let config = LaunchConfig::new((n as u32).div_ceil(256), 256);
    // SAFETY: saxpy reads n floats of x and writes n floats of y; both hold n.
    unsafe { saxpy.launch(&stream, &config, (2.0f32, x.read_only(), &y, n as u32))? };

    // Copying into a Vec waits for the copy, and so for the kernel queued before it.
    let result = y.to_vec_blocking(&stream)?;
    assert!(result.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32 + 1.0));
    println!("saxpy over {n} elements: verified");

    // A signature that does not match the kernel's parameters is an error, not a bad launch.
    let wrong = code.get_kernel("saxpy")?.typed::<(f32, *mut f32)>();
    println!(
        "typed with two parameters: {}",
        wrong.err().ok_or("accepted a wrong signature")?
    );
    // So is a configuration the device cannot run (checked before the driver is asked).
    // SAFETY: refused before anything runs.
    let refused = unsafe { saxpy.launch(&stream, &LaunchConfig::new(1, 4096), (2.0f32, x.read_only(), &y, 0u32)) };
    println!(
        "4096 threads per block: {}",
        refused.err().ok_or("accepted 4096 threads")?
    );
    Ok(())
}
