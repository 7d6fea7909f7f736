//! The release thread: where values are dropped when the thread that lets go of them must not
//! call CUDA, and where releases that must wait are retried.
//!
//! The driver calls host functions and graph callbacks on threads of its own, on which CUDA must
//! not be called; values those callbacks let go of (a graph's buffers, a host function's
//! captures) may call CUDA in their `Drop`. Such values are posted here and dropped on this
//! thread. Releases that must wait for the GPU are [`Retry`] jobs, tried again whenever a capture
//! ends and every few milliseconds while any is pending: a release ordered after work still
//! queued (a graph dropped while its launches run, memory a resource frees only once its stream
//! is idle), or one that cannot be queued yet (the stream it must be ordered on is being captured
//! into a graph). So no `Drop` of this crate waits for the GPU.
//!
//! Unloading code, and destroying arrays, pools and contexts, may wait for GPU work the release
//! does not concern (the driver waits for work in flight in the context): they run on a second
//! thread ([`drop_slowly`]), so that a long-running kernel never holds up the frees and retries
//! here.
//!
//! This module uses only the error module and the raw bindings: every other module may use it.

use crate::error::{forget_payload, record_drop_error};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Whether the calling thread is running a host function or graph callback: CUDA must not be
/// called here, so what would call it is refused or handed to the release thread. (The mark is
/// the warnings channel's, which holds warnings raised there: see [`run_as_callback`].)
#[inline]
pub(crate) fn in_callback() -> bool {
    crate::error::on_driver_thread()
}

/// An error when the calling thread is running a host function or graph callback: CUDA must not
/// be called there (the driver may deadlock or fail), so the operation is refused instead.
#[inline]
pub(crate) fn refuse_in_callback() -> Result<()> {
    if in_callback() {
        return Err(CudaError::InvalidState(
            "CUDA must not be called from a host function or graph callback (it runs on a driver thread): \
             queue the work from another thread"
                .into(),
        ));
    }
    Ok(())
}

/// Runs `f` as a callback of the driver: panics are caught (never unwind into the driver) and
/// recorded as `what`, and CUDA calls of this crate are refused or deferred meanwhile.
pub(crate) fn run_as_callback(what: &str, f: impl FnOnce()) {
    crate::error::set_on_driver_thread(true);
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        forget_payload(payload);
        record_drop_error(CudaError::InvalidState(format!("{what} panicked")));
    }
    crate::error::set_on_driver_thread(false);
    // Warnings raised here (the handler may make CUDA calls through another library): delivered
    // on the release thread.
    if crate::error::any_held() {
        run_later(crate::error::deliver_held);
    }
}

thread_local! {
    /// Set on the release threads (see [`on_release_thread`]).
    static RELEASING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of the release threads: there a release may wait for the
/// GPU, so drops that would post their release here do it at once instead.
#[inline]
pub(crate) fn on_release_thread() -> bool {
    RELEASING.try_with(std::cell::Cell::get).unwrap_or(false)
}

/// A `Drop` that calls CUDA, run on the release thread instead (for drops on a driver thread).
struct Later<F: FnOnce() + Send>(Option<F>);

impl<F: FnOnce() + Send> Drop for Later<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// Runs `f` on the release thread (see [`drop_later`]).
pub(crate) fn run_later(f: impl FnOnce() + Send + 'static) {
    drop_later(Box::new(Later(Some(f))));
}

/// A driver handle moved to the release thread to be destroyed there.
pub(crate) struct SendHandle<T>(pub(crate) T);

// SAFETY: driver handles (contexts, streams, events, graphs, libraries, pools) may be used from
// any thread; the one holding this is the only user left.
unsafe impl<T> Send for SendHandle<T> {}

/// A release to try again later.
pub(crate) trait Retry: Send {
    /// Tries once; `true` when done (the job is then dropped, on this thread).
    fn attempt(&mut self) -> bool;
}

enum Job {
    /// Drop the value here.
    Drop(Box<dyn Any + Send>),
    /// Try the job now, and again later until it is done.
    Retry(Box<dyn Retry>),
    /// A capture ended: pending retries may now succeed.
    Wake,
}

/// A thread that drops and retries what is posted to it, started on first use.
struct Lane {
    name: &'static str,
    sender: OnceLock<Mutex<mpsc::Sender<Job>>>,
    starting: Mutex<()>,
}

impl Lane {
    const fn new(name: &'static str) -> Lane {
        Lane {
            name,
            sender: OnceLock::new(),
            starting: Mutex::new(()),
        }
    }

    fn sender(&self) -> Option<&Mutex<mpsc::Sender<Job>>> {
        if let Some(s) = self.sender.get() {
            return Some(s);
        }
        let _one_at_a_time = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = self.sender.get() {
            return Some(s);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || run(rx));
        match started {
            Ok(_) => {
                drain_at_exit();
                let _ = self.sender.set(Mutex::new(tx));
                self.sender.get()
            }
            Err(e) => {
                record_drop_error(CudaError::InvalidState(format!(
                    "cannot start the thread that releases CUDA objects off driver threads ({}): {e}; they are kept instead",
                    self.name
                )));
                None
            }
        }
    }

    fn post(&self, job: Job) -> Result<(), Job> {
        let counted = !matches!(job, Job::Wake);
        if counted {
            PENDING.fetch_add(1, Ordering::AcqRel);
        }
        let posted = match self.sender() {
            Some(tx) => match tx.lock() {
                Ok(tx) => tx.send(job).map_err(|e| e.0),
                Err(_) => Err(job),
            },
            None => Err(job),
        };
        if counted && posted.is_err() {
            PENDING.fetch_sub(1, Ordering::AcqRel);
        }
        posted
    }
}

/// How long the process waits at exit for the releases still pending (see [`drain_at_exit`]).
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Makes the process, when it exits (`exit`, or `main` returning), first wait up to [`EXIT_WAIT`]
/// for the release threads to finish what they hold: a free or destroy still running there
/// while the driver tears itself down at exit could crash the process (an NCCL communicator
/// aborted in the background at exit did), and what never ran shows up as leaked under a leak
/// checker. Registered once, when the first release thread starts (after the driver was
/// initialised, so this runs before the driver's own exit handlers).
fn drain_at_exit() {
    /// The process that registered the handler: a child forked without `exec` inherits the
    /// handler and the count, but not the release threads, and does not wait.
    static REGISTERED_BY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    extern "C" fn wait_for_releases() {
        if std::process::id() != REGISTERED_BY.load(Ordering::Relaxed) {
            return;
        }
        let deadline = std::time::Instant::now() + EXIT_WAIT;
        while PENDING.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        REGISTERED_BY.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: `atexit` takes a function of no arguments that does not unwind; this one only
        // reads atomics and sleeps.
        unsafe { libc::atexit(wait_for_releases) };
    });
}

