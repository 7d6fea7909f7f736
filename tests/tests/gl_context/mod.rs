//! A headless EGL context (the device platform, or the default display) and the few GL calls the
//! graphics interop tests make, loaded with dlopen from libEGL.so.1 at run time.

use std::ffi::{c_char, c_void, CStr, CString};

pub mod egl {
    pub type Display = *mut super::c_void;
    pub const NONE: i32 = 0x3038;
    pub const EXTENSIONS: i32 = 0x3055;
    pub const VENDOR: i32 = 0x3053;
    pub const VERSION: i32 = 0x3054;
    pub const SURFACE_TYPE: i32 = 0x3033;
    pub const PBUFFER_BIT: i32 = 0x0001;
    pub const RENDERABLE_TYPE: i32 = 0x3040;
    pub const OPENGL_BIT: i32 = 0x0008;
    pub const OPENGL_API: u32 = 0x30A2;
    pub const WIDTH: i32 = 0x3057;
    pub const HEIGHT: i32 = 0x3056;
    pub const PLATFORM_DEVICE_EXT: u32 = 0x313F;
    pub const CUDA_DEVICE_NV: i32 = 0x323A;
    pub const GL_TEXTURE_2D_KHR: u32 = 0x30B1;
    pub const GL_TEXTURE_LEVEL_KHR: i32 = 0x30BC;
    pub const IMAGE_PRESERVED_KHR: i32 = 0x30D2;
    pub const TRUE: i32 = 1;
}

pub mod gl {
    pub const ARRAY_BUFFER: u32 = 0x8892;
    pub const DYNAMIC_DRAW: u32 = 0x88E8;
    pub const TEXTURE_2D: u32 = 0x0DE1;
    pub const RGBA8: i32 = 0x8058;
    pub const RGBA: u32 = 0x1908;
    pub const R32F: i32 = 0x822E;
    pub const RED: u32 = 0x1903;
    pub const FLOAT: u32 = 0x1406;
    pub const UNSIGNED_BYTE: u32 = 0x1401;
    pub const TEXTURE_MIN_FILTER: u32 = 0x2801;
    pub const TEXTURE_MAG_FILTER: u32 = 0x2800;
    pub const NEAREST: i32 = 0x2600;
    pub const PACK_ALIGNMENT: u32 = 0x0D05;
    pub const UNPACK_ALIGNMENT: u32 = 0x0CF5;
    pub const VENDOR: u32 = 0x1F00;
    pub const RENDERER: u32 = 0x1F01;
    pub const VERSION: u32 = 0x1F02;
}

pub type EglGetProcAddress = unsafe extern "C" fn(*const c_char) -> *mut c_void;

/// The GL entry points the tests call.
#[allow(non_snake_case)]
pub struct GlFns {
    GetError: unsafe extern "C" fn() -> u32,
    GetString: unsafe extern "C" fn(u32) -> *const u8,
    Finish: unsafe extern "C" fn(),
    GenBuffers: unsafe extern "C" fn(i32, *mut u32),
    DeleteBuffers: unsafe extern "C" fn(i32, *const u32),
    BindBuffer: unsafe extern "C" fn(u32, u32),
    BufferData: unsafe extern "C" fn(u32, isize, *const c_void, u32),
    GetBufferSubData: unsafe extern "C" fn(u32, isize, isize, *mut c_void),
    GenTextures: unsafe extern "C" fn(i32, *mut u32),
    DeleteTextures: unsafe extern "C" fn(i32, *const u32),
    BindTexture: unsafe extern "C" fn(u32, u32),
    TexParameteri: unsafe extern "C" fn(u32, u32, i32),
    TexImage2D: unsafe extern "C" fn(u32, i32, i32, i32, i32, i32, u32, u32, *const c_void),
    TexSubImage2D: unsafe extern "C" fn(u32, i32, i32, i32, i32, i32, u32, u32, *const c_void),
    GetTexImage: unsafe extern "C" fn(u32, i32, u32, u32, *mut c_void),
    PixelStorei: unsafe extern "C" fn(u32, i32),
}

/// An EGL context current on the thread that made it (surfaceless, or with a 1x1 pbuffer), and
/// the GL functions. Dropping it releases and destroys the context (the display stays
/// initialised: other tests' threads use it).
pub struct Gl {
    pub display: egl::Display,
    pub context: *mut c_void,
    pub surface: *mut c_void,
    f: GlFns,
    pub get_proc: EglGetProcAddress,
    pub query_string: unsafe extern "C" fn(egl::Display, i32) -> *const c_char,
    make_current: unsafe extern "C" fn(egl::Display, *mut c_void, *mut c_void, *mut c_void) -> u32,
    destroy_context: unsafe extern "C" fn(egl::Display, *mut c_void) -> u32,
    destroy_surface: unsafe extern "C" fn(egl::Display, *mut c_void) -> u32,
    pub description: String,
}

