//! `ndarray` host arrays as [`StridedMemoryView`]s, and host views back as arrays (feature
//! `ndarray`). The views borrow the arrays: copies from and into them are waited for.

use super::{layout, span, Backing, Element, Place, StridedMemoryView};
use crate::{CudaError, Result};
use ndarray::{ArrayBase, ArrayViewD, Data, DataMut, Dimension, IxDyn, ShapeBuilder};
use std::marker::PhantomData;

impl<'a> StridedMemoryView<'a> {
    /// A read-only view of an `ndarray` array (any layout its strides describe, negative ones
    /// included).
    pub fn from_ndarray<T: Element, S: Data<Elem = T>, D: Dimension>(
        array: &'a ArrayBase<S, D>,
    ) -> Result<StridedMemoryView<'a>> {
        let exact = array.as_slice_memory_order().is_none();
        StridedMemoryView::ndarray(
            array.as_ptr() as u64,
            array.shape(),
            array.strides(),
            T::DTYPE,
            true,
            exact,
        )
    }

    /// A writable view of an `ndarray` array, which copies can fill.
    pub fn from_ndarray_mut<T: Element, S: DataMut<Elem = T>, D: Dimension>(
        array: &'a mut ArrayBase<S, D>,
    ) -> Result<StridedMemoryView<'a>> {
        let exact = array.as_slice_memory_order().is_none();
        let (ptr, shape, strides) = (
            array.as_mut_ptr() as u64,
            array.shape().to_vec(),
            array.strides().to_vec(),
        );
        StridedMemoryView::ndarray(ptr, &shape, &strides, T::DTYPE, false, exact)
    }

    fn ndarray(
        ptr: u64,
        shape: &[usize],
        strides: &[isize],
        dtype: super::DType,
        readonly: bool,
        exact: bool,
    ) -> Result<StridedMemoryView<'a>> {
        // The layout's reach is the bound; an array whose elements are not contiguous in memory
        // owns only them (`exact`), not the gaps between them.
        let bounds = span(ptr, shape, strides, dtype)?;
        let place = Place { exact, ..Place::HOST };
        StridedMemoryView::make(
            ptr,
            shape,
            Some(strides),
            dtype,
            readonly,
            bounds,
            place,
            Backing::Host(PhantomData),
        )
    }

    /// A host view (from a slice or an array) as an `ndarray` view of `T`: the dtype must be
    /// `T`'s, and the strides not negative.
    pub fn as_ndarray<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        if !matches!(self.backing, Backing::Host(_)) {
            return Err(CudaError::InvalidArgument(
                "as_ndarray: only a view of host memory this program borrows (a slice or an array) is an ndarray view; copy a device view into one".into(),
            ));
        }
        if T::DTYPE != self.dtype {
            return Err(CudaError::InvalidType(format!(
                "as_ndarray: the view holds {} elements, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let strides = self.strides_or_row_major()?;
        let strides: Vec<usize> = strides
            .iter()
            .map(|&s| usize::try_from(s))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| CudaError::InvalidArgument("as_ndarray: negative strides are not supported".into()))?;
        if !self.ptr.is_multiple_of(std::mem::align_of::<T>() as u64) {
            return Err(CudaError::InvalidArgument(
                "as_ndarray: element 0 is not aligned for T".into(),
            ));
        }
        if layout::element_count(&self.shape)? > isize::MAX as usize {
            return Err(CudaError::InvalidArgument(
                "as_ndarray: more than isize::MAX elements (a broadcast view?) cannot be an array view".into(),
            ));
        }
        let shape = IxDyn(&self.shape).strides(IxDyn(&strides));
        // SAFETY: every element the layout reaches lies in host memory the view borrows for its
        // lifetime (checked at construction), initialised (a slice or an array of `T`), aligned
        // for `T` (element 0 checked, strides in whole elements); `&self` lends it for reading
        // while no copy can write it (copies into the view need `&mut`).
        Ok(unsafe { ArrayViewD::from_shape_ptr(shape, self.ptr as *const T) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::DType;
    use super::*;
    use ndarray::{s, Array2};

    #[test]
    fn arrays_become_views_and_views_become_arrays() {
        let a = Array2::from_shape_fn((3, 4), |(r, c)| (r * 10 + c) as i32);
        let v = StridedMemoryView::from_ndarray(&a).unwrap();
        assert_eq!(
            (v.shape(), v.strides(), v.dtype()),
            (&[3usize, 4][..], None, DType::I32)
        );
        assert!(v.readonly() && v.device_id().is_none() && !v.is_device_accessible());
        assert_eq!(v.as_ndarray::<i32>().unwrap(), a.view().into_dyn());
        // A transposed array: strides (1, 4).
        let t = a.t();
        let vt = StridedMemoryView::from_ndarray(&t).unwrap();
        assert_eq!(vt.strides(), Some(&[1isize, 4][..]));
        assert_eq!(vt.as_ndarray::<i32>().unwrap(), t.into_dyn());
        // A reversed slice: a negative stride, viewable but not lent back as an array.
        let r = a.slice(s![.., ..;-1]);
        let vr = StridedMemoryView::from_ndarray(&r).unwrap();
        assert_eq!(vr.strides(), Some(&[4isize, -1][..]));
        assert!(vr.as_ndarray::<i32>().unwrap_err().to_string().contains("negative"));
        // The dtype must match: a wrong element type is a type error (cuda.core's TypeError),
        // and so is a kernel argument of another type; a bad layout stays a value error.
        assert_eq!(v.as_ndarray::<u32>().unwrap_err().kind(), crate::ErrorKind::Type);
        assert_eq!(v.kernel_arg::<u32>().unwrap_err().kind(), crate::ErrorKind::Type);
        assert_eq!(vr.as_ndarray::<i32>().unwrap_err().kind(), crate::ErrorKind::Value);
    }

    #[test]
    fn arrays_with_gaps_are_not_re_viewed_into_them() {
        let mut a = ndarray::Array1::from_iter(0..8i32);
        let (even, _odd) = a.multi_slice_mut((s![..;2], s![1..;2]));
        let v = StridedMemoryView::from_ndarray(&even).unwrap();
        // The odd elements belong to `_odd`: a dense re-view would reach them.
        let err = v.view(&[7], None, DType::I32).unwrap_err();
        assert!(err.to_string().contains("owns only its own elements"), "{err}");
        assert!(v.view(&[4], Some(&[2]), DType::I32).is_ok());
    }

    #[test]
    fn broadcast_views_are_not_lent_as_arrays_past_isize() {
        let one = [7u8];
        let v = StridedMemoryView::from_host_slice(&one, &[1 << 62, 2], Some(&[0, 0])).unwrap();
        assert!(v.as_ndarray::<u8>().unwrap_err().to_string().contains("isize::MAX"));
    }

    #[test]
    fn writable_array_views_re_view_read_only() {
        let mut a = Array2::<f32>::zeros((2, 2));
        let v = StridedMemoryView::from_ndarray_mut(&mut a).unwrap();
        assert!(!v.readonly());
        // A re-view borrows the view shared: it must not write what `as_ndarray` may be reading.
        let again = v.view(&[4], None, DType::F32).unwrap();
        assert!(again.readonly());
        let lent = v.as_ndarray::<f32>().unwrap();
        assert_eq!(lent.shape(), &[2, 2]);
    }
}
