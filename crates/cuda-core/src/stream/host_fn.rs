//! Host functions queued on a stream ([`Stream::launch_host_func`]).

use super::Stream;
use crate::error::Check;
use crate::reaper::run_as_callback;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;

type HostFn = Box<dyn FnMut() + Send + 'static>;

/// Called by the driver at most once, on a thread of its own (never, when the context's work
/// stopped on an error before it).
unsafe extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: data is the Box<HostFn> leaked by `launch_host_func`, which the driver hands to
    // this function at most once (a capturing stream is refused, so no graph calls it again).
    let mut f = unsafe { Box::from_raw(data as *mut HostFn) };
    run_as_callback("a stream host callback", &mut *f);
    // Whatever the closure holds may call CUDA when dropped: not on this thread.
    crate::reaper::drop_later(Box::new(f));
}

impl Stream {
    /// Runs `f` once, on a driver thread, when the work queued on the stream so far is done; the
    /// stream's later work waits for it to return (`cuLaunchHostFunc`).
    ///
    /// `f` must not call CUDA: this crate's operations called from it return an error. Other
    /// libraries' calls (cudarc's, raw driver calls) are not refused, and the driver's answer to
    /// them is `CUDA_ERROR_NOT_PERMITTED` or a deadlock (a call that waits for work queued after
    /// `f`, such as a synchronisation, never returns); that is a limitation of this safe entry
    /// point, not a hole in it: the outcome is an error or a hang, never memory corruption, as
    /// with a thread that locks a mutex it holds. (Making the call `unsafe` would put `unsafe`
    /// on every program's everyday path for a hazard that is not undefined behaviour, and a
    /// future's waker could not be covered that way at all: see `docs/architecture.md`.) What `f`
    /// holds is dropped afterwards on a thread of this crate, not the driver's, so it may hold
    /// buffers, streams or anything else that calls CUDA when dropped (the natural way to keep
    /// memory alive until the stream gets there). A panic in `f` is caught and recorded for
    /// [`crate::take_drop_errors`]. On a stream being captured into a graph this is an error: a
    /// graph runs its callbacks at every launch, so use [`crate::graph::GraphBuilder::callback`].
    pub fn launch_host_func(&self, f: impl FnMut() + Send + 'static) -> Result<()> {
        crate::reaper::start();
        let mut f = Some(Box::new(f) as HostFn);
        let queued = self.enqueue(|capture| {
            if capture.is_some() {
                return Err(CudaError::InvalidState(
                    "launch_host_func runs its closure once, but a captured graph calls it at every launch: use GraphBuilder::callback".into(),
                ));
            }
            let Some(boxed) = f.take() else {
                return Err(CudaError::InvalidState("internal: the host function was queued twice".into()));
            };
            let data = Box::into_raw(Box::new(boxed));
            // SAFETY: the stream is live and not capturing (inside its operation); the driver
            // calls the trampoline once with data.
            let status = unsafe { driver::cuLaunchHostFunc(self.handle(), Some(trampoline), data.cast()) };
            if let Err(e) = status.check("cuLaunchHostFunc") {
                // SAFETY: the driver did not take data: reclaim it (dropped below, after the
                // stream's lock: what it holds may queue work on this stream when dropped).
                f = Some(*unsafe { Box::from_raw(data) });
                return Err(e);
            }
            Ok(())
        });
        drop(f);
        queued
    }
}
