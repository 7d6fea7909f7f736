//! `cargo xtask bindgen`: generate `crates/cuda-sys/src/generated/` from the vendored headers.
//!
//! bindgen produces the types, constants and function declarations; this module then replaces
//! every `extern "C"` declaration with a shim that calls through a function pointer resolved at
//! run time (see `crates/cuda-sys/src/loader.rs`), and writes the tables the loader needs:
//!
//! - for the driver, each function's base name and the CUDA versions to ask `cuGetProcAddress_v2`
//!   for, worked out from the `PFN_<name>_v<NNNNN>` typedefs of `cudaTypedefs.h` (and of the
//!   profiler and graphics interop typedef headers: `cudaGLTypedefs.h`, `cudaEGLTypedefs.h`,
//!   `cudaVDPAUTypedefs.h`; the rule is written down in `docs/architecture.md`, "Resolving driver
//!   functions"); the GL, EGL and VDPAU types the interop headers need come from small stand-ins
//!   ([`GRAPHICS_STAND_INS`]), not from the system's headers;
//! - for the other libraries, the exported symbol of each function (and its per-thread-default-
//!   stream twin for the runtime);
//! - for each status enum, the name and description of every value (from the header comments), so
//!   errors can be printed without loading anything.

use crate::util::{self, Result};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit_mut::VisitMut;

mod headers;
mod loader;
mod safety;
mod stand_ins;
#[cfg(test)]
mod tests;
mod writing;

use headers::*;
use loader::*;
use safety::*;
use stand_ins::*;
use writing::*;

/// How a library's functions are found at run time.
#[derive(Clone, Copy, PartialEq)]
enum Resolve {
    /// `cuGetProcAddress_v2` with a base name and a CUDA version.
    Driver,
    /// `dlsym` of the exported symbol.
    Symbol,
}

struct Lib {
    /// Module and file name under `generated/`.
    module: &'static str,
    /// The `LibraryId` variant in `cuda-sys`.
    id: &'static str,
    /// The library's file name stem, for the SAFETY comments.
    library: &'static str,
    /// Headers included by the wrapper bindgen parses.
    headers: &'static [&'static str],
    /// Items are generated for declarations in these headers (and whatever they need).
    allow_files: &'static [&'static str],
    resolve: Resolve,
    /// The status enum functions return, with the type of its table and how it is named in Rust.
    status: Option<Status>,
}

#[derive(Clone, Copy)]
struct Status {
    /// The type the functions return (`CUresult`).
    ret: &'static str,
    /// The newtype enum bindgen generates for it (`cudaError_enum`).
    enum_type: &'static str,
    /// Prefix stripped when turning a name into a description (`CUDA_ERROR_`).
    prefix: &'static str,
}

const LIBS: &[Lib] = &[
    Lib {
        module: "driver",
        id: "Driver",
        library: "libcuda",
        headers: DRIVER_HEADERS,
        allow_files: DRIVER_HEADERS,
        resolve: Resolve::Driver,
        status: Some(Status {
            ret: "CUresult",
            enum_type: "cudaError_enum",
            prefix: "CUDA_ERROR_",
        }),
    },
    Lib {
        module: "runtime",
        id: "Runtime",
        library: "libcudart",
        headers: &["cuda_runtime_api.h"],
        allow_files: &[
            "cuda_runtime_api.h",
            "driver_types.h",
            "vector_types.h",
            "surface_types.h",
            "texture_types.h",
            "library_types.h",
            "device_types.h",
            "cuda_device_runtime_api.h",
        ],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "cudaError_t",
            enum_type: "cudaError",
            prefix: "cudaError",
        }),
    },
    Lib {
        module: "nvrtc",
        id: "Nvrtc",
        library: "libnvrtc",
        headers: &["nvrtc.h"],
        allow_files: &["nvrtc.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "nvrtcResult",
            enum_type: "nvrtcResult",
            prefix: "NVRTC_ERROR_",
        }),
    },
    Lib {
        module: "nvjitlink",
        id: "NvJitLink",
        library: "libnvJitLink",
        headers: &["nvJitLink.h"],
        allow_files: &["nvJitLink.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "nvJitLinkResult",
            enum_type: "nvJitLinkResult",
            prefix: "NVJITLINK_ERROR_",
        }),
    },
    Lib {
        module: "nvvm",
        id: "Nvvm",
        library: "libnvvm",
        headers: &["nvvm.h"],
        allow_files: &["nvvm.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "nvvmResult",
            enum_type: "nvvmResult",
            prefix: "NVVM_ERROR_",
        }),
    },
    Lib {
        module: "cufile",
        id: "CuFile",
        library: "libcufile",
        headers: &["cufile.h"],
        allow_files: &["cufile.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "CUfileError_t",
            enum_type: "CUfileOpError",
            prefix: "CU_FILE_",
        }),
    },
    Lib {
        module: "nvml",
        id: "Nvml",
        library: "libnvidia-ml",
        headers: &["nvml.h"],
        allow_files: &["nvml.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "nvmlReturn_t",
            enum_type: "nvmlReturn_enum",
            prefix: "NVML_ERROR_",
        }),
    },
    Lib {
        module: "nccl",
        id: "Nccl",
        library: "libnccl",
        headers: &["nccl.h"],
        allow_files: &["nccl.h"],
        resolve: Resolve::Symbol,
        status: Some(Status {
            ret: "ncclResult_t",
            enum_type: "ncclResult_t",
            prefix: "nccl",
        }),
    },
];

