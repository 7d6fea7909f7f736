//! The warnings channel: what `cuda.core` reports with Python's `warnings` module (its
//! `CUDAWarning` for failed releases, `RuntimeWarning` for a PTX newer than the driver or the
//! nvJitLink fallback, `UserWarning` for managed memory without concurrent access) goes to a
//! handler the program installs ([`set_warning_handler`]) and, with the `tracing` feature, out
//! as a `warn` event. Nothing is polled: each warning is delivered when it happens.
//!
//! Warnings come from any thread: the thread that called the operation or the release thread
//! (drops that waited for the GPU). The handler runs on that thread and must not block for long;
//! its panics are caught. A warning raised on a driver thread (a host function's panic), where
//! no CUDA call may be made (and the handler could make one, through another library), is held
//! and handed to the handler on this crate's release thread. A warning raised while the same
//! thread runs the handler goes only to `tracing` (no recursion).

use super::CudaError;
use std::cell::Cell;
use std::sync::{Arc, RwLock};

/// Which of `cuda.core`'s warning classes a [`Warning`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WarningCategory {
    /// `CUDAWarning`: releasing a resource in `Drop` failed (the error is attached). Failures
    /// saying the driver is shutting down (`CUDA_ERROR_DEINITIALIZED`) are never reported.
    Cuda,
    /// `RuntimeWarning`: a PTX newer than the driver can load, the nvJitLink fallback to the
    /// driver's linker.
    Runtime,
    /// `UserWarning`: a usage the program should know about, such as managed memory on a device
    /// without concurrent managed access.
    User,
}

impl std::fmt::Display for WarningCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WarningCategory::Cuda => "CUDAWarning",
            WarningCategory::Runtime => "RuntimeWarning",
            WarningCategory::User => "UserWarning",
        })
    }
}

/// A warning: its category, what it says, and the error behind it when there is one.
#[derive(Debug, Clone)]
pub struct Warning {
    category: WarningCategory,
    message: String,
    error: Option<CudaError>,
}

impl Warning {
    pub(crate) fn new(category: WarningCategory, message: impl Into<String>) -> Warning {
        Warning {
            category,
            message: message.into(),
            error: None,
        }
    }

    pub(crate) fn with_error(category: WarningCategory, message: impl Into<String>, error: CudaError) -> Warning {
        Warning {
            category,
            message: message.into(),
            error: Some(error),
        }
    }

    /// The warning's class.
    pub fn category(&self) -> WarningCategory {
        self.category
    }

    /// What happened and what to do about it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error behind the warning (a failed release's).
    pub fn error(&self) -> Option<&CudaError> {
        self.error.as_ref()
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.category, self.message)
    }
}

/// A warning handler, as [`set_warning_handler`] installs it.
pub type WarningHandler = Arc<dyn Fn(&Warning) + Send + Sync>;

static HANDLER: RwLock<Option<WarningHandler>> = RwLock::new(None);

/// Warnings raised on a driver thread, for the release thread to deliver ([`deliver_held`]).
static HELD: std::sync::Mutex<Vec<Warning>> = std::sync::Mutex::new(Vec::new());

/// Marks the calling thread as running a callback for the driver (`true`) or not: warnings
/// raised meanwhile are held for the release thread (see the module documentation).
pub(crate) fn set_on_driver_thread(on: bool) {
    let _ = ON_DRIVER_THREAD.try_with(|c| c.set(on));
}

/// Whether the calling thread runs a callback for the driver (see [`set_on_driver_thread`]).
#[inline]
pub(crate) fn on_driver_thread() -> bool {
    ON_DRIVER_THREAD.try_with(Cell::get).unwrap_or(false)
}

/// Whether warnings raised on driver threads wait to be delivered.
pub(crate) fn any_held() -> bool {
    !HELD.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
}

/// Delivers the warnings raised on driver threads (called on the release thread).
pub(crate) fn deliver_held() {
    let held = std::mem::take(&mut *HELD.lock().unwrap_or_else(|p| p.into_inner()));
    for w in held {
        warn(w);
    }
}

/// Keeps a caught panic's payload rather than dropping it: its destructor could panic in turn,
/// outside any catch, and unwind the thread (the release thread, dropping releases still
/// waiting for the GPU, or a driver thread). Payloads are small (a message), and such panics
/// are bugs.
pub(crate) fn forget_payload(payload: Box<dyn std::any::Any + Send>) {
    std::mem::forget(payload);
}

