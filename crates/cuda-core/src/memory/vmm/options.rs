//! [`VirtualMemoryResourceOptions`] and its enums (`cuda.core`'s `VirtualMemoryResourceOptions`
//! and the `VirtualMemory*Type` names of `cuda.core.typing`), their checks that need no device,
//! and their translation into the driver's structures.
//!
//! `cuda.core` takes strings and refuses unknown ones at run time ("Unknown access spec",
//! "Unsupported allocation_type", ...); here each choice is an enum, so those errors cannot be
//! written.

use crate::device::Device;
use crate::memory::{device_location, location};
use crate::{CudaError, Result};
use cuda_sys::driver;

/// What kind of physical memory backs the mappings (`cuda.core`'s `allocation_type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMemoryAllocationType {
    /// Pinned (non-migratable) memory: `CU_MEM_ALLOCATION_TYPE_PINNED`.
    #[default]
    Pinned,
    /// Managed memory: `CU_MEM_ALLOCATION_TYPE_MANAGED` (drivers of CUDA 13 and later).
    Managed,
}

/// Where the physical memory lies (`cuda.core`'s `location_type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMemoryLocationType {
    /// On the resource's device.
    #[default]
    Device,
    /// In host memory, on no particular NUMA node. Such memory cannot be exported
    /// (`handle_type` must be `None`).
    Host,
    /// In host memory on this NUMA node (`cuda.core` passes no node, which the driver needs).
    HostNuma(u32),
    /// In host memory on the NUMA node of the CPU the allocating thread runs on. The driver
    /// refuses this location for `cuMemCreate`, so each allocation asks the kernel for that node
    /// (`getcpu`) and allocates there as [`HostNuma`](Self::HostNuma).
    HostNumaCurrent,
}

impl VirtualMemoryLocationType {
    /// Whether the memory lies in host memory.
    pub fn is_host(self) -> bool {
        !matches!(self, VirtualMemoryLocationType::Device)
    }

    /// The name `cuda.core` gives it.
    pub(super) fn name(self) -> &'static str {
        match self {
            VirtualMemoryLocationType::Device => "device",
            VirtualMemoryLocationType::Host => "host",
            VirtualMemoryLocationType::HostNuma(_) => "host_numa",
            VirtualMemoryLocationType::HostNumaCurrent => "host_numa_current",
        }
    }

    /// The location type of the memory the driver reports for allocations made here.
    pub(super) fn driver_type(self) -> driver::CUmemLocationType {
        use driver::CUmemLocationType as L;
        match self {
            VirtualMemoryLocationType::Device => L::CU_MEM_LOCATION_TYPE_DEVICE,
            VirtualMemoryLocationType::Host => L::CU_MEM_LOCATION_TYPE_HOST,
            VirtualMemoryLocationType::HostNuma(_) | VirtualMemoryLocationType::HostNumaCurrent => {
                L::CU_MEM_LOCATION_TYPE_HOST_NUMA
            }
        }
    }
}

/// How the physical memory can be shared with other processes (`cuda.core`'s `handle_type`;
/// `None` in the options for memory that cannot be shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMemoryHandleType {
    /// POSIX file descriptors (Linux): what [`VirtualMemoryIpcDescriptor`](super::VirtualMemoryIpcDescriptor)
    /// carries.
    PosixFd,
    /// Fabric handles (IMEX domains, across nodes). Allocations can request it; this crate has
    /// no fabric export yet.
    Fabric,
    /// Windows NT handles: refused (this crate runs on Linux).
    Win32,
    /// Windows KMT handles: refused (this crate runs on Linux).
    Win32Kmt,
}

impl VirtualMemoryHandleType {
    fn driver(self) -> driver::CUmemAllocationHandleType {
        use driver::CUmemAllocationHandleType as H;
        match self {
            VirtualMemoryHandleType::PosixFd => H::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            VirtualMemoryHandleType::Fabric => H::CU_MEM_HANDLE_TYPE_FABRIC,
            VirtualMemoryHandleType::Win32 => H::CU_MEM_HANDLE_TYPE_WIN32,
            VirtualMemoryHandleType::Win32Kmt => H::CU_MEM_HANDLE_TYPE_WIN32_KMT,
        }
    }
}

