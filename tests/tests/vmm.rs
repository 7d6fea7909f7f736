//! VirtualMemoryResource on the GPU (`cuda.core`'s vmm tests of `test_memory.py` and
//! `memory_ipc/test_vmm_ipc.py`): options and their refusals, growth, host locations, read-only
//! mappings and sharing between processes, data checked byte for byte. Capabilities the device
//! lacks are tested through their error path, with the reason printed.

use cuda_core::graph::GraphDefinition;
use cuda_core::texture::{ArrayFormat, OpaqueArrayOptions};
use cuda_core::{
    Buffer, DType, Device, MemoryResource, Stream, StridedMemoryView, VirtualMemoryAccessType as Access,
    VirtualMemoryAllocationType, VirtualMemoryGranularityType, VirtualMemoryHandleType as Handle,
    VirtualMemoryIpcDescriptor, VirtualMemoryLocationType as Location, VirtualMemoryResource,
    VirtualMemoryResourceOptions as Options,
};
use cuda_sys::driver;
use cuda_tests::{skip, skip_part};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

fn supported(v: cuda_core::Result<i32>) -> bool {
    matches!(v, Ok(v) if v != 0)
}

/// `n` bytes that differ from their neighbours, so a misplaced chunk shows.
fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 7 + seed) % 251) as u8).collect()
}

fn private() -> Options {
    Options {
        handle_type: None,
        ..Default::default()
    }
}

fn err<T: std::fmt::Debug>(r: cuda_core::Result<T>) -> String {
    r.unwrap_err().to_string()
}

/// The resource, or (when the device has no virtual memory management) the checked refusal and
/// the test's skip recorded.
fn resource(d: &Device, options: Options) -> Option<Arc<VirtualMemoryResource>> {
    if !supported(d.properties().virtual_memory_management_supported()) {
        let e = err(VirtualMemoryResource::new(d, options));
        assert!(e.contains("VirtualMemoryResource requires CUDA VMM API support"), "{e}");
        skip(format!("device {} has no virtual memory management", d.device_id()));
        return None;
    }
    if options.handle_type == Some(Handle::PosixFd)
        && !supported(d.properties().handle_type_posix_file_descriptor_supported())
    {
        let e = err(VirtualMemoryResource::new(d, options));
        assert!(e.contains("PosixFd is not supported"), "{e}");
        skip(format!("device {} cannot export POSIX file descriptors", d.device_id()));
        return None;
    }
    Some(VirtualMemoryResource::new(d, options).unwrap())
}

fn no_vmm_errors() {
    let errors = cuda_core::take_drop_errors();
    assert!(errors.iter().all(|e| !e.to_string().contains("cuMem")), "{errors:?}");
}

/// Runs the ignored helper test `name` of this binary in a child process with `env`; its
/// success and output.
fn run_child(name: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", name, "--nocapture", "--include-ignored"]);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_defaults_are_cuda_cores_and_sizes_round_up() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, Options::default()) else {
        return;
    };
    let g = vmm.granularity();
    assert!(g >= 4096 && g.is_power_of_two(), "{g}");
    assert_eq!(vmm.options(), &Options::default());
    assert!(vmm.is_ipc_enabled(), "posix_fd is cuda.core's default handle type");
    assert!(vmm.is_device_accessible() && !vmm.is_host_accessible() && !vmm.is_mapped());
    assert_eq!(vmm.device(), Some(d));
    let b = vmm.allocate(1, &s).unwrap();
    assert_eq!(b.size(), g, "the buffer reports the rounded size, as cuda.core's");
    assert!(!b.is_mapped() && b.is_device_accessible());
    let data = pattern(g, 3);
    b.copy_from_host(&data, &s).unwrap();
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
    let mut empty = vmm.allocate(0, &s).unwrap();
    assert_eq!(empty.size(), 0);
    vmm.grow(&mut empty, 10, &s).unwrap();
    assert_eq!(empty.size(), g, "one granule was behind the empty buffer");
    // Through the generic path the buffer keeps the size asked for.
    let generic = Buffer::allocate(vmm.clone(), 100, &s).unwrap();
    assert_eq!(generic.size(), 100);
    let minimum = resource(
        &d,
        Options {
            granularity: VirtualMemoryGranularityType::Minimum,
            ..private()
        },
    )
    .unwrap();
    assert!(minimum.granularity() <= g);
    assert!(!minimum.is_ipc_enabled());
    println!("granularity: recommended {g}, minimum {}", minimum.granularity());
    drop((b, empty, generic));
    no_vmm_errors();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_grows_in_place_or_by_moving_and_never_shrinks() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, private()) else { return };
    let g = vmm.granularity();
    let mut a = vmm.allocate(g, &s).unwrap();
    let data = pattern(g, 1);
    a.copy_from_host(&data, &s).unwrap();
    let first = a.handle();
    vmm.grow(&mut a, g, &s).unwrap();
    vmm.grow(&mut a, 1, &s).unwrap();
    assert_eq!(
        (a.handle(), a.size()),
        (first, g),
        "equal and smaller requests change nothing"
    );
    vmm.grow(&mut a, 2 * g + 1, &s).unwrap();
    assert_eq!(a.size(), 3 * g);
    assert_eq!(&a.to_vec::<u8>(&s).unwrap()[..g], &data[..], "contents kept");
    println!("first growth moved: {}", a.handle() != first);

    // Block the addresses after the buffer, so the next growth must move.
    let end = a.handle() + a.size() as u64;
    let blocker_resource = resource(
        &d,
        Options {
            addr_hint: Some(end),
            ..private()
        },
    )
    .unwrap();
    let blocker = blocker_resource.allocate(g, &s).unwrap();
    let blocked = blocker.handle() == end;
    let whole = pattern(3 * g, 5);
    a.copy_from_host(&whole, &s).unwrap();
    // Work on another stream before the move: the move waits for it.
    let other = d.create_stream(Default::default()).unwrap();
    let spare = vmm.allocate(3 * g, &s).unwrap();
    spare.copy_from(&a, &other).unwrap();
    let before = a.handle();
    vmm.grow(&mut a, 5 * g, &s).unwrap();
    assert_eq!(a.size(), 5 * g);
    if blocked {
        assert_ne!(a.handle(), before, "the addresses after it were taken: it moved");
    }
    println!(
        "blocker placed at the hint: {blocked}; second growth moved: {}",
        a.handle() != before
    );
    assert_eq!(
        &a.to_vec::<u8>(&s).unwrap()[..3 * g],
        &whole[..],
        "contents kept across the move"
    );
    assert_eq!(
        spare.to_vec::<u8>(&s).unwrap(),
        whole,
        "the copy queued before the move saw the memory"
    );
    let full = pattern(5 * g, 11);
    a.copy_from_host(&full, &s).unwrap();
    assert_eq!(a.to_vec::<u8>(&s).unwrap(), full, "the whole grown range is usable");

    // A buffer smaller than its memory grows within it.
    let mut small = Buffer::allocate(vmm.clone(), 100, &s).unwrap();
    let at = small.handle();
    vmm.grow(&mut small, 200, &s).unwrap();
    assert_eq!((small.handle(), small.size()), (at, g));
    drop((a, blocker, spare, small));
    no_vmm_errors();
}