/// The headers of the driver module: `cuda.h`, the profiler API and the graphics interop APIs
/// (OpenGL, EGL, VDPAU), each with its `PFN_` typedef header. `cudaVDPAUTypedefs.h` comes before
/// `cudaVDPAU.h`, which uses the VDPAU types without including their header.
const DRIVER_HEADERS: &[&str] = &[
    "cuda.h",
    "cudaTypedefs.h",
    "cudaProfiler.h",
    "cudaProfilerTypedefs.h",
    "cudaGL.h",
    "cudaGLTypedefs.h",
    "cudaEGL.h",
    "cudaEGLTypedefs.h",
    "cudaVDPAUTypedefs.h",
    "cudaVDPAU.h",
];

/// The headers with the `PFN_<name>_v<version>` typedefs of the driver's functions.
const DRIVER_TYPEDEF_HEADERS: &[&str] = &[
    "cudaTypedefs.h",
    "cudaProfilerTypedefs.h",
    "cudaGLTypedefs.h",
    "cudaEGLTypedefs.h",
    "cudaVDPAUTypedefs.h",
];

/// The headers whose `#define cuX cuX_v2` lines give the names users call.
const DRIVER_DECLARING_HEADERS: &[&str] = &["cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"];

const HEADER_LINE: &str = "// generated by `cargo xtask bindgen` from the headers in headers/, do not edit\n";

pub fn run(args: &[String]) -> Result {
    let mut args = args.to_vec();
    let check = util::take_flag(&mut args, "--check");
    util::no_more(&args)?;

    let headers = headers_dir()?;
    let include = headers.join("include");
    write_graphics_stand_ins()?;
    let out_dir = util::root().join("crates/cuda-sys/src/generated");
    let mut outputs: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut mod_rs = String::from(HEADER_LINE);
    mod_rs.push_str(&format!(
        "\n//! Raw bindings generated from `headers/{}`.\n\n",
        headers.file_name().unwrap().to_string_lossy()
    ));
    let mut device_attributes = Vec::new();
    for lib in LIBS {
        let text = generate(lib, &include, &mut device_attributes)?;
        outputs.insert(out_dir.join(format!("{}.rs", lib.module)), text);
        mod_rs.push_str(&format!("pub mod {};\n", lib.module));
    }
    let version = crate::vendor::parse_cuda_version(&util::read(&include.join("cuda.h"))?)?;
    mod_rs.push_str(&format!(
        "\n/// `CUDA_VERSION` of the headers these bindings were generated from.\npub const HEADER_CUDA_VERSION: u32 = {version};\n"
    ));
    outputs.insert(out_dir.join("mod.rs"), mod_rs);
    outputs.insert(
        util::root().join("crates/cuda-core/src/device/generated_properties.rs"),
        device_properties(&device_attributes)?,
    );

    if check {
        let mut stale = Vec::new();
        for (path, text) in &outputs {
            if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.strip_prefix(util::root()).unwrap_or(path).display().to_string());
            }
        }
        let known: BTreeSet<_> = outputs.keys().cloned().collect();
        if let Ok(entries) = std::fs::read_dir(&out_dir) {
            for entry in entries.flatten() {
                if !known.contains(&entry.path()) {
                    stale.push(format!("{} (not generated any more)", entry.path().display()));
                }
            }
        }
        if stale.is_empty() {
            println!("generated bindings are up to date ({} files)", outputs.len());
            Ok(())
        } else {
            Err(format!(
                "the generated bindings differ from what the headers produce:\n  {}\nrun `cargo xtask bindgen` and commit the result",
                stale.join("\n  ")
            ))
        }
    } else {
        // Files nothing generates any more go; files whose text did not change are left alone, so
        // their timestamps do not make cargo rebuild the crates that include them.
        if let Ok(entries) = std::fs::read_dir(&out_dir) {
            for entry in entries.flatten() {
                if !outputs.contains_key(&entry.path()) {
                    let path = entry.path();
                    let removed = if path.is_dir() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    removed.map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
        }
        let mut written = 0;
        for (path, text) in &outputs {
            if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
                util::write(path, text.as_bytes())?;
                written += 1;
            }
        }
        println!(
            "wrote {written} of {} generated files ({} unchanged)",
            outputs.len(),
            outputs.len() - written
        );
        Ok(())
    }
}

