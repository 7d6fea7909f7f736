//! How a pool made here is destroyed once its resource is gone: after the frees queued into it
//! have run (see [`DestroyWhenUnused`]).

use super::made;
use crate::device::Device;
use crate::error::{record_drop_error, Check};
use cuda_sys::driver;
use driver::CUmemPool_attribute as Attr;

/// A pool made here whose resource is gone, destroyed once the stream-ordered frees queued into
/// it have run. `cuda.h` allows destroying a pool with frees outstanding, but driver 580 crashes
/// doing so for managed pools (in `cuMemPoolDestroy`; the same raw calls crash a C program), so
/// no pool made here is destroyed before its frees are done, and never by the dropping thread
/// while they are pending: the release thread tries again.
///
/// How it knows: the pool is trimmed to nothing (`cuMemPoolTrimTo(0)`), which gives back every
/// block that is free, and memory whose free has not run yet is not; so the reserved memory left
/// (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`) is zero once every free ran. (The used-memory count
/// does not tell: it drops when a free is queued.) `tests/tests/drops.rs` checks both facts on
/// every kind of pool, so a driver that changes them is seen.
///
/// The converse does not always hold: on an H200 pair (driver 580.159) a device pool idle after
/// its one free ran kept 32 MiB reserved after every trim (`cuMemPoolTrimTo` documents that a
/// free whose completion the host has not observed through a synchronisation may still count).
/// So a device or pinned pool whose memory is all freed (used memory 0: every free queued) and
/// whose reserve outlasts [`STUCK_AFTER`] is waited for another way, on the thread for slow
/// drops ([`SyncedDestroy`]): every primary context this crate retained (where its frees were
/// queued, and the peers' work they wait for) is synchronised, then it is destroyed. Frees
/// queued on streams of other contexts (created or green ones) are not waited for then, which
/// `cuda.h` allows for these pools. A managed pool, whose destroy crashes with a free pending,
/// is only ever destroyed once trimmed to nothing.
pub(super) struct DestroyWhenUnused {
    handle: crate::reaper::SendHandle<driver::CUmemoryPool>,
    since: std::time::Instant,
    /// A managed pool: destroyed only once trimmed to nothing.
    managed: bool,
}

/// How long a pool that keeps memory is waited for before it is kept (never destroyed): memory
/// stays that long only when a buffer was leaked or a free was kept because the memory might
/// still be in use.
const POOL_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// How long a device or pinned pool whose memory is all freed may keep its reserve before its
/// contexts are synchronised instead (see [`DestroyWhenUnused`]).
const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl DestroyWhenUnused {
    /// The job for pool `handle`, from now.
    pub(super) fn new(handle: driver::CUmemoryPool, managed: bool) -> DestroyWhenUnused {
        DestroyWhenUnused {
            handle: crate::reaper::SendHandle(handle),
            since: std::time::Instant::now(),
            managed,
        }
    }
}

impl crate::reaper::Retry for DestroyWhenUnused {
    fn attempt(&mut self) -> bool {
        use driver::CUresult as R;
        let handle = self.handle.0;
        // In relaxed capture mode: another thread's global-mode capture must not refuse the
        // question (a refusal is asked again, never taken for an answer).
        let asked = crate::stream::relaxed_capture_mode(|| {
            // SAFETY: the pool is live (destroyed below, once); trimming frees only blocks no
            // allocation or pending free uses.
            unsafe { driver::cuMemPoolTrimTo(handle, 0) }.check("cuMemPoolTrimTo")?;
            super::attribute_u64(handle, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        });
        let in_use = match asked {
            Ok(reserved) => reserved != 0,
            // The context failed: nothing runs there any more, the pool may go.
            Err(e)
                if e.is_launch_failure()
                    || matches!(
                        e.driver_status(),
                        Some(R::CUDA_ERROR_ECC_UNCORRECTABLE | R::CUDA_ERROR_DEINITIALIZED)
                    ) =>
            {
                false
            }
            // Anything else (a capture in the way, say) is asked again.
            Err(_) => true,
        };
        if in_use {
            // Asked only once the reserve has outlasted STUCK_AFTER (an attempt runs every
            // few milliseconds).
            let all_freed = || {
                crate::stream::relaxed_capture_mode(|| {
                    super::attribute_u64(handle, Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
                })
                .is_ok_and(|used| used == 0)
            };
            if !self.managed && self.since.elapsed() > STUCK_AFTER && all_freed() {
                // Every free is queued: wait for them on the thread for slow drops.
                crate::reaper::drop_slowly(Box::new(SyncedDestroy {
                    handle: crate::reaper::SendHandle(handle),
                }));
                return true;
            }
            // Kept (leaked) after the limit: destroying it could crash the driver.
            return self.since.elapsed() > POOL_WAIT_LIMIT;
        }
        // Every free queued into it ran (or its context failed, and nothing runs there any
        // more); buffers from it held the resource until then. Destroyed once: the job is
        // dropped when this returns true.
        destroy_made(handle);
        true
    }
}

/// A device or pinned pool whose memory is all freed, destroyed (when dropped, on the thread for
/// slow drops) once the primary contexts its frees were queued in are synchronised: see
/// [`DestroyWhenUnused`].
struct SyncedDestroy {
    handle: crate::reaper::SendHandle<driver::CUmemoryPool>,
}

impl Drop for SyncedDestroy {
    fn drop(&mut self) {
        for context in Device::retained_primary_contexts() {
            match context.try_synchronize() {
                Ok(true) => {}
                // A stream of that context is being captured (a synchronisation would
                // invalidate the capture): tried again, from the start, after it.
                Ok(false) => {
                    crate::reaper::retry(Box::new(DestroyWhenUnused::new(self.handle.0, false)));
                    return;
                }
                // The context failed: nothing runs there any more.
                Err(_) => {}
            }
        }
        // Every free was queued (the pool's used memory was 0) before the synchronisations, so
        // those queued in these contexts ran.
        destroy_made(self.handle.0);
    }
}

/// Destroys a pool this process made (`cuMemPoolCreate`), whose resource is gone, and forgets
/// it in `MADE` under the same lock (see `MADE`).
fn destroy_made(handle: driver::CUmemoryPool) {
    let mut made = made();
    // SAFETY: made by cuMemPoolCreate and destroyed once, by the pool's last holder (its
    // resource, gone; every buffer from it held the resource until its free was queued).
    let destroyed = crate::stream::relaxed_capture_mode(|| unsafe { driver::cuMemPoolDestroy(handle) });
    made.remove(&(handle as usize));
    drop(made);
    if let Err(e) = destroyed.check("cuMemPoolDestroy") {
        record_drop_error(e);
    }
}
