//! Graph operations of a worker: captures (in every mode, on a builder's own stream, a shared
//! stream, the thread's per-thread default stream, the default stream), explicit graphs,
//! launches, whole-graph and per-node updates, uploads, drops.

use crate::model::{apply, effects, BufRef, Buffers, Expect, Mark, Planned, Step};
use crate::ops::{block_on, read, write, Worker};
use crate::watch::lock;
use crate::world::{order_after, GraphEntry, SharedStream, StreamKind, Tracked};
use cuda_core::graph::{CaptureMode, GraphBuilder, GraphDefinition, GraphNode};
use cuda_core::{launch, CudaError, LaunchConfig, Stream};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

const MODES: [CaptureMode; 3] = [CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed];

/// Errors a recording may meet besides captures in the way: graph memory used where it cannot
/// be, resources that cannot allocate on a capturing stream.
const RECORD_REFUSALS: &[&str] = &["graph memory", "not_supported", "not permitted", "invalidated"];

/// The buffers a launch changes: the locked slots, by index.
struct Locked<'a, 'g>(&'a mut BTreeMap<usize, MutexGuard<'g, Option<Tracked>>>);

impl Buffers for Locked<'_, '_> {
    fn get(&self, r: BufRef) -> Option<Expect> {
        self.0
            .get(&r.slot)
            .and_then(|g| g.as_ref())
            .filter(|t| t.id == r.id)
            .map(|t| t.expect.clone())
    }
    fn set(&mut self, r: BufRef, e: Expect) {
        if let Some(t) = self
            .0
            .get_mut(&r.slot)
            .and_then(|g| g.as_mut())
            .filter(|t| t.id == r.id)
        {
            t.expect = e;
        }
    }
}

/// Adds a node after `$prev` (a `GraphNode`) or, without one, as an entry point of `$g`: the
/// two types have the same adders.
macro_rules! add_node {
    ($g:expr, $prev:expr, |$x:ident| $body:expr) => {
        match $prev {
            Some($x) => $body,
            None => {
                let $x = $g;
                $body
            }
        }
    };
}

/// The slots a recipe names.
fn slots(recipe: &[Planned], out: &mut BTreeSet<usize>) {
    for p in recipe {
        match &p.step {
            Step::Fill { dst, .. }
            | Step::FillByte { dst, .. }
            | Step::KernelFill { dst, .. }
            | Step::KernelAdd { dst, .. }
            | Step::ViaTemp { dst, .. } => {
                out.insert(dst.slot);
            }
            Step::Copy { dst, src } => {
                out.insert(dst.slot);
                out.insert(src.slot);
            }
            Step::Split(a, b) => {
                slots(a, out);
                slots(b, out);
            }
            Step::Callback | Step::JunkFill { .. } => {}
        }
    }
}

/// The buffers a recipe names, by slot.
fn refs(recipe: &[Planned], out: &mut BTreeSet<(usize, u64)>) {
    for p in recipe {
        match &p.step {
            Step::Fill { dst, .. }
            | Step::FillByte { dst, .. }
            | Step::KernelFill { dst, .. }
            | Step::KernelAdd { dst, .. }
            | Step::ViaTemp { dst, .. } => {
                out.insert((dst.slot, dst.id));
            }
            Step::Copy { dst, src } => {
                out.insert((dst.slot, dst.id));
                out.insert((src.slot, src.id));
            }
            Step::Split(a, b) => {
                refs(a, out);
                refs(b, out);
            }
            Step::Callback | Step::JunkFill { .. } => {}
        }
    }
}

/// The marks of a recipe's steps, in order (for buffer histories: which nodes a launch ran).
fn marks(recipe: &[Planned]) -> String {
    recipe
        .iter()
        .map(|p| format!("{:?}", p.mark))
        .collect::<Vec<_>>()
        .join(",")
}

fn unplanned(slot: usize) -> BufRef {
    BufRef { slot, id: u64::MAX }
}

