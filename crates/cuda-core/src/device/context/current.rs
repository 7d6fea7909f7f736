//! The calling thread's stack of contexts this crate made current (`CURRENT`, which holds them
//! there), how it is kept in step with the driver's ([`Context::set_current`],
//! [`Context::push`], [`Context::pop_current`], [`Context::with_current`]), and the claim that
//! keeps a green context current on one thread at a time (see [`Green`]).

use super::{Context, Green};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which thread holds a green context's claim, through how many entries of its stack of current
/// contexts, and how many of those last until the thread replaces or pops them
/// ([`Context::set_current`], [`Context::push`]) rather than for one call
/// ([`Context::with_current`]).
#[derive(Default)]
pub(super) struct Claim {
    thread: Option<u64>,
    entries: usize,
    lasting: usize,
}

/// What the error for a green context current on another thread says (see [`Green::claim`]).
const GREEN_BUSY: &str = "is current on another thread";

/// Whether `e` is the error for a green context current on another thread (an operation that
/// needs it current may succeed later).
pub(crate) fn green_context_busy(e: &CudaError) -> bool {
    matches!(e, CudaError::InvalidState(m) if m.contains(GREEN_BUSY))
}

/// A number for the calling thread (usable during its teardown, unlike `std::thread::current`).
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: Cell<u64> = const { Cell::new(0) };
    }
    NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        n.get()
    })
}

impl Green {
    /// Takes (or, on the thread holding it, takes again) the claim for one more entry. Another
    /// thread's claim for a call ([`Context::with_current`]) is waited for; one lasting there
    /// (the context set current or pushed there) is an error.
    fn claim(&self, context: &Context, lasting: bool) -> Result<()> {
        let me = thread_number();
        let mut claim = self.claim.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match claim.thread {
                None => {
                    claim.thread = Some(me);
                    break;
                }
                Some(t) if t == me => break,
                Some(_) if claim.lasting > 0 => {
                    return Err(CudaError::InvalidState(format!(
                        "{context:?} {GREEN_BUSY} (made current there by set_current or push), and a \
                         green context may be current on only one thread at a time (the driver does not synchronise \
                         threads using one green context): make another context current on that thread first, or \
                         give the green context work through its streams, which need no current context"
                    )));
                }
                Some(_) => claim = self.unclaimed.wait(claim).unwrap_or_else(|p| p.into_inner()),
            }
        }
        claim.entries += 1;
        if lasting {
            claim.lasting += 1;
        }
        Ok(())
    }

    /// Counts an entry for a call as a lasting one.
    fn make_lasting(&self) {
        self.claim.lock().unwrap_or_else(|p| p.into_inner()).lasting += 1;
    }

    /// Gives back one entry's share of the claim (the last share lets go of it).
    fn unclaim(&self, lasting: bool) {
        let mut claim = self.claim.lock().unwrap_or_else(|p| p.into_inner());
        claim.entries = claim.entries.saturating_sub(1);
        if lasting {
            claim.lasting = claim.lasting.saturating_sub(1);
        }
        if claim.entries == 0 {
            *claim = Claim::default();
            drop(claim);
            self.unclaimed.notify_all();
        }
    }
}

/// A context on the calling thread's stack of held contexts: it holds the context, and for a
/// green context a share of its claim ([`Green`]), given back when the entry goes.
struct Entry {
    context: Context,
    /// Tells the entries of `with_current` apart.
    id: u64,
    /// Made by `set_current` or `push` (or a `with_current` whose call changed the stack), rather
    /// than for the length of one `with_current` call.
    lasting: bool,
}

impl Entry {
    /// An entry for `context`, taking its claim if it is green (see [`Green::claim`]).
    fn new(context: &Context, lasting: bool) -> Result<Entry> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        if let Some(green) = context.green() {
            green.claim(context, lasting)?;
        }
        Ok(Entry {
            context: context.clone(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            lasting,
        })
    }

