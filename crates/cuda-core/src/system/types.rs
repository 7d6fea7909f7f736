//! The enums and flag sets of `cuda.core.system.typing`, over NVML's values.
//!
//! Values NVML reports that the vendored headers do not name come back as `Other(raw)`, never as
//! a wrong variant.

use super::common::nvml_enum;
use crate::{CudaError, Result};
use cuda_sys::nvml;

nvml_enum! {
    /// A GPU architecture (`DeviceArch`).
    pub enum DeviceArch: u32 {
        /// Kepler (compute capability 3.x).
        Kepler = nvml::NVML_DEVICE_ARCH_KEPLER => "KEPLER",
        /// Maxwell (5.x).
        Maxwell = nvml::NVML_DEVICE_ARCH_MAXWELL => "MAXWELL",
        /// Pascal (6.x).
        Pascal = nvml::NVML_DEVICE_ARCH_PASCAL => "PASCAL",
        /// Volta (7.0, 7.2).
        Volta = nvml::NVML_DEVICE_ARCH_VOLTA => "VOLTA",
        /// Turing (7.5).
        Turing = nvml::NVML_DEVICE_ARCH_TURING => "TURING",
        /// Ampere (8.0, 8.6, 8.7).
        Ampere = nvml::NVML_DEVICE_ARCH_AMPERE => "AMPERE",
        /// Ada Lovelace (8.9).
        Ada = nvml::NVML_DEVICE_ARCH_ADA => "ADA",
        /// Hopper (9.0).
        Hopper = nvml::NVML_DEVICE_ARCH_HOPPER => "HOPPER",
        /// Blackwell (10.x, 12.x).
        Blackwell = nvml::NVML_DEVICE_ARCH_BLACKWELL => "BLACKWELL",
        /// Rubin.
        Rubin = nvml::NVML_DEVICE_ARCH_RUBIN => "RUBIN",
        /// NVML does not know the architecture (`NVML_DEVICE_ARCH_UNKNOWN`).
        Unknown = nvml::NVML_DEVICE_ARCH_UNKNOWN => "UNKNOWN",
    }
}

nvml_enum! {
    /// The brand of a device; `Display` gives `cuda.core`'s brand strings (`"Tesla"`, `"NVIDIA"`).
    pub enum BrandType: u32 {
        /// NVML does not know the brand.
        Unknown = nvml::nvmlBrandType_enum::NVML_BRAND_UNKNOWN.0 => "Unknown",
        /// Quadro professional graphics.
        Quadro = nvml::nvmlBrandType_enum::NVML_BRAND_QUADRO.0 => "Quadro",
        /// Tesla data-centre GPUs.
        Tesla = nvml::nvmlBrandType_enum::NVML_BRAND_TESLA.0 => "Tesla",
        /// NVS multi-display business graphics.
        Nvs = nvml::nvmlBrandType_enum::NVML_BRAND_NVS.0 => "NVS",
        /// GRID virtualisation (older brand).
        Grid = nvml::nvmlBrandType_enum::NVML_BRAND_GRID.0 => "GRID",
        /// GeForce consumer graphics.
        GeForce = nvml::nvmlBrandType_enum::NVML_BRAND_GEFORCE.0 => "GeForce",
        /// Titan.
        Titan = nvml::nvmlBrandType_enum::NVML_BRAND_TITAN.0 => "Titan",
        /// NVIDIA Virtual Applications (vGPU).
        NvidiaVapps = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_VAPPS.0 => "NVIDIA vApps",
        /// NVIDIA Virtual PC (vGPU).
        NvidiaVpc = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_VPC.0 => "NVIDIA VPC",
        /// NVIDIA Virtual Compute Server (vGPU).
        NvidiaVcs = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_VCS.0 => "NVIDIA VCS",
        /// NVIDIA RTX Virtual Workstation (vGPU).
        NvidiaVws = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_VWS.0 => "NVIDIA VWS",
        /// NVIDIA Cloud Gaming (vGPU).
        NvidiaCloudGaming = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_CLOUD_GAMING.0 => "NVIDIA Cloud Gaming",
        /// NVIDIA vGaming (an older name of cloud gaming).
        NvidiaVgaming = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_VGAMING.0 => "NVIDIA vGaming",
        /// Quadro RTX.
        QuadroRtx = nvml::nvmlBrandType_enum::NVML_BRAND_QUADRO_RTX.0 => "Quadro RTX",
        /// NVIDIA RTX professional graphics.
        NvidiaRtx = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA_RTX.0 => "NVIDIA RTX",
        /// NVIDIA (data-centre GPUs since the Tesla brand was retired).
        Nvidia = nvml::nvmlBrandType_enum::NVML_BRAND_NVIDIA.0 => "NVIDIA",
        /// GeForce RTX.
        GeForceRtx = nvml::nvmlBrandType_enum::NVML_BRAND_GEFORCE_RTX.0 => "GeForce RTX",
        /// Titan RTX.
        TitanRtx = nvml::nvmlBrandType_enum::NVML_BRAND_TITAN_RTX.0 => "Titan RTX",
    }
}

