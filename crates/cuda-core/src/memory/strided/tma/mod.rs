//! [`TensorMapDescriptor`]: a TMA (Tensor Memory Accelerator) tensor map over the memory of a
//! [`StridedMemoryView`], after `cuda.core`'s `TensorMapDescriptor`; its options and enums
//! (`options`, whose values are the driver's) and the checks made before the driver (`checks`).
//!
//! **Who keeps the memory alive.** A descriptor borrows the buffer its view views (`'a`): the
//! buffer cannot be freed while the descriptor lives. It is a kernel argument (the 128-byte
//! `CUtensorMap` by value, for a `const __grid_constant__ CUtensorMap` parameter) that carries
//! that buffer, so a launch keeps the memory alive until the kernel is done and a stream being
//! captured hands it to the graph, as for a `&Buffer` argument (see [`crate::launch`]).

mod checks;
mod options;

pub use options::{
    TensorMapDataType, TensorMapDescriptorOptions, TensorMapIm2ColWideMode, TensorMapIm2colOptions,
    TensorMapIm2colWideOptions, TensorMapInterleave, TensorMapL2Promotion, TensorMapOOBFill, TensorMapSwizzle,
};

use super::{Backing, DType, StridedMemoryView};
use crate::device::{Context, Device};
use crate::error::Check;
use crate::memory::buffer::Buffer;
use crate::{CudaError, Result};
use checks::GlobalLayout;
use cuda_sys::driver;
use std::ffi::c_void;
use std::fmt;

/// How a descriptor addresses its tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Tiled,
    Im2col,
    Im2colWide,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Tiled => "tiled",
            Method::Im2col => "im2col",
            Method::Im2colWide => "im2col_wide",
        }
    }
}

/// A TMA tensor map (`CUtensorMap`, 128 bytes) describing a tensor in device memory, for
/// `cp.async.bulk.tensor` copies between global and shared memory on devices of compute
/// capability 9.0 and newer (`cuda.core`'s `TensorMapDescriptor`).
///
/// Made from a [`StridedMemoryView`] ([`StridedMemoryView::as_tensor_map`] for tiled maps, as in
/// `cuda.core`; [`tiled`](Self::tiled), [`im2col`](Self::im2col) and
/// [`im2col_wide`](Self::im2col_wide)) or from a buffer with a layout
/// ([`Buffer::as_tensor_map`]). It borrows the viewed buffer, and is a kernel argument for a
/// `const __grid_constant__ CUtensorMap` parameter: the launch keeps the buffer's memory alive
/// until the kernel is done, and a graph captured with it holds the memory for every launch.
///
/// The hardware reads and writes only the elements the map describes (out-of-bounds elements of
/// a box are filled, never read), and the map describes exactly the view's elements, which were
/// checked to lie in its memory. What a kernel does with the map is its own business, which the
/// launch's caller vouches for (launches are `unsafe`): a descriptor of a read-only view must
/// only be loaded from, and a descriptor is used by kernels of the device it was made for (the
/// map holds a device address). Cloning a descriptor borrows the same buffer.
///
/// ```no_run
/// # use cuda_core::*;
/// # fn demo(buffer: &Buffer) -> Result<()> {
/// let view = StridedMemoryView::from_buffer(buffer, &[64, 96], None, DType::F32, false)?;
/// let map = view.as_tensor_map(&TensorMapDescriptorOptions::new([16, 32]))?;
/// assert_eq!(format!("{map:?}"), "TensorMapDescriptor(tiled, rank=2, dtype=FLOAT32, swizzle=NONE)");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TensorMapDescriptor<'a> {
    map: driver::CUtensorMap,
    /// What keeps the described memory alive through launches (never lent when `lends` is off).
    buffer: Option<&'a Buffer>,
    lends: bool,
    method: Method,
    data_type: TensorMapDataType,
    swizzle: TensorMapSwizzle,
    interleave: TensorMapInterleave,
    /// The tensor's extents (the view's order) and byte strides, for `replace_address`.
    shape: Vec<usize>,
    layout: GlobalLayout,
    address: u64,
    device: Device,
    context: Context,
}

