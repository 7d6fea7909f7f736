//! Per-node updates of an executable graph (`cuda.core`'s `graph[node].update(...)`): they
//! change what its next launches do, never the definition.
//!
//! **Lifetimes.** What an update makes a node use (a kernel's code, buffers, a child graph's
//! values, a callback, an event, the context a copy or memset runs in) is held by the `Graph`
//! under the node and the kind of update; what it replaces is released on the release thread once
//! the launches queued before, on every stream the graph was launched or uploaded on, are done
//! (`Graph::hold`). Buffers an update brings add their allocation fences: every stream's next
//! launch waits for them.

use super::{Graph, HeldKind};
use crate::compile::Kernel;
use crate::device::{Context, Device, FenceEvent};
use crate::error::Check;
use crate::graph::definition::{
    check_host_node, check_memcpy, check_runs, event_node, expect_type, host_params, kernel_node_params, memcpy_params,
    memset_params_for, memset_params_with, node_config, node_type, same_attributes, with_kernel_args, ArgBuffers,
    EventNode, GraphDefinition, GraphNode, MemsetValue,
};
use crate::launch::{ArgsFor, KernelArgs, LaunchConfig, TypedKernel};
use crate::memory::{Buffer, SharedAllocation};
use crate::stream::Event;
use crate::{CudaError, Result};
use cuda_sys::driver;
use driver::CUgraphNodeType as T;
use std::sync::Arc;

/// What an update of a kernel node made it run in the executable graph (its arguments are held
/// apart, under [`HeldKind::KernelArgs`]).
struct ExecKernel {
    kernel: Kernel,
    config: LaunchConfig,
}

/// What an update of a memset node made it write in the executable graph, and the memory it
/// writes.
struct ExecMemset {
    _dst: Arc<SharedAllocation>,
    params: driver::CUDA_MEMSET_NODE_PARAMS,
}

impl Graph {
    /// Runs `f` with the executable and the node's handle, once the node is known to be a live
    /// node of the definition instantiated.
    fn with_node<R>(
        &self,
        node: &GraphNode,
        f: impl FnOnce(driver::CUgraphExec, driver::CUgraphNode) -> Result<R>,
    ) -> Result<R> {
        // (Compared while the node holds its graph: a live pointer cannot be another's.)
        if !std::ptr::eq(Arc::as_ptr(node.graph_inner()), self.source.as_ptr()) {
            return Err(CudaError::InvalidArgument(
                "the node is not a node of the definition this graph was instantiated from".into(),
            ));
        }
        crate::reaper::refuse_in_callback()?;
        let exec = self.handle;
        // Calls on the executable are serialised (node handles under the definition's lock).
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        node.with_live(|_, h| f(exec, h))
    }

    /// The kernel nodes of the definition, for [`set_kernel_args`](Self::set_kernel_args), in
    /// the driver's order (which is not the launch order of a capture: for that, capture with
    /// [`crate::Stream::capture_graph_nodes`]; [`GraphNode::kernel`] says which kernel a node
    /// runs).
    pub fn kernel_nodes(&self) -> Result<Vec<GraphNode>> {
        let mut out = Vec::new();
        for n in self.source()?.nodes()? {
            if n.with_live(|_, h| node_type(h))? == driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// Gives a kernel node new arguments in this executable graph (from its next launch), without
    /// touching the definition.
    ///
    /// # Safety
    /// As for [`GraphDefinition::launch`]: the arguments match the kernel, and what they point to
    /// is valid whenever the graph runs from now on.
    pub unsafe fn set_kernel_args<A: KernelArgs>(&mut self, node: &GraphNode, args: A) -> Result<()> {
        let buffers = ArgBuffers::of(&args, "set_kernel_args")?;
        // The kernel and configuration the node runs here: an earlier update's, or the
        // definition's.
        let updated = self.exec_kernel(node).map(|k| (&k.kernel, k.config));
        let from_definition = match updated {
            Some(_) => Vec::new(),
            None => self.definition_fallback(node, "set_kernel_args")?,
        };
        self.with_node(node, |exec, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "set_kernel_args")?;
            let set = |p: &driver::CUDA_KERNEL_NODE_PARAMS| {
                // SAFETY: exec and node are live; the arguments are copied during the call; the
                // kernel is the one the node runs (held by the graph).
                unsafe { driver::cuGraphExecKernelNodeSetParams(exec, h, p) }.check("cuGraphExecKernelNodeSetParams")
            };
            match &updated {
                Some((kernel, config)) => args.with_params(|params| {
                    set(&crate::graph::definition::kernel_params(
                        config,
                        kernel,
                        params.as_mut_ptr(),
                    ))
                }),
                None => with_kernel_args(h, &args, set),
            }
        })?;
        // Buffers among the arguments: the graph holds them (what the node's earlier arguments
        // held is released after the launches that may use it), and every stream's next launch
        // follows their allocation. Nothing here fails once the node uses the new arguments.
        self.hold(node, HeldKind::KernelArgs, Box::new(buffers.held));
        self.note_ready(buffers.ready);
        self.note_ready(from_definition);
        Ok(())
    }

