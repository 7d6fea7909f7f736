//! How a collective is queued: the data it takes ([`SendData`], [`RecvData`]), one call as a
//! stream operation, and [`group`].
//!
//! **Who keeps what alive.** A collective goes through the crate's `enqueue_using`, as a copy
//! does: each buffer learns the stream (the stream is ordered after the buffer's allocation, and
//! the buffer's free waits for the stream), or, on a stream being captured, the graph holds the
//! buffers' memory and a counted hold of the communicator ([`GraphHold`]) for as long as it may
//! launch. Outside captures the communicator remembers the stream: its watchdog watches it, and
//! a dropped communicator is released only after the work queued there. Every NCCL call holds
//! the communicator's lock, so no abort or release frees it underneath; the handle is used by the
//! thread that owns the `Communicator` (it is not `Sync`).
//!
//! **Groups.** [`group`] collects calls and issues them between `ncclGroupStart` and
//! `ncclGroupEnd` when the closure returns, so a group can never be left open; NCCL queues the
//! work at `ncclGroupEnd`. Between the calls and the end, no capture may begin on their streams
//! (the work would land in a graph that does not hold its buffers): a group runs while no capture
//! runs in the process (the crate's quiet gate, held to the end, keeps one from beginning), and is
//! refused otherwise. Capture single collectives instead.

use super::comm::{CommInner, Communicator, GraphHold};
use super::types::{DataType, NcclType, ReduceOp};
use super::{check, sys};
use crate::memory::{enqueue_using, Buffer, BufferView, Pod, ReadOnlyView, TypedBuffer};
use crate::stream::Stream;
use crate::{CudaError, Result};
use std::ffi::c_void;
use std::sync::Arc;

/// Data a collective reads or writes: where it is, how many elements, and the buffer that holds
/// it (opaque; made by [`SendData`] and [`RecvData`]).
#[derive(Clone, Copy)]
pub struct Region<'a> {
    pub(crate) buffer: &'a Buffer,
    pub(crate) ptr: u64,
    pub(crate) len: usize,
}

mod sealed {
    pub trait Sealed {}
}

/// What a collective sends from: a typed buffer, a typed view (read-only ones too), or a whole
/// [`Buffer`] as bytes (`u8`; [`Buffer::view_as`] types one). Sealed.
pub trait SendData<'a, T>: sealed::Sealed {
    /// Where the data is.
    #[doc(hidden)]
    fn region(self) -> Region<'a>;
}

/// What a collective receives into: a typed buffer, a typed view, or a whole [`Buffer`] as
/// bytes. Sealed.
pub trait RecvData<'a, T>: sealed::Sealed {
    /// Where the data goes.
    #[doc(hidden)]
    fn region(self) -> Region<'a>;
}

macro_rules! data {
    ($($trait_:ident),*) => {$(
        impl<'a, T: Pod> $trait_<'a, T> for &'a TypedBuffer<T> {
            fn region(self) -> Region<'a> {
                Region { buffer: self.as_buffer(), ptr: self.handle(), len: self.len() }
            }
        }
        impl<'a, T: Pod> $trait_<'a, T> for BufferView<'a, T> {
            fn region(self) -> Region<'a> {
                Region { buffer: self.buffer(), ptr: self.handle(), len: self.len() }
            }
        }
        impl<'a> $trait_<'a, u8> for &'a Buffer {
            fn region(self) -> Region<'a> {
                Region { buffer: self, ptr: self.handle(), len: self.size() }
            }
        }
    )*};
}
data!(SendData, RecvData);

impl<'a, T: Pod> SendData<'a, T> for ReadOnlyView<'a, T> {
    fn region(self) -> Region<'a> {
        Region {
            buffer: self.buffer(),
            ptr: self.handle(),
            len: self.len(),
        }
    }
}

impl<T: Pod> sealed::Sealed for &TypedBuffer<T> {}
impl<T> sealed::Sealed for BufferView<'_, T> {}
impl<T> sealed::Sealed for ReadOnlyView<'_, T> {}
impl sealed::Sealed for &Buffer {}