impl fmt::Debug for TensorMapDescriptor<'_> {
    /// `cuda.core`'s repr: `TensorMapDescriptor(tiled, rank=2, dtype=FLOAT32, swizzle=NONE)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TensorMapDescriptor({}, rank={}, dtype={}, swizzle={})",
            self.method.name(),
            self.shape.len(),
            self.data_type,
            self.swizzle
        )
    }
}

/// What a descriptor is made from: the view's memory, checked.
struct Source<'a> {
    ptr: u64,
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: DType,
    buffer: Option<&'a Buffer>,
    /// Whether the view lends its buffer (`StridedMemoryView::buffer`: not when read-only, nor
    /// when its source owns only its elements): otherwise the buffer is only held, not lent.
    lends: bool,
    device_id: Option<usize>,
}

impl<'a> Source<'a> {
    /// `cuda.core`'s checks of the tensor: device-accessible memory, 16-byte aligned.
    fn of(view: &'a StridedMemoryView<'_>) -> Result<Source<'a>> {
        if !view.device_accessible {
            return Err(CudaError::InvalidArgument(
                "The tensor must be device-accessible (a view of device, pinned or managed memory, not of a host slice)"
                    .into(),
            ));
        }
        if !view.ptr.is_multiple_of(16) {
            return Err(CudaError::InvalidArgument(format!(
                "Global memory address must be 16-byte aligned, got address {:#x}",
                view.ptr
            )));
        }
        let buffer = match &view.backing {
            Backing::Buffer(b) => Some(*b),
            Backing::Owned(b) => Some(&**b),
            // Raw memory: whoever made the view vouched for it while work queued through the view
            // runs (graph launches included). Host slices were refused above.
            Backing::Raw | Backing::Host(_) => None,
        };
        Ok(Source {
            lends: view.buffer().is_some(),
            ptr: view.ptr,
            shape: view.shape.clone(),
            strides: view.strides_or_row_major()?,
            dtype: view.dtype,
            buffer,
            device_id: view.device_id,
        })
    }
}

/// The current context, which a descriptor belongs to, and its device, which must be the
/// tensor's (`cuda.core` checks the same).
fn context_for(device_id: Option<usize>, what: &str) -> Result<(Context, Device)> {
    crate::reaper::refuse_in_callback()?;
    let context = Context::current()?.ok_or_else(|| {
        CudaError::InvalidState(format!(
            "{what} requires an active CUDA context: make a device current first (Device::set_current)"
        ))
    })?;
    let device = context.device();
    if let Some(id) = device_id {
        if id != device.device_id() {
            return Err(CudaError::InvalidArgument(format!(
                "{what} expects tensor on device {}, got {id}",
                device.device_id()
            )));
        }
    }
    Ok((context, device))
}

