//! cuda.core parity, round 3 (issue 33 items 1, 2, 5, 7): every kernel attribute and the
//! occupancy queries against the device's properties, `Kernel::from_handle`, the handles of
//! programs, linkers and object codes (and `ObjectCode::get_module`), equality and hashing,
//! LTO-IR linking (incremental where nvJitLink has it), the precompiled-header heap retry and
//! the source written for cuda-gdb. GPU tests are `#[ignore]`d outside the bundle; the CPU
//! tests run everywhere.

use cuda_core::{
    Buffer, CodeType, CudaError, Device, Kernel, LaunchConfig, Linker, LinkerBackend, LinkerHandle, LinkerOptions,
    ObjectCode, PchStatus, Program, ProgramHandle, ProgramOptions, SourceType, Stream,
};
use cuda_sys::{driver, nvjitlink, nvrtc};
use cuda_tests::skip_part;
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

/// The user warnings `f` raises on this thread (the handler is process-wide; this test binary's
/// other tests raise none).
fn user_warnings<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let thread = std::thread::current().id();
    let previous = cuda_core::set_warning_handler(Some(Arc::new(move |w: &cuda_core::Warning| {
        if w.category() == cuda_core::WarningCategory::User && std::thread::current().id() == thread {
            sink.lock().unwrap().push(w.message().to_string());
        }
    })));
    let result = f();
    cuda_core::set_warning_handler(previous);
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

/// A kernel with 1 KiB of static shared memory and 256 bytes of constant memory:
/// `out[i] = table[i % 64] + i`.
const ATTRIBUTES: &str = r#"
__constant__ float table[64];
extern "C" __global__ void shared_and_constant(float* out, unsigned n) {
    __shared__ float tile[256];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x % 256] = table[i % 64] + (float)i;
    __syncthreads();
    if (i < n) out[i] = tile[threadIdx.x % 256];
}"#;

/// `x[i] = x[i] * 2 + 1`.
const TWICE: &str = r#"
extern "C" __global__ void twice(int* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 2 + 1;
}"#;

/// A kernel calling a device function defined in another unit.
const CALLER: &str = r#"
extern "C" __device__ int parity_helper(int);
extern "C" __global__ void parity_caller(int* result) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *result = parity_helper(40);
}"#;

const HELPER: &str = r#"extern "C" __device__ int parity_helper(int x) { return x + 2; }"#;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

fn arch(d: &Device) -> String {
    format!("sm_{}", d.arch().unwrap())
}

fn cc(d: &Device) -> i32 {
    d.arch().unwrap().parse().unwrap()
}

fn compile(source: &str, options: ProgramOptions, target: CodeType) -> ObjectCode {
    Program::new(source, SourceType::Cxx, options)
        .unwrap()
        .compile(target, &[])
        .unwrap()
}

fn cubin(d: &Device, source: &str) -> ObjectCode {
    let options = ProgramOptions {
        arch: Some(arch(d)),
        ..Default::default()
    };
    compile(source, options, CodeType::Cubin)
}

fn hash_of<T: std::hash::Hash>(state: &RandomState, value: &T) -> u64 {
    state.hash_one(value)
}

