//! Checkpointing CUDA processes (`cuda.core.checkpoint`): lock a process's CUDA state, move its
//! device memory to the host, restore it (optionally onto other GPUs), unlock.
//!
//! A coordinator drives a target process by its id, much as a debugger attaches: Linux and the
//! driver enforce permissions (another user's process may need `CAP_SYS_PTRACE`). These calls
//! prepare the GPU side only; a full process checkpoint also needs a CPU-side tool such as CRIU
//! between [`Process::checkpoint`] and [`Process::restore`].
//!
//! ```no_run
//! use cuda_core::checkpoint::Process;
//! use std::time::Duration;
//! let process = Process::new(4242)?;
//! process.lock(Some(Duration::from_secs(5)))?; // CUDA calls in the target now block
//! process.checkpoint()?; // its device memory is on the host, its GPU state released
//! // ... capture or restore the CPU side here ...
//! process.restore(&[])?; // back on the same GPUs; still locked
//! process.unlock()?;
//! # Ok::<(), cuda_core::CudaError>(())
//! ```
//!
//! Restore needs persistence mode on, or `cuInit` called in the coordinator beforehand. For
//! migration, map every GPU the kernel-mode driver saw at checkpoint time (masking with
//! `CUDA_VISIBLE_DEVICES` does not reduce that). Needs a CUDA 12.8 or newer driver; where the
//! driver cannot checkpoint, calls fail with an error saying so ([`is_not_supported`]).
//!
//! This module is at layer 1 and uses the error type only.

use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::{driver, StatusCode};
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

/// What `call` is named in an error when the driver cannot checkpoint: the call and `cuda.core`'s
/// explanation.
macro_rules! unsupported {
    ($call:literal) => {
        concat!(
            $call,
            " (CUDA checkpointing is not supported by the installed NVIDIA driver; upgrade to a driver \
             version with CUDA checkpoint API support, 12.8 or newer)"
        )
    };
}

/// Whether an error of this module says the driver cannot checkpoint processes at all: it is
/// older than CUDA 12.8, or the library or its checkpoint functions could not be loaded. The
/// error's message says so too. Any other status (`CUDA_ERROR_NOT_SUPPORTED` or
/// `CUDA_ERROR_NOT_FOUND` from a 12.8 driver included: a process without CUDA state, a
/// platform that cannot checkpoint this process, ...) is reported as the driver's status, which
/// [`CudaError::driver_status`] gives, and is not this.
pub fn is_not_supported(error: &CudaError) -> bool {
    matches!(error, CudaError::Driver { call, .. } if call.contains("CUDA checkpointing is not supported"))
}

/// Checks a checkpoint call's status; `unsupported` names the call when the driver lacks the
/// function (a loading failure). Every other status names the call as it is.
fn check(status: driver::CUresult, call: &'static str, unsupported: &'static str) -> Result<()> {
    status.check(if status.load_error().is_some() {
        unsupported
    } else {
        call
    })
}

/// Fails when the driver is older than CUDA 12.8, which has no checkpoint API. The version is
/// kept once read; a failure to read it is not (the next call asks again).
fn require_driver() -> Result<()> {
    static VERSION: OnceLock<i32> = OnceLock::new();
    let version = match VERSION.get() {
        Some(&v) => v,
        None => {
            let mut v = 0;
            // SAFETY: `v` is a valid place for an int; cuDriverGetVersion needs no cuInit.
            let status = unsafe { driver::cuDriverGetVersion(&mut v) };
            check(status, "cuDriverGetVersion", unsupported!("cuDriverGetVersion"))?;
            *VERSION.get_or_init(|| v)
        }
    };
    if version < 12080 {
        return Err(CudaError::Driver {
            call: unsupported!("cuDriverGetVersion"),
            source: cuda_sys::DriverError(driver::CUresult::CUDA_ERROR_NOT_SUPPORTED),
        });
    }
    Ok(())
}

/// A checkpoint state (`Process.state`: `"running"`, `"locked"`, `"checkpointed"`, `"failed"`;
/// newer drivers also report the transitions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProcessState {
    /// CUDA calls run normally.
    Running,
    /// CUDA calls block; work submitted before the lock has finished.
    Locked,
    /// Device memory is on the host and the GPU state released; still locked.
    Checkpointed,
    /// A checkpoint or restore failed.
    Failed,
    /// A checkpoint is in progress.
    Checkpointing,
    /// A restore is in progress.
    Restoring,
}

