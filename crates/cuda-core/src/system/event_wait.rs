//! Waiting for device events without blocking the waiting thread: [`DeviceEvents::wait_async`]
//! (`cuda.core`'s awaitable NVML event wait). NVML's wait blocks a thread and cannot be
//! interrupted, so a helper thread makes it in slices of at most [`SLICE`], against the
//! caller's deadline; the returned future completes when a slice brings an event or the
//! deadline passes. Dropping the future stops the helper after its current slice; an event that
//! slice consumed is kept for the next wait ([`EventSet::park`]), not lost. The helper holds the
//! event set, so it is freed only after the last native wait returns.

use super::events::{DeviceEvents, EventData, EventSet};
use crate::{CudaError, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The longest native wait: bounds how long a dropped future's helper lingers.
pub(super) const SLICE: Duration = Duration::from_millis(100);

/// A wait's outcome once known, and the waker to call then.
type State = (Option<Result<Option<EventData>>>, Option<Waker>);

/// What the helper and the future share.
#[derive(Default)]
struct Shared {
    /// The outcome once known, and the waker to call then.
    state: Mutex<State>,
    /// Set when the future is dropped: the helper stops after its slice.
    abandoned: AtomicBool,
}

/// A wait for a device event ([`DeviceEvents::wait_async`]): `Ok(None)` when the deadline
/// passed without one.
#[must_use = "a future does nothing unless awaited"]
pub struct EventWait<'a> {
    shared: Arc<Shared>,
    set: Arc<EventSet>,
    /// The events are borrowed mutably while the wait lasts: one waiter at a time.
    _events: std::marker::PhantomData<&'a mut DeviceEvents>,
}

impl Future for EventWait<'_> {
    type Output = Result<Option<EventData>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.0.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                state.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for EventWait<'_> {
    fn drop(&mut self) {
        self.shared.abandoned.store(true, Ordering::SeqCst);
        // An event delivered but never polled is kept for the next wait (the state lock is let
        // go before the lease is taken: the helper takes them the other way round).
        let delivered = self.shared.state.lock().unwrap_or_else(|p| p.into_inner()).0.take();
        if let Some(Ok(Some(event))) = delivered {
            self.set.park(event);
        }
    }
}

impl DeviceEvents {
    /// Waits for an event without blocking the calling thread: a future that completes with
    /// the next event, or `Ok(None)` once `timeout` has passed without one (`None`: no
    /// deadline). A helper thread makes NVML's blocking wait in slices of at most 100 ms;
    /// dropping the future stops it after the current slice, and an event that slice took is
    /// returned by the next [`wait`](Self::wait) or `wait_async`.
    ///
    /// ```no_run
    /// # async fn watch() -> cuda_core::Result<()> {
    /// use cuda_core::system::{Device, EventType};
    /// let mut events = Device::from_index(0)?.register_events(EventType::XID_CRITICAL_ERROR)?;
    /// if let Some(event) = events.wait_async(Some(std::time::Duration::from_secs(10))).await? {
    ///     println!("Xid {:?}", event.xid());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_async(&mut self, timeout: Option<Duration>) -> EventWait<'_> {
        let shared = Arc::new(Shared::default());
        let deadline = timeout.map(|t| Instant::now() + t);
        let (set, helper_shared) = (self.set.clone(), shared.clone());
        let spawned = std::thread::Builder::new()
            .name("cuda-core-nvml-wait".into())
            .spawn(move || run(&set, &helper_shared, deadline));
        if let Err(e) = spawned {
            let refused = Err(CudaError::InvalidState(format!(
                "cannot start the thread that waits for NVML events: {e}; use DeviceEvents::wait"
            )));
            shared.state.lock().unwrap_or_else(|p| p.into_inner()).0 = Some(refused);
        }
        EventWait {
            shared,
            set: self.set.clone(),
            _events: std::marker::PhantomData,
        }
    }
}

/// The helper: slices until an event, an error, the deadline or abandonment.
fn run(set: &EventSet, shared: &Shared, deadline: Option<Instant>) {
    loop {
        if shared.abandoned.load(Ordering::SeqCst) {
            return;
        }
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        let ms = u32::try_from(slice.as_millis()).unwrap_or(u32::MAX).max(1);
        let outcome = set.wait(ms);
        if matches!(outcome, Ok(None)) && deadline.is_none_or(|d| Instant::now() < d) {
            continue;
        }
        if shared.abandoned.load(Ordering::SeqCst) {
            if let Ok(Some(event)) = outcome {
                set.park(event);
            }
            return;
        }
        let waker = {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.0 = Some(outcome);
            state.1.take()
        };
        // Dropped meanwhile (after the check above): the drop either found the outcome and
        // parked its event, or left it here to be parked now.
        if shared.abandoned.load(Ordering::SeqCst) {
            let left = shared.state.lock().unwrap_or_else(|p| p.into_inner()).0.take();
            if let Some(Ok(Some(event))) = left {
                set.park(event);
            }
            return;
        }
        if let Some(w) = waker {
            w.wake();
        }
        return;
    }
}
