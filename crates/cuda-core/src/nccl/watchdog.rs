//! The watchdog of a communicator, and the release of a dropped one.
//!
//! **Watchdog.** A thread per communicator with [`CommunicatorOptions::watchdog`](super::CommunicatorOptions),
//! holding it weakly (it ends when the communicator is gone). Every tick it asks NCCL for an
//! asynchronous error, and records a probe (a fence event) on each stream the communicator's work
//! was queued on, unless one is still pending there; a probe not done within the time-out means
//! the work before it is stuck (a peer died, a collective some rank never joined). Either way the
//! communicator is aborted (`ncclCommAbort`: its kernels stop and the streams drain) and the
//! reason kept for every later call. The abort takes the communicator's lock, so it never frees
//! the communicator under a call; a graph hold (a graph that may launch its kernels again) keeps
//! it from aborting: the reason is then kept and the hang reported, the graph's owner must end it.
//! A host call blocked inside NCCL (an init waiting for ranks that never come) holds the lock and
//! is bounded by NCCL's own time-outs, not by the watchdog.
//!
//! **Release.** A communicator dropped with its handle is handed to the crate's release thread
//! as a retried job: it records a fence on each stream the work was queued on (retrying while a
//! stream is being captured), and aborts the communicator once they are done, or at once when
//! NCCL reports an asynchronous error or the watchdog's time-out passes since the drop. The
//! dropping thread never waits.

use super::comm::{async_error, CommInner, RawComm};
use super::sys;
use crate::device::FenceEvent;
use crate::error::record_drop_error;
use crate::stream::{Fence, Site};
use crate::CudaError;
use cuda_sys::driver;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A probe: a fence recorded on one of the communicator's streams, and when.
struct Probe {
    key: crate::stream::SiteKey,
    fence: FenceEvent,
    since: Instant,
}

/// Whether the work before `fence` is done (an error counts as done: the context stopped it).
fn done(fence: &FenceEvent) -> bool {
    // SAFETY: the event is live (the fence holds it) and was recorded outside any capture.
    let status = unsafe { driver::cuEventQuery(fence.handle()) };
    status != driver::CUresult::CUDA_ERROR_NOT_READY
}

/// Starts the watchdog of `inner`.
pub(crate) fn start(inner: &Arc<CommInner>, timeout: Duration) {
    let weak = Arc::downgrade(inner);
    let tick = (timeout / 10).clamp(Duration::from_millis(5), Duration::from_millis(100));
    let started = std::thread::Builder::new()
        .name("cuda-core-nccl-watchdog".into())
        .spawn(move || watch(weak, timeout, tick));
    if let Err(e) = started {
        record_drop_error(CudaError::InvalidState(format!(
            "cannot start the NCCL watchdog thread: {e}; the communicator runs without one"
        )));
    }
}

fn watch(weak: Weak<CommInner>, timeout: Duration, tick: Duration) {
    let mut probes: Vec<Probe> = Vec::new();
    loop {
        std::thread::sleep(tick);
        let Some(inner) = weak.upgrade() else { return };
        // An asynchronous error (or a closed communicator: nothing left to watch).
        let reason = match inner.state.try_lock() {
            Ok(state) => match &state.handle {
                None => return,
                Some(h) => async_error(h.0)
                    .err()
                    .map(|e| format!("NCCL reported an asynchronous error: {e}")),
            },
            Err(_) => None, // a call runs: asked again next tick
        };
        let reason = reason.or_else(|| stuck(&inner, &mut probes, timeout));
        if let Some(reason) = reason {
            if abort(&inner, &reason) {
                return;
            }
        }
    }
}

/// Records probes on the streams that have none pending; the reason to abort when one has been
/// pending longer than `timeout`.
fn stuck(inner: &CommInner, probes: &mut Vec<Probe>, timeout: Duration) -> Option<String> {
    probes.retain(|p| !done(&p.fence));
    if probes.iter().any(|p| p.since.elapsed() > timeout) {
        return Some(format!(
            "work queued on the communicator did not finish within the watchdog's time-out of {timeout:?} (a peer that died or never joined the collective?)"
        ));
    }
    let sites: Vec<Site> = inner.sites.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for site in sites {
        let key = site.key();
        if probes.iter().any(|p| p.key == key) {
            continue;
        }
        // A stream being captured (or unreachable) is probed again next tick.
        if let Ok(Fence::Event(fence)) = site.fence() {
            probes.push(Probe {
                key,
                fence,
                since: Instant::now(),
            });
        }
    }
    None
}

/// Aborts the communicator for `reason`, unless a graph holds it; `true` when it is closed now.
fn abort(inner: &CommInner, reason: &str) -> bool {
    let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
    if inner.graph_holds.load(std::sync::atomic::Ordering::Acquire) > 0 {
        // Reported once; the watchdog stops (the graph's owner must end the hang).
        record_drop_error(CudaError::InvalidState(format!(
            "the NCCL watchdog would abort the communicator ({reason}), but a graph that may launch its collectives holds it: drop the graph"
        )));
        return true;
    }
    let Some(handle) = state.handle.take() else {
        return true;
    };
    state.closed = Some(format!("aborted by its watchdog: {reason}"));
    // SAFETY: the handle was live and is ours alone now (taken under the lock, no graph holds it);
    // an abort may be called with work pending: it stops it.
    let _ = inner
        .context
        .with_current(|| Ok(unsafe { sys::ncclCommAbort(handle.0) }));
    true
}

/// The release of a dropped communicator (see the module notes).
struct Release {
    handle: RawComm,
    sites: Vec<Site>,
    fences: Option<Vec<FenceEvent>>,
    deadline: Option<Instant>,
}

impl crate::reaper::Retry for Release {
    fn attempt(&mut self) -> bool {
        if self.fences.is_none() {
            let mut fences = Vec::with_capacity(self.sites.len());
            for site in &self.sites {
                match site.fence() {
                    Ok(Fence::Event(f)) => fences.push(f),
                    Ok(Fence::Capturing) => return self.give_up_if_late(),
                    // Unreachable (never for the created streams collectives take) or failed: the
                    // context's error stops its work anyway.
                    Ok(Fence::Unreachable) | Err(_) => {}
                }
            }
            self.fences = Some(fences);
        }
        let all_done = self.fences.as_ref().is_some_and(|f| f.iter().all(done));
        let failed = async_error(self.handle.0).is_err();
        if all_done || failed {
            self.abort_now();
            return true;
        }
        self.give_up_if_late()
    }
}

impl Release {
    fn give_up_if_late(&mut self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.abort_now();
            return true;
        }
        false
    }

    fn abort_now(&mut self) {
        // SAFETY: the last owner of the handle (the communicator is gone, no graph holds it:
        // graphs hold the communicator itself); its work is done, or is stopped by the abort.
        let status = unsafe { sys::ncclCommAbort(self.handle.0) };
        if let Err(e) = super::check(status, "ncclCommAbort", None) {
            record_drop_error(e);
        }
        self.handle.0 = std::ptr::null_mut();
    }
}

/// Hands a dropped communicator's handle to the release thread.
pub(crate) fn release(handle: RawComm, sites: Vec<Site>, timeout: Option<Duration>) {
    crate::reaper::retry(Box::new(Release {
        handle,
        sites,
        fences: None,
        deadline: timeout.map(|t| Instant::now() + t),
    }));
}
