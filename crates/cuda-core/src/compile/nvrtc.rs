//! One NVRTC program and one compile of it: name expressions, the compile, the log, the output
//! and the lowered names; and what NVRTC says of a precompiled header it was asked to make
//! (with the heap-size question the automatic retry of [`Program`](super::Program) needs).

use super::ffi::read_log;
use super::object_code::CodeType;
use super::program::PchStatus;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::nvrtc;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};

/// NVRTC's precompiled-header heap is process-wide, and resizing it frees the old one: compiles
/// that may use it (any precompiled-header option) hold this shared, a resize holds it
/// exclusively, so no compile of this crate runs on a heap being replaced.
static PCH_HEAP: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held across a compile that may use the precompiled-header heap.
pub(super) fn pch_heap_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    PCH_HEAP.read().unwrap_or_else(|p| p.into_inner())
}

/// What a compile makes: the code, and the lowered name of each name expression.
pub(super) type Compiled = (Vec<u8>, HashMap<String, String>);

/// An `nvrtcProgram`, destroyed on drop.
pub(super) struct NvrtcProgram(pub(super) nvrtc::nvrtcProgram);

// SAFETY: an NVRTC program is not tied to the thread that made it; every call on it is made
// through `&mut` of its owner (`Program`, whose compile takes `&mut self`), and `&` only reads
// the handle's value.
unsafe impl Send for NvrtcProgram {}

impl NvrtcProgram {
    pub(super) fn create(source: &CStr, name: &CStr) -> Result<NvrtcProgram> {
        let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: both strings are NUL-terminated and live for the call; no headers are given.
        unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        }
        .check("nvrtcCreateProgram")?;
        Ok(NvrtcProgram(prog))
    }

    /// Adds the name expressions, compiles with `flags`, and reads the log; then the output for
    /// `target` and the lowered names. The log comes back whether or not the compile worked;
    /// a failed compile is `Err` with NVRTC's status.
    pub(super) fn compile(
        &mut self,
        flags: &[CString],
        exprs: &[(&str, CString)],
        target: CodeType,
    ) -> (String, Result<Compiled>) {
        let flag_ptrs: Vec<*const c_char> = flags.iter().map(|c| c.as_ptr()).collect();
        let p = self.0;
        let mut log = String::new();
        // SAFETY: (whole block) `p` is live until `self` drops; every pointer passed is a live
        // NUL-terminated string (the flags and expressions outlive the block) or a buffer of the
        // size NVRTC reported.
        let result = unsafe {
            (|| {
                for (_, e) in exprs {
                    nvrtc::nvrtcAddNameExpression(p, e.as_ptr()).check("nvrtcAddNameExpression")?;
                }
                let count = i32::try_from(flag_ptrs.len())
                    .map_err(|_| CudaError::InvalidArgument("Program: too many NVRTC options".into()))?;
                let status = nvrtc::nvrtcCompileProgram(p, count, flag_ptrs.as_ptr());
                let mut log_size = 0usize;
                nvrtc::nvrtcGetProgramLogSize(p, &mut log_size).check("nvrtcGetProgramLogSize")?;
                log = read_log(log_size, |l| {
                    nvrtc::nvrtcGetProgramLog(p, l).check("nvrtcGetProgramLog")
                })?;
                status.check("nvrtcCompileProgram")?;
                let mut size = 0usize;
                let mut code;
                match target {
                    CodeType::Ptx => {
                        nvrtc::nvrtcGetPTXSize(p, &mut size).check("nvrtcGetPTXSize")?;
                        code = vec![0u8; size];
                        nvrtc::nvrtcGetPTX(p, code.as_mut_ptr().cast()).check("nvrtcGetPTX")?;
                    }
                    CodeType::Cubin => {
                        nvrtc::nvrtcGetCUBINSize(p, &mut size).check("nvrtcGetCUBINSize")?;
                        code = vec![0u8; size];
                        nvrtc::nvrtcGetCUBIN(p, code.as_mut_ptr().cast()).check("nvrtcGetCUBIN")?;
                    }
                    _ => {
                        nvrtc::nvrtcGetLTOIRSize(p, &mut size).check("nvrtcGetLTOIRSize")?;
                        code = vec![0u8; size];
                        nvrtc::nvrtcGetLTOIR(p, code.as_mut_ptr().cast()).check("nvrtcGetLTOIR")?;
                    }
                }
                let mut mapping = HashMap::new();
                for (e, c) in exprs {
                    let mut lowered: *const c_char = std::ptr::null();
                    nvrtc::nvrtcGetLoweredName(p, c.as_ptr(), &mut lowered).check("nvrtcGetLoweredName")?;
                    if !lowered.is_null() {
                        mapping.insert(e.to_string(), CStr::from_ptr(lowered).to_string_lossy().into_owned());
                    }
                }
                Ok((code, mapping))
            })()
        };
        (log, result)
    }

    /// What NVRTC says of the precompiled header this compile was asked to make; `None` when
    /// its heap was too small (the caller retries with a larger one).
    pub(super) fn pch_status(&self) -> Option<PchStatus> {
        // SAFETY: the program is live.
        let s = unsafe { nvrtc::nvrtcGetPCHCreateStatus(self.0) };
        if s == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            Some(PchStatus::Created)
        } else if s == nvrtc::nvrtcResult::NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED {
            None
        } else if s == nvrtc::nvrtcResult::NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED {
            Some(PchStatus::NotAttempted)
        } else {
            Some(PchStatus::Failed)
        }
    }

    /// Sets NVRTC's (process-wide) precompiled-header heap to the size this program's header
    /// needed (`nvrtcGetPCHHeapSizeRequired`, `nvrtcSetPCHHeapSize`), as `cuda.core` does before
    /// its retry. The heap only grows here: a size another thread set that is larger stays. The
    /// caller holds no [`pch_heap_shared`] guard (this takes the lock exclusively).
    pub(super) fn grow_pch_heap(&self) -> Result<()> {
        let _exclusive = PCH_HEAP.write().unwrap_or_else(|p| p.into_inner());
        let (mut required, mut current) = (0usize, 0usize);
        // SAFETY: the program is live; out-pointers to locals.
        unsafe {
            nvrtc::nvrtcGetPCHHeapSizeRequired(self.0, &mut required).check("nvrtcGetPCHHeapSizeRequired")?;
            nvrtc::nvrtcGetPCHHeapSize(&mut current).check("nvrtcGetPCHHeapSize")?;
        }
        if required > current {
            // SAFETY: takes a size only; NVRTC frees and reallocates its heap, which no compile
            // of this crate is using (they hold PCH_HEAP shared; this holds it exclusively).
            unsafe { nvrtc::nvrtcSetPCHHeapSize(required) }.check("nvrtcSetPCHHeapSize")?;
        }
        Ok(())
    }
}

impl Drop for NvrtcProgram {
    fn drop(&mut self) {
        // SAFETY: made by nvrtcCreateProgram, destroyed once.
        if let Err(e) = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) }.check("nvrtcDestroyProgram") {
            crate::error::record_drop_error(e);
        }
    }
}
