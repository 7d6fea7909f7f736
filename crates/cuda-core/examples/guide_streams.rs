//! The program of the guide's chapter on streams and events (`docs/guide/02-streams-and-events.md`):
//! two streams ordered by an event, timing with events, a host function, joining streams.

use cuda_core::TypedBuffer;
use cuda_core::{CodeType, Device, EventOptions, LaunchConfig, Program, ProgramOptions, SourceType, StreamOptions};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    let context = device.set_current()?;
    let source = r#"extern "C" __global__ void scale(float* x, float a, unsigned n) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }"#;
    let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
    let scale = code.get_kernel("scale")?.typed::<(*mut f32, f32, u32)>()?;
    let n: u32 = 1 << 20;
    let config = LaunchConfig::new(n.div_ceil(256), 256);

    // Streams: independent queues of work. Priorities: numerically lower is more urgent.
    let (least, greatest) = context.stream_priority_range()?;
    println!("stream priorities from {least} (least urgent) to {greatest}");
    let first = device.create_stream(StreamOptions::default())?;
    let urgent = device.create_stream(StreamOptions {
        nonblocking: true,
        priority: Some(greatest),
    })?;

    // x belongs to `urgent`; its first use on `first` waits for `urgent`'s work (chapter 3).
    let x = TypedBuffer::<f32>::allocate(&device, n as usize, &urgent)?;
    x.fill(1.0, &urgent)?;
    // SAFETY: scale touches n floats of x, which holds n.
    unsafe { scale.launch(&first, &config, (&x, 2.0f32, n))? };
    // Any later order between the streams is ours to state: `urgent` waits, on the GPU, for
    // what `first` has queued so far; the host does not wait.
    let doubled = first.record_new(EventOptions::default())?;
    urgent.wait_event(&doubled)?;
    // SAFETY: as above.
    unsafe { scale.launch(&urgent, &config, (&x, 3.0f32, n))? };
    assert!(x.to_vec_blocking(&urgent)?.iter().all(|v| *v == 6.0));

    // Timing: two events with timestamps around the work.
    let timing = EventOptions {
        timing_enabled: true,
        ..Default::default()
    };
    let start = first.record_new(timing)?;
    for _ in 0..100 {
        // SAFETY: as above.
        unsafe { scale.launch(&first, &config, (&x, 1.0f32, n))? };
    }
    let end = first.record_new(timing)?;
    end.sync()?;
    println!("100 launches took {:.3} ms on the GPU", end.elapsed_time_since(&start)?);

    // A host function runs on a driver thread once the stream gets there.
    let (done, finished) = std::sync::mpsc::channel();
    first.launch_host_func(move || {
        let _ = done.send("the stream reached the host function");
    })?;
    println!("{}", finished.recv()?);

    // Joining: `urgent` waits for everything queued on `first` so far.
    urgent.wait(&first)?;
    urgent.sync()?;
    assert!(first.is_done()?);
    println!("two streams ordered by an event, timed, and joined: verified");
    Ok(())
}
