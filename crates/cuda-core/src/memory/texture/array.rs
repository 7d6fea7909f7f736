//! [`OpaqueArray`]: a CUDA array (`CUarray`), and whole-array copies between it and buffers or
//! host memory (`cuMemcpy3DAsync`).

use super::copies::WholeArray;
use super::mipmap::MipmapHandle;
use super::{
    check_shape, current_context, descriptor_shape, device_context, element_bytes, lifeline, private_stream,
    ArrayFormat,
};
use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::memory::buffer::{Buffer, Pod};
use crate::stream::Stream;
use crate::Result;
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

const FROM_HOST_REFUSAL: &str = "OpaqueArray::copy_from_host waits for its copy, which a stream being captured never runs: copy before the capture, or from a buffer";
const TO_HOST_REFUSAL: &str = "OpaqueArray::copy_to_host waits for its copy, which a stream being captured never runs: copy after the graph ran, from a stream that is not capturing";

/// A `CUarray`, destroyed with its last holder (an [`OpaqueArray`], the lifeline of one, or a
/// texture or surface built on it). A mipmap level is not destroyed: its mipmapped array owns
/// the storage, and the level holds it. Nor is a borrowed array (an array of a graphics mapping):
/// its owner (the mapping) is held instead, so the array stays valid until the last holder goes.
pub(super) struct ArrayHandle {
    raw: driver::CUarray,
    parent: Option<Arc<MipmapHandle>>,
    /// What keeps a borrowed array valid (see [`ArrayHandle::borrowed`]).
    owner: Option<Arc<Buffer>>,
    /// Whether kernels may write the array (surfaces): a borrowed array may be read-only.
    pub(super) writable: bool,
    /// The stream lifelines of this array, and of what is built on it, are ordered on.
    pub(super) stream: Stream,
    pub(super) device: Device,
}

// SAFETY: a CUarray may be used from any thread (the driver serialises what needs it); the handle
// is destroyed once, by the last holder.
unsafe impl Send for ArrayHandle {}
// SAFETY: shared access only reads the handle.
unsafe impl Sync for ArrayHandle {}

impl ArrayHandle {
    pub(super) fn raw(&self) -> driver::CUarray {
        self.raw
    }

    /// An array this crate does not own: `raw` stays valid while `owner` lives (the handle holds
    /// it and never destroys `raw`), its work is ordered after what `stream` has queued, and
    /// kernels write it only if `writable`.
    ///
    /// # Safety
    /// `raw` is an array of `device` that stays valid (not destroyed, and for a graphics mapping
    /// not unmapped) until `owner` is dropped and the work of every stream and graph that used
    /// it is done; work queued on `stream` after this call may use it.
    pub(super) unsafe fn borrowed(
        raw: driver::CUarray,
        owner: Arc<Buffer>,
        stream: Stream,
        device: Device,
        writable: bool,
    ) -> Arc<ArrayHandle> {
        Arc::new(ArrayHandle {
            raw,
            parent: None,
            owner: Some(owner),
            writable,
            stream,
            device,
        })
    }
}

impl Drop for ArrayHandle {
    fn drop(&mut self) {
        if self.parent.is_some() || self.owner.is_some() || self.raw.is_null() {
            // (A borrowed array's owner goes with the handle's fields.)
            return;
        }
        if !crate::reaper::on_release_thread() {
            // Destroyed on the thread for slow drops (see `reaper::drop_slowly`): never on a driver
            // thread, and never by a drop elsewhere (the last holder may be a descriptor dropped on
            // any thread), as freeing an array may wait for the work of every stream of the context
            // (other threads' included).
            let later = ArrayHandle {
                raw: std::mem::replace(&mut self.raw, std::ptr::null_mut()),
                parent: None,
                owner: None,
                writable: true,
                stream: self.stream.clone(),
                device: self.device,
            };
            crate::reaper::drop_slowly(Box::new(later));
            return;
        }
        // SAFETY: made by cuArray3DCreate and destroyed once, by its last holder: every copy,
        // texture and surface that used it is done (their lifelines held it until then).
        if let Err(e) = unsafe { driver::cuArrayDestroy(self.raw) }.check("cuArrayDestroy") {
            record_drop_error(e);
        }
    }
}

