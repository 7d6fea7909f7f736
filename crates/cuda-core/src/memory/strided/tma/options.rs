//! The options of a tensor map ([`TensorMapDescriptorOptions`] for tiled maps, and the im2col
//! ones) and their enums (each discriminant is the driver's `CUtensorMap*` value).

use super::super::DType;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// Writes `cuda.core`'s name of an enum value (`FLOAT32`, `SWIZZLE_128B`).
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident: $raw:ident { $($(#[$vm:meta])* $v:ident = $c:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[repr(u32)]
        pub enum $name {
            $($(#[$vm])* $v = driver::$raw::$c.0),+
        }

        impl $name {
            /// Every value, in the driver's order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            /// `cuda.core`'s name of the value.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$v => $s),+
                }
            }

            /// The driver's value.
            pub const fn to_driver(self) -> driver::$raw {
                driver::$raw(self as u32)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum! {
    /// The element type a tensor map moves (`cuda.core`'s `TensorMapDataType`,
    /// `CUtensorMapDataType`).
    TensorMapDataType: CUtensorMapDataType_enum {
        /// 1 byte.
        Uint8 = CU_TENSOR_MAP_DATA_TYPE_UINT8 => "UINT8",
        /// 2 bytes.
        Uint16 = CU_TENSOR_MAP_DATA_TYPE_UINT16 => "UINT16",
        /// 4 bytes.
        Uint32 = CU_TENSOR_MAP_DATA_TYPE_UINT32 => "UINT32",
        /// 4 bytes.
        Int32 = CU_TENSOR_MAP_DATA_TYPE_INT32 => "INT32",
        /// 8 bytes.
        Uint64 = CU_TENSOR_MAP_DATA_TYPE_UINT64 => "UINT64",
        /// 8 bytes.
        Int64 = CU_TENSOR_MAP_DATA_TYPE_INT64 => "INT64",
        /// 2 bytes.
        Float16 = CU_TENSOR_MAP_DATA_TYPE_FLOAT16 => "FLOAT16",
        /// 4 bytes.
        Float32 = CU_TENSOR_MAP_DATA_TYPE_FLOAT32 => "FLOAT32",
        /// 8 bytes.
        Float64 = CU_TENSOR_MAP_DATA_TYPE_FLOAT64 => "FLOAT64",
        /// 2 bytes.
        Bfloat16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 => "BFLOAT16",
        /// 4 bytes, subnormals flushed to zero.
        Float32Ftz = CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ => "FLOAT32_FTZ",
        /// 4 bytes, read as TF32.
        Tfloat32 = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 => "TFLOAT32",
        /// 4 bytes, read as TF32, subnormals flushed to zero.
        Tfloat32Ftz = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ => "TFLOAT32_FTZ",
    }
}

named_enum! {
    /// Interleaved layouts (`cuda.core`'s `TensorMapInterleave`, `CUtensorMapInterleave`).
    TensorMapInterleave: CUtensorMapInterleave_enum {
        /// Not interleaved.
        None = CU_TENSOR_MAP_INTERLEAVE_NONE => "NONE",
        /// NC/8HWC8-like layouts: 16 bytes of channels together.
        Interleave16B = CU_TENSOR_MAP_INTERLEAVE_16B => "INTERLEAVE_16B",
        /// NC/16HWC16-like layouts: 32 bytes of channels together.
        Interleave32B = CU_TENSOR_MAP_INTERLEAVE_32B => "INTERLEAVE_32B",
    }
}

named_enum! {
    /// Shared-memory bank swizzling (`cuda.core`'s `TensorMapSwizzle`, `CUtensorMapSwizzle`;
    /// the `128B_ATOM` patterns need a CUDA 12.8 driver and a device that has them).
    TensorMapSwizzle: CUtensorMapSwizzle_enum {
        /// No swizzling.
        None = CU_TENSOR_MAP_SWIZZLE_NONE => "NONE",
        /// 16-byte chunks within a 32-byte span.
        Swizzle32B = CU_TENSOR_MAP_SWIZZLE_32B => "SWIZZLE_32B",
        /// 16-byte chunks within a 64-byte span.
        Swizzle64B = CU_TENSOR_MAP_SWIZZLE_64B => "SWIZZLE_64B",
        /// 16-byte chunks within a 128-byte span.
        Swizzle128B = CU_TENSOR_MAP_SWIZZLE_128B => "SWIZZLE_128B",
        /// 32-byte chunks within a 128-byte span.
        Swizzle128BAtom32B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B => "SWIZZLE_128B_ATOM_32B",
        /// 32-byte chunks within a 128-byte span, 8-byte halves swapped on alternate rows.
        Swizzle128BAtom32BFlip8B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B => "SWIZZLE_128B_ATOM_32B_FLIP_8B",
        /// 64-byte chunks within a 128-byte span.
        Swizzle128BAtom64B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B => "SWIZZLE_128B_ATOM_64B",
    }
}

named_enum! {
    /// The L2 fetch size (`cuda.core`'s `TensorMapL2Promotion`, `CUtensorMapL2promotion`).
    #[allow(non_camel_case_types)]
    TensorMapL2Promotion: CUtensorMapL2promotion_enum {
        /// No promotion.
        None = CU_TENSOR_MAP_L2_PROMOTION_NONE => "NONE",
        /// 64 bytes.
        L2_64B = CU_TENSOR_MAP_L2_PROMOTION_L2_64B => "L2_64B",
        /// 128 bytes.
        L2_128B = CU_TENSOR_MAP_L2_PROMOTION_L2_128B => "L2_128B",
        /// 256 bytes.
        L2_256B = CU_TENSOR_MAP_L2_PROMOTION_L2_256B => "L2_256B",
    }
}

named_enum! {
    /// What out-of-bounds elements read as (`cuda.core`'s `TensorMapOOBFill`,
    /// `CUtensorMapFloatOOBfill`).
    TensorMapOOBFill: CUtensorMapFloatOOBfill_enum {
        /// Zeros.
        None = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE => "NONE",
        /// A NaN that asks FMA to produce zero (floating-point types only).
        NanRequestZeroFma = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA => "NAN_REQUEST_ZERO_FMA",
    }
}

named_enum! {
    /// How an im2col-wide map loads along W (`cuda.core`'s `TensorMapIm2ColWideMode`,
    /// `CUtensorMapIm2ColWideMode`).
    TensorMapIm2ColWideMode: CUtensorMapIm2ColWideMode_enum {
        /// Up to 64 elements along W.
        W = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W => "W",
        /// Up to 128 elements along W.
        W128 = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128 => "W128",
    }
}

macro_rules! default_none {
    ($($t:ident),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                $t::None
            }
        }
    )*};
}

default_none!(
    TensorMapInterleave,
    TensorMapSwizzle,
    TensorMapL2Promotion,
    TensorMapOOBFill
);

// (The enum's derives come from `named_enum!`, which derives no `Default`.)
#[allow(clippy::derivable_impls)]
impl Default for TensorMapIm2ColWideMode {
    fn default() -> Self {
        TensorMapIm2ColWideMode::W
    }
}

impl TensorMapDataType {
    /// Bytes per element.
    pub const fn itemsize(self) -> usize {
        use TensorMapDataType as T;
        match self {
            T::Uint8 => 1,
            T::Uint16 | T::Float16 | T::Bfloat16 => 2,
            T::Uint32 | T::Int32 | T::Float32 | T::Float32Ftz | T::Tfloat32 | T::Tfloat32Ftz => 4,
            T::Uint64 | T::Int64 | T::Float64 => 8,
        }
    }

    /// Whether the type is a floating-point one (what NaN out-of-bounds filling needs).
    pub const fn is_float(self) -> bool {
        use TensorMapDataType as T;
        matches!(
            self,
            T::Float16 | T::Float32 | T::Float64 | T::Bfloat16 | T::Float32Ftz | T::Tfloat32 | T::Tfloat32Ftz
        )
    }

    /// The type a view of `dtype` is moved as (`cuda.core`'s inference from a NumPy dtype).
    pub fn from_dtype(dtype: DType) -> Result<TensorMapDataType> {
        use TensorMapDataType as T;
        Ok(match dtype {
            DType::U8 => T::Uint8,
            DType::U16 => T::Uint16,
            DType::U32 => T::Uint32,
            DType::I32 => T::Int32,
            DType::U64 => T::Uint64,
            DType::I64 => T::Int64,
            DType::F16 => T::Float16,
            DType::F32 => T::Float32,
            DType::F64 => T::Float64,
            DType::BF16 => T::Bfloat16,
            other => {
                return Err(CudaError::InvalidArgument(format!(
                    "Unsupported dtype {other} for TMA; supported dtypes: [uint8, uint16, uint32, int32, uint64, int64, float16, float32, float64, bfloat16]. You may also specify data_type explicitly (a type of the same size, such as UINT8 for int8)."
                )))
            }
        })
    }
}

/// The options of a tiled tensor map (`cuda.core`'s `TensorMapDescriptorOptions`, the
/// arguments of `StridedMemoryView.as_tensor_map`). Dimensions are given in the view's order
/// (row-major: the last one is the innermost), as `cuda.core` takes them; the descriptor hands
/// them to the driver innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TensorMapDescriptorOptions {
    /// The tile (box) each copy moves, in elements per dimension: one entry per dimension of the
    /// tensor, each in 1..=256.
    pub box_dim: Vec<u32>,
    /// The traversal step per dimension (1..=8); all ones when `None`.
    pub element_strides: Option<Vec<u32>>,
    /// The element type moved; the view's dtype's when `None`. An explicit type must have the
    /// view's element size.
    pub data_type: Option<TensorMapDataType>,
    /// Interleaved layout.
    pub interleave: TensorMapInterleave,
    /// Shared-memory swizzling.
    pub swizzle: TensorMapSwizzle,
    /// L2 promotion.
    pub l2_promotion: TensorMapL2Promotion,
    /// What out-of-bounds elements read as.
    pub oob_fill: TensorMapOOBFill,
}

impl TensorMapDescriptorOptions {
    /// Options with this tile and every other option at its default.
    pub fn new(box_dim: impl Into<Vec<u32>>) -> TensorMapDescriptorOptions {
        TensorMapDescriptorOptions {
            box_dim: box_dim.into(),
            ..Default::default()
        }
    }
}

/// The options of an im2col tensor map (`cuda.core`'s private `_from_im2col`), for tensors of
/// rank 3 to 5 laid out N, spatial dimensions (D, H, W as the rank allows), C.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TensorMapIm2colOptions {
    /// The lower corner of the pixel bounding box, one offset per spatial dimension (rank - 2),
    /// in the view's order.
    pub pixel_box_lower_corner: Vec<i32>,
    /// The upper corner of the pixel bounding box, one offset per spatial dimension.
    pub pixel_box_upper_corner: Vec<i32>,
    /// Elements loaded along C (1..=256).
    pub channels_per_pixel: u32,
    /// Pixels loaded along N, D, H, W (1..=1024).
    pub pixels_per_column: u32,
    /// As for tiled maps.
    pub element_strides: Option<Vec<u32>>,
    /// As for tiled maps.
    pub data_type: Option<TensorMapDataType>,
    /// As for tiled maps.
    pub interleave: TensorMapInterleave,
    /// As for tiled maps.
    pub swizzle: TensorMapSwizzle,
    /// As for tiled maps.
    pub l2_promotion: TensorMapL2Promotion,
    /// As for tiled maps.
    pub oob_fill: TensorMapOOBFill,
}

