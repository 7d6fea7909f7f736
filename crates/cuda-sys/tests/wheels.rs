//! The compiler libraries from NVIDIA's pip wheels, loaded and used on the CPU.
//!
//! `cargo xtask test` installs the wheels into `.cuda-venv/` and sets `VIRTUAL_ENV` and
//! `CUDA_RS_REQUIRE_WHEELS=1`; under a plain `cargo test` without them these tests say so and
//! stop early.

use cuda_sys::{nvjitlink, nvrtc, nvvm, runtime, LibraryId};
use std::ffi::{c_char, CStr, CString};
use std::ptr;

fn available(lib: LibraryId) -> bool {
    match lib.library().open() {
        Ok(()) => true,
        Err(e) if std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_some() => {
            panic!("{lib} must load from the wheels (CUDA_RS_REQUIRE_WHEELS is set): {e}")
        }
        Err(e) => {
            eprintln!("skipping: {e}\n(run cargo xtask test to install the wheels)");
            false
        }
    }
}

fn assert_from_wheel(lib: LibraryId) {
    let path = lib.library().path().expect("the loader knows the path");
    assert_eq!(
        lib.library().found_via(),
        Some(cuda_pathfinder::FoundVia::SitePackages),
        "{lib} came from {}",
        path.display()
    );
    assert!(
        path.to_string_lossy().contains("site-packages/nvidia/"),
        "{}",
        path.display()
    );
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

/// Compiles `source` with `options`, returning the status, the log and the program, which the
/// caller destroys with `nvrtcDestroyProgram`.
fn compile(source: &str, options: &[&str]) -> (nvrtc::nvrtcResult, String, nvrtc::nvrtcProgram) {
    let src = CString::new(source).unwrap();
    let mut prog: nvrtc::nvrtcProgram = ptr::null_mut();
    // SAFETY: `prog` is a live out-pointer; `src` and the name are NUL-terminated strings that
    // outlive the call (NVRTC copies them); 0 headers go with null header and name arrays.
    unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"saxpy.cu".as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        )
    }
    .result()
    .unwrap();
    let opts: Vec<CString> = options.iter().map(|o| CString::new(*o).unwrap()).collect();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: `prog` was just created and not destroyed; `opt_ptrs` holds `opt_ptrs.len()` pointers
    // to NUL-terminated strings owned by `opts`, which lives past the call.
    let status = unsafe { nvrtc::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let mut size = 0;
    // SAFETY: `prog` is live and `size` a live out-pointer.
    unsafe { nvrtc::nvrtcGetProgramLogSize(prog, &mut size) }
        .result()
        .unwrap();
    let mut log = vec![0u8; size];
    // SAFETY: `prog` is live and `log` has the `size` bytes NVRTC just said the log needs.
    unsafe { nvrtc::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast()) }
        .result()
        .unwrap();
    let log = CStr::from_bytes_until_nul(&log).unwrap().to_string_lossy().into_owned();
    (status, log, prog)
}

#[test]
fn nvrtc_from_the_wheel_reports_its_version_and_compiles() {
    if !available(LibraryId::Nvrtc) {
        return;
    }
    assert_from_wheel(LibraryId::Nvrtc);
    let (mut major, mut minor) = (0, 0);
    // SAFETY: every pointer handed to NVRTC is a live local, a NUL-terminated static string, or a
    // buffer of the size NVRTC just reported; each program comes from `compile`, is used only
    // before it is destroyed, and is destroyed once.
    unsafe {
        nvrtc::nvrtcVersion(&mut major, &mut minor).result().unwrap();
        assert_eq!(
            major * 1000 + minor * 10,
            cuda_sys::HEADER_CUDA_VERSION as i32,
            "{major}.{minor}"
        );

        let (status, log, mut prog) = compile(SAXPY, &["--gpu-architecture=sm_90"]);
        status.result().unwrap_or_else(|e| panic!("{e}\n{log}"));
        let mut size = 0;
        nvrtc::nvrtcGetCUBINSize(prog, &mut size).result().unwrap();
        let mut cubin = vec![0u8; size];
        nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result().unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();

        let (status, log, mut prog) = compile(SAXPY, &["--gpu-architecture=compute_90"]);
        status.result().unwrap_or_else(|e| panic!("{e}\n{log}"));
        let mut size = 0;
        nvrtc::nvrtcGetPTXSize(prog, &mut size).result().unwrap();
        let mut ptx = vec![0u8; size];
        nvrtc::nvrtcGetPTX(prog, ptx.as_mut_ptr().cast()).result().unwrap();
        let ptx = CStr::from_bytes_until_nul(&ptx).unwrap().to_str().unwrap();
        assert!(ptx.contains(".entry saxpy"), "{ptx}");
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
    }
}