impl<'a> TensorMapDescriptor<'a> {
    fn new<F: FnOnce(&mut driver::CUtensorMap, u32, *mut c_void, &GlobalLayout) -> Result<()>>(
        source: Source<'a>,
        method: Method,
        parts: Parts<F>,
    ) -> Result<TensorMapDescriptor<'a>> {
        let (context, device) = context_for(source.device_id, "TensorMapDescriptor")?;
        let mut map = driver::CUtensorMap::default();
        let Parts {
            data_type,
            interleave,
            swizzle,
            layout,
            encode,
        } = parts;
        let rank = u32::try_from(source.shape.len()).unwrap_or(u32::MAX);
        encode(&mut map, rank, source.ptr as *mut c_void, &layout)?;
        Ok(TensorMapDescriptor {
            map,
            buffer: source.buffer,
            lends: source.lends,
            method,
            data_type,
            swizzle,
            interleave,
            shape: source.shape,
            layout,
            address: source.ptr,
            device,
            context,
        })
    }

    /// A tiled map of `view` (`cuda.core`'s `_from_tiled`; [`StridedMemoryView::as_tensor_map`]
    /// is the same): each copy moves a box of `options.box_dim` elements.
    ///
    /// Checked before the driver, with `cuda.core`'s messages where it has them: the memory is
    /// device-accessible, element 0 is 16-byte aligned, the rank is 1 to 5, `box_dim` has one
    /// entry per dimension in 1..=256 (and an inner extent of a multiple of 16 bytes, within the
    /// swizzle span), `element_strides` one per dimension in 1..=8, the dtype is one TMA moves
    /// (or `data_type` one of its size), the innermost dimension is contiguous and the other
    /// strides are positive multiples of 16 bytes, and the tensor is on the current device.
    pub fn tiled(
        view: &'a StridedMemoryView<'_>,
        options: &TensorMapDescriptorOptions,
    ) -> Result<TensorMapDescriptor<'a>> {
        let source = Source::of(view)?;
        let rank = source.shape.len();
        let box_dim = checks::tiled_box(rank, &options.box_dim)?;
        let common = checks::common(
            rank,
            source.dtype,
            options.element_strides.as_deref(),
            options.data_type,
            options.oob_fill,
        )?;
        let inner = (box_dim[0] as usize).saturating_mul(common.data_type.itemsize());
        checks::check_inner_box(inner, options.interleave, options.swizzle, rank)?;
        let layout = layout_of(&source, common.data_type, options.interleave)?;
        let (interleave, swizzle, l2, oob) = (
            options.interleave,
            options.swizzle,
            options.l2_promotion,
            options.oob_fill,
        );
        let data_type = common.data_type;
        let element_strides = common.element_strides;
        let encode = move |map: &mut driver::CUtensorMap, rank: u32, ptr: *mut c_void, l: &GlobalLayout| {
            // SAFETY: every array holds `rank` entries (strides `rank - 1`), checked above; the
            // map is a local the driver writes; the address is the view's, checked to be device
            // memory the layout stays inside.
            unsafe {
                driver::cuTensorMapEncodeTiled(
                    map,
                    data_type.to_driver(),
                    rank,
                    ptr,
                    l.dims.as_ptr(),
                    l.strides.as_ptr(),
                    box_dim.as_ptr(),
                    element_strides.as_ptr(),
                    interleave.to_driver(),
                    swizzle.to_driver(),
                    l2.to_driver(),
                    oob.to_driver(),
                )
            }
            .check("cuTensorMapEncodeTiled")
        };
        let parts = Parts::new(data_type, interleave, swizzle, layout, encode);
        TensorMapDescriptor::new(source, Method::Tiled, parts)
    }

    /// An im2col map of `view` (`cuda.core`'s `_from_im2col`), for convolution-style loads from
    /// a tensor of rank 3 to 5 (N, spatial dimensions, C). Checked as [`tiled`](Self::tiled)
    /// maps are, with the corners (rank - 2 entries, in the range the driver allows for the
    /// rank), `channels_per_pixel` (1..=256) and `pixels_per_column` (1..=1024).
    pub fn im2col(
        view: &'a StridedMemoryView<'_>,
        options: &TensorMapIm2colOptions,
    ) -> Result<TensorMapDescriptor<'a>> {
        let source = Source::of(view)?;
        let rank = source.shape.len();
        let (lower, upper) =
            checks::im2col_corners(rank, &options.pixel_box_lower_corner, &options.pixel_box_upper_corner)?;
        checks::im2col_counts(options.channels_per_pixel, options.pixels_per_column)?;
        let common = checks::common(
            rank,
            source.dtype,
            options.element_strides.as_deref(),
            options.data_type,
            options.oob_fill,
        )?;
        let inner = (options.channels_per_pixel as usize).saturating_mul(common.data_type.itemsize());
        checks::check_inner_box(inner, options.interleave, options.swizzle, rank)?;
        let layout = layout_of(&source, common.data_type, options.interleave)?;
        let (channels, pixels) = (options.channels_per_pixel, options.pixels_per_column);
        let (interleave, swizzle, l2, oob) = (
            options.interleave,
            options.swizzle,
            options.l2_promotion,
            options.oob_fill,
        );
        let data_type = common.data_type;
        let element_strides = common.element_strides;
        let encode = move |map: &mut driver::CUtensorMap, rank: u32, ptr: *mut c_void, l: &GlobalLayout| {
            // SAFETY: as in `tiled`; the corners hold rank - 2 (at most 3) entries.
            unsafe {
                driver::cuTensorMapEncodeIm2col(
                    map,
                    data_type.to_driver(),
                    rank,
                    ptr,
                    l.dims.as_ptr(),
                    l.strides.as_ptr(),
                    lower.as_ptr(),
                    upper.as_ptr(),
                    channels,
                    pixels,
                    element_strides.as_ptr(),
                    interleave.to_driver(),
                    swizzle.to_driver(),
                    l2.to_driver(),
                    oob.to_driver(),
                )
            }
            .check("cuTensorMapEncodeIm2col")
        };
        let parts = Parts::new(data_type, interleave, swizzle, layout, encode);
        TensorMapDescriptor::new(source, Method::Im2col, parts)
    }

    /// An im2col-wide map of `view` (`cuda.core`'s `_from_im2col_wide`), which loads along W
    /// only: CUDA 12.8 drivers (an older one reports the function missing) and devices of
    /// compute capability 10.0 and newer (checked first). Rank 3 to 5.
    pub fn im2col_wide(
        view: &'a StridedMemoryView<'_>,
        options: &TensorMapIm2colWideOptions,
    ) -> Result<TensorMapDescriptor<'a>> {
        let source = Source::of(view)?;
        let rank = source.shape.len();
        if !(3..=5).contains(&rank) {
            return Err(CudaError::InvalidArgument(format!(
                "Im2col-wide tensor rank must be between 3 and 5, got {rank}"
            )));
        }
        checks::im2col_counts(options.channels_per_pixel, options.pixels_per_column)?;
        let common = checks::common(
            rank,
            source.dtype,
            options.element_strides.as_deref(),
            options.data_type,
            options.oob_fill,
        )?;
        let layout = layout_of(&source, common.data_type, options.interleave)?;
        let (_, device) = context_for(source.device_id, "TensorMapDescriptor")?;
        let cc = device.compute_capability()?;
        if cc.major < 10 {
            return Err(CudaError::InvalidArgument(format!(
                "im2col-wide tensor maps need a device of compute capability 10.0 or newer; device {} is {}.{} (use im2col)",
                device.device_id(),
                cc.major,
                cc.minor
            )));
        }
        let (lower, upper) = (
            options.pixel_box_lower_corner_width,
            options.pixel_box_upper_corner_width,
        );
        let (channels, pixels) = (options.channels_per_pixel, options.pixels_per_column);
        let (interleave, mode, swizzle, l2, oob) = (
            options.interleave,
            options.mode,
            options.swizzle,
            options.l2_promotion,
            options.oob_fill,
        );
        let data_type = common.data_type;
        let element_strides = common.element_strides;
        let encode = move |map: &mut driver::CUtensorMap, rank: u32, ptr: *mut c_void, l: &GlobalLayout| {
            // SAFETY: as in `tiled`.
            unsafe {
                driver::cuTensorMapEncodeIm2colWide(
                    map,
                    data_type.to_driver(),
                    rank,
                    ptr,
                    l.dims.as_ptr(),
                    l.strides.as_ptr(),
                    lower,
                    upper,
                    channels,
                    pixels,
                    element_strides.as_ptr(),
                    interleave.to_driver(),
                    mode.to_driver(),
                    swizzle.to_driver(),
                    l2.to_driver(),
                    oob.to_driver(),
                )
            }
            .check("cuTensorMapEncodeIm2colWide")
        };
        let parts = Parts::new(data_type, interleave, swizzle, layout, encode);
        TensorMapDescriptor::new(source, Method::Im2colWide, parts)
    }

    /// Points the map at `view`'s memory (`cuda.core`'s `replace_address`), keeping every other
    /// parameter: launches queued (or graphs captured) before keep the old map and its memory.
    /// The view must have the layout the map was made for (same extents, same byte strides,
    /// elements of the same size): the map's extents are baked in, and a smaller tensor would
    /// let the hardware reach past it. Its memory must be device-accessible, 16-byte aligned and
    /// on the descriptor's device, and the descriptor's context must be current.
    pub fn replace_address(&mut self, view: &'a StridedMemoryView<'_>) -> Result<()> {
        crate::reaper::refuse_in_callback()?;
        let current = Context::current_handle()?;
        if current.is_null() {
            return Err(CudaError::InvalidState(
                "TensorMapDescriptor requires an active CUDA context: make its device current first".into(),
            ));
        }
        if current != self.context.handle() {
            return Err(CudaError::InvalidState(
                "TensorMapDescriptor was created in a different CUDA context: make that context current".into(),
            ));
        }
        let source = Source::of(view)?;
        if let Some(id) = source.device_id {
            if id != self.device.device_id() {
                return Err(CudaError::InvalidArgument(format!(
                    "replace_address expects tensor on device {}, got {id}",
                    self.device.device_id()
                )));
            }
        }
        let layout = layout_of(&source, self.data_type, self.interleave);
        if source.shape != self.shape
            || source.dtype.itemsize() != self.data_type.itemsize()
            || layout.as_ref().ok() != Some(&self.layout)
        {
            return Err(CudaError::InvalidArgument(format!(
                "replace_address: the new tensor must have the layout the descriptor was made for (shape {:?}, byte strides {:?} innermost first, {}-byte elements); got shape {:?}, strides {:?} in {}-byte elements",
                self.shape,
                self.layout.strides,
                self.data_type.itemsize(),
                source.shape,
                source.strides,
                source.dtype.itemsize()
            )));
        }
        let mut map = self.map;
        // SAFETY: the map is a local copy of one the driver encoded; the address is the view's,
        // device memory that holds the layout the map describes (checked above).
        unsafe { driver::cuTensorMapReplaceAddress(&mut map, source.ptr as *mut c_void) }
            .check("cuTensorMapReplaceAddress")?;
        // Only after the driver took it: the old memory stays borrowed if it failed.
        self.map = map;
        self.buffer = source.buffer;
        self.lends = source.lends;
        self.address = source.ptr;
        Ok(())
    }

    /// The encoded map, as a kernel receives it.
    pub fn as_raw(&self) -> &driver::CUtensorMap {
        &self.map
    }

    /// The buffer whose memory the map describes, when its view lends it (as
    /// [`StridedMemoryView::buffer`]: `None` for a read-only view, a view whose source owns only
    /// its elements, and memory a raw view vouched for).
    pub fn buffer(&self) -> Option<&'a Buffer> {
        self.buffer.filter(|_| self.lends)
    }

    /// The buffer a launch with the map holds (its memory stays alive while the GPU may use
    /// it), lent or not.
    pub(crate) fn held_buffer(&self) -> Option<&'a Buffer> {
        self.buffer
    }

    /// The device the descriptor was made for (`cuda.core`'s `device`).
    pub fn device(&self) -> Device {
        self.device
    }

    /// The element type the map moves.
    pub fn data_type(&self) -> TensorMapDataType {
        self.data_type
    }

    /// The swizzle pattern.
    pub fn swizzle(&self) -> TensorMapSwizzle {
        self.swizzle
    }

    /// The tensor's rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The tensor's extents, in the view's order.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The device address of the tensor's element 0.
    pub fn address(&self) -> u64 {
        self.address
    }
}

