//! Pinned, managed and graph memory pools together (cuda.core's `memory_pool_resources.py`): a
//! managed buffer preferring the device, a pinned buffer (on the device's host NUMA node where
//! there is one), and a graph whose scratch buffer is graph memory, allocated and freed by the
//! graph itself.
mod common;
use common::main_with;
use cuda_core::graph::CaptureMode;
use cuda_core::{
    Buffer, CodeType, Device, GraphMemoryResource, LaunchConfig, ManagedMemoryResource, ManagedMemoryResourceOptions,
    MemoryLocation, PinnedMemoryResource, PinnedMemoryResourceOptions, Program, ProgramOptions, SourceType,
};

const CODE: &str = r#"
extern "C" __global__ void scale_and_bias(float* data, size_t size, float scale, float bias) {
    const unsigned int tid = threadIdx.x + blockIdx.x * blockDim.x;
    const unsigned int stride = blockDim.x * gridDim.x;
    for (size_t i = tid; i < size; i += stride) {
        data[i] = data[i] * scale + bias;
    }
}
"#;

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;
        let options = ProgramOptions {
            std: Some("c++17".into()),
            arch: Some(format!("sm_{}", device.arch()?)),
            ..Default::default()
        };
        let module = Program::new(CODE, SourceType::Cxx, options)?.compile(CodeType::Cubin, &[])?;
        let kernel = module
            .get_kernel("scale_and_bias")?
            .typed::<(*mut f32, usize, f32, f32)>()?;

        let size = 256usize;
        let nbytes = size * size_of::<f32>();
        let config = LaunchConfig::new((size as u32).div_ceil(128), 128);

        let managed_mr = ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions {
            preferred_location: Some(MemoryLocation::Device(device)),
        }))?;
        let numa_id = u32::try_from(device.properties().host_numa_id()?).ok();
        let pinned_mr = PinnedMemoryResource::new(PinnedMemoryResourceOptions {
            ipc_enabled: false,
            numa_id,
            ..Default::default()
        })?;
        let graph_mr = GraphMemoryResource::new(&device);

        let original: Vec<f32> = (0..size).map(|i| i as f32).collect();
        let managed = Buffer::from_slice(managed_mr.clone(), &original, &stream)?;
        let pinned = pinned_mr.allocate(nbytes, &stream)?;
        managed.copy_to(&pinned, &stream)?;
        assert_eq!(pinned.to_vec::<f32>(&stream)?, original);

        // A graph that copies the managed data into graph memory, scales it there, and copies it
        // back; the scratch buffer is freed by the graph (a free node), since it is dropped while
        // the capture records.
        let mut builder = device.create_graph_builder()?;
        builder.begin_building(CaptureMode::Relaxed)?;
        {
            let s = builder.stream();
            let scratch = graph_mr.allocate(nbytes, s)?;
            scratch.copy_from(&managed, s)?;
            // SAFETY: the kernel reads and writes `size` floats of a view that holds them.
            unsafe { kernel.launch(s, &config, (scratch.view_as::<f32>()?, size, 2.0f32, 1.0f32))? };
            managed.copy_from(&scratch, s)?;
        }
        let graph = builder.end_building()?.complete(&Default::default())?;
        graph.upload(&stream)?;
        graph.launch(&stream)?;
        stream.sync()?;

        let expected: Vec<f32> = original.iter().map(|v| v * 2.0 + 1.0).collect();
        assert_eq!(managed.to_vec::<f32>(&stream)?, expected);
        managed.copy_to(&pinned, &stream)?;
        assert_eq!(pinned.to_vec::<f32>(&stream)?, expected);

        println!("PinnedMemoryResource numa_id: {:?}", pinned_mr.numa_id());
        println!(
            "ManagedMemoryResource preferred_location: {:?}",
            managed_mr.preferred_location()
        );
        println!(
            "GraphMemoryResource reserved high watermark: {}",
            graph_mr.reserved_mem_high()?
        );
        println!("managed, pinned and graph memory: {size} values scaled and biased, verified");
        Ok(())
    })
}