#[test]
fn a_failed_compile_is_an_error_with_a_log() {
    if !available(LibraryId::Nvrtc) {
        return;
    }
    // SAFETY: `prog` comes from `compile` and is destroyed once, after its last use.
    unsafe {
        let (status, log, mut prog) = compile("__global__ void k() { not_a_real_symbol(); }", &[]);
        let err = status.result().unwrap_err();
        assert_eq!(err.name(), "NVRTC_ERROR_COMPILATION");
        assert!(log.contains("not_a_real_symbol"), "{log}");
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
    }
}

#[test]
fn nvjitlink_from_the_wheel_reports_its_version_and_links() {
    if !available(LibraryId::NvJitLink) || !available(LibraryId::Nvrtc) {
        return;
    }
    assert_from_wheel(LibraryId::NvJitLink);
    // SAFETY: every pointer handed to NVRTC and nvJitLink is a live local, a NUL-terminated static
    // string, an array of `option_ptrs.len()` (or 1) such strings, or a buffer of the size the
    // library just reported (`ltoir` outlives the link); the program and the link handle are used
    // only before they are destroyed, and destroyed once.
    unsafe {
        let (mut major, mut minor) = (0u32, 0u32);
        nvjitlink::nvJitLinkVersion(&mut major, &mut minor).result().unwrap();
        assert_eq!(major * 1000 + minor * 10, cuda_sys::HEADER_CUDA_VERSION);

        // LTO-IR from NVRTC, linked to a cubin by nvJitLink.
        let (status, log, mut prog) = compile(
            SAXPY,
            &["--gpu-architecture=sm_90", "-dlto", "--relocatable-device-code=true"],
        );
        status.result().unwrap_or_else(|e| panic!("{e}\n{log}"));
        let mut size = 0;
        nvrtc::nvrtcGetLTOIRSize(prog, &mut size).result().unwrap();
        let mut ltoir = vec![0u8; size];
        nvrtc::nvrtcGetLTOIR(prog, ltoir.as_mut_ptr().cast()).result().unwrap();
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();

        let options = [c"-arch=sm_90", c"-lto"];
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut handle: nvjitlink::nvJitLinkHandle = ptr::null_mut();
        nvjitlink::nvJitLinkCreate(&mut handle, option_ptrs.len() as u32, option_ptrs.as_ptr())
            .result()
            .unwrap();
        nvjitlink::nvJitLinkAddData(
            handle,
            nvjitlink::nvJitLinkInputType::NVJITLINK_INPUT_LTOIR,
            ltoir.as_ptr().cast(),
            ltoir.len(),
            c"saxpy.ltoir".as_ptr(),
        )
        .result()
        .unwrap();
        nvjitlink::nvJitLinkComplete(handle).result().unwrap();
        let mut size = 0;
        nvjitlink::nvJitLinkGetLinkedCubinSize(handle, &mut size)
            .result()
            .unwrap();
        let mut cubin = vec![0u8; size];
        nvjitlink::nvJitLinkGetLinkedCubin(handle, cubin.as_mut_ptr().cast())
            .result()
            .unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF");
        nvjitlink::nvJitLinkDestroy(&mut handle).result().unwrap();

        // An unknown option is reported as such.
        let bad = [c"-no-such-option"];
        let bad_ptrs: Vec<*const c_char> = bad.iter().map(|o| o.as_ptr()).collect();
        let mut handle: nvjitlink::nvJitLinkHandle = ptr::null_mut();
        let err = nvjitlink::nvJitLinkCreate(&mut handle, 1, bad_ptrs.as_ptr())
            .result()
            .unwrap_err();
        assert_eq!(err.name(), "NVJITLINK_ERROR_UNRECOGNIZED_OPTION", "{err}");
    }
}

