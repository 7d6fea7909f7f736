//! What a node runs, read back ([`GraphNode::kernel`], [`GraphNode::config`],
//! [`GraphNode::host_callback`]), and whole-node updates of a definition's kernel, copy, memset and
//! child-graph nodes (`cuda.core`'s `KernelNode.update`, `MemcpyNode.update`, ...), with the
//! helpers executable graphs share for theirs.
//!
//! **Lifetimes.** A definition's holdings only grow: what an update makes a node use is held by
//! the graph before the driver sees it, and what it replaces stays held until the graph (its
//! copies, executable graphs and their launches) is gone, so executable graphs instantiated
//! before the update, which still run the old values, never lose them.

use super::nodes::{kernel_params, set_launch_attributes, Callback};
use super::*;
use crate::launch::{ArgsFor, TypedKernel};
use driver::CUgraphNodeType as T;

/// An error unless `h` (live) is a node of type `want`, naming `what` was asked of it.
pub(crate) fn expect_type(h: driver::CUgraphNode, want: driver::CUgraphNodeType, what: &str) -> Result<()> {
    let t = node_type(h)?;
    if t != want {
        return Err(CudaError::InvalidArgument(format!(
            "{what} applies to {:?} nodes, not {:?} ones",
            NodeType::from_driver(want),
            NodeType::from_driver(t)
        )));
    }
    Ok(())
}

/// The kernel node `h`'s driver parameters (the caller checked it is a live kernel node).
pub(crate) fn kernel_node_params(h: driver::CUgraphNode) -> Result<driver::CUDA_KERNEL_NODE_PARAMS> {
    let mut p = driver::CUDA_KERNEL_NODE_PARAMS::default();
    // SAFETY: the node is live (the caller holds its graph's lock); out-value is a local.
    unsafe { driver::cuGraphKernelNodeGetParams(h, &mut p) }.check("cuGraphKernelNodeGetParams")?;
    Ok(p)
}

/// The kernel a kernel node's parameters name (its `CUkernel`; a node made with a `CUfunction`
/// names that instead).
pub(crate) fn kernel_key(p: &driver::CUDA_KERNEL_NODE_PARAMS) -> usize {
    if p.kern.is_null() {
        p.func as usize
    } else {
        p.kern as usize
    }
}

