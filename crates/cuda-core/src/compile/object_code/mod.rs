//! `ObjectCode` (compiled or linked code, in memory or in a file) and the `Kernel`s in it.

mod attributes;
mod image;
mod kernel;
#[cfg(test)]
mod tests;

pub use kernel::{Kernel, ParamInfo};

use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::collections::HashMap;
use std::ffi::CString;
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

    /// Whether the driver's loader takes this kind (cubin, PTX, fatbin); the others are linked.
    pub(crate) fn is_loadable(self) -> bool {
        matches!(self, CodeType::Cubin | CodeType::Ptx | CodeType::Fatbin)
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
    /// In a file, read when needed (for the driver's loader: read into memory and checked
    /// first, see [`ObjectCode`]).
    File(PathBuf),
}

struct Inner {
    code: Code,
    code_type: CodeType,
    name: String,
    symbol_mapping: HashMap<String, String>,
    /// The `CUlibrary` made on the first `get_kernel`.
    library: Mutex<Option<LibraryHandle>>,
    /// Made by [`Kernel::from_handle`] for a kernel of a library this crate did not load: no
    /// code, and a library (if the driver named it) that is not this crate's to unload.
    foreign: bool,
}

/// A `CUlibrary`: loaded by this crate and unloaded on drop (`owned`), or a foreign library
/// borrowed by a placeholder [`ObjectCode`] of [`Kernel::from_handle`].
struct LibraryHandle(driver::CUlibrary, bool);

// SAFETY: a CUlibrary is a process-wide driver handle, usable from any thread.
unsafe impl Send for LibraryHandle {}

impl Drop for LibraryHandle {
    fn drop(&mut self) {
        if !self.1 {
            // Borrowed (Kernel::from_handle): its owner unloads it.
            return;
        }
        // Unloaded on a thread of its own, never here: drops never wait for the GPU, and the
        // driver's unload may wait for work in flight (on an H100 a test that broke `launch`'s
        // contract, dropping a spinning kernel's code right after launching it, found the
        // kernel done when the drop returned). Also on a driver thread, where CUDA must not be
        // called. That thread may then wait in the unload, holding no lock, while the release
        // thread goes on freeing memory (see `reaper::drop_slowly`).
        crate::reaper::drop_slowly(Box::new(Unload(self.0)));
    }
}

/// A library handed to the unload thread, unloaded when dropped there.
struct Unload(driver::CUlibrary);

// SAFETY: as LibraryHandle's.
unsafe impl Send for Unload {}

impl Drop for Unload {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuLibraryLoad* and is unloaded exactly once, here (its
        // LibraryHandle was dropped, and kernels keep the ObjectCode, and so that handle, alive
        // while they exist).
        if let Err(e) = unsafe { driver::cuLibraryUnload(self.0) }.check("cuLibraryUnload") {
            record_drop_error(e);
        }
    }
}

