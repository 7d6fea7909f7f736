//! Linking user device code into a library's kernel at run time, with link-time optimization
//! (cuda.core's `jit_lto_fractal.py`).
//!
//! A mock library owns the kernel `main_workflow(float*)`, compiled ahead of time to relocatable
//! PTX; it calls `generate_art(float*)`, which the user provides later, as LTO-IR (or PTX). The
//! library links the two with nvJitLink into a cubin and launches it: one thread per RGBA pixel.
//! Two users' device code are linked into the same library: a Mandelbrot set and a Julia set.
//!
//! Usage: `jit_lto_fractal [--target mandelbrot|julia|all] [--format ltoir|ptx|all] [--output DIR]`
//! (`--output` writes each image as a PPM file). Every pixel is checked against the same
//! arithmetic on the host; the device code is compiled without fused multiply-adds (`fma:
//! false`) so that the two agree to the bit.
mod common;
use common::main_with;
use cuda_core::{
    Buffer, CodeType, Device, Kernel, LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions,
    SourceType, Stream,
};
use std::error::Error;

const WIDTH: u32 = 1024;
const HEIGHT: u32 = 512;
const MAX_ITER: u32 = 1000;

/// The library: it compiles its own part once and links whatever device code a user brings.
struct MockLibrary {
    main_object_code: ObjectCode,
    stream: Stream,
    buffer: Buffer,
    config: LaunchConfig,
}

impl MockLibrary {
    fn new(device: &Device) -> Result<MockLibrary, Box<dyn Error>> {
        let code_main = r#"
            extern __device__ void generate_art(float* Data);

            extern "C" __global__ void main_workflow(float* Data) {
                // Preprocessing steps would go here.
                generate_art(Data);  // the user's device code
                // Postprocessing steps would go here.
            }"#;
        // Compiled now, linked later: relocatable device code keeps `generate_art` unresolved.
        let main_object_code = Program::new(code_main, SourceType::Cxx, MockLibrary::program_options(false))?
            .compile(CodeType::Ptx, &[])?;
        let stream = device.create_stream(Default::default())?;
        // RGBA floats for every pixel.
        let buffer = device.allocate((WIDTH * HEIGHT * 4) as usize * size_of::<f32>(), &stream)?;
        // One thread per pixel, in 16x16 tiles.
        let config = LaunchConfig::new((WIDTH / 16, HEIGHT / 16, 1), (16, 16, 1));
        Ok(MockLibrary {
            main_object_code,
            stream,
            buffer,
            config,
        })
    }

    fn program_options(lto: bool) -> ProgramOptions {
        ProgramOptions {
            relocatable_device_code: Some(true),
            link_time_optimization: lto.then_some(true),
            fma: Some(false),
            ..Default::default()
        }
    }

    /// Compiles the user's code to `target` (LTO-IR or PTX) and links it with the library's.
    fn link(&self, user_code: &str, target: CodeType) -> Result<Kernel, Box<dyn Error>> {
        let lto = target == CodeType::Ltoir;
        let user_object_code =
            Program::new(user_code, SourceType::Cxx, MockLibrary::program_options(lto))?.compile(target, &[])?;
        let options = LinkerOptions {
            link_time_optimization: lto.then_some(true),
            // With LTO, code is generated at link time: no fused multiply-adds there either.
            fma: lto.then_some(false),
            ..Default::default()
        };
        let mut linker = Linker::new(&[&self.main_object_code, &user_object_code], options)?;
        let linked = linker.link(CodeType::Cubin)?;
        Ok(linked.get_kernel("main_workflow")?)
    }

    /// Runs the library's workflow with `kernel` and returns the image (RGBA floats, row-major).
    fn run(&self, kernel: &Kernel) -> Result<Vec<f32>, Box<dyn Error>> {
        let kernel = kernel.typed::<(*mut f32,)>()?;
        // SAFETY: main_workflow writes 4 floats for each of the grid's WIDTH * HEIGHT threads,
        // which is what the view holds.
        unsafe { kernel.launch(&self.stream, &self.config, (self.buffer.view_as::<f32>()?,))? };
        Ok(self.buffer.to_vec::<f32>(&self.stream)?)
    }
}

// The users' device code: straightforward, unoptimized fractals (after Wikipedia's pseudocode).
const CODE_MANDELBROT: &str = r#"
__device__ void generate_art(float* Data) {
    unsigned DataX = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned DataY = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned Width = gridDim.x * blockDim.x;
    unsigned Height = gridDim.y * blockDim.y;

    // Scale coordinates to (-2.5, 1) and (-1, 1).
    float X0 = (float)DataX / (float)Width * 3.5f - 2.5f;
    float Y0 = (float)DataY / (float)Height * 2.0f - 1.0f;
    float X = 0.0f, Y = 0.0f;
    unsigned Iter = 0;
    while (X*X + Y*Y < 4.0f && Iter < 1000) {
        float XTemp = X*X - Y*Y + X0;
        Y = 2.0f*X*Y + Y0;
        X = XTemp;
        Iter++;
    }
    unsigned i = DataY*Width*4 + DataX*4;
    Data[i+0] = 0.0f;
    Data[i+1] = (float)(Iter % 50) / 50.0f;
    Data[i+2] = (float)(Iter % 25) / 25.0f;
    Data[i+3] = 1.0f;
}
"#;

