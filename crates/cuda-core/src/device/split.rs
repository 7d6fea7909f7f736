//! [`SMResourceOptions`] and [`PerGroup`]: what [`SMResource::split`](super::SMResource::split)
//! is asked for, checked and broadcast to one request per group the way `cuda.core` does it
//! (its "structure of arrays" options), with its error messages.
//!
//! This part needs no driver, so it is tested on the host.

use crate::{CudaError, Result};
use cuda_sys::driver;

/// A value for every group of a split ([`All`](Self::All)) or one value per group
/// ([`Each`](Self::Each)): the Rust form of `cuda.core`'s "scalar or sequence" option fields.
///
/// In [`SMResourceOptions`], [`count`](SMResourceOptions::count) decides the number of groups: one
/// for `All`, the length of the vector for `Each`. Every other field is either `All` (the same
/// value for each group) or `Each` with exactly that many entries. With serde, `All(x)` reads and
/// writes as the bare value and `Each(v)` as a list, as `cuda.core` takes them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum PerGroup<T> {
    /// One value for every group (`cuda.core`'s scalar).
    All(T),
    /// One value per group (`cuda.core`'s sequence).
    Each(Vec<T>),
}

impl<T: Default> Default for PerGroup<T> {
    fn default() -> Self {
        PerGroup::All(T::default())
    }
}

impl<T: Clone> PerGroup<T> {
    /// The value of every one of `n` groups.
    fn broadcast(&self, n: usize) -> Vec<T> {
        match self {
            PerGroup::All(v) => vec![v.clone(); n],
            PerGroup::Each(v) => v.clone(),
        }
    }
}

/// How [`SMResource::split`](super::SMResource::split) partitions SMs (`cuda.core`'s
/// `SMResourceOptions`).
///
/// Fields map to the driver's `CU_DEV_SM_RESOURCE_GROUP_PARAMS` of each group: `count` to
/// `smCount`, `coscheduled_sm_count` to `coscheduledSmCount`, `preferred_coscheduled_sm_count` to
/// `preferredCoscheduledSmCount`, `backfill` to the `CU_DEV_SM_RESOURCE_GROUP_BACKFILL` flag.
/// `None` leaves the driver's default (for `count`: discovery, as many SMs as the driver can
/// give the group).
///
/// ```
/// use cuda_core::{PerGroup, SMResourceOptions};
/// // Two groups: 16 SMs, and whatever can be found for the second (discovery).
/// let options = SMResourceOptions {
///     count: PerGroup::Each(vec![Some(16), None]),
///     ..Default::default()
/// };
/// assert_eq!(options, SMResourceOptions::with_counts([Some(16), None]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SMResourceOptions {
    /// SMs per group; `None` asks the driver to discover a count (as `cuda.core`'s `count=None`).
    /// `All` makes one group, `Each` one group per entry (at least one).
    pub count: PerGroup<Option<u32>>,
    /// SMs guaranteed to be co-scheduled together in each group (what clusters need); the
    /// device's alignment when `None`. Needs the CUDA 13.1 split (`cuDevSmResourceSplit`).
    pub coscheduled_sm_count: PerGroup<Option<u32>>,
    /// Co-scheduled SMs the driver tries to merge groups into (a hint for preferred cluster
    /// shapes); the driver's default when `None`. Needs the CUDA 13.1 split.
    pub preferred_coscheduled_sm_count: PerGroup<Option<u32>>,
    /// Let the driver fill a group with SMs outside whole co-scheduled sets, so counts that are
    /// not a multiple of the co-scheduling size can be met. Needs the CUDA 13.1 split.
    pub backfill: PerGroup<bool>,
}

impl SMResourceOptions {
    /// One group of `count` SMs.
    pub fn with_count(count: u32) -> SMResourceOptions {
        SMResourceOptions {
            count: PerGroup::All(Some(count)),
            ..Default::default()
        }
    }

    /// One group per entry, of that many SMs (`None`: discover the count).
    pub fn with_counts<C: Into<Option<u32>>>(counts: impl IntoIterator<Item = C>) -> SMResourceOptions {
        SMResourceOptions {
            count: PerGroup::Each(counts.into_iter().map(Into::into).collect()),
            ..Default::default()
        }
    }

    /// Checks the options as `split` does, without a driver: `count` decides the number of
    /// groups, and every other field must be `All`, or `Each` of that length. The messages are
    /// `cuda.core`'s.
    pub fn validate(&self) -> Result<()> {
        self.groups().map(|_| ())
    }

