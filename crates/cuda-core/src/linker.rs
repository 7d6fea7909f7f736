//! `Linker` and `LinkerOptions`: nvJitLink, with the driver's `cuLink*` as the fallback.

use crate::error::Check;
use crate::object_code::{read_log, Code, CodeType, ObjectCode};
use crate::program_options::{c_string, check_fields_no_nul};
use crate::{CudaError, Result};
use cuda_sys::{driver, nvjitlink};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::{c_void, CString};

/// Options of a [`Linker`], named as in `cuda.core`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkerOptions {
    /// The name of the linked code (`"<default linker>"` when unset).
    pub name: Option<String>,
    /// `sm_XY` (required: the current device's when unset and a GPU is present).
    pub arch: Option<String>,
    pub max_register_count: Option<u32>,
    pub time: Option<bool>,
    pub verbose: Option<bool>,
    /// Link LTO-IR (nvJitLink only).
    pub link_time_optimization: Option<bool>,
    /// Produce PTX instead of a cubin (needs `link_time_optimization`; nvJitLink only).
    pub ptx: Option<bool>,
    /// 0 to 3.
    pub optimization_level: Option<u32>,
    pub debug: Option<bool>,
    pub lineinfo: Option<bool>,
    pub ftz: Option<bool>,
    pub prec_div: Option<bool>,
    pub prec_sqrt: Option<bool>,
    pub fma: Option<bool>,
    pub kernels_used: Vec<String>,
    pub variables_used: Vec<String>,
    pub optimize_unused_variables: Option<bool>,
    pub ptxas_options: Vec<String>,
    pub split_compile: Option<u32>,
    pub split_compile_extended: Option<u32>,
    pub no_cache: Option<bool>,
}

impl LinkerOptions {
    /// The nvJitLink flags for these options.
    pub fn nvjitlink_flags(&self) -> Result<Vec<String>> {
        self.validate()?;
        let mut f = Vec::new();
        let tf = |v: bool| if v { "true" } else { "false" };
        if let Some(arch) = &self.arch {
            f.push(format!("-arch={arch}"));
        }
        if let Some(n) = self.max_register_count {
            f.push(format!("-maxrregcount={n}"));
        }
        if self.time == Some(true) {
            f.push("-time".into());
        }
        if self.verbose == Some(true) {
            f.push("-verbose".into());
        }
        if self.link_time_optimization == Some(true) {
            f.push("-lto".into());
        }
        if self.ptx == Some(true) {
            f.push("-ptx".into());
        }
        if let Some(o) = self.optimization_level {
            f.push(format!("-O{o}"));
        }
        if self.debug == Some(true) {
            f.push("-g".into());
        }
        if self.lineinfo == Some(true) {
            f.push("-lineinfo".into());
        }
        for (v, name) in [
            (self.ftz, "-ftz"),
            (self.prec_div, "-prec-div"),
            (self.prec_sqrt, "-prec-sqrt"),
            (self.fma, "-fma"),
        ] {
            if let Some(v) = v {
                f.push(format!("{name}={}", tf(v)));
            }
        }
        for k in &self.kernels_used {
            f.push(format!("-kernels-used={k}"));
        }
        for v in &self.variables_used {
            f.push(format!("-variables-used={v}"));
        }
        if self.optimize_unused_variables == Some(true) {
            f.push("-optimize-unused-variables".into());
        }
        for o in &self.ptxas_options {
            f.push(format!("-Xptxas={o}"));
        }
        if let Some(n) = self.split_compile {
            f.push(format!("-split-compile={n}"));
        }
        if let Some(n) = self.split_compile_extended {
            f.push(format!("-split-compile-extended={n}"));
        }
        if self.no_cache == Some(true) {
            f.push("-no-cache".into());
        }
        Ok(f)
    }

    /// Rejects values no linker accepts, and strings with a NUL byte (which no C string can hold).
    pub fn validate(&self) -> Result<()> {
        check_fields_no_nul(
            "LinkerOptions",
            &[("name", &self.name), ("arch", &self.arch)],
            &[
                ("kernels_used entry", &self.kernels_used),
                ("variables_used entry", &self.variables_used),
                ("ptxas_options entry", &self.ptxas_options),
            ],
        )?;
        let bad = |m: String| Err(CudaError::InvalidArgument(format!("LinkerOptions: {m}")));
        if let Some(arch) = &self.arch {
            let digits = arch.strip_prefix("sm_").map(|d| d.trim_end_matches(['a', 'f']));
            if !digits.is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())) {
                return bad(format!("arch {arch:?} is not of the form sm_XY (sm_90, sm_90a)"));
            }
        }
        if self.optimization_level.is_some_and(|o| o > 3) {
            return bad("optimization_level must be 0 to 3".into());
        }
        if self.ptx == Some(true) && self.link_time_optimization != Some(true) {
            return bad("ptx output needs link_time_optimization".into());
        }
        if self.max_register_count == Some(0) {
            return bad("max_register_count must be at least 1".into());
        }
        Ok(())
    }

    fn needs_nvjitlink(&self) -> Option<&'static str> {
        if self.link_time_optimization == Some(true) {
            Some("link_time_optimization")
        } else if self.ptx == Some(true) {
            Some("ptx")
        } else if self.time == Some(true) {
            Some("time")
        } else if !self.ptxas_options.is_empty() {
            Some("ptxas_options")
        } else if self.split_compile.is_some() || self.split_compile_extended.is_some() {
            Some("split_compile")
        } else if self.ftz.is_some() || self.prec_div.is_some() || self.prec_sqrt.is_some() || self.fma.is_some() {
            Some("ftz, prec_div, prec_sqrt and fma")
        } else if !self.kernels_used.is_empty()
            || !self.variables_used.is_empty()
            || self.optimize_unused_variables.is_some()
        {
            Some("kernels_used, variables_used and optimize_unused_variables")
        } else {
            None
        }
    }
}

