//! The program of the guide's chapter on several GPUs (`docs/guide/07-multi-gpu.md`): a stream
//! and a buffer per device, peer access and a peer copy where there are two. With one GPU the
//! peer part says it was skipped.

use cuda_core::{Device, TypedBuffer};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let devices = Device::all()?;
    println!("{} GPU(s)", devices.len());
    // A stream and a buffer on each device, each filled with its device's number.
    let mut work = Vec::new();
    for device in &devices {
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;
        let buffer = TypedBuffer::<u32>::allocate(device, 1 << 20, &stream)?;
        buffer.fill(device.device_id() as u32, &stream)?;
        work.push((stream, buffer));
    }
    for (device, (stream, buffer)) in devices.iter().zip(&work) {
        let first = buffer.slice(..1)?.read_only().to_vec_blocking(stream)?;
        assert_eq!(first, [device.device_id() as u32]);
    }

    let [(a, x), (b, y), ..] = &work[..] else {
        println!("peer copies: skipped (one GPU)");
        return Ok(());
    };
    // A copy between devices, ordered on device 1's stream `b`: the first use of x there waits
    // for x's own stream `a`. No peer access is needed for a copy.
    x.as_buffer().copy_to_peer(y.as_buffer(), b)?;
    assert_eq!(y.slice(..1)?.read_only().to_vec_blocking(b)?, [0]);
    // For kernels of device 1 to read device 0's pool memory, the pool grants it access.
    let (first, second) = (devices[0], devices[1]);
    if first.can_access_peer(&second)? && second.can_access_peer(&first)? {
        let pool = first.memory_resource()?;
        pool.set_peer_accessible_by(&[second])?;
        assert_eq!(pool.peer_accessible_by()?, [second]);
        pool.set_peer_accessible_by(&[])?;
    } else {
        println!("pool peer access: skipped (the devices cannot reach each other)");
    }
    a.sync()?;
    println!("a copy from device 0 to device 1: verified");
    Ok(())
}
