//! Graphs by stream capture: [`GraphBuilder`] (here: beginning and ending a capture, and what
//! a capture holds while it runs), and what a capture records besides stream work
//! (`recording`: branches, conditional bodies, embedded graphs, callbacks).

mod recording;

use super::definition::{GraphDefinition, GraphInner};
use super::exec::{Graph, GraphCompleteOptions};
use crate::device::{CaptureCount, Context, Device};
use crate::error::{record_drop_error, Check};
use crate::stream::capture::{
    blocking_capture_beginning, capture_beginning, capture_info, capture_over, capture_started, BlockingCapture,
    Capture,
};
use crate::stream::{Site, Stream, StreamOptions};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How a capture interacts with other CUDA calls (`CUstreamCaptureMode`, cuda.core's
/// `begin_building(mode=...)`).
///
/// Whatever the mode, what a safe call of this crate does on another thread never corrupts a
/// capture: it is refused, recorded or ordered as the guide's graph chapter says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// cuda.core's `"global"`: calls that are unsafe during a capture fail on the capturing
    /// thread while it runs.
    ///
    /// The driver's global mode would also refuse them on every other thread, but with it
    /// driver 580 crashes (SIGSEGV inside `libcuda`) when other threads make stream calls
    /// while a capture begins or ends: in a C program on an H100 (driver 580.159.04), three
    /// threads beginning and ending global-mode captures and five making any of
    /// `cuStreamQuery`, `cuStreamSynchronize`, `cuStreamGetCaptureInfo`, `cuEventRecord`,
    /// `cuMemsetD8Async`, `cuMemAllocFromPoolAsync`, `cuMemAlloc` or `cuCtxSynchronize` on
    /// their own streams crashed within a second, and ran clean in thread-local and relaxed
    /// modes. So this crate begins such a capture in thread-local mode: other threads' unsafe
    /// calls are not refused (as in [`ThreadLocal`](Self::ThreadLocal)).
    Global,
    /// Only this thread's unsafe calls fail (cuda.core's `"thread_local"`).
    ThreadLocal,
    /// Nothing is prohibited (cuda.core's `"relaxed"`, its default and this one's).
    #[default]
    Relaxed,
}

impl CaptureMode {
    fn to_driver(self) -> driver::CUstreamCaptureMode {
        match self {
            // Not CU_STREAM_CAPTURE_MODE_GLOBAL: see the variant's documentation.
            CaptureMode::Global | CaptureMode::ThreadLocal => {
                driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            }
            CaptureMode::Relaxed => driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Captures into its own graph.
    Primary,
    /// A branch of a capture made by `split`: part of its parent's capture until joined.
    Forked,
    /// Captures a conditional node's body.
    Body,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Building,
    Ended,
}

/// Builds a graph by recording the work queued on its stream (`cuda.core`'s `GraphBuilder`).
///
/// Work queued on [`stream`](Self::stream) while building is recorded, not run. Buffers,
/// events, kernels and callbacks the recorded operations use are held by the graph. Dropping a
/// builder mid-capture ends the capture and discards what was recorded.
///
/// A builder stays on the thread that made it: the driver ends a capture only on the thread
/// that began it (unless the mode is relaxed), so a builder moved elsewhere could not end its
/// capture. Its stream can be shared (work queued on it from any thread is recorded).
///
/// ```compile_fail
/// fn needs_send<T: Send>(_: T) {}
/// fn builder(stream: &cuda_core::Stream) {
///     needs_send(stream.create_graph_builder()); // a GraphBuilder is not Send
/// }
/// ```
///
/// ```no_run
/// # use cuda_core::{Device, graph::CaptureMode};
/// let device = Device::new(0)?;
/// device.set_current()?;
/// let mut builder = device.create_graph_builder()?;
/// builder.begin_building(CaptureMode::ThreadLocal)?;
/// let buffer = device.allocate(1024, builder.stream())?;
/// buffer.fill_u8(1, builder.stream())?;
/// builder.end_building()?;
/// let graph = builder.complete(&Default::default())?;
/// let stream = device.create_stream(Default::default())?;
/// graph.launch(&stream)?;
/// stream.sync()?;
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
pub struct GraphBuilder {
    stream: Stream,
    kind: Kind,
    state: State,
    graph: Option<Arc<GraphInner>>,
    /// The capture this builder began, while it runs.
    running: Option<Running>,
    /// Not `Send`: see the type's documentation. (`Sync` is harmless: every method that ends a
    /// capture takes `&mut self` or `self`.)
    _thread_bound: PhantomData<std::sync::MutexGuard<'static, ()>>,
}

/// A capture a builder began: the stream as it was captured (a default stream names the stream
/// of the context current then, which the site keeps), and the capture's count in its context
/// (context-wide synchronisations are refused while it is held).
struct Running {
    site: Site,
    _count: CaptureCount,
    /// For a blocking stream: legacy-stream work is refused until the capture has ended (see
    /// `capture::BLOCKING_CAPTURES`).
    _blocking: Option<BlockingCapture>,
}

impl Running {
    /// Runs `f` with the capture's context current when the stream is a default stream (whose
    /// handle names the stream of the current context).
    fn in_context<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.site.stream().is_default() {
            self.site.context()?.with_current(f)
        } else {
            f()
        }
    }
}

impl Stream {
    /// A graph builder recording the work queued on this stream (call
    /// [`begin_building`](GraphBuilder::begin_building)).
    pub fn create_graph_builder(&self) -> GraphBuilder {
        GraphBuilder::on(self.clone(), Kind::Primary, State::Idle, None)
    }

