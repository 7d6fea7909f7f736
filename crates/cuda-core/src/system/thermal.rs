//! Temperatures and thresholds (`Device.temperature`), fans (`Device.get_fan`) and coolers
//! (`Device.cooler`). Temperatures are in degrees Celsius.

use super::common::struct_version;
use super::device::Device;
use super::types::{
    CoolerControl, CoolerTarget, FanControlPolicy, TemperatureThresholds, ThermalController, ThermalTarget,
};
use crate::Result;
use cuda_sys::nvml;

/// A device's temperatures (`Temperature`), from [`Device::temperature`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Temperature {
    device: Device,
}

/// One thermal sensor (`ThermalSensor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThermalSensor {
    /// The chip that reads the sensor.
    pub controller: ThermalController,
    /// The lowest temperature of the sensor's default range, in °C.
    pub default_min_temp: i32,
    /// The highest temperature of the sensor's default range, in °C.
    pub default_max_temp: i32,
    /// The temperature now, in °C.
    pub current_temp: i32,
    /// What the sensor measures.
    pub target: ThermalTarget,
}

impl Temperature {
    /// The GPU's temperature now (`get_sensor()`; `nvmlDeviceGetTemperatureV`, the GPU sensor).
    pub fn get_sensor(&self) -> Result<i32> {
        let mut t = nvml::nvmlTemperature_t {
            version: struct_version::<nvml::nvmlTemperature_t>(1),
            sensorType: nvml::nvmlTemperatureSensors_enum::NVML_TEMPERATURE_GPU,
            temperature: 0,
        };
        // SAFETY: `call` passes a live handle; `t` is a versioned structure NVML fills.
        self.device.call("nvmlDeviceGetTemperatureV", |h| unsafe {
            nvml::nvmlDeviceGetTemperatureV(h, &mut t)
        })?;
        Ok(t.temperature)
    }

    /// A temperature threshold, in degrees Celsius (Kepler and newer). On Ada and newer NVML
    /// prefers the field values `FieldId::DEV_TEMPERATURE_*_TLIMIT` for the shutdown, slowdown
    /// and maximum thresholds (those are relative to the GPU's T.Limit, not absolute).
    pub fn get_threshold(&self, threshold: TemperatureThresholds) -> Result<u32> {
        let ty = nvml::nvmlTemperatureThresholds_enum(threshold.input()?);
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetTemperatureThreshold", |h, p| unsafe {
            nvml::nvmlDeviceGetTemperatureThreshold(h, ty, p)
        })
    }

    /// How far the GPU is from its nearest slowdown threshold.
    pub fn margin(&self) -> Result<i32> {
        let mut m = nvml::nvmlMarginTemperature_t {
            version: struct_version::<nvml::nvmlMarginTemperature_t>(1),
            marginTemperature: 0,
        };
        // SAFETY: `call` passes a live handle; `m` is a versioned structure NVML fills.
        self.device.call("nvmlDeviceGetMarginTemperature", |h| unsafe {
            nvml::nvmlDeviceGetMarginTemperature(h, &mut m)
        })?;
        Ok(m.marginTemperature)
    }

    /// The thermal sensors for a target ([`ThermalTarget::All`] for every one;
    /// [`ThermalTarget::Unknown`] and values the headers do not define are `InvalidArgument`).
    pub fn get_thermal_settings(&self, target: ThermalTarget) -> Result<Vec<ThermalSensor>> {
        let raw = target.input()?;
        let index = u32::try_from(raw)
            .map_err(|_| crate::CudaError::InvalidArgument(format!("thermal target {raw} is not a sensor index")))?;
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let s: nvml::nvmlGpuThermalSettings_t = self.device.get("nvmlDeviceGetThermalSettings", |h, p| unsafe {
            nvml::nvmlDeviceGetThermalSettings(h, index, p)
        })?;
        let count = (s.count as usize).min(s.sensor.len());
        Ok(s.sensor[..count]
            .iter()
            .map(|x| ThermalSensor {
                controller: ThermalController::from_raw(x.controller.0),
                default_min_temp: x.defaultMinTemp,
                default_max_temp: x.defaultMaxTemp,
                current_temp: x.currentTemp,
                target: ThermalTarget::from_raw(x.target.0),
            })
            .collect())
    }
}

/// One fan of a device (`FanInfo`), from [`Device::get_fan`]. Speeds are percentages of the
/// product's maximum noise-tolerance speed (and may exceed 100); they are the intended speed,
/// which a blocked fan does not reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FanInfo {
    device: Device,
    fan: u32,
}

