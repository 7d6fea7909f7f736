//! Adding kernel, empty, child-graph, event and host-callback nodes, and what they hold: the
//! kernel, the embedded graph's values, the event, the callback.

use super::*;

pub(crate) fn kernel_params(
    config: &LaunchConfig,
    kernel: &Kernel,
    params: *mut *mut c_void,
) -> driver::CUDA_KERNEL_NODE_PARAMS {
    // With a cluster shape the grid counts clusters (the cluster itself is a node attribute).
    let blocks = config.grid_in_blocks();
    driver::CUDA_KERNEL_NODE_PARAMS {
        func: std::ptr::null_mut(),
        gridDimX: blocks.x,
        gridDimY: blocks.y,
        gridDimZ: blocks.z,
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

/// A host callback's data: the closure, called at every launch (shared: a host node's callback
/// can be read back, [`GraphNode::host_callback`]).
pub(super) type Callback = Arc<dyn Fn() + Send + Sync + 'static>;

unsafe extern "C" fn run_callback(data: *mut c_void) {
    // SAFETY: data points to a Callback the graph holds for as long as it can run.
    let f = unsafe { &*(data as *const Callback) };
    crate::reaper::run_as_callback("a graph host callback", || f());
}

/// Boxes `f` for a host node: the returned params point into the box, which the graph must hold.
pub(crate) fn host_params(f: impl Fn() + Send + Sync + 'static) -> (Box<Callback>, driver::CUDA_HOST_NODE_PARAMS) {
    let boxed: Box<Callback> = Box::new(Arc::new(f));
    let params = driver::CUDA_HOST_NODE_PARAMS {
        fn_: Some(run_callback),
        userData: (&*boxed as *const Callback).cast_mut().cast(),
    };
    (boxed, params)
}

pub(super) fn set_launch_attributes(node: driver::CUgraphNode, config: &LaunchConfig) -> Result<()> {
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

/// Adds a node recording or waiting for `event`, which the graph holds.
fn add_event_node(append: &Append<'_>, event: &Event, kind: EventNode) -> Result<GraphNode> {
    append.add(
        &[],
        |h| {
            h.reg.note_event(event);
            h.hold(event.clone())
        },
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
            /// them is valid for the kernel's accesses whenever the graph runs. Buffers and views
            /// among the arguments are held by the graph; hand the memory raw pointers point to
            /// to the graph with [`GraphDefinition::keep_alive`] to tie it to the graph's life.
            pub unsafe fn launch<A: KernelArgs>(
                &self,
                config: &LaunchConfig,
                kernel: &Kernel,
                args: A,
            ) -> Result<GraphNode> {
                config.check(Device::current()?.limits()?)?;
                let buffers = ArgBuffers::of(&args, "launch")?;
                let append = self.append();
                // The node runs the kernel at every launch: the graph keeps its code loaded,
                // and the memory of the buffers among its arguments.
                append.add(
                    &[],
                    |h| {
                        h.reg.held.hold_shared(kernel.object_code().keeper());
                        h.reg
                            .note_kernel(kernel.handle() as usize, || Arc::new(kernel.clone()));
                        buffers.hold(h.reg);
                        Ok(())
                    },
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
                append.add(&[], nothing, |reg, g, deps| {
                    let child_reg = child.inner.lock();
                    child.inner.check_live(&child_reg)?;
                    // The copy runs what the child runs: it holds what the child holds, after
                    // the same allocations, in the same contexts, with the same graph memory.
                    // (Held before the node exists: a failed add leaves only extra holds.)
                    reg.absorb(&child_reg);
                    let mut node = std::ptr::null_mut();
                    // SAFETY: both graphs are live and both locks are held; the driver clones the
                    // child.
                    unsafe {
                        driver::cuGraphAddChildGraphNode(&mut node, g, deps.as_ptr(), deps.len(), child.inner.handle)
                    }
                    .check("cuGraphAddChildGraphNode")?;
                    Ok(node)
                })
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
                    |h| {
                        h.reg.note_host_data(p.userData as usize);
                        h.hold(boxed)
                    },
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
        }
    };
}

node_adders!(GraphDefinition);
node_adders!(GraphNode);
