//! The toolkit's libraries and the driver's.

use super::{LibDescriptor, PackagedWith, BASE, BOTH_ARCHES};
use crate::platform::WindowsArch;

const CU13: &str = "nvidia/cu13/lib";
const CU13_WIN_X64: &str = "nvidia/cu13/bin/x86_64";
const CU13_WIN_ARM64: &str = "nvidia/cu13/bin/arm64";

/// A toolkit library in the CUDA 13 wheel and in the CUDA 12 wheel `nvidia/<cu12>/`, on Linux and
/// both Windows architectures (the CUDA 12 wheels exist for x64 only).
macro_rules! ctk {
    ($name:literal, [$($so:literal),+], [$($dll:literal),*], $cu12:literal, $pip:literal $(, $field:ident: $value:expr)* $(,)?) => {
        LibDescriptor {
            $($field: $value,)*
            ..LibDescriptor {
                name: $name,
                sonames: &[$($so),+],
                windows_dlls: &[$($dll),*],
                windows_arches: BOTH_ARCHES,
                site_packages_dirs: &[CU13, concat!("nvidia/", $cu12, "/lib")],
                site_packages_windows_x64: &[CU13_WIN_X64, concat!("nvidia/", $cu12, "/bin")],
                site_packages_windows_arm64: &[CU13_WIN_ARM64],
                install_hint: concat!(
                    "install it with `pip install ", $pip, "` (CUDA 13) or `pip install ", $pip,
                    "-cu12` (CUDA 12), or install the CUDA toolkit and set CUDA_PATH"
                ),
                ..BASE
            }
        }
    };
}

macro_rules! npp {
    ($($name:literal => [$so13:literal, $so12:literal], [$dll13:literal, $dll12:literal]),+ $(,)?) => {
        [$(ctk!($name, [$so13, $so12], [$dll13, $dll12], "npp", "nvidia-npp", dependencies: &["nppc"])),+]
    };
}

const NPP: [LibDescriptor; 10] = npp!(
    "nppial" => ["libnppial.so.13", "libnppial.so.12"], ["nppial64_13.dll", "nppial64_12.dll"],
    "nppicc" => ["libnppicc.so.13", "libnppicc.so.12"], ["nppicc64_13.dll", "nppicc64_12.dll"],
    "nppidei" => ["libnppidei.so.13", "libnppidei.so.12"], ["nppidei64_13.dll", "nppidei64_12.dll"],
    "nppif" => ["libnppif.so.13", "libnppif.so.12"], ["nppif64_13.dll", "nppif64_12.dll"],
    "nppig" => ["libnppig.so.13", "libnppig.so.12"], ["nppig64_13.dll", "nppig64_12.dll"],
    "nppim" => ["libnppim.so.13", "libnppim.so.12"], ["nppim64_13.dll", "nppim64_12.dll"],
    "nppist" => ["libnppist.so.13", "libnppist.so.12"], ["nppist64_13.dll", "nppist64_12.dll"],
    "nppisu" => ["libnppisu.so.13", "libnppisu.so.12"], ["nppisu64_13.dll", "nppisu64_12.dll"],
    "nppitc" => ["libnppitc.so.13", "libnppitc.so.12"], ["nppitc64_13.dll", "nppitc64_12.dll"],
    "npps" => ["libnpps.so.13", "libnpps.so.12"], ["npps64_13.dll", "npps64_12.dll"],
);