    /// The request of every group, broadcast.
    pub(super) fn groups(&self) -> Result<Vec<GroupRequest>> {
        let (n, count_is_scalar) = match &self.count {
            PerGroup::All(_) => (1, true),
            PerGroup::Each(v) if v.is_empty() => {
                return Err(CudaError::InvalidArgument(
                    "count sequence must not be empty (PerGroup::Each needs one entry per group; use PerGroup::All for one group)".into(),
                ))
            }
            PerGroup::Each(v) => (v.len(), false),
        };
        check_length(
            "coscheduled_sm_count",
            self.coscheduled_sm_count.len(),
            n,
            count_is_scalar,
        )?;
        check_length(
            "preferred_coscheduled_sm_count",
            self.preferred_coscheduled_sm_count.len(),
            n,
            count_is_scalar,
        )?;
        check_length("backfill", self.backfill.len(), n, count_is_scalar)?;
        u32::try_from(n).map_err(|_| {
            CudaError::InvalidArgument(format!(
                "count asks for {n} groups; the driver takes at most {}",
                u32::MAX
            ))
        })?;
        let counts = self.count.broadcast(n);
        let coscheduled = self.coscheduled_sm_count.broadcast(n);
        let preferred = self.preferred_coscheduled_sm_count.broadcast(n);
        let backfill = self.backfill.broadcast(n);
        Ok((0..n)
            .map(|i| GroupRequest {
                sm_count: counts[i],
                coscheduled: coscheduled[i],
                preferred: preferred[i],
                backfill: backfill[i],
            })
            .collect())
    }
}

impl<T> PerGroup<T> {
    /// The number of entries of `Each`; `None` for `All`.
    fn len(&self) -> Option<usize> {
        match self {
            PerGroup::All(_) => None,
            PerGroup::Each(v) => Some(v.len()),
        }
    }
}

/// `cuda.core`'s checks of a field against `count`.
fn check_length(field: &str, len: Option<usize>, n: usize, count_is_scalar: bool) -> Result<()> {
    match len {
        Some(_) if count_is_scalar => Err(CudaError::InvalidArgument(format!(
            "{field} is a Sequence but count is scalar; count must be a Sequence to specify multiple groups \
             ({field} is PerGroup::Each while count is PerGroup::All)"
        ))),
        Some(len) if len != n => Err(CudaError::InvalidArgument(format!(
            "{field} has length {len}, expected {n} (must match count)"
        ))),
        _ => Ok(()),
    }
}

/// What one group of a split asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GroupRequest {
    /// SMs; `None`: discover.
    pub sm_count: Option<u32>,
    pub coscheduled: Option<u32>,
    pub preferred: Option<u32>,
    pub backfill: bool,
}

/// The parameters of `cuDevSmResourceSplit` (CUDA 13.1), one per group.
pub(super) fn group_params(groups: &[GroupRequest]) -> Vec<driver::CU_DEV_SM_RESOURCE_GROUP_PARAMS> {
    groups
        .iter()
        .map(|g| driver::CU_DEV_SM_RESOURCE_GROUP_PARAMS {
            smCount: g.sm_count.unwrap_or(0),
            coscheduledSmCount: g.coscheduled.unwrap_or(0),
            preferredCoscheduledSmCount: g.preferred.unwrap_or(0),
            flags: if g.backfill {
                driver::CUdevSmResourceGroup_flags::CU_DEV_SM_RESOURCE_GROUP_BACKFILL.0
            } else {
                0
            },
            ..Default::default()
        })
        .collect()
}

