//! Run-time loading: libraries are opened on first use at the path `cuda-pathfinder` reports, and
//! each function is resolved on its first call, then called through a cached pointer.
//!
//! The hot path of every binding is [`load`]: one atomic load and a compare, then the indirect
//! call. Everything else is cold.
//!
//! Driver functions are resolved with `cuGetProcAddress_v2`, by base name plus a CUDA version, as
//! `docs/architecture.md` ("Resolving driver functions") explains. The other libraries are
//! resolved with `dlsym`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// The libraries `cuda-sys` binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LibraryId {
    /// `libcuda`, the driver API (module [`crate::driver`]).
    Driver = 1,
    /// `libcudart`, the runtime API (module [`crate::runtime`]).
    Runtime = 2,
    /// `libnvrtc` (module [`crate::nvrtc`]).
    Nvrtc = 3,
    /// `libnvJitLink` (module [`crate::nvjitlink`]).
    NvJitLink = 4,
    /// `libnvvm` (module [`crate::nvvm`]).
    Nvvm = 5,
    /// `libcufile` (module [`crate::cufile`]).
    CuFile = 6,
    /// `libnvidia-ml` (module [`crate::nvml`]).
    Nvml = 7,
    /// `libnccl`, NVIDIA's collective communication library (module [`crate::nccl`]).
    Nccl = 8,
}

impl LibraryId {
    /// Every library, in declaration order.
    pub const ALL: [LibraryId; 8] = [
        LibraryId::Driver,
        LibraryId::Runtime,
        LibraryId::Nvrtc,
        LibraryId::NvJitLink,
        LibraryId::Nvvm,
        LibraryId::CuFile,
        LibraryId::Nvml,
        LibraryId::Nccl,
    ];

    /// The name `cuda-pathfinder` knows the library by.
    pub fn pathfinder_name(self) -> &'static str {
        match self {
            LibraryId::Driver => "cuda",
            LibraryId::Runtime => "cudart",
            LibraryId::Nvrtc => "nvrtc",
            LibraryId::NvJitLink => "nvJitLink",
            LibraryId::Nvvm => "nvvm",
            LibraryId::CuFile => "cufile",
            LibraryId::Nvml => "nvml",
            LibraryId::Nccl => "nccl",
        }
    }

    /// The loader state of this library.
    pub fn library(self) -> &'static Library {
        match self {
            LibraryId::Driver => &crate::driver::LIBRARY,
            LibraryId::Runtime => &crate::runtime::LIBRARY,
            LibraryId::Nvrtc => &crate::nvrtc::LIBRARY,
            LibraryId::NvJitLink => &crate::nvjitlink::LIBRARY,
            LibraryId::Nvvm => &crate::nvvm::LIBRARY,
            LibraryId::CuFile => &crate::cufile::LIBRARY,
            LibraryId::Nvml => &crate::nvml::LIBRARY,
            LibraryId::Nccl => &crate::nccl::LIBRARY,
        }
    }

    fn from_u8(v: u8) -> Option<LibraryId> {
        LibraryId::ALL.into_iter().find(|l| *l as u8 == v)
    }
}

impl fmt::Display for LibraryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LibraryId::Driver => "the CUDA driver (libcuda)",
            LibraryId::Runtime => "the CUDA runtime (libcudart)",
            LibraryId::Nvrtc => "NVRTC (libnvrtc)",
            LibraryId::NvJitLink => "nvJitLink (libnvJitLink)",
            LibraryId::Nvvm => "libNVVM (libnvvm)",
            LibraryId::CuFile => "cuFile (libcufile)",
            LibraryId::Nvml => "NVML (libnvidia-ml)",
            LibraryId::Nccl => "NCCL (libnccl)",
        })
    }
}

