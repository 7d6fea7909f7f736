//! The operating system and architecture a search is for, and the Windows rules that are pure
//! logic (architecture tags, PE headers, `PATH` scanning, suppressed DLL names), so they run and
//! are tested on Linux against simulated directory trees.

use crate::catalog::LibDescriptor;
use crate::error::{NotFoundCause, NotFoundError, UnsupportedArchError};
use std::fmt;
use std::path::{Path, PathBuf};

/// A Windows target architecture NVIDIA ships DLLs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowsArch {
    /// x86-64 (`win-amd64`).
    X64,
    /// Arm64 (`win-arm64`).
    Arm64,
}

impl WindowsArch {
    /// `cuda.pathfinder`'s name: `"x64"` or `"arm64"`.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowsArch::X64 => "x64",
            WindowsArch::Arm64 => "arm64",
        }
    }

    /// The architecture of a Python platform tag (`win-amd64`, `win_arm64`, ...).
    pub fn from_platform_tag(tag: &str) -> Result<WindowsArch, UnsupportedArchError> {
        match tag.to_ascii_lowercase().replace('_', "-").as_str() {
            "win-amd64" => Ok(WindowsArch::X64),
            "win-arm64" => Ok(WindowsArch::Arm64),
            _ => Err(UnsupportedArchError {
                platform_tag: tag.to_string(),
            }),
        }
    }

    /// The PE/COFF machine type of DLLs for this architecture.
    pub fn pe_machine(self) -> u16 {
        match self {
            WindowsArch::X64 => 0x8664,
            WindowsArch::Arm64 => 0xAA64,
        }
    }
}

impl fmt::Display for WindowsArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operating system (and on Windows the architecture) a search is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// Linux (sonames, `lib64`/`lib`, `dlopen`).
    Linux,
    /// Windows (DLL names, `bin\x64`, `LoadLibraryExW`), for one architecture.
    Windows(WindowsArch),
}

impl Platform {
    /// The platform this program runs on. Other Unix systems are searched as Linux.
    pub fn current() -> Result<Platform, UnsupportedArchError> {
        if cfg!(windows) {
            let tag = match std::env::consts::ARCH {
                "x86_64" => "win-amd64",
                "aarch64" => "win-arm64",
                "x86" => "win32",
                other => other,
            };
            WindowsArch::from_platform_tag(tag).map(Platform::Windows)
        } else {
            Ok(Platform::Linux)
        }
    }

    /// Whether this is Windows.
    pub fn is_windows(self) -> bool {
        matches!(self, Platform::Windows(_))
    }

    /// The separator of `PATH` entries.
    pub(crate) fn path_list_separator(self) -> char {
        if self.is_windows() {
            ';'
        } else {
            ':'
        }
    }
}

/// The Windows architectures NVIDIA ships `libname` for (empty when it has no Windows DLL),
/// whatever the machine this runs on: `cuda.pathfinder`'s `windows_supported_arches`.
pub fn windows_supported_arches(libname: &str) -> Result<&'static [WindowsArch], NotFoundError> {
    match crate::catalog::find(libname) {
        Some(desc) => Ok(desc.windows_arches),
        None => Err(crate::unknown_library(libname)),
    }
}

/// Whether `desc` exists for `platform`; the error is `DynamicLibNotAvailableError`'s.
pub(crate) fn check_available(desc: &LibDescriptor, platform: Platform) -> Result<(), NotFoundError> {
    let (available, what) = match platform {
        Platform::Linux => (!desc.sonames.is_empty(), "Linux".to_string()),
        Platform::Windows(arch) => (
            !desc.windows_dlls.is_empty() && desc.windows_arches.contains(&arch),
            format!("Windows {arch}"),
        ),
    };
    if available {
        return Ok(());
    }
    let arches: Vec<&str> = desc.windows_arches.iter().map(|a| a.as_str()).collect();
    let where_ = match (desc.sonames.is_empty(), arches.is_empty()) {
        (false, true) => "it exists on Linux only".to_string(),
        (true, false) => format!("it exists on Windows ({}) only", arches.join(", ")),
        (false, false) => format!("it exists on Linux and on Windows {}", arches.join(", ")),
        (true, true) => "it exists on no platform".to_string(),
    };
    Err(NotFoundError {
        kind: "library",
        name: desc.name.to_string(),
        cause: NotFoundCause::NotAvailable,
        attempts: Vec::new(),
        hint: format!("\"{}\" is not available on {what}: {where_}.", desc.name),
    })
}