    /// Before a per-node update that keeps what the definition's `node` has now (its kernel and
    /// configuration, its memset region): allowed only while this graph holds the definition it
    /// was instantiated from (which holds what the node uses); not after [`update`](Self::update)
    /// (the node's definition then no longer says what the graph runs, nor keeps it alive).
    /// Returns the fences after the allocation of every buffer the definition uses now (a node
    /// updated in the definition since the graph was made may use new ones): the next launch on
    /// every stream waits for them.
    fn definition_fallback(&self, node: &GraphNode, what: &str) -> Result<Vec<Arc<FenceEvent>>> {
        if self.instantiated_from.is_none() {
            return Err(CudaError::InvalidState(format!(
                "{what}: after Graph::update the node's definition no longer says what this graph runs: give the node's whole parameters (update_kernel, update_memset)"
            )));
        }
        Ok(node.graph_inner().lock().ready.clone())
    }

    /// Turns a kernel, memset or memcpy node on or off in this executable graph.
    pub fn set_enabled(&mut self, node: &GraphNode, enabled: bool) -> Result<()> {
        self.with_node(node, |exec, h| {
            // SAFETY: exec and node are live.
            unsafe { driver::cuGraphNodeSetEnabled(exec, h, enabled as u32) }.check("cuGraphNodeSetEnabled")
        })
    }

    /// Whether a node is enabled in this executable graph.
    pub fn is_enabled(&self, node: &GraphNode) -> Result<bool> {
        self.with_node(node, |exec, h| {
            let mut on = 0;
            // SAFETY: exec and node are live; out-value is a local.
            unsafe { driver::cuGraphNodeGetEnabled(exec, h, &mut on) }.check("cuGraphNodeGetEnabled")?;
            Ok(on != 0)
        })
    }

    /// Points an event record or wait node of this executable graph at `event`.
    pub fn set_event(&mut self, node: &GraphNode, event: &Event) -> Result<()> {
        self.with_node(node, |exec, h| {
            // SAFETY: exec, node and event are live.
            unsafe {
                match event_node(h)? {
                    EventNode::Record => driver::cuGraphExecEventRecordNodeSetEvent(exec, h, event.handle())
                        .check("cuGraphExecEventRecordNodeSetEvent"),
                    EventNode::Wait => driver::cuGraphExecEventWaitNodeSetEvent(exec, h, event.handle())
                        .check("cuGraphExecEventWaitNodeSetEvent"),
                }
            }
        })?;
        self.hold(node, HeldKind::Event, Box::new(event.clone()));
        Ok(())
    }

    /// Replaces a host node's callback in this executable graph.
    pub fn set_callback(&mut self, node: &GraphNode, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let (boxed, p) = host_params(f);
        self.with_node(node, |exec, h| {
            check_host_node(h)?;
            // SAFETY: exec and node are live; p points into the boxed closure, held below for as
            // long as the graph (and its launches) can call it.
            unsafe { driver::cuGraphExecHostNodeSetParams(exec, h, &p) }.check("cuGraphExecHostNodeSetParams")
        })?;
        self.hold(node, HeldKind::Callback, Box::new(boxed));
        Ok(())
    }

