//! Field values (`Device.get_field_values`, `FieldValues`): many counters read in one call, each
//! with its own status.

use super::common::error;
use super::device::Device;
use crate::{CudaError, Result};
use cuda_sys::nvml;

/// An NVML field id (`FieldId`): any `NVML_FI_*` value of [`cuda_sys::nvml`] (such as
/// `FieldId(nvml::NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0)`); the common ones are named here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldId(pub u32);

impl FieldId {
    /// Whether ECC is on now.
    pub const DEV_ECC_CURRENT: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_CURRENT);
    /// Whether ECC will be on after the next reboot.
    pub const DEV_ECC_PENDING: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_PENDING);
    /// Single-bit ECC errors since the driver loaded.
    pub const DEV_ECC_SBE_VOL_TOTAL: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_SBE_VOL_TOTAL);
    /// Double-bit ECC errors since the driver loaded.
    pub const DEV_ECC_DBE_VOL_TOTAL: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_DBE_VOL_TOTAL);
    /// Single-bit ECC errors over the device's life.
    pub const DEV_ECC_SBE_AGG_TOTAL: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_SBE_AGG_TOTAL);
    /// Double-bit ECC errors over the device's life.
    pub const DEV_ECC_DBE_AGG_TOTAL: FieldId = FieldId(nvml::NVML_FI_DEV_ECC_DBE_AGG_TOTAL);
    /// Pages retired for single-bit errors.
    pub const DEV_RETIRED_SBE: FieldId = FieldId(nvml::NVML_FI_DEV_RETIRED_SBE);
    /// Pages retired for double-bit errors.
    pub const DEV_RETIRED_DBE: FieldId = FieldId(nvml::NVML_FI_DEV_RETIRED_DBE);
    /// Memory temperature, in degrees Celsius.
    pub const DEV_MEMORY_TEMP: FieldId = FieldId(nvml::NVML_FI_DEV_MEMORY_TEMP);
    /// Energy used since the driver loaded, in millijoules.
    pub const DEV_TOTAL_ENERGY_CONSUMPTION: FieldId = FieldId(nvml::NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION);
    /// The number of NVLinks.
    pub const DEV_NVLINK_LINK_COUNT: FieldId = FieldId(nvml::NVML_FI_DEV_NVLINK_LINK_COUNT);
    /// The common NVLink speed, in MB/s.
    pub const DEV_NVLINK_SPEED_MBPS_COMMON: FieldId = FieldId(nvml::NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON);
    /// The PCIe replay counter.
    pub const DEV_PCIE_REPLAY_COUNTER: FieldId = FieldId(nvml::NVML_FI_DEV_PCIE_REPLAY_COUNTER);
    /// Remapped rows for correctable errors.
    pub const DEV_REMAPPED_COR: FieldId = FieldId(nvml::NVML_FI_DEV_REMAPPED_COR);
    /// Remapped rows for uncorrectable errors.
    pub const DEV_REMAPPED_UNC: FieldId = FieldId(nvml::NVML_FI_DEV_REMAPPED_UNC);
    /// Average power over the last second, in milliwatts (scoped: 0 the GPU, 1 the module).
    pub const DEV_POWER_AVERAGE: FieldId = FieldId(nvml::NVML_FI_DEV_POWER_AVERAGE);
    /// Power now, in milliwatts (scoped as [`FieldId::DEV_POWER_AVERAGE`]).
    pub const DEV_POWER_INSTANT: FieldId = FieldId(nvml::NVML_FI_DEV_POWER_INSTANT);
    /// The shutdown threshold on the T.Limit scale: degrees Celsius relative to the GPU's T.Limit
    /// (Ada and newer; this and the next three supersede
    /// [`Temperature::get_threshold`](super::Temperature::get_threshold) there).
    pub const DEV_TEMPERATURE_SHUTDOWN_TLIMIT: FieldId = FieldId(nvml::NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT);
    /// The hardware slowdown threshold on the T.Limit scale (relative degrees; may be negative).
    pub const DEV_TEMPERATURE_SLOWDOWN_TLIMIT: FieldId = FieldId(nvml::NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT);
    /// The memory-temperature software slowdown threshold on the T.Limit scale.
    pub const DEV_TEMPERATURE_MEM_MAX_TLIMIT: FieldId = FieldId(nvml::NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT);
    /// The threshold past which the GPU may be held below base clock, on the T.Limit scale.
    pub const DEV_TEMPERATURE_GPU_MAX_TLIMIT: FieldId = FieldId(nvml::NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT);
}

