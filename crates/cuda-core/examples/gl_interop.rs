//! OpenGL interop (cuda.core's `gl_interop_plasma.py`, headless): a GL buffer object registered
//! with CUDA as a `GraphicsResource`, mapped on a stream, filled by a kernel (a Mandelbrot set,
//! one RGBA pixel per thread), unmapped, read back with OpenGL (`glGetBufferSubData`) and saved
//! as a PPM image: `$OUT/gl_interop.ppm`, or in the temporary folder.
//!
//! The GL context is headless: an EGL device (`EGL_EXT_platform_device`, the GPU without any
//! window system; else EGL's default display) with a surfaceless context, loaded at run time from
//! libEGL.so.1. Where there is none (no libEGL, no EGL driver) the example says why and exits
//! successfully.
mod common;
use common::main_with;
use cuda_core::graphics::{GraphicsRegisterFlags, GraphicsResource};
use cuda_core::{launch, CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};
use std::ffi::{c_char, c_void, CStr};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 400;

/// One thread per pixel: the escape time of c = (x, y) under z -> z^2 + c, coloured.
const CODE: &str = r#"
extern "C" __global__ void mandelbrot(uchar4* pixels, int width, int height, int max_iter) {
    int px = blockIdx.x * blockDim.x + threadIdx.x, py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= width || py >= height) return;
    float cx = -2.2f + 3.2f * px / width, cy = -1.0f + 2.0f * py / height;
    float x = 0.0f, y = 0.0f;
    int i = 0;
    while (i < max_iter && x * x + y * y < 4.0f) {
        float t = x * x - y * y + cx;
        y = 2.0f * x * y + cy;
        x = t;
        ++i;
    }
    float t = float(i) / max_iter;
    unsigned char r = (unsigned char)(255.0f * 9.0f * (1 - t) * t * t * t);
    unsigned char g = (unsigned char)(255.0f * 15.0f * (1 - t) * (1 - t) * t * t);
    unsigned char b = (unsigned char)(255.0f * 8.5f * (1 - t) * (1 - t) * (1 - t) * t);
    pixels[py * width + px] = make_uchar4(r, g, b, 255);
}
"#;

type Proc = unsafe extern "C" fn(*const c_char) -> *mut c_void;

/// `name` from `lib` (dlsym) or from eglGetProcAddress, as a function of type `F`.
///
/// # Safety
/// `F` is the C signature of `name`.
unsafe fn load<F: Copy>(lib: *mut c_void, get: Option<Proc>, name: &CStr) -> Result<F, String> {
    // SAFETY: a dlopen handle and a NUL-terminated name; eglGetProcAddress takes any name.
    let mut p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        if let Some(get) = get {
            // SAFETY: as above.
            p = unsafe { get(name.as_ptr()) };
        }
    }
    if p.is_null() {
        return Err(format!("no {}", name.to_string_lossy()));
    }
    // SAFETY: the caller names the signature; function pointers are pointer-sized.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// The GL calls the example makes, with a headless context current on this thread.
#[allow(non_snake_case)]
struct Gl {
    GenBuffers: unsafe extern "C" fn(i32, *mut u32),
    BindBuffer: unsafe extern "C" fn(u32, u32),
    BufferData: unsafe extern "C" fn(u32, isize, *const c_void, u32),
    GetBufferSubData: unsafe extern "C" fn(u32, isize, isize, *mut c_void),
    DeleteBuffers: unsafe extern "C" fn(i32, *const u32),
    GetError: unsafe extern "C" fn() -> u32,
    renderer: String,
}

const GL_ARRAY_BUFFER: u32 = 0x8892;
const GL_DYNAMIC_DRAW: u32 = 0x88E8;

