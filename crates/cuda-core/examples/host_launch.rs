//! A host function queued on a stream (cuda.core's `host_launch`): it runs on a driver thread
//! once the work before it is done, in stream order.
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"extern "C" __global__ void fill(unsigned* x, unsigned v, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = v;
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let fill = code.get_kernel("fill")?.typed::<(*mut u32, u32, u32)>()?;
        let stream = device.create_stream(Default::default())?;
        let n = 1u32 << 16;
        let buffer = zeroed::<u32>(&device, &stream, n as usize)?;
        let calls = Arc::new(AtomicU32::new(0));
        for round in 1..=3u32 {
            // SAFETY: the kernel fills n values of a view that holds n.
            unsafe {
                fill.launch(
                    &stream,
                    &LaunchConfig::new(n.div_ceil(256), 256),
                    (buffer.view_as::<u32>()?, round, n),
                )?
            };
            let calls = calls.clone();
            // Runs after the fill of this round (and not again: a host function runs once).
            stream.launch_host_func(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                println!("host function after round {round}");
            })?;
        }
        let values = buffer.to_vec::<u32>(&stream)?;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "each host function ran once");
        assert!(values.iter().all(|v| *v == 3), "the last fill came last");
        println!("three fills, each followed by its host function: verified");
        Ok(())
    })
}
