//! Graphics interop (`cuda.core`'s `GraphicsResource`, public as [`crate::graphics`]): OpenGL
//! buffers and images, and EGL images, registered with CUDA and mapped on a stream.
//!
//! - here: [`GraphicsRegisterFlags`], [`GraphicsResource`] (registration, the mapped state,
//!   closing);
//! - `registered`: the registered handle every mapping holds, and unmaps that wait for the
//!   registering thread;
//! - `mapping`: what a mapping is (a memory resource whose "free" is the stream-ordered unmap),
//!   [`MappedBuffer`] and [`MappedImage`], the guards that [`GraphicsResource::map`] and
//!   [`GraphicsResource::map_image`] return;
//! - `array`: [`MappedArray`], an array of a mapped image, and its copies;
//! - `egl`: EGL images ([`GraphicsResource::from_egl_image`], [`MappedEglImage`], [`EglFrame`]).
//!
//! **How a mapping ends.** A mapped buffer is a [`Buffer`](crate::Buffer) whose memory resource
//! is the mapping: dropping it "frees" the memory with `cuGraphicsUnmapResources`, queued on its
//! deallocation stream (the stream it was mapped on) after a fence from every other stream that
//! used it, the way any buffer's free is ordered (`memory/buffer`). An image's arrays are covered
//! the same way by a zero-byte *lifeline* buffer of the mapping that copies on the arrays use, as
//! the texture module's arrays are. A graph that recorded work on the mapped memory holds the
//! mapping, and so do textures and surfaces made from its arrays
//! ([`ResourceDescriptor::from_mapped_array`](crate::texture::ResourceDescriptor::from_mapped_array):
//! they hold the lifeline); the unmap waits for them and their launches; the resource reads as mapped
//! ([`GraphicsResource::is_mapped`]) until the unmap is queued. The registration is held by every mapping, so
//! unregistering (`cuGraphicsUnregisterResource`) always comes after the last unmap.
//!
//! **Threads.** The driver maps and unmaps an OpenGL resource only where its GL context is
//! current (elsewhere: `CUDA_ERROR_INVALID_GRAPHICS_CONTEXT`), so a [`GraphicsResource`] and its
//! guards stay on the registering thread. A mapping released elsewhere (a graph holding it goes
//! on the release thread) parks its unmap, still ordered on its stream, for that thread's next
//! call on the resource. When the resource is gone by then (the graph held the mapping past
//! it), the registration goes with the mapping, also on the registering thread: its next
//! graphics call (any resource's, or [`release_parked`]) queues the unmap and unregisters it.
//! EGL images are not mapped by the driver at all (NVIDIA documents that their frames are read
//! directly and the application synchronises): their "unmap" waits for the work queued on the
//! frames, from any thread.
//!
//! Graphics interop uses buffers, streams and contexts: it lives in `memory`, a layer above them.

mod array;
mod egl;
mod mapping;
mod registered;
#[cfg(test)]
mod tests;

pub use array::MappedArray;
pub use egl::{EglFrame, EglFrameType, MappedEglImage};
pub use mapping::{MappedBuffer, MappedImage};

use crate::device::Context;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use registered::Registered;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

bitflags::bitflags! {
    /// How CUDA will use a registered resource (`cuda.core`'s register flags, the driver's
    /// `CU_GRAPHICS_REGISTER_FLAGS_*`). No flag (`empty()`, `cuda.core`'s `"none"`) means CUDA
    /// may read and write it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
    pub struct GraphicsRegisterFlags: u32 {
        /// CUDA will not write to the resource (`"read_only"`). Its mapped buffers refuse safe
        /// writes (they answer neither device- nor host-accessible, as read-only memory does).
        const READ_ONLY = driver::CUgraphicsRegisterFlags_enum::CU_GRAPHICS_REGISTER_FLAGS_READ_ONLY.0;
        /// CUDA will not read the resource and overwrites all of it (`"write_discard"`): what it
        /// held before reads as unspecified bytes.
        const WRITE_DISCARD = driver::CUgraphicsRegisterFlags_enum::CU_GRAPHICS_REGISTER_FLAGS_WRITE_DISCARD.0;
        /// Surfaces may be bound to the image's arrays (`"surface_load_store"`).
        const SURFACE_LOAD_STORE = driver::CUgraphicsRegisterFlags_enum::CU_GRAPHICS_REGISTER_FLAGS_SURFACE_LDST.0;
        /// Texture gather may be used on the image (`"texture_gather"`).
        const TEXTURE_GATHER = driver::CUgraphicsRegisterFlags_enum::CU_GRAPHICS_REGISTER_FLAGS_TEXTURE_GATHER.0;
    }
}

