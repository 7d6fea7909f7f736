//! Where a device sits: CPU and memory affinity, the PCIe/NUMA topology between devices, their
//! peer-to-peer status, and NVLink (`NvlinkInfo`).

use super::common::{bits_of, c_string, init, nvml_enum};
use super::device::Device;
use super::types::{AffinityScope, GpuP2PCapsIndex, GpuP2PStatus, GpuTopologyLevel};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::nvml;
use std::ffi::c_ulong;

/// Words of a CPU or NUMA-node bitmask big enough for this machine (at least 1024 bits), and
/// that count as NVML takes it.
fn mask_words() -> Result<(usize, u32)> {
    // SAFETY: sysconf has no preconditions.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let cpus = usize::try_from(configured).unwrap_or(0).max(1024);
    let words = cpus.div_ceil(c_ulong::BITS as usize);
    let n = u32::try_from(words)
        .map_err(|_| CudaError::InvalidArgument(format!("{cpus} CPUs are more than an affinity mask can hold")))?;
    Ok((words, n))
}

impl Device {
    /// The NUMA nodes (or CPU sockets) with the best memory affinity to the device (Linux).
    /// Where the scope does not apply to the topology, NVML reports the nearest non-I/O
    /// ancestor's.
    pub fn get_memory_affinity(&self, scope: AffinityScope) -> Result<Vec<u32>> {
        let (words, n) = mask_words()?;
        let mut set: Vec<c_ulong> = vec![0; words];
        // SAFETY: `call` passes a live handle; the array holds `n` words, as NVML is told.
        self.call("nvmlDeviceGetMemoryAffinity", |h| unsafe {
            nvml::nvmlDeviceGetMemoryAffinity(h, n, set.as_mut_ptr(), scope.raw())
        })?;
        Ok(bits_of(&set))
    }

    /// The CPUs (by index) with the best affinity to the device within a scope (Linux).
    pub fn get_cpu_affinity(&self, scope: AffinityScope) -> Result<Vec<u32>> {
        let (words, n) = mask_words()?;
        let mut set: Vec<c_ulong> = vec![0; words];
        // SAFETY: `call` passes a live handle; the array holds `n` words, as NVML is told.
        self.call("nvmlDeviceGetCpuAffinityWithinScope", |h| unsafe {
            nvml::nvmlDeviceGetCpuAffinityWithinScope(h, n, set.as_mut_ptr(), scope.raw())
        })?;
        Ok(bits_of(&set))
    }

    /// Binds the calling thread to the CPUs with the best affinity to the device (Linux).
    pub fn set_cpu_affinity(&self) -> Result<()> {
        // SAFETY: `call` passes a live handle.
        self.call("nvmlDeviceSetCpuAffinity", |h| unsafe {
            nvml::nvmlDeviceSetCpuAffinity(h)
        })
    }

    /// Clears the calling thread's CPU binding (Linux).
    pub fn clear_cpu_affinity(&self) -> Result<()> {
        // SAFETY: `call` passes a live handle.
        self.call("nvmlDeviceClearCpuAffinity", |h| unsafe {
            nvml::nvmlDeviceClearCpuAffinity(h)
        })
    }

    /// The devices with affinity to CPU `cpu` (`Device.get_all_devices_with_cpu_affinity`; Linux).
    pub fn get_all_devices_with_cpu_affinity(cpu: u32) -> Result<Vec<Device>> {
        init()?;
        Device::handles("nvmlSystemGetTopologyGpuSet", |count, array| {
            // SAFETY: `handles` passes a live count and an array of that many handles (or null
            // with a count of 0, which asks for the count).
            unsafe { nvml::nvmlSystemGetTopologyGpuSet(cpu, count, array) }
        })
    }

    /// The devices connected to this one at `level` or nearer (Linux).
    pub fn get_topology_nearest_gpus(&self, level: GpuTopologyLevel) -> Result<Vec<Device>> {
        let (handle, level) = (self.handle(), nvml::nvmlGpuLevel_enum(level.input()?));
        Device::handles("nvmlDeviceGetTopologyNearestGpus", |count, array| {
            // SAFETY: a live handle; `handles` passes a live count and an array of that many
            // handles (or null with a count of 0, which asks for the count).
            unsafe { nvml::nvmlDeviceGetTopologyNearestGpus(handle, level, count, array) }
        })
    }

    /// NVLink `link` of the device (`get_nvlink(link)`; below [`NvlinkInfo::MAX_LINKS`]).
    pub fn get_nvlink(&self, link: u32) -> Result<NvlinkInfo> {
        if link >= NvlinkInfo::MAX_LINKS {
            return Err(CudaError::InvalidArgument(format!(
                "link must be below {} (NVML_NVLINK_MAX_LINKS), got {link}",
                NvlinkInfo::MAX_LINKS
            )));
        }
        Ok(NvlinkInfo { device: *self, link })
    }

    /// How many NVLinks the device has (`get_nvlink_count`; the field
    /// `NVML_FI_DEV_NVLINK_LINK_COUNT`). NVML's refusal (a device without NVLink, or one that
    /// does not report the field) is the error.
    pub fn get_nvlink_count(&self) -> Result<u32> {
        let values = self.get_field_values(&[super::FieldId::DEV_NVLINK_LINK_COUNT])?;
        let Some(reading) = values.get(0) else {
            return Err(CudaError::InvalidState(
                "nvmlDeviceGetFieldValues returned no reading for NVML_FI_DEV_NVLINK_LINK_COUNT".into(),
            ));
        };
        let count = reading.value()?.as_integer().unwrap_or(-1);
        u32::try_from(count)
            .ok()
            .filter(|&n| n <= NvlinkInfo::MAX_LINKS)
            .ok_or_else(|| {
                CudaError::InvalidState(format!(
                    "NVML reported {count} NVLinks, outside 0..={}",
                    NvlinkInfo::MAX_LINKS
                ))
            })
    }

