//! The compatibility guard rails on simulated toolkits: constraints, items that must share a
//! toolkit release, the driver's version and release, the modes.

use super::{cuda_h, touch};
use crate::catalog::PackagedWith;
use crate::error::{CompatibilityCheckKind, Error};
use crate::{
    CompatibilityGuardRails, CtkVersionConstraint, DriverCudaVersion, DriverReleaseVersion, FoundVia, GuardRailsMode,
    ItemKind, LocatedFile, ResolvedItem,
};
use std::path::Path;

fn constraint(s: &str) -> CtkVersionConstraint {
    CtkVersionConstraint::parse(s).unwrap()
}

#[test]
fn constraints_are_pep_440_specifier_sets_on_major_minor() {
    let c = constraint(">=13.2,<14");
    assert!(c.matches(13, 2) && c.matches(13, 9));
    assert!(!c.matches(13, 1) && !c.matches(14, 0) && !c.matches(12, 9));
    assert!(constraint("==12.*").matches(12, 4) && !constraint("==12.*").matches(13, 0));
    assert!(constraint("~=12.4").matches(12, 8) && !constraint("~=12.4").matches(13, 0));
    assert!(constraint("!=13.0").matches(13, 1) && !constraint("!=13.0").matches(13, 0));
    assert!(constraint("==13").matches(13, 0) && !constraint("==13").matches(13, 1));
    assert_eq!(constraint(" >=13.2 , <14 ").to_string(), ">=13.2 , <14");
    for bad in ["", "13", ">=x", ">=13.*", "~=13"] {
        assert!(CtkVersionConstraint::parse(bad).is_err(), "{bad:?}");
    }
}

/// A library file in a toolkit of `major.minor` under `tmp/name`.
fn toolkit_item(tmp: &Path, root: &str, major: u32, minor: u32, name: &str, file: &str) -> ResolvedItem {
    let root = tmp.join(root);
    cuda_h(&root, major, minor);
    let path = root.join("lib64").join(file);
    touch(&path);
    let desc = crate::catalog::find(name).unwrap();
    ResolvedItem {
        name: name.to_string(),
        kind: ItemKind::DynamicLib,
        packaged_with: desc.packaged_with,
        ctk_version: crate::toolkit_version_of(&path),
        abs_path: path,
        found_via: Some(FoundVia::CudaPath),
        dynamic_link_component: desc.dynamic_link_component,
        companion_tags: desc.companion_tags,
    }
}

fn header_item(tmp: &Path, root: &str, major: u32, minor: u32, name: &str) -> ResolvedItem {
    let root = tmp.join(root);
    cuda_h(&root, major, minor);
    let marker = crate::supported_headers().find(|(n, _)| *n == name).unwrap().1;
    touch(&root.join("include").join(marker));
    let located = LocatedFile {
        name: name.to_string(),
        abs_path: root.join("include"),
        found_via: FoundVia::CudaPath,
        searched: Vec::new(),
    };
    ResolvedItem::located("header directory", &located).unwrap()
}

fn driver(encoded: u32) -> CompatibilityGuardRails {
    CompatibilityGuardRails::new().with_driver_cuda_version(DriverCudaVersion::from_encoded(encoded))
}

#[test]
fn a_toolkit_outside_the_constraint_is_rejected_with_what_was_found() {
    let tmp = tempfile::tempdir().unwrap();
    let rails = driver(13000).with_ctk_version(constraint(">=13.2,<14"));
    let item = toolkit_item(tmp.path(), "cuda-13.0", 13, 0, "nvrtc", "libnvrtc.so.13");
    let Err(Error::CompatibilityCheck(e)) = rails.register_and_check(item) else {
        panic!("accepted")
    };
    assert_eq!(e.kind, CompatibilityCheckKind::Constraint);
    assert!(e.message.contains("dynamic-lib \"nvrtc\" via CUDA_PATH"), "{e}");
    assert!(
        e.message.contains("CUDA 13.0") && e.message.contains("ctk_version >=13.2,<14"),
        "{e}"
    );
    assert!(e.message.contains("cuda.h"), "the version's source is named: {e}");
    assert!(rails.resolved_items().is_empty(), "a rejected item is not remembered");
    let rails = driver(13020).with_ctk_version(constraint(">=13.2,<14"));
    let ok = toolkit_item(tmp.path(), "cuda-13.2", 13, 2, "nvrtc", "libnvrtc.so.13");
    rails.register_and_check(ok).unwrap();
    assert_eq!(rails.resolved_items().len(), 1);
}

