//! Code images given to the driver: real cubins and fatbins load and launch, and images the driver
//! would read past the end of (it takes no length) are refused before it sees them.

use cuda_core::{CodeType, CudaError, Kernel, ObjectCode, Program, ProgramOptions, SourceType};
use cuda_tests::{compute_capability, device_and_context, launch_1d, DeviceVec};
use std::ffi::c_void;
use std::path::PathBuf;

const N: usize = 1024;

/// Two kernels, `first` (x * 3) before `second` (x + 1), so that PTX cut between them holds only
/// the first.
const TWO_KERNELS: &str = r#"
extern "C" __global__ void first(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 3.0f * x[i];
}
extern "C" __global__ void second(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] + 1.0f;
}"#;

fn sm() -> (i32, i32) {
    let (dev, _) = device_and_context();
    compute_capability(dev)
}

fn opts() -> ProgramOptions {
    let (major, minor) = sm();
    ProgramOptions {
        arch: Some(format!("sm_{major}{minor}")),
        ..Default::default()
    }
}

fn compile(target: CodeType) -> Vec<u8> {
    Program::new(TWO_KERNELS, SourceType::Cxx, opts())
        .unwrap()
        .compile(target, &[])
        .unwrap()
        .bytes()
        .unwrap()
        .into_owned()
}

/// Runs a `void k(float* x, unsigned n)` kernel over 0..N and returns the results.
fn run(kernel: &Kernel) -> Vec<f32> {
    let input: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x = DeviceVec::from_slice(&input);
    let (mut ptr, mut n) = (x.ptr, N as u32);
    let mut params: [*mut c_void; 2] = [(&mut ptr as *mut u64).cast(), (&mut n as *mut u32).cast()];
    // SAFETY: the kernels launched here take (float*, unsigned) and stay within n elements.
    unsafe { launch_1d(kernel.handle() as cuda_sys::driver::CUfunction, N as u32, &mut params) };
    x.to_vec()
}

fn assert_first(code: &ObjectCode) {
    let out = run(&code.get_kernel("first").unwrap());
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 3.0 * i as f32, "first, element {i}");
    }
}

fn assert_second(code: &ObjectCode) {
    let out = run(&code.get_kernel("second").unwrap());
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, i as f32 + 1.0, "second, element {i}");
    }
}

/// A folder for this test's files, removed by the caller.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuda-rs-object-code-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A vector holding `bytes[..len]`, with the rest of `bytes` in its spare capacity (where the
/// driver would find it if it read past the end).
fn cut_with_the_rest_in_spare_capacity(bytes: &[u8], len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len());
    v.extend_from_slice(&bytes[..len]);
    for (slot, b) in v.spare_capacity_mut().iter_mut().zip(&bytes[len..]) {
        slot.write(*b);
    }
    assert_eq!(v.len(), len);
    v
}

