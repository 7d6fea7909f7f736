//! The search rules on fake directory trees (empty files named like the real ones).

use crate::catalog::find;
use crate::locate::{find_binary_in, find_bitcode_in, find_static_in, locate_header_in};
use crate::search::{file_candidates, load, site_packages_of, Environment, FoundVia};
use crate::versions::{compatibility_warnings, toolkit_version_of, ToolkitVersion};
use std::path::{Path, PathBuf};

fn touch(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"").unwrap();
}

fn touch_exe(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    touch(path);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An environment that sees nothing of this machine: the default toolkit root is in `tmp`.
fn bare(tmp: &Path) -> Environment {
    Environment {
        default_ctk_root: tmp.join("usr-local-cuda"),
        ..Default::default()
    }
}

fn rules(list: &[(FoundVia, PathBuf)]) -> Vec<FoundVia> {
    let mut out: Vec<FoundVia> = Vec::new();
    for (r, _) in list {
        if out.last() != Some(r) {
            out.push(*r);
        }
    }
    out
}

#[test]
fn wheels_then_conda_then_cuda_path_and_the_default_root_last() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = tmp.path().join("venv");
    std::fs::create_dir_all(venv.join("lib/python3.12/site-packages")).unwrap();
    let env = bare(tmp.path())
        .with("VIRTUAL_ENV", &venv)
        .with("CONDA_PREFIX", tmp.path().join("conda"))
        .with("CUDA_PATH", tmp.path().join("ctk"));
    let (early, late, _) = file_candidates(find("nvrtc").unwrap(), &env);
    assert_eq!(
        rules(&early),
        [FoundVia::SitePackages, FoundVia::Conda, FoundVia::CudaPath]
    );
    assert_eq!(rules(&late), [FoundVia::SystemCtkRoot]);
    assert_eq!(
        early[0].1,
        venv.join("lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13")
    );
}

#[test]
fn the_cuda_13_wheel_comes_before_the_cuda_12_folder_and_newest_soname_first() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(&sp).unwrap();
    let env = bare(tmp.path()).with("VIRTUAL_ENV", tmp.path().join("venv"));
    let (early, _, _) = file_candidates(find("cudart").unwrap(), &env);
    let files: Vec<_> = early
        .iter()
        .map(|(_, p)| p.strip_prefix(&sp).unwrap().display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "nvidia/cu13/lib/libcudart.so.13",
            "nvidia/cu13/lib/libcudart.so.12",
            "nvidia/cuda_runtime/lib/libcudart.so.13",
            "nvidia/cuda_runtime/lib/libcudart.so.12"
        ]
    );
}

#[test]
fn the_virtual_env_comes_before_the_user_site_and_newest_python_first() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in [
        "venv/lib/python3.12/site-packages",
        "venv/lib/python3.9/site-packages",
        "home/.local/lib/python3.12/site-packages",
    ] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
    }
    let env = bare(tmp.path())
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("HOME", tmp.path().join("home"));
    let dirs: Vec<_> = site_packages_of(&env)
        .iter()
        .map(|d| d.strip_prefix(tmp.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        dirs,
        [
            "venv/lib/python3.12/site-packages",
            "venv/lib/python3.9/site-packages",
            "home/.local/lib/python3.12/site-packages"
        ]
    );
}

#[test]
fn interpreters_on_path_contribute_their_environments() {
    let tmp = tempfile::tempdir().unwrap();
    // A virtual environment whose python3 links to a base installation elsewhere.
    let base = tmp.path().join("base");
    touch_exe(&base.join("bin/python3.11"));
    std::fs::create_dir_all(base.join("lib/python3.11/site-packages")).unwrap();
    let venv = tmp.path().join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(venv.join("lib/python3.11/site-packages")).unwrap();
    touch(&venv.join("pyvenv.cfg"));
    std::os::unix::fs::symlink(base.join("bin/python3.11"), venv.join("bin/python3")).unwrap();
    let env = bare(tmp.path()).with("PATH", venv.join("bin"));
    let dirs = site_packages_of(&env);
    assert_eq!(
        dirs,
        [
            venv.join("lib/python3.11/site-packages"),
            base.canonicalize().unwrap().join("lib/python3.11/site-packages")
        ]
    );
}

#[test]
fn cuda_path_wins_over_cuda_home_with_a_warning_when_they_differ() {
    let env = Environment::default().with("CUDA_PATH", "/a").with("CUDA_HOME", "/b");
    let (early, _, warnings) = file_candidates(find("cudart").unwrap(), &env);
    assert!(early.iter().all(|(_, p)| p.starts_with("/a")));
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("CUDA_PATH (/a)") && warnings[0].contains("CUDA_HOME (/b)"),
        "{warnings:?}"
    );

    let env = Environment::default().with("CUDA_HOME", "/b");
    let (early, _, warnings) = file_candidates(find("cudart").unwrap(), &env);
    assert_eq!(
        early[0],
        (FoundVia::CudaPath, PathBuf::from("/b/lib64/libcudart.so.13"))
    );
    assert!(warnings.is_empty());
}

