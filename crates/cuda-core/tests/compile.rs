//! The compile toolchain on the CPU, through NVIDIA's wheels (`cargo xtask test` installs them).

use cuda_core::{
    CacheEntry, CodeType, CudaError, FileStreamProgramCache, InMemoryProgramCache, Linker, LinkerOptions, ObjectCode,
    Program, ProgramCache, ProgramOptions, SourceType,
};
use std::time::Instant;

fn toolchain() -> bool {
    let lib = cuda_sys::LibraryId::Nvrtc.library();
    match lib.open() {
        Ok(()) => true,
        Err(e) if std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_some() => panic!("NVRTC must load: {e}"),
        Err(e) => {
            eprintln!("skipping: {e} (run cargo xtask test)");
            false
        }
    }
}

fn opts(arch: &str) -> ProgramOptions {
    ProgramOptions {
        arch: Some(arch.into()),
        ..Default::default()
    }
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"#;

#[test]
fn cxx_to_ptx_cubin_and_ltoir_for_several_architectures() {
    if !toolchain() {
        return;
    }
    for arch in ["sm_75", "sm_80", "sm_90", "sm_100"] {
        let mut p = Program::new(SAXPY, SourceType::Cxx, opts(arch)).unwrap();
        assert_eq!(p.backend(), "NVRTC");
        let cubin = p.compile(CodeType::Cubin, &[]).unwrap();
        assert_eq!(cubin.code_type(), CodeType::Cubin);
        assert_eq!(&cubin.bytes().unwrap()[..4], b"\x7fELF", "{arch}");
        let ptx = p.compile(CodeType::Ptx, &[]).unwrap();
        let text = String::from_utf8_lossy(&ptx.bytes().unwrap()).into_owned();
        assert!(
            text.contains(".entry saxpy") && text.contains(&format!(".target {arch}")),
            "{arch}"
        );
        let ltoir = p.compile(CodeType::Ltoir, &[]).unwrap();
        assert!(!ltoir.bytes().unwrap().is_empty());
    }
}

#[test]
fn template_name_expressions_give_lowered_names() {
    if !toolchain() {
        return;
    }
    let source = r#"
        template <typename T> __global__ void fill(T* out, T value) { out[threadIdx.x] = value; }
        namespace ops { __global__ void twice(float* x) { x[threadIdx.x] *= 2; } }"#;
    let mut p = Program::new(source, SourceType::Cxx, opts("sm_90")).unwrap();
    let code = p
        .compile(CodeType::Cubin, &["fill<float>", "fill<int>", "ops::twice"])
        .unwrap();
    let m = code.symbol_mapping();
    assert_eq!(m["fill<float>"], "_Z4fillIfEvPT_S0_");
    assert_eq!(m["fill<int>"], "_Z4fillIiEvPT_S0_");
    assert_eq!(m["ops::twice"], "_ZN3ops5twiceEPf");
}

#[test]
fn a_failed_compile_carries_the_log() {
    if !toolchain() {
        return;
    }
    let source = r#"extern "C" __global__ void k(int* x) { *x = not_a_real_symbol; }"#;
    let mut p = Program::new(source, SourceType::Cxx, opts("sm_90")).unwrap();
    let err = p.compile(CodeType::Cubin, &[]).unwrap_err();
    assert!(err.is_compile_error());
    let text = err.to_string();
    assert!(text.contains("identifier \"not_a_real_symbol\" is undefined"), "{text}");
    assert!(
        text.starts_with("NVRTC compilation of default_program failed: NVRTC_ERROR_COMPILATION"),
        "{text}"
    );
    assert!(p.log().contains("not_a_real_symbol"));
}

#[test]
fn invalid_options_are_rejected_before_the_compiler_runs() {
    let check = |options: ProgramOptions, target: CodeType, needle: &str| {
        let err = Program::new(SAXPY, SourceType::Cxx, options)
            .and_then(|mut p| p.compile(target, &[]))
            .unwrap_err();
        assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle}");
    };
    check(opts("sm90"), CodeType::Cubin, "not of the form");
    check(opts("compute_90"), CodeType::Cubin, "real architecture");
    check(
        ProgramOptions {
            link_time_optimization: Some(false),
            ..opts("sm_90")
        },
        CodeType::Ltoir,
        "link_time_optimization",
    );
    check(
        ProgramOptions {
            std: Some("c++98".into()),
            ..opts("sm_90")
        },
        CodeType::Ptx,
        "std",
    );
    check(
        ProgramOptions {
            max_register_count: Some(0),
            ..opts("sm_90")
        },
        CodeType::Ptx,
        "max_register_count",
    );
    check(
        ProgramOptions {
            create_pch: Some("a.pch".into()),
            use_pch: Some("b.pch".into()),
            ..opts("sm_90")
        },
        CodeType::Ptx,
        "create_pch and use_pch",
    );
    check(
        ProgramOptions {
            use_libdevice: Some(true),
            ..opts("sm_90")
        },
        CodeType::Ptx,
        "NVVM IR programs only",
    );
    let err = Program::new(SAXPY, SourceType::Cxx, opts("sm_90"))
        .unwrap()
        .compile(CodeType::Fatbin, &[])
        .unwrap_err();
    assert!(err.to_string().contains("compiles to ptx, cubin, ltoir"), "{err}");
    let err = Program::new("x", SourceType::Nvvm, opts("sm_90"))
        .unwrap()
        .compile(CodeType::Ptx, &["f"])
        .unwrap_err();
    assert!(err.to_string().contains("name expressions"), "{err}");
    let nvvm = ProgramOptions {
        std: Some("c++17".into()),
        ..opts("sm_90")
    };
    let err = Program::new("x", SourceType::Nvvm, nvvm)
        .unwrap()
        .compile(CodeType::Ptx, &[])
        .unwrap_err();
    assert!(err.to_string().contains("NVVM backend takes only"), "{err}");
    assert!("fortran"
        .parse::<SourceType>()
        .unwrap_err()
        .to_string()
        .contains("unsupported code type"));
}

