//! Executable graphs: [`Graph`], its instantiation options, launches and whole-graph updates
//! (here), and per-node updates (`nodes`).

mod nodes;

use super::definition::{GraphDefinition, GraphNode};
use crate::device::{Context, FenceEvent};
use crate::error::Check;
use crate::stream::graph_core::{GraphInner, Registry};
use crate::stream::{release_after, Site, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// How [`GraphDefinition::instantiate`] (and [`super::GraphBuilder::complete`]) build the
/// executable graph (`CUDA_GRAPH_INSTANTIATE_FLAG_*`).
#[derive(Debug, Clone, Default)]
pub struct GraphCompleteOptions {
    /// Frees the graph's unfreed allocations when it is launched again.
    pub auto_free_on_launch: bool,
    /// Uploads the graph on this stream as part of instantiation.
    pub upload_stream: Option<Stream>,
    /// Makes the graph launchable from device code (it must be uploaded first).
    pub device_launch: bool,
    /// Honours the priorities set on kernel nodes.
    pub use_node_priority: bool,
}

impl GraphCompleteOptions {
    fn flags(&self) -> u64 {
        use driver::CUgraphInstantiate_flags as F;
        let mut f = 0u64;
        if self.auto_free_on_launch {
            f |= F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64;
        }
        if self.upload_stream.is_some() {
            f |= F::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64;
        }
        if self.device_launch {
            f |= F::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64;
        }
        if self.use_node_priority {
            f |= F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;
        }
        f
    }
}

/// What [`GraphDefinition::debug_dot_print`] includes (`CU_GRAPH_DEBUG_DOT_FLAGS_*`); all off
/// prints the topology only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphDebugPrintOptions {
    /// Everything: all parameters and attributes (`CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE`).
    pub verbose: bool,
    /// Runtime types instead of driver types (`..._RUNTIME_TYPES`).
    pub runtime_types: bool,
    /// Kernel nodes' parameters (`..._KERNEL_NODE_PARAMS`).
    pub kernel_node_params: bool,
    /// Copy nodes' parameters (`..._MEMCPY_NODE_PARAMS`).
    pub memcpy_node_params: bool,
    /// Memset nodes' parameters (`..._MEMSET_NODE_PARAMS`).
    pub memset_node_params: bool,
    /// Host callback nodes' parameters (`..._HOST_NODE_PARAMS`).
    pub host_node_params: bool,
    /// Event record and wait nodes' events (`..._EVENT_NODE_PARAMS`).
    pub event_node_params: bool,
    /// External semaphore signal nodes' parameters (`..._EXT_SEMAS_SIGNAL_NODE_PARAMS`).
    pub ext_semas_signal_node_params: bool,
    /// External semaphore wait nodes' parameters (`..._EXT_SEMAS_WAIT_NODE_PARAMS`).
    pub ext_semas_wait_node_params: bool,
    /// Kernel nodes' attributes (`..._KERNEL_NODE_ATTRIBUTES`).
    pub kernel_node_attributes: bool,
    /// Node handles (`..._HANDLES`).
    pub handles: bool,
    /// Allocation nodes' parameters (`..._MEM_ALLOC_NODE_PARAMS`).
    pub mem_alloc_node_params: bool,
    /// Free nodes' parameters (`..._MEM_FREE_NODE_PARAMS`).
    pub mem_free_node_params: bool,
    /// Batch memory-operation nodes' parameters (`..._BATCH_MEM_OP_NODE_PARAMS`).
    pub batch_mem_op_node_params: bool,
    /// Extra topology information (`..._EXTRA_TOPO_INFO`).
    pub extra_topo_info: bool,
    /// Conditional nodes' parameters (`..._CONDITIONAL_NODE_PARAMS`).
    pub conditional_node_params: bool,
}

