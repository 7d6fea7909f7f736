//! [`TypedKernel`]: a kernel whose argument types were checked once against its parameters.

use super::{launch, KernelArgs, LaunchConfig};
use crate::compile::Kernel;
use crate::stream::Stream;
use crate::{CudaError, Result};
use std::marker::PhantomData;

/// A kernel whose parameter types `A` (a tuple of [`crate::DeviceRepr`] types) are fixed at
/// compile time: `launch` accepts arguments whose parameters are exactly those types (values of
/// them, or [`crate::BufferView`]s of `T` for `*mut T` parameters, `&Buffer` for `u64` ones).
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
    pub unsafe fn launch<X: KernelArgs<Params = A::Params>>(
        &self,
        stream: &Stream,
        config: &LaunchConfig,
        args: X,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { launch(stream, config, &self.kernel, args) }
    }
}
