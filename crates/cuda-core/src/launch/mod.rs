//! Kernel launches: [`LaunchConfig`] and [`Dim3`] (`config`), kernel arguments ([`DeviceRepr`],
//! [`KernelArgs`]: `args`), [`launch`] itself (here), [`TypedKernel`] (`typed`), and a kernel's
//! attributes and occupancy on a device (`occupancy`).
//!
//! Launch uses devices, streams (a launch is a stream operation: captured, it hands the kernel to
//! the graph), memory (buffers and views as arguments, kept alive as by any operation) and
//! compiled kernels ([`crate::compile`]); graphs build on it.

mod args;
mod config;
mod occupancy;
mod typed;

pub use args::{ArgFor, ArgsFor, DeviceRepr, KernelArg, KernelArgs};
pub use config::{Dim3, LaunchConfig};
pub use occupancy::MaxPotentialBlockSize;
pub use typed::TypedKernel;

use crate::compile::Kernel;
use crate::device::Device;
use crate::error::Check;
use crate::memory::enqueue_using;
use crate::stream::capture::Capture;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// Launches `kernel` on `stream` with `args`: one `cuLaunchKernel` (`cuLaunchKernelEx` when the
/// configuration has launch attributes), no heap allocation.
///
/// Buffers and views among the arguments ([`KernelArg`]) stay alive until the kernel is done:
/// the launch is ordered after their allocation and their free after the launch, on any stream,
/// and a stream being captured hands them to the graph, which holds them for every launch.
///
/// # Safety
/// The kernel can do anything its code does. The caller guarantees that `args` match the kernel's
/// parameters in number, order and type ([`TypedKernel`] checks number and sizes once), that the
/// kernel stays inside the buffers and views it is given, that every raw pointer argument is
/// valid for the accesses the kernel makes for as long as the kernel runs (until the stream has
/// passed it), and that the kernel does not race with other work touching the same memory. On a
/// stream being captured into a graph the kernel runs at every launch of that graph: raw
/// pointers must stay valid for all of them (hand their memory to the graph with
/// [`crate::graph::GraphBuilder::keep_alive`]); the graph keeps the kernel itself loaded. Outside a capture, the kernel's code must stay loaded until the launch has run: keep
/// the [`Kernel`] (or its [`crate::ObjectCode`]) until the stream has passed the launch.
#[inline]
pub unsafe fn launch<A: KernelArgs>(stream: &Stream, config: &LaunchConfig, kernel: &Kernel, args: A) -> Result<()> {
    // The stream carries its device's limits (a default stream: the current device's).
    let limits = match stream.limits() {
        Some(l) => l,
        None => launch_device(stream)?.limits()?,
    };
    config.check(limits)?;
    if config.cooperative_launch {
        check_cooperative_grid(config, kernel, &launch_device(stream)?)?;
    }
    let op = |capture: Option<&mut Capture<'_>>| {
        if let Some(capture) = capture {
            // The graph runs the kernel at every launch: it keeps the kernel's code loaded (held
            // once, however many launches of it the capture records).
            capture.hold_shared(kernel.object_code().keeper());
            // Its kernel nodes name the kernel (read back through `GraphNode::kernel`).
            capture.note_kernel(kernel.handle() as usize, || std::sync::Arc::new(kernel.clone()));
        }
        // SAFETY: forwarded to the caller; the kernel is live (and held by a capturing graph).
        unsafe { launch_now(stream, config, kernel, &args) }
    };
    if A::CARRIES_BUFFERS {
        // Buffer arguments: their memory stays alive until the kernel is done (the stream is
        // remembered by each buffer, or a capturing graph holds them), as for any operation.
        return args.with_buffers(|buffers| enqueue_using(stream, buffers, op));
    }
    stream.enqueue(op)
}

/// The device a launch on `stream` runs on: the stream's, or for a default stream the current
/// one.
#[cold]
fn launch_device(stream: &Stream) -> Result<Device> {
    match stream.device() {
        Some(d) => Ok(d),
        None => Device::current(),
    }
}

/// A cooperative launch's grid must fit on the device at once (as `cuda.core` checks): at most
/// the blocks per multiprocessor the kernel's occupancy allows, times the multiprocessors. (Two
/// occupancy queries, for cooperative launches only.)
#[cold]
fn check_cooperative_grid(config: &LaunchConfig, kernel: &Kernel, device: &Device) -> Result<()> {
    // Checked by `LaunchConfig::check`: a block fits in u32.
    let block = u32::try_from(config.block.volume()).unwrap_or(u32::MAX);
    let per_sm = kernel.max_active_blocks_per_multiprocessor(device, block, config.shmem_size as usize)?;
    let limit = u64::from(per_sm) * u64::from(device.multiprocessor_count()?);
    let g = config.grid_in_blocks();
    if g.volume() > limit {
        return Err(CudaError::InvalidArgument(format!(
            "The specified grid size ({} * {} * {}) exceeds the limit ({limit})",
            g.x, g.y, g.z
        )));
    }
    Ok(())
}

/// The launch itself: one driver call.
///
/// # Safety
/// As [`launch`].
#[inline(always)]
unsafe fn launch_now<A: KernelArgs>(stream: &Stream, config: &LaunchConfig, kernel: &Kernel, args: &A) -> Result<()> {
    if !config.has_attributes() {
        // Without launch attributes the classic entry point does the same work, and is the one
        // raw code calls: same cost.
        return args.with_params(|params| {
            // SAFETY: params point to the arguments, which the caller vouches for; a CUkernel is
            // accepted where a CUfunction is expected.
            unsafe {
                driver::cuLaunchKernel(
                    kernel.handle() as driver::CUfunction,
                    config.grid.x,
                    config.grid.y,
                    config.grid.z,
                    config.block.x,
                    config.block.y,
                    config.block.z,
                    config.shmem_size,
                    stream.handle(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .check("cuLaunchKernel")
        });
    }
    // SAFETY: an all-zero CUlaunchAttribute is a valid (ignored) value; only those filled in are
    // passed to the driver.
    let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
    let cfg = config.driver_config(stream.handle(), &mut attrs);
    args.with_params(|params| {
        // SAFETY: cfg and its attributes live across the call; params point to the arguments,
        // which the caller vouches for; a CUkernel is accepted where a CUfunction is expected.
        unsafe {
            driver::cuLaunchKernelEx(
                &cfg,
                kernel.handle() as driver::CUfunction,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .check("cuLaunchKernelEx")
    })
}