/// Which NCCL call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce,
    Broadcast { root: i32 },
    Reduce { root: i32 },
    AllGather,
    ReduceScatter,
    Send { peer: i32 },
    Recv { peer: i32 },
}

/// One checked call, ready to issue.
pub(crate) struct Op<'a> {
    pub(crate) comm: &'a Communicator,
    pub(crate) stream: &'a Stream,
    pub(crate) kind: Kind,
    pub(crate) send: u64,
    pub(crate) recv: u64,
    /// The count NCCL is given (per rank for all-gather and reduce-scatter).
    pub(crate) count: usize,
    pub(crate) dtype: DataType,
    pub(crate) op: ReduceOp,
    /// The `PreMulSum` scalar as the element type's bytes.
    pub(crate) scalar: [u8; 8],
    pub(crate) buffers: [Option<&'a Buffer>; 2],
    /// Filled in by [`Group::run`] (unused by a single call).
    pub(crate) slot: GroupSlot<'a>,
}

/// What a group's run keeps with each of its calls: the communicator's handle and lock (the
/// lock with the communicator's first call in the group), and the reduction operator.
pub(crate) struct GroupSlot<'a> {
    handle: sys::ncclComm_t,
    red: sys::ncclRedOp_t,
    lock: Option<std::sync::MutexGuard<'a, super::comm::CommState>>,
}

impl Default for GroupSlot<'_> {
    fn default() -> Self {
        GroupSlot {
            handle: std::ptr::null_mut(),
            red: sys::ncclRedOp_t::ncclSum,
            lock: None,
        }
    }
}

impl Op<'_> {
    /// Makes the reduction operator for this call (a `PreMulSum` one is created here, and must
    /// be destroyed with [`destroy_op`] once the call (or its group) returned).
    fn make_op(&self, handle: sys::ncclComm_t) -> Result<(sys::ncclRedOp_t, bool)> {
        if let Some(op) = self.op.builtin() {
            return Ok((op, false));
        }
        let mut scalar = self.scalar;
        let mut op = sys::ncclRedOp_t::ncclSum;
        // SAFETY: the handle is live under its lock; the scalar is host memory of the element
        // type's size, read before the call returns (host-immediate residence).
        let status = unsafe {
            sys::ncclRedOpCreatePreMulSum(
                &mut op,
                scalar.as_mut_ptr().cast::<c_void>(),
                self.dtype.raw(),
                sys::ncclScalarResidence_t::ncclScalarHostImmediate,
                handle,
            )
        };
        check(status, "ncclRedOpCreatePreMulSum", Some(handle))?;
        Ok((op, true))
    }

    /// The NCCL call itself.
    ///
    /// # Safety
    /// `handle` is this op's communicator, live under its lock; the stream is live; the
    /// addresses and count were checked against buffers that stay alive until the work is done
    /// (see the module notes).
    unsafe fn issue(&self, handle: sys::ncclComm_t, op: sys::ncclRedOp_t) -> sys::ncclResult_t {
        let (send, recv) = (self.send as *const c_void, self.recv as *mut c_void);
        let (n, t, s) = (self.count, self.dtype.raw(), self.stream.handle() as sys::cudaStream_t);
        // SAFETY: forwarded to the caller.
        unsafe {
            match self.kind {
                Kind::AllReduce => sys::ncclAllReduce(send, recv, n, t, op, handle, s),
                Kind::Broadcast { root } => sys::ncclBroadcast(send, recv, n, t, root, handle, s),
                Kind::Reduce { root } => sys::ncclReduce(send, recv, n, t, op, root, handle, s),
                Kind::AllGather => sys::ncclAllGather(send, recv, n, t, handle, s),
                Kind::ReduceScatter => sys::ncclReduceScatter(send, recv, n, t, op, handle, s),
                Kind::Send { peer } => sys::ncclSend(send, n, t, peer, handle, s),
                Kind::Recv { peer } => sys::ncclRecv(recv, n, t, peer, handle, s),
            }
        }
    }

    fn call_name(&self) -> &'static str {
        match self.kind {
            Kind::AllReduce => "ncclAllReduce",
            Kind::Broadcast { .. } => "ncclBroadcast",
            Kind::Reduce { .. } => "ncclReduce",
            Kind::AllGather => "ncclAllGather",
            Kind::ReduceScatter => "ncclReduceScatter",
            Kind::Send { .. } => "ncclSend",
            Kind::Recv { .. } => "ncclRecv",
        }
    }

    /// Issues the call with `handle` and operator `op`, in the communicator's context, inside the
    /// stream operation that holds the buffers.
    fn issue_in(&self, handle: sys::ncclComm_t, op: sys::ncclRedOp_t) -> Result<()> {
        let inner = &self.comm.inner;
        super::in_runtime_context(&inner.context, || {
            // SAFETY: see `issue`: the caller holds the lock with the live handle, and runs this
            // inside the stream operation that keeps the buffers (or the graph holds them).
            let status = unsafe { self.issue(handle, op) };
            check(status, self.call_name(), Some(handle))
        })
    }
}

