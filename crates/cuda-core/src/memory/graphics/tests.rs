//! What graphics interop checks before the driver, without a GPU.

use super::*;

#[test]
fn register_flags_are_the_drivers_and_cuda_cores_names() {
    use driver::CUgraphicsRegisterFlags_enum as F;
    assert_eq!(
        GraphicsRegisterFlags::READ_ONLY.bits(),
        F::CU_GRAPHICS_REGISTER_FLAGS_READ_ONLY.0
    );
    assert_eq!(
        GraphicsRegisterFlags::WRITE_DISCARD.bits(),
        F::CU_GRAPHICS_REGISTER_FLAGS_WRITE_DISCARD.0
    );
    assert_eq!(
        GraphicsRegisterFlags::SURFACE_LOAD_STORE.bits(),
        F::CU_GRAPHICS_REGISTER_FLAGS_SURFACE_LDST.0
    );
    assert_eq!(
        GraphicsRegisterFlags::TEXTURE_GATHER.bits(),
        F::CU_GRAPHICS_REGISTER_FLAGS_TEXTURE_GATHER.0
    );
    assert_eq!(
        GraphicsRegisterFlags::empty().bits(),
        F::CU_GRAPHICS_REGISTER_FLAGS_NONE.0
    );
    // EGL images take the driver's map flags, which share these values.
    use driver::CUgraphicsMapResourceFlags_enum as M;
    assert_eq!(
        GraphicsRegisterFlags::READ_ONLY.bits(),
        M::CU_GRAPHICS_MAP_RESOURCE_FLAGS_READ_ONLY.0
    );
    assert_eq!(
        GraphicsRegisterFlags::WRITE_DISCARD.bits(),
        M::CU_GRAPHICS_MAP_RESOURCE_FLAGS_WRITE_DISCARD.0
    );

    let f = GraphicsRegisterFlags::from_names(["surface_load_store", "read_only"]).unwrap();
    assert_eq!(
        f,
        GraphicsRegisterFlags::SURFACE_LOAD_STORE | GraphicsRegisterFlags::READ_ONLY
    );
    assert_eq!(
        GraphicsRegisterFlags::from_names(["none"]).unwrap(),
        GraphicsRegisterFlags::empty()
    );
    assert_eq!(
        GraphicsRegisterFlags::from_names([]).unwrap(),
        GraphicsRegisterFlags::empty()
    );
    assert_eq!(
        GraphicsRegisterFlags::from_names(["bogus"]).unwrap_err().to_string(),
        "Unknown register flag \"bogus\". Valid flags: none, read_only, surface_load_store, texture_gather, write_discard"
    );
    let json = serde_json_like(GraphicsRegisterFlags::READ_ONLY | GraphicsRegisterFlags::TEXTURE_GATHER);
    assert!(json.contains("READ_ONLY") && json.contains("TEXTURE_GATHER"), "{json}");
}

/// The flags' serde form, through bitflags' text format (no JSON crate needed here).
fn serde_json_like(flags: GraphicsRegisterFlags) -> String {
    let mut s = String::new();
    bitflags::parser::to_writer(&flags, &mut s).unwrap();
    s
}

#[test]
fn a_closed_resource_refuses_to_map_with_cuda_cores_error() {
    // A value as `close` leaves it; nothing reaches the driver.
    let mut closed = GraphicsResource {
        registered: None,
        kind: GraphicsResourceKind::GlBuffer,
        _thread: PhantomData,
    };
    assert!(closed.is_closed());
    assert!(!closed.is_mapped());
    assert!(closed.handle().is_null());
    assert_eq!(closed.flags(), GraphicsRegisterFlags::empty());
    let stream = Stream::legacy_default();
    assert_eq!(
        closed.map(&stream).unwrap_err().to_string(),
        "GraphicsResource has been closed"
    );
    assert_eq!(
        closed.map_image(&stream).unwrap_err().to_string(),
        "GraphicsResource has been closed"
    );
    assert_eq!(
        closed.map_egl(&stream).unwrap_err().to_string(),
        "GraphicsResource has been closed"
    );
    closed.close().unwrap();
    assert_eq!(format!("{closed:?}"), "<GraphicsResource handle=0x0 closed>");
}
