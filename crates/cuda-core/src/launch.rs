//! Kernel launch: `LaunchConfig`, kernel arguments packed on the stack, `launch`, typed kernels.

use crate::device::{Device, Limits};
use crate::error::Check;
use crate::object_code::Kernel;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;
use std::marker::PhantomData;

/// Grid, block or cluster dimensions. `5.into()`, `(8, 8).into()` and `(4, 4, 4).into()` work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchConfig {
    /// Blocks in the grid (with clusters: still blocks, a multiple of the cluster shape).
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Thread block cluster shape (compute capability 9.0+).
    pub cluster: Option<Dim3>,
    /// Dynamic shared memory per block, in bytes.
    pub shmem_size: u32,
    /// A cooperative launch (grid-wide synchronisation).
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
            gridDimX: self.grid.x,
            gridDimY: self.grid.y,
            gridDimZ: self.grid.z,
            blockDimX: self.block.x,
            blockDimY: self.block.y,
            blockDimZ: self.block.z,
            sharedMemBytes: self.shmem_size,
            hStream: stream,
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        }
    }

    /// Checks the configuration against `device`'s limits.
    pub fn validate(&self, device: &Device) -> Result<()> {
        self.check(device.limits()?)
    }

    pub(crate) fn check(&self, l: &Limits) -> Result<()> {
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
        for (i, (v, max)) in [g.x, g.y, g.z].iter().zip(l.max_grid).enumerate() {
            if *v > max {
                return bad(format!(
                    "grid dimension {} is {v}, more than the device's {max}",
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
            if g.x % c.x != 0 || g.y % c.y != 0 || g.z % c.z != 0 {
                return bad(format!("the grid {g:?} is not a whole number of clusters {c:?}"));
            }
        }
        Ok(())
    }
}

/// Types a kernel can take by value: plain data whose bytes are what the kernel reads.
///
/// Derive it for a `#[repr(C)]` struct of `DeviceRepr` fields without padding:
///
/// ```
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// #[repr(C)]
/// struct Params { scale: f32, count: u32, data: *mut f32 }
/// ```
///
/// The derive refuses what the kernel could misread:
///
/// ```compile_fail
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// struct NotReprC { a: f32, b: u64 }
/// ```
///
/// ```compile_fail
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// #[repr(C)]
/// struct Padded { a: u8, b: u64 }
/// ```
///
/// ```compile_fail
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// #[repr(C)]
/// struct HasAChar { a: char }
/// ```
///
/// A packed struct or one with raised alignment has another layout than the kernel's parameter
/// type (which has natural alignment):
///
/// ```compile_fail
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// #[repr(C, packed)]
/// struct Packed { a: u8, b: u32 }
/// ```
///
/// ```compile_fail
/// #[derive(Clone, Copy, cuda_core::DeviceRepr)]
/// #[repr(C, align(16))]
/// struct Aligned { a: f32, b: f32, c: f32, d: f32 }
/// ```
///
/// # Safety
/// The type must have the exact size, alignment and bit layout the kernel parameter has, and no
/// padding the kernel would read; every bit pattern the value can hold must be valid on the device.
/// For `#[repr(C)]` structs of such fields, implement it by hand after checking that.
pub unsafe trait DeviceRepr: Copy {}

macro_rules! device_repr {
    ($($t:ty),*) => {$(
        // SAFETY: primitive types with the same layout in C++ device code.
        unsafe impl DeviceRepr for $t {}
    )*};
}

device_repr!(
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
    f32,
    f64,
    isize,
    usize,
    bool,
    half::f16,
    half::bf16
);

// SAFETY: raw pointers are 64-bit addresses, as the kernel's pointer parameters are.
unsafe impl<T> DeviceRepr for *const T {}
// SAFETY: as above.
unsafe impl<T> DeviceRepr for *mut T {}
// SAFETY: an array of plain data has the layout of the C array.
unsafe impl<T: DeviceRepr, const N: usize> DeviceRepr for [T; N] {}

/// A kernel's argument list: a tuple of [`DeviceRepr`] values (up to 16), packed on the stack.
pub trait KernelArgs {
    /// How many arguments.
    const COUNT: usize;
    /// The size of each argument.
    fn sizes() -> Vec<usize>;
    /// Calls `f` with a pointer to each argument (no heap allocation).
    fn with_params<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R;
}

impl KernelArgs for () {
    const COUNT: usize = 0;
    fn sizes() -> Vec<usize> {
        Vec::new()
    }
    fn with_params<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
        f(&mut [])
    }
}

macro_rules! kernel_args {
    ($n:literal: $($t:ident $v:ident),+) => {
        impl<$($t: DeviceRepr),+> KernelArgs for ($($t,)+) {
            const COUNT: usize = $n;
            fn sizes() -> Vec<usize> {
                vec![$(std::mem::size_of::<$t>()),+]
            }
            #[inline(always)]
            fn with_params<R>(&mut self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
                let ($($v,)+) = self;
                let mut params = [$($v as *mut $t as *mut c_void),+];
                f(&mut params)
            }
        }
    };
}

kernel_args!(1: A a);
kernel_args!(2: A a, B b);
kernel_args!(3: A a, B b, C c);
kernel_args!(4: A a, B b, C c, D d);
kernel_args!(5: A a, B b, C c, D d, E e);
kernel_args!(6: A a, B b, C c, D d, E e, F f);
kernel_args!(7: A a, B b, C c, D d, E e, F f, G g);
kernel_args!(8: A a, B b, C c, D d, E e, F f, G g, H h);
kernel_args!(9: A a, B b, C c, D d, E e, F f, G g, H h, I i);
kernel_args!(10: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
kernel_args!(11: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
kernel_args!(12: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);
kernel_args!(13: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m);
kernel_args!(14: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n);
kernel_args!(15: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o);
kernel_args!(16: A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p);

/// Launches `kernel` on `stream` with `args`: one `cuLaunchKernel` (`cuLaunchKernelEx` when the
/// configuration has launch attributes), no heap allocation.
///
/// # Safety
/// The kernel can do anything its code does. The caller guarantees that `args` match the kernel's
/// parameters in number, order and type ([`TypedKernel`] checks number and sizes once), that
/// every pointer argument is valid for the accesses the kernel makes for as long as the kernel
/// runs (until the stream has passed it), and that the kernel does not race with other work
/// touching the same memory. On a stream being captured into a graph the kernel runs at every
/// launch of that graph: the pointers must stay valid for all of them (hand the memory to the
/// graph with [`crate::graph::GraphBuilder::keep_alive`]); the graph keeps the kernel itself
/// loaded. Outside a capture, the kernel's code must stay loaded until the launch has run: keep
/// the [`Kernel`] (or its [`crate::ObjectCode`]) until the stream has passed the launch.
#[inline]
pub unsafe fn launch<A: KernelArgs>(
    stream: &Stream,
    config: &LaunchConfig,
    kernel: &Kernel,
    mut args: A,
) -> Result<()> {
    let device = match stream.device() {
        Some(d) => d,
        None => Device::current()?,
    };
    config.check(device.limits()?)?;
    stream.enqueue(|capture| {
        if let Some(capture) = capture {
            // The graph runs the kernel at every launch: it keeps the kernel's code loaded.
            capture.attach(kernel.clone())?;
        }
        // SAFETY: forwarded to the caller; the kernel is live (and held by a capturing graph).
        unsafe { launch_now(stream, config, kernel, &mut args) }
    })
}

/// The launch itself: one driver call.
///
/// # Safety
/// As [`launch`].
#[inline(always)]
unsafe fn launch_now<A: KernelArgs>(
    stream: &Stream,
    config: &LaunchConfig,
    kernel: &Kernel,
    args: &mut A,
) -> Result<()> {
    if !config.has_attributes() {
        // Without launch attributes the classic entry point does the same work, and is the one
        // raw code calls: same cost.
        return args.with_params(|params| {
            // SAFETY: params point to the arguments, which the caller vouches for; a CUkernel is
            // accepted where a CUfunction is expected.
            unsafe {
                driver::cuLaunchKernel(
                    kernel.handle() as driver::CUfunction,
                    config.grid.x,
                    config.grid.y,
                    config.grid.z,
                    config.block.x,
                    config.block.y,
                    config.block.z,
                    config.shmem_size,
                    stream.handle(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .check("cuLaunchKernel")
        });
    }
    // SAFETY: an all-zero CUlaunchAttribute is a valid (ignored) value; only those filled in are
    // passed to the driver.
    let mut attrs: [driver::CUlaunchAttribute; 4] = unsafe { std::mem::zeroed() };
    let cfg = config.driver_config(stream.handle(), &mut attrs);
    args.with_params(|params| {
        // SAFETY: cfg and its attributes live across the call; params point to the arguments,
        // which the caller vouches for; a CUkernel is accepted where a CUfunction is expected.
        unsafe {
            driver::cuLaunchKernelEx(
                &cfg,
                kernel.handle() as driver::CUfunction,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .check("cuLaunchKernelEx")
    })
}

/// A kernel whose argument types are fixed at compile time: `launch` only accepts `A`.
pub struct TypedKernel<A: KernelArgs> {
    kernel: Kernel,
    _args: PhantomData<fn(A)>,
}

impl<A: KernelArgs> Clone for TypedKernel<A> {
    fn clone(&self) -> Self {
        TypedKernel {
            kernel: self.kernel.clone(),
            _args: PhantomData,
        }
    }
}

impl Kernel {
    /// This kernel with argument types `A`, checked once against the parameters the driver reports
    /// (count and sizes).
    pub fn typed<A: KernelArgs>(&self) -> Result<TypedKernel<A>> {
        let info = self.arguments_info()?;
        let sizes = A::sizes();
        let actual: Vec<usize> = info.iter().map(|p| p.size).collect();
        if actual != sizes {
            return Err(CudaError::InvalidArgument(format!(
                "kernel {} takes parameters of sizes {actual:?}; the argument types have sizes {sizes:?}",
                self.name()
            )));
        }
        Ok(TypedKernel {
            kernel: self.clone(),
            _args: PhantomData,
        })
    }
}

impl<A: KernelArgs> TypedKernel<A> {
    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Launches with `args`, as [`launch`].
    ///
    /// # Safety
    /// As [`launch`], less the count and sizes of the arguments, which were checked.
    #[inline]
    pub unsafe fn launch(&self, stream: &Stream, config: &LaunchConfig, args: A) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { launch(stream, config, &self.kernel, args) }
    }
}

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
        if config.cluster.is_none() {
            return Err(CudaError::InvalidArgument(
                "max_active_clusters: the LaunchConfig has no cluster shape".into(),
            ));
        }
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
        let odd = LaunchConfig {
            cluster: Some(3.into()),
            ..LaunchConfig::new(8, 128)
        };
        assert!(odd
            .check(&l)
            .unwrap_err()
            .to_string()
            .contains("whole number of clusters"));
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
    fn arguments_are_packed_as_pointers_to_each_value() {
        let mut args = (2.5f32, 7u64, -3i32, [1u8, 2, 3]);
        assert_eq!(<(f32, u64, i32, [u8; 3])>::COUNT, 4);
        assert_eq!(<(f32, u64, i32, [u8; 3])>::sizes(), [4, 8, 4, 3]);
        args.with_params(|p| {
            assert_eq!(p.len(), 4);
            // SAFETY: each pointer points to the tuple's field of that type.
            unsafe {
                assert_eq!(*(p[0] as *const f32), 2.5);
                assert_eq!(*(p[1] as *const u64), 7);
                assert_eq!(*(p[2] as *const i32), -3);
                assert_eq!(*(p[3] as *const [u8; 3]), [1, 2, 3]);
            }
        });
        ().with_params(|p| assert!(p.is_empty()));
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
}