impl GraphicsRegisterFlags {
    /// `cuda.core`'s flag names: `"none"`, `"read_only"`, `"write_discard"`,
    /// `"surface_load_store"`, `"texture_gather"`, in the order `cuda.core` lists valid flags.
    pub const NAMES: [(&'static str, GraphicsRegisterFlags); 5] = [
        ("none", GraphicsRegisterFlags::empty()),
        ("read_only", GraphicsRegisterFlags::READ_ONLY),
        ("surface_load_store", GraphicsRegisterFlags::SURFACE_LOAD_STORE),
        ("texture_gather", GraphicsRegisterFlags::TEXTURE_GATHER),
        ("write_discard", GraphicsRegisterFlags::WRITE_DISCARD),
    ];

    /// The flags `cuda.core` builds from its names (`flags="read_only"` or a sequence of names),
    /// with its error for a name it does not know.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<GraphicsRegisterFlags> {
        names
            .into_iter()
            .try_fold(GraphicsRegisterFlags::empty(), |flags, name| {
                GraphicsRegisterFlags::NAMES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, f)| flags | *f)
                    .ok_or_else(|| {
                        let valid: Vec<&str> = GraphicsRegisterFlags::NAMES.iter().map(|(n, _)| *n).collect();
                        CudaError::InvalidArgument(format!(
                            "Unknown register flag {name:?}. Valid flags: {}",
                            valid.join(", ")
                        ))
                    })
            })
    }
}

/// What a [`GraphicsResource`] was registered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphicsResourceKind {
    /// An OpenGL buffer object ([`GraphicsResource::from_gl_buffer`]): maps to a buffer.
    GlBuffer,
    /// An OpenGL texture or renderbuffer ([`GraphicsResource::from_gl_image`]) of this target
    /// (`GL_TEXTURE_2D`, `GL_RENDERBUFFER`, ...): maps to arrays.
    GlImage {
        /// The OpenGL target it was registered with.
        target: u32,
    },
    /// An EGL image ([`GraphicsResource::from_egl_image`]): maps to an EGL frame.
    EglImage,
}

/// An OpenGL buffer or image, or an EGL image, registered for access by CUDA (`cuda.core`'s
/// `GraphicsResource`, a `CUgraphicsResource`).
///
/// Register with [`from_gl_buffer`](Self::from_gl_buffer), [`from_gl_image`](Self::from_gl_image)
/// or [`from_egl_image`](Self::from_egl_image); map on a stream with [`map`](Self::map) (buffers),
/// [`map_image`](Self::map_image) (images) or [`map_egl`](Self::map_egl) (EGL images). A
/// mapping is a guard that borrows the resource exclusively: while it lives, the graphics API must
/// leave the object alone, and CUDA work reaches the memory through it. Dropping the guard (or
/// its `unmap`) queues `cuGraphicsUnmapResources` after the work of every stream that used the
/// mapping; graphics work issued after that sees CUDA's writes.
///
/// ```no_run
/// # use cuda_core::{graphics::{GraphicsRegisterFlags, GraphicsResource}, Device};
/// # fn gl_buffer() -> u32 { 1 }
/// let device = Device::new(0)?;
/// device.set_current()?;
/// let stream = device.create_stream(Default::default())?;
/// // SAFETY: a GL context is current on this thread and `gl_buffer()` names one of its buffer
/// // objects, which is not deleted before the resource is dropped nor used by GL while mapped.
/// let mut resource = unsafe { GraphicsResource::from_gl_buffer(gl_buffer(), GraphicsRegisterFlags::WRITE_DISCARD)? };
/// {
///     let mapped = resource.map(&stream)?;
///     mapped.fill_u8(0xff, &stream)?; // or launch kernels with `&*mapped` as an argument
/// } // unmapped here, after the fill
/// resource.close()?;
/// # Ok::<(), cuda_core::CudaError>(())
/// ```
///
/// **Threads.** The driver maps and unmaps OpenGL resources only on a thread where their GL
/// context (or one of its share group) is current, so a resource and its guards stay on the
/// thread that registered it (neither `Send` nor `Sync`); the mapped [`Buffer`](crate::Buffer)
/// itself may be used from any thread while the guard lives:
///
/// ```compile_fail
/// fn needs_send<T: Send>(_: T) {}
/// fn f(resource: cuda_core::GraphicsResource) {
///     needs_send(resource);
/// }
/// ```
///
/// A guard borrows the resource, so the resource is neither closed nor mapped again, and the
/// mapped buffer is not kept, beyond it:
///
/// ```compile_fail
/// # use cuda_core::{Buffer, GraphicsResource, Stream};
/// fn f<'a>(resource: &'a mut GraphicsResource, stream: &Stream) -> &'a Buffer {
///     let mapped = resource.map(stream).unwrap();
///     &mapped // the buffer cannot outlive its mapping
/// }
/// ```
///
/// ```compile_fail
/// # use cuda_core::{GraphicsResource, Stream};
/// fn f(resource: &mut GraphicsResource, stream: &Stream) {
///     let mapped = resource.map(stream).unwrap();
///     resource.close().unwrap(); // not while mapped
///     drop(mapped);
/// }
/// ```
pub struct GraphicsResource {
    registered: Option<Arc<Registered>>,
    kind: GraphicsResourceKind,
    /// Not `Send` nor `Sync`: the driver maps and unmaps OpenGL resources only on a thread where
    /// their GL context is current, the thread that registered them.
    _thread: PhantomData<*const ()>,
}

