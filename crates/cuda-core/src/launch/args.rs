//! Kernel arguments: [`DeviceRepr`] (a value a kernel parameter can hold), [`KernelArg`] (an
//! argument: a value, or a buffer or view whose address the kernel gets), and [`KernelArgs`] (a
//! tuple of them, handed to the driver as pointers to each value on the stack).

use crate::memory::texture::{SurfaceObject, TextureObject};
use crate::memory::{Buffer, BufferView, ReadOnlyView, TensorMapDescriptor, TypedBuffer};
use cuda_sys::driver;
use std::ffi::c_void;

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

/// One kernel argument: the value the kernel's parameter receives ([`Param`](Self::Param)) and
/// the buffer whose memory it reaches, if any.
///
/// Plain values ([`DeviceRepr`]) are passed as they are. A `&Buffer` passes its device address
/// (a `CUdeviceptr`, for a parameter declared as any pointer), a [`BufferView`] of `T` a
/// `*mut T` to its first element; for both, the launch keeps the buffer's memory alive until
/// the kernel is done (the stream is remembered by the buffer, as any operation's is), and a
/// stream being captured hands the buffer to the graph. A typed kernel checks the element type
/// at compile time: a view of bytes is not a `*mut f32`.
///
/// ```no_run
/// # fn demo(kernel: &cuda_core::TypedKernel<(*mut f32, u32)>, b: &cuda_core::Buffer, s: &cuda_core::Stream) -> cuda_core::Result<()> {
/// let floats = b.view_as::<f32>()?;
/// // SAFETY: the kernel writes 16 floats of the view (the buffer holds them).
/// unsafe { kernel.launch(s, &cuda_core::LaunchConfig::new(1, 1), (floats, 16u32))? };
/// # Ok(()) }
/// ```
///
/// ```compile_fail
/// # fn demo(kernel: &cuda_core::TypedKernel<(*mut f32, u32)>, b: &cuda_core::Buffer, s: &cuda_core::Stream) {
/// let bytes = b.view(0, 64).unwrap();
/// // A view of u8 for a *mut f32 parameter: does not compile.
/// unsafe { kernel.launch(s, &cuda_core::LaunchConfig::new(1, 1), (bytes, 16u32)) };
/// # }
/// ```
pub trait KernelArg: sealed::Arg {
    /// What the kernel's parameter receives.
    type Param: DeviceRepr;
    /// Whether the argument carries a buffer (known at compile time: launches of plain values
    /// skip the bookkeeping).
    const CARRIES_BUFFER: bool = false;
    /// The parameter's value.
    fn param(&self) -> Self::Param;
    /// The buffer whose memory the kernel may reach through this argument (for the launch to
    /// hold; not callable outside this crate, which would lend buffers their owners keep).
    #[doc(hidden)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        None
    }
}

/// The argument kinds this crate knows (users extend them through [`DeviceRepr`]): launches
/// trust what the traits say, so only the crate implements them.
mod sealed {
    pub trait Arg {}
    pub trait Args {}
    /// Which declared parameter types an argument may be given for (see `ArgFor`).
    pub trait ArgFor<P> {}
    /// The same for argument lists (see `ArgsFor`).
    pub trait ArgsFor<P> {}
    /// Only launches here call `KernelArg::buffer`.
    pub struct Token(pub(super) ());
}

impl<T: DeviceRepr> sealed::Arg for T {}
impl sealed::Arg for &Buffer {}
impl<T> sealed::Arg for BufferView<'_, T> {}
impl<T> sealed::Arg for ReadOnlyView<'_, T> {}
impl<T: bytemuck::Pod> sealed::Arg for &TypedBuffer<T> {}
impl sealed::Arg for &TensorMapDescriptor<'_> {}
impl sealed::Arg for &TextureObject {}
impl sealed::Arg for &SurfaceObject {}

impl<T: DeviceRepr> KernelArg for T {
    type Param = T;
    #[inline(always)]
    fn param(&self) -> T {
        *self
    }
}

impl KernelArg for &Buffer {
    type Param = driver::CUdeviceptr;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> driver::CUdeviceptr {
        self.handle()
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(self)
    }
}

impl<T> KernelArg for BufferView<'_, T> {
    type Param = *mut T;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> *mut T {
        self.handle() as usize as *mut T
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(BufferView::buffer(self))
    }
}

/// A read-only view passes a `*const T` to its first element (for a `const T*` parameter); the
/// launch keeps the buffer alive as for a [`BufferView`].
impl<T> KernelArg for ReadOnlyView<'_, T> {
    type Param = *const T;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> *const T {
        self.handle() as usize as *const T
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(ReadOnlyView::buffer(self))
    }
}

/// A typed buffer passes a `*mut T` to its first element, as its whole [`BufferView`] does.
impl<T: bytemuck::Pod> KernelArg for &TypedBuffer<T> {
    type Param = *mut T;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> *mut T {
        self.as_buffer().handle() as usize as *mut T
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(self.as_buffer())
    }
}