/// Which granularity sizes round up to (`cuda.core`'s `granularity`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMemoryGranularityType {
    /// The driver's recommended granularity (better performance).
    #[default]
    Recommended,
    /// The smallest granularity the driver accepts.
    Minimum,
}

impl VirtualMemoryGranularityType {
    pub(super) fn driver(self) -> driver::CUmemAllocationGranularity_flags {
        use driver::CUmemAllocationGranularity_flags as G;
        match self {
            VirtualMemoryGranularityType::Recommended => G::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            VirtualMemoryGranularityType::Minimum => G::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        }
    }
}

/// What a mapping lets a device (or the host) do (`cuda.core`'s `"rw"` and `"r"`; `None` in the
/// options grants nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMemoryAccessType {
    /// Read and write (`"rw"`, `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`).
    ReadWrite,
    /// Read only (`"r"`, `CU_MEM_ACCESS_FLAGS_PROT_READ`).
    Read,
}

impl VirtualMemoryAccessType {
    fn driver(self) -> driver::CUmemAccess_flags {
        match self {
            VirtualMemoryAccessType::ReadWrite => driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            VirtualMemoryAccessType::Read => driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
        }
    }
}

/// Options of a [`VirtualMemoryResource`](super::VirtualMemoryResource), with `cuda.core`'s
/// defaults: pinned device memory exportable as POSIX file descriptors, sizes rounded to the
/// recommended granularity, read-write access for the owner and the peers.
///
/// Checked when the resource is made (and, for a growth's own options, when it grows): see
/// [`VirtualMemoryResource::new`](super::VirtualMemoryResource::new).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct VirtualMemoryResourceOptions {
    /// The kind of physical memory (default pinned).
    pub allocation_type: VirtualMemoryAllocationType,
    /// Where the memory lies (default the resource's device). Host locations have no device
    /// (`device()` is `None`); the host reaches them directly when `self_access` is read-write,
    /// and devices through `peers`: without a read-write peer, fills and copies into the memory
    /// (which the device runs) are refused, and copies out of it too unless a peer may read it.
    pub location_type: VirtualMemoryLocationType,
    /// How the memory can be shared with other processes; `None` for not at all (default
    /// [`VirtualMemoryHandleType::PosixFd`], as `cuda.core`).
    pub handle_type: Option<VirtualMemoryHandleType>,
    /// The granularity sizes round up to (default recommended).
    pub granularity: VirtualMemoryGranularityType,
    /// Ask for memory usable by GPUDirect RDMA; refused where the device cannot.
    pub gpu_direct_rdma: bool,
    /// Where to try to reserve addresses (`None`: where the driver likes). A multiple of the
    /// reservation's alignment.
    pub addr_hint: Option<driver::CUdeviceptr>,
    /// The alignment of address reservations (`None`: the granularity). A power of two and a
    /// multiple of the granularity.
    pub addr_align: Option<usize>,
    /// Devices granted `peer_access` besides the owner (not the resource's own device).
    #[serde(with = "peer_ordinals")]
    pub peers: Vec<Device>,
    /// What the owner (the device, or the host for host locations) may do; `None` grants
    /// nothing. Anything but read-write makes the resource report its memory as not
    /// device (or host) accessible: see the resource's documentation on read-only memory.
    pub self_access: Option<VirtualMemoryAccessType>,
    /// What each of `peers` may do; `None` grants nothing.
    pub peer_access: Option<VirtualMemoryAccessType>,
}

impl Default for VirtualMemoryResourceOptions {
    fn default() -> Self {
        VirtualMemoryResourceOptions {
            allocation_type: VirtualMemoryAllocationType::Pinned,
            location_type: VirtualMemoryLocationType::Device,
            handle_type: Some(VirtualMemoryHandleType::PosixFd),
            granularity: VirtualMemoryGranularityType::Recommended,
            gpu_direct_rdma: false,
            addr_hint: None,
            addr_align: None,
            peers: Vec::new(),
            self_access: Some(VirtualMemoryAccessType::ReadWrite),
            peer_access: Some(VirtualMemoryAccessType::ReadWrite),
        }
    }
}

