//! Textures and surfaces on the GPU: linear filtering under each address mode checked against
//! a host model, linear and pitched buffer textures, surface writes read back, mipmap levels,
//! copies between arrays, buffers and host memory, graphs holding textures, and the checks made
//! before the driver.

use cuda_core::graph::CaptureMode;
use cuda_core::texture::{
    AddressMode, ArrayFormat, FilterMode, MipmappedArrayOptions, OpaqueArray, OpaqueArrayOptions, ReadMode,
    ResourceDescriptor, SurfaceObject, TextureDescriptor, TextureObject,
};
use cuda_core::{
    launch, Buffer, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream,
    VirtualMemoryResource,
};
use cuda_sys::driver;
use std::sync::Arc;

const CODE: &str = r#"
extern "C" __global__ void sample2d(cudaTextureObject_t tex, const float* coords, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float>(tex, coords[2 * i], coords[2 * i + 1]);
}
extern "C" __global__ void fetch1d(cudaTextureObject_t tex, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(tex, i);
}
extern "C" __global__ void sample_lod(cudaTextureObject_t tex, float* out, int levels) {
    int i = threadIdx.x;
    if (i < levels) out[i] = tex2DLod<float>(tex, 0.5f, 0.5f, float(i));
}
extern "C" __global__ void surf_write(cudaSurfaceObject_t surf, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) surf2Dwrite(float(y * 100 + x), surf, x * int(sizeof(float)), y);
}
extern "C" __global__ void surf_double(cudaSurfaceObject_t surf, float* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float v;
        surf2Dread(&v, surf, x * int(sizeof(float)), y);
        surf2Dwrite(v * 2.0f, surf, x * int(sizeof(float)), y);
        out[y * w + x] = v;
    }
}
"#;

struct Kernels {
    sample2d: Kernel,
    fetch1d: Kernel,
    sample_lod: Kernel,
    surf_write: Kernel,
    surf_double: Kernel,
}

fn setup() -> (Device, Stream, Kernels) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    let options = ProgramOptions {
        arch: Some(format!("sm_{}", d.arch().unwrap())),
        std: Some("c++17".into()),
        ..Default::default()
    };
    let code = Program::new(CODE, SourceType::Cxx, options)
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap();
    let k = |name| code.get_kernel(name).unwrap();
    let kernels = Kernels {
        sample2d: k("sample2d"),
        fetch1d: k("fetch1d"),
        sample_lod: k("sample_lod"),
        surf_write: k("surf_write"),
        surf_double: k("surf_double"),
    };
    (d, s, kernels)
}

const W: usize = 8;
const H: usize = 4;
const BORDER: f32 = 5.0;

fn texel(x: usize, y: usize) -> f32 {
    (x + 10 * y) as f32
}

/// What `tex2D` returns with linear filtering and normalized coordinates, as the CUDA
/// programming guide defines it (wrap and mirror transform the coordinate, then the two
/// neighbours on each axis are blended; indices outside the texture clamp, wrap or read the
/// border color).
fn model(u: f32, v: f32, mode: AddressMode) -> f32 {
    let axis = |c: f32, n: usize| {
        let c = match mode {
            AddressMode::Wrap => c - c.floor(),
            AddressMode::Mirror => {
                let f = c.floor();
                if (f as i64).rem_euclid(2) == 0 {
                    c - f
                } else {
                    1.0 - (c - f)
                }
            }
            _ => c,
        };
        let x = c * n as f32 - 0.5;
        (x.floor() as i64, x - x.floor())
    };
    let index = |k: i64, n: usize| -> Option<usize> {
        let n = n as i64;
        match mode {
            AddressMode::Clamp | AddressMode::Mirror => Some(k.clamp(0, n - 1) as usize),
            AddressMode::Wrap => Some(k.rem_euclid(n) as usize),
            AddressMode::Border => (0..n).contains(&k).then_some(k as usize),
        }
    };
    let t = |i: i64, j: i64| match (index(i, W), index(j, H)) {
        (Some(x), Some(y)) => texel(x, y),
        _ => BORDER,
    };
    let ((i, a), (j, b)) = (axis(u, W), axis(v, H));
    (1.0 - a) * (1.0 - b) * t(i, j)
        + a * (1.0 - b) * t(i + 1, j)
        + (1.0 - a) * b * t(i, j + 1)
        + a * b * t(i + 1, j + 1)
}

