//! [`Kernel`]: one kernel of an [`ObjectCode`], and its parameters.

use super::ObjectCode;
use crate::error::Check;
use crate::Result;
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