/// The launch configuration of kernel node `h` (live, checked by the caller): its shape, and the
/// launch attributes this crate sets. The grid is in clusters when the node has a cluster
/// shape; a 1 x 1 x 1 cluster reads back as none.
pub(crate) fn node_config(h: driver::CUgraphNode) -> Result<LaunchConfig> {
    let p = kernel_node_params(h)?;
    let attribute = |id: driver::CUlaunchAttributeID| {
        // SAFETY: an all-zero attribute value is valid plain data.
        let mut v: driver::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        // SAFETY: the node is live; out-value is a local. An attribute the driver does not
        // report reads as unset.
        let ok = unsafe { driver::cuGraphKernelNodeGetAttribute(h, id, &mut v) }
            .result()
            .is_ok();
        ok.then_some(v)
    };
    use driver::CUlaunchAttributeID as A;
    let cluster = attribute(A::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        // SAFETY: the member of the attribute asked for.
        .map(|v| unsafe { v.clusterDim })
        .map(|c| Dim3 { x: c.x, y: c.y, z: c.z })
        .filter(|c| c.x != 0 && c.y != 0 && c.z != 0 && c.volume() > 1);
    // SAFETY: the member of the attribute asked for.
    let cooperative = attribute(A::CU_LAUNCH_ATTRIBUTE_COOPERATIVE).is_some_and(|v| unsafe { v.cooperative } != 0);
    let priority = attribute(A::CU_LAUNCH_ATTRIBUTE_PRIORITY)
        // SAFETY: the member of the attribute asked for.
        .map(|v| unsafe { v.priority })
        .filter(|p| *p != 0);
    let serialised = attribute(A::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        // SAFETY: the member of the attribute asked for.
        .is_some_and(|v| unsafe { v.programmaticStreamSerializationAllowed } != 0);
    let blocks = Dim3 {
        x: p.gridDimX,
        y: p.gridDimY,
        z: p.gridDimZ,
    };
    let grid = match cluster {
        Some(c) => Dim3 {
            x: blocks.x / c.x,
            y: blocks.y / c.y,
            z: blocks.z / c.z,
        },
        None => blocks,
    };
    Ok(LaunchConfig {
        grid,
        block: Dim3 {
            x: p.blockDimX,
            y: p.blockDimY,
            z: p.blockDimZ,
        },
        cluster,
        shmem_size: p.sharedMemBytes,
        cooperative_launch: cooperative,
        priority,
        programmatic_stream_serialization: serialised,
    })
}

/// Whether two configurations set the same launch attributes (what an executable graph's kernel
/// node cannot change).
pub(crate) fn same_attributes(a: &LaunchConfig, b: &LaunchConfig) -> bool {
    a.cluster == b.cluster
        && a.cooperative_launch == b.cooperative_launch
        && a.priority.unwrap_or(0) == b.priority.unwrap_or(0)
        && a.programmatic_stream_serialization == b.programmatic_stream_serialization
}

/// The checks of a copy node between `dst` and `src` (as [`GraphDefinition::memcpy`] makes).
pub(crate) fn check_memcpy(dst: &Buffer, src: &Buffer, size: usize, what: &str) -> Result<()> {
    refuse_graph_memory(dst, what)?;
    refuse_graph_memory(src, what)?;
    dst.check_fits(size, "memcpy destination")?;
    dst.check_writable(what)?;
    src.check_fits(size, "memcpy source")?;
    src.check_current_device_reads(what)
}

/// A memset node's parameters over `dst`, checked as [`GraphDefinition::memset_2d`] checks them.
pub(crate) fn memset_params_for(
    dst: &Buffer,
    value: MemsetValue,
    width: usize,
    height: usize,
    pitch: usize,
    what: &str,
) -> Result<driver::CUDA_MEMSET_NODE_PARAMS> {
    refuse_graph_memory(dst, what)?;
    let (v, element_size) = value.parts();
    let extent = memory_nodes::memset_extent(width, height, pitch, element_size)?;
    dst.check_fits(extent, what)?;
    dst.check_writable(what)?;
    Ok(driver::CUDA_MEMSET_NODE_PARAMS {
        dst: dst.handle(),
        pitch: if height > 1 { pitch } else { 0 },
        value: v,
        elementSize: element_size,
        width,
        height,
    })
}

impl GraphNode {
    /// The node `node` of `graph` (registered under its lock).
    pub(crate) fn from_ref(graph: &Arc<GraphInner>, node: NodeRef) -> GraphNode {
        GraphNode {
            graph: graph.clone(),
            node,
        }
    }

    /// The kernel a kernel node runs (`cuda.core`'s `KernelNode.kernel`): the one given when the
    /// node was added, captured or last updated. An error for other nodes, and for kernels given
    /// outside this crate.
    pub fn kernel(&self) -> Result<Kernel> {
        self.with_live(|reg, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "kernel")?;
            let p = kernel_node_params(h)?;
            reg.kernels
                .get(&kernel_key(&p))
                .and_then(|k| k.downcast_ref::<Kernel>())
                .cloned()
                .ok_or_else(|| {
                    CudaError::InvalidArgument(
                        "the kernel node runs a kernel that was not given to it through this crate".into(),
                    )
                })
        })
    }

    /// The event an event record or wait node names (`cuda.core`'s `EventRecordNode.event`,
    /// `EventWaitNode.event`): the one given when the node was added or last given one; `None`
    /// for an event given outside this crate (a node of a captured wait for another library's
    /// event). An error for other nodes.
    pub fn event(&self) -> Result<Option<Event>> {
        self.with_live(|reg, h| {
            let mut e: driver::CUevent = std::ptr::null_mut();
            // SAFETY: the node is live (under the lock) and of the type asked; out-value is a
            // local.
            let got = unsafe {
                match event_node(h)
                    .map_err(|_| CudaError::InvalidArgument("event applies to event record and wait nodes".into()))?
                {
                    EventNode::Record => driver::cuGraphEventRecordNodeGetEvent(h, &mut e),
                    EventNode::Wait => driver::cuGraphEventWaitNodeGetEvent(h, &mut e),
                }
            };
            got.check("cuGraphEvent*NodeGetEvent")?;
            Ok(reg.events.get(&(e as usize)).cloned())
        })
    }

    /// A kernel node's launch configuration (`cuda.core`'s `KernelNode.config`), with the
    /// launch attributes this crate sets (cluster shape, cooperative launch, priority,
    /// programmatic stream serialisation), which `cuda.core` leaves out.
    pub fn config(&self) -> Result<LaunchConfig> {
        self.with_live(|_, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "config")?;
            node_config(h)
        })
    }

    /// A host node's callback (`cuda.core`'s `HostCallbackNode.callback`; `callback` here adds a
    /// host node); `None` for a host function given outside this crate.
    pub fn host_callback(&self) -> Result<Option<Arc<dyn Fn() + Send + Sync>>> {
        self.with_live(|reg, h| {
            check_host_node(h)?;
            let mut p = driver::CUDA_HOST_NODE_PARAMS::default();
            // SAFETY: the node is live (under the lock); out-value is a local.
            unsafe { driver::cuGraphHostNodeGetParams(h, &mut p) }.check("cuGraphHostNodeGetParams")?;
            if !reg.host_data.contains(&(p.userData as usize)) {
                return Ok(None);
            }
            // SAFETY: the data is one the hierarchy noted as a boxed `Callback` it holds (held
            // values are only added: every callback a node of it was ever given, or that a graph
            // absorbed into it holds, is still held while the lock is).
            let f = unsafe { &*(p.userData as *const Callback) };
            Ok(Some(f.clone()))
        })
    }

    /// Makes a kernel node run `kernel` with `config` and `args` (`cuda.core`'s
    /// `KernelNode.update(config=, kernel=, args=)`, all three together), for the executable
    /// graphs instantiated from now on. The graph holds the new kernel's code and the buffers
    /// among the arguments (and keeps what they replace: executable graphs made before still run
    /// it).
    ///
    /// # Safety
    /// As for [`GraphDefinition::launch`]: the arguments match `kernel`'s parameters, and what
    /// they point to is valid whenever the graph runs. Prefer
    /// [`update_typed_kernel`](Self::update_typed_kernel), which checks the arguments' types.
    pub unsafe fn update_kernel<A: KernelArgs>(&self, config: &LaunchConfig, kernel: &Kernel, args: A) -> Result<()> {
        config.check(Device::current()?.limits()?)?;
        let buffers = ArgBuffers::of(&args, "update_kernel")?;
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "update_kernel")?;
            let before = node_config(h)?;
            // Held before the node uses them (a failed update leaves only extra holds).
            reg.held.hold_shared(kernel.object_code().keeper());
            reg.note_kernel(kernel.handle() as usize, || Arc::new(kernel.clone()));
            buffers.hold(reg);
            args.with_params(|params| {
                let p = kernel_params(config, kernel, params.as_mut_ptr());
                // SAFETY: the node is live; the arguments are copied during the call (the caller
                // vouches for what they point to); the kernel's code is held by the graph.
                unsafe { driver::cuGraphKernelNodeSetParams(h, &p) }.check("cuGraphKernelNodeSetParams")
            })?;
            reset_launch_attributes(h, &before, config)?;
            set_launch_attributes(h, config)
        })
    }

    /// [`update_kernel`](Self::update_kernel) with a typed kernel: the arguments' types are
    /// checked at compile time, as [`TypedKernel::launch`] checks them.
    ///
    /// ```compile_fail
    /// # fn demo(node: &cuda_core::graph::GraphNode, k: &cuda_core::TypedKernel<(*const f32, *mut f32, f32, u32)>, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>) -> cuda_core::Result<()> {
    /// let config = cuda_core::LaunchConfig::new(1, 256);
    /// // SAFETY: (does not compile: an f64 for the float, a usize for the unsigned).
    /// unsafe { node.update_typed_kernel(&config, k, (x.read_only(), y, 2.0f64, 4usize))? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As for [`TypedKernel::launch`], for every launch of every executable graph instantiated
    /// from now on: the kernel stays inside the buffers it is given, raw pointers among the
    /// arguments are valid whenever the graph runs.
    pub unsafe fn update_typed_kernel<A: KernelArgs, X: ArgsFor<A::Params>>(
        &self,
        config: &LaunchConfig,
        kernel: &TypedKernel<A>,
        args: X,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller; the argument types are those `kernel` declares.
        unsafe { self.update_kernel(config, kernel.kernel(), args) }
    }

    /// Gives a kernel node that runs `kernel` new arguments, whose types are checked at compile
    /// time (the untyped [`set_kernel_args`](Self::set_kernel_args) cannot check them). An error
    /// when the node runs another kernel.
    ///
    /// ```compile_fail
    /// # fn demo(node: &cuda_core::graph::GraphNode, k: &cuda_core::TypedKernel<(*const f32, *mut f32, f32, u32)>, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>) -> cuda_core::Result<()> {
    /// // SAFETY: (does not compile: y is read-only here, the kernel writes it).
    /// unsafe { node.set_typed_kernel_args(k, (x.read_only(), y.read_only(), 2.0f32, 4u32))? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As for [`update_typed_kernel`](Self::update_typed_kernel).
    pub unsafe fn set_typed_kernel_args<A: KernelArgs, X: ArgsFor<A::Params>>(
        &self,
        kernel: &TypedKernel<A>,
        args: X,
    ) -> Result<()> {
        self.with_live(|_, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "set_typed_kernel_args")?;
            check_runs(&kernel_node_params(h)?, kernel.kernel())
        })?;
        // SAFETY: forwarded to the caller; the node runs `kernel`, whose parameter types the
        // arguments have. (A concurrent update_kernel of the node between the check and the set
        // is the caller's race to avoid, as for any two updates of one node.)
        unsafe { self.set_kernel_args(args) }
    }

    /// Makes a copy node copy the first `size` bytes of `src` into `dst` (`cuda.core`'s
    /// `MemcpyNode.update`), for the executable graphs instantiated from now on; checked and
    /// held as [`GraphDefinition::memcpy`] checks and holds them.
    pub fn update_memcpy(&self, dst: &Buffer, src: &Buffer, size: usize) -> Result<()> {
        check_memcpy(dst, src, size, "update_memcpy")?;
        let (dst_ready, src_ready) = (dst.graph_fence()?, src.graph_fence()?);
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            expect_type(h, T::CU_GRAPH_NODE_TYPE_MEMCPY, "update_memcpy")?;
            reg.note_context(Context::current()?);
            let mut holder = Holder { reg };
            holder.hold_buffer(dst, &dst_ready)?;
            holder.hold_buffer(src, &src_ready)?;
            let p = memcpy_params(dst.handle(), src.handle(), size);
            // SAFETY: the node is live; both ranges lie inside buffers the graph holds (checked
            // above, handed over just before).
            unsafe { driver::cuGraphMemcpyNodeSetParams(h, &p) }.check("cuGraphMemcpyNodeSetParams")
        })
    }

    /// Makes a memset node write `value` over `height` rows of `width` elements of `dst`,
    /// `pitch` bytes apart (`cuda.core`'s `MemsetNode.update`, every parameter), for the
    /// executable graphs instantiated from now on. The graph holds `dst`.
    pub fn update_memset(
        &self,
        dst: &Buffer,
        value: impl Into<MemsetValue>,
        width: usize,
        height: usize,
        pitch: usize,
    ) -> Result<()> {
        let p = memset_params_for(dst, value.into(), width, height, pitch, "update_memset")?;
        let ready = dst.graph_fence()?;
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            expect_type(h, T::CU_GRAPH_NODE_TYPE_MEMSET, "update_memset")?;
            reg.note_context(Context::current()?);
            Holder { reg }.hold_buffer(dst, &ready)?;
            // SAFETY: the node is live; the region lies inside dst (checked arithmetic), which
            // the graph holds (handed over just before).
            unsafe { driver::cuGraphMemsetNodeSetParams(h, &p) }.check("cuGraphMemsetNodeSetParams")
        })
    }

    /// Makes a child-graph node run a copy of `child` (made now), for the executable graphs
    /// instantiated from now on (`cuda.core`'s `ChildGraphNode.update`). The graph holds what
    /// `child` holds. Graphs read from the node before ([`GraphNode::params`]) name the copy it
    /// replaced, which the driver frees: they, the graphs nested in them and their nodes return
    /// an error from then on.
    pub fn update_child(&self, child: &GraphDefinition) -> Result<()> {
        if Arc::ptr_eq(&child.inner.registry, &self.graph.registry) {
            return Err(CudaError::InvalidArgument(
                "update_child: a graph cannot embed itself or a graph nested in it".into(),
            ));
        }
        // The child's lock is taken inside the parent's (see `embedding`).
        let _one_at_a_time = embedding();
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            expect_type(h, T::CU_GRAPH_NODE_TYPE_GRAPH, "update_child")?;
            let child_reg = child.inner.lock();
            child.inner.check_live(&child_reg)?;
            child_reg.refuse_while_capturing(child.handle())?;
            if child_reg.has_graph_memory || reg.has_graph_memory {
                return Err(CudaError::InvalidArgument(
                    "update_child: graphs with graph memory cannot be swapped in or out of a node (their allocations exist in node order): add a new node instead".into(),
                ));
            }
            // The copy the node runs now, and all nested in it, is freed by the update:
            // collected while it is live, forgotten once it is freed (see `freed`).
            let freed = super::freed::Freed::child_of(h, reg)?;
            if freed.capturing(reg) {
                return Err(CudaError::InvalidState(
                    "update_child: a capture records into a graph nested in this node's graph: end it first".into(),
                ));
            }
            // What the copy runs is held first (a failed update leaves only extra holds).
            reg.absorb(&child_reg);
            // SAFETY: an all-zero CUgraphNodeParams is the documented starting point.
            let mut params: driver::CUgraphNodeParams = unsafe { std::mem::zeroed() };
            params.type_ = T::CU_GRAPH_NODE_TYPE_GRAPH;
            params.__bindgen_anon_1.graph = driver::CUDA_CHILD_GRAPH_NODE_PARAMS {
                graph: child.handle(),
                ownership: driver::CUgraphChildGraphNodeOwnership::CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE,
            };
            // SAFETY: the node and the child are live and both locks are held; the driver
            // copies the child.
            unsafe { driver::cuGraphNodeSetParams(h, &mut params) }.check("cuGraphNodeSetParams")?;
            // The node's earlier copy is gone: graphs read from it before are refused, and the
            // registry forgets its nodes and graphs (the driver may reuse their addresses).
            reg.child_replaced(h);
            freed.forget(reg);
            Ok(())
        })
    }
}