impl GraphDebugPrintOptions {
    pub(crate) fn flags(&self) -> u32 {
        use driver::CUgraphDebugDot_flags as F;
        [
            (self.verbose, F::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE),
            (self.runtime_types, F::CU_GRAPH_DEBUG_DOT_FLAGS_RUNTIME_TYPES),
            (self.kernel_node_params, F::CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_PARAMS),
            (self.memcpy_node_params, F::CU_GRAPH_DEBUG_DOT_FLAGS_MEMCPY_NODE_PARAMS),
            (self.memset_node_params, F::CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS),
            (self.host_node_params, F::CU_GRAPH_DEBUG_DOT_FLAGS_HOST_NODE_PARAMS),
            (self.event_node_params, F::CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS),
            (
                self.ext_semas_signal_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_EXT_SEMAS_SIGNAL_NODE_PARAMS,
            ),
            (
                self.ext_semas_wait_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_EXT_SEMAS_WAIT_NODE_PARAMS,
            ),
            (
                self.kernel_node_attributes,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_ATTRIBUTES,
            ),
            (self.handles, F::CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES),
            (
                self.mem_alloc_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_MEM_ALLOC_NODE_PARAMS,
            ),
            (
                self.mem_free_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_MEM_FREE_NODE_PARAMS,
            ),
            (
                self.batch_mem_op_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_BATCH_MEM_OP_NODE_PARAMS,
            ),
            (self.extra_topo_info, F::CU_GRAPH_DEBUG_DOT_FLAGS_EXTRA_TOPO_INFO),
            (
                self.conditional_node_params,
                F::CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS,
            ),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, f)| acc | f.0)
    }
}

/// An executable graph (`CUgraphExec`): launch it as often as needed. It keeps the definition it
/// came from (for per-node updates).
///
/// **Lifetimes.** The executable holds the definition it was instantiated from, and so
/// everything the definition's nodes use (see [`crate::graph`]), until a whole-graph
/// [`update`](Self::update) makes it run another definition, which it then holds instead (as
/// `cuda.core` releases the owners an update replaces). Values given by per-node updates
/// ([`set_callback`](Self::set_callback), [`set_event`](Self::set_event)) are held by the
/// `Graph` too. A value replaced by a later update (the instantiated definition included), and
/// everything (the executable itself included) when the graph is dropped, is released on a
/// background thread once the launches queued before that on every stream the graph was
/// launched or uploaded on are done: dropping a `Graph` never waits for the GPU, and a launch
/// costs what `cuGraphLaunch` costs (nothing is attached to the driver's graph).
pub struct Graph {
    handle: driver::CUgraphExec,
    /// The definition instantiated, whose nodes per-node updates name: held until the first
    /// whole-graph update (the graph runs what it holds), named weakly afterwards (whoever still
    /// holds it, or one of its nodes, keeps it).
    source: Weak<GraphInner>,
    /// The instantiated definition while the graph runs what it holds (until the first update).
    instantiated_from: Option<GraphDefinition>,
    /// Whether the definition instantiated allocates graph memory (see [`update`](Self::update)).
    has_graph_memory: bool,
    /// Values per-node updates made the graph use, by node and kind.
    held: HashMap<(usize, HeldKind), Box<dyn Any + Send + Sync>>,
    /// The definition the last whole-graph update made the graph run.
    updated_from: Option<GraphDefinition>,
    /// Every stream the graph was launched on.
    launches: Launches,
    /// Fences after the allocation of every buffer the graph's nodes use (only ever added to):
    /// each stream waits for those it has not waited for at its next launch of the graph.
    ready: Vec<Arc<FenceEvent>>,
    /// The context the graph was instantiated in.
    _context: Option<Context>,
    /// Serialises the driver calls on the executable graph (the driver does not).
    calls: Mutex<()>,
}

/// What a per-node update handed the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum HeldKind {
    Callback,
    Event,
    /// The kernel (and configuration) an update gave a kernel node.
    Kernel,
    KernelArgs,
    /// The buffers an update gave a copy node.
    Memcpy,
    /// The context a copy node's update was made in.
    MemcpyContext,
    /// The region (buffer and parameters) an update gave a memset node.
    Memset,
    /// The context a memset node's new value was set in.
    MemsetContext,
    /// The graph an update gave a child-graph node.
    Child,
}

