//! What a capture records besides the work queued on its stream: parallel branches
//! ([`GraphBuilder::split`], [`GraphBuilder::join`]), conditional bodies, embedded graphs, host
//! callbacks, and values the graph holds.

use super::CaptureMode;
use super::{capture_stream, GraphBuilder, Kind, State};
use crate::error::Check;
use crate::graph::definition::{
    add_conditional_node, embedding, host_params, ConditionalType, GraphCondition, GraphInner, GraphNode,
};
use crate::graph::exec::{Graph, GraphCompleteOptions};
use crate::stream::{EventOptions, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

impl GraphBuilder {
    /// Splits the capture into `count` parallel branches: the first is this builder, the others
    /// record on new streams that start where this one is. Join them with [`join`](Self::join).
    pub fn split(self, count: usize) -> Result<Vec<GraphBuilder>> {
        if count < 2 {
            return Err(CudaError::InvalidArgument(format!(
                "invalid split count: expecting >= 2, got {count}"
            )));
        }
        self.with_capture("split", |_| Ok(()))?;
        let context = self.stream.context_or_current()?;
        let event = context.create_event(EventOptions::default())?;
        // (Recorded into the capture: its graph holds the event from here.)
        self.stream.record(&event)?;
        let mut out = Vec::with_capacity(count);
        for _ in 1..count {
            let stream = capture_stream(&context)?;
            stream.wait_event(&event)?;
            out.push(GraphBuilder::on(
                stream,
                Kind::Forked,
                State::Building,
                self.graph.clone(),
            ));
        }
        out.insert(0, self);
        Ok(out)
    }

    /// Joins branches made by [`split`](Self::split) back into one builder: the first that is
    /// not a branch (or the first), which then waits for all the others.
    pub fn join(builders: Vec<GraphBuilder>) -> Result<GraphBuilder> {
        if builders.len() < 2 {
            return Err(CudaError::InvalidArgument(
                "must join with at least two graph builders".into(),
            ));
        }
        let mut builders = builders;
        let root_index = builders.iter().position(|b| !b.is_join_required()).unwrap_or(0);
        let root = builders.remove(root_index);
        for other in &builders {
            root.stream.wait(&other.stream)?;
        }
        Ok(root)
    }

    /// A condition for conditional nodes of this capture; with `default_value` it is reset to
    /// that value at the start of every launch.
    pub fn create_condition(&self, default_value: Option<u32>) -> Result<GraphCondition> {
        self.with_capture("create_condition", |capture| {
            GraphCondition::create(capture.handle(), default_value)
        })
    }

    fn conditional(&self, condition: &GraphCondition, kind: ConditionalType, size: u32) -> Result<Vec<GraphBuilder>> {
        let (graph, node, bodies) = self.with_capture("conditional", |capture| {
            let (node, bodies) = add_conditional_node(
                capture.reg,
                capture.handle(),
                &capture.dependencies,
                *condition,
                kind,
                size,
            )?;
            let node = capture.reg.register(node);
            self.continue_after(node.handle)?;
            Ok((capture.graph.clone(), node, bodies))
        })?;
        let context = self.stream.context_or_current()?;
        bodies
            .into_iter()
            .map(|b| {
                Ok(GraphBuilder::on(
                    capture_stream(&context)?,
                    Kind::Body,
                    State::Idle,
                    Some(GraphInner::nested(&graph, node, b)),
                ))
            })
            .collect()
    }

    /// Makes `node` (just added to the capture graph) what the next captured work depends on.
    /// The caller holds the stream's capture lock and the graph's.
    fn continue_after(&self, mut node: driver::CUgraphNode) -> Result<()> {
        // SAFETY: the stream is capturing; one node replaces the dependencies of what follows.
        unsafe {
            driver::cuStreamUpdateCaptureDependencies(
                self.stream.handle(),
                &mut node,
                std::ptr::null(),
                1,
                driver::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES.0,
            )
        }
        .check("cuStreamUpdateCaptureDependencies")
    }

    /// Adds an if node at this point of the capture; record its body with the builder returned
    /// (`begin_building`, queue work, `end_building`).
    pub fn if_then(&self, condition: &GraphCondition) -> Result<GraphBuilder> {
        first(self.conditional(condition, ConditionalType::If, 1)?)
    }

    /// Adds an if-else node; returns the builders of the then and else bodies.
    pub fn if_else(&self, condition: &GraphCondition) -> Result<(GraphBuilder, GraphBuilder)> {
        let mut b = self.conditional(condition, ConditionalType::If, 2)?.into_iter();
        match (b.next(), b.next()) {
            (Some(then), Some(otherwise)) => Ok((then, otherwise)),
            _ => Err(CudaError::InvalidArgument(
                "if_else: the driver made fewer than two bodies".into(),
            )),
        }
    }

    /// Adds a while node; returns the builder of its body.
    pub fn while_loop(&self, condition: &GraphCondition) -> Result<GraphBuilder> {
        first(self.conditional(condition, ConditionalType::While, 1)?)
    }

    /// Adds a switch node with `count` bodies; returns their builders.
    pub fn switch(&self, condition: &GraphCondition, count: u32) -> Result<Vec<GraphBuilder>> {
        self.conditional(condition, ConditionalType::Switch, count)
    }

    /// Adds `child` (a finished builder's graph) as a child-graph node at this point.
    pub fn embed(&self, child: &GraphBuilder) -> Result<()> {
        let definition = child
            .graph_definition()
            .map_err(|_| CudaError::InvalidState("the child graph has not finished building".into()))?;
        if self.state != State::Building {
            return Err(CudaError::InvalidState("the parent graph is not being built".into()));
        }
        if let Some(g) = &self.graph {
            if Arc::ptr_eq(&g.registry, &definition.inner.registry) {
                return Err(CudaError::InvalidArgument(
                    "embed: a graph cannot embed itself or a graph nested in it".into(),
                ));
            }
        }
        // The child's lock is taken inside the parent's (see `embedding`).
        let _one_at_a_time = embedding();
        self.with_capture("embed", |capture| {
            let child_reg = definition.inner.lock();
            definition.inner.check_live(&child_reg)?;
            // The copy runs what the child runs: it holds what the child holds, after the same
            // allocations, in the same contexts, with the same graph memory.
            capture.reg.absorb(&child_reg);
            let mut node: driver::CUgraphNode = std::ptr::null_mut();
            // SAFETY: both graphs are live and locked; the dependencies come from the capture;
            // the driver clones the child.
            unsafe {
                driver::cuGraphAddChildGraphNode(
                    &mut node,
                    capture.handle(),
                    capture.dependencies.as_ptr(),
                    capture.dependencies.len(),
                    definition.handle(),
                )
            }
            .check("cuGraphAddChildGraphNode")?;
            drop(child_reg);
            self.continue_after(node)
        })
    }

    /// Records a host callback: `f` runs on a driver thread at every launch, in stream order.
    /// `f` must not call CUDA (this crate's operations called from it return an error); a panic
    /// is caught and recorded for [`crate::take_drop_errors`].
    pub fn callback(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let (boxed, p) = host_params(f);
        // (Kept out here until handed over: dropped under the stream's lock, what it holds could
        // need that lock.)
        let mut boxed = Some(boxed);
        let recorded = self.with_capture("callback", |capture| {
            if let Some(b) = boxed.take() {
                capture.reg.note_host_data(p.userData as usize);
                capture.hold(b);
            }
            // SAFETY: the stream is capturing (its lock is held); p points into the boxed
            // closure, which the graph holds (handed over just before).
            unsafe { driver::cuLaunchHostFunc(self.stream.handle(), p.fn_, p.userData) }.check("cuLaunchHostFunc")
        });
        drop(boxed);
        recorded
    }

    /// Hands `value` to the graph being recorded (see
    /// [`GraphDefinition::keep_alive`](crate::graph::GraphDefinition::keep_alive)): use it for memory that
    /// captured kernels use.
    pub fn keep_alive<T: std::any::Any + Send + Sync>(&self, value: T) -> Result<()> {
        let mut value = Some(value);
        let held = self.with_capture("keep_alive", |capture| {
            if let Some(v) = value.take() {
                capture.hold(v);
            }
            Ok(())
        });
        drop(value);
        held
    }
}

impl GraphBuilder {
    /// The nodes the capture recorded into this builder's graph so far, in the order the
    /// operations recording them ran (on its stream, its branches, and streams that joined the
    /// capture): a kernel launch records its kernel node, a copy or memset its node, an
    /// [`embed`](Self::embed) its child-graph node, a conditional its conditional node, a
    /// [`callback`](Self::callback) its host node. Waits and event records record none. Nodes
    /// destroyed since are left out. Use them for per-node updates of the graph instantiated
    /// from it ([`Graph::update_typed_kernel`] and the like), and [`GraphNode::kernel`] to see
    /// which kernel a node runs.
    pub fn recorded_nodes(&self) -> Result<Vec<GraphNode>> {
        let Some(graph) = &self.graph else {
            return Ok(Vec::new());
        };
        let reg = graph.lock();
        graph.check_live(&reg)?;
        let handle = graph.handle as usize;
        Ok(reg
            .recorded
            .iter()
            .filter(|(g, node)| *g == handle && reg.is_live(*node))
            .map(|(_, node)| GraphNode::from_ref(graph, *node))
            .collect())
    }
}

impl Stream {
    /// [`capture_graph`](Stream::capture_graph) that also returns the nodes `f`'s operations
    /// recorded, in the order they ran (see [`GraphBuilder::recorded_nodes`]): the kernel node of
    /// each launch, in launch order, for per-node updates of the graph returned.
    ///
    /// ```no_run
    /// # fn demo(s: &cuda_core::Stream, k: &cuda_core::TypedKernel<(*mut f32, u32)>, y: &cuda_core::TypedBuffer<f32>) -> cuda_core::Result<()> {
    /// use cuda_core::graph::CaptureMode;
    /// let config = cuda_core::LaunchConfig::new(1, 256);
    /// let (mut graph, nodes) = s.capture_graph_nodes(CaptureMode::Relaxed, |s| {
    ///     // SAFETY: the kernel writes 256 floats of y, which holds them.
    ///     unsafe { k.launch(s, &config, (y, 256u32)) }
    /// })?;
    /// assert_eq!(nodes[0].kernel()?.handle(), k.kernel().handle());
    /// // SAFETY: as above, with 128 floats.
    /// unsafe { graph.set_typed_kernel_args(&nodes[0], k, (y, 128u32))? };
    /// graph.launch(s)?;
    /// # Ok(()) }
    /// ```
    pub fn capture_graph_nodes(
        &self,
        mode: CaptureMode,
        f: impl FnOnce(&Stream) -> Result<()>,
    ) -> Result<(Graph, Vec<GraphNode>)> {
        let mut builder = self.begin_capture(mode)?;
        f(builder.stream())?;
        builder.end_building()?;
        let graph = builder.complete(&GraphCompleteOptions::default())?;
        Ok((graph, builder.recorded_nodes()?))
    }
}

fn first(builders: Vec<GraphBuilder>) -> Result<GraphBuilder> {
    builders
        .into_iter()
        .next()
        .ok_or_else(|| CudaError::InvalidArgument("the driver made no body".into()))
}
