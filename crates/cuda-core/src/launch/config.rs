//! [`LaunchConfig`] and [`Dim3`]: a launch's shape and attributes, checked against the device
//! before the driver sees them.

use crate::device::{Device, Limits};
use crate::{CudaError, Result};
use cuda_sys::driver;

/// Grid, block or cluster dimensions. `5.into()`, `(8, 8).into()` and `(4, 4, 4).into()` work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Dim3 {
    /// The extent in x, the fastest-varying dimension (a launch refuses 0).
    pub x: u32,
    /// The extent in y (1 when made from a single number).
    pub y: u32,
    /// The extent in z (1 unless made from a triple).
    pub z: u32,
}

impl Dim3 {
    /// x * y * z (saturating at `u64::MAX`: three `u32`s can overflow it).
    pub fn volume(&self) -> u64 {
        (self.x as u64)
            .saturating_mul(self.y as u64)
            .saturating_mul(self.z as u64)
    }
}

impl Default for Dim3 {
    fn default() -> Self {
        Dim3 { x: 1, y: 1, z: 1 }
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// How a kernel is launched. Checked against the device before the driver sees it.
///
/// ```
/// use cuda_core::LaunchConfig;
/// let config = LaunchConfig { shmem_size: 1024, ..LaunchConfig::new(256, (128, 2)) };
/// assert_eq!(config.grid.x, 256);
/// assert_eq!(config.block.volume(), 256);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LaunchConfig {
    /// The grid: in blocks, or with a [`cluster`](Self::cluster) shape, in clusters (as in
    /// `cuda.core`: `grid: (4, 4, 1)` with `cluster: (2, 2, 1)` launches 8 x 8 blocks).
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Thread block cluster shape (compute capability 9.0+).
    pub cluster: Option<Dim3>,
    /// Dynamic shared memory per block, in bytes.
    pub shmem_size: u32,
    /// A cooperative launch (grid-wide synchronisation): `cuda.core`'s `is_cooperative`
    /// (`cooperative_launch` before 1.0); serialised as `cooperative_launch`, and read from
    /// either name.
    #[serde(alias = "is_cooperative")]
    pub cooperative_launch: bool,
    /// Launch priority (`CU_LAUNCH_ATTRIBUTE_PRIORITY`).
    pub priority: Option<i32>,
    /// Programmatic dependent launch: let this kernel start before the previous one on the stream
    /// has finished (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`).
    pub programmatic_stream_serialization: bool,
}

/// The largest portable cluster, in blocks.
const MAX_PORTABLE_CLUSTER: u64 = 8;

impl LaunchConfig {
    /// Whether the launch is cooperative (`cuda.core`'s `LaunchConfig.is_cooperative`).
    pub fn is_cooperative(&self) -> bool {
        self.cooperative_launch
    }