/// The arguments of `cuDevSmResourceSplitByCount` (drivers without `cuDevSmResourceSplit`):
/// `(groups, minimum SMs per group)`. That call makes groups of one size and knows no
/// co-scheduling parameters, so anything else is refused with `cuda.core`'s messages.
pub(super) fn by_count_request(groups: &[GroupRequest], driver: (u32, u32)) -> Result<(u32, u32)> {
    let why = format!(
        "the installed driver supports CUDA {}.{}, which lacks cuDevSmResourceSplit: update the NVIDIA driver",
        driver.0, driver.1
    );
    for (field, set) in [
        ("coscheduled_sm_count", groups.iter().any(|g| g.coscheduled.is_some())),
        (
            "preferred_coscheduled_sm_count",
            groups.iter().any(|g| g.preferred.is_some()),
        ),
        ("backfill", groups.iter().any(|g| g.backfill)),
    ] {
        if set {
            return Err(CudaError::NotSupported(format!(
                "SMResourceOptions.{field} requires the CUDA 13.1 structured SM split API ({why})"
            )));
        }
    }
    let first = groups.first().and_then(|g| g.sm_count);
    if groups.iter().any(|g| g.sm_count != first) {
        return Err(CudaError::NotSupported(format!(
            "CUDA 12 SM splitting only supports homogeneous count values; use CUDA 13.1 or newer for per-group counts ({why})"
        )));
    }
    let n = u32::try_from(groups.len())
        .map_err(|_| CudaError::InvalidArgument(format!("{} groups are more than the driver takes", groups.len())))?;
    Ok((n, first.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn scalars_make_one_group() {
        let groups = SMResourceOptions::with_count(16).groups().unwrap();
        assert_eq!(
            groups,
            [GroupRequest {
                sm_count: Some(16),
                coscheduled: None,
                preferred: None,
                backfill: false
            }]
        );
        // Discovery is the default.
        let groups = SMResourceOptions::default().groups().unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].sm_count, None);
    }

    #[test]
    fn scalars_broadcast_to_every_group() {
        let options = SMResourceOptions {
            count: PerGroup::Each(vec![Some(8), Some(16), None]),
            coscheduled_sm_count: PerGroup::All(Some(4)),
            preferred_coscheduled_sm_count: PerGroup::Each(vec![None, Some(8), Some(4)]),
            backfill: PerGroup::All(true),
        };
        let groups = options.groups().unwrap();
        assert_eq!(groups.len(), 3);
        assert!(groups.iter().all(|g| g.coscheduled == Some(4) && g.backfill));
        assert_eq!(
            groups.iter().map(|g| g.sm_count).collect::<Vec<_>>(),
            [Some(8), Some(16), None]
        );
        assert_eq!(
            groups.iter().map(|g| g.preferred).collect::<Vec<_>>(),
            [None, Some(8), Some(4)]
        );
        let params = group_params(&groups);
        assert_eq!(params[0].smCount, 8);
        assert_eq!(params[2].smCount, 0, "discovery is smCount 0");
        assert_eq!(params[1].coscheduledSmCount, 4);
        assert_eq!(
            params[0].preferredCoscheduledSmCount, 0,
            "None is the driver's default, 0"
        );
        assert_eq!(
            params[0].flags,
            driver::CUdevSmResourceGroup_flags::CU_DEV_SM_RESOURCE_GROUP_BACKFILL.0
        );
        assert!(params.iter().all(|p| p.reserved == [0; 11] && p.localityDomainId == 0));
    }

    #[test]
    fn a_sequence_field_needs_a_sequence_count() {
        let options = SMResourceOptions {
            coscheduled_sm_count: PerGroup::Each(vec![Some(2), Some(2)]),
            ..SMResourceOptions::with_count(8)
        };
        let m = message(options.groups());
        assert!(m.contains("count is scalar"), "{m}");
        assert!(m.starts_with("coscheduled_sm_count is a Sequence but count is scalar; count must be a Sequence"));
        let options = SMResourceOptions {
            backfill: PerGroup::Each(vec![true]),
            ..SMResourceOptions::with_count(8)
        };
        assert!(message(options.validate()).starts_with("backfill is a Sequence but count is scalar"));
    }

    #[test]
    fn sequence_lengths_must_match_count() {
        let options = SMResourceOptions {
            coscheduled_sm_count: PerGroup::Each(vec![Some(2); 3]),
            ..SMResourceOptions::with_counts([8, 8])
        };
        assert_eq!(
            message(options.groups()),
            "coscheduled_sm_count has length 3, expected 2 (must match count)"
        );
        let options = SMResourceOptions {
            preferred_coscheduled_sm_count: PerGroup::Each(vec![Some(2)]),
            ..SMResourceOptions::with_counts([8, 8])
        };
        assert_eq!(
            message(options.groups()),
            "preferred_coscheduled_sm_count has length 1, expected 2 (must match count)"
        );
        let options = SMResourceOptions {
            backfill: PerGroup::Each(vec![false; 4]),
            ..SMResourceOptions::with_counts([8, 8])
        };
        assert!(message(options.groups()).contains("expected 2"));
    }

    #[test]
    fn an_empty_count_sequence_is_refused() {
        let options = SMResourceOptions::with_counts(Vec::<u32>::new());
        assert!(message(options.groups()).starts_with("count sequence must not be empty"));
    }

    #[test]
    fn the_count_fallback_takes_homogeneous_counts_only() {
        let version = (13, 0);
        let groups = SMResourceOptions::with_counts([8, 8, 8]).groups().unwrap();
        assert_eq!(by_count_request(&groups, version).unwrap(), (3, 8));
        let groups = SMResourceOptions::default().groups().unwrap();
        assert_eq!(
            by_count_request(&groups, version).unwrap(),
            (1, 0),
            "discovery is minCount 0"
        );
        let groups = SMResourceOptions::with_counts([8, 16]).groups().unwrap();
        let m = message(by_count_request(&groups, version));
        assert!(
            m.starts_with("CUDA 12 SM splitting only supports homogeneous count values; use CUDA 13.1 or newer"),
            "{m}"
        );
        assert!(m.contains("CUDA 13.0"), "{m}");
        let groups = SMResourceOptions::with_counts([Some(8), None]).groups().unwrap();
        assert!(message(by_count_request(&groups, version)).contains("homogeneous"));
        for (options, field) in [
            (
                SMResourceOptions {
                    coscheduled_sm_count: PerGroup::All(Some(2)),
                    ..Default::default()
                },
                "coscheduled_sm_count",
            ),
            (
                SMResourceOptions {
                    preferred_coscheduled_sm_count: PerGroup::All(Some(2)),
                    ..Default::default()
                },
                "preferred_coscheduled_sm_count",
            ),
            (
                SMResourceOptions {
                    backfill: PerGroup::All(true),
                    ..Default::default()
                },
                "backfill",
            ),
        ] {
            let m = message(by_count_request(&options.groups().unwrap(), version));
            assert!(
                m.starts_with(&format!(
                    "SMResourceOptions.{field} requires the CUDA 13.1 structured SM split API"
                )),
                "{m}"
            );
        }
    }
}
