//! The driver's linker (`cuLink*`), the fallback when nvJitLink is missing: its state and the
//! buffers the driver writes through for as long as the state lives.

use super::{Handle, LinkerOptions, LOG_SIZE};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;

/// The buffers `cuLinkCreate` is given pointers to: the info and error logs, which the driver
/// writes during each `cuLinkAddData`/`cuLinkAddFile`/`cuLinkComplete`, and the option arrays
/// (it writes the amount of log filled back into `values`). The driver holds on to these pointers
/// for the life of the state, so the buffers are owned as raw pointers from [`Box::into_raw`]:
/// never moved or reborrowed as `Box`es (which would assert uniqueness and invalidate the
/// driver's pointers), read only between driver calls, and freed only after `cuLinkDestroy`.
pub(super) struct DriverBuffers {
    pub(super) info: *mut [u8],
    pub(super) error: *mut [u8],
    pub(super) keys: *mut [driver::CUjit_option],
    pub(super) values: *mut [*mut c_void],
    /// Set when the state could not be destroyed: the driver may still hold the pointers, so the
    /// buffers are leaked rather than freed.
    pub(super) leak: bool,
}

impl DriverBuffers {
    /// Log buffers of [`LOG_SIZE`] bytes and the option arrays: the four log options first, then
    /// `options`.
    fn new(options: &[(driver::CUjit_option, *mut c_void)]) -> DriverBuffers {
        let info = Box::into_raw(vec![0u8; LOG_SIZE].into_boxed_slice());
        let error = Box::into_raw(vec![0u8; LOG_SIZE].into_boxed_slice());
        let mut keys = vec![
            driver::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
            driver::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            driver::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            driver::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The log pointers are derived from the raw pointers of the whole allocations.
        let mut values: Vec<*mut c_void> = vec![
            info.cast(),
            std::ptr::without_provenance_mut(LOG_SIZE),
            error.cast(),
            std::ptr::without_provenance_mut(LOG_SIZE),
        ];
        for (key, value) in options {
            keys.push(*key);
            values.push(*value);
        }
        DriverBuffers {
            info,
            error,
            keys: Box::into_raw(keys.into_boxed_slice()),
            values: Box::into_raw(values.into_boxed_slice()),
            leak: false,
        }
    }

    /// The text in a log buffer, up to its first NUL.
    ///
    /// # Safety
    ///
    /// `log` is the `info` or `error` pointer of a live `DriverBuffers`, and no driver call on the
    /// state given these buffers is running (the caller holds the `Linker` by `&mut`, and every
    /// call on the state is made through `&mut Linker` and returns before the next one).
    pub(super) unsafe fn text(log: *mut [u8]) -> String {
        // SAFETY: by the caller's contract the allocation is live (freed only in Drop) and nobody
        // writes it while this shared slice exists; it ends before the next driver call.
        let bytes: &[u8] = unsafe { &*std::ptr::slice_from_raw_parts(log.cast::<u8>().cast_const(), log.len()) };
        let end = bytes.iter().position(|c| *c == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }
}

impl Drop for DriverBuffers {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: each pointer came from Box::into_raw in `new` and is freed once, here. The
        // state that used them was destroyed before (Linker::drop runs before its fields drop),
        // or never made (cuLinkCreate failed, or was not called), so the driver no longer uses
        // them.
        unsafe {
            drop(Box::from_raw(self.info));
            drop(Box::from_raw(self.error));
            drop(Box::from_raw(self.keys));
            drop(Box::from_raw(self.values));
        }
    }
}

pub(super) fn driver_create(options: &LinkerOptions) -> Result<Handle> {
    let mut extra: Vec<(driver::CUjit_option, *mut c_void)> = Vec::new();
    if let Some(arch) = &options.arch {
        let digits: usize = arch
            .trim_start_matches("sm_")
            .trim_end_matches(['a', 'f'])
            .parse()
            .unwrap_or(0);
        extra.push((
            driver::CUjit_option::CU_JIT_TARGET,
            std::ptr::without_provenance_mut(digits),
        ));
    }
    if let Some(n) = options.max_register_count {
        extra.push((
            driver::CUjit_option::CU_JIT_MAX_REGISTERS,
            std::ptr::without_provenance_mut(n as usize),
        ));
    }
    if options.verbose == Some(true) {
        extra.push((
            driver::CUjit_option::CU_JIT_LOG_VERBOSE,
            std::ptr::without_provenance_mut(1),
        ));
    }
    if let Some(o) = options.optimization_level {
        extra.push((
            driver::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL,
            std::ptr::without_provenance_mut(o as usize),
        ));
    }
    if options.debug == Some(true) {
        extra.push((
            driver::CUjit_option::CU_JIT_GENERATE_DEBUG_INFO,
            std::ptr::without_provenance_mut(1),
        ));
    }
    if options.lineinfo == Some(true) {
        extra.push((
            driver::CUjit_option::CU_JIT_GENERATE_LINE_INFO,
            std::ptr::without_provenance_mut(1),
        ));
    }
    if options.no_cache == Some(true) {
        extra.push((
            driver::CUjit_option::CU_JIT_CACHE_MODE,
            std::ptr::without_provenance_mut(driver::CUjit_cacheMode::CU_JIT_CACHE_OPTION_NONE.0 as usize),
        ));
    }
    let mut ctx: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    unsafe { driver::cuCtxGetCurrent(&mut ctx) }.check("cuCtxGetCurrent")?;
    if ctx.is_null() {
        return Err(CudaError::InvalidState(
            "Linker: the driver's linker needs a current CUDA context; make a device current first".into(),
        ));
    }
    // Dropped (freed) on the error path below; otherwise owned by the Handle until Linker::drop
    // has destroyed the state.
    let buffers = DriverBuffers::new(&extra);
    let mut state: driver::CUlinkState = std::ptr::null_mut();
    // SAFETY: `keys` and `values` are two live arrays of the same length (`values.len()` options);
    // the pointers are the raw ones from Box::into_raw, which stay valid while the allocations
    // live (moving `buffers` moves only the pointers). The driver holds on to both arrays and to
    // the log buffers until the state is destroyed: `buffers` goes into the Handle and is freed
    // only after Linker::drop has destroyed the state (or right here if no state was made).
    unsafe {
        driver::cuLinkCreate(
            buffers.values.len() as u32,
            buffers.keys.cast(),
            buffers.values.cast(),
            &mut state,
        )
    }
    .check("cuLinkCreate")?;
    Ok(Handle::Driver { state, buffers })
}
