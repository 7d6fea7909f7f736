//! Green-context resources (`cuda.core`'s `_device_resources`): [`DeviceResources`] (what a
//! device, context or stream has) and [`SMResource`] with its [`split`](SMResource::split);
//! workqueue resources are in `workqueue`.
//!
//! Resources are values: copies of the driver's `CUdevResource`, which describes SMs or workqueues
//! without owning them (nothing is reserved until a green context is made from them). A resource
//! read from a context (and every group split from it) holds that context, so a green context
//! made from a partition of another green context never outlives the one its SMs came from.
//!
//! Versions: green contexts need a CUDA 12.4 driver (older ones report the missing function by
//! name when it is called); the structured split (`cuDevSmResourceSplit`, per-group counts and
//! co-scheduling) and workqueue resources need CUDA 13.1; before that, splits go through
//! `cuDevSmResourceSplitByCount` (groups of one size).

use super::split::{by_count_request, group_params, GroupRequest};
use super::workqueue::{workqueue_support, WorkqueueResource};
use super::{Context, Device, SMResourceOptions};
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::OnceLock;

/// The CUDA version the installed driver supports, `(major, minor)`, read once.
pub(super) fn driver_version() -> Result<(u32, u32)> {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    if let Some(v) = VERSION.get() {
        return Ok(*v);
    }
    let v = crate::system::get_user_mode_driver_version()?;
    Ok(*VERSION.get_or_init(|| v))
}

/// Whether the driver has the CUDA 13.1 structured split (`cuDevSmResourceSplit`).
fn structured_split_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cuda_sys::LibraryId::Driver
            .library()
            .function_pointer("cuDevSmResourceSplit")
            .is_ok()
    })
}

/// A `CUdevResource` as the driver wrote it, with its link to further resources (`nextResource`)
/// cleared: a copy must not point into memory that is gone.
#[derive(Clone, Copy)]
pub(super) struct Raw(pub(super) driver::CUdevResource);

// SAFETY: plain data (integers and bytes); its only pointer, `nextResource`, is always null.
unsafe impl Send for Raw {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for Raw {}

impl Raw {
    fn new(mut resource: driver::CUdevResource) -> Raw {
        resource.nextResource = std::ptr::null_mut();
        Raw(resource)
    }

    fn sm(&self) -> driver::CUdevSmResource {
        if self.0.type_ != driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM {
            return driver::CUdevSmResource::default();
        }
        // SAFETY: the union holds plain integers and bytes, so every bit pattern is a valid
        // CUdevSmResource; the type says the driver wrote this member.
        unsafe { self.0.__bindgen_anon_1.sm }
    }
}

/// Where resources are read from.
#[derive(Clone)]
enum Source {
    Device(Device),
    Context(Context),
}

/// What a device, context or stream can run on (`cuda.core`'s `DeviceResources`): from
/// [`Device::resources`] the whole device, from [`Context::resources`] (or
/// [`Stream::resources`](crate::Stream::resources)) what the context was provisioned with: for a
/// green context, the SMs and workqueues it was made from.
#[derive(Clone)]
pub struct DeviceResources {
    source: Source,
}

impl DeviceResources {
    /// The device the resources are on.
    pub fn device(&self) -> Device {
        match &self.source {
            Source::Device(d) => *d,
            Source::Context(c) => c.device(),
        }
    }

    /// The context the resources were read from, or `None` for the device's.
    fn origin(&self) -> Option<Context> {
        match &self.source {
            Source::Device(_) => None,
            Source::Context(c) => Some(c.clone()),
        }
    }

