//! Clocks (`Device.get_clock` and `ClockInfo`), why they are held back
//! (`ClocksEventReasons`), performance states and utilization.

use super::common::struct_version;
use super::device::Device;
use super::types::{ClockId, ClockType, ClocksEventReasons, Pstate};
use crate::Result;
use cuda_sys::nvml;

/// One clock domain of a device (`ClockInfo`), from [`Device::get_clock`]. Speeds are in MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClockInfo {
    device: Device,
    clock_type: ClockType,
}

/// A clock's offset range at one performance state, in MHz (`ClockOffsets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClockOffsets {
    /// The offset applied now, in MHz (may be negative).
    pub clock_offset_mhz: i32,
    /// The lowest offset that may be set, in MHz.
    pub min_offset_mhz: i32,
    /// The highest offset that may be set, in MHz.
    pub max_offset_mhz: i32,
}

impl ClockInfo {
    /// The clock domain.
    pub fn clock_type(&self) -> ClockType {
        self.clock_type
    }

    /// NVML's clock type (`InvalidArgument` for a type the headers do not define).
    fn raw(&self) -> Result<nvml::nvmlClockType_t> {
        Ok(nvml::nvmlClockType_enum(self.clock_type.input()?))
    }

    /// The clock's value `id`: the current speed ([`ClockId::Current`]) or the OEM's maximum.
    pub fn get_clock_mhz(&self, id: ClockId) -> Result<u32> {
        let (ty, id) = (self.raw()?, nvml::nvmlClockId_enum(id.input()?));
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetClock", |h, p| unsafe {
            nvml::nvmlDeviceGetClock(h, ty, id, p)
        })
    }

    /// The current speed (`get_current_mhz()`; `nvmlDeviceGetClockInfo`).
    pub fn get_current_mhz(&self) -> Result<u32> {
        let ty = self.raw()?;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetClockInfo", |h, p| unsafe {
            nvml::nvmlDeviceGetClockInfo(h, ty, p)
        })
    }

    /// The highest speed the clock can run at.
    pub fn get_max_mhz(&self) -> Result<u32> {
        let ty = self.raw()?;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetMaxClockInfo", |h, p| unsafe {
            nvml::nvmlDeviceGetMaxClockInfo(h, ty, p)
        })
    }

    /// The customer's maximum boost speed (Pascal and newer).
    pub fn get_max_customer_boost_mhz(&self) -> Result<u32> {
        let ty = self.raw()?;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device.get("nvmlDeviceGetMaxCustomerBoostClock", |h, p| unsafe {
            nvml::nvmlDeviceGetMaxCustomerBoostClock(h, ty, p)
        })
    }

    /// The lowest and highest speed of the clock at a performance state, `(min, max)`.
    pub fn get_min_max_clock_of_pstate_mhz(&self, pstate: Pstate) -> Result<(u32, u32)> {
        let (ty, ps) = (self.raw()?, pstate.raw());
        let (mut min, mut max) = (0, 0);
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.device.call("nvmlDeviceGetMinMaxClockOfPState", |h| unsafe {
            nvml::nvmlDeviceGetMinMaxClockOfPState(h, ty, ps, &mut min, &mut max)
        })?;
        Ok((min, max))
    }

    /// The clock's offset and its range at a performance state (Maxwell and newer).
    pub fn get_offsets(&self, pstate: Pstate) -> Result<ClockOffsets> {
        let mut info = nvml::nvmlClockOffset_t {
            version: struct_version::<nvml::nvmlClockOffset_t>(1),
            type_: self.raw()?,
            pstate: pstate.raw(),
            ..Default::default()
        };
        // SAFETY: `call` passes a live handle; `info` is a versioned structure NVML fills.
        self.device.call("nvmlDeviceGetClockOffsets", |h| unsafe {
            nvml::nvmlDeviceGetClockOffsets(h, &mut info)
        })?;
        Ok(ClockOffsets {
            clock_offset_mhz: info.clockOffsetMHz,
            min_offset_mhz: info.minClockOffsetMHz,
            max_offset_mhz: info.maxClockOffsetMHz,
        })
    }
}

/// GPU and memory utilization over the last sample period, in percent (`Utilization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Utilization {
    /// Time during which a kernel ran.
    pub gpu: u32,
    /// Time during which device memory was read or written.
    pub memory: u32,
}

/// One utilization domain of [`DynamicPstatesInfo`] (`GpuDynamicPstatesUtilization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PstateUtilization {
    /// Whether the device has this domain.
    pub is_present: bool,
    /// Time busy over the last second, in percent.
    pub percentage: u32,
    /// Crossing this raises the performance state.
    pub inc_threshold: u32,
    /// Crossing this lowers the performance state.
    pub dec_threshold: u32,
}

/// The utilization that drives performance-state changes (`GpuDynamicPstatesInfo`), per domain:
/// `utilization[0]` the GPU, `[1]` the frame buffer, `[2]` video, `[3]` the bus.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DynamicPstatesInfo {
    /// NVML's flags for the structure (reserved: 0 on current drivers).
    pub flags: u32,
    /// The utilization and thresholds of each domain, in the order above.
    pub utilization: Vec<PstateUtilization>,
}

