//! Explicit graphs: [`GraphDefinition`], its [`GraphNode`]s, conditions and node parameters.

use super::attach::ConditionalInfo;
pub(crate) use super::attach::{GraphInner, NodeRef, Registry};
use super::exec::{Graph, GraphCompleteOptions};
use crate::device::{Context, Device, FenceEvent};
use crate::error::Check;
use crate::launch::{DeviceRepr, Dim3, KernelArgs, LaunchConfig};
use crate::memory::{read_write_access, Buffer};
use crate::object_code::Kernel;
use crate::stream::Event;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

/// A condition a kernel sets (`cudaGraphSetConditional(handle, value)` in device code) to steer
/// a conditional node. Pass it to a kernel as an argument: it is the 64-bit
/// `cudaGraphConditionalHandle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct GraphCondition {
    handle: driver::CUgraphConditionalHandle,
}

// SAFETY: a transparent u64, the layout of cudaGraphConditionalHandle.
unsafe impl DeviceRepr for GraphCondition {}

impl GraphCondition {
    /// The `CUgraphConditionalHandle`.
    pub fn handle(&self) -> driver::CUgraphConditionalHandle {
        self.handle
    }

    pub(crate) fn create(graph: driver::CUgraph, default_value: Option<u32>) -> Result<GraphCondition> {
        let context = current_context("create_condition")?;
        let mut handle = 0;
        let flags = if default_value.is_some() {
            driver::CU_GRAPH_COND_ASSIGN_DEFAULT
        } else {
            0
        };
        // SAFETY: graph and context are live; out-pointer to a local.
        unsafe {
            driver::cuGraphConditionalHandleCreate(&mut handle, graph, context, default_value.unwrap_or(0), flags)
        }
        .check("cuGraphConditionalHandleCreate")?;
        Ok(GraphCondition { handle })
    }
}

/// The kinds of conditional node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionalType {
    /// Runs its first body when the condition is non-zero (and its second, if any, otherwise).
    If,
    /// Runs its body as long as the condition is non-zero (checked before each iteration).
    While,
    /// Runs body `n` when the condition is `n`; nothing when it is out of range.
    Switch,
}

impl ConditionalType {
    fn to_driver(self) -> driver::CUgraphConditionalNodeType {
        match self {
            ConditionalType::If => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            ConditionalType::While => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
            ConditionalType::Switch => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
        }
    }
}

/// Adds a conditional node after `deps` to `graph`, records what it was made with in `reg`, and
/// returns its handle and body graphs.
pub(crate) fn add_conditional_node(
    reg: &mut Registry,
    graph: driver::CUgraph,
    deps: &[driver::CUgraphNode],
    condition: GraphCondition,
    kind: ConditionalType,
    size: u32,
) -> Result<(driver::CUgraphNode, Vec<driver::CUgraph>)> {
    if size == 0 {
        return Err(CudaError::InvalidArgument("switch: count must be at least 1".into()));
    }
    let context = current_context("conditional node")?;
    // SAFETY: an all-zero CUgraphNodeParams is the documented starting point; the conditional
    // member is filled in below.
    let mut params: driver::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = driver::CUDA_CONDITIONAL_NODE_PARAMS {
        handle: condition.handle,
        type_: kind.to_driver(),
        size,
        phGraph_out: std::ptr::null_mut(),
        ctx: context,
    };
    let mut node: driver::CUgraphNode = std::ptr::null_mut();
    // SAFETY: graph and dependencies are live; params is initialised for a conditional node.
    unsafe {
        driver::cuGraphAddNode(
            &mut node,
            graph,
            deps.as_ptr(),
            std::ptr::null(),
            deps.len(),
            &mut params,
        )
    }
    .check("cuGraphAddNode")?;
    // SAFETY: the driver filled phGraph_out with `size` body graphs owned by the node.
    let bodies = unsafe {
        let out = params.__bindgen_anon_1.conditional.phGraph_out;
        std::slice::from_raw_parts(out, size as usize).to_vec()
    };
    reg.conditionals.insert(
        node as usize,
        ConditionalInfo {
            condition,
            kind,
            graph,
            bodies: bodies.clone(),
        },
    );
    Ok((node, bodies))
}

/// A graph built node by node (`cuGraphCreate`). Cheap to clone: clones share the graph; use
/// [`clone_graph`](Self::clone_graph) for an independent copy.
///
/// Nodes added on the definition itself are entry points; nodes added on a [`GraphNode`] depend
/// on it. Whatever a node uses (buffers, events, callbacks, child graphs) is held by the graph
/// and released once the graph, its clones and executable graphs, and their launches, are gone.
///
/// ```no_run
/// # use cuda_core::{Device, graph::GraphDefinition, Buffer};
/// # fn demo(dst: &Buffer, src: &Buffer) -> cuda_core::Result<()> {
/// let device = Device::new(0)?;
/// device.set_current()?;
/// let stream = device.create_stream(Default::default())?;
/// let graph = GraphDefinition::new()?;
/// let fill = graph.memset(src, 7u8, src.size())?;
/// fill.memcpy(dst, src, src.size())?;
/// let exec = graph.instantiate(&Default::default())?;
/// exec.launch(&stream)?;
/// stream.sync()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GraphDefinition {
    pub(crate) inner: Arc<GraphInner>,
}

/// A node of a [`GraphDefinition`]. Cheap to clone; a clone names the same node.
#[derive(Clone)]
pub struct GraphNode {
    graph: Arc<GraphInner>,
    node: NodeRef,
}

impl GraphNode {
    /// The node `handle` of `graph`, registered (or found) in `reg`.
    fn new(graph: &Arc<GraphInner>, reg: &mut Registry, handle: driver::CUgraphNode) -> GraphNode {
        GraphNode {
            graph: graph.clone(),
            node: reg.register(handle),
        }
    }
}

/// Runs a count-then-fill driver query for an array of nodes.
fn node_array(query: impl Fn(*mut driver::CUgraphNode, &mut usize) -> Result<()>) -> Result<Vec<driver::CUgraphNode>> {
    let mut n = 0;
    query(std::ptr::null_mut(), &mut n)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut nodes = vec![std::ptr::null_mut(); n];
    query(nodes.as_mut_ptr(), &mut n)?;
    nodes.truncate(n);
    Ok(nodes)
}

// SAFETY: the handle is only used under the graph's registry lock.
unsafe impl Send for GraphNode {}
// SAFETY: as above.
unsafe impl Sync for GraphNode {}

/// The node types (`CUgraphNodeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeType {
    Kernel,
    Memcpy,
    Memset,
    Host,
    ChildGraph,
    Empty,
    EventWait,
    EventRecord,
    ExternalSemaphoreSignal,
    ExternalSemaphoreWait,
    MemAlloc,
    MemFree,
    BatchMemOp,
    Conditional,
    /// A type this crate does not name yet (the driver's number).
    Other(u32),
}

