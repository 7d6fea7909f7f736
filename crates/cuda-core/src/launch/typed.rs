//! [`TypedKernel`]: a kernel whose argument types were checked once against its parameters.

use super::{launch, ArgsFor, KernelArgs, LaunchConfig};
use crate::compile::Kernel;
use crate::stream::Stream;
use crate::{CudaError, Result};
use std::marker::PhantomData;

/// A kernel whose parameter types `A` (a tuple of [`crate::DeviceRepr`] types) are fixed at
/// compile time: `launch` accepts arguments whose parameters are those types (values of them;
/// [`crate::BufferView`]s of `T` and `&`[`crate::TypedBuffer`]`<T>` for `*mut T` parameters;
/// [`crate::ReadOnlyView`]s of `T` for `*const T` ones, where writable views are accepted too
/// (see [`crate::ArgFor`]); `&Buffer` for `u64` ones).
///
/// Declare a `const T*` parameter as `*const T`, a `T*` as `*mut T`:
///
/// ```no_run
/// # fn demo(k: &cuda_core::Kernel) -> cuda_core::Result<()> {
/// // extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n)
/// let saxpy = k.typed::<(f32, *const f32, *mut f32, u32)>()?;
/// # Ok(()) }
/// ```
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

    /// Launches with `args`, as [`launch`]: each argument's parameter is the declared one, or a
    /// writable pointer where a read-only one is declared ([`ArgsFor`], checked at compile time).
    ///
    /// # Safety
    /// As [`launch`], less the count and sizes of the arguments, which were checked.
    #[inline]
    pub unsafe fn launch<X: ArgsFor<A::Params>>(&self, stream: &Stream, config: &LaunchConfig, args: X) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { launch(stream, config, &self.kernel, args) }
    }
}
