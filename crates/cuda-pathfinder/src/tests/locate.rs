//! Headers, tools, bitcode and static libraries on simulated layouts, and toolkit versions.

use super::{bare, bare_windows, touch, touch_exe, FakeLoader};
use crate::locate::{find_binary_in, find_bitcode_in, find_static_in, locate_header_in};
use crate::platform::WindowsArch;
use crate::search::FoundVia;
use crate::versions::{compatibility_warnings, toolkit_version_of, ToolkitVersion};
use std::path::PathBuf;

#[test]
fn headers_in_wheels_conda_targets_cuda_path_and_nvvm_include() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/include/nvrtc.h"));
    touch(&sp.join("nvidia/cuda_runtime/include/cuda_runtime.h"));
    let conda = tmp.path().join("conda");
    touch(&conda.join("targets/x86_64-linux/include/cublas.h"));
    touch(&conda.join("include/cutensor.h"));
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("nvvm/include/nvvm.h"));
    touch(&ctk.join("include/cccl/cuda/std/version"));
    touch(&ctk.join("include/cuda/std/version"));
    let env = bare()
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("CONDA_PREFIX", &conda)
        .with("CUDA_PATH", &ctk);
    let l = FakeLoader::default();
    let nvrtc = locate_header_in("nvrtc", &env, &l).unwrap();
    assert_eq!(
        (nvrtc.abs_path, nvrtc.found_via),
        (sp.join("nvidia/cu13/include"), FoundVia::SitePackages)
    );
    assert_eq!(
        locate_header_in("cudart", &env, &l).unwrap().abs_path,
        sp.join("nvidia/cuda_runtime/include")
    );
    let cublas = locate_header_in("cublas", &env, &l).unwrap();
    assert_eq!(
        (cublas.found_via, cublas.abs_path),
        (FoundVia::Conda, conda.join("targets/x86_64-linux/include"))
    );
    // Other products' headers sit in the conda prefix's include.
    assert_eq!(
        locate_header_in("cutensor", &env, &l).unwrap().abs_path,
        conda.join("include")
    );
    assert_eq!(
        locate_header_in("nvvm", &env, &l).unwrap().abs_path,
        ctk.join("nvvm/include")
    );
    // CUDA 13 keeps CCCL in include/cccl, tried before include.
    assert_eq!(
        locate_header_in("cccl", &env, &l).unwrap().abs_path,
        ctk.join("include/cccl")
    );
    let err = locate_header_in("cufft", &env, &l).unwrap_err();
    assert!(
        err.attempts.iter().any(|a| a.rejected_because == "no cufft.h there"),
        "{err}"
    );
}

#[test]
fn every_header_of_cuda_pathfinder_is_known_with_its_marker() {
    let known: Vec<_> = crate::supported_headers().collect();
    for (name, marker) in [
        ("cudla", "cudla.h"),
        ("cusparseLt", "cusparseLt.h"),
        ("cutlass", "cutlass/cutlass.h"),
        ("cute", "cute/tensor.hpp"),
        ("cutensor", "cutensor.h"),
        ("mathdx", "libmathdx.h"),
        ("nvshmem", "nvshmem.h"),
        ("cusolverMp", "cusolverMp.h"),
        ("custatevec", "custatevec.h"),
        ("cutensornet", "cutensornet.h"),
        ("cudensitymat", "cudensitymat.h"),
        ("cupauliprop", "cupauliprop.h"),
        ("custabilizer", "custabilizer.h"),
        ("profiler", "cuda_profiler_api.h"),
    ] {
        assert!(known.contains(&(name, marker)), "{name}");
    }
    let ctk: Vec<_> = crate::supported_headers_ctk().map(|(n, _)| n).collect();
    assert!(ctk.contains(&"cudla") && !ctk.contains(&"cutlass"));
}

#[test]
fn cutlass_and_cute_come_from_the_cutlass_wheel_and_nvshmem_is_linux_only() {
    let tmp = tempfile::tempdir().unwrap();
    let inc = tmp
        .path()
        .join("venv/lib/python3.12/site-packages/cutlass_library/source/include");
    touch(&inc.join("cutlass/cutlass.h"));
    touch(&inc.join("cute/tensor.hpp"));
    let env = bare().with("VIRTUAL_ENV", tmp.path().join("venv"));
    let l = FakeLoader::default();
    for name in ["cutlass", "cute"] {
        assert_eq!(locate_header_in(name, &env, &l).unwrap().abs_path, inc);
    }
    let err = locate_header_in("nvshmem", &bare_windows(WindowsArch::X64), &l).unwrap_err();
    assert!(err.is_not_available(), "{err}");
}