impl NodeType {
    fn from_driver(t: driver::CUgraphNodeType) -> NodeType {
        use driver::CUgraphNodeType as T;
        match t {
            T::CU_GRAPH_NODE_TYPE_KERNEL => NodeType::Kernel,
            T::CU_GRAPH_NODE_TYPE_MEMCPY => NodeType::Memcpy,
            T::CU_GRAPH_NODE_TYPE_MEMSET => NodeType::Memset,
            T::CU_GRAPH_NODE_TYPE_HOST => NodeType::Host,
            T::CU_GRAPH_NODE_TYPE_GRAPH => NodeType::ChildGraph,
            T::CU_GRAPH_NODE_TYPE_EMPTY => NodeType::Empty,
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeType::EventWait,
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeType::EventRecord,
            T::CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL => NodeType::ExternalSemaphoreSignal,
            T::CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT => NodeType::ExternalSemaphoreWait,
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => NodeType::MemAlloc,
            T::CU_GRAPH_NODE_TYPE_MEM_FREE => NodeType::MemFree,
            T::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => NodeType::BatchMemOp,
            T::CU_GRAPH_NODE_TYPE_CONDITIONAL => NodeType::Conditional,
            other => NodeType::Other(other.0),
        }
    }
}

/// The value a memset node writes: its width (1, 2 or 4 bytes) is the element size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemsetValue {
    U8(u8),
    U16(u16),
    U32(u32),
}

impl MemsetValue {
    pub(crate) fn parts(self) -> (u32, u32) {
        match self {
            MemsetValue::U8(v) => (v as u32, 1),
            MemsetValue::U16(v) => (v as u32, 2),
            MemsetValue::U32(v) => (v, 4),
        }
    }
}

impl From<u8> for MemsetValue {
    fn from(v: u8) -> Self {
        MemsetValue::U8(v)
    }
}
impl From<u16> for MemsetValue {
    fn from(v: u16) -> Self {
        MemsetValue::U16(v)
    }
}
impl From<u32> for MemsetValue {
    fn from(v: u32) -> Self {
        MemsetValue::U32(v)
    }
}

/// Where a graph allocation lives (`GraphMemoryType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphMemoryType {
    #[default]
    Device,
    /// Pinned host memory (needs a driver that supports host graph allocations).
    Host,
}

/// Options of an allocation node.
#[derive(Debug, Clone, Default)]
pub struct GraphAllocOptions {
    /// The device the memory belongs to (the current one when `None`).
    pub device: Option<Device>,
    pub memory_type: GraphMemoryType,
    /// Other devices that may read and write the memory.
    pub peer_access: Vec<Device>,
}

/// What a node does, as the driver reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeParams {
    Empty,
    Kernel {
        grid: Dim3,
        block: Dim3,
        shmem_size: u32,
    },
    Memset {
        dst: driver::CUdeviceptr,
        value: u32,
        element_size: u32,
        width: usize,
        height: usize,
        pitch: usize,
    },
    Memcpy {
        dst: driver::CUdeviceptr,
        src: driver::CUdeviceptr,
        size: usize,
    },
    Host,
    /// The node's own copy of the embedded graph.
    ChildGraph(GraphDefinition),
    EventRecord(driver::CUevent),
    EventWait(driver::CUevent),
    MemAlloc {
        dptr: driver::CUdeviceptr,
        bytesize: usize,
    },
    MemFree {
        dptr: driver::CUdeviceptr,
    },
    Conditional {
        condition: GraphCondition,
        kind: ConditionalType,
        /// The body graphs (for `If`: then, else).
        branches: Vec<GraphDefinition>,
    },
    /// A node of a kind whose parameters are not read here.
    Other(NodeType),
}

impl PartialEq for GraphDefinition {
    fn eq(&self, other: &Self) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl fmt::Debug for GraphDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphDefinition({:p})", self.inner.handle)
    }
}

impl fmt::Debug for GraphNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphNode({:p})", self.node.handle)
    }
}

impl PartialEq for GraphNode {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node
    }
}

/// A conditional node and its body graphs, to fill with nodes.
#[derive(Debug, Clone)]
pub struct ConditionalNode {
    node: GraphNode,
    /// At least one (the node adders refuse a count of 0).
    first: GraphDefinition,
    rest: Vec<GraphDefinition>,
}

impl ConditionalNode {
    fn new(node: GraphNode, branches: Vec<GraphDefinition>) -> Result<ConditionalNode> {
        let mut branches = branches.into_iter();
        let first = branches
            .next()
            .ok_or_else(|| CudaError::InvalidArgument("a conditional node has at least one body".into()))?;
        Ok(ConditionalNode {
            node,
            first,
            rest: branches.collect(),
        })
    }

    /// The conditional node itself.
    pub fn node(&self) -> &GraphNode {
        &self.node
    }

    /// Every body, in order (for if-else: then, else; for switch: body `n` at index `n`).
    pub fn branches(&self) -> Vec<&GraphDefinition> {
        std::iter::once(&self.first).chain(&self.rest).collect()
    }

    /// Body `n` (switch), if there is one.
    pub fn branch(&self, n: usize) -> Option<&GraphDefinition> {
        match n {
            0 => Some(&self.first),
            _ => self.rest.get(n - 1),
        }
    }

    /// The body run when the condition is non-zero (if, if-else).
    pub fn then(&self) -> &GraphDefinition {
        &self.first
    }
    /// The body run when the condition is zero (if-else only).
    pub fn else_(&self) -> Option<&GraphDefinition> {
        self.rest.first()
    }
    /// The loop body (while).
    pub fn body(&self) -> &GraphDefinition {
        &self.first
    }
}

/// Where new nodes go and what they depend on.
struct Append<'a> {
    graph: &'a Arc<GraphInner>,
    after: Option<NodeRef>,
}

impl Append<'_> {
    /// Adds one node made by `f` (given the graph and the dependencies), all under the lock;
    /// `hold` first hands the graph what the node will use (a failed add leaves only an extra
    /// hold, never a node using what is not held).
    fn add(
        &self,
        extra: &[&GraphNode],
        hold: impl FnOnce(&mut Holder<'_>) -> Result<()>,
        f: impl FnOnce(&mut Registry, driver::CUgraph, &[driver::CUgraphNode]) -> Result<driver::CUgraphNode>,
    ) -> Result<GraphNode> {
        let mut reg = self.graph.lock();
        self.graph.check_live(&reg)?;
        reg.refuse_while_capturing(self.graph.handle)?;
        // Nodes run in the context current when they are added (some name it): the graph keeps
        // it.
        reg.note_context(Context::current()?);
        let mut deps = Vec::with_capacity(extra.len() + 1);
        if let Some(n) = self.after {
            check_node(&reg, n)?;
            deps.push(n.handle);
        }
        for e in extra {
            if !Arc::ptr_eq(&e.graph, self.graph) {
                return Err(CudaError::InvalidArgument(
                    "a dependency belongs to another graph: nodes can only depend on nodes of their own graph".into(),
                ));
            }
            check_node(&reg, e.node)?;
            deps.push(e.node.handle);
        }
        hold(&mut Holder {
            graph: self.graph,
            reg: &mut reg,
        })?;
        let handle = f(&mut reg, self.graph.handle, &deps)?;
        Ok(GraphNode::new(self.graph, &mut reg, handle))
    }
}