/// Sample points whose expected value does not depend on the hardware's 8-bit blend weights or
/// on how an edge neighbour is mirrored: texel centres in and out of range, midpoints between
/// texels, and (but for mirror) midpoints across the texture's edges.
fn points(mode: AddressMode) -> Vec<(f32, f32)> {
    let cu = |x: usize| (x as f32 + 0.5) / W as f32;
    let cv = |y: usize| (y as f32 + 0.5) / H as f32;
    let mut p = Vec::new();
    for (x, y) in [(0, 0), (3, 1), (7, 3), (5, 2)] {
        p.push((cu(x), cv(y)));
        for k in [-2.0, -1.0, 1.0, 2.0] {
            p.push((cu(x) + k, cv(y)));
            p.push((cu(x), cv(y) + k));
        }
    }
    for x in 0..W - 1 {
        p.push(((x + 1) as f32 / W as f32, cv(1)));
    }
    for y in 0..H - 1 {
        p.push((cu(2), (y + 1) as f32 / H as f32));
    }
    p.push(((3.0 + 1.0) / W as f32, (1.0 + 1.0) / H as f32));
    if mode != AddressMode::Mirror {
        p.extend([(0.0, cv(1)), (1.0, cv(2)), (cu(4), 0.0), (cu(4), 1.0), (0.0, 0.0)]);
    }
    p
}

fn floats(d: &Device, s: &Stream, data: &[f32]) -> Buffer {
    d.allocate_from_slice(data, s).unwrap()
}

/// Samples `tex` at `points` on the GPU.
fn sample(k: &Kernels, d: &Device, s: &Stream, tex: &TextureObject, points: &[(f32, f32)]) -> Vec<f32> {
    let coords: Vec<f32> = points.iter().flat_map(|&(u, v)| [u, v]).collect();
    let coords = floats(d, s, &coords);
    let out = d.allocate(points.len() * 4, s).unwrap();
    let n = points.len() as i32;
    let config = LaunchConfig::new((points.len() as u32).div_ceil(128), 128);
    // SAFETY: the kernel reads 2n floats of `coords` and writes n floats of `out`.
    unsafe { launch(s, &config, &k.sample2d, (tex, &coords, &out, n)) }.unwrap();
    out.to_vec::<f32>(s).unwrap()
}

