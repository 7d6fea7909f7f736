//! Regression tests for the soundness audit of commit 230d6ef
//! (`shared/reference/soundness_findings.md`): each test is written from safe code the way a
//! user would hit the finding (its number leads the name), and checks that the hole is closed.
//! Races get stress loops; results are verified on the GPU, and `run.sh --sanitize` runs these
//! under compute-sanitizer as well.

use cuda_core::graph::{CaptureMode, GraphBuilder, GraphDefinition};
use cuda_core::{
    launch, Buffer, CodeType, Context, ContextFlags, Device, DeviceMemoryResource, GraphMemoryResource, Kernel,
    LaunchConfig, LegacyPinnedMemoryResource, ManagedMemoryResource, MemoryResource, Program, ProgramOptions, Region2D,
    Region3D, SourceType, Stream, VirtualMemoryResource,
};
use cuda_sys::driver;
use cuda_tests::check;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// `spin(cycles)` keeps its stream busy; `add_one(bytes, n)` adds 1 to each byte.
struct Kernels {
    spin: Kernel,
    add_one: Kernel,
}

fn kernels() -> Kernels {
    let source = r#"
        extern "C" __global__ void spin(long long cycles) {
            long long t = clock64();
            while (clock64() - t < cycles) {}
        }
        extern "C" __global__ void add_one(unsigned char* x, size_t n) {
            size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
            if (i < n) x[i] += 1;
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    Kernels {
        spin: code.get_kernel("spin").unwrap(),
        add_one: code.get_kernel("add_one").unwrap(),
    }
}

/// Keeps `stream` busy for about `ms` milliseconds (at 2 GHz).
fn busy(k: &Kernels, stream: &Stream, ms: i64) {
    // SAFETY: spin(long long) touches no memory.
    unsafe { launch(stream, &LaunchConfig::new(1, 1), &k.spin, (ms * 2_000_000i64,)) }.unwrap();
}

fn filled(d: &Device, s: &Stream, n: usize, value: u8) -> Buffer {
    let b = d.allocate(n, s).unwrap();
    b.fill_u8(value, s).unwrap();
    s.sync().unwrap();
    b
}

fn all_equal(b: &Buffer, s: &Stream, value: u8) -> bool {
    b.to_vec::<u8>(s).unwrap().iter().all(|v| *v == value)
}

/// `d.sync()`, retried while another test captures in the context (a context-wide
/// synchronisation is refused then: it would invalidate that capture).
fn sync_device(d: &Device) {
    let start = Instant::now();
    while let Err(e) = d.sync() {
        assert!(
            e.to_string().contains("being captured") && start.elapsed() < Duration::from_secs(10),
            "{e}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (up to 10 s) for something the release thread does.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A gate host callbacks wait at, opened by the test.
#[derive(Clone, Default)]
struct Gate(Arc<AtomicBool>);

impl Gate {
    fn wait(&self) {
        let start = Instant::now();
        while !self.0.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Sets its flag when dropped: worker threads that race the test's thread stop also when that
/// thread panics (the scope that runs them waits for them).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Begins captures on `s` for 3 seconds, each kept open for `open` before its building ends,
/// and hands each builder to `each`; returns how many there were.
fn capture_repeatedly(s: &Stream, open: Duration, mut each: impl FnMut(GraphBuilder)) -> usize {
    let mut captures = 0;
    let begun = Instant::now();
    while begun.elapsed() < Duration::from_secs(3) {
        let mut b = s.begin_capture(CaptureMode::Relaxed).unwrap();
        if !open.is_zero() {
            std::thread::sleep(open);
        }
        b.end_building().unwrap();
        each(b);
        captures += 1;
    }
    captures
}

// Finding 1: the closures given by Graph::set_callback were freed while a launch in a created
// context still had to call them.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f01_dropping_a_graph_keeps_its_callbacks_until_launches_in_any_context_end() {
    let (d, _) = setup();
    let ctx = Context::create(&d, ContextFlags::default()).unwrap();
    ctx.set_current().unwrap();
    let s = ctx.create_stream(Default::default()).unwrap();
    let g = GraphDefinition::new().unwrap();
    let node = g.callback(|| {}).unwrap();
    let mut exec = g.instantiate(&Default::default()).unwrap();
    let gate = Gate::default();
    let token = Arc::new(());
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let (gate, token, ran) = (gate.clone(), token.clone(), ran.clone());
        exec.set_callback(&node, move || {
            gate.wait();
            let _ = &token;
            ran.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    exec.launch(&s).unwrap();
    drop(exec); // the launch is blocked in the callback
    drop(g);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        Arc::strong_count(&token),
        2,
        "the callback is kept while a launch may call it"
    );
    gate.open();
    s.sync().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    eventually("the callback to be released", || Arc::strong_count(&token) == 1);
    d.set_current().unwrap();
}

// Finding 2: buffers allocated while a capture ran were taken for graph memory whatever their
// resource, so graphs did not hold managed, pinned or custom memory they write.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f02_graphs_hold_managed_and_pinned_buffers_allocated_during_a_capture() {
    let (d, s) = setup();
    let out = filled(&d, &s, 4096, 0);
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::Relaxed).unwrap();
    // Unpooled: a managed pool refuses a capturing stream, as cuda.core's does.
    let managed = ManagedMemoryResource::unpooled(None)
        .allocate(4096, builder.stream())
        .unwrap();
    let pinned = LegacyPinnedMemoryResource::new(Default::default())
        .allocate(4096, builder.stream())
        .unwrap();
    assert!(!managed.is_graph_memory() && !pinned.is_graph_memory());
    managed.fill_u8(7, builder.stream()).unwrap();
    pinned.fill_u8(1, builder.stream()).unwrap();
    managed.copy_to(&out, builder.stream()).unwrap();
    assert!(managed.is_used_by_graph() && pinned.is_used_by_graph());
    builder.end_building().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    drop((managed, pinned)); // the graph holds both
    for _ in 0..3 {
        graph.launch(&s).unwrap();
    }
    s.sync().unwrap();
    assert!(all_equal(&out, &s, 7));
    drop(graph);
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Finding 3: copy_2d computed its bounds and addresses with wrapping arithmetic; a negative
// offset wrote another allocation.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f03_copy_regions_that_wrap_are_refused_and_neighbours_untouched() {
    let (d, s) = setup();
    let n = 1 << 20;
    let lo = filled(&d, &s, n, 0x11);
    let hi = filled(&d, &s, n, 0x22);
    let src = filled(&d, &s, n, 0x77);
    let region = |buffer, offset, pitch| Region2D { buffer, offset, pitch };
    let before = 0usize.wrapping_sub(n);
    // A negative offset.
    let err = Buffer::copy_2d(region(&hi, before, n), region(&src, 0, n), n, 1, &s).unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    // (height - 1) * pitch wrapping to just below the buffer.
    let pitch = usize::MAX / 2 + 1;
    assert!(Buffer::copy_2d(region(&hi, 0, pitch), region(&src, 0, pitch), 16, 3, &s).is_err());
    // An offset past the end with nothing to copy.
    assert!(Buffer::copy_2d(region(&hi, n + 1, n), region(&src, 0, n), 0, 0, &s).is_err());
    // The same in 3D.
    let r3 = |buffer, offset| Region3D {
        buffer,
        offset,
        pitch: n,
        rows_per_slice: 1,
    };
    assert!(Buffer::copy_3d(r3(&hi, before), r3(&src, 0), (n, 1, 1), &s).is_err());
    let tall = Region3D {
        buffer: &hi,
        offset: 0,
        pitch: 16,
        rows_per_slice: usize::MAX / 8,
    };
    assert!(Buffer::copy_3d(tall, tall, (16, 2, 2), &s).is_err());
    // A region that fits still copies.
    Buffer::copy_2d(region(&hi, 16, 64), region(&src, 0, 64), 32, 4, &s).unwrap();
    s.sync().unwrap();
    assert!(all_equal(&lo, &s, 0x11), "the neighbouring allocation is untouched");
    let h = hi.to_vec::<u8>(&s).unwrap();
    assert!(h[16..48].iter().all(|v| *v == 0x77) && h[..16].iter().all(|v| *v == 0x22));
}

// Finding 4: memset nodes computed their extent with wrapping arithmetic; a graph wrote outside
// its buffer at launch.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f04_memset_nodes_that_wrap_are_refused() {
    let (d, s) = setup();
    let n = 1 << 20;
    let lo = filled(&d, &s, n, 0x11);
    let dst = filled(&d, &s, n, 0);
    let g = GraphDefinition::new().unwrap();
    // A row of 2^62 + 16 four-byte elements is 64 bytes when it wraps.
    assert!(g.memset_2d(&dst, 0x77u32, (1usize << 62) + 16, 2, 64).is_err());
    // A pitch that puts row 1 before the buffer.
    assert!(g.memset_2d(&dst, 0x77u8, 16, 2, 0usize.wrapping_sub(n)).is_err());
    // No rows.
    assert!(g.memset_2d(&dst, 0x77u8, 16, 0, 16).is_err());
    assert_eq!(g.num_nodes().unwrap(), 0);
    g.memset_2d(&dst, 0x77u8, 16, 2, 32).unwrap();
    let exec = g.instantiate(&Default::default()).unwrap();
    exec.launch(&s).unwrap();
    s.sync().unwrap();
    assert!(all_equal(&lo, &s, 0x11));
    let v = dst.to_vec::<u8>(&s).unwrap();
    assert!(
        v[..16].iter().all(|x| *x == 0x77) && v[16..32].iter().all(|x| *x == 0) && v[32..48].iter().all(|x| *x == 0x77)
    );
}

// Finding 5: a buffer was freed on its deallocation stream only, while another stream still
// copied into it; the memory went to a live buffer, which the copy then overwrote.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f05_a_buffer_is_freed_after_every_stream_that_used_it() {
    let (d, s1) = setup();
    let s2 = d.create_stream(Default::default()).unwrap();
    let k = kernels();
    let n = 64 << 20;
    let src = filled(&d, &s1, n, 0x55);
    for _ in 0..3 {
        let doomed = d.allocate(n, &s1).unwrap();
        s1.sync().unwrap();
        busy(&k, &s2, 100);
        doomed.copy_from(&src, &s2).unwrap(); // still queued behind the spin
        drop(doomed);
        let live = d.allocate(n, &s1).unwrap();
        live.fill_u8(0xAA, &s1).unwrap();
        s1.sync().unwrap();
        s2.sync().unwrap();
        assert!(
            all_equal(&live, &s1, 0xAA),
            "a live buffer was overwritten by a freed one's copy"
        );
    }
}

// Review of issue 21's buffer change (a bug older than it): `close` handed the streams a buffer
// was used on to the graph holding its memory, then the buffer's drop handed over the (now
// empty) list again, so the graph's free waited for none of them.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_closed_buffer_that_a_graph_holds_is_freed_after_every_stream_that_used_it() {
    let (d, s1) = setup();
    let s2 = d.create_stream(Default::default()).unwrap();
    let k = kernels();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let n = 64 << 20;
    let src = filled(&d, &s1, n, 0x55);
    for _ in 0..3 {
        let doomed = pool.allocate(n, &s1).unwrap();
        s1.sync().unwrap();
        // The graph holds the memory from here on.
        let graph = s1
            .capture_graph(CaptureMode::ThreadLocal, |c| doomed.fill_u8(0, c))
            .unwrap();
        busy(&k, &s2, 100);
        doomed.copy_from(&src, &s2).unwrap(); // still queued behind the spin
        doomed.close(None).unwrap();
        drop(graph); // the last holder: its free must wait for s2's copy
                     // The graph lets go of the memory through the driver's user-object release, on the
                     // release thread: wait until the free is queued, so the next allocation may reuse it.
        eventually("the graph's free", || pool.used_mem_current().unwrap() == 0);
        let live = pool.allocate(n, &s1).unwrap();
        live.fill_u8(0xAA, &s1).unwrap();
        s1.sync().unwrap();
        s2.sync().unwrap();
        assert!(
            all_equal(&live, &s1, 0xAA),
            "a live buffer was overwritten by the copy into a closed buffer a graph held"
        );
    }
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Finding 5, the other side: a stream that first uses a buffer allocated on another stream is
// ordered after the allocation (the memory may still be in use there by its previous owner).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f05_a_stream_first_using_a_buffer_waits_for_its_allocation() {
    let (d, s1) = setup();
    let s2 = d.create_stream(Default::default()).unwrap();
    let k = kernels();
    let n = 64 << 20;
    let src = filled(&d, &s1, n, 0x55);
    let kept = filled(&d, &s1, n, 0);
    let previous = d.allocate(n, &s1).unwrap();
    previous.copy_from(&src, &s1).unwrap();
    busy(&k, &s1, 100);
    previous.copy_to(&kept, &s1).unwrap(); // reads `previous` after the spin
    drop(previous);
    let next = d.allocate(n, &s1).unwrap(); // may reuse previous's memory, in s1's order
    next.fill_u8(0, &s2).unwrap(); // on another stream: must wait for s1
    s2.sync().unwrap();
    s1.sync().unwrap();
    assert!(
        all_equal(&kept, &s1, 0x55),
        "a fill on another stream overtook the copy"
    );
}

// Finding 5, per-thread default stream: a buffer freed on the per-thread default stream, dropped
// on another thread, was freed on that thread's per-thread stream instead.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f05_a_per_thread_stream_buffer_dropped_on_another_thread() {
    let (d, s) = setup();
    let k = Arc::new(kernels());
    let n = 64 << 20;
    let src = Arc::new(filled(&d, &s, n, 0x55));
    for _ in 0..2 {
        let (k2, src2) = (k.clone(), src.clone());
        let (sent, done) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        // The thread stays alive meanwhile (a thread ending with such work queued on its
        // per-thread stream waits for it in the driver).
        let worker = std::thread::spawn(move || {
            d.set_current().unwrap();
            let pt = Stream::per_thread_default();
            let doomed = d.allocate(n, &pt).unwrap();
            busy(&k2, &pt, 100);
            doomed.copy_from(&src2, &pt).unwrap();
            sent.0.send(doomed).unwrap(); // to the main thread, with its copy still queued
            done.1.recv().unwrap();
            pt.sync().unwrap();
        });
        let doomed = sent.1.recv().unwrap();
        drop(doomed);
        let pt = Stream::per_thread_default();
        let live = d.allocate(n, &pt).unwrap();
        live.fill_u8(0xAA, &pt).unwrap();
        pt.sync().unwrap();
        sync_device(&d);
        assert!(all_equal(&live, &pt, 0xAA));
        done.0.send(()).unwrap();
        worker.join().unwrap();
    }
}

