//! The strided copy kernel: any two layouts of the same shape, up to eight dimensions, one
//! element per thread iteration. Compiled with NVRTC the first time a device's architecture
//! needs it, then kept for the process.

use crate::compile::{CodeType, Kernel, ObjectCode, Program, ProgramOptions, SourceType};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Mutex;

/// The most dimensions the kernel handles.
pub(super) const MAX_DIMS: usize = 8;

const SOURCE: &str = r#"
struct Layout {
    long long shape[8];
    long long src[8];
    long long dst[8];
    int ndim;
};
struct Bytes16 { unsigned long long lo, hi; };
template <typename T>
__global__ void strided_copy(const T* src, T* dst, Layout l, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long rest = i;
        long long s = 0, d = 0;
        for (int k = l.ndim - 1; k >= 0; --k) {
            unsigned long long extent = (unsigned long long)l.shape[k];
            long long index = (long long)(rest % extent);
            rest /= extent;
            s += index * l.src[k];
            d += index * l.dst[k];
        }
        dst[d] = src[s];
    }
}
"#;

const NAMES: [&str; 5] = [
    "strided_copy<unsigned char>",
    "strided_copy<unsigned short>",
    "strided_copy<unsigned int>",
    "strided_copy<unsigned long long>",
    "strided_copy<Bytes16>",
];

/// The layouts of a copy, as the kernel takes them (`#[repr(C)]`, matching `Layout`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub(super) shape: [i64; MAX_DIMS],
    pub(super) src: [i64; MAX_DIMS],
    pub(super) dst: [i64; MAX_DIMS],
    pub(super) ndim: i32,
}

/// The compiled kernels, by architecture.
static CODE: Mutex<Vec<(String, ObjectCode)>> = Mutex::new(Vec::new());

/// The kernel for elements of `itemsize` bytes on `device`.
pub(super) fn kernel(device: &Device, itemsize: usize) -> Result<Kernel> {
    let name = match itemsize {
        1 => NAMES[0],
        2 => NAMES[1],
        4 => NAMES[2],
        8 => NAMES[3],
        16 => NAMES[4],
        other => {
            return Err(CudaError::InvalidArgument(format!(
                "strided copies of {other}-byte elements are not supported"
            )))
        }
    };
    let arch = format!("sm_{}", device.arch()?);
    let mut code = CODE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, c)) = code.iter().find(|(a, _)| *a == arch) {
        return c.get_kernel(name);
    }
    let options = ProgramOptions {
        arch: Some(arch.clone()),
        std: Some("c++17".into()),
        ..Default::default()
    };
    let compiled = Program::new(SOURCE, SourceType::Cxx, options)?.compile(CodeType::Cubin, &NAMES)?;
    let kernel = compiled.get_kernel(name)?;
    code.push((arch, compiled));
    Ok(kernel)
}

/// Launches the copy of `n` elements on `stream` with `kernel` (from [`kernel`], for the
/// stream's device and the elements' size).
///
/// # Safety
/// Every element offset the layout gives, from `src` and from `dst`, must lie in memory the
/// stream's device can read (and, for `dst`, write) until the copy is done, aligned for the
/// kernel's element (8 bytes for 16-byte elements).
pub(super) unsafe fn launch(
    stream: &Stream,
    kernel: &Kernel,
    src: u64,
    dst: u64,
    layout: &Layout,
    n: u64,
) -> Result<()> {
    let block = 256u32;
    let blocks = n.div_ceil(u64::from(block)).clamp(1, 65_535) as u32;
    let (mut src, mut dst, mut layout, mut n) = (src, dst, *layout, n);
    let mut params: [*mut std::ffi::c_void; 4] = [
        (&mut src as *mut u64).cast(),
        (&mut dst as *mut u64).cast(),
        (&mut layout as *mut Layout).cast(),
        (&mut n as *mut u64).cast(),
    ];
    // SAFETY: the parameters match the kernel's (two pointers, the layout by value, a count),
    // each pointing to a local that lives across the call; the caller vouches for the memory.
    unsafe {
        driver::cuLaunchKernel(
            kernel.handle() as driver::CUfunction,
            blocks,
            1,
            1,
            block,
            1,
            1,
            0,
            stream.handle(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .check("cuLaunchKernel")
}

// The C struct `Layout` of the kernel: 3 x 8 x 8 bytes, an int, padded to 8.
const _: () = assert!(std::mem::size_of::<Layout>() == 200);