/// Destroys a `PreMulSum` operator made by [`Op::make_op`].
fn destroy_op(op: sys::ncclRedOp_t, handle: sys::ncclComm_t) {
    // SAFETY: the operator was made on this live communicator, and the call that used it returned.
    let _ = unsafe { sys::ncclRedOpDestroy(op, handle) };
}

/// Destroys the `PreMulSum` operators a group's run made for `ops` (the calls whose operator is
/// not built in), once the group returned or failed before it opened.
fn destroy_made_ops(ops: &[Op<'_>]) {
    for op in ops.iter().filter(|op| op.op.builtin().is_none()) {
        destroy_op(op.slot.red, op.slot.handle);
    }
}

/// Queues one checked call on its stream.
pub(crate) fn run_one(op: Op<'_>) -> Result<()> {
    let inner: &Arc<CommInner> = &op.comm.inner;
    let (state, handle) = inner.live()?;
    let (red, made) = op.make_op(handle)?;
    let captured = enqueue_using(op.stream, &op.buffers, |capture| {
        let captured = match capture {
            Some(capture) => {
                // The graph may launch this collective as long as it lives: it holds the
                // communicator (and, through enqueue_using, the buffers).
                capture.hold(GraphHold::new(inner));
                true
            }
            None => false,
        };
        op.issue_in(handle, red)?;
        Ok(captured)
    });
    if made {
        destroy_op(red, handle);
    }
    drop(state);
    if !captured? {
        inner.note_site(op.stream);
    }
    Ok(())
}

/// Several calls as one NCCL group (`ncclGroupStart` ... `ncclGroupEnd`): collect them on `g`,
/// and they are issued together when the closure returns `Ok` (nothing is issued when it
/// returns an error). Needed when one thread drives several ranks ([`Communicator::init_all`]),
/// and to pair sends with receives.
///
/// The data borrowed by the calls must outlive the whole group (the `'a` of [`Group`]). A group
/// runs while no stream of this process is being captured, and is refused otherwise (see the
/// module notes); it takes created streams only.
///
/// ```no_run
/// # use cuda_core::{*, nccl::*};
/// # fn demo(comms: &[Communicator], data: &[TypedBuffer<f32>], streams: &[Stream]) -> Result<()> {
/// group(|g| {
///     for ((comm, buf), s) in comms.iter().zip(data).zip(streams) {
///         g.all_reduce_in_place(comm, buf, ReduceOp::Sum, s)?;
///     }
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
pub fn group<'a, R>(f: impl FnOnce(&mut Group<'a>) -> Result<R>) -> Result<R> {
    let mut g = Group { ops: Vec::new() };
    let value = f(&mut g)?;
    g.run()?;
    Ok(value)
}