    /// `cuDeviceGetDevResource`, `cuCtxGetDevResource` or `cuGreenCtxGetDevResource`.
    fn query(&self, kind: driver::CUdevResourceType) -> Result<Raw> {
        crate::reaper::refuse_in_callback()?;
        let mut resource = driver::CUdevResource::default();
        match &self.source {
            Source::Device(d) => {
                // SAFETY: out-pointer to a local; the device handle is valid.
                unsafe { driver::cuDeviceGetDevResource(d.handle(), &mut resource, kind) }
                    .check("cuDeviceGetDevResource")?;
            }
            Source::Context(c) => match c.green() {
                Some(green) => {
                    let _one_thread = green.lock.lock().unwrap_or_else(|p| p.into_inner());
                    // SAFETY: out-pointer to a local; the green context lives while `c` does, and
                    // the lock lets one thread at a time use its handle (the driver's rule).
                    unsafe { driver::cuGreenCtxGetDevResource(green.handle, &mut resource, kind) }
                        .check("cuGreenCtxGetDevResource")?;
                }
                None => {
                    // SAFETY: out-pointer to a local; the context lives while `c` does.
                    unsafe { driver::cuCtxGetDevResource(c.handle(), &mut resource, kind) }
                        .check("cuCtxGetDevResource")?;
                }
            },
        }
        if resource.type_ != kind {
            return Err(CudaError::InvalidArgument(format!(
                "the driver answered a query for resources of type {} with type {}",
                kind.0, resource.type_.0
            )));
        }
        Ok(Raw::new(resource))
    }

    /// The SMs (`cuda.core`'s `.sm`).
    pub fn sm(&self) -> Result<SMResource> {
        let raw = self.query(driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)?;
        SMResource::from_driver(raw, self.device(), self.origin(), false, None, Part::Whole)
    }

    /// The workqueues (`cuda.core`'s `.workqueue`): the configuration
    /// (`CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG`) and the workqueues it describes
    /// (`CU_DEV_RESOURCE_TYPE_WORKQUEUE`) as one value. Needs a CUDA 13.1 driver (an error saying
    /// so otherwise).
    pub fn workqueue(&self) -> Result<WorkqueueResource> {
        workqueue_support()?;
        let config = self.query(driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG)?;
        let queue = self.query(driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE)?;
        Ok(WorkqueueResource::new(config, queue, self.device(), self.origin()))
    }
}

impl fmt::Debug for DeviceResources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::Device(d) => write!(f, "DeviceResources({d:?})"),
            Source::Context(c) => write!(f, "DeviceResources({c:?})"),
        }
    }
}

impl Device {
    /// The device's resources, for splitting into green contexts ([`Device::create_context`]).
    pub fn resources(&self) -> DeviceResources {
        DeviceResources {
            source: Source::Device(*self),
        }
    }
}

impl Context {
    /// The resources this context runs on: for a green context, the SMs (and workqueues) it was
    /// made with; for others, the device's.
    pub fn resources(&self) -> DeviceResources {
        DeviceResources {
            source: Source::Context(self.clone()),
        }
    }
}

bitflags::bitflags! {
    /// The flags of an [`SMResource`] (`CUdevSmResourceGroup_flags`); bits this crate does not
    /// name are kept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SMResourceFlags: u32 {
        /// SMs were backfilled into the group beyond whole co-scheduled sets.
        const BACKFILL = driver::CUdevSmResourceGroup_flags::CU_DEV_SM_RESOURCE_GROUP_BACKFILL.0;
        /// The SMs are on one locality domain.
        const LOCALITY_DOMAIN_ID = driver::CUdevSmResourceGroup_flags::CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID.0;
        /// The group may take SMs of its locality domain beyond the domain's share.
        const LOCALITY_DOMAIN_SUPPLEMENTAL_SMS =
            driver::CUdevSmResourceGroup_flags::CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS.0;
        const _ = !0;
    }
}

/// A set of SMs (`cuda.core`'s `SMResource`): all of a device's or a context's
/// ([`DeviceResources::sm`]), or a group of a [`split`](Self::split). Give groups to
/// [`Device::create_context`] to make green contexts that run only on them.
///
/// Cheap to clone (a copy of the driver's description). It does not reserve the SMs: two green
/// contexts may be made from one group (they then share its SMs).
#[derive(Clone)]
pub struct SMResource {
    raw: Raw,
    device: Device,
    min_partition_size: u32,
    coscheduled_alignment: u32,
    flags: SMResourceFlags,
    /// Made by a dry run: describes a partition the driver did not make.
    dry_run: bool,
    /// Read from a device or context, or made by a split (which the driver does not split again).
    part: Part,
    /// The context the SMs were read from (kept alive: see the module documentation).
    origin: Option<Context>,
}

/// Where an [`SMResource`] came from, which decides whether it may be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Read from a device or context (`cuDeviceGetDevResource` and the like): the input the
    /// driver's splits take.
    Whole,
    /// A group of a split: never split again (the driver documents that its results cannot be
    /// split again before a green context is made from them; split that context's SMs instead).
    Group,
    /// The remainder of a split: split again only by the CUDA 13.1 split, which documents
    /// splitting the remainder (its "bisect" use); `cuDevSmResourceSplitByCount` does not take
    /// its own results.
    Remainder,
}

