//! [`TextureObject`] and [`SurfaceObject`]: the bindless handles (`CUtexObject`,
//! `CUsurfObject`) kernels take by value, each with the lifeline that keeps it and its backing
//! alive for the launches and graphs that use it.

use super::array::{ArrayHandle, OpaqueArray};
use super::resource::{Kind, ResourceDescriptor};
use super::{current_context, device_context, lifeline, private_stream_after, TextureDescriptor};
use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::memory::buffer::Buffer;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

/// A `CUtexObject` and what backs it, destroyed (in its context, as the driver requires) with
/// its last holder: the lifeline, once every launch and graph that used it is done.
struct TexHandle {
    raw: driver::CUtexObject,
    context: Context,
    _resource: ResourceDescriptor,
}

impl Drop for TexHandle {
    fn drop(&mut self) {
        if self.raw == 0 {
            return;
        }
        if crate::reaper::in_callback() {
            // On a driver thread: destroyed on the release thread.
            let later = TexHandle {
                raw: std::mem::take(&mut self.raw),
                context: self.context.clone(),
                _resource: self._resource.clone(),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        let raw = self.raw;
        let destroyed = self.context.with_current(|| {
            // SAFETY: made by cuTexObjectCreate in this context (current now) and destroyed once,
            // after every launch and graph that used it (the lifeline held it until then).
            unsafe { driver::cuTexObjectDestroy(raw) }.check("cuTexObjectDestroy")
        });
        if let Err(e) = destroyed {
            record_drop_error(e);
            // The driver's texture may still name the memory: keep it rather than free it.
            std::mem::forget(self._resource.clone());
        }
    }
}

/// A `CUsurfObject` and its array, destroyed in its context with its last holder.
struct SurfHandle {
    raw: driver::CUsurfObject,
    context: Context,
    _array: Arc<ArrayHandle>,
}

impl Drop for SurfHandle {
    fn drop(&mut self) {
        if self.raw == 0 {
            return;
        }
        if crate::reaper::in_callback() {
            let later = SurfHandle {
                raw: std::mem::take(&mut self.raw),
                context: self.context.clone(),
                _array: self._array.clone(),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        let raw = self.raw;
        let destroyed = self.context.with_current(|| {
            // SAFETY: made by cuSurfObjectCreate in this context and destroyed once, after every
            // launch and graph that used it.
            unsafe { driver::cuSurfObjectDestroy(raw) }.check("cuSurfObjectDestroy")
        });
        if let Err(e) = destroyed {
            record_drop_error(e);
            // The driver's surface may still name the array: keep it rather than destroy it.
            std::mem::forget(self._array.clone());
        }
    }
}

/// A bindless texture (`cuda.core`'s `TextureObject`, a `CUtexObject`): sampled reads of a
/// [`ResourceDescriptor`]'s memory as a [`TextureDescriptor`] says.
///
/// A kernel argument by value, for a `cudaTextureObject_t` (`unsigned long long`) parameter: the
/// launch keeps the texture and its memory alive until the kernel is done, and a graph captured
/// with it holds them for every launch (as for a `&Buffer` argument). Dropping it waits for the
/// launches that used it (unless a capture is in progress: then the handle goes once it is
/// over), and destroys the handle when no graph holds it any more. The handle means something
/// only in the context it was made
/// in: launches on streams of another context (or device) are the launch's caller's to avoid,
/// as for raw pointers.
pub struct TextureObject {
    raw: driver::CUtexObject,
    resource: ResourceDescriptor,
    descriptor: TextureDescriptor,
    device: Device,
    lifeline: Buffer,
}

impl fmt::Debug for TextureObject {
    /// `cuda.core`'s repr: `TextureObject(handle=0x1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TextureObject(handle={:#x})", self.raw)
    }
}

/// The stream a texture's lifeline is ordered on: the array's, or for a buffer a new private
/// one ordered after the buffer's allocation (so a kernel reading the texture on any stream
/// follows the allocation, as buffer arguments do).
fn stream_for(resource: &ResourceDescriptor, context: &Context) -> Result<Stream> {
    match &resource.kind {
        Kind::Array { handle, .. } => Ok(handle.stream.clone()),
        Kind::Mipmapped { handle } => Ok(handle.stream.clone()),
        Kind::Linear { buffer, .. } | Kind::Pitch2D { buffer, .. } => private_stream_after(context, buffer),
    }
}

impl TextureObject {
    /// A texture of `resource` sampled as `descriptor`, in the current context (`cuda.core`'s
    /// `TextureObject.from_descriptor`; `cuTexObjectCreate`). Checked first: the descriptor
    /// (finite mipmap values; wrap and mirror on unnormalized coordinates clamp, as in the driver), and the
    /// resource against the context's device (its device; a buffer's alignment to the texture
    /// alignment, a pitch's to the texture pitch alignment).
    pub fn from_descriptor(resource: &ResourceDescriptor, descriptor: &TextureDescriptor) -> Result<TextureObject> {
        TextureObject::create(&current_context("TextureObject")?, resource, descriptor)
    }

    fn create(
        context: &Context,
        resource: &ResourceDescriptor,
        descriptor: &TextureDescriptor,
    ) -> Result<TextureObject> {
        let linear = matches!(resource.kind, Kind::Linear { .. });
        let tex_desc = descriptor.to_driver(linear)?;
        let device = context.device();
        resource.check_for(&device)?;
        let stream = stream_for(resource, context)?;
        let res_desc = resource.to_driver();
        let mut raw: driver::CUtexObject = 0;
        context.with_current(|| {
            // SAFETY: out-pointer to a local; both descriptions are locals naming live handles
            // and memory (the resource holds them); no resource view.
            unsafe { driver::cuTexObjectCreate(&mut raw, &res_desc, &tex_desc, std::ptr::null()) }
                .check("cuTexObjectCreate")
        })?;
        let handle = Arc::new(TexHandle {
            raw,
            context: context.clone(),
            _resource: resource.clone(),
        });
        Ok(TextureObject {
            raw,
            resource: resource.clone(),
            descriptor: descriptor.clone(),
            device,
            lifeline: lifeline(handle, device, &stream)?,
        })
    }

    /// The `CUtexObject` (`cuda.core`'s `handle`), valid while this value lives.
    pub fn handle(&self) -> driver::CUtexObject {
        self.raw
    }

    /// The resource it samples.
    pub fn resource(&self) -> &ResourceDescriptor {
        &self.resource
    }

    /// How it samples.
    pub fn texture_descriptor(&self) -> &TextureDescriptor {
        &self.descriptor
    }

    /// The device it was made on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// What launches use to keep the texture alive (see `KernelArg`).
    pub(crate) fn lifeline(&self) -> &Buffer {
        &self.lifeline
    }
}

/// A bindless surface (`cuda.core`'s `SurfaceObject`, a `CUsurfObject`): typed loads and stores
/// of an [`OpaqueArray`] made with `is_surface_load_store`, at integer coordinates (x in bytes).
///
/// A kernel argument by value, for a `cudaSurfaceObject_t` (`unsigned long long`) parameter,
/// kept alive with its array for the launches and graphs that use it, and meaningful only in
/// its context, as [`TextureObject`]s are.
pub struct SurfaceObject {
    raw: driver::CUsurfObject,
    resource: ResourceDescriptor,
    device: Device,
    lifeline: Buffer,
}

impl fmt::Debug for SurfaceObject {
    /// `cuda.core`'s repr: `SurfaceObject(handle=0x1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SurfaceObject(handle={:#x})", self.raw)
    }
}

impl SurfaceObject {
    /// A surface of `array`, in the current context (`cuda.core`'s `SurfaceObject.from_array`).
    pub fn from_array(array: &OpaqueArray) -> Result<SurfaceObject> {
        SurfaceObject::from_descriptor(&ResourceDescriptor::from_opaque_array(array))
    }

    /// A surface of `resource`, in the current context (`cuda.core`'s
    /// `SurfaceObject.from_descriptor`; `cuSurfObjectCreate`): an array made with
    /// `is_surface_load_store`, of the context's device.
    pub fn from_descriptor(resource: &ResourceDescriptor) -> Result<SurfaceObject> {
        SurfaceObject::create(&current_context("SurfaceObject")?, resource)
    }

    fn create(context: &Context, resource: &ResourceDescriptor) -> Result<SurfaceObject> {
        if !matches!(resource.kind, Kind::Array { .. }) {
            return Err(CudaError::InvalidArgument(format!(
                "SurfaceObject requires an array-backed ResourceDescriptor, got kind='{}' (linear and pitch2d resources cannot back surfaces: copy into an OpaqueArray made with is_surface_load_store)",
                resource.kind()
            )));
        }
        let Some(array) = resource.surface_array() else {
            return Err(CudaError::InvalidArgument(
                "OpaqueArray must be created with is_surface_load_store=true to be bound as a SurfaceObject (a mapped graphics array: register the resource with GraphicsRegisterFlags::SURFACE_LOAD_STORE)".into(),
            ));
        };
        if !array.writable {
            return Err(CudaError::InvalidArgument(
                "a surface writes its array, and this mapped array's resource was registered read-only (GraphicsRegisterFlags::READ_ONLY): read it through a TextureObject, or register the resource without READ_ONLY".into(),
            ));
        }
        let device = context.device();
        resource.check_for(&device)?;
        let res_desc = resource.to_driver();
        let mut raw: driver::CUsurfObject = 0;
        context.with_current(|| {
            // SAFETY: out-pointer to a local; the description is a local naming a live array
            // (the resource holds it).
            unsafe { driver::cuSurfObjectCreate(&mut raw, &res_desc) }.check("cuSurfObjectCreate")
        })?;
        let handle = Arc::new(SurfHandle {
            raw,
            context: context.clone(),
            _array: array.clone(),
        });
        Ok(SurfaceObject {
            raw,
            resource: resource.clone(),
            device,
            lifeline: lifeline(handle, device, &array.stream)?,
        })
    }

    /// The `CUsurfObject` (`cuda.core`'s `handle`), valid while this value lives.
    pub fn handle(&self) -> driver::CUsurfObject {
        self.raw
    }

    /// The resource it reads and writes.
    pub fn resource(&self) -> &ResourceDescriptor {
        &self.resource
    }

    /// The device it was made on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// What launches use to keep the surface alive (see `KernelArg`).
    pub(crate) fn lifeline(&self) -> &Buffer {
        &self.lifeline
    }
}

impl Device {
    /// A texture on this device (`cuda.core`'s `Device.create_texture_object`), in the current
    /// context when it is this device's, else in the device's primary context.
    pub fn create_texture_object(
        &self,
        resource: &ResourceDescriptor,
        descriptor: &TextureDescriptor,
    ) -> Result<TextureObject> {
        TextureObject::create(&device_context(self)?, resource, descriptor)
    }

    /// A surface on this device (`cuda.core`'s `Device.create_surface_object`), in the current
    /// context when it is this device's, else in the device's primary context.
    pub fn create_surface_object(&self, resource: &ResourceDescriptor) -> Result<SurfaceObject> {
        SurfaceObject::create(&device_context(self)?, resource)
    }
}