/// Hands values to a graph whose lock is held.
struct Holder<'a> {
    graph: &'a Arc<GraphInner>,
    reg: &'a mut Registry,
}

impl Holder<'_> {
    fn hold<T: std::any::Any + Send + Sync>(&mut self, value: T) -> Result<()> {
        self.graph.attach_locked(self.reg, value)
    }

    /// Holds `buffer`'s memory for the graph, and notes the fence launches wait for before they
    /// touch it (`ready`, from `Buffer::graph_fence`, taken before the lock).
    fn hold_buffer(&mut self, buffer: &Buffer, ready: &Option<Arc<FenceEvent>>) -> Result<()> {
        if let Some(f) = ready {
            self.reg.note_ready(f);
        }
        self.hold(buffer.share())
    }
}

/// Serialises embeds: an embed takes the child's lock inside the parent's, and two threads
/// embedding two graphs in each other at once would take them in opposite orders. Taken before
/// any stream or graph lock.
pub(crate) fn embedding() -> std::sync::MutexGuard<'static, ()> {
    static EMBEDDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    EMBEDDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Nothing for the graph to hold.
fn nothing(_: &mut Holder<'_>) -> Result<()> {
    Ok(())
}

/// An error for graph memory given to an explicit graph (it exists only within its capture).
fn refuse_graph_memory(buffer: &Buffer, what: &str) -> Result<()> {
    if buffer.is_graph_memory() {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: graph memory is usable only within the capture that allocated it"
        )));
    }
    Ok(())
}

/// Adds a node recording or waiting for `event`, which the graph holds.
fn add_event_node(append: &Append<'_>, event: &Event, kind: EventNode) -> Result<GraphNode> {
    append.add(
        &[],
        |h| h.hold(event.clone()),
        |_, g, deps| {
            let mut node = std::ptr::null_mut();
            // SAFETY: graph, dependencies and event are live (the graph holds the event).
            let (status, call) = unsafe {
                match kind {
                    EventNode::Record => (
                        driver::cuGraphAddEventRecordNode(&mut node, g, deps.as_ptr(), deps.len(), event.handle()),
                        "cuGraphAddEventRecordNode",
                    ),
                    EventNode::Wait => (
                        driver::cuGraphAddEventWaitNode(&mut node, g, deps.as_ptr(), deps.len(), event.handle()),
                        "cuGraphAddEventWaitNode",
                    ),
                }
            };
            status.check(call)?;
            Ok(node)
        },
    )
}

/// Whether a capture records into a body of conditional node `node`, or of one nested in it.
fn capturing_below(reg: &Registry, node: driver::CUgraphNode) -> bool {
    let mut pending: Vec<driver::CUgraph> = match reg.conditionals.get(&(node as usize)) {
        Some(info) => info.bodies.clone(),
        None => return false,
    };
    while let Some(body) = pending.pop() {
        if reg.capturing.contains(&(body as usize)) {
            return true;
        }
        for info in reg.conditionals.values() {
            if info.graph == body {
                pending.extend(info.bodies.iter().copied());
            }
        }
    }
    false
}

fn check_node(reg: &Registry, node: NodeRef) -> Result<()> {
    if reg.is_live(node) {
        Ok(())
    } else {
        Err(CudaError::InvalidArgument(
            "the graph node was destroyed and is no longer valid".into(),
        ))
    }
}

/// The current context, which nodes that name one (memset, memcpy, conditionals) run in.
fn current_context(what: &str) -> Result<driver::CUcontext> {
    let ctx = Context::current_handle()?;
    if ctx.is_null() {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: no context is current (call Device::set_current first)"
        )));
    }
    Ok(ctx)
}

fn kernel_params(config: &LaunchConfig, kernel: &Kernel, params: *mut *mut c_void) -> driver::CUDA_KERNEL_NODE_PARAMS {
    driver::CUDA_KERNEL_NODE_PARAMS {
        func: std::ptr::null_mut(),
        gridDimX: config.grid.x,
        gridDimY: config.grid.y,
        gridDimZ: config.grid.z,
        blockDimX: config.block.x,
        blockDimY: config.block.y,
        blockDimZ: config.block.z,
        sharedMemBytes: config.shmem_size,
        kernelParams: params,
        extra: std::ptr::null_mut(),
        kern: kernel.handle(),
        ctx: std::ptr::null_mut(),
    }
}

/// A host callback's data: the closure, called at every launch.
type Callback = Box<dyn Fn() + Send + Sync + 'static>;

unsafe extern "C" fn run_callback(data: *mut c_void) {
    // SAFETY: data points to a Callback the graph holds (attached) for as long as it can run.
    let f = unsafe { &*(data as *const Callback) };
    crate::stream::run_as_callback("a graph host callback", f);
}

/// Boxes `f` for a host node: the returned params point into the box, which must be attached.
pub(crate) fn host_params(f: impl Fn() + Send + Sync + 'static) -> (Box<Callback>, driver::CUDA_HOST_NODE_PARAMS) {
    let boxed: Box<Callback> = Box::new(Box::new(f));
    let params = driver::CUDA_HOST_NODE_PARAMS {
        fn_: Some(run_callback),
        userData: (&*boxed as *const Callback).cast_mut().cast(),
    };
    (boxed, params)
}

fn memcpy_params(dst: driver::CUdeviceptr, src: driver::CUdeviceptr, size: usize) -> driver::CUDA_MEMCPY3D {
    driver::CUDA_MEMCPY3D {
        srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        srcDevice: src,
        dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        dstDevice: dst,
        WidthInBytes: size,
        Height: 1,
        Depth: 1,
        ..Default::default()
    }
}

/// The bytes a memset of `height` rows of `width` elements of `element` bytes, `pitch` bytes
/// apart, reaches from its start; an error for a row wider than the pitch, no rows, or figures
/// that overflow.
pub(crate) fn memset_extent(width: usize, height: usize, pitch: usize, element: u32) -> Result<usize> {
    let overflow = || {
        CudaError::InvalidArgument(format!(
            "memset: {height} rows of {width} elements of {element} bytes, {pitch} bytes apart, overflow the address space"
        ))
    };
    if height == 0 {
        return Err(CudaError::InvalidArgument("memset: height must be at least 1".into()));
    }
    let row = width.checked_mul(element as usize).ok_or_else(overflow)?;
    if height > 1 && pitch < row {
        return Err(CudaError::InvalidArgument(format!(
            "memset: a pitch of {pitch} bytes is less than a row of {row}"
        )));
    }
    (height - 1)
        .checked_mul(pitch)
        .and_then(|b| b.checked_add(row))
        .ok_or_else(overflow)
}

