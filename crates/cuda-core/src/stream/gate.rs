//! The quiet path: operations queued while no capture runs anywhere take no lock.
//!
//! An operation must not be split by a capture beginning on its stream (checked "not capturing",
//! then recorded into a graph that does not hold what it uses). While captures run, every
//! operation holds its stream's capture lock shared (see [`super::Stream::enqueue`]). While none
//! runs, which is the common case, an operation only marks its thread as busy, checks that no
//! capture runs, and unmarks it afterwards: plain stores and a load. Beginning a capture counts
//! it first (so later operations take the locked path), then waits until every thread that
//! might have missed the count has left its operation.
//!
//! That is a Dekker pattern: the operation stores its mark, then loads the count; the capture
//! stores the count, then loads every mark. The operation's fence is a compiler fence when the
//! kernel provides process-wide barriers (`membarrier`, issued by the capture, which is rare);
//! otherwise both sides use full fences.
//!
//! Registering for those barriers waits until every CPU has passed a quiescent state once the
//! process has several threads (tens of milliseconds on a busy machine), so the first operation
//! does not wait for it: it asks a thread of its own to register and uses a full fence, as every
//! operation does until the registration is known to be done. A capture that begins meanwhile
//! registers too (registering again is harmless) and issues the barrier: a capture issues it
//! whenever an operation may have skipped its fence.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A thread's mark: how deep it is in operations on the quiet path. One per cache line: every
/// operation writes its thread's slot twice, which must not disturb other threads.
#[repr(align(128))]
struct Slot {
    depth: AtomicUsize,
}

/// Every thread's slot (slots of ended threads are reused, never freed).
static SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());
static FREE: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Cell<Option<&'static Slot>> = const { Cell::new(None) };
    /// Set when the thread's slot was given back: later operations (run by other thread-local
    /// destructors) take the locked path instead of taking a slot that would never return.
    static ENDED: Cell<bool> = const { Cell::new(false) };
    /// How deep the thread is in operations on the locked path (only its own thread reads it).
    static LOCKED: Cell<usize> = const { Cell::new(0) };
    static RECYCLER: Recycler = const { Recycler };
}

/// Gives the thread's slot back when it ends.
struct Recycler;

impl Drop for Recycler {
    fn drop(&mut self) {
        let _ = ENDED.try_with(|e| e.set(true));
        let slot = MINE.try_with(|m| m.take()).ok().flatten();
        if let Some(slot) = slot {
            // depth is 0: a thread ends outside operations.
            FREE.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
        }
    }
}

#[inline]
fn my_slot() -> Option<&'static Slot> {
    match MINE.try_with(Cell::get) {
        Ok(Some(slot)) => Some(slot),
        Ok(None) => register(),
        Err(_) => None, // the thread is ending: the locked path
    }
}

#[cold]
fn register() -> Option<&'static Slot> {
    if ENDED.try_with(Cell::get).unwrap_or(true) {
        return None; // the thread is ending: the locked path
    }
    let reused = FREE.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let slot = match reused {
        Some(s) => s,
        None => {
            let s: &'static Slot = Box::leak(Box::new(Slot {
                depth: AtomicUsize::new(0),
            }));
            SLOTS.lock().unwrap_or_else(|p| p.into_inner()).push(s);
            s
        }
    };
    MINE.try_with(|m| m.set(Some(slot))).ok()?;
    // Registers the destructor that recycles the slot (if the thread is already ending, the
    // slot is simply not recycled).
    let _ = RECYCLER.try_with(|_| ());
    Some(slot)
}

const YES: u8 = 1;
const NO: u8 = 2;
/// 0 until [`register_membarrier`] has run, then `YES` or `NO`.
static MEMBARRIER: AtomicU8 = AtomicU8::new(0);
/// Set once an operation asked for the registration (see [`full_fence`]).
static ASKED: AtomicBool = AtomicBool::new(false);
/// Held by a test to keep the registration of [`register_membarrier`] waiting.
#[cfg(test)]
static HOLD_REGISTRATION: Mutex<()> = Mutex::new(());

/// `membarrier` commands: register for expedited barriers (registering again is harmless), and
/// the barrier itself (every running thread of the process executes a full barrier before it
/// returns; only after a successful registration).
const REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;
const PRIVATE_EXPEDITED: i32 = 1 << 3;

