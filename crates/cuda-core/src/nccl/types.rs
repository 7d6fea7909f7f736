//! [`UniqueId`], the element types NCCL reduces ([`NcclType`], [`DataType`]) and [`ReduceOp`].

use super::sys;
use crate::memory::Pod;
use crate::{CudaError, Result};
use std::fmt;

/// The bytes of an `ncclUniqueId`.
const ID_BYTES: usize = 128;

/// What every rank of one communicator is created from (`ncclUniqueId`): made once
/// ([`UniqueId::new`], on one rank) and handed to the others over any channel the program has:
/// as hex text ([`Display`](fmt::Display), [`from_hex`](Self::from_hex)), through serde (as the
/// same hex text), or as its 128 raw bytes.
///
/// It names the address the first rank listens on for the others: a process that never calls
/// [`Communicator::init`](super::Communicator::init) with it costs nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; ID_BYTES]);

impl UniqueId {
    /// A new id (`ncclGetUniqueId`): call it on one rank and send the id to the others.
    pub fn new() -> Result<UniqueId> {
        let mut raw = sys::ncclUniqueId {
            internal: [0; ID_BYTES],
        };
        // SAFETY: `raw` is a valid ncclUniqueId to write.
        let status = unsafe { sys::ncclGetUniqueId(&mut raw) };
        super::check(status, "ncclGetUniqueId", None)?;
        Ok(UniqueId(raw.internal.map(|b| b as u8)))
    }

    /// The id from its 128 bytes (as [`as_bytes`](Self::as_bytes) gave them).
    pub fn from_bytes(bytes: [u8; ID_BYTES]) -> UniqueId {
        UniqueId(bytes)
    }

    /// The id's 128 bytes.
    pub fn as_bytes(&self) -> &[u8; ID_BYTES] {
        &self.0
    }

    /// The id as 256 lowercase hex digits (what `Display` prints).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id from 256 hex digits (surrounding white space is ignored).
    pub fn from_hex(text: &str) -> Result<UniqueId> {
        let text = text.trim();
        if text.len() != 2 * ID_BYTES || !text.is_ascii() {
            return Err(CudaError::InvalidArgument(format!(
                "an NCCL unique id is {} hex digits, not {} characters: pass what UniqueId::to_hex (or Display) printed",
                2 * ID_BYTES,
                text.chars().count()
            )));
        }
        let mut bytes = [0u8; ID_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            let pair = &text[2 * i..2 * i + 2];
            *b = u8::from_str_radix(pair, 16).map_err(|_| {
                CudaError::InvalidArgument(format!(
                    "an NCCL unique id is hex digits: `{pair}` at position {} is not",
                    2 * i
                ))
            })?;
        }
        Ok(UniqueId(bytes))
    }

    pub(crate) fn raw(&self) -> sys::ncclUniqueId {
        sys::ncclUniqueId {
            internal: self.0.map(|b| b as _),
        }
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({}…)", &self.to_hex()[..16])
    }
}

impl std::str::FromStr for UniqueId {
    type Err = CudaError;
    fn from_str(s: &str) -> Result<UniqueId> {
        UniqueId::from_hex(s)
    }
}

impl serde::Serialize for UniqueId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for UniqueId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<UniqueId, D::Error> {
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = UniqueId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an NCCL unique id as 256 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<UniqueId, E> {
                UniqueId::from_hex(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Hex)
    }
}

/// NCCL's element types (`ncclDataType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataType {
    /// `ncclInt8`.
    Int8,
    /// `ncclUint8`.
    Uint8,
    /// `ncclInt32`.
    Int32,
    /// `ncclUint32`.
    Uint32,
    /// `ncclInt64`.
    Int64,
    /// `ncclUint64`.
    Uint64,
    /// `ncclFloat16` (IEEE half).
    Float16,
    /// `ncclFloat32`.
    Float32,
    /// `ncclFloat64`.
    Float64,
    /// `ncclBfloat16`.
    Bfloat16,
}

impl DataType {
    /// The NCCL value.
    pub fn raw(self) -> sys::ncclDataType_t {
        use sys::ncclDataType_t as D;
        match self {
            DataType::Int8 => D::ncclInt8,
            DataType::Uint8 => D::ncclUint8,
            DataType::Int32 => D::ncclInt32,
            DataType::Uint32 => D::ncclUint32,
            DataType::Int64 => D::ncclInt64,
            DataType::Uint64 => D::ncclUint64,
            DataType::Float16 => D::ncclFloat16,
            DataType::Float32 => D::ncclFloat32,
            DataType::Float64 => D::ncclFloat64,
            DataType::Bfloat16 => D::ncclBfloat16,
        }
    }

    /// The size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type NCCL reduces: the data type of a collective comes from the element type of
/// its buffers (`i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `half::f16`, `half::bf16`, `f32`, `f64`).
/// Sealed: NCCL knows no others.
pub trait NcclType: Pod + sealed::Sealed {
    /// NCCL's name for the type.
    const DATA_TYPE: DataType;
    /// `value` as this type (the scalar of [`ReduceOp::PreMulSum`]; integers truncate toward
    /// zero and saturate, as `as` does).
    fn from_f64(value: f64) -> Self;
}

macro_rules! nccl_types {
    ($($t:ty => $d:ident, |$v:ident| $conv:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl NcclType for $t {
            const DATA_TYPE: DataType = DataType::$d;
            #[inline]
            fn from_f64($v: f64) -> Self {
                $conv
            }
        }
    )*};
}

nccl_types! {
    i8 => Int8, |v| v as i8;
    u8 => Uint8, |v| v as u8;
    i32 => Int32, |v| v as i32;
    u32 => Uint32, |v| v as u32;
    i64 => Int64, |v| v as i64;
    u64 => Uint64, |v| v as u64;
    half::f16 => Float16, |v| half::f16::from_f64(v);
    half::bf16 => Bfloat16, |v| half::bf16::from_f64(v);
    f32 => Float32, |v| v as f32;
    f64 => Float64, |v| v;
}

/// How a reduction combines the ranks' elements (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg`: the sum divided by the number of ranks.
    Avg,
    /// Each rank's elements multiplied by the scalar (converted to the element type, see
    /// [`NcclType::from_f64`]) before they are summed (`ncclRedOpCreatePreMulSum`, the scalar
    /// read from the host when the collective is queued). Made and destroyed around each call.
    PreMulSum(f64),
}

impl ReduceOp {
    /// The built-in operator, `None` for `PreMulSum` (made per call).
    pub(crate) fn builtin(self) -> Option<sys::ncclRedOp_t> {
        use sys::ncclRedOp_t as R;
        Some(match self {
            ReduceOp::Sum => R::ncclSum,
            ReduceOp::Prod => R::ncclProd,
            ReduceOp::Max => R::ncclMax,
            ReduceOp::Min => R::ncclMin,
            ReduceOp::Avg => R::ncclAvg,
            ReduceOp::PreMulSum(_) => return None,
        })
    }
}
