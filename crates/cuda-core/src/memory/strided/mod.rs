//! [`StridedMemoryView`]: a typed, strided view of memory (a [`Buffer`], a DLPack tensor, a
//! host slice, or raw memory someone vouches for), after `cuda.core.utils.StridedMemoryView`;
//! [`DType`] and [`Element`] (`dtype`); the layout arithmetic (`layout`); copies between views
//! (`copy`).
//!
//! **Who keeps the memory alive.** A view of a buffer borrows it (`'a`), and GPU work through the
//! view is work on the buffer (its lifetime rules apply). A view made from a DLPack tensor owns
//! a buffer that owns the tensor: the producer's deleter runs after the work queued through the
//! view is done. A host slice is borrowed, and only copied from or into synchronously.

mod copy;
mod dtype;
mod exchange;
mod kernel;
mod layout;
#[cfg(feature = "ndarray")]
mod ndarray_bridge;
mod staging;
mod tma;

pub use dtype::{DType, Element};
pub use exchange::AsStridedView;
pub use tma::{
    TensorMapDataType, TensorMapDescriptor, TensorMapDescriptorOptions, TensorMapIm2ColWideMode,
    TensorMapIm2colOptions, TensorMapIm2colWideOptions, TensorMapInterleave, TensorMapL2Promotion, TensorMapOOBFill,
    TensorMapSwizzle,
};

use super::buffer::{Buffer, BufferView};
use super::dlpack::{tensor_memory, DlpackTensor};
use crate::device::Device;
use crate::stream::Stream;
use crate::{CudaError, Result};
use dlpark::ffi::DLDeviceType;
use std::marker::PhantomData;

/// Where a view's memory comes from, and what keeps it alive.
enum Backing<'a> {
    /// A buffer the view borrows.
    Buffer(&'a Buffer),
    /// A buffer the view owns (over an imported DLPack tensor).
    Owned(Box<Buffer>),
    /// Host memory the view borrows (`from_host_slice`): copied synchronously only.
    Host(PhantomData<&'a [u8]>),
    /// Memory the maker of the view vouched for (`from_raw`).
    Raw,
}

/// A typed, strided view of memory: element 0's address, a shape, strides in elements (`None`:
/// row-major and dense), an element type, and whether it may be written. Every layout is
/// checked against the memory it views, with checked arithmetic, before anything uses it.
///
/// ```
/// use cuda_core::StridedMemoryView;
/// let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// // A 2x3 row-major view, and its transpose: 3x2, strides in elements.
/// let view = StridedMemoryView::from_host_slice(&data, &[2, 3], None)?;
/// assert!(view.is_c_contiguous());
/// let transposed = view.view(&[3, 2], Some(&[1, 3]), view.dtype())?;
/// assert_eq!(transposed.shape(), &[3, 2]);
/// assert!(!transposed.is_c_contiguous());
/// // A layout that reaches past the memory is refused.
/// assert!(view.view(&[3, 3], None, view.dtype()).is_err());
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
pub struct StridedMemoryView<'a> {
    ptr: u64,
    shape: Vec<usize>,
    strides: Option<Vec<isize>>,
    dtype: DType,
    readonly: bool,
    device_id: Option<usize>,
    device_accessible: bool,
    /// The bytes the viewed memory spans (every re-view must stay inside).
    bounds: (u64, u64),
    /// The source owns only the view's own elements, not the gaps between them (a strided
    /// DLPack tensor or array): no re-view with another layout, and no buffer lent.
    exact: bool,
    backing: Backing<'a>,
    /// What keeps host memory the view owns alive (a host DLPack tensor's producer's object,
    /// whose deleter runs when the view goes).
    keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for StridedMemoryView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StridedMemoryView")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("dtype", &self.dtype)
            .field("readonly", &self.readonly)
            .field("device_id", &self.device_id)
            .finish()
    }
}

/// The strides to check a layout with: the given ones, or row-major ones.
fn strides_or_c(shape: &[usize], strides: Option<&[isize]>) -> Result<Vec<isize>> {
    match strides {
        Some(s) => Ok(s.to_vec()),
        None => layout::c_strides(shape),
    }
}