    fn make_lasting(&mut self) {
        if !self.lasting {
            self.lasting = true;
            if let Some(green) = self.context.green() {
                green.make_lasting();
            }
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // Before the context itself (a field) is let go of.
        if let Some(green) = self.context.green() {
            green.unclaim(self.lasting);
        }
    }
}

/// The contexts this crate made current on the calling thread, as the driver's stack holds them
/// (the top is the current one). Holding them keeps a created context alive while current here.
struct CurrentStack(RefCell<Vec<Entry>>);

impl Drop for CurrentStack {
    fn drop(&mut self) {
        // The thread is ending: its green contexts' claims are given back here. Primary contexts
        // are never destroyed: let go of them here. A created or green context may be destroyed
        // by its last reference: that happens on the release thread (started when it was made
        // current), not during the thread's teardown.
        let created: Vec<Context> = std::mem::take(self.0.get_mut())
            .into_iter()
            .filter(|e| e.context.inner.ownership.destroys())
            .map(|e| e.context.clone())
            .collect();
        if !created.is_empty() {
            crate::reaper::drop_later(Box::new(created));
        }
    }
}

thread_local! {
    static CURRENT: CurrentStack = const { CurrentStack(RefCell::new(Vec::new())) };
}

/// The error for making a created or green context current while the thread is ending (its stack
/// of held contexts is gone, so nothing would keep the context alive, or hold its claim).
fn ending_thread() -> CudaError {
    CudaError::InvalidState(
        "the thread is ending (its thread-local stack of current contexts is gone): a created or green context \
         cannot be made current now"
            .into(),
    )
}

/// Takes the top of the calling thread's stack of held contexts off when it is `top`; dropped
/// after the stack is released (the drop may destroy a created context).
fn unhold_top(is_top: impl Fn(&Context) -> bool) {
    let popped = CURRENT
        .try_with(|c| {
            let mut stack = c.0.borrow_mut();
            match stack.last() {
                Some(top) if is_top(&top.context) => stack.pop(),
                _ => None,
            }
        })
        .ok()
        .flatten();
    drop(popped);
}

/// Makes `handle` current in place of the calling thread's current context (`cuCtxSetCurrent`;
/// a null handle pops it) and keeps the thread's stack in step: the entry of the replaced context
/// goes when it is the top, and `entry` (of the context `handle` names, when this crate holds it)
/// is pushed. A created or green context is refused while the thread is ending.
fn replace_current(handle: driver::CUcontext, entry: Option<Entry>) -> Result<()> {
    let replacing = Context::current_handle()?;
    let mut entry = Some(entry);
    let done = CURRENT.try_with(|c| -> Result<Option<Entry>> {
        // SAFETY: `handle` is live: the entry holds it (and the stack from here on), or it is
        // null, or the caller vouches for it (a context made current by raw calls).
        unsafe { driver::cuCtxSetCurrent(handle) }.check("cuCtxSetCurrent")?;
        let mut stack = c.0.borrow_mut();
        let replaced = match stack.last() {
            Some(top) if !replacing.is_null() && top.context.handle() == replacing => stack.pop(),
            _ => None,
        };
        stack.extend(entry.take().flatten());
        Ok(replaced)
    });
    match done {
        // The replaced entry goes after the stack's borrow (its drop may destroy a context).
        Ok(replaced) => replaced.map(drop),
        Err(_) => {
            let entry = entry.take().flatten();
            if entry.as_ref().is_some_and(|e| e.context.inner.ownership.destroys()) {
                return Err(ending_thread());
            }
            drop(entry);
            // SAFETY: as above; a primary context is never destroyed, so nothing needs holding.
            unsafe { driver::cuCtxSetCurrent(handle) }.check("cuCtxSetCurrent")
        }
    }
}

impl Context {
    /// The context `handle` when this crate holds it: one on the calling thread's stack of held
    /// contexts, or a primary context it retained. `None` otherwise (also for null). Asks the
    /// driver nothing, so it cannot fail.
    pub(super) fn held(handle: driver::CUcontext) -> Option<Context> {
        if handle.is_null() {
            return None;
        }
        let on_stack = CURRENT
            .try_with(|c| {
                c.0.borrow()
                    .iter()
                    .rev()
                    .find(|e| e.context.inner.handle == handle)
                    .map(|e| e.context.clone())
            })
            .ok()
            .flatten();
        on_stack.or_else(|| super::super::retained_primary(handle))
    }

