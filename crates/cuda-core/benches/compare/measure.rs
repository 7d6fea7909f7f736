//! What a row measures, the sides that measure it, and the interleaved rounds.

use crate::peer::Peer;
use std::ops::Range;
use std::sync::OnceLock;
use std::time::Instant;

/// One implementation of the loops: a column of the table. Each runs in a process of its own
/// (see main's module doc for why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The C program (`benches/c/compare.c`), a child server.
    C,
    /// This crate's safe API (`safe.rs`): this executable as a child server (`serve CUBIN safe`).
    Safe,
    /// Raw `cuda-sys` calls on objects made by raw calls (`raw.rs`): this executable as a child
    /// server (`serve CUBIN raw`).
    Raw,
    /// cudarc's safe API (`cudarc_side.rs`, feature `cudarc`): this executable as a child server
    /// (`serve CUBIN cudarc`).
    Cudarc,
    /// cuda.core from Python (`benches/python/compare.py`), a child server.
    Python,
}

impl Column {
    pub const ALL: [Column; 5] = [Column::C, Column::Safe, Column::Raw, Column::Cudarc, Column::Python];

    /// The key in the JSON.
    pub fn key(self) -> &'static str {
        match self {
            Column::C => "c",
            Column::Safe => "cuda_core",
            Column::Raw => "raw_rust",
            Column::Cudarc => "cudarc",
            Column::Python => "cuda_core_python",
        }
    }

    /// The heading in the table.
    pub fn title(self) -> &'static str {
        match self {
            Column::C => "C",
            Column::Safe => "cuda-core",
            Column::Raw => "raw Rust",
            Column::Cudarc => "cudarc",
            Column::Python => "cuda.core",
        }
    }
}

/// `bursts` bursts of `count` calls (see [`per_call_us`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loop {
    pub count: usize,
    pub bursts: usize,
}

/// Bursts of 128 launches with a synchronisation between them: the host's cost per launch.
pub const BURST: Loop = Loop { count: 128, bursts: 8 };
/// Launches back to back, enough to fill the queue (about a thousand small launches), so that
/// most of them wait for room: the rate the host sustains.
pub const SUSTAINED: Loop = Loop { count: 8192, bursts: 1 };
/// Ten-kernel graphs back to back (20 480 kernels).
pub const SUSTAINED_GRAPHS: Loop = Loop { count: 2048, bursts: 1 };
/// Pool allocations (1 MiB) with their frees.
pub const POOL_PAIRS: Loop = Loop { count: 1000, bursts: 1 };
/// Event record + sync pairs, or stream syncs.
pub const SYNCS: Loop = Loop { count: 2000, bursts: 1 };
/// Allocation + free + stream sync, each a few microseconds.
pub const POOL_SYNCS: Loop = Loop { count: 100, bursts: 1 };

/// What a row measures. The servers answer the operations they have, one
/// [`request`](Op::request) line each (the C program and the Python script: the
/// [`common_request`](Op::common_request)s); the process rows start fresh processes instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// k2(float*, unsigned): through the generic `launch` on the safe side.
    Launch2(Loop),
    /// k2 through a `TypedKernel` on the safe side (the same loop everywhere else).
    TypedLaunch2(Loop),
    /// k8(float*, unsigned, int, int, float, float, long long, double), typed.
    TypedLaunch8(Loop),
    /// k2 with a 4-byte device buffer as its pointer.
    BufferLaunch(Loop),
    /// A graph of 10 launches of k2, captured.
    Graph(Loop),
    /// 1 MiB allocated and freed, stream-ordered, from the device's pool.
    Pool(Loop),
    /// The same from a pool made for it.
    OwnedPool(Loop),
    /// 1 MiB allocated, freed and the stream synchronised, from the device's pool.
    PoolSync(Loop),
    /// Event record + event sync.
    Event(Loop),
    /// Synchronising an idle stream.
    StreamSync(Loop),
    /// k2 launched from 8 threads, each on a stream of its own (millions per second).
    ThreadLaunches,
    /// 1 MiB allocated and freed from 8 threads on 8 streams (millions per second).
    ThreadPool,
    /// 256 MiB copied from pinned host memory to the device (GB/s).
    HostToDevice,
    /// 256 MiB copied from the device to pinned host memory (GB/s).
    DeviceToHost,
    /// 256 MiB copied on the device (TB/s, read + write).
    DeviceToDevice,
    /// A compile of a source NVRTC has not seen (ms).
    CompileCold,
    /// A cold compile through the program cache on disk, stored (ms).
    CompileStore,
    /// A compile answered by the program cache on disk (ms).
    CompileHit,
    /// A StridedMemoryView of a DLPack tensor (us).
    StridedView,
    /// A fresh process, from its start to one kernel finished (ms).
    FirstKernel,
    /// A fresh process, from its start to a cubin compiled by NVRTC in memory (ms).
    FirstCompile(Arch),
}

