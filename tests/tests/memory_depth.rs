//! Memory at cuda.core's depth: pool attributes and sharing, pinned and managed pool options,
//! managed-memory advice read back, prefetch and discard (single and batched), and buffers over
//! foreign memory (device, owner, resource). Data checked byte for byte.

use cuda_core::{
    Buffer, Device, DeviceMemoryResource, ManagedMemoryResource, ManagedMemoryResourceOptions, MemoryLocation,
    MemoryResource, PinnedMemoryResource, PinnedMemoryResourceOptions, Stream,
};
use cuda_tests::{skip, skip_part};
use std::sync::Arc;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

fn host_numa_id(d: &Device) -> Option<u32> {
    u32::try_from(d.properties().host_numa_id().unwrap_or(-1)).ok()
}

fn concurrent_managed_access(d: &Device) -> bool {
    d.properties().concurrent_managed_access().unwrap_or(0) != 0
}

fn check_attributes(name: &str, pool: &cuda_core::MemoryPool, allocate: impl FnOnce() -> Buffer) {
    let before = pool.attributes().unwrap();
    let buffer = allocate();
    let after = pool.attributes().unwrap();
    assert!(
        after.used_mem_current >= before.used_mem_current + 1024,
        "{name}: {before:?} -> {after:?}"
    );
    assert!(
        after.reserved_mem_current >= after.used_mem_current,
        "{name}: {after:?}"
    );
    assert!(after.used_mem_high >= after.used_mem_current, "{name}: {after:?}");
    assert!(
        after.reserved_mem_high >= after.reserved_mem_current,
        "{name}: {after:?}"
    );
    // The reuse policies read back as set.
    for on in [false, true] {
        pool.set_reuse_allow_opportunistic(on).unwrap();
        pool.set_reuse_follow_event_dependencies(on).unwrap();
        pool.set_reuse_allow_internal_dependencies(on).unwrap();
        let a = pool.attributes().unwrap();
        assert_eq!(
            (
                a.reuse_allow_opportunistic,
                a.reuse_follow_event_dependencies,
                a.reuse_allow_internal_dependencies
            ),
            (on, on, on),
            "{name}"
        );
    }
    drop(buffer);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn pool_attributes_of_every_pool_resource() {
    let (d, s) = setup();
    let device_pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    check_attributes("device pool", &device_pool, || device_pool.allocate(1024, &s).unwrap());
    let pinned = PinnedMemoryResource::new(Default::default()).unwrap();
    check_attributes("pinned pool", &pinned, || pinned.allocate(1024, &s).unwrap());
    if concurrent_managed_access(&d) {
        let managed = ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions::default())).unwrap();
        let pool = managed.pool().expect("a CUDA 13 driver gives a managed pool");
        check_attributes("managed pool", pool, || managed.allocate(1024, &s).unwrap());
    } else {
        skip_part("the managed pool: no concurrent managed access on this device");
    }
    // The default pool: the driver's, not ours, with the threshold cuda.core sets.
    let default = d.memory_resource().unwrap();
    assert!(!default.is_handle_owned() && device_pool.is_handle_owned());
    assert_eq!(default.attributes().unwrap().release_threshold, u64::MAX);
    assert!(!default.is_ipc_enabled() && !default.is_mapped());
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn pools_that_are_not_shared_say_so() {
    let (d, s) = setup();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    assert!(!pool.is_ipc_enabled());
    let err = pool.export_fd().unwrap_err();
    assert!(err.to_string().contains("Memory resource is not IPC-enabled"), "{err}");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let b = pool.allocate(64, &s).unwrap();
    let err = b.ipc_descriptor().unwrap_err();
    assert!(err.to_string().contains("Memory resource is not IPC-enabled"), "{err}");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let desc = cuda_core::IpcBufferDescriptor::new([0; 64], 64);
    let err = Buffer::from_ipc_descriptor(&pool, &desc, &s).unwrap_err();
    assert!(err.to_string().contains("Memory resource is not IPC-enabled"), "{err}");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let pinned = PinnedMemoryResource::new(Default::default()).unwrap();
    assert!(!pinned.is_ipc_enabled() && pinned.numa_id().is_none());
    let err = pinned.export_fd().unwrap_err();
    assert!(err.to_string().contains("Memory resource is not IPC-enabled"), "{err}");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let err = Buffer::from_ipc_descriptor(&pinned, &desc, &s).unwrap_err();
    assert!(err.to_string().contains("Memory resource is not IPC-enabled"), "{err}");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn pinned_pools_with_options_and_the_default_host_pool() {
    let (d, s) = setup();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 % 251) as u8).collect();
    let limited = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
        max_size: Some(1 << 21),
        ..Default::default()
    })
    .unwrap();
    let b = Buffer::from_slice(limited.clone(), &data, &s).unwrap();
    assert!(b.is_host_accessible() && b.is_device_accessible() && b.device_id().is_none());
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
    // A device pool with a size limit too.
    let small = DeviceMemoryResource::new(
        &d,
        cuda_core::DeviceMemoryResourceOptions {
            max_size: Some(1 << 21),
            ..Default::default()
        },
    )
    .unwrap();
    let within = Buffer::from_slice(small.clone(), &data, &s).unwrap();
    assert_eq!(within.to_vec::<u8>(&s).unwrap(), data);
    match host_numa_id(&d) {
        Some(node) => {
            let on_node = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
                numa_id: Some(node),
                ..Default::default()
            })
            .unwrap();
            assert_eq!(on_node.numa_id(), Some(node));
            let b = Buffer::from_slice(on_node.clone(), &data, &s).unwrap();
            assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
            // Shareable pools default to the current device's node.
            let shared = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
                ipc_enabled: true,
                ..Default::default()
            })
            .unwrap();
            assert!(shared.is_ipc_enabled());
            assert_eq!(shared.numa_id(), Some(node));
        }
        None => skip_part("NUMA placement: the device reports no host NUMA node"),
    }
    let host = PinnedMemoryResource::default_pool().unwrap();
    assert!(!host.is_handle_owned());
    let b = Buffer::from_slice(host.clone(), &data, &s).unwrap();
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
    // Kernels reach it: a device copy out of it.
    let dev = d.allocate(data.len(), &s).unwrap();
    dev.copy_from(&b, &s).unwrap();
    assert_eq!(dev.to_vec::<u8>(&s).unwrap(), data);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn peers_of_a_pool_on_one_device() {
    let (d, _) = setup();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    assert!(pool.peer_accessible_by().unwrap().is_empty());
    // The pool's own device is ignored, as in cuda.core.
    pool.set_peer_accessible_by(&[d]).unwrap();
    pool.set_peer_access(&d, true).unwrap();
    assert!(pool.peer_accessible_by().unwrap().is_empty());
    pool.set_peer_accessible_by(&[]).unwrap();
    let all = Device::all().unwrap();
    if all.len() > 1 {
        let peer = all[1];
        if d.can_access_peer(&peer).unwrap() {
            pool.set_peer_accessible_by(&all).unwrap();
            assert_eq!(pool.peer_accessible_by().unwrap(), &all[1..]);
            pool.set_peer_access(&peer, false).unwrap();
            assert!(!pool.peer_accessible_by().unwrap().contains(&peer));
        } else {
            let err = pool.set_peer_accessible_by(&all).unwrap_err();
            assert!(err.to_string().contains("cannot access peer(s)"), "{err}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn managed_pools_with_preferred_locations() {
    let (d, s) = setup();
    if !concurrent_managed_access(&d) {
        return skip("no concurrent managed access on this device");
    }
    let data: Vec<u32> = (0..1024).map(|i| i * 3 + 1).collect();
    let default = ManagedMemoryResource::new(None).unwrap();
    assert_eq!(default.preferred_location(), None);
    assert!(!default.pool().unwrap().is_handle_owned());
    for preferred in [None, Some(MemoryLocation::Device(d)), Some(MemoryLocation::Host)] {
        let mr = ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions {
            preferred_location: preferred,
        }))
        .unwrap();
        assert_eq!(mr.preferred_location(), preferred);
        assert!(mr.pool().unwrap().is_handle_owned() && !mr.pool().unwrap().is_ipc_enabled());
        assert_eq!(
            MemoryResource::device(mr.as_ref()),
            preferred.and_then(|p| match p {
                MemoryLocation::Device(d) => Some(d),
                _ => None,
            })
        );
        let b = Buffer::from_slice(mr.clone(), &data, &s).unwrap();
        assert!(b.is_managed() && b.is_host_accessible() && b.is_device_accessible());
        b.prefetch(d, &s).unwrap();
        assert_eq!(b.to_vec::<u32>(&s).unwrap(), data);
        assert_eq!(b.last_prefetch_location().unwrap(), Some(MemoryLocation::Device(d)));
        // DLPack calls pool-managed memory managed (the driver's pointer attribute does not).
        let t = b.to_dlpack().unwrap();
        let device = t.validate().unwrap().device();
        assert_eq!(
            device.device_type,
            cuda_core::dlpack::dlpark::ffi::DLDeviceType::CUDAMANAGED
        );
    }
    let err = ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions {
        preferred_location: Some(MemoryLocation::HostNumaCurrent),
    }))
    .err()
    .unwrap();
    assert!(err.to_string().contains("HostNumaCurrent"), "{err}");
    // A managed pool refuses a capturing stream, as cuda.core's does.
    let mut builder = d.create_graph_builder().unwrap();
    builder
        .begin_building(cuda_core::graph::CaptureMode::ThreadLocal)
        .unwrap();
    let err = default.allocate(64, builder.stream()).unwrap_err();
    assert!(
        err.to_string()
            .contains("ManagedMemoryResource cannot perform memory operations on a capturing stream"),
        "{err}"
    );
    // (cuda.core raises a RuntimeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    builder.end_building().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn managed_advice_reads_back() {
    let (d, s) = setup();
    let mr = ManagedMemoryResource::unpooled(None);
    let b = mr.allocate(1 << 16, &s).unwrap();
    assert!(b.is_managed());
    assert!(!b.read_mostly().unwrap());
    b.advise_read_mostly(true).unwrap();
    assert!(b.read_mostly().unwrap());
    b.advise_read_mostly(false).unwrap();
    assert!(!b.read_mostly().unwrap());
    assert_eq!(b.preferred_location().unwrap(), None);
    for l in [MemoryLocation::Device(d), MemoryLocation::Host] {
        b.advise_preferred_location(Some(l)).unwrap();
        assert_eq!(b.preferred_location().unwrap(), Some(l));
    }
    b.advise_preferred_location(None).unwrap();
    assert_eq!(b.preferred_location().unwrap(), None);
    assert!(b.accessed_by().unwrap().is_empty());
    b.advise_accessed_by(d, true).unwrap();
    assert_eq!(b.accessed_by().unwrap(), [MemoryLocation::Device(d)]);
    b.set_accessed_by(&[MemoryLocation::Host]).unwrap();
    assert_eq!(b.accessed_by().unwrap(), [MemoryLocation::Host]);
    b.set_accessed_by(&[]).unwrap();
    assert!(b.accessed_by().unwrap().is_empty());
    // Checked before any advice changes.
    b.advise_accessed_by(d, true).unwrap();
    let err = b
        .set_accessed_by(&[MemoryLocation::Host, MemoryLocation::HostNuma(0)])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("advise CU_MEM_ADVISE_SET_ACCESSED_BY does not support location_type='host_numa'"),
        "{err}"
    );
    assert_eq!(b.accessed_by().unwrap(), [MemoryLocation::Device(d)]);
    // Not managed: refused with cuda.core's message.
    let mut device_only = d.allocate(64, &s).unwrap();
    for err in [
        device_only.advise_read_mostly(true).unwrap_err(),
        device_only.prefetch(d, &s).unwrap_err(),
        device_only.discard_prefetch(d, &s).unwrap_err(),
    ] {
        assert!(
            err.to_string().contains("requires a managed-memory allocation"),
            "{err}"
        );
    }
    let err = device_only.prefetch(d, &s).unwrap_err();
    assert!(
        err.to_string()
            .contains("prefetch requires a managed-memory allocation"),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn prefetch_and_discard_single_and_batched() {
    let (d, s) = setup();
    if !concurrent_managed_access(&d) {
        return skip("no concurrent managed access on this device");
    }
    let mr = ManagedMemoryResource::unpooled(None);
    let mut bufs: Vec<Buffer> = (0..3)
        .map(|i| Buffer::from_slice(mr.clone(), &vec![i as u8 + 1; 1 << 16], &s).unwrap())
        .collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    assert_eq!(bufs[0].last_prefetch_location().unwrap(), None, "never prefetched");
    Buffer::prefetch_batch(&refs, &[MemoryLocation::Device(d)], &s).unwrap();
    s.sync().unwrap();
    for b in &bufs {
        assert_eq!(b.last_prefetch_location().unwrap(), Some(MemoryLocation::Device(d)));
    }
    Buffer::prefetch_batch(&refs[..2], &[MemoryLocation::Host, MemoryLocation::Device(d)], &s).unwrap();
    s.sync().unwrap();
    assert_eq!(bufs[0].last_prefetch_location().unwrap(), Some(MemoryLocation::Host));
    assert_eq!(
        bufs[1].last_prefetch_location().unwrap(),
        Some(MemoryLocation::Device(d))
    );
    for (i, b) in bufs.iter().enumerate() {
        assert!(
            b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == i as u8 + 1),
            "prefetch keeps the contents"
        );
    }
    bufs[0].prefetch(MemoryLocation::Host, &s).unwrap();
    s.sync().unwrap();
    bufs[0].discard_prefetch(d, &s).unwrap();
    s.sync().unwrap();
    assert_eq!(
        bufs[0].last_prefetch_location().unwrap(),
        Some(MemoryLocation::Device(d))
    );
    {
        // Discards borrow the buffers exclusively (nothing else may use them meanwhile).
        let mut all: Vec<&mut Buffer> = bufs.iter_mut().collect();
        Buffer::discard_prefetch_batch(&mut all, &[MemoryLocation::Device(d)], &s).unwrap();
        Buffer::discard_batch(&mut all, &s).unwrap();
    }
    bufs[2].discard(&s).unwrap();
    // A graph holding a buffer may use it at any launch: no discard.
    let g = cuda_core::graph::GraphDefinition::new().unwrap();
    g.memset(&bufs[1], 1u8, 1 << 16).unwrap();
    let err = bufs[1].discard(&s).unwrap_err();
    assert!(err.to_string().contains("holds this buffer"), "{err}");
    drop(g);
    // Discarded memory is still memory: it can be written and read again.
    bufs[2].fill_u8(9, &s).unwrap();
    assert!(bufs[2].to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 9));
    // cuda.core's checks.
    let err = Buffer::prefetch_batch(&[], &[MemoryLocation::Host], &s).unwrap_err();
    assert!(
        err.to_string().contains("prefetch_batch: empty buffers sequence"),
        "{err}"
    );
    let refs: Vec<&Buffer> = bufs.iter().collect();
    let err = Buffer::prefetch_batch(&refs, &[MemoryLocation::Host, MemoryLocation::Host], &s).unwrap_err();
    assert!(
        err.to_string()
            .contains("location length 2 does not match targets length 3"),
        "{err}"
    );
    let mut device_only = d.allocate(64, &s).unwrap();
    let (first, _) = bufs.split_at_mut(1);
    let err = Buffer::discard_batch(&mut [&mut first[0], &mut device_only], &s).unwrap_err();
    assert!(
        err.to_string()
            .contains("discard_batch requires a managed-memory allocation"),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn buffers_report_their_device_and_kind() {
    let (d, s) = setup();
    let device = d.allocate(256, &s).unwrap();
    assert_eq!(device.device_id(), Some(d.device_id()));
    assert!(!device.is_managed() && !device.is_mapped());
    let pinned = PinnedMemoryResource::new(Default::default())
        .unwrap()
        .allocate(256, &s)
        .unwrap();
    assert_eq!(pinned.device_id(), None);
    // Foreign memory: what the driver says.
    // SAFETY: the device buffer outlives the view.
    let view = unsafe { Buffer::from_handle(device.handle(), 256, &s) }.unwrap();
    assert_eq!(view.device_id(), Some(d.device_id()));
    assert!(view.memory_resource().is_none() && view.owner().is_none());
    let host = vec![0u8; 256];
    // SAFETY: `host` outlives the view, which is only asked about.
    let view = unsafe { Buffer::from_handle(host.as_ptr() as u64, 256, &s) }.unwrap();
    assert_eq!(view.device_id(), None);
    assert!(view.is_host_accessible() && !view.is_device_accessible());
    // A copy into a new buffer of the same resource; foreign memory has none.
    device.fill_u8(0xA5, &s).unwrap();
    let copy = device.copy_to_new(&s).unwrap();
    assert!(copy.handle() != device.handle());
    assert!(copy.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0xA5));
    // SAFETY: the device buffer outlives the view.
    let view = unsafe { Buffer::from_handle(device.handle(), 256, &s) }.unwrap();
    let err = view.copy_to_new(&s).unwrap_err();
    assert!(
        err.to_string().contains("a destination buffer must be provided"),
        "{err}"
    );
    let managed = ManagedMemoryResource::unpooled(None).allocate(256, &s).unwrap();
    // SAFETY: `managed` outlives the view.
    let view = unsafe { Buffer::from_handle(managed.handle(), 256, &s) }.unwrap();
    assert!(view.is_managed(), "the driver's managed attribute");
    view.prefetch(d, &s).unwrap();
    s.sync().unwrap();
}

