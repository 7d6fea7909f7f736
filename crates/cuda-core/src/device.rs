//! `Device` and its primary `Context`.

use crate::error::Check;
use crate::stream::{Event, EventOptions, Stream, StreamOptions};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::cell::RefCell;
use std::ffi::CStr;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

fn init() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), CudaError>> = OnceLock::new();
    // SAFETY: cuInit takes flags only and may be called from any thread.
    INIT.get_or_init(|| unsafe { driver::cuInit(0) }.check("cuInit"))
        .clone()
}

/// The number of CUDA devices (`cuDeviceGetCount`).
pub fn device_count() -> Result<usize> {
    init()?;
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    unsafe { driver::cuDeviceGetCount(&mut n) }.check("cuDeviceGetCount")?;
    Ok(n.max(0) as usize)
}

/// A compute capability, comparable as a `(major, minor)` pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A CUDA device. Cheap to copy, `Send + Sync`.
///
/// ```no_run
/// let device = cuda_core::Device::new(0)?;
/// device.set_current()?;
/// println!("{} ({})", device.name()?, device.compute_capability()?);
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: i32,
    handle: driver::CUdevice,
}

/// The limits a launch is checked against, read once per device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    pub max_shared_optin: u32,
    pub cooperative: bool,
    pub clusters: bool,
}

struct DeviceState {
    primary: OnceLock<Result<Context>>,
    limits: OnceLock<Result<Limits>>,
}

fn states() -> Result<&'static [DeviceState]> {
    static STATES: OnceLock<std::result::Result<Vec<DeviceState>, CudaError>> = OnceLock::new();
    STATES
        .get_or_init(|| {
            let n = device_count()?;
            Ok((0..n)
                .map(|_| DeviceState {
                    primary: OnceLock::new(),
                    limits: OnceLock::new(),
                })
                .collect())
        })
        .as_deref()
        .map_err(Clone::clone)
}