/// Checks that the layout from element 0 at `ptr` stays in `bounds` (element 0 must be inside
/// too when the view has no elements).
fn check_inside(
    ptr: u64,
    shape: &[usize],
    strides: Option<&[isize]>,
    dtype: DType,
    bounds: (u64, u64),
) -> Result<Option<Vec<isize>>> {
    let all = strides_or_c(shape, strides)?;
    let reach = layout::byte_range(ptr, shape, &all, dtype.itemsize())?;
    let inside = match reach {
        Some((start, end)) => start >= bounds.0 && end <= bounds.1,
        None => ptr >= bounds.0 && ptr <= bounds.1,
    };
    if let (false, Some((start, end))) = (inside, reach) {
        if start >= bounds.0 {
            // Too large for the memory (cuda.core's words): both sizes named.
            return Err(CudaError::InvalidArgument(format!(
                "the memory is too small for the layout (shape {shape:?}, strides {strides:?}, dtype {dtype}). \
                 Expected at least {} bytes, got {} bytes",
                end - bounds.0,
                bounds.1 - bounds.0
            )));
        }
    }
    if !inside {
        return Err(CudaError::InvalidArgument(format!(
            "a view of shape {shape:?}, strides {strides:?} and dtype {dtype} from {ptr:#x} reaches outside the memory it views ({:#x}..{:#x})",
            bounds.0, bounds.1
        )));
    }
    // Row-major strides are kept as `None`, as cuda.core reports them.
    Ok(strides
        .filter(|s| !layout::is_c_contiguous(shape, s) || s.iter().any(|&x| x < 0))
        .map(<[isize]>::to_vec))
}

/// The device of the calling thread's current context, if one is current.
fn current_device_id() -> Option<usize> {
    crate::device::Context::current()
        .ok()
        .flatten()
        .map(|c| c.device().device_id())
}

/// Where a view's memory is: its device, whether kernels reach it, and whether its source owns
/// only the view's elements (`exact`).
struct Place {
    device_id: Option<usize>,
    device_accessible: bool,
    exact: bool,
}

impl Place {
    /// Host memory this program borrows: of no device, out of kernels' reach.
    const HOST: Place = Place {
        device_id: None,
        device_accessible: false,
        exact: false,
    };
}

/// The reach of the layout from element 0 at `ptr`, as the bounds of a source that is exactly
/// what the layout spans (an array, a tensor, raw memory).
fn span(ptr: u64, shape: &[usize], strides: &[isize], dtype: DType) -> Result<(u64, u64)> {
    Ok(layout::byte_range(ptr, shape, strides, dtype.itemsize())?.unwrap_or((ptr, ptr)))
}

/// `len` bytes from `ptr`, checked.
fn range(ptr: u64, len: usize, what: &str) -> Result<(u64, u64)> {
    let end = super::address(ptr, len, what)?;
    Ok((ptr, end))
}