nvml_enum! {
    /// How closely two devices are connected (`GpuTopologyLevel`), nearest first.
    pub enum GpuTopologyLevel: u32 {
        /// The same board (multi-GPU boards).
        Internal = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_INTERNAL.0 => "internal",
        /// One PCIe switch between them.
        Single = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_SINGLE.0 => "single",
        /// Several PCIe switches, no host bridge.
        Multiple = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_MULTIPLE.0 => "multiple",
        /// The same host bridge.
        Hostbridge = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_HOSTBRIDGE.0 => "hostbridge",
        /// The same NUMA node (host bridges connected within it).
        Node = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_NODE.0 => "node",
        /// Across NUMA nodes (an SMP interconnect).
        System = nvml::nvmlGpuLevel_enum::NVML_TOPOLOGY_SYSTEM.0 => "system",
    }
}

nvml_enum! {
    /// The peer-to-peer status of two devices for one capability (`GpuP2PStatus`).
    pub enum GpuP2PStatus: u32 {
        /// The capability is available.
        Ok = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_OK.0 => "ok",
        /// The chipset does not support it.
        ChipsetNotSupported = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED.0 => "chipset not supported",
        /// One of the GPUs does not support it.
        GpuNotSupported = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_GPU_NOT_SUPPORTED.0 => "GPU not supported",
        /// The I/O hub topology does not support it (e.g. the devices hang off different IOHs).
        IohTopologyNotSupported = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED.0 => "IOH topology not supported",
        /// Turned off by a driver registry key.
        DisabledByRegkey = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_DISABLED_BY_REGKEY.0 => "disabled by regkey",
        /// Not supported between these devices.
        NotSupported = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_NOT_SUPPORTED.0 => "not supported",
        /// NVML could not tell.
        Unknown = nvml::nvmlGpuP2PStatus_enum::NVML_P2P_STATUS_UNKNOWN.0 => "unknown",
    }
}

nvml_enum! {
    /// Which peer-to-peer capability [`super::get_p2p_status`] asks about (`GpuP2PCapsIndex`).
    pub enum GpuP2PCapsIndex: u32 {
        /// Peer reads over PCIe or NVLink.
        Read = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_READ.0 => "read",
        /// Peer writes.
        Write = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_WRITE.0 => "write",
        /// Peer access over NVLink.
        Nvlink = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_NVLINK.0 => "nvlink",
        /// Peer atomics.
        Atomics = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_ATOMICS.0 => "atomics",
        /// Peer access over PCIe.
        Pci = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_PCI.0 => "pci",
        /// Peer access through the properties the driver reports (`NVML_P2P_CAPS_INDEX_PROP`).
        Prop = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_PROP.0 => "prop",
        /// An unknown capability (refused as an argument).
        Unknown = nvml::nvmlGpuP2PCapsIndex_enum::NVML_P2P_CAPS_INDEX_UNKNOWN.0 => "unknown",
    }
}

nvml_enum! {
    /// A clock domain (`ClockType`); speeds are in MHz.
    pub enum ClockType: u32 {
        /// The graphics clock.
        Graphics = nvml::nvmlClockType_enum::NVML_CLOCK_GRAPHICS.0 => "graphics",
        /// The streaming-multiprocessor clock.
        Sm = nvml::nvmlClockType_enum::NVML_CLOCK_SM.0 => "sm",
        /// The memory clock.
        Memory = nvml::nvmlClockType_enum::NVML_CLOCK_MEM.0 => "memory",
        /// The video encoder/decoder clock.
        Video = nvml::nvmlClockType_enum::NVML_CLOCK_VIDEO.0 => "video",
    }
}

