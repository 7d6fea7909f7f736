//! `Linker` and `LinkerOptions`: nvJitLink, with the driver's `cuLink*` as the fallback.

use crate::compile::ffi::read_log;
use crate::compile::object_code::{Code, CodeType, ObjectCode};
use crate::error::Check;
mod driver_linker;
mod options;

pub use options::{LinkerBackend, LinkerHandle, LinkerOptions};

use crate::compile::ffi::c_string;
use crate::{CudaError, Result};
use cuda_sys::{driver, nvjitlink};
use driver_linker::{driver_create, DriverBuffers};
use std::collections::HashMap;
use std::ffi::{c_void, CString};

enum Handle {
    NvJitLink(nvjitlink::nvJitLinkHandle),
    /// The driver keeps pointers to the log buffers and to the option arrays (it writes the
    /// amount of log written back into `values`), so all of them live as long as the state.
    Driver {
        state: driver::CUlinkState,
        buffers: DriverBuffers,
    },
}

/// Links object codes (cubin, PTX, LTO-IR, fatbin, object, library) into a cubin or PTX.
///
/// A linker may move to another thread, but is not shared between threads (the driver's link
/// state is not synchronised; every method takes `&mut self`):
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<cuda_core::Linker>();
/// ```
///
/// nvJitLink is used when it can be loaded (12.3 or newer, same major version as the driver when
/// there is one); otherwise the driver's linker, which needs a current context and cannot do LTO.
pub struct Linker {
    handle: Handle,
    options: LinkerOptions,
    name: String,
    info_log: String,
    error_log: String,
    /// Whether a PTX or cubin input was added (LTO-IR output needs LTO-IR inputs only).
    native_input: bool,
}

// SAFETY: the linker handles are used by one thread at a time (`&mut self` for every operation
// that calls a library or reads the driver's log buffers); neither library ties them to the thread
// that made them. The driver's buffers are heap allocations owned by the linker (not tied to a
// thread either) and written by the driver only during calls made through `&mut self`. `Linker`
// is deliberately not `Sync` (its raw pointers keep it so).
unsafe impl Send for Linker {}

const LOG_SIZE: usize = 1 << 22;

impl Linker {
    /// The backend a new linker would use.
    pub fn which_backend() -> LinkerBackend {
        static BACKEND: std::sync::OnceLock<LinkerBackend> = std::sync::OnceLock::new();
        let mut chosen = false;
        let backend = *BACKEND.get_or_init(|| {
            chosen = true;
            match nvjitlink_version() {
                Some((major, _)) if driver_major().is_none_or(|d| d == major) => LinkerBackend::NvJitLink,
                _ => LinkerBackend::Driver,
            }
        });
        // Reported once, after the choice (a subscriber that links must not re-enter it).
        if chosen && backend == LinkerBackend::Driver {
            // cuda.core's RuntimeWarning, once per process.
            crate::error::warn(crate::Warning::new(
                crate::WarningCategory::Runtime,
                format!(
                    "linking falls back to the driver's linker: nvJitLink is missing, or of another major version \
                     ({:?}) than the driver ({:?}); install the nvJitLink of the driver's CUDA major version for \
                     LTO-IR inputs and nvJitLink options",
                    nvjitlink_version(),
                    driver_major()
                ),
            ));
        }
        backend
    }

    /// A linker holding `inputs`, with `options` (the arch defaults to the current device's).
    pub fn new(inputs: &[&ObjectCode], options: LinkerOptions) -> Result<Linker> {
        Linker::with_backend(inputs, options, Linker::which_backend())
    }