macro_rules! node_adders {
    ($ty:ty) => {
        impl $ty {
            /// An empty node depending on this point and on `others`: joins branches.
            pub fn join(&self, others: &[&GraphNode]) -> Result<GraphNode> {
                self.append().add(others, nothing, |_, g, deps| {
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph and dependencies are live (checked under the lock).
                    unsafe { driver::cuGraphAddEmptyNode(&mut node, g, deps.as_ptr(), deps.len()) }
                        .check("cuGraphAddEmptyNode")?;
                    Ok(node)
                })
            }

            /// A kernel node: `kernel` with `config` and `args` (copied into the node now).
            ///
            /// # Safety
            /// As for [`crate::launch`], for every launch of every executable graph made from
            /// this graph: the arguments match the kernel's parameters, and every pointer among
            /// them is valid for the kernel's accesses whenever the graph runs. Hand the memory
            /// to the graph with [`GraphDefinition::keep_alive`] to tie it to the graph's life.
            pub unsafe fn launch<A: KernelArgs>(
                &self,
                config: &LaunchConfig,
                kernel: &Kernel,
                mut args: A,
            ) -> Result<GraphNode> {
                config.check(Device::current()?.limits()?)?;
                let append = self.append();
                // The node runs the kernel at every launch: the graph keeps its code loaded.
                append.add(
                    &[],
                    |h| h.hold(kernel.clone()),
                    |_, g, deps| {
                        args.with_params(|params| {
                            let p = kernel_params(config, kernel, params.as_mut_ptr());
                            let mut node = std::ptr::null_mut();
                            // SAFETY: graph and dependencies are live; the arguments are copied by
                            // the driver during the call (the caller vouches for what they point to).
                            unsafe { driver::cuGraphAddKernelNode(&mut node, g, deps.as_ptr(), deps.len(), &p) }
                                .check("cuGraphAddKernelNode")?;
                            set_launch_attributes(node, config)?;
                            Ok(node)
                        })
                    },
                )
            }

            /// An allocation node: `size` bytes of graph memory, valid from this node until a
            /// [`deallocate`](Self::deallocate) node (or, without one, until freed outside the
            /// graph). Its address is in [`GraphNode::params`] (`MemAlloc { dptr, .. }`).
            pub fn allocate(&self, size: usize, options: &GraphAllocOptions) -> Result<GraphNode> {
                let device = match options.device {
                    Some(d) => d,
                    None => Device::current()?,
                };
                let access: Vec<driver::CUmemAccessDesc> = options.peer_access.iter().map(read_write_access).collect();
                self.append().add(&[], nothing, |reg, g, deps| {
                    reg.has_graph_memory = true;
                    let mut props = driver::CUmemPoolProps {
                        allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
                        location: match options.memory_type {
                            GraphMemoryType::Device => crate::memory::device_location(&device),
                            GraphMemoryType::Host => {
                                crate::memory::location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0)
                            }
                        },
                        ..Default::default()
                    };
                    props.handleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
                    let mut p = driver::CUDA_MEM_ALLOC_NODE_PARAMS {
                        poolProps: props,
                        accessDescs: access.as_ptr(),
                        accessDescCount: access.len(),
                        bytesize: size,
                        dptr: 0,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph and dependencies are live; p and the access array live
                    // across the call.
                    unsafe { driver::cuGraphAddMemAllocNode(&mut node, g, deps.as_ptr(), deps.len(), &mut p) }
                        .check("cuGraphAddMemAllocNode")?;
                    Ok(node)
                })
            }

            /// A node freeing the memory `alloc` (an allocation node of this graph) made.
            pub fn deallocate(&self, alloc: &GraphNode) -> Result<GraphNode> {
                let dptr = match alloc.params()? {
                    NodeParams::MemAlloc { dptr, .. } => dptr,
                    other => {
                        return Err(CudaError::InvalidArgument(format!(
                            "deallocate takes an allocation node, not {other:?}"
                        )))
                    }
                };
                self.append().add(&[], nothing, |_, g, deps| {
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph and dependencies are live; dptr is a graph allocation.
                    unsafe { driver::cuGraphAddMemFreeNode(&mut node, g, deps.as_ptr(), deps.len(), dptr) }
                        .check("cuGraphAddMemFreeNode")?;
                    Ok(node)
                })
            }

            /// A memset node writing `value` (1, 2 or 4 bytes wide) `count` times from the
            /// start of `dst`. The graph holds `dst`'s memory.
            pub fn memset(&self, dst: &Buffer, value: impl Into<MemsetValue>, count: usize) -> Result<GraphNode> {
                self.memset_2d(dst, value, count, 1, 0)
            }

            /// A 2D memset node: `height` rows of `width` elements, `pitch` bytes apart.
            pub fn memset_2d(
                &self,
                dst: &Buffer,
                value: impl Into<MemsetValue>,
                width: usize,
                height: usize,
                pitch: usize,
            ) -> Result<GraphNode> {
                let value = value.into();
                refuse_graph_memory(dst, "memset")?;
                let extent = memset_extent(width, height, pitch, value.parts().1)?;
                dst.check_fits(extent, "memset")?;
                let ready = dst.graph_fence()?;
                // SAFETY: the region lies inside dst (checked arithmetic above), whose memory the
                // graph holds (handed over before the node is added).
                unsafe {
                    self.memset_node(dst.handle(), value, width, height, pitch, |h| {
                        h.hold_buffer(dst, &ready)
                    })
                }
            }

            /// A memset node on raw device memory (such as a graph allocation).
            ///
            /// # Safety
            /// The region is valid device memory whenever the graph runs.
            pub unsafe fn memset_raw(
                &self,
                dst: driver::CUdeviceptr,
                value: impl Into<MemsetValue>,
                width: usize,
                height: usize,
                pitch: usize,
            ) -> Result<GraphNode> {
                // SAFETY: forwarded to the caller.
                unsafe { self.memset_node(dst, value.into(), width, height, pitch, nothing) }
            }

            /// A memset node, after `hold` hands the graph what it uses.
            ///
            /// # Safety
            /// The region is valid device memory whenever the graph runs.
            unsafe fn memset_node(
                &self,
                dst: driver::CUdeviceptr,
                value: MemsetValue,
                width: usize,
                height: usize,
                pitch: usize,
                hold: impl FnOnce(&mut Holder<'_>) -> Result<()>,
            ) -> Result<GraphNode> {
                let (value, element_size) = value.parts();
                if height == 0 {
                    return Err(CudaError::InvalidArgument(
                        "memset: height must be at least 1".into(),
                    ));
                }
                let ctx = current_context("memset")?;
                self.append().add(&[], hold, |_, g, deps| {
                    let p = driver::CUDA_MEMSET_NODE_PARAMS {
                        dst,
                        pitch: if height > 1 { pitch } else { 0 },
                        value,
                        elementSize: element_size,
                        width,
                        height,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph, dependencies and context are live; the caller vouches for dst.
                    unsafe { driver::cuGraphAddMemsetNode(&mut node, g, deps.as_ptr(), deps.len(), &p, ctx) }
                        .check("cuGraphAddMemsetNode")?;
                    Ok(node)
                })
            }

            /// A copy node: the first `size` bytes of `src` into `dst`. The graph holds both.
            pub fn memcpy(&self, dst: &Buffer, src: &Buffer, size: usize) -> Result<GraphNode> {
                refuse_graph_memory(dst, "memcpy")?;
                refuse_graph_memory(src, "memcpy")?;
                dst.check_fits(size, "memcpy destination")?;
                src.check_fits(size, "memcpy source")?;
                let (dst_ready, src_ready) = (dst.graph_fence()?, src.graph_fence()?);
                // SAFETY: both ranges lie inside buffers whose memory the graph holds (handed
                // over before the node is added).
                unsafe {
                    self.memcpy_node(dst.handle(), src.handle(), size, |h| {
                        h.hold_buffer(dst, &dst_ready)?;
                        h.hold_buffer(src, &src_ready)
                    })
                }
            }

            /// A copy node between raw addresses (such as graph allocations).
            ///
            /// # Safety
            /// Both ranges are valid memory whenever the graph runs.
            pub unsafe fn memcpy_raw(
                &self,
                dst: driver::CUdeviceptr,
                src: driver::CUdeviceptr,
                size: usize,
            ) -> Result<GraphNode> {
                // SAFETY: forwarded to the caller.
                unsafe { self.memcpy_node(dst, src, size, nothing) }
            }

            /// A copy node, after `hold` hands the graph what it uses.
            ///
            /// # Safety
            /// Both ranges are valid memory whenever the graph runs.
            unsafe fn memcpy_node(
                &self,
                dst: driver::CUdeviceptr,
                src: driver::CUdeviceptr,
                size: usize,
                hold: impl FnOnce(&mut Holder<'_>) -> Result<()>,
            ) -> Result<GraphNode> {
                let ctx = current_context("memcpy")?;
                self.append().add(&[], hold, |_, g, deps| {
                    let p = memcpy_params(dst, src, size);
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph, dependencies and context are live; the caller vouches for
                    // the ranges.
                    unsafe { driver::cuGraphAddMemcpyNode(&mut node, g, deps.as_ptr(), deps.len(), &p, ctx) }
                        .check("cuGraphAddMemcpyNode")?;
                    Ok(node)
                })
            }

            /// A child-graph node running a copy of `child` (made now: later changes to `child`
            /// do not reach it).
            pub fn embed(&self, child: &GraphDefinition) -> Result<GraphNode> {
                if Arc::ptr_eq(&child.inner.registry, &self.append().graph.registry) {
                    return Err(CudaError::InvalidArgument(
                        "embed: a graph cannot embed itself or a graph nested in it".into(),
                    ));
                }
                let append = self.append();
                // The child's lock is taken inside the parent's; two threads embedding two graphs
                // in each other at once would take them in opposite orders, so only one embed runs
                // at a time.
                let _one_at_a_time = embedding();
                // The copy shares what the child holds: keep the child (and so that) alive.
                append.add(
                    &[],
                    |h| h.hold(child.clone()),
                    |reg, g, deps| {
                        let child_reg = child.inner.lock();
                        child.inner.check_live(&child_reg)?;
                        // The copy runs what the child runs: after the same allocations, in the
                        // same contexts, with the same graph memory.
                        reg.absorb(&child_reg);
                        let mut node = std::ptr::null_mut();
                        // SAFETY: both graphs are live and both locks are held; the driver clones the
                        // child.
                        unsafe {
                            driver::cuGraphAddChildGraphNode(
                                &mut node,
                                g,
                                deps.as_ptr(),
                                deps.len(),
                                child.inner.handle,
                            )
                        }
                        .check("cuGraphAddChildGraphNode")?;
                        Ok(node)
                    },
                )
            }

            /// A node recording `event` (held by the graph).
            pub fn record(&self, event: &Event) -> Result<GraphNode> {
                add_event_node(&self.append(), event, EventNode::Record)
            }

            /// A node waiting for `event` (held by the graph).
            pub fn wait(&self, event: &Event) -> Result<GraphNode> {
                add_event_node(&self.append(), event, EventNode::Wait)
            }

            /// A host node calling `f` on a driver thread at every launch (in graph order).
            /// `f` must not call CUDA; a panic is caught and recorded for
            /// [`crate::take_drop_errors`].
            pub fn callback(&self, f: impl Fn() + Send + Sync + 'static) -> Result<GraphNode> {
                let (boxed, p) = host_params(f);
                self.append().add(
                    &[],
                    |h| h.hold(boxed),
                    |_, g, deps| {
                        let mut node = std::ptr::null_mut();
                        // SAFETY: graph and dependencies are live; p points into the boxed closure,
                        // which the graph holds (handed over just before).
                        unsafe { driver::cuGraphAddHostNode(&mut node, g, deps.as_ptr(), deps.len(), &p) }
                            .check("cuGraphAddHostNode")?;
                        Ok(node)
                    },
                )
            }

            /// An if node: its body runs when `condition` is non-zero.
            pub fn if_then(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::If, 1)
            }

            /// An if-else node: the first body runs when `condition` is non-zero, the second
            /// when it is zero (CUDA 12.8+ drivers).
            pub fn if_else(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::If, 2)
            }

            /// A while node: its body runs as long as `condition` is non-zero (checked first).
            pub fn while_loop(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::While, 1)
            }

            /// A switch node with `count` bodies: body `n` runs when `condition` is `n`
            /// (CUDA 12.8+ drivers).
            pub fn switch(&self, condition: &GraphCondition, count: u32) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::Switch, count)
            }

            fn conditional(
                &self,
                condition: &GraphCondition,
                kind: ConditionalType,
                size: u32,
            ) -> Result<ConditionalNode> {
                let append = self.append();
                let mut bodies = Vec::new();
                let node = append.add(&[], nothing, |reg, g, deps| {
                    let (node, b) = add_conditional_node(reg, g, deps, *condition, kind, size)?;
                    bodies = b;
                    Ok(node)
                })?;
                let branches = bodies
                    .into_iter()
                    .map(|b| GraphDefinition {
                        inner: GraphInner::nested(append.graph, node.node, b),
                    })
                    .collect();
                ConditionalNode::new(node, branches)
            }
        }
    };
}