/// Compiled or linked code: a cubin, PTX, LTO-IR, fatbin, object or library, in memory or in a
/// file. Cheap to clone (shared). Kernels are loaded lazily, once, through the driver's library
/// API (`cuLibraryLoadData`), which needs no context.
///
/// `cuLibraryLoadData` is given no length: the driver tells the format from the bytes, whatever
/// the label, and reads as far as an ELF image's headers, a fatbin's sizes or PTX's NUL byte
/// say. So cubins, fatbins and PTX are checked when the `ObjectCode` is made (and a file when it
/// is read for loading): an ELF image must be a little-endian ELF64 whose header, program and
/// section header tables, segments and sections (but `SHT_NOBITS` ones), string tables, symbols
/// and relocations lie inside the bytes; a fatbin's header and every entry must lie inside it,
/// with uncompressed ELF entries checked as ELF and PTX entries NUL-terminated; anything else
/// is text, accepted as PTX only (a NUL is appended when missing). Fatbin wrappers
/// (`__fatBinC_Wrapper_t`), which hold a pointer, are refused. A failed check is
/// [`CudaError::InvalidArgument`] saying what is wrong. LTO-IR, objects and libraries are not
/// checked: they are never given to the driver's loader (linkers get their sizes).
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
    /// What keeps the code's library (and so its kernels) loaded, for a graph to hold.
    pub(crate) fn keeper(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.inner.clone()
    }

    fn new(code: Code, code_type: CodeType, name: &str, symbol_mapping: HashMap<String, String>) -> Result<ObjectCode> {
        let code = match code {
            Code::Bytes(bytes) => Code::Bytes(prepare_image(bytes, code_type, name)?),
            Code::File(path) if !path.is_file() => {
                return Err(CudaError::InvalidArgument(format!(
                    "ObjectCode: {} is not a file",
                    path.display()
                )))
            }
            // A file is read, checked and loaded from memory when its kernels are first asked
            // for (see `library`), so that what is checked is what the driver reads.
            other => other,
        };
        Ok(ObjectCode {
            inner: Arc::new(Inner {
                code,
                code_type,
                name: name.to_string(),
                symbol_mapping,
                library: Mutex::new(None),
                foreign: false,
            }),
        })
    }

    /// The placeholder code of a kernel made by [`Kernel::from_handle`] without its
    /// `ObjectCode`: no code, and `library` (what `cuKernelGetLibrary` said, if anything)
    /// borrowed, never unloaded.
    pub(crate) fn foreign(library: Option<driver::CUlibrary>) -> ObjectCode {
        ObjectCode {
            inner: Arc::new(Inner {
                code: Code::Bytes(Vec::new()),
                code_type: CodeType::Cubin,
                name: String::new(),
                symbol_mapping: HashMap::new(),
                library: Mutex::new(library.map(|l| LibraryHandle(l, false))),
                foreign: true,
            }),
        }
    }

    /// The library of this code if it is loaded (without loading it).
    pub(crate) fn loaded_library(&self) -> Option<driver::CUlibrary> {
        let slot = self.inner.library.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().map(|l| l.0)
    }

    /// The `CUlibrary` (`cuda.core`'s `ObjectCode.handle`): the code is loaded now if it was not
    /// yet (as by [`get_kernel`](Self::get_kernel)). It stays valid while this `ObjectCode`, a
    /// clone of it, or any of its kernels, modules or graphs that use them lives.
    pub fn handle(&self) -> Result<driver::CUlibrary> {
        self.library()
    }

    /// The `CUmodule` of this code's library in the calling thread's current context
    /// (`cuLibraryGetModule`, `cuda.core` 1.1.1's `ObjectCode.get_module`), for raw code that
    /// takes modules. The code is loaded now if it was not yet. The result keeps the library
    /// loaded and the context alive for as long as it lives.
    pub fn get_module(&self) -> Result<LibraryModule> {
        let context = crate::device::Context::current()?.ok_or_else(|| {
            CudaError::InvalidState(
                "ObjectCode::get_module: a module belongs to a context, and no context is current on this thread; make a device current first (Device::set_current)".into(),
            )
        })?;
        let library = self.library()?;
        let mut module: driver::CUmodule = std::ptr::null_mut();
        // SAFETY: the library is live (kept by `self`); the context is current on this thread
        // and kept alive by `context`; out-pointer to a local.
        unsafe { driver::cuLibraryGetModule(&mut module, library) }.check("cuLibraryGetModule")?;
        Ok(LibraryModule {
            handle: module,
            _context: context,
            code: self.clone(),
        })
    }

    /// Object code of `code_type` from bytes, with the name-expression mapping of a compile.
    /// Cubins, fatbins and PTX are checked (see [`ObjectCode`]); an image the driver would read
    /// past the end of is [`CudaError::InvalidArgument`].
    pub fn from_bytes(
        code: impl Into<Vec<u8>>,
        code_type: CodeType,
        name: &str,
        symbol_mapping: HashMap<String, String>,
    ) -> Result<ObjectCode> {
        ObjectCode::new(Code::Bytes(code.into()), code_type, name, symbol_mapping)
    }

    /// Object code of `code_type` in the file `path`. The file is read (and checked, see
    /// [`ObjectCode`]) when its kernels are first asked for.
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

    /// The same code with `symbol_mapping` as its name-expression mapping (`cuda.core`'s
    /// `symbol_mapping=` of every `ObjectCode.from_*`): `get_kernel` looks names up in it first.
    /// Refused for code already shared (a clone, or a kernel taken from it, sees the mapping it
    /// was made with) and for a kernel's placeholder code.
    pub fn with_symbol_mapping(mut self, symbol_mapping: HashMap<String, String>) -> Result<ObjectCode> {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) if !inner.foreign => {
                inner.symbol_mapping = symbol_mapping;
                Ok(self)
            }
            _ => Err(CudaError::InvalidState(
                "with_symbol_mapping: the code is shared (cloned, or a kernel was taken from it) or is a kernel's placeholder: give the mapping when the code is made".into(),
            )),
        }
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

    /// The kind of code.
    pub fn code_type(&self) -> CodeType {
        self.inner.code_type
    }

    /// The name given when the code was made (used in errors and logs).
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
        if !self.inner.code_type.is_loadable() {
            return Err(CudaError::InvalidState(format!(
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
        if self.inner.foreign {
            return self.loaded_library().ok_or_else(|| {
                CudaError::InvalidArgument(
                    "ObjectCode: this placeholder of a kernel made by Kernel::from_handle has no code, and the driver did not say which library the kernel belongs to; pass the kernel's ObjectCode to Kernel::from_handle".into(),
                )
            });
        }
        let code_type = self.inner.code_type;
        if !code_type.is_loadable() {
            return Err(CudaError::InvalidState(format!(
                "ObjectCode {:?}: {code_type} code cannot be loaded into the driver; link it to a cubin first",
                self.inner.name
            )));
        }
        let mut slot = self.inner.library.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = &*slot {
            return Ok(handle.0);
        }
        // cuLibraryLoadData takes no length: the driver finds the image's end from its own
        // headers (or, for PTX, a NUL byte). The image is therefore checked here, just before the
        // call, and a file is read into memory first, so that nothing can change between the
        // check and the load (cuLibraryLoadFromFile would read the file again).
        let from_file;
        let image: &[u8] = match &self.inner.code {
            // Checked by `prepare_image` when the ObjectCode was made (and immutable since).
            Code::Bytes(bytes) => bytes,
            Code::File(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    CudaError::InvalidArgument(format!(
                        "ObjectCode {:?}: cannot read {}: {e}",
                        self.inner.name,
                        path.display()
                    ))
                })?;
                from_file = prepare_image(bytes, code_type, &self.inner.name)?;
                &from_file
            }
        };
        span!("load", object_code = %self.inner.name, code_type = %code_type, bytes = image.len());
        let mut library: driver::CUlibrary = std::ptr::null_mut();
        // SAFETY: cuInit takes flags only. `image` was checked by `check_image` (inside
        // `prepare_image`, at construction for bytes, above for a file): every byte the driver reads to parse it (ELF headers and
        // tables, sections, fatbin entries, PTX up to its NUL) lies inside the slice, which lives
        // across the call; the driver copies the image (CU_LIBRARY_BINARY_IS_PRESERVED is not
        // passed). No JIT or library options are passed.
        unsafe {
            driver::cuInit(0).check("cuInit")?;
            driver::cuLibraryLoadData(
                &mut library,
                image.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
            .check("cuLibraryLoadData")?;
        }
        *slot = Some(LibraryHandle(library, true));
        Ok(library)
    }
}

/// Two `ObjectCode`s are equal when they are the same code (one is a clone of the other), as
/// in `cuda.core`, where they are equal when they share their library: code made twice from the
/// same bytes is loaded twice, into two libraries, and is not equal.
impl PartialEq for ObjectCode {
    fn eq(&self, other: &ObjectCode) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for ObjectCode {}

impl std::hash::Hash for ObjectCode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.inner), state);
    }
}

