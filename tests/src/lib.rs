//! The workspace's GPU integration suite. Every test here needs an NVIDIA GPU, is marked
//! `#[ignore]`, and runs through `cargo xtask test-gpu` (or the bundle it builds); without a GPU
//! the tests fail, they never pass by finding nothing to test.

use cuda_sys::driver;
use std::ffi::CString;

/// Panics with the full error when a driver call fails.
#[track_caller]
pub fn check(status: driver::CUresult) {
    if let Err(e) = status.result() {
        panic!("{e}");
    }
}

/// Initialises the driver and returns device 0 with its primary context made current.
pub fn device_and_context() -> (driver::CUdevice, driver::CUcontext) {
    let mut count = 0;
    let mut dev: driver::CUdevice = 0;
    let mut ctx: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointers to live locals; the primary context is retained for the process.
    unsafe {
        check(driver::cuInit(0));
        check(driver::cuDeviceGetCount(&mut count));
        assert!(count > 0, "no CUDA device found: these tests need a GPU");
        check(driver::cuDeviceGet(&mut dev, 0));
        check(driver::cuDevicePrimaryCtxRetain(&mut ctx, dev));
        check(driver::cuCtxSetCurrent(ctx));
    }
    (dev, ctx)
}

/// The device's compute capability.
pub fn compute_capability(dev: driver::CUdevice) -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to live locals.
    unsafe {
        check(driver::cuDeviceGetAttribute(
            &mut major,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            dev,
        ));
        check(driver::cuDeviceGetAttribute(
            &mut minor,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            dev,
        ));
    }
    (major, minor)
}

/// Compiles CUDA C++ to a cubin for `arch` (`sm_90`) with NVRTC, through raw calls.
pub fn nvrtc_cubin(source: &str, arch: &str) -> Vec<u8> {
    use cuda_sys::nvrtc;
    let src = CString::new(source).unwrap();
    let opt = CString::new(format!("--gpu-architecture={arch}")).unwrap();
    let opts = [opt.as_ptr()];
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all pointers are live for the calls; the program is destroyed once.
    unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"kernel.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
        .result()
        .unwrap();
        let status = nvrtc::nvrtcCompileProgram(prog, 1, opts.as_ptr());
        if let Err(e) = status.result() {
            let mut size = 0;
            nvrtc::nvrtcGetProgramLogSize(prog, &mut size).result().unwrap();
            let mut log = vec![0u8; size];
            nvrtc::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast())
                .result()
                .unwrap();
            panic!("{e}\n{}", String::from_utf8_lossy(&log));
        }
        let mut size = 0;
        nvrtc::nvrtcGetCUBINSize(prog, &mut size).result().unwrap();
        let mut cubin = vec![0u8; size];
        nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result().unwrap();
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
        cubin
    }
}

/// Device memory holding `data`, freed on drop (raw calls; the safe `Buffer` is issue 6's).
pub struct DeviceVec {
    pub ptr: driver::CUdeviceptr,
    pub len: usize,
}

impl DeviceVec {
    pub fn from_slice(data: &[f32]) -> DeviceVec {
        let mut ptr = 0;
        // SAFETY: a context is current (device_and_context); sizes match the slice.
        unsafe {
            check(driver::cuMemAlloc(&mut ptr, data.len() * 4));
            check(driver::cuMemcpyHtoD(ptr, data.as_ptr().cast(), data.len() * 4));
            // A pageable copy can return before its DMA lands; kernels run on non-blocking
            // streams, which do not wait for the default stream, so wait here.
            check(driver::cuStreamSynchronize(std::ptr::null_mut()));
        }
        DeviceVec { ptr, len: data.len() }
    }

    pub fn to_vec(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.len];
        // SAFETY: the allocation holds len floats; work on it was synchronised by the caller.
        unsafe { check(driver::cuMemcpyDtoH(out.as_mut_ptr().cast(), self.ptr, self.len * 4)) };
        out
    }
}

impl Drop for DeviceVec {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc, freed once.
        unsafe { check(driver::cuMemFree(self.ptr)) };
    }
}

/// Launches `function` (a `CUkernel` works too) on a 1-D grid and waits for it.
///
/// # Safety
/// `params` must point to the kernel's arguments, in order and of the kernel's types.
pub unsafe fn launch_1d(function: driver::CUfunction, threads: u32, params: &mut [*mut std::ffi::c_void]) {
    let block = 256.min(threads);
    // SAFETY: the caller vouches for params; the launch is synchronised before returning.
    unsafe {
        check(driver::cuLaunchKernel(
            function,
            threads.div_ceil(block),
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
    }
}