// Finding 8: MemoryResource was a safe trait whose answers Buffer trusted (see the compile-fail
// doctest on the trait); the resources of this crate still work through the trait object.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f08_resources_are_used_through_the_unsafe_trait() {
    let (d, s) = setup();
    let resource: Arc<dyn MemoryResource> = d.memory_resource().unwrap();
    let b = Buffer::allocate(resource, 64, &s).unwrap();
    b.fill_u8(3, &s).unwrap();
    assert!(all_equal(&b, &s, 3));
}

// Finding 10: kernel nodes did not keep their kernel's code loaded.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f10_graphs_keep_their_kernels_loaded() {
    let (d, s) = setup();
    let x = filled(&d, &s, 256, 0);
    let (explicit, captured) = {
        let k = kernels();
        let g = GraphDefinition::new().unwrap();
        // SAFETY: add_one(bytes, n) over x's 256 bytes; x outlives both graphs.
        unsafe { g.launch(&LaunchConfig::new(1, 256), &k.add_one, (x.handle(), 256usize)) }.unwrap();
        let explicit = g.instantiate(&Default::default()).unwrap();
        let captured = s
            .capture_graph(CaptureMode::ThreadLocal, |c| {
                // SAFETY: as above.
                unsafe { launch(c, &LaunchConfig::new(1, 256), &k.add_one, (x.handle(), 256usize)) }
            })
            .unwrap();
        (explicit, captured)
    }; // the last Kernel and ObjectCode the caller had are gone
    for _ in 0..3 {
        explicit.launch(&s).unwrap();
        captured.launch(&s).unwrap();
    }
    s.sync().unwrap();
    assert!(all_equal(&x, &s, 6));
}

