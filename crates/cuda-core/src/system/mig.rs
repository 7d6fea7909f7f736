//! Multi-instance GPU (`Device.mig`, `MigInfo`): the mode, and the MIG devices (compute
//! instances) of a GPU, which are [`Device`]s too.

use super::device::Device;
use crate::Result;
use cuda_sys::nvml;

/// MIG information of a device (`MigInfo`), from [`Device::mig`] (Ampere and newer).
///
/// A MIG device handle names a compute instance; destroying the instance (or resetting or
/// unbinding its GPU) leaves the handle naming nothing, and NVML may hand it out again for
/// another instance: ask for MIG devices again after a reconfiguration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MigInfo {
    device: Device,
}

impl MigInfo {
    /// Whether the device is a MIG device (a compute instance), not a whole GPU.
    pub fn is_mig_device(&self) -> Result<bool> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        let is = self.device.get("nvmlDeviceIsMigDeviceHandle", |h, p| unsafe {
            nvml::nvmlDeviceIsMigDeviceHandle(h, p)
        })?;
        Ok(is != 0)
    }

    /// `(current, pending)` MIG modes: whether MIG is on, and whether it will be after the next
    /// reset (changing the mode may need one).
    fn modes(&self) -> Result<(bool, bool)> {
        let (mut current, mut pending) = (0, 0);
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.device.call("nvmlDeviceGetMigMode", |h| unsafe {
            nvml::nvmlDeviceGetMigMode(h, &mut current, &mut pending)
        })?;
        Ok((
            current == nvml::NVML_DEVICE_MIG_ENABLE,
            pending == nvml::NVML_DEVICE_MIG_ENABLE,
        ))
    }

    /// Whether MIG mode is on.
    pub fn mode(&self) -> Result<bool> {
        Ok(self.modes()?.0)
    }

    /// Whether MIG mode will be on after the next activation (a reset).
    pub fn pending_mode(&self) -> Result<bool> {
        Ok(self.modes()?.1)
    }

    /// Turns MIG mode on or off (root only). `Ok` carries the activation's status: `Ok(())` when
    /// the new mode is active, or the error that says why it is pending (in use, needs a reset).
    pub fn set_mode(&self, enabled: bool) -> Result<Result<()>> {
        let mode = if enabled {
            nvml::NVML_DEVICE_MIG_ENABLE
        } else {
            nvml::NVML_DEVICE_MIG_DISABLE
        };
        let mut activation = nvml::nvmlReturn_enum::NVML_SUCCESS;
        // SAFETY: `call` passes a live handle; the mode is one NVML defines; a live out-pointer.
        self.device.call("nvmlDeviceSetMigMode", |h| unsafe {
            nvml::nvmlDeviceSetMigMode(h, mode, &mut activation)
        })?;
        Ok(if activation == nvml::nvmlReturn_enum::NVML_SUCCESS {
            Ok(())
        } else {
            Err(super::common::error("nvmlDeviceSetMigMode (activation)", activation))
        })
    }

    /// The most MIG devices the GPU can hold (0 when MIG is off or not supported).
    pub fn device_count(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetMaxMigDeviceCount", |h, p| unsafe {
            nvml::nvmlDeviceGetMaxMigDeviceCount(h, p)
        })
    }

    /// The GPU a MIG device belongs to.
    pub fn parent(&self) -> Result<Device> {
        // SAFETY: `get` passes a live handle and a pointer to the handle NVML writes.
        let parent = self
            .device
            .get("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", |h, p| unsafe {
                nvml::nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h, p)
            })?;
        Ok(Device::from_raw(parent))
    }

    /// MIG device `index` of this GPU (below [`MigInfo::device_count`]; a slot with no compute
    /// instance is [`NvmlErrorKind::NotFound`](super::NvmlErrorKind::NotFound)).
    pub fn get_device_by_index(&self, index: u32) -> Result<Device> {
        // SAFETY: `get` passes a live handle and a pointer to the handle NVML writes.
        let handle = self.device.get("nvmlDeviceGetMigDeviceHandleByIndex", |h, p| unsafe {
            nvml::nvmlDeviceGetMigDeviceHandleByIndex(h, index, p)
        })?;
        Ok(Device::from_raw(handle))
    }

    /// Every MIG device of this GPU (empty slots left out).
    pub fn get_all_devices(&self) -> Result<Vec<Device>> {
        let mut out = Vec::new();
        for index in 0..self.device_count()? {
            match self.get_device_by_index(index) {
                Ok(d) => out.push(d),
                Err(e) if e.nvml_kind() == Some(super::NvmlErrorKind::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

impl Device {
    /// MIG information.
    pub fn mig(&self) -> MigInfo {
        MigInfo { device: *self }
    }
}
