//! [`Site`]: a stream as an operation used it, and fences ordering one site after another.
//!
//! A default stream handle names a different stream on each thread (per-thread default stream)
//! or in each context (legacy default stream). Whoever remembers where work was queued, to order
//! something after it later (a buffer's free, the release of what a graph's launches use), keeps
//! a `Site`: the stream with the context, and for the per-thread stream the thread, it meant.

use super::capture::Capture;
use super::Stream;
use crate::device::{Context, FenceEvent};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::thread::ThreadId;

/// A stream as used by an operation: what its handle meant where it was used.
#[derive(Clone)]
pub(crate) struct Site {
    stream: Stream,
    /// For a default stream, the context current when it was used (other streams carry their
    /// own: not copied here, which keeps making a site of one cheap).
    context: Option<Context>,
    /// For the per-thread default stream (and the NULL handle, which names it in per-thread
    /// mode): the thread that used it.
    thread: Option<ThreadId>,
}

/// What identifies a [`Site`]: equal keys name the same stream (see [`Site::same`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SiteKey {
    stream: usize,
    context: usize,
    thread: Option<ThreadId>,
}

/// What [`Site::fence`] could do.
pub(crate) enum Fence {
    /// An event recorded after the work queued on the site so far.
    Event(FenceEvent),
    /// The site's stream is being captured into a graph: nothing recorded now would follow its
    /// earlier work (it would join the capture instead). Try again once the capture is over.
    Capturing,
    /// Another thread's per-thread default stream: this thread cannot queue on it.
    Unreachable,
}

impl Site {
    /// `stream` as the calling thread uses it now.
    #[inline]
    pub(crate) fn of(stream: &Stream) -> Result<Site> {
        if !stream.is_default() {
            return Site::plain(stream).ok_or_else(|| CudaError::InvalidState("the stream has no context".into()));
        }
        let context = Context::current()?.ok_or_else(|| {
            CudaError::InvalidState(
                "a default stream was used with no current context: make a device current first (Device::set_current)"
                    .into(),
            )
        })?;
        let thread = (stream.handle() as usize != super::LEGACY).then(|| std::thread::current().id());
        Ok(Site {
            stream: stream.clone(),
            context: Some(context),
            thread,
        })
    }

    /// `stream` when it is a plain stream (not a default stream) with a context: the site of
    /// it, which is the same on every thread. `None` for the others (see [`of`](Self::of)).
    #[inline]
    pub(crate) fn plain(stream: &Stream) -> Option<Site> {
        Site::is_plain_stream(stream).then(|| Site::of_plain(stream))
    }

    /// Whether `stream` is a plain stream with a context (see [`plain`](Self::plain)), without
    /// making its site (which takes a reference on the stream).
    #[inline]
    pub(crate) fn is_plain_stream(stream: &Stream) -> bool {
        !stream.is_default() && stream.context().is_some()
    }

    /// The site of `stream`, which must be one [`is_plain_stream`](Self::is_plain_stream)
    /// accepts. (Given a default stream, the site would have no context: every use of it would
    /// fail with "the stream has no context", and the memory freed there would be kept.)
    #[inline]
    pub(crate) fn of_plain(stream: &Stream) -> Site {
        debug_assert!(Site::is_plain_stream(stream));
        Site {
            stream: stream.clone(),
            context: None,
            thread: None,
        }
    }

