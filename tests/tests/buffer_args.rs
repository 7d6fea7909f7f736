//! Buffers and views as kernel arguments: the kernel gets their address, the launch keeps their
//! memory alive (other streams, captures, explicit graphs, executable-graph updates).

use cuda_core::graph::{CaptureMode, GraphDefinition};
use cuda_core::{launch, Buffer, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream};

const N: u32 = 4096;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// `fill(x, v, n)` sets n floats to v; `add(x, y, n)` adds x into y; `spin(cycles)` keeps a
/// stream busy.
fn kernels() -> (Kernel, Kernel, Kernel) {
    let source = r#"
        extern "C" __global__ void fill(float* x, float v, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = v;
        }
        extern "C" __global__ void add(const float* x, float* y, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] += x[i];
        }
        extern "C" __global__ void spin(long long cycles) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    (
        code.get_kernel("fill").unwrap(),
        code.get_kernel("add").unwrap(),
        code.get_kernel("spin").unwrap(),
    )
}

fn all() -> LaunchConfig {
    LaunchConfig::new(N.div_ceil(256), 256)
}

fn floats(d: &Device, s: &Stream, value: f32) -> Buffer {
    let b = d.allocate(N as usize * 4, s).unwrap();
    b.copy_from_host(&vec![value; N as usize], s).unwrap();
    b
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn buffers_and_typed_views_are_kernel_arguments() {
    let (d, s) = setup();
    let (fill, add, _) = kernels();
    let fill = fill.typed::<(*mut f32, f32, u32)>().unwrap();
    let add = add.typed::<(*mut f32, *mut f32, u32)>().unwrap();
    let x = floats(&d, &s, 0.0);
    let y = floats(&d, &s, 1.0);
    // SAFETY: each kernel touches N floats of buffers that hold N floats.
    unsafe {
        fill.launch(&s, &all(), (x.view_as::<f32>().unwrap(), 2.5f32, N))
            .unwrap();
        add.launch(
            &s,
            &all(),
            (x.view_as::<f32>().unwrap(), y.view_as::<f32>().unwrap(), N),
        )
        .unwrap();
        // Untyped: a &Buffer passes its address.
        launch(&s, &all(), add.kernel(), (&x, &y, N)).unwrap();
    }
    assert!(y.to_vec::<f32>(&s).unwrap().iter().all(|v| *v == 6.0));
    // Views start where they say: the second half only.
    let half = x.view(N as usize * 2, N as usize * 2).unwrap().cast::<f32>().unwrap();
    assert_eq!(half.len(), N as usize / 2);
    // SAFETY: the view holds N/2 floats.
    unsafe {
        fill.launch(&s, &LaunchConfig::new(N / 2 / 256, 256), (half, 9.0f32, N / 2))
            .unwrap()
    };
    let got = x.to_vec::<f32>(&s).unwrap();
    assert!(got[..N as usize / 2].iter().all(|v| *v == 2.5) && got[N as usize / 2..].iter().all(|v| *v == 9.0));
    let err = x.view(1, 8).unwrap().cast::<f32>().unwrap_err();
    assert!(err.to_string().contains("not aligned"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_buffer_used_by_a_kernel_on_another_stream_is_freed_after_it() {
    let (d, s) = setup();
    let (fill, _, spin) = kernels();
    let other = d.create_stream(Default::default()).unwrap();
    let check = d.create_stream(Default::default()).unwrap();
    for _ in 0..4 {
        let x = floats(&d, &s, 0.0);
        // `other` is busy, then writes x; x is dropped (freed on `s`) while that write waits.
        // SAFETY: spin takes a cycle count; fill writes N floats of x.
        unsafe {
            launch(&other, &LaunchConfig::new(1, 1), &spin, (20_000_000i64,)).unwrap();
            launch(&other, &all(), &fill, (&x, 5.0f32, N)).unwrap();
        }
        drop(x);
        // Memory allocated now must not be the memory the pending fill writes.
        let y = floats(&d, &s, 1.0);
        other.sync().unwrap();
        assert!(
            y.to_vec::<f32>(&check).unwrap().iter().all(|v| *v == 1.0),
            "the free waited for the fill"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn graphs_hold_the_buffers_their_kernels_take() {
    let (d, s) = setup();
    let (fill, add, _) = kernels();
    let out = floats(&d, &s, 0.0);
    // Captured: the graph holds `x` after the caller dropped it.
    let captured = {
        let x = floats(&d, &s, 3.0);
        s.sync().unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            // SAFETY: N floats each.
            unsafe { launch(c, &all(), &add, (&x, &out, N)) }
        })
        .unwrap()
    };
    // Explicit: the node holds `z`.
    let explicit = {
        let z = floats(&d, &s, 4.0);
        s.sync().unwrap();
        let g = GraphDefinition::new().unwrap();
        // SAFETY: N floats each.
        unsafe { g.launch(&all(), &add, (z.view_as::<f32>().unwrap(), &out, N)) }.unwrap();
        g.instantiate(&Default::default()).unwrap()
    };
    // Churn the pool: freed memory would be handed out again and overwritten.
    for _ in 0..8 {
        let junk = floats(&d, &s, -100.0);
        drop(junk);
    }
    captured.launch(&s).unwrap();
    explicit.launch(&s).unwrap();
    assert!(out.to_vec::<f32>(&s).unwrap().iter().all(|v| *v == 7.0));
    // An executable graph's kernel node given a new buffer holds it too.
    let mut graph = {
        let g = GraphDefinition::new().unwrap();
        let first = floats(&d, &s, 1.0);
        // SAFETY: N floats.
        unsafe { g.launch(&all(), &fill, (&first, 0.0f32, N)) }.unwrap();
        g.instantiate(&Default::default()).unwrap()
    };
    let node = graph.kernel_nodes().unwrap().remove(0);
    let target = {
        let t = floats(&d, &s, 1.0);
        // SAFETY: N floats.
        unsafe { graph.set_kernel_args(&node, (&t, 8.0f32, N)) }.unwrap();
        t.handle()
    };
    // Held by the graph: the pool never hands its memory out while the graph lives (without
    // the hold, a buffer of the same size on the same stream would get it back at once).
    s.sync().unwrap();
    for _ in 0..8 {
        let other = floats(&d, &s, -100.0);
        assert_ne!(other.handle(), target, "the graph's buffer was handed out again");
    }
    graph.launch(&s).unwrap();
    s.sync().unwrap();
    drop(graph);
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_updated_argument_is_ready_before_the_next_launch_uses_it() {
    let (d, a) = setup();
    let (fill, add, spin) = kernels();
    let out = floats(&d, &a, 0.0);
    let first = floats(&d, &a, 1.0);
    let g = GraphDefinition::new().unwrap();
    // SAFETY: N floats each.
    unsafe { g.launch(&all(), &add, (&first, &out, N)) }.unwrap();
    let mut graph = g.instantiate(&Default::default()).unwrap();
    graph.launch(&a).unwrap();
    a.sync().unwrap();
    let node = graph.kernel_nodes().unwrap().remove(0);
    // A new buffer, allocated and filled on a stream that is busy for a while.
    let b = d.create_stream(Default::default()).unwrap();
    // SAFETY: spin takes a cycle count.
    unsafe { launch(&b, &LaunchConfig::new(1, 1), &spin, (50_000_000i64,)).unwrap() };
    let late = d.allocate(N as usize * 4, &b).unwrap();
    // SAFETY: N floats.
    unsafe { launch(&b, &all(), &fill, (&late, 10.0f32, N)).unwrap() };
    // SAFETY: N floats each.
    unsafe { graph.set_kernel_args(&node, (&late, &out, N)) }.unwrap();
    drop(late);
    graph.launch(&a).unwrap();
    // 1 from the first launch, then 10 from the buffer once its fill on `b` is done.
    assert!(out.to_vec::<f32>(&a).unwrap().iter().all(|v| *v == 11.0));
}
