//! The public value types of explicit graphs: node types, node parameters as the driver reports
//! them, memset values and allocation options.

use super::*;

/// The node types (`CUgraphNodeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeType {
    /// A kernel launch (`CU_GRAPH_NODE_TYPE_KERNEL`; cuda.core's `KernelNode`).
    Kernel,
    /// A memory copy (`CU_GRAPH_NODE_TYPE_MEMCPY`; `MemcpyNode`).
    Memcpy,
    /// A memory fill (`CU_GRAPH_NODE_TYPE_MEMSET`; `MemsetNode`).
    Memset,
    /// A host function call (`CU_GRAPH_NODE_TYPE_HOST`; `HostCallbackNode`).
    Host,
    /// An embedded graph (`CU_GRAPH_NODE_TYPE_GRAPH`; `ChildGraphNode`).
    ChildGraph,
    /// A node that does nothing, used to join dependencies (`CU_GRAPH_NODE_TYPE_EMPTY`;
    /// `EmptyNode`).
    Empty,
    /// A wait on an event (`CU_GRAPH_NODE_TYPE_WAIT_EVENT`; `EventWaitNode`).
    EventWait,
    /// An event record (`CU_GRAPH_NODE_TYPE_EVENT_RECORD`; `EventRecordNode`).
    EventRecord,
    /// A signal of external semaphores (`CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL`; not created by
    /// this crate, only reported for graphs built elsewhere).
    ExternalSemaphoreSignal,
    /// A wait on external semaphores (`CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT`; not created by this
    /// crate, only reported).
    ExternalSemaphoreWait,
    /// A graph memory allocation (`CU_GRAPH_NODE_TYPE_MEM_ALLOC`; `AllocNode`).
    MemAlloc,
    /// A free of graph-allocated memory (`CU_GRAPH_NODE_TYPE_MEM_FREE`; `FreeNode`).
    MemFree,
    /// A batch of stream memory operations (`CU_GRAPH_NODE_TYPE_BATCH_MEM_OP`; not created by
    /// this crate, only reported).
    BatchMemOp,
    /// A conditional node: if, if-else, while or switch (`CU_GRAPH_NODE_TYPE_CONDITIONAL`;
    /// `ConditionalNode`).
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
    /// Fill with a byte (element size 1).
    U8(u8),
    /// Fill with a 16-bit value (element size 2; the destination must be 2-byte aligned).
    U16(u16),
    /// Fill with a 32-bit value (element size 4; the destination must be 4-byte aligned).
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
    /// Device memory of the allocation's device (the default; cuda.core's `"device"`).
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
    /// The kind of memory to allocate (cuda.core's `memory_type`; default
    /// [`GraphMemoryType::Device`]).
    pub memory_type: GraphMemoryType,
    /// Other devices that may read and write the memory.
    pub peer_access: Vec<Device>,
}

/// What a node does, as the driver reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeParams {
    /// An empty (join) node: no parameters.
    Empty,
    /// A kernel node's shape as the driver reports it (the grid in blocks); its kernel and
    /// whole configuration are [`GraphNode::kernel`] and [`GraphNode::config`].
    Kernel {
        /// The grid size in blocks (cuda.core's `KernelNode.grid`).
        grid: Dim3,
        /// The block size in threads (`KernelNode.block`).
        block: Dim3,
        /// The dynamic shared memory per block, in bytes (`KernelNode.shmem_size`).
        shmem_size: u32,
    },
    /// A memset node's fill (cuda.core's `MemsetNode` properties).
    Memset {
        /// The device address written (`MemsetNode.dptr`).
        dst: driver::CUdeviceptr,
        /// The fill value, widened to 32 bits (only the low `element_size` bytes are written).
        value: u32,
        /// The size of one element in bytes: 1, 2 or 4.
        element_size: u32,
        /// The number of elements per row.
        width: usize,
        /// The number of rows (1 for a one-dimensional fill).
        height: usize,
        /// The distance between rows in bytes (unused when `height` is 1).
        pitch: usize,
    },
    /// A one-dimensional copy (cuda.core's `MemcpyNode` properties).
    Memcpy {
        /// The destination address (a unified address: device, pinned host or managed memory).
        dst: driver::CUdeviceptr,
        /// The source address (a unified address, as `dst`).
        src: driver::CUdeviceptr,
        /// The number of bytes copied.
        size: usize,
    },
    /// A host callback node (the function itself is not read back).
    Host,
    /// The node's own copy of the embedded graph.
    ChildGraph(GraphDefinition),
    /// An event-record node and the raw event it records.
    EventRecord(driver::CUevent),
    /// An event-wait node and the raw event it waits on.
    EventWait(driver::CUevent),
    /// An allocation node (cuda.core's `AllocNode` properties).
    MemAlloc {
        /// The address of the allocation, fixed when the node was added.
        dptr: driver::CUdeviceptr,
        /// The size of the allocation in bytes.
        bytesize: usize,
        /// The device the memory is located on (`None` for host memory).
        device: Option<Device>,
        /// The kind of memory allocated.
        memory_type: GraphMemoryType,
        /// The devices given read-write access besides the owner.
        peer_access: Vec<Device>,
    },
    /// A free node (cuda.core's `FreeNode`).
    MemFree {
        /// The graph-allocated address the node frees.
        dptr: driver::CUdeviceptr,
    },
    /// A conditional node (cuda.core's `ConditionalNode`, `IfNode`, `IfElseNode`, `WhileNode`,
    /// `SwitchNode`): one this crate added, or, on CUDA 13.2+ drivers, any other (recorded into
    /// a capture, or added to a graph, by raw driver calls of other code), read back with
    /// `cuGraphNodeGetParams`.
    Conditional {
        /// The condition whose value selects the body.
        condition: GraphCondition,
        /// If, while or switch (`cond_type`; [`ConditionalType::name`] gives cuda.core's
        /// string).
        kind: ConditionalType,
        /// The body graphs, owned by the node (for `If`: then, and else when there are two; for
        /// `Switch`: body `n` at index `n`); `branches.len()` is the node's size.
        branches: Vec<GraphDefinition>,
    },
    /// A node of a kind whose parameters are not read here. Also
    /// `Other(NodeType::Conditional)` for a conditional node this crate did not add when the
    /// driver cannot report its parameters: `cuGraphNodeGetParams` needs a CUDA 13.2 driver
    /// (`cuda.core` then reports `cond_type` `None` and no branches), or the driver reported a
    /// kind of conditional this crate does not know.
    Other(NodeType),
}
