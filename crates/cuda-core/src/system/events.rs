//! Events: a device's (`Device.register_events`, `DeviceEvents`) and the system's GPU bind and
//! unbind events (`system.register_events`, `RegisteredSystemEvents`), each waited for with a
//! timeout.
//!
//! NVML hands an event to whichever thread waits on the set, so `wait` takes `&mut self`: one
//! waiter per set, checked by the compiler. Only events after the registration are recorded.

use super::common::{init, struct_version};
use super::device::Device;
use super::types::{EventType, SystemEventType};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::nvml;
use std::time::Duration;

/// `timeout` in whole milliseconds, rounded up, at most `u32::MAX`.
fn millis(timeout: Duration) -> u32 {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// Refuses flags the headers do not name: such bits never reach NVML.
fn only_named_bits<F: bitflags::Flags<Bits = u64> + Copy>(flags: F, what: &str) -> Result<()> {
    let named = F::FLAGS
        .iter()
        .filter(|f| f.is_named())
        .fold(0u64, |bits, f| bits | f.value().bits());
    let unknown = flags.bits() & !named;
    if unknown != 0 {
        return Err(CudaError::InvalidArgument(format!(
            "{what} bits {unknown:#x} are not events NVML's headers define"
        )));
    }
    Ok(())
}

/// The most system events one [`RegisteredSystemEvents::wait`] collects.
const MAX_SYSTEM_EVENTS: u32 = 1 << 16;

/// One device event (`EventData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventData {
    /// The device it happened on (`None` if NVML named none).
    pub device: Option<Device>,
    /// What happened (one flag).
    pub event_type: EventType,
    /// The event's data as NVML reports it: the Xid of an [`EventType::XID_CRITICAL_ERROR`].
    pub event_data: u64,
    /// The MIG GPU instance of an Xid error (`None` for other events and outside MIG).
    pub gpu_instance_id: Option<u32>,
    /// The MIG compute instance of an Xid error (`None` for other events and outside MIG).
    pub compute_instance_id: Option<u32>,
}

impl EventData {
    /// The Xid of an Xid error event (`None` for other events).
    pub fn xid(&self) -> Option<u64> {
        self.event_type
            .contains(EventType::XID_CRITICAL_ERROR)
            .then_some(self.event_data)
    }
}

/// Events registered on a device (`DeviceEvents`), from [`Device::register_events`]. Dropping it
/// frees NVML's event set.
#[derive(Debug)]
pub struct DeviceEvents {
    /// Shared with a wait in flight on another thread ([`DeviceEvents::wait_async`]): freed when
    /// the last holder goes, never under a native wait.
    pub(super) set: std::sync::Arc<EventSet>,
    registered: EventType,
}

impl DeviceEvents {
    /// The event types registered.
    pub fn registered(&self) -> EventType {
        self.registered
    }

    /// Waits up to `timeout` (rounded up to whole milliseconds; zero waits one) for an event:
    /// `Ok(None)` when none came in time. NVML may return early without an event (on a signal,
    /// say: a success with no event type), which is `Ok(None)` too.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<EventData>> {
        self.set.wait(millis(timeout).max(1))
    }
}

/// A device's NVML event set: freed when dropped. `lease` is held across every native wait (one
/// at a time per set: NVML hands an event to whichever thread waits) and keeps an event that an
/// abandoned [`DeviceEvents::wait_async`] consumed, for the next wait.
#[derive(Debug)]
pub(super) struct EventSet {
    handle: nvml::nvmlEventSet_t,
    lease: std::sync::Mutex<Option<EventData>>,
}

// SAFETY: an NVML event set may be waited on and freed from any thread; native waits are
// serialised by `lease`, and the set is freed only by `Drop`, when no holder is left.
unsafe impl Send for EventSet {}
// SAFETY: as for `Send`.
unsafe impl Sync for EventSet {}

impl EventSet {
    /// The event an abandoned wait consumed, or one native wait of `ms` milliseconds.
    pub(super) fn wait(&self, ms: u32) -> Result<Option<EventData>> {
        let mut pending = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = pending.take() {
            return Ok(Some(e));
        }
        self.native_wait(ms)
    }

    /// Keeps `event` for the next wait (taken under the lease).
    pub(super) fn park(&self, event: EventData) {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = Some(event);
    }

