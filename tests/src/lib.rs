//! The workspace's GPU integration suite. Every test here needs an NVIDIA GPU, is marked
//! `#[ignore]`, and runs through `cargo xtask test-gpu` (or the bundle it builds); without a GPU
//! the tests fail, they never pass by finding nothing to test. A test that finds the GPU but not
//! what it needs besides (a second GPU, a newer driver, a NUMA node) says so with [`skip`], and
//! the bundle's `run.sh` counts it as skipped, not passed. (This library's own test, of [`skip`],
//! needs no GPU.)

use cuda_sys::driver;
use std::ffi::CString;
use std::fmt::Display;
use std::io::Write;

/// The environment variable naming the file that [`skip`] and [`skip_part`] append to; the
/// bundle's `run.sh` sets it for each test executable it runs.
pub const SKIPS_VAR: &str = "CUDA_TESTS_SKIPS";

/// Records that the running test does not run because the machine lacks what it needs (a second
/// GPU, a newer driver, a NUMA node, ...); the test then returns: `return skip("...")`. Only for
/// what the machine lacks: a test whose early return is an expected outcome is not skipped.
///
/// libtest shows a passing test's output only when asked, so the reason goes (besides stdout) to
/// the file named by [`SKIPS_VAR`], where `run.sh` counts the test as skipped and lists why.
/// Call it on the test's own thread: libtest names that thread after the test.
pub fn skip(reason: impl Display) {
    record("skip", "skipped", reason);
}

/// Makes the tests of one test executable that take it run one at a time (the harness runs tests
/// on several threads): for tests that share process-wide state or must not see each other's GPU
/// work. Each executable has its own lock; hold the guard for the whole test.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits up to `within` for the release thread to have nothing left
/// ([`cuda_core::pending_releases`] at 0); whether it got there.
pub fn releases_drain(within: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while cuda_core::pending_releases() > 0 {
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// Records that the running test leaves out one of its checks because the machine lacks what it
/// needs, and goes on with the rest: `run.sh` lists the reason and counts the test by its result.
pub fn skip_part(reason: impl Display) {
    record("part", "skipped in part", reason);
}

/// Prints `test: what: reason` and appends `kind<TAB>test<TAB>reason` to the skips file (one
/// line: tabs and line breaks in the reason become spaces). Tests run on parallel threads, and
/// helpers in child processes inherit the variable: each line is one `write` to a file opened for
/// appending, so lines from several writers never interleave.
fn record(kind: &str, what: &str, reason: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed thread>");
    let reason = reason.to_string().replace(['\t', '\n', '\r'], " ");
    println!("{test}: {what}: {reason}");
    let Some(path) = std::env::var_os(SKIPS_VAR) else {
        return;
    };
    let line = format!("{kind}\t{test}\t{reason}\n");
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    // Unrecorded, the skip would count as a pass: fail the test instead.
    if let Err(e) = written {
        panic!("cannot record the skip in {}: {e}", path.to_string_lossy());
    }
}

/// Panics with the full error when a driver call fails.
#[track_caller]
pub fn check(status: driver::CUresult) {
    if let Err(e) = status.result() {
        panic!("{e}");
    }
}

/// Initialises the driver and returns device 0 with its primary context made current.
pub fn device_and_context() -> (driver::CUdevice, driver::CUcontext) {
    let mut count = 0;
    let mut dev: driver::CUdevice = 0;
    let mut ctx: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointers to live locals; the primary context is retained for the process.
    unsafe {
        check(driver::cuInit(0));
        check(driver::cuDeviceGetCount(&mut count));
        assert!(count > 0, "no CUDA device found: these tests need a GPU");
        check(driver::cuDeviceGet(&mut dev, 0));
        check(driver::cuDevicePrimaryCtxRetain(&mut ctx, dev));
        check(driver::cuCtxSetCurrent(ctx));
    }
    (dev, ctx)
}

/// The device's compute capability.
pub fn compute_capability(dev: driver::CUdevice) -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to live locals.
    unsafe {
        check(driver::cuDeviceGetAttribute(
            &mut major,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            dev,
        ));
        check(driver::cuDeviceGetAttribute(
            &mut minor,
            driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            dev,
        ));
    }
    (major, minor)
}

/// Compiles CUDA C++ to a cubin for `arch` (`sm_90`) with NVRTC, through raw calls.
pub fn nvrtc_cubin(source: &str, arch: &str) -> Vec<u8> {
    use cuda_sys::nvrtc;
    let src = CString::new(source).unwrap();
    let opt = CString::new(format!("--gpu-architecture={arch}")).unwrap();
    let opts = [opt.as_ptr()];
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all pointers are live for the calls; the program is destroyed once.
    unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"kernel.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
        .result()
        .unwrap();
        let status = nvrtc::nvrtcCompileProgram(prog, 1, opts.as_ptr());
        if let Err(e) = status.result() {
            let mut size = 0;
            nvrtc::nvrtcGetProgramLogSize(prog, &mut size).result().unwrap();
            let mut log = vec![0u8; size];
            nvrtc::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast())
                .result()
                .unwrap();
            panic!("{e}\n{}", String::from_utf8_lossy(&log));
        }
        let mut size = 0;
        nvrtc::nvrtcGetCUBINSize(prog, &mut size).result().unwrap();
        let mut cubin = vec![0u8; size];
        nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result().unwrap();
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
        cubin
    }
}

