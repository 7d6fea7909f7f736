//! The safe API against raw `cuda-sys` calls, in one process, alternating, median of rounds.
//!
//! Run with `cargo xtask bench-gpu` (or its bundle's run.sh). Prints one table, and writes
//! `$OUT/bench.json` when `OUT` is set. Needs a GPU; fails loudly without one.

use cuda_core::{
    launch, CodeType, Device, EventOptions, FileStreamProgramCache, LaunchConfig, PinnedMemoryResource, Program,
    ProgramOptions, SourceType, StreamOptions,
};
use cuda_sys::driver;
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Rounds per operation: each round times the safe and the raw version once, in alternating
/// order, and the table shows the medians. Host-side costs of a few microseconds move by several
/// percent from one burst to the next on a shared machine, so many short rounds are needed for a
/// 2% verdict (101 rounds left the launch rows' medians a percent or two apart from one run to
/// the next).
const ROUNDS: usize = 201;
/// Rounds for the start-up row, where each sample is a new process (with 9, one run in three
/// landed a few percent away from the others).
const STARTUP_ROUNDS: usize = 15;
/// Rounds for the first-compile rows (a new process and a compile of tens of milliseconds each).
const FIRST_COMPILE_ROUNDS: usize = 21;
const BURST: usize = 128;

struct Row {
    name: &'static str,
    unit: &'static str,
    safe: f64,
    /// The raw figure, and the median of the per-round ratios safe / raw (see `alternate_n`).
    raw: Option<(f64, f64)>,
    goal: &'static str,
    /// Higher is better (bandwidth) rather than lower (time).
    higher_is_better: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Alternates `safe` and `raw` for ROUNDS rounds; each returns its own measurement.
fn alternate(safe: impl FnMut() -> f64, raw: impl FnMut() -> f64) -> (f64, f64, f64) {
    alternate_n(ROUNDS, safe, raw)
}

/// Alternates `safe` and `raw` for `rounds` rounds, swapping which goes first every round (so
/// neither always runs on a warmer or colder machine), after one warm-up each. Returns the median
/// of each, and the median of the per-round ratios safe / raw: each round's pair ran back to back
/// on the same machine state, so their ratio is steadier than the ratio of the medians on a
/// shared, drifting machine.
fn alternate_n(rounds: usize, mut safe: impl FnMut() -> f64, mut raw: impl FnMut() -> f64) -> (f64, f64, f64) {
    let (mut s, mut r, mut q) = (Vec::new(), Vec::new(), Vec::new());
    safe();
    raw();
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = safe();
            (a, raw())
        } else {
            let b = raw();
            (safe(), b)
        };
        s.push(a);
        r.push(b);
        q.push(a / b);
    }
    (median(s), median(r), median(q))
}

/// Milliseconds from starting this executable as a child with `env` (one of its child modes) to
/// its exit, which must be a success.
fn child_ms(exe: &std::path::Path, env: &[(&str, &std::ffi::OsStr)]) -> f64 {
    let start = monotonic_ns();
    let out = std::process::Command::new(exe)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "the child {env:?} failed");
    let reached = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(MILESTONE)?.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the child {env:?} did not report its milestone"));
    reached.saturating_sub(start) as f64 / 1e6
}

/// What a child prints, with [`monotonic_ns`], when it reaches what its row measures (the kernel
/// finished, the cubin in memory): the time from its start to there, not its teardown, is the
/// sample.
const MILESTONE: &str = "milestone ";

/// Reports the milestone to the parent (see [`child_ms`]).
fn milestone() {
    println!("{MILESTONE}{}", monotonic_ns());
}

/// The system's monotonic clock, in nanoseconds: one clock for the parent and its children.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: out-pointer to a local; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn us(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn check(status: driver::CUresult) {
    if let Err(e) = status.result() {
        panic!("{e}");
    }
}

