//! Watching the run: what each thread is doing (and the watchdog that aborts a stalled run after
//! printing it), counts of operations and refusals, and the failures found.

use cuda_core::CudaError;
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Locks `m`, also after a panic on another thread (the run reports that panic itself).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes to the process's stderr directly: libtest captures `eprintln!` (also on the threads a
/// test spawns) and shows it only when the test fails, so what must be seen in every run (the
/// seed, the summary, a stall before the abort) bypasses the capture.
pub fn say(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{text}");
    let _ = e.flush();
}

/// How many operations each thread remembers for a stall's report.
const RECENT: usize = 12;

/// What one thread is doing: its current operation, since when, and its last few.
pub struct Progress {
    pub name: String,
    since_ms: AtomicU64,
    current: Mutex<String>,
    recent: Mutex<VecDeque<String>>,
    finished: AtomicBool,
}

impl Progress {
    pub fn new(name: String) -> Progress {
        Progress {
            name,
            since_ms: AtomicU64::new(0),
            current: Mutex::new("starting".into()),
            recent: Mutex::new(VecDeque::new()),
            finished: AtomicBool::new(false),
        }
    }

    /// Notes that the thread begins `what`, at `now_ms` (milliseconds since the run began).
    pub fn begin(&self, now_ms: u64, what: String) {
        let mut current = lock(&self.current);
        let mut recent = lock(&self.recent);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        let previous = std::mem::replace(&mut *current, what);
        recent.push_back(format!("{previous} (until {:.3} s)", now_ms as f64 / 1e3));
        self.since_ms.store(now_ms, Ordering::SeqCst);
    }

    /// The current operation's text.
    pub fn current(&self) -> String {
        lock(&self.current).clone()
    }

    pub fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    pub fn restart(&self, now_ms: u64) {
        self.finished.store(false, Ordering::SeqCst);
        self.since_ms.store(now_ms, Ordering::SeqCst);
    }

    /// The thread's state for a report; `try_lock` only (a crashing thread may hold the locks).
    fn describe(&self, now_ms: u64) -> String {
        let since = self.since_ms.load(Ordering::SeqCst);
        let current = self.current.try_lock().map_or("(locked)".to_string(), |c| c.clone());
        let mut s = format!(
            "  {}: {} {current} (for {:.1} s)\n",
            self.name,
            if self.finished.load(Ordering::SeqCst) {
                "finished; last"
            } else {
                "now in"
            },
            now_ms.saturating_sub(since) as f64 / 1e3
        );
        if let Ok(recent) = self.recent.try_lock() {
            for r in recent.iter().rev() {
                s += &format!("      before: {r}\n");
            }
        }
        s
    }
}

/// Watches `threads` until `done`: one that stays in one operation longer than `stall` makes it
/// print every thread's state and abort the process (a hang never wedges the run).
pub fn watchdog(threads: &[Progress], start: Instant, stall: Duration, done: &AtomicBool, seed: u64) {
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        let now = start.elapsed().as_millis() as u64;
        let stalled = threads.iter().find(|p| {
            !p.finished.load(Ordering::SeqCst)
                && now.saturating_sub(p.since_ms.load(Ordering::SeqCst)) > stall.as_millis() as u64
        });
        if let Some(p) = stalled {
            let mut report = format!(
                "stress: STALL: {} made no progress for {:.0} s ({:.1} s into the run, seed {seed:#x}); every thread's last operations:\n",
                p.name,
                stall.as_secs_f64(),
                now as f64 / 1e3
            );
            for t in threads {
                report += &t.describe(now);
            }
            say(&report);
            print_every_threads_frames();
            say("stress: aborting the process so that the hang cannot wedge the run");
            std::process::abort();
        }
    }
}

/// Counts of one operation.
#[derive(Default, Clone, Copy)]
pub struct Count {
    pub ok: u64,
    /// Refused for a reason the test expects (a capture in the way, an update the driver
    /// declines, ...).
    pub refused: u64,
    /// Failed for a reason the test does not expect (reported, and the test fails).
    pub failed: u64,
    /// Nothing to do (an empty slot, no suitable object).
    pub skipped: u64,
}

/// One thread's counts.
#[derive(Default)]
pub struct Stats {
    pub ops: BTreeMap<&'static str, Count>,
    /// Refusals by operation and reason.
    pub refusals: BTreeMap<String, u64>,
    /// Other events worth counting (objects dropped on another thread, captures abandoned, ...).
    pub events: BTreeMap<String, u64>,
}