#[track_caller]
fn assert_refused(result: cuda_core::Result<ObjectCode>, needle: &str) {
    match result {
        Err(CudaError::InvalidArgument(message)) => assert!(message.contains(needle), "{message} lacks {needle:?}"),
        Err(other) => panic!("expected InvalidArgument, got {other}"),
        Ok(code) => panic!("{code:?} was accepted"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_real_cubin_loads_from_memory_and_from_a_file() {
    device_and_context();
    let cubin = compile(CodeType::Cubin);
    let code = ObjectCode::from_cubin(cubin.clone(), "two").unwrap();
    assert_first(&code);
    assert_second(&code);
    // A file is read, checked and loaded from memory.
    let dir = scratch("cubin");
    let path = dir.join("two.cubin");
    std::fs::write(&path, &cubin).unwrap();
    let from_file = ObjectCode::from_file(&path, CodeType::Cubin, "two").unwrap();
    assert_first(&from_file);
    // A file cut after construction is refused when it is loaded.
    std::fs::write(&path, &cubin[..64]).unwrap();
    let cut = ObjectCode::from_file(&path, CodeType::Cubin, "cut").unwrap();
    let err = cut.get_kernel("first").unwrap_err();
    assert!(matches!(err, CudaError::InvalidArgument(_)), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// nvcc, from the toolkit or a wheel, if there is one.
fn nvcc() -> Option<PathBuf> {
    if let Ok(found) = cuda_pathfinder::find_nvidia_binary_utility("nvcc") {
        return Some(found.abs_path);
    }
    let default = PathBuf::from("/usr/local/cuda/bin/nvcc");
    default.is_file().then_some(default)
}

/// `nvcc -fatbin` of [`TWO_KERNELS`] for the device (SASS and PTX), if nvcc is there and works.
fn nvcc_fatbin(dir: &std::path::Path) -> Option<Vec<u8>> {
    let nvcc = nvcc()?;
    let (major, minor) = sm();
    let source = dir.join("two.cu");
    let out = dir.join("two.fatbin");
    std::fs::write(&source, TWO_KERNELS).unwrap();
    let status = std::process::Command::new(&nvcc)
        .arg("-fatbin")
        .arg(format!("-arch=sm_{major}{minor}"))
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status();
    match status {
        Ok(s) if s.success() => Some(std::fs::read(&out).unwrap()),
        other => {
            println!(
                "{} -fatbin failed ({other:?}); building the fatbin by hand",
                nvcc.display()
            );
            None
        }
    }
}

/// A fat binary of one uncompressed ELF entry holding `cubin`, for `sm_{major}{minor}`.
///
/// Layout (see `image` in cuda-core's object_code.rs): a 16-byte header `{u32 0xBA55ED50,
/// u16 version 1, u16 header size 16, u64 size of the entries}`, then per entry a 64-byte header
/// `{u16 kind (2 = ELF), u16 0x0101, u32 header size, u64 padded payload size, u32 payload size,
/// u32 0, u16 minor code version, u16 major code version, u32 arch, ..., u64 flags @40 (64-bit,
/// Linux)}` and the payload padded to 8 bytes.
fn handmade_fatbin(cubin: &[u8], major: i32, minor: i32) -> Vec<u8> {
    let padded = cubin.len().div_ceil(8) * 8;
    let mut entry = vec![0u8; 64];
    entry[0..2].copy_from_slice(&2u16.to_le_bytes());
    entry[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    entry[4..8].copy_from_slice(&64u32.to_le_bytes());
    entry[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
    entry[16..20].copy_from_slice(&(cubin.len() as u32).to_le_bytes());
    // The code (ELF ABI) version, as cuobjdump's "code version = [1,x]".
    entry[24..26].copy_from_slice(&u16::from(cubin[8]).to_le_bytes());
    entry[26..28].copy_from_slice(&1u16.to_le_bytes());
    entry[28..32].copy_from_slice(&((major * 10 + minor) as u32).to_le_bytes());
    entry[40..48].copy_from_slice(&0x11u64.to_le_bytes());
    let mut fat = Vec::new();
    fat.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
    fat.extend_from_slice(&1u16.to_le_bytes());
    fat.extend_from_slice(&16u16.to_le_bytes());
    fat.extend_from_slice(&((64 + padded) as u64).to_le_bytes());
    fat.extend_from_slice(&entry);
    fat.extend_from_slice(cubin);
    fat.resize(16 + 64 + padded, 0);
    fat
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_real_fatbin_loads_and_launches() {
    let (major, minor) = sm();
    let dir = scratch("fatbin");
    let fatbin = nvcc_fatbin(&dir).unwrap_or_else(|| handmade_fatbin(&compile(CodeType::Cubin), major, minor));
    assert_eq!(&fatbin[..4], &0xBA55_ED50u32.to_le_bytes());
    let code = ObjectCode::from_fatbin(fatbin.clone(), "two").unwrap();
    assert_first(&code);
    assert_second(&code);
    for n in [0, 15, 16, 79, fatbin.len() / 2, fatbin.len() - 1] {
        assert!(
            ObjectCode::from_fatbin(fatbin[..n].to_vec(), "cut").is_err(),
            "{n} bytes"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The audit's first reproduction: PTX of two kernels, cut before the second and before its NUL,
/// labelled cubin, with the rest of the text in the vector's spare capacity. The driver took it
/// for PTX and read on into the spare capacity, loading `second` from bytes past the slice.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn ptx_labelled_cubin_without_its_nul_is_refused_before_the_driver() {
    device_and_context();
    let ptx = compile(CodeType::Ptx);
    let text_end = ptx.iter().position(|&c| c == 0).unwrap_or(ptx.len());
    let ptx = &ptx[..text_end];
    let second = String::from_utf8_lossy(ptx)
        .find(".entry second")
        .expect("the PTX holds the second kernel");
    // Cut at the start of the line that declares the second kernel.
    let cut = ptx[..second]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(second, |p| p + 1);
    let truncated = cut_with_the_rest_in_spare_capacity(ptx, cut);
    assert_refused(
        ObjectCode::from_cubin(truncated.clone(), "audit-a"),
        "labelled cubin but not an ELF image",
    );
    // As PTX it is NUL-terminated inside the vector: the first kernel loads, the second (only
    // in the spare capacity) does not.
    let as_ptx = ObjectCode::from_ptx(truncated, "audit-a").unwrap();
    assert_first(&as_ptx);
    let err = as_ptx.get_kernel("second").unwrap_err();
    assert!(err.to_string().contains("cuLibraryGetKernel"), "{err}");
}

/// The audit's second reproduction: a real cubin cut to its 64-byte ELF header, the rest in the
/// vector's spare capacity. The driver followed the header's offsets past the slice and loaded
/// kernels from there.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_cubin_cut_to_its_elf_header_is_refused_before_the_driver() {
    device_and_context();
    let cubin = compile(CodeType::Cubin);
    let header_only = cut_with_the_rest_in_spare_capacity(&cubin, 64);
    assert_refused(ObjectCode::from_cubin(header_only.clone(), "audit-b"), "past the end");
    // The driver sniffs, so no label lets it through.
    assert_refused(ObjectCode::from_fatbin(header_only.clone(), "audit-b"), "past the end");
    assert_refused(ObjectCode::from_ptx(header_only, "audit-b"), "past the end");
    // The whole cubin still loads.
    assert_first(&ObjectCode::from_cubin(cubin, "whole").unwrap());
}
