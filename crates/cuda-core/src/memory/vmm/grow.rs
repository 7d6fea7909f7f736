//! Growing a buffer of a [`VirtualMemoryResource`] (`cuda.core`'s `modify_allocation`): a new
//! chunk mapped right after the buffer's range when those addresses are free, else every chunk
//! mapped again in a new, larger range.

use super::raw::{self, Handle, Mapping, Reservation};
use super::{at, check_device, invalid, round, unmap, Allocation, Chunk, VirtualMemoryResource};
use super::{VirtualMemoryHandleType, VirtualMemoryResourceOptions};
use crate::error::record_drop_error;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::Result;

impl VirtualMemoryResource {
    /// Grows `buffer` to at least `new_size` bytes with the resource's own options, keeping its
    /// contents: [`modify_allocation`](Self::modify_allocation) without options.
    pub fn grow(&self, buffer: &mut Buffer, new_size: usize, stream: &Stream) -> Result<()> {
        self.modify_allocation(buffer, new_size, None, stream)
    }

    /// Grows `buffer` (of this resource, allocated or imported) to at least `new_size` bytes
    /// (rounded up to the granularity), keeping its contents (`cuda.core`'s `modify_allocation`).
    ///
    /// **Never shrinks**, as `cuda.core`: a request no larger than the buffer changes nothing, and
    /// one within the memory already mapped behind it only enlarges the buffer's size.
    ///
    /// `options`, when given, apply to the new chunk only (its allocation type, handle type,
    /// granularity, RDMA, alignment, peers and access), as in `cuda.core`'s newest release;
    /// existing chunks keep their access, and the resource's own options do not change. They pass
    /// the checks of [`new`](Self::new), must name the resource's `location_type` (the location
    /// of a buffer cannot change), and must grant the owner read-write access wherever the
    /// resource reports its memory accessible (so that answer stays true for the whole buffer).
    ///
    /// The new chunk is mapped right after the buffer when the driver grants those addresses:
    /// the address stays, and nothing waits. Otherwise the memory moves to a new range: first
    /// `stream` and every stream that used the buffer are waited for, then every chunk is mapped
    /// at the new range with the access it had, and the old range is unmapped; the buffer's
    /// address changes. Work that reaches the memory through a raw address on a stream the
    /// buffer does not know (an `unsafe` launch given `buffer.handle()` on another stream) must
    /// be finished by then, as for a free. A buffer a graph refers to cannot grow (its memory
    /// could move under the graph), nor one whose streams are being captured. On any error the
    /// buffer is left as it was.
    pub fn modify_allocation(
        &self,
        buffer: &mut Buffer,
        new_size: usize,
        options: Option<&VirtualMemoryResourceOptions>,
        stream: &Stream,
    ) -> Result<()> {
        if !self.owns(buffer) {
            return Err(invalid("buf was not allocated by this VirtualMemoryResource"));
        }
        let (options, granularity) = match options {
            None => (&self.options, self.granularity),
            Some(o) => (o, self.check_growth(o)?),
        };
        if new_size <= buffer.size() {
            return Ok(());
        }
        let request = round(new_size, granularity)?;
        let key = buffer.handle();
        let Some(mut allocation) = self.records().remove(&key) else {
            return Err(invalid("grow: the buffer does not come from this resource"));
        };
        // The record is out of the table while the memory changes: the buffer is borrowed
        // mutably, so nothing else can free, export or grow it meanwhile. Whatever happens, the
        // record goes back under the buffer's address (which changes only if the buffer moved).
        let grown = self.grow_allocation(&mut allocation, buffer, request, options, granularity, stream);
        self.records().insert(buffer.handle(), allocation);
        grown
    }

    /// Checks a growth's own options; returns their granularity.
    fn check_growth(&self, o: &VirtualMemoryResourceOptions) -> Result<usize> {
        o.validate()?;
        if o.location_type != self.options.location_type {
            return Err(invalid(format!(
                "config.location_type '{}' does not match the resource's '{}'; the location of a buffer cannot change",
                o.location_type.name(),
                self.options.location_type.name()
            )));
        }
        check_device(&self.device, o)?;
        if self.options.owner_writes() && !o.owner_writes() {
            return Err(invalid(
                "the new chunk's self_access must be ReadWrite: this resource reports its memory as read-write for its owner, which every chunk must then be",
            ));
        }
        if self.options.location_type.is_host() && self.options.peers_write() {
            let kept = self
                .options
                .peers
                .iter()
                .all(|p| o.peers.contains(p) && o.peer_access == self.options.peer_access);
            if !kept {
                return Err(invalid(
                    "the new chunk must grant every peer of this host-memory resource read-write access: the resource reports its memory as device-accessible",
                ));
            }
        }
        let prop = o.prop(self.owner_location(o)?);
        let granularity = raw::granularity(&prop, o.granularity.driver())?;
        o.alignment(granularity)?;
        Ok(granularity)
    }