/// The arguments of [`OpaqueArray::from_descriptor`] (`cuda.core`'s keyword arguments).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpaqueArrayOptions {
    /// `[width]`, `[width, height]` or `[width, height, depth]`, in elements.
    pub shape: Vec<usize>,
    /// The element format.
    pub format: ArrayFormat,
    /// Channels per element: 1, 2 or 4.
    pub num_channels: u32,
    /// Whether surfaces may be bound to it (`CUDA_ARRAY3D_SURFACE_LDST`).
    pub is_surface_load_store: bool,
}

impl OpaqueArrayOptions {
    /// An array of `shape` elements of `num_channels` channels of `format`, without surface
    /// access.
    pub fn new(shape: impl Into<Vec<usize>>, format: ArrayFormat, num_channels: u32) -> OpaqueArrayOptions {
        OpaqueArrayOptions {
            shape: shape.into(),
            format,
            num_channels,
            is_surface_load_store: false,
        }
    }
}

/// An opaque, hardware-laid-out GPU allocation read through [`TextureObject`]s and read and
/// written through [`SurfaceObject`]s (`cuda.core`'s `OpaqueArray`, a `CUarray`). It has no
/// device address: data moves in and out by copies ([`copy_from`](Self::copy_from),
/// [`copy_to`](Self::copy_to) and their host forms), whole-array, `shape[0]` elements per row,
/// rows then slices, densely packed on the other side.
///
/// The array is destroyed once it is dropped and every copy, texture and surface using it is
/// done (see the module documentation).
///
/// [`TextureObject`]: super::TextureObject
/// [`SurfaceObject`]: super::SurfaceObject
pub struct OpaqueArray {
    handle: Arc<ArrayHandle>,
    shape: Vec<usize>,
    format: ArrayFormat,
    num_channels: u32,
    surface_load_store: bool,
    size_bytes: usize,
    lifeline: Buffer,
}

impl fmt::Debug for OpaqueArray {
    /// `cuda.core`'s repr: `OpaqueArray(shape=(16, 16), format=FLOAT32, num_channels=1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "OpaqueArray(shape={}, format={}, num_channels={})",
            tuple(&self.shape),
            self.format,
            self.num_channels
        )
    }
}

/// A shape as Python prints a tuple.
pub(super) fn tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

impl OpaqueArray {
    /// A new array in the current context (`cuda.core`'s `OpaqueArray.from_descriptor`):
    /// `cuArray3DCreate`, after `cuda.core`'s checks (rank 1 to 3, every extent at least 1,
    /// 1, 2 or 4 channels) and a size that fits in `usize`.
    pub fn from_descriptor(options: &OpaqueArrayOptions) -> Result<OpaqueArray> {
        let size = check_shape(&options.shape, options.format, options.num_channels)?;
        let context = current_context("OpaqueArray")?;
        OpaqueArray::create(&context, options, size)
    }

    fn create(context: &Context, options: &OpaqueArrayOptions, size_bytes: usize) -> Result<OpaqueArray> {
        let desc = super::array_descriptor(
            &options.shape,
            options.format,
            options.num_channels,
            options.is_surface_load_store,
        );
        let stream = private_stream(context)?;
        let mut raw: driver::CUarray = std::ptr::null_mut();
        context.with_current(|| {
            // SAFETY: out-pointer to a local; the descriptor is a local the driver reads.
            unsafe { driver::cuArray3DCreate(&mut raw, &desc) }.check("cuArray3DCreate")
        })?;
        let handle = Arc::new(ArrayHandle {
            raw,
            parent: None,
            owner: None,
            writable: true,
            stream,
            device: context.device(),
        });
        OpaqueArray::wrap(
            handle,
            options.shape.clone(),
            options.format,
            options.num_channels,
            options.is_surface_load_store,
            size_bytes,
        )
    }

    fn wrap(
        handle: Arc<ArrayHandle>,
        shape: Vec<usize>,
        format: ArrayFormat,
        num_channels: u32,
        surface_load_store: bool,
        size_bytes: usize,
    ) -> Result<OpaqueArray> {
        let lifeline = lifeline(handle.clone(), handle.device, &handle.stream)?;
        Ok(OpaqueArray {
            handle,
            shape,
            format,
            num_channels,
            surface_load_store,
            size_bytes,
            lifeline,
        })
    }