/// A headless GL context made current on this thread, or why there is none.
fn headless_gl() -> Result<Gl, String> {
    // SAFETY: dlopen of a library name.
    let lib = unsafe { libc::dlopen(c"libEGL.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if lib.is_null() {
        // SAFETY: dlerror's message is NUL-terminated (or null).
        let e = unsafe { libc::dlerror() };
        let why = if e.is_null() {
            String::new()
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        };
        return Err(format!("cannot load libEGL.so.1 ({why})"));
    }
    // SAFETY: each type is the EGL 1.5 (or GL) C signature of the name loaded.
    unsafe {
        let get: Proc = load(lib, None, c"eglGetProcAddress")?;
        let get_display: unsafe extern "C" fn(*mut c_void) -> *mut c_void = load(lib, None, c"eglGetDisplay")?;
        let initialize: unsafe extern "C" fn(*mut c_void, *mut i32, *mut i32) -> u32 =
            load(lib, None, c"eglInitialize")?;
        let bind_api: unsafe extern "C" fn(u32) -> u32 = load(lib, None, c"eglBindAPI")?;
        let choose: unsafe extern "C" fn(*mut c_void, *const i32, *mut *mut c_void, i32, *mut i32) -> u32 =
            load(lib, None, c"eglChooseConfig")?;
        let create: unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, *const i32) -> *mut c_void =
            load(lib, None, c"eglCreateContext")?;
        let make_current: unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, *mut c_void) -> u32 =
            load(lib, None, c"eglMakeCurrent")?;
        let error: unsafe extern "C" fn() -> i32 = load(lib, None, c"eglGetError")?;

        // The first EGL device that initialises, else the default display.
        let mut display = std::ptr::null_mut();
        let devices: Result<unsafe extern "C" fn(i32, *mut *mut c_void, *mut i32) -> u32, _> =
            load(lib, Some(get), c"eglQueryDevicesEXT");
        let platform: Result<unsafe extern "C" fn(u32, *mut c_void, *const i32) -> *mut c_void, _> =
            load(lib, Some(get), c"eglGetPlatformDisplayEXT");
        if let (Ok(devices), Ok(platform)) = (devices, platform) {
            const EGL_PLATFORM_DEVICE_EXT: u32 = 0x313F;
            let (mut list, mut n) = ([std::ptr::null_mut(); 8], 0);
            if devices(8, list.as_mut_ptr(), &mut n) != 0 {
                display = list[..n.clamp(0, 8) as usize]
                    .iter()
                    .map(|&d| platform(EGL_PLATFORM_DEVICE_EXT, d, [0x3038].as_ptr()))
                    .find(|&dpy| !dpy.is_null() && initialize(dpy, std::ptr::null_mut(), std::ptr::null_mut()) != 0)
                    .unwrap_or(std::ptr::null_mut());
            }
        }
        if display.is_null() {
            display = get_display(std::ptr::null_mut());
            if display.is_null() || initialize(display, std::ptr::null_mut(), std::ptr::null_mut()) == 0 {
                return Err(format!("no EGL device nor default display (EGL error {:#x})", error()));
            }
        }
        const EGL_OPENGL_API: u32 = 0x30A2;
        // An OpenGL config with pbuffers (a display of the device platform has no windows).
        let config_attribs = [
            0x3033, /* SURFACE_TYPE */
            0x0001, /* PBUFFER_BIT */
            0x3040, /* RENDERABLE_TYPE */
            0x0008, /* OPENGL_BIT */
            0x3038, /* NONE */
        ];
        let (mut config, mut n) = (std::ptr::null_mut(), 0);
        if bind_api(EGL_OPENGL_API) == 0
            || choose(display, config_attribs.as_ptr(), &mut config, 1, &mut n) == 0
            || n < 1
        {
            return Err(format!("no EGL config for OpenGL (EGL error {:#x})", error()));
        }
        let context = create(display, config, std::ptr::null_mut(), [0x3038].as_ptr());
        if context.is_null() {
            return Err(format!("no OpenGL context (EGL error {:#x})", error()));
        }
        // Surfaceless where the display allows it (EGL_KHR_surfaceless_context), else a 1x1 pbuffer.
        if make_current(display, std::ptr::null_mut(), std::ptr::null_mut(), context) == 0 {
            let pbuffer: unsafe extern "C" fn(*mut c_void, *mut c_void, *const i32) -> *mut c_void =
                load(lib, None, c"eglCreatePbufferSurface")?;
            let surface = pbuffer(display, config, [0x3057, 1, 0x3056, 1, 0x3038].as_ptr());
            if surface.is_null() || make_current(display, surface, surface, context) == 0 {
                return Err(format!(
                    "cannot make an OpenGL context current (EGL error {:#x})",
                    error()
                ));
            }
        }
        let get_string: unsafe extern "C" fn(u32) -> *const c_char = load(lib, Some(get), c"glGetString")?;
        let renderer = get_string(0x1F01);
        Ok(Gl {
            GenBuffers: load(lib, Some(get), c"glGenBuffers")?,
            BindBuffer: load(lib, Some(get), c"glBindBuffer")?,
            BufferData: load(lib, Some(get), c"glBufferData")?,
            GetBufferSubData: load(lib, Some(get), c"glGetBufferSubData")?,
            DeleteBuffers: load(lib, Some(get), c"glDeleteBuffers")?,
            GetError: load(lib, Some(get), c"glGetError")?,
            renderer: if renderer.is_null() {
                "?".into()
            } else {
                CStr::from_ptr(renderer).to_string_lossy().into_owned()
            },
        })
    }
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let gl = match headless_gl() {
            Ok(gl) => gl,
            Err(why) => {
                println!("skipped: no headless OpenGL context here: {why}");
                return Ok(());
            }
        };
        println!("OpenGL on {}", gl.renderer);
        let stream = device.create_stream(Default::default())?;
        let kernel = Program::new(
            CODE,
            SourceType::Cxx,
            ProgramOptions {
                arch: Some(format!("sm_{}", device.arch()?)),
                ..Default::default()
            },
        )?
        .compile(CodeType::Cubin, &[])?
        .get_kernel("mandelbrot")?;

        // A GL buffer object with room for the image (a pixel buffer a renderer would draw from).
        let bytes = (WIDTH * HEIGHT * 4) as usize;
        let mut name = 0u32;
        // SAFETY: the GL context is current on this thread; no data is read (null).
        unsafe {
            (gl.GenBuffers)(1, &mut name);
            (gl.BindBuffer)(GL_ARRAY_BUFFER, name);
            (gl.BufferData)(GL_ARRAY_BUFFER, bytes as isize, std::ptr::null(), GL_DYNAMIC_DRAW);
            (gl.BindBuffer)(GL_ARRAY_BUFFER, 0);
        }
        // SAFETY: the GL context is current and `name` is its buffer with a store; it is deleted
        // after the resource is closed, and GL does not touch it while it is mapped.
        let mut resource = unsafe { GraphicsResource::from_gl_buffer(name, GraphicsRegisterFlags::WRITE_DISCARD)? };
        {
            let pixels = resource.map(&stream)?;
            let config = LaunchConfig::new((WIDTH.div_ceil(16), HEIGHT.div_ceil(16)), (16, 16));
            // SAFETY: the kernel writes WIDTH * HEIGHT uchar4 of the mapped buffer, which holds
            // that many.
            unsafe {
                launch(
                    &stream,
                    &config,
                    &kernel,
                    (&*pixels, WIDTH as i32, HEIGHT as i32, 256i32),
                )?
            };
        } // unmapped here, after the kernel: GL sees its writes
        resource.close()?;

        let mut rgba = vec![0u8; bytes];
        // SAFETY: the context is current; `rgba` holds the buffer's bytes.
        let error = unsafe {
            (gl.BindBuffer)(GL_ARRAY_BUFFER, name);
            (gl.GetBufferSubData)(GL_ARRAY_BUFFER, 0, bytes as isize, rgba.as_mut_ptr().cast());
            (gl.BindBuffer)(GL_ARRAY_BUFFER, 0);
            (gl.DeleteBuffers)(1, &name);
            (gl.GetError)()
        };
        if error != 0 {
            return Err(format!("GL error {error:#x} reading the buffer back").into());
        }
        let inside = rgba.chunks_exact(4).filter(|p| p[..3] == [0, 0, 0]).count();
        let mut ppm = format!("P6\n{WIDTH} {HEIGHT}\n255\n").into_bytes();
        ppm.extend(rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]));
        let dir = std::env::var_os("OUT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let path = dir.join("gl_interop.ppm");
        std::fs::write(&path, &ppm)?;
        println!(
            "a {WIDTH}x{HEIGHT} Mandelbrot set drawn by CUDA into GL buffer {name}, read back by GL: {} pixels inside the set; saved to {}",
            inside,
            path.display()
        );
        if inside == 0 || inside == rgba.len() / 4 {
            return Err("the image read back is not the Mandelbrot set".into());
        }
        Ok(())
    })
}
