//! The header folders `cuda-pathfinder` knows (`cuda.pathfinder`'s header descriptor catalog,
//! plus `cuda` and `nvml`), and the tools, bitcode and static libraries.

use crate::catalog::PackagedWith;

/// One header component: the header that marks its folder, and where the folder is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderSpec {
    pub(crate) name: &'static str,
    pub(crate) packaged_with: PackagedWith,
    /// A header the folder must hold.
    pub(crate) marker: &'static str,
    /// Folders below site-packages, CUDA 13 wheel first.
    pub(crate) site_packages_dirs: &'static [&'static str],
    /// Folders below a toolkit root (`include`, `nvvm/include`).
    pub(crate) anchor_dirs: &'static [&'static str],
    /// Sub-folders of an include folder tried before it (`cccl` for CUDA 13's CCCL).
    pub(crate) include_subdirs: &'static [&'static str],
    /// The same, Windows only.
    pub(crate) include_subdirs_windows: &'static [&'static str],
    pub(crate) install_root_vars: &'static [&'static str],
    /// Linux system folders (globs, newest first) searched last.
    pub(crate) system_install_dirs: &'static [&'static str],
    /// Conda keeps toolkit headers in `targets/<triple>/include` on Linux.
    pub(crate) conda_targets_layout: bool,
    /// Search the toolkit the system loader's `cudart` belongs to.
    pub(crate) use_ctk_root_canary: bool,
    pub(crate) available_on_windows: bool,
    /// Guard rails: items sharing a tag must come from one toolkit release.
    pub(crate) companion_tags: &'static [&'static str],
}

const INCLUDE: &[&str] = &["include"];
const TOOLCHAIN: &str = "toolchain_cuda_nvcc";

const CTK_HEADER: HeaderSpec = HeaderSpec {
    name: "",
    packaged_with: PackagedWith::Toolkit,
    marker: "",
    site_packages_dirs: &[],
    anchor_dirs: INCLUDE,
    include_subdirs: &[],
    include_subdirs_windows: &[],
    install_root_vars: &[],
    system_install_dirs: &[],
    conda_targets_layout: true,
    use_ctk_root_canary: true,
    available_on_windows: true,
    companion_tags: &[],
};

const OTHER_HEADER: HeaderSpec = HeaderSpec {
    packaged_with: PackagedWith::Other,
    conda_targets_layout: false,
    use_ctk_root_canary: false,
    ..CTK_HEADER
};

macro_rules! ctk_header {
    ($name:literal, $marker:literal, $cu12:literal, [$($tag:expr),*] $(, $field:ident: $value:expr)*) => {
        HeaderSpec {
            $($field: $value,)*
            ..HeaderSpec {
                name: $name,
                marker: $marker,
                site_packages_dirs: &["nvidia/cu13/include", $cu12],
                companion_tags: &[$($tag),*],
                ..CTK_HEADER
            }
        }
    };
}

macro_rules! other_header {
    ($name:literal, $marker:literal, [$($dir:literal),+], [$($tag:expr),*] $(, $field:ident: $value:expr)*) => {
        HeaderSpec {
            $($field: $value,)*
            ..HeaderSpec {
                name: $name,
                marker: $marker,
                site_packages_dirs: &[$($dir),+],
                companion_tags: &[$($tag),*],
                ..OTHER_HEADER
            }
        }
    };
}