    /// [`Linker::new`] with the backend chosen by the caller: `Driver` avoids nvJitLink, for one.
    pub fn with_backend(inputs: &[&ObjectCode], options: LinkerOptions, backend: LinkerBackend) -> Result<Linker> {
        if inputs.is_empty() {
            return Err(CudaError::InvalidArgument(
                "Linker: at least one object code is needed".into(),
            ));
        }
        let mut options = options;
        if options.arch.is_none() {
            options.arch = Some(crate::compile::ffi::current_device_arch().ok_or_else(|| {
                CudaError::InvalidArgument("LinkerOptions.arch is not set and there is no GPU to take it from".into())
            })?);
        }
        options.validate()?;
        if options.numba_debug.is_some() {
            ignored_option("numba_debug is not supported by any linking backend; it is ignored");
        }
        // Names and paths become C strings: made (and so checked) before any library call.
        let c_strings: Vec<(CString, CString)> = inputs.iter().map(|i| input_c_strings(i)).collect::<Result<_>>()?;
        let name = options.name.clone().unwrap_or_else(|| "<default linker>".into());
        if backend == LinkerBackend::NvJitLink && nvjitlink_version().is_none() {
            return Err(CudaError::InvalidState(
                "Linker: nvJitLink 12.3 or newer is not available (install it with `pip install nvidia-nvjitlink`)"
                    .into(),
            ));
        }
        let lto_input = inputs.iter().any(|i| i.code_type() == CodeType::Ltoir);
        if backend == LinkerBackend::Driver {
            if let Some(why) = options.needs_nvjitlink().or(lto_input.then_some("LTO-IR input")) {
                // cuda.core: a runtime error for what only nvJitLink can do (LTO, PTX output), a
                // value error for options the driver's linker does not take.
                let missing_backend = matches!(why, "link_time_optimization" | "ptx" | "LTO-IR input");
                let error = if missing_backend {
                    CudaError::InvalidState
                } else {
                    CudaError::InvalidArgument
                };
                return Err(error(format!(
                    "Linker: {why} needs nvJitLink, which is not available (install it with `pip install \
                     nvidia-nvjitlink`, of the driver's major version, 12.3 or newer)"
                )));
            }
            for option in options.driver_ignores() {
                ignored_option(&format!(
                    "LinkerOptions.{option} is deprecated in the driver API and ignored by the driver's linker"
                ));
            }
        } else if options.incremental == Some(true) {
            require_nvjitlink((13, 2), "incremental linking")?;
        }
        let native_input = inputs
            .iter()
            .any(|i| matches!(i.code_type(), CodeType::Ptx | CodeType::Cubin));
        let handle = match backend {
            LinkerBackend::NvJitLink => {
                let flags = options.nvjitlink_flags()?;
                let c_flags: Vec<CString> = flags
                    .iter()
                    .map(|f| c_string(f.as_str(), "Linker: the nvJitLink option"))
                    .collect::<Result<_>>()?;
                let ptrs: Vec<*const std::ffi::c_char> = c_flags.iter().map(|c| c.as_ptr()).collect();
                let mut h: nvjitlink::nvJitLinkHandle = std::ptr::null_mut();
                // SAFETY: the option strings live until after the call; h is an out-pointer.
                let status = unsafe { nvjitlink::nvJitLinkCreate(&mut h, ptrs.len() as u32, ptrs.as_ptr()) };
                if let Err(e) = status.result() {
                    return Err(CudaError::Link {
                        backend: "nvJitLink",
                        name,
                        status: e.to_string(),
                        log: format!("options: {}", flags.join(" ")),
                    });
                }
                Handle::NvJitLink(h)
            }
            LinkerBackend::Driver => driver_create(&options)?,
        };
        let mut linker = Linker {
            handle,
            options,
            name,
            info_log: String::new(),
            error_log: String::new(),
            native_input,
        };
        for (input, (c_name, c_path)) in inputs.iter().zip(c_strings) {
            linker.add(input, c_name, c_path)?;
        }
        Ok(linker)
    }

    /// The nvJitLink handle or the driver's link state (`cuda.core`'s `Linker.handle`), valid
    /// while this linker lives. Raw code may read logs or results through it; it must not
    /// destroy it, nor use it while a method of this linker runs on another thread.
    pub fn handle(&self) -> LinkerHandle {
        match &self.handle {
            Handle::NvJitLink(h) => LinkerHandle::NvJitLink(*h),
            Handle::Driver { state, .. } => LinkerHandle::Driver(*state),
        }
    }

