//! DLPack export and import of [`Buffer`]s, through the [`dlpark`] crate (re-exported so both
//! sides use one version).
//!
//! - [`Buffer::to_dlpack`] hands a buffer over as a one-dimensional byte tensor (as `cuda.core`'s
//!   `Buffer.__dlpack__` does); [`Buffer::to_dlpack_as`] gives it an element type, a shape and
//!   strides. The tensor owns the buffer: the DLPack deleter frees it (stream-ordered, on its
//!   deallocation stream).
//! - [`BufferView::to_dlpack`] and [`ReadOnlyView::to_dlpack`] hand a view of a buffer over as a
//!   one-dimensional tensor of its elements, holding a share of the buffer's memory (as
//!   `StridedMemoryView::to_dlpack` does for views that borrow a buffer); [`Buffer::dlpack_device`]
//!   is `cuda.core`'s `Buffer.__dlpack_device__`.
//! - [`Buffer::from_dlpack`] wraps a tensor's memory (CUDA device, pinned host or managed) as a
//!   buffer that owns the tensor: dropping the buffer waits for the work queued on its
//!   deallocation stream, then calls the producer's deleter.
//!
//! As everywhere in DLPack, the consumer orders its work after the producer's: queue it on the
//! same stream, or synchronise first.

use crate::device::Device;
use crate::memory::buffer::Keeper;
use crate::memory::{Buffer, BufferView, PointerInfo, ReadOnlyView};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use dlpark::ffi::{DLDataType, DLDevice, DLDeviceType, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use std::sync::Arc;

pub use dlpark;

/// A DLPack tensor with the versioned ABI (`DLManagedTensorVersioned`).
pub type DlpackTensor = dlpark::versioned::Dlpack;

fn dlpack_error(what: &str, e: impl std::fmt::Display) -> CudaError {
    CudaError::InvalidArgument(format!("DLPack {what}: {e}"))
}

/// The bytes from the first to one past the last element a shape and strides (in elements)
/// reach, or `None` when a stride is negative or the figures overflow.
fn span_bytes(shape: &[i64], strides: &[i64], element_bytes: usize) -> Option<usize> {
    let mut last: u128 = 0;
    for (&d, &s) in shape.iter().zip(strides) {
        if d < 0 || s < 0 {
            return None;
        }
        if d == 0 {
            return Some(0);
        }
        last = last.checked_add((d as u128 - 1).checked_mul(s as u128)?)?;
    }
    let bytes = (last + 1).checked_mul(element_bytes as u128)?;
    usize::try_from(bytes).ok()
}

/// Compact row-major strides of `shape`.
fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1].max(1));
    }
    strides
}

/// Where DLPack says the buffer's memory lives, after `cuda.core`: device-only memory on its
/// device, memory both sides reach as CUDA host (pinned) or managed memory, host-only memory as
/// CPU memory (a buffer of no resource, from `Buffer::from_handle`, knows who reaches it from the
/// driver's pointer attributes).
pub(crate) fn dl_device(buffer: &Buffer) -> Result<DLDevice> {
    let ptr = buffer.handle();
    match (buffer.is_device_accessible(), buffer.is_host_accessible()) {
        (true, false) => {
            let ordinal = match buffer.device_id() {
                Some(d) => i32::try_from(d).map_err(|_| dlpack_error("export", "the device ordinal overflows"))?,
                None => PointerInfo::of(ptr)?.ordinal,
            };
            Ok(DLDevice::cuda(ordinal))
        }
        (true, true) => {
            // Pool-allocated managed memory does not carry the driver's managed attribute: the
            // buffer knows from its resource.
            let device_type = if buffer.is_managed() || PointerInfo::of(ptr)?.managed {
                DLDeviceType::CUDAMANAGED
            } else {
                DLDeviceType::CUDAHOST
            };
            Ok(DLDevice {
                device_type,
                device_id: 0,
            })
        }
        (false, true) => Ok(DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        }),
        (false, false) => Err(dlpack_error(
            "export",
            "buffer is neither device-accessible nor host-accessible",
        )),
    }
}

/// What an exported tensor keeps alive, let go of on the crate's release thread when the
/// consumer calls the tensor's deleter. The consumer may call it from any thread, a driver
/// callback thread of its own included (PyTorch frees from stream callbacks), where CUDA must
/// not be called and which this crate cannot recognise: so the deleter only posts (one channel
/// send, no CUDA call, no wait), and the buffer or share is dropped (its memory freed,
/// stream-ordered) on the release thread.
struct ReleasedLater(Option<Box<dyn std::any::Any + Send>>);

