//! cuda.core's documented behaviour where this port used to differ (the everyday-path issue):
//! each test asserts what cuda.core does, with its wording where it documents one.

use cuda_core::graph::{CaptureMode, GraphDefinition};
use cuda_core::{
    launch, CodeType, Device, DeviceMemoryResource, EventOptions, Kernel, LaunchConfig, PinnedMemoryResource, Program,
    ProgramOptions, SourceType, Stream,
};
use cuda_tests::skip;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// `count_blocks(counter)` adds one per block; `big_block(x)` uses a block of 1024 threads and
/// 4 KiB of shared memory (writing nothing when `x` is null).
fn kernels() -> (Kernel, Kernel) {
    let source = r#"
        extern "C" __global__ void count_blocks(unsigned* counter) {
            if (threadIdx.x == 0) atomicAdd(counter, 1u);
        }
        extern "C" __global__ void big_block(float* x) {
            __shared__ float tile[1024];
            tile[threadIdx.x] = 0.0f;
            __syncthreads();
            if (x) x[threadIdx.x] = tile[threadIdx.x];
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    (
        code.get_kernel("count_blocks").unwrap(),
        code.get_kernel("big_block").unwrap(),
    )
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn with_a_cluster_the_grid_counts_clusters() {
    let (d, s) = setup();
    if d.compute_capability().unwrap().major < 9 {
        return skip("thread block clusters need compute capability 9.0");
    }
    let (count, _) = kernels();
    let counter = d.allocate(4, &s).unwrap();
    counter.fill_u8(0, &s).unwrap();
    let config = LaunchConfig {
        cluster: Some((2, 2, 1).into()),
        ..LaunchConfig::new((4, 4, 1), 32)
    };
    // SAFETY: the kernel writes one u32 counter, synchronised below.
    unsafe { launch(&s, &config, &count, (counter.handle(),)).unwrap() };
    let blocks = counter.to_vec::<u32>(&s).unwrap();
    assert_eq!(blocks, [64], "a 4 x 4 grid of 2 x 2 clusters is 64 blocks");
    // Occupancy of clusters does not need a cluster shape in the configuration.
    let clusters = count.max_active_clusters(&d, &LaunchConfig::new(16, 32));
    assert!(clusters.is_ok(), "{clusters:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_oversized_cooperative_grid_is_refused_before_the_driver() {
    let (d, s) = setup();
    let (_, big) = kernels();
    let per_sm = big.max_active_blocks_per_multiprocessor(&d, 1024, 0).unwrap();
    let limit = per_sm * d.multiprocessor_count().unwrap();
    let config = LaunchConfig {
        cooperative_launch: true,
        ..LaunchConfig::new(limit + 1, 1024)
    };
    // SAFETY: never launched: refused first.
    let err = unsafe { launch(&s, &config, &big, (0u64,)) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "The specified grid size ({} * 1 * 1) exceeds the limit ({limit})",
            limit + 1
        )
    );
    let fits = LaunchConfig {
        cooperative_launch: true,
        ..LaunchConfig::new(limit, 1024)
    };
    // SAFETY: a null pointer: the kernel writes nothing.
    unsafe { launch(&s, &fits, &big, (0u64,)).unwrap() };
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn copies_between_buffers_of_different_sizes_are_refused() {
    let (d, s) = setup();
    let small = d.allocate(16, &s).unwrap();
    let large = d.allocate(32, &s).unwrap();
    let err = small.copy_to(&large, &s).unwrap_err();
    assert!(
        err.to_string()
            .contains("buffer sizes mismatch between src and dst (sizes are: src=16, dst=32)"),
        "{err}"
    );
    let err = small.copy_from(&large, &s).unwrap_err();
    assert!(err.to_string().contains("(sizes are: src=32, dst=16)"), "{err}");
    let same = d.allocate(16, &s).unwrap();
    small.fill_u8(3, &s).unwrap();
    small.copy_to(&same, &s).unwrap();
    assert_eq!(same.to_vec::<u8>(&s).unwrap(), [3; 16]);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn elapsed_time_errors_say_what_to_do() {
    let (d, s) = setup();
    let timed = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let (start, end) = (d.create_event(timed).unwrap(), d.create_event(timed).unwrap());
    let err = end.elapsed_time_since(&start).unwrap_err();
    assert!(
        err.to_string()
            .contains("Both Events must be recorded before they can be subtracted"),
        "{err}"
    );
    // (cuda.core raises a RuntimeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let untimed = d.create_event(EventOptions::default()).unwrap();
    let err = untimed.elapsed_time_since(&start).unwrap_err();
    assert!(
        err.to_string()
            .contains("Both Events must be created with timing enabled in order to subtract them"),
        "{err}"
    );
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    s.record(&start).unwrap();
    s.record(&end).unwrap();
    end.sync().unwrap();
    assert!(end.elapsed_time_since(&start).unwrap() >= 0.0);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn pools_refuse_to_allocate_on_a_capturing_stream() {
    let (d, _) = setup();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let pinned = PinnedMemoryResource::new(Default::default()).unwrap();
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::Relaxed).unwrap();
    let err = pool.allocate(256, builder.stream()).unwrap_err();
    assert!(
        err.to_string().contains(
            "DeviceMemoryResource cannot perform memory operations on a capturing stream (consider using GraphMemoryResource)."
        ),
        "{err}"
    );
    // (cuda.core raises a RuntimeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let err = pinned.allocate(256, builder.stream()).unwrap_err();
    assert!(
        err.to_string()
            .contains("PinnedMemoryResource cannot perform memory operations on a capturing stream"),
        "{err}"
    );
    builder.end_building().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn empty_graphs_list_nothing_and_destroying_twice_is_quiet() {
    let (d, s) = setup();
    let graph = GraphDefinition::new().unwrap();
    assert!(graph.nodes().unwrap().is_empty());
    assert!(graph.edges().unwrap().is_empty());
    let buffer = d.allocate(64, &s).unwrap();
    let node = graph.memset(&buffer, 1u8, 64).unwrap();
    let again = node.clone();
    node.destroy().unwrap();
    again.clone().destroy().unwrap();
    assert!(!again.is_valid());
    assert!(graph.nodes().unwrap().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_default_pool_keeps_freed_memory() {
    let (d, _) = setup();
    let threshold = d.memory_resource().unwrap().release_threshold().unwrap();
    assert_eq!(threshold, u64::MAX, "raised from the driver's 0, as cuda.core does");
}

/// Plain host memory (not pinned): the host reaches it, kernels do not.
struct HostOnly;

// SAFETY: each allocation is a fresh heap block of at least `size` bytes (one byte for 0), used
// by nothing else, freed once by `deallocate` after the stream's work (it waits for the stream);
// kernels are never told they may use it (`is_device_accessible` is false).
unsafe impl cuda_core::MemoryResource for HostOnly {
    fn allocate(&self, size: usize, _: &Stream) -> cuda_core::Result<cuda_sys::driver::CUdeviceptr> {
        let block = vec![0u8; size.max(1)].into_boxed_slice();
        Ok(Box::into_raw(block) as *mut u8 as usize as u64)
    }
    unsafe fn deallocate(
        &self,
        ptr: cuda_sys::driver::CUdeviceptr,
        size: usize,
        stream: &Stream,
    ) -> cuda_core::Result<()> {
        stream.sync()?;
        // SAFETY: made by `allocate` with this size, freed once (the caller's promise).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr as usize as *mut u8, size.max(1))) });
        Ok(())
    }
    fn is_device_accessible(&self) -> bool {
        false
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        None
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dlpack_export_is_int8_and_names_where_the_memory_lives() {
    use cuda_core::dlpack::dlpark::ffi::{DLDataTypeCode, DLDeviceType};
    let (d, s) = setup();
    let t = d.allocate(16, &s).unwrap().to_dlpack().unwrap();
    let view = t.validate().unwrap();
    let dtype = view.dtype();
    assert_eq!((dtype.code, dtype.bits, dtype.lanes), (DLDataTypeCode::INT, 8, 1));
    assert_eq!(view.device().device_type, DLDeviceType::CUDA);
    assert_eq!(view.device().device_id, d.device_id() as i32);
    let managed = cuda_core::ManagedMemoryResource::new(None)
        .unwrap()
        .allocate(16, &s)
        .unwrap();
    let t = managed.to_dlpack().unwrap();
    let device = t.validate().unwrap().device();
    assert_eq!((device.device_type, device.device_id), (DLDeviceType::CUDAMANAGED, 0));
    let host = cuda_core::Buffer::allocate(std::sync::Arc::new(HostOnly), 16, &s).unwrap();
    let t = host.to_dlpack().unwrap();
    let device = t.validate().unwrap().device();
    assert_eq!((device.device_type, device.device_id), (DLDeviceType::CPU, 0));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn default_stream_and_recording_a_new_event() {
    let (d, s) = setup();
    let per_thread = cuda_sys::per_thread_default_stream();
    let expected = if per_thread {
        Stream::per_thread_default()
    } else {
        Stream::legacy_default()
    };
    assert_eq!(d.default_stream(), expected);
    let timed = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let start = s.record_new(timed).unwrap();
    let end = s.record_new(timed).unwrap();
    end.sync().unwrap();
    assert!(start.is_done().unwrap());
    assert!(end.elapsed_time_since(&start).unwrap() >= 0.0);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn foreign_memory_says_who_can_reach_it() {
    use cuda_sys::driver;
    let (_, s) = setup();
    let access = |ptr: u64| {
        // SAFETY: every pointer below holds at least 64 bytes until freed at the end.
        let b = unsafe { cuda_core::Buffer::from_handle(ptr, 64, &s) }.unwrap();
        (b.is_device_accessible(), b.is_host_accessible())
    };
    let (mut device, mut pinned, mut managed) = (0u64, std::ptr::null_mut(), 0u64);
    // SAFETY: out-pointers to locals; a context is current.
    unsafe {
        driver::cuMemAlloc(&mut device, 64).result().unwrap();
        driver::cuMemAllocHost(&mut pinned, 64).result().unwrap();
        driver::cuMemAllocManaged(&mut managed, 64, driver::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0)
            .result()
            .unwrap();
    }
    let host = [0u8; 64];
    assert_eq!(access(device), (true, false), "device memory");
    assert_eq!(access(pinned as u64), (true, true), "pinned host memory");
    assert_eq!(access(managed), (true, true), "managed memory");
    assert_eq!(access(host.as_ptr() as u64), (false, true), "plain host memory");
    s.sync().unwrap();
    // SAFETY: each freed once; the wrappers above are gone and freed nothing.
    unsafe {
        driver::cuMemFree(device).result().unwrap();
        driver::cuMemFreeHost(pinned).result().unwrap();
        driver::cuMemFree(managed).result().unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn buffers_made_from_host_slices_hold_them() {
    let (d, s) = setup();
    let data: Vec<u32> = (0..1000).map(|i| i * 7 + 3).collect();
    let b = d.allocate_from_slice(&data, &s).unwrap();
    assert_eq!(b.size(), 4000);
    assert_eq!(b.to_vec::<u32>(&s).unwrap(), data);
    // From any resource, here pinned host memory.
    let pinned: std::sync::Arc<dyn cuda_core::MemoryResource> = PinnedMemoryResource::new(Default::default()).unwrap();
    let h = cuda_core::Buffer::from_slice(pinned, &[1.5f64, -2.0], &s).unwrap();
    assert!(h.is_host_accessible());
    assert_eq!(h.to_vec::<f64>(&s).unwrap(), [1.5, -2.0]);
    // Empty slices give empty buffers.
    let e = d.allocate_from_slice::<u8>(&[], &s).unwrap();
    assert_eq!(e.size(), 0);
    // Not on a stream being captured: the copy from the host would run at every replay.
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    let graph_memory: std::sync::Arc<dyn cuda_core::MemoryResource> = cuda_core::GraphMemoryResource::new(&d);
    let err = cuda_core::Buffer::from_slice(graph_memory, &data, builder.stream()).unwrap_err();
    assert!(err.to_string().contains("copy_from_host waits for its copy"), "{err}");
    builder.end_building().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_resource_gives_zero_byte_buffers() {
    use cuda_core::{GraphMemoryResource, LegacyPinnedMemoryResource, ManagedMemoryResource, MemoryResource};
    use std::sync::Arc;
    let (d, s) = setup();
    let resources: Vec<(&str, Arc<dyn MemoryResource>)> = vec![
        ("default pool", d.memory_resource().unwrap()),
        (
            "device pool",
            DeviceMemoryResource::new(&d, Default::default()).unwrap(),
        ),
        ("pinned pool", PinnedMemoryResource::new(Default::default()).unwrap()),
        (
            "managed",
            ManagedMemoryResource::new(Some(cuda_core::ManagedMemoryResourceOptions {
                preferred_location: Some(d.into()),
            }))
            .unwrap(),
        ),
        ("legacy pinned", LegacyPinnedMemoryResource::new(Default::default())),
    ];
    for (name, mr) in resources {
        let b = cuda_core::Buffer::allocate(mr, 0, &s).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(b.size(), 0, "{name}");
        assert!(b.to_vec::<u8>(&s).unwrap().is_empty(), "{name}");
        b.close(Some(&s)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Graph memory: zero bytes during a capture.
    // (Not Global here: other tests of this process run meanwhile.)
    for mode in [CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
        let mut builder = d.create_graph_builder().unwrap();
        builder.begin_building(mode).unwrap();
        let b = GraphMemoryResource::new(&d).allocate(0, builder.stream()).unwrap();
        assert_eq!(b.size(), 0);
        drop(b);
        let graph = builder.end_building().unwrap().complete(&Default::default()).unwrap();
        graph.launch(&s).unwrap();
        s.sync().unwrap();
    }
    s.sync().unwrap();
    assert!(cuda_core::take_drop_errors().is_empty());
}
