//! Green contexts: [`ContextOptions`] and [`Device::create_context`], which makes a [`Context`]
//! that runs only on the SMs (and workqueues) it is given, and the streams of such a context.
//!
//! The path is `cuda.core`'s: `cuDevResourceGenerateDesc` over the resources, `cuGreenCtxCreate`
//! (with its default stream), then `cuCtxFromGreenCtx` for the `CUcontext` every other call takes.
//! The `Context` owns the green context and destroys it (`cuGreenCtxDestroy`) with its last
//! holder: its streams, events and buffers' streams hold it, as for any context.

use super::resources::SMResource;
use super::workqueue::WorkqueueResource;
use super::{Context, Device};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// A resource a green context is made from.
#[derive(Debug, Clone)]
pub enum ContextResource {
    /// SMs: a group of [`SMResource::split`] (or its remainder, or a whole device's SMs).
    Sm(SMResource),
    /// Workqueues, as [`WorkqueueResource::configure`] set them (CUDA 13.1).
    Workqueue(WorkqueueResource),
}

impl From<SMResource> for ContextResource {
    fn from(sm: SMResource) -> Self {
        ContextResource::Sm(sm)
    }
}

impl From<WorkqueueResource> for ContextResource {
    fn from(wq: WorkqueueResource) -> Self {
        ContextResource::Workqueue(wq)
    }
}

/// What [`Device::create_context`] makes a green context from (`cuda.core`'s `ContextOptions`).
///
/// `resources` lists SM groups (several only when they come from one split and share their
/// co-scheduling alignment: the driver's rule) and at most one workqueue resource. Not
/// serialisable: resources are the driver's descriptions of one device in one process.
///
/// ```no_run
/// use cuda_core::{ContextOptions, Device, SMResourceOptions};
/// let device = Device::new(0)?;
/// let sm = device.resources().sm()?;
/// let (groups, _rest) = sm.split(&SMResourceOptions::with_counts([16, 16]), false)?;
/// let green = device.create_context(ContextOptions::new([groups[0].clone()]))?;
/// assert_eq!(green.resources().sm()?.sm_count(), groups[0].sm_count());
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// The resources of the green context; at least one.
    pub resources: Vec<ContextResource>,
}

impl ContextOptions {
    /// Options with these resources (SM groups, a workqueue resource).
    pub fn new<R: Into<ContextResource>>(resources: impl IntoIterator<Item = R>) -> ContextOptions {
        ContextOptions {
            resources: resources.into_iter().map(Into::into).collect(),
        }
    }
}

