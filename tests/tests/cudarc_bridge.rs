//! The cudarc bridge on the GPU: slices taken as buffers and views and handed back, streams
//! lent both ways, the order of work across the two libraries, and every refusal.

use cuda_core::graph::CaptureMode;
use cuda_core::interop::cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream};
use cuda_core::{
    Buffer, Context, ContextFlags, DType, Device, HostAllocFlags, LegacyPinnedMemoryResource, PinnedMemoryResource,
    Stream, StridedMemoryView,
};
use std::sync::{Arc, MutexGuard};

/// One test at a time, for the whole test (each test holds the guard `setup` returns first, so
/// it goes last): one test holds its stream with a host function for a while, and another's
/// synchronous driver calls (a pinned free, cudarc's synchronous copies) wait for every stream of
/// the context. Run side by side, the held test was once seen (default-stream mode, H100) taking
/// 20 s to pass its drop, which the held work alone does not make it wait for (the test passes on
/// its own, and `drops.rs` checks every kind of drop this way, one test at a time too).
fn setup() -> (
    MutexGuard<'static, ()>,
    Device,
    Stream,
    Arc<CudaContext>,
    Arc<CudaStream>,
) {
    let turn = cuda_tests::one_at_a_time();
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let cs = ctx.new_stream().unwrap();
    // cudarc made its context current: ours again (the same primary context).
    d.set_current().unwrap();
    (turn, d, s, ctx, cs)
}

