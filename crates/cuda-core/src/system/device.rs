//! [`Device`]: a GPU as NVML sees it (`cuda.core.system.Device`), its selection and identity.
//! Clocks, memory, thermals, processes and the rest are in the sibling files, as `impl Device`
//! blocks.

use super::common::{c_string, init, read_array, read_string, struct_version};
use super::types::{AddressingMode, BrandType, DeviceArch};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::nvml;
use std::ffi::{c_uint, CString};
use std::fmt;

/// A GPU as NVML sees it (`cuda.core.system.Device`): identity, memory, clocks, thermals, power,
/// processes, topology and events, with no CUDA context. For CUDA work use
/// [`crate::Device`]; the two map to each other by UUID ([`crate::Device::to_system_device`],
/// [`Device::to_cuda_device`]).
///
/// Selecting a device makes NVML initialise it. NVML's index order is not CUDA's and may change
/// between boots: select by UUID or PCI bus id to name one GPU for good. Queries a device does
/// not support fail with [`NvmlErrorKind::NotSupported`](super::NvmlErrorKind::NotSupported);
/// none makes up a value.
///
/// Cheap to copy, `Send + Sync` (NVML is thread-safe).
///
/// # Validity of the handle
///
/// A `Device` holds NVML's handle, which is valid while NVML stays initialised and the device
/// stays attached. This crate initialises NVML on first use and never calls `nvmlShutdown`, so
/// from safe code the handle stays valid for the life of the process. What can end it lies
/// outside this crate's safe API, each an `unsafe` call of [`cuda_sys::nvml`] elsewhere in the
/// process: an unbalanced `nvmlShutdown` (one more than that code's own `nvmlInit`s, which
/// undoes this crate's initialisation), `nvmlDeviceRemoveGpu_v2` (detaching the GPU), or
/// `nvmlDeviceDiscoverGpus` (re-enumerating after a removal). Whoever makes such a call must not
/// use a `Device` obtained before it, nor let safe code do so. A MIG device's handle names a compute instance: once the
/// instance is destroyed NVML may hand the same handle out for another one, so that a stale
/// `Device` then answers for the new instance (ask [`MigInfo`](super::MigInfo) again after a
/// reconfiguration).
///
/// ```no_run
/// use cuda_core::system::{ClockType, Device};
/// for device in Device::get_all_devices()? {
///     let memory = device.memory_info()?;
///     println!(
///         "{} {}: {} of {} MiB used, SM clock {} MHz",
///         device.index()?,
///         device.name()?,
///         memory.used >> 20,
///         memory.total >> 20,
///         device.get_clock(ClockType::Sm).get_current_mhz()?
///     );
/// }
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    handle: nvml::nvmlDevice_t,
}

// SAFETY: an NVML device handle names a device in NVML's own tables; NVML's functions are
// thread-safe and may be called with a handle from any thread. NVML is initialised before a
// handle exists and never shut down by this crate; what else can end a handle is unsafe code
// outside this crate, bound by the invariant documented on `Device`.
unsafe impl Send for Device {}
// SAFETY: as for `Send`; `Device` has no interior state of its own.
unsafe impl Sync for Device {}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.uuid() {
            Ok(uuid) => write!(f, "system::Device({uuid})"),
            Err(_) => write!(f, "system::Device({:p})", self.handle),
        }
    }
}

impl Device {
    /// Wraps a handle NVML returned.
    pub(super) fn from_raw(handle: nvml::nvmlDevice_t) -> Device {
        Device { handle }
    }

    /// Device `index` in NVML's order (`Device(index=...)`; `nvmlDeviceGetHandleByIndex_v2`).
    pub fn from_index(index: u32) -> Result<Device> {
        init()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `handle` is a live out-pointer; any index is accepted (a wrong one is an error).
        unsafe { nvml::nvmlDeviceGetHandleByIndex(index, &mut handle) }.check("nvmlDeviceGetHandleByIndex")?;
        Ok(Device { handle })
    }

