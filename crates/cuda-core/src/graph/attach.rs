//! What graphs keep alive: values handed to CUDA user objects, released by a reaper thread once
//! the last graph (and launch) referring to them is gone.

use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

/// A value a graph holds, with the context to make current when it is dropped (freeing memory
/// on the legacy default stream needs one).
struct Held {
    value: Box<dyn Any + Send + Sync>,
    context: Option<Context>,
}

static REAPER: OnceLock<Mutex<mpsc::Sender<Held>>> = OnceLock::new();

/// The reaper: user-object destructors run on a driver thread, which must not call CUDA, so they
/// only post what they release here, and this thread drops it. Started on first use.
fn start_reaper() -> Result<()> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if REAPER.get().is_some() {
        return Ok(());
    }
    let (tx, rx) = mpsc::channel::<Held>();
    std::thread::Builder::new()
        .name("cuda-core-graph-reaper".into())
        .spawn(move || {
            for held in rx {
                if let Some(ctx) = &held.context {
                    let _ = ctx.set_current();
                }
                let Held { value, .. } = held;
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value))).is_err() {
                    record_drop_error(CudaError::InvalidArgument(
                        "a value released by a graph panicked in its destructor".into(),
                    ));
                }
            }
        })
        .map_err(|e| {
            CudaError::InvalidArgument(format!("cannot start the thread that releases what graphs hold: {e}"))
        })?;
    let _ = REAPER.set(Mutex::new(tx));
    Ok(())
}

/// Called by the driver once the user object's last reference is gone.
unsafe extern "C" fn release(data: *mut c_void) {
    // SAFETY: data is the Box<Held> leaked in `attach`; the driver calls this exactly once.
    let held = unsafe { Box::from_raw(data as *mut Held) };
    let sent = match REAPER.get() {
        Some(tx) => match tx.lock() {
            Ok(tx) => tx.send(*held).map_err(|e| e.0),
            Err(_) => Err(*held),
        },
        None => Err(*held),
    };
    // Dropping here could call CUDA on the driver's thread: keep the value rather than risk it.
    if let Err(held) = sent {
        std::mem::forget(held);
    }
}

/// The current device's primary context, if there is one: what values graphs hold are released
/// in.
pub(crate) fn current_primary_context() -> Option<Context> {
    Device::current().and_then(|d| d.primary_context()).ok()
}

/// Hands `value` to `graph` (through a CUDA user object): it is dropped after the graph, every
/// clone and executable graph made from it, and every launch of those, are gone.
pub(crate) fn attach<T: Any + Send + Sync>(graph: driver::CUgraph, value: T) -> Result<()> {
    start_reaper()?;
    let data = Box::into_raw(Box::new(Held {
        value: Box::new(value),
        context: current_primary_context(),
    }));
    let mut object: driver::CUuserObject = std::ptr::null_mut();
    // SAFETY: data is a leaked box that `release` reclaims once; NO_DESTRUCTOR_SYNC is required.
    let created = unsafe {
        driver::cuUserObjectCreate(
            &mut object,
            data.cast(),
            Some(release),
            1,
            driver::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    }
    .check("cuUserObjectCreate");
    if let Err(e) = created {
        // SAFETY: the driver did not take data.
        drop(unsafe { Box::from_raw(data) });
        return Err(e);
    }
    // SAFETY: the graph is live; MOVE hands it the one reference made above.
    let retained = unsafe {
        driver::cuGraphRetainUserObject(
            graph,
            object,
            1,
            driver::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
        )
    }
    .check("cuGraphRetainUserObject");
    if let Err(e) = retained {
        // SAFETY: the reference is still ours; releasing it runs `release` (on a driver thread).
        let _ = unsafe { driver::cuUserObjectRelease(object, 1) };
        return Err(e);
    }
    Ok(())
}

/// How many captures started by this crate are running (in any thread). While none is, stream
/// operations skip the capture query entirely.
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn capture_started() {
    CAPTURES.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn capture_ended() {
    CAPTURES.fetch_sub(1, Ordering::SeqCst);
}

/// A stream's capture: the graph it records into and the nodes the next operation will depend on.
pub(crate) struct CaptureInfo {
    pub(crate) graph: driver::CUgraph,
    pub(crate) dependencies: Vec<driver::CUgraphNode>,
}

/// The capture in progress on `stream`, if any.
pub(crate) fn capture_info(stream: driver::CUstream) -> Result<Option<CaptureInfo>> {
    let mut status = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph: driver::CUgraph = std::ptr::null_mut();
    let mut deps: *const driver::CUgraphNode = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: out-pointers to locals; the dependency array is copied before any other call on
    // the stream.
    unsafe {
        driver::cuStreamGetCaptureInfo(
            stream,
            &mut status,
            std::ptr::null_mut(),
            &mut graph,
            &mut deps,
            std::ptr::null_mut(),
            &mut n,
        )
    }
    .check("cuStreamGetCaptureInfo")?;
    match status {
        driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => {
            let dependencies = if n == 0 || deps.is_null() {
                Vec::new()
            } else {
                // SAFETY: the driver returned n valid entries.
                unsafe { std::slice::from_raw_parts(deps, n) }.to_vec()
            };
            Ok(Some(CaptureInfo { graph, dependencies }))
        }
        driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => Err(CudaError::InvalidArgument(
            "the stream's capture was invalidated by an earlier error: end it (end_building) and start again".into(),
        )),
        _ => Ok(None),
    }
}

/// The graph `stream` is being captured into, when a capture this crate started is running
/// (a single atomic load otherwise).
#[inline]
pub(crate) fn capture_target(stream: &Stream) -> Result<Option<driver::CUgraph>> {
    if CAPTURES.load(Ordering::SeqCst) == 0 {
        return Ok(None);
    }
    Ok(capture_info(stream.handle())?.map(|c| c.graph))
}
