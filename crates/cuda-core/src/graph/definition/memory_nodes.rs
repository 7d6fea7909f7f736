//! Allocation, free, memset and copy nodes: buffers are held by the graph, raw addresses are
//! `unsafe`, and every extent is checked arithmetic.

use super::*;

pub(crate) fn memcpy_params(dst: driver::CUdeviceptr, src: driver::CUdeviceptr, size: usize) -> driver::CUDA_MEMCPY3D {
    driver::CUDA_MEMCPY3D {
        srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        srcDevice: src,
        dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        dstDevice: dst,
        WidthInBytes: size,
        Height: 1,
        Depth: 1,
        ..Default::default()
    }
}

/// The bytes a memset of `height` rows of `width` elements of `element` bytes, `pitch` bytes
/// apart, reaches from its start; an error for a row wider than the pitch, no rows, or figures
/// that overflow.
pub(crate) fn memset_extent(width: usize, height: usize, pitch: usize, element: u32) -> Result<usize> {
    let overflow = || {
        CudaError::InvalidArgument(format!(
            "memset: {height} rows of {width} elements of {element} bytes, {pitch} bytes apart, overflow the address space"
        ))
    };
    if height == 0 {
        return Err(CudaError::InvalidArgument("memset: height must be at least 1".into()));
    }
    let row = width.checked_mul(element as usize).ok_or_else(overflow)?;
    if height > 1 && pitch < row {
        return Err(CudaError::InvalidArgument(format!(
            "memset: a pitch of {pitch} bytes is less than a row of {row}"
        )));
    }
    (height - 1)
        .checked_mul(pitch)
        .and_then(|b| b.checked_add(row))
        .ok_or_else(overflow)
}

