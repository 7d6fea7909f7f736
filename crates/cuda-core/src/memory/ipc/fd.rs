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
    if received < 0 {
        return Err(io("recvmsg"));
    }
    if received == 0 {
        return Err(CudaError::InvalidArgument(
            "recv_fd: the peer closed the connection before sending".into(),
        ));
    }
    // Every descriptor the message carries becomes ours (and is closed unless it is the one).
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg; CMSG_FIRSTHDR/CMSG_NXTHDR walk headers inside the control
    // buffer, and each SCM_RIGHTS header's data holds (cmsg_len - CMSG_LEN(0)) / sizeof(int)
    // descriptors, read unaligned; each is a new descriptor for this process to own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const libc::c_int;
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(CudaError::InvalidArgument(
            "recv_fd: the message carried more descriptors than one (the extra ones are closed)".into(),
        ));
    }
    if fds.len() != 1 {
        return Err(CudaError::InvalidArgument(format!(
            "recv_fd: the message carried {} file descriptors, not one",
            fds.len()
        )));
    }
    payload.truncate(received as usize);
    Ok((fds.remove(0), payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_travel_one_per_message() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        send_fd(&a, file.as_fd(), b"hello").unwrap();
        let (fd, payload) = recv_fd(&b).unwrap();
        assert_eq!(payload, b"hello");
        assert!(fd.as_raw_fd() >= 0);
        drop(a);
        let err = recv_fd(&b).unwrap_err();
        assert!(err.to_string().contains("closed the connection"), "{err}");
    }

    #[test]
    fn a_message_with_two_descriptors_is_refused_and_both_are_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (x, y) = (
            std::fs::File::open("/dev/null").unwrap(),
            std::fs::File::open("/dev/null").unwrap(),
        );
        let payload = b"two";
        let mut iov = libc::iovec {
            iov_base: payload.as_ptr() as *mut _,
            iov_len: payload.len(),
        };
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(2 * std::mem::size_of::<libc::c_int>() as u32) } as usize;
        let mut control = vec![0u8; space];
        let msg = message(&mut iov, &mut control);
        // SAFETY: the control buffer has room for one header carrying two ints.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(2 * std::mem::size_of::<libc::c_int>() as u32) as _;
            let data = libc::CMSG_DATA(cmsg) as *mut libc::c_int;
            std::ptr::write_unaligned(data, x.as_raw_fd());
            std::ptr::write_unaligned(data.add(1), y.as_raw_fd());
            assert_eq!(libc::sendmsg(a.as_raw_fd(), &msg, 0), payload.len() as isize);
        }
        let err = recv_fd(&b).unwrap_err();
        assert!(
            err.to_string().contains("not one") || err.to_string().contains("more descriptors"),
            "{err}"
        );
    }
}
