//! The collectives: on a [`Communicator`] (queued at once, as a stream operation) and in a
//! [`Group`] (queued together at the group's end). Each is checked here before NCCL sees it:
//! the stream (a created stream of the communicator's device), roots and peers, element counts,
//! overlap, and what the device may do with each buffer's memory.

use super::checks::{self, Shape};
use super::comm::Communicator;
use super::ops::{run_one, scalar_bytes, Group, Kind, Op, RecvData, Region, SendData};
use super::types::{NcclType, ReduceOp};
use crate::stream::Stream;
use crate::{CudaError, Result};

/// The stream is a created stream of the communicator's device (its primary context, where NCCL
/// works through the runtime).
fn check_stream(comm: &Communicator, stream: &Stream, what: &str) -> Result<()> {
    if stream.is_default() {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: NCCL collectives take a stream you created (Device::create_stream), not a default stream, whose meaning NCCL (through the runtime) and this crate could resolve differently"
        )));
    }
    let device = comm.device().device_id();
    match stream.context() {
        Some(c) if c.handle() == comm.inner.context.handle() => Ok(()),
        Some(c) => Err(CudaError::InvalidArgument(format!(
            "{what}: the stream belongs to a context of device {} other than the primary context of device {device}, the communicator's: create the stream on device {device} (Device::create_stream)",
            c.device().device_id()
        ))),
        None => Err(CudaError::InvalidState(format!("{what}: the stream has no context"))),
    }
}

/// The device of `stream` may read (and for `write`, write) `region`'s buffer, and device memory
/// is the communicator's device's.
fn check_buffer(comm: &Communicator, stream: &Stream, region: &Region<'_>, write: bool, what: &str) -> Result<()> {
    let b = region.buffer;
    if write {
        b.check_writable(what)?;
    }
    b.check_device_reads(stream, what)?;
    let device = comm.device().device_id();
    if let Some(d) = b.device_id() {
        if d != device && !b.is_managed() && !b.is_host_accessible() {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: the buffer is memory of device {d}, but this rank runs on device {device}: allocate it on device {device}"
            )));
        }
    }
    Ok(())
}

/// The byte size of `len` elements of `T`, checked.
fn bytes<T>(len: usize, what: &str) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| CudaError::InvalidArgument(format!("{what}: {len} elements overflow a byte count")))
}

/// How a collective's send count relates to its receive count.
fn shape_of(kind: Kind) -> Shape {
    match kind {
        Kind::AllGather => Shape::Gather,
        Kind::ReduceScatter => Shape::Scatter,
        _ => Shape::Same,
    }
}

/// A collective with separate send and receive data.
#[allow(clippy::too_many_arguments)]
fn two<'a, T: NcclType>(
    comm: &'a Communicator,
    stream: &'a Stream,
    what: &'static str,
    kind: Kind,
    send: Region<'a>,
    recv: Region<'a>,
    op: ReduceOp,
) -> Result<Op<'a>> {
    let shape = shape_of(kind);
    check_stream(comm, stream, what)?;
    let count = checks::collective_count(what, shape, send.len, recv.len, comm.count())?;
    let part = bytes::<T>(count, what)?;
    checks::check_overlap(
        what,
        shape,
        (send.ptr, bytes::<T>(send.len, what)?),
        (recv.ptr, bytes::<T>(recv.len, what)?),
        comm.rank(),
        part,
    )?;
    check_buffer(comm, stream, &send, false, what)?;
    check_buffer(comm, stream, &recv, true, what)?;
    Ok(Op {
        comm,
        stream,
        kind,
        send: send.ptr,
        recv: recv.ptr,
        count,
        dtype: T::DATA_TYPE,
        op,
        scalar: scalar_bytes::<T>(op),
        buffers: [Some(send.buffer), Some(recv.buffer)],
        slot: Default::default(),
    })
}

