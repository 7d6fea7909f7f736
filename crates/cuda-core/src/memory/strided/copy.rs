//! Copies between views of the same shape and dtype (a source broadcast to the destination's
//! shape first, by NumPy's rules): one copy when both are row-major and
//! dense, one pitched 2D copy when both are rows of contiguous elements, and otherwise the
//! strided copy kernel (`kernel`), for views kernels can reach, or a copy staged through dense
//! copies (`staging`) for borrowed host views.
//!
//! Whatever the device copies (every plan but a staged one, whose device side is copied through
//! `copy` again) is refused where the device may not reach it, as buffers' own copies are
//! (`memory/copy/reach.rs`): a view of a buffer where the device may not read the source's
//! memory or write the destination's (host-location virtual memory without device peers, for
//! one), a view of host or raw memory not said to be device-accessible where the driver grants
//! the device no such access.
//!
//! Every buffer behind either view goes through `enqueue_using` (its memory stays alive until
//! the copy is done); a host view's borrow ends with the call, so such copies are waited for
//! (and refused on a stream being captured, whose graph would copy at every launch).

use super::{Backing, StridedMemoryView};
use crate::error::Check;
use crate::memory::buffer::{enqueue_using, Buffer};
use crate::memory::copy::copy_with_host;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// How a copy between two views is made.
pub(super) enum Plan {
    /// Nothing to copy.
    Empty,
    /// `bytes` from element 0 to element 0.
    Contiguous { bytes: usize },
    /// `rows` rows of `width` bytes, each view's rows `pitch` bytes apart.
    Rows {
        width: usize,
        rows: usize,
        src_pitch: usize,
        dst_pitch: usize,
    },
    /// Any other layouts: the strided copy kernel, element by element.
    Kernel { layout: super::kernel::Layout, count: u64 },
    /// Any other layouts with a borrowed host view: staged through dense copies (`staging`).
    Staged,
}

/// The layout as rows: `(rows, row stride in elements)` when every dimension but the last is
/// one row apart from the next (an outer dimension of extent 1 is skipped), the last has stride
/// 1, and strides are positive.
pub(super) fn as_rows(view: &StridedMemoryView<'_>) -> Result<Option<(usize, usize)>> {
    let strides = view.strides_or_row_major()?;
    let dims: Vec<(usize, isize)> = view
        .shape
        .iter()
        .copied()
        .zip(strides)
        .filter(|(d, _)| *d != 1)
        .collect();
    Ok(match dims.as_slice() {
        [] => Some((1, 0)),
        [(_, 1)] => Some((1, 0)),
        [(rows, pitch), (_, 1)] if *pitch > 0 => Some((*rows, *pitch as usize)),
        _ => None,
    })
}

pub(super) fn plan(src: &StridedMemoryView<'_>, dst: &StridedMemoryView<'_>) -> Result<Plan> {
    if src.shape != dst.shape || src.dtype != dst.dtype {
        return Err(CudaError::InvalidArgument(format!(
            "copy between views of shape {:?} ({}) and {:?} ({}): shapes and dtypes must match",
            src.shape, src.dtype, dst.shape, dst.dtype
        )));
    }
    let count = src.size()?;
    if count == 0 {
        return Ok(Plan::Empty);
    }
    let itemsize = src.dtype.itemsize();
    if src.is_c_contiguous() && dst.is_c_contiguous() {
        let bytes = count
            .checked_mul(itemsize)
            .ok_or_else(|| CudaError::InvalidArgument("the copy's size overflows".into()))?;
        return Ok(Plan::Contiguous { bytes });
    }
    let last = src.shape.iter().rev().find(|&&d| d != 1).copied().unwrap_or(1);
    let bytes = |n: usize| {
        n.checked_mul(itemsize)
            .ok_or_else(|| CudaError::InvalidArgument("the copy's size overflows".into()))
    };
    match (as_rows(src)?, as_rows(dst)?) {
        // One row of contiguous elements in each: one plain copy.
        (Some((1, _)), Some((1, _))) => Ok(Plan::Contiguous { bytes: bytes(last)? }),
        // Rows that do not overlap (a pitch of at least the row) in each: one pitched copy.
        (Some((rows, sp)), Some((_, dp))) if rows > 1 && sp >= last && dp >= last => Ok(Plan::Rows {
            width: bytes(last)?,
            rows,
            src_pitch: bytes(sp)?,
            dst_pitch: bytes(dp)?,
        }),
        _ => kernel_plan(src, dst, count),
    }
}