    fn native_wait(&self, ms: u32) -> Result<Option<EventData>> {
        let mut data = nvml::nvmlEventData_t::default();
        // SAFETY: `self.handle` is a live event set (freed only by `Drop`); `data` is a live
        // out-structure.
        let status = unsafe { nvml::nvmlEventSetWait(self.handle, &mut data, ms) };
        if status == nvml::nvmlReturn_enum::NVML_ERROR_TIMEOUT {
            return Ok(None);
        }
        status.check("nvmlEventSetWait_v2")?;
        if data.eventType == 0 {
            return Ok(None);
        }
        let event_type = EventType::from_bits_retain(data.eventType);
        let xid = event_type.contains(EventType::XID_CRITICAL_ERROR);
        let id = |v: u32| (xid && v != u32::MAX).then_some(v);
        Ok(Some(EventData {
            device: (!data.device.is_null()).then(|| Device::from_raw(data.device)),
            event_type,
            event_data: data.eventData,
            gpu_instance_id: id(data.gpuInstanceId),
            compute_instance_id: id(data.computeInstanceId),
        }))
    }
}

impl Drop for EventSet {
    fn drop(&mut self) {
        // SAFETY: the set is live and freed once, here, by its last holder.
        if let Err(e) = unsafe { nvml::nvmlEventSetFree(self.handle) }.check("nvmlEventSetFree") {
            record_drop_error(e);
        }
    }
}

impl Device {
    /// The event types the device can report (Linux).
    pub fn get_supported_event_types(&self) -> Result<EventType> {
        // SAFETY: `get` passes a live handle and a pointer to the bitmask NVML writes.
        let bits = self.get("nvmlDeviceGetSupportedEventTypes", |h, p| unsafe {
            nvml::nvmlDeviceGetSupportedEventTypes(h, p)
        })?;
        Ok(EventType::from_bits_retain(bits))
    }

    /// Starts recording `events` on the device (Linux); wait for them with
    /// [`DeviceEvents::wait`]. ECC events need ECC on, power events power management.
    /// [`NvmlErrorKind::NotSupported`](super::NvmlErrorKind::NotSupported) when none of the types
    /// can be registered; `InvalidArgument` for bits the headers do not name.
    ///
    /// ```no_run
    /// use cuda_core::system::{Device, EventType};
    /// let device = Device::from_index(0)?;
    /// let mut events = device.register_events(EventType::XID_CRITICAL_ERROR)?;
    /// while let Some(event) = events.wait(std::time::Duration::from_secs(10))? {
    ///     println!("Xid {:?} on {:?}", event.xid(), event.device);
    /// }
    /// # Ok::<(), cuda_core::CudaError>(())
    /// ```
    pub fn register_events(&self, events: EventType) -> Result<DeviceEvents> {
        only_named_bits(events, "EventType")?;
        let mut set = std::ptr::null_mut();
        // SAFETY: `set` is a live out-pointer.
        unsafe { nvml::nvmlEventSetCreate(&mut set) }.check("nvmlEventSetCreate")?;
        // Owned from here: dropped (freed) on the error path below.
        let owned = DeviceEvents {
            set: std::sync::Arc::new(EventSet {
                handle: set,
                lease: std::sync::Mutex::new(None),
            }),
            registered: events,
        };
        // SAFETY: `call` passes a live handle; the set is live.
        self.call("nvmlDeviceRegisterEvents", |h| unsafe {
            nvml::nvmlDeviceRegisterEvents(h, events.bits(), set)
        })?;
        Ok(owned)
    }
}

/// One system event (`SystemEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SystemEvent {
    /// What happened (one flag).
    pub event_type: SystemEventType,
    /// The GPU, as the PCI-format id NVML reports.
    pub gpu_id: u32,
}

/// System events registered with [`register_events`] (`RegisteredSystemEvents`). Dropping it
/// frees NVML's event set.
#[derive(Debug)]
pub struct RegisteredSystemEvents {
    set: nvml::nvmlSystemEventSet_t,
    registered: SystemEventType,
}

// SAFETY: as for `DeviceEvents`: any thread may wait on or free the set, `wait` takes `&mut self`.
unsafe impl Send for RegisteredSystemEvents {}
// SAFETY: as for `Send`.
unsafe impl Sync for RegisteredSystemEvents {}

