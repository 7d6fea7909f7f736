//! `Program`: CUDA C++ (NVRTC), PTX (through the linker) and NVVM IR (libNVVM) to object code.

use crate::compile::cache::{CacheEntry, ProgramCache};
use crate::compile::ffi::read_log;
use crate::compile::ffi::{c_string, current_device_arch};
use crate::compile::linker::{Linker, LinkerHandle, LinkerOptions};
use crate::compile::nvrtc::{pch_heap_shared, NvrtcProgram};
use crate::compile::object_code::{CodeType, ObjectCode};
use crate::compile::program_options::ProgramOptions;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::{nvrtc, nvvm};
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

/// What a [`Program`] is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SourceType {
    /// CUDA C++, compiled by NVRTC (`"c++"`).
    Cxx,
    /// PTX, assembled by the linker (`"ptx"`).
    Ptx,
    /// NVVM IR (text or bitcode), compiled by libNVVM (`"nvvm"`).
    Nvvm,
}

impl std::str::FromStr for SourceType {
    type Err = CudaError;
    fn from_str(s: &str) -> Result<SourceType> {
        match s {
            "c++" => Ok(SourceType::Cxx),
            "ptx" => Ok(SourceType::Ptx),
            "nvvm" => Ok(SourceType::Nvvm),
            _ => Err(CudaError::InvalidState(format!(
                "unsupported code type {s:?} (supported: \"c++\", \"ptx\", \"nvvm\")"
            ))),
        }
    }
}

/// Whether NVRTC made the precompiled header asked for (`create_pch`/`pch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PchStatus {
    /// The header was written (`"created"`); also after the automatic retry with a larger
    /// heap.
    Created,
    /// NVRTC decided not to make one (`"not_attempted"`).
    NotAttempted,
    /// An error prevented it, or the heap was still too small after the retry (`"failed"`).
    Failed,
}

/// The compiler-library handle of a [`Program`] (`cuda.core`'s `Program.handle`), by backend:
/// the program of the last compile, valid until the next compile or until the `Program` drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramHandle {
    /// An `nvrtcProgram` (C++ programs).
    Nvrtc(nvrtc::nvrtcProgram),
    /// An `nvvmProgram` (NVVM IR programs).
    Nvvm(nvvm::nvvmProgram),
    /// The linker's handle (PTX programs).
    Linker(LinkerHandle),
}

/// What the last compile used, kept alive for [`Program::handle`].
enum Held {
    Nvrtc(NvrtcProgram),
    Nvvm(NvvmProgram),
    Linker(Box<Linker>),
}

/// A program to compile: CUDA C++, PTX or NVVM IR, with its [`ProgramOptions`].
///
/// ```no_run
/// use cuda_core::{CodeType, Program, ProgramOptions};
/// # fn main() -> cuda_core::Result<()> {
/// let source = r#"extern "C" __global__ void zero(float* x) { x[threadIdx.x] = 0; }"#;
/// let options = ProgramOptions { arch: Some("sm_90".into()), ..Default::default() };
/// let mut program = Program::new(source, "c++".parse()?, options)?;
/// let cubin = program.compile(CodeType::Cubin, &[])?;
/// # Ok(()) }
/// ```
pub struct Program {
    source: Vec<u8>,
    source_type: SourceType,
    options: ProgramOptions,
    log: String,
    pch_status: Option<PchStatus>,
    /// The compiler program of the last compile.
    held: Option<Held>,
    /// Where the source was written for a debugger (`debug_source`), by the last compile.
    source_path: Option<PathBuf>,
}

// SAFETY: every field but `held` is Send + Sync. `held` holds an NVRTC or NVVM program or a
// Linker (each Send, none Sync): through `&Program` nothing calls into any of them (`handle`
// only copies the value of a handle), and every call into them is made through `&mut Program`.
unsafe impl Sync for Program {}

