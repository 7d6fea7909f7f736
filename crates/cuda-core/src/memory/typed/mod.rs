//! [`TypedBuffer`]: a [`Buffer`] of `len` elements of `T`, allocated by element count from any
//! memory resource ([`AllocateBuffer`]), with element-indexed views, typed copies and host
//! access; it is a kernel argument of type `*mut T` (its [`read_only`](TypedBuffer::read_only)
//! view one of type `*const T`).
//!
//! **Design.** A typed buffer wraps a `Buffer` (the untyped type stays, as in `cuda.core`) and
//! adds only its element count: everything about keeping the memory alive, where it is freed
//! and which streams used it is the buffer's (see [`Buffer`]). A kernel argument made from a
//! typed buffer or its views is the buffer's address, packed as a `BufferView`'s is: no
//! allocation and no work beyond the untyped argument's. The element count is checked once, at
//! construction (`len * size_of::<T>()` fits the buffer, the address is aligned for `T`), and
//! never changes: the buffer cannot be reached mutably from outside (no `&mut Buffer`), so a
//! resource cannot shrink or move it underneath.
//!
//! - here: the type, construction, views;
//! - `copy`: copies between typed buffers and views, with host slices (blocking, named so), and
//!   awaited ones; fills.

mod copy;

use super::buffer::{sub_range, Buffer, BufferView, Pod, ReadOnlyView};
use super::{
    DeviceMemoryResource, GraphMemoryResource, LegacyPinnedMemoryResource, ManagedMemoryResource, MemoryResource,
    PinnedMemoryResource, PortablePinnedMemoryResource, VirtualMemoryResource,
};
use crate::device::Device;
use crate::stream::Stream;
use crate::{CudaError, Result};
use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

/// What a [`TypedBuffer`] is allocated from: every memory resource of this crate, by `Arc` (each
/// through its own `allocate`, so pool allocations keep their fast path), a resource of your
/// own as an `Arc<dyn MemoryResource>`, and a [`Device`] (its default pool).
///
/// An implementation may return any buffer: [`TypedBuffer::allocate`] checks that it holds the
/// elements asked for and is aligned for them.
pub trait AllocateBuffer {
    /// `size` bytes, ordered on `stream` (which becomes the buffer's deallocation stream).
    fn allocate_buffer(&self, size: usize, stream: &Stream) -> Result<Buffer>;
}

impl AllocateBuffer for Arc<dyn MemoryResource> {
    fn allocate_buffer(&self, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

impl AllocateBuffer for Device {
    fn allocate_buffer(&self, size: usize, stream: &Stream) -> Result<Buffer> {
        self.allocate(size, stream)
    }
}

macro_rules! allocate_buffer_by_arc {
    ($($t:ty),*) => {$(
        impl AllocateBuffer for Arc<$t> {
            #[inline]
            fn allocate_buffer(&self, size: usize, stream: &Stream) -> Result<Buffer> {
                self.allocate(size, stream)
            }
        }
    )*};
}

allocate_buffer_by_arc!(
    DeviceMemoryResource,
    PinnedMemoryResource,
    PortablePinnedMemoryResource,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    VirtualMemoryResource,
    GraphMemoryResource
);

/// A [`Buffer`] holding `len` elements of `T` (cudarc's `CudaSlice<T>`): allocated by element
/// count, viewed and sliced by element index, copied in elements, and a kernel argument of type
/// `*mut T` (a [`read_only`](Self::read_only) view: `*const T`). The memory is the buffer's:
/// freed stream-ordered when the typed buffer is dropped, after the work of every stream that
/// used it, and held by graphs that recorded work on it, as for any [`Buffer`].
///
/// ```no_run
/// # use cuda_core::*;
/// # fn demo(device: &Device, s: &Stream) -> Result<()> {
/// let x = TypedBuffer::<f32>::from_host_blocking(device, &[1.0, 2.0, 3.0, 4.0], s)?;
/// let y = TypedBuffer::<f32>::allocate(&device.memory_resource()?, 4, s)?;
/// y.copy_from(&x, s)?;
/// y.slice(2..)?.fill(0.0, s)?;
/// assert_eq!(y.to_vec_blocking(s)?, [1.0, 2.0, 0.0, 0.0]);
/// # Ok(()) }
/// ```
pub struct TypedBuffer<T: Pod> {
    buffer: Buffer,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T: Pod> TypedBuffer<T> {
    /// `len` elements of `T` from `resource`, ordered on `stream` (uninitialised contents:
    /// whatever the memory held, any bit pattern being a valid `T`).
    ///
    /// **The buffer starts on `stream`**, its deallocation stream: work queued there needs no
    /// ordering, and the first time another stream uses the buffer, that stream waits for
    /// everything queued on `stream` so far (the allocation is among it). Allocate on the
    /// stream that uses the buffer first; [`Buffer::assume_ordered_on`] skips that wait where
    /// you ordered another stream yourself.
    pub fn allocate(resource: &impl AllocateBuffer, len: usize, stream: &Stream) -> Result<TypedBuffer<T>> {
        let bytes = bytes_of::<T>(len, "allocate")?;
        let buffer = resource.allocate_buffer(bytes, stream)?;
        TypedBuffer::with_len(buffer, len)
    }

    /// A typed buffer over all of `buffer`: its size must be a whole number of `T` and its
    /// address aligned for `T` (an error otherwise, and the buffer is dropped: freed
    /// stream-ordered as usual).
    pub fn from_buffer(buffer: Buffer) -> Result<TypedBuffer<T>> {
        let len = buffer.whole_elements::<T>("from_buffer")?;
        TypedBuffer::with_len(buffer, len)
    }

    /// `buffer` as `len` elements of `T` from its start, checked.
    fn with_len(buffer: Buffer, len: usize) -> Result<TypedBuffer<T>> {
        let bytes = bytes_of::<T>(len, "a typed buffer")?;
        if bytes > buffer.size() {
            return Err(CudaError::InvalidArgument(format!(
                "a typed buffer of {len} {} needs {bytes} bytes; the buffer has {}",
                std::any::type_name::<T>(),
                buffer.size()
            )));
        }
        if !buffer.handle().is_multiple_of(std::mem::align_of::<T>() as u64) {
            return Err(CudaError::InvalidArgument(format!(
                "a buffer at {:#x} is not aligned for {} ({} bytes)",
                buffer.handle(),
                std::any::type_name::<T>(),
                std::mem::align_of::<T>()
            )));
        }
        Ok(TypedBuffer {
            buffer,
            len,
            _element: PhantomData,
        })
    }

    /// The untyped buffer (its size may exceed `len` elements where the resource rounds sizes
    /// up, as virtual memory does).
    pub fn into_buffer(self) -> Buffer {
        self.buffer
    }

    /// The untyped buffer, borrowed (the device address, the resource, accessibility...).
    #[inline]
    pub fn as_buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// How many elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the first element.
    #[inline]
    pub fn handle(&self) -> cuda_sys::driver::CUdeviceptr {
        self.buffer.handle()
    }

    /// Every element, as a view (a kernel gets a `*mut T`).
    #[inline]
    pub fn view(&self) -> BufferView<'_, T> {
        BufferView::at(&self.buffer, self.buffer.handle(), self.len)
    }

    /// Every element, as a read-only view (a kernel gets a `*const T`).
    #[inline]
    pub fn read_only(&self) -> ReadOnlyView<'_, T> {
        self.view().read_only()
    }

    /// The elements `range` (element indices): `x.slice(10..20)?` is a view of 10 elements from
    /// element 10. An error when the range is reversed or reaches past the end.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'_, T>> {
        let (ptr, len) = sub_range::<T>(self.buffer.handle(), self.len, &range)?;
        Ok(BufferView::at(&self.buffer, ptr, len))
    }

