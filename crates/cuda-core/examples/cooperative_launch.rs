//! A cooperative launch: the whole grid synchronises between two phases.
mod common;
use common::{main_with, DeviceArray};
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
        let (data, sums) = (
            DeviceArray::<i32>::zeroed(n as usize)?,
            DeviceArray::<i32>::zeroed(n as usize)?,
        );
        let config = LaunchConfig {
            cooperative_launch: true,
            ..LaunchConfig::new(blocks, 256)
        };
        let stream = device.create_stream(Default::default())?;
        // SAFETY: both arrays hold n ints; synchronised below.
        unsafe { cuda_core::launch(&stream, &config, &kernel, (data.ptr, sums.ptr, n))? };
        stream.sync()?;
        assert!(sums.to_host()?.iter().all(|s| *s == n as i32 - 1));
        println!("cooperative launch of {blocks} blocks: grid-wide sync verified");
        Ok(())
    })
}