/// What the generator knows about one function.
#[derive(Debug)]
pub struct FnInfo {
    /// The name users call (the binding's name).
    pub name: &'static CStr,
    /// What the library is asked for: the exported symbol (`dlsym`), or for the driver the base
    /// name given to `cuGetProcAddress_v2` (`cuMemAlloc` for `cuMemAlloc_v2`).
    pub symbol: &'static CStr,
    /// The runtime's per-thread-default-stream symbol, if the function has one.
    pub ptds_symbol: Option<&'static CStr>,
    /// Driver: the CUDA version of the ABI the binding has (the newest `PFN_` typedef).
    pub version: u32,
    /// Driver: the oldest CUDA version whose variant has the same signature; older drivers cannot
    /// serve this binding.
    pub min_version: u32,
    /// Driver: the version of the per-thread-default-stream variant, 0 if there is none.
    pub ptds_version: u32,
    /// nvJitLink: the library may export the function only as `__<name>_<major>_<minor>`.
    pub versioned: bool,
}

// Slot values below this bound are states, not function pointers.
const UNRESOLVED: usize = 0;
const NOT_FOUND: usize = 1;
const DRIVER_TOO_OLD: usize = 2;
const MAX_MARKER: usize = 3;

/// The loader state of one library: its functions, their resolved pointers and the open library.
pub struct Library {
    id: LibraryId,
    functions: &'static [FnInfo],
    slots: &'static [AtomicPtr<c_void>],
    opened: OnceLock<Result<Opened, String>>,
}

struct Opened {
    handle: usize,
    path: Option<PathBuf>,
    found_via: cuda_pathfinder::FoundVia,
    /// Driver only.
    get_proc_address: Option<GetProcAddress>,
    /// Driver only: `cuDriverGetVersion`.
    driver_version: u32,
    per_thread: bool,
}

type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;
const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: c_int = 2;

/// The environment variable CUDA Python reads to pick the per-thread default stream variants.
pub const PER_THREAD_DEFAULT_STREAM_VAR: &str = "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM";

/// Whether `value` of [`PER_THREAD_DEFAULT_STREAM_VAR`] turns per-thread default streams on: an
/// integer other than 0.
pub fn per_thread_from_env_value(value: Option<&str>) -> bool {
    value.and_then(|v| v.trim().parse::<i64>().ok()).is_some_and(|v| v != 0)
}

/// Whether this process binds the per-thread-default-stream variants (read once).
pub fn per_thread_default_stream() -> bool {
    static PTDS: OnceLock<bool> = OnceLock::new();
    *PTDS.get_or_init(|| per_thread_from_env_value(std::env::var(PER_THREAD_DEFAULT_STREAM_VAR).ok().as_deref()))
}

/// Resolves slot `index`: the hot path of every binding.
#[inline(always)]
pub fn load(slot: &AtomicPtr<c_void>, library: &'static Library, index: usize) -> Result<*mut c_void, LoadError> {
    let f = slot.load(Ordering::Acquire);
    if f as usize > MAX_MARKER {
        Ok(f)
    } else {
        library.resolve(index)
    }
}

impl Library {
    #[doc(hidden)]
    pub const fn new(id: LibraryId, functions: &'static [FnInfo], slots: &'static [AtomicPtr<c_void>]) -> Library {
        Library {
            id,
            functions,
            slots,
            opened: OnceLock::new(),
        }
    }

    /// Which library this is.
    pub fn id(&self) -> LibraryId {
        self.id
    }