impl ReleasedLater {
    /// `value`, to be dropped on the release thread.
    fn new(value: Box<dyn std::any::Any + Send>) -> Box<ReleasedLater> {
        Box::new(ReleasedLater(Some(value)))
    }
}

impl Drop for ReleasedLater {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            crate::reaper::drop_later(value);
        }
    }
}

/// A versioned tensor of `shape` and `strides` (in elements, explicit) of `dtype` at `data` on
/// `device`, flagged read-only when `readonly`, that keeps `keep` alive until its deleter runs
/// (then dropped on the release thread: see [`ReleasedLater`]). Every export ends here.
///
/// # Safety
/// Every element the layout reaches from `data` lies in memory that `keep` keeps alive; unless
/// `readonly`, the consumer may write it.
pub(crate) unsafe fn tensor(
    shape: Vec<i64>,
    strides: Vec<i64>,
    dtype: DLDataType,
    (device, data): (DLDevice, *mut std::ffi::c_void),
    readonly: bool,
    keep: Box<dyn std::any::Any + Send>,
) -> Result<DlpackTensor> {
    let prepared = Dynamic::new(shape, strides)
        .prepare_as::<DLManagedTensorVersioned>()
        .map_err(|e| dlpack_error("export", e))?;
    let mut initialized = prepared.initialize(ReleasedLater::new(keep));
    initialized.set_device(device);
    initialized.set_data(data);
    initialized.set_dtype(dtype);
    if readonly {
        initialized
            .set_flags(dlpark::DlpackFlags::READ_ONLY)
            .map_err(|e| dlpack_error("export", e))?;
    }
    // SAFETY: the caller's promise: the elements lie in memory the tensor keeps alive through
    // `keep` until its deleter runs; shape and strides are owned by the allocation; the flags
    // say read-only exactly when the memory must not be written.
    Ok(unsafe { initialized.finish() })
}

/// An error unless a tensor can hold on to the memory of `buffer`, which a view borrows: graph
/// memory exists only within its capture, and foreign memory without an owner
/// (`Buffer::from_handle`) is kept alive by nothing once the buffer goes.
pub(crate) fn check_shareable(buffer: &Buffer) -> Result<()> {
    if buffer.is_graph_memory() {
        return Err(dlpack_error(
            "export",
            "graph memory exists only within the capture that allocated it",
        ));
    }
    if buffer.memory_resource().is_none() && buffer.owner().is_none() {
        return Err(dlpack_error(
            "export",
            "the view's buffer wraps foreign memory without an owner (Buffer::from_handle): nothing keeps it alive once the buffer goes; wrap it with Buffer::from_handle_with_owner, or hand the buffer itself over with Buffer::to_dlpack",
        ));
    }
    Ok(())
}

/// Hands `len` elements of `T` from `ptr`, inside `buffer`, over as a one-dimensional tensor
/// that holds a share of the buffer's memory (see [`StridedMemoryView::to_dlpack`]).
///
/// [`StridedMemoryView::to_dlpack`]: crate::StridedMemoryView::to_dlpack
fn export_borrowed<T: dlpark::DlpackElement>(
    buffer: &Buffer,
    ptr: driver::CUdeviceptr,
    len: usize,
    readonly: bool,
) -> Result<DlpackTensor> {
    check_shareable(buffer)?;
    // (The view's constructors checked that its elements lie in the buffer; checked again, as
    // the tensor hands the range to foreign code.)
    let inside = len
        .checked_mul(std::mem::size_of::<T>())
        .zip(ptr.checked_sub(buffer.handle()).and_then(|o| usize::try_from(o).ok()))
        .and_then(|(bytes, offset)| offset.checked_add(bytes))
        .is_some_and(|end| end <= buffer.size());
    if !inside {
        return Err(dlpack_error("export", "the view reaches outside its buffer"));
    }
    let len = i64::try_from(len).map_err(|e| dlpack_error("export", e))?;
    let device = dl_device(buffer)?;
    // SAFETY: data and len elements of T lie in the buffer's memory (checked above), which the
    // tensor keeps alive through its share (freed, stream-ordered, on the buffer's deallocation
    // stream after every stream that used it, once the buffer and the tensor are both gone);
    // memory nobody keeps alive was refused; read-only exactly when the view is.
    unsafe {
        tensor(
            vec![len],
            vec![1],
            T::DTYPE,
            (device, ptr as usize as *mut std::ffi::c_void),
            readonly,
            Box::new(buffer.share()),
        )
    }
}

