//! CPU tests of the generated bindings: coverage of the headers, the version tables, status
//! names, and how loading failures are reported.

use cuda_sys::{driver, nvjitlink, nvrtc, LibraryId, LoadErrorKind, StatusCode};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn include_dir() -> PathBuf {
    let headers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../headers");
    let version = cuda_sys::HEADER_CUDA_VERSION;
    headers
        .join(format!("cuda-{}.{}", version / 1000, (version % 1000) / 10))
        .join("include")
}

fn names(lib: LibraryId) -> BTreeSet<String> {
    lib.library()
        .functions()
        .iter()
        .map(|f| f.name.to_str().unwrap().to_string())
        .collect()
}

/// The functions a header declares with `<ret> <api> name(`, outside `skip_from` onward.
fn declared(header: &str, ret_and_api: &str, skip_from: Option<&str>) -> BTreeSet<String> {
    let text = std::fs::read_to_string(include_dir().join(header)).unwrap();
    let text = match skip_from.and_then(|m| text.rfind(m)) {
        Some(i) => &text[..i],
        None => &text[..],
    };
    // nvml.h declares its legacy ABIs only for code that defines NVML_NO_UNVERSIONED_FUNC_DEFS;
    // the bindings follow the default, as cuda.h's legacy block is left out above.
    let mut text = text.to_string();
    let (open, close) = (
        "\n#ifdef NVML_NO_UNVERSIONED_FUNC_DEFS",
        "\n#endif // #ifdef NVML_NO_UNVERSIONED_FUNC_DEFS",
    );
    while let Some(start) = text.find(open) {
        let end = text[start..].find(close).map(|e| start + e + close.len()).unwrap();
        text.replace_range(start..end, "");
    }
    let mut out = BTreeSet::new();
    let needle = format!("{ret_and_api} ");
    for (i, _) in text.match_indices(&needle) {
        let rest = &text[i + needle.len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if rest[name.len()..].starts_with('(') && !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_driver_function_declared_in_cuda_h_is_bound() {
    // The block at the end of cuda.h behind __CUDA_API_VERSION_INTERNAL holds legacy ABIs.
    let declared = declared(
        "cuda.h",
        "CUresult CUDAAPI",
        Some("#if defined(__CUDA_API_VERSION_INTERNAL)\n    #undef"),
    );
    assert!(declared.len() > 450, "only {} declarations found", declared.len());
    let bound = names(LibraryId::Driver);
    let missing: Vec<_> = declared.difference(&bound).collect();
    assert!(
        missing.is_empty(),
        "cuda.h declares functions with no binding: {missing:?}"
    );
    // and the profiler API from cudaProfiler.h
    for f in ["cuProfilerInitialize", "cuProfilerStart", "cuProfilerStop"] {
        assert!(bound.contains(f), "{f}");
    }
}

#[test]
fn every_graphics_interop_function_is_bound() {
    // cudaGL.h, cudaEGL.h and cudaVDPAU.h, outside their blocks of legacy ABIs (cuWGLGetDevice
    // is declared for Windows only).
    let bound = names(LibraryId::Driver);
    for header in ["cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"] {
        let mut declared = declared(
            header,
            "CUresult CUDAAPI",
            Some("#if defined(__CUDA_API_VERSION_INTERNAL)\n    #undef"),
        );
        declared.remove("cuWGLGetDevice");
        assert!(!declared.is_empty(), "{header}: nothing declared?");
        // The header declares cuGLCtxCreate_v2 and friends under the names users call.
        let missing: Vec<_> = declared
            .iter()
            .filter(|d| !bound.contains(*d) && !bound.contains(d.trim_end_matches("_v2")))
            .collect();
        assert!(
            missing.is_empty(),
            "{header} declares functions with no binding: {missing:?}"
        );
    }
    for f in [
        "cuGraphicsGLRegisterBuffer",
        "cuGraphicsGLRegisterImage",
        "cuGraphicsEGLRegisterImage",
        "cuGraphicsResourceGetMappedEglFrame",
        "cuEventCreateFromEGLSync",
        "cuGraphicsVDPAURegisterVideoSurface",
    ] {
        assert!(bound.contains(f), "{f}");
    }
    assert_eq!(info("cuGraphicsGLRegisterBuffer").version, 3000);
    assert_eq!(info("cuGLGetDevices").version, 6050);
    assert_eq!(info("cuGLMapBufferObject").ptds_version, 7000);
}

#[test]
fn every_function_of_the_other_headers_is_bound() {
    for (lib, header, api) in [
        (LibraryId::Nvrtc, "nvrtc.h", "nvrtcResult"),
        (LibraryId::Nvvm, "nvvm.h", "nvvmResult"),
        (LibraryId::Runtime, "cuda_runtime_api.h", "cudaError_t CUDARTAPI"),
        (LibraryId::Nvml, "nvml.h", "nvmlReturn_t DECLDIR"),
        // nccl.h aligns its declarations with two spaces (`ncclResult_t  ncclAllReduce(`).
        (LibraryId::Nccl, "nccl.h", "ncclResult_t "),
    ] {
        let declared = declared(header, api, None);
        assert!(!declared.is_empty(), "{header}: nothing declared?");
        let bound = names(lib);
        // Declared names may be bound under the macro name users call (nvmlInit for nvmlInit_v2);
        // the declared one is then an alias, so compare against both.
        let lib_infos = lib.library().functions();
        let missing: Vec<_> = declared
            .iter()
            // nvrtcGetTypeName is a C++ inline template in the header, not a library function.
            .filter(|d| d.as_str() != "nvrtcGetTypeName")
            .filter(|d| !bound.contains(*d) && !lib_infos.iter().any(|f| f.symbol.to_str().unwrap() == d.as_str()))
            .collect();
        assert!(missing.is_empty(), "{header}: no binding for {missing:?}");
    }
    let jit = names(LibraryId::NvJitLink);
    for f in [
        "nvJitLinkCreate",
        "nvJitLinkAddData",
        "nvJitLinkComplete",
        "nvJitLinkGetLinkedCubin",
        "nvJitLinkVersion",
    ] {
        assert!(jit.contains(f), "{f}");
    }
}

#[test]
fn functions_are_sorted_for_lookup_by_name() {
    for lib in LibraryId::ALL {
        let f = lib.library().functions();
        assert!(f.windows(2).all(|w| w[0].name < w[1].name), "{lib:?}");
    }
}

fn info(name: &str) -> &'static cuda_sys::FnInfo {
    driver::FUNCTIONS
        .iter()
        .find(|f| f.name.to_str().unwrap() == name)
        .unwrap_or_else(|| panic!("{name} is not bound"))
}

#[test]
fn driver_versions_follow_the_typedefs() {
    // cuda.h binds cuMemAlloc_v2, which appeared in CUDA 3.2 (PFN_cuMemAlloc_v3020).
    let f = info("cuMemAlloc");
    assert_eq!(
        (f.symbol.to_str().unwrap(), f.version, f.min_version),
        ("cuMemAlloc", 3020, 3020)
    );
    // cuCtxCreate_v4 (12.5) has a signature of its own: no older driver may serve it.
    let f = info("cuCtxCreate");
    assert_eq!((f.version, f.min_version), (12050, 12050));
    // Same signature at 12030 and 13040: a 13.0 driver serves cuGraphAddNode_v3 too.
    let f = info("cuGraphAddNode_v3");
    assert_eq!(
        (f.symbol.to_str().unwrap(), f.version, f.min_version),
        ("cuGraphAddNode", 13040, 12030)
    );
    let f = info("cuGraphAddNode");
    assert_eq!((f.version, f.min_version), (12030, 12030));
    let f = info("cuEventElapsedTime");
    assert_eq!((f.version, f.min_version), (12080, 2000));
    // Two functions of their own with one base name.
    assert_eq!(info("cuCtxGetDevice").version, 2000);
    assert_eq!(info("cuCtxGetDevice_v2").version, 13000);
    // Per-thread-default-stream twins.
    assert_eq!(info("cuMemcpyHtoD").ptds_version, 7000);
    assert_eq!(info("cuMemcpyHtoDAsync").ptds_version, 7000);
    assert_eq!(info("cuDeviceGetCount").ptds_version, 0);
}

#[test]
fn version_floors_are_consistent() {
    let mut shared = Vec::new();
    for f in &driver::FUNCTIONS {
        assert!(f.min_version <= f.version, "{:?}", f.name);
        assert!(
            f.version >= 2000 && f.version <= cuda_sys::HEADER_CUDA_VERSION,
            "{:?}",
            f.name
        );
        if f.min_version < f.version {
            shared.push(f.name.to_str().unwrap());
        }
    }
    // The functions whose ABI older drivers can serve under an older version (see
    // docs/architecture.md); a change here means the headers changed the rule's inputs. (Three
    // are graphics interop functions: cuGLCtxCreate, cuGLGetDevices, cuVDPAUCtxCreate.)
    assert_eq!(shared.len(), 27, "{shared:?}");
}

#[test]
fn status_values_have_names_and_descriptions_without_any_library() {
    let e = driver::CUresult::CUDA_ERROR_OUT_OF_MEMORY.result().unwrap_err();
    assert_eq!(e.name(), "CUDA_ERROR_OUT_OF_MEMORY");
    assert!(
        e.description().contains("allocate enough memory"),
        "{}",
        e.description()
    );
    assert_eq!(
        e.to_string(),
        format!("CUDA_ERROR_OUT_OF_MEMORY (2): {}", e.description())
    );
    assert!(driver::CUresult::CUDA_SUCCESS.result().is_ok());

    let e = nvrtc::nvrtcResult::NVRTC_ERROR_COMPILATION.result().unwrap_err();
    assert_eq!(e.name(), "NVRTC_ERROR_COMPILATION");
    assert_eq!(e.description(), "compilation");
    let e = nvjitlink::nvJitLinkResult::NVJITLINK_ERROR_UNRECOGNIZED_OPTION
        .result()
        .unwrap_err();
    assert_eq!(e.name(), "NVJITLINK_ERROR_UNRECOGNIZED_OPTION");
    let e = cuda_sys::nvml::nvmlReturn_t::NVML_ERROR_NOT_SUPPORTED
        .result()
        .unwrap_err();
    assert!(
        e.description().contains("not supported") || e.description().contains("not available"),
        "{e}"
    );
    let e = cuda_sys::runtime::cudaError_t::cudaErrorMemoryAllocation
        .result()
        .unwrap_err();
    assert_eq!(e.name(), "cudaErrorMemoryAllocation");

    let e = cuda_sys::nccl::ncclResult_t::ncclRemoteError.result().unwrap_err();
    assert_eq!(e.name(), "ncclRemoteError");
    assert_eq!(e.description(), "remote error");

    // A value newer than the headers still prints.
    let e = driver::CUresult(54321).result().unwrap_err();
    assert_eq!(e.name(), "UNKNOWN");
    assert!(e.to_string().contains("54321"));
    assert!(e.load_error().is_none());

    for table in [
        driver::STATUS_VALUES,
        nvrtc::STATUS_VALUES,
        cuda_sys::nvml::STATUS_VALUES,
        cuda_sys::runtime::STATUS_VALUES,
        cuda_sys::nccl::STATUS_VALUES,
    ] {
        assert!(table.windows(2).all(|w| w[0].value < w[1].value));
        assert!(table.iter().all(|s| !s.description.is_empty()));
    }
}

#[test]
fn load_errors_round_trip_through_status_codes() {
    let err = driver::LIBRARY.function_pointer("cuNoSuchFunction").unwrap_err();
    assert_eq!(err.kind(), LoadErrorKind::UnknownFunction);

    let lib = LibraryId::Nvrtc.library();
    let index = lib
        .functions()
        .iter()
        .position(|f| f.name.to_str() == Ok("nvrtcCompileProgram"))
        .unwrap();
    let code = (0x7C00_0000u32) | ((LibraryId::Nvrtc as u32) << 16) | index as u32;
    let status = nvrtc::nvrtcResult(code as _);
    let load = status.load_error().expect("a load error");
    assert_eq!(load.library(), LibraryId::Nvrtc);
    assert_eq!(load.function(), Some("nvrtcCompileProgram"));
    assert_eq!(nvrtc::nvrtcResult::from_load_error(load), status);
    let e = status.result().unwrap_err();
    assert_eq!(e.name(), "LOAD_ERROR");
    // Ordinary values are never taken for load errors.
    assert!(nvrtc::nvrtcResult::NVRTC_ERROR_COMPILATION.load_error().is_none());
    assert!(
        driver::CUresult(0x7C00_FFFF).load_error().is_none(),
        "library id 0 does not exist"
    );
}

#[test]
fn per_thread_default_stream_follows_cuda_python() {
    use cuda_sys::per_thread_from_env_value as ptds;
    assert!(!ptds(None));
    assert!(!ptds(Some("")));
    assert!(!ptds(Some("0")));
    assert!(ptds(Some("1")));
    assert!(ptds(Some(" 2 ")));
    assert!(!ptds(Some("yes")), "CUDA Python reads an integer");
}

#[test]
fn a_missing_driver_is_an_error_not_a_panic() {
    if cuda_pathfinder::load_nvidia_dynamic_lib("cuda").is_ok() {
        // A machine with a driver: the GPU suite covers it. Calls must then work.
        let mut version = 0;
        // SAFETY: `version` is a live out-pointer; cuDriverGetVersion needs no cuInit.
        unsafe { driver::cuDriverGetVersion(&mut version) }.result().unwrap();
        assert!(version >= 12000);
        return;
    }
    // SAFETY: cuInit takes only flags, and 0 is the one value it accepts.
    let status = unsafe { driver::cuInit(0) };
    let err = status.result().unwrap_err();
    let load = err.load_error().expect("cuInit must report the missing library");
    assert!(matches!(load.kind(), LoadErrorKind::Library { .. }));
    let text = err.to_string();
    assert!(text.contains("libcuda.so.1"), "{text}");
    assert!(text.contains("install the driver"), "{text}");
    // The same answer every time, without searching again.
    // SAFETY: the argument is an out-pointer to a live temporary (with no driver the
    // binding returns the load error without calling anything).
    let again = unsafe { driver::cuDeviceGetCount(&mut 0) }.result().unwrap_err();
    assert_eq!(again.load_error().unwrap().library(), LibraryId::Driver);
    assert!(driver::LIBRARY.open().is_err());
}
