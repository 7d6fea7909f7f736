//! `ObjectCode` (compiled or linked code, in memory or in a file) and the `Kernel`s in it.

use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The kinds of object code, as `cuda.core` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CodeType {
    /// A device ELF image for one architecture.
    Cubin,
    /// PTX assembly text.
    Ptx,
    /// LTO intermediate representation (link with nvJitLink).
    Ltoir,
    /// A fat binary of several cubins and PTX.
    Fatbin,
    /// A relocatable host object holding device code.
    Object,
    /// An archive of objects.
    Library,
}

impl CodeType {
    /// The `cuda.core` name: `"cubin"`, `"ptx"`, `"ltoir"`, `"fatbin"`, `"object"`, `"library"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeType::Cubin => "cubin",
            CodeType::Ptx => "ptx",
            CodeType::Ltoir => "ltoir",
            CodeType::Fatbin => "fatbin",
            CodeType::Object => "object",
            CodeType::Library => "library",
        }
    }
}

impl fmt::Display for CodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CodeType {
    type Err = CudaError;
    fn from_str(s: &str) -> Result<CodeType> {
        Ok(match s {
            "cubin" => CodeType::Cubin,
            "ptx" => CodeType::Ptx,
            "ltoir" => CodeType::Ltoir,
            "fatbin" => CodeType::Fatbin,
            "object" => CodeType::Object,
            "library" => CodeType::Library,
            _ => {
                return Err(CudaError::InvalidArgument(format!(
                    "unknown code type {s:?} (expected cubin, ptx, ltoir, fatbin, object or library)"
                )))
            }
        })
    }
}

/// Where the code is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// In memory.
    Bytes(Vec<u8>),
    /// In a file, read by the driver or linker when needed.
    File(PathBuf),
}

struct Inner {
    code: Code,
    code_type: CodeType,
    name: String,
    symbol_mapping: HashMap<String, String>,
    /// The `CUlibrary` made on the first `get_kernel`.
    library: Mutex<Option<LibraryHandle>>,
}

/// A loaded `CUlibrary`, unloaded on drop.
struct LibraryHandle(driver::CUlibrary);

// SAFETY: a CUlibrary is a process-wide driver handle, usable from any thread.
unsafe impl Send for LibraryHandle {}

impl Drop for LibraryHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuLibraryLoad* and is unloaded exactly once, here; kernels
        // keep the ObjectCode (and so this handle) alive while they exist.
        if let Err(e) = unsafe { driver::cuLibraryUnload(self.0) }.check("cuLibraryUnload") {
            record_drop_error(e);
        }
    }
}

/// Compiled or linked code: a cubin, PTX, LTO-IR, fatbin, object or library, in memory or in a
/// file. Cheap to clone (shared). Kernels are loaded lazily, once, through the driver's library
/// API (`cuLibraryLoadData`), which needs no context.
///
/// ```no_run
/// # fn main() -> cuda_core::Result<()> {
/// let code = cuda_core::ObjectCode::from_cubin(std::fs::read("saxpy.cubin").unwrap(), "saxpy")?;
/// let kernel = code.get_kernel("saxpy")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ObjectCode {
    inner: Arc<Inner>,
}

impl ObjectCode {
    fn new(code: Code, code_type: CodeType, name: &str, symbol_mapping: HashMap<String, String>) -> Result<ObjectCode> {
        let code = match code {
            Code::Bytes(bytes) if bytes.is_empty() => {
                return Err(CudaError::InvalidArgument(format!(
                    "ObjectCode {name:?}: the {code_type} is empty"
                )))
            }
            Code::Bytes(mut bytes) if code_type == CodeType::Ptx => {
                // The driver reads PTX as a C string.
                if bytes.last() != Some(&0) {
                    bytes.push(0);
                }
                Code::Bytes(bytes)
            }
            Code::File(path) if !path.is_file() => {
                return Err(CudaError::InvalidArgument(format!(
                    "ObjectCode: {} is not a file",
                    path.display()
                )))
            }
            other => other,
        };
        Ok(ObjectCode {
            inner: Arc::new(Inner {
                code,
                code_type,
                name: name.to_string(),
                symbol_mapping,
                library: Mutex::new(None),
            }),
        })
    }

    /// Object code of `code_type` from bytes, with the name-expression mapping of a compile.
    pub fn from_bytes(
        code: impl Into<Vec<u8>>,
        code_type: CodeType,
        name: &str,
        symbol_mapping: HashMap<String, String>,
    ) -> Result<ObjectCode> {
        ObjectCode::new(Code::Bytes(code.into()), code_type, name, symbol_mapping)
    }

    /// Object code of `code_type` in the file `path`.
    pub fn from_file(path: impl AsRef<Path>, code_type: CodeType, name: &str) -> Result<ObjectCode> {
        ObjectCode::new(Code::File(path.as_ref().to_path_buf()), code_type, name, HashMap::new())
    }

