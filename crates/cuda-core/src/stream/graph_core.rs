//! The core of a CUDA graph, as far as stream operations need it: a captured stream records into
//! a graph, and whatever the recorded work uses must be handed to that graph.
//!
//! - [`GraphInner`] is one `CUgraph` (a root, or a body or child graph nested in one) and the
//!   hierarchy's [`Registry`], whose mutex serialises every driver call this crate makes on any
//!   graph of the hierarchy (the driver does not synchronise graph objects itself).
//! - [`GraphInner::attach`] hands a value to the root graph through a CUDA user object: the value
//!   lives until every graph, clone and executable graph holding the object is gone and their
//!   launches are done; the driver then calls a destructor on one of its threads, which posts the
//!   value to the release thread ([`crate::reaper`]) to be dropped there.
//!
//! The public graph types ([`crate::graph`]) are built on `GraphInner`; captures find it through
//! the registry in [`super::capture`].

use crate::device::{Context, FenceEvent};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// A node handle with the generation it was registered under: a node destroyed through this API
/// leaves its generation behind, so stale handles are recognised even when the driver reuses the
/// address for a new node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeRef {
    pub(crate) handle: driver::CUgraphNode,
    pub(crate) gen: u64,
}

/// What a conditional node was made with (the driver's query for it needs CUDA 13.2).
#[derive(Clone)]
pub(crate) struct ConditionalInfo {
    pub(crate) condition: driver::CUgraphConditionalHandle,
    pub(crate) kind: driver::CUgraphConditionalNodeType,
    /// The graph the conditional node is in.
    pub(crate) graph: driver::CUgraph,
    pub(crate) bodies: Vec<driver::CUgraph>,
}

/// A graph allocation recorded by a capture (graph memory, see [`crate::Buffer`]), shared by
/// its buffer and the hierarchy's registry, which frees what is still live when the capture
/// ends.
pub(crate) struct GraphAllocState {
    pub(crate) ptr: driver::CUdeviceptr,
    /// The graph whose capture recorded the allocation.
    pub(crate) graph: driver::CUgraph,
    /// Set by whoever records the allocation's free (once).
    pub(crate) freed: AtomicBool,
}

// SAFETY: the handles are compared, or used to record the one free (guarded by `freed`) under
// the graph's lock.
unsafe impl Send for GraphAllocState {}
// SAFETY: as above.
unsafe impl Sync for GraphAllocState {}

/// Node bookkeeping shared by a graph and every graph nested in it (bodies, child graphs). Its
/// mutex also serialises every driver call on the hierarchy.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) live: HashMap<usize, u64>,
    next: u64,
    pub(crate) conditionals: HashMap<usize, ConditionalInfo>,
    /// Graph memory allocated by captures into the hierarchy and not yet known to be freed.
    pub(crate) graph_allocations: Vec<Arc<GraphAllocState>>,
    /// Whether the hierarchy ever allocated graph memory: the order of its nodes then decides
    /// where that memory exists, so edges and nodes cannot be removed.
    pub(crate) has_graph_memory: bool,
    /// The graphs of the hierarchy a capture records into now: they change only through it.
    pub(crate) capturing: Vec<usize>,
    /// Fences after the allocation of every buffer the hierarchy's nodes use: a launch waits for
    /// them (once per stream) before it runs.
    pub(crate) ready: Vec<Arc<FenceEvent>>,
    /// The contexts the hierarchy's nodes run in (they name them by handle).
    pub(crate) contexts: Vec<Context>,
}

impl Registry {
    pub(crate) fn register(&mut self, handle: driver::CUgraphNode) -> NodeRef {
        let key = handle as usize;
        let gen = match self.live.get(&key) {
            Some(g) => *g,
            None => {
                self.next += 1;
                self.live.insert(key, self.next);
                self.next
            }
        };
        NodeRef { handle, gen }
    }

