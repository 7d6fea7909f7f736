//! The child modes of this executable: the servers of the cuda-core, raw Rust and cudarc
//! columns (`serve CUBIN SIDE`), one process per side for the whole run, and a fresh process for
//! each sample of the process rows (first kernel, first compile), chosen by environment
//! variables.

use crate::measure::{self, Arch, Contender, Op};
use crate::peer::{child_ms, milestone};
use crate::raw::Raw;
use crate::safe::Safe;
use crate::SOURCE;
use cuda_core::{launch, CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType, StreamOptions};
use cuda_sys::driver;
use std::ffi::c_void;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The mode (`safe`, `raw`, `cudarc`) of a first-compile child, with its arch and NVRTC.
pub const FIRST_COMPILE: &str = "CUDA_CORE_BENCH_FIRST_COMPILE";
/// `sm_XY`, or `device` to take it from device 0.
pub const ARCH: &str = "CUDA_CORE_BENCH_ARCH";
/// The NVRTC library the parent loaded, for the raw child to map as a linked C program would.
pub const NVRTC: &str = "CUDA_CORE_BENCH_NVRTC";
/// The mode (`safe`, `raw`) of a first-kernel child, with the cubin it loads.
pub const FIRST_KERNEL: &str = "CUDA_CORE_BENCH_FIRST_KERNEL";
pub const CUBIN: &str = "CUDA_CORE_BENCH_CUBIN";

/// What the children of the process rows are given: the cubin a first kernel loads, the NVRTC
/// library the parent loaded, the device's `sm_XY`.
#[derive(Clone)]
pub struct Children {
    pub cubin_path: PathBuf,
    pub nvrtc_path: PathBuf,
    pub sm: String,
}

impl Children {
    /// One sample of a process row ([`Op::FirstKernel`], [`Op::FirstCompile`]) from a fresh
    /// process of this executable in `mode` (`safe`, `raw`, `cudarc`); `None` for other rows.
    pub fn sample(&self, op: Op, mode: &str) -> Option<f64> {
        let mut command = Command::new(std::env::current_exe().expect("the path of this executable"));
        match op {
            Op::FirstKernel => command.env(FIRST_KERNEL, mode).env(CUBIN, &self.cubin_path),
            Op::FirstCompile(arch) => command
                .env(FIRST_COMPILE, mode)
                .env(ARCH, if arch == Arch::Given { &self.sm } else { "device" })
                .env(NVRTC, &self.nvrtc_path),
            _ => return None,
        };
        if mode == "cudarc" {
            self.with_parents_nvrtc(&mut command);
        }
        child_ms(command)
    }

    /// Puts the folder of the NVRTC this process loaded first on `command`'s library path, so
    /// that a child that loads NVRTC by name (cudarc) or through a RUNPATH (the C program)
    /// loads the same NVRTC as the other sides.
    pub fn with_parents_nvrtc(&self, command: &mut Command) {
        let folder = self.nvrtc_path.parent().unwrap_or(Path::new("."));
        let mut path = std::ffi::OsString::from(folder);
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            path.push(":");
            path.push(old);
        }
        command.env("LD_LIBRARY_PATH", path);
    }
}

/// Runs the child mode the arguments (`serve CUBIN [SIDE]`) or the environment name, if any;
/// true when this process was a child.
pub fn run_if_child() -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.as_slice() {
        [_, serve, cubin] if serve == "serve" => {
            serve_side(cubin, "raw");
            return true;
        }
        [_, serve, cubin, side] if serve == "serve" => {
            serve_side(cubin, side);
            return true;
        }
        _ => {}
    }
    let var = |name| std::env::var(name).ok();
    if let (Some(mode), Some(arch), Some(lib)) = (var(FIRST_COMPILE), var(ARCH), var(NVRTC)) {
        first_compile(&mode, &arch, &lib);
        return true;
    }
    if let (Some(mode), Some(path)) = (var(FIRST_KERNEL), var(CUBIN)) {
        first_kernel(&mode, &path);
        return true;
    }
    false
}

/// A server's start failed (no GPU, most likely): says so and exits with 1, which the benchmark's
/// process reads as the end of the column.
fn cannot_start(side: &str, why: impl std::fmt::Display) -> ! {
    eprintln!("compare: the {side} server cannot start: {why}");
    std::process::exit(1)
}

