//! What the examples share: device memory through raw calls, until `Buffer` lands.
#![allow(dead_code)]

use cuda_sys::driver;

/// `n` values of `T` in device memory, freed on drop.
pub struct DeviceArray<T: Copy> {
    pub ptr: driver::CUdeviceptr,
    pub len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Copy + Default> DeviceArray<T> {
    pub fn from_host(data: &[T]) -> Result<Self, Box<dyn std::error::Error>> {
        let bytes = std::mem::size_of_val(data);
        let mut ptr = 0;
        // SAFETY: a context is current (set by the example); the copy reads exactly the slice.
        unsafe {
            driver::cuMemAlloc(&mut ptr, bytes.max(1)).result()?;
            driver::cuMemcpyHtoD(ptr, data.as_ptr().cast(), bytes).result()?;
            // A pageable copy can return before its DMA lands; the kernels run on non-blocking
            // streams, which do not wait for the default stream, so wait here.
            driver::cuStreamSynchronize(std::ptr::null_mut()).result()?;
        }
        Ok(DeviceArray {
            ptr,
            len: data.len(),
            _t: std::marker::PhantomData,
        })
    }

    pub fn zeroed(len: usize) -> Result<Self, Box<dyn std::error::Error>> {
        Self::from_host(&vec![T::default(); len])
    }

    pub fn to_host(&self) -> Result<Vec<T>, Box<dyn std::error::Error>> {
        let mut out = vec![T::default(); self.len];
        // SAFETY: the allocation holds len values; the example synchronised before reading.
        unsafe {
            driver::cuMemcpyDtoH(out.as_mut_ptr().cast(), self.ptr, std::mem::size_of_val(out.as_slice())).result()?
        };
        Ok(out)
    }
}

impl<T: Copy> Drop for DeviceArray<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and freed once, after the work using it finished.
        let _ = unsafe { driver::cuMemFree(self.ptr) };
    }
}

/// Runs an example body and reports its error plainly.
pub fn main_with(f: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>) {
    if let Err(e) = f() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Include folders for `cooperative_groups.h`: the runtime headers and CCCL's, as found by
/// cuda-pathfinder (wheels or toolkit).
pub fn cooperative_groups_includes() -> Result<Vec<String>, Box<dyn std::error::Error>> {
    ["cudart", "cccl"]
        .iter()
        .map(|h| {
            Ok(cuda_pathfinder::locate_nvidia_header_directory(h)?
                .abs_path
                .display()
                .to_string())
        })
        .collect()
}