    pub(crate) fn is_live(&self, node: NodeRef) -> bool {
        self.live.get(&(node.handle as usize)) == Some(&node.gen)
    }

    /// An error when `graph` is being captured into (only the capture changes it then).
    pub(crate) fn refuse_while_capturing(&self, graph: driver::CUgraph) -> Result<()> {
        if self.capturing.contains(&(graph as usize)) {
            return Err(CudaError::InvalidArgument(
                "the graph is being recorded by a capture: change it after the capture ends".into(),
            ));
        }
        Ok(())
    }

    /// An error when the hierarchy has graph memory (see `has_graph_memory`).
    pub(crate) fn refuse_with_graph_memory(&self, what: &str) -> Result<()> {
        if self.has_graph_memory {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: the graph allocates graph memory, which exists between its allocation and free nodes as their edges order them: edges and nodes cannot be removed"
            )));
        }
        Ok(())
    }

    /// Notes that the hierarchy's nodes use memory allocated before `fence` (once per fence).
    pub(crate) fn note_ready(&mut self, fence: &Arc<FenceEvent>) {
        if !self.ready.iter().any(|f| Arc::ptr_eq(f, fence)) {
            self.ready.push(fence.clone());
        }
    }

    /// Notes that the hierarchy's nodes run in `context` (held as long as the hierarchy).
    pub(crate) fn note_context(&mut self, context: Option<Context>) {
        if let Some(c) = context {
            if !self.contexts.iter().any(|k| k.handle() == c.handle()) {
                self.contexts.push(c);
            }
        }
    }

    /// What another hierarchy brings along when its graph is copied into this one.
    pub(crate) fn absorb(&mut self, other: &Registry) {
        self.has_graph_memory |= other.has_graph_memory;
        for f in &other.ready {
            self.note_ready(f);
        }
        for c in &other.contexts {
            self.note_context(Some(c.clone()));
        }
    }
}

pub(crate) struct GraphInner {
    pub(crate) handle: driver::CUgraph,
    /// For graphs nested in another (conditional bodies, child graphs): that graph and the node
    /// that owns this one. `None`: owned here, destroyed on drop.
    pub(crate) owner: Option<(Arc<GraphInner>, NodeRef)>,
    pub(crate) registry: Arc<Mutex<Registry>>,
}

// SAFETY: CUgraph handles may be used from any thread; every driver call this crate makes on the
// hierarchy holds the registry lock (`lock`, and `Capture` for captured work), so no two threads
// touch it at once.
unsafe impl Send for GraphInner {}
// SAFETY: as above.
unsafe impl Sync for GraphInner {}

impl Drop for GraphInner {
    fn drop(&mut self) {
        if self.owner.is_none() && crate::reaper::in_callback() {
            // On a driver thread: destroyed on the release thread instead.
            let handle = crate::reaper::SendHandle(self.handle);
            crate::reaper::run_later(move || {
                let handle = handle;
                // SAFETY: owned and destroyed once, here (see below).
                if let Err(e) = unsafe { driver::cuGraphDestroy(handle.0) }.check("cuGraphDestroy") {
                    record_drop_error(e);
                }
            });
            return;
        }
        if self.owner.is_none() {
            // SAFETY: owned and destroyed once. No capture records into it any more: a builder
            // keeps its graph until the capture has really ended (see `GraphBuilder`), and the
            // capture registry holds only weak references. Executable graphs and user objects
            // are independent of the definition.
            if let Err(e) = unsafe { driver::cuGraphDestroy(self.handle) }.check("cuGraphDestroy") {
                record_drop_error(e);
            }
        }
    }
}

impl GraphInner {
    pub(crate) fn owned(handle: driver::CUgraph) -> Arc<GraphInner> {
        Arc::new(GraphInner {
            handle,
            owner: None,
            registry: Arc::default(),
        })
    }