impl Program {
    /// A program from `source`. The options are checked now; the arch defaults to the current
    /// device's (device 0 when no context is current) when a GPU is present.
    pub fn new(source: impl Into<Vec<u8>>, source_type: SourceType, options: ProgramOptions) -> Result<Program> {
        let source = source.into();
        let mut options = options;
        if options.arch.is_none() {
            options.arch = current_device_arch();
        }
        options.validate()?;
        if source_type != SourceType::Nvvm && (!options.extra_sources.is_empty() || options.use_libdevice.is_some()) {
            return Err(CudaError::InvalidArgument(
                "ProgramOptions: extra_sources and use_libdevice apply to NVVM IR programs only".into(),
            ));
        }
        if source_type != SourceType::Nvvm && std::str::from_utf8(&source).is_err() {
            return Err(CudaError::InvalidArgument(
                "Program: C++ and PTX sources must be UTF-8 text".into(),
            ));
        }
        if source.contains(&0) && source_type != SourceType::Nvvm {
            return Err(CudaError::InvalidArgument(
                "Program: the source contains a NUL byte".into(),
            ));
        }
        Ok(Program {
            source,
            source_type,
            options,
            log: String::new(),
            pch_status: None,
            held: None,
            source_path: None,
        })
    }

    /// The NVRTC program, NVVM program or linker of the last compile (`cuda.core`'s
    /// `Program.handle`), kept alive until the next compile or until this `Program` drops;
    /// `None` before the first compile (the compiler library is first needed then, so a program
    /// can be made and keyed for a cache where it is not installed). Raw calls may read logs and
    /// results through it; they must not destroy it.
    pub fn handle(&self) -> Option<ProgramHandle> {
        self.held.as_ref().map(|held| match held {
            Held::Nvrtc(p) => ProgramHandle::Nvrtc(p.0),
            Held::Nvvm(p) => ProgramHandle::Nvvm(p.0),
            Held::Linker(l) => ProgramHandle::Linker(l.handle()),
        })
    }

    /// Where the last compile with [`debug`](ProgramOptions::debug) information wrote the source
    /// for cuda-gdb (C++ programs; `None` when it did not write one). See
    /// [`ProgramOptions::debug`] for where and when.
    pub fn source_path(&self) -> Option<&Path> {
        self.source_path.as_deref()
    }