nvml_enum! {
    /// Which value of a clock [`super::ClockInfo::get_current_mhz`] reads (`ClockId`; the
    /// deprecated application-clock ids are left out, as `cuda.core` does).
    pub enum ClockId: u32 {
        /// The clock's current value.
        Current = nvml::nvmlClockId_enum::NVML_CLOCK_ID_CURRENT.0 => "current",
        /// The OEM-defined maximum.
        CustomerBoostMax = nvml::nvmlClockId_enum::NVML_CLOCK_ID_CUSTOMER_BOOST_MAX.0 => "customer_boost_max",
    }
}

nvml_enum! {
    /// A temperature threshold (`TemperatureThresholds`).
    pub enum TemperatureThresholds: u32 {
        /// The temperature at which the GPU shuts down to protect itself.
        Shutdown = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_SHUTDOWN.0 => "shutdown",
        /// The temperature at which the GPU starts slowing its clocks.
        Slowdown = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_SLOWDOWN.0 => "slowdown",
        /// The highest memory temperature before slowdown.
        MemMax = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_MEM_MAX.0 => "mem_max",
        /// The highest GPU temperature before slowdown.
        GpuMax = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_GPU_MAX.0 => "gpu_max",
        /// The lowest acoustic threshold that can be set.
        AcousticMin = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN.0 => "acoustic_min",
        /// The acoustic threshold currently set.
        AcousticCurr = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR.0 => "acoustic_curr",
        /// The highest acoustic threshold that can be set.
        AcousticMax = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX.0 => "acoustic_max",
        /// The current GPU Performance Boost (GPS) temperature threshold.
        GpsCurr = nvml::nvmlTemperatureThresholds_enum::NVML_TEMPERATURE_THRESHOLD_GPS_CURR.0 => "gps_curr",
    }
}

nvml_enum! {
    /// What a thermal sensor measures (`ThermalTarget`).
    pub enum ThermalTarget: i32 {
        /// No target.
        None = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_NONE.0 => "none",
        /// The GPU core.
        Gpu = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_GPU.0 => "gpu",
        /// The GPU's memory.
        Memory = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_MEMORY.0 => "memory",
        /// The power supply.
        PowerSupply = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_POWER_SUPPLY.0 => "power_supply",
        /// The board as a whole.
        Board = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_BOARD.0 => "board",
        /// The board of a visual computing device.
        VcdBoard = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_VCD_BOARD.0 => "vcd_board",
        /// The inlet of a visual computing device.
        VcdInlet = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_VCD_INLET.0 => "vcd_inlet",
        /// The outlet of a visual computing device.
        VcdOutlet = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_VCD_OUTLET.0 => "vcd_outlet",
        /// All targets (for queries over every sensor).
        All = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_ALL.0 => "all",
        /// An unknown target (refused as an argument).
        Unknown = nvml::nvmlThermalTarget_t::NVML_THERMAL_TARGET_UNKNOWN.0 => "unknown",
    }
}

nvml_enum! {
    /// The chip that reads a thermal sensor (`ThermalController`).
    pub enum ThermalController: i32 {
        /// No controller.
        None = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_NONE.0 => "none",
        /// The GPU's own sensor.
        GpuInternal = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_GPU_INTERNAL.0 => "gpu_internal",
        /// An external ADM1032 sensor chip.
        Adm1032 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_ADM1032.0 => "adm1032",
        /// An external ADT7461 sensor chip.
        Adt7461 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_ADT7461.0 => "adt7461",
        /// An external MAX6649 sensor chip.
        Max6649 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_MAX6649.0 => "max6649",
        /// An external MAX1617 sensor chip.
        Max1617 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_MAX1617.0 => "max1617",
        /// An external LM99 sensor chip.
        Lm99 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_LM99.0 => "lm99",
        /// An external LM89 sensor chip.
        Lm89 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_LM89.0 => "lm89",
        /// An external LM64 sensor chip.
        Lm64 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_LM64.0 => "lm64",
        /// An external G781 sensor chip.
        G781 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_G781.0 => "g781",
        /// An external ADT7473 sensor chip.
        Adt7473 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_ADT7473.0 => "adt7473",
        /// An external SBMAX6649 sensor chip.
        Sbmax6649 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_SBMAX6649.0 => "sbmax6649",
        /// The VBIOS event controller.
        Vbiosevt = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_VBIOSEVT.0 => "vbiosevt",
        /// The operating system.
        Os = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_OS.0 => "os",
        /// The NVSYSCON Canoas controller.
        NvsysconCanoas = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_NVSYSCON_CANOAS.0 => "nvsyscon_canoas",
        /// The NVSYSCON E551 controller.
        NvsysconE551 = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_NVSYSCON_E551.0 => "nvsyscon_e551",
        /// An external MAX6649R sensor chip.
        Max6649r = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_MAX6649R.0 => "max6649r",
        /// An external ADT7473S sensor chip.
        Adt7473s = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_ADT7473S.0 => "adt7473s",
        /// An unknown controller.
        Unknown = nvml::nvmlThermalController_t::NVML_THERMAL_CONTROLLER_UNKNOWN.0 => "unknown",
    }
}