/// The view's layout for the driver, its dims and strides checked, with elements of
/// `data_type`'s size (the view's: checked by `checks::common`).
fn layout_of(
    source: &Source<'_>,
    data_type: TensorMapDataType,
    interleave: TensorMapInterleave,
) -> Result<GlobalLayout> {
    checks::global_layout(&source.shape, &source.strides, data_type.itemsize(), interleave)
}

/// What a constructor hands to [`TensorMapDescriptor::new`]: the checked parameters, and the
/// driver call that encodes them (`F`).
struct Parts<F> {
    data_type: TensorMapDataType,
    interleave: TensorMapInterleave,
    swizzle: TensorMapSwizzle,
    layout: GlobalLayout,
    encode: F,
}

impl<F> Parts<F> {
    fn new(
        data_type: TensorMapDataType,
        interleave: TensorMapInterleave,
        swizzle: TensorMapSwizzle,
        layout: GlobalLayout,
        encode: F,
    ) -> Parts<F> {
        Parts {
            data_type,
            interleave,
            swizzle,
            layout,
            encode,
        }
    }
}

impl<'v> StridedMemoryView<'v> {
    /// A tiled TMA descriptor of this view (`cuda.core`'s `as_tensor_map`): see
    /// [`TensorMapDescriptor::tiled`]. It borrows the view's buffer.
    pub fn as_tensor_map(&self, options: &TensorMapDescriptorOptions) -> Result<TensorMapDescriptor<'_>> {
        TensorMapDescriptor::tiled(self, options)
    }
}