/// The kernel's plan: both views reachable by kernels, at most `MAX_DIMS` dimensions, and the
/// destination's elements distinct (a broadcast destination would be written by many threads).
fn kernel_plan(src: &StridedMemoryView<'_>, dst: &StridedMemoryView<'_>, count: usize) -> Result<Plan> {
    use super::kernel::{Layout, MAX_DIMS};
    if dst
        .shape
        .iter()
        .zip(dst.strides_or_row_major()?)
        .any(|(&d, s)| d > 1 && s == 0)
    {
        return Err(CudaError::InvalidArgument(
            "copy into a view with a zero stride (a broadcast) would write one element many times: refused".into(),
        ));
    }
    if !src.device_accessible || !dst.device_accessible {
        let reachable = |v: &StridedMemoryView<'_>| v.device_accessible || super::staging::is_cpu_side(v);
        if reachable(src) && reachable(dst) {
            return Ok(Plan::Staged);
        }
        return Err(CudaError::InvalidArgument(format!(
            "copy between strided views: memory neither kernels nor this crate's host staging reach (strides {:?} and {:?}): copy through a dense view",
            src.strides, dst.strides
        )));
    }
    let align = src.dtype.itemsize().min(8) as u64;
    if !src.ptr.is_multiple_of(align) || !dst.ptr.is_multiple_of(align) {
        return Err(CudaError::InvalidArgument(format!(
            "copy between strided views: element 0 ({:#x} or {:#x}) is not aligned for {} elements",
            src.ptr, dst.ptr, src.dtype
        )));
    }
    let ndim = src.shape.len();
    if ndim > MAX_DIMS {
        return Err(CudaError::InvalidArgument(format!(
            "copy between strided views of {ndim} dimensions: at most {MAX_DIMS} are supported"
        )));
    }
    let (ss, ds) = (src.strides_or_row_major()?, dst.strides_or_row_major()?);
    let mut layout = Layout {
        shape: [1; MAX_DIMS],
        src: [0; MAX_DIMS],
        dst: [0; MAX_DIMS],
        ndim: ndim as i32,
    };
    for k in 0..ndim {
        let wide = |v: usize| i64::try_from(v).map_err(|_| CudaError::InvalidArgument("a dimension overflows".into()));
        layout.shape[k] = wide(src.shape[k])?;
        layout.src[k] = ss[k] as i64;
        layout.dst[k] = ds[k] as i64;
    }
    Ok(Plan::Kernel {
        layout,
        count: count as u64,
    })
}

/// How copies between views name themselves in refusals.
const WHAT: &str = "copy between strided views";

/// What the device does with a view's memory in a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Reads it (the source).
    Read,
    /// Writes it (the destination).
    Write,
}

/// The buffer a view's memory is, for a view of one.
fn view_buffer<'v>(view: &'v StridedMemoryView<'_>) -> Option<&'v Buffer> {
    match &view.backing {
        Backing::Buffer(b) => Some(*b),
        Backing::Owned(b) => Some(&**b),
        Backing::Host(_) | Backing::Raw => None,
    }
}

/// Whether a copy the device runs asks the driver what it grants the device on the view's
/// memory: host or raw memory, unless the view's maker vouched kernels reach it (`from_raw` with
/// `device_accessible`). Views of buffers are checked as their buffers are.
fn asks_driver(view: &StridedMemoryView<'_>) -> bool {
    view_buffer(view).is_none() && !view.device_accessible
}

/// Refuses the copy where the device of `stream` may not make `access` to the memory of `view`,
/// a view of a buffer, as the buffer's own copies are refused (no refusal for other views).
fn check_buffer_reach(view: &StridedMemoryView<'_>, access: Access, stream: &Stream) -> Result<()> {
    match (view_buffer(view), access) {
        (Some(b), Access::Read) => b.check_device_reads(stream, WHAT),
        (Some(b), Access::Write) => b.check_writable(WHAT),
        (None, _) => Ok(()),
    }
}

/// Refuses the copy where the driver grants the device of `stream` no `access` to the memory of
/// `view`, a view of host or raw memory (see [`asks_driver`]; no refusal for other views). Only
/// for copies the device runs: a staged copy's host side is copied on the CPU.
fn check_memory_reach(view: &StridedMemoryView<'_>, access: Access, stream: &Stream) -> Result<()> {
    if !asks_driver(view) {
        return Ok(());
    }
    match access {
        Access::Read => stream.check_device_reads_memory(view.bounds.0, WHAT),
        Access::Write => stream.check_device_writes_memory(view.bounds.0, WHAT),
    }
}

