//! The checks `cuda.core` makes on a tensor map's options before the driver sees them, and the
//! tensor's layout as the driver takes it (innermost first): host-only, unit-tested.

use super::super::DType;
use super::options::{TensorMapDataType, TensorMapInterleave, TensorMapOOBFill, TensorMapSwizzle};
use crate::{CudaError, Result};

fn invalid(message: String) -> CudaError {
    CudaError::InvalidArgument(message)
}

/// What the options all share, checked against the tensor.
#[derive(Debug)]
pub(super) struct Common {
    pub(super) data_type: TensorMapDataType,
    /// Innermost first, as the driver takes them.
    pub(super) element_strides: Vec<u32>,
}

/// Checks the element strides (rank entries, each 1..=8) and the data type (the view's, or one
/// of the same size), the rules that do not depend on the kind of map.
pub(super) fn common(
    rank: usize,
    dtype: DType,
    element_strides: Option<&[u32]>,
    data_type: Option<TensorMapDataType>,
    oob_fill: TensorMapOOBFill,
) -> Result<Common> {
    let data_type = match data_type {
        Some(t) => {
            if t.itemsize() != dtype.itemsize() {
                return Err(invalid(format!(
                    "data_type {t} has {}-byte elements but the tensor's dtype {dtype} has {}-byte ones: re-view the memory with a dtype of {t}'s size",
                    t.itemsize(),
                    dtype.itemsize()
                )));
            }
            t
        }
        None => TensorMapDataType::from_dtype(dtype)?,
    };
    let element_strides = match element_strides {
        Some(s) => {
            if s.len() != rank {
                return Err(invalid(format!(
                    "element_strides must have {rank} elements, got {}",
                    s.len()
                )));
            }
            if let Some((i, v)) = s.iter().enumerate().find(|(_, v)| !(1..=8).contains(*v)) {
                return Err(invalid(format!("element_strides[{i}] must be in [1, 8], got {v}")));
            }
            s.iter().rev().copied().collect()
        }
        None => vec![1; rank],
    };
    if oob_fill == TensorMapOOBFill::NanRequestZeroFma && !data_type.is_float() {
        return Err(invalid(format!(
            "oob_fill NAN_REQUEST_ZERO_FMA needs a floating-point data type, not {data_type}"
        )));
    }
    Ok(Common {
        data_type,
        element_strides,
    })
}

/// Checks a tiled map's box (rank entries, each 1..=256) and returns it innermost first.
pub(super) fn tiled_box(rank: usize, box_dim: &[u32]) -> Result<Vec<u32>> {
    if !(1..=5).contains(&rank) {
        return Err(invalid(format!("Tensor rank must be between 1 and 5, got {rank}")));
    }
    if box_dim.len() != rank {
        return Err(invalid(format!(
            "box_dim must have {rank} elements (same as tensor rank), got {}",
            box_dim.len()
        )));
    }
    if let Some((i, v)) = box_dim.iter().enumerate().find(|(_, v)| !(1..=256).contains(*v)) {
        return Err(invalid(format!("box_dim[{i}] must be in [1, 256], got {v}")));
    }
    Ok(box_dim.iter().rev().copied().collect())
}

/// The rules the box's inner dimension must follow for the interleave and swizzle chosen
/// (`inner_bytes`: the box's innermost extent in bytes).
pub(super) fn check_inner_box(
    inner_bytes: usize,
    interleave: TensorMapInterleave,
    swizzle: TensorMapSwizzle,
    rank: usize,
) -> Result<()> {
    if interleave != TensorMapInterleave::None && rank < 3 {
        return Err(invalid(format!(
            "interleave {interleave} needs a tensor of rank 3 or more, got {rank}"
        )));
    }
    if interleave == TensorMapInterleave::Interleave32B && swizzle != TensorMapSwizzle::Swizzle32B {
        return Err(invalid(format!(
            "interleave INTERLEAVE_32B needs swizzle SWIZZLE_32B, got {swizzle}"
        )));
    }
    if interleave == TensorMapInterleave::None {
        if !inner_bytes.is_multiple_of(16) {
            return Err(invalid(format!(
                "the box's inner dimension is {inner_bytes} bytes; without interleave it must be a multiple of 16 bytes"
            )));
        }
        let limit = match swizzle {
            TensorMapSwizzle::None => usize::MAX,
            TensorMapSwizzle::Swizzle32B => 32,
            TensorMapSwizzle::Swizzle64B => 64,
            _ => 128,
        };
        if inner_bytes > limit {
            return Err(invalid(format!(
                "swizzle {swizzle} needs the box's inner dimension to be at most {limit} bytes, got {inner_bytes}"
            )));
        }
    }
    Ok(())
}

