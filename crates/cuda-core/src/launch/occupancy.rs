//! A kernel's attributes on a device and its occupancy: how many blocks or clusters of a launch
//! shape fit at once, and the block size that fills a device best.

use super::LaunchConfig;
use crate::compile::Kernel;
use crate::device::Device;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// The result of [`Kernel::max_potential_block_size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPotentialBlockSize {
    pub min_grid_size: u32,
    pub max_block_size: u32,
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

    /// A kernel attribute on `device` (`cuKernelGetAttribute`).
    pub fn attribute(&self, attribute: driver::CUfunction_attribute, device: &Device) -> Result<i32> {
        let mut v = 0;
        // SAFETY: the kernel is live; out-pointer to a local.
        unsafe { driver::cuKernelGetAttribute(&mut v, attribute, self.handle(), device.handle()) }
            .check("cuKernelGetAttribute")?;
        Ok(v)
    }

    /// Sets a writable kernel attribute on `device` (such as the dynamic shared memory limit).
    pub fn set_attribute(&self, attribute: driver::CUfunction_attribute, value: i32, device: &Device) -> Result<()> {
        // SAFETY: the kernel is live.
        unsafe { driver::cuKernelSetAttribute(attribute, value, self.handle(), device.handle()) }
            .check("cuKernelSetAttribute")
    }

    /// The most threads a block of this kernel may have on `device`.
    pub fn max_threads_per_block(&self, device: &Device) -> Result<i32> {
        self.attribute(
            driver::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            device,
        )
    }

    /// Registers per thread.
    pub fn num_regs(&self, device: &Device) -> Result<i32> {
        self.attribute(driver::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS, device)
    }

    /// Static shared memory per block, in bytes.
    pub fn shared_size_bytes(&self, device: &Device) -> Result<i32> {
        self.attribute(
            driver::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            device,
        )
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
}
