//! The captures in progress: captures started by this crate are registered by the graph they
//! record into, so that an operation on a capturing stream finds the [`GraphInner`] that holds what it
//! uses (and locks it): see [`with_capture`]. While none runs, operations take the quiet path
//! ([`super::gate`]).

use super::graph_core::{GraphInner, Registry};
use super::{Site, SiteKey};
use crate::device::FenceEvent;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// How many captures started by this crate are running or beginning (in any thread). While none
/// is, stream operations take the quiet path (no lock, no capture query: see `stream::gate`).
pub(crate) static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Serialises the driver's capture state across threads: every question this crate asks about a
/// stream's capture (`cuStreamGetCaptureInfo`, `cuStreamIsCapturing`) holds it shared, and
/// everything that changes which streams a capture has (beginning, ending, a wait that may join
/// a capture) holds it exclusively. Driver 580 segfaults (a null dereference inside
/// `cuStreamGetCaptureInfo`) when a stream is asked about while another thread begins or ends a
/// capture that stream is in (seen with raw calls on an H100, and in the stress test); a
/// stream's own capture lock does not cover a stream that joined another stream's capture, which
/// leaves it when the origin ends the capture. Graph creation, instantiation, updates and
/// destroys hold it shared too: the driver also crashed (raw calls, an H100) when those ran on
/// other threads while captures began and ended in global mode, and not when they were
/// serialised with the begins and ends. Held only around the driver calls themselves, never
/// while taking another lock.
static CAPTURE_STATE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`CAPTURE_STATE`] shared, for a question about a stream's capture.
pub(crate) fn capture_question() -> std::sync::RwLockReadGuard<'static, ()> {
    CAPTURE_STATE.read().unwrap_or_else(|p| p.into_inner())
}

/// [`CAPTURE_STATE`] exclusively, for a change of which streams a capture has.
pub(crate) fn capture_change() -> std::sync::RwLockWriteGuard<'static, ()> {
    CAPTURE_STATE.write().unwrap_or_else(|p| p.into_inner())
}

/// The graphs captures started by this crate record into, by `CUgraph`.
static ACTIVE: Mutex<Option<HashMap<usize, Weak<GraphInner>>>> = Mutex::new(None);