/// `dlsym` of `name` in `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` is the function's C signature.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &str) -> Result<F, String> {
    let c = CString::new(name).unwrap();
    // SAFETY: lib is a dlopen handle; the name is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("libEGL.so.1 has no {name}"));
    }
    // SAFETY: the caller names the symbol's signature; function pointers are pointer-sized.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local message or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: a NUL-terminated message.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

pub fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: EGL and GL strings are NUL-terminated and static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Gl {
    /// A headless GL context current on this thread, on the EGL device of CUDA device `ordinal`
    /// when the device platform says which that is. `Err` says why none can be made.
    pub fn new(ordinal: usize) -> Result<Gl, String> {
        // SAFETY: libEGL is a C library; dlopen of a name is sound.
        let lib = unsafe { libc::dlopen(c"libEGL.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if lib.is_null() {
            return Err(format!("cannot load libEGL.so.1: {}", dl_error()));
        }
        // SAFETY: each type is the EGL 1.5 signature of the symbol named.
        unsafe {
            let get_proc: EglGetProcAddress = sym(lib, "eglGetProcAddress")?;
            let query_string: unsafe extern "C" fn(egl::Display, i32) -> *const c_char = sym(lib, "eglQueryString")?;
            let get_display: unsafe extern "C" fn(*mut c_void) -> egl::Display = sym(lib, "eglGetDisplay")?;
            let initialize: unsafe extern "C" fn(egl::Display, *mut i32, *mut i32) -> u32 = sym(lib, "eglInitialize")?;
            let bind_api: unsafe extern "C" fn(u32) -> u32 = sym(lib, "eglBindAPI")?;
            let choose_config: unsafe extern "C" fn(egl::Display, *const i32, *mut *mut c_void, i32, *mut i32) -> u32 =
                sym(lib, "eglChooseConfig")?;
            let create_context: unsafe extern "C" fn(
                egl::Display,
                *mut c_void,
                *mut c_void,
                *const i32,
            ) -> *mut c_void = sym(lib, "eglCreateContext")?;
            let create_pbuffer: unsafe extern "C" fn(egl::Display, *mut c_void, *const i32) -> *mut c_void =
                sym(lib, "eglCreatePbufferSurface")?;
            let make_current = sym(lib, "eglMakeCurrent")?;
            let destroy_context = sym(lib, "eglDestroyContext")?;
            let destroy_surface = sym(lib, "eglDestroySurface")?;
            let get_error: unsafe extern "C" fn() -> i32 = sym(lib, "eglGetError")?;

            let client = c_text(query_string(std::ptr::null_mut(), egl::EXTENSIONS));
            let mut display: egl::Display = std::ptr::null_mut();
            let mut how = String::new();
            {
                let query_devices = get_proc(c"eglQueryDevicesEXT".as_ptr());
                let platform_display = get_proc(c"eglGetPlatformDisplayEXT".as_ptr());
                let device_attrib = get_proc(c"eglQueryDeviceAttribEXT".as_ptr());
                if !query_devices.is_null() && !platform_display.is_null() {
                    let query_devices: unsafe extern "C" fn(i32, *mut *mut c_void, *mut i32) -> u32 =
                        std::mem::transmute(query_devices);
                    let platform_display: unsafe extern "C" fn(u32, *mut c_void, *const i32) -> egl::Display =
                        std::mem::transmute(platform_display);
                    let mut devices = [std::ptr::null_mut(); 16];
                    let mut n = 0;
                    if query_devices(16, devices.as_mut_ptr(), &mut n) != 0 {
                        let devices = &devices[..n.clamp(0, 16) as usize];
                        // The EGL device of this CUDA device, else the first that initialises.
                        let cuda_ordinal = |d: *mut c_void| -> Option<isize> {
                            if device_attrib.is_null() {
                                return None;
                            }
                            let f: unsafe extern "C" fn(*mut c_void, i32, *mut isize) -> u32 =
                                std::mem::transmute(device_attrib);
                            let mut v: isize = -1;
                            (f(d, egl::CUDA_DEVICE_NV, &mut v) != 0).then_some(v)
                        };
                        let mut order: Vec<(usize, *mut c_void)> = devices.iter().copied().enumerate().collect();
                        order.sort_by_key(|(_, d)| cuda_ordinal(*d) != Some(ordinal as isize));
                        for (i, d) in order {
                            let candidate = platform_display(egl::PLATFORM_DEVICE_EXT, d, [egl::NONE].as_ptr());
                            if !candidate.is_null()
                                && initialize(candidate, std::ptr::null_mut(), std::ptr::null_mut()) != 0
                            {
                                display = candidate;
                                how = format!(
                                    "EGL device {i} of {} (CUDA device {:?})",
                                    devices.len(),
                                    cuda_ordinal(d)
                                );
                                break;
                            }
                        }
                    }
                }
            }
            if display.is_null() {
                let candidate = get_display(std::ptr::null_mut());
                if candidate.is_null() || initialize(candidate, std::ptr::null_mut(), std::ptr::null_mut()) == 0 {
                    return Err(format!(
                        "no EGL display: no EGL device initialises and eglGetDisplay(EGL_DEFAULT_DISPLAY) fails (EGL error {:#x}; client extensions: {client:?})",
                        get_error()
                    ));
                }
                display = candidate;
                how = format!("the default EGL display (client extensions: {client})");
            }
            let vendor = c_text(query_string(display, egl::VENDOR));
            let version = c_text(query_string(display, egl::VERSION));
            if bind_api(egl::OPENGL_API) == 0 {
                return Err(format!("eglBindAPI(EGL_OPENGL_API) failed: {:#x}", get_error()));
            }
            let attribs = [
                egl::SURFACE_TYPE,
                egl::PBUFFER_BIT,
                egl::RENDERABLE_TYPE,
                egl::OPENGL_BIT,
                egl::NONE,
            ];
            let mut config = std::ptr::null_mut();
            let mut count = 0;
            if choose_config(display, attribs.as_ptr(), &mut config, 1, &mut count) == 0 || count < 1 {
                return Err(format!("no EGL config for OpenGL with pbuffers: {:#x}", get_error()));
            }
            let context = create_context(display, config, std::ptr::null_mut(), [egl::NONE].as_ptr());
            if context.is_null() {
                return Err(format!("eglCreateContext failed: {:#x}", get_error()));
            }
            let make_current_fn: unsafe extern "C" fn(egl::Display, *mut c_void, *mut c_void, *mut c_void) -> u32 =
                make_current;
            let mut surface = std::ptr::null_mut();
            if make_current_fn(display, std::ptr::null_mut(), std::ptr::null_mut(), context) == 0 {
                surface = create_pbuffer(display, config, [egl::WIDTH, 1, egl::HEIGHT, 1, egl::NONE].as_ptr());
                if surface.is_null() || make_current_fn(display, surface, surface, context) == 0 {
                    return Err(format!("eglMakeCurrent failed: {:#x}", get_error()));
                }
            }
            let load = |name: &str| -> Result<*mut c_void, String> {
                let c = CString::new(name).unwrap();
                let p = get_proc(c.as_ptr());
                if p.is_null() {
                    Err(format!("eglGetProcAddress({name}) gave nothing"))
                } else {
                    Ok(p)
                }
            };
            macro_rules! gl {
                ($name:literal) => {
                    std::mem::transmute_copy::<*mut c_void, _>(&load($name)?)
                };
            }
            let f = GlFns {
                GetError: gl!("glGetError"),
                GetString: gl!("glGetString"),
                Finish: gl!("glFinish"),
                GenBuffers: gl!("glGenBuffers"),
                DeleteBuffers: gl!("glDeleteBuffers"),
                BindBuffer: gl!("glBindBuffer"),
                BufferData: gl!("glBufferData"),
                GetBufferSubData: gl!("glGetBufferSubData"),
                GenTextures: gl!("glGenTextures"),
                DeleteTextures: gl!("glDeleteTextures"),
                BindTexture: gl!("glBindTexture"),
                TexParameteri: gl!("glTexParameteri"),
                TexImage2D: gl!("glTexImage2D"),
                TexSubImage2D: gl!("glTexSubImage2D"),
                GetTexImage: gl!("glGetTexImage"),
                PixelStorei: gl!("glPixelStorei"),
            };
            let text = |name| c_text((f.GetString)(name).cast());
            let description = format!(
                "{how}, EGL {version} ({vendor}), GL {} on {} ({})",
                text(gl::VERSION),
                text(gl::RENDERER),
                text(gl::VENDOR)
            );
            Ok(Gl {
                display,
                context,
                surface,
                f,
                get_proc,
                query_string,
                make_current,
                destroy_context,
                destroy_surface,
                description,
            })
        }
    }

    pub fn check(&self, what: &str) {
        // SAFETY: the context is current on this thread.
        let e = unsafe { (self.f.GetError)() };
        assert_eq!(e, 0, "GL error {e:#x} after {what}");
    }

    /// A buffer object holding `data`.
    pub fn buffer(&self, data: &[u8]) -> u32 {
        let mut name = 0;
        // SAFETY: the context is current; `data` is read during the call.
        unsafe {
            (self.f.GenBuffers)(1, &mut name);
            (self.f.BindBuffer)(gl::ARRAY_BUFFER, name);
            (self.f.BufferData)(
                gl::ARRAY_BUFFER,
                data.len() as isize,
                data.as_ptr().cast(),
                gl::DYNAMIC_DRAW,
            );
            (self.f.BindBuffer)(gl::ARRAY_BUFFER, 0);
        }
        self.check("glBufferData");
        name
    }

    pub fn read_buffer(&self, name: u32, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: the context is current; `out` holds len bytes written during the call.
        unsafe {
            (self.f.BindBuffer)(gl::ARRAY_BUFFER, name);
            (self.f.GetBufferSubData)(gl::ARRAY_BUFFER, 0, len as isize, out.as_mut_ptr().cast());
            (self.f.BindBuffer)(gl::ARRAY_BUFFER, 0);
        }
        self.check("glGetBufferSubData");
        out
    }

    pub fn delete_buffer(&self, name: u32) {
        // SAFETY: the context is current; the name is one of its buffers.
        unsafe { (self.f.DeleteBuffers)(1, &name) };
    }

    /// A `w` x `h` 2D texture of `internal` format filled from `pixels` (`format`, `kind`).
    pub fn texture(&self, w: i32, h: i32, internal: i32, format: u32, kind: u32, pixels: &[u8]) -> u32 {
        let mut name = 0;
        // SAFETY: the context is current; `pixels` holds w*h texels, read during the call.
        unsafe {
            (self.f.GenTextures)(1, &mut name);
            (self.f.BindTexture)(gl::TEXTURE_2D, name);
            (self.f.TexParameteri)(gl::TEXTURE_2D, gl::TEXTURE_MIN_FILTER, gl::NEAREST);
            (self.f.TexParameteri)(gl::TEXTURE_2D, gl::TEXTURE_MAG_FILTER, gl::NEAREST);
            (self.f.PixelStorei)(gl::UNPACK_ALIGNMENT, 1);
            (self.f.TexImage2D)(
                gl::TEXTURE_2D,
                0,
                internal,
                w,
                h,
                0,
                format,
                kind,
                pixels.as_ptr().cast(),
            );
            (self.f.BindTexture)(gl::TEXTURE_2D, 0);
            (self.f.Finish)();
        }
        self.check("glTexImage2D");
        name
    }

    /// Replaces the texels of level 0 of a `w` x `h` texture (its storage stays: an EGL image
    /// made from it keeps seeing it).
    pub fn upload_texture(&self, name: u32, w: i32, h: i32, format: u32, kind: u32, pixels: &[u8]) {
        // SAFETY: the context is current; `pixels` holds w*h texels, read during the call.
        unsafe {
            (self.f.BindTexture)(gl::TEXTURE_2D, name);
            (self.f.PixelStorei)(gl::UNPACK_ALIGNMENT, 1);
            (self.f.TexSubImage2D)(gl::TEXTURE_2D, 0, 0, 0, w, h, format, kind, pixels.as_ptr().cast());
            (self.f.BindTexture)(gl::TEXTURE_2D, 0);
            (self.f.Finish)();
        }
        self.check("glTexSubImage2D");
    }

    pub fn read_texture(&self, name: u32, len: usize, format: u32, kind: u32) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: the context is current; `out` holds the level's len bytes (packed rows).
        unsafe {
            (self.f.BindTexture)(gl::TEXTURE_2D, name);
            (self.f.PixelStorei)(gl::PACK_ALIGNMENT, 1);
            (self.f.GetTexImage)(gl::TEXTURE_2D, 0, format, kind, out.as_mut_ptr().cast());
            (self.f.BindTexture)(gl::TEXTURE_2D, 0);
        }
        self.check("glGetTexImage");
        out
    }

    pub fn delete_texture(&self, name: u32) {
        // SAFETY: the context is current; the name is one of its textures.
        unsafe { (self.f.DeleteTextures)(1, &name) };
    }

    /// Leaves this thread without a current GL context.
    pub fn release_current(&self) {
        // SAFETY: releasing the thread's context is always valid.
        let ok = unsafe {
            (self.make_current)(
                self.display,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_ne!(ok, 0, "eglMakeCurrent(EGL_NO_CONTEXT)");
    }

    /// Makes the context current on this thread again.
    pub fn make_current_again(&self) {
        // SAFETY: the context (and surface) were made here and are current nowhere else.
        let ok = unsafe { (self.make_current)(self.display, self.surface, self.surface, self.context) };
        assert_ne!(ok, 0, "eglMakeCurrent");
    }
}

impl Drop for Gl {
    fn drop(&mut self) {
        // SAFETY: the context (and surface) were made here and are current on this thread.
        unsafe {
            (self.make_current)(
                self.display,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if !self.surface.is_null() {
                (self.destroy_surface)(self.display, self.surface);
            }
            (self.destroy_context)(self.display, self.context);
        }
    }
}
