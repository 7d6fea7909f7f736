//! The InfoROM (`Device.inforom`, `InforomInfo`): the board's non-volatile store of
//! configuration and error counts.

use super::common::read_string;
use super::device::Device;
use super::types::InforomObject;
use crate::Result;
use cuda_sys::nvml;

/// A device's InfoROM (`InforomInfo`), from [`Device::inforom`]; products without one answer
/// [`NvmlErrorKind::NotSupported`](super::NvmlErrorKind::NotSupported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InforomInfo {
    device: Device,
}

impl InforomInfo {
    /// The version of one InfoROM object (`InvalidArgument` for an object the headers do not
    /// define).
    pub fn get_version(&self, object: InforomObject) -> Result<String> {
        let (handle, object) = (self.device.handle(), nvml::nvmlInforomObject_enum(object.input()?));
        read_string("nvmlDeviceGetInforomVersion", 64, |buf, n| {
            // SAFETY: a live handle; `read_string` passes a buffer of n chars.
            unsafe { nvml::nvmlDeviceGetInforomVersion(handle, object, buf, n) }
        })
    }

    /// The version of the whole InfoROM image (as the VBIOS version names the VBIOS).
    pub fn image_version(&self) -> Result<String> {
        let handle = self.device.handle();
        read_string("nvmlDeviceGetInforomImageVersion", 64, |buf, n| {
            // SAFETY: a live handle; `read_string` passes a buffer of n chars.
            unsafe { nvml::nvmlDeviceGetInforomImageVersion(handle, buf, n) }
        })
    }

    /// The checksum of the configuration in the InfoROM: equal on identically configured boards.
    pub fn configuration_checksum(&self) -> Result<u32> {
        // SAFETY: `get` passes a live handle and a pointer to a `c_uint` NVML writes.
        self.device
            .get("nvmlDeviceGetInforomConfigurationChecksum", |h, p| unsafe {
                nvml::nvmlDeviceGetInforomConfigurationChecksum(h, p)
            })
    }

    /// Reads the InfoROM and checks its checksums:
    /// [`NvmlErrorKind::CorruptedInforom`](super::NvmlErrorKind::CorruptedInforom) when they fail.
    pub fn validate(&self) -> Result<()> {
        // SAFETY: `call` passes a live handle.
        self.device.call("nvmlDeviceValidateInforom", |h| unsafe {
            nvml::nvmlDeviceValidateInforom(h)
        })
    }

    /// When the black box (BBX) object was last flushed in this run, and how long the flush
    /// took: `(timestamp, duration in microseconds)`.
    pub fn bbx_flush_time(&self) -> Result<(u64, u64)> {
        let (mut timestamp, mut duration) = (0, 0);
        // SAFETY: `call` passes a live handle; two live out-pointers.
        self.device.call("nvmlDeviceGetLastBBXFlushTime", |h| unsafe {
            nvml::nvmlDeviceGetLastBBXFlushTime(h, &mut timestamp, &mut duration)
        })?;
        // `unsigned long` is 32 bits on some targets.
        #[allow(clippy::useless_conversion)]
        Ok((timestamp, u64::from(duration)))
    }

    /// The board part number.
    pub fn board_part_number(&self) -> Result<String> {
        let handle = self.device.handle();
        read_string("nvmlDeviceGetBoardPartNumber", 96, |buf, n| {
            // SAFETY: a live handle; `read_string` passes a buffer of n chars.
            unsafe { nvml::nvmlDeviceGetBoardPartNumber(handle, buf, n) }
        })
    }
}

impl Device {
    /// The InfoROM.
    pub fn inforom(&self) -> InforomInfo {
        InforomInfo { device: *self }
    }
}