/// NVVM IR 2.0 (typed pointers) calling libdevice's `__nv_sinf`.
const NVVM_IR: &str = r#"
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_sinf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @sine(float* %x) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %p = getelementptr float, float* %x, i32 %tid
  %v = load float, float* %p
  %s = call float @__nv_sinf(float %v)
  store float %s, float* %p
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (float*)* @sine, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
"#;

#[test]
fn nvvm_ir_to_ptx_with_libdevice() {
    if !toolchain() || cuda_sys::LibraryId::Nvvm.library().open().is_err() {
        assert!(
            std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_none(),
            "libNVVM must load"
        );
        return;
    }
    // Without libdevice the PTX still calls __nv_sinf, as an external function nothing provides.
    let without = Program::new(NVVM_IR, SourceType::Nvvm, opts("sm_90"))
        .unwrap()
        .compile(CodeType::Ptx, &[])
        .unwrap();
    assert!(
        String::from_utf8_lossy(&without.bytes().unwrap()).contains(".extern .func"),
        "{without:?}"
    );
    // A program NVVM cannot parse fails with its log.
    let err = Program::new("define void @f( {", SourceType::Nvvm, opts("sm_90"))
        .unwrap()
        .compile(CodeType::Ptx, &[]);
    let err = err.unwrap_err();
    assert!(
        err.is_compile_error() && err.to_string().starts_with("NVVM compilation"),
        "{err}"
    );
    let options = ProgramOptions {
        use_libdevice: Some(true),
        ..opts("sm_90")
    };
    let mut p = Program::new(NVVM_IR, SourceType::Nvvm, options).unwrap();
    assert_eq!(p.backend(), "NVVM");
    let ptx = p.compile(CodeType::Ptx, &[]).unwrap();
    let text = String::from_utf8(ptx.bytes().unwrap().to_vec()).unwrap();
    assert!(text.contains(".entry sine") && text.contains(".target sm_90"), "{text}");
    assert!(!text.contains("__nv_sinf"), "libdevice was linked in");
    let ltoir = p.compile(CodeType::Ltoir, &[]).unwrap();
    assert!(!ltoir.bytes().unwrap().is_empty());
}