// Finding 11: graph memory was an ordinary buffer outside its graph.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f11_graph_memory_is_confined_to_its_capture() {
    let (d, s) = setup();
    let out = filled(&d, &s, 4096, 0);
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    let temp = GraphMemoryResource::new(&d).allocate(4096, builder.stream()).unwrap();
    assert!(temp.is_graph_memory());
    temp.fill_u8(9, builder.stream()).unwrap();
    temp.copy_to(&out, builder.stream()).unwrap();
    let err = temp.fill_u8(1, &s).unwrap_err();
    assert!(err.to_string().contains("graph memory"), "{err}");
    let mut other = d.create_graph_builder().unwrap();
    other.begin_building(CaptureMode::ThreadLocal).unwrap();
    assert!(temp.fill_u8(1, other.stream()).is_err(), "another graph cannot use it");
    other.end_building().unwrap();
    assert!(GraphDefinition::new().unwrap().memset(&temp, 1u8, 16).is_err());
    assert!(temp.to_vec::<u8>(&s).is_err());
    builder.end_building().unwrap(); // frees it inside the graph
    assert!(temp.fill_u8(1, builder.stream()).is_err(), "not after the capture");
    let graph = builder.complete(&Default::default()).unwrap();
    drop(temp);
    for _ in 0..3 {
        graph.launch(&s).unwrap(); // relaunching works: each launch gave the memory back
    }
    s.sync().unwrap();
    assert!(all_equal(&out, &s, 9));
}

// Finding 12: threads sharing a GraphDefinition made unserialised driver calls on it.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f12_threads_sharing_a_graph_definition() {
    let (d, _) = setup();
    let g = GraphDefinition::new().unwrap();
    let token = Arc::new(());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (g, token) = (g.clone(), token.clone());
            scope.spawn(move || {
                d.set_current().unwrap();
                for _ in 0..300 {
                    g.keep_alive(token.clone()).unwrap();
                }
            });
        }
        let g = g.clone();
        scope.spawn(move || {
            d.set_current().unwrap();
            for _ in 0..300 {
                g.join(&[]).unwrap();
            }
        });
    });
    assert_eq!(g.num_nodes().unwrap(), 300);
    assert_eq!(Arc::strong_count(&token), 1 + 4 * 300);
    let clone = g.clone_graph().unwrap();
    drop(g);
    assert_eq!(clone.num_nodes().unwrap(), 300);
    drop(clone);
    eventually("every value to be released", || Arc::strong_count(&token) == 1);
}

