//! Sharing buffers of a [`VirtualMemoryResource`] between processes: each physical chunk is
//! exported as a POSIX file descriptor ([`VirtualMemoryIpcDescriptor`]), and the importing
//! process maps the chunks one after another in a range of its own.
//!
//! What arrives from another process is not trusted: the driver checks that each descriptor is a
//! CUDA allocation, the claimed chunk sizes must be whole granules of it and are mapped by the
//! driver only if the allocation has them, and the importer reads only what it mapped itself.

use super::raw::{self, Handle, Mapping, Reservation};
use super::{at, invalid, Allocation, Chunk, VirtualMemoryResource};
use crate::memory::{device_location, Buffer, MemoryResource};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// The most chunks a descriptor carries (a buffer grows by one chunk at a time).
const MAX_CHUNKS: usize = 4096;

/// What another process needs to map a buffer of a [`VirtualMemoryResource`]: one POSIX file
/// descriptor per physical chunk, owned (closed when the descriptor is dropped), and each
/// chunk's size. The descriptors keep the memory alive while they are open, even after the
/// exporting buffer is freed.
///
/// Send it with [`send`](Self::send) and [`recv`](Self::recv) over a Unix socket (one message per
/// chunk, the descriptor passed with `SCM_RIGHTS`), or take it apart with
/// [`into_parts`](Self::into_parts) for a transport of your own. It cannot be cloned implicitly
/// or serialised (file descriptors need the socket): [`try_clone`](Self::try_clone) duplicates
/// them.
pub struct VirtualMemoryIpcDescriptor {
    fds: Vec<OwnedFd>,
    chunk_sizes: Vec<usize>,
    size: usize,
}

impl fmt::Debug for VirtualMemoryIpcDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualMemoryIpcDescriptor")
            .field("fds", &self.fds.iter().map(|d| d.as_raw_fd()).collect::<Vec<_>>())
            .field("chunk_sizes", &self.chunk_sizes)
            .field("size", &self.size)
            .finish()
    }
}

/// One message of [`VirtualMemoryIpcDescriptor::send`]: a tag, the chunk count, this chunk's
/// index and size (little-endian).
const TAG: [u8; 8] = *b"cuvmmfd1";
const HEADER: usize = 32;

fn header(count: usize, index: usize, size: usize) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&TAG);
    h[8..16].copy_from_slice(&(count as u64).to_le_bytes());
    h[16..24].copy_from_slice(&(index as u64).to_le_bytes());
    h[24..].copy_from_slice(&(size as u64).to_le_bytes());
    h
}

/// `(count, index, size)` from a message; an error for anything but a well-formed header.
fn parse_header(bytes: &[u8]) -> Result<(usize, usize, usize)> {
    let malformed =
        || invalid("a VirtualMemoryIpcDescriptor message is malformed (not sent by VirtualMemoryIpcDescriptor::send)");
    if bytes.len() != HEADER || bytes[..8] != TAG {
        return Err(malformed());
    }
    let field = |r: std::ops::Range<usize>| -> Result<usize> {
        let b = <[u8; 8]>::try_from(&bytes[r]).map_err(|_| malformed())?;
        usize::try_from(u64::from_le_bytes(b)).map_err(|_| malformed())
    };
    Ok((field(8..16)?, field(16..24)?, field(24..32)?))
}

impl VirtualMemoryIpcDescriptor {
    /// A descriptor from its parts (as received from another process): one descriptor per
    /// chunk, with the chunk's size. Checked here: as many sizes as descriptors, 1 to 4096
    /// chunks, no empty chunk, a total that fits; the rest is checked by the import.
    pub fn from_parts(fds: Vec<OwnedFd>, chunk_sizes: Vec<usize>) -> Result<VirtualMemoryIpcDescriptor> {
        if fds.len() != chunk_sizes.len() {
            return Err(invalid(format!(
                "a VirtualMemoryIpcDescriptor has one size per descriptor: {} descriptors, {} sizes",
                fds.len(),
                chunk_sizes.len()
            )));
        }
        if fds.is_empty() || fds.len() > MAX_CHUNKS {
            return Err(invalid(format!(
                "a VirtualMemoryIpcDescriptor has 1 to {MAX_CHUNKS} chunks, not {}",
                fds.len()
            )));
        }
        let mut size = 0usize;
        for &s in &chunk_sizes {
            if s == 0 {
                return Err(invalid("a VirtualMemoryIpcDescriptor chunk of 0 bytes"));
            }
            size = size
                .checked_add(s)
                .ok_or_else(|| invalid("the VirtualMemoryIpcDescriptor's chunk sizes overflow"))?;
        }
        Ok(VirtualMemoryIpcDescriptor { fds, chunk_sizes, size })
    }