#[test]
fn two_ltoir_objects_link_to_one_cubin() {
    if !toolchain() {
        return;
    }
    let lto = ProgramOptions {
        relocatable_device_code: Some(true),
        ..opts("sm_90")
    };
    let helper = r#"__device__ float scale(float x) { return 3.0f * x; }"#;
    let kernel = r#"
        __device__ float scale(float x);
        extern "C" __global__ void apply(float* x) { x[threadIdx.x] = scale(x[threadIdx.x]); }"#;
    let a = Program::new(helper, SourceType::Cxx, lto.clone())
        .unwrap()
        .compile(CodeType::Ltoir, &[])
        .unwrap();
    let b = Program::new(kernel, SourceType::Cxx, lto)
        .unwrap()
        .compile(CodeType::Ltoir, &[])
        .unwrap();
    let options = LinkerOptions {
        arch: Some("sm_90".into()),
        link_time_optimization: Some(true),
        ..Default::default()
    };
    let mut linker = Linker::new(&[&a, &b], options.clone()).unwrap();
    assert_eq!(linker.backend().as_str(), "nvJitLink");
    let cubin = linker.link(CodeType::Cubin).unwrap();
    assert_eq!(&cubin.bytes().unwrap()[..4], b"\x7fELF");
    // Without the helper, the link fails and says why.
    let err = Linker::new(&[&b], options)
        .and_then(|mut l| l.link(CodeType::Cubin))
        .unwrap_err();
    assert!(matches!(err, CudaError::Link { .. }), "{err}");
    assert!(
        err.to_string().contains("scale") || err.to_string().contains("_Z5scalef"),
        "{err}"
    );
}