/// The release thread.
static RELEASE: Lane = Lane::new("cuda-core-release");

/// The thread for drops that may wait for work they did not queue ([`drop_slowly`]: unloading
/// code, destroying arrays, pools and contexts, another library's streams): the driver may wait
/// there for work in flight anywhere in the context (an unrelated kernel running for minutes),
/// which must not hold up the frees and retries of the release thread.
static SLOW: Lane = Lane::new("cuda-core-unload");

/// Drops and releases posted to the release thread and not yet done.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// How many releases the release thread (and the thread that unloads code) still hold: values
/// handed to it to drop and releases waiting there for the GPU work queued before them, or for a
/// capture to end.
///
/// No `Drop` of this crate waits for the GPU, so memory, graphs, streams and code let go of while
/// work that uses them is queued are released there once that work is done, and arrays, memory
/// pools, created contexts and code are always destroyed there (their destroys may wait for the
/// work of every stream of the context): until this returns 0, the device memory they hold is
/// not yet back. A test that measures free memory, or a
/// program about to exit under a leak checker, waits for it:
///
/// ```no_run
/// # fn main() -> cuda_core::Result<()> {
/// # let device = cuda_core::Device::new(0)?;
/// device.sync()?;
/// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
/// while cuda_core::pending_releases() > 0 && std::time::Instant::now() < deadline {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// // The last releases may have queued their frees just now: let them run.
/// device.sync()?;
/// # Ok(()) }
/// ```
///
/// When the process exits, it first waits up to 2 s for this to reach 0 (so that no destroy runs
/// while the driver tears itself down); a program that must be sure waits itself, as above.
///
/// A release that waits for a capture (its stream is being captured into a graph) stays pending
/// until the capture ends. A release the driver refused is not retried: it is recorded (see
/// [`take_drop_errors`](crate::take_drop_errors)) and no longer counted.
pub fn pending_releases() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// How often pending retries are tried when no capture ends.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// Starts the release threads now (so that later posts from driver threads never spawn one).
pub(crate) fn start() {
    let _ = RELEASE.sender();
    let _ = SLOW.sender();
}

fn post(job: Job) -> Result<(), Job> {
    RELEASE.post(job)
}

/// Drops `value` on a thread of its own, for drops that may wait for GPU work they did not
/// queue (unloading code, destroying arrays, pools and contexts): as [`drop_later`], but the
/// release thread is not held up meanwhile. Counted in [`pending_releases`] until done.
pub(crate) fn drop_slowly(value: Box<dyn Any + Send>) {
    if let Err(job) = SLOW.post(Job::Drop(value)) {
        std::mem::forget(job);
    }
}