#[test]
fn headers_tools_and_libdevice_come_from_the_canarys_toolkit() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("cuda-13.0");
    touch(&ctk.join("lib64/libcudart.so.13"));
    touch(&ctk.join("include/cuda_runtime.h"));
    touch_exe(&ctk.join("bin/nvcc"));
    touch(&ctk.join("nvvm/libdevice/libdevice.10.bc"));
    let env = bare().with("LD_LIBRARY_PATH", ctk.join("lib64"));
    let l = FakeLoader::default();
    let nvcc = find_binary_in("nvcc", &env, &l).unwrap();
    assert_eq!(
        (nvcc.found_via, nvcc.abs_path),
        (FoundVia::SystemCtkRoot, ctk.join("bin/nvcc"))
    );
    assert_eq!(
        locate_header_in("cudart", &env, &l).unwrap().found_via,
        FoundVia::SystemCtkRoot
    );
    assert_eq!(
        find_bitcode_in("device", &env, &l).unwrap().found_via,
        FoundVia::SystemCtkRoot
    );
    // Other products' headers never use it.
    let err = locate_header_in("cutensor", &env, &l).unwrap_err();
    assert!(!err.attempts.iter().any(|a| a.rule == FoundVia::SystemCtkRoot), "{err}");
}

#[test]
fn tools_must_be_executable_and_come_from_wheels_before_the_toolkit() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/bin/ptxas")); // not executable
    let ctk = tmp.path().join("ctk");
    touch_exe(&ctk.join("bin/ptxas"));
    touch_exe(&sp.join("nvidia/cuda_nvcc/bin/nvcc"));
    touch_exe(&ctk.join("bin/nvcc"));
    let env = bare()
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("CUDA_PATH", &ctk);
    let l = FakeLoader::default();
    let ptxas = find_binary_in("ptxas", &env, &l).unwrap();
    assert_eq!(
        (ptxas.abs_path, ptxas.found_via),
        (ctk.join("bin/ptxas"), FoundVia::CudaPath)
    );
    assert_eq!(ptxas.searched[0].rejected_because, "not executable");
    assert_eq!(
        find_binary_in("nvcc", &env, &l).unwrap().found_via,
        FoundVia::SitePackages
    );
    let err = find_binary_in("cuobjdump", &env, &l).unwrap_err();
    assert!(err.attempts.len() >= 4, "{err}");
}

#[test]
fn windows_tools_are_exe_or_bat_in_bin_x64() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("bin/x64/nvcc.exe"));
    touch(&ctk.join("compute-sanitizer/compute-sanitizer.bat"));
    touch(&ctk.join("lib/x64/cudadevrt.lib"));
    let env = bare_windows(WindowsArch::X64).with("CUDA_PATH", &ctk);
    let l = FakeLoader::default();
    assert_eq!(
        find_binary_in("nvcc", &env, &l).unwrap().abs_path,
        ctk.join("bin/x64/nvcc.exe")
    );
    assert_eq!(
        find_binary_in("compute-sanitizer", &env, &l).unwrap().abs_path,
        ctk.join("compute-sanitizer/compute-sanitizer.bat")
    );
    assert_eq!(
        find_static_in("cudadevrt", &env, &l).unwrap().abs_path,
        ctk.join("lib/x64/cudadevrt.lib")
    );
}

#[test]
fn bitcode_and_static_libraries() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("nvvm/libdevice/libdevice.10.bc"));
    touch(&ctk.join("lib64/libcudadevrt.a"));
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/nvshmem/lib/libnvshmem_device.bc"));
    let env = bare()
        .with("CUDA_HOME", &ctk)
        .with("VIRTUAL_ENV", tmp.path().join("venv"));
    let l = FakeLoader::default();
    let dev = find_bitcode_in("device", &env, &l).unwrap();
    assert_eq!(
        (dev.abs_path.clone(), dev.found_via),
        (ctk.join("nvvm/libdevice/libdevice.10.bc"), FoundVia::CudaPath)
    );
    assert_eq!(dev.filename(), "libdevice.10.bc");
    assert_eq!(
        find_static_in("cudadevrt", &env, &l).unwrap().abs_path,
        ctk.join("lib64/libcudadevrt.a")
    );
    let shmem = find_bitcode_in("nvshmem_device", &env, &l).unwrap();
    assert_eq!(
        (shmem.found_via, shmem.filename()),
        (FoundVia::SitePackages, "libnvshmem_device.bc".to_string())
    );
    let err = find_bitcode_in("nccl_device", &env, &l).unwrap_err();
    assert!(err.hint.contains("nvidia-nccl"), "{err}");
    let err = find_bitcode_in("nvshmem_device", &bare_windows(WindowsArch::X64), &l).unwrap_err();
    assert!(err.is_not_available(), "{err}");
    let env = crate::env::Environment {
        default_ctk_root: Some(tmp.path().join("usr-local-cuda")),
        ..bare()
    };
    let err = find_bitcode_in("device", &env, &l).unwrap_err();
    assert!(
        err.to_string()
            .contains("usr-local-cuda/nvvm/libdevice/libdevice.10.bc: no such file"),
        "{err}"
    );
}

