//! The libraries `cuda-pathfinder` knows: names, sonames and where each distribution puts them.
//!
//! The data follows `cuda.pathfinder`'s descriptor catalog: sonames newest first, the CUDA 13
//! wheel folder before the CUDA 12 per-component ones, and the libraries that must be loaded first.

/// Who ships a library, which decides where it may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackagedWith {
    /// The CUDA toolkit (and its wheels and conda packages).
    Toolkit,
    /// Another NVIDIA product (cuDNN, NCCL, cuTENSOR, ...), with wheels of its own.
    Other,
    /// The NVIDIA driver: found in the process or through the system loader only.
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
    /// Environment variables naming the install root of this product (`CUDNN_PATH`).
    pub install_root_vars: &'static [&'static str],
    /// Libraries to load first.
    pub dependencies: &'static [&'static str],
    /// How to get the library, for error messages.
    pub install_hint: &'static str,
}

const CTK: &[&str] = &["lib64", "lib"];
const CU13: &str = "nvidia/cu13/lib";

macro_rules! toolkit {
    ($name:literal, [$($so:literal),+], $cu12:literal, $pip:literal $(, deps = [$($dep:literal),*])?) => {
        LibDescriptor {
            name: $name,
            packaged_with: PackagedWith::Toolkit,
            sonames: &[$($so),+],
            site_packages_dirs: &[CU13, $cu12],
            anchor_dirs: CTK,
            install_root_vars: &[],
            dependencies: &[$($($dep),*)?],
            install_hint: concat!(
                "install it with `pip install ", $pip, "` (CUDA 13) or `pip install ", $pip,
                "-cu12` (CUDA 12), or install the CUDA toolkit and set CUDA_PATH"
            ),
        }
    };
}

macro_rules! npp {
    ($($name:literal => [$so13:literal, $so12:literal]),+ $(,)?) => {
        [$(toolkit!($name, [$so13, $so12], "nvidia/npp/lib", "nvidia-npp", deps = ["nppc"])),+]
    };
}

const NPP: [LibDescriptor; 10] = npp!(
    "nppial" => ["libnppial.so.13", "libnppial.so.12"],
    "nppicc" => ["libnppicc.so.13", "libnppicc.so.12"],
    "nppidei" => ["libnppidei.so.13", "libnppidei.so.12"],
    "nppif" => ["libnppif.so.13", "libnppif.so.12"],
    "nppig" => ["libnppig.so.13", "libnppig.so.12"],
    "nppim" => ["libnppim.so.13", "libnppim.so.12"],
    "nppist" => ["libnppist.so.13", "libnppist.so.12"],
    "nppisu" => ["libnppisu.so.13", "libnppisu.so.12"],
    "nppitc" => ["libnppitc.so.13", "libnppitc.so.12"],
    "npps" => ["libnpps.so.13", "libnpps.so.12"],
);

const fn other(
    name: &'static str,
    sonames: &'static [&'static str],
    site_packages_dirs: &'static [&'static str],
    dependencies: &'static [&'static str],
    install_hint: &'static str,
) -> LibDescriptor {
    LibDescriptor {
        name,
        packaged_with: PackagedWith::Other,
        sonames,
        site_packages_dirs,
        anchor_dirs: CTK,
        install_root_vars: &[],
        dependencies,
        install_hint,
    }
}