/// The streams a graph was launched on, each with how many of the graph's readiness fences it
/// has waited for: launching again on the first stream costs one comparison and one load. The
/// fences only grow (updates add those of the buffers they bring), and each stream waits for the
/// ones it has not yet at its next launch (from the thread launching, which can reach it).
#[derive(Default)]
struct Launches {
    first: OnceLock<Site>,
    first_waited: AtomicUsize,
    more: Mutex<Vec<(Site, usize)>>,
}

impl Launches {
    /// Notes a launch on `stream`, which first waits for the fences of `ready` it has not.
    #[inline]
    fn note(&self, stream: &Stream, ready: &[Arc<FenceEvent>]) -> Result<()> {
        if let Some(first) = self.first.get() {
            if first.is_plainly(stream) && self.first_waited.load(Ordering::Acquire) == ready.len() {
                return Ok(());
            }
        }
        self.note_slow(stream, ready)
    }

    #[cold]
    fn note_slow(&self, stream: &Stream, ready: &[Arc<FenceEvent>]) -> Result<()> {
        let site = Site::of(stream)?;
        // The fences from `from` on, which the site has not waited for. A stream being captured
        // queues no wait: refused (and not noted as having waited), as the launch itself is.
        let wait_from = |from: usize| -> Result<()> {
            for fence in ready.get(from..).unwrap_or_default() {
                if !site.wait(fence)? {
                    return Err(launch_into_capture());
                }
            }
            Ok(())
        };
        if self.first.get().is_some_and(|f| f.same(&site)) {
            wait_from(self.first_waited.load(Ordering::Acquire))?;
            self.first_waited.fetch_max(ready.len(), Ordering::AcqRel);
            return Ok(());
        }
        {
            let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, waited)) = more.iter_mut().find(|(s, _)| s.same(&site)) {
                wait_from(*waited)?;
                *waited = ready.len();
                return Ok(());
            }
        }
        // A new stream: its launches follow the allocation of everything the graph uses.
        wait_from(0)?;
        self.add(site, ready.len());
        Ok(())
    }

    /// Notes `stream`, which the graph was uploaded on, without waiting for anything there (its
    /// first launch, if any, waits for every fence).
    fn uploaded_on(&self, stream: &Stream) -> Result<()> {
        self.add(Site::of(stream)?, 0);
        Ok(())
    }

    /// Adds `site`, which has waited for the first `waited` fences (unless another thread added
    /// it meanwhile).
    fn add(&self, site: Site, waited: usize) {
        if self.first.set(site.clone()).is_ok() {
            self.first_waited.fetch_max(waited, Ordering::AcqRel);
            return;
        }
        let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
        let first = self.first.get().is_some_and(|f| f.same(&site));
        if !first && !more.iter().any(|(s, _)| s.same(&site)) {
            more.push((site, waited));
        }
    }

    fn sites(&self) -> Vec<Site> {
        let mut out: Vec<Site> = self.first.get().cloned().into_iter().collect();
        out.extend(
            self.more
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(s, _)| s.clone()),
        );
        out
    }
}

// SAFETY: a CUgraphExec may be launched from any thread; updates take &mut self; the held values
// and launch sites are Send + Sync.
unsafe impl Send for Graph {}
// SAFETY: launches take &self and the driver orders them per stream; the launch sites are
// behind a OnceLock and a Mutex.
unsafe impl Sync for Graph {}

fn instantiate_error(result: driver::CUgraphInstantiateResult, cause: CudaError) -> CudaError {
    use driver::CUgraphInstantiateResult as R;
    let why = match result {
        R::CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE => "the graph has an invalid structure, such as a cycle",
        R::CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED => {
            "a node does an operation the driver cannot instantiate (for device launch: host nodes, allocations, ...)"
        }
        R::CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED => "the graph has nodes from more than one context",
        R::CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED => {
            "a conditional handle is not used by any conditional node"
        }
        _ => return cause,
    };
    CudaError::InvalidState(format!("graph instantiation failed: {why} ({cause})"))
}

