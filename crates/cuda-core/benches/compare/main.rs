//! The safe API against the same loops in C, in raw `cuda-sys` calls, in cudarc and in
//! cuda.core (Python): one table, interleaved rounds, medians.
//!
//! Every side makes its own objects (context aside: all use the device's primary context), and
//! runs in a process of its own, a child server that answers one request line (an operation and
//! its loop) with one figure line:
//! - the safe API (`safe.rs`) through `cuda_core`, with its defaults: this executable as
//!   `serve CUBIN safe`;
//! - raw Rust (`raw.rs`) with raw driver calls and the flags a C program uses: `serve CUBIN raw`
//!   (`serve CUBIN` alone too);
//! - cudarc (`cudarc_side.rs`, feature `cudarc`) through its safe API: `serve CUBIN cudarc`;
//! - the C program (`benches/c/compare.c`), compiled on the GPU machine by the bundle's run.sh,
//!   and the Python script (`benches/python/compare.py`): `serve CUBIN`, for the rows they have.
//!
//! Why a process each: on the H100 (2026-11-27), the same raw loop cost 4.6% more (pool
//! allocation + free) and 18-20% more (event record + sync) in the benchmark's process, beside
//! the other sides' objects and threads, than in a process of its own, while the raw side in a
//! process of its own matched C within 1% on every row. So a side's figure is what a program
//! using only that library sees, and the safe API's ratio to C is not the other sides' doing.
//!
//! This process only schedules: it compiles the kernels once (NVRTC, for device 0's arch from
//! two attribute queries: no context, stream, pool or module here) into a cubin file every server
//! loads, starts the servers, sends each its request in every round (one server at a time, the
//! first rotating), and collects the figures. The process rows (process start to first kernel,
//! first compiles) start a fresh process per sample, from here, as before: fresh processes are
//! clean already. A server that fails (no GPU, a failed call) or gives no answer within a
//! minute ends its column: "-" from then on, and the run goes on.
//!
//! Why the servers restart: on the H100 (2026-11-27), the same raw loop in two processes (C and raw
//! Rust, which make the same driver calls) ran 2-5% apart in one run (raw Rust to C: burst launches
//! 1.020-1.025, event record + sync 1.052), and within 1% in another, on another instance of the
//! machine (0.99-1.006): each process has a bias of its own (its address space's layout, the pages
//! behind the driver's queues...), as large as the 2% goals, which no number of rounds against that
//! one process averages out. So the rows the servers answer run in passes: the servers' first
//! instances give the first share of every row's rounds, then all of them restart together, and the
//! next instances give the next share, and so on (`CUDA_CORE_BENCH_RESTART_EVERY`, default 12: at
//! most 12 rounds of a cheap row per instance, so 13 instances of each server, each giving a
//! thirteenth of every row's rounds). In each pass every row starts with one untimed request to
//! each server (its first request after a restart waits for its setup), and the rounds' rotation
//! goes on from the last pass. The process rows run last (their samples are fresh processes), the
//! last instances of the servers idle.
//!
//! Run with `cargo xtask bench-gpu` (or its bundle's run.sh). Prints one table, and writes
//! `$OUT/bench.json` when `OUT` is set. Every process runs on one CPU, the one the benchmark
//! starts on (the servers inherit it: they run one at a time, so they never compete for it;
//! `CUDA_CORE_BENCH_PIN=0` leaves them where the system puts them; the 8-thread rows' threads run
//! anywhere). Rounds: `CUDA_CORE_BENCH_ROUNDS` (default 151) for the cheap rows, a third of that
//! for the dear ones, `CUDA_CORE_BENCH_PROCESS_ROUNDS` (default 15) for those that start a
//! process per sample; `CUDA_CORE_BENCH_RESTART_EVERY` (default 12; at least
//! `CUDA_CORE_BENCH_ROUNDS`: no restart) rounds of a cheap row per instance of the servers at
//! most. Needs a GPU, and fails with a message without one; `CUDA_CORE_BENCH_SM` (`sm_XY`) skips
//! the device query, for trying the orchestration on a machine without a GPU (every GPU side then
//! fails to start and shows "-").

