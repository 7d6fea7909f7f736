//! The Windows rules on simulated trees: DLL names, wheel, conda, toolkit and Program Files
//! folders per architecture, the `PATH` scan, `AddDllDirectory`, availability and PE checks.

use super::{bare_windows, load, rules, touch, FakeLoader};
use crate::catalog::find;
use crate::platform::{is_suppressed_dll, windows_path_candidates, Platform, WindowsArch};
use crate::search::FoundVia;
use std::path::{Path, PathBuf};

const X64: WindowsArch = WindowsArch::X64;
const ARM64: WindowsArch = WindowsArch::Arm64;

#[test]
fn wheels_use_the_cuda_13_arch_folder_and_the_cuda_12_folder_on_x64_only() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/Lib/site-packages");
    touch(&sp.join("nvidia/cuda_runtime/bin/cudart64_12.dll"));
    let env = bare_windows(X64).with("VIRTUAL_ENV", tmp.path().join("venv"));
    let found = load("cudart", &env, &FakeLoader::default()).unwrap();
    assert_eq!(found.found_via, FoundVia::SitePackages);
    assert_eq!(
        found.abs_path.unwrap(),
        sp.join("nvidia/cuda_runtime/bin/cudart64_12.dll")
    );
    let tried: Vec<_> = found.searched.iter().map(|a| a.candidate.clone()).collect();
    assert_eq!(
        tried,
        [
            sp.join("nvidia/cu13/bin/x86_64/cudart64_13.dll").display().to_string(),
            sp.join("nvidia/cu13/bin/x86_64/cudart64_12.dll").display().to_string(),
            sp.join("nvidia/cuda_runtime/bin/cudart64_13.dll").display().to_string(),
        ]
    );
    // arm64 never looks at the (x64-only) CUDA 12 wheel.
    let env = bare_windows(ARM64).with("VIRTUAL_ENV", tmp.path().join("venv"));
    let err = load("cudart", &env, &FakeLoader::default()).unwrap_err();
    assert!(
        err.attempts.iter().all(|a| !a.candidate.contains("cuda_runtime")),
        "{err}"
    );
    touch(&sp.join("nvidia/cu13/bin/arm64/cudart64_13.dll"));
    let found = load("cudart", &env, &FakeLoader::default()).unwrap();
    assert_eq!(
        found.abs_path.unwrap(),
        sp.join("nvidia/cu13/bin/arm64/cudart64_13.dll")
    );
}

#[test]
fn conda_uses_library_bin_and_the_toolkit_bin_x64_before_bin() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("conda/Library/bin/nvrtc64_120_0.dll"));
    let env = bare_windows(X64).with("CONDA_PREFIX", tmp.path().join("conda"));
    let found = load("nvrtc", &env, &FakeLoader::default()).unwrap();
    assert_eq!(found.found_via, FoundVia::Conda);
    assert_eq!(
        found.abs_path.unwrap(),
        tmp.path().join("conda/Library/bin/nvrtc64_120_0.dll")
    );

    let ctk = tmp.path().join("CUDA/v13.0");
    touch(&ctk.join("bin/x64/nvJitLink_130_0.dll"));
    touch(&ctk.join("bin/nvJitLink_120_0.dll"));
    let env = bare_windows(X64).with("CUDA_PATH", &ctk);
    let found = load("nvJitLink", &env, &FakeLoader::default()).unwrap();
    assert_eq!(
        (found.found_via, found.abs_path.unwrap()),
        (FoundVia::CudaPath, ctk.join("bin/x64/nvJitLink_130_0.dll"))
    );
}

#[test]
fn the_path_scan_follows_loadlibrary_skips_relative_entries_and_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("A");
    touch(&a.join("cufft64_12.dll"));
    let list = format!(
        "relative\\dir;{};{}\\;\"{}\";;C:\\Windows",
        a.display(),
        a.display(),
        a.display()
    );
    let c = windows_path_candidates(&list, &["cufft64_12.dll", "cufft64_11.dll"]);
    assert_eq!(
        c,
        [
            a.join("cufft64_12.dll"),
            a.join("cufft64_11.dll"),
            PathBuf::from("C:\\Windows").join("cufft64_12.dll"),
            PathBuf::from("C:\\Windows").join("cufft64_11.dll"),
        ]
    );
    // In the cascade: LoadLibraryExW first, then PATH, both before CUDA_PATH.
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("bin/x64/cufft64_12.dll"));
    let env = bare_windows(X64).with("PATH", &list).with("CUDA_PATH", &ctk);
    let found = load("cufft", &env, &FakeLoader::default()).unwrap();
    assert_eq!(
        (found.found_via, found.abs_path.unwrap()),
        (FoundVia::SystemSearch, a.join("cufft64_12.dll"))
    );
    assert_eq!(found.searched[0].candidate, "LoadLibraryExW(\"cufft64_12.dll\")");
    // Driver libraries take LoadLibraryExW only, never the PATH scan.
    touch(&a.join("nvcuda.dll"));
    let err = load("cuda", &env, &FakeLoader::default()).unwrap_err();
    assert_eq!(err.attempts.len(), 1, "{err}");
}