const CODE_JULIA: &str = r#"
__device__ void generate_art(float* Data) {
    unsigned DataX = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned DataY = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned Width = gridDim.x * blockDim.x;
    unsigned Height = gridDim.y * blockDim.y;

    // Scale coordinates to (-2, 2) and (-1, 1); the Julia set's constant is fixed.
    float X = (float)DataX / (float)Width * 4.0f - 2.0f;
    float Y = (float)DataY / (float)Height * 2.0f - 1.0f;
    const float Cx = -0.8f, Cy = 0.156f;
    unsigned Iter = 0;
    while (X*X + Y*Y < 4.0f && Iter < 1000) {
        float XTemp = X*X - Y*Y + Cx;
        Y = 2.0f*X*Y + Cy;
        X = XTemp;
        Iter++;
    }
    unsigned i = DataY*Width*4 + DataX*4;
    Data[i+0] = 0.0f;
    Data[i+1] = (float)(Iter % 50) / 50.0f;
    Data[i+2] = (float)(Iter % 25) / 25.0f;
    Data[i+3] = 1.0f;
}
"#;

/// The same iteration on the host, in the same order of `f32` operations (none fused).
fn iterations(mut x: f32, mut y: f32, cx: f32, cy: f32) -> u32 {
    let mut iter = 0;
    while x * x + y * y < 4.0 && iter < MAX_ITER {
        let t = x * x - y * y + cx;
        y = 2.0 * x * y + cy;
        x = t;
        iter += 1;
    }
    iter
}

/// Checks every pixel of `image` against the host's arithmetic for the `name`d fractal.
fn verify(name: &str, image: &[f32]) -> Result<(), Box<dyn Error>> {
    for py in 0..HEIGHT {
        for px in 0..WIDTH {
            let nx = px as f32 / WIDTH as f32;
            let ny = py as f32 / HEIGHT as f32;
            let iter = match name {
                "mandelbrot" => iterations(0.0, 0.0, nx * 3.5 - 2.5, ny * 2.0 - 1.0),
                _ => iterations(nx * 4.0 - 2.0, ny * 2.0 - 1.0, -0.8, 0.156),
            };
            let want = [0.0, (iter % 50) as f32 / 50.0, (iter % 25) as f32 / 25.0, 1.0];
            let i = ((py * WIDTH + px) * 4) as usize;
            if image[i..i + 4] != want {
                return Err(format!("{name}: pixel ({px}, {py}) is {:?}, want {want:?}", &image[i..i + 4]).into());
            }
        }
    }
    Ok(())
}

/// Writes the image as a binary PPM (RGB, 8 bits per channel).
fn write_ppm(path: &std::path::Path, image: &[f32]) -> std::io::Result<()> {
    let mut bytes = format!("P6\n{WIDTH} {HEIGHT}\n255\n").into_bytes();
    for pixel in image.chunks_exact(4) {
        bytes.extend(pixel[..3].iter().map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8));
    }
    std::fs::write(path, bytes)
}

fn main() {
    main_with(|| {
        let (mut target, mut format, mut output) = ("all".to_string(), "all".to_string(), None);
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--target" | "-t" => target = value()?,
                "--format" | "-f" => format = value()?,
                "--output" | "-o" => output = Some(std::path::PathBuf::from(value()?)),
                _ => return Err(format!("unknown argument {arg:?}; see the example's doc comment").into()),
            }
        }
        let targets: &[(&str, &str)] = match target.as_str() {
            "mandelbrot" => &[("mandelbrot", CODE_MANDELBROT)],
            "julia" => &[("julia", CODE_JULIA)],
            "all" => &[("mandelbrot", CODE_MANDELBROT), ("julia", CODE_JULIA)],
            other => return Err(format!("--target must be mandelbrot, julia or all, not {other:?}").into()),
        };
        let formats: &[CodeType] = match format.as_str() {
            "ltoir" => &[CodeType::Ltoir],
            "ptx" => &[CodeType::Ptx],
            "all" => &[CodeType::Ltoir, CodeType::Ptx],
            other => return Err(format!("--format must be ltoir, ptx or all, not {other:?}").into()),
        };

        let device = Device::new(0)?;
        device.set_current()?;
        let library = MockLibrary::new(&device)?;
        for &(name, code) in targets {
            for &format in formats {
                // The library links the user's code into its workflow, then runs it.
                let kernel = library.link(code, format)?;
                let image = library.run(&kernel)?;
                verify(name, &image)?;
                println!("{name} ({}): {WIDTH}x{HEIGHT} pixels verified", format.as_str());
                if let Some(dir) = &output {
                    let path = dir.join(format!("{name}-{}.ppm", format.as_str()));
                    write_ppm(&path, &image)?;
                    println!("  written to {}", path.display());
                }
            }
        }
        Ok(())
    })
}
