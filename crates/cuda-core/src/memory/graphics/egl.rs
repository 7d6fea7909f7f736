//! EGL images: [`GraphicsResource::from_egl_image`] (`cuGraphicsEGLRegisterImage`), mapped as
//! [`MappedEglImage`] whose frames ([`EglFrame`], `cuGraphicsResourceGetMappedEglFrame`) lend
//! their arrays.
//!
//! EGL streams (`cuEGLStreamConsumerConnect` and the rest) and events from EGL syncs
//! (`cuEventCreateFromEGLSync`) have raw bindings only: a stream connection hands frames back and
//! forth between producer and consumer under a protocol of its own (acquire and release with
//! timeouts, frames owned by the other side in between), which needs a design of its own rather
//! than this one of map and unmap.

use super::array::MappedArray;
use super::mapping::mapped_buffer;
use super::{GraphicsRegisterFlags, GraphicsResource, GraphicsResourceKind, Registered};
use crate::error::Check;
use crate::memory::buffer::Buffer;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

impl GraphicsResource {
    /// Registers the EGL image `image` (an `EGLImageKHR`) for access by CUDA
    /// (`cuGraphicsEGLRegisterImage`), in the current CUDA context. `flags` may hold
    /// [`READ_ONLY`](GraphicsRegisterFlags::READ_ONLY) and
    /// [`WRITE_DISCARD`](GraphicsRegisterFlags::WRITE_DISCARD) (the driver's map flags for EGL
    /// images have the same values). Map it with [`map_egl`](Self::map_egl).
    ///
    /// # Safety
    /// The driver reads and writes the image's storage on the caller's word:
    /// - `image` is a live `EGLImageKHR` (from `eglCreateImage(KHR)`) of a display that stays
    ///   initialised, and it is not destroyed while this resource is registered (until it is
    ///   closed or dropped and every mapping of it is gone);
    /// - the other APIs using the image's storage (OpenGL, through the object it was made from,
    ///   or other EGL clients) have finished their work on it before it is mapped (`glFinish`,
    ///   as NVIDIA's documentation asks) and leave it alone while it is mapped.
    pub unsafe fn from_egl_image(image: driver::EGLImageKHR, flags: GraphicsRegisterFlags) -> Result<GraphicsResource> {
        GraphicsResource::register(
            "GraphicsResource::from_egl_image",
            GraphicsResourceKind::EglImage,
            flags,
            |raw| {
                // SAFETY: out-pointer to a local; the caller vouches for the image.
                unsafe { driver::cuGraphicsEGLRegisterImage(raw, image, flags.bits()) }
                    .check("cuGraphicsEGLRegisterImage")
            },
        )
    }

    /// Maps the registered EGL image on `stream` (`cuGraphicsMapResources`): its frames
    /// ([`MappedEglImage::frame`]) and their arrays are valid while the guard lives, and the
    /// unmap (on drop, or [`MappedEglImage::unmap`]) is queued after the work of every stream
    /// that used them, as for OpenGL images.
    ///
    /// Errors: `cuda.core`'s for a closed resource or one already mapped, a resource that is not
    /// an EGL image, a stream being captured, and the driver's.
    pub fn map_egl(&mut self, stream: &Stream) -> Result<MappedEglImage<'_>> {
        let registered = self.mappable(
            "map_egl",
            |k| k == GraphicsResourceKind::EglImage,
            "EGL images (map maps OpenGL buffers, map_image OpenGL images)",
        )?;
        let lifeline = Arc::new(mapped_buffer(registered, stream, |_| Ok((0, 0)))?);
        Ok(MappedEglImage {
            lifeline,
            registered: registered.clone(),
            _resource: PhantomData,
        })
    }
}

/// A mapped EGL image ([`GraphicsResource::map_egl`]): lends its frames while it lives; dropping
/// it unmaps after the work of every stream that used them.
pub struct MappedEglImage<'r> {
    lifeline: Arc<Buffer>,
    registered: Arc<Registered>,
    _resource: PhantomData<&'r mut GraphicsResource>,
}

impl MappedEglImage<'_> {
    /// The frame of face `index` (cube maps; else 0) and level `mip_level`
    /// (`cuGraphicsResourceGetMappedEglFrame`).
    pub fn frame(&self, index: u32, mip_level: u32) -> Result<EglFrame<'_>> {
        let mut frame = driver::CUeglFrame::default();
        let r = &self.registered;
        r.context.with_current(|| {
            // SAFETY: out-pointer to a local; the resource is a registered EGL image, mapped
            // (the guard holds the mapping).
            unsafe { driver::cuGraphicsResourceGetMappedEglFrame(&mut frame, r.raw(), index, mip_level) }
                .check("cuGraphicsResourceGetMappedEglFrame")
        })?;
        Ok(EglFrame {
            frame,
            lifeline: &self.lifeline,
            registered: r,
        })
    }

    /// Unmaps on `stream`, after the mapping stream and every stream that used its frames, and
    /// returns what the driver said. While textures or surfaces made from its arrays hold the
    /// mapping, it is let go of instead, and the last of them ends it.
    pub fn unmap(self, stream: &Stream) -> Result<()> {
        super::mapping::close_lifeline(self.lifeline, stream)
    }
}

