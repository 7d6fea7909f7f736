//! Waits between streams and on events ([`Stream::wait`], [`Stream::wait_event`]): either may
//! make the waiting stream join a capture, which this crate counts and keeps track of (see
//! `capture::keep_if_joined`).

use super::{capture, Stream};
use crate::device::FenceEvent;
use crate::error::Check;
use crate::reaper::refuse_in_callback;
use crate::{CudaError, Event, Result};
use cuda_sys::driver;
use std::sync::Arc;

impl Stream {
    /// Makes later work on this stream wait for `event` (waiting for an event recorded in a
    /// capture makes the stream join that capture: so this excludes every other operation on the
    /// stream meanwhile).
    ///
    /// A default stream does not wait for an event this crate last recorded into a capture that
    /// the stream is not part of: it would join that capture, and other libraries' work queued
    /// on the per-thread default stream would be recorded into the graph without the graph
    /// holding what it uses (the same reason a safe call never captures a default stream).
    ///
    /// A blocking stream's wait while captures of this crate run may make it join one, which
    /// counts as a blocking stream's capture (see [`legacy_default`](Self::legacy_default)): the
    /// wait first waits for legacy-stream operations in progress on other threads, and is
    /// refused in host functions and inside a memory resource's `allocate` or `deallocate`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // (Before anything that may wait for other threads: see `blocking_join`.)
        refuse_in_callback()?;
        // No capture of this crate runs, and none begins before the wait is queued (see `gate`):
        // nothing can be joined.
        if let Some(_quiet) = self.quietly() {
            // SAFETY: both handles are live; a wait records no node using the event.
            return unsafe { driver::cuStreamWaitEvent(self.inner.handle, event.handle(), 0) }
                .check("cuStreamWaitEvent");
        }
        let joining = self.blocking_join()?;
        let waited = self.enqueue_exclusive(|capture| {
            let _records = (self.is_default() && capture.is_none()).then(|| event.records());
            if _records.is_some() && event.recorded_in_capture() {
                return Err(default_stream_join());
            }
            // SAFETY: both handles are live; a wait records no node using the event.
            unsafe { driver::cuStreamWaitEvent(self.inner.handle, event.handle(), 0) }.check("cuStreamWaitEvent")
        });
        capture::keep_if_joined(self, joining, waited.is_ok());
        waited
    }

    /// Makes later work on this stream wait for the work queued on `other` so far (also across
    /// devices): a timing-free event recorded on `other` (from its context's pool). If `other`
    /// is being captured, a blocking stream joins that capture, as in
    /// [`wait_event`](Self::wait_event).
    pub fn wait(&self, other: &Stream) -> Result<()> {
        refuse_in_callback()?;
        let fence = other.context_or_current()?.fence()?;
        let handle = fence.handle();
        // The fence stays ours until the wait is queued; once recorded into a capture it is
        // shared with the graph (a heap cell only then, none on the plain path).
        let mut own = Some(fence);
        let mut shared: Option<Arc<FenceEvent>> = None;
        // Whether the fence is a point of a capture (`other` is being captured): waiting for it
        // makes this stream join that capture.
        let in_capture = other.enqueue(|capture| {
            if capture.is_some() && self.is_default() {
                // The fence would be a capture point: waiting for it, this default stream would
                // join the capture (see `wait_event`).
                return Err(default_stream_join());
            }
            // SAFETY: both handles are live; the event belongs to the stream's context (for a green
            // context, to its primary context, whose events the driver takes on its streams).
            unsafe { driver::cuEventRecord(handle, other.handle()) }.check("cuEventRecord")?;
            let Some(capture) = capture else { return Ok(false) };
            // Recorded into a capture: the graph holds it, so that it goes back to its pool (and
            // is recorded elsewhere) only once the capture is over and its graph gone.
            if let Some(fence) = own.take() {
                let kept = Arc::new(fence);
                capture.hold_shared(kept.clone());
                shared = Some(kept);
            }
            Ok(true)
        })?;
        let joining = if in_capture { self.blocking_join()? } else { None };
        let waited = self.enqueue_exclusive(|_| {
            // SAFETY: both handles are live (the fence is `own` or `shared`, held to the end of
            // this call); the wait keeps what the event captured when queued.
            unsafe { driver::cuStreamWaitEvent(self.inner.handle, handle, 0) }.check("cuStreamWaitEvent")
        });
        capture::keep_if_joined(self, joining, waited.is_ok());
        drop((own, shared));
        waited
    }

    /// Before a wait on a blocking stream (not a default one) that may join a capture (the
    /// caller found that captures run, inside the gate, or that the awaited point is in one):
    /// the join counts as a blocking stream's capture (legacy-stream work is refused while it
    /// runs: see `capture::BLOCKING_CAPTURES`), counted before the wait and kept until that
    /// capture ends by [`capture::keep_if_joined`]. Holds no lock; may wait for other threads'
    /// legacy-stream operations (so never in a host function: the caller refused that).
    fn blocking_join(&self) -> Result<Option<capture::BlockingCapture>> {
        if self.is_default() || self.nonblocking_without_a_capture_question() {
            return Ok(None);
        }
        capture::blocking_capture_joining().map(Some)
    }

    /// Whether the stream is non-blocking, as far as a wait can tell without disturbing a
    /// capture: the flag once read; else read now unless the stream is being captured (the
    /// driver would invalidate that capture); a foreign stream another library captures counts
    /// as blocking, which refuses legacy-stream work for longer than needed, never shorter.
    fn nonblocking_without_a_capture_question(&self) -> bool {
        if let Some(known) = self.inner.known_nonblocking() {
            return known;
        }
        matches!(capture::is_capturing(self.inner.handle), Ok(false)) && self.is_nonblocking().unwrap_or(false)
    }
}

/// The refusal of a default stream's wait that would join a capture.
fn default_stream_join() -> CudaError {
    CudaError::InvalidState(
        "a default stream cannot wait for work recorded in a capture: it would join the capture, and other libraries' work on it (the per-thread default stream is every library's) would be recorded into the graph without the graph holding what it uses. Wait with a stream of your own, or after the capture ends".into(),
    )
}