/// The module of an [`ObjectCode`]'s library in one context ([`ObjectCode::get_module`]). It
/// keeps the library loaded and the context alive, so [`handle`](Self::handle) stays valid
/// while it lives.
#[derive(Clone)]
pub struct LibraryModule {
    handle: driver::CUmodule,
    _context: crate::device::Context,
    code: ObjectCode,
}

// SAFETY: a CUmodule is a process-wide driver handle usable from any thread; the struct only
// hands out its value. Context and ObjectCode are Send + Sync.
unsafe impl Send for LibraryModule {}
// SAFETY: as above; &LibraryModule exposes only reads.
unsafe impl Sync for LibraryModule {}

impl LibraryModule {
    /// The `CUmodule`, valid while this value (or a clone) lives.
    pub fn handle(&self) -> driver::CUmodule {
        self.handle
    }

    /// The code whose module this is.
    pub fn object_code(&self) -> &ObjectCode {
        &self.code
    }
}

impl fmt::Debug for LibraryModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LibraryModule({:p}, {:?})", self.handle, self.code.name())
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

/// Readies bytes of `code_type` for the driver: refuses empty code, NUL-terminates PTX (the driver
/// reads PTX as a C string) and checks cubins, fatbins and PTX with [`check_image`]. LTO-IR,
/// objects and libraries are never given to `cuLibraryLoadData` (linkers get explicit sizes), so
/// they are not checked.
fn prepare_image(mut bytes: Vec<u8>, code_type: CodeType, name: &str) -> Result<Vec<u8>> {
    if bytes.is_empty() {
        return Err(CudaError::InvalidArgument(format!(
            "ObjectCode {name:?}: the {code_type} is empty"
        )));
    }
    if code_type == CodeType::Ptx && bytes.last() != Some(&0) {
        bytes.push(0);
    }
    if code_type.is_loadable() {
        check_image(&bytes, code_type, name)?;
    }
    Ok(bytes)
}

