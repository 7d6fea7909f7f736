//! `ProgramOptions`: every NVRTC option `cuda.core` offers, its flag, and the NVVM subset.

use crate::compile::ffi::{check_fields_no_nul, check_no_nul};
use crate::{CudaError, Result};
use serde::{Deserialize, Serialize};

/// Options of a [`Program`](crate::Program), named as in `cuda.core`. Every field is optional;
/// unset fields add no flag and leave the compiler's default.
///
/// ```
/// use cuda_core::ProgramOptions;
/// let options = ProgramOptions { arch: Some("sm_90".into()), std: Some("c++17".into()), ..Default::default() };
/// assert_eq!(options.nvrtc_flags().unwrap(), ["-arch=sm_90", "--std=c++17"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct ProgramOptions {
    /// The program's name in logs (`"default_program"` when unset).
    pub name: Option<String>,
    /// `sm_XY` or `compute_XY` (`-arch`); the current device's when unset and a GPU is present.
    pub arch: Option<String>,
    /// Relocatable device code, for separate compilation and device linking
    /// (`--relocatable-device-code=true|false`, `-rdc`; NVRTC's default: false).
    pub relocatable_device_code: Option<bool>,
    /// Whole-program compilation that still allows `extern` device symbols resolved by a later link
    /// (`--extensible-whole-program`, added when `Some(true)`; default off).
    pub extensible_whole_program: Option<bool>,
    /// Device debug information, which also turns device optimisation off unless
    /// `device_code_optimize` says otherwise (`--device-debug`, `-G`; NVVM: `-g`; default off).
    pub debug: Option<bool>,
    /// Line-number information for profilers, without full debug info (`--generate-line-info`,
    /// `-lineinfo`; default off).
    pub lineinfo: Option<bool>,
    /// Device code optimisation (`--dopt=on|off`; NVVM: `-opt=3|0`); the compiler's default is on
    /// unless `debug` is set.
    pub device_code_optimize: Option<bool>,
    /// Options passed through to the PTX assembler, one `--ptxas-options=OPT` flag per entry
    /// (e.g. `"-v"`); empty by default.
    pub ptxas_options: Vec<String>,
    /// The most registers a kernel thread may use (`--maxrregcount=N`; at least 1); no limit beyond
    /// the architecture's when unset.
    pub max_register_count: Option<u32>,
    /// Flush single-precision denormals to zero (`--ftz=true|false`; NVVM: `-ftz=1|0`; NVRTC's
    /// default: false, true under `use_fast_math`).
    pub ftz: Option<bool>,
    /// IEEE round-to-nearest single-precision square root (`--prec-sqrt=true|false`; NVVM:
    /// `-prec-sqrt=1|0`; default true, false under `use_fast_math`).
    pub prec_sqrt: Option<bool>,
    /// IEEE round-to-nearest single-precision division and reciprocal (`--prec-div=true|false`;
    /// NVVM: `-prec-div=1|0`; default true, false under `use_fast_math`).
    pub prec_div: Option<bool>,
    /// Contract multiplies and adds into fused multiply-adds (`--fmad=true|false`; NVVM:
    /// `-fma=1|0`; default true).
    pub fma: Option<bool>,
    /// Fast, less precise math: implies `ftz`, no `prec_div`/`prec_sqrt` and `fma`, and maps math
    /// functions to their intrinsics (`--use_fast_math`; default off).
    pub use_fast_math: Option<bool>,
    /// More aggressive vectorisation of device code (`--extra-device-vectorization`; default off).
    pub extra_device_vectorization: Option<bool>,
    /// Generate LTO-IR (`-dlto`); the `ltoir` target turns it on when unset.
    pub link_time_optimization: Option<bool>,
    /// Run the optimiser before emitting LTO-IR (`--gen-opt-lto`; default off; only meaningful with
    /// `link_time_optimization`).
    pub gen_opt_lto: Option<bool>,
    /// `NAME` or `NAME=VALUE` definitions.
    pub define_macro: Vec<(String, Option<String>)>,
    /// Macros to undefine, one `--undefine-macro=NAME` flag per entry; empty by default.
    pub undefine_macro: Vec<String>,
    /// Directories searched for `#include` files, one `--include-path=DIR` (`-I`) flag per entry;
    /// empty by default.
    pub include_path: Vec<String>,
    /// Headers included before the source, one `--pre-include=FILE` flag per entry; empty by
    /// default.
    pub pre_include: Vec<String>,
    /// Do not search the source's own directory for `#include "..."` files
    /// (`--no-source-include`; default off).
    pub no_source_include: Option<bool>,
    /// `c++03`, `c++11`, `c++14`, `c++17` or `c++20`.
    pub std: Option<String>,
    /// Provide `std::move` and `std::forward` as builtins (`--builtin-move-forward=true|false`;
    /// default true).
    pub builtin_move_forward: Option<bool>,
    /// Provide `std::initializer_list` as a builtin (`--builtin-initializer-list=true|false`;
    /// default true).
    pub builtin_initializer_list: Option<bool>,
    /// Suppress all warnings (`--disable-warnings`, `-w`; default off).
    pub disable_warnings: Option<bool>,
    /// Treat every kernel pointer parameter as `__restrict__` (`--restrict`; default off).
    pub restrict: Option<bool>,
    /// Treat functions and variables without an execution-space annotation as `__device__`
    /// (`--device-as-default-execution-space`; default off).
    pub device_as_default_execution_space: Option<bool>,
    /// Allow the `__int128` type in device code (`--device-int128`; default off).
    pub device_int128: Option<bool>,
    /// Allow the `__float128` and `_Float128` types in device code (`--device-float128`; default
    /// off; needs a recent NVRTC and architecture).
    pub device_float128: Option<bool>,
    /// Report optimisation remarks of this kind, e.g. `"inline"` (`--optimization-info=KIND`); none
    /// when unset.
    pub optimization_info: Option<String>,
    /// Leave diagnostic numbers out of messages (`--no-display-error-number`; default off).
    pub no_display_error_number: Option<bool>,
    /// Diagnostic numbers to raise to errors (`--diag-error=N,...`); empty by default.
    pub diag_error: Vec<u32>,
    /// Diagnostic numbers to suppress (`--diag-suppress=N,...`); empty by default.
    pub diag_suppress: Vec<u32>,
    /// Diagnostic numbers to lower to warnings (`--diag-warn=N,...`); empty by default.
    pub diag_warn: Vec<u32>,
    /// Shorter diagnostics, without the source line (`--brief-diagnostics=true|false`; default
    /// false).
    pub brief_diagnostics: Option<bool>,
    /// Write compile timings to this file (a side effect: such compiles are never cached).
    pub time: Option<String>,
    /// The most threads the optimiser may use (`--split-compile=N`; 0 means one per CPU); one when
    /// unset.
    pub split_compile: Option<u32>,
    /// Check syntax only and produce no code (`--fdevice-syntax-only`; default off; cannot be
    /// combined with `link_time_optimization`).
    pub fdevice_syntax_only: Option<bool>,
    /// Omit some implicitly included headers and language features to compile small programs faster
    /// (`--minimal`; default off).
    pub minimal: Option<bool>,
    /// Turn off NVRTC's own cache of generated code (`--no-cache`; default off). This crate's
    /// [`ProgramCache`](crate::ProgramCache) is separate.
    pub no_cache: Option<bool>,
    /// Write a time trace to this file (a side effect: never cached).
    pub fdevice_time_trace: Option<String>,
    /// Seed of the generator NVRTC uses for unique names, for reproducible output
    /// (`--frandom-seed=SEED`).
    pub frandom_seed: Option<String>,
    /// `0`, `min`, `mid` or `max`.
    pub ofast_compile: Option<String>,
    /// Create and use precompiled headers automatically (`--pch`; default off; not with `create_pch`
    /// or `use_pch`).
    pub pch: Option<bool>,
    /// Create a precompiled header at this path (a side effect: never cached).
    pub create_pch: Option<String>,
    /// Use the precompiled header at this path (`--use-pch=FILE`; not with `create_pch`).
    pub use_pch: Option<String>,
    /// The directory automatic precompiled headers are read from and written to
    /// (`--pch-dir=DIR`).
    pub pch_dir: Option<String>,
    /// Explain why a precompiled header could not be created or used
    /// (`--pch-verbose=true|false`).
    pub pch_verbose: Option<bool>,
    /// Report when a precompiled header is created or used (`--pch-messages=true|false`; default
    /// true).
    pub pch_messages: Option<bool>,
    /// Instantiate templates while creating a precompiled header
    /// (`--instantiate-templates-in-pch=true|false`; default true).
    pub instantiate_templates_in_pch: Option<bool>,
    /// NVVM only: more modules to add, as `(name, NVVM IR text or bitcode)`.
    pub extra_sources: Vec<(String, Vec<u8>)>,
    /// NVVM only: link `libdevice.10.bc` (found by `cuda-pathfinder`).
    pub use_libdevice: Option<bool>,
    /// Numba's debug-information flavour (`--numba-debug`; NVVM: `-numba-debug`; default off).
    pub numba_debug: Option<bool>,
}