impl Device {
    /// A green context on this device (`cuda.core`'s `Device.create_context`): a [`Context`] that
    /// runs its work only on the resources of `options` (SM groups from
    /// [`SMResource::split`], a [`WorkqueueResource`]). It is not made current; give it work
    /// through its streams ([`Context::create_stream`], non-blocking only) or make it current
    /// with [`Context::set_current`]. It is destroyed with its last holder ([`Context::close`]
    /// lets go of it explicitly).
    ///
    /// One thread at a time: a green context "can be current to only one thread at a time"
    /// (CUDA 12.4's `cuGreenCtxCreate`; the driver does not synchronise threads sharing one), so
    /// this crate makes it current on at most one thread at a time. Making it current on a thread
    /// ([`Context::set_current`], [`Context::push`], [`Context::with_current`]) while it is
    /// current on another through `set_current` or `push` is an error; brief uses
    /// (`with_current`) wait for each other. Its streams are made without making it current, and
    /// work on them (kernels, copies, waiting for events, ordering one stream after another)
    /// needs no current context, from any thread. What does make it current briefly (creating
    /// an event in it, freeing a buffer whose deallocation stream is one of its streams, its
    /// synchronisation) fails while it is current on another thread through `set_current` or
    /// `push`, except the free, which then waits on the release thread.
    ///
    /// Errors, before the driver is asked: no resources (`"resources must be provided"`), a
    /// group of a dry run, a resource with no SMs (an empty remainder), a resource of another
    /// device, more than one workqueue resource, a call from a host function or graph callback.
    /// The driver refuses SM groups of different splits or alignments
    /// (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`). Needs a CUDA 12.4 driver.
    pub fn create_context(&self, options: ContextOptions) -> Result<Context> {
        crate::reaper::refuse_in_callback()?;
        if options.resources.is_empty() {
            return Err(CudaError::InvalidArgument(
                "resources must be provided: ContextOptions::resources lists the SM groups (from \
                 Device::resources().sm()?.split(..)) and at most one workqueue resource of the green context"
                    .into(),
            ));
        }
        let mut raw = Vec::with_capacity(options.resources.len());
        let mut origins: Vec<Context> = Vec::new();
        let mut workqueues = 0;
        for resource in &options.resources {
            let (device, (r, origin)) = match resource {
                ContextResource::Sm(sm) => (sm.device(), sm.for_descriptor()?),
                ContextResource::Workqueue(wq) => {
                    workqueues += 1;
                    (wq.device(), wq.for_descriptor())
                }
            };
            if device != *self {
                return Err(CudaError::InvalidArgument(format!(
                    "create_context on {self:?}: a resource of {device:?} was given; take the resources from \
                     this device's resources()"
                )));
            }
            raw.push(r);
            if let Some(o) = origin {
                if !origins.contains(&o) {
                    origins.push(o);
                }
            }
        }
        if workqueues > 1 {
            return Err(CudaError::InvalidArgument(format!(
                "create_context: {workqueues} workqueue resources were given; a green context takes at most one"
            )));
        }
        let count = u32::try_from(raw.len())
            .map_err(|_| CudaError::InvalidArgument(format!("create_context: {} resources are too many", raw.len())))?;
        // The driver advises making the primary context first (green contexts retain it).
        self.primary_context()?;
        let mut desc: driver::CUdevResourceDesc = std::ptr::null_mut();
        // SAFETY: `raw` holds `count` resources the driver wrote (their links to further
        // resources cleared); out-pointer to a local. The descriptor lives as long as the process.
        unsafe { driver::cuDevResourceGenerateDesc(&mut desc, raw.as_mut_ptr(), count) }
            .check("cuDevResourceGenerateDesc")?;
        let mut green: driver::CUgreenCtx = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the descriptor was just made for this device.
        unsafe {
            driver::cuGreenCtxCreate(
                &mut green,
                desc,
                self.handle(),
                driver::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM.0,
            )
        }
        .check("cuGreenCtxCreate")?;
        let mut handle: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the green context was just made and no other thread
        // knows it yet.
        if let Err(e) = unsafe { driver::cuCtxFromGreenCtx(&mut handle, green) }.check("cuCtxFromGreenCtx") {
            // SAFETY: made above, used by nothing else, destroyed once.
            let _ = unsafe { driver::cuGreenCtxDestroy(green) };
            return Err(e);
        }
        Ok(Context::wrap_green(handle, *self, green, origins))
    }
}

impl Context {
    /// A stream of this green context (`cuGreenCtxStreamCreate`), for [`Context::create_stream`].
    /// The driver makes non-blocking streams only: a blocking one is refused with `cuda.core`'s
    /// message. An error for a context that is not green.
    pub(crate) fn create_green_stream(&self, nonblocking: bool, priority: i32) -> Result<driver::CUstream> {
        let green = self.green().ok_or_else(|| {
            CudaError::InvalidArgument(format!(
                "{self:?} is not a green context: make its streams with cuStreamCreate"
            ))
        })?;
        if !nonblocking {
            return Err(CudaError::InvalidArgument(
                "Green context streams must be non-blocking (the driver makes them with CU_STREAM_NON_BLOCKING \
                 only): use StreamOptions { nonblocking: true, .. }"
                    .into(),
            ));
        }
        crate::reaper::refuse_in_callback()?;
        let _one_thread = green.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut stream: driver::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the green context lives while `self` does, and the lock
        // lets one thread at a time use its handle. The flag is the one the driver requires.
        unsafe {
            driver::cuGreenCtxStreamCreate(
                &mut stream,
                green.handle,
                driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0,
                priority,
            )
        }
        .check("cuGreenCtxStreamCreate")?;
        Ok(stream)
    }
}