#[test]
fn relocatable_device_code_links_across_two_programs() {
    if !toolchain() {
        return;
    }
    let rdc = ProgramOptions {
        relocatable_device_code: Some(true),
        ..opts("sm_90")
    };
    let a = Program::new(r#"__device__ int offset() { return 7; }"#, SourceType::Cxx, rdc.clone())
        .unwrap()
        .compile(CodeType::Ptx, &[])
        .unwrap();
    let b = Program::new(
        r#"__device__ int offset();
           extern "C" __global__ void add(int* x) { x[threadIdx.x] += offset(); }"#,
        SourceType::Cxx,
        rdc,
    )
    .unwrap()
    .compile(CodeType::Cubin, &[])
    .unwrap();
    let mut linker = Linker::new(
        &[&a, &b],
        LinkerOptions {
            arch: Some("sm_90".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let cubin = linker.link(CodeType::Cubin).unwrap();
    assert_eq!(&cubin.bytes().unwrap()[..4], b"\x7fELF");
    // PTX through the linker: a PTX program.
    let ptx = String::from_utf8(a.bytes().unwrap().to_vec()).unwrap();
    let mut p = Program::new(ptx.trim_end_matches('\0'), SourceType::Ptx, opts("sm_90")).unwrap();
    assert_eq!(p.backend(), "nvJitLink");
    assert!(p.compile(CodeType::Ptx, &[]).is_err(), "PTX to PTX needs LTO input");
}

#[test]
fn a_cache_hit_returns_the_stored_bytes_without_compiling() {
    if !toolchain() {
        return;
    }
    let cache = InMemoryProgramCache::new(None);
    let mut p = Program::new(SAXPY, SourceType::Cxx, opts("sm_90")).unwrap();
    let started = Instant::now();
    let cold = p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
    let cold_time = started.elapsed();
    let started = Instant::now();
    let hot = p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
    let hot_time = started.elapsed();
    assert_eq!(cold.bytes().unwrap(), hot.bytes().unwrap());
    println!("cold compile {cold_time:?}, cache hit {hot_time:?}");
    assert!(hot_time < cold_time);
    // What the cache holds is what comes back: the compiler is not asked again.
    let key = p.cache_key(CodeType::Cubin, &[]).unwrap();
    // (A cubin for another architecture here: what is planted must still be a valid image.)
    let planted_cubin = Program::new(SAXPY, SourceType::Cxx, opts("sm_80"))
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .bytes()
        .unwrap()
        .into_owned();
    let planted = CacheEntry {
        code: planted_cubin.clone(),
        symbol_mapping: Default::default(),
    };
    cache.put(&key, &planted).unwrap();
    assert_eq!(
        &*p.compile_cached(CodeType::Cubin, &[], &cache).unwrap().bytes().unwrap(),
        &planted_cubin[..]
    );
    // An entry that is no valid image never reaches the driver: it is a miss, compiled again
    // and stored in its place.
    let garbage = CacheEntry {
        code: b"planted".to_vec(),
        symbol_mapping: Default::default(),
    };
    cache.put(&key, &garbage).unwrap();
    let recompiled = p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
    assert_eq!(recompiled.bytes().unwrap(), cold.bytes().unwrap());
    assert_eq!(cache.get(&key).unwrap().unwrap().code, &*cold.bytes().unwrap());
    assert!(ObjectCode::from_cubin(b"planted".to_vec(), "planted")
        .unwrap_err()
        .to_string()
        .contains("not an ELF image"));
    // Anything that changes the output changes the key.
    let other = |o: ProgramOptions| {
        Program::new(SAXPY, SourceType::Cxx, o)
            .unwrap()
            .cache_key(CodeType::Cubin, &[])
            .unwrap()
    };
    assert_ne!(other(opts("sm_80")), key);
    assert_ne!(
        other(ProgramOptions {
            use_fast_math: Some(true),
            ..opts("sm_90")
        }),
        key
    );
    assert_ne!(p.cache_key(CodeType::Ptx, &[]).unwrap(), key);
    assert_ne!(p.cache_key(CodeType::Cubin, &["saxpy"]).unwrap(), key);
    let err = Program::new(
        SAXPY,
        SourceType::Cxx,
        ProgramOptions {
            time: Some("t.csv".into()),
            ..opts("sm_90")
        },
    )
    .unwrap()
    .cache_key(CodeType::Cubin, &[])
    .unwrap_err();
    assert!(err.to_string().contains("cannot be cached"));
}

#[test]
fn the_disk_cache_keeps_name_mappings_and_recovers_from_damage() {
    if !toolchain() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = FileStreamProgramCache::new(Some(dir.path().into()), Some(64 << 20)).unwrap();
    let source = "template <int N> __global__ void k(int* x) { x[0] = N; }";
    let mut p = Program::new(source, SourceType::Cxx, opts("sm_90")).unwrap();
    let first = p.compile_cached(CodeType::Cubin, &["k<3>"], &cache).unwrap();
    // A fresh handle on the same folder, as another process would have.
    let again = FileStreamProgramCache::new(Some(dir.path().into()), None).unwrap();
    let hit = p.compile_cached(CodeType::Cubin, &["k<3>"], &again).unwrap();
    assert_eq!(hit.symbol_mapping()["k<3>"], "_Z1kILi3EEvPi");
    assert_eq!(first.bytes().unwrap(), hit.bytes().unwrap());
    // Damage every entry: the next compile recompiles and repairs the cache.
    for shard in std::fs::read_dir(dir.path().join("entries")).unwrap() {
        for entry in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            let n = bytes.len();
            bytes[n / 2] ^= 0x55;
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let repaired = p.compile_cached(CodeType::Cubin, &["k<3>"], &again).unwrap();
    assert_eq!(repaired.bytes().unwrap(), first.bytes().unwrap());
    assert_eq!(again.len().unwrap(), 1);
    assert_eq!(
        again
            .get(&p.cache_key(CodeType::Cubin, &["k<3>"]).unwrap())
            .unwrap()
            .unwrap()
            .code,
        *first.bytes().unwrap()
    );
}

#[test]
fn object_code_from_files_and_errors_for_kernels_of_unloadable_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.ltoir");
    std::fs::write(&path, b"not really").unwrap();
    let code = ObjectCode::from_file(&path, CodeType::Ltoir, "k").unwrap();
    assert_eq!(&*code.bytes().unwrap(), b"not really");
    let err = code.get_kernel("k").unwrap_err();
    assert!(err.to_string().contains("cannot be loaded from ltoir"), "{err}");
    assert!(ObjectCode::from_file(dir.path().join("missing"), CodeType::Cubin, "m").is_err());
    assert!(ObjectCode::from_cubin(Vec::new(), "empty").is_err());
    let ptx = ObjectCode::from_ptx(".version 8.0", "p").unwrap();
    assert_eq!(
        ptx.bytes().unwrap().last(),
        Some(&0),
        "PTX is kept NUL-terminated for the driver"
    );
    assert_eq!("fatbin".parse::<CodeType>().unwrap(), CodeType::Fatbin);
}

/// Real NVRTC output passes the checks `ObjectCode` makes before the driver reads an image (which
/// it does without a length), and a cubin cut anywhere short of its end is refused.
#[test]
fn real_cubins_and_ptx_pass_the_image_checks_and_cut_cubins_do_not() {
    if !toolchain() {
        return;
    }
    let source = r#"
        __device__ int counter;
        __constant__ float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
        extern "C" __global__ void first(float* x, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = table[i % 4] * x[i];
        }
        extern "C" __global__ void second(float* x, unsigned n) {
            __shared__ float tile[256];
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            tile[threadIdx.x] = i < n ? x[i] : 0.0f;
            __syncthreads();
            if (i < n) x[i] = tile[255 - threadIdx.x];
            if (i == 0) atomicAdd(&counter, 1);
        }"#;
    // Relocatable code has CUDA sections that, like SHT_NOBITS, have a size but no bytes.
    for (arch, rdc) in [
        ("sm_75", false),
        ("sm_80", true),
        ("sm_90", false),
        ("sm_90", true),
        ("sm_100", false),
    ] {
        let options = ProgramOptions {
            relocatable_device_code: Some(rdc),
            ..opts(arch)
        };
        let mut p = Program::new(source, SourceType::Cxx, options).unwrap();
        let cubin = p.compile(CodeType::Cubin, &[]).unwrap().bytes().unwrap().into_owned();
        ObjectCode::from_cubin(cubin.clone(), "whole").unwrap();
        // The driver goes by the bytes, so an ELF labelled fatbin is accepted too.
        ObjectCode::from_fatbin(cubin.clone(), "whole").unwrap();
        for n in 0..cubin.len() {
            match ObjectCode::from_cubin(cubin[..n].to_vec(), "cut") {
                Err(CudaError::InvalidArgument(_)) => {}
                other => panic!("{arch}: the cubin cut to {n} of {} bytes gave {other:?}", cubin.len()),
            }
        }
        let ptx = p.compile(CodeType::Ptx, &[]).unwrap().bytes().unwrap().into_owned();
        ObjectCode::from_ptx(ptx.clone(), "ptx").unwrap();
        let text: Vec<u8> = ptx.iter().copied().take_while(|&c| c != 0).collect();
        assert_eq!(
            ObjectCode::from_ptx(text.clone(), "ptx")
                .unwrap()
                .bytes()
                .unwrap()
                .last(),
            Some(&0)
        );
        let err = ObjectCode::from_cubin(text, "ptx as cubin").unwrap_err();
        assert!(
            matches!(err, CudaError::InvalidArgument(_)) && err.to_string().contains("labelled cubin but not an ELF"),
            "{err}"
        );
    }
}

/// Run by `nvrtc_12_compiles_through_the_same_api` in a child whose only NVRTC is CUDA 12.9's.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_nvrtc_12_program() {
    if std::env::var_os("CUDA_RS_CHILD_NVRTC_12").is_none() {
        return;
    }
    let mut p = Program::new(SAXPY, SourceType::Cxx, opts("sm_90")).unwrap();
    let cubin = p.compile(CodeType::Cubin, &[]).unwrap();
    assert_eq!(&cubin.bytes().unwrap()[..4], b"\x7fELF");
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to locals.
    unsafe { cuda_sys::nvrtc::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .unwrap();
    println!("compiled with NVRTC {major}.{minor}");
}

#[test]
fn nvrtc_12_compiles_through_the_same_api() {
    let Some(venv) = std::env::var_os("VIRTUAL_ENV") else {
        return;
    };
    let site = cuda_pathfinder::site_packages_dirs()
        .into_iter()
        .find(|d| d.starts_with(&venv));
    let Some(nvrtc12) = site.map(|s| s.join("nvidia/cuda_nvrtc")).filter(|d| d.is_dir()) else {
        assert!(
            std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_none(),
            "nvidia-cuda-nvrtc-cu12 is missing"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let child_site = tmp.path().join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&child_site).unwrap();
    std::os::unix::fs::symlink(&nvrtc12, child_site.join("cuda_nvrtc")).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_nvrtc_12_program", "--nocapture", "--include-ignored"])
        .env("VIRTUAL_ENV", tmp.path())
        .env("HOME", tmp.path())
        .env("PATH", "/nonexistent")
        .env("CUDA_RS_CHILD_NVRTC_12", "1")
        .env_remove("CONDA_PREFIX")
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("compiled with NVRTC 12.9"),
        "{text}"
    );
}

/// Options that name files outside the program: the key sees their names, not their contents, so
/// caching wants a digest of the files (cuda.core's `extra_digest`); a changed digest is a new key.
#[test]
fn headers_on_the_include_path_need_a_digest_to_be_cached() {
    if !toolchain() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("twice.cuh"),
        "#pragma once\n#define TWICE(x) ((x) + (x))\n",
    )
    .unwrap();
    let source = "#include \"twice.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = TWICE(x[0]); }";
    let options = ProgramOptions {
        include_path: vec![dir.path().display().to_string()],
        ..opts("sm_90")
    };
    let mut p = Program::new(source, SourceType::Cxx, options).unwrap();
    let err = p.cache_key(CodeType::Ptx, &[]).unwrap_err();
    assert!(
        err.to_string().contains("include_path") && err.to_string().contains("extra_digest"),
        "{err}"
    );
    let cache = InMemoryProgramCache::new(None);
    assert!(p.compile_cached(CodeType::Ptx, &[], &cache).is_err());
    let one = p.cache_key_with(CodeType::Ptx, &[], Some(b"header v1")).unwrap();
    let two = p.cache_key_with(CodeType::Ptx, &[], Some(b"header v2")).unwrap();
    assert_ne!(one, two, "the digest is part of the key");
    let code = p
        .compile_cached_with(CodeType::Ptx, &[], &cache, Some(b"header v1"))
        .unwrap();
    assert!(!code.bytes().unwrap().is_empty());
    assert!(
        cache.get(&one).unwrap().is_some(),
        "stored under the key with the digest"
    );
    // Without such options no digest is needed.
    assert!(Program::new(SAXPY, SourceType::Cxx, opts("sm_90"))
        .unwrap()
        .cache_key(CodeType::Ptx, &[])
        .is_ok());
}

#[test]
fn a_precompiled_header_reports_its_status() {
    if !toolchain() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("common.cuh");
    std::fs::write(
        &header,
        "#pragma once\ntemplate <typename T> __device__ T twice(T x) { return x + x; }\n",
    )
    .unwrap();
    let source = "#include \"common.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = twice(x[0]); }";
    let pch = dir.path().join("common.pch");
    let options = ProgramOptions {
        include_path: vec![dir.path().display().to_string()],
        create_pch: Some(pch.display().to_string()),
        ..opts("sm_90")
    };
    let mut p = Program::new(source, SourceType::Cxx, options).unwrap();
    p.compile(CodeType::Ptx, &[]).unwrap();
    assert_eq!(p.pch_status(), Some(cuda_core::PchStatus::Created), "{}", p.log());
    assert!(pch.is_file());
    let err = p.cache_key(CodeType::Ptx, &[]).unwrap_err();
    assert!(err.to_string().contains("create_pch"), "{err}");
}

/// A string with a NUL byte is an error naming it, found before any library call (so no toolchain
/// is needed), never a flag, name or path silently emptied.
#[test]
fn strings_with_a_nul_byte_are_rejected_before_any_library_call() {
    let rejected = |err: CudaError, needle: &str| {
        assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("NUL byte") && text.contains(needle),
            "{text} lacks {needle}"
        );
    };
    let program = |options: ProgramOptions| Program::new(SAXPY, SourceType::Cxx, options).err().unwrap();
    rejected(
        program(ProgramOptions {
            include_path: vec!["/opt/include".into(), "/opt/in\0clude".into()],
            ..opts("sm_90")
        }),
        "include_path",
    );
    rejected(
        program(ProgramOptions {
            define_macro: vec![("N".into(), Some("4\0x".into()))],
            ..opts("sm_90")
        }),
        "define_macro N",
    );
    rejected(
        program(ProgramOptions {
            ptxas_options: vec!["-v\0".into()],
            ..opts("sm_90")
        }),
        "ptxas_options",
    );
    let ptx = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n", "p").unwrap();
    for backend in [cuda_core::LinkerBackend::NvJitLink, cuda_core::LinkerBackend::Driver] {
        let options = LinkerOptions {
            arch: Some("sm_90".into()),
            ptxas_options: vec!["-O3".into(), "-v\0-O0".into()],
            ..Default::default()
        };
        rejected(
            Linker::with_backend(&[&ptx], options, backend).err().unwrap(),
            "ptxas_options",
        );
        let named = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n", "bad\0name").unwrap();
        let options = LinkerOptions {
            arch: Some("sm_90".into()),
            ..Default::default()
        };
        rejected(
            Linker::with_backend(&[&ptx, &named], options, backend).err().unwrap(),
            "ObjectCode name",
        );
    }
}