nvml_enum! {
    /// How a fan is driven (`FanControlPolicy`).
    pub enum FanControlPolicy: u32 {
        /// The driver sets the speed from the temperature.
        TemperatureControlled = nvml::NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW => "temperature_controlled",
        /// The speed was set by hand ([`super::FanInfo::set_speed`]).
        Manual = nvml::NVML_FAN_POLICY_MANUAL => "manual",
    }
}

nvml_enum! {
    /// How a cooler is controlled (`CoolerControl`).
    pub enum CoolerControl: u32 {
        /// No control signal.
        None = nvml::nvmlCoolerControl_enum::NVML_THERMAL_COOLER_SIGNAL_NONE.0 => "none",
        /// On or off (a switch).
        Toggle = nvml::nvmlCoolerControl_enum::NVML_THERMAL_COOLER_SIGNAL_TOGGLE.0 => "toggle",
        /// Adjustable between a minimum and a maximum (a knob).
        Variable = nvml::nvmlCoolerControl_enum::NVML_THERMAL_COOLER_SIGNAL_VARIABLE.0 => "variable",
    }
}

bitflags::bitflags! {
    /// What a cooler cools (`CoolerTarget`; NVML's "GPU related" is all three).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CoolerTarget: u32 {
        /// Cools the GPU.
        const GPU = nvml::nvmlCoolerTarget_enum::NVML_THERMAL_COOLER_TARGET_GPU.0;
        /// Cools the memory.
        const MEMORY = nvml::nvmlCoolerTarget_enum::NVML_THERMAL_COOLER_TARGET_MEMORY.0;
        /// Cools the power supply.
        const POWER_SUPPLY = nvml::nvmlCoolerTarget_enum::NVML_THERMAL_COOLER_TARGET_POWER_SUPPLY.0;
        const _ = !0;
    }
}

nvml_enum! {
    /// How system-allocated memory is addressable from the device (`AddressingMode`).
    pub enum AddressingMode: u32 {
        /// Neither: `malloc`ed memory is not addressable from the device.
        None = nvml::nvmlDeviceAddressingModeType_t::NVML_DEVICE_ADDRESSING_MODE_NONE.0 => "none",
        /// Heterogeneous memory management: the driver mirrors the CPU's page tables.
        Hmm = nvml::nvmlDeviceAddressingModeType_t::NVML_DEVICE_ADDRESSING_MODE_HMM.0 => "hmm",
        /// Address translation services: CPU and GPU share one set of page tables.
        Ats = nvml::nvmlDeviceAddressingModeType_t::NVML_DEVICE_ADDRESSING_MODE_ATS.0 => "ats",
    }
}

/// The scope of an affinity query (`AffinityScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AffinityScope {
    /// NUMA nodes (the default).
    #[default]
    Node,
    /// CPU sockets.
    Socket,
}

impl AffinityScope {
    pub(super) fn raw(self) -> nvml::nvmlAffinityScope_t {
        match self {
            AffinityScope::Node => nvml::NVML_AFFINITY_SCOPE_NODE,
            AffinityScope::Socket => nvml::NVML_AFFINITY_SCOPE_SOCKET,
        }
    }
}

nvml_enum! {
    /// An InfoROM object (`InforomObject`).
    pub enum InforomObject: u32 {
        /// Defined by the OEM.
        Oem = nvml::nvmlInforomObject_enum::NVML_INFOROM_OEM.0 => "oem",
        /// ECC support.
        Ecc = nvml::nvmlInforomObject_enum::NVML_INFOROM_ECC.0 => "ecc",
        /// Power management.
        Power = nvml::nvmlInforomObject_enum::NVML_INFOROM_POWER.0 => "power",
        /// DRAM encryption.
        Den = nvml::nvmlInforomObject_enum::NVML_INFOROM_DEN.0 => "den",
    }
}

