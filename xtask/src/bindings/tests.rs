//! Unit tests of the generator.

use super::*;

fn pfn(version: u32, ptds: bool, signature: &str) -> Pfn {
    Pfn {
        version,
        ptds,
        signature: signature.to_string(),
    }
}

#[test]
fn a_variant_binds_its_own_version_and_shares_down_to_the_last_change() {
    // cuGraphAddNode: v12020 (no edge data), v12030 and v13040 (same signature).
    let pfns = [pfn(12020, false, "a"), pfn(12030, false, "b"), pfn(13040, false, "b")];
    assert_eq!(
        driver_versions("cuGraphAddNode_v2", 2, "b", &pfns).unwrap(),
        (12030, 12030, 0)
    );
    assert_eq!(
        driver_versions("cuGraphAddNode_v3", 3, "b", &pfns).unwrap(),
        (13040, 12030, 0)
    );
    assert_eq!(
        driver_versions("cuGraphAddNode", 1, "a", &pfns).unwrap(),
        (12020, 12020, 0)
    );
}

#[test]
fn a_declaration_that_disagrees_with_its_typedef_is_refused() {
    let pfns = [pfn(3020, false, "a"), pfn(12050, false, "b")];
    assert!(driver_versions("cuCtxCreate_v2", 2, "a", &pfns)
        .unwrap_err()
        .contains("another signature"));
    assert!(driver_versions("cuCtxCreate_v3", 3, "b", &pfns)
        .unwrap_err()
        .contains("only 2"));
}

#[test]
fn the_per_thread_twin_belongs_to_the_bound_variant() {
    // cuStreamGetCaptureInfo: three variants, each with its own _ptsz twin.
    let pfns = [
        pfn(10010, false, "a"),
        pfn(11030, false, "b"),
        pfn(12030, false, "c"),
        pfn(10010, true, "a"),
        pfn(11030, true, "b"),
        pfn(12030, true, "c"),
    ];
    assert_eq!(driver_versions("x_v2", 2, "b", &pfns).unwrap(), (11030, 11030, 11030));
    // cuMemcpyHtoD_v2: default 3020, per-thread twin 7000.
    let pfns = [pfn(2000, false, "old"), pfn(3020, false, "a"), pfn(7000, true, "a")];
    assert_eq!(
        driver_versions("cuMemcpyHtoD_v2", 2, "a", &pfns).unwrap(),
        (3020, 3020, 7000)
    );
}

#[test]
fn every_unsafe_block_needs_a_marker_and_every_marker_a_block() {
    let marker = safety_marker("it is sound");
    let documented: syn::File = syn::parse2(quote! {
        fn f(p: *const u8) -> u8 {
            #marker
            let x = unsafe { *p };
            #marker
            x + unsafe { *p }
        }
    })
    .unwrap();
    check_unsafe_documented("test", &documented).unwrap();

    let undocumented: syn::File = syn::parse2(quote! {
        fn f(p: *const u8) -> u8 {
            #marker
            let x = unsafe { *p };
            x + unsafe { *p }
        }
    })
    .unwrap();
    let err = check_unsafe_documented("test", &undocumented).unwrap_err();
    assert!(err.contains("no SAFETY comment"), "{err}");

    let two_in_one: syn::File = syn::parse2(quote! {
        fn f(p: *const u8) -> u8 {
            #marker
            let y = unsafe { *p } + unsafe { *p };
            y
        }
    })
    .unwrap();
    assert!(check_unsafe_documented("test", &two_in_one).is_err());

    let stray: syn::File = syn::parse2(quote! {
        fn f() -> u8 {
            #marker
            1
        }
    })
    .unwrap();
    let err = check_unsafe_documented("test", &stray).unwrap_err();
    assert!(err.contains("not followed"), "{err}");
}

#[test]
fn markers_become_wrapped_safety_comments() {
    let why = "word ".repeat(40);
    let marker = safety_marker(why.trim());
    let file: syn::File = syn::parse2(quote! {
        fn f(p: *const u8) -> u8 {
            #marker
            unsafe { *p }
        }
    })
    .unwrap();
    let text = expand_safety_markers(&prettyplease::unparse(&file)).unwrap();
    let comment: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("//")).collect();
    assert!(comment[0].starts_with("    // SAFETY: word word"), "{text}");
    assert!(comment.len() > 1 && comment.iter().all(|l| l.len() <= 100), "{text}");
    assert_eq!(comment.iter().map(|l| l.matches("word").count()).sum::<usize>(), 40);
    assert!(text.contains("    unsafe { *p }"), "{text}");
    assert!(!text.contains(SAFETY_MARKER), "{text}");
}

#[test]
fn zeroing_is_only_documented_for_types_whose_zero_is_valid() {
    let file: syn::File = syn::parse2(quote! {
            pub struct Plain { a: ::core::ffi::c_int, b: [*mut u8; 4], c: Option<unsafe extern "C" fn()>, d: Alias, e: Renamed }
            pub type Alias = Inner;
            pub union Inner { x: u32, y: f32 }
            pub use self::Flags_enum as Renamed;
            pub struct Flags_enum(pub ::core::ffi::c_uint);
            pub struct HasRef { r: &'static u8 }
            pub struct HasFn { f: unsafe extern "C" fn() }
            pub enum RustEnum { A = 1 }
            pub struct HasEnum { e: RustEnum }
        })
        .unwrap();
    let types = TypeTable::new(&file);
    let ty = |name: &str| syn::parse_str::<syn::Type>(name).unwrap();
    zero_is_valid(&types, &ty("Plain"), &mut Vec::new()).unwrap();
    for bad in ["HasRef", "HasFn", "HasEnum", "Unknown"] {
        assert!(zero_is_valid(&types, &ty(bad), &mut Vec::new()).is_err(), "{bad}");
    }
}

#[test]
fn doxygen_becomes_markdown_without_doctests() {
    let doc = tidy_doc(" \\brief Does it.\n\n     indented prose\n push-pop: \\code\n    f(&x);\n \\endcode");
    assert!(doc.lines().any(|l| l == " indented prose"), "{doc}");
    assert!(doc.contains(" ```text\n     f(&x);\n ```"), "{doc}");
    assert!(doc.starts_with(" Does it."), "{doc}");
}

#[test]
fn bare_urls_in_attribute_docs_become_links() {
    assert_eq!(
        writing::link_urls("like nvidia_p2p_get_pages (see https://docs.nvidia.com/cuda/gpudirect-rdma for more)"),
        "like nvidia_p2p_get_pages (see <https://docs.nvidia.com/cuda/gpudirect-rdma> for more)"
    );
    assert_eq!(writing::link_urls("(http://a.example/b)."), "(<http://a.example/b>).");
    assert_eq!(writing::link_urls("no links here"), "no links here");
}