impl Buffer {
    /// A tiled TMA descriptor of this buffer seen with a layout: element 0 at its start,
    /// `shape`, `strides` in elements (`None`: row-major), `dtype`, checked to stay inside the
    /// buffer as for [`StridedMemoryView::from_buffer`]. It borrows the buffer.
    pub fn as_tensor_map(
        &self,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: DType,
        options: &TensorMapDescriptorOptions,
    ) -> Result<TensorMapDescriptor<'_>> {
        let view = StridedMemoryView::from_buffer(self, shape, strides, dtype, false)?;
        let map = TensorMapDescriptor::tiled(&view, options)?;
        // The view only lent its checks: the map borrows the buffer itself.
        Ok(map.lending(Some(self)))
    }
}

impl TensorMapDescriptor<'_> {
    /// The same map, borrowing `buffer` (which must hold the memory it describes).
    fn lending<'b>(self, buffer: Option<&'b Buffer>) -> TensorMapDescriptor<'b> {
        TensorMapDescriptor {
            map: self.map,
            buffer,
            lends: self.lends,
            method: self.method,
            data_type: self.data_type,
            swizzle: self.swizzle,
            interleave: self.interleave,
            shape: self.shape,
            layout: self.layout,
            address: self.address,
            device: self.device,
            context: self.context,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of memory nobody touches: only the checks before the driver run.
    fn raw_view(ptr: u64, shape: &[usize], strides: Option<&[isize]>, dtype: DType) -> StridedMemoryView<'static> {
        // SAFETY: the view is never read or written, nor used in any GPU work.
        unsafe { StridedMemoryView::from_raw(ptr, shape, strides, dtype, Some(0), true, false) }.unwrap()
    }

    fn err(view: &StridedMemoryView<'_>, options: &TensorMapDescriptorOptions) -> String {
        match TensorMapDescriptor::tiled(view, options) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn views_are_checked_before_the_driver() {
        let view = raw_view(0x1000, &[64, 96], None, DType::F32);
        let opts = TensorMapDescriptorOptions::new([16, 32]);
        // Alignment.
        let unaligned = raw_view(0x1004, &[64, 96], None, DType::F32);
        assert_eq!(
            err(&unaligned, &opts),
            "Global memory address must be 16-byte aligned, got address 0x1004"
        );
        // Host memory.
        let host = vec![0f32; 16];
        let host_view = StridedMemoryView::from_host_slice(&host, &[16], None).unwrap();
        assert!(err(&host_view, &TensorMapDescriptorOptions::new([16])).contains("device-accessible"));
        // Rank and box.
        assert_eq!(
            err(&view, &TensorMapDescriptorOptions::new([16])),
            "box_dim must have 2 elements (same as tensor rank), got 1"
        );
        let rank6 = raw_view(0x1000, &[1, 1, 1, 1, 1, 4], None, DType::F32);
        assert_eq!(
            err(&rank6, &TensorMapDescriptorOptions::new([1; 6])),
            "Tensor rank must be between 1 and 5, got 6"
        );
        // Element strides, dtype, inner box bytes, strides.
        let mut o = opts.clone();
        o.element_strides = Some(vec![1, 0]);
        assert_eq!(err(&view, &o), "element_strides[1] must be in [1, 8], got 0");
        let bools = raw_view(0x1000, &[64], None, DType::Bool);
        assert!(err(&bools, &TensorMapDescriptorOptions::new([16])).starts_with("Unsupported dtype bool"));
        assert!(err(&view, &TensorMapDescriptorOptions::new([16, 3])).contains("multiple of 16 bytes"));
        let odd_rows = raw_view(0x1000, &[64, 5], None, DType::F32);
        assert!(err(&odd_rows, &TensorMapDescriptorOptions::new([16, 4])).contains("pad the rows"));
        let gaps = raw_view(0x1000, &[64, 8], Some(&[16, 2]), DType::F32);
        assert!(err(&gaps, &TensorMapDescriptorOptions::new([16, 4])).contains("contiguous"));
    }

    #[test]
    fn descriptors_cross_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<TensorMapDescriptor<'static>>();
        send_and_sync::<TensorMapDescriptorOptions>();
    }

    #[test]
    fn raw_parameters_have_the_drivers_layout() {
        assert_eq!(std::mem::size_of::<driver::CUtensorMap>(), 128);
        assert!(std::mem::align_of::<driver::CUtensorMap>() >= 64);
    }
}