node_adders!(GraphDefinition);
node_adders!(GraphNode);

fn set_launch_attributes(node: driver::CUgraphNode, config: &LaunchConfig) -> Result<()> {
    // SAFETY: an all-zero CUlaunchAttribute is a valid (ignored) value.
    let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
    let cfg = config.driver_config(std::ptr::null_mut(), &mut attrs);
    for a in &attrs[..cfg.numAttrs as usize] {
        // SAFETY: the node is live; the value matches the attribute id.
        unsafe { driver::cuGraphKernelNodeSetAttribute(node, a.id, &a.value) }
            .check("cuGraphKernelNodeSetAttribute")?;
    }
    Ok(())
}

impl GraphDefinition {
    /// An empty graph.
    pub fn new() -> Result<GraphDefinition> {
        let mut handle: driver::CUgraph = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuGraphCreate(&mut handle, 0) }.check("cuGraphCreate")?;
        Ok(GraphDefinition {
            inner: GraphInner::owned(handle),
        })
    }

    fn append(&self) -> Append<'_> {
        Append {
            graph: &self.inner,
            after: None,
        }
    }

    /// The `CUgraph`.
    pub fn handle(&self) -> driver::CUgraph {
        self.inner.handle
    }

    /// Whether the graph can still be used (a body or child graph is not once its node is
    /// destroyed).
    pub fn is_valid(&self) -> bool {
        let reg = self.inner.lock();
        self.inner.check_live(&reg).is_ok()
    }

    /// A condition for conditional nodes of this graph; with `default_value` it is reset to that
    /// value at the start of every launch.
    pub fn create_condition(&self, default_value: Option<u32>) -> Result<GraphCondition> {
        let reg = self.inner.lock();
        self.inner.check_live(&reg)?;
        GraphCondition::create(self.inner.root(), default_value)
    }

    /// Hands `value` to the graph: it is dropped once the graph, its clones and executable
    /// graphs, and all their launches, are gone. Use it for memory that kernel nodes use.
    pub fn keep_alive<T: std::any::Any + Send + Sync>(&self, value: T) -> Result<()> {
        self.inner.attach(value)
    }

    /// An independent copy of the graph (`cuGraphClone`), holding what this one holds.
    pub fn clone_graph(&self) -> Result<GraphDefinition> {
        let reg = self.inner.lock();
        self.inner.check_live(&reg)?;
        let mut handle: driver::CUgraph = std::ptr::null_mut();
        // SAFETY: the graph is live; out-pointer to a local.
        unsafe { driver::cuGraphClone(&mut handle, self.inner.handle) }.check("cuGraphClone")?;
        let copy = GraphDefinition {
            inner: GraphInner::owned(handle),
        };
        // (The copy's lock is new: nobody else can hold it.)
        copy.inner.lock().absorb(&reg);
        drop(reg);
        // Values attached to nested graphs hang off the root: keep the original's root too.
        if self.inner.owner.is_some() {
            copy.keep_alive(self.clone())?;
        }
        Ok(copy)
    }

    fn node_handles(&self, reg: &Registry) -> Result<Vec<driver::CUgraphNode>> {
        self.inner.check_live(reg)?;
        node_array(|out, n| {
            // SAFETY: the graph is live; out is null (count only) or has room for n nodes.
            unsafe { driver::cuGraphGetNodes(self.inner.handle, out, n) }.check("cuGraphGetNodes")
        })
    }

    /// How many nodes the graph has.
    pub fn num_nodes(&self) -> Result<usize> {
        let reg = self.inner.lock();
        Ok(self.node_handles(&reg)?.len())
    }

    /// The graph's nodes.
    pub fn nodes(&self) -> Result<Vec<GraphNode>> {
        let mut reg = self.inner.lock();
        let handles = self.node_handles(&reg)?;
        Ok(handles
            .into_iter()
            .map(|h| GraphNode::new(&self.inner, &mut reg, h))
            .collect())
    }

    /// The graph's edges, as `(from, to)` pairs.
    pub fn edges(&self) -> Result<Vec<(GraphNode, GraphNode)>> {
        let mut reg = self.inner.lock();
        self.inner.check_live(&reg)?;
        let mut n = 0;
        // SAFETY: the graph is live; null arrays ask for the count.
        unsafe {
            driver::cuGraphGetEdges(
                self.inner.handle,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut n,
            )
        }
        .check("cuGraphGetEdges")?;
        let mut from = vec![std::ptr::null_mut(); n];
        let mut to = vec![std::ptr::null_mut(); n];
        // SAFETY: room for n edges.
        unsafe {
            driver::cuGraphGetEdges(
                self.inner.handle,
                from.as_mut_ptr(),
                to.as_mut_ptr(),
                std::ptr::null_mut(),
                &mut n,
            )
        }
        .check("cuGraphGetEdges")?;
        Ok(from
            .into_iter()
            .zip(to)
            .take(n)
            .map(|(f, t)| {
                (
                    GraphNode::new(&self.inner, &mut reg, f),
                    GraphNode::new(&self.inner, &mut reg, t),
                )
            })
            .collect())
    }

    /// An executable graph (`cuGraphInstantiateWithParams`).
    pub fn instantiate(&self, options: &GraphCompleteOptions) -> Result<Graph> {
        if self.inner.owner.is_some() {
            return Err(CudaError::InvalidArgument(
                "a body or child graph runs as part of its parent: instantiate the parent".into(),
            ));
        }
        let reg = self.inner.lock();
        let exec = Graph::instantiate(self, &reg, options);
        drop(reg);
        exec
    }

    /// Writes the graph in Graphviz DOT form to `path` (`cuGraphDebugDotPrint`).
    pub fn debug_dot_print(
        &self,
        path: impl AsRef<std::path::Path>,
        options: &super::GraphDebugPrintOptions,
    ) -> Result<()> {
        let path = path.as_ref();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            CudaError::InvalidArgument(format!("debug_dot_print: {} contains a NUL byte", path.display()))
        })?;
        let reg = self.inner.lock();
        self.inner.check_live(&reg)?;
        // SAFETY: the graph is live; the path is a NUL-terminated string for the call.
        unsafe { driver::cuGraphDebugDotPrint(self.inner.handle, c.as_ptr(), options.flags()) }
            .check("cuGraphDebugDotPrint")
    }
}