    /// The device with this UUID (`Device(uuid=...)`). NVML's form has a `GPU-` or `MIG-`
    /// prefix; a UUID without one, as CUDA writes it ([`crate::Device::uuid`]), gets `GPU-`.
    pub fn from_uuid(uuid: &str) -> Result<Device> {
        init()?;
        let uuid = uuid.trim();
        let has_prefix = ["GPU-", "MIG-"]
            .iter()
            .any(|p| uuid.get(..4).is_some_and(|head| head.eq_ignore_ascii_case(p)));
        let full = if has_prefix {
            uuid.to_string()
        } else {
            format!("GPU-{uuid}")
        };
        let c = CString::new(full)
            .map_err(|_| CudaError::InvalidArgument(format!("a UUID cannot hold a NUL byte: {uuid:?}")))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `c` is a NUL-terminated string that lives across the call; `handle` is a live
        // out-pointer.
        unsafe { nvml::nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut handle) }.check("nvmlDeviceGetHandleByUUID")?;
        Ok(Device { handle })
    }

    /// The device at this PCI bus id, `domain:bus:device.function` in hexadecimal
    /// (`Device(pci_bus_id=...)`; `nvmlDeviceGetHandleByPciBusId_v2`).
    pub fn from_pci_bus_id(pci_bus_id: &str) -> Result<Device> {
        init()?;
        let c = CString::new(pci_bus_id.trim())
            .map_err(|_| CudaError::InvalidArgument(format!("a PCI bus id cannot hold a NUL byte: {pci_bus_id:?}")))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `c` is a NUL-terminated string that lives across the call; `handle` is a live
        // out-pointer.
        unsafe { nvml::nvmlDeviceGetHandleByPciBusId(c.as_ptr(), &mut handle) }
            .check("nvmlDeviceGetHandleByPciBusId")?;
        Ok(Device { handle })
    }

    /// The number of devices NVML reports (`Device.get_device_count()`), including those the
    /// caller has no permission to open.
    pub fn get_device_count() -> Result<u32> {
        init()?;
        let mut count = 0;
        // SAFETY: `count` is a live out-pointer.
        unsafe { nvml::nvmlDeviceGetCount(&mut count) }.check("nvmlDeviceGetCount")?;
        Ok(count)
    }

    /// Every device the caller may open, in NVML's order (`Device.get_all_devices()`).
    ///
    /// A device NVML refuses to open for this caller ([`NvmlErrorKind::NoPermission`], a GPU
    /// another user's cgroup holds, say) is left out rather than failing the whole list, so a
    /// position in the list need not be NVML's index: ask [`Device::index`]. Any other error
    /// fails the call.
    ///
    /// [`NvmlErrorKind::NoPermission`]: super::NvmlErrorKind::NoPermission
    pub fn get_all_devices() -> Result<Vec<Device>> {
        let mut devices = Vec::new();
        for index in 0..Self::get_device_count()? {
            match Device::from_index(index) {
                Ok(device) => devices.push(device),
                Err(e) if e.nvml_kind() == Some(super::NvmlErrorKind::NoPermission) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(devices)
    }

    /// The raw NVML handle, for calls this module does not wrap (through `cuda_sys::nvml`).
    pub fn handle(&self) -> nvml::nvmlDevice_t {
        self.handle
    }

    /// Calls an NVML getter with this device's handle and a pointer to a zeroed `T`, and returns
    /// what it wrote.
    pub(super) fn get<T: Default>(
        &self,
        call: &'static str,
        f: impl FnOnce(nvml::nvmlDevice_t, *mut T) -> nvml::nvmlReturn_t,
    ) -> Result<T> {
        self.get_from(call, T::default(), f)
    }

    /// As [`Device::get`], starting from `value` (for types without `Default`).
    pub(super) fn get_from<T>(
        &self,
        call: &'static str,
        mut value: T,
        f: impl FnOnce(nvml::nvmlDevice_t, *mut T) -> nvml::nvmlReturn_t,
    ) -> Result<T> {
        f(self.handle, &mut value).check(call)?;
        Ok(value)
    }

    /// Calls an NVML function with this device's handle and checks its status.
    pub(super) fn call(
        &self,
        call: &'static str,
        f: impl FnOnce(nvml::nvmlDevice_t) -> nvml::nvmlReturn_t,
    ) -> Result<()> {
        f(self.handle).check(call)
    }

    /// NVML's index of the device (not necessarily CUDA's ordinal).
    pub fn index(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetIndex", |h, p| unsafe { nvml::nvmlDeviceGetIndex(h, p) })
    }

    /// The UUID as NVML writes it, with its `GPU-` (or `MIG-`) prefix.
    pub fn uuid(&self) -> Result<String> {
        read_string("nvmlDeviceGetUUID", 96, |buf, n| {
            // SAFETY: `read_string` passes a buffer of n chars and a live handle is used.
            unsafe { nvml::nvmlDeviceGetUUID(self.handle, buf, n) }
        })
    }

    /// The UUID without its prefix, as CUDA writes it ([`crate::Device::uuid`]).
    pub fn uuid_without_prefix(&self) -> Result<String> {
        let uuid = self.uuid()?;
        Ok(match uuid.split_once('-') {
            Some((prefix, rest)) if prefix.eq_ignore_ascii_case("GPU") || prefix.eq_ignore_ascii_case("MIG") => {
                rest.to_string()
            }
            _ => uuid,
        })
    }

    /// The PCI bus id, `00000000:01:00.0` (NVML's form, with an 8-digit domain). From
    /// `nvmlDeviceGetPciInfoExt`, or `nvmlDeviceGetPciInfo_v3` with an NVML that lacks it.
    pub fn pci_bus_id(&self) -> Result<String> {
        match self.pci_info() {
            Err(e) if e.nvml_kind() == Some(super::NvmlErrorKind::FunctionNotFound) => {
                // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
                let pci: nvml::nvmlPciInfo_t = self.get("nvmlDeviceGetPciInfo_v3", |h, p| unsafe {
                    nvml::nvmlDeviceGetPciInfo(h, p)
                })?;
                Ok(c_string(&pci.busId))
            }
            other => Ok(other?.bus_id),
        }
    }

    /// The NUMA node the device is (on platforms where GPUs are NUMA nodes, such as Grace
    /// Hopper); not supported elsewhere.
    pub fn numa_node_id(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetNumaNodeId", |h, p| unsafe {
            nvml::nvmlDeviceGetNumaNodeId(h, p)
        })
    }

    /// The architecture.
    pub fn arch(&self) -> Result<DeviceArch> {
        // SAFETY: `get` passes a live handle and a pointer to the architecture value NVML writes.
        let raw = self.get("nvmlDeviceGetArchitecture", |h, p| unsafe {
            nvml::nvmlDeviceGetArchitecture(h, p)
        })?;
        Ok(DeviceArch::from_raw(raw))
    }

    /// The product name (`"NVIDIA H100 80GB HBM3"`).
    pub fn name(&self) -> Result<String> {
        read_string("nvmlDeviceGetName", 96, |buf, n| {
            // SAFETY: `read_string` passes a buffer of n chars and a live handle is used.
            unsafe { nvml::nvmlDeviceGetName(self.handle, buf, n) }
        })
    }

    /// The brand; its `Display` is `cuda.core`'s string (`"NVIDIA"`, `"Tesla"`).
    pub fn brand(&self) -> Result<BrandType> {
        let unknown = nvml::nvmlBrandType_enum::NVML_BRAND_UNKNOWN;
        // SAFETY: `get_from` passes a live handle and a pointer to the brand value NVML writes.
        let raw = self.get_from("nvmlDeviceGetBrand", unknown, |h, p| unsafe {
            nvml::nvmlDeviceGetBrand(h, p)
        })?;
        Ok(BrandType::from_raw(raw.0))
    }

    /// The board's serial number (products with an InfoROM).
    pub fn serial(&self) -> Result<String> {
        read_string("nvmlDeviceGetSerial", 64, |buf, n| {
            // SAFETY: `read_string` passes a buffer of n chars and a live handle is used.
            unsafe { nvml::nvmlDeviceGetSerial(self.handle, buf, n) }
        })
    }

    /// The module's identifier on its baseboard (0 on boards with one GPU).
    pub fn module_id(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetModuleId", |h, p| unsafe {
            nvml::nvmlDeviceGetModuleId(h, p)
        })
    }

    /// The minor number of the device node, `/dev/nvidiaN` (Linux).
    pub fn minor_number(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetMinorNumber", |h, p| unsafe {
            nvml::nvmlDeviceGetMinorNumber(h, p)
        })
    }

    /// The CUDA compute capability, `(major, minor)`: `(9, 0)` for Hopper.
    pub fn cuda_compute_capability(&self) -> Result<(u32, u32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: a live handle and two live out-pointers.
        unsafe { nvml::nvmlDeviceGetCudaComputeCapability(self.handle, &mut major, &mut minor) }
            .check("nvmlDeviceGetCudaComputeCapability")?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }

    /// Whether chip-to-chip (C2C) mode is on (Grace Hopper's NVLink-C2C to the CPU).
    pub fn is_c2c_enabled(&self) -> Result<bool> {
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let info: nvml::nvmlC2cModeInfo_v1_t = self.get("nvmlDeviceGetC2cModeInfoV", |h, p| unsafe {
            nvml::nvmlDeviceGetC2cModeInfoV(h, p)
        })?;
        Ok(info.isC2cEnabled != 0)
    }

    /// How system-allocated memory is addressable from the device.
    pub fn addressing_mode(&self) -> Result<AddressingMode> {
        let mut mode = nvml::nvmlDeviceAddressingMode_t {
            version: struct_version::<nvml::nvmlDeviceAddressingMode_t>(1),
            ..Default::default()
        };
        // SAFETY: a live handle and a versioned structure NVML fills.
        unsafe { nvml::nvmlDeviceGetAddressingMode(self.handle, &mut mode) }.check("nvmlDeviceGetAddressingMode")?;
        Ok(AddressingMode::from_raw(mode.value))
    }

    /// Whether persistence mode is on (Linux): the driver stays loaded with no client.
    pub fn is_persistence_mode_enabled(&self) -> Result<bool> {
        self.enable_state("nvmlDeviceGetPersistenceMode", |h, p| {
            // SAFETY: a live handle and a pointer to the state NVML writes.
            unsafe { nvml::nvmlDeviceGetPersistenceMode(h, p) }
        })
    }

    /// Turns persistence mode on or off (root only; [`NvmlErrorKind::NoPermission`] otherwise).
    ///
    /// [`NvmlErrorKind::NoPermission`]: super::NvmlErrorKind::NoPermission
    pub fn set_persistence_mode(&self, enabled: bool) -> Result<()> {
        let mode = enable_state(enabled);
        // SAFETY: `call` passes a live handle; the mode is a valid enable state.
        self.call("nvmlDeviceSetPersistenceMode", |h| unsafe {
            nvml::nvmlDeviceSetPersistenceMode(h, mode)
        })
    }

    /// Whether a display is connected to one of the device's connectors.
    pub fn is_display_connected(&self) -> Result<bool> {
        self.enable_state("nvmlDeviceGetDisplayMode", |h, p| {
            // SAFETY: a live handle and a pointer to the state NVML writes.
            unsafe { nvml::nvmlDeviceGetDisplayMode(h, p) }
        })
    }

    /// Whether a display is initialised on the device (an X server has memory for a screen,
    /// say), monitor or not.
    pub fn is_display_active(&self) -> Result<bool> {
        self.enable_state("nvmlDeviceGetDisplayActive", |h, p| {
            // SAFETY: a live handle and a pointer to the state NVML writes.
            unsafe { nvml::nvmlDeviceGetDisplayActive(h, p) }
        })
    }

    /// Reads an `nvmlEnableState_t` as a `bool`.
    pub(super) fn enable_state(
        &self,
        call: &'static str,
        f: impl FnOnce(nvml::nvmlDevice_t, *mut nvml::nvmlEnableState_t) -> nvml::nvmlReturn_t,
    ) -> Result<bool> {
        let state = self.get_from(call, nvml::nvmlEnableState_enum::NVML_FEATURE_DISABLED, f)?;
        Ok(state == nvml::nvmlEnableState_enum::NVML_FEATURE_ENABLED)
    }

    /// The device's SM count, shared engines and MIG slices (`Device.attributes`).
    pub fn attributes(&self) -> Result<DeviceAttributes> {
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let a: nvml::nvmlDeviceAttributes_t = self.get("nvmlDeviceGetAttributes", |h, p| unsafe {
            nvml::nvmlDeviceGetAttributes(h, p)
        })?;
        Ok(DeviceAttributes {
            multiprocessor_count: a.multiprocessorCount,
            shared_copy_engine_count: a.sharedCopyEngineCount,
            shared_decoder_count: a.sharedDecoderCount,
            shared_encoder_count: a.sharedEncoderCount,
            shared_jpeg_count: a.sharedJpegCount,
            shared_ofa_count: a.sharedOfaCount,
            gpu_instance_slice_count: a.gpuInstanceSliceCount,
            compute_instance_slice_count: a.computeInstanceSliceCount,
            memory_size_mb: a.memorySizeMB,
        })
    }

    /// Whether TPC or channel repairs are pending (Ampere and newer).
    pub fn repair_status(&self) -> Result<RepairStatus> {
        let mut status = nvml::nvmlRepairStatus_t {
            version: struct_version::<nvml::nvmlRepairStatus_t>(1),
            ..Default::default()
        };
        // SAFETY: a live handle and a versioned structure NVML fills.
        unsafe { nvml::nvmlDeviceGetRepairStatus(self.handle, &mut status) }.check("nvmlDeviceGetRepairStatus")?;
        Ok(RepairStatus {
            channel_repair_pending: status.bChannelRepairPending != 0,
            tpc_repair_pending: status.bTpcRepairPending != 0,
        })
    }

    /// Reads the device handles an NVML function writes into an array with a count: first the
    /// count (a count of 0 and no array), then the handles (at most [`MAX_HANDLES`], asked again
    /// a few times if the count grew in between).
    pub(super) fn handles(
        call: &'static str,
        mut f: impl FnMut(*mut c_uint, *mut nvml::nvmlDevice_t) -> nvml::nvmlReturn_t,
    ) -> Result<Vec<Device>> {
        let handles = read_array(call, std::ptr::null_mut(), 0, MAX_HANDLES, |count, array| {
            f(count, array)
        })?;
        Ok(handles.into_iter().map(Device::from_raw).collect())
    }
}

