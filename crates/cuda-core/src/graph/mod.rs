//! CUDA graphs (`cuda.core.graph`): record work once, launch it many times for about the host
//! cost of one kernel launch.
//!
//! Two ways to build one:
//! - **capture** ([`GraphBuilder`]): queue work on a stream as usual while it records; split it
//!   into parallel branches, add conditional bodies (if, if-else, while, switch), embed graphs
//!   and callbacks; or record a closure in one call with [`crate::Stream::capture_graph`];
//! - **explicit** ([`GraphDefinition`]): add nodes of every type with their dependencies, inspect,
//!   change and remove them.
//!
//! Both give a [`Graph`] (executable) through instantiation, which launches, uploads, updates from
//! a changed definition, and changes single nodes (a kernel node's kernel, configuration and
//! arguments, typed or not; copies, memsets, child graphs, events, callbacks, enabled or not)
//! without instantiating again. A capture returns the nodes it recorded, in the order its
//! operations ran ([`crate::Stream::capture_graph_nodes`], [`GraphBuilder::recorded_nodes`]),
//! and a kernel node names its kernel ([`GraphNode::kernel`], [`GraphNode::config`]).
//!
//! **Lifetimes.** Whatever a node uses (kernels' code, buffers copied, filled or passed to
//! kernels, events, host callbacks, the values of embedded graphs and conditional bodies) is held
//! by the graph on the Rust side: the definition holds it, a copy or an embedding of the graph
//! holds it too, and an executable [`Graph`] holds the definition it runs (and those of its
//! updates) until the launches it made on every stream are done; then a background thread
//! releases it. Nothing is attached to the driver's graph, so a launch costs one `cuGraphLaunch`,
//! and dropping any of these types never waits for the GPU. Kernel arguments are raw values:
//! nodes that take them are `unsafe`, and [`GraphDefinition::keep_alive`] /
//! [`GraphBuilder::keep_alive`] tie the memory they point to to the graph.
//!
//! **Layout.** `builder` ([`GraphBuilder`]: captures), `definition` ([`GraphDefinition`],
//! [`GraphNode`]: explicit graphs, split by node kind), `exec` ([`Graph`]: instantiated graphs,
//! launches, updates). Graphs are the top layer: they use devices, streams (and the graph core
//! and capture registry of `crate::stream`), memory, launches and compiled kernels; nothing
//! below imports them. `Device::create_graph_builder` and `Stream::capture_graph` are defined here.

mod builder;
mod definition;
mod exec;

pub use builder::{CaptureMode, GraphBuilder};
pub use definition::{
    ConditionalNode, ConditionalType, GraphAllocOptions, GraphCondition, GraphDefinition, GraphMemoryType, GraphNode,
    MemsetValue, NodeParams, NodeType,
};
pub use exec::{Graph, GraphCompleteOptions, GraphDebugPrintOptions};