    /// Starts recording the work queued on this stream into a graph: shorthand for
    /// [`create_graph_builder`](Self::create_graph_builder) and
    /// [`begin_building`](GraphBuilder::begin_building).
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<GraphBuilder> {
        let mut builder = self.create_graph_builder();
        builder.begin_building(mode)?;
        Ok(builder)
    }

    /// Records what `f` queues on this stream into a graph and returns it instantiated, ready to
    /// launch (one call for capture, end and instantiation).
    pub fn capture_graph(&self, mode: CaptureMode, f: impl FnOnce(&Stream) -> Result<()>) -> Result<Graph> {
        let mut builder = self.begin_capture(mode)?;
        f(&builder.stream)?;
        builder.end_building()?;
        builder.complete(&GraphCompleteOptions::default())
    }
}

/// A new non-blocking stream in `context`, for a builder to capture on.
fn capture_stream(context: &Context) -> Result<Stream> {
    context.create_stream(StreamOptions {
        nonblocking: true,
        ..Default::default()
    })
}

impl Device {
    /// A graph builder with a new stream of its own on this device.
    pub fn create_graph_builder(&self) -> Result<GraphBuilder> {
        let stream = capture_stream(&self.primary_context()?)?;
        Ok(stream.create_graph_builder())
    }
}

impl GraphBuilder {
    fn on(stream: Stream, kind: Kind, state: State, graph: Option<Arc<GraphInner>>) -> GraphBuilder {
        GraphBuilder {
            stream,
            kind,
            state,
            graph,
            running: None,
            _thread_bound: PhantomData,
        }
    }

    /// The stream being captured: queue work on it to add it to the graph.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Starts recording (`cuStreamBeginCaptureToGraph`).
    ///
    /// Beginning a capture waits until stream operations already running on other threads
    /// have queued their work (usually microseconds; longer while one waits, such as a copy into
    /// pageable host memory), and for a synchronisation of the stream's context in progress
    /// ([`Context::synchronize`], which is refused while the capture runs: it would invalidate
    /// it). An error inside an operation on a stream (from a [`crate::MemoryResource`]'s
    /// `allocate`, say), and inside host functions.
    ///
    /// Refused on a default stream: other code on the thread (another library, such as cudarc's
    /// `per_thread_stream()`) can queue work on the per-thread default stream while it is
    /// captured, and the graph would replay that work without holding what it uses. Capture a
    /// stream of your own ([`Device::create_graph_builder`]), or see
    /// [`begin_building_shared`](Self::begin_building_shared).
    pub fn begin_building(&mut self, mode: CaptureMode) -> Result<&mut Self> {
        if self.stream.is_default() {
            return Err(CudaError::InvalidArgument(
                "a default stream cannot be captured by a safe call: other libraries on the thread queue work on the per-thread default stream, which the graph would replay without holding what it uses (and the legacy default stream cannot be captured at all). Capture a stream of your own (Device::create_graph_builder), or use the unsafe GraphBuilder::begin_building_shared".into(),
            ));
        }
        self.begin(mode)
    }

