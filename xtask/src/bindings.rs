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

/// Stand-ins for the graphics API headers the interop headers include
/// (`crate::vendor::GRAPHICS_API_HEADERS`), which no NVIDIA wheel ships: only the types the
/// bindings use, with the size and calling convention the real headers give them, so that
/// generating (and checking) the bindings needs no GL, EGL or VDPAU headers on the machine. They
/// are written to `target/xtask/graphics-stand-ins/` and searched before any system folder.
pub const GRAPHICS_STAND_INS: &[(&str, &str)] = &[
    (
        "GL/gl.h",
        "/* Stand-in for <GL/gl.h> (written by cargo xtask bindgen): the types cudaGL.h uses. */\n\
         #ifndef __gl_h_\n#define __gl_h_\n\
         typedef unsigned int GLenum;\n\
         typedef unsigned int GLuint;\n\
         #endif\n",
    ),
    (
        "EGL/egl.h",
        "/* Stand-in for <EGL/egl.h> (written by cargo xtask bindgen): the types cudaEGL.h uses. */\n\
         #ifndef __egl_h_\n#define __egl_h_\n\
         #include <stdint.h>\n\
         typedef int32_t EGLint; /* khronos_int32_t */\n\
         #endif\n",
    ),
    (
        "EGL/eglext.h",
        "/* Stand-in for <EGL/eglext.h> (written by cargo xtask bindgen): the types cudaEGL.h uses. */\n\
         #ifndef __eglext_h_\n#define __eglext_h_\n\
         typedef void *EGLImageKHR;\n\
         typedef void *EGLStreamKHR;\n\
         typedef void *EGLSyncKHR;\n\
         #endif\n",
    ),
    (
        "vdpau/vdpau.h",
        "/* Stand-in for <vdpau/vdpau.h> (written by cargo xtask bindgen): the types cudaVDPAU.h uses. */\n\
         #ifndef _VDPAU_H\n#define _VDPAU_H\n\
         #include <stdint.h>\n\
         typedef uint32_t VdpDevice;\n\
         typedef uint32_t VdpVideoSurface;\n\
         typedef uint32_t VdpOutputSurface;\n\
         typedef uint32_t VdpFuncId;\n\
         /* an enum of non-negative values in vdpau.h: passed as an unsigned int */\n\
         typedef unsigned int VdpStatus;\n\
         typedef VdpStatus VdpGetProcAddress(VdpDevice device, VdpFuncId function_id, void **function_pointer);\n\
         #endif\n",
    ),
];

/// The folder [`write_graphics_stand_ins`] fills, searched by every bindgen run.
fn graphics_stand_ins_dir() -> PathBuf {
    util::root().join("target/xtask/graphics-stand-ins")
}

/// Writes [`GRAPHICS_STAND_INS`] into [`graphics_stand_ins_dir`].
fn write_graphics_stand_ins() -> Result {
    let dir = graphics_stand_ins_dir();
    for (name, text) in GRAPHICS_STAND_INS {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            util::write(&path, text.as_bytes())?;
        }
    }
    Ok(())
}

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

// ---------------------------------------------------------------------------------------------
// The driver: base names and versions from cudaTypedefs.h

/// One `PFN_<base>_v<version>[_ptds|_ptsz]` typedef.
struct Pfn {
    version: u32,
    ptds: bool,
    signature: String,
}

fn driver_functions(include: &Path, main: &syn::File, declared: Vec<syn::ForeignItemFn>) -> Result<Vec<Function>> {
    // A second parse sees every PFN typedef, the ones the typedef headers keep behind
    // __CUDA_API_VERSION_INTERNAL included (older ABIs, needed to know where a signature changed).
    let mut typedef_texts = Vec::new();
    let mut internal = String::new();
    for header in DRIVER_TYPEDEF_HEADERS {
        let text = util::read(&include.join(header))?;
        // cudaTypedefs.h and the GL and VDPAU ones have such a block; the others need none.
        if *header == "cudaTypedefs.h" || text.contains(INTERNAL_BLOCK) {
            internal.push_str(&internal_typedefs(header, &text)?);
            internal.push('\n');
        }
        typedef_texts.push((*header, text));
    }
    let legacy = legacy_declarations(&util::read(&include.join("cuda.h"))?)?;
    let includes: String = DRIVER_TYPEDEF_HEADERS
        .iter()
        .map(|h| format!("#include <{h}>\n"))
        .collect();
    let wrapper = format!("{includes}{legacy}\n{internal}");
    let mut analysis_files = DRIVER_HEADERS.to_vec();
    analysis_files.push("cuda_sys_wrapper.h");
    let analysis = run_bindgen(bindgen_builder(include, &wrapper, &analysis_files), "driver typedefs")?;

    let mut aliases: HashMap<String, syn::Type> = HashMap::new();
    for item in main.items.iter().chain(analysis.items.iter()) {
        if let syn::Item::Type(t) = item {
            aliases.insert(t.ident.to_string(), (*t.ty).clone());
        }
    }
    let pfn_name = regex::Regex::new(r"^PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?$").unwrap();
    let mut pfns: BTreeMap<String, Vec<Pfn>> = BTreeMap::new();
    for item in &analysis.items {
        let syn::Item::Type(t) = item else { continue };
        let name = t.ident.to_string();
        let Some(cap) = pfn_name.captures(&name) else { continue };
        let Some(bare) = bare_fn_of(&t.ty) else {
            return Err(format!("{name} is not an optional function pointer"));
        };
        let signature = canonical_fn(
            &bare.inputs.iter().map(|a| a.ty.clone()).collect::<Vec<_>>(),
            output_type(&bare.output),
            &aliases,
        );
        let base = cap[1].to_string();
        pfns.entry(base.clone()).or_default().push(Pfn {
            version: cap[2].parse().unwrap(),
            ptds: cap.get(3).is_some(),
            signature,
        });
    }

    // `#define cuMemAlloc cuMemAlloc_v2`, `#define cuMemcpyHtoD __CUDA_API_PTDS(cuMemcpyHtoD_v2)`:
    // users call the macro's name.
    let rename =
        regex::Regex::new(r"(?m)^\s*#\s*define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\()?(cu\w+)\)?\s*$").unwrap();
    let mut public_of: HashMap<String, String> = HashMap::new();
    for header in DRIVER_DECLARING_HEADERS {
        let text = util::read(&include.join(header))?;
        for c in rename.captures_iter(&text).filter(|c| c[1] != c[2]) {
            public_of.insert(c[2].to_string(), c[1].to_string());
        }
    }
    let mut functions = Vec::new();
    let version_suffix = regex::Regex::new(r"^(\w+?)_v(\d+)$").unwrap();
    for f in declared {
        let declared_name = f.sig.ident.to_string();
        let (base, ordinal) = if pfns.contains_key(&declared_name) {
            (declared_name.clone(), 1)
        } else if let Some((stripped, ordinal)) = version_suffix
            .captures(&declared_name)
            .map(|c| (c[1].to_string(), c[2].parse::<usize>().unwrap_or(0)))
            .filter(|(b, _)| pfns.contains_key(b))
        {
            (stripped, ordinal)
        } else {
            return Err(format!(
                "{declared_name} is declared but no PFN_{declared_name}_v<N> typedef gives its version"
            ));
        };
        let inputs = inputs_of(&f.sig)?;
        let output = output_type(&f.sig.output);
        let signature = canonical_fn(
            &inputs.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
            output.clone(),
            &aliases,
        );
        let (version, min_version, ptds_version) = driver_versions(&declared_name, ordinal, &signature, &pfns[&base])?;
        let pfn = format!("PFN_{base}_v");
        let typedefs = typedef_texts
            .iter()
            .find(|(_, text)| text.contains(&pfn))
            .map(|(header, _)| *header)
            .ok_or_else(|| format!("{declared_name}: no typedef header names {pfn}<N>"))?;
        functions.push(Function {
            name: public_of
                .get(&declared_name)
                .cloned()
                .unwrap_or_else(|| declared_name.clone()),
            symbol: base,
            declared: declared_name,
            ptds_symbol: None,
            version,
            min_version,
            ptds_version,
            versioned: false,
            typedefs,
            attrs: f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect(),
            inputs,
            output,
        });
    }

    Ok(functions)
}