/// The newest `headers/cuda-*` folder.
fn headers_dir() -> Result<PathBuf> {
    let dir = util::root().join("headers");
    let mut found: Vec<(u32, u32, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e} (run cargo xtask vendor-headers)", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (major, minor) = name.strip_prefix("cuda-")?.split_once('.')?;
            Some((major.parse().ok()?, minor.parse().ok()?, e.path()))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, _, p)| p)
        .ok_or_else(|| "no headers/cuda-X.Y folder (run cargo xtask vendor-headers)".to_string())
}

fn bindgen_builder(include: &Path, wrapper: &str, allow_files: &[&str]) -> bindgen::Builder {
    let mut builder = bindgen::Builder::default()
        .header_contents("cuda_sys_wrapper.h", wrapper)
        .clang_arg(format!("-I{}", include.display()))
        .clang_arg(format!("-I{}", graphics_stand_ins_dir().display()))
        .clang_arg("-x")
        .clang_arg("c")
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .impl_debug(false)
        .layout_tests(true)
        .generate_comments(true)
        .merge_extern_blocks(true)
        .disable_header_comment()
        .formatter(bindgen::Formatter::None)
        .use_core()
        .ctypes_prefix("::core::ffi");
    for file in allow_files {
        builder = builder.allowlist_file(format!(".*/{}", regex::escape(file)));
    }
    builder
}

fn run_bindgen(builder: bindgen::Builder, what: &str) -> Result<syn::File> {
    // bindgen loads libclang at run time and panics when it cannot find it: that becomes an
    // error that says what to install (the panic's own message is kept, not printed).
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()));
    std::panic::set_hook(previous_hook);
    let bindings = match generated {
        Ok(Ok(bindings)) => bindings,
        Ok(Err(e)) => return Err(format!("bindgen failed on {what}: {e}")),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("bindgen panicked");
            return Err(libclang_missing(what, message));
        }
    };
    syn::parse_file(&bindings.to_string()).map_err(|e| format!("bindgen output for {what} does not parse: {e}"))
}

/// The error for bindgen failing to load libclang (or panicking otherwise) on `what`.
fn libclang_missing(what: &str, message: &str) -> String {
    format!(
        "bindgen could not run on {what}: {message}\n\
         bindgen needs libclang, the shared library libclang.so (libclang-cpp alone does not do).\n\
         Install it (Debian/Ubuntu: apt-get install libclang-dev; Fedora: dnf install clang-libs) or set \
         LIBCLANG_PATH to the folder that holds libclang.so. .ci/run installs it when it is missing."
    )
}

