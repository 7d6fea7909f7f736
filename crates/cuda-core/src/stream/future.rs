//! Futures that complete when GPU work does: [`Stream::synchronized`] and
//! [`Event::completed`] give a [`Completion`], woken by a stream callback the driver calls once
//! the work before it is done, or has failed (never polled in a loop, no thread per wait).
//! Runtime-agnostic: any executor's `Waker` is woken.
//!
//! **Why a stream callback.** `cuStreamAddCallback` is called with the stream's status also when
//! the work failed (a kernel that faulted stops the context's work: a host function queued with
//! `cuLaunchHostFunc` would then never run, and the future would never resolve). The status is
//! the future's result; nothing is asked of the driver when it is polled.
//!
//! **Cancel safety.** The driver's callback and the future share a [`Signal`] by reference count:
//! a future dropped early leaves the callback a live signal to set (nobody waits for it). What
//! the work uses on the host (a copy's vector) is kept by the signal and dropped on this crate's
//! release thread once the callback has run, never before. The callback calls no CUDA function:
//! it stores the status and wakes the waker.

use super::{Event, Stream, StreamOptions};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

/// What the driver's callback and a future share.
#[derive(Default)]
struct State {
    /// The stream's status when the callback ran (`None` until then).
    status: Option<driver::CUresult>,
    waker: Option<Waker>,
    /// Kept until the callback has run (host memory the work before it uses).
    keep: Option<Box<dyn Any + Send>>,
}

#[derive(Default)]
struct Signal {
    state: Mutex<State>,
}

impl Signal {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called by the driver's callback: stores the status and wakes the waiting task (outside
    /// the lock, so that a waker that polls at once finds it free); what was kept goes to the
    /// release thread.
    fn fire(&self, status: driver::CUresult) {
        let (waker, keep) = {
            let mut state = self.lock();
            state.status = Some(status);
            (state.waker.take(), state.keep.take())
        };
        if let Some(keep) = keep {
            crate::reaper::drop_later(keep);
        }
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The status once the callback ran; if not yet, `waker` is woken when it does. Wakers are
    /// cloned and dropped outside the lock (a waker's own code may poll again).
    fn status_or_register(&self, waker: &Waker) -> Option<driver::CUresult> {
        {
            let state = self.lock();
            if state.status.is_some() {
                return state.status;
            }
            if state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                return None;
            }
        }
        let new = waker.clone();
        let old = {
            let mut state = self.lock();
            if state.status.is_some() {
                return state.status;
            }
            state.waker.replace(new)
        };
        drop(old);
        None
    }
}

/// Called by the driver once, on a thread of its own, when the work queued before it is done
/// (or failed: `status`).
unsafe extern "C" fn fired(_stream: driver::CUstream, status: driver::CUresult, data: *mut c_void) {
    // SAFETY: `data` is the `Arc<Signal>` leaked by `add_callback` for this one call (a
    // capturing stream is refused, so no graph calls it again).
    let signal = unsafe { Arc::from_raw(data as *const Signal) };
    crate::reaper::run_as_callback("a Completion's waker", || signal.fire(status));
    // The last reference may be this one (the future was dropped): what it held went to the
    // release thread above, and a waker left in it is dropped here.
    crate::reaper::run_as_callback("dropping a Completion's waker", move || drop(signal));
}

/// A future that resolves when the GPU work before it is done ([`Stream::synchronized`],
/// [`Event::completed`]): `Ok(())`, or the error the driver reports for the stream when it got
/// there (a kernel that faulted, say: the context's work stops, and the future resolves with the
/// error rather than never). Dropping it early is safe: the driver's callback still runs and
/// finds its shared state alive.
///
/// Wakers are woken on a driver thread, which runs the callbacks of the stream's context in
/// order: a waker that blocks holds them up, and one that waits for another `Completion` of the
/// same context may never return. Like a host function
/// ([`Stream::launch_host_func`](crate::Stream::launch_host_func)), a waker must not call CUDA:
/// this crate refuses its own calls there, and another library's call may fail or deadlock
/// (an error or a hang, never memory corruption). Executors' wakers only schedule a task, which
/// then runs on the executor's own threads.
#[must_use = "a Completion does nothing unless awaited"]
pub struct Completion {
    signal: Arc<Signal>,
    /// What the future waits on, kept alive while it may be polled.
    _source: Stream,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.signal.state.try_lock().ok().map(|s| s.status.is_some());
        f.debug_struct("Completion").field("done", &status).finish()
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        match self.signal.status_or_register(cx.waker()) {
            None => Poll::Pending,
            Some(status) => Poll::Ready(status.check("the work a Completion waited for")),
        }
    }
}