/// Runs `twice` (from any kernel handle to it) on 0..n and checks the result.
fn run_twice(kernel: &Kernel, s: &Stream, d: &Device) {
    const N: usize = 512;
    let input: Vec<i32> = (0..N as i32).collect();
    let buffer = d.allocate(N * 4, s).unwrap();
    buffer.copy_from_host(&input, s).unwrap();
    // SAFETY: `twice` takes (int*, unsigned); the buffer holds N ints and outlives the launch
    // (to_vec below waits for the stream).
    unsafe { cuda_core::launch(s, &LaunchConfig::new(2, 256), kernel, (buffer.handle(), N as u32)) }.unwrap();
    let out = buffer.to_vec::<i32>(s).unwrap();
    assert_eq!(out, input.iter().map(|x| x * 2 + 1).collect::<Vec<_>>());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_kernel_attribute_reads_what_the_kernel_and_device_say() {
    let (d, _s) = setup();
    let code = cubin(&d, ATTRIBUTES);
    let k = code.get_kernel("shared_and_constant").unwrap();
    let p = d.properties();
    let max_threads = k.max_threads_per_block(&d).unwrap();
    assert!(max_threads > 0 && max_threads <= p.max_threads_per_block().unwrap());
    assert_eq!(k.shared_size_bytes(&d).unwrap(), 1024);
    assert!(
        k.const_size_bytes(&d).unwrap() >= 256,
        "{}",
        k.const_size_bytes(&d).unwrap()
    );
    assert!(k.local_size_bytes(&d).unwrap() >= 0);
    assert!(k.num_regs(&d).unwrap() > 0);
    assert_eq!(k.binary_version(&d).unwrap(), cc(&d));
    let ptx = k.ptx_version(&d).unwrap();
    assert!(ptx == 0 || ptx == cc(&d), "ptx_version {ptx}");
    // Only the default is checked: on an H100 with driver 580, a kernel compiled with
    // `--def-load-cache=ca` (ptxas' -dlcm=ca) still read false.
    assert!(!k.cache_mode_ca(&d).unwrap());
    assert!(!k.cluster_size_must_be_set(&d).unwrap());
    assert_eq!(k.required_cluster_width(&d).unwrap(), 0);
    assert_eq!(k.required_cluster_height(&d).unwrap(), 0);
    assert_eq!(k.required_cluster_depth(&d).unwrap(), 0);
    assert!(!k.non_portable_cluster_size_allowed(&d).unwrap());
    assert_eq!(k.cluster_scheduling_policy_preference(&d).unwrap(), 0);
    // The dynamic shared memory limit: 48 KiB by default, raised up to the device's opt-in limit
    // minus the static shared memory.
    let default_dynamic = k.max_dynamic_shared_size_bytes(&d).unwrap();
    assert!(default_dynamic <= 48 * 1024, "{default_dynamic}");
    let optin = p.max_shared_memory_per_block_optin().unwrap() as u32 - 1024;
    k.set_max_dynamic_shared_size_bytes(optin, &d).unwrap();
    assert_eq!(k.max_dynamic_shared_size_bytes(&d).unwrap(), optin);
    let err = k.set_max_dynamic_shared_size_bytes(optin + 4096, &d).unwrap_err();
    assert!(matches!(err, CudaError::Driver { .. }), "{err}");
    // The carveout: a percentage, or -1.
    k.set_preferred_shared_memory_carveout(50, &d).unwrap();
    assert_eq!(k.preferred_shared_memory_carveout(&d).unwrap(), 50);
    let err = k.set_preferred_shared_memory_carveout(101, &d).unwrap_err();
    assert!(err.to_string().contains("not a percentage"), "{err}");
    // Cluster attributes (compute capability 9.0+).
    if cc(&d) >= 90 {
        k.set_non_portable_cluster_size_allowed(true, &d).unwrap();
        assert!(k.non_portable_cluster_size_allowed(&d).unwrap());
        k.set_cluster_scheduling_policy_preference(
            driver::CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_SPREAD,
            &d,
        )
        .unwrap();
        assert_eq!(k.cluster_scheduling_policy_preference(&d).unwrap(), 1);
        k.set_required_cluster_width(2, &d).unwrap();
        k.set_required_cluster_height(1, &d).unwrap();
        k.set_required_cluster_depth(1, &d).unwrap();
        assert_eq!(k.required_cluster_width(&d).unwrap(), 2);
        assert_eq!(k.required_cluster_height(&d).unwrap(), 1);
        assert_eq!(k.required_cluster_depth(&d).unwrap(), 1);
    } else {
        skip_part("cluster attributes need compute capability 9.0");
    }
    // The generic getter agrees with the named ones.
    assert_eq!(
        k.attribute(driver::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS, &d)
            .unwrap(),
        k.num_regs(&d).unwrap()
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn occupancy_queries_agree_with_each_other_and_the_device() {
    let (d, s) = setup();
    let code = cubin(&d, TWICE);
    let k = code.get_kernel("twice").unwrap();
    let p = d.properties();
    // A shared-memory function of the block size: the driver asks it for the sizes it weighs.
    let asked = std::cell::RefCell::new(Vec::new());
    let per_thread = |block: u32| {
        asked.borrow_mut().push(block);
        block as usize * 96
    };
    let best = k.max_potential_block_size_with(&d, per_thread, 0).unwrap();
    let asked = asked.into_inner();
    assert!(!asked.is_empty(), "the shared-memory function was never called");
    let limit = p.max_threads_per_block().unwrap() as u32;
    assert!(asked.iter().all(|b| *b > 0 && *b <= limit), "{asked:?}");
    assert!(best.max_block_size > 0 && best.max_block_size <= limit);
    assert!(best.min_grid_size > 0);
    let needed = best.max_block_size as usize * 96;
    assert!(
        k.max_active_blocks_per_multiprocessor(&d, best.max_block_size, needed)
            .unwrap()
            >= 1
    );
    // A constant function answers as the constant form.
    let constant = k.max_potential_block_size_with(&d, |_| 4096, 0).unwrap();
    assert_eq!(constant, k.max_potential_block_size(&d, 4096, 0).unwrap());
    // A block size limit is kept.
    let limited = k.max_potential_block_size_with(&d, |b| b as usize * 96, 128).unwrap();
    assert!(limited.max_block_size <= 128);
    // A panic in the function comes back here, and the next call works.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        k.max_potential_block_size_with(&d, |_| -> usize { panic!("shared-memory function failed") }, 0)
    }));
    assert!(panicked.is_err());
    assert_eq!(k.max_potential_block_size_with(&d, |_| 4096, 0).unwrap(), constant);

    // Dynamic shared memory per block: less when more blocks share a multiprocessor, never more
    // than the multiprocessor has, and enough for that many blocks to fit.
    let one = k.available_dynamic_shared_memory_per_block(&d, 1, 128).unwrap();
    let two = k.available_dynamic_shared_memory_per_block(&d, 2, 128).unwrap();
    assert!(one > 0 && two > 0 && two <= one, "{one} {two}");
    assert!(one <= p.max_shared_memory_per_multiprocessor().unwrap() as usize);
    assert!(k.max_active_blocks_per_multiprocessor(&d, 128, two).unwrap() >= 2);

    // The largest cluster: 8 blocks (portable), more once non-portable sizes are allowed.
    if cc(&d) >= 90 {
        let mut config = LaunchConfig::new(32, 128);
        config.cluster = Some((2, 1, 1).into());
        let portable = k.max_potential_cluster_size(&d, &config, None).unwrap();
        assert_eq!(portable, 8);
        assert_eq!(k.max_potential_cluster_size(&d, &config, Some(&s)).unwrap(), portable);
        k.set_non_portable_cluster_size_allowed(true, &d).unwrap();
        let non_portable = k.max_potential_cluster_size(&d, &config, None).unwrap();
        assert!(non_portable >= portable, "{non_portable} < {portable}");
        println!("max_potential_cluster_size: portable {portable}, non-portable {non_portable}");
    } else {
        skip_part("clusters need compute capability 9.0");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn kernel_from_handle_wraps_a_raw_kernel_and_checks_its_library() {
    let (d, s) = setup();
    let code = cubin(&d, TWICE);
    let k = code.get_kernel("twice").unwrap();
    // With its code: the same kernel, keeping the code loaded.
    // SAFETY: the handle is the live kernel of `code`, which the new kernel keeps loaded.
    let same = unsafe { Kernel::from_handle(k.handle(), Some(&code)) }.unwrap();
    assert_eq!(same, k);
    let state = RandomState::new();
    assert_eq!(hash_of(&state, &same), hash_of(&state, &k));
    assert_eq!(same.object_code(), &code);
    assert_eq!(same.name(), "twice");
    run_twice(&same, &s, &d);
    // Without: a placeholder code holding the driver's library (not unloading it).
    // SAFETY: `code` (and so the kernel's library) outlives `bare` and its launches (run_twice
    // waits for them).
    let bare = unsafe { Kernel::from_handle(k.handle(), None) }.unwrap();
    assert_eq!(bare, k);
    assert_ne!(bare.object_code(), &code);
    match bare.object_code().handle() {
        Ok(library) => assert_eq!(library, code.handle().unwrap()),
        Err(e) => skip_part(format!("cuKernelGetLibrary did not name the library: {e}")),
    }
    run_twice(&bare, &s, &d);
    drop(bare);
    // The library is still loaded: the placeholder did not unload it.
    run_twice(&k, &s, &d);
    // With another code's ObjectCode: refused.
    let other = cubin(&d, TWICE);
    other.get_kernel("twice").unwrap();
    // SAFETY: the handle is live (kept by `code`); the call refuses it before any use.
    let err = unsafe { Kernel::from_handle(k.handle(), Some(&other)) }.unwrap_err();
    assert!(err.to_string().contains("belongs to library"), "{err}");
    // SAFETY: a null handle is refused before the driver sees it.
    let err = unsafe { Kernel::from_handle(std::ptr::null_mut(), None) }.unwrap_err();
    assert!(err.to_string().contains("null"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn object_code_handle_and_module_reach_the_loaded_library() {
    let (d, s) = setup();
    let code = cubin(&d, TWICE);
    let library = code.handle().unwrap();
    assert!(!library.is_null());
    assert_eq!(code.handle().unwrap(), library, "one library per code");
    let module = code.get_module().unwrap();
    assert!(!module.handle().is_null());
    assert_eq!(module.object_code(), &code);
    // The module is the one raw module code uses: its function runs.
    let mut function: driver::CUfunction = std::ptr::null_mut();
    // SAFETY: the module is live (kept by `module`); the name is NUL-terminated.
    let status = unsafe { driver::cuModuleGetFunction(&mut function, module.handle(), c"twice".as_ptr()) };
    assert_eq!(status, driver::CUresult::CUDA_SUCCESS);
    assert!(!function.is_null());
    // The module keeps the library loaded after the code's last other holder goes.
    let kernel = code.get_kernel("twice").unwrap();
    drop(code);
    run_twice(&kernel, &s, &d);
    drop(kernel);
    let mut again: driver::CUfunction = std::ptr::null_mut();
    // SAFETY: as above; `module` still holds the code.
    let status = unsafe { driver::cuModuleGetFunction(&mut again, module.handle(), c"twice".as_ptr()) };
    assert_eq!(status, driver::CUresult::CUDA_SUCCESS);
    // No current context: a clear error.
    std::thread::spawn(|| {
        let code = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n", "empty").unwrap();
        let err = code.get_module().unwrap_err();
        assert!(err.to_string().contains("no context is current"), "{err}");
    })
    .join()
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn program_and_linker_handles_are_the_libraries_handles() {
    let (d, _s) = setup();
    let mut program = Program::new(
        TWICE,
        SourceType::Cxx,
        ProgramOptions {
            arch: Some(arch(&d)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(program.handle(), None, "no program before the first compile");
    program.compile(CodeType::Cubin, &[]).unwrap();
    let Some(ProgramHandle::Nvrtc(first)) = program.handle() else {
        panic!("{:?}", program.handle())
    };
    // The handle is NVRTC's program of that compile: it answers NVRTC's questions.
    let mut size = 0usize;
    // SAFETY: the program is live while `program` is and no compile runs.
    let status = unsafe { nvrtc::nvrtcGetCUBINSize(first, &mut size) };
    assert_eq!(status, nvrtc::nvrtcResult::NVRTC_SUCCESS);
    assert!(size > 0);
    program.compile(CodeType::Ptx, &[]).unwrap();
    assert!(matches!(program.handle(), Some(ProgramHandle::Nvrtc(h)) if !h.is_null()));
    // A failed compile keeps its program too, for its log.
    let mut bad = Program::new("this is not C++", SourceType::Cxx, ProgramOptions::default()).unwrap();
    assert!(bad.compile(CodeType::Ptx, &[]).is_err());
    assert!(matches!(bad.handle(), Some(ProgramHandle::Nvrtc(_))));

    // A PTX program's handle is its linker's.
    let ptx = compile(
        TWICE,
        ProgramOptions {
            arch: Some(arch(&d)),
            ..Default::default()
        },
        CodeType::Ptx,
    );
    let mut from_ptx = Program::new(
        ptx.bytes()
            .unwrap()
            .into_owned()
            .into_iter()
            .filter(|b| *b != 0)
            .collect::<Vec<u8>>(),
        SourceType::Ptx,
        ProgramOptions {
            arch: Some(arch(&d)),
            ..Default::default()
        },
    )
    .unwrap();
    from_ptx.compile(CodeType::Cubin, &[]).unwrap();
    match from_ptx.handle() {
        Some(ProgramHandle::Linker(LinkerHandle::NvJitLink(h))) => assert!(!h.is_null()),
        Some(ProgramHandle::Linker(LinkerHandle::Driver(h))) => assert!(!h.is_null()),
        other => panic!("{other:?}"),
    }

    // A linker's handle matches its backend.
    let linker = Linker::new(&[&ptx], LinkerOptions::default()).unwrap();
    match (linker.backend(), linker.handle()) {
        (LinkerBackend::NvJitLink, LinkerHandle::NvJitLink(h)) => {
            let mut log = 0usize;
            // SAFETY: the handle is live while `linker` is.
            let status = unsafe { nvjitlink::nvJitLinkGetErrorLogSize(h, &mut log) };
            assert_eq!(status, nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS);
        }
        (LinkerBackend::Driver, LinkerHandle::Driver(h)) => assert!(!h.is_null()),
        (backend, handle) => panic!("{backend:?} with {handle:?}"),
    }
}

/// The nvJitLink version that loads, if any.
fn nvjitlink_version() -> Option<(u32, u32)> {
    let (mut major, mut minor) = (0u32, 0u32);
    // SAFETY: out-pointers to locals.
    let status = unsafe { nvjitlink::nvJitLinkVersion(&mut major, &mut minor) };
    (status == nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS).then_some((major, minor))
}

/// Runs `parity_caller` of `code` and returns what it wrote.
fn run_caller(code: &ObjectCode, s: &Stream, d: &Device) -> i32 {
    let kernel = code.get_kernel("parity_caller").unwrap();
    let result = d.allocate(4, s).unwrap();
    result.fill_u32(0, s).unwrap();
    // SAFETY: `parity_caller` takes an int*; the buffer holds one and outlives the launch.
    unsafe { cuda_core::launch(s, &LaunchConfig::new(1, 1), &kernel, (result.handle(),)) }.unwrap();
    result.to_vec::<i32>(s).unwrap()[0]
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn lto_ir_units_link_into_cubins_that_run_incrementally_where_nvjitlink_can() {
    let (d, s) = setup();
    if Linker::which_backend() != LinkerBackend::NvJitLink {
        skip_part("LTO-IR needs nvJitLink; the driver's linker is in use");
        return;
    }
    let version = nvjitlink_version().expect("nvJitLink loads");
    let sm = arch(&d);
    let lto = |source: &str| {
        compile(
            source,
            ProgramOptions {
                arch: Some(sm.clone()),
                link_time_optimization: Some(true),
                ..Default::default()
            },
            CodeType::Ltoir,
        )
    };
    let (caller, helper) = (lto(CALLER), lto(HELPER));
    let lto_options = LinkerOptions {
        arch: Some(sm.clone()),
        link_time_optimization: Some(true),
        ..Default::default()
    };
    // Two LTO-IR units into one cubin that runs.
    let cubin = Linker::new(&[&caller, &helper], lto_options.clone())
        .unwrap()
        .link(CodeType::Cubin)
        .unwrap();
    assert_eq!(cubin.code_type(), CodeType::Cubin);
    assert_eq!(run_caller(&cubin, &s, &d), 42);

    // LTO-IR output: refused without LTO and with native inputs, whatever the version.
    let rdc = |source: &str| {
        compile(
            source,
            ProgramOptions {
                arch: Some(sm.clone()),
                relocatable_device_code: Some(true),
                ..Default::default()
            },
            CodeType::Ptx,
        )
    };
    let (caller_ptx, helper_ptx) = (rdc(CALLER), rdc(HELPER));
    let mut no_lto = Linker::new(
        &[&caller_ptx, &helper_ptx],
        LinkerOptions {
            arch: Some(sm.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let err = no_lto.link(CodeType::Ltoir).unwrap_err();
    assert!(
        err.to_string().contains("LTOIR output requires link_time_optimization"),
        "{err}"
    );
    let mut mixed = Linker::new(&[&caller, &helper_ptx], lto_options.clone()).unwrap();
    let err = mixed.link(CodeType::Ltoir).unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"not supported with "ptx" or "cubin" inputs"#),
        "{err}"
    );
    println!("nvJitLink {}.{}", version.0, version.1);

    // The LTO-preserving chain: LTO-IR of the caller alone (its reference left unresolved),
    // then with the helper, then the final cubin (nvJitLink 13.3+).
    let incremental_lto = LinkerOptions {
        incremental: Some(true),
        ..lto_options.clone()
    };
    let stage = Linker::new(&[&caller], incremental_lto.clone()).and_then(|mut l| l.link(CodeType::Ltoir));
    if version >= (13, 3) {
        let partial = stage.unwrap();
        assert_eq!(partial.code_type(), CodeType::Ltoir);
        let resolved = Linker::new(&[&partial, &helper], incremental_lto.clone())
            .unwrap()
            .link(CodeType::Ltoir)
            .unwrap();
        let final_cubin = Linker::new(&[&resolved], lto_options.clone())
            .unwrap()
            .link(CodeType::Cubin)
            .unwrap();
        assert_eq!(run_caller(&final_cubin, &s, &d), 42);
        // A complete LTO-IR link gives the same cubin as the direct link.
        let whole = Linker::new(&[&caller, &helper], lto_options.clone())
            .unwrap()
            .link(CodeType::Ltoir)
            .unwrap();
        let round_trip = Linker::new(&[&whole], lto_options.clone())
            .unwrap()
            .link(CodeType::Cubin)
            .unwrap();
        assert_eq!(run_caller(&round_trip, &s, &d), 42);
    } else {
        let err = stage.unwrap_err().to_string();
        let expected = if version >= (13, 2) {
            format!(
                "LTOIR output requires nvJitLink 13.3 or newer; found {}.{}",
                version.0, version.1
            )
        } else {
            format!(
                "incremental linking requires nvJitLink 13.2 or newer; found {}.{}",
                version.0, version.1
            )
        };
        assert!(err.contains(&expected), "{err}");
        skip_part(format!(
            "LTO-IR output needs nvJitLink 13.3; {}.{} is installed",
            version.0, version.1
        ));
    }

    // The native chain: a partial (relocatable) cubin of the caller, then the final link
    // (nvJitLink 13.2+); PTX output is refused for incremental links.
    let incremental = LinkerOptions {
        arch: Some(sm.clone()),
        incremental: Some(true),
        ..Default::default()
    };
    let partial = Linker::new(&[&caller_ptx], incremental.clone()).and_then(|mut l| l.link(CodeType::Cubin));
    if version >= (13, 2) {
        let partial = partial.unwrap();
        let bytes = partial.bytes().unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 1, "ET_REL");
        let final_cubin = Linker::new(
            &[&partial, &helper_ptx],
            LinkerOptions {
                arch: Some(sm.clone()),
                ..Default::default()
            },
        )
        .unwrap()
        .link(CodeType::Cubin)
        .unwrap();
        assert_eq!(run_caller(&final_cubin, &s, &d), 42);
        let mut to_ptx = Linker::new(&[&caller_ptx, &helper_ptx], incremental).unwrap();
        let err = to_ptx.link(CodeType::Ptx).unwrap_err();
        assert!(
            err.to_string()
                .contains("PTX output is not supported for incremental linking"),
            "{err}"
        );
    } else {
        let err = partial.unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "incremental linking requires nvJitLink 13.2 or newer; found {}.{}",
                version.0, version.1
            )),
            "{err}"
        );
        skip_part(format!(
            "incremental linking needs nvJitLink 13.2; {}.{} is installed",
            version.0, version.1
        ));
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_driver_linker_ignores_what_cuda_core_deprecates() {
    let (d, s) = setup();
    let sm = arch(&d);
    let rdc = |source: &str| {
        compile(
            source,
            ProgramOptions {
                arch: Some(sm.clone()),
                relocatable_device_code: Some(true),
                ..Default::default()
            },
            CodeType::Ptx,
        )
    };
    let (caller, helper) = (rdc(CALLER), rdc(HELPER));
    // ftz, fma and kernels_used are warned about and ignored on the driver path; numba_debug on
    // every path.
    let options = LinkerOptions {
        arch: Some(sm.clone()),
        ftz: Some(true),
        fma: Some(true),
        kernels_used: vec!["parity_caller".into()],
        numba_debug: Some(true),
        ..Default::default()
    };
    let (linker, warnings) =
        user_warnings(|| Linker::with_backend(&[&caller, &helper], options.clone(), LinkerBackend::Driver));
    let mut linker = linker.unwrap();
    for name in ["ftz", "fma", "kernels_used"] {
        let expected = format!("LinkerOptions.{name} is deprecated in the driver API");
        assert!(
            warnings.iter().any(|w| w.contains(&expected)),
            "{expected} not in {warnings:?}"
        );
    }
    assert!(warnings
        .iter()
        .any(|w| w.contains("numba_debug is not supported by any linking backend")));
    let cubin = linker.link(CodeType::Cubin).unwrap();
    assert_eq!(run_caller(&cubin, &s, &d), 42);
    // What the driver cannot do is still refused.
    for (option, name) in [
        (
            LinkerOptions {
                time: Some(true),
                ..options.clone()
            },
            "time",
        ),
        (
            LinkerOptions {
                incremental: Some(true),
                ..options.clone()
            },
            "incremental",
        ),
    ] {
        let Err(err) = Linker::with_backend(&[&caller], option, LinkerBackend::Driver) else {
            panic!("{name} was accepted by the driver's linker")
        };
        assert!(err.to_string().contains(&format!("{name} needs nvJitLink")), "{err}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_too_small_precompiled_header_heap_is_grown_and_the_compile_retried() {
    let (d, _s) = setup();
    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-pointers to locals.
    unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    if (major, minor) < (12, 8) {
        skip_part(format!(
            "precompiled headers need NVRTC 12.8; {major}.{minor} is installed"
        ));
        return;
    }
    let dir = std::env::temp_dir().join(format!("parity-pch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A header worth a precompiled header: many template instantiations.
    let mut header = String::from("#pragma once\n");
    for i in 0..200 {
        header.push_str(&format!(
            "template <typename T> struct Wrap{i} {{ T v; __device__ T get() const {{ return v + T({i}); }} }};\n\
             __device__ inline int use{i}() {{ return Wrap{i}<int>{{{i}}}.get() + Wrap{i}<long>{{{i}}}.get(); }}\n"
        ));
    }
    std::fs::write(dir.join("parity_big.h"), header).unwrap();
    let source = "#include \"parity_big.h\"\nextern \"C\" __global__ void use_header(int* x) { *x = use7(); }\n";
    let pch = dir.join("parity_big.pch");
    let mut original = 0usize;
    // SAFETY: out-pointer to a local. The heap is NVRTC's, process-wide; this test binary's
    // other tests make no precompiled headers.
    unsafe { nvrtc::nvrtcGetPCHHeapSize(&mut original) };
    // SAFETY: takes a size; no compile of this process is using the heap now.
    let status = unsafe { nvrtc::nvrtcSetPCHHeapSize(4096) };
    assert_eq!(status, nvrtc::nvrtcResult::NVRTC_SUCCESS);
    let mut small = 0usize;
    // SAFETY: out-pointer to a local.
    unsafe { nvrtc::nvrtcGetPCHHeapSize(&mut small) };
    let mut program = Program::new(
        source,
        SourceType::Cxx,
        ProgramOptions {
            arch: Some(arch(&d)),
            include_path: vec![dir.to_string_lossy().into_owned()],
            create_pch: Some(pch.to_string_lossy().into_owned()),
            ..Default::default()
        },
    )
    .unwrap();
    let result = program.compile(CodeType::Cubin, &[]);
    let mut grown = 0usize;
    // SAFETY: out-pointer to a local.
    unsafe { nvrtc::nvrtcGetPCHHeapSize(&mut grown) };
    // SAFETY: takes a size; the compile above is done.
    unsafe { nvrtc::nvrtcSetPCHHeapSize(original) };
    result.unwrap();
    assert_eq!(program.pch_status(), Some(PchStatus::Created), "log: {}", program.log());
    assert!(
        grown > small,
        "the heap was not grown ({small} -> {grown}): the retry did not run"
    );
    assert!(std::fs::metadata(&pch).unwrap().len() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_debug_compile_writes_its_source_for_cuda_gdb() {
    let (d, _s) = setup();
    let options = ProgramOptions {
        arch: Some(arch(&d)),
        debug: Some(true),
        ..Default::default()
    };
    let mut program = Program::new(TWICE, SourceType::Cxx, options.clone()).unwrap();
    program.compile(CodeType::Ptx, &[]).unwrap();
    let path = program
        .source_path()
        .expect("a debug compile writes its source")
        .to_path_buf();
    assert!(path.is_absolute());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), TWICE);
    // NVRTC was given that path: the debug information names it.
    let ptx = program.compile(CodeType::Ptx, &[]).unwrap();
    let text = String::from_utf8_lossy(&ptx.bytes().unwrap()).into_owned();
    assert!(
        text.contains(&*path.to_string_lossy()),
        "the PTX's .file does not name {}",
        path.display()
    );
    // Without debug information nothing is written.
    let mut plain = Program::new(
        TWICE,
        SourceType::Cxx,
        ProgramOptions {
            debug: None,
            ..options.clone()
        },
    )
    .unwrap();
    plain.compile(CodeType::Ptx, &[]).unwrap();
    assert_eq!(plain.source_path(), None);
    // A program the caller named: the source is written where the name points, once.
    let named = std::env::temp_dir().join(format!("parity-named-{}.cu", std::process::id()));
    let mut program = Program::new(
        TWICE,
        SourceType::Cxx,
        ProgramOptions {
            name: Some(named.to_string_lossy().into_owned()),
            ..options
        },
    )
    .unwrap();
    program.compile(CodeType::Ptx, &[]).unwrap();
    assert_eq!(program.source_path(), Some(named.as_path()));
    assert_eq!(std::fs::read_to_string(&named).unwrap(), TWICE);
    std::fs::remove_file(&named).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
// The hashes use only handles and addresses, which never change: the interior mutability
// clippy sees (locks, lazy records) is not hashed.
#[allow(clippy::mutable_key_type)]
fn equality_and_hashing_follow_cuda_core_on_the_gpu() {
    let (d, s) = setup();
    let state = RandomState::new();
    // Streams and contexts: by handle.
    let other = d.create_stream(Default::default()).unwrap();
    assert_eq!(s, s.clone());
    assert_ne!(s, other);
    assert_eq!(hash_of(&state, &s), hash_of(&state, &s.clone()));
    let streams: HashSet<Stream> = [s.clone(), s.clone(), other.clone()].into_iter().collect();
    assert_eq!(streams.len(), 2);
    let ctx = d.primary_context().unwrap();
    assert_eq!(ctx, d.primary_context().unwrap());
    assert_eq!(hash_of(&state, &ctx), hash_of(&state, &d.primary_context().unwrap()));
    // Events: their device and context.
    let event = d.create_event(Default::default()).unwrap();
    assert_eq!(event.device(), d);
    assert_eq!(event.context(), &ctx);
    // Buffers: by address and size.
    let a: Buffer = d.allocate(256, &s).unwrap();
    let b: Buffer = d.allocate(256, &s).unwrap();
    assert_eq!(a, a);
    assert_ne!(a, b);
    let buffers: HashSet<&Buffer> = [&a, &a, &b].into_iter().collect();
    assert_eq!(buffers.len(), 2);
    // Object codes: the same code (a clone) only; kernels by handle.
    let code = cubin(&d, TWICE);
    let again = ObjectCode::from_cubin(code.bytes().unwrap().into_owned(), "again").unwrap();
    assert_eq!(code, code.clone());
    assert_ne!(code, again);
    assert_ne!(code.handle().unwrap(), again.handle().unwrap());
    let k1 = code.get_kernel("twice").unwrap();
    let k2 = code.get_kernel("twice").unwrap();
    assert_eq!(k1, k2);
    assert_eq!(hash_of(&state, &k1), hash_of(&state, &k2));
    assert_ne!(k1, again.get_kernel("twice").unwrap());
}

#[test]
// An ObjectCode hashes its identity, which never changes (its lazily loaded library is not
// hashed).
#[allow(clippy::mutable_key_type)]
fn launch_configs_and_object_codes_hash_consistently_with_equality() {
    let state = RandomState::new();
    let a = LaunchConfig::new(4, (128, 2));
    let mut b = a;
    assert_eq!(a, b);
    assert_eq!(hash_of(&state, &a), hash_of(&state, &b));
    b.shmem_size = 1024;
    assert_ne!(a, b);
    let mut c = a;
    c.cluster = Some((2, 1, 1).into());
    let set: HashSet<LaunchConfig> = [a, b, c, a, b].into_iter().collect();
    assert_eq!(set.len(), 3);
    // Object codes need no GPU to compare: the same code, or not.
    let ptx = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n", "p").unwrap();
    let same_text = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n", "p").unwrap();
    assert_eq!(ptx, ptx.clone());
    assert_eq!(hash_of(&state, &ptx), hash_of(&state, &ptx.clone()));
    assert_ne!(ptx, same_text);
    let codes: HashSet<ObjectCode> = [ptx.clone(), ptx.clone(), same_text].into_iter().collect();
    assert_eq!(codes.len(), 2);
}

#[test]
fn numba_debug_is_warned_about_and_ignored_by_every_linker() {
    // No GPU needed: the warning comes before the linker is made (which fails here without one).
    let ptx = ObjectCode::from_ptx(".version 8.0\n.target sm_90\n.address_size 64\n", "p").unwrap();
    for backend in [LinkerBackend::Driver, LinkerBackend::NvJitLink] {
        let options = LinkerOptions {
            arch: Some("sm_90".into()),
            numba_debug: Some(false),
            ..Default::default()
        };
        let (_, warnings) = user_warnings(|| Linker::with_backend(&[&ptx], options, backend).map(|_| ()));
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("numba_debug is not supported by any linking backend")),
            "{backend:?}: {warnings:?}"
        );
    }
    // A PTX program says the same of ProgramOptions.numba_debug (cuda.core's UserWarning).
    let mut program = Program::new(
        ".version 8.0\n.target sm_90\n.address_size 64\n",
        SourceType::Ptx,
        ProgramOptions {
            arch: Some("sm_90".into()),
            numba_debug: Some(true),
            ..Default::default()
        },
    )
    .unwrap();
    let (_, warnings) = user_warnings(|| program.compile(CodeType::Cubin, &[]).map(|_| ()));
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("numba_debug is not supported when compiling PTX")),
        "{warnings:?}"
    );
}

#[test]
fn options_refused_before_any_library_is_loaded() {
    // Incremental linking with PTX output, and a carveout out of range, fail up front with
    // cuda.core's messages (no GPU or library needed).
    let err = LinkerOptions {
        arch: Some("sm_90".into()),
        incremental: Some(true),
        link_time_optimization: Some(true),
        ptx: Some(true),
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("incremental and ptx output options cannot be used together"),
        "{err}"
    );
    let flags = LinkerOptions {
        arch: Some("sm_90".into()),
        incremental: Some(true),
        numba_debug: Some(false),
        ..Default::default()
    }
    .nvjitlink_flags()
    .unwrap();
    assert_eq!(flags, ["-arch=sm_90", "-r"]);
    // A program has no handle before it is compiled, and needs no compiler to be made.
    let program = Program::new(
        TWICE,
        SourceType::Cxx,
        ProgramOptions {
            arch: Some("sm_90".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(program.handle(), None);
    assert_eq!(program.source_path(), None);
}
