//! Processes: those with a compute context on a device (`Device.compute_running_processes`) and
//! the name of any process (`system.get_process_name`).
//!
//! The list comes from `nvmlDeviceGetRunningProcessDetailList` where the driver has it (R550 and
//! newer: a versioned structure), else from `nvmlDeviceGetComputeRunningProcesses_v3`, whose
//! entry size depends on the driver: drivers 535.43.02 to 535.86.x write `nvmlProcessInfo_v3`
//! entries (32 bytes) under that name, every other driver `nvmlProcessInfo_v2` entries (24
//! bytes), with no version to tell them apart (go-nvml#75, nvitop#79 and #89, gpustat#161). That
//! call gets room for 32-byte entries whatever the driver, and reads them at the stride the
//! driver's other exports imply (nvitop's rule, [`v3_stride`]).

use super::common::{init, read_array, read_string, struct_version};
use super::device::Device;
use super::NvmlErrorKind;
use crate::Result;
use cuda_sys::nvml;

/// The most processes a list is read with; a driver that reports more answers
/// [`NvmlErrorKind::InsufficientSize`].
const MAX_PROCESSES: u32 = 1 << 16;
/// Room for processes that start between asking for the count and reading the list.
const SLACK: u32 = 8;
/// The largest entry `nvmlDeviceGetComputeRunningProcesses_v3` writes: `nvmlProcessInfo_v3`, the
/// fields of `nvmlProcessInfo_v2` then `usedGpuCcProtectedMemory`.
const V3_ENTRY_BYTES: usize = 32;
/// The entry of every other driver, `nvmlProcessInfo_v2`.
const V2_ENTRY_BYTES: usize = std::mem::size_of::<nvml::nvmlProcessInfo_v2_t>();
/// Room for one entry of either size, 8-aligned as both structures (with their 64-bit members)
/// are.
type Slot = [u64; V3_ENTRY_BYTES / 8];

const _: () = {
    assert!(V2_ENTRY_BYTES == 24 && std::mem::align_of::<nvml::nvmlProcessInfo_v2_t>() == 8);
    assert!(std::mem::size_of::<Slot>() == V3_ENTRY_BYTES && std::mem::align_of::<Slot>() == 8);
    // The fields both layouts share sit where `decode` reads them.
    assert!(std::mem::offset_of!(nvml::nvmlProcessInfo_v2_t, usedGpuMemory) == 8);
    assert!(std::mem::offset_of!(nvml::nvmlProcessInfo_v2_t, gpuInstanceId) == 16);
    assert!(std::mem::offset_of!(nvml::nvmlProcessInfo_v2_t, computeInstanceId) == 20);
};

/// A process with a compute context on a device (`ProcessInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessInfo {
    /// The process id, in the caller's PID namespace as the driver reports it.
    pub pid: u32,
    /// Device memory the process uses, in bytes (`None` where NVML cannot tell, such as without
    /// the permission, or under vGPU).
    pub used_gpu_memory: Option<u64>,
    /// The GPU instance of a MIG device (`None` outside MIG).
    pub gpu_instance_id: Option<u32>,
    /// The compute instance of a MIG device (`None` outside MIG).
    pub compute_instance_id: Option<u32>,
}

impl ProcessInfo {
    fn new(pid: u32, used_gpu_memory: u64, gpu_instance_id: u32, compute_instance_id: u32) -> ProcessInfo {
        let id = |v: u32| (v != u32::MAX).then_some(v);
        ProcessInfo {
            pid,
            used_gpu_memory: (used_gpu_memory != u64::MAX).then_some(used_gpu_memory),
            gpu_instance_id: id(gpu_instance_id),
            compute_instance_id: id(compute_instance_id),
        }
    }
}

