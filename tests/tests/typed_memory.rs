//! Typed memory on the GPU (issue 36): typed buffers from every resource, element-indexed views,
//! read-only kernel arguments, safe host access to pinned and managed memory (and its
//! refusals), stream-ordered pinned copies, `Event::completed` on reused waiter streams, the
//! portable pinned resource, and `assume_ordered_on`. Every test is in `typed_memory::`, so
//! `run.sh typed_memory` runs them all.

mod typed_memory {
    use cuda_core::graph::CaptureMode;
    use cuda_core::{
        Buffer, CodeType, Device, DeviceMemoryResource, EventOptions, HostAllocFlags, Kernel, LaunchConfig,
        LegacyPinnedMemoryResource, ManagedMemoryResource, MemoryResource, PinnedMemoryKind, PinnedMemoryResource,
        PinnedMemoryResourceOptions, Program, ProgramOptions, SourceType, Stream, StreamOptions, TypedBuffer,
    };
    use cuda_tests::skip_part;
    use gate::Gate;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::Arc;
    use std::time::Duration;

    mod gate;

    const N: usize = 4096;

    fn setup() -> (Device, Stream) {
        let d = Device::new(0).expect("a GPU");
        d.set_current().unwrap();
        (d, stream(&d))
    }

    /// A non-blocking stream: the timing checks below must not see other tests' work on the
    /// legacy default stream, which blocking streams synchronise with.
    fn stream(d: &Device) -> Stream {
        d.create_stream(StreamOptions {
            nonblocking: true,
            priority: None,
        })
        .unwrap()
    }