nvml_enum! {
    /// Where a device draws its power from.
    pub enum PowerSource: u32 {
        /// Mains (AC) power.
        Ac = nvml::NVML_POWER_SOURCE_AC => "ac",
        /// A battery.
        Battery = nvml::NVML_POWER_SOURCE_BATTERY => "battery",
        /// A power supply too small for the device.
        Undersized = nvml::NVML_POWER_SOURCE_UNDERSIZED => "undersized",
    }
}

/// A performance state, from P0 (the most performance) to P15 (the least).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pstate(u8);

impl Pstate {
    /// P0, the highest performance state.
    pub const P0: Pstate = Pstate(0);

    /// Performance state `n` (0 to 15).
    pub fn new(n: u32) -> Result<Pstate> {
        if n > 15 {
            return Err(CudaError::InvalidArgument(format!(
                "Invalid P-state: {n}. Must be between 0 and 15 inclusive."
            )));
        }
        Ok(Pstate(n as u8))
    }

    /// The state's number: 0 for P0.
    pub fn number(self) -> u32 {
        self.0 as u32
    }

    /// The state NVML reports (`None` for `NVML_PSTATE_UNKNOWN` or a value past P15).
    pub(super) fn from_raw(raw: nvml::nvmlPstates_t) -> Option<Pstate> {
        let n = raw.0.checked_sub(nvml::nvmlPStates_enum::NVML_PSTATE_0.0)?;
        (n <= 15).then_some(Pstate(n as u8))
    }

    pub(super) fn raw(self) -> nvml::nvmlPstates_t {
        nvml::nvmlPStates_enum(nvml::nvmlPStates_enum::NVML_PSTATE_0.0 + self.0 as u32)
    }
}

impl std::fmt::Display for Pstate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "P{}", self.0)
    }
}