    /// Which backend this linker uses.
    pub fn backend(&self) -> LinkerBackend {
        match self.handle {
            Handle::NvJitLink(_) => LinkerBackend::NvJitLink,
            Handle::Driver { .. } => LinkerBackend::Driver,
        }
    }

    /// Adds `input`, whose name and file path (if any) are `name` and `path` as C strings.
    fn add(&mut self, input: &ObjectCode, name: CString, path: CString) -> Result<()> {
        let status = match &mut self.handle {
            Handle::NvJitLink(h) => {
                let kind = match input.code_type() {
                    CodeType::Cubin => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_CUBIN,
                    CodeType::Ptx => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_PTX,
                    CodeType::Ltoir => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_LTOIR,
                    CodeType::Fatbin => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_FATBIN,
                    CodeType::Object => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_OBJECT,
                    CodeType::Library => nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_LIBRARY,
                };
                // SAFETY: the handle is live; the data and name outlive the call (nvJitLink copies).
                let r = unsafe {
                    match input.code() {
                        Code::Bytes(b) => {
                            nvjitlink::nvJitLinkAddData(*h, kind, b.as_ptr().cast(), b.len(), name.as_ptr())
                        }
                        Code::File(_) => nvjitlink::nvJitLinkAddFile(*h, kind, path.as_ptr()),
                    }
                };
                r.result().err().map(|e| e.to_string())
            }
            Handle::Driver { state, .. } => {
                let kind = match input.code_type() {
                    CodeType::Cubin => driver::CUjitInputType::CU_JIT_INPUT_CUBIN,
                    CodeType::Ptx => driver::CUjitInputType::CU_JIT_INPUT_PTX,
                    CodeType::Fatbin => driver::CUjitInputType::CU_JIT_INPUT_FATBINARY,
                    CodeType::Object => driver::CUjitInputType::CU_JIT_INPUT_OBJECT,
                    CodeType::Library => driver::CUjitInputType::CU_JIT_INPUT_LIBRARY,
                    CodeType::Ltoir => driver::CUjitInputType::CU_JIT_INPUT_NVVM,
                };
                // SAFETY: the state is live; the data and name outlive the call (the driver copies).
                let r = unsafe {
                    match input.code() {
                        Code::Bytes(b) => driver::cuLinkAddData(
                            *state,
                            kind,
                            b.as_ptr() as *mut c_void,
                            b.len(),
                            name.as_ptr(),
                            0,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                        ),
                        Code::File(_) => driver::cuLinkAddFile(
                            *state,
                            kind,
                            path.as_ptr(),
                            0,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                        ),
                    }
                };
                r.result().err().map(|e| e.to_string())
            }
        };
        match status {
            None => Ok(()),
            Some(status) => {
                self.collect_logs();
                Err(CudaError::Link {
                    backend: self.backend().as_str(),
                    name: format!("{} (adding {} {:?})", self.name, input.code_type(), input.name()),
                    status,
                    log: self.error_log.clone(),
                })
            }
        }
    }

