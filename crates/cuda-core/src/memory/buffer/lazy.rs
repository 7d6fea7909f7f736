//! [`LazyBox`]: a box made on first need through a shared reference.

use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A `Box<T>` made the first time it is needed through `&self`, then never replaced (as
/// `OnceLock<Box<T>>`), in one word: an empty one costs a load and a compare to read and to drop,
/// inline. Buffers keep what they learn of other streams and graphs in one, and most never make
/// it.
pub(crate) struct LazyBox<T> {
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Box<T>>,
}

// SAFETY: moving a `LazyBox` moves the box it owns (as `Box<T>: Send` needs `T: Send`).
unsafe impl<T: Send> Send for LazyBox<T> {}
// SAFETY: `&LazyBox` hands out `&T` to any thread (`T: Sync`), and may make the value on one
// thread that the owner later drops on another (`T: Send`), as `OnceLock<T>` requires.
unsafe impl<T: Send + Sync> Sync for LazyBox<T> {}

impl<T> Default for LazyBox<T> {
    fn default() -> Self {
        LazyBox {
            ptr: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }
}

impl<T> LazyBox<T> {
    /// The value, if it was made.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `get_or_init`, published with
        // release ordering (the acquire above sees the value made), and is freed only by `drop`
        // or `get_mut`'s owner, which `&self` excludes.
        unsafe { p.as_ref() }
    }

    /// Whether the value was not made (through exclusive access: a plain load).
    #[inline]
    pub(crate) fn is_empty(&mut self) -> bool {
        self.ptr.get_mut().is_null()
    }

    /// The value, if it was made, through exclusive access.
    #[inline]
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        // SAFETY: exclusive access: no other reference to the value exists.
        unsafe { self.ptr.get_mut().as_mut() }
    }
}

impl<T: Default> LazyBox<T> {
    /// The value, made now if it was not.
    #[inline]
    pub(crate) fn get_or_init(&self) -> &T {
        match self.get() {
            Some(t) => t,
            None => self.init(),
        }
    }

    #[cold]
    fn init(&self) -> &T {
        let new = Box::into_raw(Box::<T>::default());
        match self
            .ptr
            .compare_exchange(ptr::null_mut(), new, Ordering::Release, Ordering::Acquire)
        {
            // SAFETY: `new` was just published and lives as long as `self` (never replaced).
            Ok(_) => unsafe { &*new },
            Err(winner) => {
                // SAFETY: `new` was never published: this thread owns it alone. `winner` is the
                // published box, which lives as long as `self`.
                unsafe {
                    drop(Box::from_raw(new));
                    &*winner
                }
            }
        }
    }
}

impl<T> Drop for LazyBox<T> {
    #[inline]
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() {
            // SAFETY: made by `Box::into_raw` and owned by this `LazyBox` alone (dropped once).
            unsafe { drop_box(p) };
        }
    }
}

/// Drops a made value (out of line: an empty `LazyBox` drops with a load and a compare).
///
/// # Safety
/// `p` came from `Box::into_raw` and nothing else owns or uses it.
#[cold]
#[inline(never)]
unsafe fn drop_box<T>(p: *mut T) {
    // SAFETY: as the caller promises.
    drop(unsafe { Box::from_raw(p) });
}

#[cfg(test)]
mod tests {
    use super::LazyBox;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    #[derive(Default)]
    struct Counted(u32);
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn made_once_from_many_threads_and_dropped_once() {
        let before = DROPS.load(Ordering::SeqCst);
        let lazy: LazyBox<Counted> = LazyBox::default();
        assert!(lazy.get().is_none());
        let seen: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| lazy.get_or_init() as *const Counted as usize))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "every thread sees the one value");
        // Losers of the race dropped their own box; the winner's is still there.
        let losers = DROPS.load(Ordering::SeqCst) - before;
        let mut lazy = lazy;
        lazy.get_mut().unwrap().0 = 7;
        assert_eq!(lazy.get().unwrap().0, 7);
        drop(lazy);
        assert_eq!(DROPS.load(Ordering::SeqCst) - before, losers + 1);
        let empty: LazyBox<Counted> = LazyBox::default();
        drop(empty);
        assert_eq!(
            DROPS.load(Ordering::SeqCst) - before,
            losers + 1,
            "an empty one drops nothing"
        );
    }
}