impl Device {
    /// Device `ordinal`; an error when there is no such device.
    pub fn new(ordinal: usize) -> Result<Device> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::InvalidArgument(format!(
                "device_id must be within [0, {count}), got {ordinal}"
            )));
        }
        let mut handle = 0;
        // SAFETY: out-pointer to a local; the ordinal is in range.
        unsafe { driver::cuDeviceGet(&mut handle, ordinal as i32) }.check("cuDeviceGet")?;
        Ok(Device {
            ordinal: ordinal as i32,
            handle,
        })
    }

    /// The device of the current context, or device 0 when no context is current.
    pub fn current() -> Result<Device> {
        init()?;
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        if unsafe { driver::cuCtxGetDevice(&mut dev) }.result().is_ok() {
            let count = device_count()?;
            for i in 0..count {
                let d = Device::new(i)?;
                if d.handle == dev {
                    return Ok(d);
                }
            }
        }
        Device::new(0)
    }

    /// Every device.
    pub fn all() -> Result<Vec<Device>> {
        (0..device_count()?).map(Device::new).collect()
    }

    /// The ordinal.
    pub fn device_id(&self) -> usize {
        self.ordinal as usize
    }

    /// The `CUdevice`.
    pub fn handle(&self) -> driver::CUdevice {
        self.handle
    }

    /// Makes the device's primary context current on this thread (retaining it once per process)
    /// and returns it.
    pub fn set_current(&self) -> Result<Context> {
        let ctx = self.primary_context()?;
        ctx.set_current()?;
        Ok(ctx)
    }

    /// The device's primary context, retained for the life of the process.
    pub fn primary_context(&self) -> Result<Context> {
        let state = &states()?[self.ordinal as usize];
        state
            .primary
            .get_or_init(|| {
                let mut ctx: driver::CUcontext = std::ptr::null_mut();
                // SAFETY: out-pointer to a local; the reference is never released (the context
                // lives as long as the process, as every object made in it may).
                unsafe { driver::cuDevicePrimaryCtxRetain(&mut ctx, self.handle) }.check("cuDevicePrimaryCtxRetain")?;
                Ok(Context::wrap(ctx, *self, false))
            })
            .clone()
    }

    pub(crate) fn limits(&self) -> Result<&'static Limits> {
        let state = &states()?[self.ordinal as usize];
        state
            .limits
            .get_or_init(|| {
                use driver::CUdevice_attribute as A;
                let a = |attr| self.attribute(attr).map(|v| v.max(0) as u32);
                Ok(Limits {
                    max_threads_per_block: a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                    max_block: [
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
                    ],
                    max_grid: [
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                        a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
                    ],
                    max_shared_optin: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
                    cooperative: a(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
                    clusters: a(A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)? != 0,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Any device attribute (`cuDeviceGetAttribute`).
    pub fn attribute(&self, attribute: driver::CUdevice_attribute) -> Result<i32> {
        let mut v = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetAttribute(&mut v, attribute, self.handle) }.check("cuDeviceGetAttribute")?;
        Ok(v)
    }

    /// The marketing name (`"NVIDIA H200"`).
    pub fn name(&self) -> Result<String> {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer's length is passed.
        unsafe { driver::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as i32, self.handle) }
            .check("cuDeviceGetName")?;
        Ok(CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The UUID, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid(&self) -> Result<String> {
        let mut uuid = driver::CUuuid::default();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetUuid(&mut uuid, self.handle) }.check("cuDeviceGetUuid")?;
        let b: Vec<String> = uuid.bytes.iter().map(|c| format!("{:02x}", *c as u8)).collect();
        Ok(format!(
            "{}-{}-{}-{}-{}",
            b[..4].concat(),
            b[4..6].concat(),
            b[6..8].concat(),
            b[8..10].concat(),
            b[10..].concat()
        ))
    }

    /// The PCI bus id, `0000:01:00.0`.
    pub fn pci_bus_id(&self) -> Result<String> {
        let mut buf = [0u8; 32];
        // SAFETY: the buffer's length is passed.
        unsafe { driver::cuDeviceGetPCIBusId(buf.as_mut_ptr().cast(), buf.len() as i32, self.handle) }
            .check("cuDeviceGetPCIBusId")?;
        Ok(CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The compute capability.
    pub fn compute_capability(&self) -> Result<ComputeCapability> {
        use driver::CUdevice_attribute as A;
        Ok(ComputeCapability {
            major: self.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            minor: self.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        })
    }

    /// The architecture as `cuda.core` writes it: `"90"` for compute capability 9.0.
    pub fn arch(&self) -> Result<String> {
        let cc = self.compute_capability()?;
        Ok(format!("{}{}", cc.major, cc.minor))
    }

    /// Total memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceTotalMem(&mut bytes, self.handle) }.check("cuDeviceTotalMem")?;
        Ok(bytes)
    }

    /// Free memory in bytes (`cuMemGetInfo` in the device's primary context).
    pub fn free_memory(&self) -> Result<usize> {
        let ctx = self.primary_context()?;
        ctx.with_current(|| {
            let (mut free, mut total) = (0, 0);
            // SAFETY: out-pointers to locals; the device's context is current.
            unsafe { driver::cuMemGetInfo(&mut free, &mut total) }.check("cuMemGetInfo")?;
            Ok(free)
        })
    }

    /// The number of streaming multiprocessors.
    pub fn multiprocessor_count(&self) -> Result<u32> {
        self.attribute(driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|v| v as u32)
    }

    /// Whether this device can access `peer`'s memory.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if peer == self {
            return Ok(true);
        }
        let mut can = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceCanAccessPeer(&mut can, self.handle, peer.handle) }.check("cuDeviceCanAccessPeer")?;
        Ok(can != 0)
    }

    /// Lets this device's primary context access `peer`'s memory (`cuCtxEnablePeerAccess`).
    /// Enabling it twice is not an error.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        if peer == self {
            return Err(CudaError::InvalidArgument(
                "a device always accesses its own memory".into(),
            ));
        }
        let peer_ctx = peer.primary_context()?;
        self.primary_context()?.with_current(|| {
            // SAFETY: both contexts are retained; flags must be 0.
            let status = unsafe { driver::cuCtxEnablePeerAccess(peer_ctx.handle(), 0) };
            if status == driver::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                return Ok(());
            }
            status.check("cuCtxEnablePeerAccess")
        })
    }

    /// Waits for all work on the device's primary context.
    pub fn sync(&self) -> Result<()> {
        self.primary_context()?.synchronize()
    }

    /// A new stream in the device's primary context.
    pub fn create_stream(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(&self.primary_context()?, options)
    }

    /// A new event in the device's primary context.
    pub fn create_event(&self, options: EventOptions) -> Result<Event> {
        Event::new(&self.primary_context()?, options)
    }
}

/// Every `CU_DEVICE_ATTRIBUTE_*` of a device as a method named after it
/// (`max_threads_per_block()`, `multiprocessor_count()`, ...), generated from the driver header,
/// plus [`DeviceProperties::ALL`] to list them. Each call asks the driver (`cuDeviceGetAttribute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProperties {
    device: Device,
}

impl DeviceProperties {
    /// The value of any attribute.
    pub fn get(&self, attribute: driver::CUdevice_attribute) -> Result<i32> {
        self.device.attribute(attribute)
    }