const fn driver(name: &'static str, sonames: &'static [&'static str], install_hint: &'static str) -> LibDescriptor {
    LibDescriptor {
        name,
        packaged_with: PackagedWith::Driver,
        sonames,
        site_packages_dirs: &[],
        anchor_dirs: &[],
        install_root_vars: &[],
        dependencies: &[],
        install_hint,
    }
}

const CUQUANTUM: &[&str] = &["cuquantum/lib"];
const CUQUANTUM_HINT: &str = "install it with `pip install cuquantum-python-cu13` (or -cu12)";

const MAIN: [LibDescriptor; 23] = [
    toolkit!(
        "cudart",
        ["libcudart.so.13", "libcudart.so.12"],
        "nvidia/cuda_runtime/lib",
        "nvidia-cuda-runtime"
    ),
    toolkit!(
        "nvrtc",
        ["libnvrtc.so.13", "libnvrtc.so.12"],
        "nvidia/cuda_nvrtc/lib",
        "nvidia-cuda-nvrtc"
    ),
    toolkit!(
        "nvJitLink",
        ["libnvJitLink.so.13", "libnvJitLink.so.12"],
        "nvidia/nvjitlink/lib",
        "nvidia-nvjitlink"
    ),
    toolkit!(
        "nvfatbin",
        ["libnvfatbin.so.13", "libnvfatbin.so.12"],
        "nvidia/nvfatbin/lib",
        "nvidia-nvfatbin"
    ),
    LibDescriptor {
        name: "nvvm",
        anchor_dirs: &["nvvm/lib64"],
        install_hint: "install it with `pip install nvidia-nvvm` (CUDA 13) or `pip install nvidia-cuda-nvcc-cu12` \
                       (CUDA 12), or install the CUDA toolkit and set CUDA_PATH",
        ..toolkit!(
            "nvvm",
            ["libnvvm.so.4", "libnvvm.so"],
            "nvidia/cuda_nvcc/nvvm/lib64",
            "nvidia-nvvm"
        )
    },
    toolkit!(
        "cublas",
        ["libcublas.so.13", "libcublas.so.12"],
        "nvidia/cublas/lib",
        "nvidia-cublas",
        deps = ["cublasLt"]
    ),
    toolkit!(
        "cublasLt",
        ["libcublasLt.so.13", "libcublasLt.so.12"],
        "nvidia/cublas/lib",
        "nvidia-cublas"
    ),
    toolkit!(
        "nvblas",
        ["libnvblas.so.13", "libnvblas.so.12"],
        "nvidia/cublas/lib",
        "nvidia-cublas",
        deps = ["cublas", "cublasLt"]
    ),
    toolkit!(
        "cufft",
        ["libcufft.so.12", "libcufft.so.11"],
        "nvidia/cufft/lib",
        "nvidia-cufft"
    ),
    toolkit!(
        "cufftw",
        ["libcufftw.so.12", "libcufftw.so.11"],
        "nvidia/cufft/lib",
        "nvidia-cufft",
        deps = ["cufft"]
    ),
    toolkit!("curand", ["libcurand.so.10"], "nvidia/curand/lib", "nvidia-curand"),
    toolkit!(
        "cusolver",
        ["libcusolver.so.12", "libcusolver.so.11"],
        "nvidia/cusolver/lib",
        "nvidia-cusolver",
        deps = ["nvJitLink", "cusparse", "cublasLt", "cublas"]
    ),
    toolkit!(
        "cusolverMg",
        ["libcusolverMg.so.12", "libcusolverMg.so.11"],
        "nvidia/cusolver/lib",
        "nvidia-cusolver",
        deps = ["nvJitLink", "cublasLt", "cublas"]
    ),
    toolkit!(
        "cusparse",
        ["libcusparse.so.12"],
        "nvidia/cusparse/lib",
        "nvidia-cusparse",
        deps = ["nvJitLink"]
    ),
    toolkit!(
        "nppc",
        ["libnppc.so.13", "libnppc.so.12"],
        "nvidia/npp/lib",
        "nvidia-npp"
    ),
    toolkit!(
        "nvjpeg",
        ["libnvjpeg.so.13", "libnvjpeg.so.12"],
        "nvidia/nvjpeg/lib",
        "nvidia-nvjpeg"
    ),
    toolkit!("cufile", ["libcufile.so.0"], "nvidia/cufile/lib", "nvidia-cufile"),
    LibDescriptor {
        name: "cupti",
        anchor_dirs: &["extras/CUPTI/lib64", "lib"],
        ..toolkit!(
            "cupti",
            ["libcupti.so.13", "libcupti.so.12"],
            "nvidia/cuda_cupti/lib",
            "nvidia-cuda-cupti"
        )
    },
    LibDescriptor {
        site_packages_dirs: &[CU13],
        install_hint: "cuDLA exists on Tegra (aarch64) only: install the CUDA toolkit for Jetson/DRIVE",
        ..toolkit!("cudla", ["libcudla.so.1"], "nvidia/cu13/lib", "nvidia-cudla")
    },
    LibDescriptor {
        install_root_vars: &["NCCL_HOME"],
        anchor_dirs: &["lib", "lib64", "build/lib"],
        ..other(
            "nccl",
            &["libnccl.so.2"],
            &["nvidia/nccl/lib"],
            &[],
            "install it with `pip install nvidia-nccl-cu13` (or -cu12), or set NCCL_HOME",
        )
    },
    other(
        "nvshmem_host",
        &["libnvshmem_host.so.3"],
        &["nvidia/nvshmem/lib"],
        &[],
        "install it with `pip install nvidia-nvshmem-cu13` (or -cu12)",
    ),
    LibDescriptor {
        install_root_vars: &["CUDNN_PATH"],
        ..other(
            "cudnn",
            &["libcudnn.so.9"],
            &["nvidia/cudnn/lib"],
            &["cublasLt"],
            "install it with `pip install nvidia-cudnn-cu13` (or -cu12), or set CUDNN_PATH",
        )
    },
    other(
        "cusparseLt",
        &["libcusparseLt.so.0"],
        &[CU13, "nvidia/cusparselt/lib"],
        &[],
        "install it with `pip install nvidia-cusparselt-cu13` (or -cu12)",
    ),
];

const MORE: [LibDescriptor; 14] = [
    other(
        "cutensor",
        &["libcutensor.so.2"],
        &["cutensor/lib"],
        &["cublasLt"],
        "install it with `pip install cutensor-cu13` (or -cu12)",
    ),
    other(
        "cutensorMg",
        &["libcutensorMg.so.2"],
        &["cutensor/lib"],
        &["cutensor", "cublasLt"],
        "install it with `pip install cutensor-cu13` (or -cu12)",
    ),
    other(
        "cutensorMp",
        &["libcutensorMp.so.2"],
        &["cutensor/lib"],
        &["cutensor", "cublasLt", "cudart", "nccl"],
        "install it with `pip install cutensor-cu13` (or -cu12)",
    ),
    other(
        "cudss",
        &["libcudss.so.0"],
        &["nvidia/cu13/lib", "nvidia/cu12/lib"],
        &["cublas", "cublasLt"],
        "install it with `pip install nvidia-cudss-cu13` (or -cu12)",
    ),
    other(
        "mathdx",
        &["libmathdx.so.0"],
        &["nvidia/cu13/lib", "nvidia/cu12/lib"],
        &["nvrtc"],
        "install it with `pip install nvidia-libmathdx-cu13` (or -cu12)",
    ),
    other(
        "cublasmp",
        &["libcublasmp.so.0"],
        &["nvidia/cublasmp/cu13/lib", "nvidia/cublasmp/cu12/lib"],
        &["cublas", "cublasLt", "nvshmem_host"],
        "install it with `pip install nvidia-cublasmp-cu13` (or -cu12)",
    ),
    other(
        "cufftMp",
        &["libcufftMp.so.12", "libcufftMp.so.11"],
        &["nvidia/cufftmp/cu13/lib", "nvidia/cufftmp/cu12/lib"],
        &["nvshmem_host"],
        "install it with `pip install nvidia-cufftmp-cu13` (or -cu12)",
    ),
    other(
        "cusolverMp",
        &["libcusolverMp.so.0"],
        &["nvidia/cu13/lib", "nvidia/cu12/lib"],
        &["cublas", "cudart", "cusolver", "nccl"],
        "install it with `pip install nvidia-cusolvermp-cu13` (or -cu12)",
    ),
    other(
        "cudensitymat",
        &["libcudensitymat.so.0"],
        CUQUANTUM,
        &[
            "cutensornet",
            "cutensor",
            "cusolver",
            "cublasLt",
            "cublas",
            "curand",
            "cusparse",
            "nvJitLink",
        ],
        CUQUANTUM_HINT,
    ),
    other("cupauliprop", &["libcupauliprop.so.0"], CUQUANTUM, &[], CUQUANTUM_HINT),
    other(
        "cutensornet",
        &["libcutensornet.so.2"],
        CUQUANTUM,
        &["cutensor", "cublas", "cusolver"],
        CUQUANTUM_HINT,
    ),
    other(
        "custabilizer",
        &["libcustabilizer.so.0"],
        CUQUANTUM,
        &[],
        CUQUANTUM_HINT,
    ),
    other(
        "custatevec",
        &["libcustatevec.so.1"],
        CUQUANTUM,
        &["cublas", "cublasLt"],
        CUQUANTUM_HINT,
    ),
    other(
        "nvpl_fftw",
        &["libnvpl_fftw.so.0"],
        &["nvpl/lib"],
        &[],
        "NVPL exists on aarch64 only: `pip install nvpl-fft`",
    ),
];

const DRIVER: [LibDescriptor; 3] = [
    driver(
        "cuda",
        &["libcuda.so.1"],
        "libcuda is part of the NVIDIA driver: install the driver (it cannot come from a wheel or the toolkit); \
         on WSL it lives in /usr/lib/wsl/lib",
    ),
    driver(
        "nvml",
        &["libnvidia-ml.so.1"],
        "NVML is part of the NVIDIA driver: install the driver",
    ),
    driver(
        "nvcudla",
        &["libnvcudla.so"],
        "nvcudla is part of the Tegra driver (aarch64 only)",
    ),
];

const fn concat<const N: usize>(parts: [&[LibDescriptor]; 5]) -> [LibDescriptor; N] {
    let mut out = [DRIVER[0]; N];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(n == N, "catalog size mismatch");
    out
}

const ALL: [LibDescriptor; 50] = concat([&MAIN, &NPP, &MORE, &DRIVER, &[]]);

/// The catalog: every library `cuda-pathfinder` can find.
pub static DESCRIPTORS: &[LibDescriptor] = &ALL;

/// The descriptor of `name`, if the catalog has it.
pub fn find(name: &str) -> Option<&'static LibDescriptor> {
    DESCRIPTORS.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
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
            assert_eq!(d.site_packages_dirs[0], CU13, "{}", d.name);
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
}
