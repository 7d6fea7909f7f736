//! Green contexts on the GPU: SM resources and their splits, green contexts made from the groups
//! (their SM counts, streams, kernels, lifetimes, `set_current`/`close`), workqueue resources, and
//! every validation error with `cuda.core`'s wording. Features of CUDA 13.1 drivers (the
//! structured split, workqueues) are checked where the driver has them; on older drivers the test
//! says why it skips them and checks the error instead.

use cuda_core::graph::CaptureMode;
use cuda_core::{
    launch, CodeType, Context, ContextOptions, CudaError, Device, EventOptions, Kernel, LaunchConfig, PerGroup,
    Program, ProgramOptions, SMResource, SMResourceOptions, SourceType, Stream, StreamOptions,
    WorkqueueResourceOptions, WorkqueueSharingScope,
};
use cuda_sys::driver::CUresult;
use cuda_tests::{skip, skip_part};
use std::collections::BTreeSet;

fn device() -> Device {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    d
}

fn driver_version() -> (u32, u32) {
    cuda_core::system::get_user_mode_driver_version().unwrap()
}

/// Whether the driver has the CUDA 13.1 split (per-group counts, co-scheduling, backfill).
fn structured_split() -> bool {
    cuda_sys::LibraryId::Driver
        .library()
        .function_pointer("cuDevSmResourceSplit")
        .is_ok()
}