/// A field's value, of the type NVML reports it in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A double (`NVML_VALUE_TYPE_DOUBLE`).
    F64(f64),
    /// An unsigned 32-bit integer (`NVML_VALUE_TYPE_UNSIGNED_INT`).
    U32(u32),
    /// An unsigned 64-bit integer (`NVML_VALUE_TYPE_UNSIGNED_LONG_LONG` or `..._UNSIGNED_LONG`).
    U64(u64),
    /// A signed 64-bit integer (`NVML_VALUE_TYPE_SIGNED_LONG_LONG`).
    I64(i64),
    /// A signed 32-bit integer (`NVML_VALUE_TYPE_SIGNED_INT`).
    I32(i32),
    /// An unsigned 16-bit integer (`NVML_VALUE_TYPE_UNSIGNED_SHORT`).
    U16(u16),
}

impl Value {
    /// The value as an `f64` (exact for all but the largest 64-bit integers).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::F64(v) => v,
            Value::U32(v) => v as f64,
            Value::U64(v) => v as f64,
            Value::I64(v) => v as f64,
            Value::I32(v) => v as f64,
            Value::U16(v) => v as f64,
        }
    }

    /// The value as an `i128`, for integers (`None` for a float).
    pub fn as_integer(self) -> Option<i128> {
        Some(match self {
            Value::F64(_) => return None,
            Value::U32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U16(v) => v.into(),
        })
    }
}

/// One field's reading (`FieldValue`).
#[derive(Debug, Clone)]
pub struct FieldValue {
    /// The field.
    pub field_id: FieldId,
    /// The scope asked for (a link, or 0/1 for power's GPU/module).
    pub scope_id: u32,
    /// When it was sampled, in microseconds since 1970.
    pub timestamp_us: i64,
    /// How long NVML took to update it, in microseconds.
    pub latency_us: i64,
    value: Result<Value>,
}

impl FieldValue {
    /// The value, or the error NVML gave for this field (such as
    /// [`NvmlErrorKind::NotSupported`](super::NvmlErrorKind::NotSupported)).
    pub fn value(&self) -> Result<Value> {
        self.value.clone()
    }

    fn from_raw(f: &nvml::nvmlFieldValue_t) -> FieldValue {
        use nvml::nvmlValueType_enum as T;
        let value = if f.nvmlReturn != nvml::nvmlReturn_enum::NVML_SUCCESS {
            Err(error("nvmlDeviceGetFieldValues", f.nvmlReturn))
        } else {
            let v = f.value;
            // SAFETY: every member of the union is plain data valid for any bits; NVML wrote the
            // member `valueType` names, which is the one read.
            unsafe {
                match f.valueType {
                    T::NVML_VALUE_TYPE_DOUBLE => Ok(Value::F64(v.dVal)),
                    T::NVML_VALUE_TYPE_UNSIGNED_INT => Ok(Value::U32(v.uiVal)),
                    // `unsigned long` is 32 bits on some targets.
                    #[allow(clippy::useless_conversion)]
                    T::NVML_VALUE_TYPE_UNSIGNED_LONG => Ok(Value::U64(u64::from(v.ulVal))),
                    T::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => Ok(Value::U64(v.ullVal)),
                    T::NVML_VALUE_TYPE_SIGNED_LONG_LONG => Ok(Value::I64(v.sllVal)),
                    T::NVML_VALUE_TYPE_SIGNED_INT => Ok(Value::I32(v.siVal)),
                    T::NVML_VALUE_TYPE_UNSIGNED_SHORT => Ok(Value::U16(v.usVal)),
                    other => Err(CudaError::InvalidArgument(format!(
                        "nvmlDeviceGetFieldValues: field {} has a value type ({}) these bindings do not know",
                        f.fieldId, other.0
                    ))),
                }
            }
        };
        FieldValue {
            field_id: FieldId(f.fieldId),
            scope_id: f.scopeId,
            timestamp_us: f.timestamp,
            latency_us: f.latencyUsec,
            value,
        }
    }
}

/// The readings of [`Device::get_field_values`], in the order asked (`FieldValues`).
#[derive(Debug, Clone)]
pub struct FieldValues(Vec<FieldValue>);

impl FieldValues {
    /// The readings.
    pub fn values(&self) -> &[FieldValue] {
        &self.0
    }

    /// Reading `i` (in the order asked), or `None` past the last.
    pub fn get(&self, i: usize) -> Option<&FieldValue> {
        self.0.get(i)
    }

    /// The number of readings.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first reading's error, if any (`validate()`).
    pub fn validate(&self) -> Result<()> {
        self.0.iter().try_for_each(|f| f.value().map(drop))
    }