const MAIN: [LibDescriptor; 19] = [
    ctk!(
        "cudart",
        ["libcudart.so.13", "libcudart.so.12"],
        ["cudart64_13.dll", "cudart64_12.dll"],
        "cuda_runtime",
        "nvidia-cuda-runtime"
    ),
    ctk!(
        "nvrtc",
        ["libnvrtc.so.13", "libnvrtc.so.12"],
        ["nvrtc64_130_0.dll", "nvrtc64_120_0.dll"],
        "cuda_nvrtc",
        "nvidia-cuda-nvrtc",
        requires_add_dll_directory: true,
        dynamic_link_component: Some("nvrtc_mathdx"),
        companion_tags: &["api_nvrtc"],
    ),
    ctk!(
        "nvJitLink",
        ["libnvJitLink.so.13", "libnvJitLink.so.12"],
        ["nvJitLink_130_0.dll", "nvJitLink_120_0.dll"],
        "nvjitlink",
        "nvidia-nvjitlink"
    ),
    ctk!(
        "nvfatbin",
        ["libnvfatbin.so.13", "libnvfatbin.so.12"],
        ["nvfatbin_130_0.dll", "nvfatbin_120_0.dll"],
        "nvfatbin",
        "nvidia-nvfatbin"
    ),
    ctk!(
        "nvvm",
        ["libnvvm.so.4", "libnvvm.so"],
        ["nvvm70.dll", "nvvm64_40_0.dll", "nvvm64.dll"],
        "cuda_nvcc",
        "nvidia-nvvm",
        site_packages_dirs: &[CU13, "nvidia/cuda_nvcc/nvvm/lib64"],
        site_packages_windows_x64: &[CU13_WIN_X64, "nvidia/cuda_nvcc/nvvm/bin"],
        anchor_dirs: &["nvvm/lib64"],
        anchor_dirs_windows_x64: &["nvvm/bin/x64", "nvvm/bin"],
        anchor_dirs_windows_arm64: &["nvvm/bin/arm64", "nvvm/bin"],
        requires_windows_binary_arch_check: true,
        ctk_root_canary: true,
        install_hint: "install it with `pip install nvidia-nvvm` (CUDA 13) or `pip install nvidia-cuda-nvcc-cu12` \
                       (CUDA 12), or install the CUDA toolkit and set CUDA_PATH",
    ),
    ctk!("cublas", ["libcublas.so.13", "libcublas.so.12"], ["cublas64_13.dll", "cublas64_12.dll"], "cublas", "nvidia-cublas", dependencies: &["cublasLt"]),
    ctk!(
        "cublasLt",
        ["libcublasLt.so.13", "libcublasLt.so.12"],
        ["cublasLt64_13.dll", "cublasLt64_12.dll"],
        "cublas",
        "nvidia-cublas"
    ),
    ctk!(
        "nvblas",
        ["libnvblas.so.13", "libnvblas.so.12"],
        ["nvblas64_13.dll", "nvblas64_12.dll"],
        "cublas",
        "nvidia-cublas",
        dependencies: &["cublas", "cublasLt"],
    ),
    ctk!(
        "cufft",
        ["libcufft.so.12", "libcufft.so.11"],
        ["cufft64_12.dll", "cufft64_11.dll"],
        "cufft",
        "nvidia-cufft",
        requires_add_dll_directory: true,
    ),
    ctk!("cufftw", ["libcufftw.so.12", "libcufftw.so.11"], ["cufftw64_12.dll", "cufftw64_11.dll"], "cufft", "nvidia-cufft", dependencies: &["cufft"]),
    ctk!(
        "curand",
        ["libcurand.so.10"],
        ["curand64_10.dll"],
        "curand",
        "nvidia-curand"
    ),
    ctk!(
        "cusolver",
        ["libcusolver.so.12", "libcusolver.so.11"],
        ["cusolver64_12.dll", "cusolver64_11.dll"],
        "cusolver",
        "nvidia-cusolver",
        dependencies: &["nvJitLink", "cusparse", "cublasLt", "cublas"],
    ),
    ctk!(
        "cusolverMg",
        ["libcusolverMg.so.12", "libcusolverMg.so.11"],
        ["cusolverMg64_12.dll", "cusolverMg64_11.dll"],
        "cusolver",
        "nvidia-cusolver",
        dependencies: &["nvJitLink", "cublasLt", "cublas"],
    ),
    ctk!("cusparse", ["libcusparse.so.12"], ["cusparse64_12.dll"], "cusparse", "nvidia-cusparse", dependencies: &["nvJitLink"]),
    ctk!(
        "nppc",
        ["libnppc.so.13", "libnppc.so.12"],
        ["nppc64_13.dll", "nppc64_12.dll"],
        "npp",
        "nvidia-npp"
    ),
    ctk!(
        "nvjpeg",
        ["libnvjpeg.so.13", "libnvjpeg.so.12"],
        ["nvjpeg64_13.dll", "nvjpeg64_12.dll"],
        "nvjpeg",
        "nvidia-nvjpeg"
    ),
    ctk!(
        "cufile",
        ["libcufile.so.0"],
        [],
        "cufile",
        "nvidia-cufile",
        windows_arches: &[],
        site_packages_windows_x64: &[],
        site_packages_windows_arm64: &[],
    ),
    ctk!(
        "cupti",
        ["libcupti.so.13", "libcupti.so.12"],
        [
            "cupti64_2026.3.1.dll", "cupti64_2026.3.0.dll", "cupti64_2026.2.1.dll", "cupti64_2026.2.0.dll",
            "cupti64_2026.1.1.dll", "cupti64_2026.1.0.dll", "cupti64_2025.4.1.dll", "cupti64_2025.3.1.dll",
            "cupti64_2025.2.1.dll", "cupti64_2025.1.1.dll", "cupti64_2024.3.2.dll", "cupti64_2024.2.1.dll",
            "cupti64_2024.1.1.dll", "cupti64_2023.3.1.dll", "cupti64_2023.2.2.dll", "cupti64_2023.1.1.dll",
            "cupti64_2022.4.1.dll"
        ],
        "cuda_cupti",
        "nvidia-cuda-cupti",
        anchor_dirs: &["extras/CUPTI/lib64", "lib"],
        anchor_dirs_windows_x64: &["extras/CUPTI/lib64", "bin/x64", "bin"],
        anchor_dirs_windows_arm64: &["extras/CUPTI/lib64", "bin/arm64", "bin"],
        ctk_root_canary: true,
    ),
    ctk!(
        "cudla",
        ["libcudla.so.1"],
        ["cudla.dll"],
        "cu13",
        "nvidia-cudla",
        windows_arches: &[WindowsArch::Arm64],
        site_packages_dirs: &[CU13],
        // No Windows wheel ships cudla.dll: it comes from the toolkit, arm64 only.
        site_packages_windows_x64: &[],
        site_packages_windows_arm64: &[],
        anchor_dirs_windows_x64: &[],
        anchor_dirs_windows_arm64: &["bin/arm64"],
        install_hint: "cuDLA exists on Tegra (aarch64) and Windows arm64 only: install the CUDA toolkit for the device",
    ),
];