    /// Every function the bindings declare for this library.
    pub fn functions(&self) -> &'static [FnInfo] {
        self.functions
    }

    /// Opens the library now (it is otherwise opened by the first call). Errors list every place
    /// searched.
    pub fn open(&'static self) -> Result<(), LoadError> {
        self.opened().map(|_| ())
    }

    /// The file the library was loaded from, once it is open.
    pub fn path(&self) -> Option<&Path> {
        self.opened.get()?.as_ref().ok()?.path.as_deref()
    }

    /// How `cuda-pathfinder` found the library, once it is open.
    pub fn found_via(&self) -> Option<cuda_pathfinder::FoundVia> {
        Some(self.opened.get()?.as_ref().ok()?.found_via)
    }

    /// Driver only: the CUDA version the installed driver supports (`cuDriverGetVersion`), once the
    /// driver is open.
    pub fn driver_version(&self) -> Option<u32> {
        let opened = self.opened.get()?.as_ref().ok()?;
        (self.id == LibraryId::Driver).then_some(opened.driver_version)
    }

    /// The resolved address of the function `name` (as the bindings call it), resolving it now if
    /// needed: what `cuda.bindings` offers as `_inspect_function_pointer`.
    pub fn function_pointer(&'static self, name: &str) -> Result<*mut c_void, LoadError> {
        let index = self.index_of(name).ok_or(LoadError {
            library: self.id,
            index: UNKNOWN_FUNCTION,
        })?;
        load(&self.slots[index], self, index)
    }

    /// Driver only: asks the driver for `name` in the given stream mode, bypassing the cache, with
    /// the same versions the bindings use. For checking per-thread-default-stream resolution.
    pub fn driver_entry_point(&'static self, name: &str, per_thread: bool) -> Result<*mut c_void, LoadError> {
        let index = self.index_of(name).ok_or(LoadError {
            library: self.id,
            index: UNKNOWN_FUNCTION,
        })?;
        let opened = self.opened()?;
        let get = opened.get_proc_address.ok_or(LoadError {
            library: self.id,
            index: UNKNOWN_FUNCTION,
        })?;
        let f = query_driver(get, &self.functions[index], opened.driver_version, per_thread);
        if f as usize > MAX_MARKER {
            Ok(f)
        } else {
            Err(LoadError {
                library: self.id,
                index: index as u16,
            })
        }
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.functions
            .binary_search_by(|f| f.name.to_bytes().cmp(name.as_bytes()))
            .ok()
    }

    fn opened(&'static self) -> Result<&'static Opened, LoadError> {
        self.opened
            .get_or_init(|| open_library(self.id))
            .as_ref()
            .map_err(|_| LoadError {
                library: self.id,
                index: LIBRARY,
            })
    }

    #[cold]
    #[inline(never)]
    fn resolve(&'static self, index: usize) -> Result<*mut c_void, LoadError> {
        let error = LoadError {
            library: self.id,
            index: index as u16,
        };
        let state = self.slots[index].load(Ordering::Acquire);
        if state as usize > MAX_MARKER {
            return Ok(state); // another thread resolved it meanwhile
        }
        if state as usize != UNRESOLVED {
            return Err(error);
        }
        let opened = self.opened()?;
        let info = &self.functions[index];
        let f = match opened.get_proc_address {
            Some(get) => query_driver(get, info, opened.driver_version, opened.per_thread),
            None => lookup_symbol(opened.handle as *mut c_void, info, opened.per_thread),
        };
        // Racing threads store the same value.
        self.slots[index].store(f, Ordering::Release);
        if f as usize > MAX_MARKER {
            Ok(f)
        } else {
            Err(error)
        }
    }

    fn slot_state(&self, index: usize) -> usize {
        self.slots[index].load(Ordering::Acquire) as usize
    }
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("id", &self.id)
            .field("functions", &self.functions.len())
            .field("path", &self.path())
            .finish()
    }
}

fn marker(state: usize) -> *mut c_void {
    state as *mut c_void
}

/// The driver's pointer for `info` in the given mode, or a marker.
fn query_driver(get: GetProcAddress, info: &FnInfo, driver_version: u32, per_thread: bool) -> *mut c_void {
    if driver_version < info.min_version {
        return marker(DRIVER_TOO_OLD);
    }
    let wanted = if per_thread {
        info.version.max(info.ptds_version)
    } else {
        info.version
    };
    // Never ask for more than the driver knows: an older driver then hands out the newest variant
    // it has, which (being at least min_version) has the signature bound here.
    let version = wanted.min(driver_version);
    let flags = if per_thread {
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    } else {
        CU_GET_PROC_ADDRESS_DEFAULT
    };
    let mut f: *mut c_void = std::ptr::null_mut();
    let mut status: c_int = 0;
    // SAFETY: get is cuGetProcAddress_v2 from the open driver; the name is a NUL-terminated
    // static string and both out-pointers point to live locals.
    let result = unsafe { get(info.symbol.as_ptr(), &mut f, version as c_int, flags, &mut status) };
    if result == 0 && !f.is_null() {
        f
    } else if status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT {
        marker(DRIVER_TOO_OLD)
    } else {
        marker(NOT_FOUND)
    }
}