impl<'a> StridedMemoryView<'a> {
    /// The one constructor: the layout checked inside `bounds`.
    #[allow(clippy::too_many_arguments)]
    fn make(
        ptr: u64,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        readonly: bool,
        bounds: (u64, u64),
        place: Place,
        backing: Backing<'a>,
    ) -> Result<StridedMemoryView<'a>> {
        let strides = check_inside(ptr, shape, strides, dtype, bounds)?;
        Ok(StridedMemoryView {
            ptr,
            shape: shape.to_vec(),
            strides,
            dtype,
            readonly,
            device_id: place.device_id,
            device_accessible: place.device_accessible,
            bounds,
            exact: place.exact,
            backing,
            keep: None,
        })
    }

    /// The same view over another backing of the same memory.
    fn with_backing<'b>(self, backing: Backing<'b>) -> StridedMemoryView<'b> {
        StridedMemoryView {
            ptr: self.ptr,
            shape: self.shape,
            strides: self.strides,
            dtype: self.dtype,
            readonly: self.readonly,
            device_id: self.device_id,
            device_accessible: self.device_accessible,
            bounds: self.bounds,
            exact: self.exact,
            backing,
            keep: self.keep,
        }
    }

    /// A view of `buffer` with element 0 at its start (`cuda.core`'s `from_buffer`): `shape`,
    /// `strides` in elements (`None`: row-major), `dtype`. The layout must stay inside the
    /// buffer. A read-only view refuses to be written through.
    pub fn from_buffer(
        buffer: &'a Buffer,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        readonly: bool,
    ) -> Result<StridedMemoryView<'a>> {
        let bounds = range(buffer.handle(), buffer.size(), "the buffer's range")?;
        let place = Place {
            device_id: buffer.device_id(),
            device_accessible: buffer.is_device_accessible(),
            exact: false,
        };
        let readonly = readonly || (!buffer.is_device_accessible() && !buffer.is_host_accessible());
        StridedMemoryView::make(
            bounds.0,
            shape,
            strides,
            dtype,
            readonly,
            bounds,
            place,
            Backing::Buffer(buffer),
        )
    }

    /// A read-only view of host memory (`cuda.core`'s `from_array_interface` for NumPy arrays).
    /// Host views are copied from synchronously ([`copy_to`](Self::copy_to)). As in
    /// `cuda.core`, its [`device_id`](Self::device_id) is the current context's device (`None`
    /// when no context is current) and it is not device accessible.
    pub fn from_host_slice<T: Element>(
        data: &'a [T],
        shape: &[usize],
        strides: Option<&[isize]>,
    ) -> Result<StridedMemoryView<'a>> {
        StridedMemoryView::host(
            data.as_ptr() as u64,
            std::mem::size_of_val(data),
            shape,
            strides,
            T::DTYPE,
            true,
        )
    }

    /// A writable view of host memory, which copies can fill ([`copy_from`](Self::copy_from)).
    pub fn from_host_slice_mut<T: Element>(
        data: &'a mut [T],
        shape: &[usize],
        strides: Option<&[isize]>,
    ) -> Result<StridedMemoryView<'a>> {
        StridedMemoryView::host(
            data.as_mut_ptr() as u64,
            std::mem::size_of_val(data),
            shape,
            strides,
            T::DTYPE,
            false,
        )
    }

    fn host(
        ptr: u64,
        bytes: usize,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        readonly: bool,
    ) -> Result<StridedMemoryView<'a>> {
        let bounds = range(ptr, bytes, "the slice's range")?;
        // As cuda.core's `from_array_interface`: host memory, reported with the current
        // context's device (none when no context is current, or no driver is installed).
        let place = Place {
            device_id: current_device_id(),
            ..Place::HOST
        };
        StridedMemoryView::make(
            ptr,
            shape,
            strides,
            dtype,
            readonly,
            bounds,
            place,
            Backing::Host(PhantomData),
        )
    }

    /// A view of memory described by its parts (`cuda.core`'s `from_cuda_array_interface`):
    /// element 0 at `ptr`, the layout, and where the memory is.
    ///
    /// # Safety
    /// Every byte from the lowest to the highest element the layout reaches (the gaps between
    /// elements included: re-views may reach them) must be memory of `device_id` (device memory,
    /// or host memory the device can reach when `device_accessible`), readable (and writable,
    /// unless `readonly`) for `'a`, and nothing may free it while work queued through the view
    /// runs, every launch of a graph a capture recorded such work into included.
    pub unsafe fn from_raw(
        ptr: u64,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        device_id: Option<usize>,
        device_accessible: bool,
        readonly: bool,
    ) -> Result<StridedMemoryView<'a>> {
        let bounds = span(ptr, shape, &strides_or_c(shape, strides)?, dtype)?;
        let place = Place {
            device_id,
            device_accessible,
            exact: false,
        };
        StridedMemoryView::make(ptr, shape, strides, dtype, readonly, bounds, place, Backing::Raw)
    }

    /// Checks that a view of `shape`, `strides` and `dtype` with element 0 at the start of
    /// `bytes` bytes stays inside them (before the memory is taken).
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn check_layout(shape: &[usize], strides: Option<&[isize]>, dtype: DType, bytes: usize) -> Result<()> {
        // Any base works: the check is relative (an aligned one, far from overflowing).
        let base = 1u64 << 32;
        let bounds = range(base, bytes, "the memory's range")?;
        check_inside(base, shape, strides, dtype, bounds).map(|_| ())
    }

    /// The address of element 0.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The extent of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Strides in elements; `None` when row-major and dense (as `cuda.core` reports them).
    pub fn strides(&self) -> Option<&[isize]> {
        self.strides.as_deref()
    }

    /// The strides in elements, row-major ones filled in.
    pub fn strides_or_row_major(&self) -> Result<Vec<isize>> {
        strides_or_c(&self.shape, self.strides.as_deref())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn size(&self) -> Result<usize> {
        layout::element_count(&self.shape)
    }

    /// The device of the memory (`None`, which `cuda.core` writes -1, for host memory).
    pub fn device_id(&self) -> Option<usize> {
        self.device_id
    }

    /// Whether kernels can reach the memory.
    pub fn is_device_accessible(&self) -> bool {
        self.device_accessible
    }

    /// Whether the view refuses to be written through.
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Whether the elements are row-major and dense.
    pub fn is_c_contiguous(&self) -> bool {
        self.strides.is_none()
    }

    /// The buffer the view's memory belongs to, when it is a buffer's and may be written
    /// (read-only views lend none: the buffer's own operations would write).
    pub fn buffer(&self) -> Option<&Buffer> {
        if self.readonly || self.exact {
            return None;
        }
        match &self.backing {
            Backing::Buffer(b) => Some(b),
            Backing::Owned(b) => Some(b),
            Backing::Host(_) | Backing::Raw => None,
        }
    }

    /// The same memory seen with another layout or element type (`cuda.core`'s `view`), from
    /// the same element 0; it must stay inside the memory this view's source covers. A re-view
    /// of host memory is read-only: it borrows this view shared, and host memory read through
    /// one view (`as_ndarray`) must not be written through another meanwhile.
    pub fn view(&self, shape: &[usize], strides: Option<&[isize]>, dtype: DType) -> Result<StridedMemoryView<'_>> {
        let backing = match &self.backing {
            Backing::Buffer(b) => Backing::Buffer(b),
            Backing::Owned(b) => Backing::Buffer(b),
            Backing::Host(_) => Backing::Host(PhantomData),
            Backing::Raw => Backing::Raw,
        };
        let place = Place {
            device_id: self.device_id,
            device_accessible: self.device_accessible,
            exact: self.exact,
        };
        let readonly = self.readonly || matches!(self.backing, Backing::Host(_));
        let view = StridedMemoryView::make(self.ptr, shape, strides, dtype, readonly, self.bounds, place, backing)?;
        if self.exact && (view.shape != self.shape || view.strides != self.strides || dtype != self.dtype) {
            return Err(CudaError::InvalidArgument(
                "this view's source owns only its own elements (a strided DLPack tensor or array, with gaps between them): it cannot be re-viewed with another layout".into(),
            ));
        }
        Ok(view)
    }

    /// The view as a kernel argument for a `T*` parameter: element 0's address, with the
    /// launch holding the view's buffer as for any buffer argument. The dtype must be `T`'s,
    /// the view writable, and its memory a buffer's.
    pub fn kernel_arg<T: Element>(&self) -> Result<BufferView<'_, T>> {
        if T::DTYPE != self.dtype {
            return Err(CudaError::InvalidType(format!(
                "the view holds {} elements, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let Some(buffer) = self.buffer() else {
            return Err(CudaError::InvalidArgument(
                "only a writable view of a buffer (from_buffer, from_dlpack) whose source owns the memory between its elements is a kernel argument".into(),
            ));
        };
        if !self.ptr.is_multiple_of(std::mem::align_of::<T>() as u64) {
            return Err(CudaError::InvalidArgument(format!(
                "element 0 at {:#x} is not aligned for {}",
                self.ptr,
                T::DTYPE
            )));
        }
        let len = ((self.bounds.1 - self.ptr) as usize) / std::mem::size_of::<T>();
        Ok(BufferView::at(buffer, self.ptr, len))
    }
}

impl StridedMemoryView<'static> {
    /// Takes a DLPack tensor (`cuda.core`'s `from_dlpack`): CUDA device, pinned or managed
    /// memory, or host memory (`kDLCPU`, as NumPy exports it: a host view, `device_id` `None`,
    /// not device accessible, copied synchronously like [`from_host_slice`](Self::from_host_slice)'s;
    /// the streams are not used), any strides (negative and zero ones included), its byte offset, its dtype and its
    /// read-only flag. The view owns the tensor until the work queued through it is done.
    ///
    /// Stream order: with `producer`, `consumer` waits for the work queued on `producer` so far
    /// (the producer's writes come first); `None` opts out (`cuda.core`'s `stream_ptr=-1`), for a
    /// tensor whose writes are known to be done. Work through the view is ordered on `consumer`.
    pub fn from_dlpack(
        tensor: DlpackTensor,
        producer: Option<&Stream>,
        consumer: &Stream,
    ) -> Result<StridedMemoryView<'static>> {
        let readonly = tensor.flags().contains(dlpark::DlpackFlags::READ_ONLY);
        let (ptr, shape, strides, dtype, device) = {
            let v = tensor
                .validate()
                .map_err(|e| CudaError::InvalidArgument(format!("DLPack import: {e}")))?;
            let dev = v.device();
            // `None`: plain host memory (kDLCPU, as NumPy exports it), which kernels cannot reach.
            let device = match dev.device_type {
                DLDeviceType::CUDA => Some(Some(Device::new(usize::try_from(dev.device_id).map_err(|_| {
                    CudaError::InvalidArgument(format!("DLPack import: device id {} is negative", dev.device_id))
                })?)?)),
                DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED => Some(None),
                DLDeviceType::CPU => None,
                other => {
                    return Err(CudaError::InvalidType(format!(
                        "DLPack import: the tensor lives on device type {} (CPU, CUDA, CUDA host and CUDA managed memory can be viewed)",
                        other.0
                    )))
                }
            };
            let dtype = DType::from_dlpack(v.dtype())?;
            let shape: Vec<usize> = v
                .shape()
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| CudaError::InvalidArgument("DLPack import: a negative dimension".into()))?;
            let strides: Option<Vec<isize>> = match v.strides() {
                Some(s) => Some(
                    s.iter()
                        .map(|&x| isize::try_from(x))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|_| CudaError::InvalidArgument("DLPack import: a stride overflows".into()))?,
                ),
                None => None,
            };
            let ptr = (v.data_ptr() as usize as u64)
                .checked_add(v.byte_offset())
                .ok_or_else(|| CudaError::InvalidArgument("DLPack import: the byte offset overflows".into()))?;
            (ptr, shape, strides, dtype, device)
        };
        let all = strides_or_c(&shape, strides.as_deref())?;
        let bounds = span(ptr, &shape, &all, dtype)?;
        let Some(device) = device else {
            // Host memory (cuda.core: device id -1, not device accessible, no stream order): a
            // host view, copied synchronously only, owning the tensor.
            let place = Place {
                exact: !layout::covers_span(&shape, &all),
                ..Place::HOST
            };
            let mut view = StridedMemoryView::make(
                ptr,
                &shape,
                strides.as_deref(),
                dtype,
                readonly,
                bounds,
                place,
                Backing::Host(PhantomData),
            )?;
            view.keep = Some(Box::new(tensor));
            return Ok(view);
        };
        let place = Place {
            device_id: device.map(|d| d.device_id()),
            device_accessible: true,
            exact: !layout::covers_span(&shape, &all),
        };
        if let Some(p) = producer {
            consumer.wait(p)?;
        }
        let resource = tensor_memory(tensor, device, readonly);
        let buffer = Buffer::from_parts(bounds.0, (bounds.1 - bounds.0) as usize, Some(resource), consumer)?;
        let backing = Backing::Owned(Box::new(buffer));
        StridedMemoryView::make(ptr, &shape, strides.as_deref(), dtype, readonly, bounds, place, backing)
    }
}