    /// The device's NVLinks, one per link counted by [`get_nvlink_count`](Self::get_nvlink_count)
    /// (`get_nvlinks`).
    pub fn get_nvlinks(&self) -> Result<Vec<NvlinkInfo>> {
        (0..self.get_nvlink_count()?)
            .map(|link| self.get_nvlink(link))
            .collect()
    }
}

/// How closely two devices are connected (`get_topology_common_ancestor`; Linux).
pub fn get_topology_common_ancestor(device1: &Device, device2: &Device) -> Result<GpuTopologyLevel> {
    let mut level = nvml::nvmlGpuLevel_enum(0);
    // SAFETY: two live handles and a live out-pointer.
    unsafe { nvml::nvmlDeviceGetTopologyCommonAncestor(device1.handle(), device2.handle(), &mut level) }
        .check("nvmlDeviceGetTopologyCommonAncestor")?;
    Ok(GpuTopologyLevel::from_raw(level.0))
}

/// The peer-to-peer status of two devices for one capability (`get_p2p_status`;
/// [`GpuP2PCapsIndex::Unknown`] and values the headers do not define are `InvalidArgument`).
pub fn get_p2p_status(device1: &Device, device2: &Device, index: GpuP2PCapsIndex) -> Result<GpuP2PStatus> {
    let mut status = nvml::nvmlGpuP2PStatus_enum(0);
    let index = nvml::nvmlGpuP2PCapsIndex_enum(index.input()?);
    // SAFETY: two live handles, a capability index and a live out-pointer.
    unsafe { nvml::nvmlDeviceGetP2PStatus(device1.handle(), device2.handle(), index, &mut status) }
        .check("nvmlDeviceGetP2PStatus")?;
    Ok(GpuP2PStatus::from_raw(status.0))
}

nvml_enum! {
    /// An NVLink version; [`NvlinkVersion::major_minor`] gives `cuda.core`'s `(major, minor)`.
    pub enum NvlinkVersion: u32 {
        /// No valid version (the link is not active or not present).
        Invalid = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_INVALID.0 => "invalid",
        /// NVLink 1.0 (Pascal).
        V1_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_1_0.0 => "1.0",
        /// NVLink 2.0 (Volta).
        V2_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_2_0.0 => "2.0",
        /// NVLink 2.2 (Volta, NVSwitch systems).
        V2_2 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_2_2.0 => "2.2",
        /// NVLink 3.0 (Ampere).
        V3_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_3_0.0 => "3.0",
        /// NVLink 3.1 (Ampere).
        V3_1 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_3_1.0 => "3.1",
        /// NVLink 4.0 (Hopper).
        V4_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_4_0.0 => "4.0",
        /// NVLink 5.0 (Blackwell).
        V5_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_5_0.0 => "5.0",
        /// NVLink 6.0 (Rubin).
        V6_0 = nvml::nvmlNvlinkVersion_enum::NVML_NVLINK_VERSION_6_0.0 => "6.0",
    }
}

impl NvlinkVersion {
    /// `(major, minor)`; `None` for [`NvlinkVersion::Invalid`] and values these bindings do not
    /// name.
    pub fn major_minor(self) -> Option<(u32, u32)> {
        let (major, minor) = self.name().split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }
}

/// One NVLink of a device (`NvlinkInfo`), from [`Device::get_nvlink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvlinkInfo {
    device: Device,
    link: u32,
}

impl NvlinkInfo {
    /// The most links a device can have (`NvlinkInfo.max_links`, `NVML_NVLINK_MAX_LINKS`).
    pub const MAX_LINKS: u32 = nvml::NVML_NVLINK_MAX_LINKS;

    /// The link's index.
    pub fn link(&self) -> u32 {
        self.link
    }

    /// The link's NVLink version.
    pub fn version(&self) -> Result<NvlinkVersion> {
        let link = self.link;
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        let raw = self.device.get("nvmlDeviceGetNvLinkVersion", |h, p| unsafe {
            nvml::nvmlDeviceGetNvLinkVersion(h, link, p)
        })?;
        Ok(NvlinkVersion::from_raw(raw))
    }

    /// Whether the link is active (`state`).
    pub fn is_active(&self) -> Result<bool> {
        let link = self.link;
        self.device.enable_state("nvmlDeviceGetNvLinkState", |h, p| {
            // SAFETY: a live handle and a pointer to the state NVML writes.
            unsafe { nvml::nvmlDeviceGetNvLinkState(h, link, p) }
        })
    }

    /// The PCI bus id of the device at the other end of the link.
    pub fn remote_pci_bus_id(&self) -> Result<String> {
        let link = self.link;
        // SAFETY: `get` passes a live handle and a pointer to the structure NVML fills.
        let pci: nvml::nvmlPciInfo_t = self.device.get("nvmlDeviceGetNvLinkRemotePciInfo_v2", |h, p| unsafe {
            nvml::nvmlDeviceGetNvLinkRemotePciInfo(h, link, p)
        })?;
        Ok(c_string(&pci.busId))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvlink_versions() {
        assert_eq!(NvlinkVersion::from_raw(6).major_minor(), Some((4, 0)));
        assert_eq!(NvlinkVersion::V2_2.major_minor(), Some((2, 2)));
        assert_eq!(NvlinkVersion::Invalid.major_minor(), None);
        assert_eq!(NvlinkVersion::from_raw(99), NvlinkVersion::Other(99));
        assert_eq!(NvlinkVersion::Other(99).major_minor(), None);
        let (words, n) = mask_words().unwrap();
        assert!(words * c_ulong::BITS as usize >= 1024 && n as usize == words);
    }
}