/// The most device handles a list is read with (far more GPUs than a machine holds).
const MAX_HANDLES: u32 = 1 << 12;

/// An `nvmlEnableState_t` for a `bool`.
pub(super) fn enable_state(enabled: bool) -> nvml::nvmlEnableState_t {
    if enabled {
        nvml::nvmlEnableState_enum::NVML_FEATURE_ENABLED
    } else {
        nvml::nvmlEnableState_enum::NVML_FEATURE_DISABLED
    }
}

/// A device's SM count, shared engines and MIG slices (`DeviceAttributes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceAttributes {
    /// The number of streaming multiprocessors (of the MIG instance, for a MIG device).
    pub multiprocessor_count: u32,
    /// Copy engines shared with other MIG instances.
    pub shared_copy_engine_count: u32,
    /// Video decoders shared with other MIG instances.
    pub shared_decoder_count: u32,
    /// Video encoders shared with other MIG instances.
    pub shared_encoder_count: u32,
    /// JPEG engines shared with other MIG instances.
    pub shared_jpeg_count: u32,
    /// Optical flow accelerators shared with other MIG instances.
    pub shared_ofa_count: u32,
    /// The GPU-instance slices it spans (MIG).
    pub gpu_instance_slice_count: u32,
    /// The compute-instance slices it spans (MIG).
    pub compute_instance_slice_count: u32,
    /// Device memory in MiB.
    pub memory_size_mb: u64,
}

/// Pending repairs (`RepairStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepairStatus {
    /// A memory channel repair waits for the next GPU reset.
    pub channel_repair_pending: bool,
    /// A texture processing cluster (TPC) repair waits for the next GPU reset.
    pub tpc_repair_pending: bool,
}
