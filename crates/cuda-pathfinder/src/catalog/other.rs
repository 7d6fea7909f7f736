//! Libraries of other NVIDIA products: NCCL, NVSHMEM, cuDNN, cuSPARSELt, cuTENSOR, cuDSS,
//! MathDx, the multi-GPU math libraries, cuQuantum and NVPL.

use super::{LibDescriptor, PackagedWith, BASE, BOTH_ARCHES};

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
        dependencies,
        install_hint,
        ..BASE
    }
}

const CUQUANTUM: &[&str] = &["cuquantum/lib"];
const CUQUANTUM_HINT: &str = "install it with `pip install cuquantum-python-cu13` (or -cu12)";
const CUTENSOR_HINT: &str = "install it with `pip install cutensor-cu13` (or -cu12)";
const CU13_CU12: &[&str] = &["nvidia/cu13/lib", "nvidia/cu12/lib"];
const CU13_CU12_WIN: &[&str] = &["nvidia/cu13/bin", "nvidia/cu12/bin"];

/// Libraries of other products.
pub(super) const OTHER: [LibDescriptor; 18] = [
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
        windows_dlls: &["cudnn64_9.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: &["nvidia/cudnn/bin"],
        // Windows arm64: only the standalone archive layout, through CUDNN_PATH/bin/arm64.
        anchor_dirs_windows_x64: &["bin/13.*", "bin/12.*", "bin/x64", "bin"],
        anchor_dirs_windows_arm64: &["bin/arm64"],
        program_files_globs_windows: &["NVIDIA/CUDNN/v*"],
        optional_dependencies: &["nvrtc"],
        ..other(
            "cudnn",
            &["libcudnn.so.9"],
            &["nvidia/cudnn/lib"],
            &["cublasLt"],
            "install it with `pip install nvidia-cudnn-cu13` (or -cu12), or set CUDNN_PATH",
        )
    },
    LibDescriptor {
        windows_dlls: &["cusparseLt.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: &["nvidia/cu13/bin/x64", "nvidia/cusparselt/bin"],
        site_packages_windows_arm64: &["nvidia/cu13/bin/arm64"],
        ..other(
            "cusparseLt",
            &["libcusparseLt.so.0"],
            &["nvidia/cu13/lib", "nvidia/cusparselt/lib"],
            &[],
            "install it with `pip install nvidia-cusparselt-cu13` (or -cu12)",
        )
    },
    LibDescriptor {
        windows_dlls: &["cutensor.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: &["cutensor/bin"],
        site_packages_windows_arm64: &["cutensor/bin"],
        ..other(
            "cutensor",
            &["libcutensor.so.2"],
            &["cutensor/lib"],
            &["cublasLt"],
            CUTENSOR_HINT,
        )
    },
    LibDescriptor {
        windows_dlls: &["cutensorMg.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: &["cutensor/bin"],
        site_packages_windows_arm64: &["cutensor/bin"],
        ..other(
            "cutensorMg",
            &["libcutensorMg.so.2"],
            &["cutensor/lib"],
            &["cutensor", "cublasLt"],
            CUTENSOR_HINT,
        )
    },
    other(
        "cutensorMp",
        &["libcutensorMp.so.2"],
        &["cutensor/lib"],
        &["cutensor", "cublasLt", "cudart", "nccl"],
        CUTENSOR_HINT,
    ),
    LibDescriptor {
        windows_dlls: &["cudss64_0.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: CU13_CU12_WIN,
        site_packages_windows_arm64: CU13_CU12_WIN,
        ..other(
            "cudss",
            &["libcudss.so.0"],
            CU13_CU12,
            &["cublas", "cublasLt"],
            "install it with `pip install nvidia-cudss-cu13` (or -cu12)",
        )
    },
    LibDescriptor {
        windows_dlls: &["mathdx64_0.dll"],
        windows_arches: BOTH_ARCHES,
        site_packages_windows_x64: CU13_CU12_WIN,
        site_packages_windows_arm64: CU13_CU12_WIN,
        dynamic_link_component: Some("nvrtc_mathdx"),
        ..other(
            "mathdx",
            &["libmathdx.so.0"],
            CU13_CU12,
            &["nvrtc"],
            "install it with `pip install nvidia-libmathdx-cu13` (or -cu12)",
        )
    },
    other(
        "cublasmp",
        &["libcublasmp.so.0"],
        &["nvidia/cublasmp/cu13/lib", "nvidia/cublasmp/cu12/lib"],
        &["cublas", "cublasLt", "nvshmem_host"],
        "install it with `pip install nvidia-cublasmp-cu13` (or -cu12)",
    ),
    LibDescriptor {
        requires_rtld_deepbind: true,
        ..other(
            "cufftMp",
            &["libcufftMp.so.12", "libcufftMp.so.11"],
            &["nvidia/cufftmp/cu13/lib", "nvidia/cufftmp/cu12/lib"],
            &["nvshmem_host"],
            "install it with `pip install nvidia-cufftmp-cu13` (or -cu12)",
        )
    },
    other(
        "cusolverMp",
        &["libcusolverMp.so.0"],
        CU13_CU12,
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