mod children;
#[cfg(feature = "cudarc")]
mod cudarc_side;
mod measure;
mod peer;
mod raw;
mod report;
mod safe;

use children::Children;
use cuda_core::{CodeType, Device, Program, ProgramOptions, SourceType};
use measure::{interleave, Arch, Column, Op, BURST, POOL_PAIRS, POOL_SYNCS, SUSTAINED, SUSTAINED_GRAPHS, SYNCS};
use peer::Peer;
use report::Cost::{self, Cheap, Dear, Process};
use report::Goal::{self, AtLeast, Reference, Under, Within};
use report::{Row, Spec};
use std::path::PathBuf;
use std::time::Instant;

/// The kernels every side launches, and every compile row compiles: k2 and k8 never write (no
/// block has a thread 1024), so a null pointer is a valid argument.
pub const SOURCE: &str = r#"
        extern "C" __global__ void k2(float* x, unsigned n) { if (x && threadIdx.x == 1024) x[0] = n; }
        extern "C" __global__ void k8(float* x, unsigned n, int a, int b, float c, float d, long long e, double f) {
            if (x && threadIdx.x == 1024) x[0] = n + a + b + c + d + e + f;
        }"#;

/// The size of the copy rows.
pub const COPY_BYTES: usize = 256 << 20;

const fn spec(name: &'static str, unit: &'static str, op: Op, goal: Goal, cost: Cost) -> Spec {
    Spec {
        name,
        unit,
        op,
        goal,
        cost,
    }
}

/// Every row, in the table's order. The launch rows' safe side uses a `TypedKernel` unless the
/// row says "generic" (`cuda_core::launch`).
const ROWS: &[Spec] = &[
    spec(
        "burst launch, 2 args, generic",
        "us",
        Op::Launch2(BURST),
        Within(2.0),
        Cheap,
    ),
    spec(
        "burst launch, 2 args",
        "us",
        Op::TypedLaunch2(BURST),
        Within(2.0),
        Cheap,
    ),
    spec(
        "burst launch, 8 args",
        "us",
        Op::TypedLaunch8(BURST),
        Within(2.0),
        Cheap,
    ),
    spec(
        "burst launch, buffer + 1 arg",
        "us",
        Op::BufferLaunch(BURST),
        Within(2.0),
        Cheap,
    ),
    spec(
        "sustained launch, 2 args",
        "us",
        Op::TypedLaunch2(SUSTAINED),
        Within(2.0),
        Dear,
    ),
    spec(
        "sustained launch, 8 args",
        "us",
        Op::TypedLaunch8(SUSTAINED),
        Within(2.0),
        Dear,
    ),
    spec(
        "10-kernel graph launch, burst",
        "us",
        Op::Graph(BURST),
        Within(2.0),
        Cheap,
    ),
    spec(
        "10-kernel graph launch, sustained",
        "us",
        Op::Graph(SUSTAINED_GRAPHS),
        Within(2.0),
        Dear,
    ),
    spec(
        "1 MiB pool alloc + free",
        "us",
        Op::Pool(POOL_PAIRS),
        Within(5.0),
        Cheap,
    ),
    spec(
        "1 MiB alloc + free, owned pool",
        "us",
        Op::OwnedPool(POOL_PAIRS),
        Within(5.0),
        Cheap,
    ),
    spec(
        "1 MiB alloc + free + stream sync",
        "us",
        Op::PoolSync(POOL_SYNCS),
        Within(5.0),
        Dear,
    ),
    spec("event record + sync", "us", Op::Event(SYNCS), Within(5.0), Cheap),
    spec("stream sync, idle", "us", Op::StreamSync(SYNCS), Within(5.0), Cheap),
    spec(
        "launches, 8 threads on 8 streams",
        "M/s",
        Op::ThreadLaunches,
        Within(2.0),
        Dear,
    ),
    spec(
        "1 MiB alloc + free, 8 threads on 8 streams",
        "M/s",
        Op::ThreadPool,
        Within(5.0),
        Dear,
    ),
    spec("pinned H2D 256 MiB", "GB/s", Op::HostToDevice, AtLeast(97.0), Dear),
    spec("pinned D2H 256 MiB", "GB/s", Op::DeviceToHost, AtLeast(97.0), Dear),
    spec(
        "D2D 256 MiB (read+write)",
        "TB/s",
        Op::DeviceToDevice,
        AtLeast(97.0),
        Dear,
    ),
    spec("NVRTC compile to cubin, cold", "ms", Op::CompileCold, Within(5.0), Dear),
    spec(
        "NVRTC compile to cubin + disk cache store",
        "ms",
        Op::CompileStore,
        STORE,
        Dear,
    ),
    spec(
        "NVRTC compile to cubin, disk cache hit",
        "ms",
        Op::CompileHit,
        Under(1.0),
        Dear,
    ),
    spec(
        "StridedMemoryView from a DLPack tensor",
        "us",
        Op::StridedView,
        Under(1.0),
        Dear,
    ),
    spec(
        "process start to first kernel finished",
        "ms",
        Op::FirstKernel,
        Within(10.0),
        Process,
    ),
    spec(
        "first NVRTC compile in a process",
        "ms",
        Op::FirstCompile(Arch::Given),
        Within(5.0),
        Process,
    ),
    spec(
        "first compile, device's arch",
        "ms",
        Op::FirstCompile(Arch::Device),
        Within(5.0),
        Process,
    ),
];
const STORE: Goal = Reference("a cold compile plus the file write");

