//! Waiting for a stream from the host: [`Stream::sync`] and [`Stream::is_done`], which never
//! overlap a capture beginning, ending or gaining the stream (driver 580 crashed on such calls).

use super::capture;
use super::{Fence, Site, Stream};
use crate::error::Check;
use crate::reaper::refuse_in_callback;
use crate::{CudaError, Result};
use cuda_sys::driver;

impl Stream {
    /// Waits until all work on the stream is done.
    ///
    /// A stream being captured into a graph is refused (the driver would invalidate the
    /// capture). Never a driver call on a stream whose capture may end meanwhile: driver 580
    /// crashed (a raw C program on an H100) synchronising, querying or recording on a stream
    /// that had joined another thread's capture while that capture ended. So an idle stream is
    /// found by a query that no capture begin, end or join can overlap, and a busy one is
    /// waited for through a pooled event recorded the same way: the blocking wait names only
    /// that event and holds no lock (a capture beginning elsewhere never waits for it). Callable
    /// inside a memory resource's `deallocate` (which runs inside an operation on the stream):
    /// it takes no lock of the stream's.
    pub fn sync(&self) -> Result<()> {
        refuse_in_callback()?;
        // No capture runs anywhere, and none begins before the fence is recorded (see `gate`):
        // the query and the record need no serialising.
        if let Some(quiet) = self.quietly() {
            let handle = self.inner.handle;
            // SAFETY: the stream is live and not capturing (quiet).
            if unsafe { query(handle) }? {
                return Ok(());
            }
            let event = self.context_or_current()?.fence()?;
            // SAFETY: both are live; the stream is not capturing (quiet); the event belongs to
            // the stream's context (see `sync_handle`).
            unsafe { driver::cuEventRecord(event.handle(), handle) }.check("cuEventRecord")?;
            drop(quiet);
            return sync_event(&event);
        }
        if self.is_done()? {
            return Ok(());
        }
        if self.is_default() {
            // A default stream's handle means the current context's stream of this thread:
            // fenced through its site (an operation that asks the driver).
            return match Site::of(self)?.fence()? {
                Fence::Event(event) => sync_event(&event),
                Fence::Capturing => Err(sync_refused("sync")),
                // (A site made on this thread names a stream this thread can use.)
                Fence::Unreachable => Err(CudaError::InvalidArgument(
                    "sync: this thread cannot name the stream".into(),
                )),
            };
        }
        sync_handle(&self.context_or_current()?, self.inner.handle)
            .map_err(|e| e.unwrap_or_else(|| sync_refused("sync")))
    }

    /// Whether all work on the stream is done. A stream being captured is refused (the driver
    /// would invalidate the capture); as in [`sync`](Self::sync), the query never overlaps a
    /// capture beginning, ending or gaining the stream.
    pub fn is_done(&self) -> Result<bool> {
        // (In a host function it could wait, through the capture-state lock, for a graph
        // destroy that waits for the host function.)
        refuse_in_callback()?;
        let handle = self.inner.handle;
        // No capture runs anywhere, and none begins meanwhile (see `gate`).
        if let Some(_quiet) = self.quietly() {
            // SAFETY: the stream is live and not capturing (quiet).
            return unsafe { query(handle) };
        }
        if self.is_default() {
            // A default stream's handle means the current context's stream of this thread.
            return Site::of(self)?.enqueue(|capture| match capture {
                Some(_) => Err(sync_refused("is_done")),
                // SAFETY: the stream is live and not capturing (inside its operation).
                None => unsafe { query(handle) },
            });
        }
        // SAFETY: the stream is live and not capturing (`serialised`).
        serialised(handle, || unsafe { query(handle) })?.ok_or_else(|| sync_refused("is_done"))
    }
}

/// Runs `op` (one short driver call on `stream`, which is not a default stream) with no capture
/// beginning, ending or gaining a stream meanwhile (`CAPTURE_STATE` shared); `None`, without
/// running it, when the stream is being captured. Takes no lock of the stream's: callable
/// inside an operation on it.
pub(super) fn serialised<T>(stream: driver::CUstream, op: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    let _serialised = capture::capture_question();
    if capture::is_capturing_serialised(stream)? {
        return Ok(None);
    }
    op().map(Some)
}

/// Waits for the work queued so far on `stream` (not a default stream; of `context`), the way
/// [`Stream::sync`] does: a pooled fence recorded with no capture beginning, ending or gaining a
/// stream meanwhile, then a blocking wait that names only the fence and holds no lock.
/// `Err(None)` when the stream is being captured; `Err(Some(error))` when a call failed. For
/// handles this crate does not own (the cudarc bridge) as for its own streams.
pub(crate) fn sync_handle(
    context: &crate::Context,
    stream: driver::CUstream,
) -> std::result::Result<(), Option<CudaError>> {
    let event = context.fence().map_err(Some)?;
    serialised(stream, || {
        // SAFETY: both are live (the caller's stream, the event held here); the stream is not
        // capturing and joins no capture meanwhile (see `serialised`); the event belongs to the
        // stream's context (for a green context, maybe to its primary context, whose events the
        // driver takes on its green contexts' streams: see `Context::fence`).
        unsafe { driver::cuEventRecord(event.handle(), stream) }.check("cuEventRecord")
    })
    .map_err(Some)?
    .ok_or(None)?;
    sync_event(&event).map_err(Some)
}

/// Whether all work queued on `stream` is done.
///
/// # Safety
/// The stream is live and not capturing (a query would invalidate the capture).
pub(super) unsafe fn query(stream: driver::CUstream) -> Result<bool> {
    // SAFETY: forwarded to the caller.
    let status = unsafe { driver::cuStreamQuery(stream) };
    if status == driver::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    status.check("cuStreamQuery").map(|()| true)
}

/// The refusal of a synchronisation or query of a stream being captured.
fn sync_refused(what: &str) -> CudaError {
    CudaError::InvalidState(format!(
        "{what}: the stream is being captured into a graph, where nothing runs until the graph is launched (the driver would invalidate the capture): end the capture first, or synchronise a stream that is not capturing"
    ))
}

/// Waits for a fence recorded outside any capture, in relaxed capture mode (a thread-local
/// capture this thread runs elsewhere does not make the wait a prohibited call).
fn sync_event(event: &crate::device::FenceEvent) -> Result<()> {
    // SAFETY: the event is live (held by the caller) and was recorded outside any capture.
    super::relaxed_capture_mode(|| unsafe { driver::cuEventSynchronize(event.handle()) }).check("cuEventSynchronize")
}