    /// Changes the value a memset node of this executable graph writes (same width and region).
    pub fn set_memset_value(&mut self, node: &GraphNode, value: impl Into<MemsetValue>) -> Result<()> {
        let value = value.into();
        // The node runs in the context it names: the executable graph holds it (as definitions
        // hold the contexts their nodes were added in).
        let ctx = Context::current()?;
        let handle = ctx.as_ref().map_or(std::ptr::null_mut(), Context::handle);
        // The region an earlier update of this graph's node gave it, or the definition's.
        let updated = self.exec_memset(node).map(|m| m.params);
        let from_definition = match updated {
            Some(_) => Vec::new(),
            None => self.definition_fallback(node, "set_memset_value")?,
        };
        let p = self.with_node(node, |exec, h| {
            let p = match updated {
                Some(mut p) => {
                    let (v, element_size) = value.parts();
                    if p.elementSize != element_size {
                        return Err(CudaError::InvalidArgument(format!(
                            "set_memset_value: the node writes {}-byte values, not {element_size}-byte ones",
                            p.elementSize
                        )));
                    }
                    p.value = v;
                    p
                }
                None => memset_params_with(h, value)?,
            };
            // SAFETY: same region, which the graph holds; exec and node are live, and the
            // context is current (so live), held by the graph below.
            unsafe { driver::cuGraphExecMemsetNodeSetParams(exec, h, &p, handle) }
                .check("cuGraphExecMemsetNodeSetParams")?;
            Ok(p)
        })?;
        if let Some(state) = self.exec_memset_mut(node) {
            state.params = p;
        }
        if let Some(ctx) = ctx {
            self.hold(node, HeldKind::MemsetContext, Box::new(ctx));
        }
        self.note_ready(from_definition);
        Ok(())
    }

    /// The kernel and configuration an update gave `node` in this graph, if any.
    fn exec_kernel(&self, node: &GraphNode) -> Option<&ExecKernel> {
        self.held
            .get(&(node.handle() as usize, HeldKind::Kernel))
            .and_then(|v| v.downcast_ref::<ExecKernel>())
    }

    /// The region and value an update gave memset node `node` in this graph, if any.
    fn exec_memset(&self, node: &GraphNode) -> Option<&ExecMemset> {
        self.held
            .get(&(node.handle() as usize, HeldKind::Memset))
            .and_then(|v| v.downcast_ref::<ExecMemset>())
    }

    fn exec_memset_mut(&mut self, node: &GraphNode) -> Option<&mut ExecMemset> {
        self.held
            .get_mut(&(node.handle() as usize, HeldKind::Memset))
            .and_then(|v| v.downcast_mut::<ExecMemset>())
    }