/// Queues on `stream` a callback that fires `signal` with the stream's status. Call inside an
/// operation on the stream, which is not capturing.
fn add_callback(stream: &Stream, signal: &Arc<Signal>) -> Result<()> {
    let data = Arc::into_raw(signal.clone());
    // SAFETY: the stream is live and not capturing (the caller's operation); the driver calls
    // `fired` once with `data`, which owns one reference.
    let status = unsafe { driver::cuStreamAddCallback(stream.handle(), Some(fired), data as *mut c_void, 0) };
    if let Err(e) = status.check("cuStreamAddCallback") {
        // SAFETY: the driver did not take `data`: the reference comes back.
        drop(unsafe { Arc::from_raw(data) });
        return Err(e);
    }
    Ok(())
}

/// A [`Completion`] of the work queued on `stream` so far, keeping the stream while it may be
/// polled. Refused on a stream being captured (a graph cannot hold a stream callback, and its
/// work runs at its launches, which this future would never see).
fn completion(stream: &Stream) -> Result<Completion> {
    crate::reaper::start();
    let signal = Arc::new(Signal::default());
    stream.enqueue(|capture| {
        if capture.is_some() {
            return Err(CudaError::InvalidState(
                "a Completion cannot wait on a stream being captured into a graph (its work runs when the graph is launched): await a stream that launches the graph instead".into(),
            ));
        }
        add_callback(stream, &signal)
    })?;
    Ok(Completion {
        signal,
        _source: stream.clone(),
    })
}

impl Stream {
    /// A future that resolves when the work queued on the stream so far is done
    /// (`stream.synchronized()?.await?` in place of [`sync`](Self::sync), which blocks the
    /// thread), woken by a callback the driver calls when it gets there; the stream's later work
    /// waits for that call, which only stores the status and wakes the task. Futures of one
    /// stream resolve in the order they were made. On a stream being captured this is an error.
    pub fn synchronized(&self) -> Result<Completion> {
        completion(self)
    }
}

/// A [`Completion`] whose callback a copy queues inside its own operation, after its work (so
/// that nothing can come between them), with the host memory the work reads kept until the
/// callback has run.
pub(crate) struct Armed {
    signal: Arc<Signal>,
    queued_work: bool,
}

impl Armed {
    pub(crate) fn new() -> Armed {
        crate::reaper::start();
        Armed {
            signal: Arc::new(Signal::default()),
            queued_work: false,
        }
    }

    /// Notes that work using the kept memory was queued (call right after queuing it).
    pub(crate) fn work_queued(&mut self) {
        self.queued_work = true;
    }

    /// Queues the callback on `stream`: inside an operation on it, the stream not capturing.
    pub(crate) fn queue(&self, stream: &Stream) -> Result<()> {
        add_callback(stream, &self.signal)
    }

    /// The future, once the operation ended with `queued`: `keep` stays alive until the callback
    /// has run. On an error with the work queued but not the callback, `keep` is never freed
    /// (the work may still read it); with nothing queued it is dropped.
    pub(crate) fn finish(self, stream: &Stream, keep: Box<dyn Any + Send>, queued: Result<()>) -> Result<Completion> {
        if let Err(e) = queued {
            if self.queued_work {
                std::mem::forget(keep);
            }
            return Err(e);
        }
        let done = {
            let mut state = self.signal.lock();
            if state.status.is_none() {
                state.keep = Some(keep);
                None
            } else {
                Some(keep)
            }
        };
        // The callback already ran: the work is over, nothing reads `keep` any more.
        drop(done);
        Ok(Completion {
            signal: self.signal,
            _source: stream.clone(),
        })
    }
}

