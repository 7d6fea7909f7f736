//! A kernel's attributes on a device, one typed getter per `cuda.core` `KernelAttributes`
//! member, and setters for the attributes the driver lets a program change.
//!
//! `cuda.core` reads `kernel.attributes.num_regs` for the current device and
//! `kernel.attributes[device].num_regs` for another; here every getter names its device.
//! `cuda.core` caches what it read per device; these ask the driver each time (a setter changes
//! what the next read says, and a call costs well under a microsecond).

use super::Kernel;
use crate::device::Device;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use driver::CUfunction_attribute as A;

impl Kernel {
    /// A kernel attribute on `device` (`cuKernelGetAttribute`), for an attribute without a
    /// named getter below.
    pub fn attribute(&self, attribute: driver::CUfunction_attribute, device: &Device) -> Result<i32> {
        let mut v = 0;
        // SAFETY: the kernel is live (its code is kept loaded by `self`); out-pointer to a local.
        unsafe { driver::cuKernelGetAttribute(&mut v, attribute, self.handle(), device.handle()) }
            .check("cuKernelGetAttribute")?;
        Ok(v)
    }

    /// Sets a writable kernel attribute on `device` (`cuKernelSetAttribute`), for an attribute
    /// without a named setter below. The driver refuses read-only attributes and values out of
    /// range; a launch that breaks a limit set here fails with an error, it does not misbehave.
    pub fn set_attribute(&self, attribute: driver::CUfunction_attribute, value: i32, device: &Device) -> Result<()> {
        // SAFETY: the kernel is live (its code is kept loaded by `self`); the driver serialises
        // attribute changes against launches on other threads.
        unsafe { driver::cuKernelSetAttribute(attribute, value, self.handle(), device.handle()) }
            .check("cuKernelSetAttribute")
    }

    fn flag(&self, attribute: driver::CUfunction_attribute, device: &Device) -> Result<bool> {
        Ok(self.attribute(attribute, device)? != 0)
    }