/// Child mode of the start-up row: from a fresh process, load the cubin at `path`, launch one
/// kernel and wait for it, through the safe API or raw calls, then exit.
fn first_kernel(mode: &str, path: &str) {
    let cubin = std::fs::read(path).unwrap();
    if mode == "safe" {
        let device = Device::new(0).unwrap();
        device.set_current().unwrap();
        let stream = device.create_stream(StreamOptions::default()).unwrap();
        let kernel = cuda_core::ObjectCode::from_cubin(cubin, "first")
            .unwrap()
            .get_kernel("k2")
            .unwrap();
        // SAFETY: k2(float*, unsigned) with a null pointer, which it does not dereference.
        unsafe { launch(&stream, &LaunchConfig::new(1, 32), &kernel, (0u64, 1u32)).unwrap() };
        stream.sync().unwrap();
        milestone();
    } else {
        // SAFETY: the raw sequence, each out-pointer a local; the cubin outlives the load.
        unsafe {
            check(driver::cuInit(0));
            let mut dev = 0;
            check(driver::cuDeviceGet(&mut dev, 0));
            let mut ctx = std::ptr::null_mut();
            check(driver::cuDevicePrimaryCtxRetain(&mut ctx, dev));
            check(driver::cuCtxSetCurrent(ctx));
            let mut stream = std::ptr::null_mut();
            check(driver::cuStreamCreate(
                &mut stream,
                driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0,
            ));
            let mut lib = std::ptr::null_mut();
            check(driver::cuLibraryLoadData(
                &mut lib,
                cubin.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            ));
            let mut kernel = std::ptr::null_mut();
            check(driver::cuLibraryGetKernel(&mut kernel, lib, c"k2".as_ptr()));
            let (mut x, mut n) = (0u64, 1u32);
            let mut params = [(&mut x as *mut u64).cast::<c_void>(), (&mut n as *mut u32).cast()];
            check(driver::cuLaunchKernel(
                kernel as driver::CUfunction,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ));
            check(driver::cuStreamSynchronize(stream));
        }
        milestone();
    }
}

/// The kernel source every compile row builds.
const SOURCE: &str = r#"
        extern "C" __global__ void k2(float* x, unsigned n) { if (x && threadIdx.x == 1024) x[0] = n; }
        extern "C" __global__ void k8(float* x, unsigned n, int a, int b, float c, float d, long long e, double f) {
            if (x && threadIdx.x == 1024) x[0] = n + a + b + c + d + e + f;
        }"#;