/// `cuda.core`'s guideline from CUDA 12.4 (`cuDevSmResourceSplitByCount`'s documentation) for
/// drivers that do not report the granularity (before CUDA 13.0): `(minimum SMs of a group, the
/// multiple its count is rounded to)` for a compute capability's major version.
fn guideline_granularity(major: u32) -> (u32, u32) {
    match major {
        // "9.0+: the minimum count is 8 SMs and must be a multiple of 8."
        9.. => (8, 8),
        // "8.X: the minimum count is 4 SMs and must be a multiple of 2."
        8 => (4, 2),
        // "7.X: the minimum count is 2 SMs and must be a multiple of 2."
        7 => (2, 2),
        // "6.X: the minimum count is 1 SM."
        _ => (1, 1),
    }
}

impl SMResource {
    /// Reads what the driver wrote. Before CUDA 13.0 the driver reports only the SM count, so
    /// the partition size and alignment are CUDA 12.4's guideline for the architecture
    /// ([`guideline_granularity`]) or the parent's; zeros in a split's results are the parent's
    /// too.
    fn from_driver(
        raw: Raw,
        device: Device,
        origin: Option<Context>,
        dry_run: bool,
        parent: Option<&SMResource>,
        part: Part,
    ) -> Result<SMResource> {
        let sm = raw.sm();
        let version = driver_version()?;
        let (min_partition_size, coscheduled_alignment, flags) = if version < (13, 0) {
            match parent {
                Some(p) => (p.min_partition_size, p.coscheduled_alignment, p.flags),
                None => {
                    let (min, alignment) = guideline_granularity(device.compute_capability()?.major);
                    (min, alignment, SMResourceFlags::empty())
                }
            }
        } else {
            let or_parent = |v: u32, of: fn(&SMResource) -> u32| if v != 0 { v } else { parent.map_or(0, of) };
            (
                or_parent(sm.minSmPartitionSize, |p| p.min_partition_size),
                or_parent(sm.smCoscheduledAlignment, |p| p.coscheduled_alignment),
                // The field exists from CUDA 13.1.
                if version >= (13, 1) {
                    SMResourceFlags::from_bits_retain(sm.flags)
                } else {
                    SMResourceFlags::empty()
                },
            )
        };
        Ok(SMResource {
            raw,
            device,
            min_partition_size,
            coscheduled_alignment,
            flags,
            dry_run,
            part,
            origin,
        })
    }

    /// The number of SMs.
    pub fn sm_count(&self) -> u32 {
        self.raw.sm().smCount
    }

    /// The fewest SMs a group split from this resource may have.
    pub fn min_partition_size(&self) -> u32 {
        self.min_partition_size
    }

    /// How many SMs are guaranteed to be co-scheduled together (a group's count is a multiple
    /// of this unless it was backfilled).
    pub fn coscheduled_alignment(&self) -> u32 {
        self.coscheduled_alignment
    }

    /// The driver's flags of the resource (CUDA 13.1; empty before).
    pub fn flags(&self) -> SMResourceFlags {
        self.flags
    }

    /// The device the SMs are on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether this describes a group of a dry run ([`split`](Self::split) with `dry_run`), which
    /// cannot make a green context nor be split.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The driver's `CUdevResource` (`cuda.core`'s `handle`), for raw calls.
    pub fn handle(&self) -> &driver::CUdevResource {
        &self.raw.0
    }

    /// The resource for `cuDevResourceGenerateDesc`, and what it needs kept alive.
    pub(super) fn for_descriptor(&self) -> Result<(driver::CUdevResource, Option<Context>)> {
        if self.dry_run {
            return Err(CudaError::InvalidArgument(
                "Cannot create a green context from a dry-run SMResource: a dry run only computes the \
                 partition; split again with dry_run = false to get groups a context can use"
                    .into(),
            ));
        }
        self.refuse_empty("make a green context")?;
        Ok((self.raw.0, self.origin.clone()))
    }