    /// [`begin_building`](Self::begin_building) that also captures the per-thread default
    /// stream (a capture of the legacy default stream is refused by the driver).
    ///
    /// # Safety
    /// Until this builder ends the capture, no code outside this crate (another library, raw
    /// calls, another copy of this crate) queues work on the captured stream (the calling
    /// thread's per-thread default stream, or the NULL stream where it names that stream), ends
    /// the capture, or makes another stream join it: the graph would record that work without
    /// holding what it uses and replay it after that memory is freed, or be destroyed by
    /// another library while this crate holds it.
    pub unsafe fn begin_building_shared(&mut self, mode: CaptureMode) -> Result<&mut Self> {
        self.begin(mode)
    }

    fn begin(&mut self, mode: CaptureMode) -> Result<&mut Self> {
        match (self.state, self.kind) {
            (State::Building, _) => {
                return Err(CudaError::InvalidState("the graph builder is already building".into()))
            }
            (State::Ended, _) => {
                return Err(CudaError::InvalidState(
                    "cannot resume building after building has ended".into(),
                ))
            }
            (_, Kind::Forked) => {
                return Err(CudaError::InvalidState(
                    "a builder made by split records as part of its parent's capture".into(),
                ))
            }
            _ => {}
        }
        crate::reaper::refuse_in_callback()?;
        let graph = match &self.graph {
            Some(g) => g.clone(),
            None => {
                let mut handle: driver::CUgraph = std::ptr::null_mut();
                // (Serialised with capture begins and ends: see `capture::CAPTURE_STATE`.)
                let serialised = crate::stream::capture::capture_question();
                // SAFETY: out-pointer to a local.
                let created = unsafe { driver::cuGraphCreate(&mut handle, 0) }.check("cuGraphCreate");
                drop(serialised);
                created?;
                GraphInner::owned(handle)
            }
        };
        let context = self.stream.context_or_current()?;
        let site = Site::of(&self.stream)?;
        let before = Arc::new(context.fence()?);
        // A blocking stream's capture: legacy-stream work is refused from now on (the wait of
        // `capture_beginning` covers that work already running).
        let blocking = blocking_capture_beginning(&self.stream)?;
        // Operations on every stream take the locked path from now on (this waits, holding no
        // lock, for those already on the quiet path).
        let beginning = capture_beginning()?;
        // Context-wide synchronisations would invalidate the capture: refused from now on (this
        // waits, holding no lock, for one in progress). Taken back when `count` is dropped.
        let count = context.count_capture()?;
        {
            // No operation is queued on the stream while the capture begins.
            let _exclusive = self.stream.capture_exclusive();
            // SAFETY: both handles are live; the stream is not capturing (its lock is held
            // exclusively): the fence follows what was queued before the capture.
            let recorded =
                unsafe { driver::cuEventRecord(before.handle(), self.stream.handle()) }.check("cuEventRecord");
            let mut reg = graph.lock();
            // A body graph whose conditional node was destroyed is gone.
            recorded.and_then(|()| graph.check_live(&reg))?;
            let change = crate::stream::capture::capture_change();
            // SAFETY: the stream and graph are live (the graph's lock is held); no dependencies.
            let begun = unsafe {
                driver::cuStreamBeginCaptureToGraph(
                    self.stream.handle(),
                    graph.handle,
                    std::ptr::null(),
                    std::ptr::null(),
                    0,
                    mode.to_driver(),
                )
            }
            .check("cuStreamBeginCaptureToGraph");
            drop(change);
            begun?;
            // Registered once it runs (nothing can see it before: both locks are held).
            capture_started(&graph, &site, before, beginning);
            reg.capturing.push(graph.handle as usize);
            // The recorded nodes run in the stream's context: the graph keeps it.
            reg.note_context(Some(context));
        }
        self.running = Some(Running {
            site,
            _count: count,
            _blocking: blocking,
        });
        self.graph = Some(graph);
        self.state = State::Building;
        Ok(self)
    }

