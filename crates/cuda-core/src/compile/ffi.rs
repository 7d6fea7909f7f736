//! What every call into a compiler library needs: strings checked for NUL bytes before they
//! become C strings (an error naming the option, never a truncated string), logs read back, and
//! the architecture of the current device (the default target).

use crate::{CudaError, Result};
use std::ffi::{CStr, CString};

/// The error for `value` (described by `what`: which option, name or path) containing a NUL byte
/// at byte `at`.
fn nul_error(what: &str, value: &[u8], at: usize) -> CudaError {
    CudaError::InvalidArgument(format!(
        "{what} {:?} contains a NUL byte (at byte {at}), which a C string cannot hold",
        String::from_utf8_lossy(value)
    ))
}

/// `value` as a C string for a compiler or linker call, or [`CudaError::InvalidArgument`] naming
/// `what` (which option, name or path) if it contains a NUL byte, rather than a silently
/// truncated or emptied string.
pub(crate) fn c_string(value: impl Into<Vec<u8>>, what: &str) -> Result<CString> {
    CString::new(value).map_err(|e| {
        let at = e.nul_position();
        nul_error(what, &e.into_vec(), at)
    })
}

/// [`CudaError::InvalidArgument`] naming `what` if `value` contains a NUL byte: the up-front form of
/// [`c_string`], for validating options before any library call.
pub(crate) fn check_no_nul(value: &str, what: &str) -> Result<()> {
    match value.bytes().position(|c| c == 0) {
        Some(at) => Err(nul_error(what, value.as_bytes(), at)),
        None => Ok(()),
    }
}

/// [`check_no_nul`] for the optional strings `singles` and every entry of the lists `lists`, each
/// named as `{owner}: {name}`.
pub(crate) fn check_fields_no_nul(
    owner: &str,
    singles: &[(&str, &Option<String>)],
    lists: &[(&str, &Vec<String>)],
) -> Result<()> {
    for (what, value) in singles {
        if let Some(value) = value {
            check_no_nul(value, &format!("{owner}: {what}"))?;
        }
    }
    for (what, values) in lists {
        for value in values.iter() {
            check_no_nul(value, &format!("{owner}: {what}"))?;
        }
    }
    Ok(())
}

/// Reads a NUL-terminated log of `size` bytes written by `fill`.
pub(crate) fn read_log(size: usize, fill: impl FnOnce(*mut std::ffi::c_char) -> Result<()>) -> Result<String> {
    if size == 0 {
        return Ok(String::new());
    }
    let mut buf = vec![0u8; size];
    fill(buf.as_mut_ptr().cast())?;
    let text = CStr::from_bytes_until_nul(&buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string());
    Ok(text)
}

/// `sm_XY` of the current context's device, or of device 0; `None` without a GPU.
pub(crate) fn current_device_arch() -> Option<String> {
    let arch = crate::Device::current().ok()?.arch().ok()?;
    Some(format!("sm_{arch}"))
}

/// `bytes` as lowercase hex digits, two per byte (file names of hashes).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_with_nul_bytes_are_errors_that_say_where() {
        let err = c_string("a\0b", "the thing").unwrap_err();
        assert!(
            err.to_string()
                .contains("the thing \"a\\0b\" contains a NUL byte (at byte 1)"),
            "{err}"
        );
        assert_eq!(c_string("ab", "the thing").unwrap().as_bytes(), b"ab");
        assert!(check_no_nul("a\0", "x").is_err() && check_no_nul("a", "x").is_ok());
    }
}