/// The version whose ABI a declaration binds, the oldest version from which every variant up to
/// that one has the same signature, and the version of the matching per-thread-default-stream
/// variant (0 if none). See "Resolving driver functions" in docs/architecture.md.
///
/// The header names ABI variants `cuX`, `cuX_v2`, `cuX_v3`, ...; cudaTypedefs.h lists one
/// `PFN_cuX_v<version>` per variant, oldest first. So variant `_vK` is the K-th typedef, and its
/// signature must be the declared one (checked). Signatures alone cannot tell the variants apart:
/// `cuGraphAddNode_v2` (12030) and `cuGraphAddNode_v3` (13040) have the same one.
fn driver_versions(declared: &str, ordinal: usize, signature: &str, pfns: &[Pfn]) -> Result<(u32, u32, u32)> {
    let mut plain: Vec<&Pfn> = pfns.iter().filter(|p| !p.ptds).collect();
    plain.sort_by_key(|p| p.version);
    let known = || -> String {
        plain
            .iter()
            .map(|p| format!("v{}: {}", p.version, p.signature))
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    let Some(bound) = ordinal.checked_sub(1).filter(|i| *i < plain.len()) else {
        return Err(format!(
            "{declared}: variant {ordinal} but only {} PFN_ typedefs\n  {}",
            plain.len(),
            known()
        ));
    };
    if plain[bound].signature != signature {
        return Err(format!(
            "{declared}: the typedef of variant {ordinal} has another signature\n  declared: {signature}\n  {}",
            known()
        ));
    }
    let mut floor = bound;
    while floor > 0 && plain[floor - 1].signature == signature {
        floor -= 1;
    }
    let ptds_version = pfns
        .iter()
        // the per-thread twin of this variant: same signature, older than the next variant
        .filter(|p| p.ptds && p.signature == signature)
        .map(|p| p.version)
        .filter(|v| plain.get(bound + 1).is_none_or(|next| *v < next.version))
        .max()
        .unwrap_or(0);
    Ok((plain[bound].version, plain[floor].version, ptds_version))
}

/// The legacy types and declarations cuda.h keeps at its end inside
/// `#if defined(__CUDA_API_VERSION_INTERNAL)` (the block `#undef`s the ABI macros first, so it
/// can follow the public part). The old `PFN_` typedefs refer to these types.
fn legacy_declarations(cuda_h: &str) -> Result<String> {
    let marker = "#if defined(__CUDA_API_VERSION_INTERNAL)\n";
    let start = cuda_h
        .rfind(marker)
        .ok_or("cuda.h: no __CUDA_API_VERSION_INTERNAL block")?
        + marker.len();
    let block = &cuda_h[start..];
    let end = block
        .find("\n#elif")
        .or_else(|| block.find("\n#endif"))
        .ok_or("cuda.h: unterminated __CUDA_API_VERSION_INTERNAL block")?;
    let block = &block[..end];
    if block.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with('#') && !t.starts_with("#undef")
    }) {
        return Err("cuda.h: preprocessor lines inside the legacy block; the generator must learn them".into());
    }
    Ok(block.to_string())
}

/// How the typedef headers open the block of older ABIs.
const INTERNAL_BLOCK: &str = "#if defined(__CUDA_API_VERSION_INTERNAL)";

/// The typedef lines a typedef header (`cudaTypedefs.h`, `cudaGLTypedefs.h`, ...) keeps inside
/// `#if defined(__CUDA_API_VERSION_INTERNAL)`.
fn internal_typedefs(header: &str, text: &str) -> Result<String> {
    let start = text
        .find(INTERNAL_BLOCK)
        .ok_or_else(|| format!("{header}: no __CUDA_API_VERSION_INTERNAL block"))?;
    let block = &text[start..];
    let end = block
        .find("\n#endif")
        .ok_or_else(|| format!("{header}: unterminated __CUDA_API_VERSION_INTERNAL block"))?;
    let lines: Vec<&str> = block[..end]
        .lines()
        .skip(1)
        .filter(|l| l.trim_start().starts_with("typedef"))
        .collect();
    if block[..end].lines().skip(1).any(|l| l.trim_start().starts_with('#')) {
        return Err(format!(
            "{header}: preprocessor lines inside the __CUDA_API_VERSION_INTERNAL block; the generator must learn them"
        ));
    }
    Ok(lines.join("\n"))
}

fn bare_fn_of(ty: &syn::Type) -> Option<syn::TypeBareFn> {
    // Option<unsafe extern "C" fn(..) -> ..>
    let syn::Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(syn::Type::BareFn(f)) => Some(f.clone()),
        _ => None,
    }
}