fn active() -> MutexGuard<'static, Option<HashMap<usize, Weak<GraphInner>>>> {
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fences recorded on streams just before a capture began on them, by stream (as a [`Site`]
/// names it: a default stream's handle means a different stream per context and thread), with
/// the graph of that capture: what was queued there before the capture (such as a buffer's
/// allocation) is done when the fence is.
#[allow(clippy::type_complexity)]
static BEFORE_CAPTURE: Mutex<Option<HashMap<SiteKey, (usize, Arc<FenceEvent>)>>> = Mutex::new(None);

/// A capture counted by [`capture_beginning`] that has not reached [`capture_started`]: dropping
/// it (on an error or a panic) takes the count back.
pub(crate) struct Beginning(());

impl Drop for Beginning {
    fn drop(&mut self) {
        CAPTURES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a capture about to begin (operations take the locked path from now on) and waits until
/// no operation that may have missed the count is still running. The caller holds no lock (an
/// operation being waited for may need one). The count is taken back when the returned value is
/// dropped, or by [`capture_over`] once it was passed to [`capture_started`].
pub(crate) fn capture_beginning() -> Result<Beginning> {
    if super::gate::in_operation() {
        // The operation already decided that no capture runs: it must end first.
        return Err(CudaError::InvalidState(
            "a capture cannot begin inside an operation on a stream (such as a memory resource's allocate or deallocate)".into(),
        ));
    }
    CAPTURES.fetch_add(1, Ordering::SeqCst);
    let beginning = Beginning(());
    if !super::gate::drain() {
        return Err(CudaError::InvalidState(
            "a capture cannot begin: the process-wide memory barrier failed".into(),
        ));
    }
    Ok(beginning)
}

/// How many captures of blocking streams (made without `StreamOptions::nonblocking`, and the
/// per-thread default stream, which synchronises with the legacy stream too) this crate began
/// and has not ended. While one is counted, operations on the legacy default stream are
/// refused (see [`legacy_stream_gate`]).
///
/// Why: driver 580 crashes (a null dereference inside libcuda, seen with raw C calls on an
/// H100: `cuEventRecord`, `cuStreamQuery` or `cuMemsetD8Async` on the legacy stream from five
/// threads while three others begin and end thread-local captures of blocking streams; none
/// with non-blocking streams, none on other streams) when work is queued on the legacy stream
/// while another thread begins or ends a capture of a blocking stream. While such a capture
/// runs, the driver itself refuses that work (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`: the legacy
/// stream would join the capture) and invalidates the capture; this crate refuses it with the
/// same error, before the driver, for the whole capture including its beginning and end.
static BLOCKING_CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// A capture of a blocking stream counted in [`BLOCKING_CAPTURES`] until this is dropped,
/// after the capture ended.
pub(crate) struct BlockingCapture(());

impl BlockingCapture {
    /// Counts one more in [`BLOCKING_CAPTURES`], taken back when the value is dropped.
    fn count() -> BlockingCapture {
        BLOCKING_CAPTURES.fetch_add(1, Ordering::SeqCst);
        BlockingCapture(())
    }
}

impl Drop for BlockingCapture {
    fn drop(&mut self) {
        BLOCKING_CAPTURES.fetch_sub(1, Ordering::SeqCst);
        // Releases refused on the legacy stream meanwhile may proceed.
        crate::reaper::wake();
    }
}

/// Counts a capture about to begin on `stream` if it is a blocking stream (see
/// [`BLOCKING_CAPTURES`]). Called before [`capture_beginning`], whose wait for operations that
/// may have missed the count covers legacy-stream operations too (they run in the same gate).
pub(crate) fn blocking_capture_beginning(stream: &super::Stream) -> Result<Option<BlockingCapture>> {
    let blocking = stream.is_default() || !stream.is_nonblocking()?;
    Ok(blocking.then(BlockingCapture::count))
}

/// Counts a blocking stream that may join a capture (a wait while captures run) and waits for
/// legacy-stream operations that missed the count, holding no lock: the caller hands the count
/// to [`keep_if_joined`] after the wait.
pub(crate) fn blocking_capture_joining() -> Result<BlockingCapture> {
    if super::gate::in_operation() {
        // (Its wait could not tell the operations of others that missed the count.)
        return Err(CudaError::InvalidState(
            "a blocking stream cannot wait inside an operation on a stream (such as a memory resource's allocate or deallocate) while captures run: use a non-blocking stream".into(),
        ));
    }
    let counted = BlockingCapture::count();
    if !super::gate::drain() {
        return Err(CudaError::InvalidState(
            "a wait cannot begin: the process-wide memory barrier failed".into(),
        ));
    }
    Ok(counted)
}

/// The key of [`JOINED`] for joins whose capture could not be told.
const UNCERTAIN: usize = 0;

/// What a stream that joined a capture of this crate keeps until that capture is over.
struct Joined {
    /// A blocking stream's count in [`BLOCKING_CAPTURES`] (legacy-stream work stays refused
    /// while it is in the capture).
    _count: Option<BlockingCapture>,
    /// The stream itself: it stays in the capture until the origin ends it (joining back does
    /// not take it out), and a stream destroyed while in a capture crashed driver 580 when the
    /// capture ended or other work was recorded (a null dereference, seen in the stress test
    /// once branches of a split were dropped after their join). Dropped on the release thread.
    stream: super::Stream,
}

/// The streams (and blocking streams' counts) that joined a capture of this crate, by the
/// capture's graph: released when that capture is over ([`capture_over`]), and all of them
/// once no capture of this crate runs (nothing can be joined then).
#[allow(clippy::type_complexity)]
static JOINED: Mutex<Option<HashMap<usize, Vec<Joined>>>> = Mutex::new(None);

/// After a wait on `stream` (counted by [`blocking_capture_joining`] if it is a blocking one
/// that may join a capture): if the stream is in a capture of this crate, the stream and its
/// count are kept until that capture is over; otherwise (no capture, a capture already over,
/// or one this crate did not begin, whose end it cannot see) the count is given back now.
///
/// A capture that cannot be told (the question failed, or the capture was invalidated: the
/// stream stays in it until it ends) keeps them until no capture of this crate runs.
pub(crate) fn keep_if_joined(stream: &super::Stream, counted: Option<BlockingCapture>, waited: bool) {
    if !waited || stream.is_default() {
        // (A default stream never joins a capture: its waits for capture points are refused.)
        return;
    }
    let joined = match capture_info(stream.handle()) {
        Ok(Some(info)) => info.graph as usize,
        Ok(None) => return,
        // (Kept under no graph: given back when the last capture is over.)
        Err(_) => UNCERTAIN,
    };
    // Under the registry's lock, which `capture_over` takes before the joins: a capture that
    // is over by now is no longer registered, and nothing is kept for it.
    let registered = active();
    if joined == UNCERTAIN || registered.as_ref().is_some_and(|m| m.contains_key(&joined)) {
        let mut all = JOINED.lock().unwrap_or_else(|p| p.into_inner());
        let kept = all.get_or_insert_with(HashMap::new).entry(joined).or_default();
        // Once per stream and capture (a stream's flags do not change: its first join holds
        // its count, if it has one, and a later count is given back).
        if !kept.iter().any(|j| j.stream == *stream) {
            kept.push(Joined {
                _count: counted,
                stream: stream.clone(),
            });
        }
    }
}

/// The gate of an operation on the legacy default stream: `Some` while the operation runs when
/// no capture of a blocking stream runs (and none begins before the guard is dropped: see
/// [`BLOCKING_CAPTURES`]); otherwise the refusal the driver would give
/// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`), which releases retry once the capture is over.
pub(crate) fn legacy_stream_gate() -> Result<super::gate::Quiet> {
    match super::gate::enter(&BLOCKING_CAPTURES) {
        Some(quiet) => Ok(quiet),
        // (Also on a thread whose gate slot is gone, in its thread-local destructors: releases
        // are retried on the release thread.)
        None => {
            const WHAT: &str = "the legacy default stream, while a blocking stream is being captured (its work would join the capture): use a non-blocking stream, or retry after the capture ends";
            let implicit = driver::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.check(WHAT).err();
            Err(implicit.unwrap_or_else(|| CudaError::InvalidState(WHAT.into())))
        }
    }
}

/// Registers a capture into `graph` that began on `site`, after the work `before` follows (the
/// caller holds the stream's capture lock for writing, and counted the capture with
/// [`capture_beginning`]). [`capture_over`] undoes it.
pub(crate) fn capture_started(graph: &Arc<GraphInner>, site: &Site, before: Arc<FenceEvent>, beginning: Beginning) {
    // From here the count is taken back by `capture_over`.
    std::mem::forget(beginning);
    active()
        .get_or_insert_with(HashMap::new)
        .insert(graph.handle as usize, Arc::downgrade(graph));
    BEFORE_CAPTURE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(site.key(), (graph.handle as usize, before));
}

/// Unregisters the capture into `graph` on `site`, which ended.
pub(crate) fn capture_over(graph: driver::CUgraph, site: &Site) {
    let mut joined: Vec<Joined> = {
        let mut registered = active();
        if let Some(map) = registered.as_mut() {
            map.remove(&(graph as usize));
        }
        let last = registered.as_ref().is_none_or(|m| m.is_empty());
        // Streams that joined it left it with its end (see `keep_if_joined`); with the last
        // capture over, every join is over.
        let mut joined = JOINED.lock().unwrap_or_else(|p| p.into_inner());
        match joined.as_mut() {
            Some(m) if last => std::mem::take(m).into_values().flatten().collect(),
            Some(m) => m.remove(&(graph as usize)).unwrap_or_default(),
            None => Vec::new(),
        }
    };
    // Joins whose capture could not be told: those no longer in a capture are over too (asked
    // outside the lock; the others go back).
    let uncertain = JOINED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
        .and_then(|m| m.remove(&UNCERTAIN))
        .unwrap_or_default();
    let (over, still): (Vec<Joined>, Vec<Joined>) = uncertain
        .into_iter()
        .partition(|j| matches!(capture_info(j.stream.handle()), Ok(None)));
    joined.extend(over);
    if !still.is_empty() {
        JOINED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .entry(UNCERTAIN)
            .or_default()
            .extend(still);
    }
    // The counts go back now; the streams are dropped on the release thread (a stream's drop
    // may destroy it, which is not done under the caller's locks).
    let streams: Vec<super::Stream> = joined.into_iter().map(|j| j.stream).collect();
    if !streams.is_empty() {
        crate::reaper::drop_later(Box::new(streams));
    }
    let before = {
        let mut map = BEFORE_CAPTURE.lock().unwrap_or_else(|p| p.into_inner());
        let key = site.key();
        match map.as_mut() {
            Some(m) if m.get(&key).is_some_and(|(g, _)| *g == graph as usize) => m.remove(&key),
            _ => None,
        }
    };
    // (The fence goes back to its pool outside the registry's lock.)
    drop(before);
    CAPTURES.fetch_sub(1, Ordering::SeqCst);
    // Releases waiting for a capture to end may proceed.
    crate::reaper::wake();
}

/// The fence recorded on `site` just before the capture it began (not for a stream that joined
/// a capture).
pub(crate) fn before_capture(site: &Site) -> Option<Arc<FenceEvent>> {
    BEFORE_CAPTURE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&site.key()).map(|(_, f)| f.clone()))
}

/// Whether `e` refuses a release only for now, so that it is tried again: a capture in the way
/// ([`capture_refusal`]), or a green context current on another thread.
pub(crate) fn refused_for_now(e: &CudaError) -> bool {
    capture_refusal(e) || crate::device::green_context_busy(e)
}

/// Whether `e` is a refusal because of a capture (of the stream, or one that a call would have
/// invalidated): what a release tries again once the capture is over.
pub(crate) fn capture_refusal(e: &CudaError) -> bool {
    use driver::CUresult as R;
    matches!(
        e.driver_status(),
        Some(
            R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        )
    ) || matches!(e, CudaError::InvalidState(m) | CudaError::InvalidArgument(m) if m.contains("capture was invalidated") || m.starts_with(FOREIGN_CAPTURE) || m == super::graph_core::BROKEN)
}

/// Whether any capture started by this crate is running.
#[inline]
pub(crate) fn captures_running() -> bool {
    CAPTURES.load(Ordering::SeqCst) != 0
}

/// Whether `stream` (live) is being captured (`cuStreamIsCapturing`, asked under
/// [`CAPTURE_STATE`]).
pub(crate) fn is_capturing(stream: driver::CUstream) -> Result<bool> {
    let _question = capture_question();
    is_capturing_serialised(stream)
}

/// [`is_capturing`] for a caller that holds [`capture_question`] (the lock is not reentrant
/// while a writer waits).
pub(crate) fn is_capturing_serialised(stream: driver::CUstream) -> Result<bool> {
    let mut status = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's stream is live; out-pointer to a local.
    unsafe { driver::cuStreamIsCapturing(stream, &mut status) }.check("cuStreamIsCapturing")?;
    Ok(status != driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// A stream's capture: the graph it records into and the nodes the next operation will depend on.
pub(crate) struct CaptureInfo {
    pub(crate) graph: driver::CUgraph,
    pub(crate) dependencies: Vec<driver::CUgraphNode>,
}

/// The capture in progress on `stream`, if any; an error when it was invalidated.
pub(crate) fn capture_info(stream: driver::CUstream) -> Result<Option<CaptureInfo>> {
    let mut status = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph: driver::CUgraph = std::ptr::null_mut();
    let mut deps: *const driver::CUgraphNode = std::ptr::null();
    let mut n = 0usize;
    let _question = capture_question();
    // SAFETY: out-pointers to locals; the dependency array is copied before any other call on
    // the stream (and before the capture can change: `CAPTURE_STATE` is held).
    unsafe {
        driver::cuStreamGetCaptureInfo(
            stream,
            &mut status,
            std::ptr::null_mut(),
            &mut graph,
            &mut deps,
            std::ptr::null_mut(),
            &mut n,
        )
    }
    .check("cuStreamGetCaptureInfo")?;
    match status {
        driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => {
            let dependencies = if n == 0 || deps.is_null() {
                Vec::new()
            } else {
                // SAFETY: the driver returned n valid entries.
                unsafe { std::slice::from_raw_parts(deps, n) }.to_vec()
            };
            Ok(Some(CaptureInfo { graph, dependencies }))
        }
        driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => Err(CudaError::InvalidState(
            "the stream's capture was invalidated by an earlier error: end it (end_building) and start again".into(),
        )),
        _ => Ok(None),
    }
}

/// An operation's view of the capture its stream is in: the graph recorded into, with the
/// hierarchy's lock held for as long as the view lives.
pub(crate) struct Capture<'a> {
    /// The graph recorded into (a root, or a conditional body).
    pub(crate) graph: &'a Arc<GraphInner>,
    pub(crate) reg: &'a mut Registry,
    /// What the next recorded node depends on.
    pub(crate) dependencies: Vec<driver::CUgraphNode>,
}

impl Capture<'_> {
    /// Hands `value` to the graph recorded into (its hierarchy holds it: see
    /// [`super::graph_core::Holdings`]).
    pub(crate) fn hold<T: Any + Send + Sync>(&mut self, value: T) {
        self.reg.held.hold(value);
    }

    /// Hands a shared value to the graph recorded into (held once however often it is given).
    pub(crate) fn hold_shared(&mut self, value: Arc<dyn Any + Send + Sync>) {
        self.reg.held.hold_shared(value);
    }

    /// Notes that the node about to be recorded runs the kernel `handle` (`kernel` makes its
    /// type-erased `Kernel`, once per kernel and hierarchy): read back from the node's
    /// parameters.
    pub(crate) fn note_kernel(&mut self, handle: usize, kernel: impl FnOnce() -> Arc<dyn Any + Send + Sync>) {
        self.reg.note_kernel(handle, kernel);
    }

    /// The `CUgraph` recorded into.
    pub(crate) fn handle(&self) -> driver::CUgraph {
        self.graph.handle
    }
}

/// Runs `op` with the capture `stream` is recorded into (its graph found and locked), or with
/// `None` when it is not capturing. The caller holds the stream's capture lock (see
/// [`crate::Stream`]), so no capture begins or ends on it meanwhile.
#[inline]
pub(crate) fn with_capture<T>(
    stream: driver::CUstream,
    op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>,
) -> Result<T> {
    if !captures_running() {
        return op(None);
    }
    with_capture_asked(stream, op)
}

/// What an operation on a stream captured by code outside this crate is refused with (and what
/// [`capture_refusal`] knows: a release tries again once that capture is over).
const FOREIGN_CAPTURE: &str = "the stream is being captured into a graph by code outside this crate";

/// The refusal of an operation on a stream another library (or raw driver code) is capturing.
pub(crate) fn foreign_capture() -> CudaError {
    CudaError::InvalidState(format!(
        "{FOREIGN_CAPTURE} (another library, such as cudarc's CudaStream::begin_capture, or raw driver calls): that graph could not hold what the operation uses. End that capture first, through the library that began it, or queue this work on a stream of your own"
    ))
}

/// [`with_capture`] that asks the driver whatever this crate's count of captures says: for
/// default streams, which other code on the thread may capture (see
/// `Stream::operation_on_default`), and streams other code holds.
#[cold]
pub(crate) fn with_capture_asked<T>(
    stream: driver::CUstream,
    op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>,
) -> Result<T> {
    loop {
        let Some(info) = capture_info(stream)? else {
            return op(None);
        };
        let graph = active()
            .as_ref()
            .and_then(|m| m.get(&(info.graph as usize)))
            .and_then(Weak::upgrade)
            .ok_or_else(foreign_capture)?;
        let mut reg = graph.lock();
        // Asked again under the graph's lock, which ending a capture holds: a stream that joined
        // the capture leaves it when the capture ends (under the origin stream's lock, not this
        // one's), and other threads may have recorded work meanwhile (the dependencies moved).
        match capture_info(stream)? {
            Some(now) if now.graph == info.graph => {
                graph.check_live(&reg)?;
                let mut capture = Capture {
                    graph: &graph,
                    reg: &mut reg,
                    dependencies: now.dependencies,
                };
                let result = op(Some(&mut capture));
                // (Operations read the dependencies, never change them.)
                let before = capture.dependencies;
                if result.is_ok() {
                    // The nodes the operation recorded (for `GraphBuilder::recorded_nodes`): the
                    // capture's new dependencies. (Asked after `op`, which may hold the capture
                    // state exclusively while it runs.)
                    if let Ok(Some(after)) = capture_info(stream) {
                        if after.graph == info.graph {
                            reg.note_recorded(info.graph, &before, &after.dependencies);
                        }
                    }
                }
                return result;
            }
            _ => continue,
        }
    }
}
