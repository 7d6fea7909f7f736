//! A worker: a loop of random operations on the shared objects. Here: the loop, how results are
//! counted, and the operations on buffers, streams, events and junk; graphs are in `graphs.rs`.

use crate::model::{Change, Expect};
use crate::rng::Rng;
use crate::watch::{lock, reason, Stats};
use crate::world::{fence, order_after, Doomed, SharedStream, StreamKind, Tracked, World};
use cuda_core::{launch, Buffer, CudaError, EventOptions, LaunchConfig, MemoryLocation, Stream, StreamOptions};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Fill,
    FillByte,
    KernelFill,
    KernelAdd,
    Copy,
    CopyFromHost,
    CopyFromVecAsync,
    Verify,
    VerifyAsync,
    Replace,
    Prefetch,
    Discard,
    SetDeallocationStream,
    ReplaceStream,
    StreamSync,
    StreamWait,
    Synchronized,
    HostFunc,
    Spin,
    DeviceSync,
    EventRecord,
    EventQuery,
    ReplaceEvent,
    JunkFill,
    ReplaceJunk,
    Capture,
    Explicit,
    Launch,
    Update,
    NodeUpdate,
    Upload,
    DropGraph,
}

/// Every operation, its name in the counts, and its weight.
/// The operations' weights: `OPS`'s, with those `CUDA_STRESS_SKIP` names (a comma-separated
/// list of operation names, as the report prints them) at 0, to narrow a failure down.
fn weights() -> Vec<u32> {
    OPS.iter()
        .map(|(_, name, w)| if skipped(name) { 0 } else { *w })
        .collect()
}

