//! Copies with host memory that a task awaits instead of blocking its thread:
//! [`Buffer::to_vec_async`] (through a pinned staging buffer the future owns) and
//! [`Buffer::copy_from_vec_async`] (the vector is kept until the copy is done).
//!
//! **Which host copies block.** A copy between buffers is stream-ordered and returns at once,
//! also when one side is host memory: a buffer of pinned memory ([`PinnedMemoryResource`],
//! [`LegacyPinnedMemoryResource`]) or managed memory is copied by
//! [`Buffer::copy_to`]/[`Buffer::copy_from`] (and [`crate::TypedBuffer::copy_from`],
//! [`crate::BufferView::copy_from`]) as `cuda.core` copies, without blocking; fill such a buffer
//! from the host with [`Buffer::host_slice_mut`]. A copy with a host *slice* blocks, since the
//! slice is only borrowed for the call: [`Buffer::copy_from_host`], [`Buffer::copy_to_host`],
//! [`Buffer::to_vec`], [`Buffer::from_slice`] and the typed `*_blocking` forms
//! ([`crate::TypedBuffer::copy_from_host_blocking`], `copy_to_host_blocking`, `to_vec_blocking`,
//! `from_host_blocking`). The forms here take ownership instead (a vector) or give it (a
//! future), and do not block.
//!
//! **Who keeps the memory alive.** The device buffer is used as every operation uses it (its
//! free waits for the stream). The pinned staging buffer of `to_vec_async` belongs to the future:
//! dropped early, it is freed stream-ordered after the copy, like any buffer; the host reads it
//! only once the copy is done. The vector of `copy_from_vec_async` is held by the host function
//! that signals the future, and dropped (on this crate's release thread) only after the copy.

use super::super::buffer::{enqueue_using, Buffer, Pod};
use super::super::{LegacyPinnedMemoryResource, MemoryResource, PinnedMemoryResource};
use crate::error::Check;
use crate::stream::{Armed, Completion, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};

/// The pinned host memory staging copies use: what [`PinnedMemoryResource::portable`] picks
/// (the host's default pinned pool where the driver has one), page-locked allocations if even
/// that fails.
fn staging_resource() -> Arc<dyn MemoryResource> {
    static STAGING: OnceLock<Arc<dyn MemoryResource>> = OnceLock::new();
    STAGING
        .get_or_init(|| match PinnedMemoryResource::portable() {
            Ok(pinned) => pinned,
            Err(_) => LegacyPinnedMemoryResource::new(Default::default()),
        })
        .clone()
}

/// The future of [`Buffer::to_vec_async`]: the buffer's contents as a vector of `T`, once the
/// copy into pinned staging memory is done.
#[must_use = "a HostCopy does nothing unless awaited"]
pub struct HostCopy<T> {
    /// `None` when there is nothing to copy (no whole element).
    staging: Option<Buffer>,
    done: Completion,
    len: usize,
    _elements: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for HostCopy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCopy")
            .field("len", &self.len)
            .field("done", &self.done)
            .finish()
    }
}

impl<T: Pod> Future for HostCopy<T> {
    type Output = Result<Vec<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<Vec<T>>> {
        match Pin::new(&mut self.done).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let mut out = Vec::new();
                if out.try_reserve_exact(self.len).is_err() {
                    return Poll::Ready(Err(CudaError::InvalidArgument(format!(
                        "to_vec_async: cannot hold {} elements on the host",
                        self.len
                    ))));
                }
                out.resize(self.len, T::zeroed());
                let bytes = std::mem::size_of_val(out.as_slice());
                let Some(staging) = self.staging.as_ref().filter(|_| bytes > 0) else {
                    return Poll::Ready(Ok(out));
                };
                // SAFETY: the staging buffer is pinned host memory of at least `bytes` bytes
                // (allocated so), which the copy queued before the completed signal filled; no
                // GPU work uses it any more (nothing else was queued on it), and the future owns
                // it, so nothing frees it during the read.
                let staged = unsafe { std::slice::from_raw_parts(staging.handle() as usize as *const u8, bytes) };
                bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(staged);
                Poll::Ready(Ok(out))
            }
        }
    }
}

/// The refusal of an awaited copy on a stream being captured.
fn refused(what: &str) -> CudaError {
    CudaError::InvalidState(format!(
        "{what}: a stream being captured records the copy into a graph, which copies at every launch, not now: copy on a stream that is not capturing"
    ))
}