/// Checks that the driver, which sniffs the format of an image whatever its label and reads it
/// without a length, finds everything it reads inside `bytes`. Cubin and fatbin labels must hold
/// an ELF image or a fatbin (either: the driver takes both); text is only taken as PTX.
fn check_image(bytes: &[u8], code_type: CodeType, name: &str) -> Result<()> {
    let invalid = |what: String| CudaError::InvalidArgument(format!("ObjectCode {name:?}: {what}"));
    match image::sniff(bytes) {
        image::Format::Text if code_type != CodeType::Ptx => {
            let expected = if code_type == CodeType::Cubin {
                "not an ELF image"
            } else {
                "neither a fatbin nor an ELF image"
            };
            return Err(invalid(format!(
                "labelled {code_type} but {expected}: the bytes look like {}. Pass the {code_type} \
                 as the compiler or linker wrote it (PTX text goes through ObjectCode::from_ptx)",
                image::describe(bytes)
            )));
        }
        image::Format::FatbinWrapper => {
            return Err(invalid(format!(
                "the {code_type} is a fatbin wrapper (__fatBinC_Wrapper_t, magic 0x466243B1), which \
                 holds a pointer to the fat binary that the driver would follow; pass the fat binary \
                 itself (the bytes that start with the magic 0xBA55ED50, as in a file from nvcc -fatbin)"
            )));
        }
        image::Format::OldFatbin => {
            return Err(invalid(format!(
                "the {code_type} is an old-style fat binary (magic 0x1EE55A01), which is not \
                 supported; rebuild it with a current toolkit (nvcc -fatbin)"
            )));
        }
        _ => {}
    }
    image::check(bytes).map_err(|problem| {
        invalid(format!(
            "the {code_type} cannot be given to the driver: {problem}. The driver reads a code image \
             without a length, so it must be complete and well-formed: pass the whole image as the \
             compiler or linker wrote it (it looks truncated or corrupted)"
        ))
    })?;
    Ok(())
}