/// Whether `CUDA_STRESS_SKIP` names `name`: an operation of [`OPS`], or a step inside one (such
/// as "capture waits for an outside event" or "record join"), which is then not taken.
pub fn skipped(name: &str) -> bool {
    static SKIP: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SKIP.get_or_init(|| {
        let skip = std::env::var("CUDA_STRESS_SKIP").unwrap_or_default();
        skip.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
    .iter()
    .any(|s| s == name)
}

pub const OPS: &[(Op, &str, u32)] = &[
    (Op::Fill, "fill_u32", 10),
    (Op::FillByte, "fill_u8/u16", 3),
    (Op::KernelFill, "kernel fill", 8),
    (Op::KernelAdd, "kernel add", 6),
    (Op::Copy, "copy between buffers", 8),
    (Op::CopyFromHost, "copy_from_host", 4),
    (Op::CopyFromVecAsync, "copy_from_vec_async", 3),
    (Op::Verify, "verify (to_vec)", 10),
    (Op::VerifyAsync, "verify (to_vec_async)", 3),
    (Op::Replace, "replace buffer", 5),
    (Op::Prefetch, "prefetch (managed)", 2),
    (Op::Discard, "discard (managed)", 1),
    (Op::SetDeallocationStream, "set_deallocation_stream", 1),
    (Op::ReplaceStream, "replace stream", 1),
    (Op::StreamSync, "stream sync", 2),
    (Op::StreamWait, "stream wait", 2),
    (Op::Synchronized, "stream future", 2),
    (Op::HostFunc, "host function", 4),
    (Op::Spin, "spin kernel", 2),
    (Op::DeviceSync, "device sync", 1),
    (Op::EventRecord, "event record", 2),
    (Op::EventQuery, "event query/sync/future/elapsed", 2),
    (Op::ReplaceEvent, "replace event", 1),
    (Op::JunkFill, "junk fill", 3),
    (Op::ReplaceJunk, "replace junk buffer", 1),
    (Op::Capture, "capture graph", 4),
    (Op::Explicit, "explicit graph", 2),
    (Op::Launch, "graph launch", 8),
    (Op::Update, "graph update", 2),
    (Op::NodeUpdate, "graph node update", 2),
    (Op::Upload, "graph upload", 1),
    (Op::DropGraph, "drop graph", 1),
];

/// Waits for `f` on this thread (parked until woken; the watchdog catches a wake that never
/// comes).
pub fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A lock of the test's own, held shared.
pub fn read(l: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// A lock of the test's own, held exclusively.
pub fn write(l: &RwLock<()>) -> RwLockWriteGuard<'_, ()> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

pub struct Worker<'w> {
    pub w: &'w World,
    pub index: usize,
    pub rng: Rng,
    pub stats: Stats,
}

impl<'w> Worker<'w> {
    pub fn new(w: &'w World, index: usize) -> Worker<'w> {
        Worker {
            w,
            index,
            rng: Rng::new(w.cfg.seed, index as u64),
            stats: Stats::default(),
        }
    }

    pub fn run(&mut self) {
        self.w.device.set_current().expect("the device made current");
        let weights = weights();
        while !self.w.should_stop() {
            self.drain_inbox();
            let i = self.rng.weighted(weights.iter().copied());
            let (op, name, _) = OPS[i];
            self.begin(name.to_string());
            self.dispatch(op, name);
            self.w.collect_drop_errors(|| self.context());
        }
        self.drain_inbox();
        self.begin("syncing its per-thread default stream before the thread ends".into());
        if let Err(e) = Stream::per_thread_default().sync() {
            self.err("final per-thread stream sync", &e, &[]);
        }
        self.w.progress[self.index].finish();
    }

    fn dispatch(&mut self, op: Op, name: &'static str) {
        match op {
            Op::Fill
            | Op::FillByte
            | Op::KernelFill
            | Op::KernelAdd
            | Op::CopyFromHost
            | Op::CopyFromVecAsync
            | Op::Prefetch
            | Op::Discard
            | Op::SetDeallocationStream => self.write(op, name),
            Op::Copy => self.copy(name),
            Op::Verify => self.verify(name, false),
            Op::VerifyAsync => self.verify(name, true),
            Op::Replace => self.replace(name),
            Op::ReplaceStream => self.replace_stream(name),
            Op::StreamSync => self.stream_sync(name),
            Op::StreamWait => self.stream_wait(name),
            Op::Synchronized => self.synchronized(name),
            Op::HostFunc => self.host_func(name),
            Op::Spin => self.spin(name),
            Op::DeviceSync => {
                let r = self.w.device.sync();
                self.count(name, r, &[]);
            }
            Op::EventRecord => self.event_record(name),
            Op::EventQuery => self.event_query(name),
            Op::ReplaceEvent => self.replace_event(name),
            Op::JunkFill => self.junk_fill(name),
            Op::ReplaceJunk => self.replace_junk(name),
            Op::Capture => self.capture(name),
            Op::Explicit => self.explicit(name),
            Op::Launch => self.launch_graph(name),
            Op::Update => self.update_graph(name),
            Op::NodeUpdate => self.update_node(name),
            Op::Upload => self.upload(name),
            Op::DropGraph => self.drop_graph(name),
        }
    }

    // ---- bookkeeping

    /// Notes what the thread does now (for the watchdog).
    pub fn begin(&self, what: String) {
        self.w.progress[self.index].begin(self.w.now_ms(), what);
    }

    fn context(&self) -> String {
        format!("worker {}, in: {}", self.index, self.w.progress[self.index].current())
    }

    pub fn done(&mut self, op: &'static str) {
        self.stats.ok(op);
    }

    /// Counts an error of `op`: a refusal the test expects (a capture in the way, or a reason
    /// among `allowed`, matched without case), or a failure, reported. Returns whether it was
    /// a refusal.
    pub fn err(&mut self, op: &'static str, e: &CudaError, allowed: &[&str]) -> bool {
        let text = e.to_string().to_lowercase();
        let expected = !e.is_launch_failure()
            && (text.contains("captur") || allowed.iter().any(|a| text.contains(&a.to_lowercase())));
        if expected {
            self.stats.refused(op, reason(e));
        } else {
            self.stats.failed(op);
            let context = self.context();
            self.w.report.unexpected(op, e, context);
            if e.is_launch_failure() {
                // The context is gone: every later call fails.
                self.w.stop.store(true, Ordering::SeqCst);
            }
        }
        expected
    }

    /// Reports an error of `op` as a failure, whatever it says.
    pub fn fail(&mut self, op: &'static str, e: &CudaError) {
        self.stats.failed(op);
        let context = self.context();
        self.w.report.unexpected(op, e, context);
    }

    pub fn count<T>(&mut self, op: &'static str, r: cuda_core::Result<T>, allowed: &[&str]) -> Option<T> {
        match r {
            Ok(v) => {
                self.done(op);
                Some(v)
            }
            Err(e) => {
                self.err(op, &e, allowed);
                None
            }
        }
    }

    /// Records `t`'s fence on `stream` (see `world::fence`); when it cannot, the buffer's
    /// content is no longer followed (the failure is reported).
    pub fn fence(&mut self, op: &'static str, t: &mut Tracked, stream: &Stream) {
        let w = self.w;
        if let Err(e) = fence(t, stream, &w.progress[self.index], || w.now_ms()) {
            self.fail(op, &e);
            t.expect = Expect::Unknown;
            t.note(format!("fence lost: {e}"));
        }
    }

    /// A random stream of the pool.
    pub fn pick_stream(&mut self) -> Arc<SharedStream> {
        let slot = self.rng.below(self.w.streams.len());
        self.w.stream(slot)
    }

    pub fn resource_name(&self, t: &Tracked) -> &'static str {
        self.w.resources[t.resource].name
    }

    fn drain_inbox(&mut self) {
        let inbox = lock(&self.w.inboxes[self.index]);
        while let Ok(Doomed { what, value }) = inbox.try_recv() {
            drop(value);
            self.stats.event("objects dropped on another thread");
            self.stats.event(format!("dropped on another thread: {what}"));
        }
    }

    /// Lets go of `value`: here, on another worker, or (with a stream) inside a host function
    /// queued there, which the crate must drop off the driver's thread.
    pub fn dispose(&mut self, what: &'static str, value: Box<dyn Send>, stream: Option<&Stream>) {
        let choice = self.rng.below(4);
        if choice < 2 && self.w.mail.len() > 1 {
            let mut to = self.rng.below(self.w.mail.len() - 1);
            if to >= self.index {
                to += 1;
            }
            // A worker that has ended no longer receives: the value comes back, dropped here.
            let _ = self.w.mail[to % self.w.mail.len()].send(Doomed { what, value });
            self.stats.event("objects sent to another thread to drop");
            return;
        }
        if let (2, Some(stream)) = (choice, stream) {
            let ran = self.w.counters.host_fns_ran.clone();
            let mut held = Some(value);
            match stream.launch_host_func(move || {
                drop(held.take());
                ran.fetch_add(1, Ordering::SeqCst);
            }) {
                Ok(()) => {
                    self.w.counters.host_fns_queued.fetch_add(1, Ordering::SeqCst);
                    self.stats.event("objects dropped inside a host function");
                }
                Err(e) => {
                    // The closure (and the value) were dropped here.
                    self.err("host function dropping an object", &e, &[]);
                }
            }
            return;
        }
        drop(value);
        self.stats.event("objects dropped at once");
    }

    /// Checks what a read found against what the buffer should hold.
    pub fn compare(&mut self, op: &'static str, slot: usize, t: &Tracked, got: &[u32], stream: &str) {
        if got.len() != t.elements() {
            self.w.report.mismatch(format!(
                "{op} of buffer #{} read {} elements, not {}",
                t.id,
                got.len(),
                t.elements()
            ));
            return;
        }
        if !t.expect.is_known() {
            self.stats.event("reads of buffers of unknown content");
            return;
        }
        let bad = got.iter().filter(|x| !t.expect.admits(**x)).count();
        if bad == 0 {
            self.stats.event("buffer contents verified");
            return;
        }
        let first = got.iter().position(|x| !t.expect.admits(*x)).unwrap_or(0);
        let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
        for x in got {
            if seen.len() < 8 || seen.contains_key(x) {
                *seen.entry(*x).or_default() += 1;
            }
        }
        let seen: Vec<String> = seen.iter().map(|(v, n)| format!("{v:#010x} x{n}")).collect();
        let history: Vec<&str> = t.history.iter().map(String::as_str).collect();
        self.w.report.mismatch(format!(
            "{op} of buffer #{} (slot {slot}, {} memory, {} bytes) on {stream} by worker {}: {bad} of {} elements are not {}; the first at [{first}] is {:#010x}; values found: {}; the buffer's last operations, oldest first: [{}]",
            t.id,
            self.resource_name(t),
            t.buf.size(),
            self.index,
            got.len(),
            t.expect,
            got[first],
            seen.join(", "),
            history.join("; ")
        ));
        if !self.w.cfg.keep_going {
            self.w.stop.store(true, Ordering::SeqCst);
        }
        *lock(&self.w.mismatch_kinds).entry(self.resource_name(t)).or_default() += 1;
        // Read once more, after a host wait for everything on the device: a read that was
        // wrong (stale) or content that is.
        let again = t
            .fence
            .sync()
            .and_then(|()| self.w.device.create_stream(Default::default()))
            .and_then(|s| t.buf.to_vec::<u32>(&s));
        let verdict = match again {
            Ok(v) if v.iter().all(|x| t.expect.admits(*x)) => {
                "a second read finds the expected content: the first read was stale".to_string()
            }
            Ok(v) => {
                let same = v == got;
                format!(
                    "a second read finds {} of {} elements still wrong ({} the first read)",
                    v.iter().filter(|x| !t.expect.admits(**x)).count(),
                    v.len(),
                    if same { "identical to" } else { "different from" }
                )
            }
            Err(e) => format!("a second read failed: {e}"),
        };
        self.w.report.mismatch_note(t.id, verdict);
    }

    // ---- tracked buffers

    /// A write (or other operation) on one tracked buffer, on a random stream.
    fn write(&mut self, op: Op, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let _shared = read(&s.lock);
        let managed_only = matches!(op, Op::Prefetch | Op::Discard);
        // Managed operations look for a managed buffer among a few slots.
        let mut found = None;
        for _ in 0..if managed_only { 6 } else { 1 } {
            let slot = self.rng.below(w.buffers.len());
            let guard = lock(&w.buffers[slot]);
            let fits = guard
                .as_ref()
                .is_some_and(|t| !managed_only || w.resources[t.resource].is_managed());
            if fits {
                found = Some((slot, guard));
                break;
            }
        }
        let Some((slot, mut guard)) = found else {
            return self.stats.skipped(name);
        };
        let t = guard.as_mut().expect("checked above");
        let value = self.rng.u32();
        let n = t.elements();
        self.begin(format!(
            "{name} (value {value:#x}) on buffer #{} (slot {slot}, {}) on {}",
            t.id,
            self.resource_name(t),
            s.what
        ));
        if let Err(e) = order_after(t, &s.stream) {
            self.err(name, &e, &[]);
            return;
        }
        let stream = &s.stream;
        let mut allowed: &[&str] = &[];
        let (change, result) = match op {
            Op::Fill => (Change::Set(value), t.buf.fill_u32(value, stream)),
            Op::FillByte => {
                let b = value as u8;
                let r = if self.rng.percent(50) {
                    t.buf.fill_u8(b, stream)
                } else {
                    t.buf.fill_u16(u16::from(b) * 0x0101, stream)
                };
                (Change::Set(u32::from(b) * 0x0101_0101), r)
            }
            Op::KernelFill => {
                let config = LaunchConfig::new((n as u32).div_ceil(256), 256);
                // SAFETY: fill(unsigned*, unsigned n, unsigned v) writes the buffer's n elements;
                // the buffer's work is ordered by its fence (no race with other work on it).
                let r = unsafe { launch(stream, &config, &w.kernels.fill, (&t.buf, n as u32, value)) };
                (Change::Set(value), r)
            }
            Op::KernelAdd => {
                let k = value % 1000 + 1;
                let config = LaunchConfig::new((n as u32).div_ceil(256), 256);
                // SAFETY: add(unsigned*, unsigned n, unsigned k) updates the buffer's n elements;
                // ordered as above.
                let r = unsafe { launch(stream, &config, &w.kernels.add, (&t.buf, n as u32, k)) };
                (Change::Add(k), r)
            }
            Op::CopyFromHost => (Change::Set(value), t.buf.copy_from_host(&vec![value; n], stream)),
            Op::CopyFromVecAsync => {
                let awaited = self.rng.percent(60);
                let r = t.buf.copy_from_vec_async(vec![value; n], stream).and_then(|done| {
                    if awaited {
                        block_on(done)
                    } else {
                        drop(done); // the copy still happens: the vector is kept until then
                        Ok(())
                    }
                });
                (Change::Set(value), r)
            }
            Op::Prefetch => {
                allowed = &["not_supported"];
                let r = if self.rng.percent(60) {
                    t.buf.prefetch(w.device, stream)
                } else {
                    t.buf.prefetch(MemoryLocation::Host, stream)
                };
                (Change::None, r)
            }
            Op::Discard => {
                allowed = &[
                    "not_supported",
                    "holds this buffer",
                    "does not accept the legacy default stream",
                ];
                (Change::Garbage, t.buf.discard(stream))
            }
            Op::SetDeallocationStream => (Change::None, t.buf.set_deallocation_stream(stream)),
            _ => unreachable!("not a single-buffer operation: {op:?}"),
        };
        self.fence(name, t, stream);
        let ok = result.is_ok();
        t.expect = change.apply(&t.expect, ok);
        t.note(format!(
            "{name} {change:?} on {} by worker {}: {} -> {}",
            s.what,
            self.index,
            if ok { "ok" } else { "failed" },
            t.expect
        ));
        match result {
            Ok(()) => self.done(name),
            Err(e) => {
                self.err(name, &e, allowed);
            }
        }
    }

    /// A whole-buffer copy between two tracked buffers of the same size.
    fn copy(&mut self, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let _shared = read(&s.lock);
        let dst = self.rng.below(w.buffers.len());
        let others: Vec<usize> = w.same_class(dst).collect();
        if others.is_empty() {
            return self.stats.skipped(name);
        }
        let src = *self.rng.pick(&others);
        let (lo, hi) = (dst.min(src), dst.max(src));
        let mut g_lo = lock(&w.buffers[lo]);
        let mut g_hi = lock(&w.buffers[hi]);
        let (d, sr) = if dst == lo {
            (g_lo.as_mut(), g_hi.as_mut())
        } else {
            (g_hi.as_mut(), g_lo.as_mut())
        };
        let (Some(d), Some(sr)) = (d, sr) else {
            return self.stats.skipped(name);
        };
        self.begin(format!(
            "{name}: buffer #{} ({}) into buffer #{} ({}) on {}",
            sr.id,
            self.resource_name(sr),
            d.id,
            self.resource_name(d),
            s.what
        ));
        for t in [&*d, &*sr] {
            if let Err(e) = order_after(t, &s.stream) {
                self.err(name, &e, &[]);
                return;
            }
        }
        let r = if self.rng.percent(50) {
            sr.buf.copy_to(&d.buf, &s.stream)
        } else {
            d.buf.copy_from(&sr.buf, &s.stream)
        };
        self.fence(name, d, &s.stream);
        self.fence(name, sr, &s.stream);
        d.expect = if r.is_ok() {
            sr.expect.clone()
        } else {
            d.expect.union(&sr.expect)
        };
        let what = format!(
            "{name} from #{} ({}, holding {}) into #{} on {} by worker {}: {} -> {}",
            sr.id,
            self.resource_name(sr),
            sr.expect,
            d.id,
            s.what,
            self.index,
            if r.is_ok() { "ok" } else { "failed" },
            d.expect
        );
        d.note(what.clone());
        sr.note(what);
        self.count(name, r, &[]);
    }

    /// Reads a tracked buffer back and checks it.
    fn verify(&mut self, name: &'static str, asynchronous: bool) {
        let w = self.w;
        let s = self.pick_stream();
        let _shared = read(&s.lock);
        let slot = self.rng.below(w.buffers.len());
        let mut guard = lock(&w.buffers[slot]);
        let Some(t) = guard.as_mut() else {
            return self.stats.skipped(name);
        };
        let host_wait = self.rng.percent(30);
        self.begin(format!(
            "{name} of buffer #{} (slot {slot}, {}) on {}{}",
            t.id,
            self.resource_name(t),
            s.what,
            if host_wait { " after a host wait" } else { "" }
        ));
        let ordered = if host_wait {
            t.fence.sync()
        } else {
            order_after(t, &s.stream)
        };
        if let Err(e) = ordered {
            self.err(name, &e, &[]);
            return;
        }
        let got = if asynchronous {
            let pending = t.buf.to_vec_async::<u32>(&s.stream);
            self.fence(name, t, &s.stream);
            pending.and_then(block_on)
        } else {
            let r = if self.rng.percent(50) {
                t.buf.to_vec::<u32>(&s.stream)
            } else {
                let mut v = vec![0u32; t.elements()];
                t.buf.copy_to_host(&mut v, &s.stream).map(|()| v)
            };
            self.fence(name, t, &s.stream);
            r
        };
        t.note(format!(
            "{name} on {} by worker {}: {}",
            s.what,
            self.index,
            if got.is_ok() { "read" } else { "failed" }
        ));
        match got {
            Ok(v) => {
                self.compare(name, slot, t, &v, &s.what);
                self.done(name);
            }
            Err(e) => {
                self.err(name, &e, &[]);
            }
        }
    }

    /// Replaces the buffer of a slot: the old one is let go of (here, elsewhere, in a host
    /// function, or closed), a new one allocated from a random resource on a random stream.
    fn replace(&mut self, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let _shared = read(&s.lock);
        let slot = self.rng.below(w.buffers.len());
        let mut guard = lock(&w.buffers[slot]);
        let resource = loop {
            let r = self.rng.below(w.resources.len());
            if w.fits(r, slot) {
                break r;
            }
        };
        self.begin(format!(
            "{name}: slot {slot} (buffer {}) with {} memory on {}",
            guard.as_ref().map_or("none".into(), |t| format!("#{}", t.id)),
            w.resources[resource].name,
            s.what
        ));
        if let Some(mut old) = guard.take() {
            match self.rng.below(5) {
                0 => {
                    let r = old.buf.close(Some(&s.stream));
                    self.count("close buffer", r, &[]);
                }
                1 => {
                    let r = old.buf.set_deallocation_stream(&s.stream);
                    self.count("set_deallocation_stream before a drop", r, &[]);
                    self.dispose("a tracked buffer", Box::new(old), Some(&s.stream));
                }
                _ => self.dispose("a tracked buffer", Box::new(old), Some(&s.stream)),
            }
        }
        let fence = match w.device.create_event(EventOptions::default()) {
            Ok(e) => e,
            Err(e) => {
                self.err(name, &e, &[]);
                return;
            }
        };
        let n = w.elements(slot);
        let value = self.rng.u32();
        let init = self.rng.below(3);
        let allocated = if init == 0 {
            Buffer::from_slice(w.resources[resource].erased(), &vec![value; n], &s.stream)
        } else {
            let typed = self.rng.percent(50);
            w.resources[resource].allocate(&w.device, n * 4, &s.stream, typed)
        };
        let buf = match allocated {
            Ok(b) => b,
            Err(e) => {
                self.err(name, &e, &[]);
                return;
            }
        };
        let mut t = Tracked {
            buf,
            id: w.id(),
            resource,
            expect: if init == 0 {
                Expect::value(value)
            } else {
                Expect::Unknown
            },
            fence,
            history: VecDeque::new(),
        };
        t.note(format!(
            "allocated ({}) on {} by worker {}{}",
            w.resources[resource].name,
            s.what,
            self.index,
            if init == 0 {
                format!(" from a slice of {value:#x}")
            } else {
                String::new()
            }
        ));
        if init == 1 {
            // Filled at once on its allocation stream (ordered after the allocation there).
            let r = t.buf.fill_u32(value, &s.stream);
            t.expect = Change::Set(value).apply(&t.expect, r.is_ok());
            t.note(format!("fill_u32 {value:#x} after the allocation: {}", r.is_ok()));
            self.count("fill after allocation", r, &[]);
        }
        if init != 2 {
            self.fence(name, &mut t, &s.stream);
        }
        // (Left unfenced otherwise: its first use on another stream must follow the allocation
        // by the crate's doing.)
        *guard = Some(t);
        self.done(name);
    }

    // ---- streams

    fn replace_stream(&mut self, name: &'static str) {
        let w = self.w;
        let owned: Vec<usize> = (0..w.streams.len())
            .filter(|i| w.stream(*i).kind == StreamKind::Owned)
            .collect();
        if owned.is_empty() {
            return self.stats.skipped(name);
        }
        let slot = *self.rng.pick(&owned);
        let (least, greatest) = w
            .device
            .primary_context()
            .and_then(|c| c.stream_priority_range())
            .unwrap_or((0, 0));
        let priority = match self.rng.below(3) {
            0 => None,
            1 => Some(greatest),
            _ => Some(greatest + self.rng.below((least - greatest + 1).max(1) as usize) as i32),
        };
        let nonblocking = self.rng.percent(70);
        self.begin(format!(
            "{name}: slot {slot} with a new stream (priority {priority:?}, nonblocking {nonblocking})"
        ));
        let stream = match w.device.create_stream(StreamOptions { nonblocking, priority }) {
            Ok(s) => s,
            Err(e) => {
                self.err(name, &e, &[]);
                return;
            }
        };
        let new = SharedStream::new(
            stream,
            w.id(),
            format!(
                "owned, priority {priority:?}, {}",
                if nonblocking { "non-blocking" } else { "blocking" }
            ),
            StreamKind::Owned,
            !nonblocking,
        );
        let old = std::mem::replace(&mut *lock(&w.streams[slot]), new);
        debug_assert!(slot < w.default_slot, "owned streams come first (the lock order)");
        let other = self.pick_stream();
        if Arc::ptr_eq(&other, &old) {
            self.dispose("a stream", Box::new(old), None);
        } else {
            self.dispose("a stream", Box::new(old), Some(&other.stream));
        }
        self.done(name);
    }

    fn stream_sync(&mut self, name: &'static str) {
        let s = self.pick_stream();
        // Without the test's lock at times: a sync of a stream another thread captures
        // invalidates that capture, which the crate and the capturing thread must survive.
        let locked = self.rng.percent(70);
        let _shared = locked.then(|| read(&s.lock));
        self.begin(format!("{name} of {} (locked: {locked})", s.what));
        let r = s.stream.sync();
        self.count(name, r, &[]);
    }

    fn stream_wait(&mut self, name: &'static str) {
        let w = self.w;
        let (i, j) = (self.rng.below(w.streams.len()), self.rng.below(w.streams.len()));
        if i == j {
            return self.stats.skipped(name);
        }
        let (a, b) = (w.stream(i.min(j)), w.stream(i.max(j)));
        if Arc::ptr_eq(&a, &b) {
            return self.stats.skipped(name);
        }
        let _la = read(&a.lock);
        let _lb = read(&b.lock);
        let (waiter, waited) = if self.rng.percent(50) { (&a, &b) } else { (&b, &a) };
        self.begin(format!("{name}: {} waits for {}", waiter.what, waited.what));
        let r = waiter.stream.wait(&waited.stream);
        self.count(name, r, &[]);
    }

    fn synchronized(&mut self, name: &'static str) {
        let s = self.pick_stream();
        let awaited = self.rng.percent(70);
        self.begin(format!("{name} of {} (awaited: {awaited})", s.what));
        let r = s.stream.synchronized().and_then(|done| {
            if awaited {
                block_on(done)
            } else {
                drop(done);
                Ok(())
            }
        });
        self.count(name, r, &[]);
    }

    fn host_func(&mut self, name: &'static str) {
        let s = self.pick_stream();
        let sleep = if self.rng.percent(30) {
            Duration::from_micros(self.rng.below(200) as u64)
        } else {
            Duration::ZERO
        };
        self.begin(format!("{name} on {} (sleeping {sleep:?})", s.what));
        let ran = self.w.counters.host_fns_ran.clone();
        let r = s.stream.launch_host_func(move || {
            if !sleep.is_zero() {
                std::thread::sleep(sleep);
            }
            ran.fetch_add(1, Ordering::SeqCst);
        });
        if r.is_ok() {
            self.w.counters.host_fns_queued.fetch_add(1, Ordering::SeqCst);
        }
        self.count(name, r, &[]);
    }

    fn spin(&mut self, name: &'static str) {
        let s = self.pick_stream();
        let cycles = 2_000 + self.rng.below(200_000) as i64;
        self.begin(format!("{name} of {cycles} cycles on {}", s.what));
        // SAFETY: spin(long long) touches no memory.
        let r = unsafe { launch(&s.stream, &LaunchConfig::new(1, 1), &self.w.kernels.spin, (cycles,)) };
        self.count(name, r, &[]);
    }

    // ---- events

    fn event_record(&mut self, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let slot = self.rng.below(w.events.len());
        let guard = lock(&w.events[slot]);
        let Some(e) = guard.as_ref() else {
            return self.stats.skipped(name);
        };
        self.begin(format!("{name}: event slot {slot} on {}", s.what));
        let r = s.stream.record(e);
        self.count(name, r, &[]);
    }

    fn event_query(&mut self, name: &'static str) {
        let w = self.w;
        let slot = self.rng.below(w.events.len());
        let guard = lock(&w.events[slot]);
        let Some(e) = guard.as_ref() else {
            return self.stats.skipped(name);
        };
        let how = self.rng.below(4);
        self.begin(format!("{name}: event slot {slot}, query {how}"));
        match how {
            // INVALID_VALUE: the event's last record was made inside a capture (by this test's
            // unlocked records on streams other threads capture), which the driver does not
            // take for a point to query or wait for once that capture is over.
            0 => {
                let r = e.is_done();
                self.count("event is_done", r, &["invalid_value"]);
            }
            1 => {
                let r = e.sync();
                self.count("event sync", r, &["invalid_value"]);
            }
            2 => {
                let r = e.completed().and_then(block_on);
                self.count("event future", r, &["invalid_value"]);
            }
            _ => {
                let other = self.rng.below(w.events.len());
                if other == slot {
                    return self.stats.skipped(name);
                }
                let Ok(g) = w.events[other].try_lock() else {
                    return self.stats.skipped(name);
                };
                let Some(start) = g.as_ref() else {
                    return self.stats.skipped(name);
                };
                let r = e.elapsed_time_since(start);
                // Refused: events without timing, not recorded, or not complete yet.
                self.count(
                    "event elapsed time",
                    r,
                    &[
                        "timing enabled",
                        "must be recorded",
                        "not completed",
                        "into a graph capture",
                    ],
                );
            }
        }
    }

    fn replace_event(&mut self, name: &'static str) {
        let w = self.w;
        let slot = self.rng.below(w.events.len());
        let options = EventOptions {
            timing_enabled: self.rng.percent(50),
            blocking_sync: self.rng.percent(30),
            ipc_enabled: false,
        };
        self.begin(format!("{name}: slot {slot} with {options:?}"));
        let Some(new) = self.count(name, w.device.create_event(options), &[]) else {
            return;
        };
        let old = lock(&w.events[slot]).replace(new);
        if let Some(old) = old {
            let s = self.pick_stream();
            self.dispose("an event", Box::new(old), Some(&s.stream));
        }
    }

    // ---- junk buffers (untracked content)

    fn junk_fill(&mut self, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let slot = self.rng.below(w.junk.len());
        let guard = lock(&w.junk[slot]);
        let Some(b) = guard.as_ref() else {
            return self.stats.skipped(name);
        };
        self.begin(format!("{name}: junk slot {slot} on {} (no lock)", s.what));
        let r = if self.rng.percent(50) {
            b.fill_u32(self.rng.u32(), &s.stream)
        } else {
            b.fill_u8(self.rng.u32() as u8, &s.stream)
        };
        self.count(name, r, &["graph memory"]);
    }

    fn replace_junk(&mut self, name: &'static str) {
        let w = self.w;
        let s = self.pick_stream();
        let slot = self.rng.below(w.junk.len());
        let resource = self.rng.below(w.resources.len());
        let bytes = 4 * (1 + self.rng.below(16 * 1024));
        self.begin(format!(
            "{name}: junk slot {slot}, {bytes} bytes of {} memory on {} (no lock)",
            w.resources[resource].name, s.what
        ));
        // Without the test's lock: allocated on a stream another thread may be capturing, it
        // may become graph memory of that capture (usable only there), or be refused.
        let r = w.resources[resource].allocate(&w.device, bytes, &s.stream, self.rng.percent(50));
        let Some(new) = self.count(name, r, &["not_supported", "not permitted", "graph memory"]) else {
            return;
        };
        let old = lock(&w.junk[slot]).replace(new);
        if let Some(old) = old {
            self.dispose("a junk buffer", Box::new(old), Some(&s.stream));
        }
    }
}