impl Stats {
    pub fn ok(&mut self, op: &'static str) {
        self.ops.entry(op).or_default().ok += 1;
    }
    pub fn skipped(&mut self, op: &'static str) {
        self.ops.entry(op).or_default().skipped += 1;
    }
    pub fn refused(&mut self, op: &'static str, reason: String) {
        self.ops.entry(op).or_default().refused += 1;
        *self.refusals.entry(format!("{op}: {reason}")).or_default() += 1;
    }
    pub fn failed(&mut self, op: &'static str) {
        self.ops.entry(op).or_default().failed += 1;
    }
    pub fn event(&mut self, what: impl Into<String>) {
        *self.events.entry(what.into()).or_default() += 1;
    }

    pub fn merge(&mut self, other: Stats) {
        for (k, v) in other.ops {
            let c = self.ops.entry(k).or_default();
            c.ok += v.ok;
            c.refused += v.refused;
            c.failed += v.failed;
            c.skipped += v.skipped;
        }
        for (k, v) in other.refusals {
            *self.refusals.entry(k).or_default() += v;
        }
        for (k, v) in other.events {
            *self.events.entry(k).or_default() += v;
        }
    }

    pub fn total(&self) -> Count {
        let mut t = Count::default();
        for c in self.ops.values() {
            t.ok += c.ok;
            t.refused += c.refused;
            t.failed += c.failed;
            t.skipped += c.skipped;
        }
        t
    }
}

/// A short key for an error: the driver's status name and call, or the start of the message.
pub fn reason(e: &CudaError) -> String {
    match e {
        CudaError::Driver { call, source } => format!("{call}: {}", source.name()),
        other => {
            let text = other.to_string();
            let first = text.lines().next().unwrap_or("");
            if first.chars().count() > 90 {
                format!("{}...", first.chars().take(90).collect::<String>())
            } else {
                first.to_string()
            }
        }
    }
}

/// What failed, shared by every thread.
#[derive(Default)]
pub struct Report {
    /// Reads that found a buffer holding what it should not (in full).
    pub mismatches: Mutex<Vec<String>>,
    /// Errors the test does not expect: by operation and reason, their count and the first
    /// few in full.
    pub unexpected: Mutex<BTreeMap<String, (u64, Vec<String>)>>,
    /// Other failed checks (in full).
    pub other: Mutex<Vec<String>>,
}

impl Report {
    /// Adds what a second read of buffer `id` found to its mismatch.
    pub fn mismatch_note(&self, id: u64, note: String) {
        say(&format!("stress: MISMATCH of buffer #{id}: {note}"));
        let mut m = lock(&self.mismatches);
        if let Some(last) = m.iter_mut().rev().find(|t| t.contains(&format!("buffer #{id} "))) {
            *last += &format!("; {note}");
        }
    }

    pub fn mismatch(&self, text: String) {
        let mut m = lock(&self.mismatches);
        // The first ones in full as they happen (a burst would flood the log); all in the end.
        if m.len() < 20 {
            say(&format!("stress: MISMATCH: {text}"));
        }
        m.push(text);
    }

    pub fn unexpected(&self, op: &str, e: &CudaError, context: String) {
        let key = format!("{op}: {}", reason(e));
        let mut u = lock(&self.unexpected);
        let entry = u.entry(key).or_default();
        entry.0 += 1;
        if entry.1.len() < 3 {
            entry.1.push(format!("{e} ({context})"));
        }
        if entry.0 == 1 {
            say(&format!("stress: UNEXPECTED ERROR in {op}: {e} ({context})"));
        }
    }

    pub fn other(&self, text: String) {
        say(&format!("stress: FAILED: {text}"));
        lock(&self.other).push(text);
    }

    pub fn failed(&self) -> bool {
        !lock(&self.mismatches).is_empty() || !lock(&self.unexpected).is_empty() || !lock(&self.other).is_empty()
    }

    /// Every failure, for the test's panic message.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let m = lock(&self.mismatches);
        for m in m.iter().take(50) {
            s += &format!("mismatch: {m}\n");
        }
        if m.len() > 50 {
            s += &format!("... and {} more mismatches\n", m.len() - 50);
        }
        for (k, (n, samples)) in lock(&self.unexpected).iter() {
            s += &format!("unexpected error ({n} times) {k}\n");
            for sample in samples {
                s += &format!("    e.g. {sample}\n");
            }
        }
        for o in lock(&self.other).iter() {
            s += &format!("failed: {o}\n");
        }
        s
    }
}