impl fmt::Debug for MappedEglImage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedEglImage({:#x})", self.registered.raw() as usize)
    }
}

/// How an EGL frame's planes are laid out (`CUeglFrameType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EglFrameType {
    /// CUDA arrays ([`EglFrame::array`]).
    Array,
    /// Pitched linear memory ([`EglFrame::pitch_pointer`]).
    Pitch,
    /// A value these headers do not list.
    Other(u32),
}

/// A frame of a mapped EGL image ([`MappedEglImage::frame`], a `CUeglFrame`): its planes are
/// arrays or pitched memory, valid while the mapping lives (the borrow `'m`).
pub struct EglFrame<'m> {
    frame: driver::CUeglFrame,
    lifeline: &'m Arc<Buffer>,
    registered: &'m Registered,
}

impl fmt::Debug for EglFrame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EglFrame({:?}, {}x{}x{}, {} planes, {} channels)",
            self.frame_type(),
            self.width(),
            self.height(),
            self.depth(),
            self.plane_count(),
            self.num_channels()
        )
    }
}

impl<'m> EglFrame<'m> {
    /// The driver's description.
    pub fn raw(&self) -> &driver::CUeglFrame {
        &self.frame
    }

    /// Whether the planes are arrays or pitched memory.
    pub fn frame_type(&self) -> EglFrameType {
        match self.frame.frameType {
            driver::CUeglFrameType::CU_EGL_FRAME_TYPE_ARRAY => EglFrameType::Array,
            driver::CUeglFrameType::CU_EGL_FRAME_TYPE_PITCH => EglFrameType::Pitch,
            other => EglFrameType::Other(other.0),
        }
    }

    /// Width of the first plane, in elements.
    pub fn width(&self) -> u32 {
        self.frame.width
    }

    /// Height of the first plane.
    pub fn height(&self) -> u32 {
        self.frame.height
    }

    /// Depth of the first plane.
    pub fn depth(&self) -> u32 {
        self.frame.depth
    }

    /// Pitch of the first plane, in bytes (pitched frames).
    pub fn pitch(&self) -> u32 {
        self.frame.pitch
    }

    /// How many planes (at most 3).
    pub fn plane_count(&self) -> u32 {
        self.frame.planeCount
    }

    /// Channels of a plane's elements.
    pub fn num_channels(&self) -> u32 {
        self.frame.numChannels
    }

    /// The EGL color format.
    pub fn color_format(&self) -> driver::CUeglColorFormat {
        self.frame.eglColorFormat
    }

    /// The array format of a plane's channels.
    pub fn array_format(&self) -> driver::CUarray_format {
        self.frame.cuFormat
    }

    fn check_plane(&self, plane: usize, want: EglFrameType) -> Result<()> {
        if self.frame_type() != want {
            return Err(CudaError::InvalidArgument(format!(
                "the EGL frame's planes are {:?}, not {want:?}",
                self.frame_type()
            )));
        }
        let count = (self.frame.planeCount as usize).min(driver::MAX_PLANES as usize);
        if plane >= count {
            return Err(CudaError::InvalidArgument(format!(
                "plane {plane} of an EGL frame of {count} planes"
            )));
        }
        Ok(())
    }

    /// The array of `plane` of an array frame, as the driver describes it; copies on it are
    /// work on the mapping (its unmap waits for them).
    pub fn array(&self, plane: usize) -> Result<MappedArray<'m>> {
        self.check_plane(plane, EglFrameType::Array)?;
        // SAFETY: the frame type says the union holds arrays.
        let raw = unsafe { self.frame.frame.pArray[plane] };
        MappedArray::describe(raw, self.lifeline, self.registered)
    }

    /// The device address of `plane` of a pitched frame. It is valid while the mapping lives;
    /// using it takes raw (`unsafe`) calls, whose work must be queued on the stream the image was
    /// mapped on (the unmap is ordered after that stream only, for such work).
    pub fn pitch_pointer(&self, plane: usize) -> Result<driver::CUdeviceptr> {
        self.check_plane(plane, EglFrameType::Pitch)?;
        // SAFETY: the frame type says the union holds pointers.
        Ok(unsafe { self.frame.frame.pPitch[plane] } as driver::CUdeviceptr)
    }
}
