//! The safe API's side: every object made through `cuda_core`, with its defaults, in a server
//! process of its own (`serve CUBIN safe`, see `children`).

use crate::measure::{gb_per_s, in_threads, ms, per_call_us, Contender, Op, BURST, PER_THREAD, THREADS};
use crate::{COPY_BYTES, SOURCE};
use cuda_core::graph::{CaptureMode, Graph};
use cuda_core::{
    launch, Buffer, BufferView, CodeType, Context, Device, DeviceMemoryResource, Event, EventOptions,
    FileStreamProgramCache, Kernel, LaunchConfig, ObjectCode, PinnedMemoryResource, Program, ProgramOptions,
    SourceType, Stream, StreamOptions, TypedKernel,
};
use std::cell::Cell;
use std::sync::Arc;

type Args8 = (u64, u32, i32, i32, f32, f32, i64, f64);
const ARGS8: Args8 = (0, 1, 2, 3, 4.0, 5.0, 6, 7.0);

pub struct Safe {
    device: Device,
    /// Its primary context, current on the server's thread.
    _context: Context,
    /// A stream with the default options (non-blocking).
    stream: Stream,
    config: LaunchConfig,
    /// k2 from the benchmark's cubin, as a kernel and typed.
    k2: Kernel,
    t2: TypedKernel<(u64, u32)>,
    t8: TypedKernel<Args8>,
    tb: TypedKernel<(*mut f32, u32)>,
    /// 4 bytes from the device's default pool, k2's pointer in the buffer launch.
    buffer: Buffer,
    /// 10 launches of k2, captured with `Stream::capture_graph`.
    graph: Graph,
    /// An event with the default options (no timing).
    event: Event,
    /// The device's default resource (its default pool, whose release threshold the safe API
    /// raises, as cuda.core does), and a pool made for the owned-pool row.
    pool: Arc<DeviceMemoryResource>,
    owned: Arc<DeviceMemoryResource>,
    /// A stream per thread of the 8-thread rows.
    streams: Vec<Stream>,
    /// 256 MiB of pinned host memory (a pinned memory resource) and two device buffers.
    host: Buffer,
    device_a: Buffer,
    device_b: Buffer,
    /// The program cache on disk of the cache rows, and a counter that makes each cold
    /// compile's source new to NVRTC.
    cache: FileStreamProgramCache,
    cache_dir: std::path::PathBuf,
    variant: Cell<u32>,
}

impl Safe {
    /// The objects, on `device` made current, with k2 and k8 from `cubin`.
    pub fn new(device: Device, cubin: &[u8]) -> Safe {
        let context = device.set_current().unwrap();
        let stream = device.create_stream(StreamOptions::default()).unwrap();
        let config = LaunchConfig::new(1, 32);
        let code = ObjectCode::from_cubin(cubin.to_vec(), "compare").unwrap();
        let k2 = code.get_kernel("k2").unwrap();
        let t2 = k2.typed::<(u64, u32)>().unwrap();
        let graph = stream
            .capture_graph(CaptureMode::ThreadLocal, |s| {
                for _ in 0..10 {
                    // SAFETY: k2(float*, unsigned) with a null pointer: the kernel touches no memory.
                    unsafe { t2.launch(s, &config, (0u64, 1u32))? };
                }
                Ok(())
            })
            .unwrap();
        let pinned = PinnedMemoryResource::new(Default::default()).unwrap();
        let cache_dir = std::env::temp_dir().join(format!("cuda-rs-bench-cache-{}", std::process::id()));
        let safe = Safe {
            device,
            _context: context,
            config,
            t8: code.get_kernel("k8").unwrap().typed().unwrap(),
            tb: k2.typed().unwrap(),
            k2,
            t2,
            buffer: device.allocate(4, &stream).unwrap(),
            graph,
            event: device.create_event(EventOptions::default()).unwrap(),
            pool: device.memory_resource().unwrap(),
            owned: DeviceMemoryResource::new(&device, Default::default()).unwrap(),
            streams: (0..THREADS)
                .map(|_| device.create_stream(StreamOptions::default()).unwrap())
                .collect(),
            host: pinned.allocate(COPY_BYTES, &stream).unwrap(),
            device_a: device.allocate(COPY_BYTES, &stream).unwrap(),
            device_b: device.allocate(COPY_BYTES, &stream).unwrap(),
            cache: FileStreamProgramCache::new(Some(cache_dir.clone()), None).unwrap(),
            cache_dir,
            variant: Cell::new(0),
            stream,
        };
        safe.stream.sync().unwrap();
        safe
    }

    /// A source NVRTC has not seen in this process.
    fn new_source(&self, what: &str) -> String {
        self.variant.set(self.variant.get() + 1);
        format!("{SOURCE}\n// {what} {}", self.variant.get())
    }

    fn compile(&self, source: &str, cached: bool) -> f64 {
        let mut program = Program::new(source, SourceType::Cxx, ProgramOptions::default()).unwrap();
        ms(|| {
            if cached {
                program.compile_cached(CodeType::Cubin, &[], &self.cache).unwrap();
            } else {
                program.compile(CodeType::Cubin, &[]).unwrap();
            }
        })
    }

