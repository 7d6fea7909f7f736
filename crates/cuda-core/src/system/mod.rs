//! The machine as the driver and NVML see it (`cuda.core.system`): versions, device counts, and
//! [`Device`], an NVML view of each GPU (identity, memory, clocks, thermals, power, processes,
//! MIG, affinity, NVLink, topology, field values and events).
//!
//! The user-mode driver version and the device count fall back to the CUDA driver
//! (`cuDriverGetVersion`, `cuDeviceGetCount`) and work without NVML; everything else needs NVML
//! (`libnvidia-ml.so.1`, installed with the driver), initialised on first use and kept for the
//! process. Without it, those calls fail with an error that says the library could not be loaded
//! and where it was looked for ([`NvmlErrorKind::LibraryNotFound`]). None of this needs a CUDA
//! context.
//!
//! NVML's errors are [`CudaError::Nvml`]s whose [`CudaError::nvml_kind`] is `cuda.core`'s
//! exception class ([`NvmlErrorKind`]); a query the device does not support is
//! [`NvmlErrorKind::NotSupported`], never a made-up value.
//!
//! The system layer uses the error type only (driver and NVML bindings directly): every other
//! folder may use it. `Device::to_cuda_device` and `crate::Device::to_system_device` are
//! written in `device/`.
//!
//! Files: `common` (NVML's initialisation, error kinds, helpers), `types` (the enums and flags of
//! `cuda.core.system.typing`), `device` (selection and identity), `memory` (memory, BAR1, PCI),
//! `clocks` (clocks, performance states, utilization), `thermal` (temperatures, fans, coolers),
//! `power`, `processes`, `mig`, `topology` (affinity, topology, P2P, NVLink), `fields` (field
//! values), `events` (device and system events), `inforom`.

mod clocks;
mod common;
mod device;
mod event_wait;
mod events;
mod fields;
mod inforom;
mod memory;
mod mig;
mod power;
mod processes;
mod thermal;
mod topology;
mod types;

pub use clocks::{ClockInfo, ClockOffsets, DynamicPstatesInfo, PstateUtilization, Utilization};
pub use common::{initialize, NvmlErrorKind};
pub use device::{Device, DeviceAttributes, RepairStatus};
pub use event_wait::EventWait;
pub use events::{register_events, DeviceEvents, EventData, RegisteredSystemEvents, SystemEvent};
pub use fields::{FieldId, FieldValue, FieldValues, Value};
pub use inforom::InforomInfo;
pub use memory::{Bar1MemoryInfo, MemoryInfo, PciInfo, PcieLink, PcieThroughput};
pub use mig::MigInfo;
pub use power::PowerLimits;
pub use processes::{get_process_name, ProcessInfo};
pub use thermal::{CoolerInfo, FanInfo, Temperature, ThermalSensor};
pub use topology::{get_p2p_status, get_topology_common_ancestor, NvlinkInfo, NvlinkVersion};
pub use types::{
    AddressingMode, AffinityScope, BrandType, ClockId, ClockType, ClocksEventReasons, CoolerControl, CoolerTarget,
    DeviceArch, EventType, FanControlPolicy, GpuP2PCapsIndex, GpuP2PStatus, GpuTopologyLevel, InforomObject,
    PowerSource, Pstate, SystemEventType, TemperatureThresholds, ThermalController, ThermalTarget,
};

use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::{driver, nvml as sys};
use std::fmt;

/// The CUDA version the installed driver supports, as `(major, minor)` (`13.0` gives `(13, 0)`).
/// Needs only the CUDA driver.
pub fn get_user_mode_driver_version() -> Result<(u32, u32)> {
    let v = get_driver_version_full(DriverMode::User)?;
    Ok((v.major, v.minor))
}

/// Which driver a version query asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriverMode {
    /// The user-mode driver, `libcuda`: its CUDA version, `13.0.0` (`cuDriverGetVersion`; no
    /// NVML needed).
    User,
    /// The kernel-mode driver: its release, `580.159.4` (NVML).
    Kernel,
}

/// A driver version, `major.minor.patch`, comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverVersion {
    /// The major number: 13 for CUDA 13.0, 580 for release 580.159.4.
    pub major: u32,
    /// The minor number.
    pub minor: u32,
    /// The patch number (0 when the driver reports none).
    pub patch: u32,
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The driver's version as `(major, minor)` (`get_driver_version(kernel_mode)`).
pub fn get_driver_version(mode: DriverMode) -> Result<(u32, u32)> {
    let v = get_driver_version_full(mode)?;
    Ok((v.major, v.minor))
}

/// The driver's full version (`get_driver_version_full(kernel_mode)`): for
/// [`DriverMode::User`], the CUDA version (`13.0.0`, from `cuDriverGetVersion`, so no NVML is
/// needed); for [`DriverMode::Kernel`], the release (`580.159.4` for `"580.159.04"`, NVML).
pub fn get_driver_version_full(mode: DriverMode) -> Result<DriverVersion> {
    match mode {
        DriverMode::User => {
            let mut v = 0;
            // SAFETY: `v` is a valid place for an int; cuDriverGetVersion needs no cuInit.
            unsafe { driver::cuDriverGetVersion(&mut v) }.check("cuDriverGetVersion")?;
            let v = v.max(0) as u32;
            Ok(DriverVersion {
                major: v / 1000,
                minor: (v / 10) % 100,
                patch: v % 10,
            })
        }
        DriverMode::Kernel => parse_kernel_version(&get_kernel_mode_driver_version()?),
    }
}

