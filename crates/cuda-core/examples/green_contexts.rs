//! Green contexts: the GPU's SMs split between two workloads that run at the same time, each on
//! its own partition (cuda.core's `Device.resources`, `SMResource.split`,
//! `Device.create_context`). Each kernel records the SMs its blocks ran on, so the program
//! prints what each workload got, and checks both results.
mod common;
use common::{buffer_from, main_with};
use cuda_core::{
    launch, CodeType, ContextOptions, Device, LaunchConfig, Program, ProgramOptions, SMResourceOptions, SourceType,
};
use std::collections::BTreeSet;

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let sm = match device.resources().sm() {
            Ok(sm) => sm,
            Err(e) if e.load_error().is_some() => {
                println!("skipped: green contexts need a CUDA 12.4 driver: {e}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        println!(
            "{}: {} SMs (partitions of at least {}, in steps of {})",
            device.name()?,
            sm.sm_count(),
            sm.min_partition_size(),
            sm.coscheduled_alignment()
        );

        // Two equal groups, as large as the driver makes them (it rounds to its granularity and
        // refuses sizes it cannot place).
        let step = sm.coscheduled_alignment().max(2);
        let mut half = sm.sm_count() / 2 / step * step;
        let (groups, rest) = loop {
            if half < sm.min_partition_size().max(step) {
                return Err("the device cannot be split into two green contexts".into());
            }
            match sm.split(&SMResourceOptions::with_counts([half, half]), false) {
                Ok((groups, rest)) if groups.len() == 2 => break (groups, rest),
                Ok(_) => {}
                Err(e) if e.driver_status().is_some() && e.load_error().is_none() => {}
                Err(e) => return Err(e.into()),
            }
            half -= step;
        };
        println!(
            "split: {} + {} SMs, {} left over",
            groups[0].sm_count(),
            groups[1].sm_count(),
            rest.sm_count()
        );

        let source = r#"
            __device__ void note_sm(unsigned* sms) {
                if (threadIdx.x == 0) {
                    unsigned id;
                    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
                    sms[blockIdx.x] = id;
                }
            }
            // y = a * x + y, with a few rounds of work per element.
            extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n, unsigned* sms) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) {
                    float v = y[i];
                    for (int r = 0; r < 64; ++r) v = a * x[i] + v * 0.5f;
                    y[i] = v;
                }
                note_sm(sms);
            }
            // out[i] = i * i (mod 2^32), as integers.
            extern "C" __global__ void squares(unsigned* out, unsigned n, unsigned* sms) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) out[i] = i * i;
                note_sm(sms);
            }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
        let (saxpy, squares) = (code.get_kernel("saxpy")?, code.get_kernel("squares")?);

        // One green context per group, one stream in each.
        let mut streams = Vec::new();
        for group in &groups {
            let green = device.create_context(ContextOptions::new([group.clone()]))?;
            streams.push(green.create_stream(Default::default())?);
        }
        let n = 1u32 << 22;
        let blocks = n.div_ceil(256);
        let config = LaunchConfig::new(blocks, 256);
        let x: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
        let (sa, sb) = (&streams[0], &streams[1]);
        let dx = buffer_from(&device, sa, &x)?;
        let dy = buffer_from(&device, sa, &vec![1.0f32; n as usize])?;
        let out = device.allocate(n as usize * 4, sb)?;
        let sms_a = device.allocate(blocks as usize * 4, sa)?;
        let sms_b = device.allocate(blocks as usize * 4, sb)?;
        // Both queued before either is waited for: the partitions work at the same time.
        // SAFETY: the buffers hold n floats, n u32s and one u32 per block, as the kernels use them.
        unsafe {
            launch(sa, &config, &saxpy, (2.0f32, &dx, &dy, n, &sms_a))?;
            launch(sb, &config, &squares, (&out, n, &sms_b))?;
        }

        let y = dy.to_vec::<f32>(sa)?;
        let expected = |xi: f32| (0..64).fold(1.0f32, |v, _| 2.0 * xi + v * 0.5);
        assert!(x.iter().zip(&y).all(|(xi, yi)| *yi == expected(*xi)), "saxpy result");
        let got = out.to_vec::<u32>(sb)?;
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, v)| *v == (i as u32).wrapping_mul(i as u32)),
            "squares result"
        );

        // The driver documents when work may run on more SMs than provisioned (never fewer): on
        // compute capability 9.x, a set of 2 more SMs once a module using dynamic parallelism
        // is loaded; under MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the MPS client's SMs. The
        // check allows for both.
        let mps = device.attribute(cuda_sys::driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED)? != 0;
        for (name, stream, sms) in [("saxpy", sa, &sms_a), ("squares", sb, &sms_b)] {
            let used: BTreeSet<u32> = sms.to_vec::<u32>(stream)?.into_iter().collect();
            let provisioned = stream.resources()?.sm()?.sm_count();
            println!(
                "{name}: green context of {provisioned} SMs; its {blocks} blocks ran on {} SMs; result verified",
                used.len()
            );
            let bound = if mps { sm.sm_count() } else { provisioned + 2 };
            assert!(used.len() as u32 <= bound, "{name} ran outside its partition");
        }
        Ok(())
    })
}
