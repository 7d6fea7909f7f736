//! [`Communicator`]: creation (`init`, `init_all`, `split`), queries, `check`, `finalize`,
//! `abort`, and the state every call shares with the watchdog and the release thread.

use super::types::UniqueId;
use super::{check, sys, watchdog};
use crate::device::{Context, Device};
use crate::stream::{Site, Stream};
use crate::{CudaError, Result};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How a [`Communicator`] is made.
#[derive(Debug, Clone, Default)]
pub struct CommunicatorOptions {
    /// Abort the communicator when work queued on it has not finished this long after the
    /// watchdog first saw it queued, or when NCCL reports an asynchronous error (a peer that
    /// died, a network failure): its kernels stop, the streams drain, and every later call (and
    /// [`Communicator::check`]) returns the reason. Pick a time-out longer than the longest work
    /// of the streams the collectives run on (the watchdog watches those streams). `None` (the
    /// default): no watchdog thread.
    pub watchdog: Option<Duration>,
}

/// An `ncclComm_t`, moved between threads only under [`CommInner::state`].
pub(crate) struct RawComm(pub(crate) sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread, one thread at a time; every use is
// under the `state` mutex (or by its last owner).
unsafe impl Send for RawComm {}

/// What the mutex of a communicator guards: the handle, until an abort, finalize or release
/// takes it, and why it was taken.
pub(crate) struct CommState {
    pub(crate) handle: Option<RawComm>,
    pub(crate) closed: Option<String>,
}

/// The shared part of a communicator: held by the [`Communicator`], by graphs that recorded
/// collectives on it, and briefly by its watchdog.
pub(crate) struct CommInner {
    /// Every NCCL call on the communicator holds this (NCCL communicators are not thread-safe),
    /// and so do the watchdog and the release, which take the handle.
    pub(crate) state: Mutex<CommState>,
    /// The device's primary context (NCCL works in it, through the runtime), held while the
    /// communicator lives.
    pub(crate) context: Context,
    pub(crate) rank: usize,
    pub(crate) count: usize,
    /// The streams collectives were queued on outside captures: what the watchdog watches and
    /// what a release waits for.
    pub(crate) sites: Mutex<Vec<Site>>,
    /// The handle of the stream last added to `sites` (0 before any): a collective on it again
    /// needs no lock. `sites` only grows while the communicator lives, and each entry holds its
    /// stream, so a stream with this handle is that one (a live stream's handle is not reused).
    last_site: AtomicUsize,
    /// How many graph holds exist: while any does, the communicator is never aborted or
    /// finalized (a graph may still launch kernels that use it).
    pub(crate) graph_holds: AtomicUsize,
    pub(crate) options: CommunicatorOptions,
}

impl CommInner {
    /// The state, with the handle checked live.
    pub(crate) fn live(&self) -> Result<(MutexGuard<'_, CommState>, sys::ncclComm_t)> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &state.handle {
            Some(h) => {
                let h = h.0;
                Ok((state, h))
            }
            None => Err(closed_error(&state)),
        }
    }

    /// Remembers `stream` (a plain stream: collectives refuse the others) as one the
    /// communicator's work was queued on.
    pub(crate) fn note_site(&self, stream: &Stream) {
        let handle = stream.handle() as usize;
        if self.last_site.load(Ordering::Acquire) == handle {
            return;
        }
        let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
        if !sites.iter().any(|s| s.is_plainly(stream)) {
            sites.push(Site::of_plain(stream));
        }
        // Set under the lock, after the push: whoever reads it finds the stream in `sites`.
        self.last_site.store(handle, Ordering::Release);
    }
}

/// Why a communicator's handle is gone.
pub(crate) fn closed_error(state: &CommState) -> CudaError {
    CudaError::InvalidState(format!(
        "the NCCL communicator is closed: {}",
        state.closed.as_deref().unwrap_or("it was finalized or aborted")
    ))
}

/// A graph's hold on a communicator: counted, so the communicator is never aborted or
/// finalized while a graph that may launch its kernels lives.
pub(crate) struct GraphHold(pub(crate) Arc<CommInner>);

impl GraphHold {
    pub(crate) fn new(inner: &Arc<CommInner>) -> GraphHold {
        inner.graph_holds.fetch_add(1, Ordering::AcqRel);
        GraphHold(inner.clone())
    }
}

impl Drop for GraphHold {
    fn drop(&mut self) {
        self.0.graph_holds.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = state.handle.take() {
            let sites = std::mem::take(self.sites.get_mut().unwrap_or_else(|p| p.into_inner()));
            watchdog::release(handle, sites, self.options.watchdog);
        }
    }
}

