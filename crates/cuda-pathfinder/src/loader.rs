//! The operating system's loader: open a library, ask whether it is loaded, and where it lives.
//!
//! The search talks to it through [`Loader`], so the whole cascade also runs against a simulated
//! loader in the tests (both platforms, on Linux).

use crate::catalog::LibDescriptor;
use std::path::{Path, PathBuf};

/// A library the loader opened (the handle is never closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) handle: usize,
    pub(crate) path: Option<PathBuf>,
}

/// What the search needs from the operating system's loader.
pub(crate) trait Loader {
    /// The library, when one of `names` is already loaded in the process.
    fn already_loaded(&self, desc: &LibDescriptor, names: &[&str]) -> Option<Opened>;
    /// The loader's own search for `name` (`dlopen(soname)`, `LoadLibraryExW(dll, NULL, 0)`).
    fn system_search(&self, desc: &LibDescriptor, name: &str) -> Result<Opened, String>;
    /// Opens the file at `path`.
    fn open(&self, desc: &LibDescriptor, path: &Path) -> Result<Opened, String>;
}

/// The loader of this operating system.
pub(crate) struct NativeLoader;

#[cfg(unix)]
mod unix {
    use super::{LibDescriptor, Loader, NativeLoader, Opened};
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::path::{Path, PathBuf};

    fn last_error() -> String {
        // SAFETY: dlerror returns NULL or a NUL-terminated string owned by the loader, valid until
        // the next dl* call on this thread; it is copied out at once.
        unsafe {
            let msg = libc::dlerror();
            if msg.is_null() {
                "unknown loader error".to_string()
            } else {
                CStr::from_ptr(msg).to_string_lossy().into_owned()
            }
        }
    }

    fn open_with(name: &str, flags: c_int) -> Result<*mut c_void, String> {
        let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
        // SAFETY: c_name is a valid C string; dlopen has no other preconditions. Initialisers of
        // the library run, as they would for any dynamically linked CUDA library.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), flags) };
        if handle.is_null() {
            Err(last_error())
        } else {
            Ok(handle)
        }
    }

    fn flags(desc: &LibDescriptor) -> c_int {
        let mut flags = libc::RTLD_NOW | libc::RTLD_GLOBAL;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if desc.requires_rtld_deepbind {
            flags |= libc::RTLD_DEEPBIND;
        }
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        let _ = desc;
        flags
    }

    fn opened(handle: *mut c_void) -> Opened {
        Opened {
            handle: handle as usize,
            path: path_of(handle),
        }
    }

    impl Loader for NativeLoader {
        fn already_loaded(&self, _desc: &LibDescriptor, names: &[&str]) -> Option<Opened> {
            names.iter().find_map(|name| {
                open_with(name, libc::RTLD_NOW | libc::RTLD_GLOBAL | libc::RTLD_NOLOAD)
                    .ok()
                    .map(opened)
            })
        }

        fn system_search(&self, desc: &LibDescriptor, name: &str) -> Result<Opened, String> {
            open_with(name, flags(desc)).map(opened)
        }

        fn open(&self, desc: &LibDescriptor, path: &Path) -> Result<Opened, String> {
            let shown = path.display().to_string();
            if desc.name == "nvrtc" {
                preload_nvrtc_builtins(path);
            }
            open_with(&shown, flags(desc)).map(opened)
        }
    }

    /// The `nvidia-cuda-nvrtc 13.0.48` wheel ships `libnvrtc.so.13` without a RUNPATH, so its
    /// builtins library is opened first from the same folder (failure is harmless).
    fn preload_nvrtc_builtins(path: &Path) {
        let Some(dir) = path.parent() else { return };
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("libnvrtc-builtins.so.") {
                let _ = open_with(&entry.path().display().to_string(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            }
        }
    }

    /// The file a handle was opened from.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn path_of(handle: *mut c_void) -> Option<PathBuf> {
        #[repr(C)]
        struct LinkMap {
            l_addr: usize,
            l_name: *const c_char,
        }
        extern "C" {
            fn dlinfo(handle: *mut c_void, request: c_int, info: *mut c_void) -> c_int;
        }
        const RTLD_DI_LINKMAP: c_int = 2;
        let mut map: *const LinkMap = std::ptr::null();
        // SAFETY: handle came from dlopen and is never closed; RTLD_DI_LINKMAP stores a pointer to
        // the loader's link_map, whose first two fields are l_addr and l_name on glibc.
        unsafe {
            if dlinfo(handle, RTLD_DI_LINKMAP, &mut map as *mut _ as *mut c_void) != 0 || map.is_null() {
                return None;
            }
            let name = (*map).l_name;
            if name.is_null() {
                return None;
            }
            let path = PathBuf::from(CStr::from_ptr(name).to_string_lossy().into_owned());
            Some(path.canonicalize().unwrap_or(path))
        }
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn path_of(_handle: *mut c_void) -> Option<PathBuf> {
        None
    }
}

/// Windows: written from the documented API, never built here (this project builds on Linux only).
#[cfg(windows)]
mod windows {
    use super::{LibDescriptor, Loader, NativeLoader, Opened};
    use std::ffi::c_void;
    use std::os::windows::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    const LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR: u32 = 0x0000_0100;
    const LOAD_LIBRARY_SEARCH_DEFAULT_DIRS: u32 = 0x0000_1000;