macro_rules! memory_node_adders {
    ($ty:ty) => {
        impl $ty {
            /// An allocation node: `size` bytes of graph memory, valid from this node until a
            /// [`deallocate`](Self::deallocate) node (or, without one, until freed outside the
            /// graph). Its address is in [`GraphNode::params`] (`MemAlloc { dptr, .. }`).
            pub fn allocate(&self, size: usize, options: &GraphAllocOptions) -> Result<GraphNode> {
                let device = match options.device {
                    Some(d) => d,
                    None => Device::current()?,
                };
                let access: Vec<driver::CUmemAccessDesc> = options.peer_access.iter().map(read_write_access).collect();
                self.append().add(&[], nothing, |reg, g, deps| {
                    reg.has_graph_memory = true;
                    let mut props = driver::CUmemPoolProps {
                        allocType: match options.memory_type {
                            GraphMemoryType::Managed => driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED,
                            _ => driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
                        },
                        location: match options.memory_type {
                            GraphMemoryType::Device | GraphMemoryType::Managed => {
                                crate::memory::device_location(&device)
                            }
                            GraphMemoryType::Host => {
                                crate::memory::location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0)
                            }
                        },
                        ..Default::default()
                    };
                    props.handleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
                    let mut p = driver::CUDA_MEM_ALLOC_NODE_PARAMS {
                        poolProps: props,
                        accessDescs: access.as_ptr(),
                        accessDescCount: access.len(),
                        bytesize: size,
                        dptr: 0,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph and dependencies are live; p and the access array live
                    // across the call.
                    unsafe { driver::cuGraphAddMemAllocNode(&mut node, g, deps.as_ptr(), deps.len(), &mut p) }
                        .check("cuGraphAddMemAllocNode")?;
                    Ok(node)
                })
            }

            /// A node freeing the memory `alloc` (an allocation node of this graph) made.
            pub fn deallocate(&self, alloc: &GraphNode) -> Result<GraphNode> {
                let dptr = match alloc.params()? {
                    NodeParams::MemAlloc { dptr, .. } => dptr,
                    other => {
                        return Err(CudaError::InvalidArgument(format!(
                            "deallocate takes an allocation node, not {other:?}"
                        )))
                    }
                };
                self.append().add(&[], nothing, |_, g, deps| {
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph and dependencies are live; dptr is a graph allocation.
                    unsafe { driver::cuGraphAddMemFreeNode(&mut node, g, deps.as_ptr(), deps.len(), dptr) }
                        .check("cuGraphAddMemFreeNode")?;
                    Ok(node)
                })
            }

            /// A memset node writing `value` (1, 2 or 4 bytes wide) `count` times from the
            /// start of `dst`. The graph holds `dst`'s memory.
            pub fn memset(&self, dst: &Buffer, value: impl Into<MemsetValue>, count: usize) -> Result<GraphNode> {
                self.memset_2d(dst, value, count, 1, 0)
            }

            /// A 2D memset node: `height` rows of `width` elements, `pitch` bytes apart.
            pub fn memset_2d(
                &self,
                dst: &Buffer,
                value: impl Into<MemsetValue>,
                width: usize,
                height: usize,
                pitch: usize,
            ) -> Result<GraphNode> {
                let value = value.into();
                refuse_graph_memory(dst, "memset")?;
                let extent = memset_extent(width, height, pitch, value.parts().1)?;
                dst.check_fits(extent, "memset")?;
                dst.check_writable("memset")?;
                let ready = dst.graph_fence()?;
                // SAFETY: the region lies inside dst (checked arithmetic above), whose memory the
                // graph holds (handed over before the node is added).
                unsafe {
                    self.memset_node(dst.handle(), value, width, height, pitch, |h| {
                        h.hold_buffer(dst, &ready)
                    })
                }
            }

            /// A memset node on raw device memory (such as a graph allocation).
            ///
            /// # Safety
            /// The region is valid device memory whenever the graph runs.
            pub unsafe fn memset_raw(
                &self,
                dst: driver::CUdeviceptr,
                value: impl Into<MemsetValue>,
                width: usize,
                height: usize,
                pitch: usize,
            ) -> Result<GraphNode> {
                // SAFETY: forwarded to the caller.
                unsafe { self.memset_node(dst, value.into(), width, height, pitch, nothing) }
            }

            /// A memset node, after `hold` hands the graph what it uses.
            ///
            /// # Safety
            /// The region is valid device memory whenever the graph runs.
            unsafe fn memset_node(
                &self,
                dst: driver::CUdeviceptr,
                value: MemsetValue,
                width: usize,
                height: usize,
                pitch: usize,
                hold: impl FnOnce(&mut Holder<'_>) -> Result<()>,
            ) -> Result<GraphNode> {
                let (value, element_size) = value.parts();
                if height == 0 {
                    return Err(CudaError::InvalidArgument(
                        "memset: height must be at least 1".into(),
                    ));
                }
                let ctx = current_context("memset")?;
                self.append().add(&[], hold, |_, g, deps| {
                    let p = driver::CUDA_MEMSET_NODE_PARAMS {
                        dst,
                        pitch: if height > 1 { pitch } else { 0 },
                        value,
                        elementSize: element_size,
                        width,
                        height,
                    };
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph, dependencies and context are live; the caller vouches for dst.
                    unsafe { driver::cuGraphAddMemsetNode(&mut node, g, deps.as_ptr(), deps.len(), &p, ctx) }
                        .check("cuGraphAddMemsetNode")?;
                    Ok(node)
                })
            }

            /// A copy node: the first `size` bytes of `src` into `dst`. The graph holds both.
            /// Refused, as [`Buffer::copy_to`] is, where the device of the current context (the
            /// node's) may not write `dst` or read `src`: host-location virtual memory without
            /// device peers, for one, whose access would fault the context at every launch.
            pub fn memcpy(&self, dst: &Buffer, src: &Buffer, size: usize) -> Result<GraphNode> {
                refuse_graph_memory(dst, "memcpy")?;
                refuse_graph_memory(src, "memcpy")?;
                dst.check_fits(size, "memcpy destination")?;
                dst.check_writable("memcpy")?;
                src.check_fits(size, "memcpy source")?;
                // The node runs in the current context: its device must be able to read the
                // source (host-location virtual memory without device peers faults it).
                src.check_current_device_reads("memcpy")?;
                let (dst_ready, src_ready) = (dst.graph_fence()?, src.graph_fence()?);
                // SAFETY: both ranges lie inside buffers whose memory the graph holds (handed
                // over before the node is added).
                unsafe {
                    self.memcpy_node(dst.handle(), src.handle(), size, |h| {
                        h.hold_buffer(dst, &dst_ready)?;
                        h.hold_buffer(src, &src_ready)
                    })
                }
            }

            /// A copy node between raw addresses (such as graph allocations).
            ///
            /// # Safety
            /// Both ranges are valid memory whenever the graph runs.
            pub unsafe fn memcpy_raw(
                &self,
                dst: driver::CUdeviceptr,
                src: driver::CUdeviceptr,
                size: usize,
            ) -> Result<GraphNode> {
                // SAFETY: forwarded to the caller.
                unsafe { self.memcpy_node(dst, src, size, nothing) }
            }

            /// A copy node, after `hold` hands the graph what it uses.
            ///
            /// # Safety
            /// Both ranges are valid memory whenever the graph runs.
            unsafe fn memcpy_node(
                &self,
                dst: driver::CUdeviceptr,
                src: driver::CUdeviceptr,
                size: usize,
                hold: impl FnOnce(&mut Holder<'_>) -> Result<()>,
            ) -> Result<GraphNode> {
                let ctx = current_context("memcpy")?;
                self.append().add(&[], hold, |_, g, deps| {
                    let p = memcpy_params(dst, src, size);
                    let mut node = std::ptr::null_mut();
                    // SAFETY: graph, dependencies and context are live; the caller vouches for
                    // the ranges.
                    unsafe { driver::cuGraphAddMemcpyNode(&mut node, g, deps.as_ptr(), deps.len(), &p, ctx) }
                        .check("cuGraphAddMemcpyNode")?;
                    Ok(node)
                })
            }
        }
    };
}

memory_node_adders!(GraphDefinition);
memory_node_adders!(GraphNode);

#[cfg(test)]
mod tests {
    use super::memset_extent;
    use proptest::prelude::*;

    #[test]
    fn the_audits_wrapping_memsets_are_refused() {
        let d = 1usize << 20;
        // A row of 2^62 + 16 four-byte elements wraps to 64 bytes.
        assert!(memset_extent((1 << 62) + 16, 2, 64, 4).is_err());
        // A pitch that is negative as unsigned would put row 1 before the buffer: the extent is
        // then larger than any buffer (and `check_fits` refuses it), never wrapped to a small one.
        assert!(memset_extent(16, 2, 0usize.wrapping_sub(d), 1).unwrap() > usize::MAX - d);
        assert!(memset_extent(16, 0, 16, 1).is_err(), "no rows");
        assert!(memset_extent(32, 2, 16, 1).is_err(), "a row wider than the pitch");
        assert_eq!(memset_extent(16, 2, 32, 1).unwrap(), 48);
        assert_eq!(memset_extent(4, 1, 0, 4).unwrap(), 16);
    }

    proptest! {
        #[test]
        fn memset_extents_are_exact_or_refused(
            width in prop_oneof![0usize..1024, any::<usize>()],
            height in prop_oneof![0usize..16, any::<usize>()],
            pitch in prop_oneof![0usize..4096, any::<usize>()],
            element in prop_oneof![Just(1u32), Just(2), Just(4)],
        ) {
            let row = width as u128 * element as u128;
            let exact = (height as u128).checked_sub(1).map(|h| h * pitch as u128 + row);
            match memset_extent(width, height, pitch, element) {
                Ok(extent) => {
                    prop_assert_eq!(Some(extent as u128), exact);
                    prop_assert!(height <= 1 || pitch as u128 >= row);
                }
                Err(_) => prop_assert!(
                    height == 0 || row > usize::MAX as u128 || (height > 1 && (pitch as u128) < row)
                        || exact.is_some_and(|e| e > usize::MAX as u128)
                ),
            }
        }
    }
}
