//! The raw side: `cuda-sys` driver and NVRTC calls on objects it made itself with raw calls,
//! with the flags a C program uses (the C program, `benches/c/compare.c`, makes the same). Nothing
//! of the safe side's is used: not its stream, module, graph, event or pools.
//!
//! It runs in a server process of its own (`serve CUBIN raw`, see `children`), as the C program
//! does. Its objects live until the process ends, as the C program's do.

use crate::children::check;
use crate::measure::{gb_per_s, in_threads, ms, per_call_us, Contender, Loop, Op, PER_THREAD, THREADS};
use crate::{COPY_BYTES, SOURCE};
use cuda_sys::driver;
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

pub struct Raw {
    /// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`, in the device's primary context, retained with
    /// `cuDevicePrimaryCtxRetain` (the context the runtime, and a C program using it, use).
    stream: driver::CUstream,
    /// k2 and k8 from `cuModuleLoadData` of the benchmark's cubin and `cuModuleGetFunction`.
    k2: driver::CUfunction,
    k8: driver::CUfunction,
    /// 10 launches of k2, captured on `stream` (thread-local mode) and instantiated raw.
    graph: driver::CUgraphExec,
    /// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`.
    event: driver::CUevent,
    /// A pool made with `cuMemPoolCreate` and the default properties: configured as the driver
    /// configures a device's default pool (release threshold 0). Not the device's default pool
    /// itself (the C program's): made when the safe side shared this process and had raised that
    /// one's release threshold (as cuda.core does), and kept so that the raw figures compare
    /// with earlier runs' (in a process of its own, the raw side on this pool matched C's default
    /// pool within 1% on the H100). The difference shows only after a synchronisation (threshold 0 gives the pool's memory back, and the next allocation maps
    /// it again), which no timed loop of the rows using this pool contains (see `per_call_us`).
    pool: driver::CUmemoryPool,
    /// The same with the release threshold raised to `u64::MAX`, as the safe side's default
    /// resource has it: for the rows that synchronise between allocations (allocation + sync,
    /// 8 threads on 8 streams), where threshold 0 would time the driver mapping memory again
    /// after each synchronisation instead of the allocation calls. The one raw object that is
    /// not as the driver makes it, and what a C program that keeps its pool's memory does.
    kept_pool: driver::CUmemoryPool,
    /// 4 bytes from `cuMemAlloc`, k2's pointer in the buffer launch.
    buffer: driver::CUdeviceptr,
    /// A non-blocking stream per thread of the 8-thread rows.
    streams: Vec<driver::CUstream>,
    /// 256 MiB of pinned host memory (`cuMemHostAlloc`) and two device buffers (`cuMemAlloc`).
    host: *mut c_void,
    device_a: driver::CUdeviceptr,
    device_b: driver::CUdeviceptr,
    context: driver::CUcontext,
    /// `--gpu-architecture=sm_XY` of device 0, from two attribute queries, for the cold compile.
    arch_option: CString,
    variant: u32,
}

/// Every raw object below is made by a call that writes it through an out-pointer.
fn made<T>(f: impl FnOnce(*mut T) -> driver::CUresult) -> T {
    let mut value = std::mem::MaybeUninit::<T>::uninit();
    check(f(value.as_mut_ptr()));
    // SAFETY: the call succeeded, so it wrote the value.
    unsafe { value.assume_init() }
}