impl fmt::Debug for GraphicsResource {
    /// `cuda.core`'s repr: `<GraphicsResource handle=0x... mapped>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mapped = if self.is_mapped() { " mapped" } else { "" };
        let closed = if self.is_closed() { " closed" } else { "" };
        write!(
            f,
            "<GraphicsResource handle={:#x}{mapped}{closed}>",
            self.handle() as usize
        )
    }
}

/// On the calling thread, unmaps and unregisters the OpenGL resources registered here whose last
/// holder went on another thread, and returns how many were unregistered.
///
/// A graph that recorded work on a mapping holds the mapping, and the mapping holds the
/// registration, past the [`GraphicsResource`] itself; when the graph goes (on this crate's
/// release thread, after its launches) the mapping's unmap and the unregistration need the GL
/// context, current only on the registering thread. They wait there for that thread's next
/// graphics call: registering a resource, a map, [`GraphicsResource::is_mapped`],
/// [`GraphicsResource::close`], dropping a resource, or this function, which a thread that has no
/// other resource to call on can use. The unmap is queued on the mapping's stream (after every use
/// of the mapping), with the GL context current here, then the resource is unregistered. An unmap
/// that cannot be queued yet (its stream is being captured) waits for a later call; failures
/// (no GL context current, say) are recorded for [`crate::take_drop_errors`] and tried again
/// later. A registering thread that makes no further graphics call leaves them registered.
pub fn release_parked() -> usize {
    registered::release_orphans()
}

/// The calling thread's current CUDA context, which resources are registered in.
fn current_context(what: &str) -> Result<Context> {
    crate::reaper::refuse_in_callback()?;
    registered::release_orphans();
    Context::current()?.ok_or_else(|| {
        CudaError::InvalidState(format!(
            "{what} registers in the current CUDA context, and none is current: make a device current first (Device::set_current)"
        ))
    })
}

impl GraphicsResource {
    /// Registers with `register`, which writes the new handle, in the current CUDA context.
    fn register(
        what: &str,
        kind: GraphicsResourceKind,
        flags: GraphicsRegisterFlags,
        register: impl FnOnce(&mut driver::CUgraphicsResource) -> Result<()>,
    ) -> Result<GraphicsResource> {
        let context = current_context(what)?;
        let mut raw: driver::CUgraphicsResource = std::ptr::null_mut();
        context.with_current(|| register(&mut raw))?;
        Ok(GraphicsResource {
            registered: Some(Arc::new(Registered::new(raw, context, flags, kind))),
            kind,
            _thread: PhantomData,
        })
    }

    /// Registers the OpenGL buffer object `gl_buffer` (a `GLuint` name) for access by CUDA
    /// (`cuda.core`'s `GraphicsResource.from_gl_buffer`, `cuGraphicsGLRegisterBuffer`), in the
    /// current CUDA context. Map it with [`map`](Self::map).
    ///
    /// An OpenGL context must be current on the calling thread, and stay current there for every
    /// map and unmap (the driver refuses them with an error otherwise); the resource stays on
    /// this thread.
    ///
    /// # Safety
    /// The driver reads and writes the buffer's storage on the caller's word, beyond what Rust can
    /// check:
    /// - `gl_buffer` names a buffer object of the current GL context (or its share group) whose
    ///   data store exists (`glBufferData` or `glBufferStorage` was called), and whenever a GL
    ///   context is current on this thread while the resource is mapped or unmapped, it is that
    ///   context or one of its share group;
    /// - the buffer object, and its context, are not deleted while this resource is registered
    ///   (until it is closed or dropped and every mapping of it is gone: see
    ///   [`is_mapped`](Self::is_mapped));
    /// - OpenGL neither reads nor writes the buffer, nor reallocates its store, while it is
    ///   mapped (from [`map`](Self::map) until the unmap is queued).
    ///
    /// A failure of the driver (no GL context current, a name that is not a buffer) is an error.
    pub unsafe fn from_gl_buffer(gl_buffer: u32, flags: GraphicsRegisterFlags) -> Result<GraphicsResource> {
        GraphicsResource::register(
            "GraphicsResource::from_gl_buffer",
            GraphicsResourceKind::GlBuffer,
            flags,
            |raw| {
                // SAFETY: out-pointer to a local; the caller vouches for the GL context and name.
                unsafe { driver::cuGraphicsGLRegisterBuffer(raw, gl_buffer, flags.bits()) }
                    .check("cuGraphicsGLRegisterBuffer")
            },
        )
    }