/// Holds memory and counts its drops.
struct Owner {
    drops: Arc<std::sync::atomic::AtomicUsize>,
    _memory: Buffer,
}
impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_owner_outlives_the_work_on_its_memory() {
    let (d, s) = setup();
    let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let memory = d.allocate(1 << 20, &s).unwrap();
    let (ptr, size) = (memory.handle(), memory.size());
    // SAFETY: the owner holds the buffer whose memory this is.
    let b = unsafe {
        Buffer::from_handle_with_owner(
            ptr,
            size,
            Owner {
                drops: drops.clone(),
                _memory: memory,
            },
            &s,
        )
    }
    .unwrap();
    assert!(b.owner().unwrap().downcast_ref::<Owner>().is_some());
    assert!(b.memory_resource().is_none(), "an owner is not a memory resource");
    assert_eq!(b.device_id(), Some(d.device_id()));
    // Work on another stream, then drop: the owner goes after the work.
    let other = d.create_stream(Default::default()).unwrap();
    b.fill_u8(0x3C, &other).unwrap();
    let check = d.allocate(size, &other).unwrap();
    check.copy_from(&b, &other).unwrap();
    drop(b);
    assert!(check.to_vec::<u8>(&other).unwrap().iter().all(|v| *v == 0x3C));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while drops.load(std::sync::atomic::Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        drops.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the owner is dropped once"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_resource_frees_memory_it_is_handed() {
    let (d, s) = setup();
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let used = pool.used_mem_current().unwrap();
    let ptr = MemoryResource::allocate(pool.as_ref(), 4096, &s).unwrap();
    assert_eq!(pool.used_mem_current().unwrap(), used + 4096);
    // SAFETY: ptr came from this pool with this size, and nothing else frees it.
    let b = unsafe { Buffer::from_handle_with_resource(ptr, 4096, pool.clone(), &s) }.unwrap();
    assert!(b.memory_resource().is_some() && b.device_id() == Some(d.device_id()));
    b.fill_u8(1, &s).unwrap();
    assert!(b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 1));
    drop(b);
    s.sync().unwrap();
    assert_eq!(pool.used_mem_current().unwrap(), used, "freed through the pool");
}