/// The error for a launch or upload on a stream being captured.
fn launch_into_capture() -> CudaError {
    CudaError::InvalidState(
        "an executable graph cannot be launched on a stream being captured: embed its definition (GraphBuilder::embed, GraphDefinition::embed) instead".into(),
    )
}

fn update_reason(result: driver::CUgraphExecUpdateResult) -> &'static str {
    use driver::CUgraphExecUpdateResult as R;
    match result {
        R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => "the topology changed (nodes or edges added or removed)",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "a node's type changed",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => "a kernel node's function changed",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => "parameters changed in a way that cannot be updated",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => "something changed that updates do not support",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => "a kernel changed in an unsupported way",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => "node attributes changed",
        _ => "the update failed",
    }
}

impl Graph {
    /// Instantiates `definition`, whose lock `reg` is held.
    pub(crate) fn instantiate(
        definition: &GraphDefinition,
        reg: &Registry,
        options: &GraphCompleteOptions,
    ) -> Result<Graph> {
        reg.refuse_while_capturing(definition.handle())?;
        // A graph whose owning node was destroyed, or whose hierarchy lost a graph to an
        // invalidated capture, is gone (or partly so) in the driver.
        definition.inner.check_live(reg)?;
        // The context the executable is made in, held by it (a context this crate cannot hold,
        // made current by another library, is refused).
        let current_context = Context::current()?;
        let mut params = driver::CUDA_GRAPH_INSTANTIATE_PARAMS {
            flags: options.flags(),
            hUploadStream: options
                .upload_stream
                .as_ref()
                .map_or(std::ptr::null_mut(), |s| s.handle()),
            hErrNode_out: std::ptr::null_mut(),
            result_out: driver::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
        };
        let mut exec: driver::CUgraphExec = std::ptr::null_mut();
        // (Serialised with capture begins and ends: see `capture::CAPTURE_STATE`.)
        let serialised = crate::stream::capture::capture_question();
        // SAFETY: the graph (and upload stream) are live; params and out-pointer are locals.
        let status = unsafe { driver::cuGraphInstantiateWithParams(&mut exec, definition.handle(), &mut params) }
            .check("cuGraphInstantiateWithParams");
        drop(serialised);
        if let Err(e) = status {
            return Err(instantiate_error(params.result_out, e));
        }
        let graph = Graph {
            handle: exec,
            source: Arc::downgrade(&definition.inner),
            instantiated_from: Some(definition.clone()),
            has_graph_memory: reg.has_graph_memory,
            held: HashMap::new(),
            updated_from: None,
            launches: Launches::default(),
            ready: reg.ready.clone(),
            _context: current_context,
            calls: Mutex::new(()),
        };
        if let Some(stream) = &options.upload_stream {
            // The upload is work on that stream: the graph is released after it.
            graph.launches.uploaded_on(stream)?;
        }
        Ok(graph)
    }

    /// The `CUgraphExec`.
    pub fn handle(&self) -> driver::CUgraphExec {
        self.handle
    }

    /// The definition the graph was instantiated from, whose nodes per-node updates name (also
    /// after whole-graph [`update`](Self::update)s). `None` once an update replaced it and
    /// nothing else holds it (no clone of it, none of its nodes): it was released then.
    pub fn definition(&self) -> Option<GraphDefinition> {
        self.source.upgrade().map(|inner| GraphDefinition { inner })
    }

    /// [`definition`](Self::definition), or the error per-node updates give without it.
    fn source(&self) -> Result<GraphDefinition> {
        self.definition().ok_or_else(|| {
            CudaError::InvalidState(
                "the definition this graph was instantiated from was released (an update replaced it, and nothing else held it): keep it, or one of its nodes, to update nodes".into(),
            )
        })
    }