/// Checks the im2col corners (rank - 2 entries, in the range the rank allows, as the driver
/// documents) and returns them innermost first.
pub(super) fn im2col_corners(rank: usize, lower: &[i32], upper: &[i32]) -> Result<([i32; 3], [i32; 3])> {
    if !(3..=5).contains(&rank) {
        return Err(invalid(format!(
            "Im2col tensor rank must be between 3 and 5, got {rank}"
        )));
    }
    let spatial = rank - 2;
    let range = match rank {
        3 => -32768..=32767,
        4 => -128..=127,
        _ => -16..=15,
    };
    let mut out = ([0i32; 3], [0i32; 3]);
    for (name, corner, slot) in [
        ("pixel_box_lower_corner", lower, &mut out.0),
        ("pixel_box_upper_corner", upper, &mut out.1),
    ] {
        if corner.len() != spatial {
            return Err(invalid(format!(
                "{name} must have {spatial} elements (rank - 2), got {}",
                corner.len()
            )));
        }
        for (i, &v) in corner.iter().enumerate() {
            if !range.contains(&v) {
                return Err(invalid(format!(
                    "{name}[{i}] must be in [{}, {}] for a tensor of rank {rank}, got {v}",
                    range.start(),
                    range.end()
                )));
            }
            slot[spatial - 1 - i] = v;
        }
    }
    Ok(out)
}

/// Checks an im2col map's per-column counts.
pub(super) fn im2col_counts(channels_per_pixel: u32, pixels_per_column: u32) -> Result<()> {
    if !(1..=256).contains(&channels_per_pixel) {
        return Err(invalid(format!(
            "channels_per_pixel must be in [1, 256], got {channels_per_pixel}"
        )));
    }
    if !(1..=1024).contains(&pixels_per_column) {
        return Err(invalid(format!(
            "pixels_per_column must be in [1, 1024], got {pixels_per_column}"
        )));
    }
    Ok(())
}

/// The tensor as the driver describes it: extents and byte strides innermost first (the
/// innermost stride, the element size, is implied), checked against the driver's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GlobalLayout {
    pub(super) dims: Vec<u64>,
    pub(super) strides: Vec<u64>,
}

