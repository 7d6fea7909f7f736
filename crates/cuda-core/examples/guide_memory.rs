//! The program of the guide's chapter on memory (`docs/guide/03-memory.md`): memory resources,
//! typed buffers and views, pinned host memory without blocking, blocking host copies, and a
//! buffer used on a second stream.

use cuda_core::{Buffer, Device};
use cuda_core::{DeviceMemoryResource, EventOptions, PinnedMemoryResource, TypedBuffer};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    device.set_current()?;
    let stream = device.create_stream(Default::default())?;
    let n = 1 << 20;

    // Three resources: the device's default pool, a pool of our own, pinned host memory.
    let pool = device.memory_resource()?;
    let own = DeviceMemoryResource::new(&device, Default::default())?;
    let pinned = PinnedMemoryResource::portable()?;
    let a = TypedBuffer::<f32>::allocate(&pool, n, &stream)?;
    let b = TypedBuffer::<f32>::allocate(&own, n, &stream)?;
    let mut staging = TypedBuffer::<f32>::allocate(&pinned, n, &stream)?;

    // Host data without blocking: write pinned memory on the host, then copy it stream-ordered.
    staging
        .host_slice_mut()?
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32);
    a.copy_from(&staging, &stream)?; // queued; returns at once
    b.copy_from(&a, &stream)?;
    b.slice(..4)?.fill(-1.0, &stream)?;

    // Host slices of ordinary memory: these calls wait for their copy.
    let mut head = [0f32; 8];
    b.slice(..8)?.read_only().copy_to_host_blocking(&mut head, &stream)?;
    assert_eq!(head, [-1.0, -1.0, -1.0, -1.0, 4.0, 5.0, 6.0, 7.0]);

    // Untyped buffers are bytes; a typed view makes them a `*mut f32` kernel argument.
    let bytes: Buffer = device.allocate(16, &stream)?;
    bytes.copy_from_host(&[1.0f32, 2.0, 3.0, 4.0], &stream)?;
    let _as_floats = bytes.view_as::<f32>()?;
    let back: TypedBuffer<f32> = bytes.into_typed()?;
    assert_eq!(back.to_vec_blocking(&stream)?, [1.0, 2.0, 3.0, 4.0]);

    // A second stream: its first use of a buffer waits for the buffer's stream...
    let other = device.create_stream(Default::default())?;
    let c = TypedBuffer::<f32>::allocate(&pool, n, &stream)?;
    let allocated = stream.record_new(EventOptions::default())?;
    // ...unless it already waits for an event recorded after the allocation, and says so.
    other.wait_event(&allocated)?;
    // SAFETY: `other` waits for an event recorded after c's allocation.
    unsafe { c.as_buffer().assume_ordered_on(&other)? };
    c.fill(2.0, &other)?;
    assert_eq!(c.slice(..3)?.read_only().to_vec_blocking(&other)?, [2.0; 3]);
    // Dropping never waits: c is freed on `stream` once `other`'s work on it is done.
    drop(c);
    stream.sync()?;
    assert!(cuda_core::take_drop_errors().is_empty());
    println!("pools, pinned staging, typed views and a second stream: verified");
    Ok(())
}
