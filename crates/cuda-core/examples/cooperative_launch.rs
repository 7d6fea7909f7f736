//! A cooperative launch: the whole grid synchronises between two phases.
mod common;
use common::{main_with, zeroed};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType};

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let include = common::cooperative_groups_includes()?;
        let source = r#"
            #include <cooperative_groups.h>
            namespace cg = cooperative_groups;
            extern "C" __global__ void two_phase(int* data, int* sums, unsigned n) {
                cg::grid_group grid = cg::this_grid();
                unsigned i = grid.thread_rank();
                if (i < n) data[i] = i;
                grid.sync();  // every write above is visible below, across blocks
                if (i < n) sums[i] = data[i] + data[n - 1 - i];
            }"#;
        let options = ProgramOptions {
            include_path: include,
            ..Default::default()
        };
        let code = Program::new(source, SourceType::Cxx, options)?.compile(CodeType::Cubin, &[])?;
        let kernel = code.get_kernel("two_phase")?;
        let per_sm = kernel.max_active_blocks_per_multiprocessor(&device, 256, 0)?;
        let blocks = per_sm * device.multiprocessor_count()?; // all resident at once
        let n = blocks * 256;
        let stream = device.create_stream(Default::default())?;
        let (data, sums) = (
            zeroed::<i32>(&device, &stream, n as usize)?,
            zeroed::<i32>(&device, &stream, n as usize)?,
        );
        let config = LaunchConfig {
            cooperative_launch: true,
            ..LaunchConfig::new(blocks, 256)
        };
        let kernel = kernel.typed::<(*mut i32, *mut i32, u32)>()?;
        // SAFETY: the kernel reads and writes n ints of views that hold n ints.
        unsafe { kernel.launch(&stream, &config, (data.view_as::<i32>()?, sums.view_as::<i32>()?, n))? };
        assert!(sums.to_vec::<i32>(&stream)?.iter().all(|s| *s == n as i32 - 1));
        println!("cooperative launch of {blocks} blocks: grid-wide sync verified");
        Ok(())
    })
}