/// Starts recording system events (`system.register_events`; Linux): GPUs bound to or unbound
/// from the driver. Wait for them with [`RegisteredSystemEvents::wait`]. `InvalidArgument` for
/// bits the headers do not name.
pub fn register_events(events: SystemEventType) -> Result<RegisteredSystemEvents> {
    only_named_bits(events, "SystemEventType")?;
    init()?;
    let mut create = nvml::nvmlSystemEventSetCreateRequest_t {
        version: struct_version::<nvml::nvmlSystemEventSetCreateRequest_t>(1),
        set: std::ptr::null_mut(),
    };
    // SAFETY: `create` is a live, versioned request.
    unsafe { nvml::nvmlSystemEventSetCreate(&mut create) }.check("nvmlSystemEventSetCreate")?;
    // Owned from here: dropped (freed) on the error path below.
    let owned = RegisteredSystemEvents {
        set: create.set,
        registered: events,
    };
    let mut register = nvml::nvmlSystemRegisterEventRequest_t {
        version: struct_version::<nvml::nvmlSystemRegisterEventRequest_t>(1),
        eventTypes: events.bits(),
        set: owned.set,
    };
    // SAFETY: `register` is a live, versioned request naming a live set.
    unsafe { nvml::nvmlSystemRegisterEvents(&mut register) }.check("nvmlSystemRegisterEvents")?;
    Ok(owned)
}

impl RegisteredSystemEvents {
    /// The event types registered.
    pub fn registered(&self) -> SystemEventType {
        self.registered
    }

    /// Waits up to `timeout` (whole milliseconds, rounded up; zero only collects what is
    /// there) for events, and returns up to `max_events` of them (at most 65536 a call): empty
    /// when none came in time. When it returns as many as it could, more may be waiting.
    pub fn wait(&mut self, timeout: Duration, max_events: usize) -> Result<Vec<SystemEvent>> {
        if max_events == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "buffer_size must be at least 1, got {max_events}"
            )));
        }
        let size = u32::try_from(max_events).unwrap_or(u32::MAX).min(MAX_SYSTEM_EVENTS);
        let room = size as usize;
        let mut data = Vec::new();
        data.try_reserve_exact(room)
            .map_err(|_| super::common::error("nvmlSystemEventSetWait", nvml::nvmlReturn_enum::NVML_ERROR_MEMORY))?;
        data.resize(room, nvml::nvmlSystemEventData_v1_t::default());
        let mut request = nvml::nvmlSystemEventSetWaitRequest_t {
            version: struct_version::<nvml::nvmlSystemEventSetWaitRequest_t>(1),
            timeoutms: millis(timeout),
            set: self.set,
            data: data.as_mut_ptr(),
            dataSize: size,
            numEvent: 0,
        };
        // SAFETY: `request` is a live, versioned request naming a live set and an array of
        // `dataSize` entries that lives across the call.
        let status = unsafe { nvml::nvmlSystemEventSetWait(&mut request) };
        if status == nvml::nvmlReturn_enum::NVML_ERROR_TIMEOUT {
            return Ok(Vec::new());
        }
        status.check("nvmlSystemEventSetWait")?;
        let n = (request.numEvent as usize).min(data.len());
        Ok(data[..n]
            .iter()
            .map(|d| SystemEvent {
                event_type: SystemEventType::from_bits_retain(d.eventType),
                gpu_id: d.gpuId,
            })
            .collect())
    }
}

impl Drop for RegisteredSystemEvents {
    fn drop(&mut self) {
        let mut request = nvml::nvmlSystemEventSetFreeRequest_t {
            version: struct_version::<nvml::nvmlSystemEventSetFreeRequest_t>(1),
            set: self.set,
        };
        // SAFETY: a live, versioned request naming the set, freed once, here.
        if let Err(e) = unsafe { nvml::nvmlSystemEventSetFree(&mut request) }.check("nvmlSystemEventSetFree") {
            record_drop_error(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_milliseconds() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_millis(250)), 250);
        assert_eq!(millis(Duration::from_secs(u64::MAX)), u32::MAX);
    }

    #[test]
    fn unnamed_event_bits_never_reach_nvml() {
        only_named_bits(EventType::PSTATE | EventType::XID_CRITICAL_ERROR, "EventType").unwrap();
        only_named_bits(SystemEventType::BIND | SystemEventType::UNBIND, "SystemEventType").unwrap();
        let e = only_named_bits(EventType::PSTATE | EventType::from_bits_retain(1 << 62), "EventType").unwrap_err();
        assert!(e.to_string().contains("0x4000000000000000"), "{e}");
        assert!(only_named_bits(SystemEventType::from_bits_retain(1 << 40), "SystemEventType").is_err());
    }
}