impl Device {
    /// One clock domain (`get_clock(clock_type)`); with a type the headers do not define
    /// (`ClockType::Other`), every query of it is `InvalidArgument`.
    pub fn get_clock(&self, clock_type: ClockType) -> ClockInfo {
        ClockInfo {
            device: *self,
            clock_type,
        }
    }

    /// Whether auto-boosted clocks are on now, and by default: `(current, default)`.
    pub fn is_auto_boosted_clocks_enabled(&self) -> Result<(bool, bool)> {
        let mut current = nvml::nvmlEnableState_enum::NVML_FEATURE_DISABLED;
        let mut default = current;
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.call("nvmlDeviceGetAutoBoostedClocksEnabled", |h| unsafe {
            nvml::nvmlDeviceGetAutoBoostedClocksEnabled(h, &mut current, &mut default)
        })?;
        let on = |s| s == nvml::nvmlEnableState_enum::NVML_FEATURE_ENABLED;
        Ok((on(current), on(default)))
    }

    /// Why the clocks are below their maximum now (empty when nothing holds them back).
    pub fn current_clock_event_reasons(&self) -> Result<ClocksEventReasons> {
        // SAFETY: `get` passes a live handle and a pointer to the bitmask NVML writes.
        let bits = self.get("nvmlDeviceGetCurrentClocksEventReasons", |h, p| unsafe {
            nvml::nvmlDeviceGetCurrentClocksEventReasons(h, p)
        })?;
        Ok(ClocksEventReasons::from_bits_retain(bits))
    }

    /// The reasons [`Device::current_clock_event_reasons`] can report on this device.
    pub fn supported_clock_event_reasons(&self) -> Result<ClocksEventReasons> {
        // SAFETY: `get` passes a live handle and a pointer to the bitmask NVML writes.
        let bits = self.get("nvmlDeviceGetSupportedClocksEventReasons", |h, p| unsafe {
            nvml::nvmlDeviceGetSupportedClocksEventReasons(h, p)
        })?;
        Ok(ClocksEventReasons::from_bits_retain(bits))
    }

    /// The current performance state (`None` when NVML reports it unknown).
    pub fn performance_state(&self) -> Result<Option<Pstate>> {
        let unknown = nvml::nvmlPStates_enum::NVML_PSTATE_UNKNOWN;
        // SAFETY: `get_from` passes a live handle and a pointer to the state NVML writes.
        let raw = self.get_from("nvmlDeviceGetPerformanceState", unknown, |h, p| unsafe {
            nvml::nvmlDeviceGetPerformanceState(h, p)
        })?;
        Ok(Pstate::from_raw(raw))
    }

    /// The performance states the device supports, P0 first.
    pub fn supported_pstates(&self) -> Result<Vec<Pstate>> {
        let mut states = [nvml::nvmlPStates_enum::NVML_PSTATE_UNKNOWN; nvml::NVML_MAX_GPU_PERF_PSTATES as usize];
        // NVML takes the array's size in bytes (16 states of 4 bytes).
        let n = u32::try_from(std::mem::size_of_val(&states)).unwrap_or(u32::MAX);
        // SAFETY: `call` passes a live handle; the array is `n` bytes long, as NVML is told.
        self.call("nvmlDeviceGetSupportedPerformanceStates", |h| unsafe {
            nvml::nvmlDeviceGetSupportedPerformanceStates(h, states.as_mut_ptr(), n)
        })?;
        let mut supported: Vec<Pstate> = states.iter().filter_map(|&s| Pstate::from_raw(s)).collect();
        supported.sort();
        Ok(supported)
    }

    /// The utilization per domain that drives performance-state changes.
    pub fn dynamic_pstates_info(&self) -> Result<DynamicPstatesInfo> {
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let info: nvml::nvmlGpuDynamicPstatesInfo_t = self.get("nvmlDeviceGetDynamicPstatesInfo", |h, p| unsafe {
            nvml::nvmlDeviceGetDynamicPstatesInfo(h, p)
        })?;
        Ok(DynamicPstatesInfo {
            flags: info.flags,
            utilization: info
                .utilization
                .iter()
                .map(|u| PstateUtilization {
                    is_present: u.bIsPresent != 0,
                    percentage: u.percentage,
                    inc_threshold: u.incThreshold,
                    dec_threshold: u.decThreshold,
                })
                .collect(),
        })
    }

    /// GPU and memory utilization (not supported on MIG-enabled devices).
    pub fn utilization(&self) -> Result<Utilization> {
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let u: nvml::nvmlUtilization_t = self.get("nvmlDeviceGetUtilizationRates", |h, p| unsafe {
            nvml::nvmlDeviceGetUtilizationRates(h, p)
        })?;
        Ok(Utilization {
            gpu: u.gpu,
            memory: u.memory,
        })
    }
}