    /// Registers the OpenGL texture or renderbuffer `image` (a `GLuint` name) of `target`
    /// (`GL_TEXTURE_2D`, `GL_TEXTURE_RECTANGLE`, `GL_TEXTURE_CUBE_MAP`, `GL_TEXTURE_3D`,
    /// `GL_TEXTURE_2D_ARRAY` or `GL_RENDERBUFFER`) for access by CUDA (`cuda.core`'s
    /// `GraphicsResource.from_gl_image`, `cuGraphicsGLRegisterImage`), in the current CUDA
    /// context. Map it with [`map_image`](Self::map_image).
    ///
    /// As for buffers, a GL context must be current on the calling thread for the registration and
    /// for every map and unmap, and the resource stays on this thread.
    ///
    /// # Safety
    /// As for [`from_gl_buffer`](Self::from_gl_buffer): `image` names a texture or renderbuffer
    /// of `target` of the current GL context (or its share group) whose storage exists, and the
    /// GL context current here while it is mapped or unmapped is of that share group; neither the
    /// image nor its context is deleted while registered; OpenGL neither uses nor respecifies the
    /// image while it is mapped.
    pub unsafe fn from_gl_image(image: u32, target: u32, flags: GraphicsRegisterFlags) -> Result<GraphicsResource> {
        GraphicsResource::register(
            "GraphicsResource::from_gl_image",
            GraphicsResourceKind::GlImage { target },
            flags,
            |raw| {
                // SAFETY: out-pointer to a local; the caller vouches for the GL context and name.
                unsafe { driver::cuGraphicsGLRegisterImage(raw, image, target, flags.bits()) }
                    .check("cuGraphicsGLRegisterImage")
            },
        )
    }

    /// The `CUgraphicsResource` (null once closed).
    pub fn handle(&self) -> driver::CUgraphicsResource {
        self.registered.as_ref().map_or(std::ptr::null_mut(), |r| r.raw())
    }

    /// `cuda.core`'s alias of [`handle`](Self::handle).
    pub fn resource_handle(&self) -> driver::CUgraphicsResource {
        self.handle()
    }

    /// What the resource was registered from.
    pub fn kind(&self) -> GraphicsResourceKind {
        self.kind
    }

    /// The flags it was registered with.
    pub fn flags(&self) -> GraphicsRegisterFlags {
        self.registered
            .as_ref()
            .map_or(GraphicsRegisterFlags::empty(), |r| r.flags)
    }

    /// The CUDA context it was registered in (`None` once closed).
    pub fn context(&self) -> Option<&Context> {
        self.registered.as_ref().map(|r| &r.context)
    }

    /// Whether the resource is mapped: from a map until its unmap is queued. After a mapping's
    /// guard is gone the resource still reads as mapped while a graph that recorded work on the
    /// mapping, or a texture or surface made from its arrays, holds it (the unmap waits for them
    /// and their launches), or when the unmap failed (no GL context current when the guard went,
    /// say).
    ///
    /// An unmap that could not be queued when the mapping was released (it was released on
    /// another thread, the release thread for a graph, or it failed) is queued here, on this
    /// thread, where the GL context is current: a failure leaves the resource mapped, and the next
    /// map or [`close`](Self::close) reports it.
    pub fn is_mapped(&self) -> bool {
        registered::release_orphans();
        self.registered.as_ref().is_some_and(|r| {
            let _ = r.unmap_parked();
            r.is_mapped()
        })
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.registered.is_none()
    }