/// Child mode of the first-compile rows: from a fresh process, compile [`SOURCE`] to a cubin
/// once, then exit. `arch` is `sm_XY`, or `device` to take it from device 0 as
/// `ProgramOptions::default()` does.
///
/// `safe` goes through the safe API, which finds and loads NVRTC (and the driver) itself: the
/// pathfinder's search is included. `raw` is what a C program linked against NVRTC (and
/// `-lcuda`) does: the dynamic loader maps the libraries, NVRTC from the path the parent found
/// (as an rpath would give it) and the driver by its soname, and the functions are bound by
/// symbol; then the same calls (`cuInit` and two attribute queries for the device's arch, then
/// the five NVRTC calls).
fn first_compile(mode: &str, arch: &str, lib: &str) {
    if mode == "safe" {
        let options = ProgramOptions {
            arch: (arch != "device").then(|| arch.to_string()),
            ..Default::default()
        };
        let code = Program::new(SOURCE, SourceType::Cxx, options)
            .unwrap()
            .compile(CodeType::Cubin, &[])
            .unwrap();
        assert!(!code.bytes().unwrap().is_empty());
        milestone();
        return;
    }
    use std::ffi::{c_char, c_int, CStr, CString};
    extern "C" {
        fn dlopen(name: *const c_char, flags: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    }
    type Create = unsafe extern "C" fn(
        *mut *mut c_void,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    type Compile = unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> c_int;
    type Size = unsafe extern "C" fn(*mut c_void, *mut usize) -> c_int;
    type Get = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
    type Init = unsafe extern "C" fn(u32) -> c_int;
    type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Attribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    const RTLD_NOW: c_int = 2;
    const MAJOR: c_int = driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR.0 as c_int;
    const MINOR: c_int = driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR.0 as c_int;
    // SAFETY: the libraries are the driver and NVRTC; each symbol is cast to its C signature from
    // cuda.h / nvrtc.h; out-pointers are locals; the strings outlive the calls; the cubin buffer
    // has the size NVRTC reports.
    unsafe {
        let sym = |h: *mut c_void, name: &CStr| {
            let f = dlsym(h, name.as_ptr());
            assert!(!f.is_null(), "no {name:?}");
            f
        };
        let arch = if arch == "device" {
            let cuda = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
            assert!(!cuda.is_null(), "dlopen of libcuda.so.1 failed");
            let init: Init = std::mem::transmute(sym(cuda, c"cuInit"));
            let get: DeviceGet = std::mem::transmute(sym(cuda, c"cuDeviceGet"));
            let attribute: Attribute = std::mem::transmute(sym(cuda, c"cuDeviceGetAttribute"));
            let (mut dev, mut major, mut minor) = (0, 0, 0);
            assert_eq!(init(0), 0);
            assert_eq!(get(&mut dev, 0), 0);
            assert_eq!(attribute(&mut major, MAJOR, dev), 0);
            assert_eq!(attribute(&mut minor, MINOR, dev), 0);
            format!("sm_{major}{minor}")
        } else {
            arch.to_string()
        };
        let lib = CString::new(lib).unwrap();
        let src = CString::new(SOURCE).unwrap();
        let opt = CString::new(format!("--gpu-architecture={arch}")).unwrap();
        let h = dlopen(lib.as_ptr(), RTLD_NOW);
        assert!(!h.is_null(), "dlopen of NVRTC failed");
        let create: Create = std::mem::transmute(sym(h, c"nvrtcCreateProgram"));
        let compile: Compile = std::mem::transmute(sym(h, c"nvrtcCompileProgram"));
        let size: Size = std::mem::transmute(sym(h, c"nvrtcGetCUBINSize"));
        let get: Get = std::mem::transmute(sym(h, c"nvrtcGetCUBIN"));
        let destroy: Destroy = std::mem::transmute(sym(h, c"nvrtcDestroyProgram"));
        let mut prog = std::ptr::null_mut();
        assert_eq!(
            create(
                &mut prog,
                src.as_ptr(),
                c"raw.cu".as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null()
            ),
            0
        );
        assert_eq!(compile(prog, 1, [opt.as_ptr()].as_ptr()), 0);
        let mut n = 0;
        assert_eq!(size(prog, &mut n), 0);
        let mut cubin = vec![0u8; n];
        assert_eq!(get(prog, cubin.as_mut_ptr().cast()), 0);
        milestone();
        assert_eq!(destroy(&mut prog), 0);
        assert!(!cubin.is_empty());
    }
}

fn main() {
    if let (Ok(mode), Ok(arch), Ok(lib)) = (
        std::env::var("CUDA_CORE_BENCH_FIRST_COMPILE"),
        std::env::var("CUDA_CORE_BENCH_ARCH"),
        std::env::var("CUDA_CORE_BENCH_NVRTC"),
    ) {
        first_compile(&mode, &arch, &lib);
        return;
    }
    if let (Ok(mode), Ok(path)) = (
        std::env::var("CUDA_CORE_BENCH_FIRST_KERNEL"),
        std::env::var("CUDA_CORE_BENCH_CUBIN"),
    ) {
        first_kernel(&mode, &path);
        return;
    }
    let device = Device::new(0).expect("the benchmarks need a GPU");
    let ctx = device.set_current().unwrap();
    let stream = device.create_stream(StreamOptions::default()).unwrap();
    let raw_stream = stream.handle();
    let source = SOURCE;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let k2 = code.get_kernel("k2").unwrap();
    let k8 = code.get_kernel("k8").unwrap();
    let t2 = k2.typed::<(u64, u32)>().unwrap();
    let t8 = k8.typed::<(u64, u32, i32, i32, f32, f32, i64, f64)>().unwrap();
    let config = LaunchConfig::new(1, 32);
    let mut rows = Vec::new();

    // Kernel launches, host time per launch in bursts of 128 (synchronised between bursts).
    let burst = |f: &mut dyn FnMut()| -> f64 {
        let t = Instant::now();
        for _ in 0..BURST {
            f();
        }
        let d = t.elapsed();
        // SAFETY: the stream is live.
        check(unsafe { driver::cuStreamSynchronize(raw_stream) });
        us(d, BURST)
    };
    let raw_launch = |f: driver::CUfunction, params: &mut [*mut c_void]| {
        // SAFETY: the parameters match the kernels above; the kernels write nothing.
        check(unsafe {
            driver::cuLaunchKernel(
                f,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                raw_stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        });
    };
    let f2 = k2.handle() as driver::CUfunction;
    let f8 = k8.handle() as driver::CUfunction;
    let (s, r, q) = alternate(
        || {
            burst(&mut || {
                // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                unsafe { launch(&stream, &config, &k2, (0u64, 1u32)).unwrap() }
            })
        },
        || {
            burst(&mut || {
                let (mut x, mut n) = (0u64, 1u32);
                raw_launch(f2, &mut [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()]);
            })
        },
    );
    rows.push(Row {
        name: "launch, 2 args",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });
    let (s, r, q) = alternate(
        || {
            burst(&mut || {
                // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                unsafe { t2.launch(&stream, &config, (0u64, 1u32)).unwrap() }
            })
        },
        || {
            burst(&mut || {
                let (mut x, mut n) = (0u64, 1u32);
                raw_launch(f2, &mut [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()]);
            })
        },
    );
    rows.push(Row {
        name: "typed launch, 2 args",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });
    // A buffer as an argument: the launch keeps it alive (its same-stream use costs a comparison).
    let tb = k2.typed::<(*mut f32, u32)>().unwrap();
    let xb = device.allocate(4, &stream).unwrap();
    let view = xb.view_as::<f32>().unwrap();
    let (s, r, q) = alternate(
        || {
            burst(&mut || {
                // SAFETY: k2 with a 4-byte buffer: the kernel writes nothing (no thread 1024).
                unsafe { tb.launch(&stream, &config, (view, 1u32)).unwrap() }
            })
        },
        || {
            burst(&mut || {
                let (mut x, mut n) = (xb.handle(), 1u32);
                raw_launch(f2, &mut [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()]);
            })
        },
    );
    rows.push(Row {
        name: "typed launch, buffer + 1 arg",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });
    let args8 = (0u64, 1u32, 2i32, 3i32, 4.0f32, 5.0f32, 6i64, 7.0f64);
    let (s, r, q) = alternate(
        || {
            burst(&mut || {
                // SAFETY: k8 with a null pointer and plain values: the kernel touches no memory.
                unsafe { t8.launch(&stream, &config, args8).unwrap() }
            })
        },
        || {
            burst(&mut || {
                let (mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h) = args8;
                raw_launch(
                    f8,
                    &mut [
                        (&mut a as *mut u64).cast(),
                        (&mut b as *mut u32).cast(),
                        (&mut c as *mut i32).cast(),
                        (&mut d as *mut i32).cast(),
                        (&mut e as *mut f32).cast(),
                        (&mut f as *mut f32).cast(),
                        (&mut g as *mut i64).cast(),
                        (&mut h as *mut f64).cast(),
                    ],
                );
            })
        },
    );
    rows.push(Row {
        name: "typed launch, 8 args",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });
    // Sustained: 20 000 launches, the queue filling up.
    let sustained = |f: &mut dyn FnMut()| -> f64 {
        let t = Instant::now();
        for _ in 0..20_000 {
            f();
        }
        let d = t.elapsed();
        // SAFETY: the stream is live.
        check(unsafe { driver::cuStreamSynchronize(raw_stream) });
        us(d, 20_000)
    };
    let (s, r, q) = alternate(
        || {
            sustained(&mut || {
                // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                unsafe { t2.launch(&stream, &config, (0u64, 1u32)).unwrap() }
            })
        },
        || {
            sustained(&mut || {
                let (mut x, mut n) = (0u64, 1u32);
                raw_launch(f2, &mut [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()]);
            })
        },
    );
    rows.push(Row {
        name: "typed launch, sustained",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });

    // A 10-kernel graph, launched in bursts.
    let graph = stream
        .capture_graph(cuda_core::graph::CaptureMode::ThreadLocal, |s| {
            for _ in 0..10 {
                // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                unsafe { t2.launch(s, &config, (0u64, 1u32))? };
            }
            Ok(())
        })
        .unwrap();
    let exec = graph.handle();
    let (s, r, q) = alternate(
        || burst(&mut || graph.launch(&stream).unwrap()),
        || {
            burst(&mut || {
                // SAFETY: the executable graph and the stream are live.
                check(unsafe { driver::cuGraphLaunch(exec, raw_stream) })
            })
        },
    );
    rows.push(Row {
        name: "graph launch, 10 kernels",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: false,
    });

    // Stream-ordered allocation and free of 1 MiB.
    let n = 1000;
    let pool = device.memory_resource().unwrap();
    let (s, r, q) = alternate(
        || {
            let t = Instant::now();
            for _ in 0..n {
                drop(pool.allocate(1 << 20, &stream).unwrap());
            }
            let d = t.elapsed();
            stream.sync().unwrap();
            us(d, n)
        },
        || {
            let t = Instant::now();
            for _ in 0..n {
                let mut p = 0;
                // SAFETY: out-pointer to a local; freed right after on the same stream.
                unsafe {
                    check(driver::cuMemAllocAsync(&mut p, 1 << 20, raw_stream));
                    check(driver::cuMemFreeAsync(p, raw_stream));
                }
            }
            let d = t.elapsed();
            // SAFETY: the stream is live.
            check(unsafe { driver::cuStreamSynchronize(raw_stream) });
            us(d, n)
        },
    );
    rows.push(Row {
        name: "alloc + free 1 MiB, default pool",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: false,
    });
    let owned = cuda_core::DeviceMemoryResource::new(&device, Default::default()).unwrap();
    let raw_pool = owned.handle();
    let (s, r, q) = alternate(
        || {
            let t = Instant::now();
            for _ in 0..n {
                drop(owned.allocate(1 << 20, &stream).unwrap());
            }
            let d = t.elapsed();
            stream.sync().unwrap();
            us(d, n)
        },
        || {
            let t = Instant::now();
            for _ in 0..n {
                let mut p = 0;
                // SAFETY: as above, from the owned pool.
                unsafe {
                    check(driver::cuMemAllocFromPoolAsync(&mut p, 1 << 20, raw_pool, raw_stream));
                    check(driver::cuMemFreeAsync(p, raw_stream));
                }
            }
            let d = t.elapsed();
            // SAFETY: the stream is live.
            check(unsafe { driver::cuStreamSynchronize(raw_stream) });
            us(d, n)
        },
    );
    rows.push(Row {
        name: "alloc + free 1 MiB, owned pool",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: false,
    });

    // Allocation right after a synchronisation: a pool whose release threshold is 0 gives its
    // memory back at every synchronisation and maps it again at the next allocation; the default
    // resource raises the threshold (as cuda.core does), the raw loop uses the same pool.
    let n = 100;
    let (s, r, q) = alternate_n(
        31,
        || {
            let t = Instant::now();
            for _ in 0..n {
                drop(pool.allocate(1 << 20, &stream).unwrap());
                stream.sync().unwrap();
            }
            us(t.elapsed(), n)
        },
        || {
            let t = Instant::now();
            for _ in 0..n {
                let mut p = 0;
                // SAFETY: out-pointer to a local; freed right after on the same stream.
                unsafe {
                    check(driver::cuMemAllocAsync(&mut p, 1 << 20, raw_stream));
                    check(driver::cuMemFreeAsync(p, raw_stream));
                    check(driver::cuStreamSynchronize(raw_stream));
                }
            }
            us(t.elapsed(), n)
        },
    );
    rows.push(Row {
        name: "alloc + free 1 MiB + sync, default pool",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: false,
    });

    // Launches and pool allocations from 8 threads, each on a stream of its own, at once: wall
    // time per operation over all threads (lower is better; contention shows here).
    const THREADS: usize = 8;
    const PER_THREAD: usize = 1000;
    let streams: Vec<cuda_core::Stream> = (0..THREADS)
        .map(|_| device.create_stream(StreamOptions::default()).unwrap())
        .collect();
    let raw_streams: Vec<usize> = streams.iter().map(|s| s.handle() as usize).collect();
    let primary = device.primary_context().unwrap().handle() as usize;
    let raw_k2 = f2 as usize;
    // Throughput: operations per second over all threads, in millions.
    let in_threads = |f: &(dyn Fn(usize) + Sync)| -> f64 {
        let t = Instant::now();
        std::thread::scope(|scope| {
            for i in 0..THREADS {
                scope.spawn(move || f(i));
            }
        });
        (THREADS * PER_THREAD) as f64 / t.elapsed().as_secs_f64() / 1e6
    };
    let (s, r, q) = alternate_n(
        31,
        || {
            in_threads(&|i| {
                let s = &streams[i];
                for _ in 0..PER_THREAD {
                    // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                    unsafe { launch(s, &config, &k2, (0u64, 1u32)).unwrap() }
                }
                s.sync().unwrap();
            })
        },
        || {
            in_threads(&|i| {
                let st = raw_streams[i] as driver::CUstream;
                // SAFETY: the primary context is live (held by `device`'s resources above).
                check(unsafe { driver::cuCtxSetCurrent(primary as driver::CUcontext) });
                for _ in 0..PER_THREAD {
                    let (mut x, mut n) = (0u64, 1u32);
                    let mut params: [*mut c_void; 2] = [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()];
                    // SAFETY: as in `raw_launch`.
                    check(unsafe {
                        driver::cuLaunchKernel(
                            raw_k2 as driver::CUfunction,
                            1,
                            1,
                            1,
                            32,
                            1,
                            1,
                            0,
                            st,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        )
                    });
                }
                // SAFETY: the stream is live.
                check(unsafe { driver::cuStreamSynchronize(st) });
            })
        },
    );
    rows.push(Row {
        name: "launches, 8 threads on 8 streams",
        unit: "M/s",
        safe: s,
        raw: Some((r, q)),
        goal: "within 2%",
        higher_is_better: true,
    });
    let (s, r, q) = alternate_n(
        31,
        || {
            in_threads(&|i| {
                let s = &streams[i];
                for _ in 0..PER_THREAD {
                    drop(pool.allocate(1 << 20, s).unwrap());
                }
                s.sync().unwrap();
            })
        },
        || {
            in_threads(&|i| {
                let st = raw_streams[i] as driver::CUstream;
                // SAFETY: as above.
                check(unsafe { driver::cuCtxSetCurrent(primary as driver::CUcontext) });
                for _ in 0..PER_THREAD {
                    let mut p = 0;
                    // SAFETY: out-pointer to a local; freed right after on the same stream.
                    unsafe {
                        check(driver::cuMemAllocAsync(&mut p, 1 << 20, st));
                        check(driver::cuMemFreeAsync(p, st));
                    }
                }
                // SAFETY: the stream is live.
                check(unsafe { driver::cuStreamSynchronize(st) });
            })
        },
    );
    rows.push(Row {
        name: "alloc + free 1 MiB, 8 threads on 8 streams",
        unit: "M/s",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: true,
    });

    // Event record + sync, and a stream sync on an idle stream.
    let event = device.create_event(EventOptions::default()).unwrap();
    let raw_event = event.handle();
    let n = 2000;
    let (s, r, q) = alternate(
        || {
            let t = Instant::now();
            for _ in 0..n {
                stream.record(&event).unwrap();
                event.sync().unwrap();
            }
            us(t.elapsed(), n)
        },
        || {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: live handles.
                unsafe {
                    check(driver::cuEventRecord(raw_event, raw_stream));
                    check(driver::cuEventSynchronize(raw_event));
                }
            }
            us(t.elapsed(), n)
        },
    );
    rows.push(Row {
        name: "event record + sync",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: false,
    });
    let (s, r, q) = alternate(
        || {
            let t = Instant::now();
            for _ in 0..n {
                stream.sync().unwrap();
            }
            us(t.elapsed(), n)
        },
        || {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: the stream is live.
                check(unsafe { driver::cuStreamSynchronize(raw_stream) });
            }
            us(t.elapsed(), n)
        },
    );
    rows.push(Row {
        name: "stream sync, idle",
        unit: "us",
        safe: s,
        raw: Some((r, q)),
        goal: "within 5%",
        higher_is_better: false,
    });

    // Copies of 256 MiB: pinned host to device and back, device to device.
    let size = 256usize << 20;
    let pinned_mr = PinnedMemoryResource::new(Default::default()).unwrap();
    let mut host = pinned_mr.allocate(size, &stream).unwrap();
    stream.sync().unwrap();
    let dev_a = device.allocate(size, &stream).unwrap();
    let dev_b = device.allocate(size, &stream).unwrap();
    stream.sync().unwrap();
    let gbps = |d: Duration, bytes: usize| bytes as f64 / d.as_secs_f64() / 1e9;
    let host_ptr = host.handle();
    let (s, r, q) = alternate(
        || {
            // SAFETY: nothing else touches the pinned buffer meanwhile.
            let slice = unsafe { host.as_host_slice::<u8>() }.unwrap();
            let t = Instant::now();
            dev_a.copy_from_host(slice, &stream).unwrap();
            gbps(t.elapsed(), size)
        },
        || {
            let t = Instant::now();
            // SAFETY: both allocations hold size bytes.
            unsafe {
                check(driver::cuMemcpyHtoDAsync(
                    dev_a.handle(),
                    host_ptr as *const c_void,
                    size,
                    raw_stream,
                ));
                check(driver::cuStreamSynchronize(raw_stream));
            }
            gbps(t.elapsed(), size)
        },
    );
    rows.push(Row {
        name: "pinned H2D 256 MiB",
        unit: "GB/s",
        safe: s,
        raw: Some((r, q)),
        goal: "at least 97%",
        higher_is_better: true,
    });
    let (s, r, q) = alternate(
        || {
            // SAFETY: nothing else touches the pinned buffer meanwhile.
            let slice = unsafe { host.as_host_slice_mut::<u8>() }.unwrap();
            let t = Instant::now();
            dev_a.copy_to_host(slice, &stream).unwrap();
            gbps(t.elapsed(), size)
        },
        || {
            let t = Instant::now();
            // SAFETY: both allocations hold size bytes.
            unsafe {
                check(driver::cuMemcpyDtoHAsync(
                    host_ptr as *mut c_void,
                    dev_a.handle(),
                    size,
                    raw_stream,
                ));
                check(driver::cuStreamSynchronize(raw_stream));
            }
            gbps(t.elapsed(), size)
        },
    );
    rows.push(Row {
        name: "pinned D2H 256 MiB",
        unit: "GB/s",
        safe: s,
        raw: Some((r, q)),
        goal: "at least 97%",
        higher_is_better: true,
    });
    let (s, r, q) = alternate(
        || {
            let t = Instant::now();
            dev_a.copy_to(&dev_b, &stream).unwrap();
            stream.sync().unwrap();
            2.0 * gbps(t.elapsed(), size) / 1000.0
        },
        || {
            let t = Instant::now();
            // SAFETY: both allocations hold size bytes.
            unsafe {
                check(driver::cuMemcpyDtoDAsync(
                    dev_b.handle(),
                    dev_a.handle(),
                    size,
                    raw_stream,
                ));
                check(driver::cuStreamSynchronize(raw_stream));
            }
            2.0 * gbps(t.elapsed(), size) / 1000.0
        },
    );
    rows.push(Row {
        name: "D2D 256 MiB (read+write)",
        unit: "TB/s",
        safe: s,
        raw: Some((r, q)),
        goal: "at least 97%",
        higher_is_better: true,
    });

    // NVRTC: a cold compile of a small kernel, through the safe API and raw calls, and a hit in
    // the program cache.
    let arch = format!("--gpu-architecture=sm_{}", device.arch().unwrap());
    let dir = std::env::temp_dir().join(format!("cuda-rs-bench-cache-{}", std::process::id()));
    let cache = FileStreamProgramCache::new(Some(dir.clone()), None).unwrap();
    let (mut stores, mut hits) = (Vec::new(), Vec::new());
    let variant = std::cell::Cell::new(0u32);
    let next = || {
        variant.set(variant.get() + 1);
        variant.get()
    };
    let (cold, raw_cold, cold_ratio) = alternate_n(
        11,
        || {
            // Cold: a source NVRTC has not seen, compiled as raw code does (no cache).
            let variant = next();
            let src = format!("{source}\n// variant {variant}");
            let mut p = Program::new(src.as_str(), SourceType::Cxx, ProgramOptions::default()).unwrap();
            let t = Instant::now();
            p.compile(CodeType::Cubin, &[]).unwrap();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            // Through the disk cache: a miss compiles and stores, then a hit loads.
            let src = format!("{source}\n// cached variant {variant}");
            let mut p = Program::new(src.as_str(), SourceType::Cxx, ProgramOptions::default()).unwrap();
            let t = Instant::now();
            p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
            stores.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
            hits.push(t.elapsed().as_secs_f64() * 1e3);
            ms
        },
        || {
            let variant = next();
            let raw_src = std::ffi::CString::new(format!("{source}\n// raw variant {variant}")).unwrap();
            let opt = std::ffi::CString::new(arch.as_str()).unwrap();
            let t = Instant::now();
            // SAFETY: NUL-terminated strings live across the calls; buffers sized as NVRTC says.
            unsafe {
                use cuda_sys::nvrtc;
                let mut prog = std::ptr::null_mut();
                nvrtc::nvrtcCreateProgram(
                    &mut prog,
                    raw_src.as_ptr(),
                    c"raw.cu".as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                )
                .result()
                .unwrap();
                nvrtc::nvrtcCompileProgram(prog, 1, [opt.as_ptr()].as_ptr())
                    .result()
                    .unwrap();
                let mut size = 0;
                nvrtc::nvrtcGetCUBINSize(prog, &mut size).result().unwrap();
                let mut cubin = vec![0u8; size];
                nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result().unwrap();
                nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
            }
            t.elapsed().as_secs_f64() * 1e3
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    rows.push(Row {
        name: "NVRTC compile to cubin, cold",
        unit: "ms",
        safe: cold,
        raw: Some((raw_cold, cold_ratio)),
        goal: "within 5%",
        higher_is_better: false,
    });
    rows.push(Row {
        name: "NVRTC compile to cubin + disk cache store",
        unit: "ms",
        safe: median(stores),
        raw: None,
        goal: "a cold compile plus the file write",
        higher_is_better: false,
    });
    rows.push(Row {
        name: "NVRTC compile to cubin, disk cache hit",
        unit: "ms",
        safe: median(hits),
        raw: None,
        goal: "under 1 ms",
        higher_is_better: false,
    });
    // A strided view of a DLPack tensor (cuda.core measures 3.4 us for its own, issue #449):
    // the tensors are made beforehand, only the views are timed.
    let mut views = Vec::new();
    for _ in 0..21 {
        let tensors: Vec<_> = (0..BURST)
            .map(|_| {
                device
                    .allocate(256, &stream)
                    .unwrap()
                    .to_dlpack_as::<f32>(&[8, 8], None)
                    .unwrap()
            })
            .collect();
        let t = Instant::now();
        let made: Vec<_> = tensors
            .into_iter()
            .map(|t| cuda_core::StridedMemoryView::from_dlpack(t, None, &stream).unwrap())
            .collect();
        views.push(t.elapsed().as_secs_f64() * 1e6 / BURST as f64);
        drop(made);
    }
    rows.push(Row {
        name: "StridedMemoryView from a DLPack tensor",
        unit: "us",
        safe: median(views),
        raw: None,
        goal: "under 1 us",
        higher_is_better: false,
    });
    // From process start to the first kernel finished: a fresh process per sample, loading a
    // prebuilt cubin (compilation is measured above). The child reports when the kernel finished
    // (see `child_ms`): the safe process's teardown (unloading the library, destroying the
    // stream), which the raw process skips, is not part of the sample.
    let cubin_path = std::env::temp_dir().join(format!("cuda-core-bench-{}.cubin", std::process::id()));
    std::fs::write(&cubin_path, code.bytes().unwrap()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spawn = |mode: &str| {
        child_ms(
            &exe,
            &[
                ("CUDA_CORE_BENCH_FIRST_KERNEL", mode.as_ref()),
                ("CUDA_CORE_BENCH_CUBIN", cubin_path.as_os_str()),
            ],
        )
    };
    let (s, r, q) = alternate_n(STARTUP_ROUNDS, || spawn("safe"), || spawn("raw"));
    let _ = std::fs::remove_file(&cubin_path);
    rows.push(Row {
        name: "process start to first kernel finished",
        unit: "ms",
        safe: s,
        raw: Some((r, q)),
        goal: "within 10%",
        higher_is_better: false,
    });
    // The first compile in a fresh process, from process start to the cubin in memory: the
    // safe API (finding and loading NVRTC itself) against a C-style process linked against
    // NVRTC, with the arch given, and with the arch taken from the device (driver loaded and
    // initialised in both).
    let nvrtc_path = cuda_sys::LibraryId::Nvrtc
        .library()
        .path()
        .expect("NVRTC was loaded by the compiles above")
        .to_path_buf();
    let sm = format!("sm_{}", device.arch().unwrap());
    for (name, arch) in [
        ("first compile in a process, arch given", sm.as_str()),
        ("first compile in a process, device's arch", "device"),
    ] {
        let spawn = |mode: &str| {
            child_ms(
                &exe,
                &[
                    ("CUDA_CORE_BENCH_FIRST_COMPILE", mode.as_ref()),
                    ("CUDA_CORE_BENCH_ARCH", arch.as_ref()),
                    ("CUDA_CORE_BENCH_NVRTC", nvrtc_path.as_os_str()),
                ],
            )
        };
        let (s, r, q) = alternate_n(FIRST_COMPILE_ROUNDS, || spawn("safe"), || spawn("raw"));
        rows.push(Row {
            name,
            unit: "ms",
            safe: s,
            raw: Some((r, q)),
            goal: "within 5%",
            higher_is_better: false,
        });
    }
    let _ = ctx;

    print_table(&rows);
    if let Some(out) = std::env::var_os("OUT") {
        let json: Vec<String> = rows
            .iter()
            .map(|r| {
                let raw = r.raw.map_or("null".to_string(), |(v, _)| format!("{v:.4}"));
                let ratio = r.raw.map_or("null".to_string(), |(_, q)| format!("{q:.4}"));
                format!(
                    "  {{\"name\": \"{}\", \"unit\": \"{}\", \"safe\": {:.4}, \"raw\": {raw}, \"ratio\": {ratio}, \"goal\": \"{}\"}}",
                    r.name, r.unit, r.safe, r.goal
                )
            })
            .collect();
        std::fs::create_dir_all(&out).unwrap();
        let path = std::path::Path::new(&out).join("bench.json");
        std::fs::write(&path, format!("[\n{}\n]\n", json.join(",\n"))).unwrap();
        println!("wrote {}", path.display());
    }
}

/// Whether a ratio (safe / raw) meets a goal: "within N%" (of raw, either way the figure runs)
/// or "at least N%" (of raw). `None` for goals that are not ratios.
fn meets(goal: &str, ratio: f64, higher_is_better: bool) -> Option<bool> {
    let percent = |prefix: &str| -> Option<f64> { goal.strip_prefix(prefix)?.strip_suffix('%')?.parse().ok() };
    if let Some(p) = percent("within ") {
        return Some(if higher_is_better {
            ratio >= 1.0 - p / 100.0
        } else {
            ratio <= 1.0 + p / 100.0
        });
    }
    percent("at least ").map(|p| ratio >= p / 100.0)
}

fn print_table(rows: &[Row]) {
    println!("{:<46} {:>14} {:>14} {:>7}  goal", "operation", "safe", "raw", "ratio");
    let (mut ok, mut judged) = (0, 0);
    for r in rows {
        let (raw, ratio, verdict) = match r.raw {
            Some((raw, ratio)) => {
                let good = meets(r.goal, ratio, r.higher_is_better).unwrap_or(false);
                (
                    format!("{raw:>9.3} {:<4}", r.unit),
                    format!("{ratio:>7.3}"),
                    if good { "ok" } else { "check" },
                )
            }
            None => (
                format!("{:>14}", "-"),
                format!("{:>7}", "-"),
                match r.goal {
                    "under 1 ms" | "under 1 us" if r.safe < 1.0 => "ok",
                    "under 1 ms" | "under 1 us" => "check",
                    _ => "for reference",
                },
            ),
        };
        if verdict != "for reference" {
            judged += 1;
            ok += usize::from(verdict == "ok");
        }
        println!(
            "{:<46} {:>9.3} {:<4} {} {}  {} ({})",
            r.name, r.safe, r.unit, raw, ratio, r.goal, verdict
        );
    }
    println!("{ok} of {judged} rows ok");
}
