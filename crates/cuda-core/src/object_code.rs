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
}

/// A loaded `CUlibrary`, unloaded on drop.
struct LibraryHandle(driver::CUlibrary);

// SAFETY: a CUlibrary is a process-wide driver handle, usable from any thread.
unsafe impl Send for LibraryHandle {}

impl Drop for LibraryHandle {
    fn drop(&mut self) {
        if crate::reaper::in_callback() {
            // On a driver thread: unloaded on the release thread instead.
            crate::reaper::drop_later(Box::new(LibraryHandle(self.0)));
            return;
        }
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
            }),
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
        let code_type = self.inner.code_type;
        if !code_type.is_loadable() {
            return Err(CudaError::InvalidArgument(format!(
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

/// Bounds checks of the code images `cuLibraryLoadData` reads: ELF (cubins), fatbins and PTX.
///
/// Facts relied on (the ELF gABI; for the CUDA parts, public reverse-engineered write-ups, as
/// NVIDIA documents only the fatbin header):
/// - ELF64: the System V gABI layouts of `Elf64_Ehdr` (64 bytes), `Elf64_Shdr` (64),
///   `Elf64_Phdr` (56), `Elf64_Sym` (24), `Elf64_Rel` (16) and `Elf64_Rela` (24), and its extended
///   numbering (section 0's `sh_size`, `sh_link` and `sh_info` hold the section count, the
///   section-name table index and the program header count when `e_shnum` is 0, `e_shstrndx` is
///   `SHN_XINDEX` or `e_phnum` is `PN_XNUM`). CUDA cubins are ELFCLASS64, little-endian.
/// - CUDA section types without file data, like `SHT_NOBITS` (nvopen-tools' reverse engineering
///   of nvlink; seen in NVRTC's relocatable cubins, whose `.nv_debug.shared` has a size but no
///   bytes): `SHT_CUDA_GLOBAL` 0x70000007, `SHT_CUDA_LOCAL` 0x70000009, `SHT_CUDA_SHARED`
///   0x7000000A, `SHT_CUDA_SHARED_RESERVED` 0x70000015 (`SHT_CUDA_GLOBAL_INIT` 0x70000008 has data).
/// - Fatbin header (`fatBinaryHeader` in the toolkit's old `fatbinary.h`): `{u32 magic =
///   0xBA55ED50, u16 version = 1, u16 headerSize, u64 fatSize}`; `fatSize` counts the bytes after
///   the header. Kinds: PTX 1, ELF 2, old cubin 4. Old-style fatbins have the magic 0x1EE55A01.
/// - Fatbin entry header (reverse-engineered by n-eiling/cuda-fatbin-decompression, ZLUDA and
///   jiegec/fatbinary, which agree): `u16 kind @0, u16 version @2, u32 headerSize @4,
///   u64 paddedPayloadSize @8, u32 payloadSize @16, ..., u64 flags @40, ...,
///   u64 uncompressedSize @56` (64 bytes; some entries have larger headers); the payload follows
///   the entry header and the next entry follows the padded payload. Flags 0x2000 (LZ4) and
///   0x8000 (Zstandard) mark a compressed payload.
/// - `__fatBinC_Wrapper_t` (clang's CUDA offload code, ZLUDA): `{i32 magic = 0x466243B1,
///   i32 version, const u64* data, void* filename_or_fatbins}`: a pointer, not an image.
mod image {
    use std::fmt::Write as _;

    const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
    const FATBIN_MAGIC: u32 = 0xBA55_ED50;
    const OLD_FATBIN_MAGIC: u32 = 0x1EE5_5A01;
    const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;

    // ELF64 (System V gABI).
    const EHDR_SIZE: u64 = 64;
    const SHDR_SIZE: u64 = 64;
    const PHDR_SIZE: u64 = 56;
    const SYM_SIZE: u64 = 24;
    const REL_SIZE: u64 = 16;
    const RELA_SIZE: u64 = 24;
    const ELFCLASS32: u8 = 1;
    const ELFCLASS64: u8 = 2;
    const ELFDATA2LSB: u8 = 1;
    const ELFDATA2MSB: u8 = 2;
    const SHT_NULL: u32 = 0;
    const SHT_SYMTAB: u32 = 2;
    const SHT_STRTAB: u32 = 3;
    const SHT_RELA: u32 = 4;
    const SHT_NOBITS: u32 = 8;
    const SHT_REL: u32 = 9;
    const SHT_DYNSYM: u32 = 11;
    /// CUDA memory-space sections that, like `SHT_NOBITS`, reserve memory but hold no bytes.
    const SHT_CUDA_NO_DATA: [u32; 4] = [0x7000_0007, 0x7000_0009, 0x7000_000A, 0x7000_0015];
    const SHF_INFO_LINK: u64 = 0x40;
    const SHN_UNDEF: u64 = 0;
    const SHN_LORESERVE: u64 = 0xff00;
    const SHN_XINDEX: u64 = 0xffff;
    const PN_XNUM: u64 = 0xffff;

    // Fatbin.
    const FATBIN_HEADER_SIZE: u64 = 16;
    const FATBIN_VERSION: u16 = 1;
    const ENTRY_HEADER_SIZE: u64 = 64;
    const KIND_PTX: u16 = 1;
    const KIND_ELF: u16 = 2;
    const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
    const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;

    /// What the driver takes an image for, from its first bytes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Format {
        Elf,
        Fatbin,
        FatbinWrapper,
        OldFatbin,
        /// Anything else: PTX text, read up to its NUL.
        Text,
    }

    pub(super) fn sniff(b: &[u8]) -> Format {
        if b.starts_with(ELF_MAGIC) {
            return Format::Elf;
        }
        match u32_at(b, 0) {
            Some(FATBIN_MAGIC) => Format::Fatbin,
            Some(FATBIN_WRAPPER_MAGIC) => Format::FatbinWrapper,
            Some(OLD_FATBIN_MAGIC) => Format::OldFatbin,
            _ => Format::Text,
        }
    }

    /// Checks the image by its actual format; the error says what is wrong.
    pub(super) fn check(b: &[u8]) -> Result<Format, String> {
        let format = sniff(b);
        match format {
            Format::Elf => check_elf(b)?,
            Format::Fatbin => check_fatbin(b)?,
            Format::FatbinWrapper => {
                return Err("a fatbin wrapper (magic 0x466243B1) holds a pointer, not an image".into())
            }
            Format::OldFatbin => return Err("old-style fat binaries (magic 0x1EE55A01) are not supported".into()),
            Format::Text => {
                if !b.contains(&0) {
                    return Err(format!(
                        "it is text with no NUL byte in its {} bytes, and the driver reads text up to a NUL",
                        b.len()
                    ));
                }
            }
        }
        Ok(format)
    }

    /// A short description of what the bytes look like, for errors.
    pub(super) fn describe(b: &[u8]) -> String {
        let head = b.get(..b.len().min(48)).unwrap_or_default();
        if b.starts_with(b"BC\xC0\xDE") {
            return "LLVM bitcode (NVVM IR or LTO-IR?)".into();
        }
        let texty = head
            .iter()
            .all(|&c| c == b'\n' || c == b'\r' || c == b'\t' || c == 0 || (0x20..0x7f).contains(&c));
        if texty {
            let text = String::from_utf8_lossy(head);
            format!("text starting with {:?}", text.trim_end_matches('\0'))
        } else {
            let mut hex = String::new();
            for c in head.iter().take(8) {
                let _ = write!(hex, " {c:02x}");
            }
            format!("binary data starting with{hex}")
        }
    }

    /// `b[off..off + len]`, if it is all inside `b`.
    fn range(b: &[u8], off: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        b.get(start..end)
    }

    fn u16_at(b: &[u8], off: u64) -> Option<u16> {
        range(b, off, 2)?.try_into().ok().map(u16::from_le_bytes)
    }

    fn u32_at(b: &[u8], off: u64) -> Option<u32> {
        range(b, off, 4)?.try_into().ok().map(u32::from_le_bytes)
    }

    fn u64_at(b: &[u8], off: u64) -> Option<u64> {
        range(b, off, 8)?.try_into().ok().map(u64::from_le_bytes)
    }

    fn len_of(b: &[u8]) -> u64 {
        u64::try_from(b.len()).unwrap_or(u64::MAX)
    }

    /// Whether `[off, off + size)` lies inside `0..len`.
    fn inside(off: u64, size: u64, len: u64) -> bool {
        off.checked_add(size).is_some_and(|end| end <= len)
    }

    /// A little-endian ELF64 image being checked.
    struct Elf<'a> {
        b: &'a [u8],
        len: u64,
    }

    /// The fields of a section header that the checks use.
    #[derive(Clone, Copy)]
    struct Section {
        name: u64,
        kind: u32,
        flags: u64,
        offset: u64,
        size: u64,
        link: u64,
        info: u64,
        entsize: u64,
    }

    impl Elf<'_> {
        fn u16(&self, off: u64) -> Result<u64, String> {
            u16_at(self.b, off).map(u64::from).ok_or_else(|| self.cut(off))
        }

        fn u32(&self, off: u64) -> Result<u64, String> {
            u32_at(self.b, off).map(u64::from).ok_or_else(|| self.cut(off))
        }

        fn u64(&self, off: u64) -> Result<u64, String> {
            u64_at(self.b, off).ok_or_else(|| self.cut(off))
        }

        fn cut(&self, off: u64) -> String {
            format!(
                "the ELF image ends (at {} bytes) before a field at byte {off}",
                self.len
            )
        }

        /// The header of section `i` of the table at `shoff` (`entsize` apart, checked in range).
        fn section(&self, shoff: u64, entsize: u64, i: u64) -> Result<Section, String> {
            let at = i
                .checked_mul(entsize)
                .and_then(|o| o.checked_add(shoff))
                .ok_or_else(|| format!("section {i}'s header offset overflows"))?;
            let u32_field = |o: u64| self.u32(at.saturating_add(o));
            let u64_field = |o: u64| self.u64(at.saturating_add(o));
            Ok(Section {
                name: u32_field(0)?,
                kind: u32::try_from(u32_field(4)?).unwrap_or(u32::MAX),
                flags: u64_field(8)?,
                offset: u64_field(24)?,
                size: u64_field(32)?,
                link: u32_field(40)?,
                info: u32_field(44)?,
                entsize: u64_field(56)?,
            })
        }
    }

    fn check_elf(b: &[u8]) -> Result<(), String> {
        let len = len_of(b);
        if len < EHDR_SIZE {
            return Err(format!(
                "the ELF header needs {EHDR_SIZE} bytes but the image has only {len}"
            ));
        }
        match b.get(4).copied() {
            Some(ELFCLASS64) => {}
            Some(ELFCLASS32) => {
                return Err("it is a 32-bit ELF image (ELFCLASS32); CUDA cubins are 64-bit ELF (ELFCLASS64)".into())
            }
            other => {
                return Err(format!(
                    "its ELF class {other:?} is unknown (CUDA cubins are ELFCLASS64)"
                ))
            }
        }
        match b.get(5).copied() {
            Some(ELFDATA2LSB) => {}
            Some(ELFDATA2MSB) => {
                return Err("it is a big-endian ELF image; CUDA cubins are little-endian (ELFDATA2LSB)".into())
            }
            other => {
                return Err(format!(
                    "its ELF data encoding {other:?} is unknown (CUDA cubins are little-endian)"
                ))
            }
        }
        let elf = Elf { b, len };
        let phoff = elf.u64(32)?;
        let shoff = elf.u64(40)?;
        let phentsize = elf.u16(54)?;
        let e_phnum = elf.u16(56)?;
        let shentsize = elf.u16(58)?;
        let e_shnum = elf.u16(60)?;
        let e_shstrndx = elf.u16(62)?;

        // Extended numbering: section 0 holds counts that do not fit the header's 16 bits.
        let needs_section0 = e_shnum == 0 || e_shstrndx == SHN_XINDEX || e_phnum == PN_XNUM;
        let section0 = if shoff != 0 && needs_section0 {
            if shentsize < SHDR_SIZE {
                return Err(format!(
                    "e_shentsize is {shentsize}, less than the {SHDR_SIZE} bytes of a section header"
                ));
            }
            if !inside(shoff, SHDR_SIZE, len) {
                return Err(format!(
                    "section 0's header (at offset {shoff}) lies past the end of the {len}-byte image"
                ));
            }
            Some(elf.section(shoff, shentsize, 0)?)
        } else {
            None
        };
        let shnum = match (shoff, e_shnum, section0) {
            (0, 0, _) => 0,
            (0, n, _) => {
                return Err(format!(
                    "e_shnum is {n} but there is no section header table (e_shoff is 0)"
                ))
            }
            (_, 0, Some(s0)) if s0.size == 0 => {
                return Err("e_shnum is 0 and section 0's sh_size (the extended section count) is 0".into())
            }
            (_, 0, Some(s0)) => s0.size,
            (_, n, _) => n,
        };
        let shstrndx = if e_shstrndx == SHN_XINDEX {
            match section0 {
                Some(s0) => s0.link,
                None => return Err("e_shstrndx is SHN_XINDEX but there is no section header table".into()),
            }
        } else if e_shstrndx >= SHN_LORESERVE {
            return Err(format!("e_shstrndx {e_shstrndx:#x} is a reserved index"));
        } else {
            e_shstrndx
        };
        if shstrndx != SHN_UNDEF && shstrndx >= shnum {
            return Err(format!("e_shstrndx is {shstrndx} but there are only {shnum} sections"));
        }
        let phnum = match (e_phnum, section0) {
            (PN_XNUM, Some(s0)) => s0.info,
            (n, _) => n,
        };

        // Program header table and segments.
        if phnum > 0 {
            if phoff == 0 {
                return Err(format!(
                    "e_phnum is {phnum} but there is no program header table (e_phoff is 0)"
                ));
            }
            if phentsize < PHDR_SIZE {
                return Err(format!(
                    "e_phentsize is {phentsize}, less than the {PHDR_SIZE} bytes of a program header"
                ));
            }
            table_inside("program header", phoff, phnum, phentsize, len)?;
            for i in 0..phnum {
                let at = phoff.saturating_add(i.saturating_mul(phentsize));
                let p_offset = elf.u64(at.saturating_add(8))?;
                let p_filesz = elf.u64(at.saturating_add(32))?;
                if !inside(p_offset, p_filesz, len) {
                    return Err(format!(
                        "program header {i} maps {p_filesz} bytes at offset {p_offset}, past the end \
                         of the {len}-byte image"
                    ));
                }
            }
        }

        if shnum == 0 {
            return Ok(());
        }
        if shentsize < SHDR_SIZE {
            return Err(format!(
                "e_shentsize is {shentsize}, less than the {SHDR_SIZE} bytes of a section header"
            ));
        }
        table_inside("section header", shoff, shnum, shentsize, len)?;
        // The table is inside the image, so there are at most len / 64 sections to read.
        let sections = (0..shnum)
            .map(|i| elf.section(shoff, shentsize, i))
            .collect::<Result<Vec<Section>, String>>()?;
        let get = |i: u64| usize::try_from(i).ok().and_then(|i| sections.get(i));
        let names = match get(shstrndx) {
            _ if shstrndx == SHN_UNDEF => None,
            Some(s) if s.kind == SHT_STRTAB && s.size > 0 => Some(s),
            _ => {
                return Err(format!(
                    "the section-name table (section {shstrndx}) is not a non-empty string table"
                ))
            }
        };
        for (i, s) in sections.iter().enumerate() {
            if s.kind == SHT_NULL {
                continue; // inactive; section 0 may hold extended counts
            }
            let has_data = s.kind != SHT_NOBITS && !SHT_CUDA_NO_DATA.contains(&s.kind);
            if has_data && !inside(s.offset, s.size, len) {
                return Err(format!(
                    "section {i} ({} bytes at offset {}) runs past the end of the {len}-byte image",
                    s.size, s.offset
                ));
            }
            if s.link >= shnum {
                return Err(format!(
                    "section {i} links to section {} but there are only {shnum}",
                    s.link
                ));
            }
            if s.flags & SHF_INFO_LINK != 0 && s.info >= shnum {
                return Err(format!(
                    "section {i} refers to section {} but there are only {shnum}",
                    s.info
                ));
            }
            if let Some(names) = names {
                if s.name >= names.size {
                    return Err(format!("section {i}'s name lies outside the section-name table"));
                }
            }
            if s.kind == SHT_STRTAB && s.size > 0 {
                // Every string read from the table then ends inside it.
                let last = s.offset.saturating_add(s.size - 1);
                if range(b, last, 1).and_then(|c| c.first().copied()) != Some(0) {
                    return Err(format!("string table section {i} does not end with a NUL byte"));
                }
            }
            match s.kind {
                SHT_SYMTAB | SHT_DYNSYM => check_symbols(&elf, i, s, &sections)?,
                SHT_REL | SHT_RELA => check_relocations(&elf, i, s, &sections)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A table of `count` entries `entsize` apart at `off` lies inside `0..len`.
    fn table_inside(what: &str, off: u64, count: u64, entsize: u64, len: u64) -> Result<(), String> {
        let end = count.checked_mul(entsize).and_then(|size| off.checked_add(size));
        match end {
            Some(end) if end <= len => Ok(()),
            Some(end) => Err(format!(
                "the {what} table ({count} entries of {entsize} bytes at offset {off}) ends at byte \
                 {end}, past the end of the {len}-byte image"
            )),
            None => Err(format!(
                "the {what} table ({count} entries of {entsize} bytes at offset {off}) overflows"
            )),
        }
    }

    /// The number of `min_size`-byte entries of a table section (its entsize at least that).
    fn entries(i: usize, s: &Section, min_size: u64) -> Result<u64, String> {
        if s.size == 0 {
            return Ok(0);
        }
        if s.entsize < min_size {
            return Err(format!(
                "section {i} is a table of {}-byte entries, less than the {min_size} of its kind",
                s.entsize
            ));
        }
        Ok(s.size / s.entsize)
    }

    /// Symbol names lie inside the linked string table; symbol section indices are in range.
    fn check_symbols(elf: &Elf<'_>, i: usize, s: &Section, sections: &[Section]) -> Result<(), String> {
        let count = entries(i, s, SYM_SIZE)?;
        if count == 0 {
            return Ok(());
        }
        let strtab = usize::try_from(s.link).ok().and_then(|l| sections.get(l));
        let Some(strtab) = strtab.filter(|t| t.kind == SHT_STRTAB && t.size > 0) else {
            return Err(format!("symbol table section {i} does not link to a string table"));
        };
        let shnum = u64::try_from(sections.len()).unwrap_or(u64::MAX);
        for k in 0..count {
            let at = s.offset.saturating_add(k.saturating_mul(s.entsize));
            let st_name = elf.u32(at)?;
            let st_shndx = elf.u16(at.saturating_add(6))?;
            if st_name >= strtab.size {
                return Err(format!("symbol {k} of section {i} has a name outside its string table"));
            }
            if st_shndx == SHN_XINDEX {
                return Err(format!(
                    "symbol {k} of section {i} uses an extended section index (SHN_XINDEX), which is \
                     not supported"
                ));
            }
            if st_shndx < SHN_LORESERVE && st_shndx >= shnum {
                return Err(format!(
                    "symbol {k} of section {i} is in section {st_shndx} but there are only {shnum}"
                ));
            }
        }
        Ok(())
    }

    /// Relocations name symbols that exist and patch offsets inside their target section.
    fn check_relocations(elf: &Elf<'_>, i: usize, s: &Section, sections: &[Section]) -> Result<(), String> {
        let min = if s.kind == SHT_RELA { RELA_SIZE } else { REL_SIZE };
        let count = entries(i, s, min)?;
        if count == 0 {
            return Ok(());
        }
        let get = |k: u64| usize::try_from(k).ok().and_then(|k| sections.get(k));
        let symbols = match get(s.link) {
            Some(t) if matches!(t.kind, SHT_SYMTAB | SHT_DYNSYM) && t.entsize >= SYM_SIZE => t.size / t.entsize,
            _ => 0,
        };
        let target = if s.info != 0 { get(s.info) } else { None };
        for k in 0..count {
            let at = s.offset.saturating_add(k.saturating_mul(s.entsize));
            let r_offset = elf.u64(at)?;
            let symbol = elf.u64(at.saturating_add(8))? >> 32;
            if symbol != 0 && symbol >= symbols {
                return Err(format!(
                    "relocation {k} of section {i} names symbol {symbol}, which does not exist"
                ));
            }
            if let Some(t) = target {
                if r_offset >= t.size {
                    return Err(format!(
                        "relocation {k} of section {i} patches offset {r_offset}, past the end of its \
                         {}-byte target section",
                        t.size
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_fatbin(b: &[u8]) -> Result<(), String> {
        let len = len_of(b);
        let field = |o: u64| format!("the fatbin ends (at {len} bytes) before a field at byte {o}");
        if len < FATBIN_HEADER_SIZE {
            return Err(format!(
                "the fatbin header needs {FATBIN_HEADER_SIZE} bytes but the image has only {len}"
            ));
        }
        let version = u16_at(b, 4).ok_or_else(|| field(4))?;
        if version != FATBIN_VERSION {
            return Err(format!(
                "fatbin version {version} is unknown (only version {FATBIN_VERSION} is)"
            ));
        }
        let header_size = u64::from(u16_at(b, 6).ok_or_else(|| field(6))?);
        let fat_size = u64_at(b, 8).ok_or_else(|| field(8))?;
        if header_size < FATBIN_HEADER_SIZE {
            return Err(format!(
                "the fatbin header size is {header_size}, less than the {FATBIN_HEADER_SIZE} bytes of its fields"
            ));
        }
        let end = match header_size.checked_add(fat_size) {
            Some(end) if end <= len => end,
            _ => {
                return Err(format!(
                    "the fatbin header announces {header_size} + {fat_size} bytes but the image has only {len}"
                ))
            }
        };
        let mut at = header_size;
        let mut index = 0u64;
        while at < end {
            if !inside(at, ENTRY_HEADER_SIZE, end) {
                return Err(format!(
                    "fatbin entry {index} at offset {at}: its {ENTRY_HEADER_SIZE}-byte header runs past \
                     the end of the fat binary (byte {end})"
                ));
            }
            let kind = u16_at(b, at).ok_or_else(|| field(at))?;
            let entry_header = u64::from(u32_at(b, at.saturating_add(4)).ok_or_else(|| field(at))?);
            let padded = u64_at(b, at.saturating_add(8)).ok_or_else(|| field(at))?;
            let stored = u64::from(u32_at(b, at.saturating_add(16)).ok_or_else(|| field(at))?);
            let flags = u64_at(b, at.saturating_add(40)).ok_or_else(|| field(at))?;
            if entry_header < ENTRY_HEADER_SIZE {
                return Err(format!(
                    "fatbin entry {index} at offset {at} has a {entry_header}-byte header, less than \
                     {ENTRY_HEADER_SIZE}"
                ));
            }
            let payload_at = at.checked_add(entry_header).filter(|&p| p <= end);
            let Some(payload_at) = payload_at.filter(|&p| inside(p, padded, end)) else {
                return Err(format!(
                    "fatbin entry {index} at offset {at} ({entry_header}-byte header, {padded}-byte \
                     payload) runs past the end of the fat binary (byte {end})"
                ));
            };
            if stored > padded {
                return Err(format!(
                    "fatbin entry {index} at offset {at} says it stores {stored} bytes in a {padded}-byte payload"
                ));
            }
            let payload = range(b, payload_at, padded).ok_or_else(|| field(payload_at))?;
            let compressed = flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD) != 0;
            if !compressed {
                // Compressed payloads are only checked to lie inside the entry (above).
                if payload.starts_with(ELF_MAGIC) {
                    check_elf(payload).map_err(|e| format!("fatbin entry {index} (ELF): {e}"))?;
                } else if kind == KIND_ELF {
                    return Err(format!(
                        "fatbin entry {index} is marked ELF but its payload is not an ELF image"
                    ));
                } else if kind == KIND_PTX && !payload.contains(&0) {
                    return Err(format!(
                        "fatbin entry {index} holds PTX with no NUL byte inside its {padded}-byte payload"
                    ));
                } else if matches!(
                    u32_at(payload, 0),
                    Some(FATBIN_MAGIC | FATBIN_WRAPPER_MAGIC | OLD_FATBIN_MAGIC)
                ) {
                    return Err(format!(
                        "fatbin entry {index} holds a nested fat binary, which is not supported"
                    ));
                }
            }
            at = payload_at.saturating_add(padded);
            index += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::image::{check, Format};
    use super::*;
    use proptest::prelude::*;

    fn put16(v: &mut [u8], at: usize, x: u16) {
        v[at..at + 2].copy_from_slice(&x.to_le_bytes());
    }

    fn put32(v: &mut [u8], at: usize, x: u32) {
        v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    }

    fn put64(v: &mut [u8], at: usize, x: u64) {
        v[at..at + 8].copy_from_slice(&x.to_le_bytes());
    }

    /// Where the parts of [`minimal_elf`]'s image are.
    struct Layout {
        shoff: usize,
        phoff: usize,
    }

    impl Layout {
        /// The offset of field `field` of section `i`'s header.
        fn sh(&self, i: usize, field: usize) -> usize {
            self.shoff + i * 64 + field
        }
    }

    const SH_NAME: usize = 0;
    const SH_OFFSET: usize = 24;
    const SH_SIZE: usize = 32;
    const SH_LINK: usize = 40;

    /// A section header: name, type, flags, offset, size, link, info, entsize.
    type SectionSpec = (u32, u32, u64, u64, u64, u32, u32, u64);

    /// A minimal ELF64 image shaped like a cubin: sections 0 (null), 1 `.shstrtab`, 2 `.strtab`,
    /// 3 `.symtab` (a null symbol and `k`), 4 `.text.k`, 5 `.nv.global` (NOBITS, its offset past
    /// the end as in real cubins' empty shared sections), 6 `.rela.text.k`; one PT_LOAD for the
    /// text. Data first, then the section header table, then the program header table.
    fn minimal_elf() -> (Vec<u8>, Layout) {
        let shstrtab = b"\0.shstrtab\0.strtab\0.symtab\0.text.k\0.nv.global\0.rela.text.k\0";
        let name = |s: &str| {
            let pos = shstrtab
                .windows(s.len() + 1)
                .position(|w| &w[..s.len()] == s.as_bytes() && w[s.len()] == 0);
            pos.unwrap() as u32
        };
        let strtab = b"\0k\0".to_vec();
        let mut symtab = vec![0u8; 48];
        put32(&mut symtab, 24, 1); // st_name "k"
        symtab[24 + 4] = 0x12; // STB_GLOBAL, STT_FUNC
        put16(&mut symtab, 24 + 6, 4); // st_shndx: .text.k
        put64(&mut symtab, 24 + 16, 16); // st_size
        let text = vec![0xAAu8; 16];
        let mut rela = vec![0u8; 24];
        put64(&mut rela, 0, 8); // r_offset
        put64(&mut rela, 8, (1 << 32) | 1); // symbol 1, type 1
        let mut image = vec![0u8; 64];
        let mut place = |data: &[u8]| {
            while !image.len().is_multiple_of(8) {
                image.push(0);
            }
            let at = image.len();
            image.extend_from_slice(data);
            at as u64
        };
        let offsets = [
            0,
            place(shstrtab),
            place(&strtab),
            place(&symtab),
            place(&text),
            0,
            place(&rela),
        ];
        while !image.len().is_multiple_of(8) {
            image.push(0);
        }
        let shoff = image.len();
        let nobits_at = 1 << 20;
        let sections: [SectionSpec; 7] = [
            (0, 0, 0, 0, 0, 0, 0, 0),
            (name(".shstrtab"), 3, 0, offsets[1], shstrtab.len() as u64, 0, 0, 0),
            (name(".strtab"), 3, 0, offsets[2], strtab.len() as u64, 0, 0, 0),
            (name(".symtab"), 2, 0, offsets[3], symtab.len() as u64, 2, 1, 24),
            (name(".text.k"), 1, 0x6, offsets[4], text.len() as u64, 3, 0, 0),
            (name(".nv.global"), 8, 0x3, nobits_at, 4, 0, 0, 0),
            (name(".rela.text.k"), 4, 0x40, offsets[6], rela.len() as u64, 3, 4, 24),
        ];
        for (name, kind, flags, offset, size, link, info, entsize) in sections {
            let mut sh = vec![0u8; 64];
            put32(&mut sh, 0, name);
            put32(&mut sh, 4, kind);
            put64(&mut sh, 8, flags);
            put64(&mut sh, 24, offset);
            put64(&mut sh, 32, size);
            put32(&mut sh, 40, link);
            put32(&mut sh, 44, info);
            put64(&mut sh, 48, 8);
            put64(&mut sh, 56, entsize);
            image.extend_from_slice(&sh);
        }
        let phoff = image.len();
        let mut ph = vec![0u8; 56];
        put32(&mut ph, 0, 1); // PT_LOAD
        put64(&mut ph, 8, offsets[4]);
        put64(&mut ph, 32, text.len() as u64);
        put64(&mut ph, 40, text.len() as u64);
        image.extend_from_slice(&ph);
        image[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x41");
        put16(&mut image, 16, 2); // ET_EXEC
        put16(&mut image, 18, 190); // EM_CUDA
        put32(&mut image, 20, 1);
        put64(&mut image, 32, phoff as u64);
        put64(&mut image, 40, shoff as u64);
        put16(&mut image, 52, 64);
        put16(&mut image, 54, 56);
        put16(&mut image, 56, 1);
        put16(&mut image, 58, 64);
        put16(&mut image, 60, 7);
        put16(&mut image, 62, 1);
        (image, Layout { shoff, phoff })
    }

    const KIND_PTX: u16 = 1;
    const KIND_ELF: u16 = 2;
    const LZ4: u64 = 0x2000;

    /// A fat binary of `(kind, flags, payload)` entries, each with a 64-byte entry header and its
    /// payload padded to 8 bytes.
    fn fatbin(entries: &[(u16, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, flags, payload) in entries {
            let padded = payload.len().div_ceil(8) * 8;
            let mut header = vec![0u8; 64];
            put16(&mut header, 0, *kind);
            put16(&mut header, 2, 0x0101);
            put32(&mut header, 4, 64);
            put64(&mut header, 8, padded as u64);
            put32(&mut header, 16, payload.len() as u32);
            put32(&mut header, 28, 90);
            put64(&mut header, 40, 0x11 | flags);
            body.extend_from_slice(&header);
            body.extend_from_slice(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut image = vec![0u8; 16];
        put32(&mut image, 0, 0xBA55_ED50);
        put16(&mut image, 4, 1);
        put16(&mut image, 6, 16);
        put64(&mut image, 8, body.len() as u64);
        image.extend_from_slice(&body);
        image
    }

    const PTX: &[u8] = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";

    fn ptx_with_nul() -> Vec<u8> {
        let mut v = PTX.to_vec();
        v.push(0);
        v
    }

    fn valid_fatbin() -> Vec<u8> {
        let (elf, _) = minimal_elf();
        fatbin(&[(KIND_ELF, 0, &elf), (KIND_PTX, 0, &ptx_with_nul())])
    }

    #[track_caller]
    fn refused(bytes: &[u8], needle: &str) {
        let err = check(bytes).expect_err("the image must be refused");
        assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    }

    #[track_caller]
    fn refused_as(bytes: Vec<u8>, code_type: CodeType, needle: &str) {
        let err = ObjectCode::from_bytes(bytes, code_type, "t", HashMap::new()).unwrap_err();
        assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
    }

    #[test]
    fn a_minimal_elf_is_accepted_whatever_the_label_says() {
        let (elf, _) = minimal_elf();
        assert_eq!(check(&elf), Ok(Format::Elf));
        for t in [CodeType::Cubin, CodeType::Fatbin, CodeType::Ptx] {
            ObjectCode::from_bytes(elf.clone(), t, "t", HashMap::new()).unwrap();
        }
    }

    #[test]
    fn every_truncation_of_an_elf_is_refused() {
        let (elf, _) = minimal_elf();
        for n in 0..elf.len() {
            let err = ObjectCode::from_cubin(elf[..n].to_vec(), "t");
            assert!(matches!(err, Err(CudaError::InvalidArgument(_))), "{n} bytes");
        }
        refused(&elf[..63], "ELF header needs 64 bytes");
    }

    #[test]
    fn elf_classes_and_byte_orders_other_than_cubins_are_refused() {
        let (mut elf, _) = minimal_elf();
        elf[4] = 1;
        refused(&elf, "ELFCLASS32");
        elf[4] = 2;
        elf[5] = 2;
        refused(&elf, "big-endian");
        elf[5] = 7;
        refused(&elf, "data encoding");
    }

    #[test]
    fn section_header_tables_past_the_end_or_overflowing_are_refused() {
        let (elf, layout) = minimal_elf();
        let mut past = elf.clone();
        put64(&mut past, 40, elf.len() as u64 - 64);
        refused(&past, "section header table");
        let mut wraps = elf.clone();
        put64(&mut wraps, 40, u64::MAX - 100);
        refused(&wraps, "overflows");
        // Extended numbering: e_shnum 0 takes the count from section 0's sh_size.
        let mut overflow = elf.clone();
        put16(&mut overflow, 60, 0);
        put64(&mut overflow, layout.sh(0, SH_SIZE), u64::MAX / 3);
        refused(&overflow, "overflows");
        let mut extended = elf.clone();
        put16(&mut extended, 60, 0);
        put64(&mut extended, layout.sh(0, SH_SIZE), 7);
        assert_eq!(check(&extended), Ok(Format::Elf));
        put64(&mut extended, layout.sh(0, SH_SIZE), 0);
        refused(&extended, "(the extended section count) is 0");
        let mut no_table = elf.clone();
        put64(&mut no_table, 40, 0);
        refused(&no_table, "no section header table");
        let mut small = elf;
        put16(&mut small, 58, 40);
        refused(&small, "e_shentsize");
    }

    #[test]
    fn the_section_name_index_must_be_in_range_or_undef() {
        let (elf, layout) = minimal_elf();
        let mut bad = elf.clone();
        put16(&mut bad, 62, 7);
        refused(&bad, "e_shstrndx is 7");
        put16(&mut bad, 62, 0xff05);
        refused(&bad, "reserved");
        put16(&mut bad, 62, 0);
        assert_eq!(check(&bad), Ok(Format::Elf));
        // SHN_XINDEX: the index is in section 0's sh_link.
        put16(&mut bad, 62, 0xffff);
        put32(&mut bad, layout.sh(0, SH_LINK), 1);
        assert_eq!(check(&bad), Ok(Format::Elf));
        put32(&mut bad, layout.sh(0, SH_LINK), 99);
        refused(&bad, "e_shstrndx is 99");
        let mut not_strtab = elf;
        put16(&mut not_strtab, 62, 4);
        refused(&not_strtab, "section-name table");
    }

    #[test]
    fn sections_past_the_end_are_refused_but_nobits_may_lie_anywhere() {
        let (elf, layout) = minimal_elf();
        let mut big = elf.clone();
        put64(&mut big, layout.sh(4, SH_SIZE), elf.len() as u64);
        refused(&big, "section 4");
        let mut wraps = elf.clone();
        put64(&mut wraps, layout.sh(4, SH_OFFSET), u64::MAX - 4);
        refused(&wraps, "section 4");
        let mut nobits = elf;
        put64(&mut nobits, layout.sh(5, SH_OFFSET), u64::MAX);
        put64(&mut nobits, layout.sh(5, SH_SIZE), u64::MAX);
        assert_eq!(check(&nobits), Ok(Format::Elf));
        // So may CUDA's shared, local and global memory sections, but not initialised globals.
        for kind in [0x7000_0007, 0x7000_0009, 0x7000_000A, 0x7000_0015] {
            put32(&mut nobits, layout.sh(5, 4), kind);
            assert_eq!(check(&nobits), Ok(Format::Elf), "{kind:#x}");
        }
        put32(&mut nobits, layout.sh(5, 4), 0x7000_0008);
        refused(&nobits, "section 5");
    }

    #[test]
    fn program_headers_must_lie_inside() {
        let (elf, layout) = minimal_elf();
        let mut table = elf.clone();
        put64(&mut table, 32, elf.len() as u64 - 8);
        refused(&table, "program header table");
        let mut segment = elf.clone();
        put64(&mut segment, layout.phoff + 32, elf.len() as u64);
        refused(&segment, "program header 0");
        let mut count = elf;
        put16(&mut count, 56, u16::MAX - 1);
        refused(&count, "program header table");
        // PN_XNUM: the count is in section 0's sh_info (0 here).
        put16(&mut count, 56, u16::MAX);
        assert_eq!(check(&count), Ok(Format::Elf));
    }

    #[test]
    fn strings_symbols_and_relocations_stay_inside_their_tables() {
        let (elf, layout) = minimal_elf();
        let mut name = elf.clone();
        put32(&mut name, layout.sh(4, SH_NAME), 10_000);
        refused(&name, "name lies outside");
        let mut unterminated = elf.clone();
        let strtab_end = u64::from_le_bytes(elf[layout.sh(2, SH_OFFSET)..][..8].try_into().unwrap()) + 2;
        unterminated[strtab_end as usize] = b'x';
        refused(&unterminated, "does not end with a NUL");
        let mut link = elf.clone();
        put32(&mut link, layout.sh(4, SH_LINK), 70);
        refused(&link, "links to section 70");
        let symtab = u64::from_le_bytes(elf[layout.sh(3, SH_OFFSET)..][..8].try_into().unwrap()) as usize;
        let mut symbol = elf.clone();
        put32(&mut symbol, symtab + 24, 50);
        refused(&symbol, "name outside its string table");
        put32(&mut symbol, symtab + 24, 1);
        put16(&mut symbol, symtab + 24 + 6, 9);
        refused(&symbol, "is in section 9");
        let rela = u64::from_le_bytes(elf[layout.sh(6, SH_OFFSET)..][..8].try_into().unwrap()) as usize;
        let mut reloc = elf.clone();
        put64(&mut reloc, rela, 16);
        refused(&reloc, "patches offset 16");
        put64(&mut reloc, rela, 0);
        put64(&mut reloc, rela + 8, 5 << 32);
        refused(&reloc, "symbol 5");
    }

    #[test]
    fn a_valid_fatbin_is_accepted_whatever_the_label_says() {
        let fat = valid_fatbin();
        assert_eq!(check(&fat), Ok(Format::Fatbin));
        for t in [CodeType::Fatbin, CodeType::Cubin, CodeType::Ptx] {
            ObjectCode::from_bytes(fat.clone(), t, "t", HashMap::new()).unwrap();
        }
        // An empty fat binary holds nothing to over-read.
        assert_eq!(check(&fatbin(&[])), Ok(Format::Fatbin));
        for n in 0..fat.len() {
            assert!(ObjectCode::from_fatbin(fat[..n].to_vec(), "t").is_err(), "{n} bytes");
        }
    }

    #[test]
    fn fatbin_headers_and_entries_must_lie_inside() {
        let fat = valid_fatbin();
        let mut past = fat.clone();
        put64(&mut past, 8, fat.len() as u64);
        refused(&past, "announces 16 + ");
        let mut wraps = fat.clone();
        put64(&mut wraps, 8, u64::MAX);
        refused(&wraps, "announces");
        let mut header = fat.clone();
        put16(&mut header, 6, 8);
        refused(&header, "header size is 8");
        let mut version = fat.clone();
        put16(&mut version, 4, 2);
        refused(&version, "version 2");
        refused(&fat[..10], "needs 16 bytes");
        // The first entry's payload reaches past the fat region, but not past the slice.
        let (elf, _) = minimal_elf();
        let mut entry = fatbin(&[(KIND_ELF, 0, &elf)]);
        entry.extend_from_slice(&[0u8; 256]);
        put64(&mut entry, 16 + 8, (elf.len() + 64) as u64);
        refused(&entry, "entry 0");
        let mut huge = entry.clone();
        put64(&mut huge, 16 + 8, u64::MAX);
        refused(&huge, "entry 0");
        let mut small_header = fatbin(&[(KIND_ELF, 0, &elf)]);
        put32(&mut small_header, 16 + 4, 8);
        refused(&small_header, "8-byte header");
        let mut stored = fatbin(&[(KIND_ELF, 0, &elf)]);
        put32(&mut stored, 16 + 16, u32::MAX);
        refused(&stored, "stores");
        // Leftover bytes too short for an entry header.
        let mut tail = fatbin(&[(KIND_ELF, 0, &elf)]);
        let fat_size = tail.len() as u64 - 16;
        tail.extend_from_slice(&[0u8; 24]);
        put64(&mut tail, 8, fat_size + 24);
        refused(&tail, "entry 1");
    }

    #[test]
    fn fatbin_payloads_are_checked_by_kind() {
        let (elf, _) = minimal_elf();
        let mut broken = elf.clone();
        put64(&mut broken, 40, elf.len() as u64);
        refused(&fatbin(&[(KIND_ELF, 0, &broken)]), "entry 0 (ELF)");
        refused(&fatbin(&[(KIND_ELF, 0, PTX)]), "not an ELF image");
        // An ELF entry's check is against its payload, not the rest of the fat binary.
        let cut = &elf[..elf.len() - 8];
        let mut fat = fatbin(&[(KIND_ELF, 0, cut)]);
        fat.extend_from_slice(&[0u8; 64]);
        refused(&fat, "entry 0 (ELF)");
        refused(&fatbin(&[(KIND_PTX, 0, &PTX[..PTX.len() - 1])]), "no NUL");
        assert_eq!(check(&fatbin(&[(KIND_PTX, 0, &ptx_with_nul())])), Ok(Format::Fatbin));
        // Compressed payloads are only bounds-checked.
        assert_eq!(
            check(&fatbin(&[(KIND_PTX, LZ4, &PTX[..PTX.len() - 1])])),
            Ok(Format::Fatbin)
        );
        assert_eq!(check(&fatbin(&[(KIND_ELF, 0x8000, b"compressed")])), Ok(Format::Fatbin));
        refused(&fatbin(&[(4, 0, &valid_fatbin())]), "nested");
    }

    #[test]
    fn fatbin_wrappers_and_old_fatbins_are_refused() {
        let mut wrapper = vec![0u8; 24];
        put32(&mut wrapper, 0, 0x4662_43B1);
        put32(&mut wrapper, 4, 1);
        put64(&mut wrapper, 8, 0x7fff_0000_1000);
        for t in [CodeType::Fatbin, CodeType::Cubin, CodeType::Ptx] {
            refused_as(wrapper.clone(), t, "pass the fat binary itself");
        }
        let mut old = vec![0u8; 24];
        put32(&mut old, 0, 0x1EE5_5A01);
        refused_as(old, CodeType::Fatbin, "old-style");
    }

    #[test]
    fn text_is_ptx_only_and_must_end_in_nul() {
        refused_as(PTX.to_vec(), CodeType::Cubin, "labelled cubin but not an ELF image");
        refused_as(ptx_with_nul(), CodeType::Cubin, "text starting with \".version 8.0");
        refused_as(
            PTX.to_vec(),
            CodeType::Fatbin,
            "labelled fatbin but neither a fatbin nor an ELF",
        );
        refused_as(
            vec![1, 2, 3, 250],
            CodeType::Cubin,
            "binary data starting with 01 02 03 fa",
        );
        refused(PTX, "no NUL");
        let ptx = ObjectCode::from_ptx(PTX, "p").unwrap();
        assert_eq!(ptx.bytes().unwrap().last(), Some(&0));
        // LTO-IR, objects and libraries are never given to cuLibraryLoadData: not checked.
        for t in [CodeType::Ltoir, CodeType::Object, CodeType::Library] {
            ObjectCode::from_bytes(b"anything".to_vec(), t, "t", HashMap::new()).unwrap();
        }
        refused_as(Vec::new(), CodeType::Ptx, "empty");
    }

    #[test]
    fn unloadable_kinds_and_bad_files_fail_before_the_driver() {
        // These fail before cuInit, so they run without a GPU.
        let err = ObjectCode::from_ltoir(b"x".to_vec(), "l")
            .unwrap()
            .get_global("g")
            .unwrap_err();
        assert!(err.to_string().contains("cannot be loaded"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.cubin");
        let (elf, _) = minimal_elf();
        std::fs::write(&path, &elf[..64]).unwrap();
        let code = ObjectCode::from_file(&path, CodeType::Cubin, "k").unwrap();
        let err = code.get_kernel("k").unwrap_err();
        assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("past the end of the 64-byte image"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = code.get_kernel("k").unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }

    fn all_types() -> [CodeType; 6] {
        [
            CodeType::Cubin,
            CodeType::Ptx,
            CodeType::Ltoir,
            CodeType::Fatbin,
            CodeType::Object,
            CodeType::Library,
        ]
    }

    /// Values that make sizes and offsets interesting.
    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(64),
            Just(u64::from(u16::MAX)),
            Just(u64::from(u32::MAX)),
            Just(u64::MAX),
            Just(u64::MAX / 64 + 1),
            0u64..4096,
            any::<u64>(),
        ]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), magic in 0usize..5) {
            let mut bytes = bytes;
            let magics: [&[u8]; 4] = [b"\x7fELF\x02\x01", &[0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0], &[0xB1, 0x43, 0x62, 0x46], b""];
            if let Some(m) = magics.get(magic) {
                if bytes.len() >= m.len() {
                    bytes[..m.len()].copy_from_slice(m);
                }
            }
            let _ = check(&bytes);
            let _ = image::describe(&bytes);
            for t in all_types() {
                let _ = ObjectCode::from_bytes(bytes.clone(), t, "p", HashMap::new());
            }
        }

        #[test]
        fn mutated_images_never_panic(
            base in 0usize..3,
            bytes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            words in proptest::collection::vec((any::<prop::sample::Index>(), word()), 0..4),
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let (elf, _) = minimal_elf();
            let mut image = match base {
                0 => elf,
                1 => valid_fatbin(),
                _ => fatbin(&[(KIND_ELF, 0, &elf), (KIND_ELF, LZ4, b"lz4 data")]),
            };
            for (at, b) in bytes {
                let i = at.index(image.len());
                image[i] = b;
            }
            for (at, w) in words {
                let i = at.index(image.len() - 7);
                put64(&mut image, i, w);
            }
            if let Some(cut) = cut {
                image.truncate(cut.index(image.len() + 1));
            }
            let _ = check(&image);
            for t in [CodeType::Cubin, CodeType::Ptx, CodeType::Fatbin] {
                let _ = ObjectCode::from_bytes(image.clone(), t, "m", HashMap::new());
            }
        }
    }
}