    /// The descriptors and chunk sizes.
    pub fn into_parts(self) -> (Vec<OwnedFd>, Vec<usize>) {
        (self.fds, self.chunk_sizes)
    }

    /// The total size in bytes: what the importer's buffer reports.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Each chunk's size, in mapping order.
    pub fn chunk_sizes(&self) -> &[usize] {
        &self.chunk_sizes
    }

    /// Each chunk's file descriptor, in mapping order.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.fds.iter().map(|f| f.as_fd()).collect()
    }

    /// A copy with duplicated file descriptors.
    pub fn try_clone(&self) -> Result<VirtualMemoryIpcDescriptor> {
        let fds = self
            .fds
            .iter()
            .map(|f| f.try_clone().map_err(|e| invalid(format!("dup: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(VirtualMemoryIpcDescriptor {
            fds,
            chunk_sizes: self.chunk_sizes.clone(),
            size: self.size,
        })
    }

    /// Sends the descriptor over `socket`: one message per chunk carrying its descriptor.
    pub fn send(&self, socket: &UnixStream) -> Result<()> {
        for (i, (fd, &size)) in self.fds.iter().zip(&self.chunk_sizes).enumerate() {
            crate::memory::ipc::fd::send_fd(socket, fd.as_fd(), &header(self.fds.len(), i, size))?;
        }
        Ok(())
    }

    /// Receives a descriptor sent by [`send`](Self::send). Messages out of order, of another
    /// kind, or with a count that changes are errors (the descriptors received so far are
    /// closed).
    pub fn recv(socket: &UnixStream) -> Result<VirtualMemoryIpcDescriptor> {
        let mut fds = Vec::new();
        let mut sizes = Vec::new();
        let mut count = 1;
        while fds.len() < count {
            let (fd, payload) = crate::memory::ipc::fd::recv_fd(socket)?;
            let (n, index, size) = parse_header(&payload)?;
            if fds.is_empty() {
                if n == 0 || n > MAX_CHUNKS {
                    return Err(invalid(format!(
                        "a VirtualMemoryIpcDescriptor has 1 to {MAX_CHUNKS} chunks, not {n}"
                    )));
                }
                count = n;
            }
            if n != count || index != fds.len() {
                return Err(invalid(format!(
                    "VirtualMemoryIpcDescriptor message {index} of {n} arrived as message {} of {count}",
                    fds.len()
                )));
            }
            fds.push(fd);
            sizes.push(size);
        }
        VirtualMemoryIpcDescriptor::from_parts(fds, sizes)
    }
}

fn not_ipc_enabled() -> CudaError {
    invalid(
        "this VirtualMemoryResource is not IPC-enabled: create it with handle_type Some(VirtualMemoryHandleType::PosixFd) to share its buffers",
    )
}

impl VirtualMemoryResource {
    /// Exports `buffer` (allocated or grown by this resource) for another process: one new file
    /// descriptor per physical chunk (`cuMemExportToShareableHandle`). Each call makes new
    /// descriptors, owned by the result. The buffer is untouched; the descriptors keep its memory
    /// alive until they are closed, even after the buffer is freed. Memory imported from another
    /// process cannot be exported again (the driver refuses it): export it where it was
    /// allocated.
    pub fn ipc_descriptor(&self, buffer: &Buffer) -> Result<VirtualMemoryIpcDescriptor> {
        if !self.is_ipc_enabled() {
            return Err(not_ipc_enabled());
        }
        if !self.owns(buffer) {
            return Err(invalid(
                "this VirtualMemoryResource did not allocate the buffer: export it through its own resource",
            ));
        }
        let base = buffer.handle();
        let chunks: Vec<(usize, bool, bool)> = match self.records().get(&base) {
            Some(a) => a.chunks.iter().map(|c| (c.size, c.posix_fd, c.imported)).collect(),
            None => return Err(invalid("ipc_descriptor: the buffer was already freed")),
        };
        // The buffer is borrowed for the call: it is neither freed nor grown meanwhile, so its
        // chunks stay mapped where the record says.
        let mut fds = Vec::with_capacity(chunks.len());
        let mut offset = 0usize;
        for (size, posix_fd, imported) in &chunks {
            if !posix_fd {
                return Err(invalid(
                    "a chunk of this buffer is not IPC-enabled (it grew with options whose handle_type is not PosixFd)",
                ));
            }
            if *imported {
                return Err(invalid(
                    "this buffer's memory was imported from another process, and the driver does not export imported memory again: export it from the process that allocated it",
                ));
            }
            let handle = Handle::retain(at(base, offset)?)?;
            fds.push(handle.export_fd()?);
            offset = offset.saturating_add(*size);
        }
        VirtualMemoryIpcDescriptor::from_parts(fds, chunks.into_iter().map(|c| c.0).collect())
    }

    /// Maps a buffer another process exported ([`ipc_descriptor`](Self::ipc_descriptor)) into a
    /// new range of this process, with this resource's access (owner and peers), as one buffer of
    /// `descriptor.size()` bytes whose deallocation stream is `stream`. Its
    /// [`memory_resource`](Buffer::memory_resource) is this resource's import face, and
    /// [`Buffer::is_mapped`] is true. Dropping it unmaps this process's mapping (after
    /// synchronising its deallocation stream), once; the memory itself lives until every process
    /// let go of it. Importing in the exporting process maps the same memory at a new address.
    ///
    /// Refused unless this resource is IPC-enabled ("not IPC-enabled"), for memory of another
    /// location type than this resource's, and for chunk sizes that are not whole granules of
    /// their allocation or larger than it (the driver refuses the mapping); a descriptor that is
    /// not a CUDA allocation is refused by the driver. Nothing is left mapped on an error.
    pub fn from_ipc_descriptor(
        self: &Arc<Self>,
        descriptor: &VirtualMemoryIpcDescriptor,
        stream: &Stream,
    ) -> Result<Buffer> {
        if !self.is_ipc_enabled() {
            return Err(not_ipc_enabled());
        }
        // First every chunk is opened and checked, before any address is reserved.
        let want = self.options.location_type.driver_type();
        let mut opened = Vec::with_capacity(descriptor.fds.len());
        for (fd, &size) in descriptor.fds.iter().zip(&descriptor.chunk_sizes) {
            let handle = Handle::import(fd.as_fd())?;
            let prop = handle.properties()?;
            if prop.location.type_ != want {
                return Err(invalid(format!(
                    "the descriptor's memory has location type {}, but this resource maps {} memory",
                    prop.location.type_.0,
                    self.options.location_type.name()
                )));
            }
            if self.options.location_type == super::VirtualMemoryLocationType::Device {
                // SAFETY: for device locations the union holds the device ordinal.
                let id = unsafe { prop.location.__bindgen_anon_1.id };
                if usize::try_from(id).ok() != Some(self.device.device_id()) {
                    return Err(invalid(format!(
                        "the descriptor's memory lies on device {id}, but this resource maps memory of device {}: import it through a resource of that device",
                        self.device.device_id()
                    )));
                }
            }
            let minimum = raw::granularity(
                &prop,
                driver::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )?;
            if !size.is_multiple_of(minimum) {
                return Err(invalid(format!(
                    "the descriptor claims a chunk of {size} bytes, not a multiple of its allocation's granularity {minimum}: refused"
                )));
            }
            let owner = match self.options.location_type {
                super::VirtualMemoryLocationType::Device => device_location(&self.device),
                _ => prop.location,
            };
            opened.push((handle, size, self.options.access(owner)));
        }
        // Then mapped one after another in a range of their own.
        let range = Reservation::new(descriptor.size, self.alignment, 0)?;
        let mut mappings = Vec::with_capacity(opened.len());
        let mut chunks = Vec::with_capacity(opened.len());
        let mut offset = 0usize;
        for (handle, size, access) in opened {
            let to = at(range.ptr, offset)?;
            // SAFETY: [to, to + size) lies in `range` (the sizes add up to its size), just reserved
            // and mapped by nothing else; `range` is declared before `mappings` (dropped after
            // them) or kept with them. The driver refuses a size larger than the allocation.
            let mapping = unsafe { Mapping::new(to, size, &handle) }.map_err(|e| {
                invalid(format!(
                    "the descriptor's chunk of {size} bytes cannot be mapped (is it larger than the memory it carries?): refused: {e}"
                ))
            })?;
            mappings.push(mapping);
            // The chunk's last byte is mapped: by this mapping, as nothing else maps this range.
            let last = at(to, size - 1)?;
            drop(Handle::retain(last).map_err(|e| {
                invalid(format!(
                    "the descriptor's chunk of {size} bytes is not mapped whole: refused: {e}"
                ))
            })?);
            raw::set_access(to, size, &access)?;
            chunks.push(Chunk {
                size,
                access,
                posix_fd: true,
                imported: true,
            });
            offset = offset.saturating_add(size);
            // `handle` is released here: the mapping holds the memory.
        }
        // Every chunk is mapped: the records own the mappings and the range from now on.
        mappings.into_iter().for_each(Mapping::keep);
        let (base, reserved) = range.keep();
        self.records().insert(
            base,
            Allocation {
                reservations: vec![(base, reserved)],
                chunks,
            },
        );
        let face: Arc<dyn MemoryResource> = self.import_face();
        Buffer::from_parts(base, descriptor.size, Some(face), stream).inspect_err(|_| {
            // No buffer owns the memory: unmap it now (nothing used it).
            self.undo_import(base);
        })
    }

    /// Unmaps an import no buffer was made for.
    fn undo_import(&self, base: driver::CUdeviceptr) {
        if let Some(a) = self.records().remove(&base) {
            // SAFETY: mapped by `from_ipc_descriptor` just now and handed to nobody.
            let _ = unsafe { super::unmap(base, &a.chunks, &a.reservations) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn descriptors_check_their_parts() {
        let d = VirtualMemoryIpcDescriptor::from_parts(vec![fd(), fd()], vec![2 << 20, 4 << 20]).unwrap();
        assert_eq!(d.size(), 6 << 20);
        assert_eq!(d.chunk_sizes(), &[2 << 20, 4 << 20]);
        assert_eq!(d.fds().len(), 2);
        let c = d.try_clone().unwrap();
        assert_ne!(c.fds()[0].as_raw_fd(), d.fds()[0].as_raw_fd());
        let (fds, sizes) = c.into_parts();
        assert_eq!((fds.len(), sizes.len()), (2, 2));
        let bad = |fds: Vec<OwnedFd>, sizes: Vec<usize>| {
            VirtualMemoryIpcDescriptor::from_parts(fds, sizes)
                .unwrap_err()
                .to_string()
        };
        assert!(bad(vec![fd()], vec![1, 2]).contains("one size per descriptor"));
        assert!(bad(vec![], vec![]).contains("1 to"));
        assert!(bad(vec![fd()], vec![0]).contains("0 bytes"));
        assert!(bad(vec![fd(), fd()], vec![usize::MAX, 1]).contains("overflow"));
    }

    #[test]
    fn messages_round_trip_and_malformed_ones_are_errors() {
        let h = header(3, 1, 2 << 20);
        assert_eq!(parse_header(&h).unwrap(), (3, 1, 2 << 20));
        assert!(parse_header(&h[..31]).is_err());
        let mut wrong = h;
        wrong[0] ^= 1;
        assert!(parse_header(&wrong).is_err());
        assert!(parse_header(&[]).is_err());
        assert!(parse_header(&[h.as_slice(), h.as_slice()].concat()).is_err());
    }

    #[test]
    fn descriptors_travel_over_a_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let d = VirtualMemoryIpcDescriptor::from_parts(vec![fd(), fd(), fd()], vec![1, 2, 3]).unwrap();
        d.send(&a).unwrap();
        let r = VirtualMemoryIpcDescriptor::recv(&b).unwrap();
        assert_eq!(r.chunk_sizes(), &[1, 2, 3]);
        assert_eq!(r.size(), 6);
        // Out of order: message 1 of 2 first.
        crate::memory::ipc::fd::send_fd(&a, fd().as_fd(), &header(2, 1, 5)).unwrap();
        assert!(VirtualMemoryIpcDescriptor::recv(&b)
            .unwrap_err()
            .to_string()
            .contains("arrived as"));
        // A count of 0, and a payload of another kind.
        crate::memory::ipc::fd::send_fd(&a, fd().as_fd(), &header(0, 0, 5)).unwrap();
        assert!(VirtualMemoryIpcDescriptor::recv(&b).is_err());
        crate::memory::ipc::fd::send_fd(&a, fd().as_fd(), b"hello").unwrap();
        assert!(VirtualMemoryIpcDescriptor::recv(&b)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
    }
}
