//! Kernel arguments: [`DeviceRepr`] (a value a kernel parameter can hold) and [`KernelArgs`] (a
//! tuple of them, handed to the driver as pointers to each value on the stack).

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
