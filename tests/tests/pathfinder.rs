//! `cuda-pathfinder` on a machine with a driver and a toolkit.

use cuda_pathfinder::{self as pf, FoundVia};

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