/// One rank of an NCCL communicator, on one device (`ncclComm_t`).
///
/// Made by [`init`](Self::init) (one rank per process or thread, all from one [`UniqueId`]),
/// [`init_all`](Self::init_all) (every rank in this process, one per device) or
/// [`split`](Self::split). The collectives are its methods (see the `ops` notes in
/// [`crate::nccl`]); several go together through [`group`](super::group).
///
/// `Send` but not `Sync`: NCCL communicators are used by one thread at a time, so a
/// communicator moves to the thread that drives it (one per rank, or one thread for all with
/// [`group`](super::group)).
///
/// ```compile_fail
/// fn sync<T: Sync>() {}
/// sync::<cuda_core::nccl::Communicator>();
/// ```
///
/// **Dropping** never waits: the communicator is aborted on the crate's release thread once the
/// work queued on it is done (at once when its watchdog's time-out passes or NCCL reports an
/// error); graphs that recorded collectives keep it until they are dropped. [`finalize`](Self::finalize)
/// is the blocking, orderly end.
///
/// **Before the process exits**, end communicators with `finalize` (or `abort`): one dropped
/// just before `main` returns is aborted on the release thread, which the exit waits for only
/// 2 s (see [`pending_releases`](crate::pending_releases)); an abort still running while the
/// process tears NCCL down can crash it. A graph that recorded collectives refuses `finalize`
/// until it is released after its launches: drop the graph, synchronise, and wait for
/// [`pending_releases`](crate::pending_releases) to reach 0 first.
pub struct Communicator {
    pub(crate) inner: Arc<CommInner>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.rank)
            .field("count", &self.inner.count)
            .field("device", &self.inner.context.device().device_id())
            .finish()
    }
}

impl Communicator {
    /// Rank `rank` of `nranks`, on `device` (`ncclCommInitRank`): every rank calls it with the
    /// same `id`, from its own process or thread; it returns once all have joined.
    pub fn init(rank: usize, nranks: usize, id: &UniqueId, device: &Device) -> Result<Communicator> {
        Communicator::init_with(rank, nranks, id, device, &CommunicatorOptions::default())
    }

    /// [`init`](Self::init) with options (a watchdog).
    pub fn init_with(
        rank: usize,
        nranks: usize,
        id: &UniqueId,
        device: &Device,
        options: &CommunicatorOptions,
    ) -> Result<Communicator> {
        super::checks::check_rank(rank, nranks)?;
        let context = device.primary_context()?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        context.with_current(|| {
            // SAFETY: `comm` is a valid out-pointer; the id is passed by value; the device's
            // primary context is current, so NCCL (through the runtime) works on that device.
            let status = unsafe { sys::ncclCommInitRank(&mut comm, nranks as i32, id.raw(), rank as i32) };
            check(status, "ncclCommInitRank", None)
        })?;
        Ok(Communicator::wrap(comm, context, options))
    }

    /// One communicator per device, every rank in this process (`ncclCommInitAll`): rank `i`
    /// on `devices[i]`. Drive them from one thread through [`group`](super::group), or move each
    /// to a thread of its own.
    pub fn init_all(devices: &[Device]) -> Result<Vec<Communicator>> {
        Communicator::init_all_with(devices, &CommunicatorOptions::default())
    }

    /// [`init_all`](Self::init_all) with options.
    pub fn init_all_with(devices: &[Device], options: &CommunicatorOptions) -> Result<Vec<Communicator>> {
        if devices.is_empty() {
            return Err(CudaError::InvalidArgument("init_all needs at least one device".into()));
        }
        let mut ordinals = Vec::with_capacity(devices.len());
        let mut contexts = Vec::with_capacity(devices.len());
        for d in devices {
            if ordinals.contains(&(d.device_id() as i32)) {
                return Err(CudaError::InvalidArgument(format!(
                    "init_all: device {} is listed twice; NCCL takes each device once per communicator",
                    d.device_id()
                )));
            }
            ordinals.push(d.device_id() as i32);
            contexts.push(d.primary_context()?);
        }
        let n = i32::try_from(devices.len())
            .map_err(|_| CudaError::InvalidArgument("init_all: too many devices".into()))?;
        let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one handle per device and `ordinals` lists them; NCCL
        // selects each device itself.
        let status = unsafe { sys::ncclCommInitAll(comms.as_mut_ptr(), n, ordinals.as_ptr()) };
        check(status, "ncclCommInitAll", None)?;
        Ok(comms
            .into_iter()
            .zip(contexts)
            .map(|(c, ctx)| Communicator::wrap(c, ctx, options))
            .collect())
    }