impl GraphNode {
    fn append(&self) -> Append<'_> {
        Append {
            graph: &self.graph,
            after: Some(self.node),
        }
    }

    pub(crate) fn graph_inner(&self) -> &Arc<GraphInner> {
        &self.graph
    }

    /// Runs `f` with the node's handle, under the graph's lock, if the node is still valid.
    pub(crate) fn with_live<R>(&self, f: impl FnOnce(&mut Registry, driver::CUgraphNode) -> Result<R>) -> Result<R> {
        let mut reg = self.graph.lock();
        self.graph.check_live(&reg)?;
        check_node(&reg, self.node)?;
        f(&mut reg, self.node.handle)
    }

    /// The `CUgraphNode`.
    pub fn handle(&self) -> driver::CUgraphNode {
        self.node.handle
    }

    /// The graph the node belongs to.
    pub fn graph(&self) -> GraphDefinition {
        GraphDefinition {
            inner: self.graph.clone(),
        }
    }

    /// Whether the node still exists (not [`destroy`](Self::destroy)ed).
    pub fn is_valid(&self) -> bool {
        self.with_live(|_, _| Ok(())).is_ok()
    }

    /// Removes the node and its edges from the graph. Other handles to it become invalid (their
    /// methods return an error), as do the bodies of a destroyed conditional node.
    pub fn destroy(self) -> Result<()> {
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            reg.refuse_with_graph_memory("destroy")?;
            if capturing_below(reg, h) {
                return Err(CudaError::InvalidArgument(
                    "destroy: a capture records into a body of this node: end it first".into(),
                ));
            }
            // SAFETY: the node is live and belongs to this graph.
            unsafe { driver::cuGraphDestroyNode(h) }.check("cuGraphDestroyNode")?;
            reg.live.remove(&(h as usize));
            reg.conditionals.remove(&(h as usize));
            Ok(())
        })
    }

    /// The node's type.
    pub fn node_type(&self) -> Result<NodeType> {
        self.with_live(|_, h| Ok(NodeType::from_driver(node_type(h)?)))
    }

    fn related(&self, dependents: bool) -> Result<Vec<GraphNode>> {
        self.with_live(|reg, h| {
            let nodes = node_array(|out, n| {
                // SAFETY: the node is live; out is null (count only) or has room for n entries.
                unsafe {
                    if dependents {
                        driver::cuGraphNodeGetDependentNodes(h, out, std::ptr::null_mut(), n)
                            .check("cuGraphNodeGetDependentNodes")
                    } else {
                        driver::cuGraphNodeGetDependencies(h, out, std::ptr::null_mut(), n)
                            .check("cuGraphNodeGetDependencies")
                    }
                }
            })?;
            Ok(nodes.into_iter().map(|x| GraphNode::new(&self.graph, reg, x)).collect())
        })
    }

    /// The nodes this one waits for.
    pub fn dependencies(&self) -> Result<Vec<GraphNode>> {
        self.related(false)
    }

    /// The nodes waiting for this one.
    pub fn dependents(&self) -> Result<Vec<GraphNode>> {
        self.related(true)
    }

    fn edges_from(&self, on: &[&GraphNode], add: bool) -> Result<()> {
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            if !add {
                reg.refuse_with_graph_memory("remove_dependencies")?;
            }
            let mut from = Vec::with_capacity(on.len());
            for o in on {
                if !Arc::ptr_eq(&o.graph, &self.graph) {
                    return Err(CudaError::InvalidArgument(
                        "a dependency belongs to another graph".into(),
                    ));
                }
                check_node(reg, o.node)?;
                from.push(o.node.handle);
            }
            let to = vec![h; from.len()];
            // SAFETY: all nodes are live and in this graph; the arrays have equal lengths.
            unsafe {
                if add {
                    driver::cuGraphAddDependencies(
                        self.graph.handle,
                        from.as_ptr(),
                        to.as_ptr(),
                        std::ptr::null(),
                        from.len(),
                    )
                    .check("cuGraphAddDependencies")
                } else {
                    driver::cuGraphRemoveDependencies(
                        self.graph.handle,
                        from.as_ptr(),
                        to.as_ptr(),
                        std::ptr::null(),
                        from.len(),
                    )
                    .check("cuGraphRemoveDependencies")
                }
            }
        })
    }

    /// Makes this node wait for `on` as well.
    pub fn add_dependencies(&self, on: &[&GraphNode]) -> Result<()> {
        self.edges_from(on, true)
    }

    /// Removes the edges from `on` to this node.
    pub fn remove_dependencies(&self, on: &[&GraphNode]) -> Result<()> {
        self.edges_from(on, false)
    }

    /// What the node does.
    pub fn params(&self) -> Result<NodeParams> {
        self.with_live(|reg, h| {
            use driver::CUgraphNodeType as T;
            let t = node_type(h)?;
            // Every query below: the node is live (checked under the lock) and of the type the
            // query expects (matched on); its out-values are locals.
            Ok(match t {
                T::CU_GRAPH_NODE_TYPE_EMPTY => NodeParams::Empty,
                T::CU_GRAPH_NODE_TYPE_HOST => NodeParams::Host,
                T::CU_GRAPH_NODE_TYPE_KERNEL => {
                    let mut p = driver::CUDA_KERNEL_NODE_PARAMS::default();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphKernelNodeGetParams(h, &mut p) }.check("cuGraphKernelNodeGetParams")?;
                    NodeParams::Kernel {
                        grid: Dim3 {
                            x: p.gridDimX,
                            y: p.gridDimY,
                            z: p.gridDimZ,
                        },
                        block: Dim3 {
                            x: p.blockDimX,
                            y: p.blockDimY,
                            z: p.blockDimZ,
                        },
                        shmem_size: p.sharedMemBytes,
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEMSET => {
                    let mut p = driver::CUDA_MEMSET_NODE_PARAMS::default();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphMemsetNodeGetParams(h, &mut p) }.check("cuGraphMemsetNodeGetParams")?;
                    NodeParams::Memset {
                        dst: p.dst,
                        value: p.value,
                        element_size: p.elementSize,
                        width: p.width,
                        height: p.height,
                        pitch: p.pitch,
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEMCPY => {
                    let mut p = driver::CUDA_MEMCPY3D::default();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphMemcpyNodeGetParams(h, &mut p) }.check("cuGraphMemcpyNodeGetParams")?;
                    NodeParams::Memcpy {
                        dst: p.dstDevice,
                        src: p.srcDevice,
                        size: p.WidthInBytes,
                    }
                }
                T::CU_GRAPH_NODE_TYPE_GRAPH => {
                    let mut g: driver::CUgraph = std::ptr::null_mut();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphChildGraphNodeGetGraph(h, &mut g) }
                        .check("cuGraphChildGraphNodeGetGraph")?;
                    NodeParams::ChildGraph(GraphDefinition {
                        inner: GraphInner::nested(&self.graph, self.node, g),
                    })
                }
                T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
                    let mut e: driver::CUevent = std::ptr::null_mut();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphEventRecordNodeGetEvent(h, &mut e) }
                        .check("cuGraphEventRecordNodeGetEvent")?;
                    NodeParams::EventRecord(e)
                }
                T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
                    let mut e: driver::CUevent = std::ptr::null_mut();
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphEventWaitNodeGetEvent(h, &mut e) }.check("cuGraphEventWaitNodeGetEvent")?;
                    NodeParams::EventWait(e)
                }
                T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                    // SAFETY: plain data; the driver fills it in.
                    let mut p: driver::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphMemAllocNodeGetParams(h, &mut p) }.check("cuGraphMemAllocNodeGetParams")?;
                    NodeParams::MemAlloc {
                        dptr: p.dptr,
                        bytesize: p.bytesize,
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEM_FREE => {
                    let mut dptr = 0;
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphMemFreeNodeGetParams(h, &mut dptr) }
                        .check("cuGraphMemFreeNodeGetParams")?;
                    NodeParams::MemFree { dptr }
                }
                T::CU_GRAPH_NODE_TYPE_CONDITIONAL => match reg.conditionals.get(&(h as usize)).cloned() {
                    Some(info) => NodeParams::Conditional {
                        condition: info.condition,
                        kind: info.kind,
                        branches: info
                            .bodies
                            .iter()
                            .map(|b| GraphDefinition {
                                inner: GraphInner::nested(&self.graph, self.node, *b),
                            })
                            .collect(),
                    },
                    None => NodeParams::Other(NodeType::Conditional),
                },
                other => NodeParams::Other(NodeType::from_driver(other)),
            })
        })
    }

    /// Gives a kernel node new arguments (same kernel and configuration), for the executable
    /// graphs instantiated from now on.
    ///
    /// # Safety
    /// As for [`GraphDefinition::launch`].
    pub unsafe fn set_kernel_args<A: KernelArgs>(&self, args: A) -> Result<()> {
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            with_kernel_args(h, args, |p| {
                // SAFETY: the node is live; the arguments are copied during the call.
                unsafe { driver::cuGraphKernelNodeSetParams(h, p) }.check("cuGraphKernelNodeSetParams")
            })
        })
    }

    /// Points an event record or wait node at `event` (held by the graph).
    pub fn set_event(&self, event: &Event) -> Result<()> {
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            event_node(h)?;
            self.graph.attach_locked(reg, event.clone())?;
            // SAFETY: the node and event are live (the graph holds the event).
            unsafe {
                match event_node(h)? {
                    EventNode::Record => driver::cuGraphEventRecordNodeSetEvent(h, event.handle())
                        .check("cuGraphEventRecordNodeSetEvent"),
                    EventNode::Wait => {
                        driver::cuGraphEventWaitNodeSetEvent(h, event.handle()).check("cuGraphEventWaitNodeSetEvent")
                    }
                }
            }
        })
    }

    /// Replaces a host node's callback (the graph holds the new one).
    pub fn set_callback(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let (boxed, p) = host_params(f);
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            check_host_node(h)?;
            self.graph.attach_locked(reg, boxed)?;
            // SAFETY: the node is live; p points into the boxed closure, which the graph holds
            // (handed over just before).
            unsafe { driver::cuGraphHostNodeSetParams(h, &p) }.check("cuGraphHostNodeSetParams")
        })
    }

    /// Changes a memset node of a [`Buffer`] to write `value` (same width) over the same region.
    pub fn set_memset_value(&self, value: impl Into<MemsetValue>) -> Result<()> {
        let value = value.into();
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            let p = memset_params_with(h, value)?;
            // SAFETY: same region as before, which the graph already holds.
            unsafe { driver::cuGraphMemsetNodeSetParams(h, &p) }.check("cuGraphMemsetNodeSetParams")
        })
    }
}

