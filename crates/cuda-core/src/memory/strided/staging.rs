//! Copies with a borrowed host view whose layout no copy engine takes (neither dense nor rows
//! of contiguous elements, or not the other side's rows), which kernels cannot reach: the host
//! side is gathered into (or scattered from) a dense staging copy on the CPU, and the staging
//! copy is copied with the other side as usual (through a dense device staging buffer when that
//! side is strided too). Two host views are copied on the CPU alone.
//!
//! Host views borrow their memory for the call and their copies are waited for (`copy`), so the
//! CPU reads and writes them while no GPU work does.

use super::{copy, layout, Backing, StridedMemoryView};
use crate::memory::buffer::Buffer;
use crate::stream::Stream;
use crate::{CudaError, Result};

/// Whether the view is host memory this program borrows (`from_host_slice`): the CPU side of a
/// staged copy.
pub(super) fn is_cpu_side(view: &StridedMemoryView<'_>) -> bool {
    matches!(view.backing, Backing::Host(_))
}

/// Visits the byte offset (from element 0) of every element of `view`, in row-major order.
fn each_offset(view: &StridedMemoryView<'_>, mut f: impl FnMut(isize)) -> Result<()> {
    let count = view.size()?;
    let item = view.dtype.itemsize() as isize;
    // Dimensions of extent 1 add nothing (their stride, however large, is never taken).
    let dims: Vec<(usize, isize)> = view
        .shape
        .iter()
        .copied()
        .zip(view.strides_or_row_major()?)
        .filter(|&(d, _)| d != 1)
        .collect();
    let mut index = vec![0usize; dims.len()];
    let mut offset = 0isize;
    for _ in 0..count {
        // The layout was checked at construction: every offset it reaches is inside its memory,
        // so the element offsets and their byte offsets fit; the steps between them are taken
        // with wrapping arithmetic, whose results are those offsets.
        f(offset.wrapping_mul(item));
        for (k, &(extent, stride)) in dims.iter().enumerate().rev() {
            index[k] += 1;
            offset = offset.wrapping_add(stride);
            if index[k] < extent {
                break;
            }
            offset = offset.wrapping_sub(stride.wrapping_mul(extent as isize));
            index[k] = 0;
        }
    }
    Ok(())
}

/// A zeroed vector of `bytes` bytes, or an error when the host cannot hold it.
fn host_bytes(bytes: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes).map_err(|e| {
        CudaError::InvalidArgument(format!(
            "a strided copy with a host view stages {bytes} bytes on the host, which it cannot hold: {e}"
        ))
    })?;
    Ok(v)
}

/// The view's elements, row-major and dense.
fn gather(view: &StridedMemoryView<'_>, bytes: usize) -> Result<Vec<u8>> {
    let item = view.dtype.itemsize();
    let mut out = host_bytes(bytes)?;
    let base = view.ptr as usize as *const u8;
    each_offset(view, |off| {
        // SAFETY: the element lies in the host memory the view borrows (its layout was checked
        // against that memory), which no GPU work uses during the call.
        let element = unsafe { std::slice::from_raw_parts(base.offset(off), item) };
        out.extend_from_slice(element);
    })?;
    Ok(out)
}

/// Writes `dense` (row-major elements) into the view's elements.
fn scatter(dense: &[u8], view: &StridedMemoryView<'_>) -> Result<()> {
    let item = view.dtype.itemsize();
    let base = view.ptr as usize as *mut u8;
    let mut from = dense.chunks_exact(item);
    each_offset(view, |off| {
        if let Some(element) = from.next() {
            // SAFETY: the element lies in the writable host memory the view borrows (checked
            // layout; the view is not read-only), which no GPU work uses during the call;
            // `copy` moves bytes even should the view's elements overlap `dense` (they cannot:
            // `dense` is this module's own vector).
            unsafe { std::ptr::copy(element.as_ptr(), base.offset(off), item) };
        }
    })
}

/// A dense view of staging bytes on the host, for `like`'s shape and dtype.
fn dense_host<'s>(
    staging: &'s mut [u8],
    like: &StridedMemoryView<'_>,
    readonly: bool,
) -> Result<StridedMemoryView<'s>> {
    StridedMemoryView::host(
        staging.as_mut_ptr() as u64,
        staging.len(),
        &like.shape,
        None,
        like.dtype,
        readonly,
    )
}

