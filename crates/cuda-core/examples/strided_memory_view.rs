//! Strided memory views (cuda.core's `strided_memory_view_constructors.py`,
//! `strided_memory_view_cpu.py` and `strided_memory_view_gpu.py`): views made from a host
//! slice, a buffer and a DLPack tensor; a function that accepts anything viewable and runs a
//! kernel on it; and strided copies (a transpose) checked element by element.
mod common;
use common::main_with;
use cuda_core::{
    AsStridedView, Buffer, CodeType, DType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream,
    StridedMemoryView,
};

const CODE: &str = r#"
extern "C" __global__ void inplace_plus_arange_N(int* data, size_t N) {
    const size_t tid = threadIdx.x + blockIdx.x * blockDim.x;
    const size_t stride_size = gridDim.x * blockDim.x;
    for (size_t i = tid; i < N; i += stride_size) {
        data[i] += i;
    }
}
"#;

/// Adds 0, 1, 2, ... to a 1-D array of `i32` on the device, whatever it is a view of (the
/// callee picks the stream, as with `args_viewable_as_strided_memory`).
fn my_func(arr: &impl AsStridedView, stream: &Stream, kernel: &Kernel) -> Result<(), Box<dyn std::error::Error>> {
    let view = arr.as_strided_view(stream)?;
    assert_eq!(view.shape().len(), 1);
    assert_eq!(view.dtype(), DType::I32);
    assert!(view.is_device_accessible());
    let size = view.shape()[0];
    let block = 256u32;
    let config = LaunchConfig::new((size as u32).div_ceil(block), block);
    let kernel = kernel.typed::<(*mut i32, usize)>()?;
    // SAFETY: the kernel adds to `size` ints of a view that holds them.
    unsafe { kernel.launch(stream, &config, (view.kernel_arg::<i32>()?, size))? };
    stream.sync()?;
    Ok(())
}

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;
        let options = ProgramOptions {
            arch: Some(format!("sm_{}", device.arch()?)),
            std: Some("c++11".into()),
            ..Default::default()
        };
        let kernel = Program::new(CODE, SourceType::Cxx, options)?
            .compile(CodeType::Cubin, &[])?
            .get_kernel("inplace_plus_arange_N")?;

        // Constructors: a host slice, a buffer, a DLPack tensor.
        let ones = vec![1i32; 1024];
        let host = StridedMemoryView::from_host_slice(&ones, &[1024], None)?;
        println!(
            "host view: shape {:?}, dtype {}, device {:?}, read-only {}",
            host.shape(),
            host.dtype(),
            host.device_id(),
            host.readonly()
        );
        let buffer = device.allocate(1024 * 4, &stream)?;
        let mut on_device = StridedMemoryView::from_buffer(&buffer, &[1024], None, DType::I32, false)?;
        on_device.copy_from(&host, &stream)?;
        println!(
            "buffer view: shape {:?}, dtype {}, device {:?}",
            on_device.shape(),
            on_device.dtype(),
            on_device.device_id()
        );

        // The GPU function, on the buffer's view.
        my_func(&on_device, &stream, &kernel)?;
        let got = buffer.to_vec::<i32>(&stream)?;
        assert!(got.iter().enumerate().all(|(i, v)| *v == 1 + i as i32), "wrong sums");
        println!("after: {:?}", &got[..10]);

        // Through DLPack: the buffer as a 32x32 tensor, viewed again, transposed by a strided
        // copy into a dense view.
        let tensor = buffer.to_dlpack_as::<i32>(&[32, 32], None)?;
        let matrix = StridedMemoryView::from_dlpack(tensor, Some(&stream), &stream)?;
        let transposed = matrix.view(&[32, 32], Some(&[1, 32]), DType::I32)?;
        let out = Buffer::allocate(device.memory_resource()?, 1024 * 4, &stream)?;
        let mut dense = StridedMemoryView::from_buffer(&out, &[32, 32], None, DType::I32, false)?;
        dense.copy_from(&transposed, &stream)?;
        let t = out.to_vec::<i32>(&stream)?;
        for r in 0..32 {
            for c in 0..32 {
                assert_eq!(t[r * 32 + c], got[c * 32 + r], "element ({r}, {c})");
            }
        }
        println!("a 32x32 transpose through strided views: verified");
        Ok(())
    })
}
