//! Thread block clusters (compute capability 9.0+): blocks of a cluster read each other's
//! shared memory (cuda.core's `thread_block_cluster.py`).
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let cc = device.compute_capability()?;
        if cc.major < 9 {
            return Err(format!("thread block clusters need compute capability 9.0; this device has {cc}").into());
        }
        let include = common::cooperative_groups_includes()?;
        let source = r#"
            #include <cooperative_groups.h>
            namespace cg = cooperative_groups;
            extern "C" __global__ void neighbours(int* out) {
                __shared__ int rank;
                cg::cluster_group cluster = cg::this_cluster();
                if (threadIdx.x == 0) rank = cluster.block_rank();
                cluster.sync();
                int* other = cluster.map_shared_rank(&rank, (cluster.block_rank() + 1) % cluster.num_blocks());
                if (threadIdx.x == 0) out[blockIdx.x] = *other;
                cluster.sync();
            }"#;
        let options = ProgramOptions {
            include_path: include,
            std: Some("c++17".into()),
            ..Default::default()
        };
        let code = Program::new(source, SourceType::Cxx, options)?.compile(CodeType::Cubin, &[])?;
        let kernel = code.get_kernel("neighbours")?.typed::<(*mut i32,)>()?;
        let blocks = 16u32;
        let stream = device.create_stream(Default::default())?;
        let out = zeroed::<i32>(&device, &stream, blocks as usize)?;
        // With a cluster shape the grid counts clusters, as in cuda.core: 4 clusters of 4 blocks.
        let config = LaunchConfig {
            cluster: Some(4.into()),
            ..LaunchConfig::new(blocks / 4, 32)
        };
        // SAFETY: the kernel writes one int per block of a view that holds one per block.
        unsafe { kernel.launch(&stream, &config, (out.view_as::<i32>()?,))? };
        let got = out.to_vec::<i32>(&stream)?;
        let expected: Vec<i32> = (0..blocks as i32).map(|b| (b % 4 + 1) % 4).collect();
        assert_eq!(got, expected);
        println!("clusters of 4: each block read its neighbour's rank: {got:?}");
        Ok(())
    })
}
