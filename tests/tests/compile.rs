//! Kernels from every compile path load and compute the right numbers on the GPU.

use cuda_core::{
    CodeType, Kernel, Linker, LinkerBackend, LinkerOptions, ObjectCode, Program, ProgramOptions, SourceType,
};
use cuda_tests::{compute_capability, device_and_context, launch_1d, DeviceVec};
use std::ffi::c_void;

const N: usize = 4096;

fn arch() -> String {
    let (dev, _) = device_and_context();
    let (major, minor) = compute_capability(dev);
    format!("sm_{major}{minor}")
}

fn opts() -> ProgramOptions {
    ProgramOptions {
        arch: Some(arch()),
        ..Default::default()
    }
}

/// Runs a `void k(float* x, unsigned n)` kernel over 0..N and returns the results.
fn run_inplace(kernel: &Kernel) -> Vec<f32> {
    let input: Vec<f32> = (0..N).map(|i| i as f32 * 0.01).collect();
    let x = DeviceVec::from_slice(&input);
    let (mut ptr, mut n) = (x.ptr, N as u32);
    let mut params: [*mut c_void; 2] = [(&mut ptr as *mut u64).cast(), (&mut n as *mut u32).cast()];
    // SAFETY: the kernels launched here take (float*, unsigned) and stay within n elements.
    unsafe { launch_1d(kernel.handle() as cuda_sys::driver::CUfunction, N as u32, &mut params) };
    x.to_vec()
}

const TRIPLE: &str = r#"
extern "C" __global__ void triple(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 3.0f * x[i];
}"#;

