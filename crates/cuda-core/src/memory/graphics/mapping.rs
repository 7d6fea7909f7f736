//! A mapping of a registered resource: [`Mapping`], the memory resource whose "free" is the
//! stream-ordered unmap, and the guards [`MappedBuffer`] and [`MappedImage`].

use super::array::MappedArray;
use super::registered::Registered;
use super::{GraphicsRegisterFlags, GraphicsResource};
use crate::device::Device;
use crate::error::{record_drop_error, Check};
use crate::memory::buffer::Buffer;
use crate::memory::MemoryResource;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// The memory resource of one mapping: it allocates nothing, and "frees" by unmapping
/// (`cuGraphicsUnmapResources` on the stream the buffer is freed on, which the buffer has ordered
/// after every other stream that used it; parked for the registering thread when released on
/// another, see `registered`). It holds the registration until then, so the unregistration
/// follows the unmap.
pub(super) struct Mapping {
    registered: Mutex<Option<Arc<Registered>>>,
    device: Device,
    /// Whether CUDA may write the memory (not registered read-only).
    writable: bool,
}

impl Mapping {
    pub(super) fn new(registered: &Arc<Registered>) -> Arc<Mapping> {
        Arc::new(Mapping {
            registered: Mutex::new(Some(registered.clone())),
            device: registered.context.device(),
            writable: !registered.flags.contains(GraphicsRegisterFlags::READ_ONLY),
        })
    }
}

// SAFETY: a mapping allocates nothing. Its buffers (made here, over the pointer the driver gave for
// the mapping, or zero-byte lifelines) are device memory that stays mapped until `deallocate`:
// the unmap is queued on `stream`, and the driver completes the CUDA work queued there before
// it first. Read-only registrations answer neither device- nor host-accessible, so no safe write
// reaches memory CUDA promised not to write; the answers never change.
unsafe impl MemoryResource for Mapping {
    fn allocate(&self, _size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        Err(CudaError::InvalidArgument(
            "a mapped graphics resource allocates nothing: allocate from a memory resource".into(),
        ))
    }
    unsafe fn deallocate(&self, _ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // Taken: a mapping is released once, and a buffer that keeps this resource after a
        // failed release keeps no registration with it (a failed unmap stays parked there).
        let Some(registered) = self.registered.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(());
        };
        // SAFETY: forwarded to the caller (the buffer's free): nothing uses the mapping after the
        // work already queued on `stream`; it is mapped (each mapping has one buffer, freed once).
        unsafe { registered.release_mapping(stream) }
    }
    fn frees_in_stream_order(&self) -> bool {
        // The unmap is queued on the stream (or parked for the registering thread), except for
        // EGL images, whose release waits for the stream.
        self.registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_none_or(|r| r.driver_maps())
    }
    fn is_device_accessible(&self) -> bool {
        self.writable
    }
    fn is_host_accessible(&self) -> bool {
        false
    }
    fn device(&self) -> Option<Device> {
        Some(self.device)
    }
}

/// Maps `registered` on `stream` and makes the buffer (over `pointer`'s answer: the mapped
/// address and size) whose free unmaps; a failure after the map unmaps at once.
pub(super) fn mapped_buffer(
    registered: &Arc<Registered>,
    stream: &Stream,
    pointer: impl FnOnce(&Registered) -> Result<(driver::CUdeviceptr, usize)>,
) -> Result<Buffer> {
    registered.map(stream)?;
    let made = pointer(registered)
        .and_then(|(ptr, size)| Buffer::from_parts(ptr, size, Some(Mapping::new(registered)), stream));
    match made {
        Ok(buffer) => Ok(buffer),
        Err(e) => {
            // SAFETY: mapped above, and nothing was handed out that could use it.
            if let Err(unmap) = unsafe { registered.release_mapping(stream) } {
                record_drop_error(unmap);
            }
            Err(e)
        }
    }
}

/// [`GraphicsResource::map`]: the buffer over the mapped pointer.
pub(super) fn map_buffer<'r>(registered: &Arc<Registered>, stream: &Stream) -> Result<MappedBuffer<'r>> {
    let buffer = mapped_buffer(registered, stream, |r| {
        let (mut ptr, mut size) = (0, 0);
        r.context.with_current(|| {
            // SAFETY: out-pointers to locals; the resource is registered and mapped.
            unsafe { driver::cuGraphicsResourceGetMappedPointer(&mut ptr, &mut size, r.raw()) }
                .check("cuGraphicsResourceGetMappedPointer")
        })?;
        Ok((ptr, size))
    })?;
    Ok(MappedBuffer {
        buffer,
        _resource: PhantomData,
    })
}

/// [`GraphicsResource::map_image`]: a zero-byte lifeline covers the arrays.
pub(super) fn map_image<'r>(registered: &Arc<Registered>, stream: &Stream) -> Result<MappedImage<'r>> {
    let lifeline = Arc::new(mapped_buffer(registered, stream, |_| Ok((0, 0)))?);
    Ok(MappedImage {
        lifeline,
        registered: registered.clone(),
        _resource: PhantomData,
    })
}

