//! Copies with cuda.core's options: `copy_batch` (`cuMemcpyBatchAsync`) and `copy_to_with` /
//! `copy_from_with` (`cuMemcpyWithAttributesAsync`, or cuda.core's fallback before CUDA 13.2),
//! data checked byte for byte, refusals with cuda.core's wording. Captures here use the
//! thread-local or relaxed mode only (other tests of this process run meanwhile).

use cuda_core::graph::CaptureMode;
use cuda_core::{
    launch, BatchCopyOptions, Buffer, CodeType, CopyOptions, Device, Kernel, LaunchConfig, LegacyPinnedMemoryResource,
    MemcpyOverlapMode, MemcpySrcAccessOrder, MemoryLocation, Program, ProgramOptions, SourceType, Stream,
};
use cuda_sys::driver;
use cuda_tests::{skip, skip_part};

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

fn driver_version() -> (u32, u32) {
    cuda_core::system::get_user_mode_driver_version().unwrap()
}

/// A byte pattern of `n` bytes that differs per `seed` and per position.
fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8)
        .collect()
}

/// Pinned host buffers (legacy pinned memory, as cuda.core's tests use) holding `pattern(seed + i)`.
fn pinned_sources(s: &Stream, sizes: &[usize], seed: u8) -> Vec<Buffer> {
    let pinned = LegacyPinnedMemoryResource::new(Default::default());
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let b = pinned.allocate(n, s).unwrap();
            b.copy_from_host(&pattern(seed + i as u8, n), s).unwrap();
            b
        })
        .collect()
}

fn device_buffers(d: &Device, s: &Stream, sizes: &[usize]) -> Vec<Buffer> {
    sizes
        .iter()
        .map(|&n| {
            let b = d.allocate(n, s).unwrap();
            b.fill_u8(0xEE, s).unwrap();
            b
        })
        .collect()
}

fn pairs<'a>(srcs: &'a [Buffer], dsts: &'a [Buffer]) -> Vec<(&'a Buffer, &'a Buffer)> {
    srcs.iter().zip(dsts).collect()
}

fn assert_holds(s: &Stream, dsts: &[Buffer], sizes: &[usize], seed: u8, what: &str) {
    for (i, (b, &n)) in dsts.iter().zip(sizes).enumerate() {
        assert_eq!(
            b.to_vec::<u8>(s).unwrap(),
            pattern(seed + i as u8, n),
            "{what}: copy {i}"
        );
    }
}

/// `spin(x, cycles)`: spins for `cycles` clocks, then adds one to `x[0..n)` (one block of 256).
fn spinner() -> Kernel {
    let source = r#"extern "C" __global__ void spin(unsigned char* x, size_t n, long long cycles) {
        long long t = clock64();
        while (clock64() - t < cycles) {}
        for (size_t i = threadIdx.x; i < n; i += blockDim.x) x[i] += 1;
    }"#;
    Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("spin")
        .unwrap()
}

fn spin(s: &Stream, kernel: &Kernel, buffer: &Buffer, cycles: i64) {
    // SAFETY: spin(unsigned char*, size_t, long long) over the buffer's bytes; the buffers outlive
    // the tests' synchronisations.
    unsafe {
        launch(
            s,
            &LaunchConfig::new(1, 256),
            kernel,
            (buffer.handle(), buffer.size(), cycles),
        )
    }
    .unwrap();
}