fn on_off(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

fn valid_arch(arch: &str) -> bool {
    let digits = |s: &str| {
        let s = s.strip_suffix(['a', 'f']).unwrap_or(s);
        !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
    };
    arch.strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))
        .is_some_and(digits)
}

impl ProgramOptions {
    /// The flags given to NVRTC, in field order; errors for values no compiler accepts and for
    /// NVVM-only options.
    pub fn nvrtc_flags(&self) -> Result<Vec<String>> {
        self.validate()?;
        if !self.extra_sources.is_empty() || self.use_libdevice.is_some() {
            return Err(CudaError::InvalidArgument(
                "ProgramOptions: extra_sources and use_libdevice apply to NVVM IR programs only".into(),
            ));
        }
        let mut f = Vec::new();
        let flag = |f: &mut Vec<String>, on: Option<bool>, name: &str| {
            if on == Some(true) {
                f.push(name.to_string());
            }
        };
        let boolean = |f: &mut Vec<String>, v: Option<bool>, name: &str| {
            if let Some(v) = v {
                f.push(format!("{name}={}", on_off(v)));
            }
        };
        if let Some(arch) = &self.arch {
            f.push(format!("-arch={arch}"));
        }
        boolean(&mut f, self.relocatable_device_code, "--relocatable-device-code");
        flag(&mut f, self.extensible_whole_program, "--extensible-whole-program");
        flag(&mut f, self.debug, "--device-debug");
        flag(&mut f, self.lineinfo, "--generate-line-info");
        if let Some(v) = self.device_code_optimize {
            f.push(format!("--dopt={}", if v { "on" } else { "off" }));
        }
        for o in &self.ptxas_options {
            f.push(format!("--ptxas-options={o}"));
        }
        if let Some(n) = self.max_register_count {
            f.push(format!("--maxrregcount={n}"));
        }
        boolean(&mut f, self.ftz, "--ftz");
        boolean(&mut f, self.prec_sqrt, "--prec-sqrt");
        boolean(&mut f, self.prec_div, "--prec-div");
        boolean(&mut f, self.fma, "--fmad");
        flag(&mut f, self.use_fast_math, "--use_fast_math");
        flag(&mut f, self.extra_device_vectorization, "--extra-device-vectorization");
        flag(&mut f, self.link_time_optimization, "--dlink-time-opt");
        flag(&mut f, self.gen_opt_lto, "--gen-opt-lto");
        for (name, value) in &self.define_macro {
            f.push(match value {
                Some(v) => format!("--define-macro={name}={v}"),
                None => format!("--define-macro={name}"),
            });
        }
        for m in &self.undefine_macro {
            f.push(format!("--undefine-macro={m}"));
        }
        for p in &self.include_path {
            f.push(format!("--include-path={p}"));
        }
        for p in &self.pre_include {
            f.push(format!("--pre-include={p}"));
        }
        flag(&mut f, self.no_source_include, "--no-source-include");
        if let Some(s) = &self.std {
            f.push(format!("--std={s}"));
        }
        boolean(&mut f, self.builtin_move_forward, "--builtin-move-forward");
        boolean(&mut f, self.builtin_initializer_list, "--builtin-initializer-list");
        flag(&mut f, self.disable_warnings, "--disable-warnings");
        flag(&mut f, self.restrict, "--restrict");
        flag(
            &mut f,
            self.device_as_default_execution_space,
            "--device-as-default-execution-space",
        );
        flag(&mut f, self.device_int128, "--device-int128");
        flag(&mut f, self.device_float128, "--device-float128");
        if let Some(k) = &self.optimization_info {
            f.push(format!("--optimization-info={k}"));
        }
        flag(&mut f, self.no_display_error_number, "--no-display-error-number");
        for (list, name) in [
            (&self.diag_error, "--diag-error"),
            (&self.diag_suppress, "--diag-suppress"),
            (&self.diag_warn, "--diag-warn"),
        ] {
            if !list.is_empty() {
                let numbers: Vec<String> = list.iter().map(u32::to_string).collect();
                f.push(format!("{name}={}", numbers.join(",")));
            }
        }
        boolean(&mut f, self.brief_diagnostics, "--brief-diagnostics");
        if let Some(t) = &self.time {
            f.push(format!("--time={t}"));
        }
        if let Some(n) = self.split_compile {
            f.push(format!("--split-compile={n}"));
        }
        flag(&mut f, self.fdevice_syntax_only, "--fdevice-syntax-only");
        flag(&mut f, self.minimal, "--minimal");
        flag(&mut f, self.no_cache, "--no-cache");
        if let Some(t) = &self.fdevice_time_trace {
            f.push(format!("--fdevice-time-trace={t}"));
        }
        if let Some(s) = &self.frandom_seed {
            f.push(format!("--frandom-seed={s}"));
        }
        if let Some(o) = &self.ofast_compile {
            f.push(format!("--Ofast-compile={o}"));
        }
        flag(&mut f, self.pch, "--pch");
        if let Some(p) = &self.create_pch {
            f.push(format!("--create-pch={p}"));
        }
        if let Some(p) = &self.use_pch {
            f.push(format!("--use-pch={p}"));
        }
        if let Some(p) = &self.pch_dir {
            f.push(format!("--pch-dir={p}"));
        }
        boolean(&mut f, self.pch_verbose, "--pch-verbose");
        boolean(&mut f, self.pch_messages, "--pch-messages");
        boolean(
            &mut f,
            self.instantiate_templates_in_pch,
            "--instantiate-templates-in-pch",
        );
        flag(&mut f, self.numba_debug, "--numba-debug");
        Ok(f)
    }

