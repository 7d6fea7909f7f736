//! cudarc's side (feature `cudarc`): its safe API as a user writes it, in a server process of its
//! own (`serve CUBIN cudarc`, see `children`), on objects it made itself, with its event tracking off (as the reference measurement had it:
//! with it on, every allocation and launch records events).

use crate::measure::{per_call_us, Contender, Loop, Op};
use crate::peer::milestone;
use crate::SOURCE;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::sync::Arc;

pub struct Cudarc {
    /// `CudaContext::new(0)` (the primary context) and `new_stream` (non-blocking).
    stream: Arc<CudaStream>,
    /// k2 and k8 from `load_module` of the benchmark's cubin.
    k2: CudaFunction,
    k8: CudaFunction,
    /// 10 launches of k2, captured with `begin_capture` / `end_capture`.
    graph: CudaGraph,
    /// `new_event(None)`: without timing.
    event: CudaEvent,
}

const CONFIG: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (32, 1, 1),
    shared_mem_bytes: 0,
};

impl Cudarc {
    /// cudarc's objects, or why they could not be made (the column then stays empty).
    pub fn new(cubin: &[u8]) -> Result<Cudarc, DriverError> {
        let ctx = CudaContext::new(0)?;
        // SAFETY: no slice is used on a stream other than its own here.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let module = ctx.load_module(Ptx::from_binary(cubin.to_vec()))?;
        let (k2, k8) = (module.load_function("k2")?, module.load_function("k8")?);
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        for _ in 0..10 {
            launch2(&stream, &k2)?;
        }
        let graph = stream
            .end_capture(CUgraphInstantiate_flags(0))?
            .expect("a capture of 10 launches makes a graph");
        Ok(Cudarc {
            event: ctx.new_event(None)?,
            stream,
            k2,
            k8,
            graph,
        })
    }

    fn loop_of(&self, l: Loop, mut op: impl FnMut() -> Result<(), DriverError>) -> f64 {
        per_call_us(l, || op().unwrap(), || self.stream.synchronize().unwrap())
    }
}

/// k2(float*, unsigned) with a null pointer.
fn launch2(stream: &CudaStream, k2: &CudaFunction) -> Result<(), DriverError> {
    let (x, n) = (0u64, 1u32);
    // SAFETY: k2 never dereferences its pointer (no thread 1024): it touches no memory.
    unsafe { stream.launch_builder(k2).arg(&x).arg(&n).launch(CONFIG) }.map(drop)
}

/// k8(float*, unsigned, int, int, float, float, long long, double) with a null pointer.
fn launch8(stream: &CudaStream, k8: &CudaFunction) -> Result<(), DriverError> {
    let (a, b, c, d, e, f, g, h) = (0u64, 1u32, 2i32, 3i32, 4.0f32, 5.0f32, 6i64, 7.0f64);
    let mut builder = stream.launch_builder(k8);
    builder.arg(&a).arg(&b).arg(&c).arg(&d).arg(&e).arg(&f).arg(&g).arg(&h);
    // SAFETY: as in `launch2`; the rest are values of the parameters' types.
    unsafe { builder.launch(CONFIG) }.map(drop)
}

impl Contender for Cudarc {
    fn measure(&mut self, op: Op) -> Option<f64> {
        let s = &self.stream;
        Some(match op {
            Op::Launch2(l) | Op::TypedLaunch2(l) => self.loop_of(l, || launch2(s, &self.k2)),
            Op::TypedLaunch8(l) => self.loop_of(l, || launch8(s, &self.k8)),
            Op::Graph(l) => self.loop_of(l, || self.graph.launch()),
            Op::Pool(l) => self.loop_of(l, || {
                // SAFETY: the memory is not read; it goes back to the pool, on its stream, at once.
                let slice: CudaSlice<u8> = unsafe { s.alloc(1 << 20) }?;
                drop(slice);
                Ok(())
            }),
            Op::Event(l) => self.loop_of(l, || {
                self.event.record(s)?;
                self.event.synchronize()
            }),
            // The first compile is a fresh process, started by the benchmark's process.
            _ => return None,
        })
    }
}

/// The child mode `cudarc` of the first-compile row: cudarc's NVRTC API compiles for `arch`
/// (`sm_XY`). It hands out PTX only, but for a real architecture NVRTC compiles the cubin as
/// well (the same work as the others' compile to a cubin).
pub fn first_compile(arch: &str) {
    let options = CompileOptions {
        arch: Some(Box::leak(arch.to_string().into_boxed_str())),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(SOURCE, options).unwrap();
    milestone();
    assert!(!ptx.to_src().is_empty());
}