#[test]
fn add_dll_directory_applies_to_nvrtc_and_cufft_on_windows_only() {
    let path = Path::new("C:/ctk/bin/x64/nvrtc64_130_0.dll");
    let nvrtc = find("nvrtc").unwrap();
    assert_eq!(
        crate::add_dll_directory_for(nvrtc, path, Platform::Windows(X64)),
        Some(PathBuf::from("C:/ctk/bin/x64"))
    );
    assert_eq!(crate::add_dll_directory_for(nvrtc, path, Platform::Linux), None);
    assert_eq!(
        crate::add_dll_directory_for(find("cudart").unwrap(), path, Platform::Windows(X64)),
        None
    );
    let needing: Vec<_> = crate::DESCRIPTORS
        .iter()
        .filter(|d| d.requires_add_dll_directory)
        .map(|d| d.name)
        .collect();
    assert_eq!(needing, ["nvrtc", "cufft"]);
    assert!(crate::DESCRIPTORS
        .iter()
        .filter(|d| d.requires_add_dll_directory)
        .all(|d| !d.windows_dlls.is_empty()));
}

#[test]
fn program_files_holds_versioned_cudnn_newest_first_in_natural_order() {
    let tmp = tempfile::tempdir().unwrap();
    let pf = tmp.path().join("Program Files");
    touch(&pf.join("NVIDIA/CUDNN/v9.9/bin/12.8/cudnn64_9.dll"));
    touch(&pf.join("NVIDIA/CUDNN/v9.10/bin/13.0/cudnn64_9.dll"));
    touch(
        &tmp.path()
            .join("venv/Lib/site-packages/nvidia/cu13/bin/x86_64/cublasLt64_13.dll"),
    );
    let env = bare_windows(X64)
        .with("PROGRAMFILES", &pf)
        .with("VIRTUAL_ENV", tmp.path().join("venv"));
    let found = load("cudnn", &env, &FakeLoader::default()).unwrap();
    assert_eq!(found.found_via, FoundVia::ProgramFiles);
    assert_eq!(
        found.abs_path.unwrap(),
        pf.join("NVIDIA/CUDNN/v9.10/bin/13.0/cudnn64_9.dll")
    );
    // CUDNN_PATH comes before Program Files.
    touch(&tmp.path().join("cudnn/bin/x64/cudnn64_9.dll"));
    let env = env.with("CUDNN_PATH", tmp.path().join("cudnn"));
    assert_eq!(
        load("cudnn", &env, &FakeLoader::default()).unwrap().found_via,
        FoundVia::InstallRootVar("CUDNN_PATH")
    );
    // arm64: only CUDNN_PATH/bin/arm64, never Program Files.
    touch(
        &tmp.path()
            .join("venv/Lib/site-packages/nvidia/cu13/bin/arm64/cublasLt64_13.dll"),
    );
    let env = bare_windows(ARM64)
        .with("PROGRAMFILES", &pf)
        .with("VIRTUAL_ENV", tmp.path().join("venv"));
    let err = load("cudnn", &env, &FakeLoader::default()).unwrap_err();
    assert!(!rules(&err.attempts).contains(&FoundVia::ProgramFiles), "{err}");
}

#[test]
fn availability_is_per_platform_and_architecture() {
    let loader = FakeLoader::default();
    for (name, platform) in [
        ("cufile", Platform::Windows(X64)),
        ("nccl", Platform::Windows(ARM64)),
        ("cudla", Platform::Windows(X64)),
        ("nvcudla", Platform::Windows(ARM64)),
    ] {
        let env = crate::env::Environment {
            platform,
            ..super::bare()
        };
        let err = load(name, &env, &loader).unwrap_err();
        assert!(err.is_not_available() && !err.is_unknown(), "{name}: {err}");
        assert!(err.attempts.is_empty(), "{name}: nothing is searched");
        assert!(err.to_string().contains("not available on this platform"), "{err}");
    }
    let env = bare_windows(ARM64);
    let err = load("cudla", &env, &loader).unwrap_err();
    assert!(!err.is_not_available(), "cudla exists on arm64: {err}");
    assert_eq!(crate::windows_supported_arches("cudla").unwrap(), [ARM64]);
    assert_eq!(crate::windows_supported_arches("cudart").unwrap(), [X64, ARM64]);
    assert!(crate::windows_supported_arches("cufile").unwrap().is_empty());
}