/// The device's SMs, or `None` (the test's skip recorded) on a driver without green contexts.
fn sm_resource(d: &Device) -> Option<SMResource> {
    match d.resources().sm() {
        Ok(sm) => Some(sm),
        Err(e) if e.load_error().is_some() => {
            skip(format!("green contexts need a CUDA 12.4 driver: {e}"));
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn refused_configuration(e: &CudaError) -> bool {
    matches!(
        e.driver_status(),
        Some(CUresult::CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION | CUresult::CUDA_ERROR_INVALID_VALUE)
    )
}

/// Two groups of one size, as large as the driver makes them: `(groups, remainder)`, or `None`
/// (the test's skip recorded) where the device has no such split.
fn two_groups(sm: &SMResource) -> Option<(Vec<SMResource>, SMResource)> {
    let step = sm.coscheduled_alignment().max(2);
    let smallest = sm.min_partition_size().max(step).div_ceil(step) * step;
    let mut count = sm.sm_count() / 2 / step * step;
    while count >= smallest {
        match sm.split(&SMResourceOptions::with_counts([count, count]), false) {
            Ok((groups, rest)) if groups.len() == 2 => return Some((groups, rest)),
            Ok(_) => {}
            Err(e) if refused_configuration(&e) => {}
            Err(e) => panic!("split into two groups of {count}: {e}"),
        }
        count -= step;
    }
    skip("the device has no split into two groups");
    None
}

fn message<T: std::fmt::Debug>(r: cuda_core::Result<T>) -> String {
    r.unwrap_err().to_string()
}

/// The most SMs the work of a green context provisioned with `provisioned` SMs can be seen on.
/// The driver documents two cases where it runs on more SMs than provisioned (never fewer): on
/// compute capability 9.x, once a module using dynamic parallelism is loaded (by any test of the
/// process), kernels of green contexts may also use a shared set of 2 more SMs; under MPS with
/// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, as many as the MPS client has. So the bound allows 2 more
/// SMs, and under MPS only the device's count.
fn sm_bound(d: &Device, provisioned: u32) -> u32 {
    let mps = d
        .attribute(cuda_sys::driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED)
        .unwrap_or(0)
        != 0;
    if mps {
        d.multiprocessor_count().unwrap()
    } else {
        provisioned + 2
    }
}

/// `fill(out, value, n, smids)`: `out[i] = value`; each block writes the SM it ran on
/// (`%smid`) into `smids[block]`, after a short spin so that blocks spread over the SMs.
fn fill_kernel() -> Kernel {
    let source = r#"
        extern "C" __global__ void fill(int* out, int value, int n, unsigned* smids) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = value;
            if (threadIdx.x == 0) {
                long long start = clock64();
                while (clock64() - start < 20000) {}
                unsigned id;
                asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
                smids[blockIdx.x] = id;
            }
        }"#;
    Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("fill")
        .unwrap()
}

/// Work queued by [`fill_on`]: the buffers it writes.
struct Filled {
    out: cuda_core::Buffer,
    smids: cuda_core::Buffer,
    value: i32,
}

/// Queues `fill` with `value` on `stream` over `blocks` blocks of 128 threads.
fn fill_on(d: &Device, stream: &Stream, kernel: &Kernel, blocks: u32, value: i32) -> Filled {
    let n = blocks * 128;
    let out = d.allocate(n as usize * 4, stream).unwrap();
    let smids = d.allocate(blocks as usize * 4, stream).unwrap();
    // SAFETY: `out` holds n ints and `smids` one u32 per block, as the kernel writes them.
    unsafe {
        launch(
            stream,
            &LaunchConfig::new(blocks, 128),
            kernel,
            (&out, value, n as i32, &smids),
        )
        .unwrap()
    };
    Filled { out, smids, value }
}

impl Filled {
    /// Checks every element and returns the distinct SMs the blocks ran on.
    fn check(&self, stream: &Stream) -> BTreeSet<u32> {
        let out = self.out.to_vec::<i32>(stream).unwrap();
        assert!(out.iter().all(|v| *v == self.value), "every element is {}", self.value);
        self.smids.to_vec::<u32>(stream).unwrap().into_iter().collect()
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_device_reports_its_sms() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    println!(
        "driver CUDA {:?}, structured split: {}, {sm:?}",
        driver_version(),
        structured_split()
    );
    assert_eq!(sm.sm_count(), d.multiprocessor_count().unwrap());
    assert!(sm.min_partition_size() >= 1 && sm.coscheduled_alignment() >= 1);
    if d.compute_capability().unwrap().major >= 9 {
        assert!(sm.min_partition_size() % 2 == 0 && sm.coscheduled_alignment() % 2 == 0);
    }
    assert_eq!(sm.device(), d);
    assert!(!sm.is_dry_run());
    assert_eq!(
        sm.handle().type_,
        cuda_sys::driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
    );
    // The primary context and its streams run on the whole device.
    let primary = d.primary_context().unwrap();
    assert_eq!(primary.resources().sm().unwrap().sm_count(), sm.sm_count());
    let s = d.create_stream(Default::default()).unwrap();
    assert_eq!(s.resources().unwrap().sm().unwrap().sm_count(), sm.sm_count());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn discovery_finds_a_group_and_a_dry_run_finds_the_same() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, rest) = sm.split(&SMResourceOptions::default(), false).unwrap();
    assert_eq!(groups.len(), 1);
    assert!(groups[0].sm_count() >= sm.min_partition_size(), "{groups:?}");
    assert!(groups[0].sm_count() + rest.sm_count() <= sm.sm_count());
    assert!(!groups[0].is_dry_run() && !rest.is_dry_run());
    let (dry, dry_rest) = sm.split(&SMResourceOptions::default(), true).unwrap();
    assert_eq!(dry.len(), groups.len());
    assert_eq!(
        dry[0].sm_count(),
        groups[0].sm_count(),
        "a dry run counts as the real split"
    );
    assert!(dry[0].is_dry_run() && dry_rest.is_dry_run());
    println!(
        "discovery: {} SMs of {} ({} left over)",
        groups[0].sm_count(),
        sm.sm_count(),
        rest.sm_count()
    );
    // Dry-run groups make no context and cannot be split.
    let m = message(d.create_context(ContextOptions::new([dry[0].clone()])));
    assert!(m.contains("dry-run SMResource"), "{m}");
    let m = message(dry[0].split(&SMResourceOptions::default(), false));
    assert!(m.contains("dry-run SMResource cannot be split"), "{m}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dry_runs_count_as_real_splits() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let small = sm.min_partition_size().max(sm.coscheduled_alignment()).max(2);
    let shapes = [
        SMResourceOptions::default(),
        SMResourceOptions::with_count(small),
        SMResourceOptions::with_counts([small, small]),
        SMResourceOptions::with_count(2 * small),
        SMResourceOptions::with_counts([small; 3]),
    ];
    for options in shapes {
        let real = match sm.split(&options, false) {
            Ok(r) => r,
            Err(e) if refused_configuration(&e) => {
                println!("{:?}: refused ({e})", options.count);
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        let dry = sm.split(&options, true).unwrap();
        let counts = |(groups, rest): &(Vec<SMResource>, SMResource)| {
            (
                groups.iter().map(SMResource::sm_count).collect::<Vec<_>>(),
                rest.sm_count(),
            )
        };
        println!(
            "{:?}: real {:?}, dry run {:?}",
            options.count,
            counts(&real),
            counts(&dry)
        );
        assert_eq!(counts(&dry), counts(&real), "a dry run counts as the real split");
        assert!(dry.0.iter().all(SMResource::is_dry_run) && dry.1.is_dry_run());
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn splits_the_driver_does_not_take_are_refused() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, rest) = sm.split(&SMResourceOptions::default(), false).unwrap();
    // A group of a split is not split again.
    let m = message(groups[0].split(&SMResourceOptions::default(), false));
    assert!(m.starts_with("a group of a split cannot be split again"), "{m}");
    let m = message(groups[0].split(&SMResourceOptions::default(), true));
    assert!(m.starts_with("a group of a split cannot be split again"), "{m}");
    // A remainder only by the CUDA 13.1 split.
    if rest.sm_count() > 0 {
        match rest.split(&SMResourceOptions::default(), false) {
            Ok((g, _)) => {
                assert!(structured_split(), "only the CUDA 13.1 split takes a remainder");
                println!("the remainder split again: {} SMs", g[0].sm_count());
            }
            Err(e) if structured_split() && refused_configuration(&e) => println!("the driver refused: {e}"),
            Err(e) => {
                assert!(!structured_split(), "{e}");
                assert!(
                    e.to_string()
                        .starts_with("the remainder of a split cannot be split again with cuDevSmResourceSplitByCount"),
                    "{e}"
                );
            }
        }
    }
    // An empty remainder makes no green context: one group of every SM leaves none.
    let all = SMResourceOptions::with_count(sm.sm_count());
    match sm.split(&all, false) {
        Ok((groups, rest)) if rest.sm_count() == 0 && !groups.is_empty() => {
            println!("{} SMs in one group, none left over", groups[0].sm_count());
            let m = message(d.create_context(ContextOptions::new([rest.clone()])));
            assert!(m.contains("an SMResource with no SMs"), "{m}");
            let m = message(rest.split(&SMResourceOptions::default(), false));
            assert!(m.contains("no SMs") || m.contains("cannot be split again"), "{m}");
        }
        Ok((_, rest)) => skip_part(format!(
            "an empty remainder: one group of every SM left {} SMs",
            rest.sm_count()
        )),
        Err(e) if refused_configuration(&e) => {
            skip_part(format!("an empty remainder: one group of every SM was refused: {e}"))
        }
        Err(e) => panic!("{e}"),
    }
    // More groups than SMs: refused before anything is allocated (the CUDA 13.1 split), or as
    // many groups as the SMs allow (the CUDA 12.4 split makes fewer groups when they run out).
    let small = sm.min_partition_size().max(sm.coscheduled_alignment()).max(2);
    let many = SMResourceOptions::with_counts(vec![small; sm.sm_count() as usize + 1]);
    match sm.split(&many, false) {
        Ok((groups, _)) => {
            assert!(!structured_split());
            assert!(groups.len() as u32 <= sm.sm_count() / small, "{}", groups.len());
        }
        Err(e) => {
            assert!(structured_split(), "{e}");
            assert!(e.to_string().contains("more than the"), "{e}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_green_context_reports_the_sms_of_its_partition() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let Some((groups, rest)) = two_groups(&sm) else { return };
    let total = groups[0].sm_count() + groups[1].sm_count() + rest.sm_count();
    assert!(total <= sm.sm_count(), "{groups:?} {rest:?}");
    for group in &groups {
        let green = d.create_context(ContextOptions::new([group.clone()])).unwrap();
        assert!(green.is_green() && !green.is_primary());
        assert_eq!(green.device(), d);
        let got = green.resources().sm().unwrap();
        assert_eq!(
            got.sm_count(),
            group.sm_count(),
            "the green context has its partition's SMs"
        );
        assert!(got.sm_count() < sm.sm_count());
        let s = green.create_stream(Default::default()).unwrap();
        assert_eq!(s.resources().unwrap().sm().unwrap().sm_count(), group.sm_count());
        assert!(s.is_nonblocking().unwrap());
        assert!(s.context().is_some_and(|c| c == &green && c.is_green()));
        println!("green context {green:?}: {} SMs", got.sm_count());
        drop(s);
        green.close().unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn kernels_on_two_green_contexts_compute_on_their_own_sms() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let Some((groups, _)) = two_groups(&sm) else { return };
    let kernel = fill_kernel();
    let contexts: Vec<Context> = groups
        .iter()
        .map(|g| d.create_context(ContextOptions::new([g.clone()])).unwrap())
        .collect();
    let streams: Vec<Stream> = contexts
        .iter()
        .map(|c| c.create_stream(Default::default()).unwrap())
        .collect();
    let blocks = 4 * sm.sm_count();
    // Both queued before either is waited for: the two partitions run at once.
    let work: Vec<Filled> = streams
        .iter()
        .zip([10, 20])
        .map(|(s, value)| fill_on(&d, s, &kernel, blocks, value))
        .collect();
    let mut used = Vec::new();
    for ((w, s), group) in work.iter().zip(&streams).zip(&groups) {
        let sms = w.check(s);
        println!(
            "green context of {} SMs: value {} everywhere, blocks ran on {} SMs",
            group.sm_count(),
            w.value,
            sms.len()
        );
        assert!(
            sms.len() as u32 <= sm_bound(&d, group.sm_count()),
            "blocks ran on {} SMs, more than the {} of the partition (and the driver's documented extra)",
            sms.len(),
            group.sm_count()
        );
        used.push(sms);
    }
    println!(
        "SMs used by both partitions: {}",
        used[0].intersection(&used[1]).count()
    );
    // An event recorded on a green stream, and a wait across the two contexts.
    let e = streams[0].record_new(EventOptions::default()).unwrap();
    streams[1].wait_event(&e).unwrap();
    streams[1].wait(&streams[0]).unwrap();
    streams[1].sync().unwrap();
    assert!(e.is_done().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_stream_keeps_its_green_context_alive() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let s = green.create_stream(StreamOptions::default()).unwrap();
    // Not the last holder: closing lets go of this reference only.
    green.close().unwrap();
    let kernel = fill_kernel();
    let work = fill_on(&d, &s, &kernel, 64, 7);
    let sms = work.check(&s);
    assert!(sms.len() as u32 <= sm_bound(&d, groups[0].sm_count()));
    assert!(s.context().unwrap().is_green());
    drop(work);
    drop(s);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn green_context_streams_must_be_non_blocking() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let m = message(green.create_stream(StreamOptions {
        nonblocking: false,
        priority: None,
    }));
    assert!(m.contains("must be non-blocking"), "{m}");
    let (least, greatest) = green.stream_priority_range().unwrap();
    let s = green
        .create_stream(StreamOptions {
            nonblocking: true,
            priority: Some(greatest),
        })
        .unwrap();
    assert_eq!(s.priority().unwrap(), greatest);
    let m = message(green.create_stream(StreamOptions {
        nonblocking: true,
        priority: Some(least + 1),
    }));
    assert!(m.contains("out of range"), "{m}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn set_current_returns_the_previous_context_and_a_current_context_cannot_be_closed() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let primary = d.primary_context().unwrap();
    let previous = green.set_current().unwrap();
    assert_eq!(previous.as_ref(), Some(&primary));
    assert_eq!(Context::current().unwrap().as_ref(), Some(&green));
    assert!(Context::current().unwrap().unwrap().is_green());
    let m = message(green.clone().close());
    assert_eq!(
        m,
        "Cannot close a CUDA context while it is current. Restore a previous context before closing this context."
    );
    // Work through the current green context: a kernel on a stream made while it is current.
    let s = green.create_stream(Default::default()).unwrap();
    fill_on(&d, &s, &fill_kernel(), 8, 3).check(&s);
    let restored = previous
        .unwrap()
        .set_current()
        .unwrap()
        .expect("the green context was current");
    assert!(restored.is_green() && restored == green);
    assert_eq!(Context::current().unwrap().as_ref(), Some(&primary));
    drop((s, restored));
    green.close().unwrap();
}

// Streams, events and fences of one green context made and used from several threads at once
// (creating events makes the context current for a moment: the threads take turns at that).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn one_green_context_serves_several_threads() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let kernel = fill_kernel();
    let first = green.create_stream(Default::default()).unwrap();
    let partition = sm_bound(&d, groups[0].sm_count());
    std::thread::scope(|scope| {
        for value in 1..=4 {
            let (green, kernel, first) = (&green, &kernel, &first);
            scope.spawn(move || {
                for _ in 0..8 {
                    let s = green.create_stream(Default::default()).unwrap();
                    s.wait(first).unwrap();
                    let work = fill_on(&d, &s, kernel, 16, value);
                    let e = s.record_new(EventOptions::default()).unwrap();
                    first.wait_event(&e).unwrap();
                    assert!(work.check(&s).len() as u32 <= partition);
                }
            });
        }
    });
    first.sync().unwrap();
}

// A green context is current on one thread at a time: set_current, push and with_current on
// another thread are refused meanwhile, while its streams (made without making it current) serve
// every thread.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_green_context_is_current_on_one_thread_at_a_time() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let kernel = fill_kernel();
    // Whether the driver takes events of the primary context on green streams (the fences of a
    // green context are such events then; else they are its own, made with it current).
    let primary_fences = {
        let s = green.create_stream(Default::default()).unwrap();
        let e = d
            .create_stream(Default::default())
            .unwrap()
            .record_new(EventOptions::default())
            .unwrap();
        s.record(&e).is_ok()
    };
    let previous = green.set_current().unwrap();
    // Re-entrant on the thread holding it.
    green.push().unwrap();
    assert_eq!(Context::pop_current().unwrap(), green.handle());
    assert!(green.flags().is_ok());
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                d.set_current().unwrap();
                for m in [
                    message(green.set_current()),
                    message(green.push()),
                    message(green.flags()),
                    message(green.with_current(|| Ok(()))),
                ] {
                    assert!(m.contains("is current on another thread"), "{m}");
                }
                // (A state the operation cannot run in: a RuntimeError's kind.)
                assert_eq!(green.set_current().unwrap_err().kind(), cuda_core::ErrorKind::Runtime);
                assert_eq!(Context::current().unwrap(), Some(d.primary_context().unwrap()));
                // Its streams serve this thread: made, ordered and used without making it current.
                let s = green.create_stream(Default::default()).unwrap();
                let other = d.create_stream(Default::default()).unwrap();
                let work = fill_on(&d, &s, &kernel, 16, 6);
                if primary_fences {
                    other.wait(&s).unwrap();
                    s.wait(&other).unwrap();
                    assert!(work.check(&s).len() as u32 <= sm_bound(&d, groups[0].sm_count()));
                } else {
                    println!("skipped: the green context's fences are its own events, made with it current");
                    s.sync().unwrap();
                }
                // Its buffers' frees wait on the release thread for the context to be free.
                drop(work);
            })
            .join()
            .unwrap();
    });
    // Given back: another thread may make it current now.
    let restored = previous.unwrap().set_current().unwrap();
    assert_eq!(restored.as_ref(), Some(&green));
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let before = green.set_current().unwrap();
                assert!(before.is_none(), "nothing was current on the new thread");
                let s = green.create_stream(Default::default()).unwrap();
                fill_on(&d, &s, &kernel, 8, 2).check(&s);
                green.flags().unwrap();
            })
            .join()
            .unwrap();
    });
    // The thread that ended gave its claim back.
    green.with_current(|| Ok(())).unwrap();
    green.set_current().unwrap();
    d.set_current().unwrap();
}

// with_current keeps the thread's stack of held contexts and the driver's in step when its
// closure changes the current context, and set_current returns only contexts this crate holds.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn with_current_and_set_current_keep_the_stack_in_step() {
    use cuda_core::ContextFlags;
    use cuda_sys::driver;
    let d = device();
    let primary = d.primary_context().unwrap();
    let a = Context::create(&d, ContextFlags::empty()).unwrap();
    let b = Context::create(&d, ContextFlags::empty()).unwrap();
    // The closure makes another context current: the previous one is still restored.
    a.with_current(|| b.set_current().map(drop)).unwrap();
    assert_eq!(Context::current().unwrap().as_ref(), Some(&primary));
    // The closure pops: the previous context is current again, and held.
    a.with_current(|| Context::pop_current().map(drop)).unwrap();
    assert_eq!(Context::current().unwrap().as_ref(), Some(&primary));
    // The closure pushes: `a` stays on the stack below the restored context, held there.
    a.with_current(|| b.push()).unwrap();
    assert_eq!(Context::current().unwrap().as_ref(), Some(&primary));
    let a_handle = a.handle();
    drop((a, b));
    assert_eq!(Context::pop_current().unwrap(), primary.handle());
    let below = Context::current().unwrap().expect("a is current again");
    assert_eq!(below.handle(), a_handle);
    assert!(below.flags().is_ok(), "the thread's stack kept it alive");
    drop(below);
    assert_eq!(Context::pop_current().unwrap(), a_handle);
    d.set_current().unwrap();
    // A context made current by raw calls is not handed back (this crate does not hold it).
    let mut raw: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; it becomes current here and is destroyed below.
    unsafe { driver::cuCtxCreate(&mut raw, std::ptr::null_mut(), 0, d.handle()) }
        .result()
        .unwrap();
    let c = Context::create(&d, ContextFlags::empty()).unwrap();
    assert!(
        c.set_current().unwrap().is_none(),
        "a context made current by raw calls"
    );
    assert_eq!(primary.set_current().unwrap().as_ref(), Some(&c));
    // SAFETY: made above, current nowhere now, destroyed once.
    unsafe { driver::cuCtxDestroy(raw) }.result().unwrap();
    // A primary context this crate retained is handed back.
    assert_eq!(c.set_current().unwrap().as_ref(), Some(&primary));
    d.set_current().unwrap();
}

