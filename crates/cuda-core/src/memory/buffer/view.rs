//! [`BufferView`]: part of a buffer, as bytes or as elements of a type, borrowing it (a kernel
//! gets a `*mut T`); [`ReadOnlyView`]: the same, for a kernel's `const T*` (a `*const T`).
//! Sub-views count elements ([`BufferView::slice`]), with checked arithmetic.

use super::Buffer;
use crate::{CudaError, Result};
use bytemuck::Pod;
use cuda_sys::driver;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

/// Part of a [`Buffer`] as `len` elements of `T` (bytes by default), borrowing it: the buffer
/// cannot be freed while the view lives. A view is a kernel argument: the kernel receives a
/// `*mut T` to its first element, and the launch keeps the buffer's memory alive until the
/// kernel is done (see [`crate::launch`]).
pub struct BufferView<'a, T = u8> {
    buffer: &'a Buffer,
    ptr: driver::CUdeviceptr,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for BufferView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for BufferView<'_, T> {}

impl<T> fmt::Debug for BufferView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferView")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

impl Buffer {
    /// A view of `len` bytes at `offset`, borrowing the buffer (it cannot be freed meanwhile).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>> {
        let outside = || {
            CudaError::InvalidArgument(format!(
                "view of {len} bytes at {offset} is outside a buffer of {}",
                self.size()
            ))
        };
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(outside());
        }
        let ptr = u64::try_from(offset)
            .ok()
            .and_then(|o| self.handle().checked_add(o))
            .ok_or_else(outside)?;
        Ok(BufferView {
            buffer: self,
            ptr,
            len,
            _element: PhantomData,
        })
    }

    /// The whole buffer as elements of `T`: its size must be a whole number of them, and its
    /// address aligned for `T`.
    pub fn view_as<T: Pod>(&self) -> Result<BufferView<'_, T>> {
        self.view(0, self.size())?.cast()
    }
}

impl<'a, T> BufferView<'a, T> {
    /// A view at `ptr` of `len` elements (from `ptr` to the end of the viewed memory), which the
    /// caller checked lies in `buffer` with every element the kernel may reach (before `ptr`
    /// too, for negative strides).
    pub(crate) fn at(buffer: &'a Buffer, ptr: driver::CUdeviceptr, len: usize) -> BufferView<'a, T> {
        BufferView {
            buffer,
            ptr,
            len,
            _element: PhantomData,
        }
    }

    /// The device address of the view's first element.
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.ptr
    }

    /// The view's length in elements of `T` (bytes for a byte view).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer the view is part of.
    pub fn buffer(&self) -> &'a Buffer {
        self.buffer
    }

    /// The same memory as elements of `U`: the view's bytes must be a whole number of them, and
    /// its address aligned for `U`.
    pub fn cast<U: Pod>(self) -> Result<BufferView<'a, U>> {
        let bytes = self
            .len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| CudaError::InvalidArgument("view size overflows".into()))?;
        let size = std::mem::size_of::<U>();
        if size == 0 || !bytes.is_multiple_of(size) {
            return Err(CudaError::InvalidArgument(format!(
                "a view of {bytes} bytes is not a whole number of {} ({size} bytes each)",
                std::any::type_name::<U>()
            )));
        }
        if !self.ptr.is_multiple_of(std::mem::align_of::<U>() as u64) {
            return Err(CudaError::InvalidArgument(format!(
                "a view at {:#x} is not aligned for {} ({} bytes)",
                self.ptr,
                std::any::type_name::<U>(),
                std::mem::align_of::<U>()
            )));
        }
        Ok(BufferView {
            buffer: self.buffer,
            ptr: self.ptr,
            len: bytes / size,
            _element: PhantomData,
        })
    }
}

impl<'a, T> BufferView<'a, T> {
    /// The elements `range` of this view (element indices, not bytes), as a view of the same
    /// buffer: `view.slice(10..20)?` has 10 elements and starts at element 10. An error when the
    /// range is reversed or reaches past the view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'a, T>> {
        let (ptr, len) = sub_range::<T>(self.ptr, self.len, &range)?;
        Ok(BufferView::at(self.buffer, ptr, len))
    }

    /// The same elements as a [`ReadOnlyView`]: a kernel gets a `*const T`.
    pub fn read_only(self) -> ReadOnlyView<'a, T> {
        ReadOnlyView { view: self }
    }
}