    /// The flags given to libNVVM for `target` (`"ptx"` or `"ltoir"`). NVVM takes the arch, debug,
    /// optimisation and floating-point options; any other option set is an error.
    pub fn nvvm_flags(&self, target: &str) -> Result<Vec<String>> {
        self.validate()?;
        let supported = ProgramOptions {
            name: self.name.clone(),
            arch: self.arch.clone(),
            debug: self.debug,
            device_code_optimize: self.device_code_optimize,
            ftz: self.ftz,
            prec_sqrt: self.prec_sqrt,
            prec_div: self.prec_div,
            fma: self.fma,
            link_time_optimization: self.link_time_optimization,
            extra_sources: self.extra_sources.clone(),
            use_libdevice: self.use_libdevice,
            numba_debug: self.numba_debug,
            ..Default::default()
        };
        if &supported != self {
            return Err(CudaError::InvalidArgument(
                "ProgramOptions: the NVVM backend takes only arch, debug, device_code_optimize, ftz, prec_sqrt, \
                 prec_div, fma, link_time_optimization, extra_sources, use_libdevice and numba_debug"
                    .into(),
            ));
        }
        let mut f = Vec::new();
        if let Some(arch) = &self.arch {
            let digits = arch.trim_start_matches("sm_").trim_start_matches("compute_");
            f.push(format!("-arch=compute_{digits}"));
        }
        if self.debug == Some(true) {
            f.push("-g".into());
        }
        match self.device_code_optimize {
            Some(false) => f.push("-opt=0".into()),
            Some(true) => f.push("-opt=3".into()),
            None => {}
        }
        for (v, name) in [
            (self.ftz, "-ftz"),
            (self.prec_sqrt, "-prec-sqrt"),
            (self.prec_div, "-prec-div"),
            (self.fma, "-fma"),
        ] {
            if let Some(v) = v {
                f.push(format!("{name}={}", u8::from(v)));
            }
        }
        if target == "ltoir" {
            f.push("-gen-lto".into());
        }
        if self.numba_debug == Some(true) {
            f.push("-numba-debug".into());
        }
        Ok(f)
    }