    /// Every attribute this driver reports, by property name (attributes newer than the driver
    /// are left out).
    pub fn all(&self) -> Vec<(&'static str, i32)> {
        DeviceProperties::ALL
            .iter()
            .filter_map(|(name, a)| Some((*name, self.get(*a).ok()?)))
            .collect()
    }
}

impl Device {
    /// The device's attributes as typed properties.
    pub fn properties(&self) -> DeviceProperties {
        DeviceProperties { device: *self }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.ordinal)
    }
}

struct ContextInner {
    handle: driver::CUcontext,
    device: Device,
    /// Made by `Context::create` (destroyed on drop) rather than a retained primary context.
    owned: bool,
    /// Timing-free events made in this context, lent out to order one stream after another
    /// (see [`Context::fence`]).
    fences: Mutex<Vec<driver::CUevent>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if crate::reaper::in_callback() {
            // On a driver thread: released on the release thread instead.
            let later = ContextInner {
                handle: self.handle,
                device: self.device,
                owned: self.owned,
                fences: Mutex::new(std::mem::take(self.fences.get_mut().unwrap_or_else(|p| p.into_inner()))),
            };
            self.owned = false;
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        let fences = std::mem::take(self.fences.get_mut().unwrap_or_else(|p| p.into_inner()));
        for event in fences {
            // SAFETY: made by cuEventCreate in this context, idle in the pool, destroyed once.
            if let Err(e) = unsafe { driver::cuEventDestroy(event) }.check("cuEventDestroy") {
                crate::error::record_drop_error(e);
            }
        }
        if self.owned {
            // SAFETY: made by cuCtxCreate and destroyed once; objects made in it hold this Arc, and
            // every thread it was made current on by this crate holds it too (see `CURRENT`), so
            // neither outlives it.
            if let Err(e) = unsafe { driver::cuCtxDestroy(self.handle) }.check("cuCtxDestroy") {
                crate::error::record_drop_error(e);
            }
        }
    }
}

bitflags::bitflags! {
    /// Creation flags of an explicit [`Context`] (`CU_CTX_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ContextFlags: u32 {
        /// Spin while waiting for results (lowest latency, busiest CPU).
        const SCHED_SPIN = 0x01;
        /// Yield the thread while waiting.
        const SCHED_YIELD = 0x02;
        /// Block the thread on a synchronisation primitive while waiting.
        const SCHED_BLOCKING_SYNC = 0x04;
        /// Allow mapped pinned host memory (always on since CUDA 3.2; kept for completeness).
        const MAP_HOST = 0x08;
        /// Keep local memory at its high-water mark after kernels that resized it.
        const LMEM_RESIZE_TO_MAX = 0x10;
        /// Write a core dump when a kernel raises an exception.
        const COREDUMP_ENABLE = 0x20;
        /// Allow user-triggered core dumps.
        const USER_COREDUMP_ENABLE = 0x40;
        /// Make synchronous memory operations synchronise.
        const SYNC_MEMOPS = 0x80;
    }
}

// SAFETY: a CUcontext and CUevents are process-wide handles the driver lets any thread use; the
// event pool is behind a mutex.
unsafe impl Send for ContextInner {}
// SAFETY: as above; shared access reads the handle or locks the pool.
unsafe impl Sync for ContextInner {}

/// A CUDA context: a device's primary context, or one made by [`Context::create`].
///
/// A context made current on a thread through this type ([`set_current`](Self::set_current),
/// [`push`](Self::push), [`Device::set_current`]) is held by that thread until another replaces
/// it there or the thread ends, so dropping every other clone cannot destroy a context some
/// thread still uses.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

/// The contexts this crate made current on the calling thread, as the driver's stack holds them
/// (the top is the current one). Holding them keeps a created context alive while current here.
struct CurrentStack(RefCell<Vec<Context>>);

impl Drop for CurrentStack {
    fn drop(&mut self) {
        // The thread is ending. Primary contexts are never destroyed: let go of them here. A
        // created context may be destroyed by its last reference: that happens on the release
        // thread (started when it was made current), not during the thread's teardown.
        let created: Vec<Context> = std::mem::take(self.0.get_mut())
            .into_iter()
            .filter(|c| c.inner.owned)
            .collect();
        if !created.is_empty() {
            crate::reaper::drop_later(Box::new(created));
        }
    }
}

thread_local! {
    static CURRENT: CurrentStack = const { CurrentStack(RefCell::new(Vec::new())) };
}

