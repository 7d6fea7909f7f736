//! The core of a CUDA graph, as far as stream operations need it: a captured stream records into
//! a graph, and whatever the recorded work uses must be handed to that graph.
//!
//! - [`GraphInner`] is one `CUgraph` (a root, or a body or child graph nested in one) and the
//!   hierarchy's [`Registry`], whose mutex serialises every driver call this crate makes on any
//!   graph of the hierarchy (the driver does not synchronise graph objects itself).
//! - [`Holdings`] is what the hierarchy's nodes use (kernels' code, buffers, callbacks, events,
//!   values given to `keep_alive`), held on the Rust side: the registry holds it as long as the
//!   hierarchy lives, a copy or an embedding shares it, and an executable graph holds the
//!   definition it runs until its launches are done (see `crate::graph`). No CUDA user object is
//!   involved: a graph retaining one costs the driver a reference count on every launch and its
//!   release after it, which doubled a graph launch's host cost.
//!
//! The public graph types ([`crate::graph`]) are built on `GraphInner`; captures find it through
//! the registry in [`super::capture`].

use crate::device::{Context, FenceEvent};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

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
    /// The graph whose capture recorded the allocation: compared by identity (the weak
    /// reference keeps its address from being reused), never by handle, which the driver may
    /// give a new graph once this one is destroyed (an invalidated capture's graph is destroyed
    /// by the driver as the capture ends).
    pub(crate) graph: Weak<GraphInner>,
    /// Set by whoever records the allocation's free (once), or when its capture was
    /// invalidated (the memory is gone with its graph).
    pub(crate) freed: AtomicBool,
}

impl GraphAllocState {
    /// Whether the allocation was recorded into `graph` (by identity).
    pub(crate) fn is_of(&self, graph: &Arc<GraphInner>) -> bool {
        std::ptr::eq(self.graph.as_ptr(), Arc::as_ptr(graph))
    }
}

// SAFETY: the pointer is used only to record the one free (guarded by `freed`) under the
// graph's lock.
unsafe impl Send for GraphAllocState {}
// SAFETY: as above.
unsafe impl Sync for GraphAllocState {}