/// Issues a `membarrier` command: `true` when it succeeded (never without Linux's `membarrier`).
fn membarrier(command: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a syscall with plain integer arguments; these commands affect only this
        // process's barriers.
        unsafe { libc::syscall(libc::SYS_membarrier, libc::c_long::from(command), 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = command;
        false
    }
}

/// Registers once and publishes the answer in `MEMBARRIER`: whether process-wide barriers are
/// available.
#[cold]
fn register_membarrier() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    let available = *AVAILABLE.get_or_init(|| {
        #[cfg(test)]
        let _held = HOLD_REGISTRATION.lock().unwrap_or_else(|p| p.into_inner());
        membarrier(REGISTER_PRIVATE_EXPEDITED)
    });
    // Published after the registration (inside the OnceLock) has completed, and never changed:
    // every thread that publishes stores the one answer of `AVAILABLE`. An operation skips its
    // full fence only after reading YES, and from then on every capture issues the barrier (see
    // `heavy_fence`).
    MEMBARRIER.store(if available { YES } else { NO }, Ordering::Release);
    available
}

/// The operation side's fence between storing its mark and loading the count: a compiler fence
/// once the registration for process-wide barriers is done (one acquire load: a plain load on
/// x86), a full fence before that or without them.
#[inline(always)]
fn light_fence() {
    match MEMBARRIER.load(Ordering::Acquire) {
        YES => compiler_fence(Ordering::SeqCst),
        NO => fence(Ordering::SeqCst),
        _ => full_fence(),
    }
}

/// [`light_fence`] before the answer on process-wide barriers is known: a full fence, and the
/// first time, the registration asked of a thread of its own (the operation does not wait for
/// it: see [`register_in_background`]).
#[cold]
#[inline(never)]
fn full_fence() {
    // (A load first: the operations of every thread come here until the answer is known.)
    if !ASKED.load(Ordering::Relaxed) && !ASKED.swap(true, Ordering::Relaxed) {
        register_in_background();
    }
    fence(Ordering::SeqCst);
}

/// Runs [`register_membarrier`] on a detached thread of its own, started with `pthread_create`:
/// unlike a `std` thread, it allocates nothing on the heap, so the operation that asks (and the
/// operations running while it registers) stay free of heap allocations. If no thread can
/// start, the first capture registers instead.
#[cfg(target_os = "linux")]
fn register_in_background() {
    extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
        // (A `OnceLock` and a syscall: nothing here panics.)
        register_membarrier();
        std::ptr::null_mut()
    }
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `run` has the signature pthread_create expects and ignores its argument; default
    // attributes; the out-value is a local.
    let started = unsafe { libc::pthread_create(&mut thread, std::ptr::null(), run, std::ptr::null_mut()) } == 0;
    if started {
        // SAFETY: a thread just created, neither joined nor detached yet: nothing joins it.
        unsafe { libc::pthread_detach(thread) };
    }
}

/// Without Linux's `membarrier` there is nothing to wait for: the answer (none) is known at once.
#[cfg(not(target_os = "linux"))]
fn register_in_background() {
    register_membarrier();
}

/// The capture side's fence between storing the count and loading the marks: with membarrier,
/// every thread of the process runs a full barrier before this returns. `false` if it failed.
///
/// Whenever an operation may have read YES (and skipped its fence), this issues the barrier:
/// after YES, directly; before the answer is known, it registers itself (harmless if the
/// registration's thread did already, and no wait for that thread, which a forked child would
/// never see finish) and issues it; only where registering fails, which is where the answer is
/// NO, it waits for that answer and uses a full fence.
fn heavy_fence() -> bool {
    match MEMBARRIER.load(Ordering::Acquire) {
        YES => membarrier(PRIVATE_EXPEDITED),
        NO => {
            fence(Ordering::SeqCst);
            true
        }
        _ if membarrier(REGISTER_PRIVATE_EXPEDITED) => membarrier(PRIVATE_EXPEDITED),
        _ => {
            if register_membarrier() {
                membarrier(PRIVATE_EXPEDITED)
            } else {
                fence(Ordering::SeqCst);
                true
            }
        }
    }
}

/// A thread inside an operation on the quiet path; unmarks it when dropped (also on a panic).
pub(crate) struct Quiet {
    slot: &'static Slot,
    depth: usize,
}

impl Drop for Quiet {
    #[inline]
    fn drop(&mut self) {
        self.slot.depth.store(self.depth, Ordering::Release);
    }
}

