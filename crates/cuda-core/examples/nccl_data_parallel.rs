//! A data-parallel training step with NCCL, one process per GPU: each rank computes the gradient
//! of a small linear model on its own shard of the data with a kernel, the gradients are averaged
//! with an all-reduce, each rank applies the average, and at the end the replicas are gathered
//! and checked identical (and the loss lower than at the start).
//!
//! Run it plainly: it starts one process per GPU of this machine (one rank, in this process, on a
//! single-GPU machine). Across hosts, start each rank yourself with the same id:
//! `NCCL_EXAMPLE_ID=<hex of UniqueId> NCCL_EXAMPLE_RANK=r NCCL_EXAMPLE_NRANKS=n` (rank 0 prints the
//! id it made when started without one; `NCCL_EXAMPLE_DEVICE` picks the local GPU). Without NCCL
//! the example says how to install it and exits successfully.
mod common;
use common::main_with;
use cuda_core::nccl::{Communicator, ReduceOp, UniqueId};
use cuda_core::{CodeType, Device, LaunchConfig, Program, ProgramOptions, SourceType, TypedBuffer};

const SOURCE: &str = r#"
extern "C" __global__ void gradient(const float* x, const float* y, const float* w, float* grad,
                                    unsigned samples, unsigned dims) {
    unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dims) return;
    float g = 0.0f;
    for (unsigned i = 0; i < samples; ++i) {
        float p = 0.0f;
        for (unsigned k = 0; k < dims; ++k) p += w[k] * x[i * dims + k];
        g += (p - y[i]) * x[i * dims + j];
    }
    grad[j] = 2.0f * g / samples;
}
extern "C" __global__ void apply(float* w, const float* grad, float rate, unsigned dims) {
    unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < dims) w[j] -= rate * grad[j];
}"#;

const DIMS: usize = 16;
const SAMPLES: usize = 256;
const STEPS: usize = 50;

/// This rank's shard: inputs and targets of `y = x · truth` with a rank-dependent sample set.
fn shard(rank: usize) -> (Vec<f32>, Vec<f32>) {
    let truth: Vec<f32> = (0..DIMS).map(|k| (k as f32 - 7.5) / 8.0).collect();
    let mut x = Vec::with_capacity(SAMPLES * DIMS);
    let mut y = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let row: Vec<f32> = (0..DIMS)
            .map(|k| (((rank * 7919 + i * 31 + k * 17) % 101) as f32 / 50.0) - 1.0)
            .collect();
        y.push(row.iter().zip(&truth).map(|(a, b)| a * b).sum());
        x.extend(row);
    }
    (x, y)
}