    pub(crate) fn nested(parent: &Arc<GraphInner>, node: NodeRef, handle: driver::CUgraph) -> Arc<GraphInner> {
        Arc::new(GraphInner {
            handle,
            owner: Some((parent.clone(), node)),
            registry: parent.registry.clone(),
        })
    }

    /// The hierarchy's lock, held for every driver call on any of its graphs.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails when the node owning this graph (or one of its owners) was destroyed.
    pub(crate) fn check_live(&self, reg: &Registry) -> Result<()> {
        let mut at = self;
        while let Some((parent, node)) = &at.owner {
            if !reg.is_live(*node) {
                return Err(CudaError::InvalidArgument(
                    "the node owning this graph was destroyed: the graph is no longer valid".into(),
                ));
            }
            at = parent;
        }
        Ok(())
    }

    /// The outermost graph: what instantiation starts from, and so where attachments go (an
    /// executable graph holds the user objects of the graph it was instantiated from, not those
    /// of bodies nested in it).
    pub(crate) fn root(&self) -> driver::CUgraph {
        let mut at = self;
        while let Some((parent, _)) = &at.owner {
            at = parent;
        }
        at.handle
    }

    /// Hands `value` to the root graph: it is dropped after the graph, every clone and executable
    /// graph made from it, and every launch of those, are gone.
    pub(crate) fn attach<T: Any + Send + Sync>(&self, value: T) -> Result<()> {
        let mut reg = self.lock();
        self.attach_locked(&mut reg, value)
    }

    /// [`attach`](Self::attach) for a caller already holding the hierarchy's lock (`_reg` proves
    /// it).
    pub(crate) fn attach_locked<T: Any + Send + Sync>(&self, _reg: &mut Registry, value: T) -> Result<()> {
        crate::reaper::start();
        let data = Box::into_raw(Box::new(Held {
            value: Some(Box::new(value)),
            context: Context::current().ok().flatten(),
        }));
        let mut object: driver::CUuserObject = std::ptr::null_mut();
        // SAFETY: data is a leaked box that `release` reclaims once; NO_DESTRUCTOR_SYNC is
        // required by the driver for user objects.
        let created = unsafe {
            driver::cuUserObjectCreate(
                &mut object,
                data.cast(),
                Some(release),
                1,
                driver::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
            )
        }
        .check("cuUserObjectCreate");
        if let Err(e) = created {
            // SAFETY: the driver did not take data. (Dropped on the release thread: this one
            // holds locks the value's drop may need.)
            crate::reaper::drop_later(unsafe { Box::from_raw(data) });
            return Err(e);
        }
        // SAFETY: the root graph is live (self keeps it) and its lock is held; MOVE hands it the
        // one reference made above.
        let retained = unsafe {
            driver::cuGraphRetainUserObject(
                self.root(),
                object,
                1,
                driver::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
            )
        }
        .check("cuGraphRetainUserObject");
        if let Err(e) = retained {
            // SAFETY: the reference is still ours; releasing it runs `release` (which only posts).
            let _ = unsafe { driver::cuUserObjectRelease(object, 1) };
            return Err(e);
        }
        Ok(())
    }
}

/// A value a graph holds, and the context current when it was handed over (made current again to
/// drop it: freeing some memory needs one).
struct Held {
    value: Option<Box<dyn Any + Send + Sync>>,
    context: Option<Context>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let value = self.value.take();
        match &self.context {
            Some(ctx) => {
                let _ = ctx.with_current(|| {
                    drop(value);
                    Ok(())
                });
            }
            None => drop(value),
        }
    }
}

/// Called by the driver, on a thread of its own, once the user object's last reference is gone:
/// posts the value to the release thread (CUDA must not be called here).
unsafe extern "C" fn release(data: *mut c_void) {
    // SAFETY: data is the Box<Held> leaked in `attach_locked`; the driver calls this exactly once.
    let held = unsafe { Box::from_raw(data as *mut Held) };
    crate::reaper::drop_later(held);
}
