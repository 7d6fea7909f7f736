//! `cuda-pathfinder` on a machine with a driver and a toolkit.

use cuda_pathfinder::{self as pf, FoundVia};
use std::path::Path;

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn finds_the_driver_and_the_toolkit_pieces_this_project_uses() {
    for name in ["cuda", "nvml"] {
        let lib = pf::load_nvidia_dynamic_lib(name).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(lib.found_via, FoundVia::SystemSearch | FoundVia::AlreadyLoaded),
            "{name}: {}",
            lib.found_via
        );
    }
    for name in ["nvrtc", "nvJitLink", "nvvm", "cudart", "cufile"] {
        let lib = pf::load_nvidia_dynamic_lib(name).unwrap_or_else(|e| panic!("{e}"));
        let path = lib.abs_path.as_deref().unwrap();
        let version = pf::toolkit_version_of(path);
        println!("{name}: {} via {} (toolkit {version:?})", path.display(), lib.found_via);
        for a in &lib.searched {
            println!("  passed over [{}] {}: {}", a.rule, a.candidate, a.rejected_because);
        }
        assert!(path.is_file());
    }
    let libdevice = pf::find_bitcode_lib("device").unwrap_or_else(|e| panic!("{e}"));
    println!(
        "libdevice: {} via {}",
        libdevice.abs_path.display(),
        libdevice.found_via
    );
    let (major, minor) = pf::driver_cuda_version().expect("the driver reports its version");
    assert!(major >= 12, "{major}.{minor}");
    for w in pf::warnings() {
        println!("warning: {w}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_driver_release_and_cuda_version_feed_the_guard_rails() {
    let cuda = pf::query_driver_cuda_version().unwrap_or_else(|e| panic!("{e}"));
    let release = pf::query_driver_release_version().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "driver: CUDA {cuda} (cuDriverGetVersion {}), release {}",
        cuda.encoded, release.text
    );
    assert!(cuda.major >= 12 && cuda.encoded == cuda.major * 1000 + cuda.minor * 10);
    assert!(release.branch >= 450, "{}", release.text);
    // Each toolkit piece through fresh guard rails: print the verdict; a rejection by the driver
    // check would mean this machine's driver cannot run its own toolkit.
    let rails = pf::CompatibilityGuardRails::new();
    for name in ["cudart", "nvrtc", "nvJitLink", "nvvm"] {
        let Ok(lib) = pf::unguarded::load_nvidia_dynamic_lib(name) else {
            continue;
        };
        let verdict = pf::ResolvedItem::dynamic_lib(name, lib).and_then(|item| rails.register_and_check(item));
        println!("{name}: {verdict:?}");
        if let Err(pf::Error::CompatibilityCheck(e)) = &verdict {
            assert_ne!(e.kind, pf::CompatibilityCheckKind::Driver, "{e}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_system_toolkit_is_found_through_the_loader_or_its_canary() {
    let root = Path::new("/usr/local/cuda");
    if !root.join("bin/nvcc").is_file() {
        println!("skipped: no toolkit in /usr/local/cuda");
        return;
    }
    let nvcc = pf::find_nvidia_binary_utility("nvcc").unwrap_or_else(|e| panic!("{e}"));
    println!("nvcc: {} via {}", nvcc.abs_path.display(), nvcc.found_via);
    for a in &nvcc.searched {
        println!("  passed over [{}] {}: {}", a.rule, a.candidate, a.rejected_because);
    }
    assert!(nvcc.abs_path.is_file());
    let headers = pf::locate_nvidia_header_directory("cudart").unwrap_or_else(|e| panic!("{e}"));
    assert!(headers.abs_path.join("cuda_runtime.h").is_file());
    // The root the canary derives from the toolkit's own cudart.
    for lib in ["lib64/libcudart.so.13", "lib64/libcudart.so.12"] {
        let path = root.join(lib);
        if path.is_file() {
            let derived = pf::derive_ctk_root(&path, pf::Platform::Linux);
            assert_eq!(derived.as_deref(), Some(root), "{}", path.display());
        }
    }
}