    /// Uploads the graph to the device ahead of its first launch. Not on a stream being
    /// captured.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        crate::reaper::refuse_in_callback()?;
        // The upload is work on the stream: the graph is released after it, as after a launch.
        self.on_stream(stream, || {
            // SAFETY: both handles are live; calls on the executable are serialised; the stream
            // is not capturing (inside its operation).
            unsafe { driver::cuGraphUpload(self.handle, stream.handle()) }.check("cuGraphUpload")
        })
    }

    /// Runs the graph on `stream` (one `cuGraphLaunch`). Everything the graph's nodes use is
    /// held by the graph (kernel arguments are vouched for when their nodes are added). Not on a
    /// stream being captured: embed the graph's definition instead.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        self.on_stream(stream, || {
            // SAFETY: both handles are live; calls on the executable are serialised. The graph
            // holds what its nodes use, and what it holds goes only after the launches on every
            // stream noted by `on_stream` are done; those streams waited for the allocation of
            // every buffer the nodes use before their first launch.
            unsafe { driver::cuGraphLaunch(self.handle, stream.handle()) }.check("cuGraphLaunch")
        })
    }

    /// Makes `call` (a launch or an upload of the executable) on `stream`: the stream is noted
    /// (waiting for what it has not of the graph's allocations), then `call` runs inside the
    /// stream's operation, refused on a stream being captured, with calls on the executable
    /// serialised.
    #[inline]
    fn on_stream(&self, stream: &Stream, call: impl FnOnce() -> Result<()>) -> Result<()> {
        self.launches.note(stream, &self.ready)?;
        stream.enqueue(|capture| {
            if capture.is_some() {
                return Err(launch_into_capture());
            }
            let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            call()
        })
    }

    /// Holds `value` for `node` (replacing, and releasing once current launches are done, what
    /// an earlier update held for it).
    fn hold(&mut self, node: &GraphNode, kind: HeldKind, value: Box<dyn Any + Send + Sync>) {
        if let Some(old) = self.held.insert((node.handle() as usize, kind), value) {
            release_after(vec![old], self.launches.sites());
        }
    }

    /// Makes the executable graph do what `definition` describes, without instantiating again
    /// (`cuGraphExecUpdate`). The topology must be the same; only node parameters may differ.
    /// Per-node updates afterwards still name the nodes of the definition instantiated. After an
    /// update from another definition, the value-only ones (`set_kernel_args`,
    /// `set_memset_value`) are refused until the node's whole parameters are given
    /// (`update_kernel`, `update_memset`): the instantiated definition no longer says what the
    /// node runs. After an update from the definition instantiated, they work as before. The
    /// driver's reference describes a node disabled with [`set_enabled`](Self::set_enabled) as an
    /// empty node until it is enabled again: enable it after an update to run what it was given.
    ///
    /// Refused for a body or child graph (update with its root), a graph whose owning node was
    /// destroyed or whose hierarchy lost a graph to an invalidated capture, and when either
    /// graph allocates graph memory (the driver keeps the executable's allocations, whose
    /// addresses the new definition's nodes do not use).
    pub fn update(&mut self, definition: &GraphDefinition) -> Result<()> {
        crate::reaper::refuse_in_callback()?;
        if definition.inner.owner.is_some() {
            return Err(CudaError::InvalidArgument(
                "a body or child graph runs as part of its parent: update with the parent".into(),
            ));
        }
        let mut info = driver::CUgraphExecUpdateResultInfo {
            result: driver::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        let (status, ready) = {
            let reg = definition.inner.lock();
            reg.refuse_while_capturing(definition.handle())?;
            definition.inner.check_live(&reg)?;
            if reg.has_graph_memory || self.has_graph_memory {
                return Err(CudaError::InvalidArgument(
                    "graph update: a graph that allocates graph memory cannot be updated (its allocations stay where the executable made them): instantiate the new definition".into(),
                ));
            }
            let serialised = crate::stream::capture::capture_question();
            // SAFETY: both graphs are live (the definition's lock is held, the executable is
            // borrowed mutably); out-value is a local.
            let status = unsafe { driver::cuGraphExecUpdate(self.handle, definition.handle(), &mut info) }
                .check("cuGraphExecUpdate");
            drop(serialised);
            (status, reg.ready.clone())
        };
        if let Err(e) = status {
            // The driver's error, as cuda.core raises a CUDAError ("Graph update failed: ..."),
            // with the reason the driver gave.
            return Err(e.with_note(format!("graph update failed: {}", update_reason(info.result))));
        }
        // The graph now runs what `definition` holds (its nodes keep their identity as nodes of
        // the definition instantiated, which per-node updates still name): holding the
        // definition holds that. What earlier updates held is replaced, and released after the
        // launches that may still use it.
        let mut old: Vec<Box<dyn Any + Send>> = self.held.drain().map(|(_, v)| v as Box<dyn Any + Send>).collect();
        // Brought up to date with the definition instantiated (still held, and never updated
        // from another one meanwhile): its nodes say again what the graph runs.
        let same = self
            .instantiated_from
            .as_ref()
            .is_some_and(|d| d.handle() == definition.handle());
        if !same {
            if let Some(previous) = self.updated_from.replace(definition.clone()) {
                old.push(Box::new(previous));
            }
            // The instantiated definition too: its nodes' values are no longer what the graph
            // runs.
            if let Some(first) = self.instantiated_from.take() {
                old.push(Box::new(first));
            }
        }
        release_after(old, self.launches.sites());
        // Buffers the new definition uses: every stream's next launch follows their allocation.
        self.note_ready(ready);
        Ok(())
    }

    /// Adds fences launches must follow: each stream waits for them at its next launch.
    fn note_ready(&mut self, fences: Vec<Arc<FenceEvent>>) {
        for fence in fences {
            if !self.ready.iter().any(|f| Arc::ptr_eq(f, &fence)) {
                self.ready.push(fence);
            }
        }
    }
}