#[test]
fn architecture_tags_and_unsupported_ones() {
    assert_eq!(WindowsArch::from_platform_tag("win-amd64"), Ok(X64));
    assert_eq!(WindowsArch::from_platform_tag("WIN_ARM64"), Ok(ARM64));
    let err = WindowsArch::from_platform_tag("win32").unwrap_err();
    assert_eq!(err.platform_tag, "win32");
    assert!(err.to_string().contains("win-amd64"), "{err}");
    assert_eq!(Platform::current(), Ok(Platform::Linux));
}

/// A PE image header for `machine`.
fn pe(path: &Path, machine: u16) {
    let mut bytes = vec![0u8; 0x80];
    bytes[..2].copy_from_slice(b"MZ");
    bytes[0x3C..0x40].copy_from_slice(&0x40u32.to_le_bytes());
    bytes[0x40..0x44].copy_from_slice(b"PE\0\0");
    bytes[0x44..0x46].copy_from_slice(&machine.to_le_bytes());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn nvvm_in_a_folder_not_named_for_an_architecture_must_be_a_pe_image_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("ctk");
    pe(&ctk.join("nvvm/bin/nvvm64_40_0.dll"), 0xAA64);
    let env = bare_windows(X64).with("CUDA_PATH", &ctk);
    let err = load("nvvm", &env, &FakeLoader::default()).unwrap_err();
    let in_bin = ctk.join("nvvm/bin/nvvm64_40_0.dll").display().to_string();
    let tried = err.attempts.iter().find(|a| a.candidate == in_bin);
    assert_eq!(tried.unwrap().rejected_because, "not an x64 PE image", "{err}");
    let env = bare_windows(ARM64).with("CUDA_PATH", &ctk);
    assert_eq!(
        load("nvvm", &env, &FakeLoader::default()).unwrap().found_via,
        FoundVia::CudaPath
    );
    // A folder named for the architecture is trusted.
    touch(&ctk.join("nvvm/bin/x64/nvvm64_40_0.dll"));
    let env = bare_windows(X64).with("CUDA_PATH", &ctk);
    assert!(load("nvvm", &env, &FakeLoader::default())
        .unwrap()
        .abs_path
        .unwrap()
        .ends_with("x64/nvvm64_40_0.dll"));
    assert!(!crate::pe_matches_arch(&tmp.path().join("missing.dll"), X64));
}

#[test]
fn companion_dlls_of_the_same_prefix_are_not_the_library() {
    for name in [
        "nvrtc64_130_0.alt.dll",
        "nvrtc-builtins64_130.dll",
        "cudart32_12.dll",
        "nvvm32.dll",
    ] {
        assert!(is_suppressed_dll(name), "{name}");
    }
    assert!(!is_suppressed_dll("nvrtc64_130_0.dll"));
}

#[test]
fn the_canary_reads_bin_and_bin_arch_folders_without_regard_to_case() {
    let w = Platform::Windows(X64);
    let root = |p: &str| crate::derive_ctk_root(Path::new(p), w);
    assert_eq!(
        root("C:/CUDA/v13.0/bin/x64/cudart64_13.dll"),
        Some(PathBuf::from("C:/CUDA/v13.0"))
    );
    assert_eq!(
        root("C:/CUDA/v12.9/BIN/cudart64_12.dll"),
        Some(PathBuf::from("C:/CUDA/v12.9"))
    );
    assert_eq!(
        root("C:/CUDA/v13.0/Bin/ARM64/cudart64_13.dll"),
        Some(PathBuf::from("C:/CUDA/v13.0"))
    );
    assert_eq!(root("C:/CUDA/v13.0/lib/x64/cudart64_13.dll"), None);

    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("v13.0");
    touch(&ctk.join("bin/x64/cudart64_13.dll"));
    touch(&ctk.join("extras/CUPTI/lib64/cupti64_2025.3.1.dll"));
    let env = bare_windows(X64).with("PATH", ctk.join("bin/x64"));
    let found = load("cupti", &env, &FakeLoader::default()).unwrap();
    assert_eq!(found.found_via, FoundVia::SystemCtkRoot);
    assert!(found.abs_path.unwrap().ends_with("cupti64_2025.3.1.dll"));
}

#[test]
fn dll_names_are_declared_newest_first_and_unique() {
    let mut seen = std::collections::HashMap::new();
    for d in crate::DESCRIPTORS {
        for dll in d.windows_dlls {
            assert!(dll.ends_with(".dll"), "{}: {dll}", d.name);
            if let Some(other) = seen.insert(*dll, d.name) {
                panic!("{dll} belongs to both {other} and {}", d.name);
            }
        }
        assert_eq!(d.windows_dlls.is_empty(), d.windows_arches.is_empty(), "{}", d.name);
    }
    assert_eq!(
        find("cudart").unwrap().windows_dlls,
        ["cudart64_13.dll", "cudart64_12.dll"]
    );
    assert_eq!(find("cupti").unwrap().windows_dlls[0], "cupti64_2026.3.1.dll");
}
