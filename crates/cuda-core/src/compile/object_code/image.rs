//! Bounds checks of the code images `cuLibraryLoadData` reads: ELF (cubins), fatbins and PTX.
//!
//! Facts relied on (the ELF gABI; for the CUDA parts, public reverse-engineered write-ups, as
//! NVIDIA documents only the fatbin header):
//! - ELF64: the System V gABI layouts of `Elf64_Ehdr` (64 bytes), `Elf64_Shdr` (64),
//!   `Elf64_Phdr` (56), `Elf64_Sym` (24), `Elf64_Rel` (16) and `Elf64_Rela` (24), and its extended
//!   numbering (section 0's `sh_size`, `sh_link` and `sh_info` hold the section count, the
//!   section-name table index and the program header count when `e_shnum` is 0, `e_shstrndx` is
//!   `SHN_XINDEX` or `e_phnum` is `PN_XNUM`). CUDA cubins are ELFCLASS64, little-endian.
//! - CUDA section types without file data, like `SHT_NOBITS` (nvopen-tools' reverse engineering
//!   of nvlink; seen in NVRTC's relocatable cubins, whose `.nv_debug.shared` has a size but no
//!   bytes): `SHT_CUDA_GLOBAL` 0x70000007, `SHT_CUDA_LOCAL` 0x70000009, `SHT_CUDA_SHARED`
//!   0x7000000A, `SHT_CUDA_SHARED_RESERVED` 0x70000015 (`SHT_CUDA_GLOBAL_INIT` 0x70000008 has data).
//! - Fatbin header (`fatBinaryHeader` in the toolkit's old `fatbinary.h`): `{u32 magic =
//!   0xBA55ED50, u16 version = 1, u16 headerSize, u64 fatSize}`; `fatSize` counts the bytes after
//!   the header. Kinds: PTX 1, ELF 2, old cubin 4. Old-style fatbins have the magic 0x1EE55A01.
//! - Fatbin entry header (reverse-engineered by n-eiling/cuda-fatbin-decompression, ZLUDA and
//!   jiegec/fatbinary, which agree): `u16 kind @0, u16 version @2, u32 headerSize @4,
//!   u64 paddedPayloadSize @8, u32 payloadSize @16, ..., u64 flags @40, ...,
//!   u64 uncompressedSize @56` (64 bytes; some entries have larger headers); the payload follows
//!   the entry header and the next entry follows the padded payload. Flags 0x2000 (LZ4) and
//!   0x8000 (Zstandard) mark a compressed payload.
//! - `__fatBinC_Wrapper_t` (clang's CUDA offload code, ZLUDA): `{i32 magic = 0x466243B1,
//!   i32 version, const u64* data, void* filename_or_fatbins}`: a pointer, not an image.

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
        Format::FatbinWrapper => return Err("a fatbin wrapper (magic 0x466243B1) holds a pointer, not an image".into()),
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
