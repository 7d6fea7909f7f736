//! The search rules on simulated directory trees (empty files named like the real ones) and a
//! simulated loader, for Linux and Windows layouts alike.

mod guard_rails;
mod linux;
mod locate;
mod windows;

use crate::catalog::find;
use crate::env::Environment;
use crate::error::{Error, NotFoundError};
use crate::loader::{Loader, Opened};
use crate::platform::{Platform, WindowsArch};
use crate::search::{self, FoundVia};
use crate::LoadedDl;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

pub(super) fn touch(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"").unwrap();
}

pub(super) fn touch_exe(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    touch(path);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes a toolkit's `cuda.h` with `CUDA_VERSION` for `major.minor`.
pub(super) fn cuda_h(root: &Path, major: u32, minor: u32) {
    let h = root.join("include/cuda.h");
    touch(&h);
    std::fs::write(h, format!("#define CUDA_VERSION {}\n", major * 1000 + minor * 10)).unwrap();
}

/// An environment that sees nothing of this machine: no default toolkit root, no loader cache.
pub(super) fn bare() -> Environment {
    Environment {
        default_ctk_root: None,
        ..Default::default()
    }
}

/// The same for Windows on `arch`.
pub(super) fn bare_windows(arch: WindowsArch) -> Environment {
    Environment {
        platform: Platform::Windows(arch),
        ..bare()
    }
}

/// A loader over simulated folders: `loaded` files are "in the process", the system search finds
/// names in `system_dirs`, and files in `broken` fail to open.
#[derive(Default)]
pub(super) struct FakeLoader {
    pub(super) loaded: Vec<PathBuf>,
    pub(super) system_dirs: Vec<PathBuf>,
    pub(super) broken: Vec<PathBuf>,
    pub(super) opened: RefCell<Vec<PathBuf>>,
}

impl Loader for FakeLoader {
    fn already_loaded(&self, _desc: &crate::LibDescriptor, names: &[&str]) -> Option<Opened> {
        let path = names
            .iter()
            .find_map(|n| self.loaded.iter().find(|p| p.file_name().is_some_and(|f| f == *n)))?;
        Some(Opened {
            handle: 1,
            path: Some(path.clone()),
        })
    }

    fn system_search(&self, desc: &crate::LibDescriptor, name: &str) -> Result<Opened, String> {
        match self.system_dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            Some(p) => self.open(desc, &p),
            None => Err(format!("{name}: cannot open shared object file (simulated)")),
        }
    }

    fn open(&self, _desc: &crate::LibDescriptor, path: &Path) -> Result<Opened, String> {
        if self.broken.iter().any(|b| b == path) {
            return Err("invalid ELF header (simulated)".into());
        }
        self.opened.borrow_mut().push(path.to_path_buf());
        Ok(Opened {
            handle: 2,
            path: Some(path.to_path_buf()),
        })
    }
}

/// The cascade for `name` with dependencies loaded the same way.
pub(super) fn load(name: &str, env: &Environment, loader: &FakeLoader) -> Result<LoadedDl, NotFoundError> {
    let desc = find(name).ok_or_else(|| crate::unknown_library(name))?;
    let dep = |d: &str| load(d, env, loader).map(|_| ()).map_err(Error::from);
    search::load(desc, env, loader, &dep)
}

/// The rules of a list of attempts, each once in a row.
pub(super) fn rules(attempts: &[crate::Attempt]) -> Vec<FoundVia> {
    let mut out: Vec<FoundVia> = Vec::new();
    for a in attempts {
        if out.last() != Some(&a.rule) {
            out.push(a.rule);
        }
    }
    out
}

#[test]
fn unknown_names_are_unknown_and_list_the_known_ones() {
    let err = crate::unguarded::load_nvidia_dynamic_lib("cudaa").unwrap_err();
    let nf = err.as_not_found().unwrap();
    assert!(nf.is_unknown() && nf.attempts.is_empty(), "{err}");
    assert!(nf.hint.contains("nvrtc"), "{err}");
    assert!(crate::windows_supported_arches("cudaa").unwrap_err().is_unknown());
    let loader = FakeLoader::default();
    let env = bare();
    for e in [
        crate::locate::locate_header_in("nope", &env, &loader).unwrap_err(),
        crate::locate::find_binary_in("ls", &env, &loader).unwrap_err(),
        crate::locate::find_bitcode_in("host", &env, &loader).unwrap_err(),
        crate::locate::find_static_in("cudart", &env, &loader).unwrap_err(),
    ] {
        assert!(e.is_unknown(), "{e}");
        assert!(e.hint.contains("known names"), "{e}");
    }
}

#[test]
fn results_are_cached_for_the_process_until_cache_clear() {
    let a = crate::unguarded::load_nvidia_dynamic_lib("nvcudla");
    let b = crate::unguarded::load_nvidia_dynamic_lib("nvcudla");
    match (a, b) {
        (Ok(a), Ok(b)) => assert!(std::ptr::eq(a, b)),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("the second answer differs from the first"),
    }
}

#[test]
fn the_crate_version_is_cargos() {
    assert_eq!(crate::VERSION, env!("CARGO_PKG_VERSION"));
    assert!(crate::VERSION.split('.').count() == 3);
}

#[test]
fn the_log_level_takes_names_and_numbers_and_refuses_the_rest() {
    assert_eq!(crate::parse_log_level(None), Ok(None));
    assert_eq!(crate::parse_log_level(Some(" ")), Ok(None));
    assert_eq!(crate::parse_log_level(Some("debug")), Ok(Some(10)));
    assert_eq!(crate::parse_log_level(Some("INFO")), Ok(Some(20)));
    assert_eq!(crate::parse_log_level(Some("15")), Ok(Some(15)));
    let err = crate::parse_log_level(Some("chatty")).unwrap_err();
    assert!(
        err.contains("CUDA_PATHFINDER_LOG_LEVEL") && err.contains("stays disabled"),
        "{err}"
    );
}