impl Worker<'_> {
    // ---- planning

    /// A random slot, of `parity` (slot % 2) when given.
    fn pick_slot(&mut self, parity: Option<usize>) -> usize {
        loop {
            let s = self.rng.below(self.w.buffers.len());
            if parity.is_none_or(|p| s % 2 == p) {
                return s;
            }
        }
    }

    fn plan_step(&mut self, captured: bool, parity: Option<usize>) -> Step {
        // fill, fill byte, kernel fill, kernel add, copy, via temp, callback, junk fill
        let weights: [u32; 8] = if captured {
            [4, 1, 3, 3, 3, 2, 1, 1]
        } else {
            [4, 0, 3, 3, 3, 0, 1, 1]
        };
        let dst = unplanned(self.pick_slot(parity));
        let value = self.rng.u32();
        match self.rng.weighted(weights.into_iter()) {
            0 => Step::Fill { dst, value },
            1 => Step::FillByte { dst, byte: value as u8 },
            2 => Step::KernelFill { dst, value },
            3 => Step::KernelAdd {
                dst,
                k: value % 1000 + 1,
            },
            4 => {
                let others: Vec<usize> = self
                    .w
                    .same_class(dst.slot)
                    .filter(|s| parity.is_none_or(|p| s % 2 == p))
                    .collect();
                if others.is_empty() {
                    return Step::Fill { dst, value };
                }
                let src = unplanned(*self.rng.pick(&others));
                Step::Copy { dst, src }
            }
            5 => Step::ViaTemp {
                dst,
                value,
                // `resources.len()` stands for graph memory (GraphMemoryResource), half the time.
                resource: if self.rng.percent(50) {
                    self.w.resources.len()
                } else {
                    self.rng.below(self.w.resources.len())
                },
            },
            6 => Step::Callback,
            _ => Step::JunkFill {
                slot: self.rng.below(self.w.junk.len()),
                value,
            },
        }
    }

    /// 1 to 5 steps; a capture's at times with two parallel branches.
    fn plan(&mut self, captured: bool) -> Vec<Planned> {
        let n = 1 + self.rng.below(5);
        let mut steps: Vec<Planned> = (0..n).map(|_| Planned::new(self.plan_step(captured, None))).collect();
        if captured && self.rng.percent(25) && !crate::ops::skipped("record split") {
            let a = (0..1 + self.rng.below(3))
                .map(|_| Planned::new(self.plan_step(true, Some(0))))
                .collect();
            let b = (0..1 + self.rng.below(3))
                .map(|_| Planned::new(self.plan_step(true, Some(1))))
                .collect();
            let at = self.rng.below(steps.len() + 1);
            steps.insert(at, Planned::new(Step::Split(a, b)));
        }
        steps
    }

    /// New values for the same steps (for a whole-graph update), to be recorded again.
    fn revalue(&mut self, recipe: &mut [Planned]) {
        for p in recipe {
            p.mark = Mark::Planned;
            match &mut p.step {
                Step::Fill { value, .. }
                | Step::KernelFill { value, .. }
                | Step::ViaTemp { value, .. }
                | Step::JunkFill { value, .. } => *value = self.rng.u32(),
                Step::FillByte { byte, .. } => *byte = self.rng.u32() as u8,
                Step::KernelAdd { k, .. } => *k = self.rng.u32() % 1000 + 1,
                Step::Split(a, b) => {
                    self.revalue(a);
                    self.revalue(b);
                }
                Step::Copy { .. } | Step::Callback => {}
            }
        }
    }

    // ---- recording into captures

    /// Records `f` on the buffer now in `dst`'s slot (which `dst` is pointed at).
    fn record_on(
        &mut self,
        op: &'static str,
        dst: &mut BufRef,
        into: &str,
        f: impl FnOnce(&Tracked) -> cuda_core::Result<()>,
    ) -> Mark {
        let w = self.w;
        let mut guard = lock(&w.buffers[dst.slot]);
        let Some(t) = guard.as_mut() else {
            self.stats.skipped(op);
            return Mark::Skipped;
        };
        dst.id = t.id;
        let r = f(t);
        t.note(format!(
            "{op} recorded into {into} by worker {}: {}",
            self.index,
            if r.is_ok() { "ok" } else { "failed" }
        ));
        match r {
            Ok(()) => {
                self.done(op);
                Mark::Done
            }
            Err(e) => {
                self.err(op, &e, RECORD_REFUSALS);
                Mark::Maybe
            }
        }
    }

    fn record_copy(&mut self, dst: &mut BufRef, src: &mut BufRef, stream: &Stream, into: &str) -> Mark {
        const OP: &str = "record copy";
        let w = self.w;
        let (lo, hi) = (dst.slot.min(src.slot), dst.slot.max(src.slot));
        let mut g_lo = lock(&w.buffers[lo]);
        let mut g_hi = lock(&w.buffers[hi]);
        let (d, s) = if dst.slot == lo {
            (g_lo.as_mut(), g_hi.as_mut())
        } else {
            (g_hi.as_mut(), g_lo.as_mut())
        };
        let (Some(d), Some(s)) = (d, s) else {
            self.stats.skipped(OP);
            return Mark::Skipped;
        };
        dst.id = d.id;
        src.id = s.id;
        let r = s.buf.copy_to(&d.buf, stream);
        let note = format!(
            "copy #{} ({}) -> #{} recorded into {into} by worker {}: {}",
            s.id,
            self.resource_name(s),
            d.id,
            self.index,
            if r.is_ok() { "ok" } else { "failed" }
        );
        d.note(note.clone());
        s.note(note);
        match r {
            Ok(()) => {
                self.done(OP);
                Mark::Done
            }
            Err(e) => {
                self.err(OP, &e, RECORD_REFUSALS);
                Mark::Maybe
            }
        }
    }

    /// A temporary buffer allocated on the capturing stream, filled, copied into `dst`.
    fn record_temp(&mut self, dst: &mut BufRef, value: u32, resource: usize, stream: &Stream, into: &str) -> Mark {
        const OP: &str = "record copy through a temporary";
        let w = self.w;
        let mut guard = lock(&w.buffers[dst.slot]);
        let Some(t) = guard.as_mut() else {
            self.stats.skipped(OP);
            return Mark::Skipped;
        };
        dst.id = t.id;
        let bytes = t.buf.size();
        let allocated = if resource == w.resources.len() {
            w.graph_memory.allocate(bytes, stream)
        } else {
            w.resources[resource].allocate(&w.device, bytes, stream, self.rng.percent(50))
        };
        let tmp = match allocated {
            Ok(b) => b,
            Err(e) => {
                self.err("allocate during a capture", &e, RECORD_REFUSALS);
                return Mark::Skipped;
            }
        };
        self.done("allocate during a capture");
        if tmp.size() != bytes {
            // Virtual memory comes in whole granules: no whole-buffer copy into `dst`.
            self.stats.skipped(OP);
            return Mark::Skipped;
        }
        let filled = tmp.fill_u32(value, stream);
        let copied = tmp.copy_to(&t.buf, stream);
        t.note(format!(
            "copy from a temporary ({}) of {value:#x} recorded into {into} by worker {}: fill {}, copy {}",
            if tmp.is_graph_memory() {
                "graph memory"
            } else {
                "not graph memory"
            },
            self.index,
            filled.is_ok(),
            copied.is_ok()
        ));
        // Dropped now or after the capture: graph memory is freed inside the graph either way.
        drop(tmp);
        let mark = match (&filled, &copied) {
            (Ok(()), Ok(())) => Mark::Done,
            (Err(_), Ok(())) => Mark::Garbage,
            _ => Mark::Maybe,
        };
        for r in [filled, copied] {
            self.count(OP, r, RECORD_REFUSALS);
        }
        mark
    }

    fn record_step(&mut self, b: &GraphBuilder, p: &mut Planned, into: &str) {
        let w = self.w;
        let stream = b.stream().clone();
        p.mark = match &mut p.step {
            Step::Fill { dst, value } => {
                let v = *value;
                self.record_on("record fill_u32", dst, into, |t| t.buf.fill_u32(v, &stream))
            }
            Step::FillByte { dst, byte } => {
                let v = *byte;
                self.record_on("record fill_u8", dst, into, |t| t.buf.fill_u8(v, &stream))
            }
            Step::KernelFill { dst, value } => {
                let v = *value;
                self.record_on("record kernel fill", dst, into, |t| {
                    let n = t.elements() as u32;
                    // SAFETY: fill(unsigned*, unsigned n, unsigned v) writes the buffer's n
                    // elements; the graph holds the buffer, and its launches are ordered by the
                    // buffer's fence.
                    unsafe {
                        launch(
                            &stream,
                            &LaunchConfig::new(n.div_ceil(256), 256),
                            &w.kernels.fill,
                            (&t.buf, n, v),
                        )
                    }
                })
            }
            Step::KernelAdd { dst, k } => {
                let k = *k;
                self.record_on("record kernel add", dst, into, |t| {
                    let n = t.elements() as u32;
                    // SAFETY: add(unsigned*, unsigned n, unsigned k) updates the buffer's n
                    // elements; as above.
                    unsafe {
                        launch(
                            &stream,
                            &LaunchConfig::new(n.div_ceil(256), 256),
                            &w.kernels.add,
                            (&t.buf, n, k),
                        )
                    }
                })
            }
            Step::Copy { dst, src } => self.record_copy(dst, src, &stream, into),
            Step::ViaTemp { dst, value, resource } => {
                let (v, r) = (*value, *resource);
                self.record_temp(dst, v, r, &stream, into)
            }
            Step::Callback => {
                let ran = w.counters.callbacks_ran.clone();
                let r = b.callback(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
                match self.count("record callback", r, RECORD_REFUSALS) {
                    Some(()) => Mark::Done,
                    None => Mark::Maybe,
                }
            }
            Step::JunkFill { slot, value } => {
                let guard = lock(&w.junk[*slot]);
                match guard.as_ref() {
                    None => Mark::Skipped,
                    Some(j) => {
                        match self.count("record junk fill", j.fill_u8(*value as u8, &stream), RECORD_REFUSALS) {
                            Some(()) => Mark::Done,
                            None => Mark::Maybe,
                        }
                    }
                }
            }
            Step::Split(..) => unreachable!("splits are recorded by record_recipe"),
        };
    }

    /// Records `recipe` with `builder`; `None` when a split or join failed (the capture is gone
    /// with the builders).
    fn record_recipe(&mut self, builder: GraphBuilder, recipe: &mut [Planned], into: &str) -> Option<GraphBuilder> {
        let mut builder = builder;
        for p in recipe.iter_mut() {
            if let Step::Split(a, b) = &mut p.step {
                // `split` takes the builder: when it fails, the builder's drop ends the capture.
                // A capture already invalidated (by another thread's work) is ended here
                // instead, so that its refusal shows here rather than as a drop error.
                if let Err(e) = builder.is_building() {
                    self.err("record split", &e, RECORD_REFUSALS);
                    let ended = builder.end_building().map(drop);
                    self.count("end an invalidated capture", ended, RECORD_REFUSALS);
                    return None;
                }
                let branches = match builder.split(2) {
                    Ok(v) => v,
                    Err(e) => {
                        // INVALID_VALUE: a branch waited for the split point of a capture that
                        // another thread's work invalidated just then.
                        self.err("record split", &e, &["graph memory", "invalidated", "invalid_value"]);
                        return None;
                    }
                };
                self.done("record split");
                for (branch, steps) in branches.iter().zip([a, b]) {
                    for q in steps.iter_mut() {
                        self.record_step(branch, q, into);
                    }
                }
                builder = match GraphBuilder::join(branches) {
                    Ok(b) => b,
                    Err(e) => {
                        self.err("record join", &e, RECORD_REFUSALS);
                        return None;
                    }
                };
                self.done("record join");
                continue;
            }
            self.record_step(&builder, p, into);
        }
        Some(builder)
    }

    /// Inside a capture: calls that must be refused (or that break the capture, which must then
    /// fail to end, not hang).
    fn misbehave(&mut self, b: &GraphBuilder) {
        let w = self.w;
        let cs = b.stream();
        let which = self.rng.below(7);
        self.begin(format!("inside a capture: misbehaving ({which})"));
        let refused: Option<(&'static str, cuda_core::Result<()>)> = match which {
            0 => {
                let slot = self.rng.below(w.buffers.len());
                let guard = lock(&w.buffers[slot]);
                guard
                    .as_ref()
                    .map(|t| ("to_vec on a capturing stream", t.buf.to_vec::<u32>(cs).map(drop)))
            }
            1 => Some(("launch_host_func on a capturing stream", cs.launch_host_func(|| {}))),
            2 => {
                let slot = self.rng.below(w.graphs.len());
                // try_lock: graph slots come before streams in the lock order.
                let guard = w.graphs[slot].try_lock().ok();
                guard
                    .as_ref()
                    .and_then(|g| g.as_ref())
                    .map(|e| ("graph launch on a capturing stream", e.graph.launch(cs)))
            }
            3 => Some(("synchronized on a capturing stream", cs.synchronized().map(drop))),
            4 => Some(("device sync during a capture", w.device.sync())),
            5 => {
                // Breaks the capture (the driver invalidates it): its end must fail.
                let r = cs.sync();
                self.count("sync of the capturing stream", r, &[]);
                None
            }
            _ => {
                let slot = self.rng.below(w.events.len());
                let guard = w.events[slot].try_lock().ok();
                if let Some(e) = guard
                    .as_ref()
                    .and_then(|g| g.as_ref())
                    .filter(|_| !crate::ops::skipped("capture waits for an outside event"))
                {
                    // An event recorded outside the capture (or in another): the driver may
                    // refuse, or invalidate the capture.
                    let r = cs.wait_event(e);
                    self.count("capture waits for an outside event", r, &["isolation", "invalid"]);
                }
                None
            }
        };
        if let Some((op, r)) = refused {
            match r {
                Ok(()) => {
                    self.stats.failed(op);
                    self.w
                        .report
                        .other(format!("{op} succeeded (worker {}): it must be refused", self.index));
                }
                Err(e) => {
                    self.err(op, &e, &["embed", "being captured"]);
                }
            }
        }
    }

    // ---- graph operations

    /// Captures a new graph and puts it in the pool.
    pub fn capture(&mut self, name: &'static str) {
        let w = self.w;
        let mode = *self.rng.pick(&MODES);
        let mut recipe = self.plan(true);
        let target = self.rng.below(20);
        // A builder's own stream (half the time), a shared stream, the per-thread default
        // stream, the device's default stream (the crate refuses to capture default streams).
        let shared: Option<Arc<SharedStream>> = if (10..17).contains(&target) {
            let owned: Vec<usize> = (0..w.streams.len())
                .filter(|i| w.stream(*i).kind == StreamKind::Owned)
                .collect();
            (!owned.is_empty()).then(|| w.stream(*self.rng.pick(&owned)))
        } else {
            None
        };
        let (builder, place) = if let Some(s) = &shared {
            (s.stream.create_graph_builder(), s.what.clone())
        } else if target < 10 {
            match w.device.create_graph_builder() {
                Ok(b) => (b, "a builder's own stream".to_string()),
                Err(e) => {
                    self.err(name, &e, &[]);
                    return;
                }
            }
        } else if target < 19 {
            (
                Stream::per_thread_default().create_graph_builder(),
                "the per-thread default stream".to_string(),
            )
        } else {
            (
                w.device.default_stream().create_graph_builder(),
                "Device::default_stream".to_string(),
            )
        };
        // No tracked work on a shared stream while it captures, nor (for a blocking stream) on
        // the legacy default stream (see world.rs); in slot order (the owned streams come
        // first).
        let blocking = match &shared {
            Some(s) => s.blocking,
            None => target >= 10, // the per-thread or the device's default stream
        };
        let exclusive = shared.as_ref().map(|s| write(&s.lock));
        let default = blocking.then(|| w.stream(w.default_slot));
        let exclusive_default = default.as_ref().map(|d| write(&d.lock));
        let into = format!("a {mode:?} capture on {place}");
        self.begin(format!("{name}: {into}, {} steps", recipe.len()));
        let mut builder = builder;
        if let Err(e) = builder.begin_building(mode) {
            self.err(name, &e, &[]);
            return;
        }
        let Some(mut builder) = self.record_recipe(builder, &mut recipe, &into) else {
            self.stats.event("captures lost to a failed split or join");
            self.stats.refused(name, "a split or join failed".into());
            return;
        };
        if self.rng.percent(15) {
            self.misbehave(&builder);
        }
        // Abandoned at times: dropped while building, which ends the capture and discards it
        // (unless the capture was invalidated meanwhile: then it is ended below, so that the
        // refusal shows here rather than as a drop error).
        if self.rng.percent(4) && builder.is_building().unwrap_or(false) {
            drop(builder);
            self.stats.event("captures abandoned (builder dropped while building)");
            self.done(name);
            return;
        }
        self.begin(format!("{name}: ending {into}"));
        if let Err(e) = builder.end_building() {
            self.err(name, &e, &["invalidated"]);
            return;
        }
        let graph = match builder.complete(&Default::default()) {
            Ok(g) => g,
            Err(e) => {
                self.err(name, &e, &[]);
                return;
            }
        };
        drop(builder);
        drop(exclusive_default);
        drop(exclusive);
        let id = w.id();
        self.store_graph(GraphEntry {
            graph,
            what: format!("graph #{id} (captured: {into})"),
            recipe,
            nodes: Vec::new(),
            launches: 0,
        });
        self.done(name);
    }

    /// Adds `p`'s node after `prev` (or as an entry point of `g`). `None`: its slot was empty.
    fn add_node(
        &mut self,
        g: &GraphDefinition,
        prev: Option<&GraphNode>,
        p: &mut Planned,
    ) -> Result<Option<GraphNode>, CudaError> {
        let w = self.w;
        let ran = w.counters.callbacks_ran.clone();
        let one = |slot: usize| lock(&w.buffers[slot]);
        let fill = matches!(p.step, Step::KernelFill { .. });
        let node = match &mut p.step {
            Step::Fill { dst, value } => {
                let mut guard = one(dst.slot);
                let Some(t) = guard.as_mut() else { return Ok(None) };
                dst.id = t.id;
                t.note(format!("memset node {value:#x} added by worker {}", self.index));
                add_node!(g, prev, |x| x.memset(&t.buf, *value, t.elements()))?
            }
            Step::KernelFill { dst, value } | Step::KernelAdd { dst, k: value } => {
                let mut guard = one(dst.slot);
                let Some(t) = guard.as_mut() else { return Ok(None) };
                dst.id = t.id;
                t.note(format!(
                    "kernel {} node {value:#x} added by worker {}",
                    if fill { "fill" } else { "add" },
                    self.index
                ));
                let n = t.elements() as u32;
                let config = LaunchConfig::new(n.div_ceil(256), 256);
                let kernel = if fill { &w.kernels.fill } else { &w.kernels.add };
                // SAFETY: fill/add(unsigned*, unsigned n, unsigned v) over the buffer's n
                // elements; the graph holds the buffer, its launches are ordered by the fence.
                add_node!(g, prev, |x| unsafe { x.launch(&config, kernel, (&t.buf, n, *value)) })?
            }
            Step::Copy { dst, src } => {
                let (lo, hi) = (dst.slot.min(src.slot), dst.slot.max(src.slot));
                let mut g_lo = one(lo);
                let mut g_hi = one(hi);
                let (d, s) = if dst.slot == lo {
                    (g_lo.as_mut(), g_hi.as_mut())
                } else {
                    (g_hi.as_mut(), g_lo.as_mut())
                };
                let (Some(d), Some(s)) = (d, s) else { return Ok(None) };
                dst.id = d.id;
                src.id = s.id;
                let note = format!("memcpy node #{} -> #{} added by worker {}", s.id, d.id, self.index);
                d.note(note.clone());
                s.note(note);
                add_node!(g, prev, |x| x.memcpy(&d.buf, &s.buf, d.buf.size()))?
            }
            Step::Callback => add_node!(g, prev, |x| x.callback(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }))?,
            Step::JunkFill { slot, value } => {
                let guard = lock(&w.junk[*slot]);
                let Some(j) = guard.as_ref() else { return Ok(None) };
                add_node!(g, prev, |x| x.memset(j, *value as u8, j.size()))?
            }
            Step::FillByte { .. } | Step::ViaTemp { .. } | Step::Split(..) => {
                unreachable!("not planned for explicit graphs")
            }
        };
        p.mark = Mark::Done;
        Ok(Some(node))
    }

    /// An explicit graph of `recipe`'s steps in a chain.
    fn build_explicit(
        &mut self,
        recipe: &mut [Planned],
    ) -> Result<(GraphDefinition, Vec<Option<GraphNode>>), CudaError> {
        let g = GraphDefinition::new()?;
        let mut prev: Option<GraphNode> = None;
        let mut nodes = Vec::with_capacity(recipe.len());
        for p in recipe.iter_mut() {
            let node = self.add_node(&g, prev.as_ref(), p)?;
            match &node {
                Some(n) => prev = Some(n.clone()),
                None => p.mark = Mark::Skipped,
            }
            nodes.push(node);
        }
        Ok((g, nodes))
    }

    pub fn explicit(&mut self, name: &'static str) {
        let mut recipe = self.plan(false);
        self.begin(format!("{name}: {} nodes", recipe.len()));
        let built = self.build_explicit(&mut recipe);
        let Some((definition, nodes)) = self.count("explicit graph nodes", built, &[]) else {
            return;
        };
        let Some(graph) = self.count(name, definition.instantiate(&Default::default()), &[]) else {
            return;
        };
        // The definition goes at once at times: the executable graph holds what it runs.
        if self.rng.percent(50) {
            drop(definition);
        } else {
            let s = self.pick_stream();
            self.dispose("a graph definition", Box::new(definition), Some(&s.stream));
        }
        let id = self.w.id();
        self.store_graph(GraphEntry {
            graph,
            what: format!("graph #{id} (explicit)"),
            recipe,
            nodes,
            launches: 0,
        });
    }

    /// Puts `entry` in a random graph slot; the graph there before is let go of.
    fn store_graph(&mut self, entry: GraphEntry) {
        let slot = self.rng.below(self.w.graphs.len());
        let old = lock(&self.w.graphs[slot]).replace(entry);
        if let Some(old) = old {
            let s = self.pick_stream();
            self.dispose("an executable graph", Box::new(old), Some(&s.stream));
        }
    }

    /// Launches a graph of the pool on a random stream, after the buffers it uses, and applies
    /// its recipe to them.
    pub fn launch_graph(&mut self, name: &'static str) {
        let w = self.w;
        let gslot = self.rng.below(w.graphs.len());
        let mut gguard = lock(&w.graphs[gslot]);
        let Some(entry) = gguard.as_mut() else {
            return self.stats.skipped(name);
        };
        let s = self.pick_stream();
        let _shared = read(&s.lock);
        let (effects, sure, most) = effects(&entry.recipe);
        let mut named = BTreeSet::new();
        refs(&entry.recipe, &mut named);
        let mut wanted = BTreeSet::new();
        slots(&entry.recipe, &mut wanted);
        // In slot order (the lock order).
        let mut guards: BTreeMap<usize, MutexGuard<'_, Option<Tracked>>> =
            wanted.iter().map(|slot| (*slot, lock(&w.buffers[*slot]))).collect();
        let touched: Vec<usize> = guards
            .iter()
            .filter(|(slot, g)| g.as_ref().is_some_and(|t| named.contains(&(**slot, t.id))))
            .map(|(slot, _)| *slot)
            .collect();
        self.begin(format!(
            "{name}: {} on {} (touching buffers in slots {touched:?})",
            entry.what, s.what
        ));
        for slot in &touched {
            let t = guards[slot].as_ref().expect("touched");
            if let Err(e) = order_after(t, &s.stream) {
                self.err(name, &e, &[]);
                return;
            }
        }
        let r = entry.graph.launch(&s.stream);
        apply(&effects, &mut Locked(&mut guards), r.is_ok());
        for slot in &touched {
            let t = guards.get_mut(slot).and_then(|g| g.as_mut()).expect("touched");
            self.fence(name, t, &s.stream);
        }
        for slot in &touched {
            let t = guards.get_mut(slot).and_then(|g| g.as_mut()).expect("touched");
            let note = format!(
                "launch {} of {} on {} by worker {}: {} -> {} (steps: {})",
                entry.launches,
                entry.what,
                s.what,
                self.index,
                if r.is_ok() { "ok" } else { "failed" },
                t.expect,
                marks(&entry.recipe)
            );
            t.note(note);
        }
        entry.launches += 1;
        if r.is_ok() {
            w.counters.callbacks_sure.fetch_add(sure, Ordering::SeqCst);
        }
        w.counters.callbacks_most.fetch_add(most, Ordering::SeqCst);
        self.count(name, r, &[]);
    }

    /// Updates a graph of the pool from a new definition of the same steps with new values
    /// (recorded again, with the buffers now in their slots): the driver may refuse (then the
    /// graph leaves the pool).
    pub fn update_graph(&mut self, name: &'static str) {
        let w = self.w;
        let gslot = self.rng.below(w.graphs.len());
        let mut gguard = lock(&w.graphs[gslot]);
        let Some(entry) = gguard.as_mut() else {
            return self.stats.skipped(name);
        };
        let explicit = !entry.nodes.is_empty() || entry.what.contains("explicit");
        let mut recipe = entry.recipe.clone();
        self.revalue(&mut recipe);
        self.begin(format!("{name}: {} from a new definition", entry.what));
        let definition = if explicit {
            match self.build_explicit(&mut recipe) {
                Ok((d, _)) => d,
                Err(e) => {
                    self.err(name, &e, &[]);
                    return;
                }
            }
        } else {
            let mode = *self.rng.pick(&MODES);
            let mut builder = match w.device.create_graph_builder() {
                Ok(b) => b,
                Err(e) => {
                    self.err(name, &e, &[]);
                    return;
                }
            };
            if let Err(e) = builder.begin_building(mode) {
                self.err(name, &e, &[]);
                return;
            }
            let into = format!("a {mode:?} capture for an update of {}", entry.what);
            let Some(mut builder) = self.record_recipe(builder, &mut recipe, &into) else {
                self.stats.refused(name, "a split or join failed".into());
                return;
            };
            if let Err(e) = builder.end_building() {
                self.err(name, &e, &["invalidated"]);
                return;
            }
            match builder.graph_definition() {
                Ok(d) => d,
                Err(e) => {
                    self.err(name, &e, &[]);
                    return;
                }
            }
        };
        match entry.graph.update(&definition) {
            Ok(()) => {
                // A node disabled in the executable graph may stay so, through this update and
                // every later one (no per-node update can enable it again: see below): either.
                // (Only `Disabled` was carried before, so a second update predicted `Done` for a
                // node still disabled: the stress test's mismatches after updated explicit
                // graphs.)
                for (new, old) in recipe.iter_mut().zip(&entry.recipe) {
                    let maybe_disabled = matches!(old.mark, Mark::Disabled | Mark::Maybe);
                    if explicit && maybe_disabled && new.mark == Mark::Done {
                        new.mark = Mark::Maybe;
                    }
                }
                // Per-node updates that keep what the instantiated definition's node has are
                // refused after a whole-graph update (that definition no longer says what the
                // graph runs): no more of them for this graph.
                entry.nodes.clear();
                entry.recipe = recipe;
                self.done(name);
            }
            Err(e) => {
                // (Graphs that allocate graph memory are refused an update by the crate.)
                self.err(name, &e, &["graph update failed", "cannot be updated"]);
                let old = gguard.take().expect("checked above");
                drop(gguard);
                let s = self.pick_stream();
                self.dispose("a graph whose update failed", Box::new(old), Some(&s.stream));
            }
        }
    }

    /// Changes one node of an explicit graph in the executable graph: a memset's value, a
    /// kernel's arguments, or whether it runs. A refusal takes the graph out of the pool.
    pub fn update_node(&mut self, name: &'static str) {
        let w = self.w;
        let gslot = self.rng.below(w.graphs.len());
        let mut gguard = lock(&w.graphs[gslot]);
        let Some(entry) = gguard.as_mut() else {
            return self.stats.skipped(name);
        };
        let with_nodes: Vec<usize> = (0..entry.nodes.len()).filter(|i| entry.nodes[*i].is_some()).collect();
        if with_nodes.is_empty() {
            return self.stats.skipped(name);
        }
        let i = *self.rng.pick(&with_nodes);
        let node = entry.nodes[i].clone().expect("checked");
        let value = self.rng.u32();
        let toggle = self.rng.percent(25);
        self.begin(format!("{name}: step {i} of {} (toggle: {toggle})", entry.what));
        let step = entry.recipe[i].step.clone();
        let r = match step {
            Step::Callback => Ok(()), // host nodes cannot be disabled; nothing to change
            _ if toggle => {
                let on = self.rng.percent(50);
                let r = entry.graph.set_enabled(&node, on);
                if r.is_ok() {
                    entry.recipe[i].mark = if on { Mark::Done } else { Mark::Disabled };
                }
                r
            }
            Step::Fill { dst, .. } => {
                let r = entry.graph.set_memset_value(&node, value);
                if r.is_ok() {
                    entry.recipe[i].step = Step::Fill { dst, value };
                }
                r
            }
            Step::KernelFill { dst, .. } | Step::KernelAdd { dst, .. } => {
                let fill = matches!(step, Step::KernelFill { .. });
                let v = if fill { value } else { value % 1000 + 1 };
                let guard = lock(&w.buffers[dst.slot]);
                match guard.as_ref() {
                    None => Ok(()),
                    Some(t) => {
                        let n = t.elements() as u32;
                        // SAFETY: the same kernel with the same parameter types, over a buffer
                        // of the same size (same slot class); the graph holds the buffer.
                        let r = unsafe { entry.graph.set_kernel_args(&node, (&t.buf, n, v)) };
                        if r.is_ok() {
                            let dst = BufRef {
                                slot: dst.slot,
                                id: t.id,
                            };
                            entry.recipe[i].step = if fill {
                                Step::KernelFill { dst, value: v }
                            } else {
                                Step::KernelAdd { dst, k: v }
                            };
                        }
                        r
                    }
                }
            }
            Step::Copy { .. } | Step::JunkFill { .. } => Ok(()),
            Step::FillByte { .. } | Step::ViaTemp { .. } | Step::Split(..) => unreachable!("not in explicit graphs"),
        };
        if let Err(e) = r {
            self.err(name, &e, &[]);
            let old = gguard.take().expect("checked above");
            drop(gguard);
            let s = self.pick_stream();
            self.dispose("a graph whose node update failed", Box::new(old), Some(&s.stream));
            return;
        }
        // Noted on the buffer the step writes (the mismatch report shows it).
        let what = format!(
            "node update of step {i} of {} by worker {} (toggle: {toggle}): now {:?} {:?}",
            entry.what, self.index, entry.recipe[i].mark, entry.recipe[i].step
        );
        let mut written = BTreeSet::new();
        refs(std::slice::from_ref(&entry.recipe[i]), &mut written);
        for (slot, id) in written {
            if let Some(t) = lock(&w.buffers[slot]).as_mut().filter(|t| t.id == id) {
                t.note(what.clone());
            }
        }
        self.done(name);
    }

    pub fn upload(&mut self, name: &'static str) {
        let w = self.w;
        let gslot = self.rng.below(w.graphs.len());
        let gguard = lock(&w.graphs[gslot]);
        let Some(entry) = gguard.as_ref() else {
            return self.stats.skipped(name);
        };
        let s = self.pick_stream();
        self.begin(format!("{name}: {} on {} (no lock)", entry.what, s.what));
        let r = entry.graph.upload(&s.stream);
        self.count(name, r, &[]);
    }

    pub fn drop_graph(&mut self, name: &'static str) {
        let gslot = self.rng.below(self.w.graphs.len());
        let Some(old) = lock(&self.w.graphs[gslot]).take() else {
            return self.stats.skipped(name);
        };
        let s = self.pick_stream();
        self.begin(format!("{name}: {} (launched {} times)", old.what, old.launches));
        self.dispose("an executable graph", Box::new(old), Some(&s.stream));
        self.done(name);
    }

    /// The end of the run (main thread, workers gone): every tracked buffer read back and
    /// checked.
    pub fn final_check(&mut self) {
        let w = self.w;
        let check = match w.device.create_stream(Default::default()) {
            Ok(s) => s,
            Err(e) => {
                self.err("final check", &e, &[]);
                return;
            }
        };
        for slot in 0..w.buffers.len() {
            let mut guard = lock(&w.buffers[slot]);
            let Some(t) = guard.as_mut() else { continue };
            self.begin(format!("final check of buffer #{} (slot {slot})", t.id));
            let read = order_after(t, &check).and_then(|()| t.buf.to_vec::<u32>(&check));
            match read {
                Ok(v) => {
                    self.compare("final check", slot, t, &v, "a new stream");
                    self.done("final check");
                }
                Err(e) => {
                    self.err("final check", &e, &[]);
                }
            }
        }
        // Futures and an awaited copy once more, on a quiet device.
        if let Ok(done) = check.synchronized() {
            let r = block_on(done);
            self.count("final stream future", r, &[]);
        }
    }
}
