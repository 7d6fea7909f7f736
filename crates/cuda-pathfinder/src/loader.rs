//! The operating system's loader: open a library, ask whether it is loaded, and where it lives.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;

/// An open library handle (never closed).
pub(crate) struct Handle(pub(crate) *mut c_void);

fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by the loader, valid until the
    // next dl* call on this thread; it is copied out at once.
    unsafe {
        let msg = libc::dlerror();
        if msg.is_null() {
            "unknown loader error".to_string()
        } else {
            CStr::from_ptr(msg).to_string_lossy().into_owned()
        }
    }
}

fn open_with(name: &str, flags: c_int) -> Result<Handle, String> {
    let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
    // SAFETY: c_name is a valid C string; dlopen has no other preconditions. Initialisers of the
    // library run, as they would for any dynamically linked CUDA library.
    let handle = unsafe { libc::dlopen(c_name.as_ptr(), flags) };
    if handle.is_null() {
        Err(last_error())
    } else {
        Ok(Handle(handle))
    }
}

/// `dlopen(name, RTLD_NOW | RTLD_GLOBAL)`: a path, or a soname for the system search.
pub(crate) fn open(name: &str) -> Result<Handle, String> {
    open_with(name, libc::RTLD_NOW | libc::RTLD_GLOBAL)
}

/// The handle of `soname` if the process already has it loaded.
pub(crate) fn already_loaded(soname: &str) -> Option<Handle> {
    open_with(soname, libc::RTLD_NOW | libc::RTLD_GLOBAL | libc::RTLD_NOLOAD).ok()
}

/// The file a handle was opened from.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn path_of(handle: &Handle) -> Option<PathBuf> {
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
    // SAFETY: handle came from dlopen and is never closed; RTLD_DI_LINKMAP stores a pointer to the
    // loader's link_map, whose first two fields are l_addr and l_name on glibc.
    unsafe {
        if dlinfo(handle.0, RTLD_DI_LINKMAP, &mut map as *mut _ as *mut c_void) != 0 || map.is_null() {
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
pub(crate) fn path_of(_handle: &Handle) -> Option<PathBuf> {
    None
}