/// An executable graph's handle, destroyed when dropped: by [`Graph`]'s drop, once the launches
/// on every stream it was launched on are done (the driver's destroy can wait for launches in
/// flight, with host or conditional nodes: a drop must not).
struct ExecHandle(driver::CUgraphExec);

// SAFETY: a CUgraphExec may be destroyed from any thread; the one holding this is its only user.
unsafe impl Send for ExecHandle {}
// SAFETY: nothing is reachable through a shared reference.
unsafe impl Sync for ExecHandle {}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        /// # Safety
        /// `handle` is an executable graph made by instantiation, destroyed once.
        unsafe fn destroy(handle: usize) -> driver::CUresult {
            // SAFETY: forwarded to the caller.
            unsafe { driver::cuGraphExecDestroy(handle as driver::CUgraphExec) }
        }
        // Made by instantiation and destroyed once (this drop); no launch of it is in flight
        // (see `Graph`'s drop).
        crate::stream::graph_core::destroy_graph_handle(self.0 as usize, destroy, "cuGraphExecDestroy");
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // Everything the graph's launches may use, the executable itself first (a Vec drops in
        // order; the context it was made in last): released once the launches queued so far on
        // every stream it was launched or uploaded on are done, on the release thread. A graph
        // never launched is released here (on a driver thread, on the release thread).
        let mut values: Vec<Box<dyn Any + Send>> = Vec::with_capacity(self.held.len() + 4);
        values.push(Box::new(ExecHandle(self.handle)));
        if let Some(d) = self.instantiated_from.take() {
            values.push(Box::new(d));
        }
        if let Some(d) = self.updated_from.take() {
            values.push(Box::new(d));
        }
        values.extend(self.held.drain().map(|(_, v)| v as Box<dyn Any + Send>));
        if let Some(c) = self._context.take() {
            values.push(Box::new(c));
        }
        let sites = self.launches.sites();
        if sites.is_empty() && !crate::reaper::in_callback() {
            drop(values);
        } else {
            release_after(values, sites);
        }
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({:p})", self.handle)
    }
}