const fn join<const N: usize>(a: &[LibDescriptor], b: &[LibDescriptor]) -> [LibDescriptor; N] {
    let mut out = [BASE; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[i + j] = b[j];
        j += 1;
    }
    assert!(i + j == N, "catalog size mismatch");
    out
}

/// The toolkit's libraries.
pub(super) const CTK: [LibDescriptor; 29] = join(&MAIN, &NPP);

const fn driver(
    name: &'static str,
    sonames: &'static [&'static str],
    windows_dlls: &'static [&'static str],
    install_hint: &'static str,
) -> LibDescriptor {
    LibDescriptor {
        name,
        packaged_with: PackagedWith::Driver,
        sonames,
        windows_dlls,
        windows_arches: if windows_dlls.is_empty() { &[] } else { BOTH_ARCHES },
        anchor_dirs: &[],
        anchor_dirs_windows_x64: &[],
        anchor_dirs_windows_arm64: &[],
        install_hint,
        ..BASE
    }
}

/// The driver's libraries: found in the process or by the system loader only.
pub(super) const DRIVER: [LibDescriptor; 3] = [
    driver(
        "cuda",
        &["libcuda.so.1"],
        &["nvcuda.dll"],
        "libcuda is part of the NVIDIA driver: install the driver (it cannot come from a wheel or the toolkit); \
         on WSL it lives in /usr/lib/wsl/lib",
    ),
    driver(
        "nvml",
        &["libnvidia-ml.so.1"],
        &["nvml.dll"],
        "NVML is part of the NVIDIA driver: install the driver",
    ),
    driver(
        "nvcudla",
        &["libnvcudla.so"],
        &[],
        "nvcudla is part of the Tegra driver (aarch64 only)",
    ),
];