/// Rounds per row, by the cost of its samples, and how often the servers restart. The defaults
/// keep the whole run near two minutes on an H100 (an estimate: 69 s with one instance of each
/// server, 2026-11-27, and about 3 s per further instance, see below) while the cheap rows'
/// medians settle within a percent (a sample there is 1024 launches, or 1000-2000 pairs, so one
/// round is a few milliseconds).
struct Rounds {
    cheap: usize,
    process: usize,
    /// At most this many rounds of a cheap row (and as large a share of the others') per
    /// instance of the servers.
    restart_every: usize,
}

impl Rounds {
    fn from_env() -> Rounds {
        let var = |name: &str, default| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        Rounds {
            cheap: var("CUDA_CORE_BENCH_ROUNDS", 151),
            process: var("CUDA_CORE_BENCH_PROCESS_ROUNDS", 15),
            restart_every: var("CUDA_CORE_BENCH_RESTART_EVERY", 12),
        }
    }

    /// The instances of every server: each gives a row's rounds from `row * i / n` to
    /// `row * (i + 1) / n` (13 by default: 11-12 rounds of a cheap row, 3-4 of a dear one). On
    /// the H100 a further instance costs about 3 s (an estimate: its start, about 2 s for the five
    /// servers started together, as the first row's time shows, plus one untimed request per
    /// row, 0.7 s in all).
    fn instances(&self) -> usize {
        self.cheap.div_ceil(self.restart_every)
    }

    /// The rounds of a row of `cost` that instance `i` of the servers gives.
    fn of_instance(&self, cost: Cost, i: usize) -> std::ops::Range<usize> {
        let (all, n) = (self.of(cost), self.instances());
        all * i / n..all * (i + 1) / n
    }

    fn of(&self, cost: Cost) -> usize {
        match cost {
            Cheap => self.cheap,
            Dear => (self.cheap / 3).max(5),
            Process => self.process,
        }
    }
}

