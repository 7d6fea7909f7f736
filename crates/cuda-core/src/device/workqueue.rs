//! Workqueue resources (CUDA 13.1): [`WorkqueueResource`], its [`WorkqueueResourceOptions`] and
//! [`WorkqueueSharingScope`], as `cuda.core` has them. A workqueue resource is read with
//! [`DeviceResources::workqueue`](super::DeviceResources::workqueue), configured here, and given
//! to [`Device::create_context`](super::Device::create_context) beside an SM group.

use super::resources::{driver_version, Raw};
use super::{Context, Device};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;

/// Workqueue resources need a CUDA 13.1 driver; `cuda.core`'s message otherwise.
pub(super) fn workqueue_support() -> Result<()> {
    let (major, minor) = driver_version()?;
    if (major, minor) < (13, 1) {
        return Err(CudaError::NotSupported(format!(
            "WorkqueueResource requires CUDA driver 13.1 or newer. Using driver version {major}.{minor} \
             (update the NVIDIA driver to use workqueue resources; SM resources work from CUDA 12.4)"
        )));
    }
    Ok(())
}

impl Raw {
    fn workqueue_config(&self) -> driver::CUdevWorkqueueConfigResource {
        // SAFETY: as in `Raw::sm`: plain integers; the resource was checked to be a workqueue
        // configuration when it was read (`DeviceResources::workqueue`).
        unsafe { self.0.__bindgen_anon_1.wqConfig }
    }
}

/// How workqueues are shared between contexts (`cuda.core`'s `WorkqueueSharingScopeType`,
/// the driver's `CUdevWorkqueueConfigScope`). Parses from and prints as `cuda.core`'s strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkqueueSharingScope {
    /// `"device_ctx"`: use every workqueue shared across the device's contexts (the driver's
    /// default).
    DeviceCtx,
    /// `"green_ctx_balanced"`: where possible, use workqueues no other balanced green context uses.
    GreenCtxBalanced,
}

impl WorkqueueSharingScope {
    /// `cuda.core`'s name: `"device_ctx"` or `"green_ctx_balanced"`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkqueueSharingScope::DeviceCtx => "device_ctx",
            WorkqueueSharingScope::GreenCtxBalanced => "green_ctx_balanced",
        }
    }

    fn to_driver(self) -> driver::CUdevWorkqueueConfigScope {
        match self {
            WorkqueueSharingScope::DeviceCtx => driver::CUdevWorkqueueConfigScope::CU_WORKQUEUE_SCOPE_DEVICE_CTX,
            WorkqueueSharingScope::GreenCtxBalanced => {
                driver::CUdevWorkqueueConfigScope::CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED
            }
        }
    }

    fn from_driver(scope: driver::CUdevWorkqueueConfigScope) -> Option<WorkqueueSharingScope> {
        [
            WorkqueueSharingScope::DeviceCtx,
            WorkqueueSharingScope::GreenCtxBalanced,
        ]
        .into_iter()
        .find(|s| s.to_driver() == scope)
    }
}

impl fmt::Display for WorkqueueSharingScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WorkqueueSharingScope {
    type Err = CudaError;

    fn from_str(s: &str) -> Result<WorkqueueSharingScope> {
        match s {
            "device_ctx" => Ok(WorkqueueSharingScope::DeviceCtx),
            "green_ctx_balanced" => Ok(WorkqueueSharingScope::GreenCtxBalanced),
            _ => Err(CudaError::InvalidArgument(format!(
                "Unknown sharing_scope: {s:?}. Expected 'device_ctx' or 'green_ctx_balanced'."
            ))),
        }
    }
}

/// How [`WorkqueueResource::configure`] changes a workqueue resource (`cuda.core`'s
/// `WorkqueueResourceOptions`); `None` leaves a setting as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WorkqueueResourceOptions {
    /// How the workqueues are shared.
    pub sharing_scope: Option<WorkqueueSharingScope>,
    /// The most stream-ordered workloads expected to run at once (at least 1). The driver caps
    /// what it can keep apart at `CUDA_DEVICE_MAX_CONNECTIONS`; more is accepted without that
    /// guarantee.
    pub concurrency_limit: Option<u32>,
}

impl WorkqueueResourceOptions {
    /// Checks the options as `configure` does (`cuda.core` checks them when they are made).
    pub fn validate(&self) -> Result<()> {
        if self.concurrency_limit == Some(0) {
            return Err(CudaError::InvalidArgument(
                "concurrency_limit must be >= 1 (None leaves the limit as it is)".into(),
            ));
        }
        Ok(())
    }
}