const N: usize = 4096;

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_moves_every_byte_host_to_device_device_to_host_and_device_to_device() {
    let (d, s) = setup();
    let sizes = [N; 4];
    // Host to device.
    let host = pinned_sources(&s, &sizes, 1);
    let dev = device_buffers(&d, &s, &sizes);
    Buffer::copy_batch(&pairs(&host, &dev), &s).unwrap();
    assert_holds(&s, &dev, &sizes, 1, "h2d");
    // Device to host.
    let back = pinned_sources(&s, &sizes, 100);
    Buffer::copy_batch(&pairs(&dev, &back), &s).unwrap();
    s.sync().unwrap();
    assert_holds(&s, &back, &sizes, 1, "d2h");
    // Device to device, sources written by the device first.
    let srcs: Vec<Buffer> = (0..4u8)
        .map(|i| d.allocate_from_slice(&pattern(20 + i, N), &s).unwrap())
        .collect();
    let dsts = device_buffers(&d, &s, &sizes);
    Buffer::copy_batch(&pairs(&srcs, &dsts), &s).unwrap();
    assert_holds(&s, &dsts, &sizes, 20, "d2d");
    // Mixed directions in one batch.
    let mixed_dst = [d.allocate(N, &s).unwrap(), pinned_sources(&s, &[N], 0).remove(0)];
    let mixed: Vec<(&Buffer, &Buffer)> = vec![(&host[0], &mixed_dst[0]), (&srcs[1], &mixed_dst[1])];
    Buffer::copy_batch(&mixed, &s).unwrap();
    assert_eq!(mixed_dst[0].to_vec::<u8>(&s).unwrap(), pattern(1, N));
    assert_eq!(mixed_dst[1].to_vec::<u8>(&s).unwrap(), pattern(21, N));
    assert!(cuda_core::take_drop_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_of_various_sizes_one_copy_and_empty_copies() {
    let (d, s) = setup();
    let sizes = [1024, 2048, 512, 4096, 1, 3, 0, 65536 + 7];
    let srcs = pinned_sources(&s, &sizes, 7);
    let dsts = device_buffers(&d, &s, &sizes);
    Buffer::copy_batch(&pairs(&srcs, &dsts), &s).unwrap();
    assert_holds(&s, &dsts, &sizes, 7, "various sizes");
    // One copy is a batch too.
    let one = d.allocate(N, &s).unwrap();
    let src = pinned_sources(&s, &[N], 9).remove(0);
    Buffer::copy_batch(&[(&src, &one)], &s).unwrap();
    assert_eq!(one.to_vec::<u8>(&s).unwrap(), pattern(9, N));
    // Only empty copies: nothing to move, still fine.
    let (e1, e2) = (d.allocate(0, &s).unwrap(), d.allocate(0, &s).unwrap());
    Buffer::copy_batch(&[(&e1, &e2)], &s).unwrap();
    Buffer::copy_batch_with(
        &[(&e1, &e2), (&src, &one)],
        &s,
        &[
            CopyOptions::default(),
            CopyOptions {
                src_access_order: MemcpySrcAccessOrder::Any,
                ..Default::default()
            },
        ],
    )
    .unwrap();
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_matches_copy_to() {
    let (d, s) = setup();
    let sizes = [1024, 2048, 512];
    let srcs = pinned_sources(&s, &sizes, 60);
    let seq = device_buffers(&d, &s, &sizes);
    for (src, dst) in srcs.iter().zip(&seq) {
        src.copy_to(dst, &s).unwrap();
    }
    let batch = device_buffers(&d, &s, &sizes);
    Buffer::copy_batch(&pairs(&srcs, &batch), &s).unwrap();
    for (i, (a, b)) in seq.iter().zip(&batch).enumerate() {
        assert_eq!(a.to_vec::<u8>(&s).unwrap(), b.to_vec::<u8>(&s).unwrap(), "copy {i}");
    }
    assert_holds(&s, &batch, &sizes, 60, "batch");
    // And with options, against copy_to_with.
    let opts = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::Any,
        ..Default::default()
    };
    let with = device_buffers(&d, &s, &sizes);
    for (src, dst) in srcs.iter().zip(&with) {
        src.copy_to_with(dst, &s, &opts).unwrap();
    }
    assert_holds(&s, &with, &sizes, 60, "copy_to_with");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_is_ordered_between_prior_and_later_stream_work() {
    let (d, s) = setup();
    let kernel = spinner();
    let srcs: Vec<Buffer> = (0..3u8)
        .map(|i| d.allocate_from_slice(&pattern(30 + i, N), &s).unwrap())
        .collect();
    let dsts = device_buffers(&d, &s, &[N; 3]);
    // Prior work (slow) changes the sources; later work overwrites them.
    for src in &srcs {
        spin(&s, &kernel, src, 20_000_000);
    }
    Buffer::copy_batch(&pairs(&srcs, &dsts), &s).unwrap();
    for src in &srcs {
        src.fill_u8(0x5A, &s).unwrap();
    }
    s.sync().unwrap();
    for (i, (src, dst)) in srcs.iter().zip(&dsts).enumerate() {
        let expected: Vec<u8> = pattern(30 + i as u8, N).iter().map(|v| v.wrapping_add(1)).collect();
        assert_eq!(
            dst.to_vec::<u8>(&s).unwrap(),
            expected,
            "copy {i} saw the prior kernel only"
        );
        assert!(src.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x5A));
    }
    // The same with options for all (stream order), on another stream that joins the buffers.
    let other = d.create_stream(Default::default()).unwrap();
    for src in &srcs {
        spin(&s, &kernel, src, 20_000_000);
    }
    Buffer::copy_batch_with(&pairs(&srcs, &dsts), &other, CopyOptions::default()).unwrap();
    other.sync().unwrap();
    s.sync().unwrap();
    for dst in &dsts {
        // Ordered after the second spin: the source was 0x5A plus one at that point...
        // unless the other stream did not wait for `s`, which it does when it first uses them.
        let got = dst.to_vec::<u8>(&s).unwrap();
        assert!(got.iter().all(|v| *v == 0x5B), "{:?}", &got[..8]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_with_options_for_all_and_per_copy() {
    let (d, s) = setup();
    let native = driver_version() >= (13, 0);
    let sizes = [N; 4];
    let orders = [
        MemcpySrcAccessOrder::Stream,
        MemcpySrcAccessOrder::Any,
        MemcpySrcAccessOrder::DuringApiCall,
    ];
    for (k, order) in orders.into_iter().enumerate() {
        let seed = 31 + 10 * k as u8;
        let srcs = pinned_sources(&s, &sizes, seed);
        let dsts = device_buffers(&d, &s, &sizes);
        let opts = CopyOptions {
            src_access_order: order,
            ..Default::default()
        };
        let done = Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, opts);
        if order == MemcpySrcAccessOrder::DuringApiCall && !native {
            let err = done.unwrap_err().to_string();
            assert!(
                err.starts_with("src_access_order=DURING_API_CALL at index 0 requires"),
                "{err}"
            );
            continue;
        }
        done.unwrap();
        assert_holds(&s, &dsts, &sizes, seed, order.as_str());
    }
    // One set of options per copy (runs [0, 1, 2, 3]), and a slice with repeated options.
    let per_copy = [
        CopyOptions::default(),
        CopyOptions {
            src_access_order: MemcpySrcAccessOrder::Any,
            ..Default::default()
        },
        CopyOptions {
            src_access_order: MemcpySrcAccessOrder::DuringApiCall,
            ..Default::default()
        },
        CopyOptions::default(),
    ];
    let srcs = pinned_sources(&s, &sizes, 40);
    let dsts = device_buffers(&d, &s, &sizes);
    let done = Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, &per_copy);
    if native {
        done.unwrap();
        assert_holds(&s, &dsts, &sizes, 40, "per copy");
    } else {
        let err = done.unwrap_err().to_string();
        assert!(err.contains("DURING_API_CALL at index 2"), "{err}");
    }
    let runs = vec![per_copy[1], per_copy[1], per_copy[0], per_copy[0]];
    let dsts = device_buffers(&d, &s, &sizes);
    Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, &runs).unwrap();
    assert_holds(&s, &dsts, &sizes, 40, "runs");
    // The overlap hint is advisory: the bytes are the same.
    let dsts = device_buffers(&d, &s, &sizes);
    let overlap = CopyOptions {
        overlap_mode: MemcpyOverlapMode::PreferOverlapWithCompute,
        ..Default::default()
    };
    Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, BatchCopyOptions::All(overlap)).unwrap();
    assert_holds(&s, &dsts, &sizes, 40, "overlap");
    // Device to device with every option at once.
    let dsrcs: Vec<Buffer> = (0..4u8)
        .map(|i| d.allocate_from_slice(&pattern(50 + i, N), &s).unwrap())
        .collect();
    let ddsts = device_buffers(&d, &s, &sizes);
    let all = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::Any,
        src_location_hint: Some(MemoryLocation::Device(d)),
        dst_location_hint: Some(MemoryLocation::Device(d)),
        overlap_mode: MemcpyOverlapMode::PreferOverlapWithCompute,
    };
    Buffer::copy_batch_with(&pairs(&dsrcs, &ddsts), &s, all).unwrap();
    assert_holds(&s, &ddsts, &sizes, 50, "d2d with options");
}

