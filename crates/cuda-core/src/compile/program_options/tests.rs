//! `ProgramOptions` on their own: flags, refusals and the option mapping.

use super::*;
use proptest::prelude::*;

fn arch() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("sm_"), Just("compute_")],
        50u32..130,
        prop_oneof![Just(""), Just("a"), Just("f")],
    )
        .prop_map(|(p, n, s)| format!("{p}{n}{s}"))
}

proptest! {
    /// Every boolean option set gives exactly its flag with the right value, in field order,
    /// and an unset one gives none.
    #[test]
    fn booleans_map_to_their_flags(
        arch in proptest::option::of(arch()),
        rdc in any::<Option<bool>>(), ftz in any::<Option<bool>>(), fma in any::<Option<bool>>(),
        debug in any::<Option<bool>>(), fast in any::<Option<bool>>(), dopt in any::<Option<bool>>(),
    ) {
        let o = ProgramOptions {
            arch: arch.clone(), relocatable_device_code: rdc, ftz, fma, debug, use_fast_math: fast,
            device_code_optimize: dopt, ..Default::default()
        };
        let flags = o.nvrtc_flags().unwrap();
        let mut expected = Vec::new();
        if let Some(a) = &arch { expected.push(format!("-arch={a}")); }
        if let Some(v) = rdc { expected.push(format!("--relocatable-device-code={v}")); }
        if debug == Some(true) { expected.push("--device-debug".to_string()); }
        if let Some(v) = dopt { expected.push(format!("--dopt={}", if v { "on" } else { "off" })); }
        if let Some(v) = ftz { expected.push(format!("--ftz={v}")); }
        if let Some(v) = fma { expected.push(format!("--fmad={v}")); }
        if fast == Some(true) { expected.push("--use_fast_math".to_string()); }
        prop_assert_eq!(flags, expected);
    }

    /// Lists give one flag per item, in order; macros keep their values.
    #[test]
    fn lists_map_one_flag_per_item(
        includes in proptest::collection::vec("[a-z/]{1,12}", 0..4),
        macros in proptest::collection::vec(("[A-Z_]{1,8}", proptest::option::of("[0-9]{1,3}")), 0..4),
        suppress in proptest::collection::vec(1u32..3000, 0..4),
    ) {
        let o = ProgramOptions {
            include_path: includes.clone(), define_macro: macros.clone(), diag_suppress: suppress.clone(),
            ..Default::default()
        };
        let flags = o.nvrtc_flags().unwrap();
        let mut expected: Vec<String> = macros.iter().map(|(n, v)| match v {
            Some(v) => format!("--define-macro={n}={v}"),
            None => format!("--define-macro={n}"),
        }).collect();
        expected.extend(includes.iter().map(|i| format!("--include-path={i}")));
        if !suppress.is_empty() {
            expected.push(format!("--diag-suppress={}", suppress.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
        }
        prop_assert_eq!(flags, expected);
    }

    /// The NVVM mapping uses single-dash flags and a virtual architecture.
    #[test]
    fn nvvm_flags_are_single_dashed(arch in arch(), ftz in any::<Option<bool>>(), opt in any::<Option<bool>>(), lto in any::<bool>()) {
        let o = ProgramOptions { arch: Some(arch.clone()), ftz, device_code_optimize: opt, ..Default::default() };
        let flags = o.nvvm_flags(if lto { "ltoir" } else { "ptx" }).unwrap();
        prop_assert!(flags.iter().all(|f| f.starts_with('-') && !f.starts_with("--")));
        let digits = arch.trim_start_matches("sm_").trim_start_matches("compute_").to_string();
        prop_assert_eq!(&flags[0], &format!("-arch=compute_{digits}"));
        prop_assert_eq!(flags.contains(&"-gen-lto".to_string()), lto);
    }
}

#[test]
fn every_remaining_field_has_its_flag() {
    let o = ProgramOptions {
        extensible_whole_program: Some(true),
        lineinfo: Some(true),
        ptxas_options: vec!["-v".into()],
        max_register_count: Some(32),
        prec_sqrt: Some(false),
        prec_div: Some(true),
        extra_device_vectorization: Some(true),
        link_time_optimization: Some(true),
        gen_opt_lto: Some(true),
        undefine_macro: vec!["NDEBUG".into()],
        pre_include: vec!["a.h".into()],
        no_source_include: Some(true),
        std: Some("c++20".into()),
        builtin_move_forward: Some(false),
        builtin_initializer_list: Some(true),
        disable_warnings: Some(true),
        restrict: Some(true),
        device_as_default_execution_space: Some(true),
        device_int128: Some(true),
        device_float128: Some(true),
        optimization_info: Some("inline".into()),
        no_display_error_number: Some(true),
        diag_error: vec![1, 2],
        diag_warn: vec![3],
        brief_diagnostics: Some(true),
        time: Some("t.csv".into()),
        split_compile: Some(4),
        fdevice_syntax_only: Some(true),
        minimal: Some(true),
        no_cache: Some(true),
        fdevice_time_trace: Some("trace.json".into()),
        frandom_seed: Some("42".into()),
        ofast_compile: Some("mid".into()),
        pch_dir: Some("pchs".into()),
        pch_verbose: Some(true),
        pch_messages: Some(false),
        instantiate_templates_in_pch: Some(true),
        numba_debug: Some(true),
        ..Default::default()
    };
    let err = o.nvrtc_flags().unwrap_err();
    assert!(err.to_string().contains("fdevice_syntax_only"), "{err}");
    let o = ProgramOptions {
        link_time_optimization: None,
        ..o
    };
    let flags = o.nvrtc_flags().unwrap();
    for expected in [
        "--extensible-whole-program",
        "--generate-line-info",
        "--ptxas-options=-v",
        "--maxrregcount=32",
        "--prec-sqrt=false",
        "--prec-div=true",
        "--extra-device-vectorization",
        "--gen-opt-lto",
        "--undefine-macro=NDEBUG",
        "--pre-include=a.h",
        "--no-source-include",
        "--std=c++20",
        "--builtin-move-forward=false",
        "--builtin-initializer-list=true",
        "--disable-warnings",
        "--restrict",
        "--device-as-default-execution-space",
        "--device-int128",
        "--device-float128",
        "--optimization-info=inline",
        "--no-display-error-number",
        "--diag-error=1,2",
        "--diag-warn=3",
        "--brief-diagnostics=true",
        "--time=t.csv",
        "--split-compile=4",
        "--fdevice-syntax-only",
        "--minimal",
        "--no-cache",
        "--fdevice-time-trace=trace.json",
        "--frandom-seed=42",
        "--Ofast-compile=mid",
        "--pch-dir=pchs",
        "--pch-verbose=true",
        "--pch-messages=false",
        "--instantiate-templates-in-pch=true",
        "--numba-debug",
    ] {
        assert!(flags.iter().any(|f| f == expected), "{expected} missing from {flags:?}");
    }
    assert_eq!(o.side_effects(), Some("time"));
    let pch = ProgramOptions {
        pch: Some(true),
        create_pch: Some("x".into()),
        ..Default::default()
    };
    assert!(pch.validate().is_err());
}

#[test]
fn strings_with_a_nul_byte_are_rejected_naming_the_option() {
    let check = |o: ProgramOptions, needle: &str| {
        for err in [o.validate().unwrap_err(), o.nvrtc_flags().unwrap_err()] {
            assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
            let text = err.to_string();
            assert!(text.contains("NUL") && text.contains(needle), "{text} lacks {needle}");
        }
    };
    check(
        ProgramOptions {
            include_path: vec!["/opt/inc\0lude".into()],
            ..Default::default()
        },
        "include_path",
    );
    check(
        ProgramOptions {
            define_macro: vec![("N".into(), Some("1\0x".into()))],
            ..Default::default()
        },
        "define_macro N",
    );
    check(
        ProgramOptions {
            define_macro: vec![("A\0B".into(), None)],
            ..Default::default()
        },
        "define_macro name",
    );
    check(
        ProgramOptions {
            ptxas_options: vec!["-v\0".into()],
            ..Default::default()
        },
        "ptxas_options",
    );
    check(
        ProgramOptions {
            name: Some("prog\0".into()),
            ..Default::default()
        },
        "name",
    );
    check(
        ProgramOptions {
            pch_dir: Some("dir\0".into()),
            ..Default::default()
        },
        "pch_dir",
    );
    let nvvm = ProgramOptions {
        extra_sources: vec![("mod\0ule".into(), vec![0, 1, 2])],
        ..Default::default()
    };
    let err = nvvm.nvvm_flags("ptx").unwrap_err();
    assert!(err.to_string().contains("extra_sources module name"), "{err}");
    // Binary module contents may hold NUL bytes; only names may not.
    let fine = ProgramOptions {
        extra_sources: vec![("module".into(), vec![0, 1, 2])],
        ..Default::default()
    };
    fine.nvvm_flags("ptx").unwrap();
}