/// What the benchmark's process holds: the kernels compiled once (by the safe API's NVRTC
/// wrapper; the cubin is data every server loads into a module of its own) in files for the child
/// processes, and what the process rows' children are given. Only this process makes one; its
/// drop removes the files (the servers never make one, so never remove them).
pub struct Setup {
    /// Device 0's name, for the JSON (`None` with `CUDA_CORE_BENCH_SM`).
    device_name: Option<String>,
    source_path: PathBuf,
    children: Children,
}

impl Setup {
    /// Device 0's arch (two attribute queries after `cuInit`: no context) or the one
    /// `CUDA_CORE_BENCH_SM` names, the kernels compiled for it, the files written.
    fn new() -> Result<Setup, String> {
        let (sm, device_name) = match std::env::var("CUDA_CORE_BENCH_SM") {
            Ok(sm) => (sm, None),
            Err(_) => {
                let device = Device::new(0).map_err(|e| {
                    format!(
                        "the benchmark needs a GPU: device 0: {e} (CUDA_CORE_BENCH_SM=sm_XY tries the rest without)"
                    )
                })?;
                let arch = device.arch().map_err(|e| format!("device 0's arch: {e}"))?;
                (format!("sm_{arch}"), device.name().ok())
            }
        };
        // The arch given: `ProgramOptions::default()` would take it from the current device
        // (`cuInit` and the same queries; no context either), given here to be explicit.
        let options = ProgramOptions {
            arch: Some(sm.clone()),
            ..Default::default()
        };
        let code = Program::new(SOURCE, SourceType::Cxx, options)
            .and_then(|mut p| p.compile(CodeType::Cubin, &[]))
            .map_err(|e| format!("compiling the kernels for {sm}: {e}"))?;
        let cubin = code.bytes().map_err(|e| format!("the cubin: {e}"))?;
        let file = |ext: &str| std::env::temp_dir().join(format!("cuda-core-bench-{}.{ext}", std::process::id()));
        let (cubin_path, source_path) = (file("cubin"), file("cu"));
        let write =
            |path: &PathBuf, bytes: &[u8]| std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()));
        write(&cubin_path, &cubin)?;
        write(&source_path, SOURCE.as_bytes())?;
        let nvrtc_path = cuda_sys::LibraryId::Nvrtc
            .library()
            .path()
            .expect("NVRTC was loaded by the compile above")
            .to_path_buf();
        Ok(Setup {
            device_name,
            source_path,
            children: Children {
                cubin_path,
                nvrtc_path,
                sm,
            },
        })
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.children.cubin_path);
        let _ = std::fs::remove_file(&self.source_path);
    }
}

/// Every side that could be started here, each a server of its own, the C program first (a
/// missing program is said on stderr; a server that fails to start says so when first asked).
fn sides(setup: &Setup) -> Vec<Peer> {
    let mut sides = Vec::new();
    match Peer::c(setup) {
        Some(c) => sides.push(c),
        None => eprintln!("compare: no C column (CUDA_CORE_BENCH_C names no C program; run.sh builds it)"),
    }
    sides.extend(Peer::ours(Column::Safe, "safe", setup));
    sides.extend(Peer::ours(Column::Raw, "raw", setup));
    #[cfg(feature = "cudarc")]
    sides.extend(Peer::ours(Column::Cudarc, "cudarc", setup));
    #[cfg(not(feature = "cudarc"))]
    eprintln!("compare: no cudarc column (built without the `cudarc` feature)");
    match Peer::python(setup) {
        Some(python) => sides.push(python),
        None => eprintln!("compare: no cuda.core column (run.sh found no Python with cuda.core)"),
    }
    sides
}

