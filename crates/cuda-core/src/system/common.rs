//! NVML's initialisation, its errors sorted into kinds after `cuda.core.system`'s exception
//! hierarchy, and the small helpers every NVML query of this folder goes through.

use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::{nvml, LoadErrorKind};
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Initialises NVML for the process, once it succeeds. NVML counts initialisations and this crate
/// never shuts it down, so device handles stay valid for the life of the process (see
/// [`super::Device`] for what else can end them). A failure (the driver not loaded yet, say) is
/// not kept: the next call tries again.
pub(super) fn init() -> Result<()> {
    static DONE: AtomicBool = AtomicBool::new(false);
    static TRYING: Mutex<()> = Mutex::new(());
    if DONE.load(Ordering::Acquire) {
        return Ok(());
    }
    // One thread at a time tries, so that NVML is initialised once however many race here.
    let _guard = TRYING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if DONE.load(Ordering::Acquire) {
        return Ok(());
    }
    // SAFETY: nvmlInit_v2 takes no arguments and may be called from any thread.
    unsafe { nvml::nvmlInit() }.result().map_err(|source| CudaError::Nvml {
        call: "nvmlInit",
        source,
    })?;
    DONE.store(true, Ordering::Release);
    Ok(())
}

/// Initialises NVML (`cuda.core.system.initialize()`). Every NVML query initialises it itself;
/// calling this first only moves the cost, and an error such as a missing `libnvidia-ml.so.1`,
/// to a place of the caller's choosing. The driver-only queries of [`crate::system`] do not need
/// it.
pub fn initialize() -> Result<()> {
    init()
}

/// What kind of NVML error a [`CudaError::Nvml`] is: the exception classes of
/// `cuda.core.system` (`NotSupportedError` is [`NvmlErrorKind::NotSupported`], ...).
///
/// ```no_run
/// use cuda_core::system::{Device, NvmlErrorKind};
/// match Device::from_index(0)?.get_fan(0).speed() {
///     Ok(speed) => println!("fan at {speed}%"),
///     Err(e) if e.nvml_kind() == Some(NvmlErrorKind::NotSupported) => println!("no fan"),
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NvmlErrorKind {
    /// NVML was not initialised (`NVML_ERROR_UNINITIALIZED`; `UninitializedError`).
    Uninitialized,
    /// NVML rejected an argument, such as an index out of range (`NVML_ERROR_INVALID_ARGUMENT`).
    InvalidArgument,
    /// The device does not support the query or setting (`NotSupportedError`).
    NotSupported,
    /// The caller lacks the permission (setting clocks, persistence mode, ... needs root).
    NoPermission,
    /// NVML was already initialised (`NVML_ERROR_ALREADY_INITIALIZED`; no longer returned by
    /// current drivers).
    AlreadyInitialized,
    /// The object asked for does not exist, e.g. no device with that UUID or PCI bus id
    /// (`NVML_ERROR_NOT_FOUND`).
    NotFound,
    /// A buffer was too small for NVML's answer (`NVML_ERROR_INSUFFICIENT_SIZE`; this crate sizes
    /// its buffers, so seeing it means a newer driver returned more than expected).
    InsufficientSize,
    /// A device's external power cables are not properly attached
    /// (`NVML_ERROR_INSUFFICIENT_POWER`).
    InsufficientPower,
    /// The NVIDIA kernel driver is not loaded (`NVML_ERROR_DRIVER_NOT_LOADED`).
    DriverNotLoaded,
    /// A wait ended without an event.
    Timeout,
    /// NVIDIA kernel detected an interrupt issue with a device (`NVML_ERROR_IRQ_ISSUE`).
    IrqIssue,
    /// `libnvidia-ml.so.1` could not be loaded (by this crate's loader or by NVML itself).
    LibraryNotFound,
    /// The installed NVML does not have the function (an older driver).
    FunctionNotFound,
    /// The device's infoROM is corrupted (`NVML_ERROR_CORRUPTED_INFOROM`).
    CorruptedInforom,
    /// The GPU fell off the bus or is otherwise inaccessible (`NVML_ERROR_GPU_IS_LOST`).
    GpuIsLost,
    /// The GPU needs a reset before it can be used again (`NVML_ERROR_RESET_REQUIRED`).
    ResetRequired,
    /// The operating system blocked the request (`NVML_ERROR_OPERATING_SYSTEM`).
    OperatingSystem,
    /// NVML and the kernel driver are of different versions (`NVML_ERROR_LIB_RM_VERSION_MISMATCH`:
    /// reboot, or reload the driver, after an update).
    LibRmVersionMismatch,
    /// The operation cannot be done while the GPU is in use (`NVML_ERROR_IN_USE`).
    InUse,
    /// NVML ran out of memory (`NVML_ERROR_MEMORY`).
    Memory,
    /// There is no data to report, e.g. no samples yet (`NVML_ERROR_NO_DATA`).
    NoData,
    /// ECC is turned on, which the vGPU operation does not support
    /// (`NVML_ERROR_VGPU_ECC_NOT_SUPPORTED`).
    VgpuEccNotSupported,
    /// Not enough resources (e.g. for a MIG instance) to do the operation
    /// (`NVML_ERROR_INSUFFICIENT_RESOURCES`).
    InsufficientResources,
    /// The requested clock frequency is not supported (`NVML_ERROR_FREQ_NOT_SUPPORTED`).
    FreqNotSupported,
    /// A versioned structure's version is not one this NVML knows
    /// (`NVML_ERROR_ARGUMENT_VERSION_MISMATCH`).
    ArgumentVersionMismatch,
    /// The function is deprecated and no longer does anything (`NVML_ERROR_DEPRECATED`).
    Deprecated,
    /// The system is not ready for the request (`NVML_ERROR_NOT_READY`).
    NotReady,
    /// No GPU matched the request (`NVML_ERROR_GPU_NOT_FOUND`).
    GpuNotFound,
    /// The object is in a state that does not allow the operation (`NVML_ERROR_INVALID_STATE`).
    InvalidState,
    /// The requested reset type is not supported (`NVML_ERROR_RESET_TYPE_NOT_SUPPORTED`).
    ResetTypeNotSupported,
    /// NVML reported an unspecified internal error (`NVML_ERROR_UNKNOWN`).
    Unknown,
    /// A status the vendored headers do not list (a newer NVML).
    Other(u32),
}

