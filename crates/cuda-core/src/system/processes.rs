//! Processes: those with a compute context on a device (`Device.compute_running_processes`) and
//! the name of any process (`system.get_process_name`).

use super::common::{init, read_string};
use super::device::Device;
use crate::error::Check;
use crate::Result;
use cuda_sys::nvml;

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
    fn from_raw(p: &nvml::nvmlProcessInfo_t) -> ProcessInfo {
        let id = |v: u32| (v != u32::MAX).then_some(v);
        ProcessInfo {
            pid: p.pid,
            used_gpu_memory: (p.usedGpuMemory != u64::MAX).then_some(p.usedGpuMemory),
            gpu_instance_id: id(p.gpuInstanceId),
            compute_instance_id: id(p.computeInstanceId),
        }
    }
}

impl Device {
    /// The processes with a compute context (a CUDA context) on the device; graphics-only
    /// processes are not listed. A snapshot: processes come and go. On a MIG-enabled device the
    /// parent's list is the aggregate, for callers with the permission.
    pub fn compute_running_processes(&self) -> Result<Vec<ProcessInfo>> {
        const CALL: &str = "nvmlDeviceGetComputeRunningProcesses_v3";
        let mut count: u32 = 0;
        // SAFETY: a live handle; a count of 0 with no array asks NVML for the count only.
        let status =
            unsafe { nvml::nvmlDeviceGetComputeRunningProcesses(self.handle(), &mut count, std::ptr::null_mut()) };
        if status == nvml::nvmlReturn_enum::NVML_SUCCESS {
            return Ok(Vec::new());
        }
        if status != nvml::nvmlReturn_enum::NVML_ERROR_INSUFFICIENT_SIZE {
            status.check(CALL)?;
        }
        loop {
            // Room for a few processes that start in between.
            let capacity = count.saturating_add(8);
            let mut infos = vec![nvml::nvmlProcessInfo_t::default(); capacity as usize];
            let mut written = capacity;
            // SAFETY: a live handle; the array holds `written` entries, as NVML is told, and
            // NVML writes at most that many.
            let status =
                unsafe { nvml::nvmlDeviceGetComputeRunningProcesses(self.handle(), &mut written, infos.as_mut_ptr()) };
            if status == nvml::nvmlReturn_enum::NVML_ERROR_INSUFFICIENT_SIZE {
                count = written.max(capacity);
                continue;
            }
            status.check(CALL)?;
            infos.truncate(written.min(capacity) as usize);
            return Ok(infos.iter().map(ProcessInfo::from_raw).collect());
        }
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