fn loss(x: &[f32], y: &[f32], w: &[f32]) -> f32 {
    let mut l = 0.0;
    for i in 0..SAMPLES {
        let p: f32 = (0..DIMS).map(|k| w[k] * x[i * DIMS + k]).sum();
        l += (p - y[i]) * (p - y[i]);
    }
    l / SAMPLES as f32
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn main() {
    main_with(|| {
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        if let Err(e) = cuda_core::nccl::version() {
            println!("nccl_data_parallel: NCCL is not available here ({e}); skipped");
            return Ok(());
        }
        let (rank, nranks, id, device) = match env("NCCL_EXAMPLE_RANK") {
            Some(rank) => {
                let rank: usize = rank.parse()?;
                let nranks: usize = env("NCCL_EXAMPLE_NRANKS")
                    .ok_or("NCCL_EXAMPLE_NRANKS is not set")?
                    .parse()?;
                let id: UniqueId = env("NCCL_EXAMPLE_ID").ok_or("NCCL_EXAMPLE_ID is not set")?.parse()?;
                let device = match env("NCCL_EXAMPLE_DEVICE") {
                    Some(d) => d.parse()?,
                    None => rank % cuda_core::device_count()?.max(1),
                };
                (rank, nranks, id, device)
            }
            None => {
                // The launcher: rank 0 here, one child process per other GPU.
                let nranks = cuda_core::device_count()?.max(1);
                let id = UniqueId::new()?;
                println!("nccl_data_parallel: {nranks} rank(s), unique id {id}");
                (0, nranks, id, 0)
            }
        };
        let mut children = Vec::new();
        if env("NCCL_EXAMPLE_RANK").is_none() {
            for r in 1..nranks {
                children.push(
                    std::process::Command::new(std::env::current_exe()?)
                        .env("NCCL_EXAMPLE_RANK", r.to_string())
                        .env("NCCL_EXAMPLE_NRANKS", nranks.to_string())
                        .env("NCCL_EXAMPLE_ID", id.to_string())
                        .env("NCCL_EXAMPLE_DEVICE", r.to_string())
                        .spawn()?,
                );
            }
        }
        let result = train(rank, nranks, &id, device);
        for mut child in children {
            let status = child.wait()?;
            if !status.success() {
                return Err(format!("a rank failed: {status}").into());
            }
        }
        result
    })
}

fn train(rank: usize, nranks: usize, id: &UniqueId, device: usize) -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::new(device)?;
    device.set_current()?;
    let stream = device.create_stream(Default::default())?;
    let comm = Communicator::init(rank, nranks, id, &device)?;
    let code = Program::new(SOURCE, SourceType::Cxx, ProgramOptions::default())?.compile(CodeType::Cubin, &[])?;
    let gradient = code
        .get_kernel("gradient")?
        .typed::<(*const f32, *const f32, *const f32, *mut f32, u32, u32)>()?;
    let apply = code.get_kernel("apply")?.typed::<(*mut f32, *const f32, f32, u32)>()?;

    let (x_host, y_host) = shard(rank);
    let x = TypedBuffer::from_host_blocking(&device, &x_host, &stream)?;
    let y = TypedBuffer::from_host_blocking(&device, &y_host, &stream)?;
    let w = TypedBuffer::from_host_blocking(&device, &[0.0f32; DIMS], &stream)?;
    let grad = TypedBuffer::<f32>::allocate(&device, DIMS, &stream)?;
    let before = loss(&x_host, &y_host, &w.to_vec_blocking(&stream)?);
    let config = LaunchConfig::new(1, DIMS as u32);
    for _ in 0..STEPS {
        // SAFETY: gradient reads SAMPLES x DIMS inputs, SAMPLES targets and DIMS weights, and
        // writes DIMS gradients: each buffer holds exactly that many floats.
        unsafe {
            gradient.launch(
                &stream,
                &config,
                (
                    x.read_only(),
                    y.read_only(),
                    w.read_only(),
                    grad.view(),
                    SAMPLES as u32,
                    DIMS as u32,
                ),
            )?
        };
        // The data-parallel step: every rank gets the average of all ranks' gradients.
        comm.all_reduce_in_place(&grad, ReduceOp::Avg, &stream)?;
        // SAFETY: apply updates DIMS weights from DIMS gradients.
        unsafe { apply.launch(&stream, &config, (w.view(), grad.read_only(), 0.1f32, DIMS as u32))? };
    }
    // The replicas must be identical: gather every rank's weights and compare bit for bit.
    let all = TypedBuffer::<f32>::allocate(&device, DIMS * nranks, &stream)?;
    comm.all_gather(&w, &all, &stream)?;
    let all = all.to_vec_blocking(&stream)?;
    let mine = w.to_vec_blocking(&stream)?;
    for (r, replica) in all.chunks(DIMS).enumerate() {
        if replica.iter().zip(&mine).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("rank {rank}: the replica of rank {r} differs from this one").into());
        }
    }
    comm.check()?;
    let after = loss(&x_host, &y_host, &mine);
    if after >= before {
        return Err(format!("rank {rank}: the loss did not fall ({before} -> {after})").into());
    }
    println!(
        "rank {rank}/{nranks} on device {}: {STEPS} steps, loss {before:.4} -> {after:.6}, {nranks} replicas identical",
        device.device_id()
    );
    comm.finalize()?;
    Ok(())
}
