//! [`LinkerOptions`] and [`LinkerBackend`]: what a link is asked for, as nvJitLink flags.

use crate::compile::ffi::check_fields_no_nul;
use crate::{CudaError, Result};
use serde::{Deserialize, Serialize};

/// Options of a [`Linker`](super::Linker), named as in `cuda.core`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkerOptions {
    /// The name of the linked code (`"<default linker>"` when unset).
    pub name: Option<String>,
    /// `sm_XY` (required: the current device's when unset and a GPU is present).
    pub arch: Option<String>,
    /// The most registers a kernel thread may use (`-maxrregcount=N`; driver:
    /// `CU_JIT_MAX_REGISTERS`; at least 1); the architecture's limit when unset.
    pub max_register_count: Option<u32>,
    /// Print timing information to the info log (`-time`; nvJitLink only; default off).
    pub time: Option<bool>,
    /// Verbose output in the info log (`-verbose`; driver: `CU_JIT_LOG_VERBOSE`; default off).
    pub verbose: Option<bool>,
    /// Link LTO-IR (`-lto`; nvJitLink only; default off).
    pub link_time_optimization: Option<bool>,
    /// Produce PTX instead of a cubin (needs `link_time_optimization`; nvJitLink only).
    pub ptx: Option<bool>,
    /// The optimisation level, 0 to 3 (`-O<n>`; driver: `CU_JIT_OPTIMIZATION_LEVEL`); the
    /// linker's default (3) when unset.
    pub optimization_level: Option<u32>,
    /// Generate debug information (`-g`; driver: `CU_JIT_GENERATE_DEBUG_INFO`; default off).
    pub debug: Option<bool>,
    /// Generate line-number information (`-lineinfo`; driver: `CU_JIT_GENERATE_LINE_INFO`;
    /// default off).
    pub lineinfo: Option<bool>,
    /// Flush single-precision denormals to zero in LTO code (`-ftz`; nvJitLink only, ignored with a
    /// warning by the driver linker; default false).
    pub ftz: Option<bool>,
    /// IEEE round-to-nearest single-precision division in LTO code (`-prec-div`; nvJitLink only;
    /// default true).
    pub prec_div: Option<bool>,
    /// IEEE round-to-nearest single-precision square root in LTO code (`-prec-sqrt`; nvJitLink
    /// only; default true).
    pub prec_sqrt: Option<bool>,
    /// Contract multiplies and adds into fused multiply-adds in LTO code (`-fma`; nvJitLink only;
    /// default true).
    pub fma: Option<bool>,
    /// Kernels known to be used, so LTO may drop the others (one `-kernels-used=NAME` per entry;
    /// nvJitLink only); empty by default.
    pub kernels_used: Vec<String>,
    /// Variables known to be used, so LTO may drop the others (one `-variables-used=NAME` per
    /// entry; nvJitLink only); empty by default.
    pub variables_used: Vec<String>,
    /// Let LTO drop device variables it finds unused (`-optimize-unused-variables`; nvJitLink
    /// only; default off).
    pub optimize_unused_variables: Option<bool>,
    /// Options passed through to the PTX assembler, one `-Xptxas=OPT` per entry (nvJitLink only);
    /// empty by default.
    pub ptxas_options: Vec<String>,
    /// The most threads optimisation may use (`-split-compile=N`; 0 means one per CPU; nvJitLink
    /// only).
    pub split_compile: Option<u32>,
    /// The most threads the extended (more aggressive) split compilation may use
    /// (`-split-compile-extended=N`; nvJitLink only).
    pub split_compile_extended: Option<u32>,
    /// Do not cache the link's output (`-no-cache`; driver: `CU_JIT_CACHE_MODE` none; default
    /// off).
    pub no_cache: Option<bool>,
    /// Incremental (relocatable) linking, nvJitLink's `-r` (nvJitLink 13.2+): the result may
    /// keep unresolved device references for a later link, as a cubin or (with
    /// `link_time_optimization`, nvJitLink 13.3+) as LTO-IR to link again.
    pub incremental: Option<bool>,
    /// Accepted for `cuda.core` compatibility and ignored with a warning (when set at all):
    /// no linking backend has a Numba debug option.
    pub numba_debug: Option<bool>,
}

