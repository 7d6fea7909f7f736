//! NCCL, NVIDIA's collective communication library: all-reduce, broadcast, reduce, all-gather,
//! reduce-scatter, send and receive between GPUs, in one process, in several, or on several
//! hosts, as safe as every other operation of this crate.
//!
//! NCCL is loaded at run time like every CUDA library here (`cuda_sys::nccl`, found by
//! `cuda-pathfinder`: the `nvidia-nccl-cu13` wheel, conda, `NCCL_HOME`, the system loader);
//! nothing links at build time, and a machine without NCCL gets an error saying how to install it.
//!
//! - [`UniqueId`]: what every rank of a communicator is created from (`ncclGetUniqueId`); it
//!   travels over whatever channel the program already has (hex text, serde, raw bytes).
//! - [`Communicator`]: one rank of a communicator, on one device (`init`, `init_all`, `split`,
//!   `finalize`, `abort`, `check`), with the collectives as methods (`all_reduce`, `broadcast`,
//!   `reduce`, `all_gather`, `reduce_scatter`, `send`, `recv` and their in-place forms).
//! - [`group`]: several calls as one NCCL group, closed when the closure returns.
//! - [`NcclType`]: the element types NCCL reduces (integers, `f16`, `bf16`, `f32`, `f64`);
//!   [`ReduceOp`], `PreMulSum` included.
//!
//! **Every collective is a stream operation, like a copy.** Its buffers are held until the work
//! is done on the stream it was queued on (the buffer remembers the stream, and its free waits for
//! it), and a collective queued on a stream being captured is recorded into the graph, which then
//! holds the buffers and the communicator for as long as it may launch. Sizes, counts, ranks,
//! devices and element types are checked before NCCL sees them.
//!
//! **Failures.** NCCL errors carry `ncclGetLastError`'s text. [`Communicator::check`] reads
//! `ncclCommGetAsyncError` (a peer that died, a network error). With a watchdog
//! ([`CommunicatorOptions::watchdog`]), a communicator whose queued work does not finish within
//! the time-out, or that reports an asynchronous error, is aborted: its kernels stop, the streams
//! drain, and every later call says why. A communicator dropped is released on the crate's release
//! thread once its work is done (at once when the watchdog's time-out passes or NCCL reports an
//! error): the dropping thread never waits.
//!
//! - `types`: [`UniqueId`], [`NcclType`], [`DataType`], [`ReduceOp`];
//! - `comm`: [`Communicator`], creation, queries, finalize and abort;
//! - `collectives`: the collectives, on a [`Communicator`] and in a [`Group`];
//! - `ops`: how a call is queued (the data it takes, one call, [`group`]);
//! - `checks`: the argument checks, made before NCCL sees anything;
//! - `watchdog`: the watchdog and the release of dropped communicators.

mod checks;
mod collectives;
mod comm;
mod ops;
#[cfg(test)]
mod tests;
mod types;
mod watchdog;

pub use comm::{Communicator, CommunicatorOptions};
pub use ops::{group, Group, RecvData, Region, SendData};
pub use types::{DataType, NcclType, ReduceOp, UniqueId};

use crate::error::Check;
use crate::CudaError;
use cuda_sys::nccl as sys;

/// The version of the NCCL library loaded (`ncclGetVersion`), as `(major, minor, patch)`.
pub fn version() -> crate::Result<(u32, u32, u32)> {
    let mut v = 0;
    // SAFETY: `v` is a valid place for an int.
    let status = unsafe { sys::ncclGetVersion(&mut v) };
    check(status, "ncclGetVersion", None)?;
    let v = v.max(0) as u32;
    Ok((v / 10000, (v % 10000) / 100, v % 100))
}

/// Runs `f`, NCCL calls on a communicator of `context` (a device's primary context), with a
/// current context NCCL can work from. NCCL switches devices itself, through the runtime
/// (`cudaSetDevice` to each communicator's device, and on success back to the device it found;
/// after an error the last communicator's device stays current). When the calling thread's
/// current context is a primary context this crate holds, it is the one the runtime goes back
/// to, so `f` runs as it is, as raw NCCL code does, and that context is made current again
/// afterwards if NCCL left another. Otherwise (no current context, a created or green one,
/// another library's) `f` runs with `context` current ([`crate::Context::with_current`], which
/// restores the previous context after).
pub(crate) fn in_runtime_context<T>(
    context: &crate::Context,
    f: impl FnOnce() -> crate::Result<T>,
) -> crate::Result<T> {
    let previous = crate::Context::current_handle()?;
    if previous != context.handle() && !crate::Device::is_retained_primary(previous) {
        return context.with_current(f);
    }
    let result = f();
    let restored = match crate::Context::current_handle() {
        Ok(now) if now == previous => Ok(()),
        // SAFETY: `previous` is a primary context this crate retained (or `context`, a primary
        // context too), alive for the life of the process.
        _ => unsafe { cuda_sys::driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent"),
    };
    // The call's own error first.
    let value = result?;
    restored.map(|()| value)
}

/// `Ok` for `ncclSuccess`, else the error with NCCL's own words (`ncclGetLastError`).
pub(crate) fn check(status: sys::ncclResult_t, call: &'static str, comm: Option<sys::ncclComm_t>) -> crate::Result<()> {
    match status.result() {
        Ok(()) => Ok(()),
        Err(e) => Err(nccl_error(call, e, comm)),
    }
}

/// The error of `call` failing with `e`: its name and description, and what NCCL says about it.
pub(crate) fn nccl_error(call: &'static str, e: cuda_sys::NcclError, comm: Option<sys::ncclComm_t>) -> CudaError {
    let mut message = e.to_string();
    if e.load_error().is_none() {
        // SAFETY: ncclGetLastError takes a live communicator or NULL and returns a static,
        // NUL-terminated string (or NULL).
        let last = unsafe { sys::ncclGetLastError(comm.unwrap_or(std::ptr::null_mut())) };
        if let Ok(p) = last {
            if !p.is_null() {
                // SAFETY: non-null, NUL-terminated, owned by NCCL for the process.
                let text = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
                let text = text.trim();
                if !text.is_empty() {
                    message.push_str("; NCCL says: ");
                    message.push_str(text);
                }
            }
        }
    }
    CudaError::Toolchain { call, message }
}
