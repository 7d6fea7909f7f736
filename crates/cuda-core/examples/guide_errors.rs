//! The program of the guide's chapter on errors and debugging
//! (`docs/guide/08-errors-and-debugging.md`): what a compile error, an impossible allocation and
//! a refused call say, and where errors met in `Drop` go.

use cuda_core::{CodeType, Device, Program, ProgramOptions, SourceType};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    // A compile error carries the compiler's log.
    let broken = r#"extern "C" __global__ void k(float* x) { x[0] = undefined_name; }"#;
    let mut program = Program::new(broken, SourceType::Cxx, ProgramOptions::default())?;
    match program.compile(CodeType::Ptx, &[]) {
        Err(e) if e.is_compile_error() => println!("compile error, as expected:\n{e}"),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("the broken kernel compiled".into()),
    }

    let device = Device::new(0)?;
    device.set_current()?;
    let stream = device.create_stream(Default::default())?;
    // More memory than the device has: an error that says so, not a panic.
    match device.allocate(1 << 50, &stream) {
        Err(e) if e.is_out_of_memory() => println!("out of memory, as expected: {e}"),
        Err(e) => println!("refused: {e}"),
        Ok(_) => return Err("a 1 PiB allocation succeeded".into()),
    }
    // A call the crate refuses says what to do instead.
    let timing_free = stream.record_new(Default::default())?;
    match timing_free.elapsed_time_since(&timing_free) {
        Err(e) => println!("refused, as expected: {e}"),
        Ok(_) => return Err("timed events made without timing".into()),
    }
    // Errors met while releasing resources in Drop are kept for the program to look at.
    stream.sync()?;
    let dropped = cuda_core::take_drop_errors();
    assert!(dropped.is_empty(), "errors in Drop: {dropped:?}");
    println!("errors: verified");
    Ok(())
}