// In `Raw::new`, each `unsafe` call makes an object: a driver call on live handles made just
// before, with an out-pointer `made` provides and pointers to locals that outlive the call.
impl Raw {
    /// The raw objects, with k2 and k8 from `cubin` (after `cuInit`).
    pub fn new(cubin: &[u8]) -> Raw {
        let flags = driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0;
        // SAFETY: as above.
        let new_stream = || made(|s| unsafe { driver::cuStreamCreate(s, flags) });
        // SAFETY: as above.
        let (context, sm) = unsafe {
            let device = made(|d| driver::cuDeviceGet(d, 0));
            let context = made(|c| driver::cuDevicePrimaryCtxRetain(c, device));
            check(driver::cuCtxSetCurrent(context));
            use driver::CUdevice_attribute as A;
            let major =
                made(|v| driver::cuDeviceGetAttribute(v, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
            let minor =
                made(|v| driver::cuDeviceGetAttribute(v, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
            (context, format!("sm_{major}{minor}"))
        };
        let stream = new_stream();
        // SAFETY: as above; the cubin outlives the load.
        let module = made(|m| unsafe { driver::cuModuleLoadData(m, cubin.as_ptr().cast()) });
        // SAFETY: as above.
        let function =
            |name: &std::ffi::CStr| made(|f| unsafe { driver::cuModuleGetFunction(f, module, name.as_ptr()) });
        let (k2, k8) = (function(c"k2"), function(c"k8"));
        let mut raw = Raw {
            stream,
            k2,
            k8,
            graph: null_mut(),
            // SAFETY: as above.
            event: made(|e| unsafe { driver::cuEventCreate(e, driver::CUevent_flags::CU_EVENT_DISABLE_TIMING.0) }),
            pool: new_pool(None),
            kept_pool: new_pool(Some(u64::MAX)),
            // SAFETY: as above.
            buffer: made(|p| unsafe { driver::cuMemAlloc(p, 4) }),
            streams: (0..THREADS).map(|_| new_stream()).collect(),
            // SAFETY: as above (flags 0: plain pinned memory, as `cudaMallocHost`).
            host: made(|p| unsafe { driver::cuMemHostAlloc(p, COPY_BYTES, 0) }),
            // SAFETY: as above.
            device_a: made(|p| unsafe { driver::cuMemAlloc(p, COPY_BYTES) }),
            // SAFETY: as above.
            device_b: made(|p| unsafe { driver::cuMemAlloc(p, COPY_BYTES) }),
            context,
            arch_option: CString::new(format!("--gpu-architecture={sm}")).unwrap(),
            variant: 0,
        };
        raw.graph = raw.capture_graph();
        raw
    }

    /// 10 launches of k2 captured on the stream, instantiated.
    fn capture_graph(&self) -> driver::CUgraphExec {
        let mode = driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: the stream is live; the graph comes from the capture.
        unsafe {
            check(driver::cuStreamBeginCapture(self.stream, mode));
            with_args2(0, |args| (0..10).for_each(|_| launch(self.k2, self.stream, args)));
            let graph = made(|g| driver::cuStreamEndCapture(self.stream, g));
            made(|e| driver::cuGraphInstantiate(e, graph, 0))
        }
    }

    fn sync(&self) {
        sync(self.stream);
    }

    fn launch_graph(&self) {
        // SAFETY: the executable graph and the stream are live.
        check(unsafe { driver::cuGraphLaunch(self.graph, self.stream) });
    }

    fn record_and_sync(&self) {
        // SAFETY: the event and the stream are live.
        unsafe {
            check(driver::cuEventRecord(self.event, self.stream));
            check(driver::cuEventSynchronize(self.event));
        }
    }

    /// Host time per launch of `f` in the loop `l`, with its argument array made once, as C does.
    fn launches(&self, l: Loop, f: driver::CUfunction, args: &mut [*mut c_void]) -> f64 {
        per_call_us(l, || launch(f, self.stream, args), || self.sync())
    }

    /// A cold NVRTC compile of a source it has not seen, to a cubin in memory.
    fn compile_cold(&mut self) -> f64 {
        self.variant += 1;
        let source = CString::new(format!("{SOURCE}\n// raw variant {}", self.variant)).unwrap();
        let option = self.arch_option.as_ptr();
        // SAFETY: NUL-terminated strings that live across the calls; buffers sized as NVRTC says.
        ms(|| unsafe {
            use cuda_sys::nvrtc;
            let mut prog = null_mut();
            let no_headers = std::ptr::null();
            nvrtc::nvrtcCreateProgram(
                &mut prog,
                source.as_ptr(),
                c"raw.cu".as_ptr(),
                0,
                no_headers,
                no_headers,
            )
            .result()
            .unwrap();
            nvrtc::nvrtcCompileProgram(prog, 1, &option).result().unwrap();
            let mut size = 0;
            nvrtc::nvrtcGetCUBINSize(prog, &mut size).result().unwrap();
            let mut cubin = vec![0u8; size];
            nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result().unwrap();
            nvrtc::nvrtcDestroyProgram(&mut prog).result().unwrap();
        })
    }

    /// Millions of 1 MiB allocation + free pairs per second from the kept pool, 8 threads on 8
    /// streams of their own.
    fn thread_pool(&self) -> f64 {
        let (context, pool) = (self.context as usize, self.kept_pool as usize);
        let streams: Vec<usize> = self.streams.iter().map(|&s| s as usize).collect();
        let pair = |i: usize| pool_pair(pool as driver::CUmemoryPool, streams[i] as driver::CUstream);
        in_threads(
            &|i| {
                make_current(context as driver::CUcontext);
                pair(i);
            },
            &|i| {
                (0..PER_THREAD).for_each(|_| pair(i));
                sync(streams[i] as driver::CUstream);
            },
        )
    }

    /// Millions of k2 launches per second, 8 threads on 8 streams of their own.
    fn thread_launches(&self) -> f64 {
        let (context, k2) = (self.context as usize, self.k2 as usize);
        let streams: Vec<usize> = self.streams.iter().map(|&s| s as usize).collect();
        in_threads(&|_| make_current(context as driver::CUcontext), &|i| {
            let stream = streams[i] as driver::CUstream;
            with_args2(0, |args| (0..PER_THREAD).for_each(|_| launch(k2 as _, stream, args)));
            sync(stream);
        })
    }

    fn copy(&self, op: Op) -> f64 {
        // SAFETY: every buffer holds COPY_BYTES bytes and lives; the stream is live.
        let copy = || unsafe {
            match op {
                Op::HostToDevice => check(driver::cuMemcpyHtoDAsync(
                    self.device_a,
                    self.host,
                    COPY_BYTES,
                    self.stream,
                )),
                Op::DeviceToHost => check(driver::cuMemcpyDtoHAsync(
                    self.host,
                    self.device_a,
                    COPY_BYTES,
                    self.stream,
                )),
                _ => check(driver::cuMemcpyDtoDAsync(
                    self.device_b,
                    self.device_a,
                    COPY_BYTES,
                    self.stream,
                )),
            }
            self.sync();
        };
        match op {
            // Read and written: twice the bytes, in TB/s.
            Op::DeviceToDevice => gb_per_s(2 * COPY_BYTES, copy) / 1e3,
            _ => gb_per_s(COPY_BYTES, copy),
        }
    }
}

/// One block of 32 threads of `f` on `stream`.
fn launch(f: driver::CUfunction, stream: driver::CUstream, args: &mut [*mut c_void]) {
    // SAFETY: `args` point at values of the kernel's parameters (see `with_args2`,
    // `with_args8`); the kernels never dereference their pointer (no thread 1024).
    check(unsafe { driver::cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, args.as_mut_ptr(), null_mut()) });
}

/// A pool on device 0 with the default properties and, if given, that release threshold.
fn new_pool(release_threshold: Option<u64>) -> driver::CUmemoryPool {
    let props = driver::CUmemPoolProps {
        allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        // Device 0: the location's id is zero by default.
        location: driver::CUmemLocation {
            type_: driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            ..Default::default()
        },
        ..Default::default()
    };
    // SAFETY: `props` outlives the call.
    let pool = made(|p| unsafe { driver::cuMemPoolCreate(p, &props) });
    if let Some(mut bytes) = release_threshold {
        let attribute = driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        // SAFETY: the pool is live; the attribute is a u64 the driver reads.
        check(unsafe { driver::cuMemPoolSetAttribute(pool, attribute, (&mut bytes as *mut u64).cast()) });
    }
    pool
}

/// Calls `f` with k2's argument array (a null pointer, or `x`, and 1), made once.
fn with_args2<R>(x: driver::CUdeviceptr, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
    let (mut x, mut n) = (x, 1u32);
    f(&mut [(&mut x as *mut u64).cast(), (&mut n as *mut u32).cast()])
}

/// Calls `f` with k8's argument array (a null pointer and 1, 2, 3, 4.0, 5.0, 6, 7.0), made once.
fn with_args8<R>(f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
    let (mut a, mut b, mut c, mut d, mut e, mut g, mut h, mut i) =
        (0u64, 1u32, 2i32, 3i32, 4.0f32, 5.0f32, 6i64, 7.0f64);
    f(&mut [
        (&mut a as *mut u64).cast(),
        (&mut b as *mut u32).cast(),
        (&mut c as *mut i32).cast(),
        (&mut d as *mut i32).cast(),
        (&mut e as *mut f32).cast(),
        (&mut g as *mut f32).cast(),
        (&mut h as *mut i64).cast(),
        (&mut i as *mut f64).cast(),
    ])
}

fn sync(stream: driver::CUstream) {
    // SAFETY: the stream is live.
    check(unsafe { driver::cuStreamSynchronize(stream) });
}

fn make_current(context: driver::CUcontext) {
    // SAFETY: the primary context is retained by the raw side for the process's life.
    check(unsafe { driver::cuCtxSetCurrent(context) });
}

/// 1 MiB allocated from `pool` and freed, both ordered on `stream`.
fn pool_pair(pool: driver::CUmemoryPool, stream: driver::CUstream) {
    let mut p = 0;
    // SAFETY: out-pointer to a local; the pool and the stream are live; freed on the same stream.
    unsafe {
        check(driver::cuMemAllocFromPoolAsync(&mut p, 1 << 20, pool, stream));
        check(driver::cuMemFreeAsync(p, stream));
    }
}

impl Contender for Raw {
    fn measure(&mut self, op: Op) -> Option<f64> {
        let (stream, sync) = (self.stream, || self.sync());
        Some(match op {
            // Its own stream, k2 and k8 of its own module, and for the buffer its `cuMemAlloc`.
            Op::Launch2(l) | Op::TypedLaunch2(l) => with_args2(0, |args| self.launches(l, self.k2, args)),
            Op::TypedLaunch8(l) => with_args8(|args| self.launches(l, self.k8, args)),
            Op::BufferLaunch(l) => with_args2(self.buffer, |args| self.launches(l, self.k2, args)),
            // Its own graph, captured and instantiated raw, on its own stream.
            Op::Graph(l) => per_call_us(l, || self.launch_graph(), sync),
            // Its own pools (the driver's default configuration; the kept one where the loop
            // synchronises), on its own stream.
            Op::Pool(l) | Op::OwnedPool(l) => per_call_us(l, || pool_pair(self.pool, stream), sync),
            Op::PoolSync(l) => {
                let pair_and_sync = || {
                    pool_pair(self.kept_pool, stream);
                    sync();
                };
                per_call_us(l, pair_and_sync, || {})
            }
            // Its own timing-free event, on its own stream.
            Op::Event(l) => per_call_us(l, || self.record_and_sync(), || {}),
            Op::StreamSync(l) => per_call_us(l, sync, || {}),
            // Its own 8 streams, k2 and kept pool.
            Op::ThreadLaunches => self.thread_launches(),
            Op::ThreadPool => self.thread_pool(),
            // Its own pinned host memory and device buffers.
            Op::HostToDevice | Op::DeviceToHost | Op::DeviceToDevice => self.copy(op),
            // NVRTC called directly.
            Op::CompileCold => self.compile_cold(),
            // Fresh processes making everything raw, started by the benchmark's process (see
            // `children`); no program cache or DLPack here.
            Op::FirstKernel | Op::FirstCompile(_) | Op::CompileStore | Op::CompileHit | Op::StridedView => return None,
        })
    }
}