    /// The kernel `node` runs in this graph: an update's, or the definition node's.
    fn runs_kernel(&self, node: &GraphNode, kernel: &Kernel) -> Result<()> {
        if let Some(k) = self.exec_kernel(node) {
            return check_runs_exec(&k.kernel, kernel);
        }
        node.with_live(|_, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "set_typed_kernel_args")?;
            check_runs(&kernel_node_params(h)?, kernel)
        })
    }

    /// Makes a kernel node of this executable graph run `kernel` with `config` and `args` from
    /// its next launch (`cuda.core`'s `ExecutableKernelNode.update`, all three together), without
    /// touching the definition. The graph holds the kernel's code and the buffers among the
    /// arguments; what they replace is released once the launches that used it are done. The
    /// launch attributes (cluster shape, cooperative launch, priority, programmatic
    /// serialisation) are the instantiated node's: a configuration with others is refused
    /// (update the definition and instantiate it again).
    ///
    /// # Safety
    /// As for [`GraphDefinition::launch`]: the arguments match `kernel`'s parameters, and what
    /// they point to is valid whenever the graph runs from now on. Prefer
    /// [`update_typed_kernel`](Self::update_typed_kernel).
    pub unsafe fn update_kernel<A: KernelArgs>(
        &mut self,
        node: &GraphNode,
        config: &LaunchConfig,
        kernel: &Kernel,
        args: A,
    ) -> Result<()> {
        config.check(Device::current()?.limits()?)?;
        let buffers = ArgBuffers::of(&args, "update_kernel")?;
        self.with_node(node, |exec, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_KERNEL, "update_kernel")?;
            if !same_attributes(&node_config(h)?, config) {
                return Err(CudaError::NotSupported(
                    "update_kernel: an executable graph's kernel node keeps the launch attributes it was instantiated with (cluster shape, cooperative launch, priority, programmatic serialisation): update the definition's node and instantiate it again".into(),
                ));
            }
            args.with_params(|params| {
                let p = crate::graph::definition::kernel_params(config, kernel, params.as_mut_ptr());
                // SAFETY: exec and node are live; the arguments are copied during the call (the
                // caller vouches for what they point to); the kernel's code is held below, from
                // before any launch can run it.
                unsafe { driver::cuGraphExecKernelNodeSetParams(exec, h, &p) }.check("cuGraphExecKernelNodeSetParams")
            })
        })?;
        // Nothing here fails once the node runs the new kernel: the graph holds it and the
        // buffers (what they replace goes after the launches that may use it).
        let state = ExecKernel {
            kernel: kernel.clone(),
            config: *config,
        };
        self.hold(node, HeldKind::Kernel, Box::new(state));
        self.hold(node, HeldKind::KernelArgs, Box::new(buffers.held));
        self.note_ready(buffers.ready);
        Ok(())
    }

    /// [`update_kernel`](Self::update_kernel) with a typed kernel: the arguments' types are
    /// checked at compile time, as [`TypedKernel::launch`] checks them.
    ///
    /// ```compile_fail
    /// # fn demo(g: &mut cuda_core::graph::Graph, node: &cuda_core::graph::GraphNode, k: &cuda_core::TypedKernel<(*const f32, *mut f32, f32, u32)>, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>) -> cuda_core::Result<()> {
    /// let config = cuda_core::LaunchConfig::new(1, 256);
    /// // SAFETY: (does not compile: an f64 for the float, a usize for the unsigned).
    /// unsafe { g.update_typed_kernel(node, &config, k, (x.read_only(), y, 2.0f64, 4usize))? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As for [`TypedKernel::launch`], for every launch from now on.
    pub unsafe fn update_typed_kernel<A: KernelArgs, X: ArgsFor<A::Params>>(
        &mut self,
        node: &GraphNode,
        config: &LaunchConfig,
        kernel: &TypedKernel<A>,
        args: X,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller; the argument types are those `kernel` declares.
        unsafe { self.update_kernel(node, config, kernel.kernel(), args) }
    }

    /// Gives a kernel node that runs `kernel` in this executable graph new arguments, whose
    /// types are checked at compile time. An error when the node runs another kernel here.
    ///
    /// ```compile_fail
    /// # fn demo(g: &mut cuda_core::graph::Graph, node: &cuda_core::graph::GraphNode, k: &cuda_core::TypedKernel<(*const f32, *mut f32, f32, u32)>, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>) -> cuda_core::Result<()> {
    /// // SAFETY: (does not compile: the unsigned is missing).
    /// unsafe { g.set_typed_kernel_args(node, k, (x.read_only(), y, 2.0f32))? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As for [`TypedKernel::launch`], for every launch from now on.
    pub unsafe fn set_typed_kernel_args<A: KernelArgs, X: ArgsFor<A::Params>>(
        &mut self,
        node: &GraphNode,
        kernel: &TypedKernel<A>,
        args: X,
    ) -> Result<()> {
        self.runs_kernel(node, kernel.kernel())?;
        // SAFETY: forwarded to the caller; the node runs `kernel` here (checked, and only
        // `&mut self` changes that), whose parameter types the arguments have.
        unsafe { self.set_kernel_args(node, args) }
    }

    /// Makes a copy node of this executable graph copy the first `size` bytes of `src` into
    /// `dst` from its next launch (`cuda.core`'s `ExecutableMemcpyNode.update`). Checked as
    /// [`GraphDefinition::memcpy`] checks; the driver also wants the memory from the contexts of
    /// the node's first operands. The graph holds both buffers and the current context; what they
    /// replace goes once the launches that used it are done.
    pub fn update_memcpy(&mut self, node: &GraphNode, dst: &Buffer, src: &Buffer, size: usize) -> Result<()> {
        check_memcpy(dst, src, size, "update_memcpy")?;
        let ready: Vec<_> = [dst.graph_fence()?, src.graph_fence()?].into_iter().flatten().collect();
        let ctx = current("update_memcpy")?;
        self.with_node(node, |exec, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_MEMCPY, "update_memcpy")?;
            let p = memcpy_params(dst.handle(), src.handle(), size);
            // SAFETY: exec, node and context (current) are live; both ranges lie inside buffers
            // held below from before the next launch.
            unsafe { driver::cuGraphExecMemcpyNodeSetParams(exec, h, &p, ctx.handle()) }
                .check("cuGraphExecMemcpyNodeSetParams")
        })?;
        self.hold(node, HeldKind::Memcpy, Box::new((dst.share(), src.share())));
        self.hold(node, HeldKind::MemcpyContext, Box::new(ctx));
        self.note_ready(ready);
        Ok(())
    }

    /// Makes a memset node of this executable graph write `value` over `height` rows of `width`
    /// elements of `dst`, `pitch` bytes apart, from its next launch (`cuda.core`'s
    /// `ExecutableMemsetNode.update`). The driver wants one row (as at instantiation) and memory
    /// of the node's first context. The graph holds `dst` and the current context.
    pub fn update_memset(
        &mut self,
        node: &GraphNode,
        dst: &Buffer,
        value: impl Into<MemsetValue>,
        width: usize,
        height: usize,
        pitch: usize,
    ) -> Result<()> {
        let p = memset_params_for(dst, value.into(), width, height, pitch, "update_memset")?;
        let ready: Vec<_> = dst.graph_fence()?.into_iter().collect();
        let ctx = current("update_memset")?;
        self.with_node(node, |exec, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_MEMSET, "update_memset")?;
            // SAFETY: exec, node and context are live; the region lies inside dst (checked),
            // held below from before the next launch.
            unsafe { driver::cuGraphExecMemsetNodeSetParams(exec, h, &p, ctx.handle()) }
                .check("cuGraphExecMemsetNodeSetParams")
        })?;
        let state = ExecMemset {
            _dst: dst.share(),
            params: p,
        };
        self.hold(node, HeldKind::Memset, Box::new(state));
        self.hold(node, HeldKind::MemsetContext, Box::new(ctx));
        self.note_ready(ready);
        Ok(())
    }

    /// Makes a child-graph node of this executable graph run what `child` describes from its
    /// next launch (`cuda.core`'s `ExecutableChildGraphNode.update`): `child` must have the
    /// topology (and node order) of the graph the node had at instantiation. The graph holds
    /// `child` (and so what its nodes use); what it replaces goes once the launches that used it
    /// are done.
    pub fn update_child(&mut self, node: &GraphNode, child: &GraphDefinition) -> Result<()> {
        // The child's lock is taken inside the parent's (see `embedding`).
        let _one_at_a_time = crate::graph::definition::embedding();
        let ready = self.with_node(node, |exec, h| {
            expect_type(h, T::CU_GRAPH_NODE_TYPE_GRAPH, "update_child")?;
            if Arc::ptr_eq(&child.inner.registry, &node.graph_inner().registry) {
                return Err(CudaError::InvalidArgument(
                    "update_child: a graph cannot embed itself or a graph nested in it".into(),
                ));
            }
            let child_reg = child.inner.lock();
            child.inner.check_live(&child_reg)?;
            child_reg.refuse_while_capturing(child.handle())?;
            if child_reg.has_graph_memory {
                return Err(CudaError::InvalidArgument(
                    "update_child: a graph with graph memory cannot be swapped into a node: instantiate again".into(),
                ));
            }
            // SAFETY: exec, node and child are live (the child's lock is held); the driver
            // copies what it needs of the child, which the graph holds below for the values its
            // nodes use.
            unsafe { driver::cuGraphExecChildGraphNodeSetParams(exec, h, child.handle()) }
                .check("cuGraphExecChildGraphNodeSetParams")?;
            Ok(child_reg.ready.clone())
        })?;
        self.hold(node, HeldKind::Child, Box::new(child.clone()));
        self.note_ready(ready);
        Ok(())
    }
}

/// An error unless `runs` is `kernel`.
fn check_runs_exec(runs: &Kernel, kernel: &Kernel) -> Result<()> {
    if runs.handle() != kernel.handle() {
        return Err(CudaError::InvalidArgument(format!(
            "set_typed_kernel_args: the node runs {} in this graph, not {}: give the kernel, configuration and arguments together (update_typed_kernel)",
            runs.name(),
            kernel.name()
        )));
    }
    Ok(())
}

/// The current context, which copy and memset nodes' updates name (and the graph holds).
fn current(what: &str) -> Result<Context> {
    Context::current()?.ok_or_else(|| {
        CudaError::InvalidState(format!(
            "{what}: no context is current (call Device::set_current first)"
        ))
    })
}