/// Run in a child (one test, one thread) by
/// `vmm_grows_in_place_where_the_driver_grants_the_addresses_after_it`: grows a buffer placed at
/// a fresh hint and reports whether the driver granted the addresses after it (in place) or the
/// memory moved; the contents are checked either way.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn vmm_child_grows_in_place() {
    if std::env::var("CUDA_RS_VMM_IN_PLACE").is_err() {
        return;
    }
    let (d, s) = setup();
    // A free hole of 1 GiB: reserved and given back, then asked for as the buffer's hint (the
    // driver may place reservations top-down, so what lies after a fresh buffer is usually
    // taken).
    let mut hole = 0;
    // SAFETY: out-pointer to a local; the range is freed right away with its own size.
    unsafe {
        driver::cuMemAddressReserve(&mut hole, 1 << 30, 1 << 30, 0, 0)
            .result()
            .unwrap();
        driver::cuMemAddressFree(hole, 1 << 30).result().unwrap();
    }
    let vmm = VirtualMemoryResource::new(
        &d,
        Options {
            addr_hint: Some(hole),
            ..private()
        },
    )
    .unwrap();
    let g = vmm.granularity();
    let mut a = vmm.allocate(g, &s).unwrap();
    let base = a.handle();
    // The driver treats the hint as a hint: on the test machine's driver (13.0) it placed the
    // buffer elsewhere, and the addresses after it were taken, so the growth moved.
    let at_hint = base == hole;
    // Before any copy (which may make the driver reserve staging addresses).
    vmm.grow(&mut a, 2 * g, &s).unwrap();
    vmm.grow(&mut a, 4 * g, &s).unwrap();
    let in_place = a.handle() == base;
    assert_eq!(a.size(), 4 * g);
    let full = pattern(4 * g, 22);
    a.copy_from_host(&full, &s).unwrap();
    assert_eq!(a.to_vec::<u8>(&s).unwrap(), full, "one buffer over three reservations");
    // A growth that moves waits for the copy queued on `other` first.
    let other = d.create_stream(Default::default()).unwrap();
    let copy = vmm.allocate(4 * g, &s).unwrap();
    copy.copy_from(&a, &other).unwrap();
    vmm.grow(&mut a, 5 * g, &s).unwrap();
    assert_eq!(copy.to_vec::<u8>(&s).unwrap(), full);
    assert_eq!(&a.to_vec::<u8>(&s).unwrap()[..4 * g], &full[..]);
    drop((a, copy));
    no_vmm_errors();
    println!("child: grew, in place: {in_place} (the buffer at the hint: {at_hint})");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_grows_in_place_where_the_driver_grants_the_addresses_after_it() {
    let (d, _) = setup();
    if resource(&d, private()).is_none() {
        return;
    }
    let (ok, text) = run_child("vmm_child_grows_in_place", &[("CUDA_RS_VMM_IN_PLACE", "1")]);
    assert!(ok && text.contains("child: grew, in place"), "{text}");
    println!(
        "{}",
        text.lines().find(|l| l.starts_with("child: grew")).unwrap_or_default()
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_modify_allocation_applies_its_options_to_the_new_chunk_only() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, Options::default()) else {
        return;
    };
    let g = vmm.granularity();
    let mut a = vmm.allocate(g, &s).unwrap();
    let data = pattern(g, 2);
    a.copy_from_host(&data, &s).unwrap();
    let before = (a.handle(), a.size());
    let elsewhere = Options {
        location_type: Location::Host,
        ..private()
    };
    let e = err(vmm.modify_allocation(&mut a, 2 * g, Some(&elsewhere), &s));
    assert!(e.contains("does not match the resource's"), "{e}");
    let read_only = Options {
        self_access: Some(Access::Read),
        ..Default::default()
    };
    let e = err(vmm.modify_allocation(&mut a, 2 * g, Some(&read_only), &s));
    assert!(e.contains("self_access must be ReadWrite"), "{e}");
    let windows = Options {
        handle_type: Some(Handle::Win32),
        ..Default::default()
    };
    assert!(err(vmm.modify_allocation(&mut a, 2 * g, Some(&windows), &s)).contains("not supported"));
    assert_eq!(
        (a.handle(), a.size()),
        before,
        "refused growths leave the buffer as it was"
    );

    let unshared = Options {
        granularity: VirtualMemoryGranularityType::Minimum,
        ..private()
    };
    vmm.modify_allocation(&mut a, 2 * g, Some(&unshared), &s).unwrap();
    assert!(a.size() >= 2 * g);
    assert_eq!(
        vmm.options(),
        &Options::default(),
        "the resource's own options do not change"
    );
    assert_eq!(&a.to_vec::<u8>(&s).unwrap()[..g], &data[..]);
    let e = err(vmm.ipc_descriptor(&a));
    assert!(e.contains("not IPC-enabled"), "the new chunk has no handle type: {e}");
    // Buffers of other resources are refused.
    let mut pool = d.allocate(64, &s).unwrap();
    assert!(err(vmm.grow(&mut pool, 2 * g, &s)).contains("was not allocated by this VirtualMemoryResource"));
    let other = resource(&d, Options::default()).unwrap();
    let mut theirs = other.allocate(1, &s).unwrap();
    assert!(err(vmm.grow(&mut theirs, 2 * g, &s)).contains("was not allocated by this VirtualMemoryResource"));
    drop((a, theirs));
    no_vmm_errors();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_options_are_refused_before_the_driver() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, private()) else { return };
    let g = vmm.granularity();
    let refused = |o: Options| err(VirtualMemoryResource::new(&d, o));
    let e = refused(Options {
        addr_align: Some(3 * g),
        ..private()
    });
    assert!(e.contains("power of two"), "{e}");
    if g > 4096 {
        let e = refused(Options {
            addr_align: Some(4096),
            ..private()
        });
        assert!(e.contains("multiple of the allocation granularity"), "{e}");
    }
    let e = refused(Options {
        addr_hint: Some(g as u64 + 4096),
        ..private()
    });
    assert!(e.contains("addr_hint"), "{e}");
    let e = refused(Options {
        peers: vec![d],
        ..private()
    });
    assert!(e.contains("own device"), "{e}");
    let e = refused(Options {
        peers: vec![d, d],
        ..private()
    });
    assert!(e.contains("twice"), "{e}");
    for h in [Handle::Win32, Handle::Win32Kmt] {
        let e = refused(Options {
            handle_type: Some(h),
            ..Default::default()
        });
        assert!(e.contains("not supported"), "{e}");
    }
    let e = refused(Options {
        location_type: Location::Host,
        ..Default::default()
    });
    assert!(e.contains("cannot have an exportable handle type"), "{e}");
    // An alignment the options ask for is the reservation's.
    let aligned = resource(
        &d,
        Options {
            addr_align: Some(4 * g),
            ..private()
        },
    )
    .unwrap();
    for _ in 0..3 {
        let b = aligned.allocate(g, &s).unwrap();
        assert_eq!(b.handle() % (4 * g) as u64, 0, "{:#x}", b.handle());
    }
    assert!(vmm.allocate(usize::MAX, &s).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_gpu_direct_rdma_and_fabric_handles_are_checked_before_the_driver() {
    let (d, s) = setup();
    if resource(&d, private()).is_none() {
        return;
    }
    let p = d.properties();
    let rdma = Options {
        gpu_direct_rdma: true,
        ..private()
    };
    if supported(p.gpu_direct_rdma_supported()) && supported(p.gpu_direct_rdma_with_cuda_vmm_supported()) {
        let r = VirtualMemoryResource::new(&d, rdma).unwrap();
        let b = r.allocate(1, &s).unwrap();
        let data = pattern(b.size(), 4);
        b.copy_from_host(&data, &s).unwrap();
        assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
        println!("GPUDirect RDMA memory allocated and checked");
    } else {
        let e = err(VirtualMemoryResource::new(&d, rdma));
        assert!(e.contains("GPU Direct RDMA is not supported on this device"), "{e}");
        skip_part("RDMA allocation (tested the refusal): the device has no GPUDirect RDMA for VMM");
    }
    let fabric = Options {
        handle_type: Some(Handle::Fabric),
        ..Default::default()
    };
    let imex = std::fs::read_dir("/dev/nvidia-caps-imex-channels").is_ok_and(|mut d| d.next().is_some());
    match VirtualMemoryResource::new(&d, fabric).and_then(|r| r.allocate(1, &s)) {
        Ok(b) => println!("fabric-exportable memory allocated: {b:?}"),
        Err(e) if !supported(p.handle_type_fabric_supported()) => {
            assert!(e.to_string().contains("Fabric is not supported"), "{e}");
            skip_part("fabric allocation (tested the refusal): handle_type_fabric_supported is 0");
        }
        Err(e) if !imex => {
            assert!(e.to_string().contains("IMEX channel"), "refused before the driver: {e}");
            skip_part("fabric allocation (tested the refusal): no IMEX channel here");
        }
        // An IMEX channel the driver still refuses (another user's, say): its answer.
        Err(e) => println!("fabric memory refused by the driver: {e}"),
    }
    let managed = Options {
        allocation_type: VirtualMemoryAllocationType::Managed,
        ..private()
    };
    match VirtualMemoryResource::new(&d, managed).and_then(|r| r.allocate(1, &s)) {
        Ok(b) => {
            let data = pattern(b.size(), 6);
            b.copy_from_host(&data, &s).unwrap();
            assert_eq!(b.to_vec::<u8>(&s).unwrap(), data);
            println!("managed VMM memory allocated and checked");
        }
        Err(e) => println!("managed VMM allocation refused by this driver: {e}"),
    }
}

/// Host memory of `location` (peers: device 0) touched by the CPU; run in a child so that a
/// fault cannot take the other tests with it.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn vmm_child_touches_host_memory_on_the_cpu() {
    let Ok(kind) = std::env::var("CUDA_RS_VMM_HOST") else {
        return;
    };
    let (d, s) = setup();
    let location = match kind.as_str() {
        "host" => Location::Host,
        "numa_current" => Location::HostNumaCurrent,
        numa => Location::HostNuma(numa.parse().unwrap()),
    };
    let vmm = VirtualMemoryResource::new(
        &d,
        Options {
            location_type: location,
            peers: vec![d],
            ..private()
        },
    )
    .unwrap();
    assert!(vmm.is_host_accessible() && vmm.is_device_accessible());
    assert_eq!(vmm.device(), None, "host memory belongs to no device");
    let mut b = vmm.allocate(1, &s).unwrap();
    let data = pattern(b.size(), 8);
    b.copy_from_host(&data, &s).unwrap();
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), data, "through the device");
    b.fill_u8(0x3C, &s).unwrap();
    s.sync().unwrap();
    // SAFETY: the stream is idle: nothing else reads or writes the memory while the slices live.
    unsafe {
        assert!(
            b.as_host_slice::<u8>().unwrap().iter().all(|v| *v == 0x3C),
            "the CPU reads"
        );
        b.as_host_slice_mut::<u8>().unwrap().fill(0x7E);
    }
    assert!(
        b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x7E),
        "the CPU's write"
    );
    drop(b);
    no_vmm_errors();
    println!("child: {kind} memory read and written by the device and the CPU");
}

