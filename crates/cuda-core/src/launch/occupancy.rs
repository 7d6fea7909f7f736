//! A kernel's occupancy (`cuda.core`'s `KernelOccupancy`): how many blocks or clusters of a
//! launch shape fit at once, the dynamic shared memory left per block, the largest cluster, and
//! the block size that fills a device best. (The attributes are in `compile::object_code`.)

use super::LaunchConfig;
use crate::compile::Kernel;
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::cell::Cell;
use std::ffi::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The result of [`Kernel::max_potential_block_size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPotentialBlockSize {
    /// The fewest blocks that reach the best occupancy on the whole device.
    pub min_grid_size: u32,
    /// The block size (threads) that reaches it.
    pub max_block_size: u32,
}

thread_local! {
    /// The shared-memory function of the [`Kernel::max_potential_block_size_with`] call running
    /// on this thread (a `*const SmemFn<F>`), null when none is.
    static SMEM_FN: Cell<*const ()> = const { Cell::new(std::ptr::null()) };
}

/// What the driver's callback reaches: the caller's function, and a panic it raised.
struct SmemFn<'a, F> {
    f: &'a F,
    panic: Cell<Option<Box<dyn Any + Send>>>,
}

/// The `CUoccupancyB2DSize` given to the driver for a function of type `F`.
unsafe extern "C" fn smem_trampoline<F: Fn(u32) -> usize>(block_size: c_int) -> usize {
    let state = SMEM_FN.with(Cell::get);
    if state.is_null() {
        // Not called from inside `max_potential_block_size_with` on this thread (the driver
        // calls back synchronously on the calling thread): nothing to ask.
        return 0;
    }
    // SAFETY: a non-null SMEM_FN is set only by `max_potential_block_size_with::<F>`, on this
    // thread, to a `SmemFn<F>` on its stack, for exactly the duration of the driver call that
    // was given `smem_trampoline::<F>` (a nested call of another type sets and restores its own
    // pointer before this frame is reached again), so the pointer is live and of this type.
    let state = unsafe { &*(state as *const SmemFn<'_, F>) };
    let earlier = state.panic.take();
    if earlier.is_some() {
        // The function panicked on an earlier block size: the answer is discarded anyway.
        state.panic.set(earlier);
        return 0;
    }
    let block_size = u32::try_from(block_size).unwrap_or(0);
    // A panic must not unwind into the driver: it is kept and resumed after the call returns.
    match catch_unwind(AssertUnwindSafe(|| (state.f)(block_size))) {
        Ok(bytes) => bytes,
        Err(panic) => {
            state.panic.set(Some(panic));
            0
        }
    }
}

/// Restores the previous [`SMEM_FN`] when dropped (also when the driver call errs).
struct RestoreSmemFn(*const ());

impl Drop for RestoreSmemFn {
    fn drop(&mut self) {
        SMEM_FN.with(|c| c.set(self.0));
    }
}

impl Kernel {
    fn function_on(&self, device: &Device) -> Result<driver::CUfunction> {
        device.primary_context()?.with_current(|| {
            let mut f: driver::CUfunction = std::ptr::null_mut();
            // SAFETY: the kernel is live; the device's context is current.
            unsafe { driver::cuKernelGetFunction(&mut f, self.handle()) }.check("cuKernelGetFunction")?;
            Ok(f)
        })
    }

    /// How many blocks of `block_size` threads fit on one multiprocessor of `device`.
    pub fn max_active_blocks_per_multiprocessor(
        &self,
        device: &Device,
        block_size: u32,
        dynamic_shared: usize,
    ) -> Result<u32> {
        let block_size = i32::try_from(block_size).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "max_active_blocks_per_multiprocessor: a block of {block_size} threads is more than any device has"
            ))
        })?;
        let f = self.function_on(device)?;
        let mut blocks = 0;
        // SAFETY: f is valid in the device's context; out-pointer to a local.
        unsafe { driver::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, f, block_size, dynamic_shared) }
            .check("cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
        Ok(blocks.max(0) as u32)
    }

    /// How many clusters of `config`'s shape can be active at once on `device`
    /// (`cuOccupancyMaxActiveClusters`; compute capability 9.0+).
    pub fn max_active_clusters(&self, device: &Device, config: &LaunchConfig) -> Result<u32> {
        config.check(device.limits()?)?;
        let f = self.function_on(device)?;
        // SAFETY: zeroed attributes are valid (ignored) values; only those filled in are passed.
        let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
        let cfg = config.driver_config(std::ptr::null_mut(), &mut attrs);
        let mut n = 0;
        device.primary_context()?.with_current(|| {
            // SAFETY: f belongs to the current context; cfg and attrs live across the call.
            unsafe { driver::cuOccupancyMaxActiveClusters(&mut n, f, &cfg) }.check("cuOccupancyMaxActiveClusters")
        })?;
        Ok(n.max(0) as u32)
    }

    /// The block size that maximises occupancy on `device`, and the grid that fills it.
    pub fn max_potential_block_size(
        &self,
        device: &Device,
        dynamic_shared: usize,
        block_size_limit: u32,
    ) -> Result<MaxPotentialBlockSize> {
        let block_size_limit = i32::try_from(block_size_limit).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "max_potential_block_size: a block size limit of {block_size_limit} is more than any device has (0 means no limit)"
            ))
        })?;
        let f = self.function_on(device)?;
        let (mut grid, mut block) = (0, 0);
        // SAFETY: f is valid in the device's context; no size callback; out-pointers to locals.
        unsafe {
            driver::cuOccupancyMaxPotentialBlockSize(&mut grid, &mut block, f, None, dynamic_shared, block_size_limit)
        }
        .check("cuOccupancyMaxPotentialBlockSize")?;
        Ok(MaxPotentialBlockSize {
            min_grid_size: grid.max(0) as u32,
            max_block_size: block.max(0) as u32,
        })
    }

    /// [`max_potential_block_size`](Self::max_potential_block_size) for a kernel whose dynamic
    /// shared memory depends on its block size: `dynamic_shared(block_size)` says how many bytes
    /// a block of `block_size` threads needs (`cuda.core`'s `CUoccupancyB2DSize` callable). The
    /// driver calls it for each block size it considers, on this thread, during this call; a
    /// panic in it is resumed here once the driver has returned.
    pub fn max_potential_block_size_with<F: Fn(u32) -> usize>(
        &self,
        device: &Device,
        dynamic_shared: F,
        block_size_limit: u32,
    ) -> Result<MaxPotentialBlockSize> {
        let block_size_limit = i32::try_from(block_size_limit).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "max_potential_block_size_with: a block size limit of {block_size_limit} is more than any device has (0 means no limit)"
            ))
        })?;
        let f = self.function_on(device)?;
        let state = SmemFn {
            f: &dynamic_shared,
            panic: Cell::new(None),
        };
        let (mut grid, mut block) = (0, 0);
        let result = {
            let _restore = RestoreSmemFn(SMEM_FN.with(|c| c.replace((&state as *const SmemFn<'_, F>).cast())));
            device.primary_context()?.with_current(|| {
                // SAFETY: f is valid in the device's context, which is current; out-pointers to
                // locals. The callback reaches `state` through SMEM_FN, set above for this
                // call's duration (restored by `_restore` after it, also on error), and only
                // reads it on this thread; it never unwinds into the driver.
                unsafe {
                    driver::cuOccupancyMaxPotentialBlockSize(
                        &mut grid,
                        &mut block,
                        f,
                        Some(smem_trampoline::<F>),
                        0,
                        block_size_limit,
                    )
                }
                .check("cuOccupancyMaxPotentialBlockSize")
            })
        };
        if let Some(panic) = state.panic.take() {
            resume_unwind(panic);
        }
        result?;
        Ok(MaxPotentialBlockSize {
            min_grid_size: grid.max(0) as u32,
            max_block_size: block.max(0) as u32,
        })
    }

    /// The dynamic shared memory, in bytes, each block can have when `num_blocks_per_multiprocessor`
    /// blocks of `block_size` threads share a multiprocessor of `device`
    /// (`cuOccupancyAvailableDynamicSMemPerBlock`).
    pub fn available_dynamic_shared_memory_per_block(
        &self,
        device: &Device,
        num_blocks_per_multiprocessor: u32,
        block_size: u32,
    ) -> Result<usize> {
        let too_many = |what: &str, n: u32| {
            CudaError::InvalidArgument(format!(
                "available_dynamic_shared_memory_per_block: {n} {what} is more than any device has"
            ))
        };
        let blocks = i32::try_from(num_blocks_per_multiprocessor)
            .map_err(|_| too_many("blocks", num_blocks_per_multiprocessor))?;
        let threads = i32::try_from(block_size).map_err(|_| too_many("threads", block_size))?;
        let f = self.function_on(device)?;
        let mut bytes = 0usize;
        device.primary_context()?.with_current(|| {
            // SAFETY: f is valid in the device's context, which is current; out-pointer to a local.
            unsafe { driver::cuOccupancyAvailableDynamicSMemPerBlock(&mut bytes, f, blocks, threads) }
                .check("cuOccupancyAvailableDynamicSMemPerBlock")
        })?;
        Ok(bytes)
    }

    /// The largest cluster, in blocks, a launch of `config`'s shape can use on `device`
    /// (`cuOccupancyMaxPotentialClusterSize`; compute capability 9.0+). The cluster shape in
    /// `config` is ignored (its grid counts blocks then); `stream` is the stream the kernel
    /// would be launched on, if it matters (a green context's stream sees fewer
    /// multiprocessors).
    pub fn max_potential_cluster_size(
        &self,
        device: &Device,
        config: &LaunchConfig,
        stream: Option<&Stream>,
    ) -> Result<u32> {
        let config = LaunchConfig {
            grid: config.grid_in_blocks(),
            cluster: None,
            ..*config
        };
        config.check(device.limits()?)?;
        let f = self.function_on(device)?;
        // SAFETY: zeroed attributes are valid (ignored) values; only those filled in are passed.
        let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
        let handle = stream.map_or(std::ptr::null_mut(), Stream::handle);
        let cfg = config.driver_config(handle, &mut attrs);
        let mut n = 0;
        device.primary_context()?.with_current(|| {
            // SAFETY: f belongs to the current context; cfg and attrs live across the call; the
            // stream (if any) is live while `stream` is borrowed. Nothing is launched.
            unsafe { driver::cuOccupancyMaxPotentialClusterSize(&mut n, f, &cfg) }
                .check("cuOccupancyMaxPotentialClusterSize")
        })?;
        Ok(n.max(0) as u32)
    }
}