    /// Links everything added into `target`: `Cubin`; `Ptx` with the `ptx` and LTO options;
    /// `Ltoir` (nvJitLink 13.3+) with LTO and LTO-IR inputs only, to link again later (with
    /// `incremental`, references may stay unresolved until then).
    pub fn link(&mut self, target: CodeType) -> Result<ObjectCode> {
        span!("link", backend = self.backend().as_str(), target = %target);
        self.check_target(target)?;
        let result = match &mut self.handle {
            Handle::NvJitLink(h) => {
                let h = *h;
                // SAFETY: the handle is live; sizes and buffers are matched.
                unsafe {
                    match nvjitlink::nvJitLinkComplete(h).result() {
                        Err(e) => Err(e.to_string()),
                        Ok(()) => {
                            let mut size = 0usize;
                            let mut out;
                            if target == CodeType::Ltoir {
                                nvjitlink::nvJitLinkGetLinkedLTOIRSize(h, &mut size)
                                    .check("nvJitLinkGetLinkedLTOIRSize")?;
                                out = vec![0u8; size];
                                nvjitlink::nvJitLinkGetLinkedLTOIR(h, out.as_mut_ptr().cast())
                                    .check("nvJitLinkGetLinkedLTOIR")?;
                            } else if target == CodeType::Ptx {
                                nvjitlink::nvJitLinkGetLinkedPtxSize(h, &mut size)
                                    .check("nvJitLinkGetLinkedPtxSize")?;
                                out = vec![0u8; size];
                                nvjitlink::nvJitLinkGetLinkedPtx(h, out.as_mut_ptr().cast())
                                    .check("nvJitLinkGetLinkedPtx")?;
                            } else {
                                nvjitlink::nvJitLinkGetLinkedCubinSize(h, &mut size)
                                    .check("nvJitLinkGetLinkedCubinSize")?;
                                out = vec![0u8; size];
                                nvjitlink::nvJitLinkGetLinkedCubin(h, out.as_mut_ptr().cast())
                                    .check("nvJitLinkGetLinkedCubin")?;
                            }
                            Ok(out)
                        }
                    }
                }
            }
            Handle::Driver { state, .. } => {
                let mut cubin: *mut c_void = std::ptr::null_mut();
                let mut size = 0usize;
                // SAFETY: the state is live; the returned image is owned by the state, so it is
                // copied out before the state is destroyed (in Drop).
                unsafe {
                    match driver::cuLinkComplete(*state, &mut cubin, &mut size).result() {
                        Err(e) => Err(e.to_string()),
                        Ok(()) => Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec()),
                    }
                }
            }
        };
        self.collect_logs();
        match result {
            Ok(bytes) => ObjectCode::from_bytes(bytes, target, &self.name, HashMap::new()),
            Err(status) => Err(CudaError::Link {
                backend: self.backend().as_str(),
                name: self.name.clone(),
                status,
                log: self.error_log.clone(),
            }),
        }
    }

    /// Refuses a target this linker cannot produce, with `cuda.core`'s reasons.
    fn check_target(&self, target: CodeType) -> Result<()> {
        let bad = |m: String| Err(CudaError::InvalidArgument(format!("Linker: {m}")));
        let lto = self.options.link_time_optimization == Some(true);
        match target {
            CodeType::Cubin if self.options.ptx != Some(true) => Ok(()),
            CodeType::Cubin => bad("the ptx option makes PTX: link to ptx, not cubin".into()),
            CodeType::Ptx if self.options.incremental == Some(true) => {
                bad("PTX output is not supported for incremental linking".into())
            }
            CodeType::Ptx if self.options.ptx == Some(true) => Ok(()),
            CodeType::Ptx => bad("PTX output needs LinkerOptions.ptx (and LTO)".into()),
            CodeType::Ltoir => {
                if self.backend() != LinkerBackend::NvJitLink {
                    return Err(CudaError::InvalidState(
                        "Linker: LTOIR output needs nvJitLink 13.3 or newer; the driver's linker cannot make it".into(),
                    ));
                }
                if !lto {
                    return bad("LTOIR output requires link_time_optimization=True".into());
                }
                if self.native_input {
                    return bad("LTOIR output is not supported with \"ptx\" or \"cubin\" inputs".into());
                }
                require_nvjitlink((13, 3), "LTOIR output")
            }
            _ => bad(format!(
                "cannot link to {target}; the targets are cubin, ptx (with the ptx option) and ltoir (with LTO)"
            )),
        }
    }

    /// The linker's error log (after a failed add or link).
    pub fn get_error_log(&self) -> &str {
        &self.error_log
    }

    /// The linker's information log (after a link).
    pub fn get_info_log(&self) -> &str {
        &self.info_log
    }

    fn collect_logs(&mut self) {
        match &self.handle {
            Handle::NvJitLink(h) => {
                let h = *h;
                let (mut info, mut error) = (0usize, 0usize);
                // SAFETY: the handle is live; each buffer is as large as nvJitLink said.
                unsafe {
                    if nvjitlink::nvJitLinkGetInfoLogSize(h, &mut info).result().is_ok() {
                        self.info_log = read_log(info, |p| {
                            nvjitlink::nvJitLinkGetInfoLog(h, p).check("nvJitLinkGetInfoLog")
                        })
                        .unwrap_or_default();
                    }
                    if nvjitlink::nvJitLinkGetErrorLogSize(h, &mut error).result().is_ok() {
                        self.error_log = read_log(error, |p| {
                            nvjitlink::nvJitLinkGetErrorLog(h, p).check("nvJitLinkGetErrorLog")
                        })
                        .unwrap_or_default();
                    }
                }
            }
            Handle::Driver { buffers, .. } => {
                // SAFETY: these are the state's log buffers, and `&mut self` means no driver call
                // on the state is running (the calls are synchronous and made through `&mut self`).
                unsafe {
                    self.info_log = DriverBuffers::text(buffers.info);
                    self.error_log = DriverBuffers::text(buffers.error);
                }
            }
        }
    }
}