/// An OpenGL buffer mapped for CUDA ([`GraphicsResource::map`]): the mapped memory as a
/// [`Buffer`], lent through `Deref` for as long as the guard lives. Use it like any buffer, on
/// any stream: kernel arguments, copies, fills, views. The guard borrows the resource
/// exclusively, so it is not closed nor mapped again meanwhile.
///
/// Dropping the guard unmaps (as [`unmap`](Self::unmap) does, on the stream the buffer was mapped
/// on, recording an error for [`crate::take_drop_errors`]): the unmap is queued after a fence
/// from every other stream that used the buffer, so graphics work issued afterwards sees all of
/// CUDA's writes. The GL context must be current on this thread then: else the driver refuses the
/// unmap (`CUDA_ERROR_INVALID_GRAPHICS_CONTEXT`, recorded), the resource's next call with the
/// context current retries it, and on driver 580 the resource cannot be mapped again afterwards
/// (the driver answers `CUDA_ERROR_ALREADY_MAPPED`). A graph that recorded work on the buffer holds
/// the mapping instead, and the unmap follows once it and its launches are done (queued by the
/// resource's next call on this thread, see [`GraphicsResource::is_mapped`]).
pub struct MappedBuffer<'r> {
    buffer: Buffer,
    _resource: PhantomData<&'r mut GraphicsResource>,
}

impl MappedBuffer<'_> {
    /// The mapped memory.
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// Unmaps on `stream` (`cuda.core`'s `unmap(stream=...)`): `stream` is first ordered after the
    /// mapping stream and every stream that used the buffer, then `cuGraphicsUnmapResources` is
    /// queued on it. Returns what the driver said.
    pub fn unmap(self, stream: &Stream) -> Result<()> {
        self.buffer.close(Some(stream))
    }
}

impl Deref for MappedBuffer<'_> {
    type Target = Buffer;
    fn deref(&self) -> &Buffer {
        &self.buffer
    }
}

impl fmt::Debug for MappedBuffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedBuffer({:?})", self.buffer)
    }
}

/// An OpenGL image mapped for CUDA ([`GraphicsResource::map_image`]): its arrays, borrowed from
/// the guard ([`array`](Self::array)), are valid while it lives. Dropping the guard unmaps, as
/// [`unmap`](Self::unmap) does on the stream it was mapped on, after the work of every stream
/// that used the arrays (their copies go through a zero-byte lifeline buffer of the mapping, as
/// any buffer's do).
///
/// Textures and surfaces made from its arrays
/// ([`ResourceDescriptor::from_mapped_array`](crate::texture::ResourceDescriptor::from_mapped_array))
/// hold the mapping, as a graph that recorded work on it does: then the unmap follows the last of
/// them and their work, on the stream the image was mapped on, queued by this thread's next
/// graphics call (their release happens on the release thread, where no GL context is current).
pub struct MappedImage<'r> {
    lifeline: Arc<Buffer>,
    registered: Arc<Registered>,
    _resource: PhantomData<&'r mut GraphicsResource>,
}

impl MappedImage<'_> {
    /// The array of face `array_index` (cube maps: `0..6`; layered textures: the layer; else 0)
    /// and level `mip_level` of the mapped image (`cuGraphicsSubResourceGetMappedArray`),
    /// described as the driver reports it (`cuArray3DGetDescriptor`).
    pub fn array(&self, array_index: u32, mip_level: u32) -> Result<MappedArray<'_>> {
        let mut raw: driver::CUarray = std::ptr::null_mut();
        let r = &self.registered;
        r.context.with_current(|| {
            // SAFETY: out-pointer to a local; the resource is registered and mapped (the guard
            // holds the mapping).
            unsafe { driver::cuGraphicsSubResourceGetMappedArray(&mut raw, r.raw(), array_index, mip_level) }
                .check("cuGraphicsSubResourceGetMappedArray")
        })?;
        MappedArray::describe(raw, &self.lifeline, r)
    }

    /// Unmaps on `stream`, after the mapping stream and every stream that used the arrays, and
    /// returns what the driver said. While textures or surfaces made from its arrays hold the
    /// mapping, it is let go of instead: the unmap follows the last of them (see the type).
    pub fn unmap(self, stream: &Stream) -> Result<()> {
        close_lifeline(self.lifeline, stream)
    }
}

/// Ends a mapping through its lifeline: unmapped on `stream` (after every stream that used it)
/// when the guard holds the only reference; else let go of, and the last holder (a texture or
/// surface made from its arrays, once their work is done) unmaps on the mapping stream.
pub(super) fn close_lifeline(lifeline: Arc<Buffer>, stream: &Stream) -> Result<()> {
    match Arc::try_unwrap(lifeline) {
        Ok(buffer) => buffer.close(Some(stream)),
        Err(_held) => Ok(()),
    }
}

impl fmt::Debug for MappedImage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedImage({:#x})", self.registered.raw() as usize)
    }
}