/// 16 Mi floats: large enough that an unordered read would see the work unfinished.
const BIG: usize = 16 << 20;

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_cudarc_slice_becomes_a_buffer_and_goes_back() {
    let (_turn, d, s, _ctx, cs) = setup();
    let data: Vec<f32> = (0..BIG).map(|i| (i % 1000) as f32).collect();
    let slice = cs.clone_htod(&data).unwrap();
    let ptr = {
        let (p, _sync) = cuda_core::interop::cudarc::driver::DevicePtr::device_ptr(&slice, &cs);
        p
    };
    // Taken without a copy, ordered after cudarc's upload on its own stream.
    let buffer = Buffer::from_cudarc(slice, &s).unwrap();
    assert_eq!((buffer.handle(), buffer.size()), (ptr, BIG * 4));
    assert_eq!(buffer.device_id(), Some(d.device_id()));
    assert!(buffer.is_device_accessible() && !buffer.is_host_accessible());
    assert_eq!(buffer.cudarc_slice::<f32>().map(|c| c.len()), Some(BIG));
    assert!(
        buffer.cudarc_slice::<u32>().is_none(),
        "the slice is lent only as its own type"
    );
    assert_eq!(buffer.to_vec::<f32>(&s).unwrap(), data);
    // Work queued here (held back by a host function), then the memory handed back: cudarc's
    // reads come after it.
    s.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(200)))
        .unwrap();
    buffer.fill_u32(0x4040_0000, &s).unwrap(); // 3.0f32
    let back: CudaSlice<f32> = buffer.into_cudarc(&cs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.len(), BIG);
    let seen = cs.clone_dtoh(&back).unwrap();
    assert!(seen.iter().all(|&x| x == 3.0), "cudarc read before the fill was done");
    // A slice taken back from a buffer it came from is a plain cudarc slice: cudarc frees it.
    drop(back);
    cs.synchronize().unwrap();
    assert!(cuda_core::take_drop_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn buffers_of_a_device_pool_go_to_cudarc_after_every_stream_that_used_them() {
    let (_turn, d, s, _ctx, cs) = setup();
    let other = d.create_stream(Default::default()).unwrap();
    let buffer = d.allocate(BIG * 4, &s).unwrap();
    buffer.fill_u32(1, &s).unwrap();
    s.sync().unwrap();
    // The last writer is another stream than the deallocation stream, held back.
    other
        .launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(200)))
        .unwrap();
    buffer.fill_u32(7, &other).unwrap();
    let slice: CudaSlice<u32> = buffer.into_cudarc(&cs).unwrap_or_else(|e| panic!("{e}"));
    let seen = cs.clone_dtoh(&slice).unwrap();
    assert!(
        seen.iter().all(|&x| x == 7),
        "cudarc read before the other stream's fill"
    );
    // Any cudarc stream may read it: the work queued here is done.
    let third = cs.context().new_stream().unwrap();
    assert!(third.clone_dtoh(&slice).unwrap().iter().all(|&x| x == 7));
    // cudarc's own work on it, then back here on our stream.
    let mut slice = slice;
    cs.memset_zeros(&mut slice).unwrap();
    let buffer = Buffer::from_cudarc(slice, &other).unwrap_or_else(|e| panic!("{e}"));
    assert!(buffer.to_vec::<u32>(&other).unwrap().iter().all(|&x| x == 0));
    // To cudarc's default stream, from a thread whose current context is another one: the
    // memory is idle when cudarc gets it, and the thread's context is kept.
    let ctx = cs.context().clone();
    let other_ctx = Context::create(&d, ContextFlags::default()).unwrap();
    other_ctx.set_current().unwrap();
    let on_default: CudaSlice<u32> = buffer
        .into_cudarc(&ctx.default_stream())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        Context::current().unwrap(),
        Some(other_ctx.clone()),
        "the thread's context changed"
    );
    let default_stream = ctx.default_stream();
    assert!(default_stream.clone_dtoh(&on_default).unwrap().iter().all(|&x| x == 0));
    other_ctx.set_current().unwrap();
    // And taken back from cudarc's default stream: the host waits for cudarc's whole context.
    let back = Buffer::from_cudarc(on_default, &s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        Context::current().unwrap(),
        Some(other_ctx.clone()),
        "the thread's context changed"
    );
    d.set_current().unwrap();
    assert!(back.to_vec::<u32>(&s).unwrap().iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn streams_are_lent_both_ways() {
    let (_turn, d, s, ctx, cs) = setup();
    // cudarc's stream here: one stream, work of both libraries in its order.
    // SAFETY: nothing captures on cudarc's stream in this test.
    let lent = unsafe { Stream::from_cudarc(&cs) }.unwrap();
    assert_eq!(lent.handle() as usize, cs.cu_stream() as usize);
    assert_eq!(lent.device(), Some(d));
    let data: Vec<i32> = (0..BIG as i32).collect();
    let slice = cs.clone_htod(&data).unwrap();
    // Same stream: no host wait, stream order alone.
    let buffer = Buffer::from_cudarc(slice, &lent).unwrap();
    assert_eq!(buffer.to_vec::<i32>(&lent).unwrap(), data);
    drop(buffer);
    // The lent stream keeps cudarc's alive after cudarc lets go of it.
    let handle = cs.cu_stream() as usize;
    drop(cs);
    lent.sync().unwrap();
    assert_eq!(lent.handle() as usize, handle);
    // Ours to cudarc: cudarc allocates and copies on our stream.
    // SAFETY: `s` outlives `theirs` and the slice made on it (dropped below); no capture.
    let theirs = unsafe { s.to_cudarc(&ctx) }.unwrap();
    assert_eq!(theirs.cu_stream() as usize, s.handle() as usize);
    let on_ours = theirs.clone_htod(&[5u8; 1024]).unwrap();
    assert_eq!(theirs.clone_dtoh(&on_ours).unwrap(), vec![5u8; 1024]);
    drop(on_ours);
    drop(theirs);
    s.sync().unwrap();
    // Default streams are every library's: ours to cudarc refused, cudarc's here are ours.
    // SAFETY: refused, nothing is lent.
    let err = unsafe { Stream::legacy_default().to_cudarc(&ctx) }.unwrap_err();
    assert!(err.to_string().contains("default stream"), "{err}");
    // SAFETY: nothing captures on the per-thread stream in this test.
    let per_thread = unsafe { Stream::from_cudarc(&ctx.per_thread_stream()) }.unwrap();
    assert_eq!(per_thread.handle(), Stream::per_thread_default().handle());
    // Another context than the stream's is refused.
    let other = Context::create(&d, ContextFlags::default()).unwrap();
    let stream = other.create_stream(Default::default()).unwrap();
    // SAFETY: refused, nothing is lent.
    let err = unsafe { stream.to_cudarc(&ctx) }.unwrap_err();
    assert!(err.to_string().contains("not to the cudarc context"), "{err}");
    drop(stream);
    d.set_current().unwrap();
    assert!(cuda_core::take_drop_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_cudarc_slice_becomes_a_strided_view() {
    let (_turn, _d, s, _ctx, cs) = setup();
    // A 4x6 matrix of f64, viewed transposed (6x4, strides 1 and 6).
    let data: Vec<f64> = (0..24).map(|i| i as f64 * 0.5).collect();
    let slice = cs.clone_htod(&data).unwrap();
    let view = StridedMemoryView::from_cudarc(slice, &[6, 4], Some(&[1, 6]), &s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (view.shape(), view.strides(), view.dtype()),
        (&[6usize, 4][..], Some(&[1isize, 6][..]), DType::F64)
    );
    assert!(view.buffer().is_some_and(|b| b.cudarc_slice::<f64>().is_some()));
    let mut out = vec![0f64; 24];
    let mut host = StridedMemoryView::from_host_slice_mut(&mut out, &[6, 4], None).unwrap();
    view.copy_to(&mut host, &s).unwrap();
    drop(host);
    for r in 0..6 {
        for c in 0..4 {
            assert_eq!(out[r * 4 + c], data[c * 6 + r], "element ({r}, {c})");
        }
    }
    // Host views of any layout: a transposed host view into a device buffer, and back into
    // another transposed host view.
    let dense = Device::new(0).unwrap().allocate(24 * 8, &s).unwrap();
    let mut dev = StridedMemoryView::from_buffer(&dense, &[6, 4], None, DType::F64, false).unwrap();
    let transposed = StridedMemoryView::from_host_slice(&data, &[6, 4], Some(&[1, 6])).unwrap();
    dev.copy_from(&transposed, &s).unwrap();
    assert_eq!(dense.to_vec::<f64>(&s).unwrap(), out);
    let mut again = vec![0f64; 24];
    let mut host = StridedMemoryView::from_host_slice_mut(&mut again, &[6, 4], Some(&[1, 6])).unwrap();
    dev.copy_to(&mut host, &s).unwrap();
    drop(host);
    assert_eq!(again, data);
    // A layout outside the slice is refused, and the slice handed back.
    let slice = cs.clone_htod(&data).unwrap();
    let err = StridedMemoryView::from_cudarc(slice, &[5, 5], None, &s).unwrap_err();
    assert!(err.to_string().contains("Expected at least"), "{err}");
    let slice = err.slice.expect("the slice comes back");
    assert_eq!(cs.clone_dtoh(&slice).unwrap(), data);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn handovers_that_cannot_be_made_are_refused_with_the_buffer_back() {
    let (_turn, d, s, _ctx, cs) = setup();
    let check = |buffer: Buffer, want: &str| {
        let size = buffer.size();
        let err = buffer.into_cudarc::<u32>(&cs).unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
        // The buffer comes back whole and usable.
        assert_eq!(err.buffer.size(), size);
        if size > 0 && err.buffer.is_device_accessible() {
            err.buffer.fill_u8(1, &s).unwrap();
        }
    };
    check(d.allocate(10, &s).unwrap(), "whole, non-zero number of 4-byte");
    check(d.allocate(0, &s).unwrap(), "whole, non-zero number");
    let pinned = PinnedMemoryResource::new(Default::default()).unwrap();
    check(
        pinned.allocate(64, &s).unwrap(),
        "only memory of a DeviceMemoryResource",
    );
    let legacy = LegacyPinnedMemoryResource::new(HostAllocFlags::default());
    check(
        legacy.allocate(64, &s).unwrap(),
        "only memory of a DeviceMemoryResource",
    );
    // A cudarc slice taken here goes back only as its own element type.
    let slice = cs.clone_htod(&[1f32; 16]).unwrap();
    check(
        Buffer::from_cudarc(slice, &s).unwrap_or_else(|e| panic!("{e}")),
        "only memory of a DeviceMemoryResource",
    );
    // A graph that recorded work on the buffer holds its memory.
    let held = d.allocate(64, &s).unwrap();
    let graph = s
        .capture_graph(CaptureMode::ThreadLocal, |c| held.fill_u8(3, c))
        .unwrap();
    check(held, "holds this buffer's memory");
    drop(graph);
    // A slice whose cudarc stream is being captured is handed back untouched, and the capture
    // ends well.
    let slice = cs.clone_htod(&[2u32; 16]).unwrap();
    cs.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    let taken = Buffer::from_cudarc(slice, &s);
    let graph = cs.end_capture(sys::CUgraphInstantiate_flags(0));
    assert!(graph.is_ok(), "the cudarc capture was damaged");
    let err = taken.unwrap_err();
    assert!(err.to_string().contains("being captured"), "{err}");
    let slice = err.slice.expect("the slice comes back");
    assert_eq!(cs.clone_dtoh(&slice).unwrap(), vec![2u32; 16]);
    d.set_current().unwrap();
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_taken_slice_outlives_its_buffer_until_the_work_on_it_is_done() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_turn, _d, s, _ctx, cs) = setup();
    let slice = cs.clone_htod(&vec![0u32; BIG]).unwrap();
    let buffer = Buffer::from_cudarc(slice, &s).unwrap();
    // Work held back by a host function until the test opens its gate (or 20 s pass), then the
    // buffer let go of: the drop returns at once, before that work, and the slice (and so its
    // memory) goes only after it.
    let (gate, ran) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (open, flag) = (gate.clone(), ran.clone());
    s.launch_host_func(move || {
        let start = std::time::Instant::now();
        while !open.load(Ordering::SeqCst) && start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        flag.store(true, Ordering::SeqCst);
    })
    .unwrap();
    buffer.fill_u32(7, &s).unwrap();
    drop(buffer);
    assert!(
        !ran.load(Ordering::SeqCst),
        "dropping the buffer waited for the work on it"
    );
    // cudarc allocates as much again and fills it while the fill is held: had the slice's memory
    // been given back already, this allocation could take it and the held fill overwrite it.
    let again = cs.clone_htod(&vec![5u32; BIG]).unwrap();
    gate.store(true, Ordering::SeqCst);
    s.sync().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert_eq!(cs.clone_dtoh(&again).unwrap(), vec![5u32; BIG]);
    assert!(cuda_core::take_drop_errors().is_empty());
}

// Round 3, finding 1: while cudarc (through its safe API) captures the per-thread default
// stream, this crate's operations on that stream were recorded into cudarc's graph, which held
// none of what they used (a host function's closure was freed after the graph's first launch).
// They are refused now, with an error that says whose capture must end; once it has, they run.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn operations_on_the_per_thread_stream_cudarc_captures_are_refused() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (_turn, d, s, ctx, _cs) = setup();
    let buffer = d.allocate(1 << 20, &s).unwrap();
    s.sync().unwrap();
    let event = d.create_event(Default::default()).unwrap();
    let theirs = ctx.per_thread_stream();
    theirs
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    d.set_current().unwrap();
    let pt = Stream::per_thread_default();
    let calls = Arc::new(AtomicUsize::new(0));
    let refused = |e: cuda_core::CudaError| {
        let text = e.to_string();
        assert!(
            text.contains("outside this crate") && text.contains("End that capture"),
            "{text}"
        );
    };
    let counter = calls.clone();
    refused(
        pt.launch_host_func(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap_err(),
    );
    refused(buffer.fill_u8(1, &pt).unwrap_err());
    refused(d.allocate(4096, &pt).unwrap_err());
    refused(pt.record(&event).unwrap_err());
    refused(pt.wait(&s).unwrap_err());
    // A capture of this crate there is refused by a safe call in any case.
    assert!(pt
        .create_graph_builder()
        .begin_building(CaptureMode::ThreadLocal)
        .is_err());
    // Nothing of this crate's was recorded: cudarc's graph is empty.
    let graph = theirs
        .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .unwrap();
    if let Some(graph) = &graph {
        let mut n = 0usize;
        // SAFETY: a live graph; a null array asks for the count.
        let status = unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut n) };
        assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(n, 0, "this crate's work was recorded into cudarc's graph");
    }
    drop(graph);
    d.set_current().unwrap();
    // Once cudarc's capture is over, the same calls run.
    let counter = calls.clone();
    pt.launch_host_func(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    buffer.fill_u8(7, &pt).unwrap();
    let more = d.allocate(4096, &pt).unwrap();
    pt.record(&event).unwrap();
    pt.sync().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(buffer.to_vec::<u8>(&pt).unwrap().iter().all(|&x| x == 7));
    drop((more, buffer));
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Round 3, finding 2 (the variant): two wrappers of one cudarc stream had two capture locks, so
// an operation on one and a capture begun on the other were not exclusive. Every wrapper of a
// handle is now the same `Stream`: the second `from_cudarc` gives the first one back (and lets go
// of the `Arc` it was given), as does `from_handle` of a stream this crate made.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_wrapper_of_a_stream_is_one_stream() {
    let (_turn, _d, s, ctx, cs) = setup();
    let before = Arc::strong_count(&cs);
    // SAFETY: nothing captures cudarc's stream in this test, nor queues on it through cudarc.
    let first = unsafe { Stream::from_cudarc(&cs) }.unwrap();
    // SAFETY: as above.
    let second = unsafe { Stream::from_cudarc(&cs) }.unwrap();
    assert_eq!(first, second);
    assert_eq!(
        Arc::strong_count(&cs),
        before + 2,
        "each wrapping holds cudarc's stream"
    );
    drop(first);
    assert_eq!(
        Arc::strong_count(&cs),
        before + 2,
        "one Stream: what it holds goes with its last clone"
    );
    drop(second);
    // (Let go of on the thread for slow drops: cudarc's drop of its stream may wait.)
    assert!(cuda_tests::releases_drain(std::time::Duration::from_secs(20)));
    assert_eq!(Arc::strong_count(&cs), before, "the wrapper let go of cudarc's stream");
    // Ours, lent to cudarc and back: the same value, which now holds cudarc's wrapper too.
    // SAFETY: `s` outlives `theirs`; no capture.
    let theirs = unsafe { s.to_cudarc(&ctx) }.unwrap();
    // SAFETY: as above.
    let back = unsafe { Stream::from_cudarc(&theirs) }.unwrap();
    assert_eq!(back, s);
    drop(back);
    assert_eq!(
        Arc::strong_count(&theirs),
        2,
        "the stream this crate made is the one that came back"
    );
    // SAFETY: `s`'s handle, made by this crate and alive.
    let again = unsafe { Stream::from_handle(s.handle()) }.unwrap();
    assert_eq!(again, s);
    drop((again, theirs));
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Review of round 3: a stream lent from cudarc could join a cudarc capture (cudarc's safe
// `join` with a capturing stream), after which this crate's quiet path recorded its work into
// cudarc's graph unheld. A lent stream asks the driver in every operation and refuses it.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_lent_stream_that_joined_a_cudarc_capture_is_refused() {
    let (_turn, d, s, ctx, cs) = setup();
    let buffer = d.allocate(4096, &s).unwrap();
    s.sync().unwrap();
    // SAFETY: cudarc joins the stream to its capture while this crate queues nothing on it (the
    // calls below are refused before queuing), and ends the capture after joining back.
    let ours = unsafe { Stream::from_cudarc(&cs) }.unwrap();
    let capturing = ctx.new_stream().unwrap();
    capturing
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    cs.join(&capturing).unwrap();
    d.set_current().unwrap();
    let refused = |e: cuda_core::CudaError| {
        assert!(e.to_string().contains("outside this crate"), "{e}");
    };
    refused(ours.launch_host_func(|| {}).unwrap_err());
    refused(buffer.fill_u8(1, &ours).unwrap_err());
    refused(d.allocate(4096, &ours).map(drop).unwrap_err());
    let event = d.create_event(Default::default()).unwrap();
    refused(ours.record(&event).unwrap_err());
    capturing.join(&cs).unwrap();
    let graph = capturing
        .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .unwrap();
    drop(graph);
    d.set_current().unwrap();
    buffer.fill_u8(2, &ours).unwrap();
    assert!(buffer.to_vec::<u8>(&ours).unwrap().iter().all(|&x| x == 2));
    drop((buffer, ours));
    s.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}