thread_local! {
    /// Set while the thread runs a callback for the driver.
    static ON_DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread runs the handler.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Installs `handler` to receive every warning from now on (`None` removes it), returning the
/// one it replaces. Without a handler, warnings go only to `tracing` (and failed releases are
/// still kept for [`crate::take_drop_errors`]).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// let previous = cuda_core::set_warning_handler(Some(Arc::new(move |w: &cuda_core::Warning| {
///     sink.lock().unwrap().push(w.to_string());
/// })));
/// # cuda_core::set_warning_handler(previous);
/// ```
pub fn set_warning_handler(handler: Option<WarningHandler>) -> Option<WarningHandler> {
    let mut slot = HANDLER.write().unwrap_or_else(|p| p.into_inner());
    std::mem::replace(&mut *slot, handler)
}

/// Delivers `warning`: a `tracing` event, then the installed handler (outside every lock of
/// this crate's, its panics caught).
pub(crate) fn warn(warning: Warning) {
    // A subscriber's panic must not unwind out of here: callers of drops keep (forget) what
    // may still be in use after recording.
    #[cfg(feature = "tracing")]
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        event!(warn, category = %warning.category, "{}", warning.message);
    })) {
        forget_payload(payload);
    }
    if IN_HANDLER.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    if on_driver_thread() {
        // Handed to the handler on the release thread (see `deliver_held`).
        HELD.lock().unwrap_or_else(|p| p.into_inner()).push(warning);
        return;
    }
    let handler = HANDLER.read().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(handler) = handler {
        let _ = IN_HANDLER.try_with(|c| c.set(true));
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&warning))) {
            forget_payload(payload);
        }
        let _ = IN_HANDLER.try_with(|c| c.set(false));
    }
}

/// Delivers the warning `make` builds the first time `once` is passed here (Python shows such
/// a warning once per place; the nvJitLink fallback is warned of once per process).
pub(crate) fn warn_once(once: &'static std::sync::Once, make: impl FnOnce() -> Warning) {
    let mut warning = None;
    once.call_once(|| warning = Some(make()));
    if let Some(w) = warning {
        warn(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests that install a handler run one at a time (the handler is process-wide).
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    fn collecting() -> (Arc<Mutex<Vec<Warning>>>, Option<WarningHandler>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let previous = set_warning_handler(Some(Arc::new(move |w: &Warning| {
            sink.lock().unwrap().push(w.clone());
        })));
        (seen, previous)
    }

    #[test]
    fn a_drop_error_reaches_the_handler_and_shutdown_errors_do_not() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (seen, previous) = collecting();
        let _ = crate::take_drop_errors();
        let failed = cuda_sys::driver::CUresult::CUDA_ERROR_INVALID_HANDLE
            .result()
            .unwrap_err();
        crate::error::record_drop_error(CudaError::Driver {
            call: "cuStreamDestroy",
            source: failed,
        });
        let shutdown = cuda_sys::driver::CUresult::CUDA_ERROR_DEINITIALIZED
            .result()
            .unwrap_err();
        crate::error::record_drop_error(CudaError::Driver {
            call: "cuEventDestroy",
            source: shutdown,
        });
        set_warning_handler(previous);
        let seen = seen.lock().unwrap();
        let ours: Vec<_> = seen
            .iter()
            .filter(|w| w.message().contains("cuStreamDestroy") || w.message().contains("cuEventDestroy"))
            .collect();
        assert_eq!(ours.len(), 1, "{seen:?}");
        assert_eq!(ours[0].category(), WarningCategory::Cuda);
        assert_eq!(
            ours[0].error().and_then(CudaError::driver_status),
            Some(cuda_sys::driver::CUresult::CUDA_ERROR_INVALID_HANDLE)
        );
        assert!(ours[0].to_string().starts_with("CUDAWarning: "), "{}", ours[0]);
        let kept = crate::take_drop_errors();
        assert!(kept.iter().any(|e| e.to_string().contains("cuStreamDestroy")));
        assert!(
            !kept.iter().any(|e| e.to_string().contains("cuEventDestroy")),
            "{kept:?}"
        );
    }

    #[test]
    fn a_panicking_handler_and_a_warning_inside_the_handler_are_contained() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let calls = Arc::new(Mutex::new(0));
        let count = calls.clone();
        let previous = set_warning_handler(Some(Arc::new(move |_: &Warning| {
            *count.lock().unwrap() += 1;
            // A warning raised by the handler is not delivered to it again.
            warn(Warning::new(WarningCategory::User, "nested"));
            panic!("handler panics");
        })));
        warn(Warning::new(WarningCategory::Runtime, "outer"));
        warn(Warning::new(WarningCategory::Runtime, "outer again"));
        set_warning_handler(previous);
        assert_eq!(*calls.lock().unwrap(), 2);
    }

    #[test]
    fn warnings_raised_on_a_driver_thread_reach_the_handler_later_elsewhere() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (seen, previous) = collecting();
        let raised = std::thread::spawn(|| {
            set_on_driver_thread(true);
            warn(Warning::new(WarningCategory::Cuda, "raised in a host function"));
            set_on_driver_thread(false);
        });
        raised.join().unwrap();
        let delivered = |seen: &Mutex<Vec<Warning>>| {
            seen.lock()
                .unwrap()
                .iter()
                .filter(|w| w.message() == "raised in a host function")
                .count()
        };
        assert_eq!(delivered(&seen), 0, "not on the driver thread");
        assert!(any_held());
        deliver_held();
        set_warning_handler(previous);
        assert_eq!(delivered(&seen), 1, "delivered by the release thread's call");
        assert!(!any_held());
    }

    #[test]
    fn warn_once_warns_once() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        static ONCE: std::sync::Once = std::sync::Once::new();
        let (seen, previous) = collecting();
        for _ in 0..3 {
            warn_once(&ONCE, || Warning::new(WarningCategory::Runtime, "only once, please"));
        }
        set_warning_handler(previous);
        let n = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.message() == "only once, please")
            .count();
        assert_eq!(n, 1);
    }
}