// Finding 13: checking for a capture and enqueueing could be split by another thread's capture,
// recording a run-once host function into a graph.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f13_no_operation_slips_into_a_capture_unheld() {
    let (d, s) = setup();
    let queued = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let x = Arc::new(filled(&d, &s, 4096, 0));
    std::thread::scope(|scope| {
        {
            let (s, queued, ran, stop, x) = (s.clone(), queued.clone(), ran.clone(), stop.clone(), x.clone());
            scope.spawn(move || {
                d.set_current().unwrap();
                while !stop.load(Ordering::SeqCst) {
                    // Keep the queue short: host functions run far slower than they queue.
                    while queued.load(Ordering::SeqCst) > ran.load(Ordering::SeqCst) + 256 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    let ran = ran.clone();
                    if s.launch_host_func(move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                    })
                    .is_ok()
                    {
                        queued.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = x.fill_u8(1, &s);
                }
            });
        }
        let _stop = StopOnDrop(stop.clone());
        let captures = capture_repeatedly(&s, Duration::ZERO, |b| {
            let definition = b.graph_definition().unwrap();
            for node in definition.nodes().unwrap() {
                assert_ne!(
                    node.node_type().unwrap(),
                    cuda_core::graph::NodeType::Host,
                    "a host function was recorded into a graph"
                );
            }
            // A captured fill holds its buffer: launching the graph is safe whatever it holds.
            let graph = b.complete(&Default::default()).unwrap();
            graph.launch(&s).unwrap();
        });
        stop.store(true, Ordering::SeqCst);
        assert!(captures > 10);
    });
    s.sync().unwrap();
    eventually("every host function to run", || {
        ran.load(Ordering::SeqCst) == queued.load(Ordering::SeqCst)
    });
    assert!(queued.load(Ordering::SeqCst) > 0);
}

// The same race for pool memory, whose allocation and free skip the operation's closure (one
// driver call each inside the capture gate): none may be recorded into a capture begun on their
// stream by another thread, and every free is done once the capture is over.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f13_pool_allocations_and_frees_never_slip_into_a_capture() {
    let (d, s) = setup();
    let owned = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let start = owned.used_mem_current().unwrap();
    let default = d.memory_resource().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (allocated, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (s, stop, owned, default) = (s.clone(), stop.clone(), owned.clone(), default.clone());
            let (allocated, refused) = (allocated.clone(), refused.clone());
            scope.spawn(move || {
                d.set_current().unwrap();
                while !stop.load(Ordering::SeqCst) {
                    let got = if t == 0 {
                        owned.allocate(1 << 16, &s)
                    } else {
                        default.allocate(1 << 16, &s)
                    };
                    match got {
                        // Dropped at once: freed on `s`, or after the capture on it ends.
                        Ok(buffer) => drop(buffer),
                        Err(e) => {
                            assert!(e.to_string().contains("captur"), "{e}");
                            refused.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                    allocated.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let _stop = StopOnDrop(stop.clone());
        let captures = capture_repeatedly(&s, Duration::from_micros(200), |b| {
            for node in b.graph_definition().unwrap().nodes().unwrap() {
                let kind = node.node_type().unwrap();
                assert!(
                    !matches!(
                        kind,
                        cuda_core::graph::NodeType::MemAlloc | cuda_core::graph::NodeType::MemFree
                    ),
                    "a pool allocation or free was recorded into a graph ({kind:?})"
                );
            }
        });
        stop.store(true, Ordering::SeqCst);
        assert!(captures > 10, "{captures} captures");
    });
    assert!(allocated.load(Ordering::SeqCst) > 100, "the allocating threads ran");
    s.sync().unwrap();
    // Frees handed to the release thread during a capture are done after it: the pool is back
    // where it started.
    eventually("every deferred free", || {
        s.sync().unwrap();
        owned.used_mem_current().unwrap() == start
    });
}

// Finding 14: a host function's captures were dropped on the driver's callback thread.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f14_host_function_captures_are_dropped_off_the_driver_thread() {
    struct Probe(Arc<Mutex<Option<String>>>);
    impl Drop for Probe {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(std::thread::current().name().unwrap_or("unnamed").to_string());
        }
    }
    let (d, s) = setup();
    let seen = Arc::new(Mutex::new(None));
    let called = Arc::new(Mutex::new(None));
    {
        // The closure holds a buffer and the last clone of a stream: both call CUDA when dropped.
        let probe = Probe(seen.clone());
        let buffer = filled(&d, &s, 1 << 20, 1);
        let own = d.create_stream(Default::default()).unwrap();
        let called = called.clone();
        s.launch_host_func(move || {
            let _ = (&probe, &buffer, &own);
            // CUDA must not be called here: this crate refuses.
            *called.lock().unwrap() = Some(own.sync().is_err());
        })
        .unwrap();
    }
    s.sync().unwrap();
    eventually("the closure to be dropped", || seen.lock().unwrap().is_some());
    assert_eq!(seen.lock().unwrap().as_deref(), Some("cuda-core-release"));
    assert_eq!(
        *called.lock().unwrap(),
        Some(true),
        "a CUDA call from the callback is refused"
    );
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Finding 15: values used inside conditional bodies were attached to the body graph, not the
// root the executable graph holds. (Bodies cannot hold host nodes: the launch is held at a
// callback before the conditional node, so the body runs after the graph was dropped.)
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f15_values_of_conditional_bodies_live_until_the_launch_ends() {
    let (d, s) = setup();
    let gate = Gate::default();
    let token = Arc::new(());
    let out = filled(&d, &s, 4096, 0);
    let graph = {
        let scratch = filled(&d, &s, 4096, 0);
        let mut builder = d.create_graph_builder().unwrap();
        builder.begin_building(CaptureMode::ThreadLocal).unwrap();
        {
            let gate = gate.clone();
            builder.callback(move || gate.wait()).unwrap();
        }
        let condition = builder.create_condition(Some(1)).unwrap();
        let mut body = builder.if_then(&condition).unwrap();
        body.begin_building(CaptureMode::ThreadLocal).unwrap();
        scratch.fill_u8(42, body.stream()).unwrap();
        scratch.copy_to(&out, body.stream()).unwrap();
        body.keep_alive(token.clone()).unwrap();
        body.end_building().unwrap();
        builder.end_building().unwrap();
        builder.complete(&Default::default()).unwrap()
    }; // the builders, the definition and `scratch` are gone
    graph.launch(&s).unwrap();
    // Dropping an executable graph with conditional nodes waits for its launches (the driver
    // does): the gate is opened from another thread, after checking the body's values are held.
    let opener = {
        let (gate, token) = (gate.clone(), token.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let held = Arc::strong_count(&token);
            gate.open();
            held
        })
    };
    drop(graph);
    assert_eq!(
        opener.join().unwrap(),
        3,
        "the body's values live while the launch runs"
    );
    s.sync().unwrap();
    assert!(all_equal(&out, &s, 42), "the body ran on live memory");
    eventually("the body's values to be released", || Arc::strong_count(&token) == 1);
}

// Finding 16: a created context could be destroyed while current on another thread.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f16_a_context_current_on_another_thread_stays_alive() {
    let (d, _) = setup();
    let ctx = Context::create(&d, ContextFlags::default()).unwrap();
    let handle = ctx.handle() as usize;
    let (made_current, go) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let worker = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            ctx.set_current().unwrap();
            drop(ctx);
            made_current.0.send(()).unwrap();
            go.1.recv().unwrap();
            // Every other clone is gone: the thread's own hold keeps the context.
            let current = Context::current().unwrap().unwrap();
            assert_eq!(current.handle() as usize, handle);
            let s = current.create_stream(Default::default()).unwrap();
            let b = ManagedMemoryResource::new(None).unwrap().allocate(64, &s).unwrap();
            b.fill_u8(5, &s).unwrap();
            assert!(b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 5));
            drop((b, s, current));
            d.set_current().unwrap(); // lets go of the created context: destroyed now
        })
    };
    made_current.1.recv().unwrap();
    drop(ctx);
    go.0.send(()).unwrap();
    worker.join().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Finding 20: virtual-memory sizes rounded with unchecked arithmetic.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f20_virtual_memory_sizes_that_overflow_are_errors() {
    let (d, s) = setup();
    let vmm = VirtualMemoryResource::new(&d, Default::default()).unwrap();
    assert!(vmm.allocate(usize::MAX, &s).is_err());
    let mut b = vmm.allocate(1, &s).unwrap();
    assert_eq!(
        b.size(),
        vmm.granularity(),
        "sizes round up to the granularity, as cuda.core's"
    );
    let err = vmm.grow(&mut b, usize::MAX, &s).unwrap_err();
    assert!(err.to_string().contains("granularity"), "{err}");
    assert_eq!(b.size(), vmm.granularity(), "a failed grow leaves the buffer as it was");
}

