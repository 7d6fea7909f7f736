//! StridedMemoryView on the GPU: views of buffers, host slices and DLPack tensors, their
//! layouts checked, copies between them verified element by element, and views as kernel
//! arguments.

use cuda_core::{
    Buffer, CodeType, DType, Device, LaunchConfig, Program, ProgramOptions, SourceType, Stream, StridedMemoryView,
};

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_views_of_buffers_and_host_slices_round_trip() {
    let (d, s) = setup();
    let data: Vec<f32> = (0..6).map(|i| i as f32 * 1.5).collect();
    let buffer = d.allocate(24, &s).unwrap();
    let mut dev = StridedMemoryView::from_buffer(&buffer, &[2, 3], None, DType::F32, false).unwrap();
    assert_eq!(
        (dev.shape(), dev.strides(), dev.dtype()),
        (&[2usize, 3][..], None, DType::F32)
    );
    assert_eq!(dev.size().unwrap(), 6);
    assert_eq!(dev.device_id(), Some(d.device_id()));
    assert!(dev.is_device_accessible() && !dev.readonly() && dev.is_c_contiguous());
    // Host to device and back, through views.
    let host = StridedMemoryView::from_host_slice(&data, &[2, 3], None).unwrap();
    // As cuda.core's from_array_interface: the current device's id, not device accessible.
    assert!(host.readonly() && host.device_id() == Some(d.device_id()) && !host.is_device_accessible());
    dev.copy_from(&host, &s).unwrap();
    assert_eq!(buffer.to_vec::<f32>(&s).unwrap(), data);
    let mut back = vec![0f32; 6];
    let mut out = StridedMemoryView::from_host_slice_mut(&mut back, &[2, 3], Some(&[3, 1])).unwrap();
    assert!(out.strides().is_none(), "row-major strides read back as None");
    dev.copy_to(&mut out, &s).unwrap();
    drop(out);
    assert_eq!(back, data);
    // A read-only view is not written.
    let mut ro = StridedMemoryView::from_buffer(&buffer, &[6], None, DType::F32, true).unwrap();
    let err = ro
        .copy_from(&host.view(&[6], None, DType::F32).unwrap(), &s)
        .unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(ro.buffer().is_none() && ro.kernel_arg::<f32>().is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_layouts_are_checked_before_use() {
    let (d, s) = setup();
    let buffer = d.allocate(64, &s).unwrap();
    // 16 floats fit; 17 do not, nor a stride that reaches past the end.
    assert!(StridedMemoryView::from_buffer(&buffer, &[4, 4], None, DType::F32, false).is_ok());
    // As cuda.core says it: both sizes named.
    for (shape, strides, needed) in [(&[17usize][..], None, 68), (&[4, 4][..], Some(&[5isize, 1][..]), 76)] {
        let err = StridedMemoryView::from_buffer(&buffer, shape, strides, DType::F32, false).unwrap_err();
        let expected = format!("Expected at least {needed} bytes, got 64 bytes");
        assert!(err.to_string().contains(&expected), "{err}");
    }
    // Negative strides reach before element 0, which is the buffer's start here.
    let err = StridedMemoryView::from_buffer(&buffer, &[4], Some(&[-1]), DType::F32, false).unwrap_err();
    assert!(err.to_string().contains("reaches outside"), "{err}");
    // Strides for another number of dimensions, and overflowing layouts.
    assert!(StridedMemoryView::from_buffer(&buffer, &[4, 4], Some(&[4]), DType::F32, false).is_err());
    assert!(StridedMemoryView::from_buffer(&buffer, &[usize::MAX, 2], None, DType::F32, false).is_err());
    // Zero-size dimensions view nothing, anywhere.
    let empty = StridedMemoryView::from_buffer(&buffer, &[0, 100], None, DType::F64, false).unwrap();
    assert_eq!(empty.size().unwrap(), 0);
    // Re-views stay inside the same memory.
    let v = StridedMemoryView::from_buffer(&buffer, &[16], None, DType::F32, false).unwrap();
    let bytes = v.view(&[64], None, DType::U8).unwrap();
    assert_eq!((bytes.dtype(), bytes.size().unwrap()), (DType::U8, 64));
    assert!(v.view(&[9], None, DType::F64).is_err());
    // Typed kernel arguments check the dtype.
    let err = v.kernel_arg::<u32>().unwrap_err();
    assert!(err.to_string().contains("float32"), "{err}");
    // Shapes and dtypes of copies must match.
    let other = d.allocate(64, &s).unwrap();
    let mut w = StridedMemoryView::from_buffer(&other, &[8], None, DType::F32, false).unwrap();
    let err = v.copy_to(&mut w, &s).unwrap_err();
    assert!(err.to_string().contains("shapes and dtypes must match"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_copies_of_pitched_rows() {
    let (d, s) = setup();
    // A 4x8 matrix on the device; its left 4x3 block is rows of 3, 8 apart.
    let full: Vec<u32> = (0..32).collect();
    let matrix = d.allocate_from_slice(&full, &s).unwrap();
    let block = StridedMemoryView::from_buffer(&matrix, &[4, 3], Some(&[8, 1]), DType::U32, false).unwrap();
    assert_eq!(block.strides(), Some(&[8isize, 1][..]));
    let mut dense = vec![0u32; 12];
    let mut out = StridedMemoryView::from_host_slice_mut(&mut dense, &[4, 3], None).unwrap();
    block.copy_to(&mut out, &s).unwrap();
    drop(out);
    for r in 0..4 {
        for c in 0..3 {
            assert_eq!(dense[r * 3 + c], full[r * 8 + c], "element ({r}, {c})");
        }
    }
    // Into a strided destination: rows of 3, 5 apart, in another buffer.
    let target = d.allocate(4 * 5 * 4, &s).unwrap();
    target.fill_u32(u32::MAX, &s).unwrap();
    let mut into = StridedMemoryView::from_buffer(&target, &[4, 3], Some(&[5, 1]), DType::U32, false).unwrap();
    into.copy_from(&block, &s).unwrap();
    let got = target.to_vec::<u32>(&s).unwrap();
    for r in 0..4 {
        for c in 0..5 {
            let want = if c < 3 { full[r * 8 + c] } else { u32::MAX };
            assert_eq!(got[r * 5 + c], want, "element ({r}, {c})");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_copies_of_any_layout_use_the_kernel() {
    let (d, s) = setup();
    // The transpose of a 4x8 matrix: an 8x4 view with strides (1, 8), copied dense.
    let full: Vec<u32> = (0..32).map(|i| i * 3 + 1).collect();
    let matrix = d.allocate_from_slice(&full, &s).unwrap();
    let transposed = StridedMemoryView::from_buffer(&matrix, &[8, 4], Some(&[1, 8]), DType::U32, false).unwrap();
    let out = d.allocate(32 * 4, &s).unwrap();
    let mut dense = StridedMemoryView::from_buffer(&out, &[8, 4], None, DType::U32, false).unwrap();
    dense.copy_from(&transposed, &s).unwrap();
    let got = out.to_vec::<u32>(&s).unwrap();
    for r in 0..8 {
        for c in 0..4 {
            assert_eq!(got[r * 4 + c], full[c * 8 + r], "element ({r}, {c})");
        }
    }
    // A reversed view (negative stride) of 16-byte elements, and a 3-dimensional layout of f16.
    let pairs: Vec<[f64; 2]> = (0..10).map(|i| [i as f64, -(i as f64)]).collect();
    let src = d.allocate_from_slice(&pairs, &s).unwrap();
    // SAFETY: ten 16-byte elements from the last one backwards lie in `src`, alive meanwhile.
    let reversed = unsafe {
        StridedMemoryView::from_raw(
            src.handle() + 9 * 16,
            &[10],
            Some(&[-1]),
            DType::Complex128,
            Some(d.device_id()),
            true,
            true,
        )
    }
    .unwrap();
    let dst = d.allocate(160, &s).unwrap();
    StridedMemoryView::from_buffer(&dst, &[10], None, DType::Complex128, false)
        .unwrap()
        .copy_from(&reversed, &s)
        .unwrap();
    let got = dst.to_vec::<[f64; 2]>(&s).unwrap();
    assert!(got.iter().enumerate().all(|(i, v)| *v == pairs[9 - i]));
    let halves: Vec<half::f16> = (0..24).map(|i| half::f16::from_f32(i as f32)).collect();
    let cube = d.allocate_from_slice(&halves, &s).unwrap();
    // (2, 3, 4) seen with its axes reversed: (4, 3, 2) with strides (1, 4, 12).
    let axes = StridedMemoryView::from_buffer(&cube, &[4, 3, 2], Some(&[1, 4, 12]), DType::F16, false).unwrap();
    let out = d.allocate(48, &s).unwrap();
    StridedMemoryView::from_buffer(&out, &[4, 3, 2], None, DType::F16, false)
        .unwrap()
        .copy_from(&axes, &s)
        .unwrap();
    let got = out.to_vec::<half::f16>(&s).unwrap();
    for i in 0..4 {
        for j in 0..3 {
            for k in 0..2 {
                assert_eq!(
                    got[i * 6 + j * 2 + k],
                    halves[k * 12 + j * 4 + i],
                    "element ({i}, {j}, {k})"
                );
            }
        }
    }
    // A host view of any layout is staged: the transposed device view into a dense host view
    // (through a dense device buffer), and back from a transposed host view.
    let mut host = vec![0u32; 32];
    let mut out = StridedMemoryView::from_host_slice_mut(&mut host, &[8, 4], None).unwrap();
    transposed.copy_to(&mut out, &s).unwrap();
    drop(out);
    for r in 0..8 {
        for c in 0..4 {
            assert_eq!(host[r * 4 + c], full[c * 8 + r], "host element ({r}, {c})");
        }
    }
    let from_host = StridedMemoryView::from_host_slice(&full, &[8, 4], Some(&[1, 8])).unwrap();
    let out2 = d.allocate(32 * 4, &s).unwrap();
    let mut dense2 = StridedMemoryView::from_buffer(&out2, &[8, 4], None, DType::U32, false).unwrap();
    dense2.copy_from(&from_host, &s).unwrap();
    assert_eq!(out2.to_vec::<u32>(&s).unwrap(), host);
    // A broadcast destination is refused.
    let mut broadcast = StridedMemoryView::from_buffer(&matrix, &[8, 4], Some(&[0, 1]), DType::U32, false).unwrap();
    let err = broadcast.copy_from(&transposed, &s).unwrap_err();
    assert!(err.to_string().contains("zero stride"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_views_of_dlpack_tensors_keep_them_and_follow_the_producer() {
    let (d, s) = setup();
    let producer = d.create_stream(Default::default()).unwrap();
    // A 2x3 tensor of f32 with rows 4 apart (padding), filled on the producer's stream.
    let values: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let buffer = Buffer::from_slice(d.memory_resource().unwrap(), &values, &producer).unwrap();
    buffer.fill_u32(7.0f32.to_bits(), &producer).unwrap();
    let tensor = buffer.to_dlpack_as::<f32>(&[2, 3], Some(&[4, 1])).unwrap();
    let view = StridedMemoryView::from_dlpack(tensor, Some(&producer), &s).unwrap();
    assert_eq!(
        (view.shape(), view.strides(), view.dtype()),
        (&[2usize, 3][..], Some(&[4isize, 1][..]), DType::F32)
    );
    assert_eq!(view.device_id(), Some(d.device_id()));
    // The producer granted the elements, not the padding between rows: no buffer is lent, no
    // re-view with another layout, no kernel argument (whose buffer would reach the padding).
    assert!(view.buffer().is_none() && !view.readonly());
    assert!(view.view(&[8], None, DType::F32).is_err());
    assert!(view.view(&[2, 3], Some(&[4, 1]), DType::F32).is_ok());
    assert!(view.kernel_arg::<f32>().is_err());
    let mut host = vec![0f32; 6];
    let mut out = StridedMemoryView::from_host_slice_mut(&mut host, &[2, 3], None).unwrap();
    view.copy_to(&mut out, &s).unwrap();
    drop(out);
    assert_eq!(host, [7.0; 6], "the consumer saw the producer's fill");
    // A dense tensor's view is a kernel argument for a float*: double every element it reaches.
    let dense = d.allocate_from_slice(&[7.0f32; 8], &s).unwrap();
    let view = StridedMemoryView::from_dlpack(dense.to_dlpack_as::<f32>(&[2, 4], None).unwrap(), None, &s).unwrap();
    assert!(view.buffer().is_some());
    let source = r#"extern "C" __global__ void twice(float* x, int rows, int cols, int pitch) {
        int r = blockIdx.x, c = threadIdx.x;
        if (r < rows && c < cols) x[r * pitch + c] *= 2.0f;
    }"#;
    let kernel = Program::new(source, SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("twice")
        .unwrap()
        .typed::<(*mut f32, i32, i32, i32)>()
        .unwrap();
    // SAFETY: the kernel touches rows x cols elements, pitch apart, which the view holds.
    unsafe {
        kernel.launch(
            &s,
            &LaunchConfig::new(2, 4),
            (view.kernel_arg::<f32>().unwrap(), 2, 4, 4),
        )
    }
    .unwrap();
    let mut host = vec![0f32; 8];
    let mut out = StridedMemoryView::from_host_slice_mut(&mut host, &[2, 4], None).unwrap();
    view.copy_to(&mut out, &s).unwrap();
    drop(out);
    assert_eq!(host, [14.0; 8]);
    drop(view);
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_views_hand_their_memory_over_as_dlpack_and_back() {
    let (d, s) = setup();
    let values: Vec<i32> = (0..12).collect();
    let buffer = d.allocate_from_slice(&values, &s).unwrap();
    let owned = StridedMemoryView::from_buffer_owned(buffer, &[3, 4], Some(&[4, 1]), DType::I32, false).unwrap();
    let tensor = owned.to_dlpack().unwrap();
    {
        let v = tensor.validate().unwrap();
        assert_eq!(v.shape(), &[3, 4]);
        assert_eq!(v.strides().unwrap(), &[4, 1]);
    }
    let back = StridedMemoryView::from_dlpack(tensor, None, &s).unwrap();
    assert_eq!((back.shape(), back.dtype()), (&[3usize, 4][..], DType::I32));
    let mut host = vec![0i32; 12];
    back.copy_to(
        &mut StridedMemoryView::from_host_slice_mut(&mut host, &[3, 4], None).unwrap(),
        &s,
    )
    .unwrap();
    assert_eq!(host, values);
    // The read-only flag travels both ways.
    let other = d.allocate(16, &s).unwrap();
    let owned = StridedMemoryView::from_buffer_owned(other, &[4], None, DType::F32, true).unwrap();
    let tensor = owned.to_dlpack().unwrap();
    assert!(tensor
        .flags()
        .contains(cuda_core::dlpack::dlpark::DlpackFlags::READ_ONLY));
    let ro = StridedMemoryView::from_dlpack(tensor, None, &s).unwrap();
    assert!(ro.readonly() && ro.buffer().is_none());
    // Handed over again, still read-only and on its device.
    let again = ro.to_dlpack().unwrap();
    assert!(again
        .flags()
        .contains(cuda_core::dlpack::dlpark::DlpackFlags::READ_ONLY));
    assert_eq!(again.validate().unwrap().device().device_id, d.device_id() as i32);
}

// cuda.core's StridedMemoryView.__dlpack__ / __dlpack_device__ for a view that borrows its
// buffer, and BufferView / ReadOnlyView exports: the tensor holds a share of the buffer's memory,
// which stays alive after the view and the buffer are dropped, until the consumer lets go.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn borrowed_views_hand_over_dlpack_tensors_that_keep_the_memory() {
    use cuda_core::dlpack::dlpark::{ffi::DLDeviceType, DlpackFlags};
    let (d, s) = setup();
    let values: Vec<i32> = (0..12).collect();
    let buffer = d.allocate_from_slice(&values, &s).unwrap();
    let base = buffer.handle();
    let device = buffer.dlpack_device().unwrap();
    assert_eq!(
        (device.device_type, device.device_id),
        (DLDeviceType::CUDA, d.device_id() as i32)
    );
    // A transposed view of the 3x4 matrix the buffer holds.
    let view = StridedMemoryView::from_buffer(&buffer, &[3, 4], None, DType::I32, false).unwrap();
    let transposed = view.view(&[4, 3], Some(&[1, 4]), DType::I32).unwrap();
    let place = transposed.dlpack_device().unwrap();
    assert_eq!(
        (place.device_type, place.device_id),
        (device.device_type, device.device_id)
    );
    let tensor = transposed.to_dlpack().unwrap();
    {
        let v = tensor.validate().unwrap();
        assert_eq!((v.shape(), v.strides().unwrap()), (&[4i64, 3][..], &[1i64, 4][..]));
        assert_eq!(v.data_ptr() as u64, base);
        assert_eq!(v.device().device_type, DLDeviceType::CUDA);
        assert!(!tensor.flags().contains(DlpackFlags::READ_ONLY));
    }
    assert!(
        buffer.is_used_by_graph(),
        "the buffer shares its memory with the tensor"
    );
    drop(view);
    drop(buffer);
    // Freed, the block would come back from the pool for the same size on the same stream.
    let other = d.allocate(48, &s).unwrap();
    assert_ne!(other.handle(), base, "the tensor keeps the memory");
    other.fill_u8(0xff, &s).unwrap();
    let back = StridedMemoryView::from_dlpack(tensor, Some(&s), &s).unwrap();
    let mut host = vec![0i32; 12];
    back.copy_to(
        &mut StridedMemoryView::from_host_slice_mut(&mut host, &[4, 3], None).unwrap(),
        &s,
    )
    .unwrap();
    let expected: Vec<i32> = (0..4).flat_map(|i| (0..3).map(move |j| j * 4 + i)).collect();
    assert_eq!(host, expected);
    drop(back);

    // Buffer views: one-dimensional tensors of their elements, writable or read-only.
    let buffer = d.allocate_from_slice(&values, &s).unwrap();
    let elements = buffer.view_as::<i32>().unwrap().slice(2..6).unwrap();
    let writable = elements.to_dlpack().unwrap();
    let read_only = elements.read_only().to_dlpack().unwrap();
    assert_eq!(writable.validate().unwrap().data_ptr() as u64, buffer.handle() + 8);
    assert_eq!(writable.validate().unwrap().shape(), &[4]);
    assert!(read_only.flags().contains(DlpackFlags::READ_ONLY));
    drop(buffer);
    let imported = Buffer::from_dlpack(writable, &s).unwrap();
    assert_eq!(imported.to_vec::<i32>(&s).unwrap(), [2, 3, 4, 5]);
    let ro = StridedMemoryView::from_dlpack(read_only, None, &s).unwrap();
    assert!(ro.readonly());
    let mut host = vec![0i32; 4];
    ro.copy_to(
        &mut StridedMemoryView::from_host_slice_mut(&mut host, &[4], None).unwrap(),
        &s,
    )
    .unwrap();
    assert_eq!(host, [2, 3, 4, 5]);
    drop((imported, ro));

    // Foreign memory nobody keeps alive is refused (the buffer itself can still be handed over).
    let owner = d.allocate(64, &s).unwrap();
    // SAFETY: owner's 64 bytes outlive the foreign buffer (dropped first, below).
    let foreign = unsafe { Buffer::from_handle(owner.handle(), 64, &s) }.unwrap();
    let err = foreign.view(0, 64).unwrap().to_dlpack().err().expect("refused");
    assert!(err.to_string().contains("without an owner"), "{err}");
    let strided = StridedMemoryView::from_buffer(&foreign, &[16], None, DType::F32, false).unwrap();
    let err = strided.to_dlpack().err().expect("refused");
    assert!(err.to_string().contains("without an owner"), "{err}");
    drop(foreign);
    s.sync().unwrap();
}

/// Accepts anything viewable, as `args_viewable_as_strided_memory` does, and copies it to the
/// device as bytes.
fn to_device(arg: &(impl cuda_core::AsStridedView + ?Sized), d: &Device, s: &Stream) -> Vec<u8> {
    let view = arg.as_strided_view(s).unwrap();
    let bytes = view.size().unwrap() * view.dtype().itemsize();
    let out = d.allocate(bytes, s).unwrap();
    let mut dst = StridedMemoryView::from_buffer(&out, view.shape(), None, view.dtype(), false).unwrap();
    dst.copy_from(&view, s).unwrap();
    out.to_vec::<u8>(s).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn strided_views_of_anything_viewable() {
    let (d, s) = setup();
    let host: Vec<u16> = vec![0x0102, 0x0304];
    assert_eq!(to_device(&host, &d, &s), [2, 1, 4, 3]);
    assert_eq!(to_device(&host[1..], &d, &s), [4, 3]);
    let buffer = d.allocate_from_slice(&[9u8, 8, 7], &s).unwrap();
    assert_eq!(to_device(&buffer, &d, &s), [9, 8, 7]);
    let view = StridedMemoryView::from_buffer(&buffer, &[3], None, DType::U8, false).unwrap();
    assert_eq!(to_device(&view, &d, &s), [9, 8, 7]);
}