    /// A cubin.
    pub fn from_cubin(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Cubin, name, HashMap::new())
    }

    /// PTX text.
    pub fn from_ptx(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Ptx, name, HashMap::new())
    }

    /// LTO-IR.
    pub fn from_ltoir(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Ltoir, name, HashMap::new())
    }

    /// A fat binary.
    pub fn from_fatbin(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Fatbin, name, HashMap::new())
    }

    /// A relocatable object.
    pub fn from_object(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Object, name, HashMap::new())
    }

    /// An archive of objects.
    pub fn from_library(code: impl Into<Vec<u8>>, name: &str) -> Result<ObjectCode> {
        ObjectCode::from_bytes(code, CodeType::Library, name, HashMap::new())
    }

    /// The code, in memory or as a path.
    pub fn code(&self) -> &Code {
        &self.inner.code
    }

    /// The bytes of the code (read from the file for file-based code). PTX keeps its final NUL.
    pub fn bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>> {
        match &self.inner.code {
            Code::Bytes(b) => Ok(std::borrow::Cow::Borrowed(b)),
            Code::File(p) => std::fs::read(p)
                .map(std::borrow::Cow::Owned)
                .map_err(|e| CudaError::InvalidArgument(format!("cannot read {}: {e}", p.display()))),
        }
    }

    pub fn code_type(&self) -> CodeType {
        self.inner.code_type
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Name expressions given to the compiler and the lowered (mangled) names they became.
    pub fn symbol_mapping(&self) -> &HashMap<String, String> {
        &self.inner.symbol_mapping
    }

    /// The kernel `name` (a name expression given to the compiler, or the kernel's symbol). The
    /// code is loaded into the driver on the first call and kept loaded while this `ObjectCode`
    /// or any of its kernels lives.
    pub fn get_kernel(&self, name: &str) -> Result<Kernel> {
        if !matches!(self.inner.code_type, CodeType::Cubin | CodeType::Ptx | CodeType::Fatbin) {
            return Err(CudaError::InvalidArgument(format!(
                "ObjectCode {:?}: kernels cannot be loaded from {} code; link it to a cubin first",
                self.inner.name, self.inner.code_type
            )));
        }
        let symbol = self.inner.symbol_mapping.get(name).map(String::as_str).unwrap_or(name);
        let c_symbol = CString::new(symbol)
            .map_err(|_| CudaError::InvalidArgument(format!("kernel name {name:?} contains a NUL")))?;
        let library = self.library()?;
        let mut kernel: driver::CUkernel = std::ptr::null_mut();
        // SAFETY: library is a live CUlibrary; the name is NUL-terminated; kernel is an out-pointer.
        unsafe { driver::cuLibraryGetKernel(&mut kernel, library, c_symbol.as_ptr()) }.check("cuLibraryGetKernel")?;
        Ok(Kernel {
            handle: kernel,
            name: symbol.to_string(),
            code: self.clone(),
        })
    }

    /// A module-scope variable (`__device__` or `__constant__`): its device address and size in
    /// bytes, in the current context. Copy to and from it with the driver's copy functions (or
    /// `Buffer` views); its lifetime is the code's.
    pub fn get_global(&self, name: &str) -> Result<(driver::CUdeviceptr, usize)> {
        let symbol = self.inner.symbol_mapping.get(name).map(String::as_str).unwrap_or(name);
        let c_symbol = CString::new(symbol)
            .map_err(|_| CudaError::InvalidArgument(format!("global name {name:?} contains a NUL")))?;
        let library = self.library()?;
        let (mut ptr, mut size) = (0, 0);
        // SAFETY: the library is live; the name is NUL-terminated; out-pointers to locals.
        unsafe { driver::cuLibraryGetGlobal(&mut ptr, &mut size, library, c_symbol.as_ptr()) }
            .check("cuLibraryGetGlobal")?;
        Ok((ptr, size))
    }

    fn library(&self) -> Result<driver::CUlibrary> {
        let mut slot = self.inner.library.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = &*slot {
            return Ok(handle.0);
        }
        let mut library: driver::CUlibrary = std::ptr::null_mut();
        // SAFETY: cuInit takes flags only. The image pointer is live for the call (PTX is
        // NUL-terminated, see `new`); no JIT or library options are passed.
        unsafe {
            driver::cuInit(0).check("cuInit")?;
            match &self.inner.code {
                Code::Bytes(bytes) => driver::cuLibraryLoadData(
                    &mut library,
                    bytes.as_ptr().cast(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
                .check("cuLibraryLoadData")?,
                Code::File(path) => {
                    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
                        .map_err(|_| CudaError::InvalidArgument(format!("{} contains a NUL", path.display())))?;
                    driver::cuLibraryLoadFromFile(
                        &mut library,
                        c_path.as_ptr(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0,
                    )
                    .check("cuLibraryLoadFromFile")?
                }
            }
        }
        *slot = Some(LibraryHandle(library));
        Ok(library)
    }
}

impl fmt::Debug for ObjectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = match &self.inner.code {
            Code::Bytes(b) => format!("{} bytes", b.len()),
            Code::File(p) => p.display().to_string(),
        };
        f.debug_struct("ObjectCode")
            .field("name", &self.inner.name)
            .field("code_type", &self.inner.code_type)
            .field("code", &size)
            .finish()
    }
}

/// A kernel of an [`ObjectCode`] (a `CUkernel`: usable in any context of the process). It keeps
/// its code loaded.
#[derive(Clone)]
pub struct Kernel {
    handle: driver::CUkernel,
    name: String,
    code: ObjectCode,
}

// SAFETY: a CUkernel is a context-independent, process-wide handle; the driver synchronises its
// use from several threads. The ObjectCode it holds is Send + Sync.
unsafe impl Send for Kernel {}
// SAFETY: as above; &Kernel exposes only reads of the handle.
unsafe impl Sync for Kernel {}

/// The offset and size of one kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    pub offset: usize,
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

/// Reads a NUL-terminated log of `size` bytes written by `fill`.
pub(crate) fn read_log(size: usize, fill: impl FnOnce(*mut std::ffi::c_char) -> Result<()>) -> Result<String> {
    if size == 0 {
        return Ok(String::new());
    }
    let mut buf = vec![0u8; size];
    fill(buf.as_mut_ptr().cast())?;
    let text = CStr::from_bytes_until_nul(&buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string());
    Ok(text)
}