/// The options of an im2col-wide tensor map (`cuda.core`'s private `_from_im2col_wide`; CUDA
/// 12.8 drivers, devices of compute capability 10.0 and newer), which loads along W only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorMapIm2colWideOptions {
    /// The W offset of the box's left corner.
    pub pixel_box_lower_corner_width: i32,
    /// The W offset of the box's right corner.
    pub pixel_box_upper_corner_width: i32,
    /// Elements loaded along C (1..=256).
    pub channels_per_pixel: u32,
    /// Pixels loaded along W (1..=1024).
    pub pixels_per_column: u32,
    /// As for tiled maps.
    pub element_strides: Option<Vec<u32>>,
    /// As for tiled maps.
    pub data_type: Option<TensorMapDataType>,
    /// As for tiled maps.
    pub interleave: TensorMapInterleave,
    /// W or W128.
    pub mode: TensorMapIm2ColWideMode,
    /// Swizzling; 128 bytes by default, as in `cuda.core`.
    pub swizzle: TensorMapSwizzle,
    /// As for tiled maps.
    pub l2_promotion: TensorMapL2Promotion,
    /// As for tiled maps.
    pub oob_fill: TensorMapOOBFill,
}

impl Default for TensorMapIm2colWideOptions {
    fn default() -> Self {
        TensorMapIm2colWideOptions {
            pixel_box_lower_corner_width: 0,
            pixel_box_upper_corner_width: 0,
            channels_per_pixel: 0,
            pixels_per_column: 0,
            element_strides: None,
            data_type: None,
            interleave: TensorMapInterleave::None,
            mode: TensorMapIm2ColWideMode::W,
            swizzle: TensorMapSwizzle::Swizzle128B,
            l2_promotion: TensorMapL2Promotion::None,
            oob_fill: TensorMapOOBFill::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_values_are_the_drivers() {
        use driver::CUtensorMapDataType_enum as D;
        assert_eq!(TensorMapDataType::Uint8 as u32, D::CU_TENSOR_MAP_DATA_TYPE_UINT8.0);
        assert_eq!(TensorMapDataType::Float32 as u32, 7);
        assert_eq!(TensorMapDataType::Float64 as u32, 8);
        assert_eq!(TensorMapDataType::Bfloat16 as u32, 9);
        assert_eq!(
            TensorMapDataType::Tfloat32Ftz as u32,
            D::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ.0
        );
        for (i, t) in TensorMapDataType::ALL.iter().enumerate() {
            assert_eq!(t.to_driver().0, i as u32, "{t}");
        }
        assert_eq!(
            TensorMapSwizzle::Swizzle128BAtom64B.to_driver(),
            driver::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B
        );
        assert_eq!(
            TensorMapL2Promotion::L2_256B.to_driver(),
            driver::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B
        );
        assert_eq!(
            TensorMapInterleave::Interleave32B.to_driver(),
            driver::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_32B
        );
        assert_eq!(
            TensorMapOOBFill::NanRequestZeroFma.to_driver(),
            driver::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
        );
        assert_eq!(
            TensorMapIm2ColWideMode::W128.to_driver(),
            driver::CUtensorMapIm2ColWideMode::CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128
        );
        assert_eq!(TensorMapSwizzle::Swizzle128B.name(), "SWIZZLE_128B");
        assert_eq!(TensorMapDataType::Float32Ftz.to_string(), "FLOAT32_FTZ");
    }
}