/// A collective in place on `data`: the same address for all-reduce, broadcast and reduce; this
/// rank's part of `data` as the send data of all-gather and the receive data of reduce-scatter.
fn in_place<'a, T: NcclType>(
    comm: &'a Communicator,
    stream: &'a Stream,
    what: &'static str,
    kind: Kind,
    data: Region<'a>,
    op: ReduceOp,
) -> Result<Op<'a>> {
    let shape = shape_of(kind);
    check_stream(comm, stream, what)?;
    let count = checks::in_place_count(what, shape, data.len, comm.count())?;
    let offset = bytes::<T>(count, what)?
        .checked_mul(comm.rank())
        .ok_or_else(|| CudaError::InvalidArgument(format!("{what}: this rank's offset overflows")))?;
    let part = data.ptr + offset as u64; // within the buffer: rank * count < len
    let (send, recv) = match shape {
        Shape::Same => (data.ptr, data.ptr),
        Shape::Gather => (part, data.ptr),
        Shape::Scatter => (data.ptr, part),
    };
    check_buffer(comm, stream, &data, true, what)?;
    Ok(Op {
        comm,
        stream,
        kind,
        send,
        recv,
        count,
        dtype: T::DATA_TYPE,
        op,
        scalar: scalar_bytes::<T>(op),
        buffers: [Some(data.buffer), None],
        slot: Default::default(),
    })
}

/// A send (`recv == false`) or receive of `data` with `peer`.
fn point<'a, T: NcclType>(
    comm: &'a Communicator,
    stream: &'a Stream,
    recv: bool,
    data: Region<'a>,
    peer: usize,
) -> Result<Op<'a>> {
    let what = if recv { "recv" } else { "send" };
    check_stream(comm, stream, what)?;
    checks::check_peer(what, "peer", peer, comm.count())?;
    check_buffer(comm, stream, &data, recv, what)?;
    let peer = peer as i32; // < count <= i32::MAX
    Ok(Op {
        comm,
        stream,
        kind: if recv { Kind::Recv { peer } } else { Kind::Send { peer } },
        send: if recv { 0 } else { data.ptr },
        recv: if recv { data.ptr } else { 0 },
        count: data.len,
        dtype: T::DATA_TYPE,
        op: ReduceOp::Sum,
        scalar: [0; 8],
        buffers: [Some(data.buffer), None],
        slot: Default::default(),
    })
}

fn root_of(comm: &Communicator, what: &str, root: usize) -> Result<i32> {
    checks::check_peer(what, "root", root, comm.count())?;
    Ok(root as i32)
}