/// Takes the top of the calling thread's stack of held contexts off when it is `top`; dropped
/// after the stack is released (the drop may destroy a created context).
fn unhold_top(is_top: impl Fn(&Context) -> bool) {
    let popped = CURRENT
        .try_with(|c| {
            let mut stack = c.0.borrow_mut();
            match stack.last() {
                Some(top) if is_top(top) => stack.pop(),
                _ => None,
            }
        })
        .ok()
        .flatten();
    drop(popped);
}

/// An event of a context's fence pool, given back on drop.
pub(crate) struct FenceEvent {
    context: Context,
    event: driver::CUevent,
}

// SAFETY: a CUevent may be used from any thread; the context holds the pool behind a mutex.
unsafe impl Send for FenceEvent {}
// SAFETY: as above; shared access reads the handle.
unsafe impl Sync for FenceEvent {}

impl FenceEvent {
    pub(crate) fn handle(&self) -> driver::CUevent {
        self.event
    }
}

impl Drop for FenceEvent {
    fn drop(&mut self) {
        // A recorded event may be recorded again at once: waits already queued keep what it
        // captured when they were queued.
        self.context
            .inner
            .fences
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.event);
    }
}

impl Context {
    fn wrap(handle: driver::CUcontext, device: Device, owned: bool) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                handle,
                device,
                owned,
                fences: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A timing-free event of this context, for ordering one stream after another: record it on
    /// one, make the other wait for it. It goes back to the context's pool when dropped.
    pub(crate) fn fence(&self) -> Result<FenceEvent> {
        let pooled = self.inner.fences.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let event = match pooled {
            Some(e) => e,
            None => self.with_current(|| {
                let mut e: driver::CUevent = std::ptr::null_mut();
                // SAFETY: the context is current; out-pointer to a local.
                unsafe { driver::cuEventCreate(&mut e, driver::CUevent_flags::CU_EVENT_DISABLE_TIMING.0) }
                    .check("cuEventCreate")?;
                Ok(e)
            })?,
        };
        Ok(FenceEvent {
            context: self.clone(),
            event,
        })
    }

    /// The calling thread's current context, if any: the one this crate made current, a primary
    /// context, or (made current by raw calls) a context this value does not keep alive.
    pub fn current() -> Result<Option<Context>> {
        let handle = Context::current_handle()?;
        if handle.is_null() {
            return Ok(None);
        }
        // SAFETY: the handle is the calling thread's current context, so it is live.
        unsafe { Context::from_raw(handle) }.map(Some)
    }

    /// The context `handle`: one a thread made current through this crate, a primary context,
    /// or else a wrapper that does not keep it alive.
    ///
    /// # Safety
    /// `handle` is a live context.
    pub(crate) unsafe fn from_raw(handle: driver::CUcontext) -> Result<Context> {
        let held = CURRENT
            .try_with(|c| {
                c.0.borrow()
                    .iter()
                    .rev()
                    .find(|ctx| ctx.inner.handle == handle)
                    .cloned()
            })
            .ok()
            .flatten();
        if let Some(ctx) = held {
            return Ok(ctx);
        }
        let mut dev = 0;
        // SAFETY: the caller vouches for the handle; it is current only for the query.
        unsafe {
            driver::cuCtxPushCurrent(handle).check("cuCtxPushCurrent")?;
            let got = driver::cuCtxGetDevice(&mut dev).check("cuCtxGetDevice");
            let mut popped: driver::CUcontext = std::ptr::null_mut();
            driver::cuCtxPopCurrent(&mut popped).check("cuCtxPopCurrent")?;
            got?;
        }
        let device = Device::all()?
            .into_iter()
            .find(|d| d.handle == dev)
            .ok_or_else(|| CudaError::InvalidArgument("the context's device is not listed".into()))?;
        let primary = device.primary_context()?;
        if primary.inner.handle == handle {
            return Ok(primary);
        }
        Ok(Context::wrap(handle, device, false))
    }

    /// The `CUcontext`.
    pub fn handle(&self) -> driver::CUcontext {
        self.inner.handle
    }