/// A device's or context's workqueues (`cuda.core`'s `WorkqueueResource`, CUDA 13.1): how many
/// concurrent stream-ordered workloads a green context made with it expects, and how its
/// workqueues are shared. From [`DeviceResources::workqueue`](super::DeviceResources::workqueue);
/// give it, configured, to [`Device::create_context`] beside an SM group.
#[derive(Clone)]
pub struct WorkqueueResource {
    config: Raw,
    queue: Raw,
    device: Device,
    /// The context the workqueues were read from (kept alive, as for SM resources).
    origin: Option<Context>,
}

impl WorkqueueResource {
    /// The configuration and workqueues read from `device` (or `origin`, a context of it).
    pub(super) fn new(config: Raw, queue: Raw, device: Device, origin: Option<Context>) -> WorkqueueResource {
        WorkqueueResource {
            config,
            queue,
            device,
            origin,
        }
    }

    /// How the workqueues are shared; `None` for a scope this crate does not know (a newer
    /// driver's).
    pub fn sharing_scope(&self) -> Option<WorkqueueSharingScope> {
        WorkqueueSharingScope::from_driver(self.config.workqueue_config().sharingScope)
    }

    /// The most stream-ordered workloads expected at once (read from a device, the driver's
    /// `CUDA_DEVICE_MAX_CONNECTIONS`).
    pub fn concurrency_limit(&self) -> u32 {
        self.config.workqueue_config().wqConcurrencyLimit
    }

    /// The device of the workqueues.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Changes the configuration this value carries (the driver is told when a green context is
    /// made with it). Errors: `concurrency_limit` of 0 (`cuda.core`'s message), or a driver
    /// older than CUDA 13.1.
    pub fn configure(&mut self, options: &WorkqueueResourceOptions) -> Result<()> {
        options.validate()?;
        workqueue_support()?;
        let mut config = self.config.workqueue_config();
        if let Some(scope) = options.sharing_scope {
            config.sharingScope = scope.to_driver();
        }
        if let Some(limit) = options.concurrency_limit {
            config.wqConcurrencyLimit = limit;
        }
        self.config.0.__bindgen_anon_1.wqConfig = config;
        Ok(())
    }

    /// The configuration's `CUdevResource` (`cuda.core`'s `handle`), for raw calls.
    pub fn handle(&self) -> &driver::CUdevResource {
        &self.config.0
    }

    /// The `CU_DEV_RESOURCE_TYPE_WORKQUEUE` resource read beside the configuration.
    pub fn workqueue_handle(&self) -> &driver::CUdevResource {
        &self.queue.0
    }

    /// The resource for `cuDevResourceGenerateDesc`, and what it needs kept alive.
    pub(super) fn for_descriptor(&self) -> (driver::CUdevResource, Option<Context>) {
        (self.config.0, self.origin.clone())
    }
}

impl fmt::Debug for WorkqueueResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkqueueResource")
            .field("device", &self.device)
            .field("sharing_scope", &self.sharing_scope())
            .field("concurrency_limit", &self.concurrency_limit())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_scopes_parse_as_cuda_core_names_them() {
        for scope in [
            WorkqueueSharingScope::DeviceCtx,
            WorkqueueSharingScope::GreenCtxBalanced,
        ] {
            assert_eq!(scope.as_str().parse::<WorkqueueSharingScope>().unwrap(), scope);
            assert_eq!(WorkqueueSharingScope::from_driver(scope.to_driver()), Some(scope));
        }
        let err = "bogus".parse::<WorkqueueSharingScope>().unwrap_err().to_string();
        assert_eq!(
            err,
            "Unknown sharing_scope: \"bogus\". Expected 'device_ctx' or 'green_ctx_balanced'."
        );
        assert_eq!(
            WorkqueueSharingScope::from_driver(driver::CUdevWorkqueueConfigScope(77)),
            None
        );
    }

    #[test]
    fn a_concurrency_limit_of_zero_is_refused() {
        let options = WorkqueueResourceOptions {
            concurrency_limit: Some(0),
            ..Default::default()
        };
        assert!(options
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("concurrency_limit must be >= 1"));
        for ok in [None, Some(1), Some(64)] {
            let options = WorkqueueResourceOptions {
                concurrency_limit: ok,
                sharing_scope: Some(WorkqueueSharingScope::GreenCtxBalanced),
            };
            options.validate().unwrap();
        }
    }
}