impl Buffer {
    /// The buffer's contents as a vector of `T`, without blocking the thread: the buffer is
    /// copied into pinned staging memory on `stream`, and the returned future resolves (woken by
    /// the driver, see [`Stream::synchronized`]) with the vector once the copy is done. Dropping
    /// the future early is safe (the staging memory is freed after the copy). Not on a stream
    /// being captured.
    pub fn to_vec_async<T: Pod>(&self, stream: &Stream) -> Result<HostCopy<T>> {
        let len = self.size() / std::mem::size_of::<T>().max(1);
        self.to_vec_async_at(self.handle(), len, stream)
    }

    /// [`to_vec_async`](Self::to_vec_async) of `len` elements of `T` at `ptr`, which the caller
    /// checked lie in this buffer (a typed buffer's elements).
    pub(crate) fn to_vec_async_at<T: Pod>(
        &self,
        ptr: driver::CUdeviceptr,
        len: usize,
        stream: &Stream,
    ) -> Result<HostCopy<T>> {
        let item = std::mem::size_of::<T>().max(1);
        let bytes = len
            .checked_mul(item)
            .filter(|b| *b <= self.size())
            .ok_or_else(|| CudaError::InvalidArgument("to_vec_async: the elements do not fit in the buffer".into()))?;
        self.check_device_reads(stream, "to_vec_async")?;
        // Refused before the staging allocation (page-locked allocations are calls a capture
        // prohibits; the copy below is refused on a capturing stream too).
        stream.enqueue(|capture| match capture {
            Some(_) => Err(refused("to_vec_async")),
            None => Ok(()),
        })?;
        let staging = if bytes == 0 {
            None
        } else {
            let staging = Buffer::allocate(staging_resource(), bytes, stream)?;
            if !staging.is_host_accessible() {
                return Err(CudaError::InvalidArgument(
                    "to_vec_async: the staging memory is not host-accessible".into(),
                ));
            }
            enqueue_using(stream, &[self, &staging], |capture| {
                if capture.is_some() {
                    return Err(refused("to_vec_async"));
                }
                // SAFETY: the staging buffer holds `bytes` bytes, and `bytes` bytes at `ptr` lie
                // in this buffer (the caller's check, and `bytes <= size` above); both are held
                // until the copy is done (`enqueue_using`); the stream is not capturing.
                unsafe { driver::cuMemcpyAsync(staging.handle(), ptr, bytes, stream.handle()) }.check("cuMemcpyAsync")
            })?;
            Some(staging)
        };
        let done = stream.synchronized()?;
        Ok(HostCopy {
            staging,
            done,
            len,
            _elements: PhantomData,
        })
    }

    /// Copies `data` into the start of the buffer on `stream`, without blocking the thread:
    /// `data` is kept (where it is) until the copy is done, then dropped on this crate's release
    /// thread; the returned future resolves then. Dropping the future early is safe. Not on a
    /// stream being captured.
    pub fn copy_from_vec_async<T: Pod + Send>(&self, data: Vec<T>, stream: &Stream) -> Result<Completion> {
        let bytes = std::mem::size_of_val(data.as_slice());
        self.check_fits(bytes, "copy_from_vec_async")?;
        self.check_writable("copy_from_vec_async")?;
        let src = data.as_ptr();
        let mut armed = Armed::new();
        // The copy and the callback that ends `data`'s keeping are one operation: no capture can
        // begin between them.
        let queued = enqueue_using(stream, &[self], |capture| {
            if capture.is_some() {
                return Err(refused("copy_from_vec_async"));
            }
            if bytes > 0 {
                // SAFETY: `data` lives, unmoved (a vector's elements stay where they are when the
                // vector moves), until the callback queued after the copy has run (`Armed` keeps
                // it; if the callback cannot be queued, it is never freed); the buffer holds at
                // least `bytes` bytes (checked) and is held until the copy is done; the stream is
                // not capturing.
                unsafe {
                    driver::cuMemcpyAsync(
                        self.handle(),
                        src as usize as driver::CUdeviceptr,
                        bytes,
                        stream.handle(),
                    )
                }
                .check("cuMemcpyAsync")?;
                armed.work_queued();
            }
            armed.queue(stream)
        });
        armed.finish(stream, Box::new(data), queued)
    }
}