impl<T: dlpark::DlpackElement> BufferView<'_, T> {
    /// Hands the view over as a one-dimensional DLPack tensor of its elements (versioned ABI,
    /// writable). The tensor holds a share of the buffer's memory, as a graph does: the memory
    /// is freed once the buffer and the tensor are both gone, so the buffer may be dropped
    /// first; from then on the buffer counts as used by a graph
    /// ([`Buffer::is_used_by_graph`]). Refused for graph memory and for foreign memory without
    /// an owner (`Buffer::from_handle`). The consumer orders its work after the producer's, as
    /// for [`Buffer::to_dlpack`].
    pub fn to_dlpack(self) -> Result<DlpackTensor> {
        export_borrowed::<T>(self.buffer(), self.handle(), self.len(), false)
    }
}

impl<T: dlpark::DlpackElement> ReadOnlyView<'_, T> {
    /// Hands the view over as a one-dimensional DLPack tensor of its elements, flagged
    /// read-only (`DLPACK_FLAG_BITMASK_READ_ONLY`); otherwise as [`BufferView::to_dlpack`].
    pub fn to_dlpack(self) -> Result<DlpackTensor> {
        export_borrowed::<T>(self.buffer(), self.handle(), self.len(), true)
    }
}

impl Buffer {
    /// Where DLPack says the buffer's memory lives (`cuda.core`'s `Buffer.__dlpack_device__`):
    /// device-only memory as `kDLCUDA` on its device, memory both the host and the device reach
    /// as `kDLCUDAHost` (pinned) or `kDLCUDAManaged`, host-only memory as `kDLCPU`.
    pub fn dlpack_device(&self) -> Result<DLDevice> {
        dl_device(self)
    }

    /// Hands the buffer over as a one-dimensional tensor of its bytes (`int8`, as `cuda.core`'s
    /// `Buffer.__dlpack__`).
    pub fn to_dlpack(self) -> Result<DlpackTensor> {
        let len = i64::try_from(self.size()).map_err(|e| dlpack_error("export", e))?;
        self.to_dlpack_as::<i8>(&[len], None)
    }

