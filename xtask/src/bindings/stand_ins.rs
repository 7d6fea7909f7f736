//! Stand-in headers for the graphics APIs the interop headers include.

use super::*;

/// Stand-ins for the graphics API headers the interop headers include
/// (`crate::vendor::GRAPHICS_API_HEADERS`), which no NVIDIA wheel ships: only the types the
/// bindings use, with the size and calling convention the real headers give them, so that
/// generating (and checking) the bindings needs no GL, EGL or VDPAU headers on the machine. They
/// are written to `target/xtask/graphics-stand-ins/` and searched before any system folder.
pub const GRAPHICS_STAND_INS: &[(&str, &str)] = &[
    (
        "GL/gl.h",
        "/* Stand-in for <GL/gl.h> (written by cargo xtask bindgen): the types cudaGL.h uses. */\n\
         #ifndef __gl_h_\n#define __gl_h_\n\
         typedef unsigned int GLenum;\n\
         typedef unsigned int GLuint;\n\
         #endif\n",
    ),
    (
        "EGL/egl.h",
        "/* Stand-in for <EGL/egl.h> (written by cargo xtask bindgen): the types cudaEGL.h uses. */\n\
         #ifndef __egl_h_\n#define __egl_h_\n\
         #include <stdint.h>\n\
         typedef int32_t EGLint; /* khronos_int32_t */\n\
         #endif\n",
    ),
    (
        "EGL/eglext.h",
        "/* Stand-in for <EGL/eglext.h> (written by cargo xtask bindgen): the types cudaEGL.h uses. */\n\
         #ifndef __eglext_h_\n#define __eglext_h_\n\
         typedef void *EGLImageKHR;\n\
         typedef void *EGLStreamKHR;\n\
         typedef void *EGLSyncKHR;\n\
         #endif\n",
    ),
    (
        "vdpau/vdpau.h",
        "/* Stand-in for <vdpau/vdpau.h> (written by cargo xtask bindgen): the types cudaVDPAU.h uses. */\n\
         #ifndef _VDPAU_H\n#define _VDPAU_H\n\
         #include <stdint.h>\n\
         typedef uint32_t VdpDevice;\n\
         typedef uint32_t VdpVideoSurface;\n\
         typedef uint32_t VdpOutputSurface;\n\
         typedef uint32_t VdpFuncId;\n\
         /* an enum of non-negative values in vdpau.h: passed as an unsigned int */\n\
         typedef unsigned int VdpStatus;\n\
         typedef VdpStatus VdpGetProcAddress(VdpDevice device, VdpFuncId function_id, void **function_pointer);\n\
         #endif\n",
    ),
];

/// Stand-ins for the toolkit headers `nccl.h` includes and the bindings do not vendor
/// (`crate::vendor::NCCL_UNFOLLOWED_HEADERS`): its C declarations need only `cudaStream_t` and
/// `cudaEvent_t`, which `cuda_runtime_api.h` (vendored) declares, and `CUDART_VERSION`, which it
/// defines; no half, bfloat16 or fp8 type appears in them.
pub const NCCL_STAND_INS: &[(&str, &str)] = &[
    (
        "cuda_runtime.h",
        "/* Stand-in for <cuda_runtime.h> (written by cargo xtask bindgen): what nccl.h uses. */\n\
         #ifndef __CUDA_RUNTIME_H__\n#define __CUDA_RUNTIME_H__\n\
         #include <cuda_runtime_api.h>\n\
         #endif\n",
    ),
    (
        "cuda_fp16.h",
        "/* Stand-in for <cuda_fp16.h> (written by cargo xtask bindgen): nccl.h's C declarations use no half type. */\n",
    ),
    (
        "cuda_bf16.h",
        "/* Stand-in for <cuda_bf16.h> (written by cargo xtask bindgen): nccl.h's C declarations use no bfloat16 type. */\n",
    ),
    (
        "cuda_fp8.h",
        "/* Stand-in for <cuda_fp8.h> (written by cargo xtask bindgen): included by nccl.h in C++ only. */\n",
    ),
];

/// The folder [`write_graphics_stand_ins`] fills, searched by every bindgen run.
pub(super) fn graphics_stand_ins_dir() -> PathBuf {
    util::root().join("target/xtask/graphics-stand-ins")
}

/// Writes [`GRAPHICS_STAND_INS`] and [`NCCL_STAND_INS`] into [`graphics_stand_ins_dir`].
pub(super) fn write_graphics_stand_ins() -> Result {
    let dir = graphics_stand_ins_dir();
    for (name, text) in GRAPHICS_STAND_INS.iter().chain(NCCL_STAND_INS) {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            util::write(&path, text.as_bytes())?;
        }
    }
    Ok(())
}