    /// Unregisters the resource (`cuGraphicsUnregisterResource`, with its GL context current on
    /// this thread) and returns what the driver said; closing again does nothing; dropping the
    /// resource does the same and records an error for [`crate::take_drop_errors`]. No guard can
    /// be alive here (they borrow the resource). An unmap still parked is queued first (its error
    /// is returned, and the resource stays open).
    ///
    /// A mapping still held (by a graph that recorded work on it, a texture or surface made from
    /// its arrays, or a guard that was leaked) keeps the registration: `close` is then an error
    /// and the resource stays open and mapped ([`is_mapped`](Self::is_mapped) keeps saying so),
    /// so that the GL object is not deleted while CUDA may still use it. Close again once such
    /// graphs, textures and surfaces are gone (a leaked guard keeps the mapping, and so the GL
    /// object, for the rest of the process).
    pub fn close(&mut self) -> Result<()> {
        crate::reaper::refuse_in_callback()?;
        registered::release_orphans();
        if let Some(r) = &self.registered {
            r.unmap_parked()?;
            if Arc::strong_count(r) > 1 || r.is_mapped() {
                return Err(CudaError::InvalidState(
                    "GraphicsResource is still mapped: a graph that recorded work on the mapping, a texture or surface made from its arrays (or a leaked guard) holds it; close the resource once it is unmapped (see is_mapped)".into(),
                ));
            }
        }
        match self.registered.take().map(Arc::try_unwrap) {
            None => Ok(()),
            Some(Ok(mut registered)) => registered.unregister(),
            Some(Err(shared)) => {
                // Shared since the check above (cannot happen: the resource is not Sync and no
                // guard is alive): keep it open.
                self.registered = Some(shared);
                Err(CudaError::InvalidState("GraphicsResource is still mapped".into()))
            }
        }
    }

    /// The registration, for a map of `kinds`: `cuda.core`'s errors for a closed or mapped
    /// resource, and an error for the wrong kind of map.
    fn mappable(
        &self,
        method: &str,
        fits: impl Fn(GraphicsResourceKind) -> bool,
        instead: &str,
    ) -> Result<&Arc<Registered>> {
        let registered = self
            .registered
            .as_ref()
            .ok_or_else(|| CudaError::InvalidState("GraphicsResource has been closed".into()))?;
        crate::reaper::refuse_in_callback()?;
        registered::release_orphans();
        registered.unmap_parked()?;
        if registered.is_mapped() {
            return Err(CudaError::InvalidState(
                "GraphicsResource is already mapped (a graph that recorded work on the last mapping, or a texture or surface made from its arrays, still holds it: drop them, and the unmap follows their work)"
                    .into(),
            ));
        }
        if !fits(self.kind) {
            return Err(CudaError::InvalidType(format!(
                "GraphicsResource::{method} maps {instead}; this resource is {:?}",
                self.kind
            )));
        }
        Ok(registered)
    }

    /// Maps the registered OpenGL buffer on `stream` (`cuda.core`'s `map`,
    /// `cuGraphicsMapResources` and `cuGraphicsResourceGetMappedPointer`), with its GL context
    /// current on this thread: graphics work issued before completes before work queued on
    /// `stream` after it. The guard is the mapped [`Buffer`](crate::Buffer) (through `Deref`):
    /// use it on any stream, as kernel arguments, in copies and views. Dropping it, or
    /// [`MappedBuffer::unmap`], queues the unmap after all that work.
    ///
    /// Errors: `cuda.core`'s for a closed resource or one already mapped, a resource that is
    /// not a GL buffer (map images with [`map_image`](Self::map_image)), a stream being
    /// captured, and the driver's.
    pub fn map(&mut self, stream: &Stream) -> Result<MappedBuffer<'_>> {
        let registered = self.mappable(
            "map",
            |k| k == GraphicsResourceKind::GlBuffer,
            "OpenGL buffers (map_image maps images, map_egl EGL images)",
        )?;
        mapping::map_buffer(registered, stream)
    }

    /// Maps the registered OpenGL image on `stream` (`cuGraphicsMapResources`), with its GL
    /// context current on this thread: its arrays ([`MappedImage::array`],
    /// `cuGraphicsSubResourceGetMappedArray`) are valid while the guard lives. Dropping the guard, or [`MappedImage::unmap`], queues the unmap after the work of
    /// every stream that copied to or from them.
    ///
    /// Errors: as for [`map`](Self::map), and for a resource that is not a GL image.
    pub fn map_image(&mut self, stream: &Stream) -> Result<MappedImage<'_>> {
        let registered = self.mappable(
            "map_image",
            |k| matches!(k, GraphicsResourceKind::GlImage { .. }),
            "OpenGL images (map maps buffers, map_egl EGL images)",
        )?;
        mapping::map_image(registered, stream)
    }
}
