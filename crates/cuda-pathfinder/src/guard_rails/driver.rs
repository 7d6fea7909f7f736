//! What the installed driver supports: its CUDA version (`cuDriverGetVersion`) and its release
//! (`nvmlSystemGetDriverVersion`, for minor-version compatibility).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;

/// The CUDA version the driver supports, as `cuDriverGetVersion` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DriverCudaVersion {
    /// `13` of 13.0.
    pub major: u32,
    /// `0` of 13.0.
    pub minor: u32,
    /// `cuDriverGetVersion`'s number (`13000`).
    pub encoded: u32,
}

impl DriverCudaVersion {
    /// From `cuDriverGetVersion`'s number: major = n / 1000, minor = (n % 1000) / 10.
    pub fn from_encoded(encoded: u32) -> Self {
        DriverCudaVersion {
            major: encoded / 1000,
            minor: (encoded % 1000) / 10,
            encoded,
        }
    }
}

impl fmt::Display for DriverCudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The display driver's release (`580.159.04`, branch 580).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DriverReleaseVersion {
    /// As NVML reports it.
    pub text: String,
    /// The number before the first dot.
    pub branch: u32,
}

impl DriverReleaseVersion {
    /// Parses `"580.159.04"` or `"580"`; `None` when it does not start with a number.
    pub fn from_text(text: &str) -> Option<Self> {
        let branch = text.trim().split('.').next()?.parse().ok()?;
        Some(DriverReleaseVersion {
            text: text.trim().to_string(),
            branch,
        })
    }
}

fn symbol(handle: *mut c_void, name: &CStr) -> Result<*mut c_void, String> {
    #[cfg(unix)]
    {
        // SAFETY: handle is a live library handle (never closed); name is NUL-terminated.
        let f = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if f.is_null() {
            Err(format!("the library has no {}", name.to_string_lossy()))
        } else {
            Ok(f)
        }
    }
    #[cfg(not(unix))]
    {
        let _ = handle;
        Err(format!(
            "{} cannot be resolved on this platform",
            name.to_string_lossy()
        ))
    }
}

/// The driver's CUDA version, from `cuDriverGetVersion` of the driver library.
pub fn query_driver_cuda_version() -> Result<DriverCudaVersion, String> {
    let driver = crate::unguarded::load_nvidia_dynamic_lib("cuda").map_err(|e| e.to_string())?;
    let f = symbol(driver.handle(), c"cuDriverGetVersion")?;
    // SAFETY: f is the non-null address of cuDriverGetVersion, which cuda.h declares as
    // `CUresult cuDriverGetVersion(int *)` (CUresult is a C enum, passed as an int).
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute::<*mut c_void, _>(f) };
    let mut v: c_int = 0;
    // SAFETY: v is a live out-pointer; cuDriverGetVersion needs no cuInit.
    let status = unsafe { f(&mut v) };
    if status != 0 || v <= 0 {
        return Err(format!("cuDriverGetVersion failed (CUresult {status})"));
    }
    Ok(DriverCudaVersion::from_encoded(v as u32))
}

/// The display driver's release, from NVML (`nvmlInit_v2`, `nvmlSystemGetDriverVersion`,
/// `nvmlShutdown`).
pub fn query_driver_release_version() -> Result<DriverReleaseVersion, String> {
    let nvml = crate::unguarded::load_nvidia_dynamic_lib("nvml").map_err(|e| e.to_string())?;
    let init = symbol(nvml.handle(), c"nvmlInit_v2")?;
    let version = symbol(nvml.handle(), c"nvmlSystemGetDriverVersion")?;
    let shutdown = symbol(nvml.handle(), c"nvmlShutdown")?;
    // SAFETY: the three are NVML's exports with these C signatures (nvml.h): nvmlReturn_t is a C
    // enum passed as an int.
    let (init, version, shutdown) = unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(init),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_char, c_uint) -> c_int>(version),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(shutdown),
        )
    };
    // SAFETY: nvmlInit_v2 takes no arguments; every successful init is paired with a shutdown.
    let status = unsafe { init() };
    if status != 0 {
        return Err(format!("nvmlInit_v2 failed (nvmlReturn {status})"));
    }
    let mut buffer = [0 as c_char; 96];
    // SAFETY: buffer holds 96 chars (NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80).
    let status = unsafe { version(buffer.as_mut_ptr(), buffer.len() as c_uint) };
    // SAFETY: NVML was initialised above.
    unsafe { shutdown() };
    if status != 0 {
        return Err(format!("nvmlSystemGetDriverVersion failed (nvmlReturn {status})"));
    }
    // SAFETY: on success NVML wrote a NUL-terminated string into buffer, which ends in zeros.
    let text = unsafe { CStr::from_ptr(buffer.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    DriverReleaseVersion::from_text(&text).ok_or_else(|| format!("NVML reported an unreadable driver version {text:?}"))
}