/// The device, its driver and what ran, for the JSON.
fn meta(
    setup: &Setup,
    rounds: &Rounds,
    instances: &[(Column, usize)],
    cpu: Option<usize>,
    seconds: f64,
) -> serde_json::Value {
    serde_json::json!({
        "pinned_to_cpu": cpu,
        "processes": "each side a server process of its own, restarted together between passes over the rows, \
                      so that each row's samples come from several instances of each server (`instances`: those \
                      that answered, per side; every row's `rounds_per_instance`); the process rows a fresh process \
                      per sample",
        "restart_every": rounds.restart_every,
        "instances": instances.iter().map(|&(c, n)| (c.key().to_string(), n.into())).collect::<serde_json::Map<_, _>>(),
        "device": setup.device_name,
        "sm": setup.children.sm,
        "driver": cuda_core::system::get_kernel_mode_driver_version().ok(),
        "cuda": cuda_core::system::get_user_mode_driver_version().ok().map(|(a, b)| format!("{a}.{b}")),
        "nvrtc": setup.children.nvrtc_path,
        "rounds": { "cheap": rounds.of(Cheap), "dear": rounds.of(Dear), "process": rounds.process },
        "seconds": seconds,
    })
}

fn main() {
    if children::run_if_child() {
        return;
    }
    let started = Instant::now();
    let rounds = Rounds::from_env();
    for spec in ROWS {
        let op = spec.op;
        let served = op.request().and_then(|line| Op::from_request(&line));
        assert!(
            op.is_process() || served == Some(op),
            "{op:?} does not survive its request line"
        );
    }
    let cpu = match std::env::var("CUDA_CORE_BENCH_PIN").as_deref() {
        Ok("0") => None,
        _ => measure::pin_to_one_cpu(),
    };
    let setup = Setup::new().unwrap_or_else(|e| {
        eprintln!("compare: {e}");
        std::process::exit(1)
    });
    let mut sides = sides(&setup);
    let mut rows: Vec<Row> = ROWS
        .iter()
        .map(|spec| Row {
            spec,
            samples: Default::default(),
            seconds: 0.0,
        })
        .collect();
    // The rows the servers answer, in passes: each instance of the servers gives its share of
    // every row's rounds, then all restart (see `peer::restart`).
    let instances = rounds.instances();
    for i in 0..instances {
        let t = Instant::now();
        if i > 0 {
            peer::restart(&mut sides);
        }
        let restart = t.elapsed().as_secs_f64();
        for row in rows.iter_mut().filter(|row| !row.spec.op.is_process()) {
            let share = rounds.of_instance(row.spec.cost, i);
            if share.is_empty() {
                continue;
            }
            let t = Instant::now();
            row.samples.append(interleave(share, row.spec.op, &mut sides));
            row.seconds += t.elapsed().as_secs_f64();
        }
        eprintln!(
            "compare: the servers' instance {} of {instances} ({:.1} s, {restart:.1} s of it to end the last ones)",
            i + 1,
            t.elapsed().as_secs_f64()
        );
    }
    // The process rows start fresh processes: no restart.
    for row in rows.iter_mut().filter(|row| row.spec.op.is_process()) {
        let t = Instant::now();
        row.samples = interleave(0..rounds.of(row.spec.cost), row.spec.op, &mut sides);
        row.seconds = t.elapsed().as_secs_f64();
        eprintln!("compare: {} ({:.1} s)", row.spec.name, row.seconds);
    }
    let per_side: Vec<(Column, usize)> = sides.iter().map(|side| (side.column(), side.instances())).collect();
    // Each server ends at the end of its input; waits for them.
    drop(sides);
    let seconds = started.elapsed().as_secs_f64();
    let meta = meta(&setup, &rounds, &per_side, cpu, seconds);
    println!("{}", meta);
    report::print(&rows, instances, &per_side);
    println!("the whole run took {seconds:.0} s");
    if let Some(out) = std::env::var_os("OUT") {
        let path = report::write_json(&rows, meta, std::path::Path::new(&out)).unwrap();
        println!("wrote {}", path.display());
    }
    if !rows.iter().any(|row| row.samples.median(Column::Safe).is_some()) {
        eprintln!("compare: the cuda-core side gave no figure (its server's error is above)");
        drop(setup);
        std::process::exit(1);
    }
}
