//! [`DType`]: the element types of a [`super::StridedMemoryView`], after DLPack's.

use crate::{CudaError, Result};
use dlpark::ffi::{DLDataType, DLDataTypeCode};
use std::fmt;

/// The type of a view's elements: DLPack's scalar types (one lane), `half`'s `f16` and `bf16`
/// included (`cuda.core`'s NumPy dtypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`, one byte.
    Bool,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `half::f16`.
    F16,
    /// `half::bf16`.
    BF16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// A complex number of two `f32`s.
    Complex64,
    /// A complex number of two `f64`s.
    Complex128,
}

impl DType {
    /// Every type, for lookups.
    pub const ALL: [DType; 15] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::Complex64,
        DType::Complex128,
    ];

    /// Bytes per element.
    pub const fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// DLPack's description of the type.
    pub const fn to_dlpack(self) -> DLDataType {
        let (code, bits) = match self {
            DType::Bool => (DLDataTypeCode::BOOL, 8),
            DType::I8 => (DLDataTypeCode::INT, 8),
            DType::I16 => (DLDataTypeCode::INT, 16),
            DType::I32 => (DLDataTypeCode::INT, 32),
            DType::I64 => (DLDataTypeCode::INT, 64),
            DType::U8 => (DLDataTypeCode::UINT, 8),
            DType::U16 => (DLDataTypeCode::UINT, 16),
            DType::U32 => (DLDataTypeCode::UINT, 32),
            DType::U64 => (DLDataTypeCode::UINT, 64),
            DType::F16 => (DLDataTypeCode::FLOAT, 16),
            DType::BF16 => (DLDataTypeCode::BFLOAT, 16),
            DType::F32 => (DLDataTypeCode::FLOAT, 32),
            DType::F64 => (DLDataTypeCode::FLOAT, 64),
            DType::Complex64 => (DLDataTypeCode::COMPLEX, 64),
            DType::Complex128 => (DLDataTypeCode::COMPLEX, 128),
        };
        DLDataType { code, bits, lanes: 1 }
    }

    /// The type DLPack's description names (an error for vector types and types this crate
    /// does not know).
    pub fn from_dlpack(dtype: DLDataType) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|t| {
                let d = t.to_dlpack();
                (d.code, d.bits, d.lanes) == (dtype.code, dtype.bits, dtype.lanes)
            })
            .ok_or_else(|| {
                CudaError::InvalidArgument(format!(
                    "DLPack type (code {}, {} bits, {} lanes) is not a type a view can hold",
                    dtype.code.0, dtype.bits, dtype.lanes
                ))
            })
    }

    /// `cuda.core`'s (NumPy's) name: `"float32"`, `"bfloat16"`, `"complex64"`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = CudaError;
    /// Reads [`DType::name`]'s names.
    fn from_str(s: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| CudaError::InvalidArgument(format!("{s:?} is not a dtype a view can hold")))
    }
}

/// Rust types whose values are elements of one [`DType`]: what typed access to a view checks.
///
/// # Safety
/// `DTYPE.itemsize()` is `size_of::<Self>()`, and every bit pattern of that many bytes is a
/// valid `Self` (`bool` is not one, for that reason).
pub unsafe trait Element: bytemuck::Pod + Send + Sync {
    /// The element type.
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(
            // SAFETY: a plain scalar of the dtype's size; any bit pattern is valid (Pod).
            unsafe impl Element for $t {
                const DTYPE: DType = DType::$d;
            }
        )*
    };
}

elements!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
    [f32; 2] => Complex64, [f64; 2] => Complex128,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_through_dlpack_and_its_name() {
        for t in DType::ALL {
            assert_eq!(DType::from_dlpack(t.to_dlpack()).unwrap(), t);
            assert_eq!(t.name().parse::<DType>().unwrap(), t);
            assert_eq!(t.to_dlpack().bits as usize, t.itemsize() * 8);
        }
        let vector = DLDataType {
            code: DLDataTypeCode::FLOAT,
            bits: 32,
            lanes: 4,
        };
        assert!(DType::from_dlpack(vector).is_err());
        assert!("float128".parse::<DType>().is_err());
    }

    #[test]
    fn elements_match_their_dtypes() {
        fn check<T: Element>() {
            assert_eq!(T::DTYPE.itemsize(), std::mem::size_of::<T>());
        }
        check::<i8>();
        check::<u64>();
        check::<half::bf16>();
        check::<[f64; 2]>();
    }
}
