//! The legacy default stream beside captures of blocking streams (issue 32, the stress test's
//! last crash): driver 580 crashes inside libcuda when work is queued on the legacy stream while
//! another thread begins or ends a capture of a blocking stream (raw C calls on an H100 show it
//! without this crate). This crate refuses legacy-stream work for the whole of such a capture,
//! with the driver's own answer during one (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`), and for a
//! capture a blocking stream joined (a wait for an event recorded in it) until it ends.
//!
//! A file of its own: its captures make the legacy stream unusable for a while, which other
//! tests of a shared process would see.

use cuda_core::graph::CaptureMode;
use cuda_core::{Device, Stream, StreamOptions};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The tests of this file run one at a time (`cuda_tests::one_at_a_time`): one's captures refuse
// the other's legacy-stream work.

fn blocking_stream(d: &Device) -> Stream {
    d.create_stream(StreamOptions {
        nonblocking: false,
        ..Default::default()
    })
    .unwrap()
}

/// Whether `e` is the refusal of legacy-stream work during a blocking stream's capture.
fn implicit(e: &cuda_core::CudaError) -> bool {
    e.to_string().contains("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT")
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn legacy_stream_work_beside_blocking_captures_is_refused_or_done_never_a_crash() {
    let _alone = cuda_tests::one_at_a_time();
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let captures = Arc::new(AtomicUsize::new(0));
    // Three threads begin and end captures of blocking streams of their own, as fast as they can.
    let capturers: Vec<_> = (0..3)
        .map(|_| {
            let (d, stop, captures) = (d, stop.clone(), captures.clone());
            std::thread::spawn(move || {
                d.set_current().unwrap();
                let s = blocking_stream(&d);
                let buf = d.allocate(4096, &s).unwrap();
                s.sync().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let mut b = s.create_graph_builder();
                    b.begin_building(CaptureMode::ThreadLocal).unwrap();
                    buf.fill_u8(1, b.stream()).unwrap();
                    b.end_building().unwrap();
                    captures.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Four threads queue work on the legacy stream meanwhile: each call is done, or refused
    // with the driver's answer for a capture in the way.
    let (done, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let users: Vec<_> = (0..4)
        .map(|i| {
            let (d, stop, done, refused) = (d, stop.clone(), done.clone(), refused.clone());
            std::thread::spawn(move || {
                d.set_current().unwrap();
                let legacy = Stream::legacy_default();
                let event = d.create_event(Default::default()).unwrap();
                let buf = loop {
                    match d.allocate(4096, &legacy) {
                        Ok(b) => break b,
                        Err(e) if implicit(&e) => std::thread::yield_now(),
                        Err(e) => panic!("allocate on the legacy stream: {e}"),
                    }
                };
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let r = match (n + i) % 3 {
                        0 => legacy.record(&event),
                        1 => legacy.is_done().map(drop),
                        _ => buf.fill_u8(n as u8, &legacy),
                    };
                    match r {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) if implicit(&e) => refused.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("work on the legacy stream: {e}"),
                    };
                }
                // The buffer is freed on the legacy stream once no capture is in the way.
                drop(buf);
            })
        })
        .collect();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for t in capturers.into_iter().chain(users) {
        t.join().unwrap();
    }
    let (captures, done, refused) = (
        captures.load(Ordering::Relaxed),
        done.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    println!("{captures} captures of blocking streams; legacy-stream work: {done} done, {refused} refused");
    assert!(captures > 0, "no capture ended");
    assert!(done + refused > 0, "no work was tried on the legacy stream");
    // With no capture running, the legacy stream works again.
    Stream::legacy_default().sync().unwrap();
    d.sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_blocking_stream_that_joins_a_capture_keeps_the_legacy_stream_out_until_it_ends() {
    let _alone = cuda_tests::one_at_a_time();
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let blocking = blocking_stream(&d);
    let event = d.create_event(Default::default()).unwrap();
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    builder.stream().record(&event).unwrap();
    // (Asked from another thread: on the capturing thread, the driver refuses a question about
    // the legacy stream in a thread-local capture.)
    let legacy_is_done = || {
        std::thread::scope(|t| {
            t.spawn(|| {
                d.set_current()?;
                Stream::legacy_default().is_done()
            })
            .join()
            .unwrap()
        })
    };
    // Before the join: the legacy stream works (the capture is of a non-blocking stream).
    legacy_is_done().unwrap();
    // The blocking stream joins the capture, and legacy-stream work is refused (the driver
    // would refuse it too, invalidating the capture) until the capture ends.
    blocking.wait_event(&event).unwrap();
    let err = legacy_is_done().unwrap_err();
    assert!(implicit(&err), "{err}");
    builder.stream().wait(&blocking).unwrap();
    builder.end_building().unwrap();
    legacy_is_done().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    graph.launch(&s).unwrap();
    // Recorded outside a capture: waited for as usual.
    s.record(&event).unwrap();
    blocking.wait_event(&event).unwrap();
    blocking.wait(&s).unwrap();
    blocking.sync().unwrap();
    Stream::legacy_default().sync().unwrap();
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}
