//! [`TextureDescriptor`]: how a texture is sampled (`CUDA_TEXTURE_DESC`), and its enums.

use crate::{CudaError, Result};
use cuda_sys::driver;

/// What out-of-range coordinates read (`cuda.core`'s `AddressMode`, `CUaddress_mode`). Wrap
/// and mirror apply to normalized coordinates; on unnormalized ones the driver clamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum AddressMode {
    /// Repeat the texture.
    Wrap = driver::CUaddress_mode_enum::CU_TR_ADDRESS_MODE_WRAP.0,
    /// Repeat the edge texel.
    Clamp = driver::CUaddress_mode_enum::CU_TR_ADDRESS_MODE_CLAMP.0,
    /// Repeat the texture mirrored.
    Mirror = driver::CUaddress_mode_enum::CU_TR_ADDRESS_MODE_MIRROR.0,
    /// Read the border color.
    Border = driver::CUaddress_mode_enum::CU_TR_ADDRESS_MODE_BORDER.0,
}

/// How texels are sampled (`cuda.core`'s `FilterMode`, `CUfilter_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum FilterMode {
    /// The nearest texel.
    Point = driver::CUfilter_mode_enum::CU_TR_FILTER_MODE_POINT.0,
    /// Linear interpolation of the nearest texels (float results only).
    Linear = driver::CUfilter_mode_enum::CU_TR_FILTER_MODE_LINEAR.0,
}

/// How values reach the kernel (`cuda.core`'s `ReadMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum ReadMode {
    /// As stored: integer formats read as integers (`CU_TRSF_READ_AS_INTEGER`).
    ElementType = 0,
    /// Integer formats read as floats normalized to [0, 1] (unsigned) or [-1, 1] (signed).
    NormalizedFloat = 1,
}

impl AddressMode {
    /// The driver's value.
    pub const fn to_driver(self) -> driver::CUaddress_mode {
        driver::CUaddress_mode_enum(self as u32)
    }
}

impl FilterMode {
    /// The driver's value.
    pub const fn to_driver(self) -> driver::CUfilter_mode {
        driver::CUfilter_mode_enum(self as u32)
    }
}

/// How a [`TextureObject`](super::TextureObject) samples its resource (`cuda.core`'s
/// `TextureDescriptor`, the driver's `CUDA_TEXTURE_DESC`). The default clamps, samples the
/// nearest texel, reads elements as stored, and uses unnormalized coordinates, as `cuda.core`'s.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TextureDescriptor {
    /// Per axis (x, y, z). `cuda.core` also takes one mode for every axis
    /// ([`with_address_mode`](Self::with_address_mode)).
    pub address_mode: [AddressMode; 3],
    /// Texel sampling.
    pub filter_mode: FilterMode,
    /// How integer formats read.
    pub read_mode: ReadMode,
    /// Coordinates in [0, 1] rather than texels.
    pub normalized_coords: bool,
    /// sRGB to linear conversion on read (8-bit formats).
    pub srgb: bool,
    /// Exact trilinear filtering.
    pub disable_trilinear_optimization: bool,
    /// Seamless cubemap edge filtering.
    pub seamless_cubemap: bool,
    /// Maximum anisotropy; 0 disables anisotropic filtering.
    pub max_anisotropy: u32,
    /// Filtering between mipmap levels.
    pub mipmap_filter_mode: FilterMode,
    /// Added to the level of detail.
    pub mipmap_level_bias: f32,
    /// The lowest level sampled.
    pub min_mipmap_level_clamp: f32,
    /// The highest level sampled.
    pub max_mipmap_level_clamp: f32,
    /// What border addressing reads (RGBA).
    pub border_color: [f32; 4],
}

impl Default for TextureDescriptor {
    fn default() -> Self {
        TextureDescriptor {
            address_mode: [AddressMode::Clamp; 3],
            filter_mode: FilterMode::Point,
            read_mode: ReadMode::ElementType,
            normalized_coords: false,
            srgb: false,
            disable_trilinear_optimization: false,
            seamless_cubemap: false,
            max_anisotropy: 0,
            mipmap_filter_mode: FilterMode::Point,
            mipmap_level_bias: 0.0,
            min_mipmap_level_clamp: 0.0,
            max_mipmap_level_clamp: 0.0,
            border_color: [0.0; 4],
        }
    }
}

impl TextureDescriptor {
    /// The same descriptor with `mode` on every axis (`cuda.core`'s single `AddressMode`).
    pub fn with_address_mode(mut self, mode: AddressMode) -> TextureDescriptor {
        self.address_mode = [mode; 3];
        self
    }

    /// The driver's description, checked: the mipmap level values must be finite. Wrap and
    /// mirror addressing on unnormalized coordinates are passed on, as `cuda.core` passes them:
    /// the driver supports them only on normalized coordinates and clamps otherwise. (`linear`
    /// resources ignore addressing.)
    pub(super) fn to_driver(&self, _linear: bool) -> Result<driver::CUDA_TEXTURE_DESC> {
        for (name, v) in [
            ("mipmap_level_bias", self.mipmap_level_bias),
            ("min_mipmap_level_clamp", self.min_mipmap_level_clamp),
            ("max_mipmap_level_clamp", self.max_mipmap_level_clamp),
        ] {
            if !v.is_finite() {
                return Err(CudaError::InvalidArgument(format!("{name} must be finite, got {v}")));
            }
        }
        let mut flags = 0;
        if self.read_mode == ReadMode::ElementType {
            flags |= driver::CU_TRSF_READ_AS_INTEGER;
        }
        for (set, flag) in [
            (self.normalized_coords, driver::CU_TRSF_NORMALIZED_COORDINATES),
            (self.srgb, driver::CU_TRSF_SRGB),
            (
                self.disable_trilinear_optimization,
                driver::CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION,
            ),
            (self.seamless_cubemap, driver::CU_TRSF_SEAMLESS_CUBEMAP),
        ] {
            if set {
                flags |= flag;
            }
        }
        Ok(driver::CUDA_TEXTURE_DESC {
            addressMode: self.address_mode.map(AddressMode::to_driver),
            filterMode: self.filter_mode.to_driver(),
            flags,
            maxAnisotropy: self.max_anisotropy,
            mipmapFilterMode: self.mipmap_filter_mode.to_driver(),
            mipmapLevelBias: self.mipmap_level_bias,
            minMipmapLevelClamp: self.min_mipmap_level_clamp,
            maxMipmapLevelClamp: self.max_mipmap_level_clamp,
            borderColor: self.border_color,
            ..Default::default()
        })
    }
}