#[test]
fn an_empty_cuda_path_counts_as_unset() {
    let env = Environment::default().with("CUDA_PATH", "").with("CUDA_HOME", "/b");
    let (early, _, warnings) = file_candidates(find("cudart").unwrap(), &env);
    assert!(early[0].1.starts_with("/b"));
    assert!(warnings.is_empty());
}

#[test]
fn no_warning_when_both_name_the_same_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("cuda-13.0");
    std::fs::create_dir_all(&ctk).unwrap();
    let link = tmp.path().join("cuda");
    std::os::unix::fs::symlink(&ctk, &link).unwrap();
    let same_text = Environment::default()
        .with("CUDA_PATH", &ctk)
        .with("CUDA_HOME", format!("{}/", ctk.display()));
    assert!(file_candidates(find("nvrtc").unwrap(), &same_text).2.is_empty());
    let same_file = Environment::default().with("CUDA_PATH", &ctk).with("CUDA_HOME", &link);
    assert!(file_candidates(find("nvrtc").unwrap(), &same_file).2.is_empty());
}

#[test]
fn product_roots_come_before_cuda_path() {
    let env = Environment::default()
        .with("NCCL_HOME", "/nccl")
        .with("CUDA_PATH", "/ctk");
    let (early, _, _) = file_candidates(find("nccl").unwrap(), &env);
    assert_eq!(
        early[0],
        (FoundVia::InstallRootVar, PathBuf::from("/nccl/lib/libnccl.so.2"))
    );
    assert!(early
        .iter()
        .any(|(_, p)| p == Path::new("/nccl/build/lib/libnccl.so.2")));
    assert_eq!(rules(&early), [FoundVia::InstallRootVar, FoundVia::CudaPath]);
    // Other products ignore it.
    let (early, _, _) = file_candidates(find("cudnn").unwrap(), &env);
    assert!(early.iter().all(|(r, _)| *r == FoundVia::CudaPath));
}

#[test]
fn nvvm_and_cupti_live_in_their_own_toolkit_folders() {
    let env = Environment::default().with("CUDA_PATH", "/ctk");
    let (early, late, _) = file_candidates(find("nvvm").unwrap(), &env);
    assert_eq!(early[0].1, PathBuf::from("/ctk/nvvm/lib64/libnvvm.so.4"));
    assert_eq!(late[0].1, PathBuf::from("/usr/local/cuda/nvvm/lib64/libnvvm.so.4"));
    let (early, _, _) = file_candidates(find("cupti").unwrap(), &env);
    assert_eq!(early[0].1, PathBuf::from("/ctk/extras/CUPTI/lib64/libcupti.so.13"));
}

#[test]
fn driver_libraries_are_never_looked_for_in_files() {
    let env = Environment::default()
        .with("VIRTUAL_ENV", "/venv")
        .with("CUDA_PATH", "/ctk")
        .with("CONDA_PREFIX", "/c");
    for name in ["cuda", "nvml"] {
        let (early, late, _) = file_candidates(find(name).unwrap(), &env);
        assert!(early.is_empty() && late.is_empty(), "{name}");
    }
}

#[test]
fn a_file_that_is_no_library_is_rejected_with_the_loader_message() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("ctk/lib64/libcusparseLt.so.0"));
    let env = bare(tmp.path()).with("CUDA_PATH", tmp.path().join("ctk"));
    if crate::loader::open("libcusparseLt.so.0").is_ok() {
        return; // this machine has a real one, which the system search would find
    }
    let err = load(find("cusparseLt").unwrap(), &env).unwrap_err();
    let tried = err
        .attempts
        .iter()
        .find(|a| a.candidate.ends_with("ctk/lib64/libcusparseLt.so.0"))
        .unwrap();
    assert_eq!(tried.rule, FoundVia::CudaPath);
    assert_ne!(tried.rejected_because, "no such file");
    let missing = err
        .attempts
        .iter()
        .find(|a| a.candidate.ends_with("ctk/lib/libcusparseLt.so.0"))
        .unwrap();
    assert_eq!(missing.rejected_because, "no such file");
    assert!(err.attempts.iter().any(|a| a.rule == FoundVia::SystemSearch));
    let text = err.to_string();
    assert!(
        text.starts_with("cannot find the CUDA library \"cusparseLt\""),
        "{text}"
    );
    assert!(text.contains("pip install nvidia-cusparselt"), "{text}");
}

#[test]
fn a_missing_dependency_is_reported_with_the_library() {
    let tmp = tempfile::tempdir().unwrap();
    if crate::loader::open("libcusolver.so.12").is_ok() || crate::loader::open("libcusparse.so.12").is_ok() {
        return;
    }
    let err = load(find("cusolver").unwrap(), &bare(tmp.path())).unwrap_err();
    assert_eq!(err.name, "cusolver");
    assert!(err.attempts[0].candidate.starts_with("dependency "), "{err}");
}