/// The driver's layout of a view of `shape` and `strides` (in elements, row-major order) with
/// elements of `itemsize` bytes. The innermost dimension must be contiguous, every other
/// stride positive, a multiple of 16 bytes (32 with 32-byte interleave) and below 2^40, and
/// every extent in 1..=2^31.
pub(super) fn global_layout(
    shape: &[usize],
    strides: &[isize],
    itemsize: usize,
    interleave: TensorMapInterleave,
) -> Result<GlobalLayout> {
    let rank = shape.len();
    if strides.len() != rank {
        return Err(invalid(format!("{} strides for {rank} dimensions", strides.len())));
    }
    if let Some((i, d)) = shape.iter().enumerate().find(|(_, &d)| d == 0 || d as u64 > 1 << 31) {
        return Err(invalid(format!(
            "shape[{i}] is {d}; a tensor map needs every extent in [1, 2^31]"
        )));
    }
    if rank > 0 && strides[rank - 1] != 1 && shape[rank - 1] > 1 {
        return Err(invalid(format!(
            "the innermost dimension must be contiguous (stride 1 element) for a tensor map, got stride {}: copy the tensor into a dense one first",
            strides[rank - 1]
        )));
    }
    let multiple: u64 = if interleave == TensorMapInterleave::Interleave32B {
        32
    } else {
        16
    };
    let mut byte_strides = Vec::with_capacity(rank.saturating_sub(1));
    // Innermost first: the byte strides of dimensions rank-2, ..., 0.
    for i in (0..rank.saturating_sub(1)).rev() {
        let s = strides[i];
        let bytes = u64::try_from(s)
            .ok()
            .filter(|&s| s > 0)
            .and_then(|s| s.checked_mul(itemsize as u64))
            .ok_or_else(|| {
                invalid(format!(
                    "stride {s} of dimension {i} is not positive: a tensor map needs positive strides (copy the tensor into a dense one first)"
                ))
            })?;
        if !bytes.is_multiple_of(multiple) || bytes >= 1 << 40 {
            return Err(invalid(format!(
                "the stride of dimension {i} is {bytes} bytes; a tensor map needs strides that are multiples of {multiple} bytes and below 2^40 (pad the rows)"
            )));
        }
        byte_strides.push(bytes);
    }
    Ok(GlobalLayout {
        dims: shape.iter().rev().map(|&d| d as u64).collect(),
        strides: byte_strides,
    })
}

#[cfg(test)]
mod tests {
    use super::super::options::*;
    use super::*;

    #[test]
    fn data_types_follow_the_view_or_an_override_of_its_size() {
        let c = common(2, DType::F32, None, None, TensorMapOOBFill::None).unwrap();
        assert_eq!(
            (c.data_type, c.element_strides),
            (TensorMapDataType::Float32, vec![1, 1])
        );
        let c = common(
            1,
            DType::F32,
            None,
            Some(TensorMapDataType::Tfloat32),
            TensorMapOOBFill::None,
        )
        .unwrap();
        assert_eq!(c.data_type, TensorMapDataType::Tfloat32);
        let e = common(1, DType::I8, None, None, TensorMapOOBFill::None).unwrap_err();
        assert!(e.to_string().starts_with("Unsupported dtype int8 for TMA"), "{e}");
        let c = common(
            1,
            DType::I8,
            None,
            Some(TensorMapDataType::Uint8),
            TensorMapOOBFill::None,
        )
        .unwrap();
        assert_eq!(c.data_type, TensorMapDataType::Uint8);
        let e = common(
            1,
            DType::F32,
            None,
            Some(TensorMapDataType::Float64),
            TensorMapOOBFill::None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("8-byte elements"), "{e}");
        let e = common(1, DType::I32, None, None, TensorMapOOBFill::NanRequestZeroFma).unwrap_err();
        assert!(e.to_string().contains("floating-point"), "{e}");
        for t in TensorMapDataType::ALL {
            assert!(matches!(t.itemsize(), 1 | 2 | 4 | 8));
        }
    }

    #[test]
    fn element_strides_and_boxes_are_checked_and_reversed() {
        let c = common(3, DType::U16, Some(&[1, 2, 4]), None, TensorMapOOBFill::None).unwrap();
        assert_eq!(c.element_strides, vec![4, 2, 1]);
        let e = common(2, DType::U16, Some(&[1]), None, TensorMapOOBFill::None).unwrap_err();
        assert_eq!(e.to_string(), "element_strides must have 2 elements, got 1");
        let e = common(2, DType::U16, Some(&[1, 9]), None, TensorMapOOBFill::None).unwrap_err();
        assert_eq!(e.to_string(), "element_strides[1] must be in [1, 8], got 9");
        assert_eq!(tiled_box(2, &[16, 32]).unwrap(), vec![32, 16]);
        assert_eq!(
            tiled_box(6, &[1; 6]).unwrap_err().to_string(),
            "Tensor rank must be between 1 and 5, got 6"
        );
        assert_eq!(
            tiled_box(2, &[16]).unwrap_err().to_string(),
            "box_dim must have 2 elements (same as tensor rank), got 1"
        );
        assert_eq!(
            tiled_box(2, &[16, 257]).unwrap_err().to_string(),
            "box_dim[1] must be in [1, 256], got 257"
        );
        assert_eq!(
            tiled_box(1, &[0]).unwrap_err().to_string(),
            "box_dim[0] must be in [1, 256], got 0"
        );
    }

