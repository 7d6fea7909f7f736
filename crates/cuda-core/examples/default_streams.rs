//! The default streams, and what an operation on one costs: every operation this crate queues on
//! a default stream asks the driver whether another library is capturing it
//! (`cuStreamGetCaptureInfo`), which plain streams never need. This example launches an empty
//! kernel many times on a stream of its own and on the per-thread default stream, through the
//! crate and through raw driver calls, and prints the host time per launch of each.
mod common;
use common::main_with;
use cuda_core::{launch, CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType, Stream};
use cuda_sys::driver;
use std::time::Instant;

const LAUNCHES: u32 = 500;
const BATCHES: usize = 101;

/// The median over `BATCHES` of the host time per call of `f` called `LAUNCHES` times (few
/// enough that the driver's launch queue never fills and blocks), then waiting for `stream`.
fn per_launch(stream: &Stream, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..LAUNCHES {
                f();
            }
            let took = start.elapsed();
            stream.sync().expect("the launches ran");
            took.as_nanos() as f64 / f64::from(LAUNCHES)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[BATCHES / 2]
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let code = Program::new(
            r#"extern "C" __global__ void empty() {}"#,
            SourceType::Cxx,
            ProgramOptions::default(),
        )?
        .compile(CodeType::Cubin, &[])?;
        let kernel = code.get_kernel("empty")?;
        let own = device.create_stream(Default::default())?;
        let per_thread = Stream::per_thread_default();
        let config = LaunchConfig::new(1, 1);
        let function = kernel.handle() as driver::CUfunction;
        let raw = |stream: driver::CUstream| {
            // SAFETY: a live kernel of no parameters; the stream is live.
            let status = unsafe {
                driver::cuLaunchKernel(
                    function,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    stream,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(status, driver::CUresult::CUDA_SUCCESS);
        };
        // Warm up both streams (the first launch loads the kernel).
        for stream in [&own, &per_thread] {
            // SAFETY: empty() has no parameters and touches no memory.
            unsafe { launch(stream, &config, &kernel, ()) }?;
            stream.sync()?;
        }
        let safe = |stream: &Stream| {
            // SAFETY: as above.
            unsafe { launch(stream, &config, &kernel, ()) }.expect("launched");
        };
        let rows = [
            ("own stream, cuda-core", per_launch(&own, || safe(&own))),
            ("own stream, raw cuLaunchKernel", per_launch(&own, || raw(own.handle()))),
            (
                "per-thread default stream, cuda-core",
                per_launch(&per_thread, || safe(&per_thread)),
            ),
            (
                "per-thread default stream, raw cuLaunchKernel",
                per_launch(&per_thread, || raw(per_thread.handle())),
            ),
        ];
        for (what, ns) in rows {
            println!("{what:<48} {ns:>8.1} ns per launch");
        }
        let query = per_launch(&per_thread, || {
            let mut status = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: the per-thread default stream; out-pointers to a local, the rest not asked.
            let asked = unsafe {
                driver::cuStreamGetCaptureInfo(
                    per_thread.handle(),
                    &mut status,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(asked, driver::CUresult::CUDA_SUCCESS);
        });
        println!(
            "{:<48} {query:>8.1} ns per call",
            "cuStreamGetCaptureInfo (the question asked)"
        );
        Ok(())
    })
}