    /// The tests of this file run one at a time. Several hold a stream busy with a kernel that
    /// spins until the host opens a [`Gate`]; meanwhile a kernel's first launch in another test
    /// loads its module lazily (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2), and
    /// loading may wait for the kernels running in the context (the CUDA programming guide's
    /// lazy-loading hazards). Run in parallel, the gated tests waited for other tests' gates until
    /// the watchdogs opened them (H100, both default-stream modes); run one at a time, they
    /// passed.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        cuda_tests::one_at_a_time()
    }

    /// `saxpy(a, x, y, n)`: y = a*x + y, with a `const float*` x; `spin_fill(x, v, n, cycles)`
    /// spins, then writes v into n floats. Compiled once for the whole file: their code stays
    /// loaded, so no test's timing sees a module loaded or unloaded.
    fn kernels() -> (Kernel, Kernel) {
        static KERNELS: std::sync::OnceLock<(Kernel, Kernel)> = std::sync::OnceLock::new();
        KERNELS.get_or_init(compile_kernels).clone()
    }

    fn compile_kernels() -> (Kernel, Kernel) {
        let source = r#"
            extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            extern "C" __global__ void spin_fill(float* x, float v, unsigned n, long long cycles) {
                long long start = clock64();
                while (clock64() - start < cycles) {}
                for (unsigned i = threadIdx.x; i < n; i += blockDim.x) x[i] = v;
            }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
            .unwrap()
            .compile(CodeType::Cubin, &[])
            .unwrap();
        (code.get_kernel("saxpy").unwrap(), code.get_kernel("spin_fill").unwrap())
    }

    fn all(n: usize) -> LaunchConfig {
        LaunchConfig::new((n as u32).div_ceil(256).max(1), 256)
    }

    /// About 1 s of GPU time before `spin_fill` writes: long enough that a host access which
    /// failed to wait for the write would see the old values. (Assertions that a stream is still
    /// busy use a [`Gate`] instead: a fixed spin can end before a loaded host gets to them.)
    const SPIN: i64 = 2_000_000_000;

    /// Keeps `s` busy for [`SPIN`] cycles.
    fn spin_on(s: &Stream) {
        let (_, spin_fill) = kernels();
        let spin_fill = spin_fill.typed::<(*mut f32, f32, u32, i64)>().unwrap();
        // SAFETY: with n = 0 spin_fill writes nothing (the null pointer is never touched).
        unsafe { spin_fill.launch(s, &LaunchConfig::new(1, 1), (std::ptr::null_mut(), 0.0f32, 0u32, SPIN)) }.unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn typed_buffers_copy_slice_and_launch_with_read_only_arguments() {
        let _serial = serial();
        let (d, s) = setup();
        let (saxpy, _) = kernels();
        let saxpy = saxpy.typed::<(f32, *const f32, *mut f32, u32)>().unwrap();
        let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let x = TypedBuffer::<f32>::from_host_blocking(&d, &xs, &s).unwrap();
        let y = TypedBuffer::<f32>::allocate(&d.memory_resource().unwrap(), N, &s).unwrap();
        assert_eq!((x.len(), y.len()), (N, N));
        y.fill(1.0, &s).unwrap();
        // SAFETY: saxpy reads n floats of x and writes n floats of y; both hold N.
        unsafe {
            // A read-only view for the `const float*`, the typed buffer itself for the `float*`.
            saxpy
                .launch(&s, &all(N), (2.0f32, x.read_only(), &y, N as u32))
                .unwrap();
            // A writable view is accepted for the `const float*` too.
            saxpy
                .launch(&s, &all(N), (1.0f32, x.view(), y.view(), N as u32))
                .unwrap();
        }
        let got = y.to_vec_blocking(&s).unwrap();
        assert!(got.iter().enumerate().all(|(i, v)| *v == 3.0 * i as f32 + 1.0));
        // Element-indexed sub-views: only the second half moves.
        let half = N / 2;
        // SAFETY: the views hold `half` floats each.
        unsafe {
            saxpy
                .launch(
                    &s,
                    &all(half),
                    (
                        1.0f32,
                        x.slice(half..).unwrap().read_only(),
                        y.slice(half..).unwrap(),
                        half as u32,
                    ),
                )
                .unwrap();
        }
        let got = y.to_vec_blocking(&s).unwrap();
        for (i, v) in got.iter().enumerate() {
            let want = if i < half {
                3.0 * i as f32 + 1.0
            } else {
                4.0 * i as f32 + 1.0
            };
            assert_eq!(*v, want, "element {i}");
        }
        // Typed copies between buffers and views, and with host slices.
        let z = TypedBuffer::<f32>::allocate(&d, N, &s).unwrap();
        z.copy_from(&x, &s).unwrap();
        z.slice(..10).unwrap().fill(-1.0, &s).unwrap();
        z.slice(10..20).unwrap().copy_from(y.slice(0..10).unwrap(), &s).unwrap();
        let mut head = [0f32; 30];
        z.slice(..30)
            .unwrap()
            .read_only()
            .copy_to_host_blocking(&mut head, &s)
            .unwrap();
        for (i, v) in head.iter().enumerate() {
            let want = match i {
                0..10 => -1.0,
                10..20 => 3.0 * (i - 10) as f32 + 1.0,
                _ => i as f32,
            };
            assert_eq!(*v, want, "element {i}");
        }
        z.slice(N - 2..)
            .unwrap()
            .copy_from_host_blocking(&[7.0, 8.0], &s)
            .unwrap();
        assert_eq!(
            z.slice(N - 3..).unwrap().read_only().to_vec_blocking(&s).unwrap(),
            [(N - 3) as f32, 7.0, 8.0]
        );
        // Errors, not panics: ranges, lengths, overlaps, sizes.
        assert!(x.slice(..N + 1).is_err());
        let (from, to) = (5, 4);
        assert!(x.slice(from..to).is_err());
        assert!(x.slice(N..).unwrap().is_empty());
        let e = z.slice(..4).unwrap().copy_from(x.slice(..5).unwrap(), &s).unwrap_err();
        assert!(e.to_string().contains("elements"), "{e}");
        let e = z
            .slice(..8)
            .unwrap()
            .copy_from(z.slice(4..12).unwrap(), &s)
            .unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let e = z.copy_from_host_blocking(&[1.0; 3], &s).unwrap_err();
        assert!(e.to_string().contains("elements"), "{e}");
        let e = TypedBuffer::<f64>::allocate(&d, N, &s)
            .unwrap()
            .fill(1.0, &s)
            .unwrap_err();
        assert!(e.to_string().contains("8 bytes"), "{e}");
        let e = TypedBuffer::<f32>::allocate(&d, usize::MAX / 2, &s).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
        let e = Buffer::allocate(d.memory_resource().unwrap(), 10, &s)
            .unwrap()
            .into_typed::<f32>()
            .unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        // Untyped and back: the same memory.
        let raw: Buffer = z.into();
        let back = TypedBuffer::<u32>::from_buffer(raw).unwrap();
        assert_eq!(back.len(), N);
        assert_eq!(
            back.slice(..1).unwrap().read_only().to_vec_blocking(&s).unwrap(),
            [(-1.0f32).to_bits()]
        );
        s.sync().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn typed_buffers_come_from_every_resource() {
        let _serial = serial();
        let (d, s) = setup();
        let data: Vec<u32> = (0..1000).collect();
        let own: Arc<dyn MemoryResource> = DeviceMemoryResource::new(&d, Default::default()).unwrap();
        let check = |b: TypedBuffer<u32>, what: &str| {
            assert_eq!(b.len(), data.len(), "{what}");
            b.copy_from_host_blocking(&data, &s).unwrap();
            assert_eq!(b.to_vec_blocking(&s).unwrap(), data, "{what}");
        };
        check(
            TypedBuffer::allocate(&d, data.len(), &s).unwrap(),
            "device default pool",
        );
        check(
            TypedBuffer::allocate(&d.memory_resource().unwrap(), data.len(), &s).unwrap(),
            "device resource",
        );
        check(TypedBuffer::allocate(&own, data.len(), &s).unwrap(), "a dyn resource");
        check(
            TypedBuffer::allocate(&PinnedMemoryResource::portable().unwrap(), data.len(), &s).unwrap(),
            "portable pinned",
        );
        check(
            TypedBuffer::allocate(
                &LegacyPinnedMemoryResource::new(HostAllocFlags::empty()),
                data.len(),
                &s,
            )
            .unwrap(),
            "legacy pinned",
        );
        match ManagedMemoryResource::new(None) {
            Ok(m) => check(TypedBuffer::allocate(&m, data.len(), &s).unwrap(), "managed"),
            Err(e) => skip_part(format!("no managed pool: {e}")),
        }
        check(
            TypedBuffer::allocate(&ManagedMemoryResource::unpooled(None), data.len(), &s).unwrap(),
            "unpooled managed",
        );
        // Empty buffers are buffers.
        let empty = TypedBuffer::<f32>::allocate(&d, 0, &s).unwrap();
        assert!(empty.is_empty() && empty.to_vec_blocking(&s).unwrap().is_empty());
        s.sync().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn host_slices_wait_for_every_stream_that_used_the_buffer() {
        let _serial = serial();
        let (d, s) = setup();
        let (_, spin_fill) = kernels();
        let spin_fill = spin_fill.typed::<(*mut f32, f32, u32, i64)>().unwrap();
        let other = stream(&d);
        let resources: Vec<(&str, Arc<dyn MemoryResource>)> = vec![
            ("portable pinned", PinnedMemoryResource::portable().unwrap()),
            (
                "legacy pinned",
                LegacyPinnedMemoryResource::new(HostAllocFlags::empty()),
            ),
            ("unpooled managed", ManagedMemoryResource::unpooled(None)),
        ];
        for (what, mr) in resources {
            let mut b = TypedBuffer::<f32>::allocate(&mr, N, &s).unwrap();
            // Written from the host at once: the (stream-ordered) allocation is waited for.
            b.host_slice_mut().unwrap().fill(1.0);
            // A slow kernel on another stream writes it; the host sees its writes.
            // SAFETY: spin_fill writes N floats of a buffer of N (pinned and managed memory are
            // device-accessible).
            unsafe { spin_fill.launch(&other, &LaunchConfig::new(1, 256), (&b, 2.0f32, N as u32, SPIN)) }.unwrap();
            assert!(
                b.host_slice().unwrap().iter().all(|v| *v == 2.0),
                "{what}: the other stream's write"
            );
            // And the deallocation stream's.
            // SAFETY: as above.
            unsafe { spin_fill.launch(&s, &LaunchConfig::new(1, 256), (b.view(), 3.0f32, N as u32, SPIN)) }.unwrap();
            let slice = b.host_slice_mut().unwrap();
            assert!(
                slice.iter().all(|v| *v == 3.0),
                "{what}: the deallocation stream's write"
            );
            slice[..4].copy_from_slice(&[9.0, 8.0, 7.0, 6.0]);
            // What the host wrote, the GPU copies.
            assert_eq!(
                b.slice(..5).unwrap().read_only().to_vec_blocking(&other).unwrap(),
                [9.0, 8.0, 7.0, 6.0, 3.0],
                "{what}"
            );
            // Untyped too.
            let mut raw = b.into_buffer();
            assert_eq!(&raw.host_slice::<f32>().unwrap()[..2], [9.0, 8.0]);
            assert!(raw.host_slice::<[u8; 3]>().is_err(), "{what}: not a whole number");
        }
        s.sync().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn host_slices_are_refused_where_others_may_write() {
        let _serial = serial();
        let (d, s) = setup();
        let (_, spin_fill) = kernels();
        let spin_fill = spin_fill.typed::<(*mut f32, f32, u32, i64)>().unwrap();
        // Device memory.
        let mut device = TypedBuffer::<f32>::allocate(&d, 16, &s).unwrap();
        let e = device.host_slice_mut().unwrap_err();
        assert!(e.to_string().contains("not host-accessible"), "{e}");
        // Memory a graph holds: its launches may write it at any time.
        let pinned = PinnedMemoryResource::portable().unwrap();
        let mut held = TypedBuffer::<f32>::allocate(&pinned, 16, &s).unwrap();
        let graph = s
            .capture_graph(CaptureMode::Relaxed, |cs| {
                // SAFETY: spin_fill writes 16 floats of a buffer of 16.
                unsafe { spin_fill.launch(cs, &LaunchConfig::new(1, 32), (&held, 1.0f32, 16u32, 0i64)) }
            })
            .unwrap();
        let e = held.host_slice_mut().unwrap_err();
        assert!(e.to_string().contains("graph"), "{e}");
        drop(graph);
        // Foreign memory: its owner may write it.
        let mut owner = pinned.allocate(64, &s).unwrap();
        // SAFETY: the pinned buffer outlives the wrapper (dropped first, below).
        let mut foreign = unsafe { Buffer::from_handle(owner.handle(), 64, &s) }.unwrap();
        let e = foreign.host_slice_mut::<u8>().unwrap_err();
        assert!(e.to_string().contains("wrapped"), "{e}");
        drop(foreign);
        // The owner itself is host memory of this process's own pool.
        assert!(owner.host_slice_mut::<u8>().is_ok());
        // Memory shared with other processes.
        let shared = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
            ipc_enabled: true,
            ..Default::default()
        });
        match shared.and_then(|p| p.export_fd().map(|fd| (p, fd))) {
            Ok((pool, _fd)) => {
                let mut b = pool.allocate(64, &s).unwrap();
                let e = b.host_slice_mut::<u8>().unwrap_err();
                assert!(e.to_string().contains("another process"), "{e}");
            }
            Err(e) => skip_part(format!("no shareable pinned pool here: {e}")),
        }
        s.sync().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn pinned_copies_are_stream_ordered_and_blocking_ones_wait() {
        let _serial = serial();
        let (d, s) = setup();
        let pinned = PinnedMemoryResource::portable().unwrap();
        let mut host = TypedBuffer::<u32>::allocate(&pinned, N, &s).unwrap();
        host.host_slice_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as u32);
        let dev = TypedBuffer::<u32>::allocate(&d, N, &s).unwrap();
        let mut gate = Gate::new();
        gate.hold(&s);
        // Queued behind the gated kernel: they return while it runs.
        dev.copy_from(&host, &s).unwrap();
        let back = TypedBuffer::<u32>::allocate(&pinned, N, &s).unwrap();
        back.copy_from(&dev, &s).unwrap();
        gate.assert_not_timed_out("a stream-ordered copy");
        assert!(
            !s.is_done().unwrap(),
            "the stream-ordered copies did not wait for the gated kernel"
        );
        gate.open();
        let mut back = back;
        assert!(back
            .host_slice()
            .unwrap()
            .iter()
            .enumerate()
            .all(|(i, v)| *v == i as u32));
        // The blocking form waits for its copy, and the gated kernel before it: it cannot return
        // before another thread opens the gate.
        let mut gate = Gate::new();
        gate.hold(&s);
        gate.open_after(Duration::from_millis(300));
        let mut out = vec![0u32; N];
        dev.copy_to_host_blocking(&mut out, &s).unwrap();
        assert!(
            gate.is_open(),
            "a blocking copy returned before the kernel queued ahead of it could end"
        );
        assert!(
            s.is_done().unwrap(),
            "a blocking copy returned before its copy was done"
        );
        gate.assert_not_timed_out("the blocking copy");
        assert!(out.iter().enumerate().all(|(i, v)| *v == i as u32));
        // Awaited copies of typed buffers.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            dev.copy_from_vec_async(vec![5u32; N], &s).unwrap().await.unwrap();
            let v = dev.to_vec_async(&s).unwrap().await.unwrap();
            assert!(v.len() == N && v.iter().all(|x| *x == 5));
        });
        assert!(dev.copy_from_vec_async(vec![5u32; 3], &s).is_err());
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn events_complete_on_reused_waiter_streams_without_waiting_for_each_other() {
        let _serial = serial();
        let (d, s) = setup();
        let other = stream(&d);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Many completions in a row (each hands its waiter back for the next).
        runtime.block_on(async {
            for _ in 0..200 {
                let e = s.record_new(EventOptions::default()).unwrap();
                e.completed().unwrap().await.unwrap();
            }
        });
        // A slow event's completion does not hold up a quick one's (no shared waiter). (On an
        // H100 this failed while the spin's code was compiled for each spin and dropped right
        // after its launch, and the quick completion resolved only after the spin: the raw
        // driver's completions do not wait for each other (tests/driver-experiments/
        // completions_behind_waits.c), and the drop of the code, which unloads it, may wait
        // for the kernel. The kernels are now compiled once, and code is unloaded on the
        // release thread.)
        spin_on(&s);
        let slow = s.record_new(EventOptions::default()).unwrap();
        let slow_done = slow.completed().unwrap();
        let quick = other.record_new(EventOptions::default()).unwrap();
        runtime.block_on(async { quick.completed().unwrap().await.unwrap() });
        assert!(
            !s.is_done().unwrap(),
            "the quick event's completion waited for the slow one"
        );
        runtime.block_on(async { slow_done.await.unwrap() });
        assert!(slow.is_done().unwrap());
        // An event never recorded is complete at once.
        let never = d.create_event(EventOptions::default()).unwrap();
        runtime.block_on(async { never.completed().unwrap().await.unwrap() });
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn portable_pinned_memory_says_which_it_is() {
        let _serial = serial();
        let (_, s) = setup();
        let pinned = PinnedMemoryResource::portable().unwrap();
        let (major, _) = cuda_core::system::get_user_mode_driver_version().unwrap();
        if major >= 13 {
            assert_eq!(pinned.kind(), PinnedMemoryKind::DefaultPool);
        }
        assert_eq!(pinned.pool().is_some(), pinned.kind() != PinnedMemoryKind::Legacy);
        assert!(pinned.is_host_accessible() && pinned.is_device_accessible());
        let mut b = pinned.allocate(256, &s).unwrap();
        assert!(b.is_host_accessible());
        b.host_slice_mut::<u64>().unwrap().fill(7);
        assert_eq!(b.to_vec::<u64>(&s).unwrap(), [7; 32]);
        println!("portable pinned memory here: {:?}", pinned.kind());
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn assume_ordered_on_skips_the_first_use_wait() {
        let _serial = serial();
        let (d, s) = setup();
        let (_, spin_fill) = kernels();
        let spin_fill = spin_fill.typed::<(*mut f32, f32, u32, i64)>().unwrap();
        let other = stream(&d);
        // Without it: the first use on `other` waits for everything queued on `s`, the gated
        // kernel included, which only another thread's opening ends.
        let b = TypedBuffer::<f32>::allocate(&d, 256, &s).unwrap();
        let mut gate = Gate::new();
        gate.hold(&s);
        gate.open_after(Duration::from_millis(300));
        // SAFETY: spin_fill writes 256 floats of a buffer of 256.
        unsafe { spin_fill.launch(&other, &LaunchConfig::new(1, 256), (&b, 1.0f32, 256u32, 0i64)) }.unwrap();
        other.sync().unwrap();
        assert!(
            gate.is_open() && s.is_done().unwrap(),
            "the first use on another stream waits for the deallocation stream"
        );
        gate.assert_not_timed_out("the first use on another stream");
        drop(gate);
        // With it: `other` waited for an event recorded right after the allocation only; the
        // gated kernel queued after the event runs until the gate opens.
        let c = TypedBuffer::<f32>::allocate(&d, 256, &s).unwrap();
        let allocated = s.record_new(EventOptions::default()).unwrap();
        let mut gate = Gate::new();
        gate.hold(&s);
        other.wait_event(&allocated).unwrap();
        // SAFETY: `other` waits for an event recorded after the allocation.
        unsafe { c.as_buffer().assume_ordered_on(&other) }.unwrap();
        // SAFETY: as above.
        unsafe { spin_fill.launch(&other, &LaunchConfig::new(1, 256), (&c, 2.0f32, 256u32, 0i64)) }.unwrap();
        other.sync().unwrap();
        gate.assert_not_timed_out("the first use after assume_ordered_on");
        assert!(
            !s.is_done().unwrap(),
            "the first use waited for the gated kernel after all"
        );
        gate.open();
        assert!(c.to_vec_blocking(&other).unwrap().iter().all(|v| *v == 2.0));
        // The free still waits for `other` (it is remembered): dropped here, nothing faults.
        drop(c);
        s.sync().unwrap();
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn typed_buffers_on_the_default_stream() {
        let _serial = serial();
        let (d, _) = setup();
        let s = d.default_stream();
        let x = TypedBuffer::<i32>::from_host_blocking(&d, &[1, 2, 3, 4], &s).unwrap();
        let y = TypedBuffer::<i32>::allocate(&d, 4, &s).unwrap();
        y.copy_from(&x, &s).unwrap();
        assert_eq!(y.to_vec_blocking(&s).unwrap(), [1, 2, 3, 4]);
        let mut pinned = TypedBuffer::<i32>::allocate(&PinnedMemoryResource::portable().unwrap(), 4, &s).unwrap();
        pinned.copy_from(&y, &s).unwrap();
        assert_eq!(pinned.host_slice().unwrap(), [1, 2, 3, 4]);
    }

    /// Counts the heap allocations of the calling thread (other tests of this file run on other
    /// threads meanwhile).
    struct Counting;

    thread_local! {
        static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    }

    fn count() {
        // (`try_with`: not while the thread's locals are being torn down.)
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    }

    // SAFETY: forwards to the system allocator, counting calls in a const-initialised thread
    // local without destructor (reading it allocates nothing).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded with the caller's pointer and layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: forwarded.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn typed_arguments_allocate_nothing_per_launch() {
        let _serial = serial();
        let (d, s) = setup();
        let (saxpy, _) = kernels();
        let saxpy = saxpy.typed::<(f32, *const f32, *mut f32, u32)>().unwrap();
        let x = TypedBuffer::<f32>::allocate(&d, N, &s).unwrap();
        let y = TypedBuffer::<f32>::allocate(&d, N, &s).unwrap();
        x.fill(1.0, &s).unwrap();
        y.fill(0.0, &s).unwrap();
        let config = all(N);
        // Warm up. SAFETY: N floats each; synchronised below.
        unsafe { saxpy.launch(&s, &config, (1.0f32, x.read_only(), &y, N as u32)) }.unwrap();
        s.sync().unwrap();
        let before = ALLOCATIONS.with(Cell::get);
        for _ in 0..500 {
            // SAFETY: as above; the views hold N floats.
            unsafe {
                saxpy
                    .launch(&s, &config, (1.0f32, x.read_only(), &y, N as u32))
                    .unwrap();
                saxpy
                    .launch(&s, &config, (1.0f32, x.view(), y.view(), N as u32))
                    .unwrap();
            }
        }
        let during = ALLOCATIONS.with(Cell::get) - before;
        assert_eq!(
            during, 0,
            "{during} heap allocations in 1000 launches with typed arguments"
        );
        assert!(y.to_vec_blocking(&s).unwrap().iter().all(|v| *v == 1001.0));
    }
}