    /// Whether the builder is recording; an error when the capture was invalidated.
    pub fn is_building(&self) -> Result<bool> {
        if self.state != State::Building {
            return Ok(false);
        }
        // (Not while another builder begins or ends a capture on the stream.)
        let _no_capture_changes = self.stream.capture_shared(true);
        match &self.running {
            Some(running) => running.in_context(|| Ok(capture_info(self.stream.handle())?.is_some())),
            None => Ok(capture_info(self.stream.handle())?.is_some()),
        }
    }

    /// Whether this builder came from [`split`](Self::split) and waits to be joined.
    pub fn is_join_required(&self) -> bool {
        self.kind == Kind::Forked
    }

    /// Stops recording. A builder made by `split` cannot end: join it back first. Graph memory
    /// allocated by the capture and not yet freed is freed at its end (a free node), so every
    /// launch gives it back.
    pub fn end_building(&mut self) -> Result<&mut Self> {
        if self.state != State::Building {
            return Err(CudaError::InvalidState("the graph builder is not building".into()));
        }
        if self.kind == Kind::Forked {
            return Err(CudaError::InvalidState(
                "a builder made by split ends with its parent: join it (GraphBuilder::join) and end that".into(),
            ));
        }
        crate::reaper::refuse_in_callback()?;
        match self.end_capture() {
            Ok(()) => {
                self.state = State::Ended;
                Ok(self)
            }
            Err((e, still_capturing)) => {
                if !still_capturing {
                    // Ended but invalidated: an invalidated capture may have recorded part of an
                    // operation that then failed (a copy from a host slice since freed, say): the
                    // graph must never run.
                    self.state = State::Ended;
                    self.graph = None;
                }
                Err(e)
            }
        }
    }

    /// Ends the capture this builder began. On failure, whether the stream still captures (the
    /// graph is then kept: the driver still records into it).
    fn end_capture(&mut self) -> std::result::Result<(), (CudaError, bool)> {
        let Some(graph) = self.graph.clone() else {
            return Err((CudaError::InvalidState("the graph builder has no graph".into()), false));
        };
        let Some(running) = self.running.as_ref() else {
            // Not known to have ended: the graph is kept rather than destroyed under a capture.
            return Err((
                CudaError::InvalidState("the graph builder began no capture".into()),
                true,
            ));
        };
        // A default stream is ended in the context it was captured in (its handle names that
        // context's stream only there).
        let mut ended = None;
        let switched = running.in_context(|| {
            ended = Some(self.end_capture_here(&graph, &running.site));
            Ok(())
        });
        let (result, capturing) = match ended {
            // Whatever restoring the previous context said, the end was attempted.
            Some((result, capturing)) => (result.and(switched), capturing),
            // The capture's context could not be made current: it still runs.
            None => (
                switched.and(Err(CudaError::InvalidState(
                    "the capture's context could not be made current to end it".into(),
                ))),
                true,
            ),
        };
        if !capturing {
            // Dropped outside every lock: the capture's count in its context is taken back.
            self.running = None;
        }
        result.map_err(|e| (e, capturing))
    }

    /// [`end_capture`](Self::end_capture) in the capture's context: the result, and whether the
    /// stream still captures.
    fn end_capture_here(&self, graph: &Arc<GraphInner>, site: &Site) -> (Result<()>, bool) {
        let _exclusive = self.stream.capture_exclusive();
        let mut reg = graph.lock();
        let freed = {
            let mut capture = Capture {
                graph,
                reg: &mut reg,
                dependencies: Vec::new(),
            };
            free_live_graph_memory(&mut capture, &self.stream)
        };
        let mut ended: driver::CUgraph = std::ptr::null_mut();
        let change = crate::stream::capture::capture_change();
        // SAFETY: the stream is capturing (begun by this builder, on this thread: builders are
        // not Send; a default stream in the capture's context, current now) into `graph`, whose
        // lock is held; out-pointer to a local.
        let status =
            unsafe { driver::cuStreamEndCapture(self.stream.handle(), &mut ended) }.check("cuStreamEndCapture");
        let mut now = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live; out-pointer to a local.
        let query = unsafe { driver::cuStreamIsCapturing(self.stream.handle(), &mut now) };
        drop(change);
        let capturing = query.result().is_err() || now != driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        if !capturing {
            reg.capturing.retain(|g| *g != graph.handle as usize);
            capture_over(graph.handle, site);
            if ended.is_null() {
                // Invalidated: the driver destroyed the graph recorded into.
                graph.capture_invalidated(&mut reg);
            }
        }
        drop(reg);
        let result = match status {
            Err(e) => Err(e),
            Ok(()) if ended.is_null() => Err(CudaError::InvalidState(
                "the capture was invalidated: nothing usable was recorded".into(),
            )),
            // The capture ended, but its graph memory may not all have been freed in it.
            Ok(()) => freed,
        };
        (result, capturing)
    }

