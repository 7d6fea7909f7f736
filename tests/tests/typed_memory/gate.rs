//! A kernel that runs until the host says so: the typed-memory tests' way to keep a stream busy
//! for exactly as long as an assertion needs, whatever else the machine runs.

use cuda_core::{CodeType, LaunchConfig, Program, ProgramOptions, SourceType, Stream, TypedKernel};
use cuda_sys::driver;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a [`Gate`] stays closed at most: a call that should return while a gated kernel
/// runs but waits for it instead is released (and the test then fails) rather than hanging.
const GATE_WATCHDOG: Duration = Duration::from_secs(30);

/// A flag in mapped pinned host memory that `wait_gate` kernels spin on until the host opens
/// it: a stream holding one stays busy for exactly as long as the test says, whatever else
/// the machine runs (a kernel spinning a fixed number of cycles could end before a loaded
/// host got to its assertion).
struct GateFlag {
    /// 4 bytes from `cuMemHostAlloc` (portable, mapped), 0 while closed.
    host: *mut u32,
    /// The same bytes as the GPU addresses them.
    device: driver::CUdeviceptr,
    /// Set when the watchdog, not the test, opened the gate.
    timed_out: AtomicBool,
}

// SAFETY: the pointer is to pinned memory that lives as long as the flag; the host touches it
// only through an `AtomicU32`.
unsafe impl Send for GateFlag {}
// SAFETY: as above.
unsafe impl Sync for GateFlag {}

impl GateFlag {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `host` is 4 live bytes, aligned (a page), accessed on the host only here.
        unsafe { AtomicU32::from_ptr(self.host) }
    }
    fn open(&self) {
        self.word().store(1, Ordering::SeqCst);
    }
    fn is_open(&self) -> bool {
        self.word().load(Ordering::SeqCst) != 0
    }
}

impl Drop for GateFlag {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `Gate::new`; the `Gate` synchronised every
        // stream it queued a kernel reading it on before the last reference went.
        unsafe { cuda_tests::check(driver::cuMemFreeHost(self.host.cast())) };
    }
}

/// Closed on creation; opened by [`Gate::open`], by a thread of [`Gate::open_after`], by the
/// watchdog after [`GATE_WATCHDOG`], and on drop (a failed assertion included), which then
/// waits for the gated streams so the flag is freed after its last reader.
pub struct Gate {
    flag: Arc<GateFlag>,
    kernel: TypedKernel<(*const u32,)>,
    streams: Vec<Stream>,
}

impl Gate {
    pub fn new() -> Gate {
        let mut host = std::ptr::null_mut();
        let mut device = 0;
        // SAFETY: out-pointers to locals; 4 bytes, written before any kernel reads them.
        unsafe {
            cuda_tests::check(driver::cuMemHostAlloc(
                &mut host,
                4,
                driver::CU_MEMHOSTALLOC_PORTABLE | driver::CU_MEMHOSTALLOC_DEVICEMAP,
            ));
            host.cast::<u32>().write(0);
            cuda_tests::check(driver::cuMemHostGetDevicePointer(&mut device, host, 0));
        }
        let flag = Arc::new(GateFlag {
            host: host.cast(),
            device,
            timed_out: AtomicBool::new(false),
        });
        let watched = flag.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + GATE_WATCHDOG;
            while !watched.is_open() {
                if Instant::now() >= deadline {
                    watched.timed_out.store(true, Ordering::SeqCst);
                    watched.open();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let code = Program::new(
            r#"extern "C" __global__ void wait_gate(const volatile unsigned* gate) {
                while (*gate == 0) {}
            }"#,
            SourceType::Cxx,
            ProgramOptions::default(),
        )
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
        let kernel = code.get_kernel("wait_gate").unwrap().typed().unwrap();
        Gate {
            flag,
            kernel,
            streams: Vec::new(),
        }
    }

    /// Queues a kernel on `s` that runs until the gate opens.
    pub fn hold(&mut self, s: &Stream) {
        assert!(!self.flag.is_open(), "the gate is open already");
        let flag = self.flag.device as *const u32;
        // SAFETY: wait_gate reads the 4 mapped bytes of the flag, which live until `s` is
        // synchronised (in drop, after opening the gate).
        unsafe { self.kernel.launch(s, &LaunchConfig::new(1, 1), (flag,)) }.unwrap();
        self.streams.push(s.clone());
    }

    pub fn open(&self) {
        self.flag.open();
    }

    pub fn is_open(&self) -> bool {
        self.flag.is_open()
    }

    /// Opens the gate from another thread after `delay`: for a wait the test itself makes.
    pub fn open_after(&self, delay: Duration) {
        let flag = self.flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            flag.open();
        });
    }

    /// Fails when the watchdog had to open the gate: something waited that should not have.
    pub fn assert_not_timed_out(&self, what: &str) {
        assert!(
            !self.flag.timed_out.load(Ordering::SeqCst),
            "{what}: it waited for the gated kernel until the watchdog opened it"
        );
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        for s in &self.streams {
            // Errors are the test's to report elsewhere; here only the wait matters.
            let _ = s.sync();
        }
    }
}
