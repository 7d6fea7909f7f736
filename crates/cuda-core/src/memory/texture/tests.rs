//! The checks textures make before the driver, without a GPU.

use super::array::tuple;
use super::*;
use cuda_sys::driver;

#[test]
fn formats_are_the_drivers_with_their_sizes() {
    use driver::CUarray_format_enum as F;
    assert_eq!(ArrayFormat::Uint8 as u32, F::CU_AD_FORMAT_UNSIGNED_INT8.0);
    assert_eq!(ArrayFormat::Int16 as u32, F::CU_AD_FORMAT_SIGNED_INT16.0);
    assert_eq!(ArrayFormat::Float16 as u32, F::CU_AD_FORMAT_HALF.0);
    assert_eq!(ArrayFormat::Float32.to_driver(), F::CU_AD_FORMAT_FLOAT);
    for f in ArrayFormat::ALL {
        assert_eq!(ArrayFormat::from_driver(f.to_driver()).unwrap(), f);
    }
    assert!(ArrayFormat::from_driver(F::CU_AD_FORMAT_NV12).is_err());
    assert_eq!(ArrayFormat::ALL.map(ArrayFormat::bytes), [1, 2, 4, 1, 2, 4, 2, 4]);
    assert_eq!(
        ArrayFormat::from_dtype(crate::DType::F16).unwrap(),
        ArrayFormat::Float16
    );
    assert!(ArrayFormat::from_dtype(crate::DType::F64).is_err());
    assert_eq!(ArrayFormat::Uint32.to_string(), "UINT32");
}

#[test]
fn shapes_and_channels_are_checked_as_cuda_core_does() {
    assert_eq!(check_shape(&[16, 8], ArrayFormat::Float32, 4).unwrap(), 16 * 8 * 16);
    assert_eq!(check_shape(&[3], ArrayFormat::Uint8, 1).unwrap(), 3);
    assert_eq!(
        check_shape(&[16], ArrayFormat::Float32, 3).unwrap_err().to_string(),
        "num_channels must be 1, 2, or 4, got 3"
    );
    assert_eq!(
        check_shape(&[], ArrayFormat::Float32, 1).unwrap_err().to_string(),
        "shape rank must be 1, 2, or 3, got 0"
    );
    assert_eq!(
        check_shape(&[1, 2, 3, 4], ArrayFormat::Float32, 1)
            .unwrap_err()
            .to_string(),
        "shape rank must be 1, 2, or 3, got 4"
    );
    assert_eq!(
        check_shape(&[4, 0], ArrayFormat::Float32, 1).unwrap_err().to_string(),
        "shape[1] must be >= 1, got 0"
    );
    assert!(check_shape(&[usize::MAX, 2], ArrayFormat::Uint8, 1).is_err());
    assert!(check_shape(&[usize::MAX / 2 + 1], ArrayFormat::Uint16, 1).is_err());
}

#[test]
fn array_descriptors_use_zero_for_missing_extents() {
    let d = array_descriptor(&[7], ArrayFormat::Uint16, 2, true);
    assert_eq!((d.Width, d.Height, d.Depth, d.NumChannels), (7, 0, 0, 2));
    assert_eq!(d.Flags, driver::CUDA_ARRAY3D_SURFACE_LDST);
    let d = array_descriptor(&[7, 5, 3], ArrayFormat::Float32, 1, false);
    assert_eq!((d.Width, d.Height, d.Depth, d.Flags), (7, 5, 3, 0));
    assert_eq!(d.Format, driver::CUarray_format::CU_AD_FORMAT_FLOAT);
    assert_eq!(tuple(&[16]), "(16,)");
    assert_eq!(tuple(&[16, 8]), "(16, 8)");
}

