//! The execution core on a GPU: devices, streams, events, launches.

use cuda_core::{
    launch, CodeType, Device, EventOptions, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream,
    StreamOptions,
};
use cuda_tests::DeviceVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn device() -> Device {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    d
}

fn kernels() -> (Kernel, Kernel) {
    let source = r#"
        extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i] + y[i];
        }
        extern "C" __global__ void spin_then_set(float* x, unsigned n, float value, long long cycles) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = value;
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    (
        code.get_kernel("saxpy").unwrap(),
        code.get_kernel("spin_then_set").unwrap(),
    )
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn device_identity_and_properties() {
    let d = device();
    assert!(cuda_core::device_count().unwrap() >= 1);
    assert_eq!(Device::current().unwrap(), d);
    let uuid = d.uuid().unwrap();
    assert_eq!(uuid.len(), 36, "{uuid}");
    assert_eq!(uuid.matches('-').count(), 4);
    let pci = d.pci_bus_id().unwrap();
    assert!(pci.contains(':') && pci.contains('.'), "{pci}");
    let cc = d.compute_capability().unwrap();
    assert_eq!(d.arch().unwrap(), format!("{}{}", cc.major, cc.minor));
    assert!(cc >= cuda_core::ComputeCapability { major: 7, minor: 0 });
    assert!(d.total_memory().unwrap() > d.free_memory().unwrap());
    assert!(d.multiprocessor_count().unwrap() > 0);
    assert!(d.can_access_peer(&d).unwrap());
    let props = d.properties();
    assert_eq!(props.max_threads_per_block().unwrap(), 1024);
    assert_eq!(props.warp_size().unwrap(), 32);
    assert_eq!(
        props.multiprocessor_count().unwrap() as u32,
        d.multiprocessor_count().unwrap()
    );
    let all = props.all();
    assert!(all.len() > 120, "{} attributes", all.len());
    assert!(all
        .iter()
        .any(|(n, v)| *n == "compute_capability_major" && *v == cc.major as i32));
    assert_eq!(d.primary_context().unwrap(), d.set_current().unwrap());
    let err = Device::new(1000).unwrap_err();
    assert!(err.to_string().contains("device_id must be within"), "{err}");
    println!("{} {} cc {cc} {pci} {uuid}", d.name().unwrap(), d.arch().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn streams_events_and_timed_launches() {
    let d = device();
    let (saxpy, _) = kernels();
    let stream = d.create_stream(StreamOptions::default()).unwrap();
    assert!(stream.is_nonblocking().unwrap());
    let blocking = d
        .create_stream(StreamOptions {
            nonblocking: false,
            priority: None,
        })
        .unwrap();
    assert!(!blocking.is_nonblocking().unwrap());
    let urgent = d
        .create_stream(StreamOptions {
            priority: Some(-1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(urgent.priority().unwrap(), -1);
    let err = d
        .create_stream(StreamOptions {
            priority: Some(99),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");

    const N: usize = 1 << 20;
    let x = DeviceVec::from_slice(&vec![1.0f32; N]);
    let y = DeviceVec::from_slice(&vec![2.0f32; N]);
    let typed = saxpy.typed::<(f32, u64, u64, u32)>().unwrap();
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);
    let timing = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let (start, end) = (d.create_event(timing).unwrap(), d.create_event(timing).unwrap());
    stream.record(&start).unwrap();
    for _ in 0..100 {
        // SAFETY: x and y hold N floats and outlive the launches (synchronised below).
        unsafe { typed.launch(&stream, &config, (0.5, x.ptr, y.ptr, N as u32)).unwrap() };
    }
    stream.record(&end).unwrap();
    end.sync().unwrap();
    assert!(end.is_done().unwrap() && stream.is_done().unwrap());
    let ms = end.elapsed_time_since(&start).unwrap();
    println!("100 saxpy launches over {N} floats: {:.4} ms each", ms / 100.0);
    assert!(ms > 0.0);
    assert!(y.to_vec().iter().all(|v| *v == 2.0 + 100.0 * 0.5));
    let untimed = d.create_event(EventOptions::default()).unwrap();
    assert!(end.elapsed_time_since(&untimed).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_stream_waits_for_another() {
    let d = device();
    let (_, spin) = kernels();
    let (a, b) = (
        d.create_stream(Default::default()).unwrap(),
        d.create_stream(Default::default()).unwrap(),
    );
    const N: usize = 1024;
    let x = DeviceVec::from_slice(&[0.0; N]);
    let config = LaunchConfig::new(4, 256);
    // SAFETY: spin_then_set(float*, unsigned, float, long long) over N floats.
    unsafe {
        launch(&a, &config, &spin, (x.ptr, N as u32, 1.0f32, 500_000_000i64)).unwrap();
        b.wait(&a).unwrap();
        launch(&b, &config, &spin, (x.ptr, N as u32, 2.0f32, 0i64)).unwrap();
    }
    let a_was_running = !a.is_done().unwrap();
    b.sync().unwrap();
    assert!(a.is_done().unwrap(), "b waited for a");
    // Had b not waited, its (instant) kernel would have written first and a's last: 1.0.
    assert!(x.to_vec().iter().all(|v| *v == 2.0), "b's kernel ran after a's");
    // The check above means something only if a was still spinning when b was queued; under
    // heavy parallel load the thread can be held up long enough for a to finish first.
    if !a_was_running {
        eprintln!("note: a had finished before b was queued; ordering was checked only by the data");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn host_callbacks_run_in_order_and_panics_are_caught() {
    let d = device();
    let stream = d.create_stream(Default::default()).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..5 {
        let order = order.clone();
        stream.launch_host_func(move || order.lock().unwrap().push(i)).unwrap();
    }
    stream.launch_host_func(|| panic!("inside a host callback")).unwrap();
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    stream.launch_host_func(move || a.store(1, Ordering::SeqCst)).unwrap();
    stream.sync().unwrap();
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(after.load(Ordering::SeqCst), 1, "the stream carried on after the panic");
    let errors = cuda_core::take_drop_errors();
    assert!(
        errors.iter().any(|e| e.to_string().contains("host callback panicked")),
        "{errors:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn launches_are_checked_before_the_driver_sees_them() {
    let d = device();
    let (saxpy, _) = kernels();
    let stream = d.create_stream(Default::default()).unwrap();
    let x = DeviceVec::from_slice(&[0.0; 16]);
    let too_big = LaunchConfig::new(1, 2048);
    // SAFETY: never launched: the configuration is refused first.
    let err = unsafe { launch(&stream, &too_big, &saxpy, (1.0f32, x.ptr, x.ptr, 16u32)) }.unwrap_err();
    assert!(err.to_string().contains("2048 threads exceeds"), "{err}");
    let bad_cluster = LaunchConfig {
        cluster: Some(9.into()),
        ..LaunchConfig::new(1, 32)
    };
    // SAFETY: as above.
    let err = unsafe { launch(&stream, &bad_cluster, &saxpy, (1.0f32, x.ptr, x.ptr, 16u32)) }.unwrap_err();
    assert!(err.to_string().contains("a cluster of 9 blocks"), "{err}");
    let err = saxpy.typed::<(f32, u64, u64)>().err().unwrap();
    assert!(err.to_string().contains("sizes [4, 8, 8, 4]"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn clusters_cooperative_and_priority_launches() {
    let d = device();
    let (saxpy, _) = kernels();
    let stream = d.create_stream(Default::default()).unwrap();
    const N: usize = 4096;
    let x = DeviceVec::from_slice(&vec![1.0; N]);
    let y = DeviceVec::from_slice(&vec![0.0; N]);
    let base = LaunchConfig::new((N as u32) / 128, 128);
    let configs = [
        // The grid counts clusters: half as many clusters of 2 cover the same blocks.
        LaunchConfig {
            cluster: Some(2.into()),
            ..LaunchConfig::new((N as u32) / 256, 128)
        },
        LaunchConfig {
            cooperative_launch: true,
            ..base
        },
        LaunchConfig {
            priority: Some(-1),
            programmatic_stream_serialization: true,
            ..base
        },
    ];
    for config in &configs {
        // SAFETY: x and y hold N floats; synchronised below.
        unsafe { launch(&stream, config, &saxpy, (1.0f32, x.ptr, y.ptr, N as u32)).unwrap() };
    }
    stream.sync().unwrap();
    assert!(y.to_vec().iter().all(|v| *v == 3.0));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn kernel_attributes_and_occupancy() {
    let d = device();
    let (saxpy, _) = kernels();
    assert!(saxpy.max_threads_per_block(&d).unwrap() >= 256);
    assert!(saxpy.num_regs(&d).unwrap() > 0);
    assert_eq!(saxpy.shared_size_bytes(&d).unwrap(), 0);
    let blocks = saxpy.max_active_blocks_per_multiprocessor(&d, 256, 0).unwrap();
    assert!(blocks >= 1, "{blocks}");
    let best = saxpy.max_potential_block_size(&d, 0, 0).unwrap();
    assert!(best.max_block_size >= 128 && best.min_grid_size >= d.multiprocessor_count().unwrap());
    println!("saxpy: {blocks} blocks of 256 per SM; best block {best:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn streams_and_launches_from_eight_threads() {
    let d = device();
    let (saxpy, _) = kernels();
    let typed = saxpy.typed::<(f32, u64, u64, u32)>().unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let typed = typed.clone();
            s.spawn(move || {
                d.set_current().unwrap();
                let stream = d.create_stream(Default::default()).unwrap();
                const N: usize = 1 << 16;
                let x = DeviceVec::from_slice(&vec![t as f32; N]);
                let y = DeviceVec::from_slice(&vec![0.0; N]);
                for _ in 0..50 {
                    // SAFETY: x and y hold N floats; synchronised below.
                    unsafe {
                        typed.launch(
                            &stream,
                            &LaunchConfig::new(N as u32 / 256, 256),
                            (1.0, x.ptr, y.ptr, N as u32),
                        )
                    }
                    .unwrap();
                }
                stream.sync().unwrap();
                assert!(y.to_vec().iter().all(|v| *v == 50.0 * t as f32), "thread {t}");
            });
        }
    });
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_foreign_stream_is_used_but_not_destroyed() {
    let d = device();
    let (saxpy, _) = kernels();
    let mut raw: cuda_sys::driver::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the context is current.
    unsafe { cuda_sys::driver::cuStreamCreate(&mut raw, 0) }
        .result()
        .unwrap();
    {
        // SAFETY: raw stays valid until destroyed below, after the wrapper is gone.
        let stream = unsafe { Stream::from_handle(raw) }.unwrap();
        // A foreign stream knows its context and device, as cuda.core's `Stream.from_handle`.
        assert_eq!(stream.device(), Some(d));
        assert_eq!(stream.context(), Some(&d.primary_context().unwrap()));
        let x = DeviceVec::from_slice(&[1.0; 256]);
        // SAFETY: x holds 256 floats; synchronised below.
        unsafe {
            launch(
                &stream,
                &LaunchConfig::new(1, 256),
                &saxpy,
                (1.0f32, x.ptr, x.ptr, 256u32),
            )
            .unwrap()
        };
        stream.sync().unwrap();
        assert!(x.to_vec().iter().all(|v| *v == 2.0));
    }
    // Still ours to destroy: the wrapper did not.
    // SAFETY: raw is live and destroyed once.
    unsafe { cuda_sys::driver::cuStreamDestroy(raw) }.result().unwrap();
    let legacy = Stream::legacy_default();
    legacy.sync().unwrap();
    let _ = d;
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn explicit_contexts_push_pop_and_flags() {
    use cuda_core::{Context, ContextFlags};
    let d = device();
    let primary = d.primary_context().unwrap();
    assert!(primary.is_primary());
    let ctx = Context::create(&d, ContextFlags::SCHED_BLOCKING_SYNC).unwrap();
    assert!(!ctx.is_primary());
    assert_eq!(
        Context::current_handle().unwrap(),
        primary.handle(),
        "creating leaves the thread as it was"
    );
    ctx.push().unwrap();
    assert_eq!(Context::current_handle().unwrap(), ctx.handle());
    assert!(ctx.flags().unwrap().contains(ContextFlags::SCHED_BLOCKING_SYNC));
    let stream = ctx.create_stream(Default::default()).unwrap();
    assert_eq!(stream.context(), Some(&ctx));
    assert_eq!(Context::pop_current().unwrap(), ctx.handle());
    assert_eq!(Context::current_handle().unwrap(), primary.handle());
    // Work in the explicit context from a thread where the primary one is current.
    let (saxpy, _) = {
        ctx.push().unwrap();
        let k = kernels();
        Context::pop_current().unwrap();
        k
    };
    ctx.push().unwrap();
    let x = DeviceVec::from_slice(&[1.0; 256]);
    Context::pop_current().unwrap();
    // SAFETY: x holds 256 floats in ctx; the stream belongs to ctx; synchronised below.
    unsafe {
        launch(
            &stream,
            &LaunchConfig::new(1, 256),
            &saxpy,
            (1.0f32, x.ptr, x.ptr, 256u32),
        )
        .unwrap()
    };
    stream.sync().unwrap();
    ctx.synchronize().unwrap();
    assert_eq!(
        Context::current_handle().unwrap(),
        primary.handle(),
        "synchronize restored the current context"
    );
    ctx.push().unwrap();
    assert!(x.to_vec().iter().all(|v| *v == 2.0));
    drop(x);
    Context::pop_current().unwrap();
    drop(stream);
    drop(ctx);
    assert!(cuda_core::take_drop_errors()
        .iter()
        .all(|e| !e.to_string().contains("cuCtxDestroy")));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn module_globals_and_half_precision_arguments() {
    let d = device();
    let source = r#"
        #include <cuda_fp16.h>
        __constant__ float scale;
        __device__ int hits;
        extern "C" __global__ void apply(float* x, __half offset) {
            x[threadIdx.x] = x[threadIdx.x] * scale + __half2float(offset);
            atomicAdd(&hits, 1);
        }"#;
    let include = cuda_pathfinder::locate_nvidia_header_directory("cudart").map(|l| l.abs_path.display().to_string());
    let options = ProgramOptions {
        include_path: include.into_iter().collect(),
        ..Default::default()
    };
    let code = Program::new(source, SourceType::Cxx, options)
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let kernel = code.get_kernel("apply").unwrap();
    let (scale, size) = code.get_global("scale").unwrap();
    assert_eq!(size, 4);
    let (hits, _) = code.get_global("hits").unwrap();
    // SAFETY: the globals are 4 bytes each; copies are synchronous.
    unsafe {
        cuda_sys::driver::cuMemcpyHtoD(scale, (&3.0f32 as *const f32).cast(), 4)
            .result()
            .unwrap();
        cuda_sys::driver::cuMemsetD32(hits, 0, 1).result().unwrap();
    }
    let x = DeviceVec::from_slice(&[2.0; 64]);
    let stream = d.create_stream(Default::default()).unwrap();
    // SAFETY: apply(float*, __half) over 64 floats; synchronised below.
    unsafe {
        launch(
            &stream,
            &LaunchConfig::new(1, 64),
            &kernel,
            (x.ptr, half::f16::from_f32(0.5)),
        )
        .unwrap()
    };
    stream.sync().unwrap();
    assert!(x.to_vec().iter().all(|v| *v == 6.5));
    let mut count = 0i32;
    // SAFETY: hits is 4 bytes.
    unsafe {
        cuda_sys::driver::cuMemcpyDtoH((&mut count as *mut i32).cast(), hits, 4)
            .result()
            .unwrap()
    };
    assert_eq!(count, 64);
    let err = code.get_global("nope").unwrap_err();
    assert!(err.to_string().contains("cuLibraryGetGlobal"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn cluster_occupancy() {
    let d = device();
    let (saxpy, _) = kernels();
    let config = LaunchConfig {
        cluster: Some(2.into()),
        ..LaunchConfig::new(64, 128)
    };
    let clusters = saxpy.max_active_clusters(&d, &config).unwrap();
    println!("saxpy: {clusters} clusters of 2 x 128 threads can be active");
    assert!(clusters >= d.multiprocessor_count().unwrap() / 2);
}

/// Run in a child by `an_ipc_event_is_waited_for_in_another_process`.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_waits_for_an_ipc_event() {
    let Ok(hex) = std::env::var("CUDA_RS_IPC_EVENT") else {
        return;
    };
    let d = device();
    let desc = cuda_core::IpcEventDescriptor::from_hex(&hex).unwrap();
    let event = cuda_core::Event::from_ipc_descriptor(&d.primary_context().unwrap(), &desc).unwrap();
    assert!(event.is_ipc_imported());
    let before = event.is_done().unwrap();
    event.sync().unwrap();
    assert!(event.is_done().unwrap());
    let stream = d.create_stream(Default::default()).unwrap();
    assert!(stream.record(&event).is_err(), "an imported event cannot be recorded");
    stream.wait_event(&event).unwrap();
    stream.sync().unwrap();
    println!("child: done before sync = {before}, done after sync = true");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_ipc_event_is_waited_for_in_another_process() {
    let d = device();
    let (_, spin) = kernels();
    let stream = d.create_stream(Default::default()).unwrap();
    // As in cuda.core, an IPC event is made by recording it (`Stream.record(options=...)`).
    let err = d
        .create_event(EventOptions {
            ipc_enabled: true,
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("IPC-enabled events must be bound"), "{err}");
    // (cuda.core raises a TypeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Type);
    let x = DeviceVec::from_slice(&[0.0; 32]);
    // SAFETY: spin_then_set over 32 floats; synchronised below. About a second of spinning.
    unsafe {
        launch(
            &stream,
            &LaunchConfig::new(1, 32),
            &spin,
            (x.ptr, 32u32, 1.0f32, 2_000_000_000i64),
        )
        .unwrap()
    };
    let event = stream
        .record_new(EventOptions {
            ipc_enabled: true,
            ..Default::default()
        })
        .unwrap();
    let desc = event.ipc_descriptor().unwrap();
    assert_eq!(cuda_core::IpcEventDescriptor::from_hex(&desc.to_hex()).unwrap(), desc);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_waits_for_an_ipc_event",
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env("CUDA_RS_IPC_EVENT", desc.to_hex())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("done after sync = true"),
        "{text}"
    );
    assert!(
        stream.is_done().unwrap(),
        "the child returned only after the kernel finished"
    );
    let plain = d.create_event(EventOptions::default()).unwrap();
    let err = plain.ipc_descriptor().unwrap_err();
    assert!(err.to_string().contains("Event is not IPC-enabled"), "{err}");
    // (cuda.core raises a RuntimeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let err = stream
        .record_new(EventOptions {
            ipc_enabled: true,
            timing_enabled: true,
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("IPC-enabled events cannot use timing."),
        "{err}"
    );
    // (cuda.core raises a TypeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Type);
}

#[derive(Clone, Copy, cuda_core::DeviceRepr)]
#[repr(C)]
struct Params {
    scale: f32,
    count: u32,
    data: u64,
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn structs_by_value_through_the_derive() {
    let d = device();
    let source = r#"
        struct Params { float scale; unsigned count; float* data; };
        extern "C" __global__ void scale(Params p) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < p.count) p.data[i] *= p.scale;
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let kernel = code.get_kernel("scale").unwrap().typed::<(Params,)>().unwrap();
    let x = DeviceVec::from_slice(&[2.0; 300]);
    let stream = d.create_stream(Default::default()).unwrap();
    let params = Params {
        scale: 1.5,
        count: 300,
        data: x.ptr,
    };
    // SAFETY: the struct matches the kernel's Params; data holds count floats; synchronised below.
    unsafe { kernel.launch(&stream, &LaunchConfig::new(2, 256), (params,)).unwrap() };
    stream.sync().unwrap();
    assert!(x.to_vec().iter().all(|v| *v == 3.0));
}

/// Run in a child by `a_faulting_kernel_is_a_sticky_launch_failure` (the fault poisons the context).
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_faulting_kernel() {
    if std::env::var_os("CUDA_RS_FAULT_CHILD").is_none() {
        return;
    }
    let d = device();
    let source = r#"extern "C" __global__ void fault(int* p) { *p = 1; }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let kernel = code.get_kernel("fault").unwrap();
    let stream = d.create_stream(Default::default()).unwrap();
    // SAFETY: deliberately not: the kernel writes through a bad pointer, which is what is tested.
    unsafe { launch(&stream, &LaunchConfig::new(1, 1), &kernel, (8u64,)).unwrap() };
    let err = stream.sync().unwrap_err();
    assert!(err.is_launch_failure(), "{err}");
    println!("first: {err}");
    let again = d.sync().unwrap_err();
    assert!(again.is_launch_failure(), "sticky: {again}");
    println!("sticky: {again}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_faulting_kernel_is_a_sticky_launch_failure() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_faulting_kernel", "--nocapture", "--include-ignored"])
        .env("CUDA_RS_FAULT_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // The driver reports the fault as an illegal address or, under tools, a launch failure.
    let code = |prefix: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{text}"));
        line.split(": ")
            .nth(2)
            .and_then(|s| s.split(' ').next())
            .unwrap_or("")
            .to_string()
    };
    // (Stream::sync reports its query or the event it waits for.)
    let (first, sticky) = (code("first: cu"), code("sticky: cuCtxSynchronize"));
    assert!(
        first == "CUDA_ERROR_ILLEGAL_ADDRESS" || first == "CUDA_ERROR_LAUNCH_FAILED",
        "{text}"
    );
    assert_eq!(first, sticky, "the same error again: it is sticky");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn explicit_close_reports_and_peer_access_checks() {
    let d = device();
    let stream = d.create_stream(Default::default()).unwrap();
    let clone = stream.clone();
    stream.close().unwrap(); // only a reference: the clone still works
    clone.sync().unwrap();
    clone.close().unwrap(); // the last one destroys it
    let event = d.create_event(Default::default()).unwrap();
    event.close().unwrap();
    let (least, greatest) = d.primary_context().unwrap().stream_priority_range().unwrap();
    assert!(greatest <= least, "({least}, {greatest})");
    let err = d.enable_peer_access(&d).unwrap_err();
    assert!(err.to_string().contains("its own memory"), "{err}");
    assert!(cuda_core::take_drop_errors()
        .iter()
        .all(|e| !e.to_string().contains("Destroy")));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_captured_graph_replays_its_launches() {
    use cuda_core::graph::CaptureMode;
    let d = device();
    let (saxpy, _) = kernels();
    let stream = d.create_stream(Default::default()).unwrap();
    let x = DeviceVec::from_slice(&[1.0; 1024]);
    let y = DeviceVec::from_slice(&[0.0; 1024]);
    let mut builder = stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    for _ in 0..10 {
        // SAFETY: x and y hold 1024 floats and outlive every replay below.
        unsafe {
            launch(
                builder.stream(),
                &LaunchConfig::new(4, 256),
                &saxpy,
                (1.0f32, x.ptr, y.ptr, 1024u32),
            )
            .unwrap()
        };
    }
    builder.end_building().unwrap();
    let definition = builder.graph_definition().unwrap();
    assert_eq!(definition.num_nodes().unwrap(), 10);
    assert!(y.to_vec().iter().all(|v| *v == 0.0), "captured work does not run");
    let graph = builder.complete(&Default::default()).unwrap();
    graph.upload(&stream).unwrap();
    for _ in 0..3 {
        graph.launch(&stream).unwrap();
    }
    stream.sync().unwrap();
    assert!(y.to_vec().iter().all(|v| *v == 30.0));
    // A builder dropped mid-capture leaves the stream usable. (Thread-local: a global capture
    // would make other threads' synchronous calls fail while it lasts, as CUDA specifies.)
    drop(stream.begin_capture(CaptureMode::ThreadLocal).unwrap());
    stream.sync().unwrap();
}