    /// Makes this context the calling thread's current one (replacing the top of its stack)
    /// and returns the context it replaced, as `cuda.core`'s `Device.set_current(ctx)` does:
    /// `previous.set_current()` restores it. The thread holds this context until it is replaced
    /// or popped there, or the thread ends.
    ///
    /// The previous context is returned only when this crate holds it (a context made current
    /// through this crate on this thread, or a primary context it retained): `None` when no
    /// context was current, and also for a context made current by raw driver calls, which this
    /// crate could not keep alive (restore that one the way it was made current).
    ///
    /// A green context current on another thread is refused (see [`Context`]); making a created
    /// or green context current while the thread is ending is refused too.
    pub fn set_current(&self) -> Result<Option<Context>> {
        if self.inner.ownership.destroys() {
            crate::reaper::start();
        }
        let current = Context::current_handle()?;
        let previous = if current == self.inner.handle {
            Some(self.clone())
        } else {
            Context::held(current)
        };
        replace_current(self.inner.handle, Some(Entry::new(self, true)?))?;
        Ok(previous)
    }

    /// Pushes this context on the calling thread's context stack, making it current. The thread
    /// holds it until it is popped there, or the thread ends. Refused as
    /// [`set_current`](Self::set_current) is.
    pub fn push(&self) -> Result<()> {
        if self.inner.ownership.destroys() {
            crate::reaper::start();
        }
        let done = CURRENT.try_with(|c| -> Result<()> {
            let entry = Entry::new(self, true)?;
            // SAFETY: the context is live while self is; the thread's stack holds it from here on.
            unsafe { driver::cuCtxPushCurrent(self.inner.handle) }.check("cuCtxPushCurrent")?;
            c.0.borrow_mut().push(entry);
            Ok(())
        });
        match done {
            Ok(pushed) => pushed,
            Err(_) if self.inner.ownership.destroys() => Err(ending_thread()),
            // SAFETY: a primary (never destroyed) or borrowed context (the caller's to keep).
            Err(_) => unsafe { driver::cuCtxPushCurrent(self.inner.handle) }.check("cuCtxPushCurrent"),
        }
    }