/// Copies between a dense host view and `device` (either way), through a dense device staging
/// buffer when `device`'s layout needs the strided kernel.
fn with_device(
    src: &StridedMemoryView<'_>,
    dst: &StridedMemoryView<'_>,
    to_device: bool,
    stream: &Stream,
) -> Result<()> {
    if !matches!(copy::plan(src, dst)?, copy::Plan::Staged) {
        return copy::copy(src, dst, stream);
    }
    // The device side needs the strided kernel: through a dense device buffer (the copy with
    // the host is then one plain copy, and the kernel's is between two device views).
    let device_side = if to_device { dst } else { src };
    let bytes = staging_bytes(device_side)?;
    let device = stream.context_or_current()?.device();
    let temp = Buffer::allocate(device.memory_resource()?, bytes, stream)?;
    let temp_view = StridedMemoryView::from_buffer(&temp, &device_side.shape, None, device_side.dtype, false)?;
    copy::copy(src, &temp_view, stream)?;
    copy::copy(&temp_view, dst, stream)
}

fn staging_bytes(view: &StridedMemoryView<'_>) -> Result<usize> {
    layout::element_count(&view.shape)?
        .checked_mul(view.dtype.itemsize())
        .ok_or_else(|| CudaError::InvalidArgument("the copy's size overflows".into()))
}

/// The staged copy of `src` into `dst` (same shape and dtype, checked by the caller; `dst`
/// writable), where at least one is a CPU side.
pub(super) fn copy_staged(src: &StridedMemoryView<'_>, dst: &StridedMemoryView<'_>, stream: &Stream) -> Result<()> {
    let bytes = staging_bytes(src)?;
    match (is_cpu_side(src), is_cpu_side(dst)) {
        (true, true) => scatter(&gather(src, bytes)?, dst),
        (true, false) => {
            let mut staging = gather(src, bytes)?;
            let dense = dense_host(&mut staging, src, true)?;
            with_device(&dense, dst, true, stream)
        }
        (false, true) => {
            let mut staging = host_bytes(bytes)?;
            staging.resize(bytes, 0);
            {
                let dense = dense_host(&mut staging, dst, false)?;
                with_device(src, &dense, false, stream)?;
            }
            scatter(&staging, dst)
        }
        (false, false) => Err(CudaError::InvalidArgument(
            "a staged copy needs a host view on one side".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::StridedMemoryView;
    use crate::stream::Stream;

    #[test]
    fn host_views_of_any_layout_copy_on_the_cpu() {
        // No GPU is needed: two host views are copied on the CPU alone.
        let stream = Stream::legacy_default();
        let data: Vec<u16> = (0..12).collect();
        let src = StridedMemoryView::from_host_slice(&data, &[3, 4], Some(&[1, 3])).unwrap();
        let mut out = vec![0u16; 12];
        let mut dst = StridedMemoryView::from_host_slice_mut(&mut out, &[3, 4], None).unwrap();
        dst.copy_from(&src, &stream).unwrap();
        drop(dst);
        // out[r][c] = data[c * 3 + r]
        assert_eq!(out, vec![0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
        // Every other element of a longer slice, into a strided destination.
        let mut sparse = vec![0u16; 24];
        let mut dst = StridedMemoryView::from_host_slice_mut(&mut sparse, &[12], Some(&[2])).unwrap();
        let dense = StridedMemoryView::from_host_slice(&data, &[12], None).unwrap();
        dst.copy_from(&dense, &stream).unwrap();
        drop(dst);
        assert!(sparse.iter().step_by(2).copied().eq(0..12));
        assert!(
            sparse.iter().skip(1).step_by(2).all(|&x| x == 0),
            "the gaps are not written"
        );
        // A dimension of extent 1 with a huge stride is never stepped over.
        let src = StridedMemoryView::from_host_slice(&data, &[2, 1, 2], Some(&[1, isize::MAX, 2])).unwrap();
        let mut four = vec![0u16; 4];
        let mut dst = StridedMemoryView::from_host_slice_mut(&mut four, &[2, 1, 2], None).unwrap();
        dst.copy_from(&src, &stream).unwrap();
        drop(dst);
        assert_eq!(four, vec![0, 2, 1, 3]);
        // No elements: nothing is read or written.
        let empty = StridedMemoryView::from_host_slice(&data, &[0, 3], Some(&[1, 5])).unwrap();
        let mut none = vec![9u16; 2];
        let mut dst = StridedMemoryView::from_host_slice_mut(&mut none, &[0, 3], Some(&[1, 7])).unwrap();
        dst.copy_from(&empty, &stream).unwrap();
        drop(dst);
        assert_eq!(none, vec![9, 9]);
        // A broadcast destination (a zero stride) is refused, as on the device.
        let mut one = vec![0u16; 1];
        let mut dst = StridedMemoryView::from_host_slice_mut(&mut one, &[4], Some(&[0])).unwrap();
        let err = dst
            .copy_from(&dense.view(&[4], None, crate::DType::U16).unwrap(), &stream)
            .unwrap_err();
        assert!(err.to_string().contains("zero stride"), "{err}");
        // A read-only destination is refused before anything is written.
        let mut ro = StridedMemoryView::from_host_slice(&data, &[12], None).unwrap();
        assert!(ro.copy_from(&dense, &stream).is_err());
    }
}