/// DLL files that carry a library's prefix but are not the library: NVRTC's alternative and
/// builtins DLLs, and the 32-bit runtime and NVVM.
pub(crate) fn is_suppressed_dll(file_name: &str) -> bool {
    let name = file_name.to_ascii_lowercase();
    (name.starts_with("nvrtc") && name.ends_with(".alt.dll"))
        || name.starts_with("nvrtc-builtins")
        || name.starts_with("cudart32_")
        || name.starts_with("nvvm32")
}

/// Whether `path` is a PE image (DLL or executable) for `arch`: its COFF header's machine field.
pub fn pe_matches_arch(path: &Path, arch: WindowsArch) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> std::io::Result<bool> {
        let mut f = std::fs::File::open(path)?;
        let mut mz = [0u8; 2];
        f.read_exact(&mut mz)?;
        if &mz != b"MZ" {
            return Ok(false);
        }
        f.seek(SeekFrom::Start(0x3C))?;
        let mut offset = [0u8; 4];
        f.read_exact(&mut offset)?;
        f.seek(SeekFrom::Start(u64::from(u32::from_le_bytes(offset))))?;
        let mut header = [0u8; 6];
        f.read_exact(&mut header)?;
        Ok(&header[..4] == b"PE\0\0" && u16::from_le_bytes([header[4], header[5]]) == arch.pe_machine())
    };
    read().unwrap_or(false)
}

/// Whether a `PATH` entry is absolute, as Windows sees it (`C:\...`, `\\server\...`) or as this
/// machine does (so simulated trees under `/tmp` count).
fn is_absolute_entry(entry: &str) -> bool {
    let b = entry.as_bytes();
    let drive = b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'\\' || b[2] == b'/');
    drive || entry.starts_with("\\\\") || Path::new(entry).is_absolute()
}

/// The explicit `PATH` scan Windows needs after `LoadLibraryExW` (Python 3.8 and later leave
/// `PATH` out of the DLL search): absolute entries only (a relative one would search the current
/// folder), each once, compared without case; for each, the DLL names in order.
pub(crate) fn windows_path_candidates(path_var: &str, dll_names: &[&str]) -> Vec<PathBuf> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for entry in path_var.split(';') {
        let entry = entry.trim().trim_matches('"');
        if entry.is_empty() || !is_absolute_entry(entry) {
            continue;
        }
        let key = entry.replace('/', "\\").trim_end_matches('\\').to_ascii_lowercase();
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        for name in dll_names {
            out.push(Path::new(entry).join(name));
        }
    }
    out
}

/// Windows side effect of loading `desc` from `path`: the folder to pass to `AddDllDirectory`
/// (and to append to `PATH`), so the DLLs it opens later (NVRTC's builtins, cuFFT's helpers) are
/// found next to it. `None` for libraries that need none, and on Linux.
pub fn add_dll_directory_for(desc: &LibDescriptor, path: &Path, platform: Platform) -> Option<PathBuf> {
    (platform.is_windows() && desc.requires_add_dll_directory)
        .then(|| path.parent().map(Path::to_path_buf))
        .flatten()
}

/// Sort key for natural version order (`v9.10` after `v9.9`): runs of digits compare as numbers.
pub(crate) fn natural_key(s: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut digits = String::new();
    let mut text = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                out.push((0, std::mem::take(&mut text)));
            }
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((digits.parse().unwrap_or(u64::MAX), String::new()));
                digits.clear();
            }
            text.push(c);
        }
    }
    if !digits.is_empty() {
        out.push((digits.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        out.push((0, text));
    }
    out
}

/// Expands `pattern` (a relative path whose components may hold one `*`) below `base`: matching
/// folders, newest first in natural order.
pub(crate) fn glob_dirs(base: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut current = vec![base.to_path_buf()];
    for part in pattern.split(['/', '\\']).filter(|p| !p.is_empty()) {
        let mut next = Vec::new();
        for dir in &current {
            match part.split_once('*') {
                None => next.push(dir.join(part)),
                Some((prefix, suffix)) => {
                    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .filter(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix)
                        })
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect();
                    found.sort_by_key(|p| {
                        std::cmp::Reverse(natural_key(&p.file_name().unwrap_or_default().to_string_lossy()))
                    });
                    next.extend(found);
                }
            }
        }
        current = next;
    }
    current
}