/// Drops `value` on the release thread. Safe to call from a driver callback thread: it only
/// posts. If the release thread cannot run, the value is kept (leaked) rather than dropped where
/// CUDA must not be called. A value that needs a current context to drop makes it current itself.
pub(crate) fn drop_later(value: Box<dyn Any + Send>) {
    if let Err(job) = post(Job::Drop(value)) {
        std::mem::forget(job);
    }
}

/// Tries `job` on the release thread until it is done. If the release thread cannot run, the job
/// is tried once here (never on a driver thread, where CUDA must not be called) and kept
/// (leaked) when not done.
pub(crate) fn retry(job: Box<dyn Retry>) {
    if let Err(Job::Retry(mut job)) = post(Job::Retry(job)) {
        if in_callback() || !job.attempt() {
            std::mem::forget(job);
        }
    }
}

/// Wakes the release thread: a capture ended, so pending releases may proceed.
pub(crate) fn wake() {
    if RELEASE.sender.get().is_some() {
        let _ = post(Job::Wake);
    }
}

fn run(rx: mpsc::Receiver<Job>) {
    RELEASING.with(|r| r.set(true));
    // Releases must not be refused because another thread captures in global mode: this thread
    // only queues frees and waits, which never join a capture.
    let mut mode = driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: cuInit takes flags; the mode is an in/out local.
    unsafe {
        let _ = driver::cuInit(0);
        let _ = driver::cuThreadExchangeStreamCaptureMode(&mut mode);
    }
    let mut pending: Vec<Box<dyn Retry>> = Vec::new();
    loop {
        let job = if pending.is_empty() {
            match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else {
            match rx.recv_timeout(RETRY_EVERY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        match job {
            Some(Job::Drop(value)) => {
                drop_here(value);
                PENDING.fetch_sub(1, Ordering::AcqRel);
            }
            Some(Job::Retry(job)) => pending.push(job),
            Some(Job::Wake) | None => {}
        }
        let mut still = Vec::with_capacity(pending.len());
        for mut job in pending.drain(..) {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.attempt())) {
                Ok(true) => {
                    drop_here(job);
                    PENDING.fetch_sub(1, Ordering::AcqRel);
                }
                Ok(false) => still.push(job),
                Err(payload) => {
                    forget_payload(payload);
                    record_drop_error(CudaError::InvalidState(
                        "a deferred release panicked; what it held is kept".into(),
                    ));
                    // What it holds may still be in use: kept, never dropped.
                    std::mem::forget(job);
                    PENDING.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        pending = still;
    }
}

fn drop_here<T>(value: T) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value))) {
        forget_payload(payload);
        record_drop_error(CudaError::InvalidState(
            "a value released on the release thread panicked in its destructor".into(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;
    use std::time::Instant;

    /// A value whose drop waits until the test lets it go.
    struct Held(mpsc::Receiver<()>);

    impl Drop for Held {
        fn drop(&mut self) {
            let _ = self.0.recv_timeout(Duration::from_secs(20));
        }
    }

    /// Waits until nothing is pending; fails after 20 s from `start`.
    fn wait_for_no_pending(start: Instant) {
        while pending_releases() > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the count never came back to 0"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sets its flag when dropped.
    struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_slow_drop_does_not_hold_up_the_release_thread() {
        let (let_go, rx) = sync_channel(1);
        drop_slowly(Box::new(Held(rx)));
        assert!(pending_releases() >= 1, "a slow drop is not counted");
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        drop_later(Box::new(Flag(dropped.clone())));
        let start = Instant::now();
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the release thread waited for the slow drop"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(pending_releases() >= 1, "the slow drop is still counted");
        let_go.send(()).unwrap();
        wait_for_no_pending(start);
    }

    /// Prints once dropped, a while after it was let go of.
    struct Late;

    impl Drop for Late {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(300));
            println!("released before the process exited");
        }
    }

    #[test]
    fn the_process_waits_at_exit_for_pending_releases() {
        const CHILD: &str = "CUDA_CORE_TEST_EXIT_CHILD";
        if std::env::var_os(CHILD).is_some() {
            // The child: lets go of a value whose release takes a while, and exits at once.
            drop_later(Box::new(Late));
            std::process::exit(0);
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "reaper::tests::the_process_waits_at_exit_for_pending_releases",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("the child runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("released before the process exited"),
            "the exit did not wait for the release: {text}"
        );
    }

    #[test]
    fn pending_releases_counts_a_drop_until_it_is_done() {
        let (let_go, rx) = sync_channel(1);
        drop_later(Box::new(Held(rx)));
        assert!(pending_releases() >= 1, "a posted drop is not counted");
        let_go.send(()).unwrap();
        let start = Instant::now();
        wait_for_no_pending(start);
    }
}