    /// A grid of `grid` blocks of `block` threads.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            ..Default::default()
        }
    }

    /// The driver's `CUlaunchConfig` for `stream`, with the launch attributes written into
    /// `attrs` (which must outlive its use).
    /// Whether the launch needs `cuLaunchKernelEx` attributes (clusters, cooperative, priority,
    /// programmatic serialization).
    #[inline]
    pub(crate) fn has_attributes(&self) -> bool {
        self.cluster.is_some()
            || self.cooperative_launch
            || self.priority.is_some()
            || self.programmatic_stream_serialization
    }

    pub(crate) fn driver_config(
        &self,
        stream: driver::CUstream,
        attrs: &mut [driver::CUlaunchAttribute; 4],
    ) -> driver::CUlaunchConfig {
        let blocks = self.grid_in_blocks();
        let mut n = 0;
        if let Some(c) = self.cluster {
            attrs[n].id = driver::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim = driver::CUlaunchAttributeValue_union__bindgen_ty_1 { x: c.x, y: c.y, z: c.z };
            n += 1;
        }
        if self.cooperative_launch {
            attrs[n].id = driver::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            attrs[n].value.cooperative = 1;
            n += 1;
        }
        if let Some(p) = self.priority {
            attrs[n].id = driver::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY;
            attrs[n].value.priority = p;
            n += 1;
        }
        if self.programmatic_stream_serialization {
            attrs[n].id = driver::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n].value.programmaticStreamSerializationAllowed = 1;
            n += 1;
        }
        driver::CUlaunchConfig {
            gridDimX: blocks.x,
            gridDimY: blocks.y,
            gridDimZ: blocks.z,
            blockDimX: self.block.x,
            blockDimY: self.block.y,
            blockDimZ: self.block.z,
            sharedMemBytes: self.shmem_size,
            hStream: stream,
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        }
    }

    /// The grid in blocks: [`grid`](Self::grid) times the cluster shape, if any (saturating: an
    /// overflowing product is refused by [`validate`](Self::validate)).
    #[inline]
    pub fn grid_in_blocks(&self) -> Dim3 {
        match self.cluster {
            None => self.grid,
            Some(c) => Dim3 {
                x: self.grid.x.saturating_mul(c.x),
                y: self.grid.y.saturating_mul(c.y),
                z: self.grid.z.saturating_mul(c.z),
            },
        }
    }

    /// Checks the configuration against `device`'s limits.
    pub fn validate(&self, device: &Device) -> Result<()> {
        self.check(device.limits()?)
    }

    #[inline]
    pub(crate) fn check(&self, l: &Limits) -> Result<()> {
        if self.plainly_fits(l) {
            return Ok(());
        }
        self.check_in_full(l)
    }

    /// The common case, in a few comparisons: no cluster, not cooperative, every dimension
    /// non-zero and within the device's limits. `false` sends the configuration to the full check
    /// (which accepts what this does not cover, or says what is wrong).
    #[inline]
    fn plainly_fits(&self, l: &Limits) -> bool {
        let (g, b) = (self.grid, self.block);
        let nonzero = g.x != 0 && g.y != 0 && g.z != 0 && b.x != 0 && b.y != 0 && b.z != 0;
        nonzero
            && self.cluster.is_none()
            && !self.cooperative_launch
            && b.x <= l.max_block[0]
            && b.y <= l.max_block[1]
            && b.z <= l.max_block[2]
            && b.volume() <= u64::from(l.max_threads_per_block)
            && g.x <= l.max_grid[0]
            && g.y <= l.max_grid[1]
            && g.z <= l.max_grid[2]
            && self.shmem_size <= l.max_shared_optin
    }

    #[cold]
    #[inline(never)]
    fn check_in_full(&self, l: &Limits) -> Result<()> {
        let bad = |m: String| Err(CudaError::InvalidArgument(format!("LaunchConfig: {m}")));
        let (g, b) = (self.grid, self.block);
        if g.volume() == 0 || b.volume() == 0 {
            return bad(format!("grid {g:?} and block {b:?} must have no zero dimension"));
        }
        if b.volume() > l.max_threads_per_block as u64 {
            return bad(format!(
                "a block of {} threads exceeds the device's {}",
                b.volume(),
                l.max_threads_per_block
            ));
        }
        for (i, (v, max)) in [b.x, b.y, b.z].iter().zip(l.max_block).enumerate() {
            if *v > max {
                return bad(format!(
                    "block dimension {} is {v}, more than the device's {max}",
                    ["x", "y", "z"][i]
                ));
            }
        }
        if let Some(c) = self.cluster {
            let fits = [(g.x, c.x), (g.y, c.y), (g.z, c.z)]
                .iter()
                .all(|(g, c)| g.checked_mul(*c).is_some());
            if !fits {
                return bad(format!(
                    "a grid of {g:?} clusters of {c:?} blocks has more blocks than a dimension can count"
                ));
            }
        }
        let blocks = self.grid_in_blocks();
        for (i, (v, max)) in [blocks.x, blocks.y, blocks.z].iter().zip(l.max_grid).enumerate() {
            if *v > max {
                return bad(format!(
                    "grid dimension {} is {v} blocks, more than the device's {max}",
                    ["x", "y", "z"][i]
                ));
            }
        }
        if self.shmem_size > l.max_shared_optin {
            return bad(format!(
                "{} bytes of dynamic shared memory exceed the device's {} per block",
                self.shmem_size, l.max_shared_optin
            ));
        }
        if self.cooperative_launch && !l.cooperative {
            return bad("the device does not support cooperative launches".into());
        }
        if let Some(c) = self.cluster {
            if !l.clusters {
                return bad("the device does not support thread block clusters (compute capability 9.0+)".into());
            }
            if c.volume() == 0 || c.volume() > MAX_PORTABLE_CLUSTER {
                return bad(format!(
                    "a cluster of {} blocks is outside 1..={MAX_PORTABLE_CLUSTER}",
                    c.volume()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Limits {
        Limits {
            max_threads_per_block: 1024,
            max_block: [1024, 1024, 64],
            max_grid: [i32::MAX as u32, 65535, 65535],
            max_shared_optin: 232448,
            cooperative: true,
            clusters: true,
        }
    }

    #[test]
    fn is_cooperative_is_cuda_cores_name_for_cooperative_launch() {
        let mut c = LaunchConfig::new(4, 128);
        assert!(!c.is_cooperative());
        c.cooperative_launch = true;
        assert!(c.is_cooperative());
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["cooperative_launch"], true);
        let mut renamed = json.clone();
        let flag = renamed.as_object_mut().unwrap().remove("cooperative_launch").unwrap();
        renamed["is_cooperative"] = flag;
        let back: LaunchConfig = serde_json::from_value(renamed).unwrap();
        assert_eq!(back, c, "read from cuda.core's 1.x name");
    }

    #[test]
    fn configurations_are_checked_against_the_device() {
        let l = h100();
        assert!(LaunchConfig::new(1000, 256).check(&l).is_ok());
        let err = LaunchConfig::new(1, (64, 32)).check(&l).unwrap_err();
        assert!(
            err.to_string().contains("2048 threads exceeds the device's 1024"),
            "{err}"
        );
        assert!(LaunchConfig::new(1, (1, 1, 128))
            .check(&l)
            .unwrap_err()
            .to_string()
            .contains("block dimension z"));
        assert!(LaunchConfig::new((1, 70000), 1)
            .check(&l)
            .unwrap_err()
            .to_string()
            .contains("grid dimension y"));
        assert!(LaunchConfig::new(0, 1).check(&l).is_err());
        let big = LaunchConfig {
            shmem_size: 300_000,
            ..LaunchConfig::new(1, 1)
        };
        assert!(big.check(&l).unwrap_err().to_string().contains("dynamic shared memory"));
        let cluster = LaunchConfig {
            cluster: Some((2, 1, 1).into()),
            ..LaunchConfig::new(8, 128)
        };
        assert!(cluster.check(&l).is_ok());
        // The grid counts clusters: 8 clusters of 3 blocks are 24 blocks, always whole.
        let odd = LaunchConfig {
            cluster: Some(3.into()),
            ..LaunchConfig::new(8, 128)
        };
        assert!(odd.check(&l).is_ok());
        assert_eq!(odd.grid_in_blocks().x, 24);
        let huge = LaunchConfig {
            cluster: Some(16.into()),
            ..LaunchConfig::new(32, 128)
        };
        assert!(huge.check(&l).unwrap_err().to_string().contains("outside 1..=8"));
        let old = Limits {
            clusters: false,
            cooperative: false,
            ..l
        };
        assert!(cluster.check(&old).unwrap_err().to_string().contains("clusters"));
        let coop = LaunchConfig {
            cooperative_launch: true,
            ..LaunchConfig::new(1, 1)
        };
        assert!(coop.check(&old).unwrap_err().to_string().contains("cooperative"));
    }

    #[test]
    fn volumes_saturate_instead_of_overflowing() {
        let huge = Dim3 {
            x: u32::MAX,
            y: u32::MAX,
            z: u32::MAX,
        };
        assert_eq!(huge.volume(), u64::MAX);
        assert!(LaunchConfig::new(huge, 1).check(&h100()).is_err());
        assert!(LaunchConfig::new(1, huge).check(&h100()).is_err());
    }

    #[test]
    fn dims_from_ints_and_tuples() {
        assert_eq!(Dim3::from(5), Dim3 { x: 5, y: 1, z: 1 });
        assert_eq!(Dim3::from((2, 3)).volume(), 6);
        assert_eq!(Dim3::from((2, 3, 4)).volume(), 24);
    }

    #[test]
    fn with_a_cluster_the_grid_counts_clusters() {
        // cuda.core's example: a 4 x 4 grid of 2 x 2 clusters is 64 blocks.
        let config = LaunchConfig {
            cluster: Some((2, 2, 1).into()),
            ..LaunchConfig::new((4, 4, 1), 128)
        };
        assert_eq!(config.grid_in_blocks(), Dim3 { x: 8, y: 8, z: 1 });
        config.check(&h100()).unwrap();
        // SAFETY: an all-zero CUlaunchAttribute is a valid (ignored) value.
        let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
        let cfg = config.driver_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!((cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (8, 8, 1));
        assert_eq!(LaunchConfig::new(4, 1).grid_in_blocks().volume(), 4);
        let overflow = LaunchConfig {
            cluster: Some(2.into()),
            ..LaunchConfig::new(u32::MAX, 32)
        };
        let err = overflow.check(&h100()).unwrap_err();
        assert!(
            err.to_string().contains("more blocks than a dimension can count"),
            "{err}"
        );
        let too_many = LaunchConfig {
            cluster: Some((1, 2, 1).into()),
            ..LaunchConfig::new((1, 40000, 1), 32)
        };
        let err = too_many.check(&h100()).unwrap_err();
        assert!(err.to_string().contains("grid dimension y is 80000 blocks"), "{err}");
    }
}