/// The architecture of a first compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `sm_XY` given to the process.
    Given,
    /// Taken from device 0 (which initialises the driver).
    Device,
}

/// A loop for the request lines of the operations that have none (the figure is one operation,
/// or the operation times its own loop).
const ONCE: Loop = Loop { count: 1, bursts: 1 };

/// Makes an operation from a request line's loop.
type MakeOp = fn(Loop) -> Op;

/// The operations a server answers, by their name in a request line, with how to make each from
/// the line's loop: one table for both directions, so [`Op::request`] and [`Op::from_request`]
/// agree by construction.
const SERVED: &[(&str, MakeOp)] = &[
    ("launch2-generic", Op::Launch2),
    ("launch2", Op::TypedLaunch2),
    ("launch8", Op::TypedLaunch8),
    ("buffer-launch", Op::BufferLaunch),
    ("graph", Op::Graph),
    ("pool", Op::Pool),
    ("owned-pool", Op::OwnedPool),
    ("pool-sync", Op::PoolSync),
    ("event", Op::Event),
    ("stream-sync", Op::StreamSync),
    ("thread-launches", |_| Op::ThreadLaunches),
    ("thread-pool", |_| Op::ThreadPool),
    ("h2d", |_| Op::HostToDevice),
    ("d2h", |_| Op::DeviceToHost),
    ("d2d", |_| Op::DeviceToDevice),
    ("compile-cold", |_| Op::CompileCold),
    ("compile-store", |_| Op::CompileStore),
    ("compile-hit", |_| Op::CompileHit),
    ("strided-view", |_| Op::StridedView),
];

impl Op {
    /// Whether a sample is a fresh process (started by the benchmark's process, not a server).
    pub fn is_process(self) -> bool {
        matches!(self, Op::FirstKernel | Op::FirstCompile(_))
    }

    /// The loop of the request line.
    fn wire_loop(self) -> Loop {
        match self {
            Op::Launch2(l)
            | Op::TypedLaunch2(l)
            | Op::TypedLaunch8(l)
            | Op::BufferLaunch(l)
            | Op::Graph(l)
            | Op::Pool(l)
            | Op::OwnedPool(l)
            | Op::PoolSync(l)
            | Op::Event(l)
            | Op::StreamSync(l) => l,
            _ => ONCE,
        }
    }

    /// The request line this executable's servers answer (`serve CUBIN SIDE`): every operation
    /// but the process rows'.
    pub fn request(self) -> Option<String> {
        let l = self.wire_loop();
        let (name, _) = SERVED.iter().find(|(_, make)| make(l) == self)?;
        Some(format!("{name} {} {}", l.count, l.bursts))
    }

    /// The operation of a [`request`](Op::request) line.
    pub fn from_request(line: &str) -> Option<Op> {
        let mut words = line.split_whitespace();
        let name = words.next()?;
        let l = Loop {
            count: words.next()?.parse().ok()?,
            bursts: words.next()?.parse().ok()?,
        };
        if words.next().is_some() {
            return None;
        }
        SERVED.iter().find(|(n, _)| *n == name).map(|(_, make)| make(l))
    }

    /// The request line the C program and the Python script answer, for the operations they
    /// have (`OP COUNT BURSTS`, OP one of launch2, launch8, graph, pool, event; the generic
    /// launch row's is their one 2-argument launch loop).
    pub fn common_request(self) -> Option<String> {
        let (name, l) = match self {
            Op::Launch2(l) | Op::TypedLaunch2(l) => ("launch2", l),
            Op::TypedLaunch8(l) => ("launch8", l),
            Op::Graph(l) => ("graph", l),
            Op::Pool(l) => ("pool", l),
            Op::Event(l) => ("event", l),
            _ => return None,
        };
        Some(format!("{name} {} {}", l.count, l.bursts))
    }
}

