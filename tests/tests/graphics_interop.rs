//! Graphics interop on the GPU with a real OpenGL context: a headless EGL display (the device
//! platform, or the default display), a GL buffer written by a CUDA kernel through the mapping
//! and read back with `glGetBufferSubData`, GL textures read and written by CUDA through their
//! mapped arrays and checked with `glGetTexImage`, an EGL image of a GL texture read as an EGL
//! frame, mappings held by graphs (their unmap parked by the release thread for the GL thread,
//! and their registration handed back to it when the resource went first), maps and unmaps
//! without a current GL context (errors, retried), and `cuda.core`'s errors.
//! Each test skips (`cuda_tests::skip`, with the reason) when no EGL display or GL context can be
//! made (no libEGL.so.1, no NVIDIA EGL driver); it fails on anything else. The tests run one at a
//! time (a lock), so that the errors recorded in `Drop` are each test's own.

use cuda_core::graph::CaptureMode;
use cuda_core::graphics::{EglFrameType, GraphicsRegisterFlags, GraphicsResource, GraphicsResourceKind};
use cuda_core::texture::{ArrayFormat, ResourceDescriptor, SurfaceObject, TextureDescriptor, TextureObject};
use cuda_core::{
    launch, CodeType, Device, Kernel, LaunchConfig, ObjectCode, Program, ProgramOptions, SourceType, Stream,
};
use cuda_sys::driver;
use cuda_tests::skip;
use gl_context::{c_text, egl, gl, Gl};
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod gl_context;

/// One test at a time: `take_drop_errors` is process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

/// The errors recorded in `Drop` since the last call, as text.
fn drop_errors() -> Vec<String> {
    cuda_core::take_drop_errors().iter().map(|e| e.to_string()).collect()
}

/// The device and stream, and a GL context current on this thread; `None` (the test's skip
/// recorded) where no EGL display or GL context can be made. Holds the lock of [`SERIAL`].
fn setup() -> Option<(MutexGuard<'static, ()>, Device, Stream, Gl)> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let _ = drop_errors();
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    match Gl::new(0) {
        Ok(gl) => {
            println!("{}", gl.description);
            Some((serial, d, s, gl))
        }
        Err(why) => {
            skip(format!("no OpenGL context: {why}"));
            None
        }
    }
}

const CODE: &str = r#"
extern "C" __global__ void fill_u32(unsigned* out, unsigned n, unsigned mul, unsigned add) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * mul + add;
}
"#;

/// `source` compiled to a cubin for `d`.
fn compiled(d: &Device, source: &str) -> ObjectCode {
    let options = ProgramOptions {
        arch: Some(format!("sm_{}", d.arch().unwrap())),
        ..Default::default()
    };
    Program::new(source, SourceType::Cxx, options)
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
}

