//! Futures that complete with GPU work, on tokio: many awaits on several streams resolve in
//! stream order with the waiting thread idle; futures dropped early leave nothing dangling;
//! awaited copies with host memory; the errors of captures.

use cuda_core::graph::CaptureMode;
use cuda_core::{launch, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream};
use std::time::{Duration, Instant};

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// `spin(cycles)` keeps a stream busy for about `cycles` GPU clocks.
fn spin_kernel() -> Kernel {
    let source = r#"
        extern "C" __global__ void spin(long long cycles) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
        }"#;
    Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("spin")
        .unwrap()
}

/// CPU time (user + system) the calling thread has used.
fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut u), 0);
        u
    };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_thousand_awaits_on_eight_streams_resolve_with_the_waiting_thread_idle() {
    let (d, _) = setup();
    let spin = spin_kernel();
    let streams: Vec<Stream> = (0..8).map(|_| d.create_stream(Default::default()).unwrap()).collect();
    // Then about half a millisecond per kernel: 125 per stream, streams in parallel.
    let cycles = 1_000_000i64;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (resolved, cpu, wall) = runtime.block_on(async {
        let mut tasks = Vec::new();
        let (cpu_start, start) = (thread_cpu_time(), Instant::now());
        // A long first kernel on each stream (about half a second): the awaits below wait for certain.
        for s in &streams {
            // SAFETY: spin takes a cycle count and touches no memory.
            unsafe { launch(s, &LaunchConfig::new(1, 1), &spin, (1_000_000_000i64,)) }.unwrap();
        }
        for _ in 0..125 {
            for (k, s) in streams.iter().enumerate() {
                // SAFETY: spin takes a cycle count and touches no memory.
                unsafe { launch(s, &LaunchConfig::new(1, 1), &spin, (cycles,)) }.unwrap();
                let done = s.synchronized().unwrap();
                tasks.push((
                    k,
                    tokio::spawn(async move {
                        done.await.unwrap();
                        Instant::now()
                    }),
                ));
            }
        }
        assert_eq!(tasks.len(), 1000);
        // The driver blocks the queueing thread (without spinning) while a stream's queue is
        // full: the window measured is the whole one, from the first launch to the last future.
        let queued = start.elapsed();
        let mut order: Vec<Vec<Instant>> = vec![Vec::new(); 8];
        for (k, task) in tasks {
            order[k].push(task.await.unwrap());
        }
        println!(
            "queueing 1000 kernels and futures took {:.1} ms (the driver held the thread while the queues were full)",
            queued.as_secs_f64() * 1e3
        );
        (order, thread_cpu_time() - cpu_start, start.elapsed())
    });
    for (k, times) in resolved.iter().enumerate() {
        assert_eq!(times.len(), 125, "stream {k}: a future did not resolve");
    }
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    println!(
        "1000 futures on 8 streams: {:.1} ms from the first launch to the last future, the thread used {:.2} ms of CPU ({:.1}%)",
        wall.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3,
        share * 100.0
    );
    assert!(
        wall > Duration::from_millis(50),
        "the work was too short to measure the wait"
    );
    assert!(
        share < 0.25, // typically 3-7%; more under compute-sanitizer
        "the waiting thread was busy {:.1}% of the time",
        share * 100.0
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn futures_of_a_stream_resolve_in_the_order_they_were_made() {
    use std::future::Future;
    use std::task::{Context as TaskContext, Poll, Waker};
    let (d, _) = setup();
    let spin = spin_kernel();
    let streams: Vec<Stream> = (0..8).map(|_| d.create_stream(Default::default()).unwrap()).collect();
    let mut pending: Vec<Vec<Option<cuda_core::Completion>>> = (0..8).map(|_| Vec::new()).collect();
    for _ in 0..125 {
        for (k, s) in streams.iter().enumerate() {
            // SAFETY: spin takes a cycle count and touches no memory.
            unsafe { launch(s, &LaunchConfig::new(1, 1), &spin, (200_000i64,)) }.unwrap();
            pending[k].push(Some(s.synchronized().unwrap()));
        }
    }
    // Polled newest first: when a future is ready, every older one of its stream must be too
    // (a violation would show as an older one still pending right after a newer one was ready).
    let waker = Waker::noop();
    let mut cx = TaskContext::from_waker(waker);
    let started = Instant::now();
    while pending.iter().flatten().any(Option::is_some) {
        assert!(started.elapsed() < Duration::from_secs(30), "futures never resolved");
        for (k, futures) in pending.iter_mut().enumerate() {
            let mut newest_ready = None;
            for i in (0..futures.len()).rev() {
                let Some(f) = futures[i].as_mut() else { continue };
                match std::pin::Pin::new(f).poll(&mut cx) {
                    Poll::Ready(r) => {
                        r.unwrap();
                        futures[i] = None;
                        newest_ready.get_or_insert(i);
                    }
                    Poll::Pending => assert!(
                        newest_ready.is_none(),
                        "stream {k}: future {i} pending after future {newest_ready:?} was ready"
                    ),
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn futures_dropped_early_leave_nothing_dangling() {
    let (d, s) = setup();
    let spin = spin_kernel();
    // SAFETY: as above.
    unsafe { launch(&s, &LaunchConfig::new(1, 1), &spin, (50_000_000i64,)) }.unwrap();
    // Futures of every kind made and dropped while the work runs.
    for _ in 0..100 {
        drop(s.synchronized().unwrap());
    }
    let event = s.record_new(Default::default()).unwrap();
    drop(event.completed().unwrap());
    let buffer = d.allocate(1 << 20, &s).unwrap();
    buffer.fill_u32(5, &s).unwrap();
    drop(buffer.to_vec_async::<u32>(&s).unwrap());
    drop(buffer.copy_from_vec_async(vec![9u32; 1 << 18], &s).unwrap());
    drop(buffer);
    // The callbacks still run (and find their state alive): a later future resolves.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async { s.synchronized().unwrap().await.unwrap() });
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn awaited_copies_keep_host_memory_until_the_gpu_is_done() {
    let (d, s) = setup();
    let spin = spin_kernel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let data: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
        let buffer = d.allocate(data.len() * 4, &s).unwrap();
        // The stream is busy: the copy from the vector waits its turn, holding the vector.
        // SAFETY: as above.
        unsafe { launch(&s, &LaunchConfig::new(1, 1), &spin, (20_000_000i64,)) }.unwrap();
        let uploaded = buffer.copy_from_vec_async(data.clone(), &s).unwrap();
        let read = buffer.to_vec_async::<f32>(&s).unwrap();
        uploaded.await.unwrap();
        assert_eq!(read.await.unwrap(), data);
        // An event's future, and an event never recorded (complete at once).
        // SAFETY: as above.
        unsafe { launch(&s, &LaunchConfig::new(1, 1), &spin, (10_000_000i64,)) }.unwrap();
        let event = s.record_new(Default::default()).unwrap();
        event.completed().unwrap().await.unwrap();
        assert!(event.is_done().unwrap());
        let fresh = d.create_event(Default::default()).unwrap();
        fresh.completed().unwrap().await.unwrap();
        // Nothing to copy: an empty vector (no staging memory is read).
        let tiny = d.allocate(2, &s).unwrap();
        assert!(tiny.to_vec_async::<u32>(&s).unwrap().await.unwrap().is_empty());
        let empty = d.allocate(0, &s).unwrap();
        assert!(empty.to_vec_async::<u8>(&s).unwrap().await.unwrap().is_empty());
        empty.copy_from_vec_async(Vec::<u8>::new(), &s).unwrap().await.unwrap();
        // Odd sizes: whole elements only, as to_vec does.
        let odd = d.allocate(10, &s).unwrap();
        odd.fill_u8(7, &s).unwrap();
        assert_eq!(
            odd.to_vec_async::<u32>(&s).unwrap().await.unwrap(),
            vec![0x0707_0707u32; 2]
        );
    });
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn futures_on_a_stream_being_captured_are_errors_not_hangs() {
    let (d, s) = setup();
    let buffer = d.allocate(64, &s).unwrap();
    let mut errors = Vec::new();
    let graph = s
        .capture_graph(CaptureMode::ThreadLocal, |c| {
            errors.push(c.synchronized().map(|_| ()).unwrap_err().to_string());
            errors.push(buffer.to_vec_async::<u8>(c).map(|_| ()).unwrap_err().to_string());
            errors.push(
                buffer
                    .copy_from_vec_async(vec![1u8; 8], c)
                    .map(|_| ())
                    .unwrap_err()
                    .to_string(),
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("the capture failed: {e}; errors inside: {errors:?}"));
    drop(graph);
    for e in &errors {
        assert!(e.contains("captur"), "{e}");
    }
    assert_eq!(errors.len(), 3);
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn futures_of_the_default_stream_resolve_on_any_thread() {
    let (d, _) = setup();
    let legacy = Stream::legacy_default();
    let buffer = d.allocate(4096, &legacy).unwrap();
    buffer.fill_u32(0x1234_5678, &legacy).unwrap();
    let read = buffer.to_vec_async::<u32>(&legacy).unwrap();
    let done = legacy.synchronized().unwrap();
    // Awaited on a worker thread with no current context: the result comes from the driver's
    // callback, nothing is asked of the driver where the future is polled.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (values, ok) = runtime.block_on(async {
        let values = tokio::spawn(read).await.unwrap();
        let ok = tokio::spawn(done).await.unwrap();
        (values, ok)
    });
    ok.unwrap();
    assert_eq!(values.unwrap(), vec![0x1234_5678u32; 1024]);
}