// SAFETY: a tensor map is 128 opaque bytes (16 `u64`s, aligned as the kernel's `CUtensorMap`
// parameter is), valid in any bit pattern; what the kernel does with them is the launch's
// caller's to vouch for.
unsafe impl DeviceRepr for driver::CUtensorMap {}

/// A TMA descriptor passes its 128-byte `CUtensorMap` by value (for a
/// `const __grid_constant__ CUtensorMap` parameter) and carries the buffer it describes.
impl KernelArg for &TensorMapDescriptor<'_> {
    type Param = driver::CUtensorMap;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> driver::CUtensorMap {
        *self.as_raw()
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        self.held_buffer()
    }
}

/// A texture passes its `CUtexObject` (for a `cudaTextureObject_t` parameter) and carries the
/// lifeline that keeps it and its memory alive.
impl KernelArg for &TextureObject {
    type Param = driver::CUtexObject;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> driver::CUtexObject {
        self.handle()
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(self.lifeline())
    }
}

/// A surface passes its `CUsurfObject` (for a `cudaSurfaceObject_t` parameter) and carries the
/// lifeline that keeps it and its array alive.
impl KernelArg for &SurfaceObject {
    type Param = driver::CUsurfObject;
    const CARRIES_BUFFER: bool = true;
    #[inline(always)]
    fn param(&self) -> driver::CUsurfObject {
        self.handle()
    }
    #[inline(always)]
    fn buffer(&self, _: sealed::Token) -> Option<&Buffer> {
        Some(self.lifeline())
    }
}

/// An argument a typed kernel accepts for a parameter declared as `P`: every argument for its
/// own parameter type ([`KernelArg::Param`]), and a writable pointer where a read-only one is
/// declared (a [`BufferView`], a `&`[`TypedBuffer`] or a `*mut T` for a `*const T`, as C++
/// converts `T*` to `const T*`), never the reverse. Sealed: a launch trusts that the value it
/// packs has the declared parameter's size.
///
/// ```no_run
/// # fn demo(k: &cuda_core::Kernel, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>, s: &cuda_core::Stream) -> cuda_core::Result<()> {
/// // add(const float* x, float* y, unsigned n)
/// let add = k.typed::<(*const f32, *mut f32, u32)>()?;
/// let n = x.len() as u32;
/// // SAFETY: the kernel reads n floats of x and writes n floats of y, which both hold.
/// unsafe {
///     add.launch(s, &cuda_core::LaunchConfig::new(1, 256), (x.read_only(), y, n))?;
///     // A writable view may be given for the `const float*` too.
///     add.launch(s, &cuda_core::LaunchConfig::new(1, 256), (x.view(), y.view(), n))?;
/// }
/// # Ok(()) }
/// ```
///
/// A read-only view for a writable parameter does not compile:
///
/// ```compile_fail
/// # fn demo(k: &cuda_core::Kernel, x: &cuda_core::TypedBuffer<f32>, y: &cuda_core::TypedBuffer<f32>, s: &cuda_core::Stream) -> cuda_core::Result<()> {
/// let add = k.typed::<(*const f32, *mut f32, u32)>()?;
/// // SAFETY: (does not compile: y is read-only here, the kernel writes it).
/// unsafe { add.launch(s, &cuda_core::LaunchConfig::new(1, 256), (x.read_only(), y.read_only(), 4u32))? };
/// # Ok(()) }
/// ```
///
/// Nor does a read-only view of another element type:
///
/// ```compile_fail
/// # fn demo(k: &cuda_core::Kernel, x: &cuda_core::TypedBuffer<u32>, y: &cuda_core::TypedBuffer<f32>, s: &cuda_core::Stream) -> cuda_core::Result<()> {
/// let add = k.typed::<(*const f32, *mut f32, u32)>()?;
/// // SAFETY: (does not compile: x holds u32, the kernel reads floats).
/// unsafe { add.launch(s, &cuda_core::LaunchConfig::new(1, 256), (x.read_only(), y, 4u32))? };
/// # Ok(()) }
/// ```
pub trait ArgFor<P>: KernelArg + sealed::ArgFor<P> {}

// (The public trait follows the sealed one: only the sealed impls below say what is accepted.)
impl<P, K: KernelArg + sealed::ArgFor<P>> ArgFor<P> for K {}
impl<K: KernelArg> sealed::ArgFor<K::Param> for K {}
impl<T> sealed::ArgFor<*const T> for BufferView<'_, T> {}
impl<T: bytemuck::Pod> sealed::ArgFor<*const T> for &TypedBuffer<T> {}
impl<T> sealed::ArgFor<*const T> for *mut T {}

