//! [`Kernel`]: one kernel of an [`ObjectCode`], and its parameters.

use super::ObjectCode;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;

/// A kernel of an [`ObjectCode`] (a `CUkernel`: usable in any context of the process). It keeps
/// its code loaded.
#[derive(Clone)]
pub struct Kernel {
    pub(super) handle: driver::CUkernel,
    pub(super) name: String,
    pub(super) code: ObjectCode,
}

// SAFETY: a CUkernel is a context-independent, process-wide handle; the driver synchronises its
// use from several threads. The ObjectCode it holds is Send + Sync.
unsafe impl Send for Kernel {}
// SAFETY: as above; &Kernel exposes only reads of the handle.
unsafe impl Sync for Kernel {}

/// The offset and size of one kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// The parameter's offset in the parameter buffer, in bytes.
    pub offset: usize,
    /// The parameter's size in bytes.
    pub size: usize,
}

impl Kernel {
    /// A kernel from a `CUkernel` made elsewhere (`cuda.core`'s `Kernel.from_handle`), such as
    /// by raw `cuLibraryGetKernel` calls or another library.
    ///
    /// With `code`, the kernel must belong to that code's library, which the kernel then keeps
    /// loaded: when the code is loaded already and the driver can say which library the kernel
    /// belongs to (`cuKernelGetLibrary`, CUDA 12.5+), a kernel of another library is refused.
    /// Without it, the kernel gets a placeholder [`ObjectCode`] with no code, holding the
    /// library the driver names (if it does) without keeping it loaded: that library's owner
    /// keeps it loaded, as the safety contract says.
    ///
    /// # Safety
    ///
    /// `handle` is a live `CUkernel`, and its library stays loaded for as long as the returned
    /// kernel, its clones and anything they are handed to (typed kernels, launches still on the
    /// GPU, graphs) are in use. Passing the `ObjectCode` the kernel was taken from meets this
    /// (the kernel keeps it alive); otherwise the caller keeps the library loaded, also for
    /// everything made through the kernel's placeholder [`object_code`](Self::object_code) (its
    /// other kernels, its `handle`, a `LibraryModule` from `get_module`), which borrows the
    /// library without keeping it loaded.
    pub unsafe fn from_handle(handle: driver::CUkernel, code: Option<&ObjectCode>) -> Result<Kernel> {
        if handle.is_null() {
            return Err(CudaError::InvalidArgument(
                "Kernel::from_handle: the CUkernel is null".into(),
            ));
        }
        let mut library: driver::CUlibrary = std::ptr::null_mut();
        // SAFETY: by the caller's contract the kernel is live; out-pointer to a local. A driver
        // older than 12.5 (or a kernel not from a library) answers with an error, which only
        // means the library is not known.
        let named = unsafe { driver::cuKernelGetLibrary(&mut library, handle) }
            .result()
            .ok()
            .filter(|_| !library.is_null())
            .map(|_| library);
        let code = match code {
            Some(code) => {
                if let (Some(named), Some(loaded)) = (named, code.loaded_library()) {
                    if named != loaded {
                        return Err(CudaError::InvalidArgument(format!(
                            "Kernel::from_handle: the kernel belongs to library {named:p}, not to ObjectCode {:?} (library {loaded:p})",
                            code.name()
                        )));
                    }
                }
                code.clone()
            }
            None => ObjectCode::foreign(named),
        };
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the kernel is live; the driver returns a NUL-terminated string it owns (or an
        // error on drivers without cuKernelGetName), copied out at once.
        let name = if unsafe { driver::cuKernelGetName(&mut name, handle) }.result().is_ok() && !name.is_null() {
            // SAFETY: a non-null name from cuKernelGetName is a NUL-terminated C string.
            unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        Ok(Kernel { handle, name, code })
    }

    /// The `CUkernel`.
    pub fn handle(&self) -> driver::CUkernel {
        self.handle
    }

    /// The kernel's symbol (the lowered name for a name expression).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object code it comes from.
    pub fn object_code(&self) -> &ObjectCode {
        &self.code
    }

    /// The offset and size of every parameter (`cuKernelGetParamInfo`, CUDA 12.4+ drivers).
    pub fn arguments_info(&self) -> Result<Vec<ParamInfo>> {
        let mut count = 0usize;
        // SAFETY: the handle is live; count is a local. cuKernelGetParamCount needs CUDA 13.2.
        if unsafe { driver::cuKernelGetParamCount(self.handle, &mut count) }
            .result()
            .is_ok()
        {
            return (0..count)
                .map(|i| {
                    let (mut offset, mut size) = (0usize, 0usize);
                    // SAFETY: i is below the parameter count; out-pointers are locals.
                    unsafe { driver::cuKernelGetParamInfo(self.handle, i, &mut offset, &mut size) }
                        .check("cuKernelGetParamInfo")?;
                    Ok(ParamInfo { offset, size })
                })
                .collect();
        }
        // Older drivers: ask for parameters until the driver says there are no more.
        let mut out = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: the handle is live (its library is kept loaded by self.code); out-pointers are locals.
            let status = unsafe { driver::cuKernelGetParamInfo(self.handle, out.len(), &mut offset, &mut size) };
            if status == driver::CUresult::CUDA_ERROR_INVALID_VALUE {
                return Ok(out); // past the last parameter
            }
            status.check("cuKernelGetParamInfo")?;
            out.push(ParamInfo { offset, size });
        }
    }

    /// The number of parameters.
    pub fn num_arguments(&self) -> Result<usize> {
        self.arguments_info().map(|a| a.len())
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("code", &self.code.name())
            .finish()
    }
}

impl PartialEq for Kernel {
    fn eq(&self, other: &Kernel) -> bool {
        self.handle == other.handle
    }
}

impl Eq for Kernel {}

/// By handle, as `cuda.core` hashes kernels (consistent with `==`).
impl std::hash::Hash for Kernel {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.handle, state);
    }
}