    /// The backend that compiles this program: `"NVRTC"`, `"NVVM"`, or for PTX the linker's
    /// (`"nvJitLink"` or `"driver"`).
    pub fn backend(&self) -> &'static str {
        match self.source_type {
            SourceType::Cxx => "NVRTC",
            SourceType::Nvvm => "NVVM",
            SourceType::Ptx => Linker::which_backend().as_str(),
        }
    }

    /// The options, with the arch filled in.
    pub fn options(&self) -> &ProgramOptions {
        &self.options
    }

    /// The log of the last compile.
    pub fn log(&self) -> &str {
        &self.log
    }

    /// Whether the last compile made the precompiled header asked for.
    pub fn pch_status(&self) -> Option<PchStatus> {
        self.pch_status
    }

    fn name(&self) -> String {
        self.options.name.clone().unwrap_or_else(|| "default_program".into())
    }

    /// Compiles to `target` (NVRTC: ptx, cubin, ltoir; NVVM: ptx, ltoir; PTX: cubin, ptx).
    /// `name_expressions` (NVRTC) are looked up after the compile; their lowered names are in the
    /// result's [`ObjectCode::symbol_mapping`], so `get_kernel("f<int>")` works.
    pub fn compile(&mut self, target: CodeType, name_expressions: &[&str]) -> Result<ObjectCode> {
        span!("compile", program = %self.name(), source = ?self.source_type, target = %target);
        self.check_target(target, name_expressions)?;
        let code = match self.source_type {
            SourceType::Cxx => self.compile_nvrtc(target, name_expressions)?,
            SourceType::Nvvm => self.compile_nvvm(target)?,
            SourceType::Ptx => self.compile_ptx(target)?,
        };
        // cuda.core's RuntimeWarning: PTX the installed driver cannot load.
        let ptx = (target == CodeType::Ptx).then(|| code.bytes().ok()).flatten();
        super::ptx_isa::warn_if_ptx_too_new(ptx.as_deref().unwrap_or_default());
        Ok(code)
    }

    /// [`compile`](Self::compile) through `cache`: a hit returns the stored bytes (and name
    /// mapping) without running the compiler; a miss compiles and stores the result. Options
    /// that write files (`create_pch`, `time`, `fdevice_time_trace`) cannot be cached.
    pub fn compile_cached(
        &mut self,
        target: CodeType,
        name_expressions: &[&str],
        cache: &dyn ProgramCache,
    ) -> Result<ObjectCode> {
        self.compile_cached_with(target, name_expressions, cache, None)
    }

    /// [`compile_cached`](Self::compile_cached) with `extra_digest` in the key: a digest of the
    /// files the options name (headers on `include_path`, `pre_include`, a precompiled header,
    /// libdevice), which the key cannot see otherwise (`cuda.core`'s `extra_digest`); see
    /// [`cache_key_with`](Self::cache_key_with).
    pub fn compile_cached_with(
        &mut self,
        target: CodeType,
        name_expressions: &[&str],
        cache: &dyn ProgramCache,
        extra_digest: Option<&[u8]>,
    ) -> Result<ObjectCode> {
        self.check_target(target, name_expressions)?;
        let key = self.cache_key_with(target, name_expressions, extra_digest)?;
        if let Some(entry) = cache.get(&key)? {
            // An entry whose image does not check out (damaged, or planted) is never loaded:
            // it is dropped and the program compiled again.
            match ObjectCode::from_bytes(entry.code, target, &self.name(), entry.symbol_mapping) {
                Ok(code) => {
                    self.log.clear();
                    return Ok(code);
                }
                Err(_) => {
                    cache.remove(&key)?;
                }
            }
        }
        let code = self.compile(target, name_expressions)?;
        let entry = CacheEntry {
            code: code.bytes()?.into_owned(),
            symbol_mapping: code.symbol_mapping().clone(),
        };
        cache.put(&key, &entry)?;
        Ok(code)
    }

    /// The cache key of compiling this program to `target`: a SHA-256 over everything that
    /// changes the output (source, type, options, target, name expressions, and the versions of
    /// the compilers involved). Options that name files on disk (include paths, precompiled
    /// headers, libdevice) make the key depend on those paths, not on the files' contents.
    pub fn cache_key(&self, target: CodeType, name_expressions: &[&str]) -> Result<[u8; 32]> {
        self.cache_key_with(target, name_expressions, None)
    }

    /// [`cache_key`](Self::cache_key) with `extra_digest` hashed in (`cuda.core`'s
    /// `make_program_cache_key(..., extra_digest=...)`). Options that name files outside the
    /// program (`include_path`, `pre_include`, `use_pch`, `pch`, `pch_dir`, `use_libdevice`, a
    /// `name` that is a path) need it: the key sees the names, not the contents, so a changed
    /// header would hit a stale entry. Without it such options are refused, as cuda.core refuses
    /// them.
    pub fn cache_key_with(
        &self,
        target: CodeType,
        name_expressions: &[&str],
        extra_digest: Option<&[u8]>,
    ) -> Result<[u8; 32]> {
        use sha2::{Digest, Sha256};
        if let Some(option) = self.options.side_effects() {
            return Err(CudaError::InvalidArgument(format!(
                "Program: the {option} option writes files, so this compile cannot be cached"
            )));
        }
        if let (Some(option), None) = (self.options.external_files(), extra_digest) {
            return Err(CudaError::InvalidArgument(format!(
                "Program: the {option} option names files the cache key cannot see into: pass a digest of their contents as extra_digest (cache_key_with, compile_cached_with)"
            )));
        }
        let mut h = Sha256::new();
        let mut field = |label: &str, bytes: &[u8]| {
            h.update(label.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field("schema", b"cuda-core program cache 1");
        field("source", &self.source);
        field("source_type", format!("{:?}", self.source_type).as_bytes());
        field("options", format!("{:?}", self.options).as_bytes());
        field("target", target.as_str().as_bytes());
        for n in name_expressions {
            field("name_expression", n.as_bytes());
        }
        field("compiler", self.compiler_versions().as_bytes());
        if let Some(d) = extra_digest {
            field("extra_digest", d);
        }
        Ok(h.finalize().into())
    }

    fn compiler_versions(&self) -> String {
        match self.source_type {
            SourceType::Cxx => {
                let (mut major, mut minor) = (0, 0);
                // SAFETY: out-pointers to locals.
                let _ = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
                format!("nvrtc {major}.{minor}")
            }
            SourceType::Nvvm => {
                let (mut major, mut minor, mut ir_major, mut ir_minor, mut dbg_major, mut dbg_minor) =
                    (0, 0, 0, 0, 0, 0);
                // SAFETY: out-pointers to locals.
                unsafe {
                    let _ = nvvm::nvvmVersion(&mut major, &mut minor);
                    let _ = nvvm::nvvmIRVersion(&mut ir_major, &mut ir_minor, &mut dbg_major, &mut dbg_minor);
                }
                let libdevice = if self.options.use_libdevice == Some(true) {
                    cuda_pathfinder::find_bitcode_lib("device")
                        .map(|l| l.abs_path.display().to_string())
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                format!("nvvm {major}.{minor} ir {ir_major}.{ir_minor} dbg {dbg_major}.{dbg_minor} {libdevice}")
            }
            SourceType::Ptx => {
                let (mut major, mut minor) = (0u32, 0u32);
                // SAFETY: out-pointers to locals.
                let _ = unsafe { cuda_sys::nvjitlink::nvJitLinkVersion(&mut major, &mut minor) };
                let driver = crate::system::get_user_mode_driver_version().unwrap_or((0, 0));
                format!("{} {major}.{minor} driver {driver:?}", Linker::which_backend().as_str())
            }
        }
    }

    fn check_target(&self, target: CodeType, name_expressions: &[&str]) -> Result<()> {
        let allowed: &[CodeType] = match self.source_type {
            SourceType::Cxx => &[CodeType::Ptx, CodeType::Cubin, CodeType::Ltoir],
            SourceType::Nvvm => &[CodeType::Ptx, CodeType::Ltoir],
            SourceType::Ptx => &[CodeType::Cubin, CodeType::Ptx],
        };
        if !allowed.contains(&target) {
            let list: Vec<&str> = allowed.iter().map(|t| t.as_str()).collect();
            return Err(CudaError::InvalidArgument(format!(
                "Program: a {:?} program compiles to {}, not {target}",
                self.source_type,
                list.join(", ")
            )));
        }
        if !name_expressions.is_empty() && self.source_type != SourceType::Cxx {
            return Err(CudaError::InvalidArgument(
                "Program: name expressions apply to C++ programs only".into(),
            ));
        }
        if let Some(arch) = &self.options.arch {
            if target == CodeType::Cubin && arch.starts_with("compute_") {
                return Err(CudaError::InvalidArgument(format!(
                    "Program: a cubin needs a real architecture (sm_XY), not the virtual {arch}"
                )));
            }
        } else if target == CodeType::Cubin || self.source_type == SourceType::Ptx {
            return Err(CudaError::InvalidArgument(
                "ProgramOptions.arch is not set and there is no GPU to take it from: set it (sm_90, ...)".into(),
            ));
        }
        if target == CodeType::Ltoir && self.options.link_time_optimization == Some(false) {
            return Err(CudaError::InvalidArgument(
                "Program: the ltoir target needs link_time_optimization".into(),
            ));
        }
        Ok(())
    }

    fn compile_nvrtc(&mut self, target: CodeType, name_expressions: &[&str]) -> Result<ObjectCode> {
        let mut options = self.options.clone();
        if target == CodeType::Ltoir {
            options.link_time_optimization = Some(true);
        }
        // nvrtc_flags validates the options (NUL bytes included), so the checked conversions below
        // cannot fail for the flags and the name; they stay checked rather than trusted.
        let flags = options.nvrtc_flags()?;
        let c_flags: Vec<CString> = flags
            .iter()
            .map(|f| c_string(f.as_str(), "Program: the NVRTC option"))
            .collect::<Result<_>>()?;
        let name = self.name();
        // With debug information, NVRTC is given the path of a copy of the source as the name,
        // for cuda-gdb (see `debug_source`).
        self.source_path = None;
        if options.debug == Some(true) {
            self.source_path = match &options.name {
                None => crate::compile::debug_source::materialize(&self.source),
                Some(named) => crate::compile::debug_source::reconcile_named(named, &self.source),
            };
        }
        let nvrtc_name = match (&self.source_path, &options.name) {
            (Some(path), None) => path.to_string_lossy().into_owned(),
            _ => name.clone(),
        };
        let c_name = c_string(nvrtc_name.as_str(), "ProgramOptions: name")?;
        let source = CString::new(self.source.clone())
            .map_err(|_| CudaError::InvalidArgument("Program: the source contains a NUL byte".into()))?;
        let c_exprs: Vec<(&str, CString)> = name_expressions
            .iter()
            .map(|e| Ok((*e, c_string(*e, "Program: the name expression")?)))
            .collect::<Result<_>>()?;
        let uses_pch = options.pch == Some(true)
            || options.create_pch.is_some()
            || options.use_pch.is_some()
            || options.pch_dir.is_some();
        let makes_pch = options.create_pch.is_some() || options.pch == Some(true);
        let compile = |program: &mut NvrtcProgram| {
            let _heap = uses_pch.then(pch_heap_shared);
            program.compile(&c_flags, &c_exprs, target)
        };
        let mut program = NvrtcProgram::create(&source, &c_name)?;
        let (mut log, mut result) = compile(&mut program);
        let mut pch_status = None;
        if makes_pch && result.is_ok() {
            pch_status = program.pch_status();
            if pch_status.is_none() {
                // The precompiled-header heap was too small: grown to what NVRTC said it needs,
                // and the program made and compiled again (as cuda.core does).
                program.grow_pch_heap()?;
                let mut retry = NvrtcProgram::create(&source, &c_name)?;
                (log, result) = compile(&mut retry);
                program = retry;
                pch_status = Some(if result.is_ok() {
                    program.pch_status().unwrap_or(PchStatus::Failed)
                } else {
                    PchStatus::Failed
                });
            }
        }
        self.pch_status = pch_status;
        self.log = log;
        // The last program stays (`handle`), compiled or not, until the next compile or drop.
        self.held = Some(Held::Nvrtc(program));
        match result {
            Ok((code, mapping)) => ObjectCode::from_bytes(code, target, &name, mapping),
            Err(CudaError::Toolchain {
                call: "nvrtcCompileProgram",
                message,
            }) => Err(CudaError::Compile {
                backend: "NVRTC",
                program: name,
                status: message,
                log: self.log.clone(),
            }),
            Err(e) => Err(e),
        }
    }

    fn compile_nvvm(&mut self, target: CodeType) -> Result<ObjectCode> {
        // nvvm_flags validates the options (NUL bytes in module names included).
        let flags = self.options.nvvm_flags(target.as_str())?;
        let c_flags: Vec<CString> = flags
            .iter()
            .map(|f| c_string(f.as_str(), "Program: the NVVM option"))
            .collect::<Result<_>>()?;
        let mut flag_ptrs: Vec<*const c_char> = c_flags.iter().map(|c| c.as_ptr()).collect();
        let name = self.name();
        let libdevice = if self.options.use_libdevice == Some(true) {
            let found = cuda_pathfinder::find_bitcode_lib("device")
                .map_err(|e| CudaError::InvalidArgument(format!("use_libdevice: {e}")))?;
            Some(std::fs::read(&found.abs_path).map_err(|e| {
                CudaError::InvalidArgument(format!("use_libdevice: cannot read {}: {e}", found.abs_path.display()))
            })?)
        } else {
            None
        };
        let mut prog: nvvm::nvvmProgram = std::ptr::null_mut();
        // SAFETY: prog is an out-pointer; it is destroyed by the guard below.
        unsafe { nvvm::nvvmCreateProgram(&mut prog) }.check("nvvmCreateProgram")?;
        let program = NvvmProgram(prog);
        let result = self.compile_nvvm_program(&program, &mut flag_ptrs, libdevice.as_deref(), target, &name);
        // The last program stays (`handle`), compiled or not, until the next compile or drop.
        self.held = Some(Held::Nvvm(program));
        result
    }

    /// Adds the modules to `program`, verifies and compiles it, and returns the result.
    fn compile_nvvm_program(
        &mut self,
        program: &NvvmProgram,
        flag_ptrs: &mut [*const c_char],
        libdevice: Option<&[u8]>,
        target: CodeType,
        name: &str,
    ) -> Result<ObjectCode> {
        let add = |data: &[u8], module: &str, lazy: bool| -> Result<()> {
            let c_module = c_string(module, "Program: the NVVM module name")?;
            // SAFETY: the program is live; NVVM copies the buffer during the call.
            let status = unsafe {
                if lazy {
                    nvvm::nvvmLazyAddModuleToProgram(program.0, data.as_ptr().cast(), data.len(), c_module.as_ptr())
                } else {
                    nvvm::nvvmAddModuleToProgram(program.0, data.as_ptr().cast(), data.len(), c_module.as_ptr())
                }
            };
            status.check("nvvmAddModuleToProgram")
        };
        add(&self.source, name, false)?;
        for (module, data) in &self.options.extra_sources {
            add(data, module, false)?;
        }
        if let Some(bc) = libdevice {
            add(bc, "libdevice", true)?;
        }
        // SAFETY: (whole block) the program is live; buffers are as large as NVVM reported.
        unsafe {
            let mut status = nvvm::nvvmVerifyProgram(program.0, flag_ptrs.len() as i32, flag_ptrs.as_mut_ptr());
            if status == nvvm::nvvmResult::NVVM_SUCCESS {
                status = nvvm::nvvmCompileProgram(program.0, flag_ptrs.len() as i32, flag_ptrs.as_mut_ptr());
            }
            let mut log_size = 0usize;
            nvvm::nvvmGetProgramLogSize(program.0, &mut log_size).check("nvvmGetProgramLogSize")?;
            self.log = read_log(log_size, |p| {
                nvvm::nvvmGetProgramLog(program.0, p).check("nvvmGetProgramLog")
            })?;
            if let Err(e) = status.result() {
                return Err(CudaError::Compile {
                    backend: "NVVM",
                    program: name.to_string(),
                    status: e.to_string(),
                    log: self.log.clone(),
                });
            }
            let mut size = 0usize;
            nvvm::nvvmGetCompiledResultSize(program.0, &mut size).check("nvvmGetCompiledResultSize")?;
            let mut code = vec![0u8; size];
            nvvm::nvvmGetCompiledResult(program.0, code.as_mut_ptr().cast()).check("nvvmGetCompiledResult")?;
            if target == CodeType::Ptx {
                // NVVM's PTX ends with its NUL; keep the text only.
                while code.last() == Some(&0) {
                    code.pop();
                }
            }
            ObjectCode::from_bytes(code, target, name, HashMap::new())
        }
    }

    fn compile_ptx(&mut self, target: CodeType) -> Result<ObjectCode> {
        let o = &self.options;
        if o.numba_debug.is_some() {
            // cuda.core's UserWarning: the linker that assembles PTX has no such option.
            super::linker::ignored_option(
                "ProgramOptions.numba_debug is not supported when compiling PTX (the linker assembles it); it is ignored",
            );
        }
        let options = LinkerOptions {
            name: o.name.clone(),
            arch: o.arch.as_ref().map(|a| a.replace("compute_", "sm_")),
            max_register_count: o.max_register_count,
            debug: o.debug,
            lineinfo: o.lineinfo,
            ftz: o.ftz,
            prec_div: o.prec_div,
            prec_sqrt: o.prec_sqrt,
            fma: o.fma,
            link_time_optimization: o.link_time_optimization,
            ptx: (target == CodeType::Ptx).then_some(true),
            ptxas_options: o.ptxas_options.clone(),
            split_compile: o.split_compile,
            no_cache: o.no_cache,
            ..Default::default()
        };
        let input = ObjectCode::from_ptx(self.source.clone(), &self.name())?;
        let mut linker = Linker::new(&[&input], options)?;
        let result = linker.link(target);
        self.log = format!("{}{}", linker.get_info_log(), linker.get_error_log());
        // The linker stays (`handle`) until the next compile or drop.
        self.held = Some(Held::Linker(Box::new(linker)));
        result
    }
}

struct NvvmProgram(nvvm::nvvmProgram);

// SAFETY: an NVVM program is not tied to the thread that made it; every call on it is made
// through `&mut Program` (compile), and `&` only reads the handle's value.
unsafe impl Send for NvvmProgram {}

impl Drop for NvvmProgram {
    fn drop(&mut self) {
        // SAFETY: made by nvvmCreateProgram, destroyed once.
        if let Err(e) = unsafe { nvvm::nvvmDestroyProgram(&mut self.0) }.check("nvvmDestroyProgram") {
            crate::error::record_drop_error(e);
        }
    }
}
