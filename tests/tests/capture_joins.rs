//! Streams that join a capture (a split's branches, a stream waiting for a capture point) stay in
//! it until the capture ends, joined back or not: the crate keeps them alive until then, whoever
//! drops them. Driver 580 crashed (a null dereference in `cuStreamEndCapture` and in later
//! records) when such a stream was destroyed inside the capture while other threads captured:
//! the stress test met it once a split's branches were dropped after their join.

use cuda_core::graph::{CaptureMode, GraphBuilder};
use cuda_core::{Buffer, Device, Stream, StreamOptions};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const N: usize = 1024;

fn stream(d: &Device, nonblocking: bool) -> Stream {
    d.create_stream(StreamOptions {
        nonblocking,
        ..Default::default()
    })
    .unwrap()
}

fn all_equal(b: &Buffer, s: &Stream, v: u32) -> bool {
    b.to_vec::<u32>(s).unwrap().iter().all(|x| *x == v)
}

/// One capture (on `cs`, blocking or not; launched on `s`): a fill on the origin, a split into three branches that fill their own buffers,
/// the join, then a side stream that joins, fills and is waited for, and is dropped (as the
/// branches are) before the capture ends. The graph's launch must do all of it.
fn capture_with_joins(d: &Device, s: &Stream, cs: &Stream, bufs: &[Buffer; 5], round: u32) {
    // (Captured on `cs`, not on `s`, the buffers' allocation stream: a first use on a branch
    // waits for the allocation, which cannot be asked of a capturing stream.)
    let mut builder = cs.create_graph_builder();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    bufs[0].fill_u32(round, builder.stream()).unwrap();
    let branches = builder.split(3).unwrap();
    for (i, branch) in branches.iter().enumerate() {
        bufs[1 + i].fill_u32(round + 1 + i as u32, branch.stream()).unwrap();
    }
    let builder = GraphBuilder::join(branches).unwrap();
    let side = stream(d, round.is_multiple_of(2));
    side.wait(builder.stream()).unwrap();
    bufs[4].fill_u32(round + 4, &side).unwrap();
    builder.stream().wait(&side).unwrap();
    drop(side);
    let mut builder = builder;
    builder.end_building().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    graph.launch(s).unwrap();
    s.sync().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert!(all_equal(b, s, round + i as u32), "buffer {i} of round {round}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn streams_that_joined_a_capture_and_were_dropped_keep_it_whole() {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let captured = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::scope(|scope| {
        // Four threads capture with joins, on blocking and non-blocking streams.
        for t in 0..4u32 {
            let captured = captured.clone();
            scope.spawn(move || {
                d.set_current().unwrap();
                let s = stream(&d, true);
                let cs = stream(&d, t % 2 == 0);
                let bufs: [Buffer; 5] = std::array::from_fn(|_| d.allocate(N * 4, &s).unwrap());
                s.sync().unwrap();
                let mut round = 0;
                while Instant::now() < deadline {
                    capture_with_joins(&d, &s, &cs, &bufs, round * 8);
                    round += 1;
                    captured.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Two threads queue work beside them on streams of their own, made and dropped.
        for t in 0..2 {
            let stop = stop.clone();
            scope.spawn(move || {
                d.set_current().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let s = stream(&d, t == 0);
                    let b = d.allocate(N * 4, &s).unwrap();
                    b.fill_u32(5, &s).unwrap();
                    assert!(all_equal(&b, &s, 5));
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        captured.load(Ordering::Relaxed) >= 4,
        "every capturing thread finished a round"
    );
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}