    /// The recorded graph, to inspect or extend with the explicit API (after `end_building`).
    pub fn graph_definition(&self) -> Result<GraphDefinition> {
        match (&self.graph, self.state) {
            (Some(g), State::Ended) => Ok(GraphDefinition { inner: g.clone() }),
            _ => Err(CudaError::InvalidState("the graph has not finished building".into())),
        }
    }

    /// Instantiates the recorded graph.
    pub fn complete(&self, options: &GraphCompleteOptions) -> Result<Graph> {
        span!("graph instantiate", from = "GraphBuilder::complete");
        if self.kind == Kind::Body {
            return Err(CudaError::InvalidState(
                "a conditional body runs as part of its parent: complete the parent".into(),
            ));
        }
        self.graph_definition()?.instantiate(options)
    }

    /// Writes the recorded graph in Graphviz DOT form (after `end_building`).
    pub fn debug_dot_print(
        &self,
        path: impl AsRef<std::path::Path>,
        options: &super::GraphDebugPrintOptions,
    ) -> Result<()> {
        self.graph_definition()?.debug_dot_print(path, options)
    }

    /// Runs `op` with this builder's capture (its graph locked), under the stream's capture lock.
    fn with_capture<T>(&self, what: &str, op: impl FnOnce(&mut Capture<'_>) -> Result<T>) -> Result<T> {
        if self.state != State::Building {
            return Err(CudaError::InvalidState(format!(
                "{what}: the graph builder is not building"
            )));
        }
        self.stream.enqueue(|capture| match capture {
            Some(capture) => op(capture),
            None => Err(CudaError::InvalidState(format!("{what}: the stream is not capturing"))),
        })
    }
}

/// Records free nodes, at the end of the capture on `stream` into `capture`'s graph, for the
/// graph memory it allocated that is still live (called as the capture ends).
///
/// Every allocation of the capture is marked freed, whatever the driver says of its free (an
/// invalidated capture refuses them all, and its graph goes with its memory): the first error is
/// returned.
fn free_live_graph_memory(capture: &mut Capture<'_>, stream: &Stream) -> Result<()> {
    let mut result = Ok(());
    let mut i = 0;
    while i < capture.reg.graph_allocations.len() {
        let state = capture.reg.graph_allocations[i].clone();
        if !state.is_of(capture.graph) {
            i += 1;
            continue;
        }
        capture.reg.graph_allocations.swap_remove(i);
        if !state.freed.swap(true, Ordering::AcqRel) {
            // SAFETY: the stream records into the graph that allocated ptr (its lock is held);
            // this is the allocation's only free (`freed`).
            let freed = unsafe { crate::memory::free_async(state.ptr, stream) };
            if result.is_ok() {
                result = freed;
            }
        }
    }
    result
}

impl Drop for GraphBuilder {
    fn drop(&mut self) {
        if self.state == State::Building && self.kind != Kind::Forked {
            if let Err((e, still_capturing)) = self.end_capture() {
                if still_capturing {
                    // The driver still records into the graph: it must outlive the capture, so
                    // it is kept (leaked) rather than destroyed under it. (The capture's count in
                    // its context goes back with the builder: a later context synchronisation
                    // may invalidate this orphaned capture, whose graph never runs.)
                    std::mem::forget(self.graph.take());
                }
                if !matches!(e, CudaError::InvalidArgument(_) | CudaError::InvalidState(_)) {
                    record_drop_error(e);
                }
            }
        }
    }
}

impl std::fmt::Debug for GraphBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphBuilder")
            .field("stream", &self.stream)
            .field("kind", &self.kind)
            .field("state", &self.state)
            .finish()
    }
}