fn buffers<'v>(views: [&'v StridedMemoryView<'_>; 2]) -> Vec<&'v Buffer> {
    views.into_iter().filter_map(view_buffer).collect()
}

impl StridedMemoryView<'_> {
    /// Copies this view's elements into `dst` (same dtype; same shape, or a shape this view
    /// broadcasts to by NumPy's rules, such as `(k,) + shape`), ordered on `stream`
    /// (`cuda.core`'s `copy_to`): one copy when both are row-major and dense, one pitched copy
    /// when both are rows of contiguous elements, else the strided copy kernel; a host view of
    /// any other layout is gathered or scattered on the CPU through a dense staging copy. With
    /// a host view, the call waits for the copy, and a stream being captured is refused.
    pub fn copy_to(&self, dst: &mut StridedMemoryView<'_>, stream: &Stream) -> Result<()> {
        copy(self, dst, stream)
    }

    /// Copies `src`'s elements into this view (see [`copy_to`](Self::copy_to)).
    pub fn copy_from(&mut self, src: &StridedMemoryView<'_>, stream: &Stream) -> Result<()> {
        copy(src, self, stream)
    }
}

/// `src` seen with `shape` by NumPy's broadcasting rules (as `cuda.core`'s strided copy takes
/// a source of shape `S` into a destination of shape `(k,) + S`): dimensions aligned from the
/// last, every source extent equal to the destination's or 1, the missing leading ones and the
/// extents of 1 repeated with a zero stride. `None` when `src` already has `shape` or cannot be
/// broadcast to it (the copy's plan then names both shapes).
fn broadcast<'v>(src: &'v StridedMemoryView<'_>, shape: &[usize]) -> Result<Option<StridedMemoryView<'v>>> {
    if src.shape == shape || src.shape.len() > shape.len() {
        return Ok(None);
    }
    let lead = shape.len() - src.shape.len();
    let own = src.strides_or_row_major()?;
    let mut strides = vec![0isize; shape.len()];
    for (k, (&extent, &stride)) in src.shape.iter().zip(&own).enumerate() {
        let wanted = shape[lead + k];
        strides[lead + k] = match extent {
            e if e == wanted => stride,
            1 => 0,
            _ => return Ok(None),
        };
    }
    let backing = match &src.backing {
        Backing::Buffer(b) => Backing::Buffer(b),
        Backing::Owned(b) => Backing::Buffer(b),
        Backing::Host(_) => Backing::Host(std::marker::PhantomData),
        Backing::Raw => Backing::Raw,
    };
    let place = super::Place {
        device_id: src.device_id,
        device_accessible: src.device_accessible,
        exact: false,
    };
    // Read only (a source), inside the same memory: a zero stride repeats elements in place.
    StridedMemoryView::make(
        src.ptr,
        shape,
        Some(&strides),
        src.dtype,
        true,
        src.bounds,
        place,
        backing,
    )
    .map(Some)
}