    /// [`modify_allocation`](Self::modify_allocation) for `allocation`, taken out of the
    /// records: on an error it is left as it was, and the buffer too.
    fn grow_allocation(
        &self,
        allocation: &mut Allocation,
        buffer: &mut Buffer,
        request: usize,
        options: &VirtualMemoryResourceOptions,
        granularity: usize,
        stream: &Stream,
    ) -> Result<()> {
        let base = buffer.handle();
        let mapped = allocation.mapped();
        if request <= mapped {
            // Mapped already (the buffer was smaller than its memory): only the size changes.
            buffer.rebase(base, request.max(buffer.size()));
            return Ok(());
        }
        if buffer.is_used_by_graph() {
            return Err(invalid(
                "grow: a graph refers to this buffer's memory, which must not move; grow it before recording graph work on it",
            ));
        }
        let add = round(request - mapped, granularity)?;
        let total = mapped
            .checked_add(add)
            .ok_or_else(|| invalid(format!("grow: {mapped} + {add} bytes overflow")))?;
        let owner = self.owner_location(options)?;
        let prop = options.prop(owner);
        let chunk = Chunk {
            size: add,
            access: options.access(owner),
            posix_fd: options.handle_type == Some(VirtualMemoryHandleType::PosixFd),
            imported: false,
        };
        let handle = Handle::create(add, &prop)?;

        // In place: reserve the addresses right after the range, if the driver grants exactly those.
        if allocation.reserved() == mapped {
            if let Ok(end) = at(base, mapped) {
                if let Ok(tail) = Reservation::new(add, granularity, end) {
                    if tail.ptr == end {
                        // SAFETY: the tail was just reserved and nothing maps it; it is declared
                        // before the mapping (dropped after it) or kept with it.
                        let mapping = unsafe { Mapping::new(end, add, &handle) }?;
                        raw::set_access(end, add, &chunk.access)?;
                        // The existing mappings were not touched: work on them goes on.
                        mapping.keep();
                        allocation.reservations.push(tail.keep());
                        allocation.chunks.push(chunk);
                        buffer.rebase(base, total);
                        return Ok(());
                    }
                    // Granted elsewhere: `tail` is freed here, and the memory moves.
                }
            }
        }

        // Elsewhere: the old range is unmapped at the end, so everything that may still use it
        // is waited for first.
        wait_for_uses(buffer, stream)?;
        let align = self.alignment.max(options.alignment(granularity)?);
        let range = Reservation::new(total, align, 0)?;
        let mut mappings = Vec::with_capacity(allocation.chunks.len() + 1);
        let mut offset = 0usize;
        for c in &allocation.chunks {
            // A new reference to the chunk, through its current mapping; released at the end of
            // the iteration, when the new mapping holds the memory too.
            let old = Handle::retain(at(base, offset)?)?;
            let to = at(range.ptr, offset)?;
            // SAFETY: [to, to + size) lies in `range`, just reserved and mapped by nothing else;
            // `range` is declared before `mappings` (dropped after them) or kept with them.
            mappings.push(unsafe { Mapping::new(to, c.size, &old) }?);
            raw::set_access(to, c.size, &c.access)?;
            offset = offset.saturating_add(c.size);
        }
        let to = at(range.ptr, offset)?;
        // SAFETY: as above; the new chunk fills the rest of `range`.
        mappings.push(unsafe { Mapping::new(to, add, &handle) }?);
        raw::set_access(to, add, &chunk.access)?;

        // Every step succeeded: the buffer moves to the new range; the old one goes last (if that
        // fails, only addresses leak: the memory stays mapped at the new range).
        mappings.into_iter().for_each(Mapping::keep);
        let (new_base, new_size) = range.keep();
        let old_reservations = std::mem::replace(&mut allocation.reservations, vec![(new_base, new_size)]);
        let old_chunks = allocation.chunks.clone();
        allocation.chunks.push(chunk);
        buffer.rebase(new_base, total);
        // SAFETY: the old range was this resource's mapping of these chunks, and every stream
        // that used it was waited for above (the buffer is borrowed mutably, so nothing queued
        // more meanwhile).
        if let Err(e) = unsafe { unmap(base, &old_chunks, &old_reservations) } {
            record_drop_error(e);
        }
        Ok(())
    }
}

/// Waits until no stream has work queued on `buffer` (before its memory moves); refused while
/// `stream` or the buffer's deallocation stream is being captured (the mapping is synchronous,
/// and waiting for a capturing stream would invalidate its capture).
fn wait_for_uses(buffer: &mut Buffer, stream: &Stream) -> Result<()> {
    let capturing =
        stream.enqueue(|c| Ok(c.is_some()))? || buffer.deallocation_stream().enqueue(|c| Ok(c.is_some()))?;
    if capturing {
        return Err(invalid(
            "cannot move a VirtualMemoryResource buffer while its stream is being captured: virtual memory mapping is synchronous and cannot be captured; grow it after the capture ends",
        ));
    }
    // In relaxed capture mode: a capture on another thread is neither refused by the waits nor
    // invalidated.
    crate::stream::relaxed_capture_mode(|| {
        stream.sync()?;
        buffer.synchronize_uses()
    })
}