/// Which linker does the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkerBackend {
    NvJitLink,
    Driver,
}

impl LinkerBackend {
    /// `"nvJitLink"` or `"driver"`, as `cuda.core` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkerBackend::NvJitLink => "nvJitLink",
            LinkerBackend::Driver => "driver",
        }
    }
}

enum Handle {
    NvJitLink(nvjitlink::nvJitLinkHandle),
    /// The driver keeps pointers to the log buffers and to the option arrays (it writes the
    /// amount of log written back into `values`), so all of them live as long as the state.
    Driver {
        state: driver::CUlinkState,
        buffers: DriverBuffers,
    },
}

/// The buffers `cuLinkCreate` is given pointers to: the info and error logs, which the driver
/// writes during each `cuLinkAddData`/`cuLinkAddFile`/`cuLinkComplete`, and the option arrays
/// (it writes the amount of log filled back into `values`). The driver holds on to these pointers
/// for the life of the state, so the buffers are owned as raw pointers from [`Box::into_raw`]:
/// never moved or reborrowed as `Box`es (which would assert uniqueness and invalidate the
/// driver's pointers), read only between driver calls, and freed only after `cuLinkDestroy`.
struct DriverBuffers {
    info: *mut [u8],
    error: *mut [u8],
    keys: *mut [driver::CUjit_option],
    values: *mut [*mut c_void],
    /// Set when the state could not be destroyed: the driver may still hold the pointers, so the
    /// buffers are leaked rather than freed.
    leak: bool,
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
    unsafe fn text(log: *mut [u8]) -> String {
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
        *BACKEND.get_or_init(|| match nvjitlink_version() {
            Some(major) if driver_major().is_none_or(|d| d == major) => LinkerBackend::NvJitLink,
            _ => LinkerBackend::Driver,
        })
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
            options.arch = Some(crate::program::current_device_arch().ok_or_else(|| {
                CudaError::InvalidArgument("LinkerOptions.arch is not set and there is no GPU to take it from".into())
            })?);
        }
        options.validate()?;
        // Names and paths become C strings: made (and so checked) before any library call.
        let c_strings: Vec<(CString, CString)> = inputs.iter().map(|i| input_c_strings(i)).collect::<Result<_>>()?;
        let name = options.name.clone().unwrap_or_else(|| "<default linker>".into());
        if backend == LinkerBackend::NvJitLink && nvjitlink_version().is_none() {
            return Err(CudaError::InvalidArgument(
                "Linker: nvJitLink 12.3 or newer is not available (install it with `pip install nvidia-nvjitlink`)"
                    .into(),
            ));
        }
        let lto_input = inputs.iter().any(|i| i.code_type() == CodeType::Ltoir);
        if backend == LinkerBackend::Driver {
            if let Some(why) = options.needs_nvjitlink().or(lto_input.then_some("LTO-IR input")) {
                return Err(CudaError::InvalidArgument(format!(
                    "Linker: {why} needs nvJitLink, which is not available (install it with `pip install \
                     nvidia-nvjitlink`, of the driver's major version, 12.3 or newer)"
                )));
            }
        }
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
        };
        for (input, (c_name, c_path)) in inputs.iter().zip(c_strings) {
            linker.add(input, c_name, c_path)?;
        }
        Ok(linker)
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

    /// Links everything added into `target` (`Cubin`, or `Ptx` with `ptx` and LTO options).
    pub fn link(&mut self, target: CodeType) -> Result<ObjectCode> {
        match (target, self.options.ptx == Some(true)) {
            (CodeType::Cubin, false) | (CodeType::Ptx, true) => {}
            (CodeType::Ptx, false) => {
                return Err(CudaError::InvalidArgument(
                    "Linker: PTX output needs LinkerOptions.ptx (and LTO)".into(),
                ))
            }
            _ => {
                return Err(CudaError::InvalidArgument(format!(
                    "Linker: cannot link to {target}; the targets are cubin, and ptx with the ptx option"
                )))
            }
        }
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
                            if target == CodeType::Ptx {
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

fn driver_create(options: &LinkerOptions) -> Result<Handle> {
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
        return Err(CudaError::InvalidArgument(
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

/// The major version of the nvJitLink that loads, if it has the unversioned API (12.3+).
fn nvjitlink_version() -> Option<u32> {
    let (mut major, mut minor) = (0u32, 0u32);
    // SAFETY: out-pointers to locals.
    unsafe { nvjitlink::nvJitLinkVersion(&mut major, &mut minor) }
        .result()
        .ok()?;
    Some(major)
}

fn driver_major() -> Option<u32> {
    crate::system::get_user_mode_driver_version()
        .ok()
        .map(|(major, _)| major)
}
