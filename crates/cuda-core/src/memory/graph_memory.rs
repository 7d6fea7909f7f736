//! [`GraphMemoryResource`]: the memory graphs allocate, and its usage figures.

use super::{free_async, Buffer, MemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

/// The memory graphs allocate on a device (allocation nodes, and allocations captured into
/// graphs): its usage figures, and a resource that allocates only while a stream is being
/// captured (each allocation becomes an allocation node of the graph recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphMemoryResource {
    device: Device,
}

impl GraphMemoryResource {
    /// The graph memory of `device`: one resource per device, as in `cuda.core` (every call for
    /// a device gives the same `Arc`).
    pub fn new(device: &Device) -> Arc<GraphMemoryResource> {
        static INTERNED: std::sync::Mutex<Vec<Arc<GraphMemoryResource>>> = std::sync::Mutex::new(Vec::new());
        let mut interned = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = interned.iter().find(|r| r.device == *device) {
            return r.clone();
        }
        let r = Arc::new(GraphMemoryResource { device: *device });
        interned.push(r.clone());
        r
    }

    /// `size` bytes of graph memory, as an allocation node of the graph `stream` is recording.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    fn attribute(&self, attr: driver::CUgraphMem_attribute) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: the graph memory attributes are 64-bit values; out-pointer to a local.
        unsafe { driver::cuDeviceGetGraphMemAttribute(self.device.handle(), attr, (&mut v as *mut u64).cast()) }
            .check("cuDeviceGetGraphMemAttribute")?;
        Ok(v)
    }

    /// Bytes of graph allocations live now.
    pub fn used_mem_current(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
    }

    /// The most bytes of graph allocations live at once since the last reset.
    pub fn used_mem_high(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
    }

    /// Bytes the driver holds for graph allocations.
    pub fn reserved_mem_current(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The most bytes held for graph allocations since the last reset.
    pub fn reserved_mem_high(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    }

    /// Resets both high-water marks to the current figures.
    pub fn reset_high_water_marks(&self) -> Result<()> {
        for attr in [
            driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
        ] {
            let mut zero = 0u64;
            // SAFETY: the only value these attributes accept is 0, passed as a 64-bit value.
            unsafe { driver::cuDeviceSetGraphMemAttribute(self.device.handle(), attr, (&mut zero as *mut u64).cast()) }
                .check("cuDeviceSetGraphMemAttribute")?;
        }
        Ok(())
    }

    /// Gives memory held for graph allocations but unused back to the system
    /// (`cuDeviceGraphMemTrim`).
    pub fn trim(&self) -> Result<()> {
        // SAFETY: a valid device handle.
        unsafe { driver::cuDeviceGraphMemTrim(self.device.handle()) }.check("cuDeviceGraphMemTrim")
    }
}

// SAFETY: cuMemAllocAsync on a capturing stream records an allocation node on that stream (graph
// memory, which `Buffer` confines to the capture); it refuses other streams. The memory is device
// memory of `device`.
unsafe impl MemoryResource for GraphMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        if crate::stream::capture::capture_info(stream.handle())?.is_none() {
            return Err(CudaError::InvalidState(
                "GraphMemoryResource cannot perform memory operations on a non-capturing stream: it allocates only on a stream being captured into a graph (a GraphBuilder's stream)"
                    .into(),
            ));
        }
        let mut ptr = 0;
        // SAFETY: the stream is capturing; out-pointer to a local.
        unsafe { driver::cuMemAllocAsync(&mut ptr, size, stream.handle()) }.check("cuMemAllocAsync")?;
        Ok(ptr)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller; graph memory may be freed in the graph or outside it.
        unsafe { free_async(ptr, stream) }
    }
    fn frees_in_stream_order(&self) -> bool {
        true
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        false
    }
    fn device(&self) -> Option<Device> {
        Some(self.device)
    }
}
