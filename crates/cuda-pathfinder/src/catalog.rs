//! The libraries `cuda-pathfinder` knows: names, sonames and where each distribution puts them.

/// Who ships a library, which decides where it may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackagedWith {
    /// The CUDA toolkit (and its wheels and conda packages).
    Toolkit,
    /// The NVIDIA driver: found through the system loader only.
    Driver,
}

/// Everything the search needs to know about one library.
#[derive(Debug, Clone, Copy)]
pub struct LibDescriptor {
    /// The short name (`"nvrtc"`).
    pub name: &'static str,
    pub packaged_with: PackagedWith,
    /// Linux sonames, newest first.
    pub sonames: &'static [&'static str],
    /// Folders below a site-packages directory that hold the library, CUDA 13 wheel first.
    pub site_packages_dirs: &'static [&'static str],
    /// Folders below a toolkit or conda root that hold the library.
    pub anchor_dirs: &'static [&'static str],
    /// Libraries to load first.
    pub dependencies: &'static [&'static str],
    /// How to get the library, for error messages.
    pub install_hint: &'static str,
}

const TOOLKIT_ANCHORS: &[&str] = &["lib64", "lib"];

/// The catalog, in no particular order.
pub static DESCRIPTORS: &[LibDescriptor] = &[
    LibDescriptor {
        name: "cudart",
        packaged_with: PackagedWith::Toolkit,
        sonames: &["libcudart.so.13", "libcudart.so.12"],
        site_packages_dirs: &["nvidia/cu13/lib", "nvidia/cuda_runtime/lib"],
        anchor_dirs: TOOLKIT_ANCHORS,
        dependencies: &[],
        install_hint: "install it with `pip install nvidia-cuda-runtime` (CUDA 13) or `pip install nvidia-cuda-runtime-cu12`, or install the CUDA toolkit and set CUDA_PATH",
    },
    LibDescriptor {
        name: "nvrtc",
        packaged_with: PackagedWith::Toolkit,
        sonames: &["libnvrtc.so.13", "libnvrtc.so.12"],
        site_packages_dirs: &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
        anchor_dirs: TOOLKIT_ANCHORS,
        dependencies: &[],
        install_hint: "install it with `pip install nvidia-cuda-nvrtc` (CUDA 13) or `pip install nvidia-cuda-nvrtc-cu12`, or install the CUDA toolkit and set CUDA_PATH",
    },
    LibDescriptor {
        name: "nvJitLink",
        packaged_with: PackagedWith::Toolkit,
        sonames: &["libnvJitLink.so.13", "libnvJitLink.so.12"],
        site_packages_dirs: &["nvidia/cu13/lib", "nvidia/nvjitlink/lib"],
        anchor_dirs: TOOLKIT_ANCHORS,
        dependencies: &[],
        install_hint: "install it with `pip install nvidia-nvjitlink` (CUDA 13) or `pip install nvidia-nvjitlink-cu12`, or install the CUDA toolkit and set CUDA_PATH",
    },
    LibDescriptor {
        name: "nvvm",
        packaged_with: PackagedWith::Toolkit,
        sonames: &["libnvvm.so.4", "libnvvm.so"],
        site_packages_dirs: &["nvidia/cu13/lib", "nvidia/cuda_nvcc/nvvm/lib64"],
        anchor_dirs: &["nvvm/lib64"],
        dependencies: &[],
        install_hint: "install it with `pip install nvidia-nvvm` (CUDA 13) or `pip install nvidia-cuda-nvcc-cu12`, or install the CUDA toolkit and set CUDA_PATH",
    },
    LibDescriptor {
        name: "cufile",
        packaged_with: PackagedWith::Toolkit,
        sonames: &["libcufile.so.0"],
        site_packages_dirs: &["nvidia/cu13/lib", "nvidia/cufile/lib"],
        anchor_dirs: TOOLKIT_ANCHORS,
        dependencies: &[],
        install_hint: "install it with `pip install nvidia-cufile` (CUDA 13) or `pip install nvidia-cufile-cu12`, or install the CUDA toolkit and set CUDA_PATH",
    },
    LibDescriptor {
        name: "cuda",
        packaged_with: PackagedWith::Driver,
        sonames: &["libcuda.so.1"],
        site_packages_dirs: &[],
        anchor_dirs: &[],
        dependencies: &[],
        install_hint: "libcuda is part of the NVIDIA driver: install the driver (it cannot come from a wheel or the toolkit); on WSL it lives in /usr/lib/wsl/lib",
    },
    LibDescriptor {
        name: "nvml",
        packaged_with: PackagedWith::Driver,
        sonames: &["libnvidia-ml.so.1"],
        site_packages_dirs: &[],
        anchor_dirs: &[],
        dependencies: &[],
        install_hint: "NVML is part of the NVIDIA driver: install the driver",
    },
];

/// The descriptor of `name`, if the catalog has it.
pub fn find(name: &str) -> Option<&'static LibDescriptor> {
    DESCRIPTORS.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_dependencies_exist() {
        let mut names = HashSet::new();
        for d in DESCRIPTORS {
            assert!(names.insert(d.name), "{} is listed twice", d.name);
        }
        for d in DESCRIPTORS {
            for dep in d.dependencies {
                assert!(find(dep).is_some(), "{} depends on unknown {dep}", d.name);
                assert_ne!(*dep, d.name, "{} depends on itself", d.name);
            }
        }
    }

    #[test]
    fn driver_libraries_have_no_dependencies_and_no_wheel_dirs() {
        for d in DESCRIPTORS.iter().filter(|d| d.packaged_with == PackagedWith::Driver) {
            assert!(d.dependencies.is_empty(), "{}", d.name);
            assert!(d.site_packages_dirs.is_empty(), "{}", d.name);
        }
    }

    #[test]
    fn sonames_look_like_sonames() {
        for d in DESCRIPTORS {
            assert!(!d.sonames.is_empty(), "{}", d.name);
            for s in d.sonames {
                assert!(s.starts_with("lib") && s.contains(".so"), "{}: {s}", d.name);
            }
        }
    }
}
