//! The shared objects the threads work on, in slots behind locks, and how the test keeps the
//! work on each tracked buffer in order.
//!
//! **Lock order.** A thread takes locks in this order only, so the test itself never deadlocks:
//! a graph slot, then stream locks (by slot index), then buffer slots (by slot index); junk and
//! event slots are taken alone (or with `try_lock`). A slot's mutex is held for the whole
//! operation on its object.
//!
//! **Streams and captures.** Each shared stream has a lock of the test's own: operations on
//! tracked buffers hold it shared, and a capture on a shared stream holds it exclusively, so
//! tracked work is never recorded into another thread's capture by accident (the test could not
//! follow its effect). Untracked work (host functions, fills of junk buffers, event records,
//! syncs, kernels that only spin) takes no lock and meets captures freely: those are the races
//! the crate must refuse or record safely.
//!
//! **Order of work on a buffer.** Every tracked buffer has a fence, an event recorded after each
//! operation on it (outside any capture); the next operation, on whatever stream, first makes
//! its stream wait for that fence. Operations on a buffer are serialised by its slot's mutex,
//! so the GPU runs them in the order the test applies them to its model.

use crate::model::Expect;
use crate::watch::{lock, Progress, Report};
use cuda_core::graph::{Graph, GraphNode};
use cuda_core::{
    Buffer, Device, DeviceMemoryResource, Event, GraphMemoryResource, Kernel, LegacyPinnedMemoryResource,
    ManagedMemoryResource, MemoryResource, PinnedMemoryResource, Stream, VirtualMemoryResource,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The run's settings (from the environment, see `main.rs`).
#[derive(Clone, Debug)]
pub struct Config {
    pub seconds: f64,
    pub threads: usize,
    pub seed: u64,
    pub stall: Duration,
    pub managed: bool,
    pub sanitizer: bool,
    /// Go on after a mismatch (to see how many there are) instead of stopping every thread.
    pub keep_going: bool,
    pub tolerance_mib: u64,
}

/// The kernels: `fill(unsigned* x, unsigned n, unsigned v)`, `add(unsigned* x, unsigned n,
/// unsigned k)` and `spin(long long cycles)`.
pub struct Kernels {
    pub fill: Kernel,
    pub add: Kernel,
    pub spin: Kernel,
}

/// A memory resource of the crate, as the test uses it.
#[derive(Clone)]
pub enum Typed {
    Device(Arc<DeviceMemoryResource>),
    Pinned(Arc<PinnedMemoryResource>),
    Legacy(Arc<LegacyPinnedMemoryResource>),
    Managed(Arc<ManagedMemoryResource>),
    Virtual(Arc<VirtualMemoryResource>),
}

pub struct Resource {
    pub name: &'static str,
    pub typed: Typed,
    /// Whether the device's default pool: allocated through `Device::allocate` at times.
    pub device_default: bool,
    /// The pool's memory in use when the run began (pools only).
    pub used_at_start: Option<u64>,
}

impl Resource {
    pub fn new(name: &'static str, typed: Typed, device_default: bool) -> Resource {
        let mut r = Resource {
            name,
            typed,
            device_default,
            used_at_start: None,
        };
        r.used_at_start = r.used();
        r
    }

    pub fn erased(&self) -> Arc<dyn MemoryResource> {
        match &self.typed {
            Typed::Device(r) => r.clone(),
            Typed::Pinned(r) => r.clone(),
            Typed::Legacy(r) => r.clone(),
            Typed::Managed(r) => r.clone(),
            Typed::Virtual(r) => r.clone(),
        }
    }

    /// Through the resource's own `allocate` (the pools' fast paths), or the trait object's.
    pub fn allocate(&self, device: &Device, bytes: usize, stream: &Stream, typed: bool) -> cuda_core::Result<Buffer> {
        if !typed {
            return Buffer::allocate(self.erased(), bytes, stream);
        }
        match &self.typed {
            Typed::Device(_) if self.device_default => device.allocate(bytes, stream),
            Typed::Device(r) => r.allocate(bytes, stream),
            Typed::Pinned(r) => r.allocate(bytes, stream),
            Typed::Legacy(r) => r.allocate(bytes, stream),
            Typed::Managed(r) => r.allocate(bytes, stream),
            Typed::Virtual(r) => r.allocate(bytes, stream),
        }
    }

    pub fn is_managed(&self) -> bool {
        matches!(self.typed, Typed::Managed(_))
    }

    /// The pool's memory in use now (`None` for resources that are not pools).
    pub fn used(&self) -> Option<u64> {
        self.typed.used()
    }
}

impl Typed {
    /// The pool's memory in use now (`None` for resources that are not pools).
    pub fn used(&self) -> Option<u64> {
        match self {
            Typed::Device(r) => r.used_mem_current().ok(),
            Typed::Pinned(r) => r.used_mem_current().ok(),
            Typed::Managed(r) => r.pool().and_then(|p| p.used_mem_current().ok()),
            Typed::Legacy(_) | Typed::Virtual(_) => None,
        }
    }

    /// Lets the pool give back the memory it keeps (release threshold 0; the driver releases it
    /// at the next synchronisation).
    pub fn release_all(&self) {
        let _ = match self {
            Typed::Device(r) => r.set_release_threshold(0),
            Typed::Pinned(r) => r.set_release_threshold(0),
            Typed::Managed(r) => r.pool().map_or(Ok(()), |p| p.set_release_threshold(0)),
            Typed::Legacy(_) | Typed::Virtual(_) => Ok(()),
        };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// Made by the test (`Device::create_stream`): replaced now and then, captured now and then.
    Owned,
    /// `Device::default_stream()` (the legacy default stream unless per-thread default streams
    /// were asked for): never captured.
    Default,
    /// `Stream::per_thread_default()`: each thread's own; captured by its thread now and then.
    PerThread,
}

/// A stream in the pool.
pub struct SharedStream {
    pub stream: Stream,
    pub what: String,
    pub kind: StreamKind,
    /// Synchronises with the legacy default stream (see `World::default_slot`).
    pub blocking: bool,
    /// The test's capture lock (see the module documentation).
    pub lock: RwLock<()>,
}

impl SharedStream {
    pub fn new(stream: Stream, id: u64, what: String, kind: StreamKind, blocking: bool) -> Arc<SharedStream> {
        Arc::new(SharedStream {
            stream,
            what: format!("stream #{id} ({what})"),
            kind,
            blocking,
            lock: RwLock::new(()),
        })
    }
}

/// How many operations a tracked buffer remembers, for a mismatch's report.
const HISTORY: usize = 10;

/// A buffer whose content the test follows.
pub struct Tracked {
    pub buf: Buffer,
    pub id: u64,
    pub resource: usize,
    pub expect: Expect,
    /// Recorded after each operation on the buffer (see the module documentation).
    pub fence: Event,
    pub history: VecDeque<String>,
}

impl Tracked {
    pub fn note(&mut self, what: String) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(what);
    }

    pub fn elements(&self) -> usize {
        self.buf.size() / 4
    }
}

/// An executable graph in the pool, with what it does.
pub struct GraphEntry {
    pub graph: Graph,
    pub what: String,
    pub recipe: Vec<crate::model::Planned>,
    /// For explicit graphs: the node of each step of the recipe (a chain, no splits).
    pub nodes: Vec<Option<GraphNode>>,
    pub launches: u64,
}

/// Something let go of on another thread: a worker drops what it receives.
pub struct Doomed {
    pub what: &'static str,
    pub value: Box<dyn Send>,
}

/// Counts the host functions and graph callbacks that ran against those that should have.
#[derive(Default)]
pub struct Counters {
    pub host_fns_queued: AtomicU64,
    /// Shared with the host functions (which must be `'static`).
    pub host_fns_ran: Arc<AtomicU64>,
    pub callbacks_ran: Arc<AtomicU64>,
    /// Callbacks the successful launches surely ran, and at most ran.
    pub callbacks_sure: AtomicU64,
    pub callbacks_most: AtomicU64,
}

pub struct World {
    pub cfg: Config,
    pub device: Device,
    pub kernels: Kernels,
    pub resources: Vec<Resource>,
    pub graph_memory: Arc<GraphMemoryResource>,
    /// Elements (u32) of the buffers of each size class; slot `i` holds class `i % len`.
    pub classes: Vec<usize>,
    pub streams: Vec<Mutex<Arc<SharedStream>>>,
    /// The slot of `Device::default_stream()` (after the owned streams). Work queued on the
    /// legacy default stream while a blocking stream is being captured is refused by the driver
    /// (and invalidates that capture): a capture on a blocking stream (owned blocking streams,
    /// the per-thread default stream) also holds this stream's lock exclusively, so that no
    /// tracked work on the legacy stream (which could not record its fence) runs meanwhile.
    pub default_slot: usize,
    pub buffers: Vec<Mutex<Option<Tracked>>>,
    pub junk: Vec<Mutex<Option<Buffer>>>,
    pub events: Vec<Mutex<Option<Event>>>,
    pub graphs: Vec<Mutex<Option<GraphEntry>>>,
    pub mail: Vec<Sender<Doomed>>,
    pub inboxes: Vec<Mutex<Receiver<Doomed>>>,
    pub next_id: AtomicU64,
    pub stop: AtomicBool,
    pub start: Instant,
    pub deadline: Instant,
    pub counters: Arc<Counters>,
    /// Drop errors (`cuda_core::take_drop_errors`, collected after every operation: the crate
    /// keeps the last 64 only), by message: how many, and the operations they followed.
    pub drop_errors: Mutex<std::collections::BTreeMap<String, (u64, Vec<String>)>>,
    /// Mismatches by the memory resource of the buffer.
    pub mismatch_kinds: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    pub report: Arc<Report>,
    /// The workers' progress, then the main thread's.
    pub progress: Arc<Vec<Progress>>,
}

impl World {
    /// Collects the drop errors so far, noting `after` (what the collecting thread just did).
    pub fn collect_drop_errors(&self, after: impl FnOnce() -> String) {
        let errors = cuda_core::take_drop_errors();
        if errors.is_empty() {
            return;
        }
        let after = after();
        let mut all = lock(&self.drop_errors);
        for e in errors {
            let entry = all.entry(e.to_string()).or_default();
            entry.0 += 1;
            if entry.1.len() < 3 {
                entry.1.push(after.clone());
            }
        }
    }

    pub fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// The elements of the buffers in `slot`.
    pub fn elements(&self, slot: usize) -> usize {
        self.classes[slot % self.classes.len()]
    }

    /// The slots of `slot`'s size class other than `slot`.
    pub fn same_class(&self, slot: usize) -> impl Iterator<Item = usize> + '_ {
        let n = self.classes.len();
        (slot % n..self.buffers.len()).step_by(n).filter(move |s| *s != slot)
    }

    /// The stream in `slot` (a clone: the slot may be refilled meanwhile).
    pub fn stream(&self, slot: usize) -> Arc<SharedStream> {
        lock(&self.streams[slot]).clone()
    }

    /// Whether the resource may give buffers of `slot`'s size (virtual memory comes in whole
    /// granules: only the class of that size).
    pub fn fits(&self, resource: usize, slot: usize) -> bool {
        match &self.resources[resource].typed {
            Typed::Virtual(v) => self.elements(slot) * 4 == v.granularity(),
            _ => true,
        }
    }
}

/// Makes `stream` wait for the buffer's last operation (before an operation on it there).
pub fn order_after(t: &Tracked, stream: &Stream) -> cuda_core::Result<()> {
    stream.wait_event(&t.fence)
}

/// Records the buffer's fence on `stream`, after an operation there. A record refused for a
/// moment is retried for up to 5 s: the next operation on the buffer must follow this one. Then
/// (or at once when the context failed) the error, worded so that it never counts as a refusal.
pub fn fence(t: &Tracked, stream: &Stream, progress: &Progress, now_ms: impl Fn() -> u64) -> cuda_core::Result<()> {
    let start = std::time::Instant::now();
    let mut tries = 0u32;
    loop {
        match stream.record(&t.fence) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_launch_failure() => return Err(e),
            Err(e) if start.elapsed() > Duration::from_secs(5) => {
                return Err(cuda_core::CudaError::InvalidArgument(format!(
                    "the fence of buffer #{} could not be recorded for 5 s ({tries} tries; the last error: {e})",
                    t.id
                )))
            }
            Err(e) => {
                tries += 1;
                if tries == 1 {
                    progress.begin(now_ms(), format!("retrying the fence of buffer #{} ({e})", t.id));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