/// Node bookkeeping shared by a graph and every graph nested in it (bodies, child graphs). Its
/// mutex also serialises every driver call on the hierarchy.
#[derive(Default)]
pub(crate) struct Registry {
    /// What the hierarchy's nodes use. (Declared before `contexts`: fields drop in order, and
    /// the values may need their contexts while they drop.)
    pub(crate) held: Holdings,
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
    /// A capture into one of the hierarchy's graphs was invalidated: the driver destroyed the
    /// graph it recorded into (see [`GraphInner::capture_invalidated`]), so the hierarchy is
    /// refused from then on.
    pub(crate) broken: bool,
    /// The kernels the hierarchy's kernel nodes were given (a `Kernel` each, type-erased: this
    /// layer does not name compiled code), by `CUkernel`: what a kernel node's parameters name
    /// is read back from here. Held as long as the hierarchy (as the kernels' code is).
    pub(crate) kernels: HashMap<usize, Arc<dyn Any + Send + Sync>>,
    /// The events the hierarchy's event record and wait nodes were given, by `CUevent`: what
    /// such a node names is read back from here (held as long as the hierarchy).
    pub(crate) events: HashMap<usize, super::Event>,
    /// The nodes captures recorded, in the order the operations recording them ran, with the
    /// graph of the hierarchy each was recorded into (see `capture::with_capture_asked`).
    pub(crate) recorded: Vec<(usize, NodeRef)>,
    /// Every node a capture into the hierarchy was seen to depend on or record (so a node that
    /// a wait brings into a stream's dependencies is not taken for a new one).
    pub(crate) recorded_seen: HashSet<usize>,
    /// The data pointers of the host callbacks the hierarchy holds (each a boxed callback of
    /// `crate::graph`, held as long as the hierarchy): a host node whose data is one of these
    /// can be read back.
    pub(crate) host_data: HashSet<usize>,
    /// How often each child-graph node was given another graph (absent: never).
    child_gens: HashMap<usize, u64>,
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
            return Err(CudaError::InvalidState(
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

    /// Notes that kernel nodes of the hierarchy run the kernel `handle` (`kernel`, made only
    /// when it is not noted yet).
    pub(crate) fn note_kernel(&mut self, handle: usize, kernel: impl FnOnce() -> Arc<dyn Any + Send + Sync>) {
        self.kernels.entry(handle).or_insert_with(kernel);
    }

    /// Notes that an event record or wait node of the hierarchy names `event`.
    pub(crate) fn note_event(&mut self, event: &super::Event) {
        self.events
            .entry(event.handle() as usize)
            .or_insert_with(|| event.clone());
    }

    /// How often child-graph node `node` was given another graph.
    pub(crate) fn child_gen(&self, node: driver::CUgraphNode) -> u64 {
        self.child_gens.get(&(node as usize)).copied().unwrap_or(0)
    }

    /// Notes that child-graph node `node` was given another graph: graphs read from it before
    /// are refused from now on.
    pub(crate) fn child_replaced(&mut self, node: driver::CUgraphNode) {
        *self.child_gens.entry(node as usize).or_insert(0) += 1;
    }

    /// Notes that the hierarchy holds the host callback data `data` points to.
    pub(crate) fn note_host_data(&mut self, data: usize) {
        self.host_data.insert(data);
    }

    /// Notes the nodes an operation recorded into `graph`: those of `after` (the capture's
    /// dependencies once it ran) that are neither in `before` (its dependencies before) nor seen
    /// earlier.
    pub(crate) fn note_recorded(
        &mut self,
        graph: driver::CUgraph,
        before: &[driver::CUgraphNode],
        after: &[driver::CUgraphNode],
    ) {
        for b in before {
            self.recorded_seen.insert(*b as usize);
        }
        for a in after {
            if self.recorded_seen.insert(*a as usize) {
                let node = self.register(*a);
                self.recorded.push((graph as usize, node));
            }
        }
    }

    /// What another hierarchy brings along when its graph is copied into this one.
    pub(crate) fn absorb(&mut self, other: &Registry) {
        self.held.absorb(&other.held);
        for (k, v) in &other.kernels {
            self.kernels.entry(*k).or_insert_with(|| v.clone());
        }
        for (k, v) in &other.events {
            self.events.entry(*k).or_insert_with(|| v.clone());
        }
        self.host_data.extend(other.host_data.iter().copied());
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
    /// For a root: a capture into it, or into a graph nested in it, was invalidated, so the
    /// driver destroyed the graph it recorded into: the root is never destroyed here (a second
    /// destroy of it, or of that body with it, would follow), only kept (leaked).
    keep: std::sync::atomic::AtomicBool,
    /// For the graph a child-graph node owns: the node's [`Registry::child_gen`] when it was
    /// read (an update gives the node a copy of another graph, and the driver destroys this one).
    child_gen: Option<u64>,
}

// SAFETY: CUgraph handles may be used from any thread; every driver call this crate makes on the
// hierarchy holds the registry lock (`lock`, and `Capture` for captured work), so no two threads
// touch it at once.
unsafe impl Send for GraphInner {}
// SAFETY: as above.
unsafe impl Sync for GraphInner {}

/// The refusal of a hierarchy that lost a graph to an invalidated capture (a release waiting
/// on one of its captures tries again once it ends: see `capture::capture_refusal`).
pub(crate) const BROKEN: &str = "a capture into this graph (or a graph nested in it) was invalidated, and the driver destroyed the graph it recorded into: build the graph again";

impl Drop for GraphInner {
    fn drop(&mut self) {
        // (No lock is taken here: a graph may go while its hierarchy's lock is held.)
        if self.owner.is_none() && !*self.keep.get_mut() {
            // Owned and destroyed once. No capture records into it any more: a builder keeps its
            // graph until the capture has really ended (see `GraphBuilder`), and the capture
            // registry holds only weak references. Executable graphs are independent of the
            // definition (and hold it until their launches are done).
            destroy_graph_handle(self.handle as usize, destroy_graph, "cuGraphDestroy");
        }
    }
}

/// `cuGraphDestroy` of an owned graph's handle (see [`destroy_graph_handle`]).
///
/// # Safety
/// `handle` is a graph this crate owns, destroyed once.
unsafe fn destroy_graph(handle: usize) -> driver::CUresult {
    // SAFETY: forwarded to the caller.
    unsafe { driver::cuGraphDestroy(handle as driver::CUgraph) }
}

/// A graph or executable graph handle to destroy on the release thread (from a driver thread).
struct DestroyLater {
    handle: usize,
    destroy: unsafe fn(usize) -> driver::CUresult,
    call: &'static str,
}

impl DestroyLater {
    fn now(&self) {
        // In relaxed capture mode: another thread's global-mode capture refuses the destroy
        // otherwise (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, seen in the round-3 stress run).
        // The destroy never waits for captures to end: it can wait for the driver, and a
        // release thread waiting there held up every release (tests holding a launch in a
        // callback timed out). A global-mode capture running on another thread at that moment
        // may be invalidated by it: an error for that capture, as global mode promises for any
        // call it forbids.
        let serialised = super::capture::capture_question();
        // SAFETY: the handle and its destroy were handed over together by
        // `destroy_graph_handle`, whose caller vouches for them; destroyed once.
        let destroyed = super::relaxed_capture_mode(|| unsafe { (self.destroy)(self.handle) });
        drop(serialised);
        if let Err(e) = destroyed.check(self.call) {
            record_drop_error(e);
        }
    }
}

impl crate::reaper::Retry for DestroyLater {
    fn attempt(&mut self) -> bool {
        self.now();
        true
    }
}

/// Destroys a graph or an executable graph (`destroy` of `handle`, the driver call `call`) in
/// relaxed capture mode: here, or on the release thread from a driver thread.
///
/// `destroy` must be sound to call once with `handle` from any thread, after the caller lets go
/// of the handle.
pub(crate) fn destroy_graph_handle(handle: usize, destroy: unsafe fn(usize) -> driver::CUresult, call: &'static str) {
    let job = DestroyLater { handle, destroy, call };
    if crate::reaper::in_callback() {
        crate::reaper::retry(Box::new(job));
    } else {
        job.now();
    }
}

impl GraphInner {
    pub(crate) fn owned(handle: driver::CUgraph) -> Arc<GraphInner> {
        // What the graph holds may be let go of on a driver thread, which must find the release
        // thread running (starting it there would call into the system from a callback).
        crate::reaper::start();
        Arc::new(GraphInner {
            handle,
            owner: None,
            registry: Arc::default(),
            keep: Default::default(),
            child_gen: None,
        })
    }

    /// The graph `handle` the child-graph node `node` of `parent` owns (the caller holds the
    /// hierarchy's lock, `reg`).
    pub(crate) fn child(
        parent: &Arc<GraphInner>,
        reg: &Registry,
        node: NodeRef,
        handle: driver::CUgraph,
    ) -> Arc<GraphInner> {
        Arc::new(GraphInner {
            handle,
            owner: Some((parent.clone(), node)),
            registry: parent.registry.clone(),
            keep: Default::default(),
            child_gen: Some(reg.child_gen(node.handle)),
        })
    }

    pub(crate) fn nested(parent: &Arc<GraphInner>, node: NodeRef, handle: driver::CUgraph) -> Arc<GraphInner> {
        Arc::new(GraphInner {
            handle,
            owner: Some((parent.clone(), node)),
            registry: parent.registry.clone(),
            keep: Default::default(),
            child_gen: None,
        })
    }

    /// The hierarchy's lock, held for every driver call on any of its graphs.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that a capture into this graph was invalidated and has ended (the caller holds
    /// the hierarchy's lock, `reg`). The driver destroys the graph given to
    /// `cuStreamBeginCaptureToGraph` then (driver 580: the handle is invalid afterwards, and a
    /// second destroy was seen to crash under concurrent captures): it is never destroyed here,
    /// and the hierarchy, which may have lost a conditional body, is refused from now on.
    /// `tests/tests/graphs.rs` checks the driver's behaviour.
    pub(crate) fn capture_invalidated(self: &Arc<Self>, reg: &mut Registry) {
        reg.broken = true;
        // Bodies are never destroyed here; the root, which owns them, is kept.
        self.root_inner().keep.store(true, std::sync::atomic::Ordering::Relaxed);
        // Its graph memory is gone with it: no buffer of it is usable again.
        reg.graph_allocations.retain(|state| {
            if state.is_of(self) {
                state.freed.store(true, std::sync::atomic::Ordering::Release);
                false
            } else {
                true
            }
        });
    }

    /// Fails when the node owning this graph (or one of its owners) was destroyed, or when a
    /// capture into the hierarchy was invalidated.
    pub(crate) fn check_live(&self, reg: &Registry) -> Result<()> {
        if reg.broken {
            return Err(CudaError::InvalidState(BROKEN.into()));
        }
        let mut at = self;
        while let Some((parent, node)) = &at.owner {
            if !reg.is_live(*node) {
                return Err(CudaError::InvalidState(
                    "the node owning this graph was destroyed: the graph is no longer valid".into(),
                ));
            }
            if at.child_gen.is_some_and(|g| reg.child_gen(node.handle) != g) {
                return Err(CudaError::InvalidState(
                    "the child-graph node owning this graph was given another graph (an update): read its graph again"
                        .into(),
                ));
            }
            at = parent;
        }
        Ok(())
    }

    /// The outermost graph: what instantiation starts from (conditions are made on it).
    pub(crate) fn root(&self) -> driver::CUgraph {
        self.root_inner().handle
    }

    /// The outermost graph of the hierarchy.
    fn root_inner(&self) -> &GraphInner {
        let mut at = self;
        while let Some((parent, _)) = &at.owner {
            at = parent;
        }
        at
    }

    /// Hands `value` to the hierarchy: see [`Holdings::hold`].
    pub(crate) fn hold<T: Any + Send + Sync>(&self, value: T) {
        self.lock().held.hold(value);
    }
}

/// What a graph hierarchy's nodes use, held for as long as the hierarchy (and everything that
/// shares its holdings) lives: values are only ever added, so whatever an executable graph runs
/// stays held while it holds the definition it was instantiated from.
///
/// Shared values (a buffer's allocation, a kernel's code) are held once however many nodes use
/// them, so a capture that launches the same kernel on the same buffers a thousand times holds
/// two values, not two thousand.
#[derive(Default)]
pub(crate) struct Holdings {
    values: Vec<Arc<dyn Any + Send + Sync>>,
    /// The addresses of the shared values held: each stays held (so its address is not reused)
    /// as long as it is listed here.
    shared: HashSet<usize>,
}

impl Holdings {
    /// Holds `value`, which is dropped with the context current now made current again (freeing
    /// some memory needs one).
    pub(crate) fn hold<T: Any + Send + Sync>(&mut self, value: T) {
        let context = Context::current().ok().flatten();
        self.values.push(Arc::new(Held {
            value: Some(value),
            context,
        }));
    }

    /// Holds a shared value, once.
    pub(crate) fn hold_shared(&mut self, value: Arc<dyn Any + Send + Sync>) {
        if self.shared.insert(Arc::as_ptr(&value).cast::<()>() as usize) {
            self.values.push(value);
        }
    }

    /// Holds everything `other` holds (a copy of its graph now runs what it runs).
    pub(crate) fn absorb(&mut self, other: &Holdings) {
        for v in &other.values {
            self.hold_shared(v.clone());
        }
    }

    /// How many values are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

impl Drop for Holdings {
    fn drop(&mut self) {
        if (crate::reaper::in_callback() || super::gate::in_operation()) && !self.values.is_empty() {
            // On a driver thread (a graph let go of in a callback), the values may not call CUDA
            // as they drop; inside an operation on a stream (the last reference let go of there),
            // they may need that stream's lock again: they go to the release thread.
            crate::reaper::drop_later(Box::new(std::mem::take(&mut self.values)));
        }
    }
}

/// A value a graph holds, and the context current when it was handed over (made current again to
/// drop it: freeing some memory needs one).
struct Held<T> {
    value: Option<T>,
    context: Option<Context>,
}

impl<T> Drop for Held<T> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Reports the name of the thread it is dropped on.
    struct Reporter(mpsc::Sender<Option<String>>);

    impl Drop for Reporter {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().name().map(str::to_owned));
        }
    }

    #[test]
    fn a_shared_value_is_held_once_and_copies_share_it() {
        let value: Arc<dyn Any + Send + Sync> = Arc::new(7u32);
        let mut held = Holdings::default();
        for _ in 0..1000 {
            held.hold_shared(value.clone());
        }
        assert_eq!(held.len(), 1, "a thousand uses of one buffer or kernel hold it once");
        held.hold(String::from("a callback"));
        assert_eq!(held.len(), 2);
        let mut copy = Holdings::default();
        copy.absorb(&held);
        copy.absorb(&held);
        assert_eq!(copy.len(), 2, "absorbing twice holds nothing twice");
        assert_eq!(Arc::strong_count(&value), 3, "the test's, the graph's and the copy's");
        drop(held);
        assert_eq!(Arc::strong_count(&value), 2, "the copy still holds it");
        drop(copy);
        assert_eq!(Arc::strong_count(&value), 1);
    }

    #[test]
    fn values_let_go_of_on_a_driver_thread_drop_on_the_release_thread() {
        let (tx, rx) = mpsc::channel();
        let mut held = Holdings::default();
        held.hold(Reporter(tx.clone()));
        // Dropped outside a callback: right here.
        let mut here = Holdings::default();
        here.hold(Reporter(tx));
        drop(here);
        let name = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(name, std::thread::current().name().map(str::to_owned));
        // Dropped as a driver callback would: on the release thread, never on the callback's.
        crate::reaper::run_as_callback("test", move || drop(held));
        let name = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(name.as_deref(), Some("cuda-core-release"));
    }
}
