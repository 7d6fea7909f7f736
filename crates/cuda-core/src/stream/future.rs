//! Futures that complete when GPU work does: [`Stream::synchronized`] and
//! [`Event::completed`] give a [`Completion`], woken by a host function the driver calls once
//! the work before it is done (never polled in a loop, no thread per wait). Runtime-agnostic:
//! any executor's `Waker` is woken.
//!
//! **Cancel safety.** The driver's callback and the future share a [`Signal`] by reference count:
//! a future dropped early leaves the callback a live signal to set (nobody waits for it), and
//! what the callback holds is dropped on this crate's release thread, never the driver's. The
//! callback calls no CUDA function: it sets a flag and wakes the waker.

use super::{Event, Stream, StreamOptions};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

/// What a driver callback and a future share: whether the work is done, and who to wake.
#[derive(Default)]
struct Signal {
    state: Mutex<(bool, Option<Waker>)>,
}

impl Signal {
    /// Called by the driver's callback: marks the work done and wakes the waiting task (outside
    /// the lock, so that a waker that polls at once finds it free).
    fn fire(&self) {
        let waker = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.0 = true;
            state.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the work is done; if not, `waker` is woken when it is.
    fn done_or_register(&self, waker: &Waker) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.0 {
            return true;
        }
        match &mut state.1 {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        false
    }
}

/// What a completed future asks the driver, to report an error the work ran into.
enum Source {
    /// `cuStreamQuery` of the stream.
    Stream(Stream),
    /// `cuEventQuery` of the event; the stream that waits for it is kept until the future goes.
    Event(Event, #[allow(dead_code)] Stream),
}

/// A future that resolves when the GPU work before it is done ([`Stream::synchronized`],
/// [`Event::completed`]): `Ok(())`, or the error the driver reports for that work (a kernel that
/// faulted, say). Dropping it early is safe: the driver's callback still runs and finds its
/// shared state alive.
#[must_use = "a Completion does nothing unless awaited"]
pub struct Completion {
    signal: Arc<Signal>,
    source: Source,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = self.signal.state.lock().map(|s| s.0).unwrap_or(false);
        f.debug_struct("Completion").field("done", &done).finish()
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        if !self.signal.done_or_register(cx.waker()) {
            return Poll::Pending;
        }
        if crate::reaper::in_callback() {
            // Polled from a driver thread (a waker that polls inline): no CUDA call here.
            return Poll::Ready(Ok(()));
        }
        // The work is done; the driver says whether it failed. A stream or event with later
        // work queued answers "not ready", which is no error.
        // SAFETY: the stream or event is live (held by the future).
        let status = unsafe {
            match &self.source {
                Source::Stream(s) => driver::cuStreamQuery(s.handle()),
                Source::Event(e, _) => driver::cuEventQuery(e.handle()),
            }
        };
        if status == driver::CUresult::CUDA_ERROR_NOT_READY {
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(status.check("the work a Completion waited for"))
    }
}

/// Queues on `stream` a host function that fires `signal` (refused on a stream being
/// captured: a graph would call it at every launch, and this future would never see them).
fn signal_on(stream: &Stream, signal: &Arc<Signal>) -> Result<()> {
    signal_keeping(stream, signal, Box::new(()))
}

/// [`signal_on`], with `keep` held by the host function until it has run (then dropped on the
/// release thread): what the work queued before it uses (host memory of a copy).
fn signal_keeping(stream: &Stream, signal: &Arc<Signal>, keep: Box<dyn std::any::Any + Send>) -> Result<()> {
    let fired = signal.clone();
    stream
        .launch_host_func(move || {
            let _ = &keep;
            fired.fire()
        })
        .map_err(|e| match e {
            CudaError::InvalidArgument(m) if m.contains("captured graph") => CudaError::InvalidArgument(
                "a Completion cannot wait on a stream being captured into a graph (its work runs when the graph is launched): await a stream that launches the graph instead".into(),
            ),
            other => other,
        })
}

impl Stream {
    /// A future that resolves when the work queued on the stream so far is done
    /// (`stream.synchronized()?.await?` in place of [`sync`](Self::sync), which blocks the
    /// thread). A host function the driver calls when it gets there wakes the task; the stream's
    /// later work waits for that call, which only sets a flag. Futures of one stream resolve in
    /// the order they were made. On a stream being captured into a graph this is an error.
    pub fn synchronized(&self) -> Result<Completion> {
        let signal = Arc::new(Signal::default());
        signal_on(self, &signal)?;
        Ok(Completion {
            signal,
            source: Source::Stream(self.clone()),
        })
    }
}

impl Stream {
    /// [`synchronized`](Self::synchronized), keeping `keep` alive (and where it is) until the
    /// work queued so far is done, however early the future is dropped.
    pub(crate) fn synchronized_keeping(&self, keep: Box<dyn std::any::Any + Send>) -> Result<Completion> {
        let signal = Arc::new(Signal::default());
        signal_keeping(self, &signal, keep)?;
        Ok(Completion {
            signal,
            source: Source::Stream(self.clone()),
        })
    }
}

impl Event {
    /// A future that resolves when the work before the event's last record is done. A new
    /// stream of the event's context waits for the event and signals the future (a few
    /// microseconds to make). An event never recorded is complete at once. Awaiting an event
    /// recorded in a capture that is still running is a misuse: an error (and that capture then
    /// fails to end, as the driver has the waiting stream join it).
    pub fn completed(&self) -> Result<Completion> {
        let waiter = Stream::new(
            self.context(),
            StreamOptions {
                nonblocking: true,
                priority: None,
            },
        )?;
        waiter.wait_event(self)?;
        let mut capturing = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the waiter is live; out-pointer to a local.
        unsafe { driver::cuStreamIsCapturing(waiter.handle(), &mut capturing) }.check("cuStreamIsCapturing")?;
        if capturing != driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            // The waiter joined that capture, which can then no longer end well (the waiter is
            // not joined back): a misuse reported as an error, never a future that hangs.
            return Err(CudaError::InvalidArgument(
                "the event was recorded in a capture that is still running (waiting for it joined the capture, which will now fail to end): await an event recorded outside captures, or the stream that launches the graph".into(),
            ));
        }
        let signal = Arc::new(Signal::default());
        signal_on(&waiter, &signal)?;
        Ok(Completion {
            signal,
            source: Source::Event(self.clone(), waiter),
        })
    }
}