    #[test]
    fn inner_boxes_follow_interleave_and_swizzle() {
        use TensorMapInterleave as I;
        use TensorMapSwizzle as S;
        assert!(check_inner_box(128, I::None, S::None, 2).is_ok());
        assert!(check_inner_box(20, I::None, S::None, 2).is_err());
        assert!(check_inner_box(128, I::None, S::Swizzle128B, 2).is_ok());
        assert!(check_inner_box(128, I::None, S::Swizzle64B, 2).is_err());
        assert!(check_inner_box(64, I::Interleave16B, S::None, 2).is_err());
        assert!(check_inner_box(64, I::Interleave32B, S::None, 3).is_err());
        assert!(check_inner_box(8, I::Interleave32B, S::Swizzle32B, 3).is_ok());
    }

    #[test]
    fn im2col_corners_and_counts_follow_the_rank() {
        let (lo, hi) = im2col_corners(4, &[-1, -2], &[3, 4]).unwrap();
        assert_eq!((lo, hi), ([-2, -1, 0], [4, 3, 0]));
        assert!(im2col_corners(3, &[-32768], &[32767]).is_ok());
        assert!(im2col_corners(4, &[-129, 0], &[0, 0]).is_err());
        assert!(im2col_corners(5, &[0, 0, 16], &[0, 0, 0]).is_err());
        assert_eq!(
            im2col_corners(2, &[], &[]).unwrap_err().to_string(),
            "Im2col tensor rank must be between 3 and 5, got 2"
        );
        assert_eq!(
            im2col_corners(3, &[0, 0], &[0]).unwrap_err().to_string(),
            "pixel_box_lower_corner must have 1 elements (rank - 2), got 2"
        );
        assert!(im2col_counts(1, 1).is_ok());
        assert!(im2col_counts(0, 1).is_err());
        assert!(im2col_counts(256, 1025).is_err());
    }

    #[test]
    fn global_layouts_are_innermost_first_and_checked() {
        let l = global_layout(&[70, 100], &[128, 1], 4, TensorMapInterleave::None).unwrap();
        assert_eq!(
            l,
            GlobalLayout {
                dims: vec![100, 70],
                strides: vec![512]
            }
        );
        let l = global_layout(&[2, 3, 8], &[96, 32, 1], 2, TensorMapInterleave::None).unwrap();
        assert_eq!(
            l,
            GlobalLayout {
                dims: vec![8, 3, 2],
                strides: vec![64, 192]
            }
        );
        // Unaligned rows, gaps in the innermost dimension, negative strides, empty and huge
        // extents are refused.
        for (shape, strides) in [
            (&[4usize, 3][..], &[3isize, 1][..]),
            (&[4, 4][..], &[8, 2][..]),
            (&[4, 4][..], &[-4, 1][..]),
            (&[0, 4][..], &[4, 1][..]),
            (&[(1usize << 31) + 1][..], &[1][..]),
        ] {
            assert!(
                global_layout(shape, strides, 4, TensorMapInterleave::None).is_err(),
                "{shape:?} {strides:?}"
            );
        }
        assert!(global_layout(&[4, 4], &[4, 1], 4, TensorMapInterleave::Interleave32B).is_err());
        assert!(global_layout(&[4, 8], &[8, 1], 4, TensorMapInterleave::Interleave32B).is_ok());
        // A single element needs no contiguity.
        assert!(global_layout(&[1], &[7], 4, TensorMapInterleave::None).is_ok());
    }
}