    /// The context's device.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// A new context on `device` with `flags`, separate from the primary context. The calling
    /// thread's current context is left as it was; make the new one current with
    /// [`set_current`](Self::set_current) or [`push`](Self::push). Destroyed when the last clone
    /// (and every object made in it) is gone.
    pub fn create(device: &Device, flags: ContextFlags) -> Result<Context> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; no creation parameters (affinity, CIG) are passed.
        unsafe { driver::cuCtxCreate(&mut ctx, std::ptr::null_mut(), flags.bits(), device.handle()) }
            .check("cuCtxCreate")?;
        let context = Context::wrap(ctx, *device, true);
        // cuCtxCreate pushed it: take it off again so the thread is as it was.
        let mut popped: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context just pushed is on top.
        unsafe { driver::cuCtxPopCurrent(&mut popped) }.check("cuCtxPopCurrent")?;
        Ok(context)
    }

    /// The handle of the calling thread's current context (null when there is none).
    pub fn current_handle() -> Result<driver::CUcontext> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxGetCurrent(&mut ctx) }.check("cuCtxGetCurrent")?;
        Ok(ctx)
    }

    /// Makes this context the calling thread's current one (replacing the top of its stack).
    /// The thread holds it until it is replaced or popped there, or the thread ends.
    pub fn set_current(&self) -> Result<()> {
        if self.inner.owned {
            crate::reaper::start();
        }
        // SAFETY: the context is live while self is; the thread holds it from here on.
        unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
        // (During the thread's teardown the stack is gone: nothing is held then.)
        let replaced = CURRENT
            .try_with(|c| {
                let mut stack = c.0.borrow_mut();
                let replaced = stack.pop();
                stack.push(self.clone());
                replaced
            })
            .ok()
            .flatten();
        drop(replaced);
        Ok(())
    }

    /// Pushes this context on the calling thread's context stack, making it current. The thread
    /// holds it until it is popped there, or the thread ends.
    pub fn push(&self) -> Result<()> {
        if self.inner.owned {
            crate::reaper::start();
        }
        // SAFETY: the context is live while self is; the thread holds it from here on.
        unsafe { driver::cuCtxPushCurrent(self.inner.handle) }.check("cuCtxPushCurrent")?;
        let _ = CURRENT.try_with(|c| c.0.borrow_mut().push(self.clone()));
        Ok(())
    }

    /// Pops the calling thread's current context off its stack and returns its handle.
    pub fn pop_current() -> Result<driver::CUcontext> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxPopCurrent(&mut ctx) }.check("cuCtxPopCurrent")?;
        unhold_top(|top| top.inner.handle == ctx);
        Ok(ctx)
    }

    /// The flags the context runs with.
    pub fn flags(&self) -> Result<ContextFlags> {
        self.with_current(|| {
            let mut flags = 0;
            // SAFETY: the context is current; out-pointer to a local.
            unsafe { driver::cuCtxGetFlags(&mut flags) }.check("cuCtxGetFlags")?;
            Ok(ContextFlags::from_bits_truncate(flags))
        })
    }

    /// The stream priorities the context allows, `(least, greatest)`: numerically lower is more
    /// urgent, so `greatest <= priority <= least`.
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        self.with_current(|| {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: the context is current; out-pointers to locals.
            unsafe { driver::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }
                .check("cuCtxGetStreamPriorityRange")?;
            Ok((least, greatest))
        })
    }

    /// Whether this is the device's primary context.
    pub fn is_primary(&self) -> bool {
        !self.inner.owned
    }

    /// A new stream in this context.
    pub fn create_stream(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(self, options)
    }

    /// A new event in this context.
    pub fn create_event(&self, options: EventOptions) -> Result<Event> {
        Event::new(self, options)
    }

    /// Waits for all work in the context.
    pub fn synchronize(&self) -> Result<()> {
        crate::stream::refuse_in_callback()?;
        self.with_current(|| {
            // SAFETY: the context is current for the call.
            unsafe { driver::cuCtxSynchronize() }.check("cuCtxSynchronize")
        })
    }

    /// Runs `f` with this context current, restoring the previous one afterwards (also when `f`
    /// fails). `f` should not change the current context itself.
    pub fn with_current<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut previous: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxGetCurrent(&mut previous) }.check("cuCtxGetCurrent")?;
        if previous == self.inner.handle {
            return f();
        }
        // Kept alive until it is current again (`f` might let go of every other reference).
        let _previous_held = if previous.is_null() {
            None
        } else {
            // SAFETY: it is the calling thread's current context, so it is live.
            unsafe { Context::from_raw(previous) }.ok()
        };
        // SAFETY: the context is live (self holds it); the previous one is restored below.
        unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
        // While current here, the thread's stack names it, so that what `f` hands on keeps this
        // context (see `Context::current`).
        let _ = CURRENT.try_with(|c| c.0.borrow_mut().push(self.clone()));
        let result = f();
        unhold_top(|top| Arc::ptr_eq(&top.inner, &self.inner));
        // SAFETY: restoring what was current before (live: held above, or made current by raw
        // calls whose caller keeps it alive).
        let restored = unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent");
        let value = result?;
        restored?;
        Ok(value)
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({:p}, {:?})", self.inner.handle, self.inner.device)
    }
}
