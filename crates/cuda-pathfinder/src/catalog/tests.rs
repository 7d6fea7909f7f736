use super::*;
use std::collections::{HashMap, HashSet};

#[test]
fn names_and_sonames_are_unique() {
    let mut names = HashSet::new();
    let mut sonames = HashMap::new();
    for d in DESCRIPTORS {
        assert!(names.insert(d.name), "{} is listed twice", d.name);
        assert!(!d.sonames.is_empty(), "{}", d.name);
        for s in d.sonames {
            assert!(s.starts_with("lib") && s.contains(".so"), "{}: {s}", d.name);
            if let Some(other) = sonames.insert(*s, d.name) {
                panic!("{s} belongs to both {other} and {}", d.name);
            }
        }
    }
}

#[test]
fn dependencies_exist_and_form_no_cycle() {
    fn visit(name: &str, path: &mut Vec<String>) {
        assert!(!path.iter().any(|p| p == name), "dependency cycle: {path:?} -> {name}");
        path.push(name.to_string());
        for dep in find(name).unwrap().dependencies {
            assert!(find(dep).is_some(), "{name} depends on unknown {dep}");
            visit(dep, path);
        }
        path.pop();
    }
    for d in DESCRIPTORS {
        visit(d.name, &mut Vec::new());
    }
}

#[test]
fn driver_libraries_have_no_dependencies_and_no_wheel_dirs() {
    let drivers: Vec<_> = DESCRIPTORS
        .iter()
        .filter(|d| d.packaged_with == PackagedWith::Driver)
        .collect();
    assert_eq!(
        drivers.iter().map(|d| d.name).collect::<Vec<_>>(),
        ["cuda", "nvml", "nvcudla"]
    );
    for d in drivers {
        assert!(
            d.dependencies.is_empty() && d.site_packages_dirs.is_empty() && d.anchor_dirs.is_empty(),
            "{}",
            d.name
        );
    }
}

#[test]
fn toolkit_libraries_look_in_the_cuda_13_wheel_first_and_newest_soname_first() {
    for d in DESCRIPTORS.iter().filter(|d| d.packaged_with == PackagedWith::Toolkit) {
        assert_eq!(d.site_packages_dirs[0], "nvidia/cu13/lib", "{}", d.name);
        let majors: Vec<u32> = d
            .sonames
            .iter()
            .filter_map(|s| s.rsplit('.').next()?.parse().ok())
            .collect();
        assert!(majors.windows(2).all(|w| w[0] > w[1]), "{}: {:?}", d.name, d.sonames);
    }
}

#[test]
fn the_catalog_covers_cuda_pathfinder() {
    for name in [
        "cudart",
        "nvrtc",
        "nvJitLink",
        "nvfatbin",
        "nvvm",
        "cublas",
        "cublasLt",
        "nvblas",
        "cufft",
        "cufftw",
        "curand",
        "cusolver",
        "cusolverMg",
        "cusparse",
        "nppc",
        "nppial",
        "nppicc",
        "nppidei",
        "nppif",
        "nppig",
        "nppim",
        "nppist",
        "nppisu",
        "nppitc",
        "npps",
        "nvjpeg",
        "cufile",
        "cupti",
        "nccl",
        "nvshmem_host",
        "cudnn",
        "cusparseLt",
        "cutensor",
        "cutensorMg",
        "cudss",
        "mathdx",
        "cublasmp",
        "cufftMp",
        "cusolverMp",
        "custatevec",
        "cutensornet",
        "cuda",
        "nvml",
    ] {
        assert!(find(name).is_some(), "{name}");
    }
}
