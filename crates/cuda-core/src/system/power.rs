//! Power: draw, limits, energy and source. Power is in milliwatts, energy in millijoules.

use super::device::Device;
use super::types::PowerSource;
use crate::Result;
use cuda_sys::nvml;

/// A device's power limits, in milliwatts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PowerLimits {
    /// The limit power management holds the board to now.
    pub current: u32,
    /// The limit the board ships with.
    pub default: u32,
    /// The lowest limit that can be set.
    pub min: u32,
    /// The highest limit that can be set.
    pub max: u32,
    /// The limit in force, the lowest of every limit that applies (this one and others, such
    /// as an out-of-band one).
    pub enforced: u32,
}

impl Device {
    /// The board's power draw now, in milliwatts (within 5% on Fermi and newer).
    pub fn power_usage_mw(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetPowerUsage", |h, p| unsafe {
            nvml::nvmlDeviceGetPowerUsage(h, p)
        })
    }

    /// The energy the device used since the driver was last loaded, in millijoules (Volta and
    /// newer).
    pub fn total_energy_consumption_mj(&self) -> Result<u64> {
        // SAFETY: `get` passes a live handle and a pointer to the counter NVML writes.
        self.get("nvmlDeviceGetTotalEnergyConsumption", |h, p| unsafe {
            nvml::nvmlDeviceGetTotalEnergyConsumption(h, p)
        })
    }

    /// Whether power management (limits) is on for the device.
    pub fn is_power_management_enabled(&self) -> Result<bool> {
        self.enable_state("nvmlDeviceGetPowerManagementMode", |h, p| {
            // SAFETY: a live handle and a pointer to the state NVML writes.
            unsafe { nvml::nvmlDeviceGetPowerManagementMode(h, p) }
        })
    }

    /// The power limits: current, default, settable range and enforced.
    pub fn power_limits(&self) -> Result<PowerLimits> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        let current = self.get("nvmlDeviceGetPowerManagementLimit", |h, p| unsafe {
            nvml::nvmlDeviceGetPowerManagementLimit(h, p)
        })?;
        // SAFETY: as above.
        let default = self.get("nvmlDeviceGetPowerManagementDefaultLimit", |h, p| unsafe {
            nvml::nvmlDeviceGetPowerManagementDefaultLimit(h, p)
        })?;
        // SAFETY: as above.
        let enforced = self.get("nvmlDeviceGetEnforcedPowerLimit", |h, p| unsafe {
            nvml::nvmlDeviceGetEnforcedPowerLimit(h, p)
        })?;
        let (mut min, mut max) = (0, 0);
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.call("nvmlDeviceGetPowerManagementLimitConstraints", |h| unsafe {
            nvml::nvmlDeviceGetPowerManagementLimitConstraints(h, &mut min, &mut max)
        })?;
        Ok(PowerLimits {
            current,
            default,
            min,
            max,
            enforced,
        })
    }

    /// Where the device draws power from.
    pub fn power_source(&self) -> Result<PowerSource> {
        // SAFETY: `get` passes a live handle and a pointer to the source NVML writes.
        let raw = self.get("nvmlDeviceGetPowerSource", |h, p| unsafe {
            nvml::nvmlDeviceGetPowerSource(h, p)
        })?;
        Ok(PowerSource::from_raw(raw))
    }
}
