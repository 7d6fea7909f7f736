//! Sending file descriptors between processes over a Unix socket (`SCM_RIGHTS`), for IPC memory
//! pools.

use crate::{CudaError, Result};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

fn io(what: &str) -> CudaError {
    CudaError::InvalidArgument(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// A zeroed control buffer with room for one header carrying one descriptor.
fn control_buffer() -> Vec<u8> {
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    vec![0u8; space]
}

/// A message header over one `iov` and the `control` buffer; both must outlive its use.
fn message(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is valid; the fields set below point to the caller's buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

/// Sends `fd` and up to 4 KiB of `payload` (such as an IPC descriptor) over `socket`.
pub fn send_fd(socket: &UnixStream, fd: BorrowedFd<'_>, payload: &[u8]) -> Result<()> {
    if payload.is_empty() || payload.len() > 4096 {
        return Err(CudaError::InvalidArgument(
            "send_fd: the payload must be 1 to 4096 bytes".into(),
        ));
    }
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut _,
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let msg = message(&mut iov, &mut control);
    // SAFETY: the control buffer has room for one header carrying one int (`control_buffer`).
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::c_int, fd.as_raw_fd());
    }
    // SAFETY: msg describes live buffers; the socket is open.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, 0) };
    if sent < 0 || sent as usize != payload.len() {
        return Err(io("sendmsg"));
    }
    Ok(())
}

/// Receives a descriptor and its payload sent by [`send_fd`].
pub fn recv_fd(socket: &UnixStream) -> Result<(OwnedFd, Vec<u8>)> {
    let mut payload = vec![0u8; 4096];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let mut msg = message(&mut iov, &mut control);
    // SAFETY: msg describes live buffers; the socket is open. MSG_CMSG_CLOEXEC keeps the new
    // descriptor out of child processes.
    let received = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received <= 0 {
        return Err(io("recvmsg"));
    }
    // SAFETY: the kernel filled msg; the header, if any, lies within the control buffer.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_level != libc::SOL_SOCKET || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(CudaError::InvalidArgument(
                "recv_fd: the message carried no file descriptor".into(),
            ));
        }
        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::c_int)
    };
    payload.truncate(received as usize);
    // SAFETY: SCM_RIGHTS gave this process a new descriptor to own.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, payload))
}