    /// A level of a mipmapped array: the level's shape, format and flags as the driver reports
    /// them; the array holds `parent`, which owns its storage.
    pub(super) fn level(raw: driver::CUarray, parent: Arc<MipmapHandle>) -> Result<OpaqueArray> {
        let mut desc = driver::CUDA_ARRAY3D_DESCRIPTOR::default();
        // SAFETY: out-pointer to a local; the level belongs to the live mipmapped array.
        unsafe { driver::cuArray3DGetDescriptor(&mut desc, raw) }.check("cuArray3DGetDescriptor")?;
        let shape = descriptor_shape(&desc);
        let format = ArrayFormat::from_driver(desc.Format)?;
        let size = check_shape(&shape, format, desc.NumChannels)?;
        let handle = Arc::new(ArrayHandle {
            raw,
            stream: parent.stream.clone(),
            device: parent.device,
            parent: Some(parent),
            owner: None,
            writable: true,
        });
        let surface = desc.Flags & driver::CUDA_ARRAY3D_SURFACE_LDST != 0;
        OpaqueArray::wrap(handle, shape, format, desc.NumChannels, surface, size)
    }

    /// The `CUarray`.
    pub fn handle(&self) -> driver::CUarray {
        self.handle.raw
    }

    /// The extents, in elements (`[width]`, `[width, height]` or `[width, height, depth]`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element format.
    pub fn format(&self) -> ArrayFormat {
        self.format
    }

    /// Channels per element (1, 2 or 4).
    pub fn num_channels(&self) -> u32 {
        self.num_channels
    }

    /// Bytes per element (the format's size times the channels).
    pub fn element_bytes(&self) -> usize {
        element_bytes(self.format, self.num_channels)
    }

    /// The array's bytes: the extents' product times the element size.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    /// The device the array was made on.
    pub fn device(&self) -> Device {
        self.handle.device
    }

    /// Whether surfaces may be bound to it.
    pub fn is_surface_load_store(&self) -> bool {
        self.surface_load_store
    }

    pub(super) fn shared(&self) -> &Arc<ArrayHandle> {
        &self.handle
    }

    /// The array as whole-array copies see it.
    fn whole(&self) -> WholeArray<'_> {
        WholeArray {
            raw: self.handle.raw,
            shape: &self.shape,
            element_bytes: self.element_bytes(),
            size_bytes: self.size_bytes,
            lifeline: &self.lifeline,
            copy_to_what: "OpaqueArray::copy_to",
        }
    }

    /// Copies the first [`size_bytes`](Self::size_bytes) bytes of `src` into the array, ordered
    /// on `stream` (`cuda.core`'s `copy_from` with a `Buffer`). The buffer must hold at least
    /// that many. Recorded into a graph when `stream` is being captured (the graph then holds
    /// the array and the buffer).
    pub fn copy_from(&self, src: &Buffer, stream: &Stream) -> Result<()> {
        self.whole().copy_from(src, stream)
    }

    /// Copies the whole array into the first [`size_bytes`](Self::size_bytes) bytes of `dst`,
    /// ordered on `stream` (`cuda.core`'s `copy_to` with a `Buffer`).
    pub fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        self.whole().copy_to(dst, stream)
    }

    /// Copies host data into the array, ordered on `stream`, and waits for the copy (so `src`
    /// may be reused at once; `cuda.core`'s `copy_from` with a host buffer). `src` must hold at
    /// least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being captured.
    pub fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream) -> Result<()> {
        self.whole().copy_from_host(src, stream, FROM_HOST_REFUSAL)
    }

    /// Copies the whole array into host memory, ordered on `stream`, and waits for the copy.
    /// `dst` must hold at least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being
    /// captured.
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        self.whole().copy_to_host(dst, stream, TO_HOST_REFUSAL)
    }

    /// The whole array as a vector of `T` (waits for the copy).
    pub fn to_vec<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
        self.whole().to_vec(stream, TO_HOST_REFUSAL)
    }
}

impl Device {
    /// A new array on this device (`cuda.core`'s `Device.create_opaque_array`), in the current
    /// context when it is this device's, else in the device's primary context.
    pub fn create_opaque_array(&self, options: &OpaqueArrayOptions) -> Result<OpaqueArray> {
        let size = check_shape(&options.shape, options.format, options.num_channels)?;
        OpaqueArray::create(&device_context(self)?, options, size)
    }
}
