//! Dynamic libraries on simulated Linux layouts: wheels, conda, the system loader, product roots,
//! `CUDA_PATH`, the toolkit-root canary and `/usr/local/cuda`, in `cuda.pathfinder`'s order.

use super::{bare, load, rules, touch, FakeLoader};
use crate::canary::{derive_ctk_root, ld_cache_lookup, resolve_system_library};
use crate::env::site_packages_of;
use crate::platform::Platform;
use crate::search::FoundVia;
use std::path::{Path, PathBuf};

/// A tree with nvrtc in every place the search looks, each place named after its rule.
fn everywhere(tmp: &Path) -> (crate::env::Environment, FakeLoader) {
    let so = "libnvrtc.so.13";
    touch(&tmp.join("venv/lib/python3.12/site-packages/nvidia/cu13/lib").join(so));
    touch(&tmp.join("conda/lib").join(so));
    touch(&tmp.join("system").join(so));
    touch(&tmp.join("ctk/lib64").join(so));
    touch(&tmp.join("default/lib64").join(so));
    let env = crate::env::Environment {
        default_ctk_root: Some(tmp.join("default")),
        ..bare()
    }
    .with("VIRTUAL_ENV", tmp.join("venv"))
    .with("CONDA_PREFIX", tmp.join("conda"))
    .with("CUDA_PATH", tmp.join("ctk"));
    let loader = FakeLoader {
        system_dirs: vec![tmp.join("system")],
        ..Default::default()
    };
    (env, loader)
}

#[test]
fn each_place_wins_over_the_ones_after_it_in_cuda_pathfinders_order() {
    let tmp = tempfile::tempdir().unwrap();
    let (env, loader) = everywhere(tmp.path());
    // Remove the winner each time: wheels, conda, the system loader, CUDA_PATH, /usr/local/cuda.
    let order = [
        (
            "venv/lib/python3.12/site-packages/nvidia/cu13/lib",
            FoundVia::SitePackages,
        ),
        ("conda/lib", FoundVia::Conda),
        ("system", FoundVia::SystemSearch),
        ("ctk/lib64", FoundVia::CudaPath),
        ("default/lib64", FoundVia::DefaultCtkRoot),
    ];
    for (dir, rule) in order {
        let found = load("nvrtc", &env, &loader).unwrap();
        assert_eq!(found.found_via, rule, "{dir}");
        assert_eq!(found.abs_path.unwrap(), tmp.path().join(dir).join("libnvrtc.so.13"));
        std::fs::remove_file(tmp.path().join(dir).join("libnvrtc.so.13")).unwrap();
    }
    let err = load("nvrtc", &env, &loader).unwrap_err();
    assert_eq!(
        rules(&err.attempts),
        [
            FoundVia::SitePackages,
            FoundVia::Conda,
            FoundVia::SystemSearch,
            FoundVia::CudaPath,
            FoundVia::DefaultCtkRoot
        ]
    );
    assert!(err.to_string().contains("pip install nvidia-cuda-nvrtc"), "{err}");
}

#[test]
fn the_system_loader_comes_before_cuda_path_and_the_winner_keeps_what_was_tried() {
    let tmp = tempfile::tempdir().unwrap();
    let (env, loader) = everywhere(tmp.path());
    for dir in ["venv", "conda"] {
        std::fs::remove_dir_all(tmp.path().join(dir)).unwrap();
    }
    let found = load("nvrtc", &env, &loader).unwrap();
    assert_eq!(found.found_via, FoundVia::SystemSearch);
    // Both conda folders were tried (lib64, lib) for both sonames.
    assert_eq!(rules(&found.searched), [FoundVia::Conda]);
    assert!(found.searched.iter().all(|a| a.rejected_because == "no such file"));
}

#[test]
fn an_already_loaded_library_wins_and_its_dependencies_are_still_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/lib/libcublas.so.13"));
    touch(&sp.join("nvidia/cu13/lib/libcublasLt.so.13"));
    let env = bare().with("VIRTUAL_ENV", tmp.path().join("venv"));
    let loader = FakeLoader {
        loaded: vec![PathBuf::from("/elsewhere/libcublas.so.12")],
        ..Default::default()
    };
    let found = load("cublas", &env, &loader).unwrap();
    assert_eq!(found.found_via, FoundVia::AlreadyLoaded);
    assert!(found.was_already_loaded_from_elsewhere);
    assert_eq!(found.abs_path.unwrap(), PathBuf::from("/elsewhere/libcublas.so.12"));
    assert_eq!(
        *loader.opened.borrow(),
        [sp.join("nvidia/cu13/lib/libcublasLt.so.13")],
        "the dependency was opened, the library itself was not"
    );
}

