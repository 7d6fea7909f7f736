//! [`DeviceProperties`]: every device attribute as a typed method (the methods themselves are
//! generated into `generated_properties.rs` by `cargo xtask bindgen`).

use super::Device;
use crate::Result;
use cuda_sys::driver;

/// Every `CU_DEVICE_ATTRIBUTE_*` of a device as a method named after it
/// (`max_threads_per_block()`, `multiprocessor_count()`, ...), generated from the driver header,
/// plus [`DeviceProperties::ALL`] to list them. Each call asks the driver (`cuDeviceGetAttribute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProperties {
    device: Device,
}

impl DeviceProperties {
    /// The value of any attribute.
    pub fn get(&self, attribute: driver::CUdevice_attribute) -> Result<i32> {
        self.device.attribute(attribute)
    }

    /// Every attribute this driver reports, by property name (attributes newer than the driver
    /// are left out).
    pub fn all(&self) -> Vec<(&'static str, i32)> {
        DeviceProperties::ALL
            .iter()
            .filter_map(|(name, a)| Some((*name, self.get(*a).ok()?)))
            .collect()
    }
}

impl Device {
    /// The device's attributes as typed properties.
    pub fn properties(&self) -> DeviceProperties {
        DeviceProperties { device: *self }
    }
}