impl LinkerOptions {
    /// The nvJitLink flags for these options.
    pub fn nvjitlink_flags(&self) -> Result<Vec<String>> {
        self.validate()?;
        let mut f = Vec::new();
        // nvJitLink takes `true`/`false` for the floating-point flags (as cuda.core writes them),
        // but with LTO it hands them to libNVVM, which takes only `1`/`0` ("-fma=false is an
        // unsupported option").
        let lto = self.link_time_optimization == Some(true);
        let tf = |v: bool| match (lto, v) {
            (false, true) => "true",
            (false, false) => "false",
            (true, true) => "1",
            (true, false) => "0",
        };
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
        if self.incremental == Some(true) {
            f.push("-r".into());
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
        if self.incremental == Some(true) && self.ptx == Some(true) {
            return bad("incremental and ptx output options cannot be used together".into());
        }
        Ok(())
    }

    /// The first option set that the driver's linker cannot do (`cuda.core` raises
    /// `ValueError` for these on the driver path; LTO is refused as well, the driver's LTO being
    /// deprecated and gone from current drivers).
    pub(super) fn needs_nvjitlink(&self) -> Option<&'static str> {
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
        } else if self.incremental == Some(true) {
            Some("incremental")
        } else {
            None
        }
    }

    /// The options set that the driver's linker ignores (`cuda.core` warns with a
    /// `DeprecationWarning` on the driver path and goes on without them), each with what is
    /// said about it.
    pub(super) fn driver_ignores(&self) -> Vec<&'static str> {
        let mut ignored = Vec::new();
        for (set, name) in [
            (self.ftz.is_some(), "ftz"),
            (self.prec_div.is_some(), "prec_div"),
            (self.prec_sqrt.is_some(), "prec_sqrt"),
            (self.fma.is_some(), "fma"),
            (!self.kernels_used.is_empty(), "kernels_used"),
            (!self.variables_used.is_empty(), "variables_used"),
            (self.optimize_unused_variables.is_some(), "optimize_unused_variables"),
        ] {
            if set {
                ignored.push(name);
            }
        }
        ignored
    }
}

/// Which linker does the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkerBackend {
    /// nvJitLink (12.3 or newer, of the driver's major version).
    NvJitLink,
    /// The driver's `cuLink*` (no LTO, fewer options).
    Driver,
}

/// The handle of a [`Linker`](super::Linker) (`cuda.core`'s `Linker.handle`), by backend. It is
/// valid while the linker lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkerHandle {
    /// An `nvJitLinkHandle`.
    NvJitLink(cuda_sys::nvjitlink::nvJitLinkHandle),
    /// A `CUlinkState`.
    Driver(cuda_sys::driver::CUlinkState),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvjitlink_flags_are_written_as_cuda_core_writes_them() {
        let options = LinkerOptions {
            arch: Some("sm_80".into()),
            debug: Some(true),
            ftz: Some(true),
            max_register_count: Some(32),
            ..Default::default()
        };
        let flags = options.nvjitlink_flags().unwrap();
        for want in ["-arch=sm_80", "-g", "-ftz=true", "-maxrregcount=32"] {
            assert!(flags.iter().any(|f| f == want), "{want} missing from {flags:?}");
        }
    }

    #[test]
    fn incremental_is_dash_r_and_refused_with_ptx_output() {
        let mut options = LinkerOptions {
            arch: Some("sm_90".into()),
            incremental: Some(true),
            ..Default::default()
        };
        assert_eq!(
            options.nvjitlink_flags().unwrap().iter().filter(|f| *f == "-r").count(),
            1
        );
        options.incremental = Some(false);
        assert!(!options.nvjitlink_flags().unwrap().iter().any(|f| f == "-r"));
        options.incremental = None;
        assert!(!options.nvjitlink_flags().unwrap().iter().any(|f| f == "-r"));
        let both = LinkerOptions {
            incremental: Some(true),
            link_time_optimization: Some(true),
            ptx: Some(true),
            ..options
        };
        let err = both.validate().unwrap_err().to_string();
        assert!(
            err.contains("incremental and ptx output options cannot be used together"),
            "{err}"
        );
    }

    #[test]
    fn numba_debug_reaches_no_backend() {
        let options = LinkerOptions {
            arch: Some("sm_80".into()),
            debug: Some(true),
            numba_debug: Some(true),
            ..Default::default()
        };
        assert_eq!(options.nvjitlink_flags().unwrap(), ["-arch=sm_80", "-g"]);
        assert_eq!(options.needs_nvjitlink(), None);
        assert!(options.driver_ignores().is_empty());
    }

    #[test]
    fn the_driver_path_ignores_what_cuda_core_deprecates_and_refuses_the_rest() {
        let deprecated = LinkerOptions {
            ftz: Some(true),
            fma: Some(false),
            kernels_used: vec!["k".into()],
            optimize_unused_variables: Some(true),
            ..Default::default()
        };
        assert_eq!(deprecated.needs_nvjitlink(), None);
        assert_eq!(
            deprecated.driver_ignores(),
            ["ftz", "fma", "kernels_used", "optimize_unused_variables"]
        );
        for (options, name) in [
            (
                LinkerOptions {
                    time: Some(true),
                    ..Default::default()
                },
                "time",
            ),
            (
                LinkerOptions {
                    ptxas_options: vec!["-v".into()],
                    ..Default::default()
                },
                "ptxas_options",
            ),
            (
                LinkerOptions {
                    split_compile: Some(0),
                    ..Default::default()
                },
                "split_compile",
            ),
            (
                LinkerOptions {
                    incremental: Some(true),
                    ..Default::default()
                },
                "incremental",
            ),
        ] {
            assert_eq!(options.needs_nvjitlink(), Some(name));
        }
    }

    #[test]
    fn with_lto_the_floating_point_flags_are_numbers_for_libnvvm() {
        let options = LinkerOptions {
            arch: Some("sm_90".into()),
            link_time_optimization: Some(true),
            fma: Some(false),
            prec_div: Some(true),
            ..Default::default()
        };
        let flags = options.nvjitlink_flags().unwrap();
        assert_eq!(flags, ["-arch=sm_90", "-lto", "-prec-div=1", "-fma=0"]);
    }
}
