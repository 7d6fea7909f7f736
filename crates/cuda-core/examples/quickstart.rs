//! Quickstart: what this machine has, then a kernel compiled at run time, launched and timed.
//!
//! Run it with `cargo xtask quickstart` (it provides NVRTC from NVIDIA's wheels when no toolkit
//! is installed). Compilation uses `cuda-core`'s `Program`; devices, memory and launches still go
//! through the raw `cuda-sys` bindings until the safe `Device`/`Stream`/`Buffer` API lands.

use cuda_core::{system, CodeType, FileStreamProgramCache, Program, ProgramOptions, SourceType};
use cuda_sys::driver;
use std::error::Error;
use std::ffi::{c_void, CStr};

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
    let (major, minor) = system::get_user_mode_driver_version()?;
    println!("CUDA driver {major}.{minor}");
    if let Ok(kernel) = system::get_kernel_mode_driver_version() {
        println!("kernel-mode driver {kernel}");
    }
    println!("{} GPU(s)", system::get_num_devices()?);

    // SAFETY (whole block): every pointer handed to the driver points to live memory of the size
    // the call expects; the kernel's parameters match its signature; all work is synchronised
    // before the memory it uses is freed.
    unsafe {
        driver::cuInit(0).result()?;
        let mut dev = 0;
        driver::cuDeviceGet(&mut dev, 0).result()?;
        let mut name = [0u8; 128];
        driver::cuDeviceGetName(name.as_mut_ptr().cast(), name.len() as i32, dev).result()?;
        let (mut cc_major, mut cc_minor) = (0, 0);
        driver::cuDeviceGetAttribute(
            &mut cc_major,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            dev,
        )
        .result()?;
        driver::cuDeviceGetAttribute(
            &mut cc_minor,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            dev,
        )
        .result()?;
        let name = CStr::from_bytes_until_nul(&name)?.to_string_lossy();
        println!("device 0: {name} (compute capability {cc_major}.{cc_minor})");
        let mut ctx = std::ptr::null_mut();
        driver::cuDevicePrimaryCtxRetain(&mut ctx, dev).result()?;
        driver::cuCtxSetCurrent(ctx).result()?;

        // Compile for this GPU with NVRTC (the arch defaults to the current device's), through
        // a program cache on disk: the second run of this example compiles nothing.
        let cache = FileStreamProgramCache::new(None, Some(256 << 20))?;
        let mut program = Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())?;
        let started = std::time::Instant::now();
        let code = program.compile_cached(CodeType::Cubin, &[], &cache)?;
        println!(
            "compiled saxpy for {} in {:.1} ms ({} bytes of cubin; cache in {})",
            program.options().arch.as_deref().unwrap_or("?"),
            started.elapsed().as_secs_f64() * 1e3,
            code.bytes()?.len(),
            cache.path().display()
        );
        let kernel = code.get_kernel("saxpy")?.handle() as driver::CUfunction;

        const N: usize = 1 << 24;
        let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32).collect();
        let y: Vec<f32> = vec![1.0; N];
        let (mut dx, mut dy) = (0, 0);
        driver::cuMemAlloc(&mut dx, N * 4).result()?;
        driver::cuMemAlloc(&mut dy, N * 4).result()?;
        driver::cuMemcpyHtoD(dx, x.as_ptr().cast(), N * 4).result()?;
        driver::cuMemcpyHtoD(dy, y.as_ptr().cast(), N * 4).result()?;

        let mut stream = std::ptr::null_mut();
        driver::cuStreamCreate(&mut stream, driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0).result()?;
        let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
        driver::cuEventCreate(&mut start, 0).result()?;
        driver::cuEventCreate(&mut end, 0).result()?;

        let mut a = 2.0f32;
        let mut n = N as u32;
        let mut params: [*mut c_void; 4] = [
            (&mut a as *mut f32).cast(),
            (&mut dx as *mut u64).cast(),
            (&mut dy as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
        ];
        let launches = 100;
        driver::cuEventRecord(start, stream).result()?;
        for _ in 0..launches {
            driver::cuLaunchKernel(
                kernel,
                (N as u32).div_ceil(256),
                1,
                1,
                256,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
            .result()?;
        }
        driver::cuEventRecord(end, stream).result()?;
        driver::cuEventSynchronize(end).result()?;
        let mut ms = 0f32;
        driver::cuEventElapsedTime(&mut ms, start, end).result()?;

        let mut out = vec![0f32; N];
        driver::cuMemcpyDtoH(out.as_mut_ptr().cast(), dy, N * 4).result()?;
        let wrong = (0..N).filter(|&i| out[i] != 1.0 + launches as f32 * 2.0 * x[i]).count();
        println!(
            "{launches} launches of saxpy over {N} floats: {:.3} ms each, {:.0} GB/s; {}",
            ms / launches as f32,
            (3 * N * 4) as f64 * launches as f64 / (ms as f64 * 1e6),
            if wrong == 0 {
                "results verified".to_string()
            } else {
                format!("{wrong} WRONG results")
            }
        );

        driver::cuEventDestroy(start).result()?;
        driver::cuEventDestroy(end).result()?;
        driver::cuStreamDestroy(stream).result()?;
        driver::cuMemFree(dx).result()?;
        driver::cuMemFree(dy).result()?;
        driver::cuDevicePrimaryCtxRelease(dev).result()?;
        if wrong != 0 {
            return Err("saxpy computed wrong results".into());
        }
    }
    Ok(())
}