/// One side (`safe`, `raw`, `cudarc`) in a process of its own, a server as the C program is
/// (`compare_c serve CUBIN`): it makes its objects as a program using only that library would
/// (its own context use, module from CUBIN, streams, pools, events, graph), then answers each
/// request line on stdin ([`Op::request`]) with one figure line, "-" for an operation the side
/// does not have, until its input ends. Nothing of the other sides is in the process.
fn serve_side(cubin_path: &str, side: &str) {
    // The threads of the 8-thread rows may run anywhere, as in the benchmark's process.
    measure::adopt_all_cpus();
    let cubin = std::fs::read(cubin_path).unwrap_or_else(|e| cannot_start(side, format!("{cubin_path}: {e}")));
    let mut contender: Box<dyn Contender> = match side {
        "safe" => {
            let device = Device::new(0).unwrap_or_else(|e| cannot_start(side, e));
            Box::new(Safe::new(device, &cubin))
        }
        "raw" => {
            // SAFETY: no other driver call precedes it in this process.
            if let Err(e) = unsafe { driver::cuInit(0) }.result() {
                cannot_start(side, format!("cuInit: {e}"));
            }
            Box::new(Raw::new(&cubin))
        }
        #[cfg(feature = "cudarc")]
        "cudarc" => {
            // cudarc panics where it cannot load the driver.
            let made = std::panic::catch_unwind(|| crate::cudarc_side::Cudarc::new(&cubin));
            match made {
                Ok(Ok(cudarc)) => Box::new(cudarc),
                Ok(Err(e)) => cannot_start(side, e),
                Err(_) => cannot_start(side, "cudarc panicked (above)"),
            }
        }
        _ => cannot_start(
            side,
            "no such side in this build (safe, raw, or cudarc with the `cudarc` feature)",
        ),
    };
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lines() {
        let Ok(line) = line else { break };
        let answer = match Op::from_request(&line) {
            Some(op) => contender.measure(op).map_or("-".to_string(), |f| f.to_string()),
            // Not a figure: the benchmark's process takes the column as failed.
            None => format!("unknown request {line:?}"),
        };
        if writeln!(out, "{answer}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}

pub fn check(status: driver::CUresult) {
    if let Err(e) = status.result() {
        panic!("{e}");
    }
}

/// From a fresh process, load the cubin at `path`, launch one kernel and wait for it, through
/// the safe API or raw calls, then report the milestone.
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
        return;
    }
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
        let mut module = std::ptr::null_mut();
        check(driver::cuModuleLoadData(&mut module, cubin.as_ptr().cast()));
        let mut kernel = std::ptr::null_mut();
        check(driver::cuModuleGetFunction(&mut kernel, module, c"k2".as_ptr()));
        let (mut x, mut n) = (0u64, 1u32);
        let mut params = [(&mut x as *mut u64).cast::<c_void>(), (&mut n as *mut u32).cast()];
        check(driver::cuLaunchKernel(
            kernel,
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

/// From a fresh process, compile [`SOURCE`] to a cubin once, then report the milestone. `arch`
/// is `sm_XY`, or `device` to take it from device 0 as `ProgramOptions::default()` does.
///
/// `safe` goes through the safe API, which finds and loads NVRTC (and the driver) itself: the
/// pathfinder's search is included. `raw` is what a C program linked against NVRTC (and
/// `-lcuda`) does: the dynamic loader maps the libraries, NVRTC from the path the parent found
/// (as an rpath would give it) and the driver by its soname, and the functions are bound by
/// symbol; then the same calls (`cuInit` and two attribute queries for the device's arch, then
/// the five NVRTC calls). `cudarc` compiles through cudarc's safe API, which loads NVRTC by name
/// (the parent puts NVRTC's folder on `LD_LIBRARY_PATH`, as its users do).
fn first_compile(mode: &str, arch: &str, lib: &str) {
    match mode {
        "safe" => {
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
        }
        #[cfg(feature = "cudarc")]
        "cudarc" => crate::cudarc_side::first_compile(arch),
        _ => linked_first_compile(arch, lib),
    }
}

/// The `raw` first compile: see [`first_compile`].
fn linked_first_compile(arch: &str, lib: &str) {
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