impl Drop for Linker {
    fn drop(&mut self) {
        // SAFETY: each handle was created by this linker and is destroyed once, here. The
        // driver's buffers are fields, dropped (freed) after this body, once the state is gone.
        let result = unsafe {
            match &mut self.handle {
                Handle::NvJitLink(h) => nvjitlink::nvJitLinkDestroy(h).check("nvJitLinkDestroy"),
                Handle::Driver { state, buffers } => {
                    let result = driver::cuLinkDestroy(*state).check("cuLinkDestroy");
                    // A state not destroyed may still write through the buffers: keep them.
                    buffers.leak = result.is_err();
                    result
                }
            }
        };
        if let Err(e) = result {
            crate::error::record_drop_error(e);
        }
    }
}

/// The name of `input` and its file path (empty for code in memory) as C strings, or
/// [`CudaError::InvalidArgument`] if either contains a NUL byte.
fn input_c_strings(input: &ObjectCode) -> Result<(CString, CString)> {
    let name = c_string(input.name(), "Linker: the ObjectCode name")?;
    let path = match input.code() {
        Code::File(p) => c_string(p.as_os_str().as_encoded_bytes(), "Linker: the ObjectCode file path")?,
        Code::Bytes(_) => CString::default(),
    };
    Ok((name, path))
}

/// The version (major, minor) of the nvJitLink that loads, if it has the unversioned API (12.3+).
fn nvjitlink_version() -> Option<(u32, u32)> {
    let (mut major, mut minor) = (0u32, 0u32);
    // SAFETY: out-pointers to locals.
    unsafe { nvjitlink::nvJitLinkVersion(&mut major, &mut minor) }
        .result()
        .ok()?;
    Some((major, minor))
}

/// An error naming `what` unless the nvJitLink that loads is `required` or newer (`cuda.core`'s
/// "requires nvJitLink X.Y or newer; found A.B").
fn require_nvjitlink(required: (u32, u32), what: &str) -> Result<()> {
    match nvjitlink_version() {
        Some(found) if found >= required => Ok(()),
        found => Err(CudaError::InvalidState(format!(
            "Linker: {what} requires nvJitLink {}.{} or newer; found {}",
            required.0,
            required.1,
            found.map_or("none".to_string(), |(major, minor)| format!("{major}.{minor}"))
        ))),
    }
}

/// An option given that is ignored (`cuda.core`'s `DeprecationWarning`): reported through the
/// warnings channel (as a user warning: the channel has no deprecation category), not refused.
pub(super) fn ignored_option(message: &str) {
    crate::error::warn(crate::Warning::new(crate::WarningCategory::User, message));
}

fn driver_major() -> Option<u32> {
    crate::system::get_user_mode_driver_version()
        .ok()
        .map(|(major, _)| major)
}
