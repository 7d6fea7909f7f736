//! [`Holder`]: what keeps a buffer's memory resource alive, and how its memory is freed.

use crate::memory::{DeviceMemoryResource, MemoryResource};
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
    /// A counted [`DeviceMemoryResource`] that is not imported, whose `deallocate` is exactly
    /// `cuMemFreeAsync` on the stream given: the memory is freed without a dynamic call. Made
    /// only by [`of_local_pool`](Self::of_local_pool).
    Pool(Arc<dyn MemoryResource>),
    /// A device's default resource, stored in a `static`: never dropped, so not counted. Its
    /// `deallocate` is exactly `cuMemFreeAsync` too. Made only by
    /// [`of_local_pool`](Self::of_local_pool).
    Process(&'static Arc<dyn MemoryResource>),
}

impl Holder {
    /// How a buffer of `resource` holds it: uncounted for a device's default resource (it lives
    /// in a `static`), counted otherwise; freed with `cuMemFreeAsync` directly unless the pool
    /// was imported from another process (whose free also forgets the import).
    #[inline]
    pub(crate) fn of_device_pool(resource: &Arc<DeviceMemoryResource>) -> Holder {
        if resource.is_imported() {
            return Holder::Counted(resource.clone());
        }
        Holder::of_local_pool(resource)
    }

    /// [`of_device_pool`](Self::of_device_pool) for a resource whose pool was made in this
    /// process (the caller checked that it is not imported).
    #[inline]
    pub(crate) fn of_local_pool(resource: &Arc<DeviceMemoryResource>) -> Holder {
        debug_assert!(!resource.is_imported());
        match resource.process_resource() {
            Some(r) => Holder::Process(r),
            None => Holder::Pool(resource.clone()),
        }
    }

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

    /// Whether the resource's free waits for the stream's work (it is not stream-ordered): a
    /// drop then hands it to the release thread, to be done after that work.
    #[inline]
    pub(crate) fn waits_to_free(&self) -> bool {
        !self.frees_async() && !self.arc().frees_in_stream_order()
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
