//! Checkpointing CUDA processes (`cuda.core.checkpoint`): lock a process's CUDA state, move its
//! device memory to the host, restore it (optionally onto other GPUs), unlock.
//!
//! A coordinator drives a target process by its id, much as a debugger attaches: Linux and the
//! driver enforce permissions (another user's process may need `CAP_SYS_PTRACE`). A [`Process`]
//! names the process that had the id when it was made: its calls refuse the calling process and
//! its threads, and (with a pidfd) a process that has exited, whose id may have gone to another. These calls
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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
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
                return Err(CudaError::InvalidState(format!(
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

/// Whether task `id` is the calling process or one of its threads (`/proc/self/task/<id>`, or
/// the `Tgid` of `/proc/<id>/status`; where `/proc` cannot tell, only the process id counts).
fn is_this_process(id: u32) -> bool {
    id == std::process::id()
        || std::path::Path::new(&format!("/proc/self/task/{id}")).exists()
        || thread_group_of(id) == Some(std::process::id())
}

/// The refusal of `pid` as the calling process.
fn this_process(pid: u32) -> CudaError {
    CudaError::InvalidArgument(format!(
        "pid {pid} is the calling process (or one of its threads): a process cannot checkpoint \
         itself, as locking it would block its every later CUDA call; run the coordinator in \
         another process"
    ))
}

/// A pidfd of a process (`pidfd_open`, Linux 5.3): it names that process, never one that reuses
/// its id, and reads as readable once the process has exited.
#[derive(Debug)]
struct Pidfd(OwnedFd);

impl Pidfd {
    /// A pidfd of process `pid`: `Ok(None)` where the kernel offers none (`ENOSYS` before Linux
    /// 5.3, `EPERM` or `EACCES` under a seccomp policy) or `pid` names a thread rather than a
    /// process (`EINVAL`); an error when no process has that id (`ESRCH`) or no descriptor can be
    /// had.
    fn open(pid: i32) -> Result<Option<Pidfd>> {
        #[cfg(not(target_os = "linux"))]
        {
            let _ = pid;
            Ok(None)
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: pidfd_open takes a pid and flags (0) and returns a new descriptor or -1; no
            // memory is passed.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd >= 0 {
                let fd = i32::try_from(fd).map_err(|_| {
                    CudaError::InvalidArgument(format!("pidfd_open({pid}) returned {fd}, not a descriptor"))
                })?;
                // SAFETY: a descriptor pidfd_open just opened, owned by this value alone.
                return Ok(Some(Pidfd(unsafe { OwnedFd::from_raw_fd(fd) })));
            }
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM | libc::EACCES | libc::EINVAL) => Ok(None),
                Some(libc::ESRCH) => Err(CudaError::InvalidArgument(format!("no process has the id {pid}"))),
                _ => Err(CudaError::InvalidArgument(format!(
                    "pid {pid}: pidfd_open failed: {error}"
                ))),
            }
        }
    }

    /// Whether the process has exited (the pidfd polls readable then).
    fn exited(&self) -> Result<bool> {
        let mut poll = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, a local; a zero timeout returns at once.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        if ready < 0 {
            return Err(CudaError::InvalidArgument(format!(
                "poll of the process's pidfd failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(ready > 0 && poll.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
    }
}

/// A CUDA process to lock, checkpoint, restore and unlock (`cuda.core.checkpoint.Process`).
///
/// It names the process that had the id when it was made, not whichever task has the id later:
/// every call that hands the id to the driver first checks that the id is not the calling process
/// or one of its threads (a thread of this process may get the id of a process that exited), and,
/// where the kernel offers pidfds (Linux 5.3), that the process named at [`new`](Self::new) has
/// not exited (its pidfd, held by the value and its clones, tells). Either is an error
/// (`InvalidArgument`) before the driver is called. Without pidfds only the first check is made.
/// What is left is the time between the check and the driver's call.
#[derive(Debug, Clone)]
pub struct Process {
    pid: i32,
    /// The process named at `new` (`None` where the kernel offers no pidfd).
    pidfd: Option<Arc<Pidfd>>,
}

/// Processes are equal when they name one process: the same id, and the same pidfd (the same
/// [`Process::new`] call, or clones of it) where they hold one.
impl PartialEq for Process {
    fn eq(&self, other: &Process) -> bool {
        self.pid == other.pid
            && match (&self.pidfd, &other.pidfd) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for Process {}

impl std::hash::Hash for Process {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.pid.hash(state);
    }
}

impl Process {
    /// The process with id `pid` (`std::process::Child::id()` gives one); the id must be
    /// positive and fit the driver's `int`.
    ///
    /// The calling process is refused (`InvalidArgument`), by its process id or the id of any of
    /// its threads: locking itself would block every later CUDA call of the process, those that
    /// would unlock it included. A thread id is told from a process id by
    /// `/proc/self/task/<pid>` or the `Tgid` of `/proc/<pid>/status`; where `/proc` cannot tell,
    /// `pid` is compared with this process's id only. Where the kernel offers pidfds, an id no
    /// process has is refused too, and the process is held by a pidfd from here on (see
    /// [`Process`]).
    pub fn new(pid: u32) -> Result<Process> {
        let Some(id) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
            return Err(CudaError::InvalidArgument(format!(
                "pid must be a positive int, got {pid}"
            )));
        };
        if is_this_process(pid) {
            return Err(this_process(pid));
        }
        let pidfd = Pidfd::open(id)?.map(Arc::new);
        let process = Process { pid: id, pidfd };
        // The id may have been reused between the check above and the pidfd.
        process.target()?;
        Ok(process)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Whether this value still names the process [`new`](Self::new) found under its id: not this
    /// process nor one of its threads, and, where the value holds a pidfd, not exited. Called
    /// before each call that hands the id to the driver; nothing here reaches the driver.
    fn target(&self) -> Result<i32> {
        let pid = self.pid as u32;
        if is_this_process(pid) {
            return Err(this_process(pid));
        }
        if let Some(fd) = &self.pidfd {
            if fd.exited()? {
                return Err(CudaError::InvalidState(format!(
                    "process {pid} has exited: a Process names the process that had the id when it was made, and its id may now belong to another (make a new Process for that one)"
                )));
            }
        }
        Ok(self.pid)
    }

    /// The process's checkpoint state.
    pub fn state(&self) -> Result<ProcessState> {
        let pid = self.target()?;
        require_driver()?;
        let mut state = driver::CUprocessState_enum::CU_PROCESS_STATE_FAILED;
        // SAFETY: `state` is a live out-pointer; the pid is a plain integer.
        let status = unsafe { driver::cuCheckpointProcessGetState(pid, &mut state) };
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
        let pid = self.target()?;
        require_driver()?;
        let mut tid = 0;
        // SAFETY: `tid` is a live out-pointer; the pid is a plain integer.
        let status = unsafe { driver::cuCheckpointProcessGetRestoreThreadId(pid, &mut tid) };
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
        let pid = self.target()?;
        require_driver()?;
        let mut args = driver::CUcheckpointLockArgs {
            timeoutMs: timeout_ms,
            ..Default::default()
        };
        // SAFETY: `args` is a live structure with its reserved fields zeroed.
        let status = unsafe { driver::cuCheckpointProcessLock(pid, &mut args) };
        check(
            status,
            "cuCheckpointProcessLock",
            unsupported!("cuCheckpointProcessLock"),
        )
    }

    /// Checkpoints the locked process: its device memory goes to host memory and its GPU state
    /// is released.
    pub fn checkpoint(&self) -> Result<()> {
        let pid = self.target()?;
        require_driver()?;
        // SAFETY: null arguments are allowed (memory goes to the host).
        let status = unsafe { driver::cuCheckpointProcessCheckpoint(pid, std::ptr::null_mut()) };
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
        let pid = self.target()?;
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
        let status = unsafe { driver::cuCheckpointProcessRestore(pid, args_ptr) };
        check(
            status,
            "cuCheckpointProcessRestore",
            unsupported!("cuCheckpointProcessRestore"),
        )
    }

    /// Unlocks the process: its CUDA calls run again.
    pub fn unlock(&self) -> Result<()> {
        let pid = self.target()?;
        require_driver()?;
        // SAFETY: null arguments are allowed.
        let status = unsafe { driver::cuCheckpointProcessUnlock(pid, std::ptr::null_mut()) };
        check(
            status,
            "cuCheckpointProcessUnlock",
            unsupported!("cuCheckpointProcessUnlock"),
        )
    }
}

#[cfg(test)]
mod tests;
