//! All-reduce bus bandwidth on two GPUs, 8 B to 1 GiB: `cuda_core::nccl` against the same NCCL
//! calls made raw (`cuda_sys::nccl`, communicators of their own, the same buffers and streams),
//! interleaved in one process. Bus bandwidth is nccl-tests' `busbw`: the bytes of one rank's data
//! over the time of one all-reduce, times `2 (n - 1) / n`. One process drives both GPUs, each
//! iteration a group of one all-reduce per GPU (float sums, out of place).
//!
//! Prints a table (and with `OUT` set writes `$OUT/nccl_busbw.json`). Fewer than two GPUs or no
//! NCCL: says so and exits successfully. `NCCL_NVLS_ENABLE=0` is set before NCCL starts.

use cuda_core::nccl::{group, Communicator, ReduceOp};
use cuda_core::{Device, Stream, TypedBuffer};
use cuda_sys::nccl as sys;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("nccl_busbw: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    if let Err(e) = cuda_core::nccl::version() {
        println!("nccl_busbw: no NCCL here ({e}); skipped");
        return Ok(());
    }
    let count = cuda_core::device_count()?;
    if count < 2 {
        println!("nccl_busbw: {count} GPU(s) here, two are needed; skipped");
        return Ok(());
    }
    let devices = [Device::new(0)?, Device::new(1)?];
    let streams: Vec<Stream> = devices
        .iter()
        .map(|d| {
            d.set_current()?;
            d.create_stream(Default::default())
        })
        .collect::<Result<_, _>>()?;
    let comms = Communicator::init_all(&devices)?;
    let mut raw: [sys::ncclComm_t; 2] = [std::ptr::null_mut(); 2];
    // SAFETY: room for two handles, two device ordinals.
    unsafe { sys::ncclCommInitAll(raw.as_mut_ptr(), 2, [0, 1].as_ptr()) }.result()?;

    let max_bytes = 1usize << 30;
    let max = max_bytes / 4;
    let send: Vec<TypedBuffer<f32>> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| TypedBuffer::allocate(d, max, s))
        .collect::<Result<_, _>>()?;
    let recv: Vec<TypedBuffer<f32>> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| TypedBuffer::allocate(d, max, s))
        .collect::<Result<_, _>>()?;
    for (b, s) in send.iter().chain(&recv).zip(streams.iter().chain(&streams)) {
        b.fill(1.0, s)?;
    }
    let sync = |streams: &[Stream]| -> Result<(), cuda_core::CudaError> {
        for s in streams {
            s.sync()?;
        }
        Ok(())
    };
    sync(&streams)?;

    let safe = |n: usize| -> Result<(), cuda_core::CudaError> {
        group(|g| {
            for k in 0..2 {
                g.all_reduce(
                    &comms[k],
                    send[k].slice(..n)?,
                    recv[k].slice(..n)?,
                    ReduceOp::Sum,
                    &streams[k],
                )?;
            }
            Ok(())
        })
    };
    let raw_call = |n: usize| -> Result<(), Box<dyn std::error::Error>> {
        // SAFETY: the buffers hold at least n floats and live to the end of the run; the streams
        // and raw communicators are live; the group is closed below.
        unsafe {
            sys::ncclGroupStart().result()?;
            for k in 0..2 {
                sys::ncclAllReduce(
                    send[k].handle() as *const _,
                    recv[k].handle() as *mut _,
                    n,
                    sys::ncclDataType_t::ncclFloat32,
                    sys::ncclRedOp_t::ncclSum,
                    raw[k],
                    streams[k].handle() as sys::cudaStream_t,
                )
                .result()?;
            }
            sys::ncclGroupEnd().result()?;
        }
        Ok(())
    };

    println!("nccl_busbw: all-reduce of f32 over 2 GPUs, one process; busbw = bytes / time * 2(n-1)/n");
    println!("| bytes | cuda-core time (us) | raw time (us) | cuda-core busbw (GB/s) | raw busbw (GB/s) | ratio |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    let mut bytes = 8usize;
    while bytes <= max_bytes {
        let n = bytes / 4;
        let iters = if bytes >= 64 << 20 {
            10
        } else if bytes >= 1 << 20 {
            50
        } else {
            200
        };
        for _ in 0..5 {
            safe(n)?;
            raw_call(n)?;
        }
        sync(&streams)?;
        let (mut t_safe, mut t_raw) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..iters {
                safe(n)?;
            }
            sync(&streams)?;
            t_safe.push(start.elapsed().as_secs_f64() / iters as f64);
            let start = Instant::now();
            for _ in 0..iters {
                raw_call(n)?;
            }
            sync(&streams)?;
            t_raw.push(start.elapsed().as_secs_f64() / iters as f64);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (ts, tr) = (median(&mut t_safe), median(&mut t_raw));
        let bus = |t: f64| bytes as f64 / t / 1e9 * 2.0 * (2.0 - 1.0) / 2.0;
        println!(
            "| {bytes} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} |",
            ts * 1e6,
            tr * 1e6,
            bus(ts),
            bus(tr),
            ts / tr
        );
        rows.push(format!(
            "{{\"bytes\":{bytes},\"safe_us\":{:.3},\"raw_us\":{:.3},\"safe_busbw\":{:.3},\"raw_busbw\":{:.3}}}",
            ts * 1e6,
            tr * 1e6,
            bus(ts),
            bus(tr)
        ));
        bytes *= 8;
        if bytes > max_bytes && bytes / 8 < max_bytes {
            bytes = max_bytes;
        }
    }
    if let Some(out) = std::env::var_os("OUT") {
        let path = std::path::Path::new(&out).join("nccl_busbw.json");
        std::fs::write(&path, format!("[{}]\n", rows.join(",\n")))?;
    }
    for c in raw {
        // SAFETY: the raw communicators' work is done (synchronised above) and not used again.
        unsafe { sys::ncclCommDestroy(c) }.result()?;
    }
    drop(comms);
    Ok(())
}