    /// Rejects values no backend accepts, strings with a NUL byte (which no C string can hold),
    /// and combinations that contradict themselves.
    pub fn validate(&self) -> Result<()> {
        self.check_no_nul()?;
        let bad = |m: String| Err(CudaError::InvalidArgument(format!("ProgramOptions: {m}")));
        if let Some(arch) = &self.arch {
            if !valid_arch(arch) {
                return bad(format!(
                    "arch {arch:?} is not of the form sm_XY or compute_XY (sm_90, sm_90a, compute_80)"
                ));
            }
        }
        if self.max_register_count == Some(0) {
            return bad("max_register_count must be at least 1".into());
        }
        if let Some(std) = &self.std {
            if !["c++03", "c++11", "c++14", "c++17", "c++20"].contains(&std.as_str()) {
                return bad(format!("std {std:?} is not one of c++03, c++11, c++14, c++17, c++20"));
            }
        }
        if let Some(o) = &self.ofast_compile {
            if !["0", "min", "mid", "max"].contains(&o.as_str()) {
                return bad(format!("ofast_compile {o:?} is not one of 0, min, mid, max"));
            }
        }
        if self.create_pch.is_some() && self.use_pch.is_some() {
            return bad("create_pch and use_pch cannot both be set".into());
        }
        if self.pch == Some(true) && (self.create_pch.is_some() || self.use_pch.is_some()) {
            return bad("pch (automatic) cannot be combined with create_pch or use_pch".into());
        }
        if self.fdevice_syntax_only == Some(true) && self.link_time_optimization == Some(true) {
            return bad(
                "fdevice_syntax_only produces no code, so link_time_optimization makes no sense with it".into(),
            );
        }
        for (name, _) in &self.define_macro {
            if name.is_empty() || name.contains(['=', ' ']) {
                return bad(format!("define_macro name {name:?} must be a plain identifier"));
            }
        }
        Ok(())
    }

