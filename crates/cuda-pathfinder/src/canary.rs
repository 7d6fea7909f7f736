//! The toolkit-root canary: which toolkit the system loader would give `cudart` from, found
//! without loading it, so libraries outside the loader's folders (NVVM in `nvvm/lib64`, CUPTI in
//! `extras/CUPTI/lib64`), headers and tools can be found in that toolkit.
//!
//! `cuda.pathfinder` loads `cudart` in a child Python process and reads its path back. Here the
//! loader's search is worked out instead: `cudart` when the process already has it, else the
//! folders of `LD_LIBRARY_PATH`, the loader's cache (`/etc/ld.so.cache`) and its default folders
//! on Linux, the absolute `PATH` entries on Windows. Nothing is loaded or run.

use crate::env::Environment;
use crate::loader::Loader;
use crate::platform::{windows_path_candidates, Platform};
use std::path::{Path, PathBuf};

/// The libraries whose location tells the toolkit root.
const CANARY: &str = "cudart";

/// The toolkit root of the path of a library the system loader would open, and how it was found.
pub(crate) fn ctk_root(env: &Environment, loader: &dyn Loader) -> Result<(PathBuf, String), String> {
    let Some(desc) = crate::catalog::find(CANARY) else {
        return Err("the canary library is not in the catalog".into());
    };
    let names: &[&str] = match env.platform {
        Platform::Linux => desc.sonames,
        Platform::Windows(_) => desc.windows_dlls,
    };
    let (path, how) = match loader.already_loaded(desc, names).and_then(|o| o.path) {
        Some(path) => (path, "already loaded"),
        None => match resolve_system_library(env, names) {
            Some(path) => (path, "where the system loader finds it"),
            None => {
                return Err(format!(
                    "the system loader would find none of {} (the canary)",
                    names.join(", ")
                ))
            }
        },
    };
    match derive_ctk_root(&path, env.platform) {
        Some(root) => Ok((root, format!("{} ({how}) is in {}", CANARY, path.display()))),
        None => Err(format!(
            "{} ({how}) is in {}, which is not a toolkit layout",
            CANARY,
            path.display()
        )),
    }
}

/// Where the system loader would find one of `names` (in order), without loading it.
pub(crate) fn resolve_system_library(env: &Environment, names: &[&str]) -> Option<PathBuf> {
    match env.platform {
        Platform::Windows(_) => {
            let path = env.var("PATH").unwrap_or_default();
            windows_path_candidates(path, names).into_iter().find(|p| p.is_file())
        }
        Platform::Linux => {
            let cache = env.ld_so_cache.as_deref().and_then(|p| std::fs::read(p).ok());
            names.iter().find_map(|name| {
                let from_env = env
                    .var("LD_LIBRARY_PATH")
                    .unwrap_or_default()
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(|d| Path::new(d).join(name));
                let from_cache = cache.as_deref().map(|c| ld_cache_lookup(c, name)).unwrap_or_default();
                let from_defaults = env.loader_default_dirs.iter().map(|d| d.join(name));
                from_env.chain(from_cache).chain(from_defaults).find(|p| p.is_file())
            })
        }
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn c_str_at(data: &[u8], at: usize) -> Option<&str> {
    let rest = data.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The paths glibc's loader cache (format `glibc-ld.so.cache1.1`, alone or after the old
/// `ld.so-1.7.0` table) gives for the soname `name`, in the cache's order.
pub(crate) fn ld_cache_lookup(cache: &[u8], name: &str) -> Vec<PathBuf> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    let Some(start) = cache.windows(MAGIC.len()).position(|w| w == MAGIC) else {
        return Vec::new();
    };
    let new = &cache[start..];
    let Some(count) = u32_at(new, 20) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..count as usize {
        let at = HEADER + i * ENTRY;
        let (Some(key), Some(value)) = (u32_at(new, at + 4), u32_at(new, at + 8)) else {
            break;
        };
        if c_str_at(new, key as usize) == Some(name) {
            if let Some(path) = c_str_at(new, value as usize) {
                out.push(PathBuf::from(path));
            }
        }
    }
    out
}

/// The toolkit root a library file belongs to: `<root>/lib64/x`, `<root>/lib/x` and
/// `<root>/targets/<triple>/lib(64)/x` on Linux; `<root>\bin\x64|arm64\x` and `<root>\bin\x`
/// on Windows (without regard to case). `None` for any other layout.
pub fn derive_ctk_root(path: &Path, platform: Platform) -> Option<PathBuf> {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase());
    let dir = path.parent()?;
    match platform {
        Platform::Linux => {
            let d = name(dir)?;
            if d != "lib64" && d != "lib" {
                return None;
            }
            let parent = dir.parent()?;
            match parent.parent() {
                Some(targets) if name(targets).as_deref() == Some("targets") => targets.parent().map(Path::to_path_buf),
                _ => Some(parent.to_path_buf()),
            }
        }
        Platform::Windows(_) => {
            let d = name(dir)?;
            if d == "bin" {
                return dir.parent().map(Path::to_path_buf);
            }
            let bin = dir.parent()?;
            if (d == "x64" || d == "arm64") && name(bin).as_deref() == Some("bin") {
                return bin.parent().map(Path::to_path_buf);
            }
            None
        }
    }
}