/// Device memory holding `data`, freed on drop (raw calls; the safe `Buffer` is issue 6's).
pub struct DeviceVec {
    pub ptr: driver::CUdeviceptr,
    pub len: usize,
}

impl DeviceVec {
    pub fn from_slice(data: &[f32]) -> DeviceVec {
        let mut ptr = 0;
        // SAFETY: a context is current (device_and_context); sizes match the slice.
        unsafe {
            check(driver::cuMemAlloc(&mut ptr, data.len() * 4));
            check(driver::cuMemcpyHtoD(ptr, data.as_ptr().cast(), data.len() * 4));
            // A pageable copy can return before its DMA lands; kernels run on non-blocking
            // streams, which do not wait for the default stream, so wait here.
            check(driver::cuStreamSynchronize(std::ptr::null_mut()));
        }
        DeviceVec { ptr, len: data.len() }
    }

    pub fn to_vec(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.len];
        // SAFETY: the allocation holds len floats; work on it was synchronised by the caller.
        unsafe { check(driver::cuMemcpyDtoH(out.as_mut_ptr().cast(), self.ptr, self.len * 4)) };
        out
    }
}

impl Drop for DeviceVec {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc, freed once.
        unsafe { check(driver::cuMemFree(self.ptr)) };
    }
}

/// Launches `function` (a `CUkernel` works too) on a 1-D grid and waits for it.
///
/// # Safety
/// `params` must point to the kernel's arguments, in order and of the kernel's types.
pub unsafe fn launch_1d(function: driver::CUfunction, threads: u32, params: &mut [*mut std::ffi::c_void]) {
    let block = 256.min(threads);
    // SAFETY: the caller vouches for params; the launch is synchronised before returning.
    unsafe {
        check(driver::cuLaunchKernel(
            function,
            threads.div_ceil(block),
            1,
            1,
            block,
            1,
            1,
            0,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
        check(driver::cuCtxSynchronize());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process of [`skips_reach_the_file_as_lines_naming_the_test`].
    const CHILD: &str = "CUDA_TESTS_SKIP_CHILD";

    // run.sh counts a skip by the test name on its line: the test runs itself in child processes
    // (with one test thread, as under the sanitizer, and with several) that record into a file of
    // their own. Needs no GPU.
    #[test]
    fn skips_reach_the_file_as_lines_naming_the_test() {
        const NAME: &str = "tests::skips_reach_the_file_as_lines_naming_the_test";
        if std::env::var_os(CHILD).is_some() {
            skip_part("a check\tleft out,\nwith its reason on one line");
            return skip("the reason");
        }
        for threads in ["--test-threads=1", "--test-threads=4"] {
            let file = std::env::temp_dir().join(format!("cuda-tests-skips-{}", std::process::id()));
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, threads, "--nocapture"])
                .env(CHILD, "1")
                .env(SKIPS_VAR, &file)
                .output()
                .unwrap();
            let lines = std::fs::read_to_string(&file);
            let _ = std::fs::remove_file(&file);
            assert!(out.status.success(), "{threads}: {out:?}");
            assert_eq!(
                lines.unwrap(),
                format!("part\t{NAME}\ta check left out, with its reason on one line\nskip\t{NAME}\tthe reason\n"),
                "{threads}"
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains(&format!("{NAME}: skipped: the reason")), "{stdout}");
        }
    }
}