    /// Errors for the first string option (flag value, macro, path, module name) that contains a
    /// NUL byte, naming it.
    fn check_no_nul(&self) -> Result<()> {
        check_fields_no_nul(
            "ProgramOptions",
            &[
                ("name", &self.name),
                ("arch", &self.arch),
                ("std", &self.std),
                ("optimization_info", &self.optimization_info),
                ("time", &self.time),
                ("fdevice_time_trace", &self.fdevice_time_trace),
                ("frandom_seed", &self.frandom_seed),
                ("ofast_compile", &self.ofast_compile),
                ("create_pch", &self.create_pch),
                ("use_pch", &self.use_pch),
                ("pch_dir", &self.pch_dir),
            ],
            &[
                ("ptxas_options entry", &self.ptxas_options),
                ("undefine_macro entry", &self.undefine_macro),
                ("include_path entry", &self.include_path),
                ("pre_include entry", &self.pre_include),
            ],
        )?;
        for (name, value) in &self.define_macro {
            check_no_nul(name, "ProgramOptions: define_macro name")?;
            if let Some(value) = value {
                check_no_nul(value, &format!("ProgramOptions: the value of define_macro {name}"))?;
            }
        }
        for (module, _) in &self.extra_sources {
            check_no_nul(module, "ProgramOptions: extra_sources module name")?;
        }
        Ok(())
    }

    /// The first option that names files outside the program (their contents change what
    /// compiles, and a cache key sees only their names), if any: as `cuda.core`'s
    /// `make_program_cache_key`, which then wants an `extra_digest` of those files.
    pub(crate) fn external_files(&self) -> Option<&'static str> {
        let name_is_a_path = self
            .name
            .as_deref()
            .is_some_and(|n| n.contains('/') || n.contains('\\'));
        if !self.include_path.is_empty() {
            Some("include_path")
        } else if !self.pre_include.is_empty() {
            Some("pre_include")
        } else if self.use_pch.is_some() {
            Some("use_pch")
        } else if self.pch == Some(true) {
            Some("pch")
        } else if self.pch_dir.is_some() {
            Some("pch_dir")
        } else if self.use_libdevice == Some(true) {
            Some("use_libdevice")
        } else if name_is_a_path {
            Some("name (a path: includes are found next to it)")
        } else {
            None
        }
    }

    /// Options whose effect goes beyond the compiled code (files written), which make a compile
    /// unfit for caching.
    pub(crate) fn side_effects(&self) -> Option<&'static str> {
        if self.create_pch.is_some() {
            Some("create_pch")
        } else if self.time.is_some() {
            Some("time")
        } else if self.fdevice_time_trace.is_some() {
            Some("fdevice_time_trace")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests;