impl FanInfo {
    /// The fan's index.
    pub fn index(&self) -> u32 {
        self.fan
    }

    /// The intended speed, in percent.
    pub fn speed(&self) -> Result<u32> {
        let fan = self.fan;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetFanSpeed_v2", |h, p| unsafe {
            nvml::nvmlDeviceGetFanSpeed_v2(h, fan, p)
        })
    }

    /// Sets the speed, in percent (root only); the policy becomes [`FanControlPolicy::Manual`].
    pub fn set_speed(&self, percent: u32) -> Result<()> {
        let fan = self.fan;
        // SAFETY: `call` passes a live handle; the values are plain integers.
        self.device.call("nvmlDeviceSetFanSpeed_v2", |h| unsafe {
            nvml::nvmlDeviceSetFanSpeed_v2(h, fan, percent)
        })
    }

    /// The intended speed in rotations per minute (Maxwell and newer).
    pub fn speed_rpm(&self) -> Result<u32> {
        let mut info = nvml::nvmlFanSpeedInfo_t {
            version: struct_version::<nvml::nvmlFanSpeedInfo_t>(1),
            fan: self.fan,
            speed: 0,
        };
        // SAFETY: `call` passes a live handle; `info` is a versioned structure NVML fills.
        self.device.call("nvmlDeviceGetFanSpeedRPM", |h| unsafe {
            nvml::nvmlDeviceGetFanSpeedRPM(h, &mut info)
        })?;
        Ok(info.speed)
    }

    /// The speed the driver aims at, in percent.
    pub fn target_speed(&self) -> Result<u32> {
        let fan = self.fan;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetTargetFanSpeed", |h, p| unsafe {
            nvml::nvmlDeviceGetTargetFanSpeed(h, fan, p)
        })
    }

    /// The lowest and highest speed of the device's fans, in percent: `(min, max)`.
    pub fn min_max_speed(&self) -> Result<(u32, u32)> {
        let (mut min, mut max) = (0, 0);
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.device.call("nvmlDeviceGetMinMaxFanSpeed", |h| unsafe {
            nvml::nvmlDeviceGetMinMaxFanSpeed(h, &mut min, &mut max)
        })?;
        Ok((min, max))
    }

    /// How the fan is driven.
    pub fn control_policy(&self) -> Result<FanControlPolicy> {
        let fan = self.fan;
        // SAFETY: `get` passes a live handle and a pointer to the policy NVML writes.
        let raw = self.device.get("nvmlDeviceGetFanControlPolicy_v2", |h, p| unsafe {
            nvml::nvmlDeviceGetFanControlPolicy_v2(h, fan, p)
        })?;
        Ok(FanControlPolicy::from_raw(raw))
    }

    /// Hands the fan back to the driver's temperature control (root only).
    pub fn set_default_speed(&self) -> Result<()> {
        let fan = self.fan;
        // SAFETY: `call` passes a live handle; the fan index is a plain integer.
        self.device.call("nvmlDeviceSetDefaultFanSpeed_v2", |h| unsafe {
            nvml::nvmlDeviceSetDefaultFanSpeed_v2(h, fan)
        })
    }
}

/// A device's cooler (`CoolerInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoolerInfo {
    /// How it is controlled.
    pub signal_type: CoolerControl,
    /// What it cools.
    pub target: CoolerTarget,
}

impl Device {
    /// The device's temperatures.
    pub fn temperature(&self) -> Temperature {
        Temperature { device: *self }
    }

    /// The number of fans (0 on passively cooled boards, or not supported).
    pub fn num_fans(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetNumFans", |h, p| unsafe {
            nvml::nvmlDeviceGetNumFans(h, p)
        })
    }

    /// Fan `index` (`get_fan(fan)`); its queries fail when there is no such fan.
    pub fn get_fan(&self, index: u32) -> FanInfo {
        FanInfo {
            device: *self,
            fan: index,
        }
    }

    /// The cooler: how it is controlled and what it cools.
    pub fn cooler(&self) -> Result<CoolerInfo> {
        let mut info = nvml::nvmlCoolerInfo_t {
            version: struct_version::<nvml::nvmlCoolerInfo_t>(1),
            ..Default::default()
        };
        // SAFETY: `call` passes a live handle; `info` is a versioned structure NVML fills.
        self.call("nvmlDeviceGetCoolerInfo", |h| unsafe {
            nvml::nvmlDeviceGetCoolerInfo(h, &mut info)
        })?;
        Ok(CoolerInfo {
            signal_type: CoolerControl::from_raw(info.signalType.0),
            target: CoolerTarget::from_bits_retain(info.target.0),
        })
    }
}