impl NvmlErrorKind {
    /// The kind of an NVML error.
    pub fn of(error: &cuda_sys::NvmlError) -> NvmlErrorKind {
        if let Some(load) = error.load_error() {
            return match load.kind() {
                LoadErrorKind::Library { .. } => NvmlErrorKind::LibraryNotFound,
                _ => NvmlErrorKind::FunctionNotFound,
            };
        }
        Self::from_raw(error.code().0)
    }

    fn from_raw(code: u32) -> NvmlErrorKind {
        use NvmlErrorKind as K;
        const KINDS: [NvmlErrorKind; 30] = [
            K::Uninitialized,
            K::InvalidArgument,
            K::NotSupported,
            K::NoPermission,
            K::AlreadyInitialized,
            K::NotFound,
            K::InsufficientSize,
            K::InsufficientPower,
            K::DriverNotLoaded,
            K::Timeout,
            K::IrqIssue,
            K::LibraryNotFound,
            K::FunctionNotFound,
            K::CorruptedInforom,
            K::GpuIsLost,
            K::ResetRequired,
            K::OperatingSystem,
            K::LibRmVersionMismatch,
            K::InUse,
            K::Memory,
            K::NoData,
            K::VgpuEccNotSupported,
            K::InsufficientResources,
            K::FreqNotSupported,
            K::ArgumentVersionMismatch,
            K::Deprecated,
            K::NotReady,
            K::GpuNotFound,
            K::InvalidState,
            K::ResetTypeNotSupported,
        ];
        match code {
            1..=30 => KINDS[code as usize - 1],
            999 => K::Unknown,
            other => K::Other(other),
        }
    }

    /// The name of `cuda.core.system`'s exception class for this kind (`"NotSupportedError"`).
    pub fn class_name(self) -> &'static str {
        use NvmlErrorKind as K;
        match self {
            K::Uninitialized => "UninitializedError",
            K::InvalidArgument => "InvalidArgumentError",
            K::NotSupported => "NotSupportedError",
            K::NoPermission => "NoPermissionError",
            K::AlreadyInitialized => "AlreadyInitializedError",
            K::NotFound => "NotFoundError",
            K::InsufficientSize => "InsufficientSizeError",
            K::InsufficientPower => "InsufficientPowerError",
            K::DriverNotLoaded => "DriverNotLoadedError",
            K::Timeout => "TimeoutError",
            K::IrqIssue => "IrqIssueError",
            K::LibraryNotFound => "LibraryNotFoundError",
            K::FunctionNotFound => "FunctionNotFoundError",
            K::CorruptedInforom => "CorruptedInforomError",
            K::GpuIsLost => "GpuIsLostError",
            K::ResetRequired => "ResetRequiredError",
            K::OperatingSystem => "OperatingSystemError",
            K::LibRmVersionMismatch => "LibRmVersionMismatchError",
            K::InUse => "InUseError",
            K::Memory => "MemoryError",
            K::NoData => "NoDataError",
            K::VgpuEccNotSupported => "VgpuEccNotSupportedError",
            K::InsufficientResources => "InsufficientResourcesError",
            K::FreqNotSupported => "FreqNotSupportedError",
            K::ArgumentVersionMismatch => "ArgumentVersionMismatchError",
            K::Deprecated => "DeprecatedError",
            K::NotReady => "NotReadyError",
            K::GpuNotFound => "GpuNotFoundError",
            K::InvalidState => "InvalidStateError",
            K::ResetTypeNotSupported => "ResetTypeNotSupportedError",
            K::Unknown | K::Other(_) => "UnknownError",
        }
    }
}