fn kernel(d: &Device) -> Kernel {
    compiled(d, CODE).get_kernel("fill_u32").unwrap()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn wait_unmapped(resource: &GraphicsResource) {
    let start = Instant::now();
    while resource.is_mapped() {
        assert!(start.elapsed() < Duration::from_secs(10), "the unmap never came");
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_gl_buffer_written_by_a_kernel_reads_back_in_gl() {
    let Some((_serial, d, s, gl)) = setup() else { return };
    let k = kernel(&d);
    const N: u32 = 1 << 16;
    let name = gl.buffer(&vec![0xAB; N as usize * 4]);
    // SAFETY: the GL context is current, `name` is one of its buffers with a store, deleted
    // only after the resource is closed, and GL leaves it alone while mapped.
    let mut resource = unsafe { GraphicsResource::from_gl_buffer(name, GraphicsRegisterFlags::empty()) }.unwrap();
    assert_eq!(resource.kind(), GraphicsResourceKind::GlBuffer);
    assert!(!resource.is_mapped() && !resource.is_closed());
    println!("{resource:?}");
    // The kernel runs on another stream than the mapping's: the unmap must wait for it.
    let other = d.create_stream(Default::default()).unwrap();
    {
        let mapped = resource.map(&s).unwrap();
        assert_eq!(mapped.size(), N as usize * 4);
        assert_eq!(mapped.device_id(), Some(0));
        assert!(mapped.is_device_accessible() && !mapped.is_host_accessible());
        // What GL wrote is what CUDA reads after the map.
        assert!(mapped.to_vec::<u8>(&s).unwrap().iter().all(|&b| b == 0xAB));
        // SAFETY: the kernel writes n u32 of the mapped buffer, which holds n.
        unsafe { launch(&other, &LaunchConfig::new(N / 256, 256), &k, (&*mapped, N, 3u32, 7u32)) }.unwrap();
        // (The resource cannot be closed nor mapped again here: the guard borrows it.)
    } // unmapped on `s`, after `other`'s kernel
    assert!(!resource.is_mapped());
    let got = words(&gl.read_buffer(name, N as usize * 4));
    assert!(
        got.iter().enumerate().all(|(i, &v)| v == i as u32 * 3 + 7),
        "GL reads {:?}...",
        &got[..8]
    );

    // Map again, write with a fill and unmap explicitly on another stream.
    let mapped = resource.map(&s).unwrap();
    mapped.fill_u32(0x0102_0304, &s).unwrap();
    mapped.unmap(&other).unwrap();
    assert!(!resource.is_mapped());
    assert!(words(&gl.read_buffer(name, 64)).iter().all(|&v| v == 0x0102_0304));

    // cuda.core's errors: a closed resource.
    resource.close().unwrap();
    assert!(resource.is_closed() && resource.handle().is_null());
    let err = resource.map(&s).unwrap_err();
    assert_eq!(err.to_string(), "GraphicsResource has been closed");
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    resource.close().unwrap();
    gl.delete_buffer(name);
    assert_eq!(drop_errors(), Vec::<String>::new());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_graph_that_used_the_mapping_keeps_it_mapped_until_it_goes() {
    let Some((_serial, d, s, gl)) = setup() else { return };
    let k = kernel(&d);
    const N: u32 = 4096;
    let name = gl.buffer(&vec![0; N as usize * 4]);
    // SAFETY: as in the first test.
    let mut resource = unsafe { GraphicsResource::from_gl_buffer(name, GraphicsRegisterFlags::WRITE_DISCARD) }.unwrap();
    let graph = {
        let mapped = resource.map(&s).unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            // SAFETY: the kernel writes n u32 of the mapped buffer.
            unsafe { launch(c, &LaunchConfig::new(N / 256, 256), &k, (&*mapped, N, 5u32, 1u32)) }
        })
        .unwrap()
        // The guard goes here: the graph holds the mapping.
    };
    assert!(resource.is_mapped(), "the graph holds the mapping");
    let err = resource.map(&s).unwrap_err();
    assert_eq!(err.kind(), cuda_core::ErrorKind::Runtime);
    let e = err.to_string();
    assert!(e.starts_with("GraphicsResource is already mapped"), "{e}");
    // Closing is refused while the graph holds the mapping: the resource stays open and mapped.
    let e = resource.close().unwrap_err().to_string();
    assert!(e.contains("still mapped"), "{e}");
    assert!(!resource.is_closed() && resource.is_mapped());
    graph.launch(&s).unwrap();
    graph.launch(&s).unwrap();
    drop(graph);
    // The unmap follows the graph's launches (on the release thread, where no GL context is).
    wait_unmapped(&resource);
    let got = words(&gl.read_buffer(name, N as usize * 4));
    assert!(got.iter().enumerate().all(|(i, &v)| v == i as u32 * 5 + 1));
    drop(resource);
    gl.delete_buffer(name);
    assert_eq!(drop_errors(), Vec::<String>::new());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn maps_and_unmaps_need_the_gl_context_current() {
    let Some((_serial, _d, s, gl)) = setup() else { return };
    const N: usize = 1024;
    let name = gl.buffer(&vec![0; N * 4]);
    // SAFETY: as in the first test; the only GL context this thread makes current is `gl`'s.
    let mut resource = unsafe { GraphicsResource::from_gl_buffer(name, GraphicsRegisterFlags::empty()) }.unwrap();
    // No GL context current: the driver refuses the map.
    gl.release_current();
    let e = resource.map(&s).unwrap_err();
    println!("map without a GL context: {e}");
    assert_eq!(
        e.driver_status(),
        Some(driver::CUresult::CUDA_ERROR_INVALID_GRAPHICS_CONTEXT),
        "{e}"
    );
    assert!(!resource.is_mapped());
    // Mapped with the context current, unmapped without it: the driver refuses, and the unmap
    // stays parked until a call on the resource with the context current retries it (on driver
    // 580 the refused unmap has already ended CUDA's side of the mapping: the retry hears that
    // it is not mapped, and the resource reads as unmapped).
    gl.make_current_again();
    let mapped = resource.map(&s).unwrap();
    mapped.fill_u32(0xCAFE_F00D, &s).unwrap();
    gl.release_current();
    let e = mapped.unmap(&s).unwrap_err();
    println!("unmap without a GL context: {e}");
    assert_eq!(
        e.driver_status(),
        Some(driver::CUresult::CUDA_ERROR_INVALID_GRAPHICS_CONTEXT)
    );
    gl.make_current_again();
    if resource.is_mapped() {
        // (`map` queues the parked unmap too, and says why it cannot.)
        panic!(
            "the parked unmap is not queued with the GL context current: {:?}",
            resource.map(&s).err()
        );
    }
    s.sync().unwrap();
    assert!(words(&gl.read_buffer(name, N * 4)).iter().all(|&v| v == 0xCAFE_F00D));
    // Driver 580 refuses to map again a resource whose unmap it refused (seen on the H100 with
    // driver 580.159.04: CUDA_ERROR_ALREADY_MAPPED): an error, nothing mapped.
    match resource.map(&s) {
        Err(e) => {
            println!("map after a refused unmap: {e}");
            assert_eq!(
                e.driver_status(),
                Some(driver::CUresult::CUDA_ERROR_ALREADY_MAPPED),
                "{e}"
            );
            assert!(!resource.is_mapped());
        }
        Ok(mapped) => println!("this driver maps again after a refused unmap ({mapped:?})"),
    }
    // A guard dropped without the context: the refused unmap is an error recorded in `Drop`.
    let other = gl.buffer(&vec![0; N * 4]);
    // SAFETY: as above.
    let mut second = unsafe { GraphicsResource::from_gl_buffer(other, GraphicsRegisterFlags::empty()) }.unwrap();
    let mapped = second.map(&s).unwrap();
    mapped.fill_u32(7, &s).unwrap();
    gl.release_current();
    drop(mapped);
    let errors = drop_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"), "{errors:?}");
    gl.make_current_again();
    assert!(
        !second.is_mapped(),
        "the parked unmap is resolved with the context current"
    );
    s.sync().unwrap();
    assert!(words(&gl.read_buffer(other, 16)).iter().all(|&v| v == 7));
    // Both are unmapped as far as CUDA's side goes: closing them unregisters them (the sanitizer's
    // leak check would report the registrations otherwise). Where the driver refuses (its own
    // state after the refused unmaps), the registration stays with the driver, and so the GL
    // objects and context with it.
    let mut refused = Vec::new();
    for mut r in [resource, second] {
        if let Err(e) = r.close() {
            refused.push(e.to_string());
        }
    }
    println!("closing after refused unmaps: {refused:?}");
    if refused.is_empty() {
        gl.delete_buffer(name);
        gl.delete_buffer(other);
    } else {
        std::mem::forget(gl);
    }
    assert_eq!(drop_errors(), Vec::<String>::new());
}

/// A resource dropped while a graph holds its mapping: the graph is released on the release
/// thread, where the driver can neither unmap (no GL context) nor unregister a mapped resource
/// (`CUDA_ERROR_ALREADY_MAPPED`, seen on driver 580). The registration is handed back to this
/// thread, whose next graphics call queues the unmap (after the graph's launches) and
/// unregisters it: nothing leaks (finding 8 of the third audit: compute-sanitizer's leak check
/// reported the registration), and the GL buffer may be deleted afterwards.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_mapping_held_by_a_graph_past_its_resource_is_released_with_it() {
    let Some((_serial, d, s, gl)) = setup() else { return };
    let k = kernel(&d);
    const N: u32 = 1024;
    let name = gl.buffer(&vec![0; N as usize * 4]);
    // SAFETY: as in the first test.
    let mut resource = unsafe { GraphicsResource::from_gl_buffer(name, GraphicsRegisterFlags::empty()) }.unwrap();
    let graph = {
        let mapped = resource.map(&s).unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            // SAFETY: the kernel writes n u32 of the mapped buffer.
            unsafe { launch(c, &LaunchConfig::new(N / 256, 256), &k, (&*mapped, N, 1u32, 3u32)) }
        })
        .unwrap()
    };
    drop(resource); // the graph holds the mapping, and so the registration
    graph.launch(&s).unwrap();
    drop(graph);
    // The release thread lets the mapping go after the launch: it parks the unmap (not its
    // thread) and, as the last holder, hands the registration to this thread, whose next
    // graphics call unmaps and unregisters it.
    let start = Instant::now();
    let mut released = 0;
    while released == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the registration never came back to its thread: {:?}",
            drop_errors()
        );
        std::thread::sleep(Duration::from_millis(2));
        released = cuda_core::graphics::release_parked();
    }
    assert_eq!(released, 1);
    assert_eq!(cuda_core::graphics::release_parked(), 0, "released once");
    assert_eq!(drop_errors(), Vec::<String>::new());
    // The unmap came after the graph's kernel: GL reads what it wrote.
    s.sync().unwrap();
    let got = words(&gl.read_buffer(name, N as usize * 4));
    assert!(got.iter().enumerate().all(|(i, &v)| v == i as u32 + 3));
    // Unregistered: the buffer and its context may go.
    gl.delete_buffer(name);
    drop(gl);
    assert_eq!(drop_errors(), Vec::<String>::new());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn gl_textures_are_read_and_written_through_mapped_arrays() {
    let Some((_serial, d, s, gl)) = setup() else { return };
    const W: usize = 64;
    const H: usize = 32;
    let rgba: Vec<u8> = (0..W * H)
        .flat_map(|i| {
            let (x, y) = (i % W, i / W);
            [x as u8, y as u8, (x ^ y) as u8, 255]
        })
        .collect();
    let tex = gl.texture(W as i32, H as i32, gl::RGBA8, gl::RGBA, gl::UNSIGNED_BYTE, &rgba);
    // SAFETY: the GL context is current; `tex` is one of its 2D textures with storage, deleted
    // after the resource, and GL leaves it alone while mapped.
    let mut resource =
        unsafe { GraphicsResource::from_gl_image(tex, gl::TEXTURE_2D, GraphicsRegisterFlags::READ_ONLY) }.unwrap();
    assert_eq!(
        resource.kind(),
        GraphicsResourceKind::GlImage { target: gl::TEXTURE_2D }
    );
    let e = resource.map(&s).unwrap_err().to_string();
    assert!(e.contains("maps OpenGL buffers"), "{e}");
    let other = d.create_stream(Default::default()).unwrap();
    let staging = d.allocate(W * H * 4, &s).unwrap();
    {
        let image = resource.map_image(&s).unwrap();
        let array = image.array(0, 0).unwrap();
        println!("{array:?}");
        assert_eq!(array.shape(), &[W, H]);
        assert_eq!((array.format(), array.num_channels()), (ArrayFormat::Uint8, 4));
        assert_eq!(array.size_bytes(), W * H * 4);
        assert_eq!(array.to_vec::<u8>(&s).unwrap(), rgba);
        // A copy on another stream: the unmap waits for it.
        array.copy_to(&staging, &other).unwrap();
        // Registered read-only: no writes.
        let e = array.copy_from(&staging, &s).unwrap_err().to_string();
        assert!(e.contains("read-only"), "{e}");
        assert!(image.array(1, 0).is_err(), "a 2D texture has one face");
    }
    assert!(!resource.is_mapped());
    assert_eq!(staging.to_vec::<u8>(&other).unwrap(), rgba);
    drop(resource);

    // CUDA writes a float texture through its array; GL reads it back.
    let floats: Vec<f32> = (0..W * H).map(|i| i as f32 * 0.5).collect();
    let ftex = gl.texture(W as i32, H as i32, gl::R32F, gl::RED, gl::FLOAT, &vec![0u8; W * H * 4]);
    // SAFETY: as above.
    let mut writable =
        unsafe { GraphicsResource::from_gl_image(ftex, gl::TEXTURE_2D, GraphicsRegisterFlags::WRITE_DISCARD) }.unwrap();
    let src = d.allocate(W * H * 4, &s).unwrap();
    src.copy_from_host(&floats, &s).unwrap();
    {
        let image = writable.map_image(&other).unwrap();
        let array = image.array(0, 0).unwrap();
        assert_eq!((array.format(), array.num_channels()), (ArrayFormat::Float32, 1));
        // From a buffer on `s` into the array mapped on `other`.
        array.copy_from(&src, &s).unwrap();
        image.unmap(&s).unwrap();
    }
    let back = f32s(&gl.read_texture(ftex, W * H * 4, gl::RED, gl::FLOAT));
    assert_eq!(back, floats);
    drop(writable);
    gl.delete_texture(tex);
    gl.delete_texture(ftex);
    assert_eq!(drop_errors(), Vec::<String>::new());
}