/// Hands `set` the kernel node `h`'s parameters with `args` as its arguments (valid for the call:
/// the driver copies them).
pub(crate) fn with_kernel_args<A: KernelArgs>(
    h: driver::CUgraphNode,
    mut args: A,
    set: impl FnOnce(&driver::CUDA_KERNEL_NODE_PARAMS) -> Result<()>,
) -> Result<()> {
    let mut p = driver::CUDA_KERNEL_NODE_PARAMS::default();
    // SAFETY: the caller checked the node is live; out-value is a local.
    unsafe { driver::cuGraphKernelNodeGetParams(h, &mut p) }.check("cuGraphKernelNodeGetParams")?;
    args.with_params(|params| {
        p.kernelParams = params.as_mut_ptr();
        p.extra = std::ptr::null_mut();
        set(&p)
    })
}

/// The memset node `h`'s parameters, changed to write `value` (which must be as wide as before).
pub(crate) fn memset_params_with(
    h: driver::CUgraphNode,
    value: MemsetValue,
) -> Result<driver::CUDA_MEMSET_NODE_PARAMS> {
    let (value, element_size) = value.parts();
    let mut p = driver::CUDA_MEMSET_NODE_PARAMS::default();
    // SAFETY: the caller checked the node is live (its type is checked by the driver); out-value
    // is a local.
    unsafe { driver::cuGraphMemsetNodeGetParams(h, &mut p) }.check("cuGraphMemsetNodeGetParams")?;
    if p.elementSize != element_size {
        return Err(CudaError::InvalidArgument(format!(
            "set_memset_value: the node writes {}-byte values, not {element_size}-byte ones",
            p.elementSize
        )));
    }
    p.value = value;
    Ok(p)
}