fn host_memory_round_trip(kind: &str) {
    let (ok, text) = run_child(
        "vmm_child_touches_host_memory_on_the_cpu",
        &[("CUDA_RS_VMM_HOST", kind)],
    );
    assert!(
        ok && text.contains("read and written by the device and the CPU"),
        "{text}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_host_memory_is_host_accessible_or_refused() {
    let (d, s) = setup();
    let host = Options {
        location_type: Location::Host,
        peers: vec![d],
        ..private()
    };
    if !supported(d.properties().host_virtual_memory_management_supported()) {
        let e = err(VirtualMemoryResource::new(&d, host));
        assert!(e.contains("requires CUDA VMM API support for host memory"), "{e}");
        return skip("host memory (tested the refusal): host_virtual_memory_management_supported is 0");
    }
    host_memory_round_trip("host");
    // Without peers no device is granted access.
    let alone = VirtualMemoryResource::new(&d, Options { peers: vec![], ..host }).unwrap();
    assert!(alone.is_host_accessible() && !alone.is_device_accessible());
    let b = alone.allocate(1, &s).unwrap();
    assert!(b.is_host_accessible() && !b.is_device_accessible());
}

/// Host memory only the host may reach (host location, no device peers): fills and copies, which
/// the device runs, are refused before the driver with an error that says why (the device's
/// access would fault the context: finding 3 of the third audit, where the write check let them
/// through because the host may write the memory). The same holds for copies between strided views
/// (one copy, a pitched copy, the strided copy kernel; views of the buffer, of a host slice over
/// its memory and of raw memory), array copies (with the buffer or a host slice over its memory)
/// and graph memcpy nodes, source and destination. With the device as a read-write peer the same
/// operations run, and the context is unharmed.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_host_memory_the_device_cannot_reach_is_refused_to_fills_and_copies() {
    let (d, s) = setup();
    let host = Options {
        location_type: Location::Host,
        ..private()
    };
    if !supported(d.properties().host_virtual_memory_management_supported()) {
        return skip("host memory: host_virtual_memory_management_supported is 0");
    }
    let alone = VirtualMemoryResource::new(&d, host.clone()).unwrap();
    let b = alone.allocate(1, &s).unwrap();
    assert!(b.is_host_accessible() && !b.is_device_accessible());
    let n = b.size();
    let pool = d.memory_resource().unwrap();
    let dev = Buffer::allocate(pool.clone(), n, &s).unwrap();
    dev.fill_u8(0x5A, &s).unwrap();
    let written = |e: String, what: &str| {
        assert!(
            e.starts_with(&format!(
                "{what}: the device may not write this buffer's memory, which only the host may reach"
            )),
            "{e}"
        );
    };
    let read = |e: String, what: &str| {
        assert!(e.starts_with(&format!("{what}: device 0 may not")), "{e}");
    };
    // Writes the device would make.
    written(err(b.fill_u8(1, &s)), "fill_u8");
    written(err(b.fill_u32(1, &s)), "fill_u32");
    written(err(dev.copy_to(&b, &s)), "copy_to");
    written(err(b.copy_from(&dev, &s)), "copy_to");
    written(err(b.copy_from_host(&pattern(n, 1), &s)), "copy_from_host");
    written(err(Buffer::copy_batch(&[(&dev, &b)], &s)), "copy_batch");
    let region = |buffer| cuda_core::Region2D {
        buffer,
        offset: 0,
        pitch: 64,
    };
    written(err(Buffer::copy_2d(region(&b), region(&dev), 64, 4, &s)), "copy_2d");
    // Reads the device would make.
    let other = Buffer::allocate(pool, n, &s).unwrap();
    read(err(b.copy_to(&other, &s)), "copy_to");
    read(err(b.to_vec::<u8>(&s)), "copy_to_host");
    read(b.to_vec_async::<u8>(&s).err().unwrap().to_string(), "to_vec_async");
    read(err(Buffer::copy_batch(&[(&b, &other)], &s)), "copy_batch");
    read(err(Buffer::copy_2d(region(&other), region(&b), 64, 4, &s)), "copy_2d");
    // The refusals of memory that is no buffer's (host slices, raw views) rest on the driver
    // describing this memory: it grants the device no access (checked before any such copy).
    let e = err(b.copy_to(&other, &s));
    assert!(
        e.starts_with("copy_to: device 0 may not read this memory (the driver grants it no access"),
        "{e}"
    );

    // Strided copies, whatever the plan: views of the buffer are refused as the buffer is.
    const STRIDED: &str = "copy between strided views";
    let layouts: [(&[usize], Option<&[isize]>); 3] = [
        (&[SIDE * SIDE], None),                     // dense: one copy
        (&[4, SIDE], Some(&[128, 1])),              // rows 128 bytes apart: one pitched copy
        (&[SIDE, SIDE], Some(&[1, SIDE as isize])), // transposed: the strided copy kernel
    ];
    for (shape, strides) in layouts {
        let mut on_b = u8_view(&b, shape, strides);
        let mut on_dev = u8_view(&dev, shape, None);
        written(err(on_dev.copy_to(&mut on_b, &s)), STRIDED);
        written(err(on_b.copy_from(&on_dev, &s)), STRIDED);
        read(err(on_b.copy_to(&mut on_dev, &s)), STRIDED);
    }
    // Views of a host slice over the memory, and of the raw memory, which the device would copy:
    // refused on what the driver grants the device.
    let mut on_dev = u8_view(&dev, &[n], None);
    {
        // SAFETY: b's memory is the host's (host access), alive while b is, used by nothing else.
        let in_b: &[u8] = unsafe { host_bytes(&b) };
        let from_slice = StridedMemoryView::from_host_slice(in_b, &[n], None).unwrap();
        let e = err(from_slice.copy_to(&mut on_dev, &s));
        assert!(
            e.starts_with("copy between strided views: device 0 may not read this memory"),
            "{e}"
        );
    }
    // SAFETY: as above; read-only, and never copied (refused).
    let raw = unsafe { StridedMemoryView::from_raw(b.handle(), &[n], None, DType::U8, None, false, true) }.unwrap();
    let e = err(raw.copy_to(&mut on_dev, &s));
    assert!(
        e.starts_with("copy between strided views: device 0 may not read this memory"),
        "{e}"
    );
    {
        // SAFETY: as above.
        let into_b = unsafe { host_bytes(&b) };
        let mut into_slice = StridedMemoryView::from_host_slice_mut(into_b, &[n], None).unwrap();
        let e = err(on_dev.copy_to(&mut into_slice, &s));
        assert!(
            e.starts_with(
                "copy between strided views: device 0 may not write this memory (the driver grants it no access"
            ),
            "{e}"
        );
    }
    drop((on_dev, raw));

    // Array copies, either way, with the buffer or with a host slice over its memory.
    let array = d
        .create_opaque_array(&OpaqueArrayOptions::new([SIDE, SIDE], ArrayFormat::Uint8, 1))
        .unwrap();
    read(err(array.copy_from(&b, &s)), "OpaqueArray::copy_from");
    written(err(array.copy_to(&b, &s)), "OpaqueArray::copy_to");
    {
        // SAFETY: as above.
        let in_b = unsafe { host_bytes(&b) };
        let e = err(array.copy_from_host(&in_b[..SIDE * SIDE], &s));
        assert!(
            e.starts_with("OpaqueArray::copy_from_host: device 0 may not read this memory"),
            "{e}"
        );
        let e = err(array.copy_to_host(&mut in_b[..SIDE * SIDE], &s));
        assert!(
            e.starts_with("OpaqueArray::copy_to_host: device 0 may not write this memory"),
            "{e}"
        );
    }

    // Graph memcpy nodes: the source as the destination, refused as the node is added.
    let g = GraphDefinition::new().unwrap();
    read(err(g.memcpy(&other, &b, n)), "memcpy");
    written(err(g.memcpy(&b, &dev, n)), "memcpy");
    drop(g);

    // None reached the device: the context is unharmed.
    s.sync().unwrap();
    assert!(dev.to_vec::<u8>(&s).unwrap().iter().all(|&v| v == 0x5A));
    // A staged strided copy reads its host view on the CPU: a host slice over the memory, of a
    // layout no copy engine takes, is copied.
    let want = pattern(SIDE * SIDE, 5);
    {
        // SAFETY: as above.
        let in_b = unsafe { host_bytes(&b) };
        in_b[..SIDE * SIDE].copy_from_slice(&want);
        let transposed = StridedMemoryView::from_host_slice(in_b, &[SIDE, SIDE], Some(&[1, SIDE as isize])).unwrap();
        transposed
            .copy_to(&mut u8_view(&other, &[SIDE, SIDE], None), &s)
            .unwrap();
    }
    let got = other.to_vec::<u8>(&s).unwrap();
    for (r, c) in (0..SIDE).flat_map(|r| (0..SIDE).map(move |c| (r, c))) {
        assert_eq!(got[r * SIDE + c], want[c * SIDE + r], "({r}, {c})");
    }
    drop(b);

    // With the device as a read-write peer, the same operations run.
    let shared = VirtualMemoryResource::new(&d, Options { peers: vec![d], ..host }).unwrap();
    let b = shared.allocate(1, &s).unwrap();
    assert!(b.is_host_accessible() && b.is_device_accessible());
    b.fill_u8(1, &s).unwrap();
    dev.copy_to(&b, &s).unwrap();
    assert!(b.to_vec::<u8>(&s).unwrap().iter().all(|&v| v == 0x5A));
    let data = pattern(n, 3);
    b.copy_from_host(&data, &s).unwrap();
    b.copy_to(&other, &s).unwrap();
    assert_eq!(other.to_vec::<u8>(&s).unwrap(), data);
    // Strided copies: the strided copy kernel transposes the first 64 x 64 bytes into `other`;
    // a pitched copy writes rows of the buffer.
    u8_view(&b, &[SIDE, SIDE], Some(&[1, SIDE as isize]))
        .copy_to(&mut u8_view(&other, &[SIDE, SIDE], None), &s)
        .unwrap();
    let got = other.to_vec::<u8>(&s).unwrap();
    for (r, c) in (0..SIDE).flat_map(|r| (0..SIDE).map(move |c| (r, c))) {
        assert_eq!(got[r * SIDE + c], data[c * SIDE + r], "({r}, {c})");
    }
    u8_view(&dev, &[4, SIDE], None)
        .copy_to(&mut u8_view(&b, &[4, SIDE], Some(&[128, 1])), &s)
        .unwrap();
    let got = b.to_vec::<u8>(&s).unwrap();
    for (i, &v) in got[..4 * 128].iter().enumerate() {
        assert_eq!(v, if i % 128 < SIDE { 0x5A } else { data[i] }, "byte {i}");
    }
    b.copy_from_host(&data, &s).unwrap();
    // A graph memcpy node reads it.
    other.fill_u8(0, &s).unwrap();
    let g = GraphDefinition::new().unwrap();
    g.memcpy(&other, &b, n).unwrap();
    let exec = g.instantiate(&Default::default()).unwrap();
    exec.launch(&s).unwrap();
    assert_eq!(other.to_vec::<u8>(&s).unwrap(), data);
    // Array copies with it, and with a host slice over its memory (the driver grants the device
    // read-write access).
    array.copy_from(&b, &s).unwrap();
    assert_eq!(array.to_vec::<u8>(&s).unwrap(), data[..SIDE * SIDE]);
    other.fill_u8(0, &s).unwrap();
    array.copy_to(&other, &s).unwrap();
    assert_eq!(other.to_vec::<u8>(&s).unwrap()[..SIDE * SIDE], data[..SIDE * SIDE]);
    b.fill_u8(0, &s).unwrap();
    s.sync().unwrap();
    {
        // SAFETY: as above, for this allocation; no GPU work uses it meanwhile (synchronised,
        // and the copies below are waited for).
        let in_b = unsafe { host_bytes(&b) };
        array.copy_to_host(&mut in_b[..SIDE * SIDE], &s).unwrap();
        assert_eq!(in_b[..SIDE * SIDE], data[..SIDE * SIDE]);
        // From 64 bytes in: the array's bytes from 64 on, then 64 zero bytes.
        array.copy_from_host(&in_b[SIDE..SIDE + SIDE * SIDE], &s).unwrap();
    }
    let mut shifted = data[SIDE..SIDE * SIDE].to_vec();
    shifted.resize(SIDE * SIDE, 0);
    assert_eq!(array.to_vec::<u8>(&s).unwrap(), shifted);
    drop((exec, g, array));
    drop((b, dev, other));
    no_vmm_errors();
}