// Finding 21: occupancy queries cast sizes to i32; a huge block size gave a misleading error.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn f21_occupancy_queries_refuse_sizes_the_driver_cannot_take() {
    let (d, _) = setup();
    let k = kernels();
    let e = k
        .spin
        .max_active_blocks_per_multiprocessor(&d, u32::MAX, 0)
        .unwrap_err();
    assert!(e.to_string().contains("more than any device"), "{e}");
    assert!(k.spin.max_potential_block_size(&d, 0, u32::MAX).is_err());
    assert!(k.spin.max_active_blocks_per_multiprocessor(&d, 128, 0).unwrap() > 0);
}

// Issue 12: an executable graph releases the values per-node updates replaced once the launches
// that used them are done (memory no longer grows with every update).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn updates_release_replaced_values_after_their_launches() {
    let (_, s) = setup();
    let g = GraphDefinition::new().unwrap();
    let node = g.callback(|| {}).unwrap();
    let mut exec = g.instantiate(&Default::default()).unwrap();
    let first = Arc::new(());
    let second = Arc::new(());
    let gate = Gate::default();
    {
        let (first, gate) = (first.clone(), gate.clone());
        exec.set_callback(&node, move || {
            gate.wait();
            let _ = &first;
        })
        .unwrap();
    }
    exec.launch(&s).unwrap(); // blocked in the first callback
    {
        let second = second.clone();
        exec.set_callback(&node, move || {
            let _ = &second;
        })
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(Arc::strong_count(&first), 2, "replaced, but a launch still uses it");
    gate.open();
    exec.launch(&s).unwrap();
    s.sync().unwrap();
    eventually("the replaced callback to be released", || {
        Arc::strong_count(&first) == 1
    });
    assert_eq!(Arc::strong_count(&second), 2, "the current callback stays");
    for _ in 0..50 {
        let token = second.clone();
        exec.set_callback(&node, move || {
            let _ = &token;
        })
        .unwrap();
    }
    exec.launch(&s).unwrap();
    s.sync().unwrap();
    eventually("replaced callbacks to be released", || Arc::strong_count(&second) == 2);
    drop(exec);
    eventually("everything to be released", || Arc::strong_count(&second) == 1);
}

// An executable graph launched on a stream being captured would be recorded without being held.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_graph_is_not_launched_into_a_capture() {
    let (d, s) = setup();
    let g = GraphDefinition::new().unwrap();
    g.join(&[]).unwrap();
    let exec = g.instantiate(&Default::default()).unwrap();
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    let err = exec.launch(builder.stream()).unwrap_err();
    assert!(err.to_string().contains("embed"), "{err}");
    builder.end_building().unwrap();
    exec.launch(&s).unwrap();
    s.sync().unwrap();
}

// Pools are shared between streams: an owned pool's buffers used on three streams and freed on
// a fourth come back whole.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn buffers_used_on_many_streams_are_freed_after_all_of_them() {
    let (d, s) = setup();
    let k = kernels();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let streams: Vec<Stream> = (0..3).map(|_| d.create_stream(Default::default()).unwrap()).collect();
    let n = 1 << 20;
    for round in 0..20 {
        let b = pool.allocate(n, &s).unwrap();
        b.fill_u8(0, &s).unwrap();
        for (i, st) in streams.iter().enumerate() {
            if (round + i) % 2 == 0 {
                busy(&k, st, 2);
            }
            // SAFETY: add_one over b's n bytes; b is held until every stream is done with it.
            unsafe {
                launch(
                    st,
                    &LaunchConfig::new((n as u32).div_ceil(256), 256),
                    &k.add_one,
                    (b.handle(), n),
                )
            }
            .unwrap();
            b.fill_u8(0, st).unwrap();
        }
        let mut b = b;
        b.set_deallocation_stream(&streams[round % 3]).unwrap();
        drop(b);
    }
    sync_device(&d);
    assert_eq!(pool.used_mem_current().unwrap(), 0);
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review of the fixes, H1: a graph launched on a stream that never saw a buffer's allocation
// waits for it (the memory may still be in use by a freed buffer's work on its stream).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn graph_launches_follow_the_allocation_of_what_they_use() {
    let (d, s1) = setup();
    let s3 = d.create_stream(Default::default()).unwrap();
    let k = kernels();
    let n = 64 << 20;
    for explicit in [true, false] {
        let b = after_a_late_fill(&d, &s1, &k, n);
        let graph = if explicit {
            let g = GraphDefinition::new().unwrap();
            g.memset(&b, 0x11u8, n).unwrap();
            g.instantiate(&Default::default()).unwrap()
        } else {
            let mut builder = d.create_graph_builder().unwrap();
            builder.begin_building(CaptureMode::ThreadLocal).unwrap();
            b.fill_u8(0x11, builder.stream()).unwrap();
            builder.end_building().unwrap();
            builder.complete(&Default::default()).unwrap()
        };
        graph.launch(&s3).unwrap(); // must not overtake the fill of the freed buffer
        s3.sync().unwrap();
        s1.sync().unwrap();
        assert!(
            all_equal(&b, &s1, 0x11),
            "a freed buffer's late fill overwrote the graph's (explicit: {explicit})"
        );
    }
}