/// The stride of `nvmlDeviceGetComputeRunningProcesses_v3`'s entries with the loaded NVML,
/// as nvitop tells it: the drivers that wrote `nvmlProcessInfo_v3` under that name (535.43.02 to
/// 535.86.x) are those with confidential-computing queries (`nvmlDeviceGetConfComputeMemSizeInfo`,
/// new in 535) but without `nvmlDeviceGetRunningProcessDetailList` (new in 550, when the v3 call
/// went back to `nvmlProcessInfo_v2`).
fn v3_stride() -> usize {
    let has = |name: &str| nvml::LIBRARY.function_pointer(name).is_ok();
    if has("nvmlDeviceGetConfComputeMemSizeInfo") && !has("nvmlDeviceGetRunningProcessDetailList") {
        V3_ENTRY_BYTES
    } else {
        V2_ENTRY_BYTES
    }
}

/// The processes in `slots`, whose bytes hold `count` entries `stride` bytes apart (24 or 32:
/// either layout has `pid` at 0, `usedGpuMemory` at 8, `gpuInstanceId` at 16 and
/// `computeInstanceId` at 20). Entries past the slots' bytes are left out.
fn decode(slots: &[Slot], stride: usize, count: usize) -> Vec<ProcessInfo> {
    debug_assert!(stride == V2_ENTRY_BYTES || stride == V3_ENTRY_BYTES);
    let bytes: Vec<u8> = slots.iter().flatten().flat_map(|w| w.to_ne_bytes()).collect();
    let u32_at = |e: &[u8], at: usize| {
        let mut b = [0; 4];
        b.copy_from_slice(&e[at..at + 4]);
        u32::from_ne_bytes(b)
    };
    let u64_at = |e: &[u8], at: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&e[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    bytes
        .chunks_exact(stride)
        .take(count)
        .map(|e| ProcessInfo::new(u32_at(e, 0), u64_at(e, 8), u32_at(e, 16), u32_at(e, 20)))
        .collect()
}

impl Device {
    /// The processes with a compute context (a CUDA context) on the device; graphics-only
    /// processes are not listed. A snapshot: processes come and go. On a MIG-enabled device the
    /// parent's list is the aggregate, for callers with the permission.
    ///
    /// A driver that reports more than 65536 processes answers
    /// [`NvmlErrorKind::InsufficientSize`], as does a list that keeps growing while it is read.
    pub fn compute_running_processes(&self) -> Result<Vec<ProcessInfo>> {
        if nvml::LIBRARY
            .function_pointer("nvmlDeviceGetRunningProcessDetailList")
            .is_ok()
        {
            match self.process_detail_list() {
                // A device the versioned query does not cover may still answer the older one.
                Err(e) if e.nvml_kind() == Some(NvmlErrorKind::NotSupported) => {}
                other => return other,
            }
        }
        self.compute_running_processes_v3(v3_stride())
    }

    /// The list from `nvmlDeviceGetRunningProcessDetailList` (R550 and newer).
    fn process_detail_list(&self) -> Result<Vec<ProcessInfo>> {
        let handle = self.handle();
        let zero = nvml::nvmlProcessDetail_v1_t::default();
        let entries = read_array(
            "nvmlDeviceGetRunningProcessDetailList",
            zero,
            SLACK,
            MAX_PROCESSES,
            |count, array| {
                let mut list = nvml::nvmlProcessDetailList_v1_t {
                    version: struct_version::<nvml::nvmlProcessDetailList_v1_t>(1),
                    mode: nvml::nvmlProcessMode_enum::NVML_PROCESS_MODE_COMPUTE.0,
                    numProcArrayEntries: *count,
                    procArray: array,
                };
                // SAFETY: a live handle; `list` is a versioned structure of the size its version
                // says, naming `read_array`'s array of `*count` entries of
                // `nvmlProcessDetail_v1_t` (the entry type of this version), or null with a count
                // of 0, which asks for the count; NVML writes at most that many.
                let status = unsafe { nvml::nvmlDeviceGetRunningProcessDetailList(handle, &mut list) };
                *count = list.numProcArrayEntries;
                status
            },
        )?;
        Ok(entries
            .iter()
            .map(|p| ProcessInfo::new(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId))
            .collect())
    }

    /// The list from `nvmlDeviceGetComputeRunningProcesses_v3`, read at `stride` bytes an entry.
    fn compute_running_processes_v3(&self, stride: usize) -> Result<Vec<ProcessInfo>> {
        let handle = self.handle();
        let slots = read_array(
            "nvmlDeviceGetComputeRunningProcesses_v3",
            [0u64; V3_ENTRY_BYTES / 8],
            SLACK,
            MAX_PROCESSES,
            |count, array: *mut Slot| {
                // SAFETY: a live handle; `read_array` passes an array of `*count` slots of 32
                // bytes each, 8-aligned (or null with a count of 0, which asks for the count).
                // NVML writes at most `*count` entries, of 24 or 32 bytes depending on the driver,
                // so whichever layout this driver uses stays inside the array; the pointer's
                // alignment is that of `nvmlProcessInfo_t` (8).
                unsafe { nvml::nvmlDeviceGetComputeRunningProcesses(handle, count, array.cast()) }
            },
        )?;
        Ok(decode(&slots, stride, slots.len()))
    }
}

/// The name of process `pid` (`system.get_process_name(pid)`), as NVML reports it (cropped to
/// 1023 bytes).
pub fn get_process_name(pid: u32) -> Result<String> {
    init()?;
    read_string("nvmlSystemGetProcessName", 1024, |buf, n| {
        // SAFETY: `read_string` passes a buffer of n chars.
        unsafe { nvml::nvmlSystemGetProcessName(pid, buf, n) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots holding `entries` (pid, memory, GPU instance, compute instance) written at `stride`.
    fn slots(entries: &[(u32, u64, u32, u32)], stride: usize, room: usize) -> Vec<Slot> {
        let mut bytes = vec![0xeeu8; room * V3_ENTRY_BYTES];
        for (i, &(pid, mem, gi, ci)) in entries.iter().enumerate() {
            let at = i * stride;
            bytes[at..at + 4].copy_from_slice(&pid.to_ne_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&mem.to_ne_bytes());
            bytes[at + 16..at + 20].copy_from_slice(&gi.to_ne_bytes());
            bytes[at + 20..at + 24].copy_from_slice(&ci.to_ne_bytes());
            if stride == V3_ENTRY_BYTES {
                bytes[at + 24..at + 32].copy_from_slice(&7u64.to_ne_bytes()); // protected memory
            }
        }
        bytes
            .chunks_exact(8)
            .map(|w| {
                let mut b = [0; 8];
                b.copy_from_slice(w);
                u64::from_ne_bytes(b)
            })
            .collect::<Vec<u64>>()
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect()
    }

    #[test]
    fn both_entry_layouts_decode_at_their_stride() {
        let entries = [
            (100, 64 << 20, u32::MAX, u32::MAX),
            (200, u64::MAX, 1, 2),
            (300, 5, u32::MAX, u32::MAX),
        ];
        for stride in [V2_ENTRY_BYTES, V3_ENTRY_BYTES] {
            let s = slots(&entries, stride, 3 + SLACK as usize);
            let got = decode(&s, stride, entries.len());
            assert_eq!(got.len(), 3);
            assert_eq!(
                got[0],
                ProcessInfo {
                    pid: 100,
                    used_gpu_memory: Some(64 << 20),
                    gpu_instance_id: None,
                    compute_instance_id: None
                }
            );
            assert_eq!(got[1].pid, 200);
            assert_eq!(got[1].used_gpu_memory, None);
            assert_eq!((got[1].gpu_instance_id, got[1].compute_instance_id), (Some(1), Some(2)));
            assert_eq!(got[2].pid, 300);
        }
        // Read at the wrong stride, the second entry is garbage: the stride matters.
        let s = slots(&entries, V3_ENTRY_BYTES, 3);
        assert_ne!(decode(&s, V2_ENTRY_BYTES, 3)[1].pid, 200);
        // A count past the room is cut to the entries the slots hold.
        assert_eq!(decode(&s, V3_ENTRY_BYTES, 99).len(), 3);
        assert_eq!(decode(&s, V2_ENTRY_BYTES, 99).len(), 4);
    }

    const HOLDER_ENV: &str = "CUDA_CORE_PROCESSES_HOLDER";
    const TEST: &str = "system::processes::tests::the_older_call_reads_what_the_versioned_one_does";

    /// Holds a context with 64 MiB on CUDA device 0 (raw driver calls: this layer has no
    /// `Device`); `Err` where there is no driver or device.
    struct Held(cuda_sys::driver::CUdevice, cuda_sys::driver::CUdeviceptr);

    impl Held {
        fn new() -> std::result::Result<Held, cuda_sys::DriverError> {
            use cuda_sys::driver as d;
            let (mut dev, mut ctx, mut ptr) = (0, std::ptr::null_mut(), 0);
            // SAFETY: live out-pointers; the context is retained before it is made current and
            // released (after the memory is freed) by `Drop`.
            unsafe {
                d::cuInit(0).result()?;
                d::cuDeviceGet(&mut dev, 0).result()?;
                d::cuDevicePrimaryCtxRetain(&mut ctx, dev).result()?;
                d::cuCtxSetCurrent(ctx).result()?;
                d::cuMemAlloc(&mut ptr, 64 << 20).result()?;
            }
            Ok(Held(dev, ptr))
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // SAFETY: the allocation and the retain of `new`, each undone once.
            unsafe {
                let _ = cuda_sys::driver::cuMemFree(self.1);
                let _ = cuda_sys::driver::cuDevicePrimaryCtxRelease(self.0);
            }
        }
    }

    /// On a machine with a GPU and an NVML that has the versioned query (skipped elsewhere):
    /// with two processes holding contexts (this one and a child), the older call, read at the
    /// stride this driver implies, lists exactly what the versioned query does, entry by entry.
    #[test]
    fn the_older_call_reads_what_the_versioned_one_does() {
        use std::io::{BufRead, Write};
        if std::env::var_os(HOLDER_ENV).is_some() {
            let _held = Held::new().unwrap();
            println!("HOLDER READY");
            std::io::stdout().flush().unwrap();
            let _ = std::io::stdin().read_line(&mut String::new());
            return;
        }
        let Ok(devices) = Device::get_all_devices() else {
            return; // no NVML here
        };
        let has_list = nvml::LIBRARY
            .function_pointer("nvmlDeviceGetRunningProcessDetailList")
            .is_ok();
        let Ok(_held) = Held::new() else {
            return; // no CUDA device here
        };
        if devices.is_empty() || !has_list {
            return;
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(HOLDER_ENV, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ready = std::io::BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(std::result::Result::ok)
            .any(|l| l.contains("HOLDER READY"));
        assert!(ready, "the child did not get a context: {:?}", child.wait());
        let stride = v3_stride();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (mut older, mut newer);
        loop {
            older = Vec::new();
            newer = Vec::new();
            for d in &devices {
                older.extend(d.compute_running_processes_v3(stride).unwrap());
                newer.extend(d.process_detail_list().unwrap());
            }
            older.sort_by_key(|p| p.pid);
            newer.sort_by_key(|p| p.pid);
            if (older == newer && newer.len() >= 2) || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        drop(child.stdin.take());
        let _ = child.wait();
        println!("stride {stride}: v3 {older:?}\n detail list {newer:?}");
        assert!(newer.len() >= 2, "two processes hold contexts: {newer:?}");
        assert_eq!(older, newer);
        assert!(
            older.iter().all(|p| p.used_gpu_memory.is_none_or(|b| b >= 64 << 20)),
            "{older:?}"
        );
    }
}
