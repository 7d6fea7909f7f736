//! The launch path allocates nothing on the heap: a counting global allocator around 1000 launches.

use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// The count is process-wide: the tests of this file take turns (`cuda_tests::one_at_a_time`;
// the test harness runs them on several threads).

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn launches_allocate_nothing() {
    let _turn = cuda_tests::one_at_a_time();
    let d = Device::new(0).unwrap();
    d.set_current().unwrap();
    let source = r#"extern "C" __global__ void k(float a, float* x, unsigned n, int b, double c, long long d, float e, int f) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] += a + b + c + d + e + f;
    }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let kernel = code.get_kernel("k").unwrap();
    let typed = kernel.typed::<(f32, u64, u32, i32, f64, i64, f32, i32)>().unwrap();
    let stream = d.create_stream(Default::default()).unwrap();
    let mut x = 0u64;
    // SAFETY: a context is current; 1024 floats.
    unsafe { cuda_sys::driver::cuMemAlloc(&mut x, 4096) }.result().unwrap();
    let config = LaunchConfig::new(4, 256);
    let args = (1.0f32, x, 1024u32, 1i32, 1.0f64, 1i64, 1.0f32, 1i32);
    // Warm up: first calls resolve driver symbols and read device limits once.
    // SAFETY: the arguments match the kernel; x holds 1024 floats; synchronised below.
    unsafe { typed.launch(&stream, &config, args).unwrap() };
    stream.sync().unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        // SAFETY: as above.
        unsafe { typed.launch(&stream, &config, args).unwrap() };
    }
    let during = ALLOCATIONS.load(Ordering::Relaxed) - before;
    stream.sync().unwrap();
    assert_eq!(during, 0, "{during} heap allocations in 1000 launches");
    // SAFETY: allocated above; the stream is idle.
    unsafe { cuda_sys::driver::cuMemFree(x) }.result().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn launches_with_buffer_arguments_allocate_nothing() {
    let _turn = cuda_tests::one_at_a_time();
    let d = Device::new(0).unwrap();
    d.set_current().unwrap();
    let source = r#"extern "C" __global__ void add(const float* x, float* y, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] += x[i];
    }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let typed = code
        .get_kernel("add")
        .unwrap()
        .typed::<(*mut f32, *mut f32, u32)>()
        .unwrap();
    let stream = d.create_stream(Default::default()).unwrap();
    let x = d.allocate(4096, &stream).unwrap();
    let y = d.allocate(4096, &stream).unwrap();
    x.fill_u8(0, &stream).unwrap();
    y.fill_u8(0, &stream).unwrap();
    let (vx, vy) = (x.view_as::<f32>().unwrap(), y.view_as::<f32>().unwrap());
    let config = LaunchConfig::new(4, 256);
    // Warm up. SAFETY: 1024 floats each; synchronised below.
    unsafe { typed.launch(&stream, &config, (vx, vy, 1024u32)).unwrap() };
    stream.sync().unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        // SAFETY: as above.
        unsafe { typed.launch(&stream, &config, (vx, vy, 1024u32)).unwrap() };
    }
    let during = ALLOCATIONS.load(Ordering::Relaxed) - before;
    stream.sync().unwrap();
    assert_eq!(during, 0, "{during} heap allocations in 1000 launches with buffers");
}
