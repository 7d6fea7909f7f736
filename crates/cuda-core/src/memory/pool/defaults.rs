//! A device's memory resource (`cuda.core`'s `Device.memory_resource`, getter and setter): the
//! one the program chose ([`Device::set_memory_resource`]), else the device's default one, made
//! on first use and kept for the process: its default pool ([`DeviceMemoryResource`]) on a
//! device with memory pools, a [`SynchronousMemoryResource`] (`cuMemAlloc`/`cuMemFree`) on one
//! without, as `cuda.core` chooses.

use super::{DeviceMemoryResource, SynchronousMemoryResource};
use crate::device::Device;
use crate::memory::{Buffer, MemoryResource};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// A device's default pool, kept for the whole process: as its own type, and as the resource
/// buffers hold (the same allocation).
struct DefaultPool {
    typed: Arc<DeviceMemoryResource>,
    erased: Arc<dyn MemoryResource>,
}

/// A device's default resource.
enum Default {
    /// The device's default pool.
    Pool(DefaultPool),
    /// A device without memory pools: synchronous allocations.
    Synchronous(Arc<dyn MemoryResource>),
}

/// What this process keeps per device.
struct Slot {
    default: OnceLock<Default>,
    /// The resource the program chose, if any.
    chosen: RwLock<Option<Arc<dyn MemoryResource>>>,
}

/// Whether any device has a chosen resource (a cheap check before reading one).
static ANY_CHOSEN: AtomicBool = AtomicBool::new(false);

/// The slot of `device`; `None` for a device the driver did not count when the table was made.
fn slot(device: &Device) -> Option<&'static Slot> {
    static SLOTS: OnceLock<Vec<Slot>> = OnceLock::new();
    SLOTS
        .get_or_init(|| {
            (0..crate::device_count().unwrap_or(0))
                .map(|_| Slot {
                    default: OnceLock::new(),
                    chosen: RwLock::new(None),
                })
                .collect()
        })
        .get(device.device_id())
}

/// Which default `cuda.core` gives a device whose `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`
/// is `pools_supported`: its pool when 1, synchronous allocations otherwise.
pub(crate) fn uses_pool(pools_supported: i32) -> bool {
    pools_supported == 1
}

impl Device {
    /// The device's default resource, made on first use and kept in a `static` (never dropped).
    /// `None` for a device the driver did not count when the table was made.
    fn default_resource(&self) -> Result<Option<&'static Default>> {
        let Some(slot) = slot(self) else {
            return Ok(None);
        };
        if let Some(d) = slot.default.get() {
            return Ok(Some(d));
        }
        let pools = self.attribute(driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
        let made = if uses_pool(pools) {
            let typed = DeviceMemoryResource::default_pool(self)?;
            Default::Pool(DefaultPool {
                erased: typed.clone(),
                typed,
            })
        } else {
            Default::Synchronous(SynchronousMemoryResource::new(self))
        };
        let stored = slot.default.get_or_init(|| made);
        // The resource in the static (not one a racing thread made and dropped) learns where it
        // lives: its buffers hold it from there, uncounted.
        if let Default::Pool(pool) = stored {
            pool.typed.set_process(&pool.erased);
        }
        Ok(Some(stored))
    }

    /// The resource the program chose for this device, if any.
    #[inline]
    fn chosen_resource(&self) -> Option<Arc<dyn MemoryResource>> {
        if !ANY_CHOSEN.load(Ordering::Acquire) {
            return None;
        }
        slot(self)?.chosen.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The device's default pool as its own type, made once per device (`cuda.core`'s
    /// `Device.memory_resource` before a setter ran, on a device with memory pools). On a
    /// device without memory pools this is an error ([`ErrorKind::NotImplemented`]): its
    /// default resource is a [`SynchronousMemoryResource`], which
    /// [`active_memory_resource`](Self::active_memory_resource) returns.
    ///
    /// [`ErrorKind::NotImplemented`]: crate::ErrorKind::NotImplemented
    pub fn memory_resource(&self) -> Result<Arc<DeviceMemoryResource>> {
        match self.default_resource()? {
            Some(Default::Pool(d)) => Ok(d.typed.clone()),
            Some(Default::Synchronous(_)) => Err(CudaError::NotSupported(format!(
                "device {} does not support memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): its default \
                 resource is a SynchronousMemoryResource; use Device::active_memory_resource or Device::allocate",
                self.device_id()
            ))),
            None => DeviceMemoryResource::default_pool(self),
        }
    }

    /// The resource [`allocate`](Self::allocate) uses (`cuda.core`'s `Device.memory_resource`
    /// getter): the one set with [`set_memory_resource`](Self::set_memory_resource), else the
    /// device's default (its pool, or a [`SynchronousMemoryResource`] on a device without
    /// memory pools).
    pub fn active_memory_resource(&self) -> Result<Arc<dyn MemoryResource>> {
        if let Some(chosen) = self.chosen_resource() {
            return Ok(chosen);
        }
        match self.default_resource()? {
            Some(Default::Pool(d)) => Ok(d.erased.clone()),
            Some(Default::Synchronous(s)) => Ok(s.clone()),
            None => Ok(DeviceMemoryResource::default_pool(self)?),
        }
    }

    /// Makes `resource` the one [`allocate`](Self::allocate) and
    /// [`allocate_from_slice`](Self::allocate_from_slice) use on this device (`cuda.core`'s
    /// `Device.memory_resource = mr`), returning the one set before (`None` when the default
    /// was in use). Buffers already allocated keep their own resource. Any resource is taken,
    /// as `cuda.core` takes any `MemoryResource` (a pinned or managed one, one of another
    /// device); to go back to the default, set [`memory_resource`](Self::memory_resource)'s.
    ///
    /// Unlike `cuda.core`, whose `Device` objects are per thread, the choice is the process's:
    /// every thread allocating on the device sees it.
    pub fn set_memory_resource(&self, resource: Arc<dyn MemoryResource>) -> Result<Option<Arc<dyn MemoryResource>>> {
        let Some(slot) = slot(self) else {
            return Err(CudaError::InvalidArgument(format!(
                "device {} was not counted by the driver when this process first asked (cuDeviceGetCount)",
                self.device_id()
            )));
        };
        let previous = slot.chosen.write().unwrap_or_else(|p| p.into_inner()).replace(resource);
        ANY_CHOSEN.store(true, Ordering::Release);
        Ok(previous)
    }

    /// `size` bytes from the device's resource ([`active_memory_resource`](Self::active_memory_resource)),
    /// ordered on `stream`.
    pub fn allocate(&self, size: usize, stream: &Stream) -> Result<Buffer> {
        if let Some(chosen) = self.chosen_resource() {
            return Buffer::allocate(chosen, size, stream);
        }
        match self.default_resource()? {
            Some(Default::Pool(d)) => d.typed.allocate(size, stream),
            Some(Default::Synchronous(s)) => Buffer::allocate(s.clone(), size, stream),
            None => DeviceMemoryResource::default_pool(self)?.allocate(size, stream),
        }
    }

    /// A buffer from the device's resource holding a copy of `data`, ordered on `stream`; waits
    /// for the copy (see [`Buffer::from_slice`]).
    pub fn allocate_from_slice<T: crate::Pod>(&self, data: &[T], stream: &Stream) -> Result<Buffer> {
        Buffer::from_slice(self.active_memory_resource()?, data, stream)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_device_without_memory_pools_gets_the_synchronous_resource() {
        assert!(super::uses_pool(1));
        assert!(!super::uses_pool(0));
    }
}