/// Peers as device ordinals (a [`Device`] is opened again when read).
mod peer_ordinals {
    use crate::device::Device;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(peers: &[Device], s: S) -> Result<S::Ok, S::Error> {
        peers.iter().map(|d| d.device_id()).collect::<Vec<_>>().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Device>, D::Error> {
        Vec::<usize>::deserialize(d)?
            .into_iter()
            .map(|o| Device::new(o).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Options refused before any driver call, with `cuda.core`'s wording where it has one.
pub(super) fn invalid(message: impl Into<String>) -> CudaError {
    CudaError::InvalidArgument(message.into())
}

impl VirtualMemoryResourceOptions {
    /// The checks that need no device.
    pub(super) fn validate(&self) -> Result<()> {
        match self.handle_type {
            Some(h @ (VirtualMemoryHandleType::Win32 | VirtualMemoryHandleType::Win32Kmt)) => {
                return Err(invalid(format!(
                    "handle_type {h:?} is not supported: this crate runs on Linux (cuda.core: \"win32 is currently not supported\"); use PosixFd, Fabric or None"
                )))
            }
            Some(_) if self.location_type == VirtualMemoryLocationType::Host => {
                return Err(invalid(
                    "virtual memory with location_type=\"host\" cannot have an exportable handle type; pass handle_type=None",
                ))
            }
            _ => {}
        }
        if let VirtualMemoryLocationType::HostNuma(id) = self.location_type {
            if i32::try_from(id).is_err() {
                return Err(invalid(format!("location_type HostNuma({id}): not a NUMA node id")));
            }
        }
        if let Some(align) = self.addr_align {
            if !align.is_power_of_two() {
                return Err(invalid(format!(
                    "addr_align must be a power of two (None uses the granularity), got {align}"
                )));
            }
        }
        for (i, p) in self.peers.iter().enumerate() {
            if self.peers[..i].contains(p) {
                return Err(invalid(format!("peers lists device {} twice", p.device_id())));
            }
        }
        Ok(())
    }

    /// Checks the alignment and hint against the granularity; returns the reservation's
    /// alignment.
    pub(super) fn alignment(&self, granularity: usize) -> Result<usize> {
        let align = self.addr_align.unwrap_or(granularity);
        if !align.is_multiple_of(granularity) {
            return Err(invalid(format!(
                "addr_align {align} is not a multiple of the allocation granularity {granularity}"
            )));
        }
        if let Some(hint) = self.addr_hint {
            if !hint.is_multiple_of(align as u64) {
                return Err(invalid(format!(
                    "addr_hint {hint:#x} is not a multiple of the reservation alignment {align}"
                )));
            }
        }
        Ok(align)
    }

    /// Whether the owner gets read-write access: what the resource promises to the crate.
    pub(super) fn owner_writes(&self) -> bool {
        self.self_access == Some(VirtualMemoryAccessType::ReadWrite)
    }

    /// Whether the peers (at least one) get read-write access.
    pub(super) fn peers_write(&self) -> bool {
        self.peer_access == Some(VirtualMemoryAccessType::ReadWrite) && !self.peers.is_empty()
    }

    /// The driver's location for a new allocation (`HostNumaCurrent` asks for the calling
    /// thread's node now).
    pub(super) fn location(&self, device: &Device) -> Result<driver::CUmemLocation> {
        use driver::CUmemLocationType as L;
        Ok(match self.location_type {
            VirtualMemoryLocationType::Device => device_location(device),
            // The driver ignores the id of host memory.
            VirtualMemoryLocationType::Host => location(L::CU_MEM_LOCATION_TYPE_HOST, 0),
            VirtualMemoryLocationType::HostNuma(id) => location(
                L::CU_MEM_LOCATION_TYPE_HOST_NUMA,
                i32::try_from(id).map_err(|_| invalid(format!("HostNuma({id}): not a NUMA node id")))?,
            ),
            VirtualMemoryLocationType::HostNumaCurrent => {
                location(L::CU_MEM_LOCATION_TYPE_HOST_NUMA, current_numa_node()?)
            }
        })
    }

    /// The properties of a new physical allocation at `at`.
    pub(super) fn prop(&self, at: driver::CUmemLocation) -> driver::CUmemAllocationProp {
        let mut prop = driver::CUmemAllocationProp {
            type_: match self.allocation_type {
                VirtualMemoryAllocationType::Pinned => driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
                VirtualMemoryAllocationType::Managed => driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED,
            },
            location: at,
            ..Default::default()
        };
        if let Some(h) = self.handle_type {
            prop.requestedHandleTypes = h.driver();
        }
        prop.allocFlags.gpuDirectRDMACapable = u8::from(self.gpu_direct_rdma);
        prop
    }

    /// The access to grant on memory at `owner`: the owner's, then each peer's.
    pub(super) fn access(&self, owner: driver::CUmemLocation) -> Vec<driver::CUmemAccessDesc> {
        let mut descs = Vec::with_capacity(1 + self.peers.len());
        if let Some(a) = self.self_access {
            descs.push(driver::CUmemAccessDesc {
                location: owner,
                flags: a.driver(),
            });
        }
        if let Some(a) = self.peer_access {
            descs.extend(self.peers.iter().map(|p| driver::CUmemAccessDesc {
                location: device_location(p),
                flags: a.driver(),
            }));
        }
        descs
    }
}

/// The NUMA node of the CPU the calling thread runs on.
fn current_numa_node() -> Result<i32> {
    #[cfg(target_os = "linux")]
    {
        let (mut cpu, mut node) = (0u32, 0u32);
        // SAFETY: getcpu writes one unsigned int through each of its first two pointers, which
        // point to locals; its third argument is unused since Linux 2.6.24 and may be null.
        let r = unsafe {
            libc::syscall(
                libc::SYS_getcpu,
                &mut cpu as *mut u32,
                &mut node as *mut u32,
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        if r != 0 {
            return Err(invalid(format!(
                "HostNumaCurrent: getcpu failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        i32::try_from(node).map_err(|_| invalid(format!("HostNumaCurrent: NUMA node {node} out of range")))
    }
    #[cfg(not(target_os = "linux"))]
    Err(invalid("HostNumaCurrent needs Linux (getcpu)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(o: &VirtualMemoryResourceOptions) -> String {
        o.validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_cuda_cores() {
        let o = VirtualMemoryResourceOptions::default();
        assert_eq!(o.allocation_type, VirtualMemoryAllocationType::Pinned);
        assert_eq!(o.location_type, VirtualMemoryLocationType::Device);
        assert_eq!(o.handle_type, Some(VirtualMemoryHandleType::PosixFd));
        assert_eq!(o.granularity, VirtualMemoryGranularityType::Recommended);
        assert!(!o.gpu_direct_rdma);
        assert_eq!((o.addr_hint, o.addr_align), (None, None));
        assert!(o.peers.is_empty());
        assert_eq!(o.self_access, Some(VirtualMemoryAccessType::ReadWrite));
        assert_eq!(o.peer_access, Some(VirtualMemoryAccessType::ReadWrite));
        assert!(o.validate().is_ok());
        assert!(o.owner_writes() && !o.peers_write());
    }

    #[test]
    fn windows_handles_are_refused() {
        for h in [VirtualMemoryHandleType::Win32, VirtualMemoryHandleType::Win32Kmt] {
            let o = VirtualMemoryResourceOptions {
                handle_type: Some(h),
                ..Default::default()
            };
            assert!(err(&o).contains("not supported"), "{}", err(&o));
        }
    }

    #[test]
    fn host_memory_cannot_be_exportable_but_numa_memory_can() {
        let mut o = VirtualMemoryResourceOptions {
            location_type: VirtualMemoryLocationType::Host,
            ..Default::default()
        };
        assert!(err(&o).contains("cannot have an exportable handle type"), "{}", err(&o));
        o.handle_type = Some(VirtualMemoryHandleType::Fabric);
        assert!(err(&o).contains("cannot have an exportable handle type"));
        o.handle_type = None;
        assert!(o.validate().is_ok());
        o.location_type = VirtualMemoryLocationType::HostNuma(0);
        o.handle_type = Some(VirtualMemoryHandleType::PosixFd);
        assert!(o.validate().is_ok());
        o.location_type = VirtualMemoryLocationType::HostNuma(u32::MAX);
        assert!(err(&o).contains("NUMA"));
    }

    #[test]
    fn alignments_and_hints_are_checked() {
        for bad in [0, 3, 3 << 20, usize::MAX] {
            let o = VirtualMemoryResourceOptions {
                addr_align: Some(bad),
                ..Default::default()
            };
            assert!(err(&o).contains("power of two"), "{bad}: {}", err(&o));
        }
        let g = 2 << 20;
        let mut o = VirtualMemoryResourceOptions {
            addr_align: Some(1 << 30),
            ..Default::default()
        };
        assert_eq!(o.alignment(g).unwrap(), 1 << 30);
        o.addr_align = Some(4096);
        assert!(o
            .alignment(g)
            .unwrap_err()
            .to_string()
            .contains("multiple of the allocation granularity"));
        o.addr_align = None;
        assert_eq!(o.alignment(g).unwrap(), g);
        o.addr_hint = Some(g as u64 * 7 + 4096);
        assert!(o.alignment(g).unwrap_err().to_string().contains("addr_hint"));
        o.addr_hint = Some(u64::MAX - (g as u64 - 1));
        assert_eq!(
            o.alignment(g).unwrap(),
            g,
            "a hint near the top is the driver's to refuse"
        );
        // A granularity that is not a power of two (never seen, but nothing assumes otherwise).
        assert!(VirtualMemoryResourceOptions::default().alignment(3 << 20).is_ok());
    }

    #[test]
    fn access_and_properties_follow_the_options() {
        let host = location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0);
        let mut o = VirtualMemoryResourceOptions::default();
        let d = o.access(host);
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].flags,
            driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        );
        o.self_access = Some(VirtualMemoryAccessType::Read);
        assert_eq!(
            o.access(host)[0].flags,
            driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ
        );
        assert!(!o.owner_writes());
        o.self_access = None;
        assert!(o.access(host).is_empty());
        let p = o.prop(host);
        assert_eq!(
            p.requestedHandleTypes,
            driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        );
        assert_eq!(p.type_, driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED);
        assert_eq!(p.allocFlags.gpuDirectRDMACapable, 0);
        o.handle_type = None;
        o.gpu_direct_rdma = true;
        o.allocation_type = VirtualMemoryAllocationType::Managed;
        let p = o.prop(host);
        assert_eq!(
            p.requestedHandleTypes,
            driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE
        );
        assert_eq!(p.type_, driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED);
        assert_eq!(p.allocFlags.gpuDirectRDMACapable, 1);
        assert_eq!(
            VirtualMemoryGranularityType::Minimum.driver(),
            driver::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        );
    }

    #[test]
    fn host_numa_current_resolves_to_a_node() {
        let o = VirtualMemoryResourceOptions {
            location_type: VirtualMemoryLocationType::HostNumaCurrent,
            handle_type: None,
            ..Default::default()
        };
        let Ok(device) = Device::new(0) else {
            // No driver here: the location needs a Device only for the device location.
            assert!(current_numa_node().unwrap() >= 0);
            return;
        };
        let loc = o.location(&device).unwrap();
        assert_eq!(loc.type_, driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA);
        // SAFETY: the union holds the id for host NUMA locations.
        assert!(unsafe { loc.__bindgen_anon_1.id } >= 0);
        assert_eq!(o.location_type.name(), "host_numa_current");
        assert!(o.location_type.is_host());
    }
}
