//! What a row measures, the sides that measure it, and the interleaved rounds.

use std::sync::OnceLock;
use std::time::Instant;

/// One implementation of the loops: a column of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The C program (`benches/c/compare.c`), a child server.
    C,
    /// This crate's safe API.
    Safe,
    /// Raw `cuda-sys` calls on objects made by raw calls.
    Raw,
    /// The same raw side in a process of its own (this executable as a child server): what the
    /// raw loops cost without the other sides' objects and threads in the process.
    RawAlone,
    /// cudarc's safe API (feature `cudarc`).
    Cudarc,
    /// cuda.core from Python (`benches/python/compare.py`), a child server.
    Python,
}

impl Column {
    pub const ALL: [Column; 6] = [
        Column::C,
        Column::Safe,
        Column::Raw,
        Column::RawAlone,
        Column::Cudarc,
        Column::Python,
    ];

    /// The key in the JSON.
    pub fn key(self) -> &'static str {
        match self {
            Column::C => "c",
            Column::Safe => "cuda_core",
            Column::Raw => "raw_rust",
            Column::RawAlone => "raw_rust_own_process",
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
            Column::RawAlone => "raw Rust alone",
            Column::Cudarc => "cudarc",
            Column::Python => "cuda.core",
        }
    }
}

/// `bursts` bursts of `count` calls (see [`per_call_us`]).
#[derive(Clone, Copy, Debug)]
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

/// What a row measures. Every side answers the operations it has; the C program and the Python
/// script answer those with a [`request`](Op::request).
#[derive(Clone, Copy, Debug)]
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

impl Op {
    /// The request line the child servers (C, Python) answer, for the operations they have.
    pub fn request(self) -> Option<String> {
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

    /// The operation of a [`request`](Op::request) line (launches as the typed rows).
    pub fn from_request(line: &str) -> Option<Op> {
        let mut words = line.split_whitespace();
        let name = words.next()?;
        let count = words.next()?.parse().ok()?;
        let l = Loop {
            count,
            bursts: words.next()?.parse().ok()?,
        };
        Some(match name {
            "launch2" => Op::TypedLaunch2(l),
            "launch8" => Op::TypedLaunch8(l),
            "graph" => Op::Graph(l),
            "pool" => Op::Pool(l),
            "event" => Op::Event(l),
            _ => return None,
        })
    }
}

/// One implementation of the operations.
pub trait Contender {
    fn column(&self) -> Column;
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

/// Every CPU this process may run on, as [`pin_to_one_cpu`] found it.
static ALL_CPUS: OnceLock<libc::cpu_set_t> = OnceLock::new();

/// Pins the calling thread, and the processes it starts from now on (they inherit its mask),
/// to the CPU it runs on, so that every side of a single-thread row runs on the same core. On
/// the H100 machine (a virtual machine), unpinned, the same raw launch loop cost 4-17% more in
/// the benchmark's process than in the C program's, by row; pinned, within 1% (2026-11-27):
/// which core the scheduler gives each process, and the load on its sibling, moved them apart.
/// Returns the CPU, or `None` where the system refused.
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
pub struct Samples {
    pub columns: Vec<(Column, Vec<Option<f64>>)>,
}

/// Runs `op` on every side that has it for `rounds` rounds, after one warm-up each (which also
/// tells which sides have it). Each round runs every side once, the first one rotating from
/// round to round, so no side always runs on a warmer or colder machine; a noisy machine moves
/// the sides of one round together, which the per-round ratios ([`ratio`]) cancel.
pub fn interleave(rounds: usize, op: Op, sides: &mut [Box<dyn Contender>]) -> Samples {
    let live: Vec<usize> = (0..sides.len()).filter(|&i| sides[i].measure(op).is_some()).collect();
    let mut samples = vec![Vec::with_capacity(rounds); live.len()];
    for round in 0..rounds {
        for k in 0..live.len() {
            // Each column gets one sample per round, in round order.
            let i = (round + k) % live.len();
            samples[i].push(sides[live[i]].measure(op));
        }
    }
    Samples {
        columns: live.iter().map(|&i| sides[i].column()).zip(samples).collect(),
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}

impl Samples {
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
