//! The public value types of explicit graphs: node types, node parameters as the driver reports
//! them, memset values and allocation options.

use super::*;

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
    pub(super) fn from_driver(t: driver::CUgraphNodeType) -> NodeType {
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
    /// Managed (unified) memory located on the device (`CU_MEM_ALLOCATION_TYPE_MANAGED`: needs a
    /// CUDA 13 driver that supports managed graph allocations).
    Managed,
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
    /// A kernel node's shape as the driver reports it (the grid in blocks); its kernel and
    /// whole configuration are [`GraphNode::kernel`] and [`GraphNode::config`].
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
        /// The device the memory is located on (`None` for host memory).
        device: Option<Device>,
        memory_type: GraphMemoryType,
        /// The devices given read-write access besides the owner.
        peer_access: Vec<Device>,
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