    /// Pops the calling thread's current context off its stack and returns its handle.
    pub fn pop_current() -> Result<driver::CUcontext> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxPopCurrent(&mut ctx) }.check("cuCtxPopCurrent")?;
        unhold_top(|top| top.inner.handle == ctx);
        Ok(ctx)
    }

    /// Runs `f` with this context current, restoring the previous one afterwards (also when `f`
    /// fails): a context this crate holds (made current through it) or a primary context. A
    /// context made current by other code, which this crate cannot keep alive, is not made
    /// current again (`f` may have let it be destroyed): the thread is left with no current
    /// context then. `f` should not change the current context itself; if it does, the previous
    /// context is still restored, as [`set_current`](Self::set_current) would (the thread's stack
    /// of held contexts and the driver's stay in step: a context `f` left below the top stays
    /// held).
    ///
    /// For a green context, this waits while another thread runs `with_current` with it, and
    /// fails while it is current on another thread through `set_current` or `push` (see
    /// [`Context`]). Making a created or green context current while the thread is ending is
    /// refused.
    pub fn with_current<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let previous = Context::current_handle()?;
        if previous == self.inner.handle {
            return f();
        }
        // Kept alive until it is current again (`f` might let go of every other reference). A
        // context made current by raw calls is not held: their caller keeps it alive.
        let previous_held = Context::held(previous);
        let entered = CURRENT.try_with(|c| -> Result<(u64, Option<Entry>)> {
            let entry = Entry::new(self, false)?;
            // SAFETY: the context is live (self holds it, and the stack from here on); the
            // previous one is restored below.
            unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
            let id = entry.id;
            let mut stack = c.0.borrow_mut();
            // The driver replaced the previous context: its entry waits aside (still holding
            // it, and its claim) until it is current again.
            let aside = match stack.last() {
                Some(top) if !previous.is_null() && top.context.handle() == previous => stack.pop(),
                _ => None,
            };
            // While current here, the thread's stack names it, so that what `f` hands on keeps
            // this context (see `Context::current`).
            stack.push(entry);
            Ok((id, aside))
        });
        let (id, aside) = match entered {
            Ok(entered) => {
                let (id, aside) = entered?;
                (Some(id), aside)
            }
            Err(_) if self.inner.ownership.destroys() => return Err(ending_thread()),
            Err(_) => {
                // SAFETY: a primary (never destroyed) or borrowed context (the caller's to keep).
                unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
                (None, None)
            }
        };
        let result = f();
        // A previous context made current by other code (not held here, not a primary context)
        // is not made current again: `f` may have let it be destroyed (dropping another
        // library's context object binds and destroys it, which leaves no trace this crate can
        // see), and a destroyed context must never be current. The thread is left with no
        // current context instead.
        let previous = if previous_held.is_none() && !previous.is_null() && !is_primary(previous) {
            std::ptr::null_mut()
        } else {
            previous
        };
        let restored = Context::restore(id, previous, aside);
        match (result, restored) {
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), Ok(())) => Err(e),
            // Both are kept, as cuda.core adds the restore failure to the exception's notes.
            (Err(e), Err(restore)) => Err(e.with_note(format!(
                "making the previous context current again also failed: {restore}"
            ))),
        }
    }

    /// Makes `previous` current again after [`with_current`](Self::with_current) (whose entry is
    /// `id`, and `aside` the previous context's entry it took off the stack). When the entry is
    /// still the top it is replaced by `aside`; when `f` changed the thread's current context,
    /// `previous` replaces whatever is current as [`set_current`](Self::set_current) would, and
    /// the entry, if `f` left it below the top, stays there (as `push`'s: the driver's stack
    /// still has that context).
    fn restore(id: Option<u64>, previous: driver::CUcontext, aside: Option<Entry>) -> Result<()> {
        let Some(id) = id else {
            // Never on the stack (the thread is ending): nothing to keep in step.
            // SAFETY: restoring what was current before: made current by raw calls whose caller
            // keeps it alive, or a primary context (or null).
            return unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent");
        };
        let on_top = CURRENT
            .try_with(|c| {
                let mut stack = c.0.borrow_mut();
                if stack.last().is_some_and(|top| top.id == id) {
                    return true;
                }
                if let Some(entry) = stack.iter_mut().find(|e| e.id == id) {
                    entry.make_lasting();
                }
                false
            })
            .unwrap_or(false);
        if !on_top {
            return replace_current(previous, aside);
        }
        // SAFETY: restoring what was current before: held by `aside` (or, for a primary
        // context, for ever), or made current by raw calls whose caller keeps it alive (or null).
        let restored = unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent");
        let mut aside = aside;
        let ours = CURRENT
            .try_with(|c| {
                let mut stack = c.0.borrow_mut();
                if restored.is_err() {
                    // Still current: the stack keeps it, as `set_current`'s (`aside` goes).
                    if let Some(top) = stack.last_mut() {
                        top.make_lasting();
                    }
                    return None;
                }
                let ours = stack.pop();
                stack.extend(aside.take());
                ours
            })
            .ok()
            .flatten();
        // After the context is no longer current (its claim goes with the entry) and after the
        // stack's borrow (the drop may destroy a context).
        drop((ours, aside));
        restored
    }
}

/// Whether `handle` is the primary context of a device (retained by this crate for the life of
/// the process, so never destroyed), found without touching `handle` itself.
fn is_primary(handle: driver::CUcontext) -> bool {
    crate::Device::all().is_ok_and(|all| {
        all.iter()
            .any(|d| d.primary_context().is_ok_and(|p| p.handle() == handle))
    })
}