impl std::fmt::Display for NvmlErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.class_name())
    }
}

impl CudaError {
    /// The kind of an NVML error (`None` for errors that did not come from NVML): how
    /// `except cuda.core.system.NotSupportedError` reads here.
    pub fn nvml_kind(&self) -> Option<NvmlErrorKind> {
        match self {
            CudaError::Nvml { source, .. } => Some(NvmlErrorKind::of(source)),
            _ => None,
        }
    }

    /// Whether NVML said the device does not support what was asked (`NotSupportedError`).
    pub fn is_not_supported(&self) -> bool {
        self.nvml_kind() == Some(NvmlErrorKind::NotSupported)
    }
}

/// The NVML error of status `code` for `call` (for statuses NVML reports inside a structure,
/// such as a field value's).
pub(super) fn error(call: &'static str, code: nvml::nvmlReturn_t) -> CudaError {
    CudaError::Nvml {
        call,
        source: cuda_sys::NvmlError(code),
    }
}

/// NVML's `NVML_STRUCT_VERSION(T, version)`: the size of the structure with the version in the
/// top byte.
pub(super) const fn struct_version<T>(version: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (version << 24)
}

/// The string in a buffer NVML wrote: up to the first NUL, or the whole buffer when there is none.
pub(super) fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Calls `f` with a zeroed buffer of `len` chars (and its length) and returns what NVML wrote.
pub(super) fn read_string(
    call: &'static str,
    len: usize,
    f: impl FnOnce(*mut c_char, u32) -> nvml::nvmlReturn_t,
) -> Result<String> {
    let n = u32::try_from(len)
        .map_err(|_| CudaError::InvalidArgument(format!("{call}: a buffer of {len} chars is too long for NVML")))?;
    let mut buf = vec![0 as c_char; len];
    f(buf.as_mut_ptr(), n).check(call)?;
    Ok(c_string(&buf))
}

/// The indices of the set bits of a bitmask NVML wrote as an array of `unsigned long`s (bits
/// whose index does not fit a `u32` cannot be named and are left out).
pub(super) fn bits_of(words: &[std::ffi::c_ulong]) -> Vec<u32> {
    let width = std::ffi::c_ulong::BITS;
    let mut out = Vec::new();
    for (w, &word) in words.iter().enumerate() {
        let Some(base) = u32::try_from(w).ok().and_then(|w| w.checked_mul(width)) else {
            break;
        };
        for bit in 0..width {
            if word & (1 << bit) != 0 {
                match base.checked_add(bit) {
                    Some(index) => out.push(index),
                    None => return out,
                }
            }
        }
    }
    out
}

/// How many times [`read_array`] asks again when the list grew between its calls.
const ARRAY_ATTEMPTS: usize = 4;