#[test]
fn texture_descriptors_become_the_drivers_flags() {
    let d = TextureDescriptor::default().to_driver(false).unwrap();
    assert_eq!(d.flags, driver::CU_TRSF_READ_AS_INTEGER);
    assert_eq!(d.addressMode, [driver::CUaddress_mode::CU_TR_ADDRESS_MODE_CLAMP; 3]);
    assert_eq!(d.filterMode, driver::CUfilter_mode::CU_TR_FILTER_MODE_POINT);
    let t = TextureDescriptor {
        read_mode: ReadMode::NormalizedFloat,
        normalized_coords: true,
        srgb: true,
        filter_mode: FilterMode::Linear,
        border_color: [1.0, 2.0, 3.0, 4.0],
        max_anisotropy: 4,
        ..TextureDescriptor::default().with_address_mode(AddressMode::Wrap)
    };
    let d = t.to_driver(false).unwrap();
    assert_eq!(d.flags, driver::CU_TRSF_NORMALIZED_COORDINATES | driver::CU_TRSF_SRGB);
    assert_eq!(d.addressMode, [driver::CUaddress_mode::CU_TR_ADDRESS_MODE_WRAP; 3]);
    assert_eq!(d.filterMode, driver::CUfilter_mode::CU_TR_FILTER_MODE_LINEAR);
    assert_eq!((d.borderColor, d.maxAnisotropy), ([1.0, 2.0, 3.0, 4.0], 4));
    // Wrap and mirror on unnormalized coordinates are passed on, as cuda.core passes them (the
    // driver clamps), on every resource.
    let unnormalized = TextureDescriptor {
        address_mode: [AddressMode::Wrap, AddressMode::Mirror, AddressMode::Clamp],
        ..Default::default()
    };
    let d = unnormalized.to_driver(false).unwrap();
    assert_eq!(d.flags & driver::CU_TRSF_NORMALIZED_COORDINATES, 0);
    assert_eq!(d.addressMode[0], driver::CUaddress_mode::CU_TR_ADDRESS_MODE_WRAP);
    assert_eq!(d.addressMode[1], driver::CUaddress_mode::CU_TR_ADDRESS_MODE_MIRROR);
    assert!(unnormalized.to_driver(true).is_ok());
    let nan = TextureDescriptor {
        mipmap_level_bias: f32::NAN,
        ..Default::default()
    };
    assert_eq!(
        nan.to_driver(false).unwrap_err().to_string(),
        "mipmap_level_bias must be finite, got NaN"
    );
    assert_eq!(
        AddressMode::Border.to_driver(),
        driver::CUaddress_mode::CU_TR_ADDRESS_MODE_BORDER
    );
    assert_eq!(AddressMode::Mirror as u32, 2);
}

#[test]
fn options_check_before_any_driver_call() {
    let e = OpaqueArray::from_descriptor(&OpaqueArrayOptions::new([4, 4], ArrayFormat::Float32, 3)).unwrap_err();
    assert_eq!(e.to_string(), "num_channels must be 1, 2, or 4, got 3");
    let opts = MipmappedArrayOptions {
        shape: vec![16, 16],
        format: ArrayFormat::Float32,
        num_channels: 1,
        num_levels: 0,
        is_surface_load_store: false,
    };
    assert_eq!(
        MipmappedArray::new(&opts).unwrap_err().to_string(),
        "num_levels must be >= 1, got 0"
    );
}

#[test]
fn handles_cross_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<OpaqueArray>();
    send_and_sync::<MipmappedArray>();
    send_and_sync::<ResourceDescriptor>();
    send_and_sync::<TextureObject>();
    send_and_sync::<SurfaceObject>();
    send_and_sync::<TextureDescriptor>();
}

#[test]
fn array_copies_name_their_refusals_after_their_type() {
    // The reach refusals of whole-array copies (`memory/copy/reach.rs`) start with these.
    use super::copies::method_name;
    assert_eq!(
        method_name("OpaqueArray::copy_to", "copy_from"),
        "OpaqueArray::copy_from"
    );
    assert_eq!(
        method_name("MappedArray::copy_to", "copy_to_host"),
        "MappedArray::copy_to_host"
    );
    assert_eq!(method_name("copy_to", "copy_from_host"), "copy_from_host");
}
