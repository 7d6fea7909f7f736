//! Criterion benchmarks of the hot paths, each next to its raw `cuda-sys` twin in one group so
//! the report compares them (`cargo xtask bench-gpu`'s bundle runs these with `run.sh
//! --criterion`; `compare.rs` prints the one-table summary). Needs a GPU.

use criterion::{criterion_group, criterion_main, Criterion};
use cuda_core::graph::CaptureMode;
use cuda_core::{CodeType, Device, EventOptions, LaunchConfig, Program, ProgramOptions, SourceType, StreamOptions};
use cuda_sys::driver;
use std::ffi::c_void;
use std::time::Duration;

fn check(status: driver::CUresult) {
    if let Err(e) = status.result() {
        panic!("{e}");
    }
}

fn benches(c: &mut Criterion) {
    let device = Device::new(0).expect("the benchmarks need a GPU");
    device.set_current().unwrap();
    let stream = device.create_stream(StreamOptions::default()).unwrap();
    let raw_stream = stream.handle();
    let source = r#"extern "C" __global__ void k2(float* x, unsigned n) { if (x && threadIdx.x == 1024) x[0] = n; }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let kernel = code.get_kernel("k2").unwrap();
    let typed = kernel.typed::<(u64, u32)>().unwrap();
    let config = LaunchConfig::new(1, 32);
    let function = kernel.handle() as driver::CUfunction;
    // Keep the queue from filling: synchronise every 128 launches.
    let mut launches = 0u32;
    let mut settle = move || {
        launches += 1;
        if launches.is_multiple_of(128) {
            // SAFETY: the stream is live.
            check(unsafe { driver::cuStreamSynchronize(raw_stream) });
        }
    };

    let mut g = c.benchmark_group("launch_2_args");
    g.bench_function("safe_typed", |b| {
        b.iter(|| {
            // SAFETY: k2(float*, unsigned) with a null pointer, which it does not dereference.
            unsafe { typed.launch(&stream, &config, (0u64, 1u32)).unwrap() };
            settle();
        })
    });
    g.bench_function("raw_cuLaunchKernel", |b| {
        b.iter(|| {
            let (mut x, mut n) = (0u64, 1u32);
            let mut params = [(&mut x as *mut u64).cast::<c_void>(), (&mut n as *mut u32).cast()];
            // SAFETY: as above.
            check(unsafe {
                driver::cuLaunchKernel(
                    function,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    raw_stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            });
            settle();
        })
    });
    g.finish();

    let graph = stream
        .capture_graph(CaptureMode::ThreadLocal, |s| {
            for _ in 0..10 {
                // SAFETY: as above.
                unsafe { typed.launch(s, &config, (0u64, 1u32))? };
            }
            Ok(())
        })
        .unwrap();
    let exec = graph.handle();
    let mut g = c.benchmark_group("graph_launch_10_kernels");
    g.bench_function("safe", |b| {
        b.iter(|| {
            graph.launch(&stream).unwrap();
            settle();
        })
    });
    g.bench_function("raw_cuGraphLaunch", |b| {
        b.iter(|| {
            // SAFETY: a live executable graph and stream.
            check(unsafe { driver::cuGraphLaunch(exec, raw_stream) });
            settle();
        })
    });
    g.finish();

    let pool = device.memory_resource().unwrap();
    let raw_pool = pool.handle();
    let mut g = c.benchmark_group("alloc_free_1MiB_default_pool");
    g.bench_function("safe", |b| b.iter(|| drop(pool.allocate(1 << 20, &stream).unwrap())));
    g.bench_function("raw", |b| {
        b.iter(|| {
            let mut p = 0;
            // SAFETY: out-pointer to a local; the memory is freed at once, stream-ordered.
            unsafe {
                check(driver::cuMemAllocFromPoolAsync(&mut p, 1 << 20, raw_pool, raw_stream));
                check(driver::cuMemFreeAsync(p, raw_stream));
            }
        })
    });
    g.finish();

    let event = device.create_event(EventOptions::default()).unwrap();
    let raw_event = event.handle();
    let mut g = c.benchmark_group("event_record_sync");
    g.bench_function("safe", |b| {
        b.iter(|| {
            stream.record(&event).unwrap();
            event.sync().unwrap();
        })
    });
    g.bench_function("raw", |b| {
        b.iter(|| {
            // SAFETY: live event and stream.
            unsafe {
                check(driver::cuEventRecord(raw_event, raw_stream));
                check(driver::cuEventSynchronize(raw_event));
            }
        })
    });
    g.finish();
    stream.sync().unwrap();
}

criterion_group! {
    name = group;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(group);
