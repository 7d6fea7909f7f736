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
//! a changed definition, and changes single nodes (kernel arguments, memset values, events,
//! callbacks, enabled or not) without instantiating again.
//!
//! **Lifetimes.** Whatever a node uses (buffers copied or filled, events, host callbacks, embedded
//! graphs) is handed to the graph through CUDA user objects: it stays alive as long as any graph,
//! clone or executable graph refers to it and until their launches finish, then a background
//! thread releases it (the driver's own thread must not call CUDA). Kernel arguments are raw
//! values: nodes that take them are `unsafe`, and [`GraphDefinition::keep_alive`] /
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