/// The calls of a [`group`], checked as they are added and issued together at its end.
pub struct Group<'a> {
    pub(crate) ops: Vec<Op<'a>>,
}

impl Group<'_> {
    fn run(mut self) -> Result<()> {
        let Some(first) = self.ops.first() else {
            return Ok(());
        };
        let (first_stream, first_comm) = (first.stream, first.comm);
        // No capture runs anywhere until the group is queued (see the module notes).
        let quiet = first_stream.quietly().ok_or_else(|| {
            CudaError::InvalidState(
                "an NCCL group runs only while no stream of this process is being captured (a capture beginning between its calls and its end would record work its graph does not hold): end the capture first, or capture single collectives".into(),
            )
        })?;
        // Each communicator locked once, for the whole group: no abort or release in between.
        // The lock goes with the communicator's first call; its later calls take the handle.
        for i in 0..self.ops.len() {
            let comm = self.ops[i].comm;
            let earlier = self.ops[..i]
                .iter()
                .find(|o| Arc::ptr_eq(&o.comm.inner, &comm.inner))
                .map(|o| o.slot.handle);
            self.ops[i].slot.handle = match earlier {
                Some(handle) => handle,
                None => {
                    let (guard, handle) = comm.inner.live()?;
                    self.ops[i].slot.lock = Some(guard);
                    handle
                }
            };
        }
        for i in 0..self.ops.len() {
            match self.ops[i].make_op(self.ops[i].slot.handle) {
                Ok((red, _)) => self.ops[i].slot.red = red,
                Err(e) => {
                    destroy_made_ops(&self.ops[..i]);
                    return Err(e);
                }
            }
        }
        // The whole group in one context NCCL can work from (see `in_runtime_context`): with
        // pointer checks on, NCCL switches devices at each call too.
        let outcome = super::in_runtime_context(&first_comm.inner.context, || {
            // SAFETY: opens a group on this thread; closed below whatever happens in between.
            check(unsafe { sys::ncclGroupStart() }, "ncclGroupStart", None)?;
            let mut issued_all = Ok(());
            for op in &self.ops {
                let (handle, red) = (op.slot.handle, op.slot.red);
                let issued = enqueue_using(op.stream, &op.buffers, |capture| {
                    if capture.is_some() {
                        // Unreachable while the quiet gate is held; refused all the same.
                        return Err(CudaError::InvalidState(
                            "an NCCL group cannot record into a capture".into(),
                        ));
                    }
                    // In a group NCCL only records the call (it picks each communicator's device
                    // itself at the end), so no context switch per call, as raw NCCL code does.
                    // SAFETY: see `issue`: the handle is live under its lock held to the group's
                    // end, and this runs inside the stream operation that keeps the buffers.
                    let status = unsafe { op.issue(handle, red) };
                    check(status, op.call_name(), Some(handle))
                });
                if let Err(e) = issued {
                    issued_all = Err(e);
                    break;
                }
            }
            // SAFETY: closes the group opened above; every communicator in it is live under its
            // lock, every buffer held by its stream.
            let ended = check(unsafe { sys::ncclGroupEnd() }, "ncclGroupEnd", None);
            issued_all.and(ended)
        });
        destroy_made_ops(&self.ops);
        for op in self.ops.iter_mut() {
            op.slot.lock = None;
        }
        drop(quiet);
        for op in &self.ops {
            op.comm.inner.note_site(op.stream);
        }
        outcome
    }
}

/// The element type's bytes of the `PreMulSum` scalar (zero for other operators).
pub(crate) fn scalar_bytes<T: NcclType>(op: ReduceOp) -> [u8; 8] {
    let mut out = [0u8; 8];
    if let ReduceOp::PreMulSum(v) = op {
        let value = T::from_f64(v);
        let bytes = bytemuck::bytes_of(&value);
        out[..bytes.len()].copy_from_slice(bytes);
    }
    out
}
