//! Views handed over as DLPack tensors (keeping their memory alive); and [`AsStridedView`], what a
//! function takes to accept anything viewable (`cuda.core`'s `args_viewable_as_strided_memory`).

use super::{Backing, DType, Element, StridedMemoryView};
use crate::memory::buffer::Buffer;
use crate::memory::dlpack::{check_shareable, dl_device, tensor, DlpackTensor};
use crate::stream::Stream;
use crate::{CudaError, Result};
use dlpark::ffi::{DLDevice, DLDeviceType};

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
}

impl StridedMemoryView<'_> {
    /// Where DLPack says the view's memory lives (`cuda.core`'s
    /// `StridedMemoryView.__dlpack_device__`): for a view of a buffer, the buffer's place
    /// ([`Buffer::dlpack_device`]); for a host slice `kDLCPU`; otherwise (raw memory, buffers
    /// imported read-only, which report no access so that nothing writes them) from the view:
    /// `kDLCUDA` on its device, `kDLCUDAManaged` or `kDLCUDAHost` for memory both sides reach
    /// (as the driver reports it), `kDLCPU` for host-only memory.
    pub fn dlpack_device(&self) -> Result<DLDevice> {
        let buffer = match &self.backing {
            Backing::Owned(b) => Some(&**b),
            Backing::Buffer(b) => Some(*b),
            Backing::Host(_) => return Ok(DLDevice::CPU),
            Backing::Raw => None,
        };
        match buffer {
            // A read-only view of a buffer that reports where it is (a read-only view made of a
            // writable buffer) is where the buffer is; only buffers reporting no access (the
            // imported read-only ones) are placed from the view.
            Some(b) if b.is_device_accessible() || b.is_host_accessible() => dl_device(b),
            _ => match self.device_id {
                Some(d) => Ok(DLDevice::cuda(i32::try_from(d).map_err(|_| {
                    CudaError::InvalidArgument(format!("DLPack: device ordinal {d} overflows"))
                })?)),
                None if !self.device_accessible => Ok(DLDevice::CPU),
                None => Ok(DLDevice {
                    device_type: if crate::memory::PointerInfo::of(self.ptr)?.managed {
                        DLDeviceType::CUDAMANAGED
                    } else {
                        DLDeviceType::CUDAHOST
                    },
                    device_id: 0,
                }),
            },
        }
    }

    /// Hands the view over as a DLPack tensor (`cuda.core`'s `StridedMemoryView.__dlpack__`,
    /// always the versioned ABI): its shape, strides (always explicit), dtype, element 0 as the
    /// data pointer, its place ([`dlpack_device`](Self::dlpack_device)) and the read-only flag.
    /// The tensor keeps the memory alive until its deleter runs:
    ///
    /// - a view that owns its memory (`from_dlpack`, `from_buffer_owned`) hands it over (its
    ///   buffer, or the host tensor it was made from);
    /// - a view of a buffer it borrows (`from_buffer`, `view` of one, `AsStridedView` of a
    ///   buffer) hands over a share of the buffer's memory, as a graph that records work on the
    ///   buffer holds it: the memory is freed (stream-ordered, on the buffer's deallocation
    ///   stream, after every stream that used it) when the last of the buffer and the tensor
    ///   goes, so the buffer may be dropped first. From then on the buffer counts as used by a
    ///   graph ([`Buffer::is_used_by_graph`]): host slices of it, handing its owner back and
    ///   discards, which need the memory to be the buffer's alone, are refused;
    /// - views of borrowed host memory (slices, arrays), of raw memory (`from_raw`), and of
    ///   buffers over foreign memory nobody keeps alive (`Buffer::from_handle` without an
    ///   owner) are refused: nothing could keep their memory alive for the tensor.
    ///
    /// There is no stream argument: as with `cuda.core`'s `Buffer.__dlpack__`, the consumer
    /// orders its work after the producer's (queue it on the same stream, or synchronise
    /// first). On an error the view (and, for an owning view, its memory) is dropped.
    pub fn to_dlpack(self) -> Result<DlpackTensor> {
        let export = |e: &str| CudaError::InvalidArgument(format!("DLPack export: {e}"));
        match &self.backing {
            Backing::Owned(buffer) if buffer.is_graph_memory() => {
                return Err(export("graph memory exists only within the capture that allocated it"))
            }
            Backing::Buffer(buffer) => check_shareable(buffer)?,
            Backing::Owned(_) => {}
            Backing::Host(_) if self.keep.is_some() => {}
            Backing::Host(_) => {
                return Err(export(
                    "the view borrows host memory (a slice or an array), which nothing can keep alive for the tensor: copy it into a buffer first",
                ))
            }
            Backing::Raw => {
                return Err(export(
                    "a view of raw memory (from_raw) has no owner to keep the memory alive for the tensor: view a buffer instead",
                ))
            }
        }
        let device = self.dlpack_device()?;
        let strides: Vec<i64> = self.strides_or_row_major()?.iter().map(|&x| x as i64).collect();
        let shape: Vec<i64> = self
            .shape
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| export(&format!("dimension {d} overflows"))))
            .collect::<Result<_>>()?;
        let place = (device, self.ptr as usize as *mut std::ffi::c_void);
        let (readonly, dtype) = (self.readonly, self.dtype.to_dlpack());
        // What keeps the memory alive, handed to the tensor (dropped on the release thread once
        // the consumer lets go: see `ReleasedLater`).
        let keep: Box<dyn std::any::Any + Send> = match (self.backing, self.keep) {
            // The buffer the view owned: freed stream-ordered on its deallocation stream.
            (Backing::Owned(buffer), _) => buffer,
            // A share of a borrowed buffer's memory: freed once the buffer has gone too.
            (Backing::Buffer(buffer), _) => Box::new(buffer.share()),
            // The host DLPack tensor a host view owned: its producer's deleter runs.
            (Backing::Host(_), Some(keep)) => Box::new(keep),
            // (Refused above.)
            (Backing::Host(_), None) | (Backing::Raw, _) => {
                return Err(export("nothing keeps the view's memory alive"))
            }
        };
        // SAFETY: the data pointer is element 0 of a layout checked to lie in the view's memory,
        // which the tensor keeps alive until its deleter runs (the owned buffer, a share of a
        // borrowed buffer's memory that frees it only once the tensor and the buffer are both
        // gone, or the host tensor the view owned; foreign memory nobody keeps alive was refused
        // above); read-only exactly when the view was.
        unsafe { tensor(shape, strides, dtype, place, readonly, keep) }
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