// One green stream ordered after another's work by a fence (an event of the primary context).
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_fence_orders_green_streams() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let Some((groups, _)) = two_groups(&sm) else { return };
    let source = r#"
        extern "C" __global__ void slow_fill(int* out, int value, int n, long long spin) {
            long long start = clock64();
            while (clock64() - start < spin) {}
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = value;
        }"#;
    let slow = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("slow_fill")
        .unwrap();
    let contexts: Vec<Context> = groups
        .iter()
        .map(|g| d.create_context(ContextOptions::new([g.clone()])).unwrap())
        .collect();
    let (a, b) = (
        contexts[0].create_stream(Default::default()).unwrap(),
        contexts[1].create_stream(Default::default()).unwrap(),
    );
    // What the fences rely on where the driver allows it: an event of the primary context
    // recorded on a green context's stream (otherwise the crate makes the green context's own).
    let primary_event = d
        .create_stream(Default::default())
        .unwrap()
        .record_new(EventOptions::default())
        .unwrap();
    match a.record(&primary_event) {
        Ok(()) => println!("an event of the primary context is recorded on a green stream"),
        Err(e) => println!("the driver refuses an event of the primary context on a green stream: {e}"),
    }
    b.wait_event(&primary_event).unwrap();
    let n = 64 * 128;
    let out = d.allocate(n as usize * 4, &a).unwrap();
    for round in 0..3 {
        // SAFETY: `out` holds n ints; the kernel writes each once.
        unsafe {
            launch(
                &a,
                &LaunchConfig::new(64, 128),
                &slow,
                (&out, 1i32 + round, n, 20_000_000i64),
            )
            .unwrap();
        }
        b.wait(&a).unwrap();
        // SAFETY: as above; ordered after the slow writes by the wait.
        unsafe { launch(&b, &LaunchConfig::new(64, 128), &slow, (&out, 100i32 + round, n, 0i64)).unwrap() };
        a.wait(&b).unwrap();
        let got = out.to_vec::<i32>(&a).unwrap();
        assert!(
            got.iter().all(|v| *v == 100 + round),
            "round {round}: the second write came last"
        );
    }
}