/// Run in a child by `a_pinned_pool_is_shared_with_another_process`.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_opens_a_shared_pinned_buffer() {
    let Ok(path) = std::env::var("CUDA_RS_PINNED_IPC_SOCKET") else {
        return;
    };
    let (_, s) = setup();
    let socket = std::os::unix::net::UnixStream::connect(path).unwrap();
    let (fd, payload) = cuda_core::ipc::recv_fd(&socket).unwrap();
    let desc = cuda_core::IpcBufferDescriptor::from_bytes(&payload).unwrap();
    let pool = PinnedMemoryResource::from_fd(fd).unwrap();
    assert!(pool.is_mapped() && pool.is_ipc_enabled());
    let err = pool.allocate(64, &s).unwrap_err();
    assert!(
        err.to_string()
            .contains("Cannot allocate from a mapped IPC-enabled memory resource"),
        "{err}"
    );
    // (cuda.core raises a TypeError.)
    assert_eq!(err.kind(), cuda_core::ErrorKind::Type);
    let buffer = Buffer::from_ipc_descriptor(&pool, &desc, &s).unwrap();
    assert!(buffer.is_mapped());
    let expected: Vec<u8> = (0..desc.size()).map(|i| (i % 241) as u8).collect();
    assert_eq!(buffer.to_vec::<u8>(&s).unwrap(), expected, "the parent's bytes");
    buffer.fill_u8(0x77, &s).unwrap();
    s.sync().unwrap();
    drop(buffer);
    s.sync().unwrap();
    use std::io::Write;
    (&socket).write_all(b"done").unwrap();
    println!("child: read the parent's pinned buffer and wrote it");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_pinned_pool_is_shared_with_another_process() {
    use std::io::Read;
    use std::os::fd::AsFd;
    let (d, s) = setup();
    if host_numa_id(&d).is_none() {
        return skip("shareable host pools need a host NUMA node, and the device reports none");
    }
    let pool = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
        ipc_enabled: true,
        ..Default::default()
    })
    .unwrap();
    let data: Vec<u8> = (0..1 << 16).map(|i| (i % 241) as u8).collect();
    let buffer = Buffer::from_slice(pool.clone(), &data, &s).unwrap();
    let fd = pool.export_fd().unwrap();
    let desc = buffer.ipc_descriptor().unwrap();
    assert_eq!(desc.size(), data.len());
    let dir = std::env::temp_dir().join(format!("cuda-rs-pinned-ipc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ipc.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_opens_a_shared_pinned_buffer",
            "--nocapture",
            "--include-ignored",
        ])
        .env("CUDA_RS_PINNED_IPC_SOCKET", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (socket, _) = listener.accept().unwrap();
    cuda_core::ipc::send_fd(&socket, fd.as_fd(), &desc.to_bytes()).unwrap();
    let mut done = [0u8; 4];
    let read = (&socket).read_exact(&mut done);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        read.is_ok() && out.status.success() && text.contains("child: read the parent's pinned buffer"),
        "{text}"
    );
    assert!(
        buffer.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x77),
        "the child's write is seen here"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