impl ProcessState {
    fn from_raw(raw: driver::CUprocessState) -> Result<ProcessState> {
        use driver::CUprocessState_enum as S;
        Ok(match raw {
            S::CU_PROCESS_STATE_RUNNING => ProcessState::Running,
            S::CU_PROCESS_STATE_LOCKED => ProcessState::Locked,
            S::CU_PROCESS_STATE_CHECKPOINTED => ProcessState::Checkpointed,
            S::CU_PROCESS_STATE_FAILED => ProcessState::Failed,
            S::CU_PROCESS_STATE_CHECKPOINTING => ProcessState::Checkpointing,
            S::CU_PROCESS_STATE_RESTORING => ProcessState::Restoring,
            other => {
                return Err(CudaError::InvalidArgument(format!(
                    "Unknown CUDA checkpoint process state: {}",
                    other.0
                )))
            }
        })
    }

    /// `cuda.core`'s name: `"running"`, `"locked"`, ...
    pub fn name(self) -> &'static str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Locked => "locked",
            ProcessState::Checkpointed => "checkpointed",
            ProcessState::Failed => "failed",
            ProcessState::Checkpointing => "checkpointing",
            ProcessState::Restoring => "restoring",
        }
    }
}

impl fmt::Display for ProcessState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GPU's UUID, for [`Process::restore`]'s mapping: parsed from the form
/// [`crate::Device::uuid`] writes (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), with or without
/// hyphens or NVML's `GPU-` prefix (32 hex digits and nothing else: no signs, no spaces
/// inside), or taken from a `CUuuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuUuid(pub [u8; 16]);

impl FromStr for GpuUuid {
    type Err = CudaError;

    fn from_str(value: &str) -> Result<GpuUuid> {
        let bad = || {
            CudaError::InvalidArgument(format!(
                "GPU UUID string must be 32 hex characters (with optional hyphens), got {value:?}"
            ))
        };
        let text = value.trim();
        let text = match text.get(..4) {
            Some(p) if p.eq_ignore_ascii_case("GPU-") => &text[4..],
            _ => text,
        };
        let hex: Vec<u8> = text.bytes().filter(|&b| b != b'-').collect();
        // Hex digits only: `from_str_radix` alone would take a `+` sign.
        if hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
            let digits = std::str::from_utf8(pair).map_err(|_| bad())?;
            *byte = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
        }
        Ok(GpuUuid(bytes))
    }
}

impl From<driver::CUuuid> for GpuUuid {
    fn from(uuid: driver::CUuuid) -> GpuUuid {
        GpuUuid(uuid.bytes.map(|b| b as u8))
    }
}

impl From<GpuUuid> for driver::CUuuid {
    fn from(uuid: GpuUuid) -> driver::CUuuid {
        driver::CUuuid {
            bytes: uuid.0.map(|b| b as std::ffi::c_char),
        }
    }
}

impl fmt::Display for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The process (thread group) that task `id` belongs to, from the `Tgid` line of
/// `/proc/<id>/status`: `id` itself for a process, its process for a thread. `None` where `/proc`
/// cannot tell (no such task, no procfs).
fn thread_group_of(id: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{id}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// A CUDA process to lock, checkpoint, restore and unlock (`cuda.core.checkpoint.Process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Process {
    pid: i32,
}

impl Process {
    /// The process with id `pid` (`std::process::Child::id()` gives one); the id must be
    /// positive and fit the driver's `int`.
    ///
    /// The calling process is refused (`InvalidArgument`), by its process id or the id of any of
    /// its threads: locking itself would block every later CUDA call of the process, those that
    /// would unlock it included. A thread id is told from a process id by the `Tgid` of
    /// `/proc/<pid>/status`; where that cannot be read, `pid` is compared with this process's id
    /// only.
    pub fn new(pid: u32) -> Result<Process> {
        let Some(id) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
            return Err(CudaError::InvalidArgument(format!(
                "pid must be a positive int, got {pid}"
            )));
        };
        let me = std::process::id();
        if pid == me || thread_group_of(pid) == Some(me) {
            return Err(CudaError::InvalidArgument(format!(
                "pid {pid} is the calling process (or one of its threads): a process cannot \
                 checkpoint itself, as locking it would block its every later CUDA call; run the \
                 coordinator in another process"
            )));
        }
        Ok(Process { pid: id })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The process's checkpoint state.
    pub fn state(&self) -> Result<ProcessState> {
        require_driver()?;
        let mut state = driver::CUprocessState_enum::CU_PROCESS_STATE_FAILED;
        // SAFETY: `state` is a live out-pointer; the pid is a plain integer.
        let status = unsafe { driver::cuCheckpointProcessGetState(self.pid, &mut state) };
        check(
            status,
            "cuCheckpointProcessGetState",
            unsupported!("cuCheckpointProcessGetState"),
        )?;
        ProcessState::from_raw(state)
    }