    #[link(name = "kernel32")]
    extern "system" {
        fn GetModuleHandleW(name: *const u16) -> *mut c_void;
        fn LoadLibraryExW(name: *const u16, file: *mut c_void, flags: u32) -> *mut c_void;
        fn GetModuleFileNameW(module: *mut c_void, buffer: *mut u16, size: u32) -> u32;
        fn AddDllDirectory(dir: *const u16) -> *mut c_void;
        fn GetLastError() -> u32;
    }

    fn wide(s: &std::ffi::OsStr) -> Vec<u16> {
        s.encode_wide().chain(std::iter::once(0)).collect()
    }

    fn path_of(handle: *mut c_void) -> Option<PathBuf> {
        for size in [260usize, 32768] {
            let mut buffer = vec![0u16; size];
            // SAFETY: buffer holds `size` u16s; handle is a module handle that is never freed.
            let n = unsafe { GetModuleFileNameW(handle, buffer.as_mut_ptr(), size as u32) } as usize;
            if n == 0 {
                return None;
            }
            if n < size {
                return Some(PathBuf::from(std::ffi::OsString::from_wide(&buffer[..n])));
            }
        }
        None
    }

    /// `AddDllDirectory` and `PATH`, so DLLs the library opens later are found beside it.
    fn add_dll_directory(path: &Path) {
        let Some(dir) = path.parent() else { return };
        let w = wide(dir.as_os_str());
        // SAFETY: w is NUL-terminated; the cookie is kept for the life of the process.
        let _ = unsafe { AddDllDirectory(w.as_ptr()) };
        let mut value = std::env::var_os("PATH").unwrap_or_default();
        if !value.is_empty() {
            value.push(";");
        }
        value.push(dir.as_os_str());
        std::env::set_var("PATH", value);
    }

    fn opened(handle: *mut c_void) -> Opened {
        Opened {
            handle: handle as usize,
            path: path_of(handle),
        }
    }

    impl Loader for NativeLoader {
        fn already_loaded(&self, desc: &LibDescriptor, names: &[&str]) -> Option<Opened> {
            names.iter().find_map(|name| {
                let w = wide(std::ffi::OsStr::new(name));
                // SAFETY: w is NUL-terminated.
                let handle = unsafe { GetModuleHandleW(w.as_ptr()) };
                if handle.is_null() {
                    return None;
                }
                let o = opened(handle);
                if desc.requires_add_dll_directory {
                    if let Some(p) = &o.path {
                        add_dll_directory(p);
                    }
                }
                Some(o)
            })
        }

        fn system_search(&self, _desc: &LibDescriptor, name: &str) -> Result<Opened, String> {
            let w = wide(std::ffi::OsStr::new(name));
            // SAFETY: w is NUL-terminated; the reserved file handle is NULL.
            let handle = unsafe { LoadLibraryExW(w.as_ptr(), std::ptr::null_mut(), 0) };
            if handle.is_null() {
                // SAFETY: no preconditions.
                Err(format!("LoadLibraryExW failed (Windows error {})", unsafe {
                    GetLastError()
                }))
            } else {
                Ok(opened(handle))
            }
        }

        fn open(&self, desc: &LibDescriptor, path: &Path) -> Result<Opened, String> {
            if desc.requires_add_dll_directory {
                add_dll_directory(path);
            }
            let w = wide(path.as_os_str());
            let flags = LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR;
            // SAFETY: w is NUL-terminated; the reserved file handle is NULL.
            let handle = unsafe { LoadLibraryExW(w.as_ptr(), std::ptr::null_mut(), flags) };
            if handle.is_null() {
                // SAFETY: no preconditions.
                Err(format!("LoadLibraryExW failed (Windows error {})", unsafe {
                    GetLastError()
                }))
            } else {
                Ok(opened(handle))
            }
        }
    }
}

#[cfg(not(any(unix, windows)))]
impl Loader for NativeLoader {
    fn already_loaded(&self, _desc: &LibDescriptor, _names: &[&str]) -> Option<Opened> {
        None
    }

    fn system_search(&self, _desc: &LibDescriptor, _name: &str) -> Result<Opened, String> {
        Err("no dynamic loader on this platform".into())
    }

    fn open(&self, _desc: &LibDescriptor, _path: &Path) -> Result<Opened, String> {
        Err("no dynamic loader on this platform".into())
    }
}
