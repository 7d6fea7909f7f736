//! CUDA graphs (cuda.core's `cuda_graphs.py`): record a few kernels once by stream capture, then
//! replay them for the host cost of one launch. The graph holds the buffers its kernels take.
mod common;
use common::main_with;
use cuda_core::graph::CaptureMode;
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"
            extern "C" __global__ void add(const float* a, const float* b, float* c, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) c[i] = a[i] + b[i];
            }
            extern "C" __global__ void mul(const float* a, const float* b, float* c, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) c[i] = a[i] * b[i];
            }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let add = code.get_kernel("add")?.typed::<(*mut f32, *mut f32, *mut f32, u32)>()?;
        let mul = code.get_kernel("mul")?.typed::<(*mut f32, *mut f32, *mut f32, u32)>()?;
        let stream = device.create_stream(Default::default())?;
        let n = 1u32 << 20;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let a = device.allocate_from_slice(&vec![2.0f32; n as usize], &stream)?;
        let b = device.allocate_from_slice(&vec![3.0f32; n as usize], &stream)?;
        let out = device.allocate_from_slice(&vec![0.0f32; n as usize], &stream)?;
        let graph = {
            // A temporary the graph keeps: it is dropped here, used at every replay.
            let tmp = device.allocate_from_slice(&vec![0.0f32; n as usize], &stream)?;
            let (va, vb, vt, vo) = (
                a.view_as::<f32>()?,
                b.view_as::<f32>()?,
                tmp.view_as::<f32>()?,
                out.view_as::<f32>()?,
            );
            stream.capture_graph(CaptureMode::ThreadLocal, |s| {
                // SAFETY: every view holds n floats.
                unsafe {
                    add.launch(s, &config, (va, vb, vt, n))?; // tmp = a + b
                    mul.launch(s, &config, (vt, vb, vo, n))?; // out = tmp * b
                }
                Ok(())
            })?
        };
        let started = std::time::Instant::now();
        for _ in 0..10 {
            graph.launch(&stream)?;
        }
        stream.sync()?;
        println!(
            "10 replays of a 2-kernel graph in {:.3} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        assert!(out.to_vec::<f32>(&stream)?.iter().all(|v| *v == 15.0), "wrong results");
        println!("(2 + 3) * 3 = 15 everywhere: verified");
        Ok(())
    })
}