fn dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: handle is a live dlopen handle (never closed) and name a NUL-terminated string.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

fn lookup_symbol(handle: *mut c_void, info: &FnInfo, per_thread: bool) -> *mut c_void {
    if per_thread {
        if let Some(ptds) = info.ptds_symbol {
            let f = dlsym(handle, ptds);
            if !f.is_null() {
                return f;
            }
        }
    }
    let f = dlsym(handle, info.symbol);
    if !f.is_null() {
        return f;
    }
    if info.versioned {
        // nvJitLink before 12.3 exports only `__nvJitLinkCreate_12_0` and the like.
        let name = info.symbol.to_string_lossy();
        for major in [13u32, 12] {
            for minor in (0..=9u32).rev() {
                let Ok(tagged) = CString::new(format!("__{name}_{major}_{minor}")) else {
                    continue;
                };
                let f = dlsym(handle, &tagged);
                if !f.is_null() {
                    return f;
                }
            }
        }
    }
    marker(NOT_FOUND)
}

fn open_library(id: LibraryId) -> Result<Opened, String> {
    let lib = cuda_pathfinder::load_nvidia_dynamic_lib(id.pathfinder_name()).map_err(|e| e.to_string())?;
    let handle = lib.handle();
    let mut opened = Opened {
        handle: handle as usize,
        path: lib.abs_path.clone(),
        found_via: lib.found_via,
        get_proc_address: None,
        driver_version: 0,
        per_thread: per_thread_default_stream(),
    };
    if id == LibraryId::Driver {
        let shown = opened
            .path
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "libcuda.so.1".into());
        let get = dlsym(handle, c"cuGetProcAddress_v2");
        if get.is_null() {
            return Err(format!(
                "the CUDA driver at {shown} has no cuGetProcAddress_v2, so it is older than CUDA 12.0; \
                 these bindings need a CUDA 12 or newer driver: update the NVIDIA driver"
            ));
        }
        let version = dlsym(handle, c"cuDriverGetVersion");
        if version.is_null() {
            return Err(format!("the CUDA driver at {shown} does not export cuDriverGetVersion"));
        }
        // SAFETY: both are non-null (checked above) addresses dlsym gave for cuGetProcAddress_v2 and
        // cuDriverGetVersion in the driver, and cuda.h declares those functions with exactly the C
        // signatures of GetProcAddress and DriverGetVersion (CUresult and the flags are C ints).
        let (get, version): (GetProcAddress, DriverGetVersion) = unsafe {
            (
                std::mem::transmute::<*mut c_void, GetProcAddress>(get),
                std::mem::transmute::<*mut c_void, DriverGetVersion>(version),
            )
        };
        let mut v: c_int = 0;
        // SAFETY: v is a live out-pointer; cuDriverGetVersion needs no cuInit.
        let result = unsafe { version(&mut v) };
        if result != 0 {
            return Err(format!(
                "cuDriverGetVersion failed with error {result} on the driver at {shown}"
            ));
        }
        opened.get_proc_address = Some(get);
        opened.driver_version = v.max(0) as u32;
    }
    Ok(opened)
}

const LIBRARY: u16 = u16::MAX;
const UNKNOWN_FUNCTION: u16 = u16::MAX - 1;

/// A library or one of its functions could not be loaded.
///
/// It is `Copy` and small, so raw bindings can return it cheaply; `Display` looks up the details
/// (every place searched, the function's name, the driver version it needs).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoadError {
    library: LibraryId,
    index: u16,
}

/// What went wrong, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadErrorKind {
    /// The library could not be opened; the message lists every place searched.
    Library { message: String },
    /// The library does not export the function.
    FunctionNotFound { function: &'static str },
    /// The driver is older than the oldest version that serves the function's ABI.
    DriverTooOld {
        function: &'static str,
        needs: u32,
        has: u32,
    },
    /// A name the bindings do not have was asked for.
    UnknownFunction,
}

