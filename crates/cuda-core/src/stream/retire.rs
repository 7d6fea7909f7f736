//! Releases that wait for the GPU without making anyone wait: [`release_after`] hands values to
//! the release thread, which drops them once the work queued so far on some streams is done.
//! What a graph's launches may still use, and memory whose resource frees it at once (not
//! stream-ordered), are let go of this way, so that no `Drop` waits for the GPU.

use super::capture::refused_for_now;
use super::{Fence, Site};
use crate::device::FenceEvent;
use crate::error::{record_drop_error, Check};
use cuda_sys::driver;
use std::any::Any;

/// Values released once the work queued so far on some streams is done: fences are recorded
/// where the values were let go of when that thread can, else on the release thread (waiting out
/// captures on those streams), then polled there; the values are dropped there, in order.
struct Retired {
    values: Vec<Box<dyn Any + Send>>,
    waiting: Vec<Site>,
    fences: Vec<FenceEvent>,
}

impl Retired {
    /// Records a fence on each site the calling thread can reach now (its own per-thread default
    /// stream included, which the release thread could only wait for by synchronising the whole
    /// context); the others are left for the release thread.
    fn fence_reachable(&mut self) {
        let mut still = Vec::new();
        for site in std::mem::take(&mut self.waiting) {
            match site.reachable().then(|| site.fence()) {
                Some(Ok(Fence::Event(e))) => self.fences.push(e),
                _ => still.push(site),
            }
        }
        self.waiting = still;
    }
}

impl crate::reaper::Retry for Retired {
    fn attempt(&mut self) -> bool {
        let mut still = Vec::new();
        for site in std::mem::take(&mut self.waiting) {
            // `Ok(true)` once waited for (a fence to poll, or its context synchronised).
            let waited = site.fence().and_then(|fence| match fence {
                Fence::Event(e) => {
                    self.fences.push(e);
                    Ok(true)
                }
                Fence::Capturing => Ok(false),
                // Another thread's per-thread default stream: only a synchronisation of its
                // context waits for it (not while a capture runs there).
                Fence::Unreachable => site.try_synchronize(),
            });
            match waited {
                Ok(true) => {}
                // A capture in the way (another library's, on the stream), or a green context
                // current on another thread: tried again.
                Ok(false) => still.push(site),
                Err(e) if refused_for_now(&e) => still.push(site),
                Err(e) => {
                    // The stream cannot be reached (its context is broken): the values may still
                    // be in use, so they are kept (asking again would fail the same way).
                    record_drop_error(e);
                    std::mem::forget(std::mem::take(&mut self.values));
                    return true;
                }
            }
        }
        self.waiting = still;
        if !self.waiting.is_empty() {
            return false;
        }
        while let Some(fence) = self.fences.last() {
            // SAFETY: a live event of the pool.
            let status = unsafe { driver::cuEventQuery(fence.handle()) };
            if status == driver::CUresult::CUDA_ERROR_NOT_READY {
                return false;
            }
            if let Err(e) = status.check("cuEventQuery") {
                record_drop_error(e);
                std::mem::forget(std::mem::take(&mut self.values));
                return true;
            }
            // Passed: not asked again.
            self.fences.pop();
        }
        // In order: the first value handed over is dropped first.
        for value in self.values.drain(..) {
            drop(value);
        }
        true
    }
}

/// Drops `values` on the release thread once the work queued so far on `sites` is done (at
/// once, there, when `sites` is empty). The fences are recorded here where this thread can (a
/// `cuEventRecord` each, never a wait); on a driver callback thread, or inside an operation on a
/// stream (whose lock a fence would take again), it only posts.
pub(crate) fn release_after(values: Vec<Box<dyn Any + Send>>, sites: Vec<Site>) {
    if values.is_empty() {
        return;
    }
    let mut job = Retired {
        values,
        waiting: sites,
        fences: Vec::new(),
    };
    if !crate::reaper::in_callback() && !super::gate::in_operation() {
        job.fence_reachable();
    }
    crate::reaper::retry(Box::new(job));
}