#[test]
fn unknown_names_list_the_known_ones() {
    let err = crate::load_nvidia_dynamic_lib("cudaa").unwrap_err();
    assert!(err.attempts.is_empty());
    assert!(
        err.hint.contains("not a library cuda-pathfinder knows") && err.hint.contains("nvrtc"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    assert!(locate_header_in("nope", &bare(tmp.path()))
        .unwrap_err()
        .hint
        .contains("nvrtc"));
    assert!(find_binary_in("ls", &bare(tmp.path()))
        .unwrap_err()
        .hint
        .contains("nvcc"));
    assert!(find_bitcode_in("host", &bare(tmp.path()))
        .unwrap_err()
        .hint
        .contains("device"));
    assert!(find_static_in("cudart", &bare(tmp.path()))
        .unwrap_err()
        .hint
        .contains("cudadevrt"));
}

#[test]
fn results_are_cached_for_the_process() {
    let a = crate::load_nvidia_dynamic_lib("nvcudla");
    let b = crate::load_nvidia_dynamic_lib("nvcudla");
    match (a, b) {
        (Ok(a), Ok(b)) => assert!(std::ptr::eq(a, b)),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("the second answer differs from the first"),
    }
}

#[test]
fn headers_in_wheels_conda_targets_cuda_path_and_nvvm_include() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/include/nvrtc.h"));
    touch(&sp.join("nvidia/cuda_runtime/include/cuda_runtime.h"));
    let conda = tmp.path().join("conda");
    touch(&conda.join(format!("targets/{}-linux/include/cublas.h", std::env::consts::ARCH)));
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("nvvm/include/nvvm.h"));
    touch(&ctk.join("include/cccl/cuda/std/version"));
    let env = bare(tmp.path())
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("CONDA_PREFIX", &conda)
        .with("CUDA_PATH", &ctk);
    let nvrtc = locate_header_in("nvrtc", &env).unwrap();
    assert_eq!(
        (nvrtc.abs_path, nvrtc.found_via),
        (sp.join("nvidia/cu13/include"), FoundVia::SitePackages)
    );
    assert_eq!(
        locate_header_in("cudart", &env).unwrap().abs_path,
        sp.join("nvidia/cuda_runtime/include")
    );
    let cublas = locate_header_in("cublas", &env).unwrap();
    assert_eq!(cublas.found_via, FoundVia::Conda);
    assert!(cublas.abs_path.ends_with("include") && cublas.abs_path.join("cublas.h").is_file());
    assert_eq!(
        locate_header_in("nvvm", &env).unwrap().abs_path,
        ctk.join("nvvm/include")
    );
    assert_eq!(
        locate_header_in("cccl", &env).unwrap().abs_path,
        ctk.join("include/cccl")
    );
    let err = locate_header_in("cufft", &env).unwrap_err();
    assert!(err.attempts.iter().any(|a| a.rule == FoundVia::SystemCtkRoot), "{err}");
    assert!(
        err.attempts.iter().any(|a| a.rejected_because == "no cufft.h there"),
        "{err}"
    );
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
    let env = bare(tmp.path())
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("CUDA_PATH", &ctk);
    let ptxas = find_binary_in("ptxas", &env).unwrap();
    assert_eq!(
        (ptxas.abs_path, ptxas.found_via),
        (ctk.join("bin/ptxas"), FoundVia::CudaPath)
    );
    assert_eq!(find_binary_in("nvcc", &env).unwrap().found_via, FoundVia::SitePackages);
    let err = find_binary_in("cuobjdump", &env).unwrap_err();
    assert!(err.attempts.len() >= 5, "{err}");
}

#[test]
fn libdevice_and_cudadevrt() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("nvvm/libdevice/libdevice.10.bc"));
    touch(&ctk.join("lib64/libcudadevrt.a"));
    let env = bare(tmp.path()).with("CUDA_HOME", &ctk);
    let dev = find_bitcode_in("device", &env).unwrap();
    assert_eq!(
        (dev.abs_path, dev.found_via),
        (ctk.join("nvvm/libdevice/libdevice.10.bc"), FoundVia::CudaPath)
    );
    assert_eq!(
        find_static_in("cudadevrt", &env).unwrap().abs_path,
        ctk.join("lib64/libcudadevrt.a")
    );
    let err = find_bitcode_in("device", &bare(tmp.path())).unwrap_err();
    assert!(
        err.to_string()
            .contains("usr-local-cuda/nvvm/libdevice/libdevice.10.bc: no such file"),
        "{err}"
    );
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
    // A wheel's include folder takes the version of the wheel that put headers there.
    let v = toolkit_version_of(&sp.join("nvidia/cu13/lib")).unwrap();
    assert_eq!((v.major, v.minor), (13, 5));
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
fn guard_rails_flag_mixed_toolkits_and_an_old_driver() {
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
    assert!(w.iter().any(|m| m.contains("minor version compatibility")), "{w:?}");
    let w = compatibility_warnings(&[("nvrtc".to_string(), v(13, 0))], Some((12, 8)));
    assert!(w[0].contains("newer than the driver supports"), "{w:?}");
}