impl LoadError {
    /// The library concerned.
    pub fn library(&self) -> LibraryId {
        self.library
    }

    /// The function concerned, if the error is about one function.
    pub fn function(&self) -> Option<&'static str> {
        let info = self.library.library().functions.get(self.index as usize)?;
        info.name.to_str().ok()
    }

    /// The details.
    pub fn kind(&self) -> LoadErrorKind {
        let lib = self.library.library();
        if self.index == LIBRARY {
            let message = match lib.opened.get() {
                Some(Err(message)) => message.clone(),
                _ => format!("{} could not be opened", self.library),
            };
            return LoadErrorKind::Library { message };
        }
        let Some(function) = self.function() else {
            return LoadErrorKind::UnknownFunction;
        };
        let info = &lib.functions[self.index as usize];
        match (lib.slot_state(self.index as usize), lib.driver_version()) {
            (DRIVER_TOO_OLD, Some(has)) => LoadErrorKind::DriverTooOld {
                function,
                needs: info.min_version,
                has,
            },
            _ => LoadErrorKind::FunctionNotFound { function },
        }
    }

    /// Encodes the error as a status value outside every range the headers define (see
    /// [`LoadError::from_status`]).
    pub fn to_status(self) -> u32 {
        STATUS_TAG | (self.library as u32) << 16 | self.index as u32
    }

    /// Decodes a status value made by [`LoadError::to_status`].
    pub fn from_status(value: u32) -> Option<LoadError> {
        if value & STATUS_TAG_MASK != STATUS_TAG {
            return None;
        }
        let library = LibraryId::from_u8(((value >> 16) & 0xFF) as u8)?;
        let index = (value & 0xFFFF) as u16;
        if index != LIBRARY && index as usize >= library.library().functions.len() {
            return None;
        }
        Some(LoadError { library, index })
    }
}

/// Status values that carry a [`LoadError`]: `0x7C` in the top byte, the library, the function.
const STATUS_TAG: u32 = 0x7C00_0000;
const STATUS_TAG_MASK: u32 = 0xFF00_0000;

fn version_text(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            LoadErrorKind::Library { message } => write!(f, "{} could not be loaded: {message}", self.library),
            LoadErrorKind::FunctionNotFound { function } => {
                let lib = self.library.library();
                let path = lib.path().map(|p| format!(" at {}", p.display())).unwrap_or_default();
                write!(
                    f,
                    "{function} is not available: {}{path} does not provide it",
                    self.library
                )?;
                if let Some(v) = lib.driver_version() {
                    write!(
                        f,
                        " (the driver supports CUDA {}; the function may not exist on this platform or configuration)",
                        version_text(v)
                    )?;
                } else {
                    write!(f, "; it may need a newer version of the library")?;
                }
                Ok(())
            }
            LoadErrorKind::DriverTooOld { function, needs, has } => write!(
                f,
                "{function} needs a CUDA driver for CUDA {} or newer (the ABI these bindings use appeared in {}), \
                 but the installed driver supports CUDA {}: update the NVIDIA driver",
                version_text(needs),
                version_text(needs),
                version_text(has)
            ),
            LoadErrorKind::UnknownFunction => {
                write!(f, "{} has no function by that name in these bindings", self.library)
            }
        }
    }
}

impl fmt::Debug for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadError")
            .field("library", &self.library)
            .field("function", &self.function())
            .field("message", &self.to_string())
            .finish()
    }
}

impl std::error::Error for LoadError {}

/// Status types that can carry a [`LoadError`] (`CUresult`, `nvrtcResult`, ...): the raw
/// bindings return them unchanged, so a function that could not be loaded returns an encoded
/// error instead of panicking.
pub trait StatusCode: Sized {
    /// The status value that stands for `error`.
    fn from_load_error(error: LoadError) -> Self;
    /// The load error this status stands for, if it is one.
    fn load_error(&self) -> Option<LoadError>;
}