    /// Hands the buffer over as a tensor of `T` with `shape` and `strides` (in elements;
    /// compact row-major when `None`), which must stay inside the buffer.
    pub fn to_dlpack_as<T: dlpark::DlpackElement>(
        self,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<DlpackTensor> {
        if self.is_graph_memory() {
            return Err(dlpack_error(
                "export",
                "graph memory exists only within the capture that allocated it",
            ));
        }
        let strides = match strides {
            Some(s) if s.len() != shape.len() => {
                return Err(dlpack_error(
                    "export",
                    format!("{} strides for {} dimensions", s.len(), shape.len()),
                ))
            }
            Some(s) => s.to_vec(),
            None => compact_strides(shape),
        };
        let span = span_bytes(shape, &strides, std::mem::size_of::<T>()).ok_or_else(|| {
            dlpack_error(
                "export",
                format!("shape {shape:?} with strides {strides:?} has a negative or overflowing extent"),
            )
        })?;
        if span > self.size() {
            return Err(dlpack_error(
                "export",
                format!(
                    "shape {shape:?} with strides {strides:?} reaches {span} bytes, past the buffer's {}",
                    self.size()
                ),
            ));
        }
        let device = dl_device(&self)?;
        let data = self.handle() as usize as *mut std::ffi::c_void;
        // SAFETY: data is the buffer's memory, which the extent checked above lies in and which
        // the tensor owns (the buffer is handed over); writable, as the buffer is.
        unsafe { tensor(shape.to_vec(), strides, T::DTYPE, (device, data), false, Box::new(self)) }
    }

    /// Wraps the memory of a DLPack tensor (CUDA device, pinned host or managed) as a buffer
    /// covering every element it reaches. The buffer owns the tensor; `stream` becomes its
    /// deallocation stream: dropping the buffer waits for it, then calls the tensor's deleter.
    pub fn from_dlpack(tensor: DlpackTensor, stream: &Stream) -> Result<Buffer> {
        if tensor.flags().contains(dlpark::DlpackFlags::READ_ONLY) {
            // A buffer can be written: the producer's read-only memory must not be.
            return Err(dlpack_error(
                "import",
                "the tensor is read-only, and a Buffer can be written: copy it, or export it writable",
            ));
        }
        let (ptr, size, device) = {
            let view = tensor.validate().map_err(|e| dlpack_error("import", e))?;
            let dev = view.device();
            // Device memory belongs to its device; pinned and managed memory to none (the host
            // reaches them too).
            let device = match dev.device_type {
                DLDeviceType::CUDA => {
                    let id = usize::try_from(dev.device_id)
                        .map_err(|_| dlpack_error("import", format!("device id {} is negative", dev.device_id)))?;
                    Some(Device::new(id)?)
                }
                DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED => None,
                other => {
                    return Err(dlpack_error(
                        "import",
                        format!(
                            "the tensor lives on device type {} (only CUDA, CUDA host and CUDA managed memory can be wrapped)",
                            other.0
                        ),
                    ))
                }
            };
            let dtype: DLDataType = view.dtype();
            let bits = dtype.bits as usize * dtype.lanes as usize;
            if bits == 0 || !bits.is_multiple_of(8) {
                return Err(dlpack_error(
                    "import",
                    format!("elements of {bits} bits are not whole bytes"),
                ));
            }
            let strides = view.strides_or_compact().map_err(|e| dlpack_error("import", e))?;
            let span = span_bytes(view.shape(), &strides, bits / 8).ok_or_else(|| {
                dlpack_error(
                    "import",
                    "negative strides or an overflowing extent cannot be wrapped as a buffer",
                )
            })?;
            let base = view.data_ptr() as usize as u64;
            let ptr = base
                .checked_add(view.byte_offset())
                .ok_or_else(|| dlpack_error("import", "the byte offset overflows"))?;
            (ptr, span, device)
        };
        let resource = tensor_memory(tensor, device, false);
        Buffer::from_parts(ptr, size, Some(resource), stream)
    }
}

/// The resource of an imported DLPack tensor's memory: a [`Keeper`] of the tensor (its deleter
/// runs after the work queued on the buffer), for device memory of `device`, or pinned and
/// managed memory (`None`) the host reaches too; read-only memory answers neither.
pub(crate) fn tensor_memory(tensor: DlpackTensor, device: Option<Device>, readonly: bool) -> Arc<Keeper> {
    Arc::new(Keeper::new(
        Arc::new(tensor),
        device,
        (!readonly, !readonly && device.is_none()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_and_compact_strides() {
        assert_eq!(compact_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(compact_strides(&[5]), vec![1]);
        assert_eq!(span_bytes(&[2, 3], &[3, 1], 4), Some(24));
        assert_eq!(span_bytes(&[2, 3], &[1, 2], 4), Some(24), "column-major");
        assert_eq!(span_bytes(&[4], &[2], 1), Some(7), "strided: up to the last element");
        assert_eq!(span_bytes(&[0, 3], &[3, 1], 4), Some(0));
        assert_eq!(span_bytes(&[2], &[-1], 4), None);
        assert_eq!(span_bytes(&[i64::MAX, 2], &[i64::MAX, 1], 8), None);
    }

    #[test]
    fn a_read_only_tensor_is_not_made_a_writable_buffer() {
        let data: Box<Vec<u8>> = Box::new(vec![1, 2, 3]);
        let ptr = data.as_ptr().cast_mut().cast();
        let mut initialized = Dynamic::compact(vec![3i64])
            .prepare_as::<DLManagedTensorVersioned>()
            .unwrap()
            .initialize(data);
        initialized.set_device(DLDevice::cuda(0));
        initialized.set_data(ptr);
        initialized.set_dtype(<u8 as dlpark::DlpackElement>::DTYPE);
        initialized.set_flags(dlpark::DlpackFlags::READ_ONLY).unwrap();
        // SAFETY: the data is the boxed vector the tensor owns; three u8 elements. (It is never
        // read: the tensor is refused first.)
        let tensor = unsafe { initialized.finish() };
        let err = Buffer::from_dlpack(tensor, &Stream::legacy_default()).unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
    }

    #[test]
    fn a_host_tensor_is_refused_with_its_device_type() {
        let data: Box<Vec<u32>> = Box::new(vec![1, 2, 3]);
        let ptr = data.as_ptr().cast_mut().cast();
        let mut initialized = Dynamic::compact(vec![3i64])
            .prepare_as::<DLManagedTensorVersioned>()
            .unwrap()
            .initialize(data);
        initialized.set_device(DLDevice::CPU);
        initialized.set_data(ptr);
        initialized.set_dtype(<u32 as dlpark::DlpackElement>::DTYPE);
        // SAFETY: the data is the boxed vector the tensor owns; three u32 elements.
        let tensor = unsafe { initialized.finish() };
        let err = Buffer::from_dlpack(tensor, &Stream::legacy_default()).unwrap_err();
        assert!(err.to_string().contains("device type 1"), "{err}");
    }

    /// A host DLPack tensor of `data` that sets `dropped` when its producer's deleter runs.
    fn host_tensor(data: Vec<u32>, dropped: &Arc<std::sync::atomic::AtomicBool>) -> DlpackTensor {
        struct Producer(Vec<u32>, Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Producer {
            fn drop(&mut self) {
                self.1.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let len = data.len() as i64;
        let producer = Box::new(Producer(data, dropped.clone()));
        let ptr = producer.0.as_ptr().cast_mut().cast();
        let mut initialized = Dynamic::compact(vec![len])
            .prepare_as::<DLManagedTensorVersioned>()
            .unwrap()
            .initialize(producer);
        initialized.set_device(DLDevice::CPU);
        initialized.set_data(ptr);
        initialized.set_dtype(<u32 as dlpark::DlpackElement>::DTYPE);
        // SAFETY: the data is the boxed vector the tensor owns, of `len` u32 elements.
        unsafe { initialized.finish() }
    }

    #[test]
    fn a_host_view_that_owns_its_tensor_is_handed_over_and_keeps_it() {
        use crate::memory::StridedMemoryView;
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tensor = host_tensor(vec![7, 8, 9, 10], &dropped);
        let data = tensor.validate().unwrap().data_ptr();
        let view = StridedMemoryView::from_dlpack(tensor, None, &Stream::legacy_default()).unwrap();
        assert_eq!(view.dlpack_device().unwrap().device_type, DLDeviceType::CPU);
        let again = view.to_dlpack().unwrap();
        {
            let v = again.validate().unwrap();
            assert_eq!((v.data_ptr(), v.shape()), (data, &[4i64][..]));
            assert_eq!(v.strides().unwrap(), &[1]);
            assert_eq!(v.device().device_type, DLDeviceType::CPU);
            assert!(!again.flags().contains(dlpark::DlpackFlags::READ_ONLY));
        }
        assert!(
            !dropped.load(std::sync::atomic::Ordering::SeqCst),
            "the view's tensor was kept"
        );
        let back = StridedMemoryView::from_dlpack(again, None, &Stream::legacy_default()).unwrap();
        assert_eq!((back.ptr(), back.shape()), (data as u64, &[4usize][..]));
        // SAFETY: four u32 at data, which the producer (alive: checked above) owns.
        let seen = unsafe { std::slice::from_raw_parts(data as *const u32, 4) };
        assert_eq!(seen, [7, 8, 9, 10]);
        drop(back);
        // The deleter posts the producer to the release thread, which drops it.
        let start = std::time::Instant::now();
        while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "the last deleter did not free it"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn views_of_memory_nothing_keeps_alive_are_not_handed_over() {
        use crate::memory::{DType, StridedMemoryView};
        let data = [1.0f32, 2.0, 3.0];
        let slice = StridedMemoryView::from_host_slice(&data, &[3], None).unwrap();
        assert_eq!(slice.dlpack_device().unwrap().device_type, DLDeviceType::CPU);
        let err = slice.to_dlpack().err().unwrap();
        assert!(matches!(err, CudaError::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("borrows host memory"), "{err}");
        // A re-view of a host view that owns its tensor borrows it: refused too.
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let owner =
            StridedMemoryView::from_dlpack(host_tensor(vec![1, 2], &dropped), None, &Stream::legacy_default()).unwrap();
        let err = owner.view(&[2], None, DType::U32).unwrap().to_dlpack().err().unwrap();
        assert!(err.to_string().contains("borrows host memory"), "{err}");
        // SAFETY: the view is never read or written: only its export is tried.
        let raw =
            unsafe { StridedMemoryView::from_raw(data.as_ptr() as u64, &[3], None, DType::F32, None, false, true) }
                .unwrap();
        assert_eq!(raw.dlpack_device().unwrap().device_type, DLDeviceType::CPU);
        let err = raw.to_dlpack().err().unwrap();
        assert!(err.to_string().contains("from_raw"), "{err}");
    }
}
