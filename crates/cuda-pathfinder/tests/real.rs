//! Real loads: the NVIDIA wheels `cargo xtask test` installs into `.cuda-venv/`, and the driver
//! libraries, which a machine without a driver reports as not found.

use cuda_pathfinder::{self as pf, FoundVia};

fn wheels_expected() -> bool {
    let required = std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_some();
    if !required && std::env::var_os("VIRTUAL_ENV").is_none() {
        eprintln!("skipping: no VIRTUAL_ENV with the wheels (run cargo xtask test)");
    }
    required || std::env::var_os("VIRTUAL_ENV").is_some()
}

#[test]
fn the_compiler_wheels_load_from_site_packages() {
    if !wheels_expected() {
        return;
    }
    for name in ["nvrtc", "nvJitLink", "nvvm", "cudart"] {
        let lib = pf::load_nvidia_dynamic_lib(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lib.found_via, FoundVia::SitePackages, "{name}");
        assert!(!lib.was_already_loaded_from_elsewhere, "{name}");
        let path = lib.abs_path.as_deref().unwrap();
        assert!(
            path.starts_with(std::env::var("VIRTUAL_ENV").unwrap()),
            "{}",
            path.display()
        );
        let version = pf::toolkit_version_of(path).expect("the wheel's metadata tells the version");
        assert_eq!(version.major, 13, "{name}: {version:?}");
        assert!(
            version.source.starts_with("wheel nvidia-"),
            "{name}: {}",
            version.source
        );
        // Asking again gives the very same answer.
        assert!(std::ptr::eq(lib, pf::load_nvidia_dynamic_lib(name).unwrap()));
    }
}

#[test]
fn headers_and_libdevice_come_from_the_wheels() {
    if !wheels_expected() {
        return;
    }
    let nvrtc = pf::locate_nvidia_header_directory("nvrtc").unwrap();
    assert_eq!(nvrtc.found_via, FoundVia::SitePackages);
    assert!(nvrtc.abs_path.join("nvrtc.h").is_file());
    let libdevice = pf::find_bitcode_lib("device").unwrap();
    assert_eq!(libdevice.found_via, FoundVia::SitePackages);
    let bytes = std::fs::read(&libdevice.abs_path).unwrap();
    assert_eq!(&bytes[..4], b"BC\xc0\xde", "LLVM bitcode");
}

#[test]
fn driver_libraries_without_a_driver_are_reported_clearly() {
    for name in ["cuda", "nvml"] {
        match pf::load_nvidia_dynamic_lib(name) {
            Ok(lib) => {
                // A machine with a driver: it came from the system, never from a wheel.
                assert!(
                    matches!(lib.found_via, FoundVia::SystemSearch | FoundVia::AlreadyLoaded),
                    "{name}"
                );
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("dlopen(\"lib"), "{text}");
                assert!(text.contains("install the driver"), "{text}");
                assert!(e.attempts().iter().all(|a| a.rule == FoundVia::SystemSearch), "{text}");
            }
        }
    }
}

#[test]
fn the_report_prints_a_table_and_json() {
    let exe = env!("CARGO_BIN_EXE_cuda-pathfinder");
    let out = std::process::Command::new(exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("KIND") && text.contains("library  nvrtc"), "{text}");
    let out = std::process::Command::new(exe).arg("--json").output().unwrap();
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(
        json.trim_start().starts_with('{') && json.contains("\"name\": \"nvrtc\""),
        "{json}"
    );
    assert_eq!(
        json.matches("\"kind\": ").count(),
        text.lines()
            .filter(|l| l.starts_with(['l', 'h', 't', 'b', 's']))
            .count()
    );
}