const TEXTURE_CODE: &str = r#"
extern "C" __global__ void sample(cudaTextureObject_t tex, float* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}
extern "C" __global__ void surf_double(cudaSurfaceObject_t surf, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float v;
        surf2Dread(&v, surf, x * int(sizeof(float)), y);
        surf2Dwrite(v * 2.0f, surf, x * int(sizeof(float)), y);
    }
}
"#;

/// Reads every texel of `tex` (a `w` x `h` float texture) with `sample`, on `stream`.
fn sample_all(k: &Kernel, d: &Device, stream: &Stream, tex: &TextureObject, w: usize, h: usize) -> Vec<f32> {
    let out = d.allocate(w * h * 4, stream).unwrap();
    let config = LaunchConfig::new((w.div_ceil(64) as u32, h as u32), 64);
    // SAFETY: the kernel reads the texture and writes w*h floats of `out`.
    unsafe { launch(stream, &config, k, (tex, &out, w as i32, h as i32)) }.unwrap();
    out.to_vec::<f32>(stream).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn mapped_gl_textures_back_texture_and_surface_objects() {
    let Some((_serial, d, s, gl)) = setup() else { return };
    let code = compiled(&d, TEXTURE_CODE);
    let (sample, double) = (
        code.get_kernel("sample").unwrap(),
        code.get_kernel("surf_double").unwrap(),
    );
    const W: usize = 48;
    const H: usize = 16;
    let floats: Vec<f32> = (0..W * H).map(|i| i as f32 * 0.25).collect();
    let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_ne_bytes()).collect();
    let other = d.create_stream(Default::default()).unwrap();

    // Read-only: a texture samples the GL image in place; a surface is refused.
    let tex_name = gl.texture(W as i32, H as i32, gl::R32F, gl::RED, gl::FLOAT, &bytes);
    // SAFETY: the GL context is current; `tex_name` is one of its 2D textures with storage,
    // deleted after the resource, and GL leaves it alone while mapped.
    let mut resource =
        unsafe { GraphicsResource::from_gl_image(tex_name, gl::TEXTURE_2D, GraphicsRegisterFlags::READ_ONLY) }.unwrap();
    {
        let image = resource.map_image(&s).unwrap();
        let array = image.array(0, 0).unwrap();
        assert!(!array.is_writable());
        assert_eq!(array.device(), d);
        let res = ResourceDescriptor::from_mapped_array(&array).unwrap();
        assert_eq!(res.kind(), "array");
        let tex = TextureObject::from_descriptor(&res, &TextureDescriptor::default()).unwrap();
        // Sampled on another stream than the one it was mapped on: ordered after the map.
        assert_eq!(sample_all(&sample, &d, &other, &tex, W, H), floats);
        let e = SurfaceObject::from_descriptor(&res).unwrap_err().to_string();
        assert!(e.contains("is_surface_load_store") || e.contains("read-only"), "{e}");
        image.unmap(&s).unwrap();
        // The texture holds the mapping: the resource stays mapped, and cannot be mapped again.
        assert!(resource.is_mapped(), "the texture holds the mapping");
        let e = resource.map_image(&s).unwrap_err().to_string();
        assert!(e.contains("texture or surface"), "{e}");
        // It still samples the image after the guard went.
        assert_eq!(sample_all(&sample, &d, &s, &tex, W, H), floats);
        drop((tex, res));
    }
    // The last holder went after its work: the unmap follows (on the release thread, parked for
    // this thread's next call on the resource).
    wait_unmapped(&resource);
    drop(resource);

    // Writable with surface access: a surface doubles every texel in place, a texture of the
    // same array reads the result, and GL sees it once the holders are gone.
    let surf_name = gl.texture(W as i32, H as i32, gl::R32F, gl::RED, gl::FLOAT, &bytes);
    // SAFETY: as above.
    let mut resource = unsafe {
        GraphicsResource::from_gl_image(surf_name, gl::TEXTURE_2D, GraphicsRegisterFlags::SURFACE_LOAD_STORE)
    }
    .unwrap();
    let (tex, surf) = {
        let image = resource.map_image(&s).unwrap();
        let array = image.array(0, 0).unwrap();
        assert!(array.is_surface_load_store() && array.is_writable());
        let res = ResourceDescriptor::from_mapped_array(&array).unwrap();
        let surf = SurfaceObject::from_descriptor(&res).unwrap();
        let tex = TextureObject::from_descriptor(&res, &TextureDescriptor::default()).unwrap();
        let config = LaunchConfig::new(((W as u32).div_ceil(64), H as u32), 64);
        // SAFETY: the kernel reads and writes w*h floats of the surface's array.
        unsafe { launch(&other, &config, &double, (&surf, W as i32, H as i32)) }.unwrap();
        (tex, surf)
        // The guard goes here, with the surface's work queued: the holders keep the mapping.
    };
    assert!(resource.is_mapped());
    let doubled: Vec<f32> = floats.iter().map(|v| v * 2.0).collect();
    other.sync().unwrap();
    assert_eq!(sample_all(&sample, &d, &s, &tex, W, H), doubled);
    drop((tex, surf));
    wait_unmapped(&resource);
    let back = f32s(&gl.read_texture(surf_name, W * H * 4, gl::RED, gl::FLOAT));
    assert_eq!(back, doubled);
    drop(resource);
    gl.delete_texture(tex_name);
    gl.delete_texture(surf_name);
    assert_eq!(drop_errors(), Vec::<String>::new());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_egl_image_of_a_gl_texture_maps_as_an_egl_frame() {
    let Some((_serial, _d, s, gl)) = setup() else { return };
    // SAFETY: the display is initialised.
    let extensions = c_text(unsafe { (gl.query_string)(gl.display, egl::EXTENSIONS) });
    if !extensions.contains("EGL_KHR_gl_texture_2D_image") {
        return skip(format!("the display lacks EGL_KHR_gl_texture_2D_image ({extensions})"));
    }
    // SAFETY: eglGetProcAddress of EGL 1.5 functions, with their signatures.
    let (create_image, destroy_image) = unsafe {
        let c = (gl.get_proc)(c"eglCreateImageKHR".as_ptr());
        let d = (gl.get_proc)(c"eglDestroyImageKHR".as_ptr());
        assert!(!c.is_null() && !d.is_null(), "EGL_KHR_image_base functions");
        let c: unsafe extern "C" fn(egl::Display, *mut c_void, u32, *mut c_void, *const i32) -> *mut c_void =
            std::mem::transmute(c);
        let d: unsafe extern "C" fn(egl::Display, *mut c_void) -> u32 = std::mem::transmute(d);
        (c, d)
    };
    const W: usize = 16;
    const H: usize = 8;
    let rgba: Vec<u8> = (0..W * H * 4).map(|i| (i * 7) as u8).collect();
    let tex = gl.texture(
        W as i32,
        H as i32,
        gl::RGBA8,
        gl::RGBA,
        gl::UNSIGNED_BYTE,
        &vec![0; W * H * 4],
    );
    let attribs = [
        egl::GL_TEXTURE_LEVEL_KHR,
        0,
        egl::IMAGE_PRESERVED_KHR,
        egl::TRUE,
        egl::NONE,
    ];
    // SAFETY: the texture is a complete 2D texture of the current context.
    let image = unsafe {
        create_image(
            gl.display,
            gl.context,
            egl::GL_TEXTURE_2D_KHR,
            tex as usize as *mut c_void,
            attribs.as_ptr(),
        )
    };
    assert!(!image.is_null(), "eglCreateImageKHR of a GL texture");
    // Texels written through GL after the image exists are the image's (EGL siblings share the
    // storage); glFinish before CUDA reads them, as NVIDIA's documentation asks.
    gl.upload_texture(tex, W as i32, H as i32, gl::RGBA, gl::UNSIGNED_BYTE, &rgba);
    // SAFETY: a live EGL image, destroyed after the resource; GL finished with the texture.
    let mut resource = unsafe { GraphicsResource::from_egl_image(image, GraphicsRegisterFlags::READ_ONLY) }.unwrap();
    assert_eq!(resource.kind(), GraphicsResourceKind::EglImage);
    {
        let mapped = resource.map_egl(&s).unwrap();
        let frame = mapped.frame(0, 0).unwrap();
        println!("{frame:?}");
        assert_eq!((frame.width() as usize, frame.height() as usize), (W, H));
        match frame.frame_type() {
            EglFrameType::Array => {
                let array = frame.array(0).unwrap();
                assert_eq!(array.shape(), &[W, H]);
                assert_eq!(array.to_vec::<u8>(&s).unwrap(), rgba);
                assert!(frame.pitch_pointer(0).is_err());
            }
            other => panic!("a GL texture's EGL image maps as arrays, not {other:?}"),
        }
        assert!(frame.array(3).is_err());
    }
    assert!(!resource.is_mapped());
    resource.close().unwrap();
    // SAFETY: made above; the resource is unregistered.
    unsafe { destroy_image(gl.display, image) };
    gl.delete_texture(tex);
    assert_eq!(drop_errors(), Vec::<String>::new());
}