/// Part of a [`Buffer`] as `len` elements of `T`, for a kernel that only reads them: the kernel
/// receives a `*const T` (a `const T*` parameter; see [`crate::ArgFor`]), and the launch keeps
/// the buffer's memory alive until the kernel is done, as for a [`BufferView`]. Made by
/// [`BufferView::read_only`] or [`crate::TypedBuffer::read_only`]; a typed kernel declared with
/// `*mut T` refuses it at compile time.
///
/// The pointer type is a promise the kernel's declaration makes, not a protection: the memory
/// itself stays writable by other work.
pub struct ReadOnlyView<'a, T = u8> {
    view: BufferView<'a, T>,
}

impl<T> Clone for ReadOnlyView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ReadOnlyView<'_, T> {}

impl<T> fmt::Debug for ReadOnlyView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyView")
            .field("ptr", &format_args!("{:#x}", self.view.ptr))
            .field("len", &self.view.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

impl<'a, T> From<BufferView<'a, T>> for ReadOnlyView<'a, T> {
    fn from(view: BufferView<'a, T>) -> Self {
        view.read_only()
    }
}

impl<'a, T> ReadOnlyView<'a, T> {
    /// The device address of the view's first element.
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.view.ptr
    }

    /// The view's length in elements of `T`.
    pub fn len(&self) -> usize {
        self.view.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.view.len == 0
    }

    /// The buffer the view is part of.
    pub fn buffer(&self) -> &'a Buffer {
        self.view.buffer
    }

    /// The elements `range` of this view, read-only (see [`BufferView::slice`]).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<ReadOnlyView<'a, T>> {
        Ok(self.view.slice(range)?.read_only())
    }
}

/// The address and length of the elements `range` of `len` elements of `T` at `ptr`, checked:
/// the range must be ordered and within `len`, and its byte offset must not overflow.
pub(crate) fn sub_range<T>(
    ptr: driver::CUdeviceptr,
    len: usize,
    range: &impl RangeBounds<usize>,
) -> Result<(driver::CUdeviceptr, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    let (Some(start), Some(end)) = (start, end) else {
        return Err(CudaError::InvalidArgument(format!(
            "slice: the range overflows (a view of {len} elements)"
        )));
    };
    if start > end || end > len {
        return Err(CudaError::InvalidArgument(format!(
            "slice: elements {start}..{end} are not within a view of {len} elements"
        )));
    }
    let offset = start
        .checked_mul(std::mem::size_of::<T>())
        .and_then(|b| u64::try_from(b).ok())
        .and_then(|b| ptr.checked_add(b))
        .ok_or_else(|| CudaError::InvalidArgument(format!("slice: element {start} overflows the address")))?;
    Ok((offset, end - start))
}

#[cfg(test)]
mod tests {
    use super::sub_range;

    #[test]
    fn element_ranges_are_checked() {
        assert_eq!(sub_range::<f32>(0x1000, 10, &(2..5)).unwrap(), (0x1008, 3));
        assert_eq!(sub_range::<f32>(0x1000, 10, &..).unwrap(), (0x1000, 10));
        assert_eq!(sub_range::<f64>(0x1000, 10, &(3..)).unwrap(), (0x1018, 7));
        assert_eq!(sub_range::<u8>(0x1000, 10, &(..=9)).unwrap(), (0x1000, 10));
        assert_eq!(sub_range::<u8>(0x1000, 10, &(10..)).unwrap(), (0x100a, 0));
        assert!(sub_range::<u8>(0x1000, 10, &(..=10)).is_err());
        let (start, end) = (5, 4);
        assert!(sub_range::<u8>(0x1000, 10, &(start..end)).is_err());
        assert!(sub_range::<u8>(0x1000, 10, &(0..11)).is_err());
        assert!(sub_range::<u8>(0x1000, usize::MAX, &(..=usize::MAX)).is_err());
        let excluded = (std::ops::Bound::Excluded(usize::MAX), std::ops::Bound::Unbounded);
        assert!(sub_range::<u8>(0x1000, 10, &excluded).is_err());
        // The byte offset overflows the address.
        assert!(sub_range::<u64>(u64::MAX - 8, usize::MAX, &(2..)).is_err());
        assert!(sub_range::<u64>(0, usize::MAX, &(usize::MAX / 4..)).is_err());
    }
}