#[test]
fn a_missing_dependency_is_reported_with_the_library() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("ctk/lib64/libcusolver.so.12"));
    let env = bare().with("CUDA_PATH", tmp.path().join("ctk"));
    let err = load("cusolver", &env, &FakeLoader::default()).unwrap_err();
    assert_eq!(err.name, "cusolver");
    let dep = err.attempts.last().unwrap();
    assert_eq!(dep.candidate, "dependency nvJitLink", "{err}");
    assert!(
        dep.rejected_because
            .contains("cannot find the CUDA library \"nvJitLink\""),
        "{err}"
    );
}

#[test]
fn a_file_that_does_not_load_is_passed_over_with_the_loaders_message() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("ctk/lib64/libcusparseLt.so.0");
    touch(&bad);
    touch(&tmp.path().join("ctk/lib/libcusparseLt.so.0"));
    let env = bare().with("CUDA_PATH", tmp.path().join("ctk"));
    let loader = FakeLoader {
        broken: vec![bad.clone()],
        ..Default::default()
    };
    let found = load("cusparseLt", &env, &loader).unwrap();
    assert_eq!(found.abs_path.unwrap(), tmp.path().join("ctk/lib/libcusparseLt.so.0"));
    let tried = found
        .searched
        .iter()
        .find(|a| a.candidate == bad.display().to_string())
        .unwrap();
    assert_eq!(tried.rule, FoundVia::CudaPath);
    assert!(tried.rejected_because.contains("invalid ELF header"));
}

#[test]
fn product_roots_come_before_cuda_path() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("nccl/build/lib/libnccl.so.2"));
    touch(&tmp.path().join("ctk/lib64/libnccl.so.2"));
    let env = bare()
        .with("NCCL_HOME", tmp.path().join("nccl"))
        .with("CUDA_PATH", tmp.path().join("ctk"));
    let found = load("nccl", &env, &FakeLoader::default()).unwrap();
    assert_eq!(found.found_via, FoundVia::InstallRootVar("NCCL_HOME"));
    assert_eq!(found.found_via.as_str(), "NCCL_HOME");
    assert!(found.abs_path.unwrap().ends_with("nccl/build/lib/libnccl.so.2"));
    // Other products ignore it.
    let err = load("cudnn", &env, &FakeLoader::default()).unwrap_err();
    assert!(!err.attempts.iter().any(|a| a.candidate.contains("/nccl/")), "{err}");
}

#[test]
fn the_canary_finds_nvvm_in_the_toolkit_of_the_loaders_cudart_after_cuda_path() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("cuda-13.0");
    touch(&ctk.join("targets/x86_64-linux/lib/libcudart.so.13"));
    touch(&ctk.join("nvvm/lib64/libnvvm.so.4"));
    let env = bare().with("LD_LIBRARY_PATH", ctk.join("targets/x86_64-linux/lib"));
    let loader = FakeLoader::default();
    let found = load("nvvm", &env, &loader).unwrap();
    assert_eq!(found.found_via, FoundVia::SystemCtkRoot);
    assert_eq!(found.abs_path.unwrap(), ctk.join("nvvm/lib64/libnvvm.so.4"));
    assert!(
        loader.opened.borrow().iter().all(|p| !p.ends_with("libcudart.so.13")),
        "the canary loads nothing"
    );

    // CUDA_PATH comes first.
    let other = tmp.path().join("other");
    touch(&other.join("nvvm/lib64/libnvvm.so.4"));
    let found = load("nvvm", &env.clone().with("CUDA_PATH", &other), &loader).unwrap();
    assert_eq!(found.found_via, FoundVia::CudaPath);

    // Libraries that do not ask for it never use it.
    touch(&ctk.join("lib64/libnvrtc.so.13"));
    let err = load("nvrtc", &env, &loader).unwrap_err();
    assert!(!rules(&err.attempts).contains(&FoundVia::SystemCtkRoot), "{err}");
}

#[test]
fn the_canary_prefers_an_already_loaded_cudart_and_says_why_it_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("ctk");
    touch(&ctk.join("extras/CUPTI/lib64/libcupti.so.12"));
    let loader = FakeLoader {
        loaded: vec![ctk.join("lib64/libcudart.so.12")],
        ..Default::default()
    };
    let found = load("cupti", &bare(), &loader).unwrap();
    assert_eq!(
        (found.found_via, found.abs_path.unwrap()),
        (FoundVia::SystemCtkRoot, ctk.join("extras/CUPTI/lib64/libcupti.so.12"))
    );
    let err = load("cupti", &bare(), &FakeLoader::default()).unwrap_err();
    let canary = err.attempts.iter().find(|a| a.rule == FoundVia::SystemCtkRoot).unwrap();
    assert!(
        canary.rejected_because.contains("would find none of libcudart.so.13"),
        "{err}"
    );
}

