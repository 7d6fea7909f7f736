//! System-wide queries: driver versions and device counts (`cuda.core.system`).
//!
//! The user-mode driver version comes from the CUDA driver (`cuDriverGetVersion`); the rest
//! comes from NVML, which is initialised on first use and stays initialised for the process.
//! None of these need a CUDA context.
//!
//! The system layer uses the error type only (driver and NVML bindings directly): every other
//! folder may use it.

use crate::error::Check;
use crate::Result;
use cuda_sys::{driver, nvml};
use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

/// The CUDA version the installed driver supports, as `(major, minor)` (`13.0` gives `(13, 0)`).
pub fn get_user_mode_driver_version() -> Result<(u32, u32)> {
    let mut version = 0;
    // SAFETY: `version` is a valid place for an int; cuDriverGetVersion needs no cuInit.
    unsafe { driver::cuDriverGetVersion(&mut version) }.check("cuDriverGetVersion")?;
    let version = version.max(0) as u32;
    Ok((version / 1000, (version % 1000) / 10))
}

fn nvml_init() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), cuda_sys::NvmlError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: nvmlInit takes no arguments; NVML reference-counts initialisation and is never
        // shut down by this crate, so handles stay valid for the process.
        unsafe { nvml::nvmlInit() }.result()
    })
    .map_err(|source| crate::CudaError::Nvml {
        call: "nvmlInit",
        source,
    })
}

/// Reads a string an NVML function writes into a buffer.
fn nvml_string(call: &'static str, f: unsafe fn(*mut c_char, u32) -> nvml::nvmlReturn_t) -> Result<String> {
    nvml_init()?;
    let mut buf = [0 as c_char; 96];
    // SAFETY: the buffer holds 96 bytes and NVML is told so; NVML NUL-terminates what it writes.
    unsafe { f(buf.as_mut_ptr(), buf.len() as u32) }.check(call)?;
    // SAFETY: NVML wrote a NUL-terminated string into the buffer (it is zeroed beforehand too).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// The kernel-mode driver version, such as `"580.159.04"` (NVML).
pub fn get_kernel_mode_driver_version() -> Result<String> {
    nvml_string("nvmlSystemGetDriverVersion", |b, n| {
        // SAFETY: `nvml_string` passes a buffer of n bytes.
        unsafe { nvml::nvmlSystemGetDriverVersion(b, n) }
    })
}

/// The version of the NVML library, such as `"13.580.159.04"`.
pub fn get_nvml_version() -> Result<String> {
    nvml_string("nvmlSystemGetNVMLVersion", |b, n| {
        // SAFETY: `nvml_string` passes a buffer of n bytes.
        unsafe { nvml::nvmlSystemGetNVMLVersion(b, n) }
    })
}

/// The branch of the installed driver, such as `"r580_00"` (NVML).
pub fn get_driver_branch() -> Result<String> {
    nvml_init()?;
    let mut info = nvml::nvmlSystemDriverBranchInfo_t {
        // NVML_STRUCT_VERSION(SystemDriverBranchInfo, 1): the size, and the version in the top byte.
        version: std::mem::size_of::<nvml::nvmlSystemDriverBranchInfo_t>() as u32 | (1 << 24),
        branch: [0; 80],
    };
    // SAFETY: `info` is a live, versioned struct of the size NVML is told.
    unsafe { nvml::nvmlSystemGetDriverBranch(&mut info, info.branch.len() as u32) }
        .check("nvmlSystemGetDriverBranch")?;
    // SAFETY: NVML NUL-terminates the branch; the array was zeroed beforehand.
    Ok(unsafe { CStr::from_ptr(info.branch.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// The number of NVIDIA GPUs in the system: NVML's count, or the CUDA driver's when NVML is not
/// available. The CUDA count leaves out devices hidden by `CUDA_VISIBLE_DEVICES`.
pub fn get_num_devices() -> Result<usize> {
    let nvml_count = nvml_init().and_then(|()| {
        let mut count = 0u32;
        // SAFETY: `count` is a valid out-pointer.
        unsafe { nvml::nvmlDeviceGetCount(&mut count) }.check("nvmlDeviceGetCount")?;
        Ok(count as usize)
    });
    match nvml_count {
        Ok(count) => Ok(count),
        Err(_) => {
            let mut count = 0;
            // SAFETY: flags 0 is valid for cuInit; `count` is a valid out-pointer.
            unsafe {
                driver::cuInit(0).check("cuInit")?;
                driver::cuDeviceGetCount(&mut count).check("cuDeviceGetCount")?;
            }
            Ok(count.max(0) as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_driver_every_query_is_an_error_that_says_so() {
        if cuda_pathfinder::load_nvidia_dynamic_lib("cuda").is_ok() {
            return; // a machine with a driver; the GPU suite checks the values
        }
        let err = super::get_user_mode_driver_version().unwrap_err();
        assert!(err.load_error().is_some());
        assert!(err.to_string().starts_with("cuDriverGetVersion: "), "{err}");
        assert!(err.to_string().contains("install the driver"), "{err}");
        let err = super::get_num_devices().unwrap_err();
        assert!(err.to_string().contains("libcuda.so.1"), "{err}");
        let err = super::get_kernel_mode_driver_version().unwrap_err();
        assert!(
            err.to_string().contains("nvmlInit") && err.to_string().contains("NVML"),
            "{err}"
        );
    }
}