/// An argument list a typed kernel declared with parameters `P` (a tuple) accepts: one
/// [`ArgFor`] each, in order. What [`crate::TypedKernel::launch`] takes. Sealed, as
/// [`KernelArgs`] is.
pub trait ArgsFor<P>: KernelArgs + sealed::ArgsFor<P> {}

impl<P, X: KernelArgs + sealed::ArgsFor<P>> ArgsFor<P> for X {}
impl sealed::ArgsFor<()> for () {}

/// A kernel's argument list: a tuple of up to 16 [`KernelArg`]s, whose parameter values are
/// packed on the stack. Implemented by this crate only (a launch trusts its count, sizes and
/// pointers):
///
/// ```compile_fail
/// struct Liar;
/// impl cuda_core::KernelArgs for Liar {
///     const COUNT: usize = 1;
///     const CARRIES_BUFFERS: bool = false;
///     type Params = (u32,);
///     fn sizes() -> Vec<usize> { vec![4] }
///     fn with_buffers<R>(&self, f: impl FnOnce(&[Option<&cuda_core::Buffer>]) -> R) -> R { f(&[]) }
///     fn with_params<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R { f(&mut []) }
/// }
/// ```
pub trait KernelArgs: sealed::Args {
    /// How many arguments.
    const COUNT: usize;
    /// Whether any argument carries a buffer.
    const CARRIES_BUFFERS: bool;
    /// The parameters' types, as a tuple (what a [`crate::TypedKernel`] is declared with).
    type Params;
    /// The size of each parameter.
    fn sizes() -> Vec<usize>;
    /// Calls `f` with the buffer each argument carries, if any (on the stack, no heap).
    fn with_buffers<R>(&self, f: impl FnOnce(&[Option<&Buffer>]) -> R) -> R;
    /// Calls `f` with a pointer to each parameter value (on the stack, no heap).
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R;
}

impl sealed::Args for () {}

impl KernelArgs for () {
    const COUNT: usize = 0;
    const CARRIES_BUFFERS: bool = false;
    type Params = ();
    fn sizes() -> Vec<usize> {
        Vec::new()
    }
    fn with_buffers<R>(&self, f: impl FnOnce(&[Option<&Buffer>]) -> R) -> R {
        f(&[])
    }
    fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
        f(&mut [])
    }
}

macro_rules! kernel_args {
    ($n:literal: $($t:ident $v:ident $p:ident),+) => {
        impl<$($t: KernelArg),+> sealed::Args for ($($t,)+) {}
        impl<$($t: ArgFor<$p>, $p),+> sealed::ArgsFor<($($p,)+)> for ($($t,)+) {}

        impl<$($t: KernelArg),+> KernelArgs for ($($t,)+) {
            const COUNT: usize = $n;
            const CARRIES_BUFFERS: bool = false $(|| $t::CARRIES_BUFFER)+;
            type Params = ($($t::Param,)+);
            fn sizes() -> Vec<usize> {
                vec![$(std::mem::size_of::<$t::Param>()),+]
            }
            #[inline(always)]
            fn with_buffers<R>(&self, f: impl FnOnce(&[Option<&Buffer>]) -> R) -> R {
                let ($($v,)+) = self;
                f(&[$(if $t::CARRIES_BUFFER { $v.buffer(sealed::Token(())) } else { None }),+])
            }
            #[inline(always)]
            fn with_params<R>(&self, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
                let ($($v,)+) = self;
                $(let mut $v = $v.param();)+
                let mut params = [$(&mut $v as *mut $t::Param as *mut c_void),+];
                f(&mut params)
            }
        }
    };
}

kernel_args!(1: A a PA);
kernel_args!(2: A a PA, B b PB);
kernel_args!(3: A a PA, B b PB, C c PC);
kernel_args!(4: A a PA, B b PB, C c PC, D d PD);
kernel_args!(5: A a PA, B b PB, C c PC, D d PD, E e PE);
kernel_args!(6: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF);
kernel_args!(7: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG);
kernel_args!(8: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH);
kernel_args!(9: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI);
kernel_args!(10: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ);
kernel_args!(11: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK);
kernel_args!(12: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK, L l PL);
kernel_args!(13: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK, L l PL, M m PM);
kernel_args!(14: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK, L l PL, M m PM, N n PN);
kernel_args!(15: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK, L l PL, M m PM, N n PN, O o PO);
kernel_args!(16: A a PA, B b PB, C c PC, D d PD, E e PE, F f PF, G g PG, H h PH, I i PI, J j PJ, K k PK, L l PL, M m PM, N n PN, O o PO, P p PP);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_packed_as_pointers_to_each_value() {
        let args = (2.5f32, 7u64, -3i32, [1u8, 2, 3]);
        assert_eq!(<(f32, u64, i32, [u8; 3])>::COUNT, 4);
        const { assert!(!<(f32, u64, i32, [u8; 3])>::CARRIES_BUFFERS) };
        args.with_buffers(|b| assert!(b.len() == 4 && b.iter().all(Option::is_none)));
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
}