/// One implementation of the operations, in the server process of its side (see `children`).
pub trait Contender {
    /// One sample of `op` in its row's unit, or `None` where this side has no such operation
    /// (or cannot run it here).
    fn measure(&mut self, op: Op) -> Option<f64>;
}

/// Host time per call of `op`, in microseconds, over `l.bursts` bursts of `l.count` calls. Each
/// burst comes after one untimed call, so it starts from the state its calls leave (a pool that
/// holds memory again after a synchronisation gave it back), and is followed by `settle` (a
/// stream synchronisation), untimed. The C program and the Python script run this loop too.
#[inline(always)]
pub fn per_call_us(l: Loop, mut op: impl FnMut(), mut settle: impl FnMut()) -> f64 {
    let mut total = 0.0;
    for _ in 0..l.bursts {
        op();
        let t = Instant::now();
        for _ in 0..l.count {
            op();
        }
        total += t.elapsed().as_secs_f64();
        settle();
    }
    total * 1e6 / (l.count * l.bursts) as f64
}

/// Every CPU the benchmark may run on, as [`pin_to_one_cpu`] found it (in a server: as its
/// parent found it, see [`adopt_all_cpus`]).
static ALL_CPUS: OnceLock<libc::cpu_set_t> = OnceLock::new();

/// The environment variable that hands [`ALL_CPUS`] to this executable's servers (the CPUs'
/// numbers, comma-separated): they start with the parent's one-CPU mask and need the whole set
/// for the threads of the 8-thread rows.
pub const ALL_CPUS_VAR: &str = "CUDA_CORE_BENCH_ALL_CPUS";

/// Pins the calling thread, and the processes it starts from now on (they inherit its mask),
/// to the CPU it runs on, so that every side of a single-thread row runs on the same core: the
/// servers run one request at a time, in turn, so they never compete for it. On the H100 machine
/// (a virtual machine), unpinned, the same raw launch loop cost 4-17% more in the benchmark's
/// process than in the C program's, by row; pinned, within 1% (2026-11-27): which core the
/// scheduler gives each process, and the load on its sibling, moved them apart. Returns the CPU,
/// or `None` where the system refused.
pub fn pin_to_one_cpu() -> Option<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: out-pointers to zeroed locals of the type the calls take, with its size.
    unsafe {
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
        if libc::sched_getaffinity(0, size, &mut all) != 0 {
            return None;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        if libc::sched_setaffinity(0, size, &one) != 0 {
            return None;
        }
        let _ = ALL_CPUS.set(all);
        Some(cpu)
    }
}

/// [`ALL_CPUS`] as [`ALL_CPUS_VAR`] carries it; `None` when this process did not pin itself.
pub fn all_cpus_text() -> Option<String> {
    let all = ALL_CPUS.get()?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: a CPU set the system filled; every index is below its capacity.
    let cpus: Vec<String> = (0..max)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, all) })
        .map(|i| i.to_string())
        .collect();
    Some(cpus.join(","))
}

/// In a server: takes the CPUs the parent may run on from [`ALL_CPUS_VAR`], for [`unpin`].
pub fn adopt_all_cpus() {
    let Ok(text) = std::env::var(ALL_CPUS_VAR) else {
        return;
    };
    // SAFETY: a zeroed set of the type the macros take.
    let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for cpu in text.split(',').filter_map(|c| c.trim().parse::<usize>().ok()) {
        if cpu < max {
            // SAFETY: the index is below the set's capacity.
            unsafe { libc::CPU_SET(cpu, &mut all) };
        }
    }
    let _ = ALL_CPUS.set(all);
}

/// Lets the calling thread run on every CPU again (the threads of the 8-thread rows).
fn unpin() {
    if let Some(all) = ALL_CPUS.get() {
        // SAFETY: a CPU set the system gave, with its size.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), all) };
    }
}

/// Threads of the 8-thread rows, and calls per thread.
pub const THREADS: usize = 8;
pub const PER_THREAD: usize = 1000;

