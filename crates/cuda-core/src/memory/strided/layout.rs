//! Layout arithmetic of strided views: element offsets reached, compact strides, contiguity.
//! Every product and sum is checked: a layout that overflows is an error, never a wrapped
//! address.

use crate::{CudaError, Result};

fn overflow(shape: &[usize], strides: &[isize]) -> CudaError {
    CudaError::InvalidArgument(format!(
        "shape {shape:?} with strides {strides:?} (in elements) overflows the address space"
    ))
}

/// Row-major (C-contiguous) strides in elements for `shape`.
pub(crate) fn c_strides(shape: &[usize]) -> Result<Vec<isize>> {
    let mut strides = vec![0isize; shape.len()];
    let mut next: isize = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = next;
        let dim = isize::try_from(shape[i].max(1)).map_err(|_| overflow(shape, &strides))?;
        next = next.checked_mul(dim).ok_or_else(|| overflow(shape, &strides))?;
    }
    Ok(strides)
}

/// The number of elements of `shape`.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| CudaError::InvalidArgument(format!("shape {shape:?} has more elements than fit in usize")))
}

/// The lowest and highest element offsets (from element 0) the layout reaches, inclusive;
/// `None` when it has no elements.
pub(crate) fn offsets(shape: &[usize], strides: &[isize]) -> Result<Option<(isize, isize)>> {
    if strides.len() != shape.len() {
        return Err(CudaError::InvalidArgument(format!(
            "{} strides for {} dimensions",
            strides.len(),
            shape.len()
        )));
    }
    if shape.contains(&0) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&d, &s) in shape.iter().zip(strides) {
        let last = isize::try_from(d - 1).map_err(|_| overflow(shape, strides))?;
        let reach = last.checked_mul(s).ok_or_else(|| overflow(shape, strides))?;
        if reach < 0 {
            lo = lo.checked_add(reach).ok_or_else(|| overflow(shape, strides))?;
        } else {
            hi = hi.checked_add(reach).ok_or_else(|| overflow(shape, strides))?;
        }
    }
    Ok(Some((lo, hi)))
}

/// The byte range `[start, end)` the layout reaches from element 0 at `ptr`, with elements of
/// `itemsize` bytes; `None` when it has no elements.
pub(crate) fn byte_range(ptr: u64, shape: &[usize], strides: &[isize], itemsize: usize) -> Result<Option<(u64, u64)>> {
    let Some((lo, hi)) = offsets(shape, strides)? else {
        return Ok(None);
    };
    let size = isize::try_from(itemsize).map_err(|_| overflow(shape, strides))?;
    let lo_bytes = lo.checked_mul(size).ok_or_else(|| overflow(shape, strides))?;
    let hi_bytes = hi
        .checked_add(1)
        .and_then(|h| h.checked_mul(size))
        .ok_or_else(|| overflow(shape, strides))?;
    let start = ptr
        .checked_add_signed(lo_bytes as i64)
        .ok_or_else(|| overflow(shape, strides))?;
    let end = ptr
        .checked_add_signed(hi_bytes as i64)
        .ok_or_else(|| overflow(shape, strides))?;
    Ok(Some((start, end)))
}

/// Whether the layout is row-major and dense (dimensions of one element may have any stride).
pub(crate) fn is_c_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    let mut expected: isize = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        if s != expected {
            return false;
        }
        match isize::try_from(d).ok().and_then(|d| expected.checked_mul(d)) {
            Some(e) => expected = e,
            None => return false,
        }
    }
    true
}

/// Whether the elements leave no gap between the lowest and the highest (some order and sign of
/// the dimensions makes the layout dense; broadcast dimensions add nothing). Overlapping layouts
/// count as gapped: the answer is conservative.
pub(crate) fn covers_span(shape: &[usize], strides: &[isize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut dims: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, s)| **d > 1 && **s != 0)
        .map(|(&d, &s)| (d, s.unsigned_abs()))
        .collect();
    dims.sort_by_key(|&(_, s)| s);
    let mut expected = 1usize;
    for (d, s) in dims {
        if s != expected {
            return false;
        }
        match expected.checked_mul(d) {
            Some(e) => expected = e,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_strides_and_counts() {
        assert_eq!(c_strides(&[2, 3, 4]).unwrap(), [12, 4, 1]);
        assert_eq!(c_strides(&[]).unwrap(), Vec::<isize>::new());
        assert_eq!(element_count(&[2, 3, 4]).unwrap(), 24);
        assert_eq!(element_count(&[]).unwrap(), 1);
        assert!(element_count(&[usize::MAX, 2]).is_err());
        assert!(c_strides(&[usize::MAX, 4]).is_err());
    }

    #[test]
    fn reached_ranges_follow_dlpack() {
        // 2x3 row-major floats: bytes [0, 24).
        assert_eq!(byte_range(1000, &[2, 3], &[3, 1], 4).unwrap(), Some((1000, 1024)));
        // Negative strides reach before element 0 (a reversed row).
        assert_eq!(byte_range(1000, &[3], &[-1], 4).unwrap(), Some((992, 1004)));
        // Zero-size dimensions reach nothing; zero strides (broadcast) reach one element.
        assert_eq!(byte_range(1000, &[0, 5], &[5, 1], 4).unwrap(), None);
        assert_eq!(byte_range(1000, &[4], &[0], 8).unwrap(), Some((1000, 1008)));
        // Overflow is an error, not a wrapped range.
        assert!(byte_range(u64::MAX - 8, &[4], &[1], 8).is_err());
        assert!(byte_range(0, &[3], &[-1], 4).is_err());
        assert!(offsets(&[usize::MAX], &[isize::MAX]).is_err());
        assert!(offsets(&[2, 2], &[1]).is_err());
    }

    #[test]
    fn spans_with_and_without_gaps() {
        assert!(covers_span(&[2, 3], &[3, 1]));
        assert!(covers_span(&[3, 2], &[1, 3]), "a transpose has no gaps");
        assert!(covers_span(&[4], &[-1]), "nor a reversal");
        assert!(covers_span(&[3, 2], &[0, 1]), "nor a broadcast of a dense row");
        assert!(!covers_span(&[3], &[2]), "every other element");
        assert!(!covers_span(&[2, 3], &[8, 1]), "padded rows");
        assert!(!covers_span(&[2, 2], &[1, 1]), "overlap counts as gapped");
        assert!(covers_span(&[0, 7], &[7, 3]));
    }

    #[test]
    fn contiguity() {
        assert!(is_c_contiguous(&[2, 3], &[3, 1]));
        assert!(is_c_contiguous(&[2, 1, 3], &[3, 99, 1]));
        assert!(!is_c_contiguous(&[2, 3], &[1, 2]));
        assert!(!is_c_contiguous(&[3], &[-1]));
        assert!(is_c_contiguous(&[], &[]));
    }
}