    /// Microseconds per StridedMemoryView of a DLPack tensor (the tensors made beforehand).
    fn strided_views(&self) -> f64 {
        let tensors: Vec<_> = (0..BURST.count)
            .map(|_| {
                self.device
                    .allocate(256, &self.stream)
                    .unwrap()
                    .to_dlpack_as::<f32>(&[8, 8], None)
                    .unwrap()
            })
            .collect();
        let mut made = Vec::with_capacity(tensors.len());
        let total = ms(|| {
            made.extend(
                tensors
                    .into_iter()
                    .map(|t| cuda_core::StridedMemoryView::from_dlpack(t, None, &self.stream).unwrap()),
            )
        });
        total * 1e3 / made.len() as f64
    }
}

impl Drop for Safe {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cache_dir);
    }
}

/// k2(float*, unsigned) on `s` through the generic `launch`, with a null pointer.
fn launch2(s: &Stream, config: &LaunchConfig, k2: &Kernel) {
    // SAFETY: k2 never dereferences its pointer (no thread 1024): it touches no memory.
    unsafe { launch(s, config, k2, (0u64, 1u32)).unwrap() }
}

impl Safe {
    fn typed2(&self) {
        // SAFETY: as in `launch2`.
        unsafe { self.t2.launch(&self.stream, &self.config, (0u64, 1u32)).unwrap() }
    }

    fn typed8(&self) {
        // SAFETY: k8 never dereferences its pointer (null here) either; the rest are values.
        unsafe { self.t8.launch(&self.stream, &self.config, ARGS8).unwrap() }
    }

    fn buffer_launch(&self, view: BufferView<'_, f32>) {
        // SAFETY: as in `launch2`, with a live 4-byte buffer for the pointer.
        unsafe { self.tb.launch(&self.stream, &self.config, (view, 1u32)).unwrap() }
    }
}

impl Contender for Safe {
    fn measure(&mut self, op: Op) -> Option<f64> {
        let (s, config, k2, pool, streams) = (&self.stream, &self.config, &self.k2, &self.pool, &self.streams);
        let sync = || s.sync().unwrap();
        Some(match op {
            Op::Launch2(l) => per_call_us(l, || launch2(s, config, k2), sync),
            Op::TypedLaunch2(l) => per_call_us(l, || self.typed2(), sync),
            Op::TypedLaunch8(l) => per_call_us(l, || self.typed8(), sync),
            Op::BufferLaunch(l) => {
                let view = self.buffer.view_as::<f32>().unwrap();
                per_call_us(l, || self.buffer_launch(view), sync)
            }
            Op::Graph(l) => per_call_us(l, || self.graph.launch(s).unwrap(), sync),
            Op::Pool(l) => per_call_us(l, || drop(pool.allocate(1 << 20, s).unwrap()), sync),
            Op::OwnedPool(l) => per_call_us(l, || drop(self.owned.allocate(1 << 20, s).unwrap()), sync),
            Op::PoolSync(l) => {
                let pair_and_sync = || {
                    drop(pool.allocate(1 << 20, s).unwrap());
                    sync();
                };
                per_call_us(l, pair_and_sync, || {})
            }
            Op::Event(l) => {
                let record_and_sync = || {
                    s.record(&self.event).unwrap();
                    self.event.sync().unwrap();
                };
                per_call_us(l, record_and_sync, || {})
            }
            Op::StreamSync(l) => per_call_us(l, sync, || {}),
            Op::ThreadLaunches => in_threads(&|_| {}, &|i| {
                (0..PER_THREAD).for_each(|_| launch2(&streams[i], config, k2));
                streams[i].sync().unwrap();
            }),
            Op::ThreadPool => {
                let pair = |i: usize| drop(pool.allocate(1 << 20, &streams[i]).unwrap());
                in_threads(&pair, &|i| {
                    (0..PER_THREAD).for_each(|_| pair(i));
                    streams[i].sync().unwrap();
                })
            }
            Op::HostToDevice => {
                // SAFETY: nothing else touches the pinned buffer meanwhile.
                let host = unsafe { self.host.as_host_slice::<u8>() }.unwrap();
                gb_per_s(COPY_BYTES, || self.device_a.copy_from_host(host, s).unwrap())
            }
            Op::DeviceToHost => {
                // SAFETY: nothing else touches the pinned buffer meanwhile.
                let host = unsafe { self.host.as_host_slice_mut::<u8>() }.unwrap();
                gb_per_s(COPY_BYTES, || self.device_a.copy_to_host(host, s).unwrap())
            }
            // Read and written: twice the bytes, in TB/s.
            Op::DeviceToDevice => {
                let copy = || {
                    self.device_a.copy_to(&self.device_b, s).unwrap();
                    sync();
                };
                gb_per_s(2 * COPY_BYTES, copy) / 1e3
            }
            Op::CompileCold => self.compile(&self.new_source("cold variant"), false),
            Op::CompileStore => self.compile(&self.new_source("cached variant"), true),
            // The first call (the warm-up) stores it.
            Op::CompileHit => self.compile(&format!("{SOURCE}\n// hit"), true),
            Op::StridedView => self.strided_views(),
            // Fresh processes, started by the benchmark's process (see `children`).
            Op::FirstKernel | Op::FirstCompile(_) => return None,
        })
    }
}