fn image(d: &Device, s: &Stream) -> OpaqueArray {
    let array = d
        .create_opaque_array(&OpaqueArrayOptions::new([W, H], ArrayFormat::Float32, 1))
        .unwrap();
    let data: Vec<f32> = (0..W * H).map(|i| texel(i % W, i / W)).collect();
    array.copy_from_host(&data, s).unwrap();
    array
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn linear_filtering_under_each_address_mode_matches_the_host_model() {
    let (d, s, k) = setup();
    let array = image(&d, &s);
    assert_eq!(
        format!("{array:?}"),
        "OpaqueArray(shape=(8, 4), format=FLOAT32, num_channels=1)"
    );
    let resource = ResourceDescriptor::from_opaque_array(&array);
    for mode in [
        AddressMode::Wrap,
        AddressMode::Clamp,
        AddressMode::Mirror,
        AddressMode::Border,
    ] {
        let desc = TextureDescriptor {
            filter_mode: FilterMode::Linear,
            normalized_coords: true,
            border_color: [BORDER, 0.0, 0.0, 0.0],
            ..TextureDescriptor::default().with_address_mode(mode)
        };
        let tex = TextureObject::from_descriptor(&resource, &desc).unwrap();
        assert_eq!(tex.texture_descriptor(), &desc);
        let pts = points(mode);
        let got = sample(&k, &d, &s, &tex, &pts);
        for (&(u, v), g) in pts.iter().zip(&got) {
            let want = model(u, v, mode);
            assert!((g - want).abs() <= 1e-3, "{mode:?} at ({u}, {v}): got {g}, want {want}");
        }
    }
    // Integer formats read as normalized floats when asked to.
    let bytes = d
        .create_opaque_array(&OpaqueArrayOptions::new([4, 1], ArrayFormat::Uint8, 1))
        .unwrap();
    bytes.copy_from_host(&[0u8, 51, 102, 255], &s).unwrap();
    let desc = TextureDescriptor {
        read_mode: ReadMode::NormalizedFloat,
        ..Default::default()
    };
    let tex = TextureObject::from_descriptor(&ResourceDescriptor::from_opaque_array(&bytes), &desc).unwrap();
    let got = sample(&k, &d, &s, &tex, &[(0.5, 0.5), (1.5, 0.5), (2.5, 0.5), (3.5, 0.5)]);
    for (g, want) in got.iter().zip([0.0, 0.2, 0.4, 1.0]) {
        assert!((g - want).abs() <= 1e-6, "got {g}, want {want}");
    }
    // Wrap and mirror on unnormalized coordinates: created, as cuda.core creates them, and the
    // driver clamps (reads the edge texel) out of range.
    for mode in [AddressMode::Wrap, AddressMode::Mirror] {
        let tex =
            TextureObject::from_descriptor(&resource, &TextureDescriptor::default().with_address_mode(mode)).unwrap();
        let got = sample(&k, &d, &s, &tex, &[(W as f32 + 2.5, 0.5), (-1.5, 1.5), (2.5, 1.5)]);
        assert_eq!(got, vec![texel(W - 1, 0), texel(0, 1), texel(2, 1)], "{mode:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn linear_and_pitched_buffers_back_textures_they_keep_alive() {
    let (d, s, k) = setup();
    // Virtual memory: its buffers start on granularity boundaries, which meet any texture
    // alignment (a pool's need not).
    let vmm = VirtualMemoryResource::new(&d, Default::default()).unwrap();
    let aligned = |data: &[f32]| Buffer::from_slice(vmm.clone(), data, &s).unwrap();
    // Linear: the texture holds the buffer after the caller let go of it.
    let n = 1000;
    let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let linear = ResourceDescriptor::from_linear(aligned(&data), ArrayFormat::Float32, 1, None).unwrap();
    assert_eq!(
        format!("{linear:?}"),
        "ResourceDescriptor(kind='linear', format=FLOAT32, num_channels=1, size_bytes=4000)"
    );
    let tex = TextureObject::from_descriptor(&linear, &TextureDescriptor::default()).unwrap();
    drop(linear);
    let out = d.allocate(n * 4, &s).unwrap();
    // SAFETY: the kernel fetches and writes n floats.
    unsafe { launch(&s, &LaunchConfig::new(8, 128), &k.fetch1d, (&tex, &out, n as i32)) }.unwrap();
    drop(tex); // destroyed once the fetch is done
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), data);

    // Pitched: rows 64 bytes apart (a multiple of the pitch alignment), 10 floats wide.
    let align = d
        .attribute(driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT)
        .unwrap() as usize;
    let (w, h) = (10usize, 6usize);
    let pitch = (w * 4).next_multiple_of(align);
    let rows: Vec<f32> = (0..pitch / 4 * h)
        .map(|i| texel(i % (pitch / 4), i / (pitch / 4)))
        .collect();
    let buffer = Arc::new(aligned(&rows));
    let pitched = ResourceDescriptor::from_pitch2d(buffer.clone(), ArrayFormat::Float32, 1, w, h, pitch).unwrap();
    assert_eq!(
        (pitched.kind(), pitched.width(), pitched.pitch_bytes()),
        ("pitch2d", Some(w), Some(pitch))
    );
    let tex = TextureObject::from_descriptor(&pitched, &TextureDescriptor::default()).unwrap();
    let pts: Vec<(f32, f32)> = (0..w * h)
        .map(|i| ((i % w) as f32 + 0.5, (i / w) as f32 + 0.5))
        .collect();
    let want: Vec<f32> = (0..w * h).map(|i| texel(i % w, i / w)).collect();
    assert_eq!(sample(&k, &d, &s, &tex, &pts), want);
    // On the default stream too (legacy or per-thread, as the environment says).
    assert_eq!(sample(&k, &d, &d.default_stream(), &tex, &pts), want);
    // A pitch off the alignment, a pitch shorter than a row, rows past the buffer.
    if align > 4 {
        let bad =
            ResourceDescriptor::from_pitch2d(buffer.clone(), ArrayFormat::Float32, 1, w, h - 1, pitch + 4).unwrap();
        let e = TextureObject::from_descriptor(&bad, &TextureDescriptor::default()).unwrap_err();
        assert!(e.to_string().contains("texture pitch alignment"), "{e}");
    }
    let e = ResourceDescriptor::from_pitch2d(buffer.clone(), ArrayFormat::Float32, 1, w, h, 16).unwrap_err();
    assert_eq!(e.to_string(), "pitch_bytes (16) must be >= width * element_size (40)");
    assert!(ResourceDescriptor::from_pitch2d(buffer.clone(), ArrayFormat::Float32, 1, w, h + 1, pitch).is_err());
    // Linear sizes: whole elements, within the buffer.
    let e = ResourceDescriptor::from_linear(buffer.clone(), ArrayFormat::Float32, 4, Some(20)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "size_bytes (20) must be a multiple of element size (16 bytes for FLOAT32 x 4)"
    );
    assert!(ResourceDescriptor::from_linear(buffer.clone(), ArrayFormat::Uint8, 1, Some(1 << 30)).is_err());
    assert!(ResourceDescriptor::from_linear(buffer.clone(), ArrayFormat::Uint8, 3, None).is_err());
    // Memory off the texture alignment is refused before the driver.
    // SAFETY: 64 bytes inside `buffer`, which outlives this buffer and the (never made) texture.
    let offset = unsafe { Buffer::from_handle(buffer.handle() + 4, 64, &s) }.unwrap();
    let resource = ResourceDescriptor::from_linear(offset, ArrayFormat::Float32, 1, None).unwrap();
    let e = TextureObject::from_descriptor(&resource, &TextureDescriptor::default()).unwrap_err();
    assert!(e.to_string().contains("texture alignment"), "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn surfaces_write_what_textures_and_copies_read_back() {
    let (d, s, k) = setup();
    let (w, h) = (40usize, 8usize);
    let mut options = OpaqueArrayOptions::new([w, h], ArrayFormat::Float32, 1);
    options.is_surface_load_store = true;
    let array = OpaqueArray::from_descriptor(&options).unwrap();
    assert!(array.is_surface_load_store());
    let surf = SurfaceObject::from_array(&array).unwrap();
    let config = LaunchConfig::new((1, h as u32), 64);
    // SAFETY: the kernels stay inside the w x h surface (and `out`, w x h floats).
    unsafe { launch(&s, &config, &k.surf_write, (&surf, w as i32, h as i32)) }.unwrap();
    let written: Vec<f32> = (0..w * h).map(|i| ((i / w) * 100 + i % w) as f32).collect();
    assert_eq!(array.to_vec::<f32>(&s).unwrap(), written);
    // Read and write again through the surface; a texture of the same array sees the result.
    let out = d.allocate(w * h * 4, &s).unwrap();
    // SAFETY: as above.
    unsafe { launch(&s, &config, &k.surf_double, (&surf, &out, w as i32, h as i32)) }.unwrap();
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), written);
    let tex = TextureObject::from_descriptor(
        &ResourceDescriptor::from_opaque_array(&array),
        &TextureDescriptor::default(),
    )
    .unwrap();
    let pts: Vec<(f32, f32)> = (0..w * h)
        .map(|i| ((i % w) as f32 + 0.5, (i / w) as f32 + 0.5))
        .collect();
    let doubled: Vec<f32> = written.iter().map(|v| v * 2.0).collect();
    assert_eq!(sample(&k, &d, &s, &tex, &pts), doubled);
    // Surfaces need arrays made for them.
    let plain = d
        .create_opaque_array(&OpaqueArrayOptions::new([4, 4], ArrayFormat::Float32, 1))
        .unwrap();
    let e = SurfaceObject::from_array(&plain).unwrap_err();
    assert!(e.to_string().contains("is_surface_load_store"), "{e}");
    let linear = ResourceDescriptor::from_linear(out, ArrayFormat::Float32, 1, None).unwrap();
    let e = d.create_surface_object(&linear).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("SurfaceObject requires an array-backed ResourceDescriptor, got kind='linear'"),
        "{e}"
    );
    assert!(format!("{surf:?}").starts_with("SurfaceObject(handle=0x"));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn mipmap_levels_are_arrays_that_keep_their_parent() {
    let (d, s, k) = setup();
    let levels = 5u32;
    let mip = d
        .create_mipmapped_array(&MipmappedArrayOptions {
            shape: vec![16, 16],
            format: ArrayFormat::Float32,
            num_channels: 1,
            num_levels: levels,
            is_surface_load_store: false,
        })
        .unwrap();
    assert_eq!(
        format!("{mip:?}"),
        "MipmappedArray(shape=(16, 16), format=FLOAT32, num_channels=1, num_levels=5)"
    );
    for level in 0..levels {
        let a = mip.get_level(level).unwrap();
        let side = 16usize >> level;
        assert_eq!(a.shape(), &[side, side][..]);
        assert_eq!((a.format(), a.size_bytes()), (ArrayFormat::Float32, side * side * 4));
        a.copy_from_host(&vec![(level + 1) as f32 * 10.0; side * side], &s)
            .unwrap();
    }
    let e = mip.get_level(levels).unwrap_err();
    assert_eq!(e.to_string(), "level (5) must be < num_levels (5)");
    let desc = TextureDescriptor {
        normalized_coords: true,
        max_mipmap_level_clamp: (levels - 1) as f32,
        ..Default::default()
    };
    let tex = d
        .create_texture_object(&ResourceDescriptor::from_mipmapped_array(&mip), &desc)
        .unwrap();
    let out = d.allocate(levels as usize * 4, &s).unwrap();
    // SAFETY: one float per level.
    unsafe {
        launch(
            &s,
            &LaunchConfig::new(1, 32),
            &k.sample_lod,
            (&tex, &out, levels as i32),
        )
    }
    .unwrap();
    let want: Vec<f32> = (0..levels).map(|l| (l + 1) as f32 * 10.0).collect();
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), want);
    // A level outlives the mipmapped array's own handle.
    let level = mip.get_level(2).unwrap();
    drop(mip);
    drop(tex);
    assert_eq!(level.to_vec::<f32>(&s).unwrap(), vec![30.0; 16]);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn arrays_copy_to_and_from_buffers_and_host_memory() {
    let (d, s, _) = setup();
    // 3D, two 16-bit channels: whole-array copies both ways through a buffer.
    let array = d
        .create_opaque_array(&OpaqueArrayOptions::new([5, 3, 2], ArrayFormat::Uint16, 2))
        .unwrap();
    assert_eq!((array.element_bytes(), array.size_bytes()), (4, 5 * 3 * 2 * 4));
    let data: Vec<u16> = (0..5 * 3 * 2 * 2).collect();
    let src = d.allocate_from_slice(&data, &s).unwrap();
    array.copy_from(&src, &s).unwrap();
    let dst = d.allocate(array.size_bytes() + 8, &s).unwrap();
    dst.fill_u8(0, &s).unwrap();
    array.copy_to(&dst, &s).unwrap();
    let back = dst.to_vec::<u16>(&s).unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    assert_eq!(&back[data.len()..], &[0, 0, 0, 0]);
    assert_eq!(array.to_vec::<u16>(&s).unwrap(), data);
    // 1D, host both ways; sizes are checked.
    let line = OpaqueArray::from_descriptor(&OpaqueArrayOptions::new([7], ArrayFormat::Int8, 1)).unwrap();
    line.copy_from_host(&[1i8, -2, 3, -4, 5, -6, 7], &s).unwrap();
    let mut got = [0i8; 7];
    line.copy_to_host(&mut got, &s).unwrap();
    assert_eq!(got, [1, -2, 3, -4, 5, -6, 7]);
    let e = line.copy_from_host(&[0i8; 6], &s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the host slice has 6 bytes, smaller than the array extent (7 bytes)"
    );
    let small = d.allocate(4, &s).unwrap();
    assert!(array.copy_from(&small, &s).is_err());
    assert!(array.copy_to(&small, &s).is_err());
    // Copies with a buffer are recorded into graphs, which hold the array.
    let graph = {
        let scratch = d
            .create_opaque_array(&OpaqueArrayOptions::new([5, 3, 2], ArrayFormat::Uint16, 2))
            .unwrap();
        s.sync().unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            scratch.copy_from(&src, c)?;
            scratch.copy_to(&dst, c)
        })
        .unwrap()
    };
    dst.fill_u8(0, &s).unwrap();
    graph.launch(&s).unwrap();
    assert_eq!(&dst.to_vec::<u16>(&s).unwrap()[..data.len()], &data[..]);
    // Host copies wait for themselves: a capture refuses them.
    let mut builder = s.begin_capture(CaptureMode::ThreadLocal).unwrap();
    let e = line.copy_from_host(&[0i8; 7], builder.stream()).unwrap_err();
    assert!(e.to_string().contains("capture"), "{e}");
    builder.end_building().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn graphs_hold_the_textures_their_kernels_sample() {
    let (d, s, k) = setup();
    let pts: Vec<(f32, f32)> = (0..W * H)
        .map(|i| ((i % W) as f32 + 0.5, (i / W) as f32 + 0.5))
        .collect();
    let coords = floats(&d, &s, &pts.iter().flat_map(|&(u, v)| [u, v]).collect::<Vec<_>>());
    let out = d.allocate(pts.len() * 4, &s).unwrap();
    let graph = {
        let array = image(&d, &s);
        let tex = TextureObject::from_descriptor(
            &ResourceDescriptor::from_opaque_array(&array),
            &TextureDescriptor::default(),
        )
        .unwrap();
        s.sync().unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            // SAFETY: the kernel reads 2n floats of `coords` and writes n floats of `out`.
            unsafe {
                launch(
                    c,
                    &LaunchConfig::new(1, 64),
                    &k.sample2d,
                    (&tex, &coords, &out, pts.len() as i32),
                )
            }
        })
        .unwrap()
        // The texture and its array are dropped here: the graph holds them.
    };
    // Other arrays made and dropped meanwhile must not reuse what the graph samples.
    for i in 0..4 {
        let junk = d
            .create_opaque_array(&OpaqueArrayOptions::new([W, H], ArrayFormat::Float32, 1))
            .unwrap();
        junk.copy_from_host(&[-1.0f32 - i as f32; W * H], &s).unwrap();
    }
    for _ in 0..2 {
        out.fill_u8(0, &s).unwrap();
        graph.launch(&s).unwrap();
        let want: Vec<f32> = (0..W * H).map(|i| texel(i % W, i / W)).collect();
        assert_eq!(out.to_vec::<f32>(&s).unwrap(), want);
    }
}
