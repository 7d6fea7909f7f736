//! What the examples share: buffers made from host data, error reporting, include folders.
#![allow(dead_code)]

use cuda_core::{Buffer, Device, Pod, Stream};

/// A buffer from the device's default pool holding a copy of `data` (ordered on `stream`).
pub fn buffer_from<T: Pod>(device: &Device, stream: &Stream, data: &[T]) -> Result<Buffer, Box<dyn std::error::Error>> {
    let buffer = device.allocate(std::mem::size_of_val(data), stream)?;
    buffer.copy_from_host(data, stream)?;
    Ok(buffer)
}

/// A buffer of `n` zeroed values of `T` (ordered on `stream`).
pub fn zeroed<T: Pod>(device: &Device, stream: &Stream, n: usize) -> Result<Buffer, Box<dyn std::error::Error>> {
    let bytes = n.checked_mul(std::mem::size_of::<T>()).ok_or("size overflows")?;
    let buffer = device.allocate(bytes, stream)?;
    buffer.fill_u8(0, stream)?;
    Ok(buffer)
}

/// Runs an example body and reports its error plainly.
pub fn main_with(f: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>) {
    if let Err(e) = f() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Include folders for `cooperative_groups.h`: the runtime headers and CCCL's, as found by
/// cuda-pathfinder (wheels or toolkit).
pub fn cooperative_groups_includes() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    ["cudart", "cccl"]
        .iter()
        .map(|h| {
            Ok(cuda_pathfinder::locate_nvidia_header_directory(h)?
                .abs_path
                .display()
                .to_string())
        })
        .collect()
}
