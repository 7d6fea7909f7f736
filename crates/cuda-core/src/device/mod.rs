//! Devices and contexts: [`Device`] (and its generated [`DeviceProperties`]), [`Context`] with the
//! thread's stack of current contexts, and the per-context pool of fence events that order one
//! stream after another.
//!
//! Green contexts live here too: `resources` ([`DeviceResources`], [`SMResource`] and its
//! split), `split` ([`SMResourceOptions`] and its checks, host-only), `workqueue`
//! ([`WorkqueueResource`]) and `green` ([`ContextOptions`], [`Device::create_context`], the
//! streams of a green context).
//!
//! The lowest layer above the error type and the release thread ([`crate::reaper`]): it uses
//! nothing else of the crate. Streams, events and memory add their constructors to `Device` and
//! `Context` in their own folders (`Device::create_stream` lives in [`crate::stream`]).

mod context;
#[rustfmt::skip]
mod generated_properties;
mod green;
mod properties;
mod resources;
mod split;
mod system_device;
mod workqueue;

pub(crate) use context::{green_context_busy, CaptureCount, FenceEvent};
pub use context::{Context, ContextFlags};
pub use green::{ContextOptions, ContextResource};
pub use properties::DeviceProperties;
pub use resources::{DeviceResources, SMResource, SMResourceFlags};
pub use split::{PerGroup, SMResourceOptions};
pub use workqueue::{WorkqueueResource, WorkqueueResourceOptions, WorkqueueSharingScope};

use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::CStr;
use std::fmt;
use std::sync::OnceLock;

fn init() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), CudaError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: cuInit takes flags only and may be called from any thread.
        unsafe { driver::cuInit(0) }.check("cuInit")?;
        warn_if_major_version_mismatch();
        Ok(())
    })
    .clone()
}

/// `cuda.core`'s first-use check (`warn_if_cuda_major_version_mismatch`): a user warning when
/// the driver's CUDA major version is older than the headers this crate was generated from
/// (calls newer than the driver fail), unless `CUDA_PYTHON_DISABLE_MAJOR_VERSION_WARNING` is set
/// (to anything but an empty string).
fn warn_if_major_version_mismatch() {
    if std::env::var_os("CUDA_PYTHON_DISABLE_MAJOR_VERSION_WARNING").is_some_and(|v| !v.is_empty()) {
        return;
    }
    let mut version = 0;
    // SAFETY: out-pointer to a local.
    if unsafe { driver::cuDriverGetVersion(&mut version) } != driver::CUresult::CUDA_SUCCESS {
        return;
    }
    if let Some(message) = major_version_mismatch(version, driver::CUDA_VERSION) {
        crate::error::warn(crate::Warning::new(crate::WarningCategory::User, message));
    }
}

/// The warning for a driver of CUDA version `driver` (as `cuDriverGetVersion` gives it: 13000
/// for 13.0) under headers of version `headers`, when its major version is older.
fn major_version_mismatch(driver: i32, headers: u32) -> Option<String> {
    if driver <= 0 {
        return None;
    }
    let (driver_major, headers_major) = (driver / 1000, headers / 1000);
    (u32::try_from(driver_major).is_ok_and(|d| d < headers_major)).then(|| {
        format!(
            "this crate's bindings are for CUDA {headers_major}.x, but the installed driver supports CUDA {driver_major}.{} only: calls it does not know fail (update the driver; set CUDA_PYTHON_DISABLE_MAJOR_VERSION_WARNING=1 to silence this)",
            (driver % 1000) / 10
        )
    })
}

/// The number of CUDA devices (`cuDeviceGetCount`).
pub fn device_count() -> Result<usize> {
    init()?;
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    unsafe { driver::cuDeviceGetCount(&mut n) }.check("cuDeviceGetCount")?;
    Ok(n.max(0) as usize)
}

/// A compute capability, comparable as a `(major, minor)` pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// The major version: 9 for `sm_90`.
    pub major: u32,
    /// The minor version: 0 for `sm_90`.
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A CUDA device. Cheap to copy, `Send + Sync`.
///
/// ```no_run
/// let device = cuda_core::Device::new(0)?;
/// device.set_current()?;
/// println!("{} ({})", device.name()?, device.compute_capability()?);
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: i32,
    handle: driver::CUdevice,
}

/// The limits a launch is checked against, read once per device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    pub max_shared_optin: u32,
    pub cooperative: bool,
    pub clusters: bool,
}

struct DeviceState {
    primary: OnceLock<Result<Context>>,
    limits: OnceLock<Result<Limits>>,
}

static STATES: OnceLock<std::result::Result<Vec<DeviceState>, CudaError>> = OnceLock::new();