// The primary context's synchronisation waits for its green contexts too, so a capture on a green
// context's stream refuses it (as one on the primary context's streams does) rather than being
// invalidated.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_capture_on_a_green_stream_refuses_context_synchronisation() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let green = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let s = green.create_stream(Default::default()).unwrap();
    let buffer = d.allocate(4096, &s).unwrap();
    buffer.fill_u8(0, &s).unwrap();
    let mut builder = s.create_graph_builder();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    buffer.fill_u8(9, builder.stream()).unwrap();
    for err in [d.sync().unwrap_err(), green.synchronize().unwrap_err()] {
        assert!(err.to_string().contains("being captured"), "{err}");
    }
    builder.end_building().unwrap();
    let graph = builder.complete(&Default::default()).unwrap();
    graph.launch(&s).unwrap();
    d.sync().unwrap();
    green.synchronize().unwrap();
    assert!(buffer.to_vec::<u8>(&s).unwrap().iter().all(|b| *b == 9));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_partition_of_a_green_context_keeps_that_context() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let Some((groups, _)) = two_groups(&sm) else { return };
    let outer = d.create_context(ContextOptions::new([groups[0].clone()])).unwrap();
    let outer_sm = outer.resources().sm().unwrap();
    let inner_groups = match outer_sm.split(&SMResourceOptions::default(), false) {
        Ok((g, _)) => g,
        Err(e)
            if refused_configuration(&e) || e.driver_status() == Some(CUresult::CUDA_ERROR_INVALID_RESOURCE_TYPE) =>
        {
            return skip(format!("the driver does not split a green context's SMs: {e}"));
        }
        Err(e) => panic!("{e}"),
    };
    assert!(inner_groups[0].sm_count() <= outer_sm.sm_count());
    let inner = d
        .create_context(ContextOptions::new([inner_groups[0].clone()]))
        .unwrap();
    drop((outer, outer_sm, inner_groups));
    // The inner context holds the outer one: still usable.
    let s = inner.create_stream(Default::default()).unwrap();
    let sms = fill_on(&d, &s, &fill_kernel(), 32, 5).check(&s);
    println!("a partition of a green context: {} SMs used", sms.len());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_validation_error_is_cuda_cores() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let count = sm.min_partition_size();
    let m = message(sm.split(
        &SMResourceOptions {
            coscheduled_sm_count: PerGroup::Each(vec![Some(count), Some(count)]),
            ..SMResourceOptions::with_count(count)
        },
        false,
    ));
    assert!(
        m.starts_with("coscheduled_sm_count is a Sequence but count is scalar"),
        "{m}"
    );
    let m = message(sm.split(
        &SMResourceOptions {
            coscheduled_sm_count: PerGroup::Each(vec![Some(count); 3]),
            ..SMResourceOptions::with_counts([count, count])
        },
        false,
    ));
    assert_eq!(m, "coscheduled_sm_count has length 3, expected 2 (must match count)");
    let m = message(sm.split(
        &SMResourceOptions {
            backfill: PerGroup::Each(vec![true]),
            ..SMResourceOptions::with_counts([count, count])
        },
        false,
    ));
    assert_eq!(m, "backfill has length 1, expected 2 (must match count)");
    let m = message(sm.split(&SMResourceOptions::with_counts(Vec::<u32>::new()), true));
    assert!(m.starts_with("count sequence must not be empty"), "{m}");
    let m = message(d.create_context(ContextOptions::default()));
    assert!(m.starts_with("resources must be provided"), "{m}");
    let m = message(
        WorkqueueResourceOptions {
            concurrency_limit: Some(0),
            ..Default::default()
        }
        .validate(),
    );
    assert!(m.starts_with("concurrency_limit must be >= 1"), "{m}");
    let m = message("bogus".parse::<WorkqueueSharingScope>());
    assert!(m.starts_with("Unknown sharing_scope"), "{m}");
    // A resource of another device.
    match Device::new(1) {
        Ok(other) => {
            other.set_current().unwrap();
            let theirs = other.resources().sm().unwrap();
            let (groups, _) = theirs.split(&SMResourceOptions::default(), false).unwrap();
            let m = message(d.create_context(ContextOptions::new([groups[0].clone()])));
            assert!(m.contains("a resource of Device(1)"), "{m}");
            d.set_current().unwrap();
        }
        Err(_) => skip_part("a resource of another device: one GPU"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn per_group_counts_need_the_cuda_13_1_split() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let step = sm.coscheduled_alignment().max(2);
    let small = sm.min_partition_size().max(step).div_ceil(step) * step;
    let options = SMResourceOptions::with_counts([small, 2 * small]);
    if !structured_split() {
        let m = message(sm.split(&options, false));
        assert!(
            m.starts_with("CUDA 12 SM splitting only supports homogeneous count values"),
            "{m}"
        );
        // (cuda.core raises a NotImplementedError.)
        assert_eq!(
            sm.split(&options, false).unwrap_err().kind(),
            cuda_core::ErrorKind::NotImplemented
        );
        for (options, field) in [
            (
                SMResourceOptions {
                    coscheduled_sm_count: PerGroup::All(Some(step)),
                    ..SMResourceOptions::with_count(small)
                },
                "coscheduled_sm_count",
            ),
            (
                SMResourceOptions {
                    preferred_coscheduled_sm_count: PerGroup::All(Some(step)),
                    ..SMResourceOptions::with_count(small)
                },
                "preferred_coscheduled_sm_count",
            ),
            (
                SMResourceOptions {
                    backfill: PerGroup::All(true),
                    ..SMResourceOptions::with_count(small)
                },
                "backfill",
            ),
        ] {
            let m = message(sm.split(&options, false));
            assert!(
                m.starts_with(&format!(
                    "SMResourceOptions.{field} requires the CUDA 13.1 structured SM split API"
                )),
                "{m}"
            );
            assert_eq!(
                sm.split(&options, false).unwrap_err().kind(),
                cuda_core::ErrorKind::NotImplemented
            );
        }
        return skip(format!(
            "per-group counts, co-scheduling and backfill need a CUDA 13.1 driver (this one supports {:?}); \
             checked the refusals",
            driver_version()
        ));
    }
    match sm.split(&options, false) {
        Ok((groups, _)) => {
            assert_eq!(groups.len(), 2);
            assert!(
                groups[0].sm_count() >= small && groups[1].sm_count() >= 2 * small,
                "{groups:?}"
            );
            let green = d.create_context(ContextOptions::new([groups[1].clone()])).unwrap();
            assert_eq!(green.resources().sm().unwrap().sm_count(), groups[1].sm_count());
        }
        Err(e) if refused_configuration(&e) => println!("the driver refused {small} + {} SMs: {e}", 2 * small),
        Err(e) => panic!("{e}"),
    }
    let backfilled = SMResourceOptions {
        backfill: PerGroup::All(true),
        coscheduled_sm_count: PerGroup::All(Some(step)),
        ..SMResourceOptions::with_count(small)
    };
    match sm.split(&backfilled, true) {
        Ok((groups, _)) => assert!(groups[0].sm_count() >= small && groups[0].is_dry_run()),
        Err(e) if refused_configuration(&e) => println!("the driver refused a backfilled group: {e}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn workqueue_resources_need_a_cuda_13_1_driver() {
    let d = device();
    let Some(sm) = sm_resource(&d) else { return };
    let version = driver_version();
    if version < (13, 1) {
        let m = message(d.resources().workqueue());
        assert!(
            m.starts_with(&format!(
                "WorkqueueResource requires CUDA driver 13.1 or newer. Using driver version {}.{}",
                version.0, version.1
            )),
            "{m}"
        );
        assert_eq!(
            d.resources().workqueue().unwrap_err().kind(),
            cuda_core::ErrorKind::NotImplemented
        );
        return skip(format!(
            "workqueue resources need a CUDA 13.1 driver (this one supports {version:?}); checked the refusal"
        ));
    }
    let mut wq = d.resources().workqueue().unwrap();
    assert_eq!(wq.device(), d);
    assert!(wq.concurrency_limit() >= 1, "{wq:?}");
    wq.configure(&WorkqueueResourceOptions::default()).unwrap();
    let m = message(wq.configure(&WorkqueueResourceOptions {
        concurrency_limit: Some(0),
        ..Default::default()
    }));
    assert!(m.starts_with("concurrency_limit must be >= 1"), "{m}");
    wq.configure(&WorkqueueResourceOptions {
        sharing_scope: Some(WorkqueueSharingScope::GreenCtxBalanced),
        concurrency_limit: Some(2),
    })
    .unwrap();
    assert_eq!(wq.concurrency_limit(), 2);
    assert_eq!(wq.sharing_scope(), Some(WorkqueueSharingScope::GreenCtxBalanced));
    let (groups, _) = sm.split(&SMResourceOptions::default(), false).unwrap();
    let m = message(d.create_context(ContextOptions {
        resources: vec![groups[0].clone().into(), wq.clone().into(), wq.clone().into()],
    }));
    assert!(m.contains("at most one"), "{m}");
    let green = match d.create_context(ContextOptions {
        resources: vec![groups[0].clone().into(), wq.into()],
    }) {
        Ok(g) => g,
        Err(e) if refused_configuration(&e) => {
            return skip(format!(
                "the driver refuses a green context with a workqueue resource: {e}"
            ));
        }
        Err(e) => panic!("{e}"),
    };
    let s = green.create_stream(Default::default()).unwrap();
    fill_on(&d, &s, &fill_kernel(), 16, 99).check(&s);
    let theirs = green.resources().workqueue().unwrap();
    println!("green context workqueues: {theirs:?}");
}