/// The two kinds of event node.
pub(crate) enum EventNode {
    Record,
    Wait,
}

/// Which kind of event node `h` is; an error for other nodes.
pub(crate) fn event_node(h: driver::CUgraphNode) -> Result<EventNode> {
    match node_type(h)? {
        driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD => Ok(EventNode::Record),
        driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_WAIT_EVENT => Ok(EventNode::Wait),
        _ => Err(CudaError::InvalidArgument(
            "set_event applies to event record and wait nodes".into(),
        )),
    }
}

/// An error unless `h` is a host node.
pub(crate) fn check_host_node(h: driver::CUgraphNode) -> Result<()> {
    if node_type(h)? != driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST {
        return Err(CudaError::InvalidArgument("set_callback applies to host nodes".into()));
    }
    Ok(())
}

pub(crate) fn node_type(h: driver::CUgraphNode) -> Result<driver::CUgraphNodeType> {
    let mut t = driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: the caller checked the node is live; out-value is a local.
    unsafe { driver::cuGraphNodeGetType(h, &mut t) }.check("cuGraphNodeGetType")?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::memset_extent;
    use proptest::prelude::*;

    #[test]
    fn the_audits_wrapping_memsets_are_refused() {
        let d = 1usize << 20;
        // A row of 2^62 + 16 four-byte elements wraps to 64 bytes.
        assert!(memset_extent((1 << 62) + 16, 2, 64, 4).is_err());
        // A pitch that is negative as unsigned would put row 1 before the buffer: the extent is
        // then larger than any buffer (and `check_fits` refuses it), never wrapped to a small one.
        assert!(memset_extent(16, 2, 0usize.wrapping_sub(d), 1).unwrap() > usize::MAX - d);
        assert!(memset_extent(16, 0, 16, 1).is_err(), "no rows");
        assert!(memset_extent(32, 2, 16, 1).is_err(), "a row wider than the pitch");
        assert_eq!(memset_extent(16, 2, 32, 1).unwrap(), 48);
        assert_eq!(memset_extent(4, 1, 0, 4).unwrap(), 16);
    }

    proptest! {
        #[test]
        fn memset_extents_are_exact_or_refused(
            width in prop_oneof![0usize..1024, any::<usize>()],
            height in prop_oneof![0usize..16, any::<usize>()],
            pitch in prop_oneof![0usize..4096, any::<usize>()],
            element in prop_oneof![Just(1u32), Just(2), Just(4)],
        ) {
            let row = width as u128 * element as u128;
            let exact = (height as u128).checked_sub(1).map(|h| h * pitch as u128 + row);
            match memset_extent(width, height, pitch, element) {
                Ok(extent) => {
                    prop_assert_eq!(Some(extent as u128), exact);
                    prop_assert!(height <= 1 || pitch as u128 >= row);
                }
                Err(_) => prop_assert!(
                    height == 0 || row > usize::MAX as u128 || (height > 1 && (pitch as u128) < row)
                        || exact.is_some_and(|e| e > usize::MAX as u128)
                ),
            }
        }
    }
}