/// What a fatal signal prints (set once the run's threads exist).
static CRASH: std::sync::OnceLock<(std::sync::Arc<Vec<Progress>>, Instant, u64)> = std::sync::OnceLock::new();

extern "C" {
    /// glibc's `backtrace(3)`.
    fn backtrace(buffer: *mut *mut std::ffi::c_void, size: std::ffi::c_int) -> std::ffi::c_int;
}

/// On SIGSEGV, SIGBUS, SIGILL or SIGFPE: prints the crashing thread, the fault address, every
/// thread's last operations and the crashing thread's frames (as module + offset: the bundle's
/// executables are stripped), then dies of the signal as it would have.
pub fn on_crash_print(progress: std::sync::Arc<Vec<Progress>>, start: Instant, seed: u64) {
    let _ = CRASH.set((progress, start, seed));
    for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
        // SAFETY: a zeroed sigaction with a handler of the SA_SIGINFO signature; the handler
        // only runs when the process is about to die of the signal.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = crash_handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Not async-signal-safe (it formats and reads files): the process is dying anyway, and what it
/// prints is the only trace of why.
extern "C" fn crash_handler(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut std::ffi::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let address = unsafe { (*info).si_addr() };
    let thread = std::thread::current();
    let mut text = format!(
        "stress: CRASH: signal {sig} at address {address:p} on thread {:?}",
        thread.name().unwrap_or("(unnamed: a driver or library thread)")
    );
    if let Some((progress, start, seed)) = CRASH.get() {
        let now = start.elapsed().as_millis() as u64;
        text += &format!(
            " ({:.3} s into the run, seed {seed:#x}); every thread's last operations:\n",
            now as f64 / 1e3
        );
        for p in progress.iter() {
            text += &p.describe(now);
        }
    }
    text += "  the crashing thread's frames:\n";
    text += &frames();
    // Straight to the file descriptor: the crashing thread may hold stderr's lock.
    // SAFETY: writes the bytes of a live string to fd 2.
    unsafe {
        libc::write(2, text.as_ptr().cast(), text.len());
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// The calling thread's frames, one per line, as module + offset (the bundle's executables are
/// stripped: `addr2line -e <unstripped build> <offset + the text segment's vaddr - offset>`).
fn frames() -> String {
    let mut frames = [std::ptr::null_mut(); 64];
    // SAFETY: the buffer holds 64 entries.
    let n = unsafe { backtrace(frames.as_mut_ptr(), 64) }.max(0) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let place = |ip: usize| -> String {
        for line in maps.lines() {
            let mut parts = line.split_whitespace();
            let (Some(range), Some(_perms), Some(offset)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let Some((lo, hi)) = range.split_once('-') else {
                continue;
            };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) else {
                continue;
            };
            if (lo..hi).contains(&ip) {
                let file_offset = usize::from_str_radix(offset, 16).unwrap_or(0);
                let module = parts.nth(2).unwrap_or("?");
                return format!("{module}+{:#x}", ip - lo + file_offset);
            }
        }
        "?".into()
    };
    let mut text = String::new();
    for ip in &frames[..n] {
        text += &format!("    {:p} {}\n", *ip, place(*ip as usize));
    }
    text
}

/// On a stall: every other thread of the process (workers, the driver's) prints its frames from
/// a SIGUSR2 handler, so a deadlock shows where each thread waits.
fn print_every_threads_frames() {
    // SAFETY: installs a handler of the plain signature for SIGUSR2, which nothing else uses.
    unsafe {
        libc::signal(libc::SIGUSR2, frames_handler as *const () as libc::sighandler_t);
    }
    // SAFETY: plain system calls without pointers.
    let (pid, me) = unsafe { (libc::getpid(), libc::syscall(libc::SYS_gettid) as libc::pid_t) };
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        if tid != me {
            // SAFETY: signals a thread of this process; the handler only prints.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
            // One at a time, so their outputs do not interleave.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// Not async-signal-safe (it formats and reads files): runs only when the process is about to
/// abort.
extern "C" fn frames_handler(_: libc::c_int) {
    let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap_or_default();
    let text = format!("stress: frames of thread {:?}:\n{}", name.trim(), frames());
    // SAFETY: writes the bytes of a live string to fd 2.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}
