//! Texture sampling (cuda.core's `texture_sample.py`): a 2D `OpaqueArray` filled from the host,
//! bound as a bindless `TextureObject` with linear filtering, and sampled by a kernel at texel
//! centres (exact values) and between texels (blends of the neighbours, checked against the
//! same blend on the host); then the same array with normalized, wrapping coordinates.
//!
//! Coordinates are unnormalized first: texel (i, j) is centred at (i + 0.5, j + 0.5), so
//! `tex2D(tex, 0.5, 0.5)` is texel (0, 0) and `tex2D(tex, 1.0, 0.5)` the mean of texels (0, 0)
//! and (1, 0).
mod common;
use common::main_with;
use cuda_core::texture::{
    AddressMode, ArrayFormat, FilterMode, OpaqueArrayOptions, ReadMode, ResourceDescriptor, TextureDescriptor,
    TextureObject,
};
use cuda_core::{launch, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream};

/// Reads n (x, y) pairs from `coords` and writes `tex2D<float>(tex, x, y)` to `out[i]`.
const CODE: &str = r#"
extern "C" __global__ void sample_texture(cudaTextureObject_t tex, float* out, const float* coords, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = tex2D<float>(tex, coords[2 * i + 0], coords[2 * i + 1]);
}
"#;

const WIDTH: usize = 16;
const HEIGHT: usize = 16;

/// The planted pattern: pattern[y][x] = x + 100 y.
fn pattern(x: usize, y: usize) -> f32 {
    x as f32 + 100.0 * y as f32
}

/// What bilinear filtering with clamped edges gives at (x, y), unnormalized.
fn bilinear(x: f32, y: f32) -> f32 {
    let (xb, yb) = (x - 0.5, y - 0.5);
    let (xi, yi) = (xb.floor() as i64, yb.floor() as i64);
    let (tx, ty) = (xb - xi as f32, yb - yi as f32);
    let at = |dx: i64, dy: i64| {
        let xv = (xi + dx).clamp(0, WIDTH as i64 - 1) as usize;
        let yv = (yi + dy).clamp(0, HEIGHT as i64 - 1) as usize;
        pattern(xv, yv)
    };
    (1.0 - tx) * (1.0 - ty) * at(0, 0) + tx * (1.0 - ty) * at(1, 0) + (1.0 - tx) * ty * at(0, 1) + tx * ty * at(1, 1)
}

fn sample(
    device: &Device,
    stream: &Stream,
    kernel: &Kernel,
    tex: &TextureObject,
    points: &[(f32, f32)],
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let coords: Vec<f32> = points.iter().flat_map(|&(x, y)| [x, y]).collect();
    let coords = device.allocate_from_slice(&coords, stream)?;
    let out = device.allocate(points.len() * 4, stream)?;
    let config = LaunchConfig::new((points.len() as u32).div_ceil(64), 64);
    // SAFETY: the kernel reads 2n floats of `coords` and writes n floats of `out`; the texture
    // is a kernel argument the launch keeps alive.
    unsafe { launch(stream, &config, kernel, (tex, &out, &coords, points.len() as i32))? };
    Ok(out.to_vec::<f32>(stream)?)
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;
        let options = ProgramOptions {
            arch: Some(format!("sm_{}", device.arch()?)),
            std: Some("c++17".into()),
            ..Default::default()
        };
        let kernel = Program::new(CODE, SourceType::Cxx, options)?
            .compile(CodeType::Cubin, &[])?
            .get_kernel("sample_texture")?;

        // A WIDTH x HEIGHT single-channel float array, filled row by row from the host.
        let array = device.create_opaque_array(&OpaqueArrayOptions::new([WIDTH, HEIGHT], ArrayFormat::Float32, 1))?;
        let host: Vec<f32> = (0..WIDTH * HEIGHT).map(|i| pattern(i % WIDTH, i / WIDTH)).collect();
        array.copy_from_host(&host, &stream)?;
        println!("{array:?}");

        // Linear filtering, clamped, unnormalized coordinates.
        let resource = ResourceDescriptor::from_opaque_array(&array);
        let desc = TextureDescriptor {
            address_mode: [AddressMode::Clamp; 3],
            filter_mode: FilterMode::Linear,
            read_mode: ReadMode::ElementType,
            normalized_coords: false,
            ..Default::default()
        };
        let tex = TextureObject::from_descriptor(&resource, &desc)?;
        let centers = [(0.5, 0.5), (3.5, 0.5), (0.5, 4.5), (7.5, 9.5), (15.5, 15.5)];
        let halves = [(1.0, 0.5), (0.5, 1.0), (1.0, 1.0), (4.0, 5.0)];
        let points: Vec<(f32, f32)> = centers.iter().chain(&halves).copied().collect();
        let got = sample(&device, &stream, &kernel, &tex, &points)?;
        for (i, &(x, y)) in centers.iter().enumerate() {
            let want = (x - 0.5) + 100.0 * (y - 0.5);
            assert!(
                (got[i] - want).abs() <= 1e-4,
                "center sample {i} at ({x}, {y}): {} != {want}",
                got[i]
            );
        }
        for (j, &(x, y)) in halves.iter().enumerate() {
            // The hardware blends with 8-bit fixed-point weights: a small tolerance.
            let (g, want) = (got[centers.len() + j], bilinear(x, y));
            assert!((g - want).abs() <= 1e-2, "half sample {j} at ({x}, {y}): {g} != {want}");
        }
        println!("texel-center samples verified: {}", centers.len());
        println!("half-integer samples verified: {}", halves.len());

        // Normalized coordinates wrap: u and u + 1 sample the same texel.
        let wrapping = TextureObject::from_descriptor(
            &resource,
            &TextureDescriptor {
                normalized_coords: true,
                ..TextureDescriptor::default().with_address_mode(AddressMode::Wrap)
            },
        )?;
        let (u, v) = (3.5 / WIDTH as f32, 9.5 / HEIGHT as f32);
        let got = sample(
            &device,
            &stream,
            &kernel,
            &wrapping,
            &[(u, v), (u + 1.0, v), (u - 2.0, v + 3.0)],
        )?;
        assert!(got.iter().all(|g| *g == pattern(3, 9)), "wrapped samples: {got:?}");
        println!("wrapped samples verified: {got:?}");
        Ok(())
    })
}