#[test]
fn items_that_share_a_component_or_tag_must_share_a_toolkit_release() {
    let tmp = tempfile::tempdir().unwrap();
    let rails = driver(13050);
    rails
        .register_and_check(toolkit_item(tmp.path(), "cuda-13.0", 13, 0, "nvrtc", "libnvrtc.so.13"))
        .unwrap();
    // nvrtc.h of another release: the api_nvrtc tag ties them.
    let Err(Error::CompatibilityCheck(e)) =
        rails.register_and_check(header_item(tmp.path(), "cuda-13.2", 13, 2, "nvrtc"))
    else {
        panic!("accepted")
    };
    assert_eq!(e.kind, CompatibilityCheckKind::Mismatch);
    assert!(
        e.message.contains("api_nvrtc") && e.message.contains("CUDA 13.0") && e.message.contains("CUDA 13.2"),
        "{e}"
    );
    // Unrelated items of another release are fine; the same release is fine.
    rails
        .register_and_check(header_item(tmp.path(), "cuda-13.2", 13, 2, "cublas"))
        .unwrap();
    rails
        .register_and_check(header_item(tmp.path(), "cuda-13.0", 13, 0, "nvrtc"))
        .unwrap();
    // The toolchain tag: libdevice and cudart's headers.
    let dev = tmp.path().join("cuda-13.2/nvvm/libdevice/libdevice.10.bc");
    touch(&dev);
    rails
        .register_and_check(header_item(tmp.path(), "cuda-13.0", 13, 0, "cudart"))
        .unwrap();
    let located = LocatedFile {
        name: "device".into(),
        abs_path: dev,
        found_via: FoundVia::CudaPath,
        searched: Vec::new(),
    };
    let item = ResolvedItem::located("bitcode library", &located).unwrap();
    assert_eq!(item.companion_tags, ["toolchain_cuda_nvcc"]);
    assert!(matches!(
        rails.register_and_check(item),
        Err(Error::CompatibilityCheck(_))
    ));
}

#[test]
fn the_driver_must_support_the_toolkit_or_its_release_branch_give_minor_version_compatibility() {
    let tmp = tempfile::tempdir().unwrap();
    let item = || toolkit_item(tmp.path(), "cuda-13.2", 13, 2, "cudart", "libcudart.so.13");
    driver(13020).register_and_check(item()).unwrap();
    // Another major: never.
    let Err(Error::CompatibilityCheck(e)) = driver(12080).register_and_check(item()) else {
        panic!("accepted")
    };
    assert_eq!(e.kind, CompatibilityCheckKind::Driver);
    assert!(e.message.contains("12080") && e.message.contains("CUDA 13.2"), "{e}");
    // Same major, older minor: the release branch decides.
    let release = |t: &str| DriverReleaseVersion::from_text(t).unwrap();
    driver(13000)
        .with_driver_release_version(release("580.159.04"))
        .register_and_check(item())
        .unwrap();
    let Err(Error::CompatibilityCheck(e)) = driver(13000)
        .with_driver_release_version(release("575.51"))
        .register_and_check(item())
    else {
        panic!("accepted")
    };
    assert!(e.message.contains("branch 575") && e.message.contains("580"), "{e}");
    assert_eq!(release("580.159.04").branch, 580);
    assert!(DriverReleaseVersion::from_text("r580").is_none());
}