#[test]
fn toolkit_roots_derive_from_lib_lib64_and_targets() {
    let l = Platform::Linux;
    assert_eq!(
        derive_ctk_root(Path::new("/opt/cuda/lib64/libcudart.so.13"), l),
        Some(PathBuf::from("/opt/cuda"))
    );
    assert_eq!(
        derive_ctk_root(Path::new("/opt/cuda/lib/libcudart.so.13"), l),
        Some(PathBuf::from("/opt/cuda"))
    );
    assert_eq!(
        derive_ctk_root(
            Path::new("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13"),
            l
        ),
        Some(PathBuf::from("/usr/local/cuda-13.0"))
    );
    assert_eq!(derive_ctk_root(Path::new("/opt/cuda/bin/libcudart.so.13"), l), None);
    assert_eq!(derive_ctk_root(Path::new("libcudart.so.13"), l), None);
}

/// A minimal `glibc-ld.so.cache1.1` with `entries` (soname, path), after `prefix` bytes.
fn ld_cache(prefix: &[u8], entries: &[(&str, &str)]) -> Vec<u8> {
    let mut strings = Vec::new();
    let mut offsets = Vec::new();
    let table = 48 + 24 * entries.len();
    for (key, value) in entries {
        let k = table + strings.len();
        strings.extend_from_slice(key.as_bytes());
        strings.push(0);
        let v = table + strings.len();
        strings.extend_from_slice(value.as_bytes());
        strings.push(0);
        offsets.push((k as u32, v as u32));
    }
    let mut new = b"glibc-ld.so.cache1.1".to_vec();
    new.extend((entries.len() as u32).to_le_bytes());
    new.extend((strings.len() as u32).to_le_bytes());
    new.resize(48, 0);
    for (k, v) in offsets {
        new.extend(0x0303i32.to_le_bytes());
        new.extend(k.to_le_bytes());
        new.extend(v.to_le_bytes());
        new.extend([0u8; 12]);
    }
    new.extend(strings);
    let mut out = prefix.to_vec();
    out.extend(new);
    out
}

#[test]
fn the_loader_cache_is_read_in_both_formats() {
    let entries = [("libcudart.so.13", "/a/libcudart.so.13"), ("libz.so.1", "/b/libz.so.1")];
    for prefix in [&b""[..], &b"ld.so-1.7.0\0\0\0\0\0"[..]] {
        let cache = ld_cache(prefix, &entries);
        assert_eq!(
            ld_cache_lookup(&cache, "libcudart.so.13"),
            [PathBuf::from("/a/libcudart.so.13")]
        );
        assert!(ld_cache_lookup(&cache, "libcudart.so.12").is_empty());
    }
    assert!(ld_cache_lookup(b"garbage", "libz.so.1").is_empty());
    assert!(
        ld_cache_lookup(&ld_cache(b"", &entries)[..60], "libz.so.1").is_empty(),
        "truncated"
    );
}

#[test]
fn the_system_library_resolution_follows_ld_library_path_then_the_cache_then_default_folders() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["env", "cached", "default"] {
        touch(&tmp.path().join(dir).join("libcudart.so.12"));
    }
    let cache_file = tmp.path().join("ld.so.cache");
    let cached = tmp.path().join("cached/libcudart.so.12").display().to_string();
    std::fs::write(&cache_file, ld_cache(b"", &[("libcudart.so.12", &cached)])).unwrap();
    let mut env = crate::env::Environment {
        ld_so_cache: Some(cache_file),
        loader_default_dirs: vec![tmp.path().join("default")],
        ..bare()
    };
    let names = ["libcudart.so.13", "libcudart.so.12"];
    assert_eq!(
        resolve_system_library(&env, &names).unwrap(),
        tmp.path().join("cached/libcudart.so.12")
    );
    env = env.with(
        "LD_LIBRARY_PATH",
        format!("/nowhere::{}", tmp.path().join("env").display()),
    );
    assert_eq!(
        resolve_system_library(&env, &names).unwrap(),
        tmp.path().join("env/libcudart.so.12")
    );
    env.ld_so_cache = None;
    env.vars.clear();
    assert_eq!(
        resolve_system_library(&env, &names).unwrap(),
        tmp.path().join("default/libcudart.so.12")
    );
}