/// A buffer of `n` bytes allocated on `s1` right after another was freed there behind 100 ms of
/// work and a fill of 0xEE: it may reuse the freed memory, which the late fill writes, in `s1`'s
/// order. Work on it that does not follow its allocation sees its bytes overwritten.
fn after_a_late_fill(d: &Device, s1: &Stream, k: &Kernels, n: usize) -> Buffer {
    let previous = d.allocate(n, s1).unwrap();
    busy(k, s1, 100);
    previous.fill_u8(0xEE, s1).unwrap(); // after the spin
    drop(previous);
    d.allocate(n, s1).unwrap()
}

// Review of the Rust-side graph holdings: a launch or upload refused because its stream was being
// captured noted the stream as having waited for the allocations of what the graph uses, so the
// next launch there skipped those waits.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_launch_refused_during_a_capture_still_waits_for_allocations_later() {
    let (d, s1) = setup();
    let s3 = d.create_stream(Default::default()).unwrap();
    let k = kernels();
    let n = 64 << 20;
    for upload in [true, false] {
        let b = after_a_late_fill(&d, &s1, &k, n);
        let g = GraphDefinition::new().unwrap();
        g.memset(&b, 0x11u8, n).unwrap();
        let graph = g.instantiate(&Default::default()).unwrap();
        let mut capture = s3.begin_capture(CaptureMode::ThreadLocal).unwrap();
        let refused = if upload { graph.upload(&s3) } else { graph.launch(&s3) };
        let err = refused.unwrap_err();
        assert!(err.to_string().contains("being captured"), "{err}");
        capture.end_building().unwrap();
        graph.launch(&s3).unwrap(); // must not overtake the fill of the freed buffer
        s3.sync().unwrap();
        s1.sync().unwrap();
        assert!(
            all_equal(&b, &s1, 0x11),
            "after a refused {}, a freed buffer's late fill overwrote the graph's",
            if upload { "upload" } else { "launch" }
        );
    }
}

// Review, H2 and H3: what a capture records into, and what graph memory's order depends on,
// cannot be changed through the explicit API.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn graphs_being_recorded_and_graph_memory_order_are_protected() {
    let (d, s) = setup();
    let x = filled(&d, &s, 256, 0);
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    let condition = builder.create_condition(Some(0)).unwrap();
    let mut body = builder.if_then(&condition).unwrap();
    body.begin_building(CaptureMode::ThreadLocal).unwrap();
    x.fill_u8(1, body.stream()).unwrap();
    builder.end_building().unwrap();
    let definition = builder.graph_definition().unwrap();
    let conditional = definition
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.node_type().unwrap() == cuda_core::graph::NodeType::Conditional)
        .unwrap();
    let cuda_core::graph::NodeParams::Conditional { branches, .. } = conditional.params().unwrap() else {
        panic!("a conditional node")
    };
    let err = branches[0].join(&[]).unwrap_err();
    assert!(err.to_string().contains("being recorded"), "{err}");
    let err = conditional.clone().destroy().unwrap_err();
    assert!(err.to_string().contains("capture records into a body"), "{err}");
    body.end_building().unwrap();
    conditional.destroy().unwrap();
    assert!(builder.if_then(&condition).is_err(), "the parent capture is over");

    // Graph memory: its free follows its uses through edges that cannot be taken away.
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    let temp = GraphMemoryResource::new(&d).allocate(256, builder.stream()).unwrap();
    temp.fill_u8(3, builder.stream()).unwrap();
    temp.copy_to(&x, builder.stream()).unwrap();
    drop(temp);
    builder.end_building().unwrap();
    let definition = builder.graph_definition().unwrap();
    let nodes = definition.nodes().unwrap();
    let with_deps = nodes.iter().find(|n| !n.dependencies().unwrap().is_empty()).unwrap();
    let dep = with_deps.dependencies().unwrap().remove(0);
    let err = with_deps.remove_dependencies(&[&dep]).unwrap_err();
    assert!(err.to_string().contains("graph memory"), "{err}");
    assert!(nodes[0].clone().destroy().is_err());
    let graph = builder.complete(&Default::default()).unwrap();
    graph.launch(&s).unwrap();
    s.sync().unwrap();
    assert!(all_equal(&x, &s, 3));
}

// Review, M1: memory allocated in a created context, and graphs instantiated in one, keep it.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn created_contexts_live_as_long_as_what_was_made_in_them() {
    let (d, _) = setup();
    let (buffer, graph, stream) = {
        let ctx = Context::create(&d, ContextFlags::default()).unwrap();
        ctx.push().unwrap();
        let stream = ctx.create_stream(Default::default()).unwrap();
        let buffer = ManagedMemoryResource::new(None)
            .unwrap()
            .allocate(4096, &stream)
            .unwrap();
        buffer.fill_u8(4, &stream).unwrap();
        let g = GraphDefinition::new().unwrap();
        g.memset(&buffer, 5u8, 4096).unwrap();
        let graph = g.instantiate(&Default::default()).unwrap();
        Context::pop_current().unwrap();
        let other = d.create_stream(Default::default()).unwrap();
        (buffer, graph, other)
    }; // every Context clone the caller had is gone
    graph.launch(&stream).unwrap();
    stream.sync().unwrap();
    assert!(all_equal(&buffer, buffer.deallocation_stream(), 5));
    drop((graph, buffer));
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review, M2: a host function that lets go of a buffer (or anything that calls CUDA when
// dropped) inside its body: the free happens on the release thread.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn values_dropped_inside_a_host_function_are_released_off_the_driver_thread() {
    let (d, s) = setup();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let buffer = pool.allocate(1 << 20, &s).unwrap();
    let other = d.create_stream(Default::default()).unwrap();
    let mut held = Some((buffer, other));
    s.launch_host_func(move || drop(held.take())).unwrap();
    s.sync().unwrap();
    eventually("the buffer to be freed", || {
        s.sync().unwrap();
        pool.used_mem_current().unwrap() == 0
    });
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review, M3: one executable graph launched from many threads at once.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn one_graph_launched_from_many_threads() {
    let (d, s) = setup();
    let k = kernels();
    let x = filled(&d, &s, 256, 0);
    let g = GraphDefinition::new().unwrap();
    // SAFETY: add_one(bytes, n) over x's 256 bytes; x outlives the graph.
    unsafe { g.launch(&LaunchConfig::new(1, 256), &k.add_one, (x.handle(), 256usize)) }.unwrap();
    let graph = g.instantiate(&Default::default()).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let graph = &graph;
            scope.spawn(move || {
                d.set_current().unwrap();
                let st = d.create_stream(Default::default()).unwrap();
                for _ in 0..25 {
                    graph.launch(&st).unwrap();
                }
                st.sync().unwrap();
            });
        }
    });
    // Launches of one executable graph are ordered by the driver: 100 increments, no races.
    assert!(all_equal(&x, &s, 100));
}

