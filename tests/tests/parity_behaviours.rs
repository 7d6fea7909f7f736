//! Behaviours that follow cuda.core 1.3 (issue 33 items 4, 6, 8), each asserting what cuda.core
//! does: a device's memory resource (setter, synchronous fallback, the default pool first used
//! inside a global capture), the warnings channel and error kinds, host DLPack tensors and host
//! views, layout and broadcast rules of strided views, and NVML's empty field lists, link counts
//! and awaitable event waits. Tests marked `#[ignore]` need a GPU (`cargo xtask test-gpu`).

use cuda_core::dlpack::dlpark;
use cuda_core::system::{Device as SysDevice, EventType, NvmlErrorKind};
use cuda_core::{
    Buffer, CudaError, DType, Device, ErrorKind, MemoryResource, Stream, StridedMemoryView, SynchronousMemoryResource,
    Warning, WarningCategory,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tests that change process-wide state (a device's resource, the warning handler) run one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    cuda_tests::one_at_a_time()
}

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// A kDLCPU tensor of `data` (as NumPy exports one), row-major with `shape`.
fn host_tensor(data: Vec<f32>, shape: &[i64]) -> cuda_core::dlpack::DlpackTensor {
    use dlpark::ffi::{DLDevice, DLManagedTensorVersioned};
    let data = Box::new(data);
    let ptr = data.as_ptr().cast_mut().cast();
    let mut initialized = dlpark::metadata::Dynamic::compact(shape.to_vec())
        .prepare_as::<DLManagedTensorVersioned>()
        .unwrap()
        .initialize(data);
    initialized.set_device(DLDevice::CPU);
    initialized.set_data(ptr);
    initialized.set_dtype(<f32 as dlpark::DlpackElement>::DTYPE);
    // SAFETY: the data is the boxed vector the tensor owns, `shape`'s product of f32 elements.
    unsafe { initialized.finish() }
}

#[test]
fn from_dlpack_views_host_tensors_as_cuda_core_does() {
    // kDLCPU: device id -1 (None), not device accessible; no stream is used.
    let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let view =
        StridedMemoryView::from_dlpack(host_tensor(data.clone(), &[2, 3]), None, &Stream::legacy_default()).unwrap();
    assert_eq!(
        (view.shape(), view.strides(), view.dtype()),
        (&[2usize, 3][..], None, DType::F32)
    );
    assert_eq!(view.device_id(), None);
    assert!(!view.is_device_accessible() && !view.readonly());
    // The view owns the tensor: its deleter runs when the view goes.
    drop(view);
}

#[test]
fn a_layout_too_large_for_its_memory_names_both_sizes() {
    let data = [0f32; 4];
    let err = StridedMemoryView::from_host_slice(&data, &[5], None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Value);
    assert!(
        err.to_string().contains("Expected at least 20 bytes, got 16 bytes"),
        "{err}"
    );
    let err = StridedMemoryView::from_host_slice(&data, &[2, 2], Some(&[3, 1])).unwrap_err();
    assert!(
        err.to_string().contains("Expected at least 20 bytes, got 16 bytes"),
        "{err}"
    );
}

#[test]
fn a_strided_copy_broadcasts_its_source_on_the_host() {
    // cuda.core: a source of shape S copies into (k,) + S, and extents of 1 repeat.
    let row = [1i32, 2, 3];
    let src = StridedMemoryView::from_host_slice(&row, &[3], None).unwrap();
    let mut out = [0i32; 12];
    let mut dst = StridedMemoryView::from_host_slice_mut(&mut out, &[4, 3], None).unwrap();
    src.copy_to(&mut dst, &Stream::legacy_default()).unwrap();
    drop(dst);
    assert_eq!(out, [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
    let column = [7i32, 8];
    let src = StridedMemoryView::from_host_slice(&column, &[2, 1], None).unwrap();
    let mut out = [0i32; 6];
    let mut dst = StridedMemoryView::from_host_slice_mut(&mut out, &[2, 3], None).unwrap();
    src.copy_to(&mut dst, &Stream::legacy_default()).unwrap();
    drop(dst);
    assert_eq!(out, [7, 7, 7, 8, 8, 8]);
    // Shapes that do not broadcast are still refused.
    let src = StridedMemoryView::from_host_slice(&row, &[3], None).unwrap();
    let mut out = [0i32; 8];
    let mut dst = StridedMemoryView::from_host_slice_mut(&mut out, &[2, 4], None).unwrap();
    let err = src.copy_to(&mut dst, &Stream::legacy_default()).unwrap_err();
    assert!(err.to_string().contains("shapes and dtypes must match"), "{err}");
}

/// A resource whose frees fail after freeing (a driver error in a `Drop`, as cuda.core's
/// `CUDAWarning` reports one).
struct FailingFrees(Arc<SynchronousMemoryResource>);

// SAFETY: allocations and frees are the synchronous resource's; the error is reported after the
// memory was freed.
unsafe impl MemoryResource for FailingFrees {
    fn allocate(&self, size: usize, stream: &Stream) -> cuda_core::Result<cuda_sys::driver::CUdeviceptr> {
        MemoryResource::allocate(&*self.0, size, stream)
    }
    unsafe fn deallocate(
        &self,
        ptr: cuda_sys::driver::CUdeviceptr,
        size: usize,
        stream: &Stream,
    ) -> cuda_core::Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.deallocate(ptr, size, stream) }?;
        Err(CudaError::InvalidState(
            "FailingFrees: this free reports a failure".into(),
        ))
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        false
    }
    fn device(&self) -> Option<Device> {
        self.0.device()
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_error_in_drop_reaches_the_installed_warning_handler() {
    let _serial = serial();
    let (d, s) = setup();
    let seen: Arc<Mutex<Vec<Warning>>> = Arc::default();
    let sink = seen.clone();
    let previous = cuda_core::set_warning_handler(Some(Arc::new(move |w: &Warning| {
        sink.lock().unwrap().push(w.clone());
    })));
    let resource: Arc<dyn MemoryResource> = Arc::new(FailingFrees(SynchronousMemoryResource::new(&d)));
    let b = Buffer::allocate(resource, 256, &s).unwrap();
    b.fill_u8(1, &s).unwrap();
    drop(b);
    // Delivered when the free ran: here, or on the release thread once the stream is idle.
    let started = Instant::now();
    let warning = loop {
        let found = seen
            .lock()
            .unwrap()
            .iter()
            .find(|w| w.message().contains("FailingFrees"))
            .cloned();
        if let Some(w) = found {
            break w;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no warning: {:?}",
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    cuda_core::set_warning_handler(previous);
    assert_eq!(warning.category(), WarningCategory::Cuda);
    assert_eq!(warning.error().map(CudaError::kind), Some(ErrorKind::Runtime));
    // Also kept for take_drop_errors.
    assert!(cuda_core::take_drop_errors()
        .iter()
        .any(|e| e.to_string().contains("FailingFrees")));
}

#[test]
fn error_kinds_say_what_cuda_core_raises() {
    // A ValueError: a layout that does not fit.
    let err = StridedMemoryView::from_host_slice(&[0u8; 2], &[3], None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Value);
    // A note keeps the kind and the first error.
    let noted = err.clone().with_note("a second failure");
    assert_eq!(noted.kind(), ErrorKind::Value);
    assert_eq!(noted.notes(), vec!["a second failure"]);
    assert!(matches!(noted.without_notes(), CudaError::InvalidArgument(_)));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn host_views_report_the_current_device_and_host_tensors_copy_to_the_device() {
    let (d, s) = setup();
    let data: Vec<f32> = (0..8).map(|i| i as f32 * 0.5).collect();
    let host = StridedMemoryView::from_host_slice(&data, &[8], None).unwrap();
    assert_eq!(
        host.device_id(),
        Some(d.device_id()),
        "cuda.core: the current device's id"
    );
    assert!(!host.is_device_accessible());
    // A kDLCPU tensor is copied into device memory (synchronously) and back.
    let view = StridedMemoryView::from_dlpack(host_tensor(data.clone(), &[2, 4]), None, &s).unwrap();
    assert_eq!(view.device_id(), None);
    let buffer = d.allocate(32, &s).unwrap();
    let mut dev = StridedMemoryView::from_buffer(&buffer, &[2, 4], None, DType::F32, false).unwrap();
    dev.copy_from(&view, &s).unwrap();
    assert_eq!(buffer.to_vec::<f32>(&s).unwrap(), data);
    // A too-large layout over a buffer names both sizes.
    let err = StridedMemoryView::from_buffer(&buffer, &[3, 4], None, DType::F32, false).unwrap_err();
    assert!(
        err.to_string().contains("Expected at least 48 bytes, got 32 bytes"),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_strided_copy_broadcasts_on_the_device() {
    let (d, s) = setup();
    // (3,) into (4, 3), device to device (the strided kernel: a zero source stride).
    let row = Buffer::from_slice(d.active_memory_resource().unwrap(), &[1f32, 2.0, 3.0], &s).unwrap();
    let src = StridedMemoryView::from_buffer(&row, &[3], None, DType::F32, false).unwrap();
    let out = d.allocate(48, &s).unwrap();
    let mut dst = StridedMemoryView::from_buffer(&out, &[4, 3], None, DType::F32, false).unwrap();
    src.copy_to(&mut dst, &s).unwrap();
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), [1.0, 2.0, 3.0].repeat(4));
    // (2, 1) into (2, 3).
    let column = Buffer::from_slice(d.active_memory_resource().unwrap(), &[5f32, 6.0], &s).unwrap();
    let src = StridedMemoryView::from_buffer(&column, &[2, 1], None, DType::F32, false).unwrap();
    let out = d.allocate(24, &s).unwrap();
    let mut dst = StridedMemoryView::from_buffer(&out, &[2, 3], None, DType::F32, false).unwrap();
    src.copy_to(&mut dst, &s).unwrap();
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), [5.0, 5.0, 5.0, 6.0, 6.0, 6.0]);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn set_memory_resource_is_what_allocate_uses() {
    let _serial = serial();
    let (d, s) = setup();
    let pools = d.properties().memory_pools_supported().unwrap();
    let default = d.active_memory_resource().unwrap();
    // cuda.core's choice of default: the pool where pools exist, synchronous allocations else.
    assert_eq!(default.frees_in_stream_order(), pools == 1);
    let sync = SynchronousMemoryResource::new(&d);
    let previous = d.set_memory_resource(sync.clone()).unwrap();
    assert!(previous.is_none(), "the default was in use");
    let chosen = d.active_memory_resource().unwrap();
    let chosen_addr = Arc::as_ptr(&chosen) as *const u8;
    assert_eq!(chosen_addr, Arc::as_ptr(&sync) as *const u8);
    // Device::allocate takes the chosen resource: its buffers name it.
    let b = d.allocate(1 << 16, &s).unwrap();
    let resource = b.memory_resource().expect("a resource");
    assert_eq!(Arc::as_ptr(resource) as *const u8, chosen_addr);
    assert!(b.is_device_accessible() && !b.is_host_accessible() && b.device_id() == Some(d.device_id()));
    b.fill_u8(7, &s).unwrap();
    assert_eq!(b.to_vec::<u8>(&s).unwrap(), vec![7u8; 1 << 16]);
    let from_slice = d.allocate_from_slice(&[1u32, 2, 3], &s).unwrap();
    assert_eq!(from_slice.to_vec::<u32>(&s).unwrap(), [1, 2, 3]);
    // Dropped while its stream is busy: freed later (cuMemFree after the stream's work), not
    // waited for here.
    drop(b);
    drop(from_slice);
    s.sync().unwrap();
    // Back to the default.
    let back = d
        .set_memory_resource(default.clone())
        .unwrap()
        .expect("the synchronous one");
    assert_eq!(Arc::as_ptr(&back) as *const u8, chosen_addr);
    let c = d.allocate(64, &s).unwrap();
    assert_eq!(
        Arc::as_ptr(c.memory_resource().unwrap()) as *const u8,
        Arc::as_ptr(&default) as *const u8
    );
    drop(c);
    s.sync().unwrap();
    assert!(cuda_core::take_drop_errors().is_empty());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn the_default_pool_made_inside_a_global_capture_leaves_it_valid() {
    let _serial = serial();
    let d = Device::new(0).unwrap();
    d.set_current().unwrap();
    // Another thread captures in global mode while this one first asks for device 0's default
    // resource (its threshold read and set in relaxed mode, as cuda.core 1.3 does).
    let capturing = d.create_stream(Default::default()).unwrap();
    // The default pool's threshold back at the driver's 0, so that the first use below reads
    // and sets it (what DeviceMemoryResource::default_pool does on a device's first use).
    d.memory_resource().unwrap().set_release_threshold(0).unwrap();
    let mut builder = capturing.begin_capture(cuda_core::graph::CaptureMode::Global).unwrap();
    let made = std::thread::spawn(move || {
        d.set_current().unwrap();
        cuda_core::DeviceMemoryResource::default_pool(&d)
    })
    .join()
    .unwrap();
    // The capture is still valid: it ends into a graph.
    let ended = builder.end_building().map(|_| ());
    assert!(ended.is_ok(), "the capture was invalidated: {:?}", ended.err());
    let threshold = made.unwrap().release_threshold().unwrap();
    assert_eq!(
        threshold,
        u64::MAX,
        "the threshold was raised from 0, as cuda.core raises it"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn nvml_field_values_of_no_fields_nvlinks_and_awaited_events() {
    let s = SysDevice::from_index(0).unwrap();
    // No fields: an empty list, NVML not asked (it would refuse a count of 0).
    assert!(s.get_field_values(&[]).unwrap().is_empty());
    assert!(s.get_scoped_field_values(&[]).unwrap().is_empty());
    s.clear_field_values(&[]).unwrap();
    // NVLinks: a count, and one NvlinkInfo per link; or NVML's refusal on a GPU without them.
    match s.get_nvlink_count() {
        Ok(n) => {
            let links = s.get_nvlinks().unwrap();
            assert_eq!(links.len(), n as usize);
            for (i, l) in links.iter().enumerate() {
                assert_eq!(l.link(), i as u32);
            }
            println!("{n} NVLinks");
        }
        Err(e) => {
            println!("no NVLink count: {e}");
            assert_eq!(e.nvml_kind(), Some(NvmlErrorKind::NotSupported), "{e}");
            assert!(s.get_nvlinks().is_err());
        }
    }
    // An awaited event wait does not block the runtime's thread: a timer on the same
    // single-threaded runtime fires while the wait is pending, and the wait ends by its deadline.
    let supported = s.get_supported_event_types().unwrap();
    let wanted = supported & (EventType::PSTATE | EventType::CLOCK | EventType::XID_CRITICAL_ERROR);
    if wanted.is_empty() {
        println!("no event type to register");
        return;
    }
    let mut events = s.register_events(wanted).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (waited, ticks, took) = runtime.block_on(async {
        let started = Instant::now();
        let ticker = tokio::spawn(async {
            let mut ticks = 0;
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                ticks += 1;
            }
            ticks
        });
        let waited = events.wait_async(Some(Duration::from_millis(400))).await;
        (waited, ticker.await.unwrap(), started.elapsed())
    });
    println!("awaited: {waited:?} after {took:?}");
    assert_eq!(ticks, 3, "the runtime's thread kept running while the wait was pending");
    let event = waited.unwrap();
    assert!(took < Duration::from_millis(400 + 500), "waited {took:?}");
    if let Some(e) = event {
        assert!(wanted.contains(e.event_type));
    }
    // A wait abandoned before its end: the next wait still works.
    drop(events.wait_async(None));
    let started = Instant::now();
    let _ = events.wait(Duration::from_millis(50)).unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
}