#[test]
fn driver_libraries_come_from_the_process_or_the_system_loader_only() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("ctk/lib64/libcuda.so.1"));
    touch(
        &tmp.path()
            .join("venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcuda.so.1"),
    );
    let env = bare()
        .with("VIRTUAL_ENV", tmp.path().join("venv"))
        .with("CUDA_PATH", tmp.path().join("ctk"));
    let err = load("cuda", &env, &FakeLoader::default()).unwrap_err();
    assert!(err.attempts.iter().all(|a| a.rule == FoundVia::SystemSearch), "{err}");
    assert_eq!(err.attempts[0].candidate, "dlopen(\"libcuda.so.1\")");
    assert!(err.to_string().contains("install the driver"), "{err}");
    touch(&tmp.path().join("sys/libcuda.so.1"));
    let loader = FakeLoader {
        system_dirs: vec![tmp.path().join("sys")],
        ..Default::default()
    };
    assert_eq!(load("cuda", &env, &loader).unwrap().found_via, FoundVia::SystemSearch);
}

#[test]
fn the_cuda_13_wheel_comes_before_the_cuda_12_folder_and_newest_soname_first() {
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(&sp).unwrap();
    let env = bare().with("VIRTUAL_ENV", tmp.path().join("venv"));
    let err = load("cudart", &env, &FakeLoader::default()).unwrap_err();
    let files: Vec<_> = err
        .attempts
        .iter()
        .filter(|a| a.rule == FoundVia::SitePackages)
        .map(|a| {
            a.candidate
                .strip_prefix(&format!("{}/", sp.display()))
                .unwrap()
                .to_string()
        })
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
    let env = bare()
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
    let base = tmp.path().join("base");
    super::touch_exe(&base.join("bin/python3.11"));
    std::fs::create_dir_all(base.join("lib/python3.11/site-packages")).unwrap();
    let venv = tmp.path().join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(venv.join("lib/python3.11/site-packages")).unwrap();
    touch(&venv.join("pyvenv.cfg"));
    std::os::unix::fs::symlink(base.join("bin/python3.11"), venv.join("bin/python3")).unwrap();
    let env = bare().with("PATH", venv.join("bin"));
    assert_eq!(
        site_packages_of(&env),
        [
            venv.join("lib/python3.11/site-packages"),
            base.canonicalize().unwrap().join("lib/python3.11/site-packages")
        ]
    );
}

#[test]
fn cuda_path_wins_over_cuda_home_with_a_warning_when_they_differ_and_empty_is_unset() {
    let env = bare().with("CUDA_PATH", "/a").with("CUDA_HOME", "/b");
    let (root, warning) = env.cuda_root();
    assert_eq!(root, Some(PathBuf::from("/a")));
    let w = warning.unwrap();
    assert!(w.contains("CUDA_PATH (/a)") && w.contains("CUDA_HOME (/b)"), "{w}");
    let env = bare().with("CUDA_PATH", "").with("CUDA_HOME", "/b");
    assert_eq!(env.cuda_root(), (Some(PathBuf::from("/b")), None));

    let tmp = tempfile::tempdir().unwrap();
    let ctk = tmp.path().join("cuda-13.0");
    std::fs::create_dir_all(&ctk).unwrap();
    std::os::unix::fs::symlink(&ctk, tmp.path().join("cuda")).unwrap();
    let same_text = bare()
        .with("CUDA_PATH", &ctk)
        .with("CUDA_HOME", format!("{}/", ctk.display()));
    assert!(same_text.cuda_root().1.is_none());
    let same_file = bare()
        .with("CUDA_PATH", &ctk)
        .with("CUDA_HOME", tmp.path().join("cuda"));
    assert!(same_file.cuda_root().1.is_none());
}

#[test]
fn get_cuda_path_or_home_is_cached_until_cache_clear() {
    // Reads this process's environment: only check that the cache answers the same twice.
    assert_eq!(crate::get_cuda_path_or_home(), crate::get_cuda_path_or_home());
}

#[test]
fn nvvm_and_cupti_live_in_their_own_toolkit_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let env = bare().with("CUDA_PATH", tmp.path());
    let err = load("nvvm", &env, &FakeLoader::default()).unwrap_err();
    let first = err.attempts.iter().find(|a| a.rule == FoundVia::CudaPath).unwrap();
    assert!(first.candidate.ends_with("/nvvm/lib64/libnvvm.so.4"), "{err}");
    let err = load("cupti", &env, &FakeLoader::default()).unwrap_err();
    let first = err.attempts.iter().find(|a| a.rule == FoundVia::CudaPath).unwrap();
    assert!(first.candidate.ends_with("/extras/CUPTI/lib64/libcupti.so.13"), "{err}");
}
