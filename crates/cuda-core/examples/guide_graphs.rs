//! The program of the guide's chapter on graphs (`docs/guide/04-graphs.md`): a capture in one
//! call, an executable graph's kernel arguments updated in place, and a captured while loop.

use cuda_core::graph::{CaptureMode, GraphCondition};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType, TypedBuffer};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    device.set_current()?;
    let source = r#"
        typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
        extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);
        extern "C" __global__ void add(unsigned* x, unsigned v, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] += v;
        }
        extern "C" __global__ void count_down(cudaGraphConditionalHandle h, unsigned* left, unsigned* rounds) {
            *rounds += 1;
            *left -= 1;
            cudaGraphSetConditional(h, *left != 0);
        }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
    let add = code.get_kernel("add")?.typed::<(*mut u32, u32, u32)>()?;
    let count_down = code
        .get_kernel("count_down")?
        .typed::<(GraphCondition, *mut u32, *mut u32)>()?;
    let stream = device.create_stream(Default::default())?;
    let n: u32 = 1 << 16;
    let config = LaunchConfig::new(n.div_ceil(256), 256);
    let x = TypedBuffer::<u32>::allocate(&device, n as usize, &stream)?;
    let y = TypedBuffer::<u32>::allocate(&device, n as usize, &stream)?;
    x.fill(0, &stream)?;
    y.fill(0, &stream)?;

    // Capture: the closure's work on `s` is recorded, not run; the graph holds what it uses.
    let mut graph = stream.capture_graph(CaptureMode::Relaxed, |s| {
        for _ in 0..10 {
            // SAFETY: add touches n words of x, which holds n.
            unsafe { add.launch(s, &config, (&x, 1u32, n))? };
        }
        Ok(())
    })?;
    graph.launch(&stream)?;
    graph.launch(&stream)?;
    assert!(x.to_vec_blocking(&stream)?.iter().all(|v| *v == 20));

    // Update in place: the first kernel node now adds 100 to y.
    let nodes = graph.kernel_nodes()?;
    // SAFETY: the same kernel, over n words of y, which holds n.
    unsafe { graph.set_kernel_args(&nodes[0], (&y, 100u32, n))? };
    graph.launch(&stream)?;
    assert!(x.to_vec_blocking(&stream)?.iter().all(|v| *v == 29));
    assert!(y.to_vec_blocking(&stream)?.iter().all(|v| *v == 100));

    // A conditional: a while loop whose body a kernel ends, recorded by a graph builder.
    let left = TypedBuffer::<u32>::allocate(&device, 1, &stream)?;
    let rounds = TypedBuffer::<u32>::allocate(&device, 1, &stream)?;
    let mut builder = device.create_graph_builder()?;
    builder.begin_building(CaptureMode::ThreadLocal)?;
    left.fill(3, builder.stream())?;
    rounds.fill(0, builder.stream())?;
    let looping = builder.create_condition(Some(1))?;
    let mut body = builder.while_loop(&looping)?;
    body.begin_building(CaptureMode::ThreadLocal)?;
    // SAFETY: count_down touches one word of each buffer.
    unsafe { count_down.launch(body.stream(), &LaunchConfig::new(1, 1), (looping, &left, &rounds))? };
    body.end_building()?;
    builder.end_building()?;
    let looped = builder.complete(&Default::default())?;
    looped.launch(&stream)?;
    assert_eq!(rounds.to_vec_blocking(&stream)?, [3]);
    println!("captured, updated and looped graphs: verified");
    Ok(())
}