    /// An error for a resource with no SMs (an empty remainder, which the driver writes as
    /// `CU_DEV_RESOURCE_TYPE_INVALID`): nothing can be made of it.
    fn refuse_empty(&self, what: &str) -> Result<()> {
        if self.raw.0.type_ != driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM || self.sm_count() == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "cannot {what} from an SMResource with no SMs (an empty remainder: the split's groups took every SM)"
            )));
        }
        Ok(())
    }

    /// Splits the SMs into groups and a remainder (`cuda.core`'s `SMResource.split`): returns
    /// `(groups, remainder)`, each group a set of SMs no other group has.
    ///
    /// `options` says how many groups and of what size (see [`SMResourceOptions`]; its checks
    /// come first, with `cuda.core`'s messages). The driver may round counts up to its
    /// granularity ([`min_partition_size`](Self::min_partition_size),
    /// [`coscheduled_alignment`](Self::coscheduled_alignment)), and refuses what it cannot
    /// satisfy (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`). With `dry_run` the driver only
    /// computes the partition: the counts are what a real split would give (discovery included),
    /// but the groups cannot make green contexts.
    ///
    /// Drivers before CUDA 13.1 have no `cuDevSmResourceSplit`: there the split is
    /// `cuDevSmResourceSplitByCount`, which makes groups of one size only (every `count` equal,
    /// no co-scheduling fields, no backfill: others are refused), and may make fewer groups than
    /// asked when the SMs run out (the result then has fewer groups). There a dry run is the
    /// real split with its results marked as a dry run's (a split reserves nothing; the driver's
    /// simulation does not tell the groups' sizes).
    ///
    /// What the driver does not split is refused first: a group of a split (the driver's results
    /// are not split again: make a green context of the group and split its
    /// [`resources`](Context::resources) instead), a remainder where the CUDA 13.1 split is
    /// missing, a resource with no SMs (an empty remainder). With the CUDA 13.1 split, more
    /// groups than the resource has SMs are refused too (each group needs SMs).
    pub fn split(&self, options: &SMResourceOptions, dry_run: bool) -> Result<(Vec<SMResource>, SMResource)> {
        crate::reaper::refuse_in_callback()?;
        let groups = options.groups()?;
        if self.dry_run {
            return Err(CudaError::InvalidArgument(
                "a dry-run SMResource cannot be split: it describes a partition the driver did not make; \
                 split the resource it came from with dry_run = false"
                    .into(),
            ));
        }
        let structured = structured_split_available();
        match self.part {
            Part::Group => {
                return Err(CudaError::InvalidArgument(
                    "a group of a split cannot be split again (the driver's split results are not inputs of another \
                     split): make a green context of it (Device::create_context) and split that context's \
                     resources().sm(), or split the original resource into more groups"
                        .into(),
                ))
            }
            Part::Remainder if !structured => {
                return Err(CudaError::NotSupported(format!(
                    "the remainder of a split cannot be split again with cuDevSmResourceSplitByCount (the driver \
                     supports CUDA {}.{}; the CUDA 13.1 split, cuDevSmResourceSplit, splits remainders): split the \
                     original resource into more groups instead",
                    driver_version()?.0,
                    driver_version()?.1
                )))
            }
            _ => {}
        }
        self.refuse_empty("split")?;
        if structured {
            self.split_structured(&groups, dry_run)
        } else {
            self.split_by_count(&groups, dry_run)
        }
    }

    /// `cuDevSmResourceSplit` (CUDA 13.1).
    fn split_structured(&self, groups: &[GroupRequest], dry_run: bool) -> Result<(Vec<SMResource>, SMResource)> {
        let n = groups.len();
        // Checked before the result array is allocated: every group made needs SMs of its own.
        if !dry_run && n > self.sm_count() as usize {
            return Err(CudaError::InvalidArgument(format!(
                "count asks for {n} groups, more than the {} SMs of the resource (every group needs SMs of its own)",
                self.sm_count()
            )));
        }
        let mut params = group_params(groups);
        let count = u32::try_from(n).map_err(|_| CudaError::InvalidArgument(format!("{n} groups are too many")))?;
        let mut results = vec![driver::CUdevResource::default(); if dry_run { 0 } else { n }];
        let mut remainder = driver::CUdevResource::default();
        let out = if dry_run {
            std::ptr::null_mut()
        } else {
            results.as_mut_ptr()
        };
        // SAFETY: `results` has room for `count` resources (or is null for a dry run), `params`
        // holds `count` entries the driver reads and updates, the input is a resource the driver
        // wrote and the remainder an out-pointer to a local; flags must be 0.
        unsafe { driver::cuDevSmResourceSplit(out, count, &self.raw.0, &mut remainder, 0, params.as_mut_ptr()) }
            .check("cuDevSmResourceSplit")?;
        let made = if dry_run {
            // The driver wrote the counts (discovered ones too) into the parameters.
            params
                .iter()
                .map(|p| {
                    let mut synthetic = driver::CUdevResource {
                        type_: driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
                        ..Default::default()
                    };
                    synthetic.__bindgen_anon_1.sm = driver::CUdevSmResource {
                        smCount: p.smCount,
                        ..Default::default()
                    };
                    self.child(synthetic, true, Part::Group)
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            results
                .into_iter()
                .map(|r| self.child(r, false, Part::Group))
                .collect::<Result<Vec<_>>>()?
        };
        Ok((made, self.child(remainder, dry_run, Part::Remainder)?))
    }

    /// `cuDevSmResourceSplitByCount` (CUDA 12.4): groups of one size.
    fn split_by_count(&self, groups: &[GroupRequest], dry_run: bool) -> Result<(Vec<SMResource>, SMResource)> {
        let (count, min_count) = by_count_request(groups, driver_version()?)?;
        // The driver makes fewer groups than asked when the SMs run out, and no more groups than
        // SMs: capped before the result array is allocated.
        let count = count.min(self.sm_count());
        // A dry run makes the split for real and marks its results as a dry run's (they make no
        // green context and are not split again): harmless, as a split reserves nothing. The
        // driver's own simulation (a null result array) does not say enough: a CUDA 13.0 driver
        // (H100, 132 SMs) answers "15 groups" for any request of 8-SM groups, one or a thousand,
        // the groups the SMs allow rather than the split asked for, and leaves the remainder
        // unwritten, so neither the groups made nor their sizes can be told from it.
        let mut results = vec![driver::CUdevResource::default(); count as usize];
        let mut made = count;
        let mut remainder = driver::CUdevResource::default();
        // SAFETY: `results` has room for `made` resources, which the driver lowers to the number
        // it wrote; the input is a resource the driver wrote and the remainder an out-pointer to
        // a local; flags 0 are the defaults.
        unsafe {
            driver::cuDevSmResourceSplitByCount(
                results.as_mut_ptr(),
                &mut made,
                &self.raw.0,
                &mut remainder,
                0,
                min_count,
            )
        }
        .check("cuDevSmResourceSplitByCount")?;
        results.truncate(made.min(count) as usize);
        let made = results
            .into_iter()
            .map(|r| self.child(r, dry_run, Part::Group))
            .collect::<Result<Vec<_>>>()?;
        Ok((made, self.child(remainder, dry_run, Part::Remainder)?))
    }

    fn child(&self, raw: driver::CUdevResource, dry_run: bool, part: Part) -> Result<SMResource> {
        SMResource::from_driver(
            Raw::new(raw),
            self.device,
            self.origin.clone(),
            dry_run,
            Some(self),
            part,
        )
    }
}

impl fmt::Debug for SMResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SMResource")
            .field("device", &self.device)
            .field("sm_count", &self.sm_count())
            .field("min_partition_size", &self.min_partition_size)
            .field("coscheduled_alignment", &self.coscheduled_alignment)
            .field("flags", &self.flags)
            .field("dry_run", &self.dry_run)
            .field("part", &self.part)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_never_point_at_other_resources() {
        let mut r = driver::CUdevResource::default();
        let mut other = driver::CUdevResource::default();
        r.nextResource = &mut other;
        assert!(Raw::new(r).0.nextResource.is_null());
    }

    #[test]
    fn a_resource_of_another_type_reads_as_no_sms() {
        let mut r = driver::CUdevResource {
            type_: driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_INVALID,
            ..Default::default()
        };
        r.__bindgen_anon_1.sm = driver::CUdevSmResource {
            smCount: 12,
            ..Default::default()
        };
        assert_eq!(Raw::new(r).sm().smCount, 0);
        r.type_ = driver::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM;
        assert_eq!(Raw::new(r).sm().smCount, 12);
    }
}