    /// The thread of the process that restores it: a coordinator restores through that thread
    /// (CRIU, say, needs to know it).
    pub fn restore_thread_id(&self) -> Result<u32> {
        require_driver()?;
        let mut tid = 0;
        // SAFETY: `tid` is a live out-pointer; the pid is a plain integer.
        let status = unsafe { driver::cuCheckpointProcessGetRestoreThreadId(self.pid, &mut tid) };
        check(
            status,
            "cuCheckpointProcessGetRestoreThreadId",
            unsupported!("cuCheckpointProcessGetRestoreThreadId"),
        )?;
        Ok(tid.max(0) as u32)
    }

    /// Locks the process: its further CUDA calls block, and the lock waits for the work it
    /// submitted to finish. `timeout` bounds the wait (rounded up to whole milliseconds; `None`
    /// waits as long as it takes).
    pub fn lock(&self, timeout: Option<Duration>) -> Result<()> {
        let timeout_ms = match timeout {
            None => 0,
            Some(t) => {
                let ms = t.as_nanos().div_ceil(1_000_000).max(1);
                u32::try_from(ms).map_err(|_| {
                    CudaError::InvalidArgument(format!("timeout must be below {} ms, got {t:?}", u32::MAX))
                })?
            }
        };
        require_driver()?;
        let mut args = driver::CUcheckpointLockArgs {
            timeoutMs: timeout_ms,
            ..Default::default()
        };
        // SAFETY: `args` is a live structure with its reserved fields zeroed.
        let status = unsafe { driver::cuCheckpointProcessLock(self.pid, &mut args) };
        check(
            status,
            "cuCheckpointProcessLock",
            unsupported!("cuCheckpointProcessLock"),
        )
    }

    /// Checkpoints the locked process: its device memory goes to host memory and its GPU state
    /// is released.
    pub fn checkpoint(&self) -> Result<()> {
        require_driver()?;
        // SAFETY: null arguments are allowed (memory goes to the host).
        let status = unsafe { driver::cuCheckpointProcessCheckpoint(self.pid, std::ptr::null_mut()) };
        check(
            status,
            "cuCheckpointProcessCheckpoint",
            unsupported!("cuCheckpointProcessCheckpoint"),
        )
    }

    /// Restores the checkpointed process, onto the same GPUs (an empty mapping) or remapping each
    /// checkpointed GPU to another: `(old, new)` pairs. The process stays locked, as the driver
    /// leaves it: [`Process::unlock`] it to let its CUDA calls run.
    pub fn restore(&self, gpu_mapping: &[(GpuUuid, GpuUuid)]) -> Result<()> {
        require_driver()?;
        let mut pairs: Vec<driver::CUcheckpointGpuPair> = gpu_mapping
            .iter()
            .map(|&(old, new)| driver::CUcheckpointGpuPair {
                oldUuid: old.into(),
                newUuid: new.into(),
            })
            .collect();
        let count = u32::try_from(pairs.len())
            .map_err(|_| CudaError::InvalidArgument(format!("{} GPU pairs are too many", pairs.len())))?;
        let mut args = driver::CUcheckpointRestoreArgs {
            gpuPairs: pairs.as_mut_ptr(),
            gpuPairsCount: count,
            ..Default::default()
        };
        let args_ptr: *mut driver::CUcheckpointRestoreArgs = if pairs.is_empty() {
            std::ptr::null_mut()
        } else {
            &mut args
        };
        // SAFETY: `args_ptr` is null (restore onto the same GPUs) or a live structure whose
        // reserved fields are zeroed and whose pairs array of `count` entries lives across the call.
        let status = unsafe { driver::cuCheckpointProcessRestore(self.pid, args_ptr) };
        check(
            status,
            "cuCheckpointProcessRestore",
            unsupported!("cuCheckpointProcessRestore"),
        )
    }