pub(crate) const HEADERS: &[HeaderSpec] = &[
    ctk_header!(
        "cccl",
        "cuda/std/version",
        "nvidia/cuda_cccl/include",
        [TOOLCHAIN],
        site_packages_dirs: &["nvidia/cu13/include/cccl", "nvidia/cuda_cccl/include"],
        include_subdirs: &["cccl"],
        include_subdirs_windows: &["targets/x64/cccl", "targets/x64"]
    ),
    ctk_header!("cublas", "cublas.h", "nvidia/cublas/include", ["api_cublas"]),
    ctk_header!("cuda", "cuda.h", "nvidia/cuda_runtime/include", ["api_cuda"]),
    ctk_header!(
        "cudart",
        "cuda_runtime.h",
        "nvidia/cuda_runtime/include",
        ["api_cudart", TOOLCHAIN]
    ),
    ctk_header!("cufft", "cufft.h", "nvidia/cufft/include", ["api_cufft"]),
    ctk_header!("cufile", "cufile.h", "nvidia/cufile/include", ["api_cufile"], available_on_windows: false),
    ctk_header!("curand", "curand.h", "nvidia/curand/include", ["api_curand"]),
    ctk_header!("cusolver", "cusolverDn.h", "nvidia/cusolver/include", ["api_cusolver"]),
    ctk_header!("cusparse", "cusparse.h", "nvidia/cusparse/include", ["api_cusparse"]),
    ctk_header!("npp", "npp.h", "nvidia/npp/include", ["api_npp"]),
    ctk_header!(
        "profiler",
        "cuda_profiler_api.h",
        "nvidia/cuda_profiler_api/include",
        []
    ),
    ctk_header!("nvcc", "fatbinary_section.h", "nvidia/cuda_nvcc/include", [TOOLCHAIN]),
    ctk_header!(
        "nvfatbin",
        "nvFatbin.h",
        "nvidia/nvfatbin/include",
        ["api_nvfatbin", TOOLCHAIN]
    ),
    ctk_header!(
        "nvjitlink",
        "nvJitLink.h",
        "nvidia/nvjitlink/include",
        ["api_nvjitlink"]
    ),
    ctk_header!("nvjpeg", "nvjpeg.h", "nvidia/nvjpeg/include", ["api_nvjpeg"]),
    ctk_header!("nvml", "nvml.h", "nvidia/cuda_nvml_dev/include", ["api_nvml"]),
    ctk_header!("nvrtc", "nvrtc.h", "nvidia/cuda_nvrtc/include", ["api_nvrtc"]),
    ctk_header!(
        "nvvm",
        "nvvm.h",
        "nvidia/cuda_nvcc/nvvm/include",
        ["api_nvvm", TOOLCHAIN],
        site_packages_dirs: &["nvidia/cu13/include", "nvidia/cu13/nvvm/include", "nvidia/cuda_nvcc/nvvm/include"],
        anchor_dirs: &["nvvm/include"]
    ),
    ctk_header!(
        "cudla",
        "cudla.h",
        "nvidia/cu13/include",
        ["api_cudla"],
        site_packages_dirs: &["nvidia/cu13/include"],
        available_on_windows: false
    ),
    other_header!(
        "cudnn",
        "cudnn.h",
        ["nvidia/cudnn/include"],
        [],
        install_root_vars: &["CUDNN_PATH"],
        system_install_dirs: &["/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu"]
    ),
    other_header!(
        "nccl",
        "nccl.h",
        ["nvidia/nccl/include"],
        [],
        install_root_vars: &["NCCL_HOME"],
        anchor_dirs: &["include", "build/include"],
        system_install_dirs: &["/usr/include"],
        available_on_windows: false
    ),
    other_header!(
        "cusolverMp",
        "cusolverMp.h",
        ["nvidia/cu13/include", "nvidia/cu12/include"],
        ["api_cusolvermp"],
        available_on_windows: false
    ),
    other_header!(
        "cusparseLt",
        "cusparseLt.h",
        ["nvidia/cu13/include", "nvidia/cusparselt/include"],
        ["api_cusparselt"]
    ),
    other_header!(
        "cute",
        "cute/tensor.hpp",
        ["cutlass_library/source/include"],
        [TOOLCHAIN]
    ),
    other_header!("cutensor", "cutensor.h", ["cutensor/include"], ["api_cutensor"]),
    other_header!(
        "cutlass",
        "cutlass/cutlass.h",
        ["cutlass_library/source/include"],
        [TOOLCHAIN]
    ),
    other_header!(
        "mathdx",
        "libmathdx.h",
        ["nvidia/cu13/include", "nvidia/cu12/include"],
        ["api_mathdx"]
    ),
    other_header!(
        "nvshmem",
        "nvshmem.h",
        ["nvidia/nvshmem/include"],
        ["api_nvshmem"],
        system_install_dirs: &["/usr/include/nvshmem_*"],
        available_on_windows: false
    ),
    other_header!("cudensitymat", "cudensitymat.h", ["cuquantum/include"], [], available_on_windows: false),
    other_header!("cupauliprop", "cupauliprop.h", ["cuquantum/include"], [], available_on_windows: false),
    other_header!("custabilizer", "custabilizer.h", ["cuquantum/include"], [], available_on_windows: false),
    other_header!("custatevec", "custatevec.h", ["cuquantum/include"], [], available_on_windows: false),
    other_header!("cutensornet", "cutensornet.h", ["cuquantum/include"], [], available_on_windows: false),
];

/// One file-like item (a tool, a bitcode or a static library): its file name and folders.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileSpec {
    pub(crate) name: &'static str,
    pub(crate) packaged_with: PackagedWith,
    /// The file's name on Linux (on Windows see `windows_file`).
    pub(crate) file: &'static str,
    /// The file's name on Windows (`None`: not on Windows).
    pub(crate) windows_file: Option<&'static str>,
    pub(crate) site_packages_dirs: &'static [&'static str],
    pub(crate) site_packages_windows: &'static [&'static str],
    /// Folders below a toolkit or conda root.
    pub(crate) anchor_dirs: &'static [&'static str],
    pub(crate) anchor_dirs_windows: &'static [&'static str],
    /// Search the canary's toolkit and `/usr/local/cuda` too.
    pub(crate) toolkit_roots: bool,
    pub(crate) companion_tags: &'static [&'static str],
}

