//! Code image checks: hand-made ELF and fatbin images, every way they can be cut or corrupted,
//! and random bytes.

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
    // A RuntimeError in cuda.core ("Unsupported code type"), for kernels as for globals.
    assert_eq!(err.kind(), crate::ErrorKind::Runtime);
    let err = ObjectCode::from_ltoir(b"x".to_vec(), "l")
        .unwrap()
        .get_kernel("k")
        .unwrap_err();
    assert!(err.to_string().contains("kernels cannot be loaded"), "{err}");
    assert_eq!(err.kind(), crate::ErrorKind::Runtime);
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

#[test]
fn a_symbol_mapping_can_be_given_to_code_of_any_constructor_until_it_is_shared() {
    let mapping = HashMap::from([("k<int>".to_string(), "_Z1kIiEvv".to_string())]);
    let code = ObjectCode::from_ptx(PTX, "p")
        .unwrap()
        .with_symbol_mapping(mapping.clone())
        .unwrap();
    assert_eq!(code.symbol_mapping(), &mapping);
    let shared = code.clone();
    let err = shared.with_symbol_mapping(HashMap::new()).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Runtime);
    assert_eq!(code.symbol_mapping(), &mapping, "the clone kept its mapping");
    assert!(ObjectCode::foreign(None).with_symbol_mapping(mapping).is_err());
}

#[test]
fn an_unknown_source_type_is_a_runtime_error_as_in_cuda_core() {
    // cuda.core's Program raises RuntimeError("Unsupported code_type=...").
    let err = "cuda".parse::<crate::SourceType>().unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Runtime);
    assert!(err.to_string().contains("unsupported code type \"cuda\""), "{err}");
    assert_eq!("ptx".parse::<crate::SourceType>().ok(), Some(crate::SourceType::Ptx));
}
