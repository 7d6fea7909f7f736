//! Views that own their memory, handed over as DLPack tensors; and [`AsStridedView`], what a
//! function takes to accept anything viewable (`cuda.core`'s `args_viewable_as_strided_memory`).

use super::{Backing, DType, Element, StridedMemoryView};
use crate::memory::buffer::Buffer;
use crate::memory::dlpack::{dl_device, DlpackTensor};
use crate::stream::Stream;
use crate::{CudaError, Result};
use dlpark::ffi::DLManagedTensorVersioned;
use dlpark::metadata::Dynamic;

impl StridedMemoryView<'static> {
    /// A view that owns `buffer` (element 0 at its start), so that it can be kept, sent to
    /// another thread, or handed over with [`to_dlpack`](Self::to_dlpack). On an error (a
    /// layout outside the buffer) the buffer is dropped, and so freed.
    pub fn from_buffer_owned(
        buffer: Buffer,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        readonly: bool,
    ) -> Result<StridedMemoryView<'static>> {
        // The borrowed view's parts, over the buffer the view then owns (moving it leaves its
        // memory where it is).
        let view = StridedMemoryView::from_buffer(&buffer, shape, strides, dtype, readonly)?.with_backing(Backing::Raw);
        Ok(view.with_backing(Backing::Owned(Box::new(buffer))))
    }

    /// Hands the view over as a DLPack tensor (`cuda.core`'s `__dlpack__`): its shape, strides
    /// (always explicit), dtype, element 0 as the data pointer, and the read-only flag. The
    /// tensor owns the memory. Only views that own their memory (`from_dlpack`,
    /// `from_buffer_owned`) can be handed over; on an error the view (and its memory) is
    /// dropped.
    pub fn to_dlpack(self) -> Result<DlpackTensor> {
        let export = |e: String| CudaError::InvalidArgument(format!("DLPack export: {e}"));
        let strides = self.strides_or_row_major()?;
        let Backing::Owned(buffer) = self.backing else {
            return Err(export(
                "only a view that owns its memory (from_dlpack, from_buffer_owned) can be handed over".into(),
            ));
        };
        if buffer.is_graph_memory() {
            return Err(export(
                "graph memory exists only within the capture that allocated it".into(),
            ));
        }
        // A read-only buffer reports no access (so that nothing writes it): its place comes
        // from the view and the driver instead.
        let device = if self.readonly {
            match self.device_id {
                Some(d) => dlpark::ffi::DLDevice::cuda(d as i32),
                None => dlpark::ffi::DLDevice {
                    device_type: if crate::memory::PointerInfo::of(self.ptr)?.managed {
                        dlpark::ffi::DLDeviceType::CUDAMANAGED
                    } else {
                        dlpark::ffi::DLDeviceType::CUDAHOST
                    },
                    device_id: 0,
                },
            }
        } else {
            dl_device(&buffer)?
        };
        let wide = |v: &[isize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
        let shape: Vec<i64> = self
            .shape
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| export(format!("dimension {d} overflows"))))
            .collect::<Result<_>>()?;
        let prepared = Dynamic::new(shape, wide(&strides))
            .prepare_as::<DLManagedTensorVersioned>()
            .map_err(|e| export(e.to_string()))?;
        let mut initialized = prepared.initialize(buffer);
        initialized.set_device(device);
        initialized.set_data(self.ptr as usize as *mut std::ffi::c_void);
        initialized.set_dtype(self.dtype.to_dlpack());
        if self.readonly {
            initialized
                .set_flags(dlpark::DlpackFlags::READ_ONLY)
                .map_err(|e| export(e.to_string()))?;
        }
        // SAFETY: the data pointer is element 0 of a layout checked to lie in the buffer, which
        // the tensor owns (the Box above); shape and strides are owned by the allocation; the
        // flags say read-only exactly when the view was.
        Ok(unsafe { initialized.finish() })
    }
}

/// What can be seen as a [`StridedMemoryView`]: buffers (their bytes), views (themselves), host
/// slices of [`Element`]s (one dimension). A function that takes `&impl AsStridedView` accepts
/// all of them and picks the stream the view is made for, as `cuda.core`'s
/// `args_viewable_as_strided_memory` lets the callee choose.
pub trait AsStridedView {
    /// The view, for work ordered on `stream`.
    fn as_strided_view(&self, stream: &Stream) -> Result<StridedMemoryView<'_>>;
}

impl AsStridedView for Buffer {
    fn as_strided_view(&self, _stream: &Stream) -> Result<StridedMemoryView<'_>> {
        StridedMemoryView::from_buffer(self, &[self.size()], None, DType::U8, false)
    }
}

impl AsStridedView for StridedMemoryView<'_> {
    fn as_strided_view(&self, _stream: &Stream) -> Result<StridedMemoryView<'_>> {
        self.view(&self.shape, self.strides.as_deref(), self.dtype)
    }
}

impl<T: Element> AsStridedView for [T] {
    fn as_strided_view(&self, _stream: &Stream) -> Result<StridedMemoryView<'_>> {
        StridedMemoryView::from_host_slice(self, &[self.len()], None)
    }
}

impl<T: Element> AsStridedView for Vec<T> {
    fn as_strided_view(&self, stream: &Stream) -> Result<StridedMemoryView<'_>> {
        self.as_slice().as_strided_view(stream)
    }
}
