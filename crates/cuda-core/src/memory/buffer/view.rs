//! [`BufferView`]: part of a buffer, as bytes or as elements of a type, borrowing it.

use super::Buffer;
use crate::{CudaError, Result};
use bytemuck::Pod;
use cuda_sys::driver;
use std::fmt;
use std::marker::PhantomData;

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