/// Every collective twice: a method of [`Communicator`] that queues it now, and one of
/// [`Group`] that adds it to the group. `$prep` builds the checked [`Op`] from `comm` and `stream`.
macro_rules! collectives {
    ($(
        $(#[$doc:meta])*
        fn $name:ident<T>($($arg:ident: $ty:ty),*) => |$comm:ident, $stream:ident, $what:pat_param| $prep:expr;
    )*) => {
        impl Communicator {$(
            $(#[$doc])*
            ///
            /// A stream operation: the data is held until the work is done on `stream` (or, on a
            /// stream being captured, by the graph, which also holds the communicator).
            pub fn $name<'a, T: NcclType>(&'a self, $($arg: $ty,)* stream: &'a Stream) -> Result<()> {
                let ($comm, $stream, $what) = (self, stream, stringify!($name));
                run_one($prep?)
            }
        )*}

        impl<'a> Group<'a> {$(
            $(#[$doc])*
            ///
            /// Added to the group (checked now), issued at its end.
            pub fn $name<T: NcclType>(&mut self, comm: &'a Communicator, $($arg: $ty,)* stream: &'a Stream) -> Result<()> {
                let ($comm, $stream, $what) = (comm, stream, stringify!($name));
                self.ops.push($prep?);
                Ok(())
            }
        )*}
    };
}

collectives! {
    /// Every rank receives the reduction of all ranks' `send` (`ncclAllReduce`); `send` and
    /// `recv` hold the same number of elements.
    fn all_reduce<T>(send: impl SendData<'a, T>, recv: impl RecvData<'a, T>, op: ReduceOp)
        => |c, s, w| two::<T>(c, s, w, Kind::AllReduce, send.region(), recv.region(), op);
    /// [`all_reduce`](Self::all_reduce) in place: `data` is sent and receives the result.
    fn all_reduce_in_place<T>(data: impl RecvData<'a, T>, op: ReduceOp)
        => |c, s, w| in_place::<T>(c, s, w, Kind::AllReduce, data.region(), op);
    /// Every rank receives `root`'s `send` (`ncclBroadcast`; other ranks' `send` is not read, but
    /// must hold as many elements as `recv`).
    fn broadcast<T>(send: impl SendData<'a, T>, recv: impl RecvData<'a, T>, root: usize)
        => |c, s, w| two::<T>(c, s, w, Kind::Broadcast { root: root_of(c, w, root)? }, send.region(), recv.region(), ReduceOp::Sum);
    /// [`broadcast`](Self::broadcast) in place: `root` sends `data`, the others receive into it.
    fn broadcast_in_place<T>(data: impl RecvData<'a, T>, root: usize)
        => |c, s, w| in_place::<T>(c, s, w, Kind::Broadcast { root: root_of(c, w, root)? }, data.region(), ReduceOp::Sum);
    /// `root` receives the reduction of all ranks' `send` (`ncclReduce`; other ranks' `recv` is
    /// not written, but must hold as many elements as `send`).
    fn reduce<T>(send: impl SendData<'a, T>, recv: impl RecvData<'a, T>, op: ReduceOp, root: usize)
        => |c, s, w| two::<T>(c, s, w, Kind::Reduce { root: root_of(c, w, root)? }, send.region(), recv.region(), op);
    /// [`reduce`](Self::reduce) in place on `data`.
    fn reduce_in_place<T>(data: impl RecvData<'a, T>, op: ReduceOp, root: usize)
        => |c, s, w| in_place::<T>(c, s, w, Kind::Reduce { root: root_of(c, w, root)? }, data.region(), op);
    /// Every rank receives all ranks' `send`, one after another in rank order (`ncclAllGather`);
    /// `recv` holds `count()` times the elements of `send`.
    fn all_gather<T>(send: impl SendData<'a, T>, recv: impl RecvData<'a, T>)
        => |c, s, w| two::<T>(c, s, w, Kind::AllGather, send.region(), recv.region(), ReduceOp::Sum);
    /// [`all_gather`](Self::all_gather) in place: this rank's part of `data` (part `rank()` of
    /// `count()` equal parts) is sent, and `data` receives every part.
    fn all_gather_in_place<T>(data: impl RecvData<'a, T>)
        => |c, s, w| in_place::<T>(c, s, w, Kind::AllGather, data.region(), ReduceOp::Sum);
    /// Rank `i` receives part `i` of the reduction of all ranks' `send` (`ncclReduceScatter`);
    /// `send` holds `count()` times the elements of `recv`.
    fn reduce_scatter<T>(send: impl SendData<'a, T>, recv: impl RecvData<'a, T>, op: ReduceOp)
        => |c, s, w| two::<T>(c, s, w, Kind::ReduceScatter, send.region(), recv.region(), op);
    /// [`reduce_scatter`](Self::reduce_scatter) in place: `data` is sent, and this rank's part of
    /// it receives the result.
    fn reduce_scatter_in_place<T>(data: impl RecvData<'a, T>, op: ReduceOp)
        => |c, s, w| in_place::<T>(c, s, w, Kind::ReduceScatter, data.region(), op);
    /// Sends `data` to rank `peer` (`ncclSend`), which receives it with [`recv`](Self::recv) of as
    /// many elements. Pair sends and receives that depend on each other in a [`group`](super::group).
    fn send<T>(data: impl SendData<'a, T>, peer: usize)
        => |c, s, _| point::<T>(c, s, false, data.region(), peer);
    /// Receives into `data` from rank `peer` (`ncclRecv`).
    fn recv<T>(data: impl RecvData<'a, T>, peer: usize)
        => |c, s, _| point::<T>(c, s, true, data.region(), peer);
}