    /// Every value, or the first reading's error (`get_all_values()`).
    pub fn get_all_values(&self) -> Result<Vec<Value>> {
        self.0.iter().map(FieldValue::value).collect()
    }
}

/// `values[i]`: reading `i`, in the order asked.
///
/// # Panics
///
/// Only when `i` is not below [`FieldValues::len`], which is the number of ids asked for; use
/// [`FieldValues::get`] for an index that may be out of range.
impl std::ops::Index<usize> for FieldValues {
    type Output = FieldValue;
    fn index(&self, i: usize) -> &FieldValue {
        &self.0[i]
    }
}

impl<'a> IntoIterator for &'a FieldValues {
    type Item = &'a FieldValue;
    type IntoIter = std::slice::Iter<'a, FieldValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

fn requests(ids: &[(FieldId, u32)]) -> Result<(Vec<nvml::nvmlFieldValue_t>, i32)> {
    let count = i32::try_from(ids.len())
        .map_err(|_| CudaError::InvalidArgument(format!("{} field ids are too many for one call", ids.len())))?;
    let values = ids
        .iter()
        .map(|&(id, scope)| nvml::nvmlFieldValue_t {
            fieldId: id.0,
            scopeId: scope,
            ..Default::default()
        })
        .collect();
    Ok((values, count))
}

impl Device {
    /// Reads fields, each in scope 0 (`get_field_values([id, ...])`). Each reading carries its
    /// own status; the call fails only as a whole. No fields give no values, without asking
    /// NVML.
    pub fn get_field_values(&self, ids: &[FieldId]) -> Result<FieldValues> {
        let scoped: Vec<(FieldId, u32)> = ids.iter().map(|&id| (id, 0)).collect();
        self.get_scoped_field_values(&scoped)
    }

    /// Reads fields with a scope each, such as an NVLink (`get_field_values([(id, scope), ...])`).
    pub fn get_scoped_field_values(&self, ids: &[(FieldId, u32)]) -> Result<FieldValues> {
        if ids.is_empty() {
            // As cuda.core: no fields, no NVML call (NVML would refuse a count of 0).
            return Ok(FieldValues(Vec::new()));
        }
        let (mut values, count) = requests(ids)?;
        // SAFETY: `call` passes a live handle; the array holds `count` requests, as NVML is told.
        self.call("nvmlDeviceGetFieldValues", |h| unsafe {
            nvml::nvmlDeviceGetFieldValues(h, count, values.as_mut_ptr())
        })?;
        Ok(FieldValues(values.iter().map(FieldValue::from_raw).collect()))
    }

    /// Clears fields that count (`clear_field_values`), each in its scope.
    pub fn clear_field_values(&self, ids: &[(FieldId, u32)]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let (mut values, count) = requests(ids)?;
        // SAFETY: `call` passes a live handle; the array holds `count` requests, as NVML is told.
        self.call("nvmlDeviceClearFieldValues", |h| unsafe {
            nvml::nvmlDeviceClearFieldValues(h, count, values.as_mut_ptr())
        })?;
        values
            .iter()
            .find(|v| v.nvmlReturn != nvml::nvmlReturn_enum::NVML_SUCCESS)
            .map_or(Ok(()), |v| Err(error("nvmlDeviceClearFieldValues", v.nvmlReturn)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_keep_their_own_status() {
        let mut ok = nvml::nvmlFieldValue_t {
            fieldId: FieldId::DEV_POWER_INSTANT.0,
            valueType: nvml::nvmlValueType_enum::NVML_VALUE_TYPE_UNSIGNED_INT,
            ..Default::default()
        };
        ok.value.uiVal = 61_000;
        let failed = nvml::nvmlFieldValue_t {
            fieldId: 9999,
            nvmlReturn: nvml::nvmlReturn_enum::NVML_ERROR_NOT_SUPPORTED,
            ..Default::default()
        };
        let values = FieldValues(vec![FieldValue::from_raw(&ok), FieldValue::from_raw(&failed)]);
        assert_eq!(values[0].value().unwrap(), Value::U32(61_000));
        assert!(values[1].value().unwrap_err().is_not_supported());
        assert_eq!(values.get(1).map(|f| f.field_id), Some(FieldId(9999)));
        assert!(values.get(2).is_none());
        assert!(values.validate().unwrap_err().is_not_supported());
        assert!(values.get_all_values().is_err());
        assert_eq!(Value::U16(7).as_integer(), Some(7));
        assert_eq!(Value::F64(1.5).as_integer(), None);
        let bad_type = nvml::nvmlFieldValue_t {
            valueType: nvml::nvmlValueType_enum(77),
            ..Default::default()
        };
        assert!(FieldValue::from_raw(&bad_type).value().is_err());
    }
}