/// One function to bind.
struct Function {
    /// The name users call (`cuMemAlloc`).
    name: String,
    /// The name the header declares after its macros (`cuMemAlloc_v2`), exported under this name too.
    declared: String,
    /// The exported symbol (`dlsym` libraries) or the base name for `cuGetProcAddress_v2` (driver).
    symbol: String,
    /// Per-thread default stream symbol (runtime) when it has one.
    ptds_symbol: Option<String>,
    /// Driver only: the version to ask `cuGetProcAddress_v2` for, the oldest version that serves the
    /// same signature, and the version of the per-thread-default-stream variant (0 if none).
    version: u32,
    min_version: u32,
    ptds_version: u32,
    /// Whether the symbol may carry a `__name_MAJOR_MINOR` version tag (nvJitLink).
    versioned: bool,
    /// Driver only: the header with the function's `PFN_` typedefs (`cudaTypedefs.h`).
    typedefs: &'static str,
    attrs: Vec<syn::Attribute>,
    inputs: Vec<(syn::Ident, syn::Type)>,
    output: Option<syn::Type>,
}

fn generate(lib: &Lib, include: &Path, device_attributes: &mut Vec<(String, String)>) -> Result<String> {
    let wrapper: String = lib.headers.iter().map(|h| format!("#include <{h}>\n")).collect();
    let mut file = run_bindgen(bindgen_builder(include, &wrapper, lib.allow_files), lib.module)?;

    for item in &mut file.items {
        tidy_docs(item);
    }
    // Pull the function declarations out; everything else stays as bindgen wrote it.
    let mut declared = Vec::new();
    file.items.retain_mut(|item| {
        if let syn::Item::ForeignMod(foreign) = item {
            foreign.items.retain(|fi| {
                if let syn::ForeignItem::Fn(f) = fi {
                    declared.push(f.clone());
                    false
                } else {
                    true
                }
            });
            !foreign.items.is_empty()
        } else {
            true
        }
    });
    let header_files: Vec<(&str, String)> = lib
        .headers
        .iter()
        .chain(lib.allow_files.iter())
        .filter_map(|h| Some((*h, std::fs::read_to_string(include.join(h)).ok()?)))
        .collect();
    let header_texts: Vec<String> = header_files.iter().map(|(_, text)| text.clone()).collect();
    let mut functions = match lib.resolve {
        Resolve::Driver => driver_functions(include, &file, declared)?,
        Resolve::Symbol => symbol_functions(&header_texts, declared)?,
    };
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    let mut names = BTreeSet::new();
    for f in &functions {
        if !names.insert(f.name.clone()) {
            return Err(format!("{}: two functions are named {}", lib.module, f.name));
        }
    }

    let status_table = match lib.status {
        Some(status) => status_values(&file, status)?,
        None => Vec::new(),
    };
    if lib.module == "driver" {
        *device_attributes = enum_constants(&file, "CUdevice_attribute_enum");
    }

    document_default_impls(lib.module, &mut file)?;

    let mut tokens = TokenStream::new();
    for item in &file.items {
        tokens.extend(quote!(#item));
    }
    tokens.extend(loader_items(lib, &functions));
    for f in &functions {
        // The header that declares the function, for the SAFETY comments and `# Safety` docs: the
        // first with the name and a `(` on a line that is not part of a comment.
        let call = regex::Regex::new(&format!(r"(?m)^[ \t]*[^\s*/].*\b{}\s*\(", regex::escape(&f.declared))).unwrap();
        let header = header_files
            .iter()
            .find(|(_, text)| call.is_match(text))
            .map_or(lib.headers[0], |(name, _)| *name);
        tokens.extend(shim(
            lib,
            f,
            functions.iter().position(|g| g.name == f.name).unwrap(),
            header,
        ));
    }
    if let Some(status) = lib.status {
        tokens.extend(status_items(status, &status_table));
    }

    let file: syn::File =
        syn::parse2(tokens).map_err(|e| format!("{}: generated code does not parse: {e}", lib.module))?;
    check_unsafe_documented(lib.module, &file)?;
    let mut text = String::from(HEADER_LINE);
    text.push_str(
        "#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, unused_imports)]\n#![allow(clippy::all, rustdoc::all, unknown_lints, unpredictable_function_pointer_comparisons)]\n",
    );
    text.push_str(&expand_safety_markers(&prettyplease::unparse(&file))?);
    Ok(text)
}