    /// The elements as a host slice to read and write, once the work queued on the buffer by
    /// every stream (and its allocation) is done: see [`Buffer::host_slice_mut`], whose checks
    /// (host-accessible memory that no graph or other process may write) and waits it shares.
    pub fn host_slice_mut(&mut self) -> Result<&mut [T]> {
        self.buffer.host_elements_mut(self.len, "host_slice_mut")
    }

    /// The elements as a host slice to read (see [`host_slice_mut`](Self::host_slice_mut); the
    /// borrow is exclusive so that no copy into the buffer is queued while it is read).
    pub fn host_slice(&mut self) -> Result<&[T]> {
        Ok(self.host_slice_mut()?)
    }

    /// The stream the buffer is freed on.
    pub fn deallocation_stream(&self) -> &Stream {
        self.buffer.deallocation_stream()
    }

    /// Frees the buffer on `stream` from now on (see [`Buffer::set_deallocation_stream`]).
    pub fn set_deallocation_stream(&mut self, stream: &Stream) -> Result<()> {
        self.buffer.set_deallocation_stream(stream)
    }

    /// Frees the buffer now and returns what the driver said (see [`Buffer::close`]).
    pub fn close(self, stream: Option<&Stream>) -> Result<()> {
        self.buffer.close(stream)
    }
}

impl<T: Pod> TryFrom<Buffer> for TypedBuffer<T> {
    type Error = CudaError;
    fn try_from(buffer: Buffer) -> Result<TypedBuffer<T>> {
        TypedBuffer::from_buffer(buffer)
    }
}

impl<T: Pod> From<TypedBuffer<T>> for Buffer {
    fn from(typed: TypedBuffer<T>) -> Buffer {
        typed.buffer
    }
}

impl<'a, T: Pod> From<&'a TypedBuffer<T>> for BufferView<'a, T> {
    fn from(typed: &'a TypedBuffer<T>) -> Self {
        typed.view()
    }
}

impl<'a, T: Pod> From<&'a TypedBuffer<T>> for ReadOnlyView<'a, T> {
    fn from(typed: &'a TypedBuffer<T>) -> Self {
        typed.read_only()
    }
}

impl<T: Pod> fmt::Debug for TypedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedBuffer")
            .field("ptr", &format_args!("{:#x}", self.buffer.handle()))
            .field("len", &self.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

/// `len * size_of::<T>()`, checked; `T` must have a size. `what` names the caller in errors.
pub(crate) fn bytes_of<T>(len: usize, what: &str) -> Result<usize> {
    let item = std::mem::size_of::<T>();
    if item == 0 {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: {} has no size, and a buffer of none holds nothing",
            std::any::type_name::<T>()
        )));
    }
    len.checked_mul(item).ok_or_else(|| {
        CudaError::InvalidArgument(format!(
            "{what}: {len} elements of {} ({item} bytes each) overflow a size",
            std::any::type_name::<T>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::bytes_of;

    #[test]
    fn element_counts_are_checked_sizes() {
        assert_eq!(bytes_of::<f32>(10, "t").unwrap(), 40);
        assert_eq!(bytes_of::<u8>(usize::MAX, "t").unwrap(), usize::MAX);
        let e = bytes_of::<f64>(usize::MAX / 4, "allocate").unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
        let e = bytes_of::<()>(3, "allocate").unwrap_err();
        assert!(e.to_string().contains("no size"), "{e}");
    }
}
