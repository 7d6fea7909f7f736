//! [`Holder`]: what keeps a buffer's memory resource alive, and how its memory is freed.

use crate::memory::MemoryResource;
use std::sync::Arc;

/// A buffer's hold on its resource: a counted reference, or a reference to a resource that
/// lives as long as the process (a device's default pool, made once and never dropped); and
/// whether the memory is freed by the resource's `deallocate` or, known to be the same, by
/// `cuMemFreeAsync` directly.
///
/// An uncounted hold costs nothing per buffer. A resource every thread allocates from would
/// otherwise have its reference count written by every allocation and every free, from every
/// thread: two atomic read-modify-writes on one cache line that the threads pass around.
#[derive(Clone)]
pub(crate) enum Holder {
    /// The buffer holds a reference of its own; the memory is freed by the resource's
    /// `deallocate`.
    Counted(Arc<dyn MemoryResource>),
    /// A counted pool resource whose `deallocate` is exactly `cuMemFreeAsync` on the stream
    /// given (a [`DeviceMemoryResource`](crate::memory::DeviceMemoryResource) made in this
    /// process, not imported): the memory is freed without a dynamic call.
    Pool(Arc<dyn MemoryResource>),
    /// A device's default resource, stored in a `static`: never dropped, so not counted. Its
    /// `deallocate` is exactly `cuMemFreeAsync` too.
    Process(&'static Arc<dyn MemoryResource>),
}

impl Holder {
    /// The resource as an `Arc` (for [`super::Buffer::memory_resource`]).
    #[inline]
    pub(crate) fn arc(&self) -> &Arc<dyn MemoryResource> {
        match self {
            Holder::Counted(a) | Holder::Pool(a) => a,
            Holder::Process(a) => a,
        }
    }

    /// Whether the resource's `deallocate` is exactly `cuMemFreeAsync(ptr, stream)`, so that the
    /// memory may be freed by that call directly.
    #[inline]
    pub(crate) fn frees_async(&self) -> bool {
        !matches!(self, Holder::Counted(_))
    }

    /// Whether this is the only reference to a counted resource.
    pub(crate) fn is_unique(&self) -> bool {
        matches!(self, Holder::Counted(a) | Holder::Pool(a) if Arc::strong_count(a) == 1)
    }
}

impl std::ops::Deref for Holder {
    type Target = dyn MemoryResource;

    #[inline]
    fn deref(&self) -> &(dyn MemoryResource + 'static) {
        &**self.arc()
    }
}
