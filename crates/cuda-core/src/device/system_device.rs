//! The bridge between a CUDA [`Device`] and its NVML view, [`system::Device`], by UUID
//! (`Device.to_system_device()`, `system.Device.to_cuda_device()`). Written here because the
//! system layer sits below this one.

use super::Device;
use crate::{system, CudaError, Result};

impl Device {
    /// The NVML view of this device (`to_system_device()`): clocks, temperatures, power,
    /// processes and the rest of [`system::Device`], matched by UUID. Needs NVML.
    pub fn to_system_device(&self) -> Result<system::Device> {
        system::Device::from_uuid(&self.uuid()?)
    }
}

impl system::Device {
    /// The CUDA device with this device's UUID (`to_cuda_device()`). An error when CUDA does
    /// not see it: a MIG-enabled GPU's parent (CUDA sees its MIG instances), or a device hidden
    /// by `CUDA_VISIBLE_DEVICES`.
    pub fn to_cuda_device(&self) -> Result<Device> {
        let uuid = self.uuid_without_prefix()?;
        for device in Device::all()? {
            if device.uuid()?.eq_ignore_ascii_case(&uuid) {
                return Ok(device);
            }
        }
        Err(CudaError::InvalidState(format!(
            "No corresponding CUDA device found for this NVML device ({}): CUDA does not see it \
             (a MIG-enabled GPU, or hidden by CUDA_VISIBLE_DEVICES)",
            self.uuid()?
        )))
    }
}
