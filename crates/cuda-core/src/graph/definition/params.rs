//! A node's parameters read back ([`GraphNode::params`]) and changed in place, and the helpers
//! executable graphs share for their node updates.

use super::*;

impl GraphNode {
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
                    let p = super::updates::kernel_node_params(h)?;
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
                T::CU_GRAPH_NODE_TYPE_GRAPH => NodeParams::ChildGraph(GraphDefinition {
                    inner: GraphInner::child(&self.graph, reg, self.node, super::freed::child_graph(h)?),
                }),
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
                    let memory_type =
                        if p.poolProps.allocType == driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED {
                            GraphMemoryType::Managed
                        } else if p.poolProps.location.type_ == driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST {
                            GraphMemoryType::Host
                        } else {
                            GraphMemoryType::Device
                        };
                    // SAFETY: the id is the union's member for device and host locations.
                    let owner = unsafe { p.poolProps.location.__bindgen_anon_1.id };
                    let device = match memory_type {
                        GraphMemoryType::Host => None,
                        _ => Some(device_of(owner)?),
                    };
                    let peers = if p.accessDescs.is_null() {
                        &[][..]
                    } else {
                        // SAFETY: the driver returned accessDescCount descriptors, owned by the
                        // node (live, under the lock) and copied out before the lock goes.
                        unsafe { std::slice::from_raw_parts(p.accessDescs, p.accessDescCount) }
                    };
                    let mut peer_access = Vec::with_capacity(peers.len());
                    for d in peers {
                        // SAFETY: as for the owner's id.
                        let id = unsafe { d.location.__bindgen_anon_1.id };
                        if d.location.type_ == driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
                            peer_access.push(device_of(id)?);
                        }
                    }
                    NodeParams::MemAlloc {
                        dptr: p.dptr,
                        bytesize: p.bytesize,
                        device,
                        memory_type,
                        peer_access,
                    }
                }
                T::CU_GRAPH_NODE_TYPE_MEM_FREE => {
                    let mut dptr = 0;
                    // SAFETY: as said above the match.
                    unsafe { driver::cuGraphMemFreeNodeGetParams(h, &mut dptr) }
                        .check("cuGraphMemFreeNodeGetParams")?;
                    NodeParams::MemFree { dptr }
                }
                T::CU_GRAPH_NODE_TYPE_CONDITIONAL => {
                    let info = super::conditional::conditional_info(reg, self.graph.handle, h)?;
                    if let Some(info) = &info {
                        // Recorded (what the driver reported), so that the bodies handed out
                        // are known as this crate's own are: a capture into one of them keeps
                        // the node from being destroyed.
                        reg.conditionals.insert(h as usize, info.clone());
                    }
                    match info {
                        Some(info) => NodeParams::Conditional {
                            condition: GraphCondition { handle: info.condition },
                            kind: ConditionalType::from_driver(info.kind),
                            branches: info
                                .bodies
                                .iter()
                                .map(|b| GraphDefinition {
                                    inner: GraphInner::nested(&self.graph, self.node, *b),
                                })
                                .collect(),
                        },
                        None => NodeParams::Other(NodeType::Conditional),
                    }
                }
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
        let buffers = ArgBuffers::of(&args, "set_kernel_args")?;
        self.with_live(|reg, h| {
            reg.refuse_while_capturing(self.graph.handle)?;
            buffers.hold(reg);
            with_kernel_args(h, &args, |p| {
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
            reg.held.hold(event.clone());
            reg.note_event(event);
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
            reg.note_host_data(p.userData as usize);
            reg.held.hold(boxed);
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

/// What a graph holds for kernel arguments that carry buffers: each buffer's memory, and the
/// fences after their allocation that its launches wait for. Taken before any graph lock.
pub(crate) struct ArgBuffers {
    pub(crate) held: Vec<Arc<SharedAllocation>>,
    pub(crate) ready: Vec<Arc<FenceEvent>>,
}

impl ArgBuffers {
    /// The buffers `args` carry (none for plain values, without looking).
    pub(crate) fn of<A: KernelArgs>(args: &A, what: &str) -> Result<ArgBuffers> {
        let mut out = ArgBuffers {
            held: Vec::new(),
            ready: Vec::new(),
        };
        if !A::CARRIES_BUFFERS {
            return Ok(out);
        }
        args.with_buffers(|buffers| {
            for b in buffers.iter().flatten() {
                refuse_graph_memory(b, what)?;
                if let Some(f) = b.graph_fence()? {
                    out.ready.push(f);
                }
                out.held.push(b.share());
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Hands the buffers to the graph whose lock `reg` is.
    pub(crate) fn hold(self, reg: &mut Registry) {
        for f in &self.ready {
            reg.note_ready(f);
        }
        for shared in self.held {
            reg.held.hold_shared(shared);
        }
    }
}

/// Hands `set` the kernel node `h`'s parameters with `args` as its arguments (valid for the call:
/// the driver copies them).
pub(crate) fn with_kernel_args<A: KernelArgs>(
    h: driver::CUgraphNode,
    args: &A,
    set: impl FnOnce(&driver::CUDA_KERNEL_NODE_PARAMS) -> Result<()>,
) -> Result<()> {
    let mut p = super::updates::kernel_node_params(h)?;
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

/// The device with ordinal `id`, as a memory location names it.
fn device_of(id: i32) -> Result<Device> {
    let ordinal = usize::try_from(id)
        .map_err(|_| CudaError::InvalidArgument(format!("the driver reported device {id} for a graph allocation")))?;
    Device::new(ordinal)
}