#[test]
fn nvvm_and_cudart_from_the_wheels_report_their_versions() {
    if available(LibraryId::Nvvm) {
        assert_from_wheel(LibraryId::Nvvm);
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the four arguments are out-pointers to live locals.
        unsafe { nvvm::nvvmIRVersion(&mut major, &mut minor, &mut 0, &mut 0) }
            .result()
            .unwrap();
        assert!(major >= 2, "NVVM IR {major}.{minor}");
    }
    if available(LibraryId::Runtime) {
        assert_from_wheel(LibraryId::Runtime);
        let mut version = 0;
        // SAFETY: `version` is a live out-pointer; cudaRuntimeGetVersion needs no GPU.
        unsafe { runtime::cudaRuntimeGetVersion(&mut version) }
            .result()
            .unwrap();
        assert_eq!(version as u32, cuda_sys::HEADER_CUDA_VERSION);
    }
}

/// Run by `nvrtc_12_from_its_wheel_works_through_the_same_bindings` in a child process whose
/// only NVRTC is the CUDA 12 wheel.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_nvrtc_12() {
    let Some(expected) = std::env::var_os("CUDA_RS_CHILD_EXPECT_NVRTC") else {
        return; // only meaningful in the child
    };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: `major` and `minor` are live out-pointers; `prog` comes from `compile` and is
    // destroyed once, after its last use.
    unsafe {
        nvrtc::nvrtcVersion(&mut major, &mut minor).result().unwrap();
        assert_eq!(format!("{major}.{minor}"), expected.to_string_lossy());
        let (status, log, mut prog) = compile(SAXPY, &["--gpu-architecture=sm_90"]);
        status.result().unwrap_or_else(|e| panic!("{e}\n{log}"));
        nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
    }
    println!(
        "NVRTC {major}.{minor} from {}",
        LibraryId::Nvrtc.library().path().unwrap().display()
    );
}

#[test]
fn nvrtc_12_from_its_wheel_works_through_the_same_bindings() {
    let Some(venv) = std::env::var_os("VIRTUAL_ENV") else {
        assert!(
            std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_none(),
            "VIRTUAL_ENV must be set"
        );
        return;
    };
    let site = cuda_pathfinder::site_packages_dirs()
        .into_iter()
        .find(|d| d.starts_with(&venv))
        .expect("the venv has a site-packages folder");
    let nvrtc12 = site.join("nvidia/cuda_nvrtc");
    if !nvrtc12.is_dir() {
        assert!(
            std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_none(),
            "nvidia-cuda-nvrtc-cu12 is not installed"
        );
        return;
    }
    // A second environment that holds only the CUDA 12 NVRTC wheel.
    let tmp = tempfile::tempdir().unwrap();
    let child_site = tmp.path().join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&child_site).unwrap();
    std::os::unix::fs::symlink(&nvrtc12, child_site.join("cuda_nvrtc")).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_nvrtc_12", "--nocapture", "--include-ignored"])
        .env("VIRTUAL_ENV", tmp.path())
        .env("CUDA_RS_CHILD_EXPECT_NVRTC", "12.9")
        .env_remove("CONDA_PREFIX")
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("NVRTC 12.9 from") && text.contains("cuda_nvrtc/lib/libnvrtc.so.12"),
        "{text}"
    );
}