const CU13_BIN: &str = "nvidia/cu13/bin";
const NVCC_BIN: &str = "nvidia/cuda_nvcc/bin";
const TOOL_BIN: &[&str] = &["bin"];
const TOOL_BIN_WINDOWS: &[&str] = &["bin/x64", "bin/x86_64", "bin"];

macro_rules! tool {
    ($name:literal, [$($dir:expr),+], $packaged:ident, [$($tag:expr),*]) => {
        FileSpec {
            name: $name,
            packaged_with: PackagedWith::$packaged,
            file: $name,
            windows_file: Some(concat!($name, ".exe")),
            site_packages_dirs: &[$($dir),+],
            site_packages_windows: &[$($dir),+],
            anchor_dirs: TOOL_BIN,
            anchor_dirs_windows: TOOL_BIN_WINDOWS,
            toolkit_roots: true,
            companion_tags: &[$($tag),*],
        }
    };
}

/// The tools `find_nvidia_binary_utility` knows.
pub(crate) const TOOLS: &[FileSpec] = &[
    tool!("nvcc", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("ptxas", [CU13_BIN, NVCC_BIN], Toolkit, []),
    tool!("nvdisasm", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("cuobjdump", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("nvprune", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("fatbinary", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("bin2c", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("nvlink", [CU13_BIN, NVCC_BIN], Toolkit, [TOOLCHAIN]),
    tool!("cuda-gdb", [NVCC_BIN], Toolkit, []),
    tool!("cuda-gdbserver", [NVCC_BIN], Toolkit, []),
    FileSpec {
        windows_file: Some("compute-sanitizer.bat"),
        anchor_dirs: &["bin", "compute-sanitizer"],
        anchor_dirs_windows: &["bin/x64", "bin/x86_64", "bin", "compute-sanitizer"],
        ..tool!("compute-sanitizer", [CU13_BIN, NVCC_BIN], Toolkit, [])
    },
    tool!("nvprof", [NVCC_BIN], Toolkit, []),
    tool!("nsys", ["nvidia/nsight_systems/bin"], Other, []),
    tool!("nsight-sys", ["nvidia/nsight_systems/bin"], Other, []),
    tool!("ncu", ["nvidia/nsight_compute/bin"], Other, []),
    tool!("nsight-compute", ["nvidia/nsight_compute/bin"], Other, []),
];

/// The bitcode libraries `find_bitcode_lib` knows.
pub(crate) const BITCODE: &[FileSpec] = &[
    FileSpec {
        name: "device",
        packaged_with: PackagedWith::Toolkit,
        file: "libdevice.10.bc",
        windows_file: Some("libdevice.10.bc"),
        site_packages_dirs: &["nvidia/cu13/nvvm/libdevice", "nvidia/cuda_nvcc/nvvm/libdevice"],
        site_packages_windows: &["nvidia/cu13/nvvm/libdevice", "nvidia/cuda_nvcc/nvvm/libdevice"],
        anchor_dirs: &["nvvm/libdevice"],
        anchor_dirs_windows: &["nvvm/libdevice"],
        toolkit_roots: true,
        companion_tags: &[TOOLCHAIN],
    },
    FileSpec {
        name: "nccl_device",
        packaged_with: PackagedWith::Other,
        file: "libnccl_device.bc",
        windows_file: None,
        site_packages_dirs: &["nvidia/nccl/lib"],
        site_packages_windows: &[],
        anchor_dirs: &["lib"],
        anchor_dirs_windows: &[],
        toolkit_roots: false,
        companion_tags: &[],
    },
    FileSpec {
        name: "nvshmem_device",
        packaged_with: PackagedWith::Other,
        file: "libnvshmem_device.bc",
        windows_file: None,
        site_packages_dirs: &["nvidia/nvshmem/lib"],
        site_packages_windows: &[],
        anchor_dirs: &["lib"],
        anchor_dirs_windows: &[],
        toolkit_roots: false,
        companion_tags: &[],
    },
];

/// The static libraries `find_static_lib` knows.
pub(crate) const STATIC: &[FileSpec] = &[FileSpec {
    name: "cudadevrt",
    packaged_with: PackagedWith::Toolkit,
    file: "libcudadevrt.a",
    windows_file: Some("cudadevrt.lib"),
    site_packages_dirs: &["nvidia/cu13/lib", "nvidia/cuda_runtime/lib"],
    site_packages_windows: &["nvidia/cu13/lib/x64", "nvidia/cuda_runtime/lib/x64"],
    anchor_dirs: &["lib64", "lib"],
    anchor_dirs_windows: &["lib/x64"],
    toolkit_roots: true,
    companion_tags: &[TOOLCHAIN],
}];