    /// Whether the site is a plain stream (see [`plain`](Self::plain)): the same on every thread,
    /// and queued on without making a context current.
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        !self.stream.is_default()
    }

    /// The legacy default stream of `context` (reachable from every thread).
    pub(crate) fn of_legacy(context: &Context) -> Site {
        Site {
            stream: Stream::legacy_default(),
            context: Some(context.clone()),
            thread: None,
        }
    }

    /// The stream.
    #[inline]
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The context work on the site is queued in (every site has one: `Site::of` checks).
    pub(crate) fn context(&self) -> Result<&Context> {
        self.context
            .as_ref()
            .or(self.stream.context())
            .ok_or_else(|| CudaError::InvalidState("the stream has no context".into()))
    }

    /// Whether `stream`, used on the calling thread, is this site, without resolving anything:
    /// `true` only for the same non-default stream (the cheap test of the common case).
    #[inline]
    pub(crate) fn is_plainly(&self, stream: &Stream) -> bool {
        !stream.is_default() && stream.handle() == self.stream.handle()
    }

    /// The site's identity, to key maps by.
    pub(crate) fn key(&self) -> SiteKey {
        SiteKey {
            stream: self.stream.handle() as usize,
            context: self.context.as_ref().map_or(0, |c| c.handle() as usize),
            thread: self.thread,
        }
    }

    /// Whether two sites name the same stream.
    pub(crate) fn same(&self, other: &Site) -> bool {
        self.stream.handle() == other.stream.handle()
            && self.thread == other.thread
            && self.context.as_ref().map(Context::handle) == other.context.as_ref().map(Context::handle)
    }

    /// Whether the calling thread can queue work on the site.
    pub(crate) fn reachable(&self) -> bool {
        self.thread.is_none_or(|t| t == std::thread::current().id())
    }

    /// Runs `op` on the site's stream under its capture lock (see [`Stream::enqueue`]), with the
    /// site's context current (a default stream's meaning depends on it, and some frees need
    /// one). The caller checks [`reachable`](Self::reachable).
    pub(crate) fn enqueue<T>(&self, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        self.context()?.with_current(|| self.stream.enqueue(op))
    }

    /// [`enqueue`](Self::enqueue) for operations that name the stream and nothing of its context
    /// (recording an event, waiting for one): the context is made current only for a default
    /// stream, whose handle means the current context's stream. So fences of a green context's
    /// streams never make that context current (see `Context`: one thread at a time).
    fn enqueue_on_stream<T>(&self, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        if self.stream.is_default() {
            self.enqueue(op)
        } else {
            self.stream.enqueue(op)
        }
    }

    /// Records a fence after the work queued on the site so far.
    pub(crate) fn fence(&self) -> Result<Fence> {
        if !self.reachable() {
            return Ok(Fence::Unreachable);
        }
        let event = self.context()?.fence()?;
        self.enqueue_on_stream(|capture| {
            if capture.is_some() {
                return Ok(Fence::Capturing);
            }
            // SAFETY: the stream is live and not capturing (inside its operation); the event
            // belongs to the site's context (for a green context, to its primary context, whose
            // events the driver takes on its green contexts' streams).
            unsafe { driver::cuEventRecord(event.handle(), self.stream.handle()) }.check("cuEventRecord")?;
            Ok(Fence::Event(event))
        })
    }

    /// Makes the site's later work wait for `fence` (`false`, and nothing queued, while the
    /// stream is being captured: the wait would isolate the capture).
    pub(crate) fn wait(&self, fence: &FenceEvent) -> Result<bool> {
        self.enqueue_on_stream(|capture| {
            if capture.is_some() {
                return Ok(false);
            }
            // SAFETY: both handles are live; the stream is not capturing. The wait keeps what the
            // event captured when it was queued, so the event may be recorded again afterwards.
            unsafe { driver::cuStreamWaitEvent(self.stream.handle(), fence.handle(), 0) }.check("cuStreamWaitEvent")?;
            Ok(true)
        })
    }

    /// Blocks until the work queued on the site so far is done: the stream's, or for another
    /// thread's per-thread default stream (which this thread cannot name) the whole context's.
    pub(crate) fn synchronize(&self) -> Result<()> {
        if self.try_synchronize()? {
            return Ok(());
        }
        Err(CudaError::InvalidState(
            "the memory was last used on another thread's per-thread default stream, which only a synchronisation of its context can wait for, and a stream of that context is being captured into a graph (such a synchronisation would invalidate the capture): retry after the capture ends, or use the memory on streams you created".into(),
        ))
    }

    /// [`synchronize`](Self::synchronize), or `Ok(false)` without waiting when that would take a
    /// context-wide synchronisation while a stream of the context is being captured (which it
    /// would invalidate: see [`Context::synchronize`](crate::Context::synchronize)).
    pub(crate) fn try_synchronize(&self) -> Result<bool> {
        if self.reachable() {
            if self.stream.is_default() {
                self.context()?.with_current(|| self.stream.sync())?;
            } else {
                self.stream.sync()?;
            }
            return Ok(true);
        }
        self.context()?.try_synchronize()
    }
}
