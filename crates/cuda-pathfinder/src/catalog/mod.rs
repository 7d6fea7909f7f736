//! The libraries `cuda-pathfinder` knows: names, sonames, DLL names and where each distribution
//! puts them, on Linux and Windows.
//!
//! The data follows `cuda.pathfinder` 1.8's descriptor catalog: file names in the order the
//! search prefers them (newest first), the CUDA 13 wheel folder before the CUDA 12 per-component
//! ones, Windows folders per architecture, and the libraries that must be loaded first.

mod ctk;
mod other;
#[cfg(test)]
mod tests;

use crate::platform::WindowsArch;

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

impl PackagedWith {
    /// `cuda.pathfinder`'s name: `"ctk"`, `"other"` or `"driver"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PackagedWith::Toolkit => "ctk",
            PackagedWith::Other => "other",
            PackagedWith::Driver => "driver",
        }
    }
}

/// Everything the search needs to know about one library.
#[derive(Debug, Clone, Copy)]
pub struct LibDescriptor {
    /// The short name (`"nvrtc"`).
    pub name: &'static str,
    /// Who ships it.
    pub packaged_with: PackagedWith,
    /// Linux sonames, newest first (empty: not on Linux).
    pub sonames: &'static [&'static str],
    /// Windows DLL names, newest first (empty: not on Windows).
    pub windows_dlls: &'static [&'static str],
    /// The Windows architectures it exists for.
    pub windows_arches: &'static [WindowsArch],
    /// Folders below a site-packages directory that hold it on Linux, CUDA 13 wheel first.
    pub site_packages_dirs: &'static [&'static str],
    /// The same on Windows x64.
    pub site_packages_windows_x64: &'static [&'static str],
    /// The same on Windows arm64.
    pub site_packages_windows_arm64: &'static [&'static str],
    /// Folders below a toolkit, conda or product root that hold it on Linux.
    pub anchor_dirs: &'static [&'static str],
    /// The same on Windows x64 (`bin/x64` for CUDA 13, `bin` for CUDA 12).
    pub anchor_dirs_windows_x64: &'static [&'static str],
    /// The same on Windows arm64.
    pub anchor_dirs_windows_arm64: &'static [&'static str],
    /// Environment variables naming the install root of this product (`CUDNN_PATH`).
    pub install_root_vars: &'static [&'static str],
    /// Windows: versioned install roots below Program Files (`NVIDIA/CUDNN/v*`), x64 only.
    pub program_files_globs_windows: &'static [&'static str],
    /// Libraries to load first.
    pub dependencies: &'static [&'static str],
    /// Libraries to load first when they can be found (a missing one is no error).
    pub optional_dependencies: &'static [&'static str],
    /// Windows: register the library's folder with `AddDllDirectory` (and `PATH`) when loading it.
    pub requires_add_dll_directory: bool,
    /// Linux: open with `RTLD_DEEPBIND` (cuFFTMp).
    pub requires_rtld_deepbind: bool,
    /// Windows: check the DLL's PE machine type when found in a folder not named for an
    /// architecture (NVVM).
    pub requires_windows_binary_arch_check: bool,
    /// Search the toolkit root the system loader's `cudart` belongs to (NVVM and CUPTI, which
    /// live outside the loader's folders).
    pub ctk_root_canary: bool,
    /// Guard rails: libraries of one dynamic-link component must come from one toolkit release.
    pub dynamic_link_component: Option<&'static str>,
    /// Guard rails: items sharing a tag must come from one toolkit release.
    pub companion_tags: &'static [&'static str],
    /// How to get the library, for error messages.
    pub install_hint: &'static str,
}

impl LibDescriptor {
    /// The site-packages folders for `arch` on Windows.
    pub fn site_packages_windows(&self, arch: WindowsArch) -> &'static [&'static str] {
        match arch {
            WindowsArch::X64 => self.site_packages_windows_x64,
            WindowsArch::Arm64 => self.site_packages_windows_arm64,
        }
    }

    /// The folders below a root for `arch` on Windows.
    pub fn anchor_dirs_windows(&self, arch: WindowsArch) -> &'static [&'static str] {
        match arch {
            WindowsArch::X64 => self.anchor_dirs_windows_x64,
            WindowsArch::Arm64 => self.anchor_dirs_windows_arm64,
        }
    }
}

pub(crate) const BOTH_ARCHES: &[WindowsArch] = &[WindowsArch::X64, WindowsArch::Arm64];
pub(crate) const LINUX_CTK: &[&str] = &["lib64", "lib"];
pub(crate) const WIN_CTK_X64: &[&str] = &["bin/x64", "bin"];
pub(crate) const WIN_CTK_ARM64: &[&str] = &["bin/arm64", "bin"];

/// The fields every descriptor starts from: a Linux-only toolkit library in the usual folders.
pub(crate) const BASE: LibDescriptor = LibDescriptor {
    name: "",
    packaged_with: PackagedWith::Toolkit,
    sonames: &[],
    windows_dlls: &[],
    windows_arches: &[],
    site_packages_dirs: &[],
    site_packages_windows_x64: &[],
    site_packages_windows_arm64: &[],
    anchor_dirs: LINUX_CTK,
    anchor_dirs_windows_x64: WIN_CTK_X64,
    anchor_dirs_windows_arm64: WIN_CTK_ARM64,
    install_root_vars: &[],
    program_files_globs_windows: &[],
    dependencies: &[],
    optional_dependencies: &[],
    requires_add_dll_directory: false,
    requires_rtld_deepbind: false,
    requires_windows_binary_arch_check: false,
    ctk_root_canary: false,
    dynamic_link_component: None,
    companion_tags: &[],
    install_hint: "",
};

const fn concat<const N: usize>(parts: [&[LibDescriptor]; 3]) -> [LibDescriptor; N] {
    let mut out = [BASE; N];
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

const ALL: [LibDescriptor; 50] = concat([&ctk::CTK, &other::OTHER, &ctk::DRIVER]);

/// The catalog: every library `cuda-pathfinder` can find, on any platform.
pub static DESCRIPTORS: &[LibDescriptor] = &ALL;

/// The descriptor of `name`, if the catalog has it.
pub fn find(name: &str) -> Option<&'static LibDescriptor> {
    DESCRIPTORS.iter().find(|d| d.name == name)
}