/// The side of the square (in bytes) the strided, array and staged copies of
/// `vmm_host_memory_the_device_cannot_reach_is_refused_to_fills_and_copies` move.
const SIDE: usize = 64;

/// A writable `u8` view of `buffer`.
fn u8_view<'a>(buffer: &'a Buffer, shape: &[usize], strides: Option<&[isize]>) -> StridedMemoryView<'a> {
    StridedMemoryView::from_buffer(buffer, shape, strides, DType::U8, false).unwrap()
}

/// The host's slice of `buffer`'s memory.
///
/// # Safety
/// The memory must be host memory the host may read and write, and nothing else (no other
/// slice, no GPU work) may use it while the slice lives.
#[allow(clippy::mut_from_ref)]
unsafe fn host_bytes(buffer: &Buffer) -> &mut [u8] {
    // SAFETY: forwarded to the caller; the buffer's range is its memory.
    unsafe { std::slice::from_raw_parts_mut(buffer.handle() as *mut u8, buffer.size()) }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_host_numa_memory_is_host_accessible_or_refused() {
    let (d, s) = setup();
    let p = d.properties();
    let numa = p.host_numa_id().unwrap_or(-1);
    if numa < 0 || !supported(p.host_numa_virtual_memory_management_supported()) {
        for location in [Location::HostNuma(0), Location::HostNumaCurrent] {
            let r = VirtualMemoryResource::new(
                &d,
                Options {
                    location_type: location,
                    peers: vec![d],
                    ..private()
                },
            );
            match r {
                Err(e) => assert!(e.to_string().contains("host NUMA"), "{e}"),
                Ok(_) => assert!(supported(p.host_numa_virtual_memory_management_supported())),
            }
        }
        return skip(format!(
            "host NUMA memory (tested the refusal): host_numa_id {numa}, host_numa_virtual_memory_management_supported {:?}",
            p.host_numa_virtual_memory_management_supported()
        ));
    }
    host_memory_round_trip(&numa.to_string());
    host_memory_round_trip("numa_current");
    // NUMA memory may be exportable (only plain host memory may not).
    match VirtualMemoryResource::new(
        &d,
        Options {
            location_type: Location::HostNuma(numa as u32),
            peers: vec![d],
            ..Default::default()
        },
    ) {
        Ok(r) => println!("exportable host NUMA memory: {:?}", r.allocate(1, &s).map(|b| b.size())),
        Err(e) => println!("exportable host NUMA memory refused: {e}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_ipc_import_in_the_same_process_aliases_the_memory() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, Options::default()) else {
        return;
    };
    let g = vmm.granularity();
    let buf = vmm.allocate(1, &s).unwrap();
    let data = pattern(g, 12);
    buf.copy_from_host(&data, &s).unwrap();
    let desc = vmm.ipc_descriptor(&buf).unwrap();
    assert_eq!((desc.size(), desc.chunk_sizes()), (g, &[g][..]));
    let alias = vmm.from_ipc_descriptor(&desc, &s).unwrap();
    assert!(alias.is_mapped() && !buf.is_mapped());
    assert_ne!(alias.handle(), buf.handle(), "mapped at a new address");
    assert_eq!(alias.size(), g);
    assert_eq!(alias.to_vec::<u8>(&s).unwrap(), data);
    alias.fill_u8(0x44, &s).unwrap();
    assert!(buf.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x44));
    drop(buf);
    assert!(
        alias.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x44),
        "the import keeps the memory"
    );

    // A read-only import: readable, and mapped read-only.
    let ro = resource(
        &d,
        Options {
            self_access: Some(Access::Read),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        !ro.is_device_accessible(),
        "read-only memory is not reported read-write"
    );
    // The exporting buffer is gone: the descriptor's file descriptors keep the memory.
    let ro_alias = ro.from_ipc_descriptor(&desc, &s).unwrap();
    assert!(ro_alias.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x44));
    // Writes into it are refused before the driver (a GPU write would fault the context).
    let e = err(ro_alias.fill_u8(1, &s));
    assert!(e.contains("fill_u8: neither kernels nor the host may write"), "{e}");
    let e = err(ro_alias.copy_from_host(&[1u8; 16], &s));
    assert!(e.contains("copy_from_host"), "{e}");
    let mut flags = 0u64;
    let mut location = driver::CUmemLocation {
        type_: driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        ..Default::default()
    };
    location.__bindgen_anon_1.id = 0;
    // SAFETY: out-pointer to a local; the address is mapped (ro_alias is alive).
    unsafe { driver::cuMemGetAccess(&mut flags, &location, ro_alias.handle()) }
        .result()
        .unwrap();
    assert_eq!(flags, driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ.0 as u64);

    // Imported buffers grow, but are not exported again (the driver refuses imported memory).
    let mut alias = alias;
    vmm.grow(&mut alias, 2 * g, &s).unwrap();
    assert!(alias.is_mapped());
    assert!(alias.to_vec::<u8>(&s).unwrap()[..g].iter().all(|v| *v == 0x44));
    let e = err(vmm.ipc_descriptor(&alias));
    assert!(e.contains("imported from another process"), "{e}");
    drop((alias, ro_alias, desc));
    no_vmm_errors();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_ipc_refuses_private_resources_and_forged_descriptors() {
    let (d, s) = setup();
    let Some(shared) = resource(&d, Options::default()) else {
        return;
    };
    let private = resource(&d, private()).unwrap();
    let g = shared.granularity();
    let mine = private.allocate(1, &s).unwrap();
    assert!(err(private.ipc_descriptor(&mine)).contains("not IPC-enabled"));
    let buf = shared.allocate(g, &s).unwrap();
    buf.fill_u8(0x11, &s).unwrap();
    let desc = shared.ipc_descriptor(&buf).unwrap();
    assert!(err(private.from_ipc_descriptor(&desc, &s)).contains("not IPC-enabled"));
    assert!(err(shared.ipc_descriptor(&mine)).contains("did not allocate"));
    let pool = d.allocate(64, &s).unwrap();
    assert!(err(shared.ipc_descriptor(&pool)).contains("did not allocate"));

    let forge = |sizes: Vec<usize>| {
        let (fds, _) = desc.try_clone().unwrap().into_parts();
        VirtualMemoryIpcDescriptor::from_parts(fds, sizes).unwrap()
    };
    let e = err(shared.from_ipc_descriptor(&forge(vec![2 * g]), &s));
    assert!(e.contains("refused"), "a chunk claimed larger than its memory: {e}");
    let e = err(shared.from_ipc_descriptor(&forge(vec![g - 1]), &s));
    assert!(e.contains("granularity"), "a chunk that is not whole granules: {e}");
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let e = err(shared.from_ipc_descriptor(
        &VirtualMemoryIpcDescriptor::from_parts(vec![null], vec![g]).unwrap(),
        &s,
    ));
    println!("a descriptor that is not a CUDA allocation: {e}");
    let (reader, _writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let socket: OwnedFd = reader.into();
    assert!(shared
        .from_ipc_descriptor(
            &VirtualMemoryIpcDescriptor::from_parts(vec![socket], vec![g]).unwrap(),
            &s
        )
        .is_err());
    // The genuine one still imports, and nothing was left mapped by the refusals.
    let alias = shared.from_ipc_descriptor(&desc, &s).unwrap();
    assert!(alias.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 0x11));
    drop((alias, buf, mine));
    no_vmm_errors();
}

/// Run in a child by `vmm_ipc_shares_a_grown_buffer_with_another_process`.
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn vmm_ipc_child_maps_a_shared_buffer() {
    let Ok(path) = std::env::var("CUDA_RS_VMM_IPC_SOCKET") else {
        return;
    };
    let (d, s) = setup();
    let socket = std::os::unix::net::UnixStream::connect(path).unwrap();
    let desc = VirtualMemoryIpcDescriptor::recv(&socket).unwrap();
    let vmm = VirtualMemoryResource::new(&d, Options::default()).unwrap();
    // A forged size is refused here too.
    let (fds, mut sizes) = desc.try_clone().unwrap().into_parts();
    sizes[0] *= 2;
    let forged = VirtualMemoryIpcDescriptor::from_parts(fds, sizes).unwrap();
    assert!(err(vmm.from_ipc_descriptor(&forged, &s)).contains("refused"));
    let b = vmm.from_ipc_descriptor(&desc, &s).unwrap();
    assert!(b.is_mapped());
    assert_eq!(b.size(), desc.size());
    assert_eq!(
        b.to_vec::<u8>(&s).unwrap(),
        pattern(desc.size(), 9),
        "the parent's bytes"
    );
    b.copy_from_host(&pattern(desc.size(), 77), &s).unwrap();
    s.sync().unwrap();
    let ptr = b.handle();
    drop((b, desc, forged));
    // A virtual-memory free waits for the stream: the drop hands it to the release thread.
    assert!(
        cuda_tests::releases_drain(std::time::Duration::from_secs(20)),
        "the import was never freed"
    );
    let mut h = 0;
    // SAFETY: the driver only looks the address up; this process maps nothing else meanwhile
    // (one test runs here), so a failure means the import's mapping is gone.
    let status = unsafe { driver::cuMemRetainAllocationHandle(&mut h, ptr as usize as *mut std::ffi::c_void) };
    assert!(status.result().is_err(), "freeing the import unmapped it");
    no_vmm_errors();
    (&socket).write_all(b"done").unwrap();
    println!("child: mapped the parent's buffer, read it and wrote it");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn vmm_ipc_shares_a_grown_buffer_with_another_process() {
    let (d, s) = setup();
    let Some(vmm) = resource(&d, Options::default()) else {
        return;
    };
    let g = vmm.granularity();
    let mut buf = vmm.allocate(g, &s).unwrap();
    vmm.grow(&mut buf, 2 * g, &s).unwrap();
    let data = pattern(2 * g, 9);
    buf.copy_from_host(&data, &s).unwrap();
    s.sync().unwrap();
    let desc = vmm.ipc_descriptor(&buf).unwrap();
    assert_eq!(desc.chunk_sizes(), &[g, g], "one descriptor per chunk");
    let dir = std::env::temp_dir().join(format!(
        "cuda-rs-vmm-ipc-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vmm.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "vmm_ipc_child_maps_a_shared_buffer",
            "--nocapture",
            "--include-ignored",
        ])
        .env("CUDA_RS_VMM_IPC_SOCKET", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (socket, _) = listener.accept().unwrap();
    desc.send(&socket).unwrap();
    drop(desc);
    let mut done = [0u8; 4];
    let read = (&socket).read_exact(&mut done);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        read.is_ok() && out.status.success() && text.contains("child: mapped the parent's buffer"),
        "{text}"
    );
    assert_eq!(
        buf.to_vec::<u8>(&s).unwrap(),
        pattern(2 * g, 77),
        "the child's write, byte for byte"
    );
    drop(buf);
    std::fs::remove_dir_all(&dir).unwrap();
    no_vmm_errors();
}