bitflags::bitflags! {
    /// Why the clocks are below their maximum (`ClocksEventReasons`); empty when nothing holds
    /// them back. Bits these bindings do not name are kept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ClocksEventReasons: u64 {
        /// Nothing runs on the GPU.
        const GPU_IDLE = nvml::nvmlClocksEventReasonGpuIdle as u64;
        /// Application clocks are set below the maximum.
        const APPLICATIONS_CLOCKS_SETTING = nvml::nvmlClocksEventReasonApplicationsClocksSetting as u64;
        /// The software power cap.
        const SW_POWER_CAP = nvml::nvmlClocksEventReasonSwPowerCap as u64;
        /// A hardware slowdown (temperature, power brake, power supply).
        const HW_SLOWDOWN = nvml::nvmlClocksThrottleReasonHwSlowdown as u64;
        /// Synchronised boost with other GPUs.
        const SYNC_BOOST = nvml::nvmlClocksEventReasonSyncBoost as u64;
        /// The software thermal slowdown.
        const SW_THERMAL_SLOWDOWN = nvml::nvmlClocksEventReasonSwThermalSlowdown as u64;
        /// The hardware thermal slowdown.
        const HW_THERMAL_SLOWDOWN = nvml::nvmlClocksThrottleReasonHwThermalSlowdown as u64;
        /// The hardware power brake.
        const HW_POWER_BRAKE_SLOWDOWN = nvml::nvmlClocksThrottleReasonHwPowerBrakeSlowdown as u64;
        /// A display clock setting.
        const DISPLAY_CLOCK_SETTING = nvml::nvmlClocksEventReasonDisplayClockSetting as u64;
        /// A board limit.
        const BOARD_LIMIT = nvml::nvmlClocksEventReasonBoardLimit as u64;
        /// Reliability.
        const RELIABILITY = nvml::nvmlClocksEventReasonReliability as u64;
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// Device events to wait for (`EventType`); [`super::Device::register_events`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct EventType: u64 {
        /// A corrected (single-bit) ECC error.
        const SINGLE_BIT_ECC_ERROR = nvml::nvmlEventTypeSingleBitEccError as u64;
        /// An uncorrected (double-bit) ECC error.
        const DOUBLE_BIT_ECC_ERROR = nvml::nvmlEventTypeDoubleBitEccError as u64;
        /// A performance state change.
        const PSTATE = nvml::nvmlEventTypePState as u64;
        /// A critical Xid error (the event's data is the Xid).
        const XID_CRITICAL_ERROR = nvml::nvmlEventTypeXidCriticalError as u64;
        /// A clock change.
        const CLOCK = nvml::nvmlEventTypeClock as u64;
        /// A change of power source (AC or battery).
        const POWER_SOURCE_CHANGE = nvml::nvmlEventTypePowerSourceChange as u64;
        /// A change of the MIG configuration.
        const MIG_CONFIG_CHANGE = nvml::nvmlEventMigConfigChange as u64;
        /// A storm of corrected ECC errors.
        const SINGLE_BIT_ECC_ERROR_STORM = nvml::nvmlEventTypeSingleBitEccErrorStorm as u64;
        /// A DRAM page was retired.
        const DRAM_RETIREMENT_EVENT = nvml::nvmlEventTypeDramRetirementEvent as u64;
        /// A DRAM page could not be retired.
        const DRAM_RETIREMENT_FAILURE = nvml::nvmlEventTypeDramRetirementFailure as u64;
        /// A non-fatal poison (contained uncorrectable memory) error.
        const NON_FATAL_POISON_ERROR = nvml::nvmlEventTypeNonFatalPoisonError as u64;
        /// A fatal poison error.
        const FATAL_POISON_ERROR = nvml::nvmlEventTypeFatalPoisonError as u64;
        /// The GPU became unavailable.
        const GPU_UNAVAILABLE_ERROR = nvml::nvmlEventTypeGpuUnavailableError as u64;
        /// The driver asks for a recovery action (see the event's data).
        const GPU_RECOVERY_ACTION = nvml::nvmlEventTypeGpuRecoveryAction as u64;
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// System events to wait for (`SystemEventType`); [`super::register_events`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SystemEventType: u64 {
        /// A GPU was unbound from the driver.
        const UNBIND = nvml::nvmlSystemEventTypeGpuDriverUnbind as u64;
        /// A GPU was bound to the driver.
        const BIND = nvml::nvmlSystemEventTypeGpuDriverBind as u64;
        const _ = !0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_and_keep_unknown_values() {
        assert_eq!(GpuTopologyLevel::from_raw(30), GpuTopologyLevel::Hostbridge);
        assert_eq!(GpuTopologyLevel::from_raw(35), GpuTopologyLevel::Other(35));
        assert_eq!(GpuTopologyLevel::Other(35).raw(), 35);
        assert_eq!(
            GpuP2PStatus::IohTopologyNotSupported.to_string(),
            "IOH topology not supported"
        );
        assert_eq!(BrandType::from_raw(2).to_string(), "Tesla");
        assert_eq!(DeviceArch::from_raw(9), DeviceArch::Hopper);
        assert_eq!(DeviceArch::from_raw(u32::MAX), DeviceArch::Unknown);
        assert_eq!(ThermalTarget::from_raw(-1), ThermalTarget::Unknown);
        assert_eq!(ClockType::Memory.raw(), nvml::nvmlClockType_enum::NVML_CLOCK_MEM.0);
        // As arguments: named values pass, unnamed ones and "unknown" placeholders do not.
        assert_eq!(ThermalTarget::All.input().unwrap(), 15);
        assert!(ThermalTarget::Unknown.input().is_err());
        assert!(GpuP2PCapsIndex::Unknown.input().is_err());
        assert!(ClockType::Other(77).input().is_err());
        assert_eq!(ClockType::Other(1).input().unwrap(), ClockType::Sm.raw());
        assert!(GpuTopologyLevel::Other(35).input().is_err());
        assert!(InforomObject::Other(9).input().is_err());
        assert!(TemperatureThresholds::Other(99).input().is_err());
        assert!(ClockId::Other(7).input().is_err());
        assert_eq!(ClockId::Other(3), ClockId::CustomerBoostMax);
    }

    #[test]
    fn pstates() {
        assert_eq!(Pstate::new(3).unwrap().to_string(), "P3");
        assert!(Pstate::new(16).unwrap_err().to_string().contains("between 0 and 15"));
        let p = Pstate::new(15).unwrap();
        assert_eq!(Pstate::from_raw(p.raw()), Some(p));
        assert_eq!(Pstate::from_raw(nvml::nvmlPStates_enum::NVML_PSTATE_UNKNOWN), None);
    }

    #[test]
    fn flags_keep_unnamed_bits() {
        let reasons = ClocksEventReasons::from_bits_retain(1 | (1 << 40));
        assert!(reasons.contains(ClocksEventReasons::GPU_IDLE));
        assert_eq!(reasons.bits(), 1 | (1 << 40));
        assert_eq!(
            EventType::PSTATE | EventType::CLOCK,
            EventType::from_bits_retain((nvml::nvmlEventTypePState | nvml::nvmlEventTypeClock) as u64)
        );
    }
}