/// An error unless the kernel node parameters `p` name `kernel`.
pub(crate) fn check_runs(p: &driver::CUDA_KERNEL_NODE_PARAMS, kernel: &Kernel) -> Result<()> {
    if kernel_key(p) != kernel.handle() as usize {
        return Err(CudaError::InvalidArgument(format!(
            "set_typed_kernel_args: the node runs another kernel than {}: give the kernel, configuration and arguments together (update_typed_kernel)",
            kernel.name()
        )));
    }
    Ok(())
}

/// Clears the launch attributes `before` set on kernel node `h` that `after` does not set.
fn reset_launch_attributes(h: driver::CUgraphNode, before: &LaunchConfig, after: &LaunchConfig) -> Result<()> {
    use driver::CUlaunchAttributeID as A;
    let set = |id: A, v: driver::CUlaunchAttributeValue| {
        // SAFETY: the node is live; the value's member is the one of the attribute.
        unsafe { driver::cuGraphKernelNodeSetAttribute(h, id, &v) }.check("cuGraphKernelNodeSetAttribute")
    };
    // SAFETY: an all-zero attribute value is valid plain data, and unsets each attribute below.
    let zero: driver::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    if before.cluster.is_some() && after.cluster.is_none() {
        set(A::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, zero)?;
    }
    if before.cooperative_launch && !after.cooperative_launch {
        set(A::CU_LAUNCH_ATTRIBUTE_COOPERATIVE, zero)?;
    }
    if before.priority.is_some() && after.priority.is_none() {
        set(A::CU_LAUNCH_ATTRIBUTE_PRIORITY, zero)?;
    }
    if before.programmatic_stream_serialization && !after.programmatic_stream_serialization {
        set(A::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, zero)?;
    }
    Ok(())
}