fn assert_tripled(out: &[f32]) {
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 3.0 * (i as f32 * 0.01), "element {i}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn nvrtc_cubin_with_the_devices_own_arch() {
    device_and_context();
    let mut p = Program::new(TRIPLE, SourceType::Cxx, ProgramOptions::default()).unwrap();
    assert_eq!(
        p.options().arch.as_deref(),
        Some(arch().as_str()),
        "the arch defaults to the device's"
    );
    let code = p.compile(CodeType::Cubin, &[]).unwrap();
    let kernel = code.get_kernel("triple").unwrap();
    assert_eq!(kernel.num_arguments().unwrap(), 2);
    assert_tripled(&run_inplace(&kernel));
    // Loaded once: a second lookup gives the same kernel.
    assert_eq!(code.get_kernel("triple").unwrap(), kernel);
    let err = code.get_kernel("no_such_kernel").unwrap_err();
    assert!(err.to_string().contains("cuLibraryGetKernel"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn ptx_is_jit_compiled_by_the_driver() {
    device_and_context();
    let ptx = Program::new(TRIPLE, SourceType::Cxx, opts())
        .unwrap()
        .compile(CodeType::Ptx, &[])
        .unwrap();
    // Through a file too.
    let dir = std::env::temp_dir().join(format!("cuda-rs-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("triple.ptx");
    std::fs::write(&path, &*ptx.bytes().unwrap()).unwrap();
    for code in [ptx, ObjectCode::from_file(&path, CodeType::Ptx, "triple").unwrap()] {
        assert_tripled(&run_inplace(&code.get_kernel("triple").unwrap()));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn template_kernels_by_name_expression() {
    device_and_context();
    let source = r#"template <int K> __global__ void mul(float* x, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = K * x[i];
    }"#;
    let code = Program::new(source, SourceType::Cxx, opts())
        .unwrap()
        .compile(CodeType::Cubin, &["mul<3>", "mul<5>"])
        .unwrap();
    assert_tripled(&run_inplace(&code.get_kernel("mul<3>").unwrap()));
    let five = run_inplace(&code.get_kernel("mul<5>").unwrap());
    assert_eq!(five[100], 5.0 * 1.0);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn lto_ir_linked_by_nvjitlink() {
    device_and_context();
    let rdc = ProgramOptions {
        relocatable_device_code: Some(true),
        ..opts()
    };
    let helper = Program::new(
        "__device__ float scale(float x) { return 3.0f * x; }",
        SourceType::Cxx,
        rdc.clone(),
    )
    .unwrap()
    .compile(CodeType::Ltoir, &[])
    .unwrap();
    let kernel = Program::new(
        r#"__device__ float scale(float x);
           extern "C" __global__ void triple(float* x, unsigned n) {
               unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
               if (i < n) x[i] = scale(x[i]);
           }"#,
        SourceType::Cxx,
        rdc,
    )
    .unwrap()
    .compile(CodeType::Ltoir, &[])
    .unwrap();
    let options = LinkerOptions {
        link_time_optimization: Some(true),
        ..Default::default()
    };
    let mut linker = Linker::new(&[&helper, &kernel], options).unwrap();
    assert_eq!(linker.backend(), LinkerBackend::NvJitLink);
    let cubin = linker.link(CodeType::Cubin).unwrap();
    assert_tripled(&run_inplace(&cubin.get_kernel("triple").unwrap()));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_driver_linker_links_relocatable_ptx() {
    device_and_context();
    let rdc = ProgramOptions {
        relocatable_device_code: Some(true),
        ..opts()
    };
    let helper = Program::new(
        "__device__ float scale(float x) { return 3.0f * x; }",
        SourceType::Cxx,
        rdc.clone(),
    )
    .unwrap()
    .compile(CodeType::Ptx, &[])
    .unwrap();
    let kernel = Program::new(
        r#"__device__ float scale(float x);
           extern "C" __global__ void triple(float* x, unsigned n) {
               unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
               if (i < n) x[i] = scale(x[i]);
           }"#,
        SourceType::Cxx,
        rdc,
    )
    .unwrap()
    .compile(CodeType::Cubin, &[])
    .unwrap();
    let mut linker =
        Linker::with_backend(&[&helper, &kernel], LinkerOptions::default(), LinkerBackend::Driver).unwrap();
    assert_eq!(linker.backend(), LinkerBackend::Driver);
    let cubin = linker.link(CodeType::Cubin).unwrap();
    assert_tripled(&run_inplace(&cubin.get_kernel("triple").unwrap()));
    // The driver cannot do LTO, and says so.
    let lto = LinkerOptions {
        link_time_optimization: Some(true),
        ..Default::default()
    };
    let err = Linker::with_backend(&[&helper], lto, LinkerBackend::Driver)
        .err()
        .unwrap();
    assert!(err.to_string().contains("needs nvJitLink"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn nvvm_ir_with_libdevice_computes_sines() {
    device_and_context();
    let ir = r#"
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
declare float @__nv_sinf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
define void @sine(float* %x, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bdim = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %bid, %bdim
  %i = add i32 %base, %tid
  %in = icmp ult i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %p = getelementptr float, float* %x, i32 %i
  %v = load float, float* %p
  %s = call float @__nv_sinf(float %v)
  store float %s, float* %p
  br label %done
done:
  ret void
}
!nvvm.annotations = !{!0}
!0 = !{void (float*, i32)* @sine, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
"#;
    let options = ProgramOptions {
        use_libdevice: Some(true),
        ..opts()
    };
    let ptx = Program::new(ir, SourceType::Nvvm, options)
        .unwrap()
        .compile(CodeType::Ptx, &[])
        .unwrap();
    let out = run_inplace(&ptx.get_kernel("sine").unwrap());
    for (i, v) in out.iter().enumerate() {
        let expected = (i as f32 * 0.01).sin();
        assert!((v - expected).abs() < 1e-5, "element {i}: {v} vs {expected}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn cold_compile_against_a_cache_hit() {
    device_and_context();
    let dir = std::env::temp_dir().join(format!("cuda-rs-cache-{}", std::process::id()));
    let cache = cuda_core::FileStreamProgramCache::new(Some(dir.clone()), None).unwrap();
    let mut p = Program::new(TRIPLE, SourceType::Cxx, opts()).unwrap();
    let t = std::time::Instant::now();
    let cold = p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
    let cold_time = t.elapsed();
    let mut hits = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let hit = p.compile_cached(CodeType::Cubin, &[], &cache).unwrap();
        hits.push(t.elapsed());
        assert_eq!(hit.bytes().unwrap(), cold.bytes().unwrap());
    }
    hits.sort();
    println!(
        "NVRTC cubin: cold compile {:?}, disk cache hit median {:?}",
        cold_time,
        hits[hits.len() / 2]
    );
    assert!(
        hits[hits.len() / 2] < std::time::Duration::from_millis(1),
        "a cache hit must cost under 1 ms"
    );
    assert_tripled(&run_inplace(&cold.get_kernel("triple").unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
}