#[test]
fn what_cannot_be_judged_is_insufficient_metadata_and_driver_libraries_are_exempt() {
    let tmp = tempfile::tempdir().unwrap();
    let rails = driver(13000);
    // Another product's library.
    let item = toolkit_item(tmp.path(), "cuda-13.0", 13, 0, "cudnn", "libcudnn.so.9");
    assert_eq!(item.packaged_with, PackagedWith::Other);
    let Err(Error::CompatibilityInsufficientMetadata(e)) = rails.register_and_check(item) else {
        panic!("judged")
    };
    assert!(e.message.contains("\"other\""), "{e}");
    // No version anywhere.
    let bare = tmp.path().join("nowhere/lib64/libcurand.so.10");
    touch(&bare);
    let item = ResolvedItem {
        ctk_version: None,
        abs_path: bare,
        ..toolkit_item(tmp.path(), "cuda-13.0", 13, 0, "curand", "libcurand.so.10")
    };
    assert!(matches!(
        rails.register_and_check(item),
        Err(Error::CompatibilityInsufficientMetadata(_))
    ));
    // A driver library passes unjudged and ties nothing.
    let item = ResolvedItem {
        packaged_with: PackagedWith::Driver,
        ..toolkit_item(tmp.path(), "cuda-9.0", 9, 0, "cuda", "libcuda.so.1")
    };
    rails.register_and_check(item).unwrap();
    // Same major, older driver, no release known: cannot be decided.
    let rails = CompatibilityGuardRails::new().with_driver_cuda_version(DriverCudaVersion::from_encoded(13000));
    let mut state_probe = toolkit_item(tmp.path(), "cuda-13.1", 13, 1, "cudart", "libcudart.so.13");
    state_probe.found_via = Some(FoundVia::SitePackages);
    // (NVML may exist on this machine; only check the outcome is not an acceptance without it.)
    if crate::query_driver_release_version().is_err() {
        assert!(matches!(
            rails.register_and_check(state_probe),
            Err(Error::CompatibilityInsufficientMetadata(_))
        ));
    }
}

#[test]
fn the_mode_comes_from_its_variable_and_a_typo_is_an_error() {
    assert_eq!(GuardRailsMode::from_value(None).unwrap(), GuardRailsMode::BestEffort);
    assert_eq!(
        GuardRailsMode::from_value(Some("")).unwrap(),
        GuardRailsMode::BestEffort
    );
    assert_eq!(GuardRailsMode::from_value(Some("off")).unwrap(), GuardRailsMode::Off);
    assert_eq!(
        GuardRailsMode::from_value(Some("strict")).unwrap(),
        GuardRailsMode::Strict
    );
    let err = GuardRailsMode::from_value(Some("Strict")).unwrap_err();
    assert!(
        err.to_string()
            .contains("CUDA_PATHFINDER_COMPATIBILITY_GUARD_RAILS=\"Strict\""),
        "{err}"
    );
}

#[test]
fn reset_forgets_what_was_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let rails = driver(13000);
    rails
        .register_and_check(toolkit_item(tmp.path(), "a", 13, 0, "nvrtc", "libnvrtc.so.13"))
        .unwrap();
    assert!(matches!(
        rails.register_and_check(header_item(tmp.path(), "b", 12, 9, "nvrtc")),
        Err(Error::CompatibilityCheck(_))
    ));
    rails.reset();
    assert!(rails.resolved_items().is_empty());
    rails
        .register_and_check(header_item(tmp.path(), "b", 12, 9, "nvrtc"))
        .unwrap();
}

#[test]
fn the_public_functions_apply_the_process_wide_rails() {
    // Whatever this machine has: a result of the guarded function is one the unguarded search
    // gives too, and an error is a not-found or a guard-rail verdict.
    for name in ["nvrtc", "cudart", "cuda"] {
        match crate::load_nvidia_dynamic_lib(name) {
            Ok(found) => assert!(std::ptr::eq(
                found,
                crate::unguarded::load_nvidia_dynamic_lib(name).unwrap()
            )),
            Err(e) => assert!(e.as_not_found().is_some() || e.is_compatibility_error(), "{e}"),
        }
    }
    let rails = crate::process_wide_compatibility_guard_rails();
    assert!(rails.ctk_version().is_none());
}