    fn non_negative(&self, attribute: driver::CUfunction_attribute, device: &Device) -> Result<u32> {
        let v = self.attribute(attribute, device)?;
        u32::try_from(v).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "kernel attribute {attribute:?}: the driver answered {v}, which is not a count"
            ))
        })
    }

    fn set_non_negative(
        &self,
        attribute: driver::CUfunction_attribute,
        what: &str,
        value: u32,
        device: &Device,
    ) -> Result<()> {
        let value = i32::try_from(value).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "Kernel::set_{what}: {value} is more than the driver can take (at most {})",
                i32::MAX
            ))
        })?;
        self.set_attribute(attribute, value, device)
    }

    /// The most threads a block of this kernel may have on `device` (read-only).
    pub fn max_threads_per_block(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device)
    }

    /// Statically allocated shared memory per block, in bytes (read-only).
    pub fn shared_size_bytes(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, device)
    }

    /// User-allocated constant memory the kernel needs, in bytes (read-only).
    pub fn const_size_bytes(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, device)
    }

    /// Local memory per thread, in bytes (read-only).
    pub fn local_size_bytes(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, device)
    }

    /// Registers per thread (read-only).
    pub fn num_regs(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS, device)
    }

    /// The PTX virtual architecture the kernel was compiled for, as major * 10 + minor (`90`
    /// for `compute_90`); 0 for a kernel compiled straight to a cubin without PTX (read-only).
    pub fn ptx_version(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_PTX_VERSION, device)
    }

    /// The binary architecture the kernel was compiled for, as major * 10 + minor (`90` for
    /// `sm_90`) (read-only).
    pub fn binary_version(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_BINARY_VERSION, device)
    }

    /// Whether the kernel was compiled with `-Xptxas --dlcm=ca` (global loads cached in L1)
    /// (read-only).
    pub fn cache_mode_ca(&self, device: &Device) -> Result<bool> {
        self.flag(A::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, device)
    }

    /// The most dynamic shared memory a launch of this kernel may ask for, in bytes (48 KiB
    /// unless raised with [`set_max_dynamic_shared_size_bytes`](Self::set_max_dynamic_shared_size_bytes)).
    pub fn max_dynamic_shared_size_bytes(&self, device: &Device) -> Result<u32> {
        self.non_negative(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, device)
    }

    /// Raises (or lowers) the most dynamic shared memory a launch may ask for; the driver
    /// refuses more than the device's opt-in limit minus the kernel's static shared memory.
    pub fn set_max_dynamic_shared_size_bytes(&self, bytes: u32, device: &Device) -> Result<()> {
        self.set_non_negative(
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            "max_dynamic_shared_size_bytes",
            bytes,
            device,
        )
    }

    /// The preferred share of the L1/shared memory carveout given to shared memory, in percent
    /// (-1: no preference).
    pub fn preferred_shared_memory_carveout(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, device)
    }

    /// Sets the preferred shared memory carveout: a percentage from 0 to 100, or -1 for no
    /// preference (a hint the driver may round).
    pub fn set_preferred_shared_memory_carveout(&self, percent: i32, device: &Device) -> Result<()> {
        if !(-1..=100).contains(&percent) {
            return Err(CudaError::InvalidArgument(format!(
                "Kernel::set_preferred_shared_memory_carveout: {percent} is not a percentage (0 to 100, or -1 for no preference)"
            )));
        }
        self.set_attribute(A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent, device)
    }

    /// Whether the kernel must be launched with a cluster shape (it was compiled with
    /// `__cluster_dims__` or similar) (read-only).
    pub fn cluster_size_must_be_set(&self, device: &Device) -> Result<bool> {
        self.flag(A::CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, device)
    }

    /// The cluster width, in blocks, the kernel requires (0: none required).
    pub fn required_cluster_width(&self, device: &Device) -> Result<u32> {
        self.non_negative(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, device)
    }

    /// The cluster height, in blocks, the kernel requires (0: none required).
    pub fn required_cluster_height(&self, device: &Device) -> Result<u32> {
        self.non_negative(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, device)
    }

    /// The cluster depth, in blocks, the kernel requires (0: none required).
    pub fn required_cluster_depth(&self, device: &Device) -> Result<u32> {
        self.non_negative(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, device)
    }

    /// Requires launches to use clusters `blocks` wide; the driver refuses this when the
    /// kernel's cluster shape was fixed at compile time.
    pub fn set_required_cluster_width(&self, blocks: u32, device: &Device) -> Result<()> {
        self.set_non_negative(
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
            "required_cluster_width",
            blocks,
            device,
        )
    }

    /// Requires launches to use clusters `blocks` high (see
    /// [`set_required_cluster_width`](Self::set_required_cluster_width)).
    pub fn set_required_cluster_height(&self, blocks: u32, device: &Device) -> Result<()> {
        self.set_non_negative(
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
            "required_cluster_height",
            blocks,
            device,
        )
    }

    /// Requires launches to use clusters `blocks` deep (see
    /// [`set_required_cluster_width`](Self::set_required_cluster_width)).
    pub fn set_required_cluster_depth(&self, blocks: u32, device: &Device) -> Result<()> {
        self.set_non_negative(
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH,
            "required_cluster_depth",
            blocks,
            device,
        )
    }

    /// Whether launches may use clusters larger than the portable 8 blocks.
    pub fn non_portable_cluster_size_allowed(&self, device: &Device) -> Result<bool> {
        self.flag(A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, device)
    }

    /// Allows (or forbids) clusters larger than the portable 8 blocks (where the device has
    /// them: 16 on compute capability 9.0).
    pub fn set_non_portable_cluster_size_allowed(&self, allowed: bool, device: &Device) -> Result<()> {
        self.set_attribute(
            A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            i32::from(allowed),
            device,
        )
    }

    /// The block scheduling policy of clustered launches (`CUclusterSchedulingPolicy`: 0
    /// default, 1 spread, 2 load balancing).
    pub fn cluster_scheduling_policy_preference(&self, device: &Device) -> Result<i32> {
        self.attribute(A::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, device)
    }

    /// Sets the block scheduling policy of clustered launches (a `CUclusterSchedulingPolicy`
    /// value; the driver refuses others).
    pub fn set_cluster_scheduling_policy_preference(
        &self,
        policy: driver::CUclusterSchedulingPolicy,
        device: &Device,
    ) -> Result<()> {
        let value = i32::try_from(policy.0).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "Kernel::set_cluster_scheduling_policy_preference: {policy:?} is not a scheduling policy"
            ))
        })?;
        self.set_attribute(A::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, value, device)
    }
}
