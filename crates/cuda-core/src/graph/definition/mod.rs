//! Explicit graphs: [`GraphDefinition`] and its [`GraphNode`]s.
//!
//! - here: the two types, what every node addition goes through (`Append`: the hierarchy's lock,
//!   liveness and dependency checks, then `Holder` hands the graph what the node uses), the
//!   graph's structure (nodes, edges, clone, instantiate) and a node's relations;
//! - `nodes`: adding kernel, empty, child-graph, event and host-callback nodes;
//! - `memory_nodes`: allocation, free, memset and copy nodes, with checked extents;
//! - `conditional`: conditions, conditional nodes and their bodies;
//! - `freed`: what the driver frees with a node or a replaced child graph, and the registry
//!   entries forgotten with it (so none names a freed graph when the driver reuses its address);
//! - `params`: reading a node's parameters back and changing them (shared with executable
//!   graphs' node updates);
//! - `updates`: a kernel node's kernel and configuration read back, a host node's callback, and
//!   whole-node updates (kernel, typed kernel, copy, memset, child graph);
//! - `types`: the public value types (node types, parameters, memset values, allocation options).

mod conditional;
mod freed;
mod memory_nodes;
mod nodes;
mod params;
mod types;
mod updates;

pub(crate) use conditional::add_conditional_node;
pub use conditional::{ConditionalNode, ConditionalType, GraphCondition};
pub(crate) use memory_nodes::memcpy_params;
pub(crate) use nodes::{host_params, kernel_params};
pub(crate) use params::{
    check_host_node, event_node, memset_params_with, node_type, with_kernel_args, ArgBuffers, EventNode,
};
pub use types::{GraphAllocOptions, GraphMemoryType, MemsetValue, NodeParams, NodeType};
pub(crate) use updates::{
    check_memcpy, check_runs, expect_type, kernel_node_params, memset_params_for, node_config, same_attributes,
};

use super::exec::{Graph, GraphCompleteOptions};
use crate::compile::Kernel;
use crate::device::{Context, Device, FenceEvent};
use crate::error::Check;
use crate::launch::{DeviceRepr, Dim3, KernelArgs, LaunchConfig};
use crate::memory::{read_write_access, Buffer, SharedAllocation};
pub(crate) use crate::stream::graph_core::{ConditionalInfo, GraphInner, NodeRef, Registry};
use crate::stream::Event;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

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
        hold(&mut Holder { reg: &mut reg })?;
        let handle = f(&mut reg, self.graph.handle, &deps)?;
        Ok(GraphNode::new(self.graph, &mut reg, handle))
    }
}

/// Hands values to a graph whose lock is held.
struct Holder<'a> {
    reg: &'a mut Registry,
}

impl Holder<'_> {
    fn hold<T: std::any::Any + Send + Sync>(&mut self, value: T) -> Result<()> {
        self.reg.held.hold(value);
        Ok(())
    }

    /// Holds `buffer`'s memory for the graph, and notes the fence launches wait for before they
    /// touch it (`ready`, from `Buffer::graph_fence`, taken before the lock).
    fn hold_buffer(&mut self, buffer: &Buffer, ready: &Option<Arc<FenceEvent>>) -> Result<()> {
        if let Some(f) = ready {
            self.reg.note_ready(f);
        }
        self.reg.held.hold_shared(buffer.share());
        Ok(())
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

/// Whether a capture records into a body of conditional node `node`, or of one nested in it, as
/// far as the registry knows (it knows every body a capture records into: only this crate's
/// conditional nodes' bodies are captured into, and each is registered as it is made).
fn capturing_below(reg: &Registry, node: driver::CUgraphNode) -> bool {
    match reg.conditionals.get(&(node as usize)) {
        Some(info) => freed::Freed::known_below(reg, &info.bodies).capturing(reg),
        None => false,
    }
}

fn check_node(reg: &Registry, node: NodeRef) -> Result<()> {
    if reg.is_live(node) {
        Ok(())
    } else {
        Err(CudaError::InvalidState(
            "the graph node was destroyed and is no longer valid".into(),
        ))
    }
}

/// The current context, which nodes that name one (memset, memcpy, conditionals) run in.
fn current_context(what: &str) -> Result<driver::CUcontext> {
    let ctx = Context::current_handle()?;
    if ctx.is_null() {
        return Err(CudaError::InvalidState(format!(
            "{what}: no context is current (call Device::set_current first)"
        )));
    }
    Ok(ctx)
}

impl GraphDefinition {
    /// An empty graph.
    pub fn new() -> Result<GraphDefinition> {
        let mut handle: driver::CUgraph = std::ptr::null_mut();
        // (Serialised with capture begins and ends: see `capture::CAPTURE_STATE`.)
        let serialised = crate::stream::capture::capture_question();
        // SAFETY: out-pointer to a local.
        let created = unsafe { driver::cuGraphCreate(&mut handle, 0) }.check("cuGraphCreate");
        drop(serialised);
        created?;
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

    /// Hands `value` to the graph: it is dropped once the graph, its copies and executable
    /// graphs, and all their launches, are gone (on the thread that lets go of the last of them,
    /// or on the release thread after the last launch). Use it for memory that kernel nodes use.
    /// A value that holds the graph itself (a clone of this definition, or an executable graph
    /// made from it) keeps it alive for ever.
    pub fn keep_alive<T: std::any::Any + Send + Sync>(&self, value: T) -> Result<()> {
        self.inner.hold(value);
        Ok(())
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
        // The copy runs what the original runs: it holds the same values (of the whole hierarchy,
        // for a nested graph). (The copy's lock is new: nobody else can hold it.)
        copy.inner.lock().absorb(&reg);
        drop(reg);
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
        if n == 0 {
            return Ok(Vec::new());
        }
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
        span!("graph instantiate", from = "GraphDefinition::instantiate");
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
    /// methods return an error), as do the graphs the driver frees with it (a conditional node's
    /// bodies, a child-graph node's graph, and every graph and node nested in them). Destroying a
    /// node already destroyed (through another handle) does nothing, as in `cuda.core`.
    pub fn destroy(self) -> Result<()> {
        let mut reg = self.graph.lock();
        self.graph.check_live(&reg)?;
        if !reg.is_live(self.node) {
            return Ok(());
        }
        let h = self.node.handle;
        reg.refuse_while_capturing(self.graph.handle)?;
        reg.refuse_with_graph_memory("destroy")?;
        let refusal =
            || CudaError::InvalidState("destroy: a capture records into a body of this node: end it first".into());
        // (Checked before the driver is asked about graphs a capture may be recording into.)
        if capturing_below(&reg, h) {
            return Err(refusal());
        }
        // What the driver frees with the node (its bodies or child copy, and all nested in
        // them), collected while it is live: forgotten once it is freed.
        let freed = freed::Freed::with_node(&reg, self.graph.handle, h)?;
        if freed.capturing(&reg) {
            return Err(refusal());
        }
        // SAFETY: the node is live and belongs to this graph (its lock is held).
        unsafe { driver::cuGraphDestroyNode(h) }.check("cuGraphDestroyNode")?;
        freed.forget(&mut reg);
        Ok(())
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
}