    fn wrap(comm: sys::ncclComm_t, context: Context, options: &CommunicatorOptions) -> Communicator {
        let (mut rank, mut count) = (0i32, 0i32);
        // SAFETY: `comm` is live (just made); out-pointers to locals. Failures leave 0.
        unsafe {
            let _ = sys::ncclCommUserRank(comm, &mut rank);
            let _ = sys::ncclCommCount(comm, &mut count);
        }
        let inner = Arc::new(CommInner {
            state: Mutex::new(CommState {
                handle: Some(RawComm(comm)),
                closed: None,
            }),
            context,
            rank: rank.max(0) as usize,
            count: count.max(0) as usize,
            sites: Mutex::new(Vec::new()),
            last_site: AtomicUsize::new(0),
            graph_holds: AtomicUsize::new(0),
            options: options.clone(),
        });
        if let Some(timeout) = options.watchdog {
            watchdog::start(&inner, timeout);
        }
        Communicator {
            inner,
            _not_sync: PhantomData,
        }
    }

    /// This rank (`ncclCommUserRank`).
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// How many ranks the communicator has (`ncclCommCount`).
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// The device this rank runs on (`ncclCommCuDevice`).
    pub fn device(&self) -> Device {
        self.inner.context.device()
    }

    /// A new communicator of the ranks that pass the same `color` (`ncclCommSplit`), ranked by
    /// `key` (ties by this rank); every rank of this communicator must call it. `None` as color
    /// leaves this rank out (`NCCL_SPLIT_NOCOLOR`) and returns `None`. The new communicator has
    /// this one's options.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let color = match color {
            Some(c) => i32::try_from(c).map_err(|_| {
                CudaError::InvalidArgument(format!("split: color {c} is larger than NCCL takes (i32::MAX)"))
            })?,
            None => sys::NCCL_SPLIT_NOCOLOR,
        };
        let (_state, handle) = self.inner.live()?;
        let mut new: sys::ncclComm_t = std::ptr::null_mut();
        self.inner.context.with_current(|| {
            // SAFETY: the handle is live under its lock; `new` is a valid out-pointer; a NULL
            // config inherits this communicator's.
            let status = unsafe { sys::ncclCommSplit(handle, color, key, &mut new, std::ptr::null_mut()) };
            check(status, "ncclCommSplit", Some(handle))
        })?;
        if new.is_null() {
            return Ok(None);
        }
        Ok(Some(Communicator::wrap(
            new,
            self.inner.context.clone(),
            &self.inner.options,
        )))
    }

    /// `Ok` while NCCL reports no asynchronous error (`ncclCommGetAsyncError`: a peer that died,
    /// a network failure) and the communicator was not aborted; else what went wrong. After an
    /// error, the communicator can only be dropped (which aborts it).
    pub fn check(&self) -> Result<()> {
        let (_state, handle) = self.inner.live()?;
        async_error(handle)
    }

    /// Ends the communicator in order (`ncclCommFinalize`, then `ncclCommDestroy`): **blocks**
    /// until its queued work is done everywhere it was queued (every rank must finalize too).
    /// Refused while a graph holds the communicator (it may still launch its kernels).
    pub fn finalize(self) -> Result<()> {
        self.close("ncclCommFinalize")
    }

    /// Ends the communicator at once (`ncclCommAbort`): its queued and running work stops (peers
    /// waiting for it get errors). Refused while a graph holds the communicator.
    pub fn abort(self) -> Result<()> {
        self.close("ncclCommAbort")
    }

    fn close(self, how: &'static str) -> Result<()> {
        let holds = self.inner.graph_holds.load(Ordering::Acquire);
        if holds > 0 {
            return Err(CudaError::InvalidState(format!(
                "{how}: {holds} graph hold(s) of the communicator remain (graphs that recorded its collectives may launch them again): drop those graphs first"
            )));
        }
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(handle) = state.handle.take() else {
            return Err(closed_error(&state));
        };
        state.closed = Some(format!("{how} ended it"));
        let handle = handle.0;
        self.inner.context.with_current(|| {
            if how == "ncclCommAbort" {
                // SAFETY: the handle was live and is now ours alone (taken under the lock); no
                // graph holds it (checked above).
                return check(unsafe { sys::ncclCommAbort(handle) }, "ncclCommAbort", None);
            }
            // SAFETY: as above.
            let finalized = check(
                unsafe { sys::ncclCommFinalize(handle) },
                "ncclCommFinalize",
                Some(handle),
            );
            if finalized.is_err() {
                // SAFETY: as above; an abort frees what a failed finalize left.
                let _ = unsafe { sys::ncclCommAbort(handle) };
                return finalized;
            }
            // SAFETY: as above, finalized.
            check(unsafe { sys::ncclCommDestroy(handle) }, "ncclCommDestroy", None)
        })
    }
}

/// The communicator's asynchronous error, as an error (`ncclInProgress` is no error).
pub(crate) fn async_error(handle: sys::ncclComm_t) -> Result<()> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: the caller holds the live handle under its lock; out-pointer to a local.
    let status = unsafe { sys::ncclCommGetAsyncError(handle, &mut state) };
    check(status, "ncclCommGetAsyncError", Some(handle))?;
    if state == sys::ncclResult_t::ncclInProgress {
        return Ok(());
    }
    check(state, "ncclCommGetAsyncError", Some(handle))
}