/// Managed memory from the driver directly (the tests do not depend on the managed resource's
/// constructor), freed when dropped after the device is idle.
struct Managed(Vec<driver::CUdeviceptr>);

impl Managed {
    fn buffers(&mut self, s: &Stream, n: usize, count: usize) -> Vec<Buffer> {
        (0..count)
            .map(|_| {
                let mut ptr = 0;
                // SAFETY: out-pointer to a local.
                unsafe { driver::cuMemAllocManaged(&mut ptr, n, driver::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0) }
                    .result()
                    .unwrap();
                self.0.push(ptr);
                // SAFETY: n bytes of managed memory, freed only after the buffers are gone (the
                // Managed value is declared before them) and the device is idle.
                unsafe { Buffer::from_handle(ptr, n, s) }.unwrap()
            })
            .collect()
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // SAFETY: no argument.
        let _ = unsafe { driver::cuCtxSynchronize() };
        for p in &self.0 {
            // SAFETY: allocated above, freed once, after all work.
            let _ = unsafe { driver::cuMemFree(*p) };
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_with_location_hints_on_managed_memory() {
    let (d, s) = setup();
    if d.properties().managed_memory().unwrap() == 0 {
        return skip("the device has no managed memory");
    }
    let mut managed = Managed(Vec::new());
    let srcs = managed.buffers(&s, N, 2);
    let dsts = managed.buffers(&s, N, 2);
    for (i, src) in srcs.iter().enumerate() {
        src.copy_from_host(&pattern(80 + i as u8, N), &s).unwrap();
    }
    let options = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::Stream,
        src_location_hint: Some(MemoryLocation::Device(d)),
        dst_location_hint: Some(MemoryLocation::Host),
        ..Default::default()
    };
    Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, options).unwrap();
    assert_holds(&s, &dsts, &[N; 2], 80, "device and host hints");
    let numa = d.properties().host_numa_id().unwrap_or(-1);
    if numa < 0 {
        skip_part("NUMA hints: the system reports no host NUMA node for the device");
    } else {
        for hint in [MemoryLocation::HostNuma(numa as u32), MemoryLocation::HostNumaCurrent] {
            let dsts = managed.buffers(&s, N, 2);
            let options = CopyOptions {
                dst_location_hint: Some(hint),
                ..Default::default()
            };
            Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, options).unwrap();
            assert_holds(&s, &dsts, &[N; 2], 80, &format!("{hint:?}"));
        }
    }
    // copy_to_with takes hints too (falling back to the plain copy before CUDA 13.2).
    let dst = managed.buffers(&s, N, 1).remove(0);
    srcs[1].copy_to_with(&dst, &s, &options).unwrap();
    assert_eq!(dst.to_vec::<u8>(&s).unwrap(), pattern(81, N));
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_during_api_call_reads_the_source_before_returning() {
    let (d, s) = setup();
    if driver_version() < (13, 0) {
        return skip(format!(
            "cuMemcpyBatchAsync needs a CUDA 13.0 driver, this one supports {:?}",
            driver_version()
        ));
    }
    // DURING_API_CALL: the source is read by the time the call returns, even with the stream
    // busy (the driver may wait for the stream's work first): overwriting it afterwards does not
    // change what was copied.
    let kernel = spinner();
    let blocker = d.allocate(1, &s).unwrap();
    let src = pinned_sources(&s, &[N], 1).remove(0);
    let dst = device_buffers(&d, &s, &[N]).remove(0);
    s.sync().unwrap();
    spin(&s, &kernel, &blocker, 100_000_000);
    let during = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::DuringApiCall,
        ..Default::default()
    };
    Buffer::copy_batch_with(&[(&src, &dst)], &s, during).unwrap();
    // SAFETY: pinned host memory of N bytes, alive; the copy above read it during the call.
    unsafe { std::ptr::write_bytes(src.handle() as *mut u8, 0x77, N) };
    s.sync().unwrap();
    assert_eq!(dst.to_vec::<u8>(&s).unwrap(), pattern(1, N), "read during the call");
    // (STREAM promises no more than stream order: the driver may copy during the call after
    // waiting for the stream, so which bytes it reads after an overwrite is not fixed.)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_refuses_the_legacy_default_stream_and_takes_the_per_thread_one() {
    let (d, s) = setup();
    let srcs = pinned_sources(&s, &[N; 2], 99);
    let dsts = device_buffers(&d, &s, &[N; 2]);
    s.sync().unwrap();
    let err = Buffer::copy_batch(&pairs(&srcs, &dsts), &Stream::legacy_default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "copy_batch does not accept LEGACY_DEFAULT_STREAM; cuMemcpyBatchAsync rejects it outright, unlike \
         PER_THREAD_DEFAULT_STREAM, which is a real stream to the driver and is accepted. Pass an explicit stream \
         or PER_THREAD_DEFAULT_STREAM."
    );
    // A TypeError in cuda.core.
    assert_eq!(err.kind(), cuda_core::ErrorKind::Type);
    // NULL is the legacy default stream too (this process binds the ordinary entry points).
    if !cuda_sys::per_thread_default_stream() {
        // SAFETY: a default stream handle.
        let null = unsafe { Stream::from_handle(std::ptr::null_mut()) }.unwrap();
        let err = Buffer::copy_batch(&pairs(&srcs, &dsts), &null).unwrap_err();
        assert!(err.to_string().contains("LEGACY_DEFAULT_STREAM"), "{err}");
    }
    // Options on the legacy stream: refused for copy_to_with too; without options it works.
    let opts = CopyOptions::default();
    let err = srcs[0]
        .copy_to_with(&dsts[0], &Stream::legacy_default(), &opts)
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("copy_to does not accept LEGACY_DEFAULT_STREAM with options (matches copy_batch)"),
        "{err}"
    );
    let err = dsts[0]
        .copy_from_with(&srcs[0], &Stream::legacy_default(), &opts)
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("copy_from does not accept LEGACY_DEFAULT_STREAM"),
        "{err}"
    );
    srcs[0].copy_to(&dsts[0], &Stream::legacy_default()).unwrap();
    Stream::legacy_default().sync().unwrap();
    assert_eq!(dsts[0].to_vec::<u8>(&s).unwrap(), pattern(99, N));
    // The per-thread default stream is a real stream: accepted, with and without options.
    let pt = Stream::per_thread_default();
    let dsts = device_buffers(&d, &s, &[N; 2]);
    Buffer::copy_batch(&pairs(&srcs, &dsts), &pt).unwrap();
    pt.sync().unwrap();
    assert_holds(&s, &dsts, &[N; 2], 99, "per-thread");
    let dsts = device_buffers(&d, &s, &[N; 2]);
    let any = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::Any,
        ..Default::default()
    };
    Buffer::copy_batch_with(&pairs(&srcs, &dsts), &pt, any).unwrap();
    pt.sync().unwrap();
    assert_holds(&s, &dsts, &[N; 2], 99, "per-thread with options");
    let one = d.allocate(N, &pt).unwrap();
    srcs[1].copy_to_with(&one, &pt, &any).unwrap();
    pt.sync().unwrap();
    assert_eq!(one.to_vec::<u8>(&s).unwrap(), pattern(100, N));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_and_copies_with_options_refuse_a_capturing_stream() {
    let (d, s) = setup();
    let srcs: Vec<Buffer> = (0..2u8)
        .map(|i| d.allocate_from_slice(&pattern(5 + i, N), &s).unwrap())
        .collect();
    let dsts = device_buffers(&d, &s, &[N; 2]);
    s.sync().unwrap();
    for mode in [CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
        let mut builder = d.create_graph_builder().unwrap();
        builder.begin_building(mode).unwrap();
        let err = Buffer::copy_batch(&pairs(&srcs, &dsts), builder.stream()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "copy_batch does not support graph capture; use GraphNode.memcpy or per-buffer Buffer.copy_to instead"
        );
        // A TypeError in cuda.core.
        assert_eq!(err.kind(), cuda_core::ErrorKind::Type);
        let opts = CopyOptions::default();
        let err = Buffer::copy_batch_with(&pairs(&srcs, &dsts), builder.stream(), opts).unwrap_err();
        assert!(err.to_string().contains("does not support graph capture"), "{err}");
        let err = srcs[0].copy_to_with(&dsts[0], builder.stream(), &opts).unwrap_err();
        assert_eq!(
            err.to_string(),
            "copy_to does not support graph capture with options (matches copy_batch); the driver has no \
             graph-node form of cuMemcpyWithAttributesAsync, so options cannot be honored in a graph. Use \
             GraphNode.memcpy for a plain (non-attributed) copy node, or pass options=None."
        );
        let err = dsts[0].copy_from_with(&srcs[0], builder.stream(), &opts).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("copy_from does not support graph capture with options"),
            "{err}"
        );
        // Refused before anything was handed to the graph.
        assert!(!srcs[0].is_used_by_graph() && !dsts[0].is_used_by_graph());
        // Without options the copy is recorded as before.
        srcs[1].copy_to(&dsts[1], builder.stream()).unwrap();
        let graph = builder.end_building().unwrap().complete(&Default::default()).unwrap();
        dsts[1].fill_u8(0, &s).unwrap();
        graph.launch(&s).unwrap();
        s.sync().unwrap();
        assert_eq!(dsts[1].to_vec::<u8>(&s).unwrap(), pattern(6, N), "{mode:?}");
        // After the capture the stream takes batches again.
        dsts[0].fill_u8(0, &s).unwrap();
        s.sync().unwrap();
        Buffer::copy_batch(&pairs(&srcs, &dsts), builder.stream()).unwrap();
        builder.stream().sync().unwrap();
        assert_holds(&s, &dsts, &[N; 2], 5, "after capture");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_validation_uses_cuda_cores_words() {
    let (d, s) = setup();
    let err = Buffer::copy_batch(&[], &s).unwrap_err();
    assert_eq!(err.to_string(), "copy_batch: empty buffers sequence");
    let err = Buffer::copy_batch_with(&[], &s, CopyOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "copy_batch: empty buffers sequence");
    let pinned = LegacyPinnedMemoryResource::new(Default::default());
    for (src_size, dst_size) in [(1024, 2048), (2048, 1024)] {
        let src = pinned.allocate(src_size, &s).unwrap();
        let dst = d.allocate(dst_size, &s).unwrap();
        let ok = d.allocate(src_size, &s).unwrap();
        let err = Buffer::copy_batch(&[(&src, &ok), (&src, &dst)], &s).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("copy_batch: buffer size mismatch at index 1 (src={src_size}, dst={dst_size})")
        );
        let err = src.copy_to_with(&dst, &s, &CopyOptions::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("buffer sizes mismatch between src and dst (sizes are: src={src_size}, dst={dst_size})")
        );
    }
    let srcs = pinned_sources(&s, &[N; 4], 1);
    let dsts = device_buffers(&d, &s, &[N; 4]);
    let err = Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, &[CopyOptions::default(); 3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "copy_batch: options length 3 does not match buffers length 4"
    );
    // A slice is paired by index, never broadcast.
    let err = Buffer::copy_batch_with(&pairs(&srcs, &dsts), &s, &[CopyOptions::default()]).unwrap_err();
    assert!(err.to_string().contains("options length 1"), "{err}");
    // cuda.core's names parse; others are refused with its words.
    assert_eq!(
        "during_api_call".parse::<MemcpySrcAccessOrder>().unwrap(),
        MemcpySrcAccessOrder::DuringApiCall
    );
    let err = "invalid_order".parse::<MemcpySrcAccessOrder>().unwrap_err();
    assert_eq!(err.to_string(), "invalid src_access_order: 'invalid_order'");
    let err = "invalid_mode".parse::<MemcpyOverlapMode>().unwrap_err();
    assert_eq!(err.to_string(), "invalid overlap_mode: 'invalid_mode'");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_to_and_copy_from_with_options() {
    let (d, s) = setup();
    let with_attributes = driver_version() >= (13, 2);
    for (k, order) in [MemcpySrcAccessOrder::Stream, MemcpySrcAccessOrder::Any]
        .into_iter()
        .enumerate()
    {
        let opts = CopyOptions {
            src_access_order: order,
            ..Default::default()
        };
        let seed = 11 + k as u8 * 2;
        let src = pinned_sources(&s, &[N], seed).remove(0);
        let dst = d.allocate(N, &s).unwrap();
        src.copy_to_with(&dst, &s, &opts).unwrap();
        assert_eq!(dst.to_vec::<u8>(&s).unwrap(), pattern(seed, N), "copy_to_with {order}");
        let back = pinned_sources(&s, &[N], 0).remove(0);
        back.copy_from_with(&dst, &s, &opts).unwrap();
        s.sync().unwrap();
        assert_eq!(
            back.to_vec::<u8>(&s).unwrap(),
            pattern(seed, N),
            "copy_from_with {order}"
        );
    }
    let during = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::DuringApiCall,
        ..Default::default()
    };
    let src = pinned_sources(&s, &[N], 3).remove(0);
    let dst = d.allocate(N, &s).unwrap();
    let done = src.copy_to_with(&dst, &s, &during);
    if with_attributes {
        done.unwrap();
        assert_eq!(dst.to_vec::<u8>(&s).unwrap(), pattern(3, N));
    } else {
        let err = done.unwrap_err().to_string();
        assert_eq!(
            err,
            "src_access_order=DURING_API_CALL requires cuda.bindings and the driver to both report CUDA 13.2 or \
             newer (cuMemcpyWithAttributesAsync is unavailable here). A plain cuMemcpyAsync fallback reads the \
             source in stream order only, which would silently violate the guarantee that all source reads \
             complete before the call returns, letting the caller reuse the source buffer before the real \
             (stream-ordered) read happens. Use src_access_order=STREAM or ANY, or omit options, if that works \
             for your use case."
        );
        let err = dst.copy_from_with(&src, &s, &during).unwrap_err();
        assert!(
            err.to_string().starts_with("src_access_order=DURING_API_CALL requires"),
            "{err}"
        );
        println!(
            "copy_to_with DURING_API_CALL: refused on this driver {:?} (< 13.2)",
            driver_version()
        );
    }
    // Every option at once, device to device; empty buffers too.
    let all = CopyOptions {
        src_access_order: MemcpySrcAccessOrder::Any,
        src_location_hint: Some(MemoryLocation::Device(d)),
        dst_location_hint: Some(MemoryLocation::Host),
        overlap_mode: MemcpyOverlapMode::PreferOverlapWithCompute,
    };
    let a = d.allocate_from_slice(&pattern(44, N), &s).unwrap();
    let b = d.allocate(N, &s).unwrap();
    a.copy_to_with(&b, &s, &all).unwrap();
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), pattern(44, N));
    let (e1, e2) = (d.allocate(0, &s).unwrap(), d.allocate(0, &s).unwrap());
    e1.copy_to_with(&e2, &s, &all).unwrap();
    s.sync().unwrap();
    assert!(cuda_core::take_drop_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copy_batch_refuses_copies_that_depend_on_each_other() {
    let d = Device::new(0).unwrap();
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    let (a, b, c) = (
        d.allocate(256, &s).unwrap(),
        d.allocate(256, &s).unwrap(),
        d.allocate(256, &s).unwrap(),
    );
    for pairs in [vec![(&a, &b), (&b, &c)], vec![(&a, &a)], vec![(&a, &c), (&b, &c)]] {
        let err = Buffer::copy_batch(&pairs, &s).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
    }
    // Sources may be shared.
    a.fill_u8(4, &s).unwrap();
    Buffer::copy_batch(&[(&a, &b), (&a, &c)], &s).unwrap();
    assert!(c.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 4));
}
