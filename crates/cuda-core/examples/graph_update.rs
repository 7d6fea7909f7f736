//! Updating an instantiated graph (cuda.core's `graph_update`): change the definition and apply
//! it with `update`, or change one node of the executable graph, without instantiating again.
mod common;
use common::{main_with, zeroed};
use cuda_core::graph::GraphDefinition;
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let source = r#"extern "C" __global__ void fill(float* x, float v, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = v;
        }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let fill = code.get_kernel("fill")?;
        let stream = device.create_stream(Default::default())?;
        let n = 1u32 << 16;
        let config = LaunchConfig::new(n.div_ceil(256), 256);
        let (x, y) = (
            zeroed::<f32>(&device, &stream, n as usize)?,
            zeroed::<f32>(&device, &stream, n as usize)?,
        );
        let all = |b: &cuda_core::Buffer, v: f32| -> Result<bool, Box<dyn std::error::Error>> {
            Ok(b.to_vec::<f32>(&stream)?.iter().all(|e| *e == v))
        };

        // One kernel node, filling x with 1.
        let definition = GraphDefinition::new()?;
        // SAFETY: the kernel fills n floats of a view that holds n (the graph holds x).
        let node = unsafe { definition.launch(&config, &fill, (x.view_as::<f32>()?, 1.0f32, n))? };
        let mut graph = definition.instantiate(&Default::default())?;
        graph.launch(&stream)?;
        assert!(all(&x, 1.0)?);

        // Change the definition (fill with 2), then bring the executable graph up to date.
        // SAFETY: as above.
        unsafe { node.set_kernel_args((x.view_as::<f32>()?, 2.0f32, n))? };
        graph.update(&definition)?;
        graph.launch(&stream)?;
        assert!(all(&x, 2.0)?);

        // Change only the executable graph's node: fill y with 3 instead.
        // SAFETY: as above, for y (the executable graph holds it).
        unsafe { graph.set_kernel_args(&node, (y.view_as::<f32>()?, 3.0f32, n))? };
        graph.launch(&stream)?;
        assert!(all(&y, 3.0)? && all(&x, 2.0)?);
        println!("graph updated from its definition, then one node of the executable: verified");
        Ok(())
    })
}