impl Event {
    /// A future that resolves when the work before the event's last record is done. A stream of
    /// the event's context waits for the event and signals the future: for a device's primary
    /// context, an idle stream kept for this (made once, and handed back to be used again once
    /// the future's signal has fired), else a new stream (a few microseconds to make). An event
    /// never recorded is complete at once. An event recorded in a capture that is still running
    /// is refused (a stream waiting for it joins that capture).
    ///
    /// Any thread may call it; not a host function or a waker (no CUDA call is made there).
    pub fn completed(&self) -> Result<Completion> {
        crate::reaper::refuse_in_callback()?;
        let mut lease = WaiterLease::take(self.context())?;
        let waiter = lease.stream.clone();
        let joined = || {
            CudaError::InvalidState(
                "the event was recorded in a capture that is still running (waiting for it joined that capture): await an event recorded outside captures, or the stream that launches the graph".into(),
            )
        };
        {
            // Not joined to a capture this crate recorded the event into (checked under the
            // event's lock, as a default stream's wait does).
            let _records = self.records();
            if self.recorded_in_capture() {
                return Err(joined());
            }
            if let Err(e) = waiter.wait_event(self) {
                lease.keep_out();
                return Err(e);
            }
        }
        // (A record this crate did not make, into a capture: the waiter joined it, and is never
        // used again.)
        match super::capture::is_capturing(waiter.handle()) {
            Ok(false) => {}
            Ok(true) => {
                lease.keep_out();
                return Err(joined());
            }
            Err(e) => {
                lease.keep_out();
                return Err(e);
            }
        }
        let armed = Armed::new();
        let queued = waiter.enqueue(|capture| {
            if capture.is_some() {
                return Err(joined());
            }
            armed.queue(&waiter)
        });
        if queued.is_err() {
            lease.keep_out();
        }
        // The lease goes back to the pool once the callback has run (the signal drops what it
        // keeps then, on the release thread), never while the stream may still be waiting.
        armed.finish(&waiter, Box::new(lease), queued)
    }
}

/// Idle streams that [`Event::completed`] waits with, by primary context (those live as long as
/// the process, so the streams keep nothing alive that would otherwise go). A stream is in the
/// pool only while nothing is queued on it that has not run: it is handed back once its
/// completion's callback has run.
static WAITERS: std::sync::Mutex<Vec<(usize, Vec<Stream>)>> = std::sync::Mutex::new(Vec::new());

/// Idle waiter streams kept per context; more are destroyed as they come back.
const IDLE_WAITERS: usize = 16;

/// A waiter stream taken from [`WAITERS`] (or made), handed back when dropped unless kept out.
struct WaiterLease {
    stream: Stream,
    /// The pool it goes back to: the primary context's handle (`None`: not pooled).
    context: Option<usize>,
}

impl WaiterLease {
    fn take(context: &crate::device::Context) -> Result<WaiterLease> {
        let key = context.is_primary().then(|| context.handle() as usize);
        if let Some(key) = key {
            let mut pools = WAITERS.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(stream) = pools
                .iter_mut()
                .find(|(k, _)| *k == key)
                .and_then(|(_, idle)| idle.pop())
            {
                return Ok(WaiterLease {
                    stream,
                    context: Some(key),
                });
            }
        }
        let stream = Stream::new(
            context,
            StreamOptions {
                nonblocking: true,
                priority: None,
            },
        )?;
        Ok(WaiterLease { stream, context: key })
    }

    /// Not handed back: it may still have work queued, or be in a capture.
    fn keep_out(&mut self) {
        self.context = None;
    }
}

impl Drop for WaiterLease {
    fn drop(&mut self) {
        let Some(key) = self.context else {
            return;
        };
        let mut pools = WAITERS.lock().unwrap_or_else(|p| p.into_inner());
        let index = match pools.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                pools.push((key, Vec::new()));
                pools.len() - 1
            }
        };
        let idle = &mut pools[index].1;
        if idle.len() < IDLE_WAITERS {
            idle.push(self.stream.clone());
        }
        // (Otherwise the stream is destroyed with its last clone, after the lock.)
    }
}
