//! The raw `cuda-sys` layer on a real GPU: loading, version resolution, a kernel end to end.

use cuda_sys::{driver, LibraryId, LoadErrorKind};
use cuda_tests::{check, compute_capability, device_and_context, nvrtc_cubin, skip};
use std::ffi::c_void;

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn device_name_and_compute_capability() {
    let (dev, _) = device_and_context();
    let mut name = [0u8; 256];
    let mut total = 0usize;
    // SAFETY: the buffer holds 256 bytes; out-pointers are live.
    unsafe {
        check(driver::cuDeviceGetName(
            name.as_mut_ptr().cast(),
            name.len() as i32,
            dev,
        ));
        check(driver::cuDeviceTotalMem(&mut total, dev));
    }
    let name = std::ffi::CStr::from_bytes_until_nul(&name)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (major, minor) = compute_capability(dev);
    println!(
        "device 0: {name}, compute capability {major}.{minor}, {} GiB",
        total >> 30
    );
    assert!(name.contains("NVIDIA"), "{name}");
    assert!(major >= 5, "compute capability {major}.{minor}");
    assert!(total > 1 << 30);
    let lib = LibraryId::Driver.library();
    println!(
        "driver: {:?} via {:?}, CUDA {:?}",
        lib.path(),
        lib.found_via(),
        lib.driver_version()
    );
    assert!(lib.driver_version().unwrap() >= 12000);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn saxpy_compiled_by_nvrtc_runs_and_computes() {
    const N: usize = 1 << 20;
    let (dev, _) = device_and_context();
    let (major, minor) = compute_capability(dev);
    let cubin = nvrtc_cubin(
        r#"extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
               unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
               if (i < n) y[i] = a * x[i] + y[i];
           }"#,
        &format!("sm_{major}{minor}"),
    );
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..N).map(|i| (N - i) as f32).collect();
    let mut out = vec![0f32; N];
    let a = 2.5f32;
    let bytes = N * 4;
    // SAFETY: the module image is a cubin for this device; buffers hold N floats each; kernel
    // arguments match the kernel's parameters and outlive the launch (synchronised below).
    unsafe {
        let mut module: driver::CUmodule = std::ptr::null_mut();
        check(driver::cuModuleLoadData(&mut module, cubin.as_ptr().cast()));
        let mut func: driver::CUfunction = std::ptr::null_mut();
        check(driver::cuModuleGetFunction(&mut func, module, c"saxpy".as_ptr()));
        let (mut dx, mut dy): (driver::CUdeviceptr, driver::CUdeviceptr) = (0, 0);
        check(driver::cuMemAlloc(&mut dx, bytes));
        check(driver::cuMemAlloc(&mut dy, bytes));
        check(driver::cuMemcpyHtoD(dx, x.as_ptr().cast(), bytes));
        check(driver::cuMemcpyHtoD(dy, y.as_ptr().cast(), bytes));
        let mut n = N as u32;
        let mut a_arg = a;
        let mut params: [*mut c_void; 4] = [
            (&mut a_arg as *mut f32).cast(),
            (&mut dx as *mut driver::CUdeviceptr).cast(),
            (&mut dy as *mut driver::CUdeviceptr).cast(),
            (&mut n as *mut u32).cast(),
        ];
        let block = 256u32;
        let grid = (N as u32).div_ceil(block);
        check(driver::cuLaunchKernel(
            func,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
        check(driver::cuCtxSynchronize());
        check(driver::cuMemcpyDtoH(out.as_mut_ptr().cast(), dy, bytes));
        check(driver::cuMemFree(dx));
        check(driver::cuMemFree(dy));
        check(driver::cuModuleUnload(module));
    }
    for i in 0..N {
        assert_eq!(out[i], a * x[i] + y[i], "element {i}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_driver_function_resolves_by_the_version_rule() {
    device_and_context();
    let lib = LibraryId::Driver.library();
    let version = lib.driver_version().unwrap();
    let (mut resolved, mut too_old, mut not_found) = (Vec::new(), Vec::new(), Vec::new());
    let mut served_older = Vec::new();
    for f in lib.functions() {
        let name = f.name.to_str().unwrap();
        match lib.function_pointer(name) {
            Ok(p) => {
                assert!(!p.is_null());
                assert!(
                    f.min_version <= version,
                    "{name} resolved although it needs {}",
                    f.min_version
                );
                if f.version > version {
                    served_older.push(name);
                }
                resolved.push(name);
            }
            Err(e) => match e.kind() {
                LoadErrorKind::DriverTooOld { needs, has, .. } => {
                    assert_eq!((needs, has), (f.min_version, version), "{name}");
                    too_old.push(name)
                }
                LoadErrorKind::FunctionNotFound { .. } => not_found.push(format!("{name} ({})", f.min_version)),
                other => panic!("{name}: {other:?}"),
            },
        }
    }
    println!(
        "driver CUDA {}.{}: {} functions bound, {} resolved ({} served by an older variant of the same ABI: {:?}), \
         {} need a newer driver, {} not provided: {:?}",
        version / 1000,
        (version % 1000) / 10,
        lib.functions().len(),
        resolved.len(),
        served_older.len(),
        served_older,
        too_old.len(),
        not_found.len(),
        not_found
    );
    // Everything a driver of this version should have, it has (a few functions exist only on
    // some platforms, hence the small allowance).
    let eligible = lib.functions().iter().filter(|f| f.min_version <= version).count();
    assert!(
        resolved.len() + 8 >= eligible,
        "{} of {eligible} resolved",
        resolved.len()
    );
    assert_eq!(too_old.len(), lib.functions().len() - eligible);
    // The trap of the issue: the newest version of these is newer than a 13.0 driver, and older
    // drivers serve the same signature.
    for name in [
        "cuEventElapsedTime",
        "cuGraphAddNode",
        "cuGraphAddNode_v3",
        "cuGraphNodeSetParams_v2",
        "cuCtxCreate",
    ] {
        assert!(resolved.contains(&name), "{name} must resolve on CUDA {version}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_function_newer_than_the_driver_is_an_error_naming_it() {
    let (dev, _) = device_and_context();
    let version = LibraryId::Driver.library().driver_version().unwrap();
    let mut count = 0usize;
    // SAFETY: count is a live out-pointer.
    let status = unsafe { driver::cuDeviceGetCliqueCount(&mut count, dev) };
    if version >= 13040 {
        return skip(format!(
            "driver {version} has cuDeviceGetCliqueCount (CUDA 13.4), which the test calls as a function newer than \
             the driver ({:?})",
            status.result()
        ));
    }
    let err = status.result().unwrap_err();
    let load = err.load_error().expect("a load error, not a driver error");
    assert_eq!(load.function(), Some("cuDeviceGetCliqueCount"));
    let text = err.to_string();
    println!("{text}");
    assert!(
        text.contains("cuDeviceGetCliqueCount") && text.contains("13.4"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}.{}", version / 1000, (version % 1000) / 10)),
        "{text}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn per_thread_default_stream_variants_are_other_functions() {
    device_and_context();
    let lib = LibraryId::Driver.library();
    for name in [
        "cuMemcpyAsync",
        "cuMemcpyHtoD",
        "cuLaunchKernel",
        "cuStreamQuery",
        "cuMemAllocAsync",
    ] {
        let legacy = lib.driver_entry_point(name, false).unwrap();
        let ptds = lib.driver_entry_point(name, true).unwrap();
        assert_ne!(legacy, ptds, "{name}: the per-thread variant must be another function");
    }
    for name in ["cuInit", "cuDeviceGetCount", "cuMemAlloc"] {
        assert_eq!(
            lib.driver_entry_point(name, false).unwrap(),
            lib.driver_entry_point(name, true).unwrap(),
            "{name} has no per-thread variant"
        );
    }
    // The process binds whichever the environment asked for.
    let per_thread = cuda_sys::per_thread_default_stream();
    assert_eq!(
        lib.function_pointer("cuMemcpyAsync").unwrap(),
        lib.driver_entry_point("cuMemcpyAsync", per_thread).unwrap()
    );
    if std::env::var_os("CUDA_RS_PTDS_CHILD").is_some() {
        assert!(per_thread, "the child runs with the variable set");
        return;
    }
    // Run this test again with CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "per_thread_default_stream_variants_are_other_functions",
            "--include-ignored",
        ])
        .env(cuda_sys::PER_THREAD_DEFAULT_STREAM_VAR, "1")
        .env("CUDA_RS_PTDS_CHILD", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_toolkit_libraries_load_next_to_the_driver() {
    for lib in [
        LibraryId::Nvrtc,
        LibraryId::NvJitLink,
        LibraryId::Runtime,
        LibraryId::Nvml,
    ] {
        let l = lib.library();
        l.open().unwrap_or_else(|e| panic!("{e}"));
        println!("{lib}: {:?} via {:?}", l.path(), l.found_via());
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to live locals.
    unsafe { cuda_sys::nvrtc::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .unwrap();
    assert!(major >= 12);
    let mut count = 0u32;
    // SAFETY: NVML initialised before use and shut down after.
    unsafe {
        cuda_sys::nvml::nvmlInit().result().unwrap();
        cuda_sys::nvml::nvmlDeviceGetCount(&mut count).result().unwrap();
        cuda_sys::nvml::nvmlShutdown().result().unwrap();
    }
    assert!(count >= 1);
}
