//! Buffers shared between processes: [`IpcBufferDescriptor`], [`Buffer::ipc_descriptor`] and
//! [`Buffer::from_ipc_descriptor`]. What arrives from another process is checked against what
//! the driver says it mapped before any bound check relies on it.

pub mod fd;

use super::{Buffer, DeviceMemoryResource, MemoryPool, MemoryResource, PinnedMemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

/// What another process needs to open a buffer of a shared pool: 64 opaque bytes and the size.
/// Its contents come from another process, so [`Buffer::from_ipc_descriptor`] trusts neither:
/// the driver checks the bytes, and the size is checked against the allocation they open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcBufferDescriptor {
    data: [u8; 64],
    size: usize,
}

impl IpcBufferDescriptor {
    /// A descriptor from its parts (as received from another process).
    pub fn new(data: [u8; 64], size: usize) -> IpcBufferDescriptor {
        IpcBufferDescriptor { data, size }
    }

    /// The driver's export data.
    pub fn data(&self) -> &[u8; 64] {
        &self.data
    }

    /// The size the exporting process gave the buffer, in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// 72 bytes: the data, then the size (little-endian).
    pub fn to_bytes(&self) -> [u8; 72] {
        let mut out = [0u8; 72];
        out[..64].copy_from_slice(&self.data);
        out[64..].copy_from_slice(&(self.size as u64).to_le_bytes());
        out
    }

    /// Reads [`to_bytes`](Self::to_bytes)'s output.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcBufferDescriptor> {
        let (Some(data), Some(size)) = (bytes.get(..64), bytes.get(64..)) else {
            return Err(CudaError::InvalidArgument(
                "an IPC buffer descriptor has 72 bytes".into(),
            ));
        };
        let (Ok(data), Ok(size)) = (<[u8; 64]>::try_from(data), <[u8; 8]>::try_from(size)) else {
            return Err(CudaError::InvalidArgument(
                "an IPC buffer descriptor has 72 bytes".into(),
            ));
        };
        let size = usize::try_from(u64::from_le_bytes(size)).map_err(|_| {
            CudaError::InvalidArgument("the IPC buffer descriptor's size does not fit this machine".into())
        })?;
        Ok(IpcBufferDescriptor { data, size })
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::DeviceMemoryResource {}
    impl Sealed for super::PinnedMemoryResource {}
}

/// A pool resource whose buffers can be shared with other processes: [`DeviceMemoryResource`]
/// and [`PinnedMemoryResource`] (sealed).
pub trait IpcPoolResource: MemoryResource + std::ops::Deref<Target = MemoryPool> + sealed::Sealed {}
impl IpcPoolResource for DeviceMemoryResource {}
impl IpcPoolResource for PinnedMemoryResource {}

impl Buffer {
    /// The descriptor another process opens this buffer with, through the pool it imported.
    pub fn ipc_descriptor(&self) -> Result<IpcBufferDescriptor> {
        if self.memory_resource().and_then(|r| r.ipc_pool()).is_none() {
            return Err(CudaError::InvalidState(
                "Memory resource is not IPC-enabled (or its pool was not exported yet): only buffers of an ipc_enabled pool that was exported (export_fd) can be shared".into(),
            ));
        }
        let mut data = driver::CUmemPoolPtrExportData::default();
        // SAFETY: the buffer is a live allocation of an IPC pool; out-pointer to a local.
        unsafe { driver::cuMemPoolExportPointer(&mut data, self.handle()) }.check("cuMemPoolExportPointer")?;
        Ok(IpcBufferDescriptor {
            data: data.reserved,
            size: self.size(),
        })
    }

    /// Opens a buffer another process shared, from the pool imported from it. Freeing it (on
    /// drop) releases this process's mapping; the exporting process owns the memory and must
    /// not free it before this process does (a contract between the processes).
    ///
    /// The descriptor is not trusted: the pointer the driver maps must start an allocation at
    /// least as large as the descriptor's size, and a pointer already imported (and not yet
    /// freed) in this process is refused (share that buffer instead).
    pub fn from_ipc_descriptor<R: IpcPoolResource>(
        pool: &Arc<R>,
        descriptor: &IpcBufferDescriptor,
        stream: &Stream,
    ) -> Result<Buffer> {
        if !pool.is_ipc_enabled() {
            return Err(CudaError::InvalidState(
                "Memory resource is not IPC-enabled: open shared buffers through the pool imported with from_fd".into(),
            ));
        }
        if !pool.is_mapped() {
            return Err(CudaError::InvalidArgument(
                "open shared buffers through the pool imported with from_fd (this is the pool that shares them)".into(),
            ));
        }
        let mut data = driver::CUmemPoolPtrExportData {
            reserved: descriptor.data,
        };
        let mut ptr = 0;
        let context = match MemoryResource::device(pool.as_ref()) {
            Some(d) => d,
            None => Device::current()?,
        }
        .primary_context()?;
        context.with_current(|| {
            // SAFETY: the pool is live; the export data is opaque to us and checked by the driver.
            unsafe { driver::cuMemPoolImportPointer(&mut ptr, pool.handle(), &mut data) }
                .check("cuMemPoolImportPointer")
        })?;
        if !(**pool).note_import(ptr) {
            // Already a buffer of this process: a second owner would free its mapping twice.
            return Err(CudaError::InvalidState(
                "this buffer is already imported in this process (and not yet freed): share that Buffer".into(),
            ));
        }
        let checked = (|| {
            let (mut base, mut len) = (0, 0);
            // SAFETY: ptr was just mapped by the import; out-pointers to locals.
            unsafe { driver::cuMemGetAddressRange(&mut base, &mut len, ptr) }.check("cuMemGetAddressRange")?;
            // The pool was opened as a kind of resource: its memory must be that kind (a device
            // pool's memory opened as a pinned pool's would claim the host can touch it).
            let info = super::PointerInfo::of(ptr)?;
            let kind_matches = match MemoryResource::device(pool.as_ref()) {
                Some(d) => info.is_device_memory_of(d.device_id()),
                None => info.is_host_memory(),
            };
            if !kind_matches {
                return Err(CudaError::InvalidArgument(
                    "the shared buffer is not memory of the kind this pool resource holds (device memory of its device, or host memory): open the pool's file descriptor as the resource the other process made, refused".into(),
                ));
            }
            if base != ptr || descriptor.size > len {
                return Err(CudaError::InvalidArgument(format!(
                    "the IPC descriptor claims {} bytes, but the allocation it opens has {len} from {base:#x} (the pointer is {ptr:#x}): refused",
                    descriptor.size
                )));
            }
            Buffer::from_parts(ptr, descriptor.size, Some(pool.clone()), stream)
        })();
        if checked.is_err() {
            let _ = context.with_current(|| {
                // SAFETY: imported above and owned by nothing else (`note_import`); nothing used
                // it. cuMemFree releases the mapping at once.
                unsafe { driver::cuMemFree(ptr) }.check("cuMemFree")
            });
            (**pool).forget_import(ptr);
        }
        checked
    }
}

#[cfg(test)]
mod tests {
    use super::IpcBufferDescriptor;

    #[test]
    fn descriptors_round_trip_and_malformed_bytes_are_errors() {
        let d = IpcBufferDescriptor::new([7; 64], 1 << 20);
        assert_eq!(IpcBufferDescriptor::from_bytes(&d.to_bytes()).unwrap(), d);
        assert!(IpcBufferDescriptor::from_bytes(&[0; 71]).is_err());
        assert!(IpcBufferDescriptor::from_bytes(&[0; 73]).is_err());
        assert!(IpcBufferDescriptor::from_bytes(&[]).is_err());
    }
}
