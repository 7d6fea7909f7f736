//! The safe API against the same loops in C, in raw `cuda-sys` calls, in cudarc and in
//! cuda.core (Python): one table, interleaved rounds, medians.
//!
//! Every side makes its own objects (context aside: all use the device's primary context):
//! - the safe API (`safe.rs`) through `cuda_core`, with its defaults;
//! - raw Rust (`raw.rs`) with raw driver calls and the flags a C program uses;
//! - the C program (`benches/c/compare.c`), compiled on the GPU machine by the bundle's run.sh,
//!   and the Python script (`benches/python/compare.py`), as child servers: each round sends
//!   them one request line and reads back their figure, so they run in the same rounds;
//! - cudarc (`cudarc_side.rs`, feature `cudarc`) through its safe API.
//!
//! Run with `cargo xtask bench-gpu` (or its bundle's run.sh). Prints one table, and writes
//! `$OUT/bench.json` when `OUT` is set. Every process runs on one CPU, the one the benchmark
//! starts on (`CUDA_CORE_BENCH_PIN=0` leaves them where the system puts them; the 8-thread rows'
//! threads run anywhere). Rounds: `CUDA_CORE_BENCH_ROUNDS` (default 151) for the
//! cheap rows, a third of that for the dear ones, `CUDA_CORE_BENCH_PROCESS_ROUNDS` (default 15)
//! for those that start a process per sample. Needs a GPU; fails loudly without one.

mod children;
#[cfg(feature = "cudarc")]
mod cudarc_side;
mod measure;
mod peer;
mod raw;
mod report;
mod safe;

use children::Children;
use cuda_core::{CodeType, Context, Device, Program, ProgramOptions, SourceType};
use measure::{interleave, Arch, Contender, Op, BURST, POOL_PAIRS, POOL_SYNCS, SUSTAINED, SUSTAINED_GRAPHS, SYNCS};
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

/// Rounds per row, by the cost of its samples. The defaults keep the whole run near two
/// minutes on an H100 while the cheap rows' medians settle within a percent (a sample there is
/// 1024 launches, or 1000-2000 pairs, so one round is a few milliseconds).
struct Rounds {
    cheap: usize,
    process: usize,
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
        }
    }

    fn of(&self, cost: Cost) -> usize {
        match cost {
            Cheap => self.cheap,
            Dear => (self.cheap / 3).max(5),
            Process => self.process,
        }
    }
}

/// What every side starts from: device 0, current, and the kernels compiled once (by the safe
/// API; the cubin is data every side loads into a module of its own), in files for the child
/// processes.
pub struct Setup {
    device: Device,
    _context: Context,
    cubin: Vec<u8>,
    source_path: PathBuf,
    children: Children,
}

impl Setup {
    fn new() -> Setup {
        let device = Device::new(0).expect("the benchmarks need a GPU");
        let context = device.set_current().unwrap();
        let code = Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())
            .unwrap()
            .compile(CodeType::Cubin, &[])
            .unwrap();
        let cubin = code.bytes().unwrap().to_vec();
        let file = |ext: &str| std::env::temp_dir().join(format!("cuda-core-bench-{}.{ext}", std::process::id()));
        let (cubin_path, source_path) = (file("cubin"), file("cu"));
        std::fs::write(&cubin_path, &cubin).unwrap();
        std::fs::write(&source_path, SOURCE).unwrap();
        let nvrtc_path = cuda_sys::LibraryId::Nvrtc
            .library()
            .path()
            .expect("NVRTC was loaded by the compile above")
            .to_path_buf();
        Setup {
            children: Children {
                cubin_path,
                nvrtc_path,
                sm: format!("sm_{}", device.arch().unwrap()),
            },
            device,
            _context: context,
            cubin,
            source_path,
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.children.cubin_path);
        let _ = std::fs::remove_file(&self.source_path);
    }
}

/// Every side that could be set up here, the C program first (its absence is said on stderr).
fn sides(setup: &Setup) -> Vec<Box<dyn Contender>> {
    let mut sides: Vec<Box<dyn Contender>> = Vec::new();
    match peer::Peer::c(setup) {
        Some(c) => sides.push(Box::new(c)),
        None => eprintln!("compare: no C column (CUDA_CORE_BENCH_C names no C program; run.sh builds it)"),
    }
    sides.push(Box::new(safe::Safe::new(setup)));
    sides.push(Box::new(raw::Raw::new(&setup.cubin, setup.children.clone())));
    match peer::Peer::raw_alone(setup) {
        Some(alone) => sides.push(Box::new(alone)),
        None => eprintln!("compare: no column for the raw side in a process of its own"),
    }
    #[cfg(feature = "cudarc")]
    match cudarc_side::Cudarc::new(setup) {
        Ok(cudarc) => sides.push(Box::new(cudarc)),
        Err(e) => eprintln!("compare: no cudarc column: {e}"),
    }
    #[cfg(not(feature = "cudarc"))]
    eprintln!("compare: no cudarc column (built without the `cudarc` feature)");
    match peer::Peer::python(setup) {
        Some(python) => sides.push(Box::new(python)),
        None => eprintln!("compare: no cuda.core column (run.sh found no Python with cuda.core)"),
    }
    sides
}

/// The device, its driver and what ran, for the JSON.
fn meta(setup: &Setup, rounds: &Rounds, cpu: Option<usize>, seconds: f64) -> serde_json::Value {
    serde_json::json!({
        "pinned_to_cpu": cpu,
        "device": setup.device.name().ok(),
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
    let cpu = match std::env::var("CUDA_CORE_BENCH_PIN").as_deref() {
        Ok("0") => None,
        _ => measure::pin_to_one_cpu(),
    };
    let setup = Setup::new();
    let mut sides = sides(&setup);
    let rows: Vec<Row> = ROWS
        .iter()
        .map(|spec| {
            let t = Instant::now();
            let samples = interleave(rounds.of(spec.cost), spec.op, &mut sides);
            let seconds = t.elapsed().as_secs_f64();
            eprintln!("compare: {} ({seconds:.1} s)", spec.name);
            Row { spec, samples, seconds }
        })
        .collect();
    drop(sides);
    let seconds = started.elapsed().as_secs_f64();
    let meta = meta(&setup, &rounds, cpu, seconds);
    println!("{}", meta);
    report::print(&rows);
    println!("the whole run took {seconds:.0} s");
    if let Some(out) = std::env::var_os("OUT") {
        let path = report::write_json(&rows, meta, std::path::Path::new(&out)).unwrap();
        println!("wrote {}", path.display());
    }
}