pub(super) fn copy(src: &StridedMemoryView<'_>, dst: &StridedMemoryView<'_>, stream: &Stream) -> Result<()> {
    if dst.readonly {
        return Err(CudaError::InvalidArgument(
            "copy into a read-only view: make the destination writable".into(),
        ));
    }
    let broadcast = broadcast(src, &dst.shape)?;
    let src = broadcast.as_ref().unwrap_or(src);
    // Views of buffers first, whatever the layout: the kernel's plan refuses memory kernels do
    // not reach without saying why. A copy of no elements reaches nothing.
    if src.size()? != 0 {
        check_buffer_reach(src, Access::Read, stream)?;
        check_buffer_reach(dst, Access::Write, stream)?;
    }
    let plan = plan(src, dst)?;
    match plan {
        Plan::Empty => return Ok(()),
        Plan::Staged => return super::staging::copy_staged(src, dst, stream),
        _ => {}
    }
    // The device copies both sides (one copy, a pitched copy, or the kernel): host and raw
    // memory too.
    check_memory_reach(src, Access::Read, stream)?;
    check_memory_reach(dst, Access::Write, stream)?;
    // The kernel is compiled (once) before the operation, so that no capture waits for NVRTC,
    // for the device of the stream, which must be the views'.
    let kernel = match plan {
        Plan::Kernel { .. } => {
            let device = stream.context_or_current()?.device();
            for v in [src, dst] {
                if v.device_id.is_some_and(|d| d != device.device_id()) {
                    return Err(CudaError::InvalidArgument(format!(
                        "copy between strided views: a view on device {:?} copied on a stream of device {}: copy on a stream of the views' device",
                        v.device_id,
                        device.device_id()
                    )));
                }
            }
            Some(super::kernel::kernel(&device, src.dtype.itemsize())?)
        }
        _ => None,
    };
    let run = || match plan {
        Plan::Empty | Plan::Staged => Ok(()),
        Plan::Contiguous { bytes } => {
            // SAFETY: both layouts were checked to lie in the memory their views cover (buffers
            // held until the copy is done by `enqueue_using`, host memory borrowed for the call,
            // which waits for the copy, raw memory vouched for by its maker); dense layouts of
            // equal shape and dtype span `bytes` from element 0.
            unsafe { driver::cuMemcpyAsync(dst.ptr, src.ptr, bytes, stream.handle()) }.check("cuMemcpyAsync")
        }
        Plan::Rows {
            width,
            rows,
            src_pitch,
            dst_pitch,
        } => {
            let copy = driver::CUDA_MEMCPY2D {
                srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                srcDevice: src.ptr,
                srcPitch: src_pitch,
                dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                dstDevice: dst.ptr,
                dstPitch: dst_pitch,
                WidthInBytes: width,
                Height: rows,
                ..Default::default()
            };
            // SAFETY: as above: `rows` rows of `width` bytes, `pitch` apart (at least the
            // width), are exactly the elements of the checked layouts.
            unsafe { driver::cuMemcpy2DAsync(&copy, stream.handle()) }.check("cuMemcpy2DAsync")
        }
        Plan::Kernel { layout, count } => {
            let Some(kernel) = &kernel else {
                return Err(CudaError::InvalidArgument("the strided copy kernel is missing".into()));
            };
            // SAFETY: every offset the layouts give lies in the memory their views cover
            // (checked at construction), of the stream's device (checked above) or reachable by
            // it, alive until the copy is done (as above); element 0 is aligned (checked in the
            // plan) and strides count whole elements. Zero destination strides are refused;
            // other overlapping layouts only leave which bytes win unspecified.
            unsafe { super::kernel::launch(stream, kernel, src.ptr, dst.ptr, &layout, count) }
        }
    };
    let held = buffers([src, dst]);
    if [src, dst].iter().any(|v| matches!(v.backing, Backing::Host(_))) {
        // A host view's borrow ends with this call: the copy is waited for.
        copy_with_host(
            stream,
            &held,
            "a copy with a host view waits for itself, which a stream being captured never runs: copy before or after the capture",
            run,
        )
    } else {
        enqueue_using(stream, &held, |_| run())
    }
}

#[cfg(test)]
mod tests {
    use super::{asks_driver, view_buffer, StridedMemoryView};
    use crate::DType;

    #[test]
    fn copies_the_device_runs_ask_the_driver_about_memory_that_is_no_buffers() {
        // No GPU is needed: which views a copy checks how is decided on the view alone.
        let data = [0u32; 8];
        let host = StridedMemoryView::from_host_slice(&data, &[8], None).unwrap();
        assert!(view_buffer(&host).is_none());
        // A host slice may lie in host-location virtual memory the device has no access to.
        assert!(asks_driver(&host));
        assert!(asks_driver(&host.view(&[4], Some(&[2]), DType::U32).unwrap()));
        let ptr = 1u64 << 40;
        // SAFETY: the views are never read or written (only their place is looked at).
        let vouched =
            unsafe { StridedMemoryView::from_raw(ptr, &[4], None, DType::F32, Some(0), true, false) }.unwrap();
        // SAFETY: as above.
        let raw = unsafe { StridedMemoryView::from_raw(ptr, &[4], None, DType::F32, None, false, false) }.unwrap();
        // Memory its maker vouched kernels reach is not asked about; other raw memory is.
        assert!(!asks_driver(&vouched));
        assert!(asks_driver(&raw));
        assert!(asks_driver(&raw.view(&[2], Some(&[2]), DType::F32).unwrap()));
    }
}