// A capture begun inside an operation (here a memory resource's allocate) would let that
// operation's driver calls slip into it unheld: it is refused, whichever stream it names.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_capture_cannot_begin_inside_a_stream_operation() {
    struct Capturing {
        inner: Arc<dyn MemoryResource>,
        other: Stream,
        outcome: Mutex<Option<String>>,
    }
    // SAFETY: every call is forwarded to a resource that keeps the contract.
    unsafe impl MemoryResource for Capturing {
        fn allocate(&self, size: usize, stream: &Stream) -> cuda_core::Result<cuda_sys::driver::CUdeviceptr> {
            let begun = self.other.begin_capture(CaptureMode::Relaxed);
            *self.outcome.lock().unwrap() = Some(match begun {
                Ok(mut b) => {
                    let _ = b.end_building();
                    "began".into()
                }
                Err(e) => e.to_string(),
            });
            self.inner.allocate(size, stream)
        }
        unsafe fn deallocate(
            &self,
            ptr: cuda_sys::driver::CUdeviceptr,
            size: usize,
            stream: &Stream,
        ) -> cuda_core::Result<()> {
            // SAFETY: forwarded from the caller.
            unsafe { self.inner.deallocate(ptr, size, stream) }
        }
        fn is_device_accessible(&self) -> bool {
            self.inner.is_device_accessible()
        }
        fn is_host_accessible(&self) -> bool {
            self.inner.is_host_accessible()
        }
        fn device(&self) -> Option<Device> {
            self.inner.device()
        }
    }
    let (d, s) = setup();
    let resource = Arc::new(Capturing {
        inner: d.memory_resource().unwrap(),
        other: d.create_stream(Default::default()).unwrap(),
        outcome: Mutex::new(None),
    });
    let b = Buffer::allocate(resource.clone(), 256, &s).unwrap();
    let outcome = resource.outcome.lock().unwrap().take().expect("allocate ran");
    assert!(outcome.contains("inside an operation"), "{outcome}");
    b.fill_u8(5, &s).unwrap();
    assert!(all_equal(&b, &s, 5));
    // Outside operations the same stream captures as usual.
    let mut builder = resource.other.begin_capture(CaptureMode::Relaxed).unwrap();
    builder.end_building().unwrap();
}

// Found running the suite: a context-wide synchronisation on one thread (`Device::sync`, or a
// buffer freed after another thread's per-thread default stream) invalidated a capture running on
// another thread in that context. It is refused while such a capture runs, and frees wait.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_context_synchronize_never_invalidates_another_threads_capture() {
    let (d, _) = setup();
    let ctx = Context::create(&d, ContextFlags::default()).unwrap();
    let stream = ctx.create_stream(Default::default()).unwrap();
    let buffer = ctx.with_current(|| d.allocate(4096, &stream)).unwrap();
    buffer.fill_u8(0, &stream).unwrap();
    let mut builder = stream.create_graph_builder();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    buffer.fill_u8(9, builder.stream()).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let err = ctx.synchronize().unwrap_err();
            assert!(err.to_string().contains("being captured"), "{err}");
        });
    });
    // The capture was not invalidated: it ends, and its graph runs.
    builder.end_building().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    graph.launch(&stream).unwrap();
    ctx.synchronize().unwrap();
    assert!(all_equal(&buffer, &stream, 9));
    drop((graph, buffer));
    ctx.synchronize().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review of the above: the count of captures in a context survives a refused second begin on a