fn states() -> Result<&'static [DeviceState]> {
    STATES
        .get_or_init(|| {
            let n = device_count()?;
            Ok((0..n)
                .map(|_| DeviceState {
                    primary: OnceLock::new(),
                    limits: OnceLock::new(),
                })
                .collect())
        })
        .as_deref()
        .map_err(Clone::clone)
}

/// The primary context `handle` when this crate retained it ([`Device::primary_context`]); asks
/// the driver nothing (a primary context no one retained here is not looked up, nor retained).
fn retained_primary(handle: driver::CUcontext) -> Option<Context> {
    let states = STATES.get()?.as_deref().ok()?;
    states.iter().find_map(|s| match s.primary.get() {
        Some(Ok(c)) if c.handle() == handle => Some(c.clone()),
        _ => None,
    })
}

impl Device {
    /// Device `ordinal`; an error when there is no such device.
    pub fn new(ordinal: usize) -> Result<Device> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::InvalidArgument(format!(
                "device_id must be within [0, {count}), got {ordinal}"
            )));
        }
        let mut handle = 0;
        // SAFETY: out-pointer to a local; the ordinal is in range.
        unsafe { driver::cuDeviceGet(&mut handle, ordinal as i32) }.check("cuDeviceGet")?;
        Ok(Device {
            ordinal: ordinal as i32,
            handle,
        })
    }

    /// The device of the current context, or device 0 when no context is current.
    pub fn current() -> Result<Device> {
        init()?;
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        if unsafe { driver::cuCtxGetDevice(&mut dev) }.result().is_ok() {
            let count = device_count()?;
            for i in 0..count {
                let d = Device::new(i)?;
                if d.handle == dev {
                    return Ok(d);
                }
            }
        }
        Device::new(0)
    }

    /// Every device.
    pub fn all() -> Result<Vec<Device>> {
        (0..device_count()?).map(Device::new).collect()
    }

    /// The ordinal.
    pub fn device_id(&self) -> usize {
        self.ordinal as usize
    }

    /// The `CUdevice`.
    pub fn handle(&self) -> driver::CUdevice {
        self.handle
    }

    /// Makes the device's primary context current on this thread (retaining it once per process)
    /// and returns it.
    pub fn set_current(&self) -> Result<Context> {
        let ctx = self.primary_context()?;
        ctx.set_current()?;
        Ok(ctx)
    }

    /// The context current on the calling thread, when it is one of this device's (`cuda.core`'s
    /// `Device.context`): an error that says to call [`set_current`](Self::set_current) first
    /// when none of this device's contexts is current (cuda.core's "not yet initialized").
    pub fn context(&self) -> Result<Context> {
        match Context::current()? {
            Some(c) if c.device() == *self => Ok(c),
            _ => Err(CudaError::InvalidState(format!(
                "device {} is not yet initialized on this thread: call Device::set_current() (or make one of its contexts current) first",
                self.ordinal
            ))),
        }
    }

    /// The primary contexts this crate has retained: the ones its work ran in, without
    /// retaining (and so activating) any other.
    pub(crate) fn retained_primary_contexts() -> impl Iterator<Item = &'static Context> {
        states()
            .into_iter()
            .flatten()
            .filter_map(|state| state.primary.get()?.as_ref().ok())
    }

    /// Whether `handle` is a primary context this crate retained (alive for the life of the
    /// process), without retaining any.
    pub(crate) fn is_retained_primary(handle: driver::CUcontext) -> bool {
        !handle.is_null() && Device::retained_primary_contexts().any(|p| p.handle() == handle)
    }

    /// The device's primary context, retained for the life of the process.
    pub fn primary_context(&self) -> Result<Context> {
        let state = &states()?[self.ordinal as usize];
        state
            .primary
            .get_or_init(|| {
                let mut ctx: driver::CUcontext = std::ptr::null_mut();
                // SAFETY: out-pointer to a local; the reference is never released (the context
                // lives as long as the process, as every object made in it may).
                unsafe { driver::cuDevicePrimaryCtxRetain(&mut ctx, self.handle) }.check("cuDevicePrimaryCtxRetain")?;
                Ok(Context::wrap_primary(ctx, *self))
            })
            .clone()
    }

    pub(crate) fn limits(&self) -> Result<&'static Limits> {
        let state = &states()?[self.ordinal as usize];
        state
            .limits
            .get_or_init(|| {
                use driver::CUdevice_attribute as A;
                let a = |attr| self.attribute(attr).map(|v| v.max(0) as u32);
                Ok(Limits {
                    max_threads_per_block: a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                    max_block: [
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
                    ],
                    max_grid: [
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
                    ],
                    max_shared_optin: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
                    cooperative: a(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
                    clusters: a(A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)? != 0,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Any device attribute (`cuDeviceGetAttribute`).
    pub fn attribute(&self, attribute: driver::CUdevice_attribute) -> Result<i32> {
        let mut v = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetAttribute(&mut v, attribute, self.handle) }.check("cuDeviceGetAttribute")?;
        Ok(v)
    }

    /// The marketing name (`"NVIDIA H200"`).
    pub fn name(&self) -> Result<String> {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer's length is passed.
        unsafe { driver::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as i32, self.handle) }
            .check("cuDeviceGetName")?;
        Ok(CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The UUID, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid(&self) -> Result<String> {
        let mut uuid = driver::CUuuid::default();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetUuid(&mut uuid, self.handle) }.check("cuDeviceGetUuid")?;
        let b: Vec<String> = uuid.bytes.iter().map(|c| format!("{:02x}", *c as u8)).collect();
        Ok(format!(
            "{}-{}-{}-{}-{}",
            b[..4].concat(),
            b[4..6].concat(),
            b[6..8].concat(),
            b[8..10].concat(),
            b[10..].concat()
        ))
    }

    /// The PCI bus id, `0000:01:00.0`.
    pub fn pci_bus_id(&self) -> Result<String> {
        let mut buf = [0u8; 32];
        // SAFETY: the buffer's length is passed.
        unsafe { driver::cuDeviceGetPCIBusId(buf.as_mut_ptr().cast(), buf.len() as i32, self.handle) }
            .check("cuDeviceGetPCIBusId")?;
        Ok(CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The compute capability.
    pub fn compute_capability(&self) -> Result<ComputeCapability> {
        use driver::CUdevice_attribute as A;
        Ok(ComputeCapability {
            major: self.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            minor: self.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        })
    }

    /// The architecture as `cuda.core` writes it: `"90"` for compute capability 9.0.
    pub fn arch(&self) -> Result<String> {
        let cc = self.compute_capability()?;
        Ok(format!("{}{}", cc.major, cc.minor))
    }

    /// Total memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceTotalMem(&mut bytes, self.handle) }.check("cuDeviceTotalMem")?;
        Ok(bytes)
    }

    /// Free memory in bytes (`cuMemGetInfo` in the device's primary context).
    pub fn free_memory(&self) -> Result<usize> {
        let ctx = self.primary_context()?;
        ctx.with_current(|| {
            let (mut free, mut total) = (0, 0);
            // SAFETY: out-pointers to locals; the device's context is current.
            unsafe { driver::cuMemGetInfo(&mut free, &mut total) }.check("cuMemGetInfo")?;
            Ok(free)
        })
    }

    /// The number of streaming multiprocessors.
    pub fn multiprocessor_count(&self) -> Result<u32> {
        self.attribute(driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|v| v as u32)
    }

    /// Whether this device can access `peer`'s memory.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if peer == self {
            return Ok(true);
        }
        let mut can = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceCanAccessPeer(&mut can, self.handle, peer.handle) }.check("cuDeviceCanAccessPeer")?;
        Ok(can != 0)
    }

    /// Lets this device's primary context access `peer`'s memory (`cuCtxEnablePeerAccess`).
    /// Enabling it twice is not an error.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        if peer == self {
            return Err(CudaError::InvalidArgument(
                "a device always accesses its own memory".into(),
            ));
        }
        let peer_ctx = peer.primary_context()?;
        self.primary_context()?.with_current(|| {
            // SAFETY: both contexts are retained; flags must be 0.
            let status = unsafe { driver::cuCtxEnablePeerAccess(peer_ctx.handle(), 0) };
            if status == driver::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                return Ok(());
            }
            status.check("cuCtxEnablePeerAccess")
        })
    }

    /// Waits for all work on the device's primary context (an error while a stream of it is
    /// being captured into a graph: see [`Context::synchronize`]).
    pub fn sync(&self) -> Result<()> {
        self.primary_context()?.synchronize()
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.ordinal)
    }
}

#[cfg(test)]
mod major_version_tests {
    use super::major_version_mismatch;

    #[test]
    fn an_older_driver_major_version_is_warned_of_not_a_newer_one() {
        let m = major_version_mismatch(12080, 13050).expect("12.8 under 13.x headers");
        assert!(m.contains("CUDA 13.x") && m.contains("12.8"), "{m}");
        assert!(major_version_mismatch(13000, 13050).is_none(), "same major");
        assert!(major_version_mismatch(14000, 13050).is_none(), "newer driver");
        assert!(major_version_mismatch(-1, 13050).is_none(), "nonsense");
    }
}
