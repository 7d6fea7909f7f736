//! [`Holder`]: what keeps a buffer's memory resource alive.

use crate::memory::{DeviceMemoryResource, MemoryResource};
use std::sync::Arc;

/// A buffer's hold on its resource: a counted reference, or a reference to a resource that
/// lives as long as the process (a device's default pool, made once and never dropped).
///
/// The second costs nothing per buffer. A resource every thread allocates from would otherwise
/// have its reference count written by every allocation and every free, from every thread: two
/// atomic read-modify-writes on one cache line that the threads pass around.
#[derive(Clone)]
pub(crate) enum Holder {
    /// The buffer holds a reference of its own.
    Counted(Arc<dyn MemoryResource>),
    /// A device's default resource, stored in a `static`: never dropped, so not counted; also
    /// as its own type, so that its memory is freed without a dynamic call.
    Process(&'static Arc<dyn MemoryResource>, &'static DeviceMemoryResource),
}

impl Holder {
    /// The resource as an `Arc` (for [`super::Buffer::memory_resource`]).
    #[inline]
    pub(crate) fn arc(&self) -> &Arc<dyn MemoryResource> {
        match self {
            Holder::Counted(a) => a,
            Holder::Process(a, _) => a,
        }
    }

    /// Whether this is the only reference to a counted resource.
    pub(crate) fn is_unique(&self) -> bool {
        matches!(self, Holder::Counted(a) if Arc::strong_count(a) == 1)
    }
}

impl std::ops::Deref for Holder {
    type Target = dyn MemoryResource;

    #[inline]
    fn deref(&self) -> &(dyn MemoryResource + 'static) {
        &**self.arc()
    }
}
