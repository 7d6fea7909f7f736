//! The checks every collective makes before NCCL sees its arguments: ranks and roots in range,
//! element counts that match what the collective reads and writes (with checked arithmetic),
//! buffers that overlap only as NCCL's in-place forms do. Pure functions of numbers, so the CPU
//! tests cover them.

use crate::{CudaError, Result};

/// `rank` is one of `nranks` ranks.
pub(crate) fn check_rank(rank: usize, nranks: usize) -> Result<()> {
    if nranks == 0 || nranks > i32::MAX as usize {
        return Err(CudaError::InvalidArgument(format!(
            "an NCCL communicator has 1 to {} ranks, not {nranks}",
            i32::MAX
        )));
    }
    if rank >= nranks {
        return Err(CudaError::InvalidArgument(format!(
            "rank {rank} is out of range: a communicator of {nranks} ranks has ranks 0 to {}",
            nranks - 1
        )));
    }
    Ok(())
}

/// `peer` (a root, or the other side of a send or receive) is a rank of a communicator of
/// `nranks`.
pub(crate) fn check_peer(what: &str, role: &str, peer: usize, nranks: usize) -> Result<()> {
    if peer >= nranks {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: {role} {peer} is not a rank of this communicator (ranks 0 to {})",
            nranks.saturating_sub(1)
        )));
    }
    Ok(())
}

/// The shape of a collective: how the send count relates to the receive count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Send and receive hold the same count (all-reduce, broadcast, reduce).
    Same,
    /// The receive holds `nranks` times the send (all-gather).
    Gather,
    /// The send holds `nranks` times the receive (reduce-scatter).
    Scatter,
}

/// The count NCCL is given for a collective of `shape` with `send` and `recv` elements over
/// `nranks` ranks (the per-rank count for all-gather and reduce-scatter), or why the lengths do
/// not fit.
pub(crate) fn collective_count(what: &str, shape: Shape, send: usize, recv: usize, nranks: usize) -> Result<usize> {
    let mismatch = |expected: String| {
        Err(CudaError::InvalidArgument(format!(
            "{what}: the send data has {send} elements and the receive data {recv}; {expected}"
        )))
    };
    match shape {
        Shape::Same => {
            if send != recv {
                return mismatch("they must hold the same number".into());
            }
            Ok(send)
        }
        Shape::Gather => match send.checked_mul(nranks) {
            Some(total) if total == recv => Ok(send),
            Some(total) => mismatch(format!(
                "the receive data must hold the send count times the {nranks} ranks ({total})"
            )),
            None => mismatch("the send count times the ranks overflows".into()),
        },
        Shape::Scatter => match recv.checked_mul(nranks) {
            Some(total) if total == send => Ok(recv),
            Some(total) => mismatch(format!(
                "the send data must hold the receive count times the {nranks} ranks ({total})"
            )),
            None => mismatch("the receive count times the ranks overflows".into()),
        },
    }
}

/// The count of an in-place collective of `shape` on `len` elements (the per-rank count for
/// all-gather and reduce-scatter, which need `len` to be a multiple of the ranks).
pub(crate) fn in_place_count(what: &str, shape: Shape, len: usize, nranks: usize) -> Result<usize> {
    match shape {
        Shape::Same => Ok(len),
        Shape::Gather | Shape::Scatter => {
            if nranks == 0 || !len.is_multiple_of(nranks) {
                return Err(CudaError::InvalidArgument(format!(
                    "{what}: in place, the data ({len} elements) must split evenly into one part per rank ({nranks} ranks)"
                )));
            }
            Ok(len / nranks)
        }
    }
}

/// Byte ranges `[a, a + a_len)` and `[b, b + b_len)` may overlap only as the in-place form of a
/// collective of `shape` places them: the same start for `Same`, this rank's part of the
/// receive data for `Gather`, of the send data for `Scatter`. Anything else is refused (NCCL
/// leaves it undefined).
pub(crate) fn check_overlap(
    what: &str,
    shape: Shape,
    (send, send_bytes): (u64, usize),
    (recv, recv_bytes): (u64, usize),
    rank: usize,
    part_bytes: usize,
) -> Result<()> {
    let end = |start: u64, len: usize| start.saturating_add(len as u64);
    let overlap = send < end(recv, recv_bytes) && recv < end(send, send_bytes);
    if !overlap || send_bytes == 0 || recv_bytes == 0 {
        return Ok(());
    }
    let offset = (rank as u64).checked_mul(part_bytes as u64);
    let in_place = match shape {
        Shape::Same => send == recv,
        Shape::Gather => offset.and_then(|o| recv.checked_add(o)) == Some(send),
        Shape::Scatter => offset.and_then(|o| send.checked_add(o)) == Some(recv),
    };
    if in_place {
        return Ok(());
    }
    Err(CudaError::InvalidArgument(format!(
        "{what}: the send and receive data overlap other than in place (NCCL leaves that undefined): use separate buffers, or the in-place form"
    )))
}