    /// Unlocks the process: its CUDA calls run again.
    pub fn unlock(&self) -> Result<()> {
        require_driver()?;
        // SAFETY: null arguments are allowed.
        let status = unsafe { driver::cuCheckpointProcessUnlock(self.pid, std::ptr::null_mut()) };
        check(
            status,
            "cuCheckpointProcessUnlock",
            unsupported!("cuCheckpointProcessUnlock"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_cross_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<Process>();
        send_and_sync::<GpuUuid>();
    }

    #[test]
    fn pids_are_positive_ints() {
        assert_eq!(Process::new(1).unwrap().pid(), 1);
        for bad in [0, u32::MAX, i32::MAX as u32 + 1] {
            let e = Process::new(bad).unwrap_err();
            assert!(e.to_string().contains("pid must be a positive int"), "{e}");
        }
    }

    #[test]
    fn the_calling_process_and_its_threads_are_refused() {
        let e = Process::new(std::process::id()).unwrap_err();
        assert!(e.to_string().contains("cannot checkpoint itself"), "{e}");
        // A thread of this process, by its thread id, while it runs.
        let other_thread = std::thread::spawn(|| {
            // SAFETY: gettid has no preconditions.
            let mine = unsafe { libc::gettid() };
            (mine, Process::new(mine as u32).map(|p| p.pid()))
        });
        let (thread_id, result) = other_thread.join().unwrap();
        assert!(thread_id > 0 && thread_id as u32 != std::process::id());
        if thread_group_of(std::process::id()).is_some() {
            let e = result.unwrap_err();
            assert!(e.to_string().contains("cannot checkpoint itself"), "{e}");
        }
        // Another process is accepted.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let accepted = Process::new(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(accepted.unwrap().pid(), child.id());
    }

    #[test]
    fn uuids_parse_as_cuda_writes_them() {
        let text = "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c";
        let uuid: GpuUuid = text.parse().unwrap();
        assert_eq!(uuid.to_string(), text);
        assert_eq!(format!("GPU-{text}").parse::<GpuUuid>().unwrap(), uuid);
        assert_eq!(text.replace('-', "").parse::<GpuUuid>().unwrap(), uuid);
        let raw: driver::CUuuid = uuid.into();
        assert_eq!(GpuUuid::from(raw), uuid);
        for bad in [
            "",
            "3a6a1c8e",
            "zz6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
            "é6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
            "+a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
            "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b+c",
            "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b c",
        ] {
            let e = bad.parse::<GpuUuid>().unwrap_err();
            assert!(e.to_string().contains("32 hex characters"), "{e}");
        }
    }

    #[test]
    fn states_and_unsupported_drivers() {
        use driver::CUprocessState_enum as S;
        use driver::CUresult as R;
        assert_eq!(
            ProcessState::from_raw(S::CU_PROCESS_STATE_LOCKED).unwrap(),
            ProcessState::Locked
        );
        assert_eq!(ProcessState::Checkpointed.to_string(), "checkpointed");
        assert!(ProcessState::from_raw(driver::CUprocessState_enum(99)).is_err());
        // A function that could not be loaded is the driver that cannot checkpoint: the status
        // `LoadError::to_status` encodes (0x7C, the library, the function's index).
        let encoded = 0x7C00_0000 | (cuda_sys::LibraryId::Driver as u32) << 16;
        let missing = cuda_sys::LoadError::from_status(encoded).expect("an encoded load error");
        let e = check(
            R(missing.to_status()),
            "cuCheckpointProcessLock",
            unsupported!("cuCheckpointProcessLock"),
        )
        .unwrap_err();
        assert!(is_not_supported(&e), "{e}");
        assert!(e
            .to_string()
            .contains("CUDA checkpointing is not supported by the installed NVIDIA driver"));
        // A 12.8 driver's NOT_SUPPORTED or NOT_FOUND, and any other status, is what it is.
        for status in [
            R::CUDA_ERROR_NOT_SUPPORTED,
            R::CUDA_ERROR_NOT_FOUND,
            R::CUDA_ERROR_INVALID_VALUE,
        ] {
            let e = check(
                status,
                "cuCheckpointProcessLock",
                unsupported!("cuCheckpointProcessLock"),
            )
            .unwrap_err();
            assert!(!is_not_supported(&e), "{e}");
            assert_eq!(e.driver_status(), Some(status));
            assert!(e.to_string().starts_with("cuCheckpointProcessLock: CUDA_ERROR_"), "{e}");
            assert!(!e.to_string().contains("upgrade"), "{e}");
        }
    }

    #[test]
    fn without_a_driver_the_error_says_checkpointing_is_unavailable() {
        if cuda_pathfinder::load_nvidia_dynamic_lib("cuda").is_ok() {
            return; // the GPU suite runs the real cycle
        }
        let e = Process::new(1).unwrap().state().unwrap_err();
        assert!(e.load_error().is_some(), "{e}");
    }
}