// capturing stream, per-thread default streams of two threads capturing at once, and a
// per-thread stream's capture ended while another context is current (it is ended in its own).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn capture_counts_survive_refused_begins_per_thread_streams_and_context_switches() {
    let (d, _) = setup();
    let ctx = Context::create(&d, ContextFlags::default()).unwrap();
    ctx.set_current().unwrap();
    let stream = ctx.create_stream(Default::default()).unwrap();
    let mut first = stream.create_graph_builder();
    first.begin_building(CaptureMode::ThreadLocal).unwrap();
    let mut second = stream.create_graph_builder();
    assert!(second.begin_building(CaptureMode::ThreadLocal).is_err());
    drop(second);
    assert!(first.is_building().unwrap());
    assert!(ctx.synchronize().is_err(), "refused while the first capture runs");
    first.end_building().unwrap();
    ctx.synchronize().unwrap();

    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                ctx.set_current().unwrap();
                let pt = Stream::per_thread_default();
                let mut b = pt.create_graph_builder();
                assert!(b.begin_building(CaptureMode::ThreadLocal).is_err(), "a shared stream");
                // SAFETY: nothing outside this crate queues on this thread's per-thread stream.
                unsafe { b.begin_building_shared(CaptureMode::ThreadLocal) }.unwrap();
                barrier.wait(); // both capture
                assert!(ctx.synchronize().is_err(), "refused while captures run");
                barrier.wait();
                b.end_building().unwrap();
                barrier.wait(); // both ended
            });
        }
    });
    ctx.synchronize().unwrap();

    let pt = Stream::per_thread_default();
    let mut b = pt.create_graph_builder();
    // SAFETY: nothing outside this crate queues on this thread's per-thread stream.
    unsafe { b.begin_building_shared(CaptureMode::ThreadLocal) }.unwrap();
    d.set_current().unwrap(); // another context's per-thread stream is not capturing
    assert!(b.is_building().unwrap(), "asked in the capture's own context");
    assert!(ctx.synchronize().is_err(), "refused while the capture runs");
    b.end_building().unwrap();
    ctx.synchronize().unwrap();
    drop(b);
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Round 3, finding 2: a capture of the per-thread default stream records whatever other code on
// the thread queues there (another library's work, which the graph does not hold). A safe call
// refuses it (every capture entry point); the unsafe one, whose caller vouches for the other
// code, captures it and records this crate's work with what it uses held.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_default_stream_is_captured_only_by_the_unsafe_call() {
    let (d, s) = setup();
    let pt = Stream::per_thread_default();
    for stream in [&pt, &Stream::legacy_default(), &d.default_stream()] {
        let err = stream.begin_capture(CaptureMode::ThreadLocal).unwrap_err().to_string();
        assert!(
            err.contains("default stream") && err.contains("begin_building_shared"),
            "{err}"
        );
        assert!(stream.capture_graph(CaptureMode::Relaxed, |_| Ok(())).is_err());
    }
    let buffer = filled(&d, &s, 1 << 20, 0);
    s.sync().unwrap();
    let mut builder = pt.create_graph_builder();
    // SAFETY: nothing outside this crate queues on this thread's per-thread stream meanwhile.
    unsafe { builder.begin_building_shared(CaptureMode::ThreadLocal) }.unwrap();
    buffer.fill_u8(0x5A, builder.stream()).unwrap();
    builder.end_building().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    drop(builder);
    graph.launch(&s).unwrap();
    s.sync().unwrap();
    assert!(all_equal(&buffer, &s, 0x5A));
    drop((graph, buffer));
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Round 3, finding 1, from a raw driver user (as cudarc does it: see cudarc_bridge.rs): a
// capture of the per-thread stream this crate did not begin refuses every operation of this
// crate there, whether or not a capture of this crate runs elsewhere, instead of recording it
// into a graph that holds nothing it uses.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_raw_capture_of_the_per_thread_stream_refuses_this_crates_work() {
    const PER_THREAD: driver::CUstream = 0x2 as driver::CUstream;
    let (d, s) = setup();
    let buffer = filled(&d, &s, 4096, 0);
    let other = filled(&d, &s, 4096, 0);
    s.sync().unwrap();
    let pt = Stream::per_thread_default();
    for with_own_capture in [false, true] {
        // A capture of this crate elsewhere (the locked path), or none (the quiet path).
        let mut own = d.create_graph_builder().unwrap();
        if with_own_capture {
            own.begin_building(CaptureMode::ThreadLocal).unwrap();
        }
        // SAFETY: the calling thread's per-thread stream; ended below.
        check(unsafe {
            driver::cuStreamBeginCapture(
                PER_THREAD,
                driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        });
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let errors = [
            pt.launch_host_func(move || flag.store(true, Ordering::SeqCst))
                .unwrap_err(),
            buffer.fill_u8(1, &pt).unwrap_err(),
            d.allocate(4096, &pt).map(drop).unwrap_err(),
            buffer.copy_from(&other, &pt).unwrap_err(),
        ];
        for e in errors {
            assert!(e.to_string().contains("outside this crate"), "{e}");
        }
        let mut graph: driver::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; out-pointer to a local.
        check(unsafe { driver::cuStreamEndCapture(PER_THREAD, &mut graph) });
        let mut n = 0usize;
        // SAFETY: the graph the capture made; a null array asks for the count.
        check(unsafe { driver::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) });
        assert_eq!(n, 0, "this crate's work was recorded into the raw capture");
        // SAFETY: made above, destroyed once.
        check(unsafe { driver::cuGraphDestroy(graph) });
        if with_own_capture {
            own.end_building().unwrap();
        }
        assert!(!ran.load(Ordering::SeqCst));
    }
    buffer.fill_u8(3, &pt).unwrap();
    pt.sync().unwrap();
    assert!(all_equal(&buffer, &pt, 3));
    drop((buffer, other));
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review of round 3: a default stream waiting for an event recorded in one of this crate's
// captures (or for a capturing stream) joined that capture, so other libraries' work on the
// per-thread stream would have been recorded into the graph unheld. Refused; the stream stays
// out of the capture, and waits for events recorded outside captures still work.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_default_stream_never_joins_a_capture() {
    const PER_THREAD: driver::CUstream = 0x2 as driver::CUstream;
    let (d, s) = setup();
    let pt = Stream::per_thread_default();
    let event = d.create_event(Default::default()).unwrap();
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    builder.stream().record(&event).unwrap();
    for (what, joined) in [
        ("wait_event", pt.wait_event(&event)),
        ("wait", pt.wait(builder.stream())),
        ("legacy wait_event", Stream::legacy_default().wait_event(&event)),
    ] {
        let err = joined.expect_err(what).to_string();
        // (The legacy stream may instead be unusable while a blocking stream of another test
        // captures: the driver refuses the question, which refuses the wait as well.)
        assert!(
            err.contains("join the capture") || err.contains("CAPTURE_IMPLICIT"),
            "{what}: {err}"
        );
    }
    let mut status = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the calling thread's per-thread stream; out-pointer to a local.
    check(unsafe { driver::cuStreamIsCapturing(PER_THREAD, &mut status) });
    assert_eq!(status, driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    builder.end_building().unwrap();
    // Recorded outside a capture: waited for as usual.
    s.record(&event).unwrap();
    pt.wait_event(&event).unwrap();
    pt.wait(&s).unwrap();
    pt.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Composition review of round 3: a context another library made and made current (cudarc's
// safe `CudaContext::new_non_primary`, raw `cuCtxCreate`) was adopted by safe calls without
// being held (the driver counts no references to it), and what they made in it outlived it when
// its owner destroyed it. Such a context is refused; and `with_current` does not make such a
// context current again once its closure changed the current context (it may have destroyed
// it, as dropping cudarc's context does).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_context_made_by_other_code_is_never_adopted() {
    let (d, _s) = setup();
    let primary = d.primary_context().unwrap();
    let mut foreign: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; it becomes current here and is destroyed below.
    check(unsafe { driver::cuCtxCreate(&mut foreign, std::ptr::null_mut(), 0, d.handle()) });
    let err = Context::current().unwrap_err().to_string();
    assert!(err.contains("made outside this crate"), "{err}");
    let legacy = Stream::legacy_default();
    assert!(LegacyPinnedMemoryResource::new(Default::default())
        .allocate(4096, &legacy)
        .is_err());
    assert!(legacy.record_new(Default::default()).is_err());
    assert!(GraphDefinition::new()
        .unwrap()
        .instantiate(&Default::default())
        .is_err());
    // Destroyed inside `with_current` the way another library's drop does it (bound first).
    primary
        .with_current(|| {
            // SAFETY: the context made above, live until destroyed below.
            check(unsafe { driver::cuCtxSetCurrent(foreign) });
            // SAFETY: made above, destroyed once (current only on this thread).
            check(unsafe { driver::cuCtxDestroy(foreign) });
            Ok(())
        })
        .unwrap();
    assert_ne!(
        Context::current_handle().unwrap(),
        foreign,
        "a destroyed context was made current again"
    );
    d.set_current().unwrap();
    assert_eq!(Context::current().unwrap(), Some(primary));
}
