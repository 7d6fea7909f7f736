//! The program of the guide's chapter on interop (`docs/guide/06-interop.md`): DLPack tensors
//! and strided views, ndarray arrays (feature `ndarray`) and cudarc slices (feature `cudarc`),
//! each without a copy where the memory allows. `cargo run -p cuda-core --example guide_interop
//! --features ndarray,cudarc` runs all three; without a feature its part says it was skipped.

use cuda_core::{DType, Device, Stream, StridedMemoryView};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let device = Device::new(0)?;
    device.set_current()?;
    let stream = device.create_stream(Default::default())?;
    dlpack(&device, &stream)?;
    ndarray(&device, &stream)?;
    cudarc(&device, &stream)?;
    Ok(())
}

/// A buffer handed out as a 6x4 DLPack tensor, taken back as a strided view, read transposed.
fn dlpack(device: &Device, stream: &Stream) -> Result<(), Box<dyn Error>> {
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let buffer = device.allocate_from_slice(&data, stream)?;
    let tensor = buffer.to_dlpack_as::<f32>(&[6, 4], None)?;
    // The consumer stream (here the same) waits for the producer's work on the tensor.
    let matrix = StridedMemoryView::from_dlpack(tensor, Some(stream), stream)?;
    let transposed = matrix.view(&[4, 6], Some(&[1, 4]), DType::F32)?;
    let mut out = vec![0f32; 24];
    let mut host = StridedMemoryView::from_host_slice_mut(&mut out, &[4, 6], None)?;
    host.copy_from(&transposed, stream)?;
    drop(host);
    assert!((0..4).all(|r| (0..6).all(|c| out[r * 6 + c] == data[c * 4 + r])));
    println!("DLPack: a 6x4 tensor read back transposed: verified");
    Ok(())
}

/// An ndarray array copied to the GPU through strided views, and back as an array.
#[cfg(feature = "ndarray")]
fn ndarray(device: &Device, stream: &Stream) -> Result<(), Box<dyn Error>> {
    let array = ndarray::Array2::<f32>::from_shape_fn((6, 4), |(r, c)| (r * 4 + c) as f32);
    let host = StridedMemoryView::from_ndarray(&array)?;
    let on_gpu = device.allocate(24 * 4, stream)?;
    let mut view = StridedMemoryView::from_buffer(&on_gpu, &[6, 4], None, DType::F32, false)?;
    view.copy_from(&host, stream)?;
    let mut back = vec![0f32; 24];
    let mut back_view = StridedMemoryView::from_host_slice_mut(&mut back, &[6, 4], None)?;
    back_view.copy_from(&view, stream)?;
    assert_eq!(back_view.as_ndarray::<f32>()?, array.view().into_dyn());
    println!("ndarray: a 6x4 array to the GPU and back: verified");
    Ok(())
}

#[cfg(not(feature = "ndarray"))]
fn ndarray(_: &Device, _: &Stream) -> Result<(), Box<dyn Error>> {
    println!("ndarray: skipped (built without the `ndarray` feature)");
    Ok(())
}

/// A cudarc slice taken as a buffer, written here, and handed back to cudarc.
#[cfg(feature = "cudarc")]
fn cudarc(device: &Device, stream: &Stream) -> Result<(), Box<dyn Error>> {
    use cuda_core::interop::cudarc::driver::{CudaContext, CudaSlice};
    use cuda_core::Buffer;
    let ctx = CudaContext::new(device.device_id())?;
    let theirs = ctx.new_stream()?;
    device.set_current()?; // cudarc made its context current: ours again
    let slice = theirs.clone_htod(&[1.0f32, 2.0, 3.0, 4.0])?;
    // No copy: the buffer owns cudarc's memory; its work follows cudarc's upload.
    let buffer = Buffer::from_cudarc(slice, stream)?.into_typed::<f32>()?;
    buffer.slice(2..)?.fill(0.0, stream)?;
    // Back to cudarc once the work queued here is done (the host waits for it).
    let back: CudaSlice<f32> = buffer.into_buffer().into_cudarc(&theirs)?;
    assert_eq!(theirs.clone_dtoh(&back)?, [1.0, 2.0, 0.0, 0.0]);
    println!("cudarc: a slice taken, written and handed back: verified");
    Ok(())
}

#[cfg(not(feature = "cudarc"))]
fn cudarc(_: &Device, _: &Stream) -> Result<(), Box<dyn Error>> {
    println!("cudarc: skipped (built without the `cudarc` feature)");
    Ok(())
}