/// Millions of calls per second over [`THREADS`] threads, each running `warm(i)` untimed and
/// then `work(i)` ([`PER_THREAD`] calls and a sync of its stream); the clock starts when every
/// thread has warmed up.
pub fn in_threads(warm: &(dyn Fn(usize) + Sync), work: &(dyn Fn(usize) + Sync)) -> f64 {
    let ready = std::sync::Barrier::new(THREADS + 1);
    let mut start = None;
    std::thread::scope(|scope| {
        for i in 0..THREADS {
            let ready = &ready;
            scope.spawn(move || {
                unpin();
                warm(i);
                ready.wait();
                work(i);
            });
        }
        ready.wait();
        start = Some(Instant::now());
    });
    let seconds = start.map_or(f64::NAN, |t| t.elapsed().as_secs_f64());
    (THREADS * PER_THREAD) as f64 / seconds / 1e6
}

/// Throughput of a copy of `bytes` that `copy` makes and waits for, in GB/s.
pub fn gb_per_s(bytes: usize, copy: impl FnOnce()) -> f64 {
    let t = Instant::now();
    copy();
    bytes as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Milliseconds that `f` takes.
pub fn ms(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

/// Every sample of one row: per column that has the operation, its figure in each round.
#[derive(Default)]
pub struct Samples {
    pub columns: Vec<(Column, Vec<Option<f64>>)>,
    /// The rounds of each [`interleave`] call [`append`](Samples::append)ed, in order: for the
    /// rows the servers answer, the rounds each instance of the servers gave.
    pub blocks: Vec<usize>,
}

/// Runs `op` on every side that has it for the rounds `rounds` of its row (numbered within the
/// row), after one untimed request each (which also tells which sides have it, and warms a server
/// started since its last request: its first answer comes after its setup, and a first launch
/// loads the kernel). Each round asks every side for one sample (a request to its server, or a
/// fresh process), one side at a time, the first one rotating from round to round (by the round's
/// number, so it goes on rotating across a row's calls), so no side always runs on a warmer or
/// colder machine; a noisy machine moves the sides of one round together, which the per-round
/// ratios ([`ratio`](Samples::ratio)) cancel.
pub fn interleave(rounds: Range<usize>, op: Op, sides: &mut [Peer]) -> Samples {
    let live: Vec<usize> = (0..sides.len()).filter(|&i| sides[i].measure(op).is_some()).collect();
    let mut samples = vec![Vec::with_capacity(rounds.len()); live.len()];
    for round in rounds.clone() {
        for k in 0..live.len() {
            // Each column gets one sample per round, in round order.
            let i = (round + k) % live.len();
            samples[i].push(sides[live[i]].measure(op));
        }
    }
    Samples {
        columns: live.iter().map(|&i| sides[i].column()).zip(samples).collect(),
        // No side: no rounds were run.
        blocks: vec![if live.is_empty() { 0 } else { rounds.len() }],
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}

impl Samples {
    /// The rounds so far (every column has a figure or `None` for each).
    fn rounds(&self) -> usize {
        self.blocks.iter().sum()
    }

    /// Appends the rounds of `more` (the same row, later rounds) after these: a column that one
    /// of them lacks (a side that gave no figure in those rounds) has `None` for those rounds, so
    /// that the columns' figures stay round by round.
    pub fn append(&mut self, more: Samples) {
        let before = self.rounds();
        for (column, figures) in more.columns {
            match self.columns.iter_mut().find(|(c, _)| *c == column) {
                Some((_, v)) => v.extend(figures),
                None => {
                    let mut v = vec![None; before];
                    v.extend(figures);
                    self.columns.push((column, v));
                }
            }
        }
        self.blocks.extend(more.blocks);
        let after = self.rounds();
        for (_, v) in &mut self.columns {
            v.resize(after, None);
        }
    }

    /// A column's figures, round by round (`None` where it gave none).
    pub fn of(&self, column: Column) -> Option<&[Option<f64>]> {
        self.columns
            .iter()
            .find(|(c, _)| *c == column)
            .map(|(_, v)| v.as_slice())
    }

    /// The median of a column's figures.
    pub fn median(&self, column: Column) -> Option<f64> {
        median(self.of(column)?.iter().flatten().copied().collect())
    }

    /// The median over the rounds of `column`'s figure divided by `base`'s in the same round.
    pub fn ratio(&self, column: Column, base: Column) -> Option<f64> {
        let (a, b) = (self.of(column)?, self.of(base)?);
        median(a.iter().zip(b).filter_map(|(a, b)| Some((*a)? / (*b)?)).collect())
    }
}