fn output_type(output: &syn::ReturnType) -> Option<syn::Type> {
    match output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, t) => Some((**t).clone()),
    }
}

/// A signature with every type alias expanded, as a string: two typedefs with the same string have
/// the same ABI whatever their aliases are called (`CUdevice` and `CUdevice_v1` are both `c_int`).
fn canonical_fn(inputs: &[syn::Type], output: Option<syn::Type>, aliases: &HashMap<String, syn::Type>) -> String {
    struct Expand<'a>(&'a HashMap<String, syn::Type>, u32);
    impl VisitMut for Expand<'_> {
        fn visit_type_mut(&mut self, ty: &mut syn::Type) {
            if let syn::Type::Path(p) = ty {
                if p.qself.is_none() && p.path.segments.len() == 1 {
                    let name = p.path.segments[0].ident.to_string();
                    if let Some(target) = self.0.get(&name) {
                        if self.1 < 64 {
                            *ty = target.clone();
                            self.1 += 1;
                            self.visit_type_mut(ty);
                            self.1 -= 1;
                            return;
                        }
                    }
                }
            }
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
    let mut parts = Vec::new();
    for ty in inputs.iter().cloned().chain(output) {
        let mut ty = ty;
        Expand(aliases, 0).visit_type_mut(&mut ty);
        parts.push(quote!(#ty).to_string());
    }
    parts.join(" | ")
}

fn inputs_of(sig: &syn::Signature) -> Result<Vec<(syn::Ident, syn::Type)>> {
    sig.inputs
        .iter()
        .enumerate()
        .map(|(i, arg)| match arg {
            syn::FnArg::Typed(pt) => {
                let name = match &*pt.pat {
                    syn::Pat::Ident(id) => id.ident.clone(),
                    _ => format_ident!("arg{}", i),
                };
                Ok((name, (*pt.ty).clone()))
            }
            syn::FnArg::Receiver(_) => Err(format!("{}: unexpected receiver", sig.ident)),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Libraries resolved by symbol

fn symbol_functions(headers: &[String], declared: Vec<syn::ForeignItemFn>) -> Result<Vec<Function>> {
    let declared_names: BTreeSet<String> = declared.iter().map(|f| f.sig.ident.to_string()).collect();
    // `#define cudaGetDeviceProperties cudaGetDeviceProperties_v2`: users call the macro name.
    let rename = regex::Regex::new(r"(?m)^\s*#\s*define\s+(\w+)\s+(\w+)\s*(?://.*)?$").unwrap();
    // `#define cudaMemcpy __CUDART_API_PTDS(cudaMemcpy)`: the runtime's per-thread variants.
    let ptds = regex::Regex::new(r"(?m)^\s*#\s*define\s+(\w+)\s+__CUDART_API_PT(DS|SZ)\((\w+)\)").unwrap();
    let versioned = regex::Regex::new(r"^__(\w+)_\d+_\d+$").unwrap();
    let mut public_of: HashMap<String, String> = HashMap::new();
    let mut ptds_of: HashMap<String, String> = HashMap::new();
    for text in headers {
        for cap in rename.captures_iter(text) {
            // A macro that renames onto a name also declared as a function of its own (cuFile's
            // `cuFileDriverClose` and `cuFileDriverClose_v2`) leaves both under their own names.
            if declared_names.contains(&cap[2]) && cap[1] != cap[2] && !declared_names.contains(&cap[1]) {
                public_of.insert(cap[2].to_string(), cap[1].to_string());
            }
        }
        for cap in ptds.captures_iter(text) {
            let suffix = if &cap[2] == "DS" { "_ptds" } else { "_ptsz" };
            ptds_of.insert(cap[3].to_string(), format!("{}{suffix}", &cap[3]));
        }
    }
    let mut functions = Vec::new();
    for f in declared {
        let declared_name = f.sig.ident.to_string();
        let (name, symbol, is_versioned) = if let Some(cap) = versioned.captures(&declared_name) {
            // nvJitLink declares `__nvJitLinkCreate_13_5` behind a static inline `nvJitLinkCreate`;
            // the library exports the plain name too (since 12.3), and the tagged one of its version.
            (cap[1].to_string(), cap[1].to_string(), true)
        } else if let Some(public) = public_of.get(&declared_name) {
            (public.clone(), declared_name.clone(), false)
        } else {
            (declared_name.clone(), declared_name.clone(), false)
        };
        let inputs = inputs_of(&f.sig)?;
        functions.push(Function {
            ptds_symbol: ptds_of.get(&declared_name).cloned(),
            name,
            symbol,
            declared: declared_name,
            version: 0,
            min_version: 0,
            ptds_version: 0,
            versioned: is_versioned,
            typedefs: "",
            attrs: f.attrs.iter().filter(|a| a.path().is_ident("doc")).cloned().collect(),
            inputs,
            output: output_type(&f.sig.output),
        });
    }
    Ok(functions)
}

// ---------------------------------------------------------------------------------------------
// Emitting the loader tables and the shims

fn loader_items(lib: &Lib, functions: &[Function]) -> TokenStream {
    let n = functions.len();
    let id = format_ident!("{}", lib.id);
    let infos = functions.iter().map(|f| {
        let name = cstr(&f.name);
        let symbol = cstr(&f.symbol);
        let ptds = match &f.ptds_symbol {
            Some(s) => {
                let s = cstr(s);
                quote!(Some(#s))
            }
            None => quote!(None),
        };
        let (version, min_version, ptds_version, versioned) = (f.version, f.min_version, f.ptds_version, f.versioned);
        quote! {
            crate::loader::FnInfo {
                name: #name,
                symbol: #symbol,
                ptds_symbol: #ptds,
                version: #version,
                min_version: #min_version,
                ptds_version: #ptds_version,
                versioned: #versioned,
            }
        }
    });
    quote! {
        /// Every function of this module, in the order of the loader's slots.
        pub static FUNCTIONS: [crate::loader::FnInfo; #n] = [#(#infos),*];
        static SLOTS: [::core::sync::atomic::AtomicPtr<::core::ffi::c_void>; #n] =
            [const { ::core::sync::atomic::AtomicPtr::new(::core::ptr::null_mut()) }; #n];
        /// The library these functions are loaded from, resolved on first use.
        pub static LIBRARY: crate::loader::Library =
            crate::loader::Library::new(crate::loader::LibraryId::#id, &FUNCTIONS, &SLOTS);
    }
}

fn cstr(s: &str) -> proc_macro2::Literal {
    proc_macro2::Literal::c_string(&std::ffi::CString::new(s).unwrap())
}

fn shim(lib: &Lib, f: &Function, index: usize, header: &str) -> TokenStream {
    let name = format_ident!("{}", f.name);
    let attrs = &f.attrs;
    let params = f.inputs.iter().map(|(n, t)| quote!(#n: #t));
    let types = f.inputs.iter().map(|(_, t)| t);
    let args = f.inputs.iter().map(|(n, _)| n);
    let ret = f.output.as_ref().map(|t| quote!(#t)).unwrap_or_else(|| quote!(()));
    let returns_status = lib
        .status
        .map(|s| {
            f.output
                .as_ref()
                .is_some_and(|t| last_ident(t).as_deref() == Some(s.ret))
        })
        .unwrap_or(false);
    let load = quote! { crate::loader::load(&SLOTS[#index], &LIBRARY, #index) };
    let fn_ty = quote! { unsafe extern "C" fn(#(#types),*) -> #ret };
    let mut body_doc = String::new();
    if f.declared != f.name {
        body_doc.push_str(&format!(" The header declares this function as `{}`.\n", f.declared));
    }
    let loading_doc = if returns_status {
        format!(
            " # Loading\n\n The function is resolved on first call. If the library or the function cannot be \
             loaded, it returns an error code outside the range the headers define; `.result()` on it gives \
             an error that says what was missing and what to do (see [`crate::LoadError`]).\n{body_doc}"
        )
    } else {
        format!(
            " # Loading\n\n The function is resolved on first call; `Err` says what could not be loaded and \
             what to do (see [`crate::LoadError`]).\n{body_doc}"
        )
    };
    let safety = format!(
        " # Safety\n\n This calls the C function `{}` of `{header}` directly: the caller must meet its contract \
         as the documentation above and NVIDIA's describe. Every pointer must be valid for the reads and writes \
         the function makes, handles must be live, and the call must respect the library's threading rules.",
        f.declared
    );
    let transmute = safety_marker(&pointer_safety(lib, f, header));
    let call = safety_marker(&format!(
        "the caller meets the contract of `{}` from `{header}`, as this function's `# Safety` requires, and the \
         arguments go unchanged to a pointer of exactly that C signature (see above).",
        f.declared
    ));
    let mut out = if returns_status {
        quote! {
            #(#attrs)*
            #[doc = ""]
            #[doc = #loading_doc]
            #[doc = #safety]
            #[inline]
            pub unsafe fn #name(#(#params),*) -> #ret {
                match #load {
                    Ok(__cuda_sys_fn) => {
                        #transmute
                        let __cuda_sys_fn = unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, #fn_ty>(__cuda_sys_fn) };
                        #call
                        unsafe { __cuda_sys_fn(#(#args),*) }
                    }
                    Err(e) => crate::loader::StatusCode::from_load_error(e),
                }
            }
        }
    } else {
        quote! {
            #(#attrs)*
            #[doc = ""]
            #[doc = #loading_doc]
            #[doc = #safety]
            #[inline]
            pub unsafe fn #name(#(#params),*) -> ::core::result::Result<#ret, crate::LoadError> {
                let __cuda_sys_fn = #load?;
                #transmute
                let __cuda_sys_fn = unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, #fn_ty>(__cuda_sys_fn) };
                #call
                let __cuda_sys_ret = unsafe { __cuda_sys_fn(#(#args),*) };
                Ok(__cuda_sys_ret)
            }
        }
    };
    if f.declared != f.name {
        let declared = format_ident!("{}", f.declared);
        let doc = format!(" `{}`, the name the header's macros give [`{}`].", f.declared, f.name);
        out.extend(quote! {
            #[doc = #doc]
            pub use self::#name as #declared;
        });
    }
    out
}

/// Why the pointer `load` hands a shim may be transmuted to the shim's function type: what the
/// loader asked for (`crate::loader::Library::resolve`), and what the generator checked about it.
fn pointer_safety(lib: &Lib, f: &Function, header: &str) -> String {
    match lib.resolve {
        Resolve::Driver => {
            let newest = f.version.max(f.ptds_version);
            let asked = if f.min_version == newest {
                format!("for version {newest}")
            } else {
                format!("for a version from {} to {newest}", f.min_version)
            };
            let ptds = if f.ptds_version != 0 {
                format!(
                    " (the per-thread-default-stream variant of {} included)",
                    f.ptds_version
                )
            } else {
                String::new()
            };
            format!(
                "`load` returns `Ok` only with the non-null address cuGetProcAddress_v2 gave for `{sym}` when asked \
                 {asked}; the loader never asks below {min} and the driver hands out its newest variant not newer \
                 than the version asked for. The generator checked that every `PFN_{sym}_v*` typedef of \
                 {typedefs} from {min} to {newest}{ptds} has the signature `{header}` declares for `{declared}`, \
                 so the address is a C function of exactly this type.",
                sym = f.symbol,
                typedefs = f.typedefs,
                min = f.min_version,
                declared = f.declared,
            )
        }
        Resolve::Symbol => {
            let mut also = String::new();
            if let Some(ptds) = &f.ptds_symbol {
                also.push_str(&format!(
                    " (or for `{ptds}`, its per-thread-default-stream twin with the same signature)"
                ));
            }
            if f.versioned {
                also.push_str(&format!(
                    " (or for a version-tagged `__{}_<major>_<minor>`, the same function under the name old \
                     libraries export)",
                    f.symbol
                ));
            }
            format!(
                "`load` returns `Ok` only with the non-null address `dlsym` gave for `{}`{also} in {}; that \
                 export is the function `{header}` declares as `{}`, with exactly this signature, so the address \
                 is a C function of this type.",
                f.symbol, lib.library, f.declared
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SAFETY comments in the generated code
//
// Comments do not survive `quote!` and prettyplease, so every `unsafe {}` block the generated code
// has gets a marker statement `__cuda_sys_safety!("why it is sound");` right before the
// statement holding it; after prettyplease, `expand_safety_markers` turns each marker into a
// `// SAFETY:` comment. `check_unsafe_documented` makes sure no block is left without one, so
// clippy's `undocumented_unsafe_blocks` (on for cuda-sys) has nothing to find; a new kind of
// unsafe block from bindgen (a newer version, or headers with bitfields) stops the generator
// until it learns to explain it.

const SAFETY_MARKER: &str = "__cuda_sys_safety";

fn safety_marker(text: &str) -> TokenStream {
    let marker = format_ident!("{}", SAFETY_MARKER);
    quote! { #marker!(#text); }
}

fn is_safety_marker(stmt: &syn::Stmt) -> bool {
    matches!(stmt, syn::Stmt::Macro(m) if m.mac.path.is_ident(SAFETY_MARKER))
}

/// Counts the `unsafe {}` blocks of an expression or statement, not looking into nested blocks
/// (whose statements are checked on their own).
#[derive(Default)]
struct CountUnsafe(usize);

impl VisitMut for CountUnsafe {
    fn visit_expr_unsafe_mut(&mut self, _: &mut syn::ExprUnsafe) {
        self.0 += 1;
    }
    fn visit_block_mut(&mut self, _: &mut syn::Block) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Every `unsafe {}` block in `file` must sit in a statement right after a marker, one block per
/// statement, and every marker must precede such a statement.
fn check_unsafe_documented(module: &str, file: &syn::File) -> Result {
    struct Check {
        undocumented: Vec<String>,
        stray_markers: usize,
        blocks: usize,
        documented: usize,
    }
    impl VisitMut for Check {
        fn visit_expr_unsafe_mut(&mut self, e: &mut syn::ExprUnsafe) {
            self.blocks += 1;
            syn::visit_mut::visit_expr_unsafe_mut(self, e);
        }
        fn visit_block_mut(&mut self, block: &mut syn::Block) {
            let mut after_marker = false;
            for stmt in &mut block.stmts {
                if is_safety_marker(stmt) {
                    if after_marker {
                        self.stray_markers += 1;
                    }
                    after_marker = true;
                    continue;
                }
                // Items in a block (nested functions) are visited on their own: CountUnsafe skips them.
                let mut count = CountUnsafe::default();
                count.visit_stmt_mut(stmt);
                if count.0 > 0 {
                    if after_marker && count.0 == 1 {
                        self.documented += 1;
                    } else {
                        let text = quote!(#stmt).to_string();
                        self.undocumented.push(text.chars().take(160).collect());
                    }
                } else if after_marker {
                    self.stray_markers += 1;
                }
                after_marker = false;
            }
            if after_marker {
                self.stray_markers += 1;
            }
            syn::visit_mut::visit_block_mut(self, block);
        }
    }
    let mut check = Check {
        undocumented: Vec::new(),
        stray_markers: 0,
        blocks: 0,
        documented: 0,
    };
    check.visit_file_mut(&mut file.clone());
    if check.blocks != check.documented && check.undocumented.is_empty() {
        check.undocumented.push(format!(
            "{} unsafe blocks outside a block's statements",
            check.blocks - check.documented
        ));
    }
    if !check.undocumented.is_empty() {
        return Err(format!(
            "{module}: unsafe blocks the generator has no SAFETY comment for (teach xtask/src/bindings.rs why they \
             are sound):\n  {}",
            check.undocumented.join("\n  ")
        ));
    }
    if check.stray_markers > 0 {
        return Err(format!(
            "{module}: {} SAFETY markers are not followed by a statement with one unsafe block",
            check.stray_markers
        ));
    }
    Ok(())
}

/// Replaces each marker statement prettyplease printed with `// SAFETY:` comment lines, wrapped
/// at 100 columns and indented like the statement.
fn expand_safety_markers(text: &str) -> Result<String> {
    let marker = regex::Regex::new(&format!(
        r#"(?m)^([ \t]*){SAFETY_MARKER}!\(\s*("(?:[^"\\]|\\.)*")\s*\);[ \t]*\n"#
    ))
    .unwrap();
    let mut failed = None;
    let out = marker.replace_all(text, |cap: &regex::Captures| {
        let indent = &cap[1];
        let why = match syn::parse_str::<syn::LitStr>(&cap[2]) {
            Ok(lit) => lit.value(),
            Err(e) => {
                failed = Some(format!("a SAFETY marker does not parse: {e}"));
                String::new()
            }
        };
        let mut lines = Vec::new();
        let mut line = format!("{indent}// SAFETY:");
        for word in why.split_whitespace() {
            if line.len() + 1 + word.len() > 100 && !line.trim_end().ends_with("//") {
                lines.push(std::mem::replace(&mut line, format!("{indent}//")));
            }
            line.push(' ');
            line.push_str(word);
        }
        lines.push(line);
        lines.join("\n") + "\n"
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if out.contains(SAFETY_MARKER) {
        return Err(format!(
            "a {SAFETY_MARKER}! marker was printed in a shape the generator does not expect"
        ));
    }
    Ok(out.into_owned())
}

/// bindgen's `impl Default` for types it cannot derive `Default` for (unions, long arrays) zeroes
/// the value with `ptr::write_bytes` and `assume_init`. Each gets a SAFETY comment, after checking
/// that every byte zero is a valid value of the type (see [`zero_is_valid`]).
fn document_default_impls(module: &str, file: &mut syn::File) -> Result {
    let snapshot = file.clone();
    let types = TypeTable::new(&snapshot);
    for item in &mut file.items {
        let syn::Item::Impl(imp) = item else { continue };
        let is_default = imp
            .trait_
            .as_ref()
            .is_some_and(|(_, path, _)| path.segments.last().is_some_and(|s| s.ident == "Default"));
        if !is_default {
            continue;
        }
        let self_ty = &imp.self_ty;
        let ty_name = quote!(#self_ty).to_string();
        for ii in &mut imp.items {
            let syn::ImplItem::Fn(fun) = ii else { continue };
            let body = {
                let block = &fun.block;
                quote!(#block).to_string().replace(' ', "")
            };
            let stmts = &mut fun.block.stmts;
            let Some(pos) = stmts.iter_mut().position(|s| {
                let mut count = CountUnsafe::default();
                count.visit_stmt_mut(s);
                count.0 > 0
            }) else {
                continue;
            };
            if !body.contains("MaybeUninit::<Self>::uninit()")
                || !body.contains("write_bytes(s.as_mut_ptr(),0,1)")
                || !body.contains("s.assume_init()")
            {
                return Err(format!(
                    "{module}: `impl Default for {ty_name}` has an unsafe block of a shape the generator does not \
                     know: {body}"
                ));
            }
            zero_is_valid(&types, self_ty, &mut Vec::new())
                .map_err(|e| format!("{module}: `impl Default for {ty_name}` zeroes the value, but {e}"))?;
            let why = format!(
                "`{ty_name}` is plain C data: integers, floats, `bool`s, raw pointers, `Option`s of function \
                 pointers, and arrays, structs and unions of those (the generator checked), for all of which every byte zero is \
                 a valid value, as C's `= {{0}}` makes it. `write_bytes` zeroes all of `s`, so `assume_init` reads \
                 an initialised `Self`."
            );
            let marker = safety_marker(&why);
            stmts.insert(pos, syn::parse2(marker).map_err(|e| e.to_string())?);
        }
    }
    Ok(())
}

/// The structs, unions and type aliases bindgen generated, by name.
struct TypeTable<'a> {
    structs: HashMap<String, Vec<&'a syn::Type>>,
    aliases: HashMap<String, &'a syn::Type>,
    /// `use self::X as Y`: Y to X.
    renames: HashMap<String, String>,
    enums: BTreeSet<String>,
}

impl<'a> TypeTable<'a> {
    fn new(file: &'a syn::File) -> Self {
        let mut table = TypeTable {
            structs: HashMap::new(),
            aliases: HashMap::new(),
            renames: HashMap::new(),
            enums: BTreeSet::new(),
        };
        for item in &file.items {
            match item {
                syn::Item::Struct(s) => {
                    table
                        .structs
                        .insert(s.ident.to_string(), s.fields.iter().map(|f| &f.ty).collect());
                }
                syn::Item::Union(u) => {
                    table
                        .structs
                        .insert(u.ident.to_string(), u.fields.named.iter().map(|f| &f.ty).collect());
                }
                syn::Item::Type(t) => {
                    table.aliases.insert(t.ident.to_string(), &t.ty);
                }
                syn::Item::Enum(e) => {
                    table.enums.insert(e.ident.to_string());
                }
                // `pub use self::CUstream_flags_enum as CUstream_flags;`
                syn::Item::Use(u) => {
                    let mut tree = &u.tree;
                    while let syn::UseTree::Path(p) = tree {
                        tree = &p.tree;
                    }
                    if let syn::UseTree::Rename(r) = tree {
                        table.renames.insert(r.rename.to_string(), r.ident.to_string());
                    }
                }
                _ => {}
            }
        }
        table
    }
}

/// Whether the all-zero bit pattern is a valid value of `ty`: true for integers, floats, `bool`,
/// raw pointers (null), `Option` of a function pointer (`None`), and arrays, structs and unions of
/// those; an error names the first type that is not known to be.
fn zero_is_valid(types: &TypeTable, ty: &syn::Type, seen: &mut Vec<String>) -> Result {
    const PRIMITIVES: &[&str] = &[
        "c_char",
        "c_schar",
        "c_uchar",
        "c_short",
        "c_ushort",
        "c_int",
        "c_uint",
        "c_long",
        "c_ulong",
        "c_longlong",
        "c_ulonglong",
        "c_float",
        "c_double",
        "i8",
        "i16",
        "i32",
        "i64",
        "i128",
        "isize",
        "u8",
        "u16",
        "u32",
        "u64",
        "u128",
        "usize",
        "f32",
        "f64",
        "bool",
    ];
    match ty {
        syn::Type::Ptr(_) => Ok(()),
        syn::Type::Array(a) => zero_is_valid(types, &a.elem, seen),
        syn::Type::Paren(p) => zero_is_valid(types, &p.elem, seen),
        syn::Type::Group(g) => zero_is_valid(types, &g.elem, seen),
        syn::Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last().ok_or("an empty type path")?;
            let name = last.ident.to_string();
            if name == "Option" {
                if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
                    if let Some(syn::GenericArgument::Type(syn::Type::BareFn(_))) = args.args.first() {
                        return Ok(());
                    }
                }
                return Err(format!("`{}` is not an `Option` of a function pointer", quote!(#ty)));
            }
            if !last.arguments.is_empty() {
                return Err(format!(
                    "the generator does not know whether zero is a valid `{}`",
                    quote!(#ty)
                ));
            }
            if PRIMITIVES.contains(&name.as_str()) {
                return Ok(());
            }
            if seen.contains(&name) {
                return Ok(());
            }
            if types.enums.contains(&name) {
                return Err(format!("`{name}` is a Rust enum, whose zero may not be a variant"));
            }
            seen.push(name.clone());
            if let Some(target) = types.renames.get(&name) {
                let target: syn::Type = syn::parse_str(target).map_err(|e| e.to_string())?;
                return zero_is_valid(types, &target, seen);
            }
            if let Some(fields) = types.structs.get(&name) {
                for field in fields {
                    zero_is_valid(types, field, seen)?;
                }
                return Ok(());
            }
            if let Some(target) = types.aliases.get(&name) {
                return zero_is_valid(types, target, seen);
            }
            Err(format!("the generator does not know whether zero is a valid `{name}`"))
        }
        other => Err(format!(
            "the generator does not know whether zero is a valid `{}`",
            quote!(#other)
        )),
    }
}

fn last_ident(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Device properties for cuda-core: one accessor per CU_DEVICE_ATTRIBUTE_*

/// The constants of a newtype enum with their doc text, in declaration order.
fn enum_constants(file: &syn::File, enum_type: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(imp) = item else { continue };
        if last_ident(&imp.self_ty).as_deref() != Some(enum_type) {
            continue;
        }
        for ii in &imp.items {
            if let syn::ImplItem::Const(c) = ii {
                out.push((c.ident.to_string(), doc_text(&c.attrs)));
            }
        }
    }
    out
}

fn device_properties(attributes: &[(String, String)]) -> Result<String> {
    let mut methods = TokenStream::new();
    let mut all = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, doc) in attributes {
        let Some(short) = name.strip_prefix("CU_DEVICE_ATTRIBUTE_") else {
            continue;
        };
        // The enum's end marker, and aliases kept for old code, are not attributes of their own.
        if short == "MAX" || doc.to_lowercase().starts_with("deprecated") {
            continue;
        }
        let method = short.to_lowercase();
        if !seen.insert(method.clone()) {
            continue;
        }
        let ident = format_ident!("{}", method);
        let constant = format_ident!("{}", name);
        let doc = doc.trim_start_matches('<').trim();
        let doc = format!(" {doc} (`{name}`).");
        methods.extend(quote! {
            #[doc = #doc]
            pub fn #ident(&self) -> crate::Result<i32> {
                self.get(cuda_sys::driver::CUdevice_attribute::#constant)
            }
        });
        all.push(quote!((#method, cuda_sys::driver::CUdevice_attribute::#constant)));
    }
    if all.len() < 100 {
        return Err(format!(
            "only {} device attributes found in the driver bindings",
            all.len()
        ));
    }
    let tokens = quote! {
        impl crate::device::DeviceProperties {
            #methods
            /// Every attribute: its property name and the driver's constant.
            pub const ALL: &'static [(&'static str, cuda_sys::driver::CUdevice_attribute)] = &[#(#all),*];
        }
    };
    let file: syn::File = syn::parse2(tokens).map_err(|e| format!("device properties do not parse: {e}"))?;
    Ok(format!("{HEADER_LINE}{}", prettyplease::unparse(&file)))
}

// ---------------------------------------------------------------------------------------------
// Status tables

struct StatusValue {
    value: i64,
    name: String,
    description: String,
}

fn status_values(file: &syn::File, status: Status) -> Result<Vec<StatusValue>> {
    let mut values = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(imp) = item else { continue };
        if last_ident(&imp.self_ty).as_deref() != Some(status.enum_type) {
            continue;
        }
        for ii in &imp.items {
            let syn::ImplItem::Const(c) = ii else { continue };
            let syn::Expr::Call(call) = &c.expr else { continue };
            let Some(arg) = call.args.first() else { continue };
            let value = match arg {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(i), ..
                }) => i.base10_parse::<i64>().ok(),
                syn::Expr::Unary(syn::ExprUnary {
                    op: syn::UnOp::Neg(_),
                    expr,
                    ..
                }) => match &**expr {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(i), ..
                    }) => i.base10_parse::<i64>().ok().map(|v| -v),
                    _ => None,
                },
                _ => None,
            };
            let Some(value) = value else { continue };
            let name = c.ident.to_string();
            let doc = doc_text(&c.attrs);
            let description = if doc.is_empty() {
                humanize(&name, status.prefix)
            } else {
                doc
            };
            values.push(StatusValue {
                value,
                name,
                description,
            });
        }
    }
    if values.is_empty() {
        return Err(format!("no values found for status enum {}", status.enum_type));
    }
    values.sort_by_key(|v| v.value);
    values.dedup_by_key(|v| v.value);
    Ok(values)
}

fn status_items(status: Status, values: &[StatusValue]) -> TokenStream {
    let enum_type = format_ident!("{}", status.enum_type);
    let rows = values.iter().map(|v| {
        let value = v.value;
        let (name, description) = (&v.name, &v.description);
        quote!(crate::error::StatusInfo { value: #value, name: #name, description: #description })
    });
    let doc = format!(
        " Name and description of every `{}` value the headers list, sorted by value.",
        status.ret
    );
    quote! {
        #[doc = #doc]
        pub static STATUS_VALUES: &[crate::error::StatusInfo] = &[#(#rows),*];
        impl #enum_type {
            /// The value's name in the header (`None` for a value the headers do not list).
            pub fn name(self) -> Option<&'static str> {
                crate::error::StatusInfo::find(STATUS_VALUES, self.0 as i64).map(|s| s.name)
            }
            /// The header's description of the value (`None` for a value the headers do not list).
            pub fn description(self) -> Option<&'static str> {
                crate::error::StatusInfo::find(STATUS_VALUES, self.0 as i64).map(|s| s.description)
            }
        }
    }
}

fn doc_text(attrs: &[syn::Attribute]) -> String {
    let mut text = String::new();
    for attr in attrs {
        if let syn::Meta::NameValue(nv) = &attr.meta {
            if nv.path.is_ident("doc") {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s), ..
                }) = &nv.value
                {
                    text.push_str(&s.value());
                    text.push(' ');
                }
            }
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `NVRTC_ERROR_OUT_OF_MEMORY` -> `out of memory`, for headers that document no value.
fn humanize(name: &str, prefix: &str) -> String {
    let tail = name.strip_prefix(prefix).unwrap_or(name);
    let tail = tail
        .trim_start_matches("NVRTC_")
        .trim_start_matches("NVJITLINK_")
        .trim_start_matches("NVVM_");
    let words = tail.replace('_', " ").to_lowercase();
    if words.is_empty() {
        name.to_string()
    } else {
        words
    }
}

// ---------------------------------------------------------------------------------------------
// Doc comments: Doxygen to something rustdoc renders, with no accidental doctests

fn tidy_docs(item: &mut syn::Item) {
    struct Tidy;
    impl VisitMut for Tidy {
        fn visit_attribute_mut(&mut self, attr: &mut syn::Attribute) {
            if let syn::Meta::NameValue(nv) = &mut attr.meta {
                if nv.path.is_ident("doc") {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s), ..
                    }) = &mut nv.value
                    {
                        *s = syn::LitStr::new(&tidy_doc(&s.value()), Span::call_site());
                    }
                }
            }
        }
    }
    Tidy.visit_item_mut(item);
}

fn tidy_doc(doc: &str) -> String {
    let mut out = Vec::new();
    let mut in_code = false;
    // `\code` may end a line of prose; give each marker a line of its own.
    let doc = doc
        .replace("\\code", "\n\\code\n")
        .replace("\\endcode", "\n\\endcode\n");
    for line in doc.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("\\code") {
            in_code = true;
            out.push(" ```text".to_string());
            continue;
        }
        if trimmed.starts_with("\\endcode") {
            in_code = false;
            while out.last().is_some_and(|l: &String| l.trim().is_empty()) {
                out.pop();
            }
            out.push(" ```".to_string());
            continue;
        }
        if in_code {
            if trimmed.is_empty() && out.last().is_some_and(|l| l == " ```text") {
                continue;
            }
            out.push(format!(" {line}"));
            continue;
        }
        // Indentation would make rustdoc read a code block (and a doctest); the headers indent
        // for layout only.
        let mut text = trimmed.to_string();
        for (from, to) in [
            ("\\brief ", ""),
            ("\\param ", "- parameter "),
            ("\\return ", "Returns: "),
            ("\\returns ", "Returns: "),
            ("\\note ", "Note: "),
            ("\\notefnerr", ""),
            ("\\note_sync", ""),
            ("\\note_null_stream", ""),
            ("\\sa ", "See also: "),
            ("\\deprecated", "Deprecated."),
        ] {
            text = text.replace(from, to);
        }
        if text.starts_with("```") {
            text = format!("`{text}`");
        }
        out.push(if text.is_empty() {
            String::new()
        } else {
            format!(" {text}")
        });
    }
    if in_code {
        out.push(" ```".to_string());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pfn(version: u32, ptds: bool, signature: &str) -> Pfn {
        Pfn {
            version,
            ptds,
            signature: signature.to_string(),
        }
    }

    #[test]
    fn a_variant_binds_its_own_version_and_shares_down_to_the_last_change() {
        // cuGraphAddNode: v12020 (no edge data), v12030 and v13040 (same signature).
        let pfns = [pfn(12020, false, "a"), pfn(12030, false, "b"), pfn(13040, false, "b")];
        assert_eq!(
            driver_versions("cuGraphAddNode_v2", 2, "b", &pfns).unwrap(),
            (12030, 12030, 0)
        );
        assert_eq!(
            driver_versions("cuGraphAddNode_v3", 3, "b", &pfns).unwrap(),
            (13040, 12030, 0)
        );
        assert_eq!(
            driver_versions("cuGraphAddNode", 1, "a", &pfns).unwrap(),
            (12020, 12020, 0)
        );
    }

    #[test]
    fn a_declaration_that_disagrees_with_its_typedef_is_refused() {
        let pfns = [pfn(3020, false, "a"), pfn(12050, false, "b")];
        assert!(driver_versions("cuCtxCreate_v2", 2, "a", &pfns)
            .unwrap_err()
            .contains("another signature"));
        assert!(driver_versions("cuCtxCreate_v3", 3, "b", &pfns)
            .unwrap_err()
            .contains("only 2"));
    }

    #[test]
    fn the_per_thread_twin_belongs_to_the_bound_variant() {
        // cuStreamGetCaptureInfo: three variants, each with its own _ptsz twin.
        let pfns = [
            pfn(10010, false, "a"),
            pfn(11030, false, "b"),
            pfn(12030, false, "c"),
            pfn(10010, true, "a"),
            pfn(11030, true, "b"),
            pfn(12030, true, "c"),
        ];
        assert_eq!(driver_versions("x_v2", 2, "b", &pfns).unwrap(), (11030, 11030, 11030));
        // cuMemcpyHtoD_v2: default 3020, per-thread twin 7000.
        let pfns = [pfn(2000, false, "old"), pfn(3020, false, "a"), pfn(7000, true, "a")];
        assert_eq!(
            driver_versions("cuMemcpyHtoD_v2", 2, "a", &pfns).unwrap(),
            (3020, 3020, 7000)
        );
    }

    #[test]
    fn every_unsafe_block_needs_a_marker_and_every_marker_a_block() {
        let marker = safety_marker("it is sound");
        let documented: syn::File = syn::parse2(quote! {
            fn f(p: *const u8) -> u8 {
                #marker
                let x = unsafe { *p };
                #marker
                x + unsafe { *p }
            }
        })
        .unwrap();
        check_unsafe_documented("test", &documented).unwrap();

        let undocumented: syn::File = syn::parse2(quote! {
            fn f(p: *const u8) -> u8 {
                #marker
                let x = unsafe { *p };
                x + unsafe { *p }
            }
        })
        .unwrap();
        let err = check_unsafe_documented("test", &undocumented).unwrap_err();
        assert!(err.contains("no SAFETY comment"), "{err}");

        let two_in_one: syn::File = syn::parse2(quote! {
            fn f(p: *const u8) -> u8 {
                #marker
                let y = unsafe { *p } + unsafe { *p };
                y
            }
        })
        .unwrap();
        assert!(check_unsafe_documented("test", &two_in_one).is_err());

        let stray: syn::File = syn::parse2(quote! {
            fn f() -> u8 {
                #marker
                1
            }
        })
        .unwrap();
        let err = check_unsafe_documented("test", &stray).unwrap_err();
        assert!(err.contains("not followed"), "{err}");
    }

    #[test]
    fn markers_become_wrapped_safety_comments() {
        let why = "word ".repeat(40);
        let marker = safety_marker(why.trim());
        let file: syn::File = syn::parse2(quote! {
            fn f(p: *const u8) -> u8 {
                #marker
                unsafe { *p }
            }
        })
        .unwrap();
        let text = expand_safety_markers(&prettyplease::unparse(&file)).unwrap();
        let comment: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("//")).collect();
        assert!(comment[0].starts_with("    // SAFETY: word word"), "{text}");
        assert!(comment.len() > 1 && comment.iter().all(|l| l.len() <= 100), "{text}");
        assert_eq!(comment.iter().map(|l| l.matches("word").count()).sum::<usize>(), 40);
        assert!(text.contains("    unsafe { *p }"), "{text}");
        assert!(!text.contains(SAFETY_MARKER), "{text}");
    }

    #[test]
    fn zeroing_is_only_documented_for_types_whose_zero_is_valid() {
        let file: syn::File = syn::parse2(quote! {
            pub struct Plain { a: ::core::ffi::c_int, b: [*mut u8; 4], c: Option<unsafe extern "C" fn()>, d: Alias, e: Renamed }
            pub type Alias = Inner;
            pub union Inner { x: u32, y: f32 }
            pub use self::Flags_enum as Renamed;
            pub struct Flags_enum(pub ::core::ffi::c_uint);
            pub struct HasRef { r: &'static u8 }
            pub struct HasFn { f: unsafe extern "C" fn() }
            pub enum RustEnum { A = 1 }
            pub struct HasEnum { e: RustEnum }
        })
        .unwrap();
        let types = TypeTable::new(&file);
        let ty = |name: &str| syn::parse_str::<syn::Type>(name).unwrap();
        zero_is_valid(&types, &ty("Plain"), &mut Vec::new()).unwrap();
        for bad in ["HasRef", "HasFn", "HasEnum", "Unknown"] {
            assert!(zero_is_valid(&types, &ty(bad), &mut Vec::new()).is_err(), "{bad}");
        }
    }

    #[test]
    fn doxygen_becomes_markdown_without_doctests() {
        let doc = tidy_doc(" \\brief Does it.\n\n     indented prose\n push-pop: \\code\n    f(&x);\n \\endcode");
        assert!(doc.lines().any(|l| l == " indented prose"), "{doc}");
        assert!(doc.contains(" ```text\n     f(&x);\n ```"), "{doc}");
        assert!(doc.starts_with(" Does it."), "{doc}");
    }
}
