//! Memory resources and copies (cuda.core's `memory_ops.py`): a device pool, pinned host memory
//! and managed memory, copies between them, and a kernel over each kind of buffer.
mod common;
use common::main_with;
use cuda_core::{
    Buffer, CodeType, Device, LaunchConfig, ManagedMemoryResource, PinnedMemoryResource, Program, ProgramOptions,
    SourceType,
};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"extern "C" __global__ void scale(float* x, float by, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] *= by;
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let scale = code.get_kernel("scale")?.typed::<(*mut f32, f32, u32)>()?;
        let stream = device.create_stream(Default::default())?;
        let n = 1u32 << 20;
        let bytes = n as usize * 4;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let input: Vec<f32> = (0..n).map(|i| i as f32).collect();

        // Device memory from the device's pool, pinned host memory, managed memory.
        let on_device = device.allocate(bytes, &stream)?;
        let pinned = Buffer::allocate(PinnedMemoryResource::new(Default::default())?, bytes, &stream)?;
        let managed = Buffer::allocate(ManagedMemoryResource::new(None)?, bytes, &stream)?;
        println!(
            "device buffer: device {} host {}; pinned: device {} host {}; managed: device {} host {}",
            on_device.is_device_accessible(),
            on_device.is_host_accessible(),
            pinned.is_device_accessible(),
            pinned.is_host_accessible(),
            managed.is_device_accessible(),
            managed.is_host_accessible()
        );

        // Host -> pinned -> device, a kernel on the device buffer, device -> managed, and a
        // kernel on the managed buffer itself.
        pinned.copy_from_host(&input, &stream)?;
        pinned.copy_to(&on_device, &stream)?;
        // SAFETY: the kernel scales n floats of views that hold n floats.
        unsafe { scale.launch(&stream, &config, (on_device.view_as::<f32>()?, 2.0f32, n))? };
        on_device.copy_to(&managed, &stream)?;
        // SAFETY: as above.
        unsafe { scale.launch(&stream, &config, (managed.view_as::<f32>()?, 3.0f32, n))? };
        managed.copy_to(&pinned, &stream)?;
        let out = pinned.to_vec::<f32>(&stream)?;
        assert!(out.iter().zip(&input).all(|(o, i)| *o == i * 6.0), "wrong results");
        println!("{n} floats through pinned, device and managed memory, scaled by 2 and 3: verified");
        Ok(())
    })
}
