//! Device memory and BAR1 memory (`Device.memory_info`, `Device.bar1_memory_info`), and PCI
//! (`Device.pci_info`).

use super::common::{c_string, struct_version};
use super::device::Device;
use crate::Result;
use cuda_sys::nvml;

/// Device memory, in bytes (`MemoryInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryInfo {
    /// Not allocated.
    pub free: u64,
    /// Physical memory.
    pub total: u64,
    /// Allocated, including what is reserved.
    pub used: u64,
    /// Set aside for the driver and firmware.
    pub reserved: u64,
}

/// BAR1 memory, in bytes (`BAR1MemoryInfo`): the window through which the CPU and peer devices
/// reach device memory over PCIe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bar1MemoryInfo {
    /// Not mapped.
    pub free: u64,
    /// The size of the BAR1 window.
    pub total: u64,
    /// Mapped.
    pub used: u64,
}

/// A device's PCI identity (`PciInfo`). The link's state is read on demand:
/// [`Device::pcie_link`], [`Device::pcie_throughput`], [`Device::pcie_replay_counter`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PciInfo {
    /// `domain:bus:device.function`, as NVML writes it (`00000000:01:00.0`).
    pub bus_id: String,
    /// The PCI domain (segment).
    pub domain: u32,
    /// The bus number.
    pub bus: u32,
    /// The device number on the bus.
    pub device: u32,
    /// The vendor id (the low 16 bits of NVML's combined id; `0x10de` for NVIDIA).
    pub vendor_id: u16,
    /// The device id (the high 16 bits of NVML's combined id).
    pub device_id: u16,
    /// The subsystem id, as NVML reports it (subsystem device and vendor ids combined).
    pub subsystem_id: u32,
    /// The 8-bit PCI base class code.
    pub base_class: u32,
    /// The 8-bit PCI sub class code.
    pub sub_class: u32,
}

/// The PCIe link: generation and width, possible and current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PcieLink {
    /// The highest generation this device and system can run together.
    pub max_generation: u32,
    /// The highest generation the GPU itself supports.
    pub gpu_max_generation: u32,
    /// The widest link this device and system can run together.
    pub max_width: u32,
    /// The generation the link runs at now (it may drop when idle, to save power).
    pub current_generation: u32,
    /// The lanes the link uses now.
    pub current_width: u32,
}

/// PCIe traffic in KB/s, over a 20 ms window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PcieThroughput {
    /// Received by the device, in KB/s.
    pub rx_kb_per_s: u32,
    /// Sent by the device, in KB/s.
    pub tx_kb_per_s: u32,
}

impl Device {
    /// Device memory: free, total, used and reserved (`nvmlDeviceGetMemoryInfo_v2`).
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let mut m = nvml::nvmlMemory_v2_t {
            version: struct_version::<nvml::nvmlMemory_v2_t>(2),
            ..Default::default()
        };
        // SAFETY: `call` passes a live handle; `m` is a versioned structure NVML fills.
        self.call("nvmlDeviceGetMemoryInfo_v2", |h| unsafe {
            nvml::nvmlDeviceGetMemoryInfo_v2(h, &mut m)
        })?;
        Ok(MemoryInfo {
            free: m.free,
            total: m.total,
            used: m.used,
            reserved: m.reserved,
        })
    }

    /// BAR1 memory: free, total and used.
    pub fn bar1_memory_info(&self) -> Result<Bar1MemoryInfo> {
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let m: nvml::nvmlBAR1Memory_t = self.get("nvmlDeviceGetBAR1MemoryInfo", |h, p| unsafe {
            nvml::nvmlDeviceGetBAR1MemoryInfo(h, p)
        })?;
        Ok(Bar1MemoryInfo {
            free: m.bar1Free,
            total: m.bar1Total,
            used: m.bar1Used,
        })
    }

    /// The PCI identity (`nvmlDeviceGetPciInfoExt`; MIG devices have none).
    pub fn pci_info(&self) -> Result<PciInfo> {
        let mut p = nvml::nvmlPciInfoExt_t {
            version: struct_version::<nvml::nvmlPciInfoExt_t>(1),
            ..Default::default()
        };
        // SAFETY: `call` passes a live handle; `p` is a versioned structure NVML fills.
        self.call("nvmlDeviceGetPciInfoExt", |h| unsafe {
            nvml::nvmlDeviceGetPciInfoExt(h, &mut p)
        })?;
        Ok(PciInfo {
            bus_id: c_string(&p.busId),
            domain: p.domain,
            bus: p.bus,
            device: p.device,
            vendor_id: (p.pciDeviceId & 0xffff) as u16,
            device_id: (p.pciDeviceId >> 16) as u16,
            subsystem_id: p.pciSubSystemId,
            base_class: p.baseClass,
            sub_class: p.subClass,
        })
    }

    /// The PCIe link's generations and widths.
    pub fn pcie_link(&self) -> Result<PcieLink> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        let max_generation = self.get("nvmlDeviceGetMaxPcieLinkGeneration", |h, p| unsafe {
            nvml::nvmlDeviceGetMaxPcieLinkGeneration(h, p)
        })?;
        // SAFETY: as above.
        let gpu_max_generation = self.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", |h, p| unsafe {
            nvml::nvmlDeviceGetGpuMaxPcieLinkGeneration(h, p)
        })?;
        // SAFETY: as above.
        let max_width = self.get("nvmlDeviceGetMaxPcieLinkWidth", |h, p| unsafe {
            nvml::nvmlDeviceGetMaxPcieLinkWidth(h, p)
        })?;
        // SAFETY: as above.
        let current_generation = self.get("nvmlDeviceGetCurrPcieLinkGeneration", |h, p| unsafe {
            nvml::nvmlDeviceGetCurrPcieLinkGeneration(h, p)
        })?;
        // SAFETY: as above.
        let current_width = self.get("nvmlDeviceGetCurrPcieLinkWidth", |h, p| unsafe {
            nvml::nvmlDeviceGetCurrPcieLinkWidth(h, p)
        })?;
        Ok(PcieLink {
            max_generation,
            gpu_max_generation,
            max_width,
            current_generation,
            current_width,
        })
    }

    /// PCIe traffic received and sent, in KB/s over a 20 ms window (the call takes that long).
    pub fn pcie_throughput(&self) -> Result<PcieThroughput> {
        use nvml::nvmlPcieUtilCounter_enum as C;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        let rx_kb_per_s = self.get("nvmlDeviceGetPcieThroughput", |h, p| unsafe {
            nvml::nvmlDeviceGetPcieThroughput(h, C::NVML_PCIE_UTIL_RX_BYTES, p)
        })?;
        // SAFETY: as above.
        let tx_kb_per_s = self.get("nvmlDeviceGetPcieThroughput", |h, p| unsafe {
            nvml::nvmlDeviceGetPcieThroughput(h, C::NVML_PCIE_UTIL_TX_BYTES, p)
        })?;
        Ok(PcieThroughput {
            rx_kb_per_s,
            tx_kb_per_s,
        })
    }

    /// The PCIe replay counter.
    pub fn pcie_replay_counter(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.get("nvmlDeviceGetPcieReplayCounter", |h, p| unsafe {
            nvml::nvmlDeviceGetPcieReplayCounter(h, p)
        })
    }
}