/// Enters the quiet path if no capture runs (or is beginning) anywhere: `None` means take the
/// locked path. `running` is the count of captures begun or beginning.
#[inline]
pub(crate) fn enter(running: &AtomicUsize) -> Option<Quiet> {
    let slot = my_slot()?;
    // Only this thread writes its slot: a load and a store, no read-modify-write.
    let depth = slot.depth.load(Ordering::Relaxed);
    slot.depth.store(depth + 1, Ordering::Relaxed);
    light_fence();
    let quiet = Quiet { slot, depth };
    // Acquire: the driver calls of the operation follow the end of the last capture counted.
    if running.load(Ordering::Acquire) == 0 {
        Some(quiet)
    } else {
        None
    }
}

/// A thread inside an operation on the locked path; unmarks it when dropped.
pub(crate) struct Locked(());

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = LOCKED.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Marks the calling thread as inside an operation on the locked path (for [`in_operation`]).
pub(crate) fn enter_locked() -> Locked {
    let _ = LOCKED.try_with(|d| d.set(d.get().saturating_add(1)));
    Locked(())
}

/// Whether the calling thread is inside an operation (on either path).
pub(crate) fn in_operation() -> bool {
    let quiet = MINE
        .try_with(Cell::get)
        .ok()
        .flatten()
        .is_some_and(|slot| slot.depth.load(Ordering::Relaxed) != 0);
    quiet || LOCKED.try_with(Cell::get).unwrap_or(0) != 0
}

/// Called by a capture about to begin, after counting itself in `running`: waits until no
/// other thread is in an operation that may have missed the count. `false` when the barrier
/// failed (the capture must not begin then). The caller is in no operation itself
/// ([`in_operation`]) and holds no lock an operation may need.
pub(crate) fn drain() -> bool {
    if !heavy_fence() {
        return false;
    }
    let mine = MINE.try_with(Cell::get).ok().flatten();
    let slots: Vec<&'static Slot> = SLOTS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for slot in slots {
        if mine.is_some_and(|m| std::ptr::eq(m, slot)) {
            continue;
        }
        // Operations are short driver calls, but one may wait (a synchronous free): spin, then
        // yield, then sleep.
        let mut spins = 0u32;
        while slot.depth.load(Ordering::Acquire) != 0 {
            spins = spins.saturating_add(1);
            if spins < 64 {
                std::hint::spin_loop();
            } else if spins < 1024 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Whether the kernel offers expedited process-wide barriers (`MEMBARRIER_CMD_QUERY`).
    fn expedited_available() -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a syscall with plain integer arguments; the query changes nothing.
            let commands = unsafe { libc::syscall(libc::SYS_membarrier, 0, 0, 0) };
            commands > 0 && commands & (1 << 3) != 0
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn operations_and_captures_do_not_wait_for_the_barrier_registration() {
        let running = AtomicUsize::new(0);
        let held = HOLD_REGISTRATION.lock().unwrap_or_else(|p| p.into_inner());
        // (Only this test enters operations in this binary; if another did first, the
        // registration may be done already and there is nothing left to hold up.)
        let first = !ASKED.load(Ordering::Relaxed);
        for _ in 0..3 {
            let quiet = enter(&running).expect("no capture runs: the quiet path");
            assert!(in_operation());
            drop(quiet);
        }
        assert!(!in_operation());
        if first {
            assert!(
                ASKED.load(Ordering::Relaxed),
                "the first operation asked for the registration"
            );
            assert_eq!(
                MEMBARRIER.load(Ordering::Acquire),
                0,
                "the operations went on while the registration was held up"
            );
            if expedited_available() {
                // A capture's fence registers itself rather than wait for the held thread.
                let capture = std::thread::spawn(heavy_fence);
                wait_for("a capture's fence waited for the registration's thread", || {
                    capture.is_finished()
                });
                assert!(capture.join().unwrap(), "the capture's barrier was issued");
            }
        }
        drop(held);
        wait_for("the registration never finished", || {
            MEMBARRIER.load(Ordering::Acquire) != 0
        });
        assert_eq!(
            MEMBARRIER.load(Ordering::Acquire) == YES,
            expedited_available(),
            "the answer is the kernel's"
        );
        // A capture now: its fence works, it waits for no operation (none runs), and operations
        // counted out by it take the locked path.
        assert!(heavy_fence());
        running.store(1, Ordering::SeqCst);
        assert!(drain(), "no other thread is inside an operation");
        assert!(
            enter(&running).is_none(),
            "a counted capture sends operations to the locked path"
        );
        assert!(!in_operation());
    }
}