/// `"580.159.04"` as `580.159.4` (a missing part is 0).
fn parse_kernel_version(text: &str) -> Result<DriverVersion> {
    let bad = || CudaError::InvalidArgument(format!("NVML reported a driver version that is not N.N.N: {text:?}"));
    let mut parts = text.trim().split('.');
    let mut next = |required: bool| -> Result<u32> {
        match parts.next() {
            Some(p) => p.parse().map_err(|_| bad()),
            None if required => Err(bad()),
            None => Ok(0),
        }
    };
    let version = DriverVersion {
        major: next(true)?,
        minor: next(false)?,
        patch: next(false)?,
    };
    Ok(version)
}

/// Reads a string an NVML system function writes into a buffer.
fn nvml_system_string(
    call: &'static str,
    f: impl FnOnce(*mut std::ffi::c_char, u32) -> sys::nvmlReturn_t,
) -> Result<String> {
    common::init()?;
    common::read_string(call, 96, f)
}

/// The kernel-mode driver version, such as `"580.159.04"` (NVML).
pub fn get_kernel_mode_driver_version() -> Result<String> {
    nvml_system_string("nvmlSystemGetDriverVersion", |b, n| {
        // SAFETY: `read_string` passes a buffer of n chars.
        unsafe { sys::nvmlSystemGetDriverVersion(b, n) }
    })
}

/// The version of the NVML library, such as `"13.580.159.04"`.
pub fn get_nvml_version() -> Result<String> {
    nvml_system_string("nvmlSystemGetNVMLVersion", |b, n| {
        // SAFETY: `read_string` passes a buffer of n chars.
        unsafe { sys::nvmlSystemGetNVMLVersion(b, n) }
    })
}

/// The branch of the installed driver, such as `"r580_00"` (NVML).
pub fn get_driver_branch() -> Result<String> {
    common::init()?;
    let mut info = sys::nvmlSystemDriverBranchInfo_t {
        version: common::struct_version::<sys::nvmlSystemDriverBranchInfo_t>(1),
        branch: [0; 80],
    };
    // SAFETY: `info` is a live, versioned struct of the size NVML is told.
    unsafe { sys::nvmlSystemGetDriverBranch(&mut info, info.branch.len() as u32) }
        .check("nvmlSystemGetDriverBranch")?;
    Ok(common::c_string(&info.branch))
}

/// The number of NVIDIA GPUs in the system: NVML's count, or the CUDA driver's when NVML is not
/// available. The CUDA count leaves out devices hidden by `CUDA_VISIBLE_DEVICES`.
pub fn get_num_devices() -> Result<usize> {
    match Device::get_device_count() {
        Ok(count) => Ok(count as usize),
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
    use super::*;

    #[test]
    fn handles_cross_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<Device>();
        send_and_sync::<DeviceEvents>();
        send_and_sync::<RegisteredSystemEvents>();
        send_and_sync::<ClockInfo>();
        send_and_sync::<FanInfo>();
        send_and_sync::<MigInfo>();
        send_and_sync::<NvlinkInfo>();
    }

    #[test]
    fn kernel_versions_parse() {
        let v = parse_kernel_version("580.159.04").unwrap();
        assert_eq!(
            v,
            DriverVersion {
                major: 580,
                minor: 159,
                patch: 4
            }
        );
        assert_eq!(v.to_string(), "580.159.4");
        assert_eq!(parse_kernel_version("575.51").unwrap().patch, 0);
        assert!(parse_kernel_version("r580").is_err());
        assert!(parse_kernel_version("").is_err());
    }

    #[test]
    fn without_a_driver_every_query_is_an_error_that_says_so() {
        if cuda_pathfinder::load_nvidia_dynamic_lib("cuda").is_ok() {
            return; // a machine with a driver; the GPU suite checks the values
        }
        let err = get_user_mode_driver_version().unwrap_err();
        assert!(err.load_error().is_some());
        assert!(err.to_string().starts_with("cuDriverGetVersion: "), "{err}");
        assert!(err.to_string().contains("install the driver"), "{err}");
        let err = get_num_devices().unwrap_err();
        assert!(err.to_string().contains("libcuda.so.1"), "{err}");
        let err = get_kernel_mode_driver_version().unwrap_err();
        assert!(
            err.to_string().contains("nvmlInit") && err.to_string().contains("NVML"),
            "{err}"
        );
        assert_eq!(err.nvml_kind(), Some(NvmlErrorKind::LibraryNotFound));
        let err = Device::from_index(0).unwrap_err();
        assert_eq!(err.nvml_kind(), Some(NvmlErrorKind::LibraryNotFound), "{err}");
        assert!(get_process_name(1).unwrap_err().to_string().contains("NVML"));
        assert!(initialize().is_err());
    }
}