/// Reads an array NVML fills in two steps: `f(&mut count, null)` asks for the count (NVML answers
/// `NVML_SUCCESS` or `NVML_ERROR_INSUFFICIENT_SIZE` with the count written), then
/// `f(&mut count, array)` fills an array of `count` entries and writes how many it filled.
///
/// The array holds what NVML asked for plus `slack` (for entries added in between), but never
/// more than `max` entries: a count past that is asked for with `max` entries, and NVML's
/// `NVML_ERROR_INSUFFICIENT_SIZE` is the error. A list that keeps growing is asked for
/// [`ARRAY_ATTEMPTS`] times, then that error too. An array the allocator cannot provide is an
/// `NVML_ERROR_MEMORY` error, not an abort. `f` must pass NVML an array of exactly `count`
/// entries of `T` (the pointer it gets) and never write more than that.
pub(super) fn read_array<T: Clone>(
    call: &'static str,
    zero: T,
    slack: u32,
    max: u32,
    mut f: impl FnMut(&mut u32, *mut T) -> nvml::nvmlReturn_t,
) -> Result<Vec<T>> {
    use nvml::nvmlReturn_enum as R;
    let mut count: u32 = 0;
    let status = f(&mut count, std::ptr::null_mut());
    if status != R::NVML_ERROR_INSUFFICIENT_SIZE {
        status.check(call)?;
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut status = R::NVML_ERROR_INSUFFICIENT_SIZE;
    for _ in 0..ARRAY_ATTEMPTS {
        let capacity = count.saturating_add(slack).min(max);
        let mut array = Vec::new();
        array
            .try_reserve_exact(capacity as usize)
            .map_err(|_| error(call, R::NVML_ERROR_MEMORY))?;
        array.resize(capacity as usize, zero.clone());
        let mut written = capacity;
        status = f(&mut written, array.as_mut_ptr());
        if status == R::NVML_ERROR_INSUFFICIENT_SIZE && capacity < max {
            // Ask again with room for what NVML says it needs now (at least one more).
            count = written.max(capacity.saturating_add(1));
            continue;
        }
        status.check(call)?;
        array.truncate(written.min(capacity) as usize);
        return Ok(array);
    }
    Err(error(call, status))
}

/// Declares a Rust enum for an NVML C enum: named variants, plus `Other` for values these
/// bindings do not name (a newer driver), with `from_raw`, `raw`, `name` and `Display`.
///
/// Equality and hashing go by NVML's value, so `Other(v)` of a named value equals its variant
/// (`from_raw` never makes one). As an argument to NVML ([`input`](#method.input)), a value the
/// headers do not name, and the headers' own "unknown" placeholders, are refused.
macro_rules! nvml_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $raw:ty {
            $($(#[$vmeta:meta])* $variant:ident = $value:expr => $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        #[non_exhaustive]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A value the vendored headers do not name (a newer driver). Equal to the named
            /// variant when it holds a named value.
            Other($raw),
        }

        impl $name {
            /// The variant of NVML's value.
            pub fn from_raw(value: $raw) -> Self {
                $(if value == $value { return Self::$variant; })*
                Self::Other(value)
            }

            /// NVML's value.
            pub fn raw(self) -> $raw {
                match self {
                    $(Self::$variant => $value,)*
                    Self::Other(value) => value,
                }
            }

            /// The name `cuda.core` gives the value (`"unknown"` for [`Self::Other`]).
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(_) => "unknown",
                }
            }

            /// NVML's value for an argument: `InvalidArgument` for a value the headers do not
            /// name (an `Other` of an unnamed value) and for their "unknown" placeholders, which
            /// never reach NVML.
            #[allow(dead_code)]
            pub(super) fn input(self) -> $crate::Result<$raw> {
                let named = Self::from_raw(self.raw());
                if matches!(named, Self::Other(_)) || named.name().eq_ignore_ascii_case("unknown") {
                    return Err($crate::CudaError::InvalidArgument(format!(
                        "{} {:?} is not a value NVML's headers define",
                        stringify!($name),
                        self.raw()
                    )));
                }
                Ok(named.raw())
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.raw() == other.raw()
            }
        }

        impl Eq for $name {}

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.raw().hash(state);
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(super) use nvml_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_header_values() {
        use nvml::nvmlReturn_enum as R;
        let cases = [
            (R::NVML_ERROR_UNINITIALIZED, NvmlErrorKind::Uninitialized),
            (R::NVML_ERROR_NOT_SUPPORTED, NvmlErrorKind::NotSupported),
            (R::NVML_ERROR_NO_PERMISSION, NvmlErrorKind::NoPermission),
            (R::NVML_ERROR_NOT_FOUND, NvmlErrorKind::NotFound),
            (R::NVML_ERROR_TIMEOUT, NvmlErrorKind::Timeout),
            (R::NVML_ERROR_GPU_IS_LOST, NvmlErrorKind::GpuIsLost),
            (
                R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
                NvmlErrorKind::ArgumentVersionMismatch,
            ),
            (
                R::NVML_ERROR_RESET_TYPE_NOT_SUPPORTED,
                NvmlErrorKind::ResetTypeNotSupported,
            ),
            (R::NVML_ERROR_UNKNOWN, NvmlErrorKind::Unknown),
        ];
        for (code, kind) in cases {
            assert_eq!(NvmlErrorKind::of(&cuda_sys::NvmlError(code)), kind);
            let e = error("nvmlTest", code);
            assert_eq!(e.nvml_kind(), Some(kind));
        }
        assert_eq!(NvmlErrorKind::from_raw(77), NvmlErrorKind::Other(77));
        assert_eq!(NvmlErrorKind::NotSupported.class_name(), "NotSupportedError");
        assert!(error("nvmlTest", R::NVML_ERROR_NOT_SUPPORTED).is_not_supported());
        assert!(CudaError::InvalidArgument(String::new()).nvml_kind().is_none());
    }

    #[test]
    fn strings_and_bitmasks() {
        let buf: Vec<c_char> = b"GPU-12\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_string(&buf), "GPU-12");
        let unterminated: Vec<c_char> = b"abc".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_string(&unterminated), "abc");
        let width = std::ffi::c_ulong::BITS;
        assert_eq!(bits_of(&[0b1010, 1]), vec![1, 3, width]);
        assert!(bits_of(&[]).is_empty());
        assert_eq!(
            struct_version::<nvml::nvmlMemory_v2_t>(2),
            40 | (2 << 24),
            "nvmlMemory_v2 is 40 bytes, version 2"
        );
    }

    /// A fake NVML list of `len()` entries that grows by `grow` on each read.
    fn fake_list(
        entries: &std::cell::Cell<u32>,
        grow: u32,
    ) -> impl FnMut(&mut u32, *mut u64) -> nvml::nvmlReturn_t + '_ {
        use nvml::nvmlReturn_enum as R;
        move |count, array| {
            let n = entries.get();
            if array.is_null() || *count < n {
                *count = n;
                entries.set(n.saturating_add(grow));
                return if n == 0 {
                    R::NVML_SUCCESS
                } else {
                    R::NVML_ERROR_INSUFFICIENT_SIZE
                };
            }
            for i in 0..n {
                // SAFETY: `read_array` passes an array of `*count` >= n entries.
                unsafe { array.add(i as usize).write(u64::from(i) + 1) };
            }
            *count = n;
            R::NVML_SUCCESS
        }
    }

    #[test]
    fn arrays_are_read_with_bounded_retries_and_sizes() {
        use std::cell::Cell;
        let call = "nvmlTest";
        // Empty, steady, and growing a little between the calls (the slack absorbs it).
        assert!(read_array(call, 0, 8, 100, fake_list(&Cell::new(0), 0))
            .unwrap()
            .is_empty());
        assert_eq!(
            read_array(call, 0, 8, 100, fake_list(&Cell::new(3), 0)).unwrap(),
            [1, 2, 3]
        );
        assert_eq!(
            read_array(call, 0, 8, 100, fake_list(&Cell::new(3), 2)).unwrap(),
            [1, 2, 3, 4, 5]
        );
        // Growing past the slack every time: asked a bounded number of times, then an error.
        let e = read_array(call, 0, 0, 1000, fake_list(&Cell::new(1), 5)).unwrap_err();
        assert_eq!(e.nvml_kind(), Some(NvmlErrorKind::InsufficientSize), "{e}");
        // A count past the cap is an error, not an allocation of that size.
        let e = read_array(call, 0, 8, 100, fake_list(&Cell::new(u32::MAX), 0)).unwrap_err();
        assert_eq!(e.nvml_kind(), Some(NvmlErrorKind::InsufficientSize), "{e}");
        // Any other status is the error.
        let e = read_array(call, 0u64, 8, 100, |_, _| {
            nvml::nvmlReturn_enum::NVML_ERROR_NO_PERMISSION
        })
        .unwrap_err();
        assert_eq!(e.nvml_kind(), Some(NvmlErrorKind::NoPermission));
    }

    nvml_enum! {
        enum Sample: u32 {
            One = 1 => "one",
            Unknown = 99 => "unknown",
        }
    }

    #[test]
    fn enum_values_compare_by_value_and_unnamed_ones_never_reach_nvml() {
        use std::collections::HashSet;
        assert_eq!(Sample::Other(1), Sample::One);
        assert_eq!(Sample::from_raw(1), Sample::One);
        assert!(matches!(Sample::from_raw(1), Sample::One));
        assert_ne!(Sample::Other(2), Sample::One);
        let set: HashSet<Sample> = [Sample::One, Sample::Other(1)].into_iter().collect();
        assert_eq!(set.len(), 1);
        assert_eq!(Sample::One.input().unwrap(), 1);
        assert_eq!(Sample::Other(1).input().unwrap(), 1);
        for bad in [Sample::Other(2), Sample::Unknown, Sample::Other(99)] {
            let e = bad.input().unwrap_err();
            assert!(e.to_string().contains("not a value NVML's headers define"), "{e}");
            assert!(e.nvml_kind().is_none());
        }
    }
}