trait TapParent {
    fn tap_parent(self) -> Self;
}

impl TapParent for PathBuf {
    /// Creates the parent folder, for writing the file next.
    fn tap_parent(self) -> Self {
        std::fs::create_dir_all(self.parent().unwrap()).unwrap();
        self
    }
}

#[test]
fn toolkit_versions_from_wheel_metadata_cuda_h_and_file_names() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/lib/libnvrtc.so.13"));
    let dist = sp.join("nvidia_cuda_nvrtc-13.5.37.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("RECORD"), "nvidia/cu13/lib/libnvrtc.so.13,sha256=x,1\n").unwrap();
    std::fs::write(
        dist.join("METADATA"),
        "Metadata-Version: 2.1\nName: nvidia-cuda-nvrtc\nVersion: 13.5.37\n",
    )
    .unwrap();
    let v = toolkit_version_of(&sp.join("nvidia/cu13/lib/libnvrtc.so.13")).unwrap();
    assert_eq!((v.major, v.minor), (13, 5));
    assert!(v.source.contains("nvidia-cuda-nvrtc 13.5.37"), "{}", v.source);

    let ctk = tmp.path().join("cuda-12.9");
    let lib = ctk.join("targets/x86_64-linux/lib/libcudart.so.12");
    touch(&lib);
    std::fs::write(
        ctk.join("targets/x86_64-linux/include/cuda.h").tap_parent(),
        "#define CUDA_VERSION 12090\n",
    )
    .unwrap();
    let v = toolkit_version_of(&lib).unwrap();
    assert_eq!((v.major, v.minor), (12, 9));

    let real = tmp.path().join("lib/libnvJitLink.so.13.0.88");
    touch(&real);
    std::os::unix::fs::symlink(&real, tmp.path().join("lib/libnvJitLink.so.13")).unwrap();
    let v = toolkit_version_of(&tmp.path().join("lib/libnvJitLink.so.13")).unwrap();
    assert_eq!(
        (v.major, v.minor, v.source.as_str()),
        (13, 0, "file name libnvJitLink.so.13.0.88")
    );
    assert!(toolkit_version_of(&tmp.path().join("lib/libsomething.so")).is_none());

    // Library wheels number their own versions: only a cuda-toolkit pin tells their toolkit.
    touch(&sp.join("nvidia/cu13/lib/libcublas.so.13"));
    let dist = sp.join("nvidia_cublas-13.1.0.3.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("RECORD"), "nvidia/cu13/lib/libcublas.so.13,sha256=x,1\n").unwrap();
    std::fs::write(dist.join("METADATA"), "Name: nvidia-cublas\nVersion: 13.1.0.3\n").unwrap();
    assert!(toolkit_version_of(&sp.join("nvidia/cu13/lib/libcublas.so.13")).is_none());
    let dist = sp.join("cuda_toolkit-13.1.0.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(
        dist.join("METADATA"),
        "Name: cuda-toolkit\nVersion: 13.1.0\nRequires-Dist: nvidia-cublas==13.1.0.3; extra == \"cublas\"\n",
    )
    .unwrap();
    let v = toolkit_version_of(&sp.join("nvidia/cu13/lib/libcublas.so.13")).unwrap();
    assert_eq!((v.major, v.minor), (13, 1), "{}", v.source);
    let v = toolkit_version_of(&sp.join("nvidia/cu13/lib")).unwrap();
    assert_eq!((v.major, v.minor), (13, 5));
}

#[test]
fn the_advisory_warnings_remain_for_callers_of_the_old_api() {
    let v = |major, minor| ToolkitVersion {
        major,
        minor,
        source: String::new(),
    };
    let same = [("nvrtc".to_string(), v(13, 0)), ("cudart".to_string(), v(13, 0))];
    assert!(compatibility_warnings(&same, Some((13, 0))).is_empty());
    let mixed = [("nvrtc".to_string(), v(13, 5)), ("cudart".to_string(), v(12, 9))];
    let w = compatibility_warnings(&mixed, Some((13, 0)));
    assert!(
        w[0].contains("different toolkit versions") && w[0].contains("nvrtc 13.5"),
        "{w:?}"
    );
    let w = compatibility_warnings(&[("nvrtc".to_string(), v(13, 0))], Some((12, 8)));
    assert!(w[0].contains("newer than the driver supports"), "{w:?}");
}
