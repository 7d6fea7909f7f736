//! PTX newer than the driver: `cuda.core`'s `RuntimeWarning` when a compile to PTX produces an
//! ISA the installed driver cannot load.

use crate::error::warn;
use crate::{Warning, WarningCategory};

/// The CUDA version `(major, minor)` that introduced PTX ISA `major.minor` (the PTX ISA's
/// release history; versions after the table are extrapolated from its last rule).
fn cuda_for_ptx_isa(major: u32, minor: u32) -> (u32, u32) {
    match (major, minor) {
        (6, m @ 0..=2) => (9, m),
        (6, m) => (10, m - 3),
        (7, m) => (11, m),
        (8, m @ 0..=5) => (12, m),
        (8, m) => (12, m + 1),
        (m, n) if m < 6 => (m + 2, n),
        (m, n) => (m + 4, n),
    }
}

/// The PTX ISA version a PTX text declares (its `.version major.minor` directive).
fn ptx_isa_version(ptx: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(ptx.get(..ptx.len().min(1 << 16))?).ok()?;
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(".version")?;
        let (major, minor) = rest.trim().split_once('.')?;
        let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
        Some((major.trim().parse().ok()?, minor.parse().ok()?))
    })
}

/// Warns (a [`WarningCategory::Runtime`] warning, as `cuda.core`'s `RuntimeWarning`) when `ptx`
/// needs a newer CUDA than the installed driver's: the driver cannot load it (JIT-compile it),
/// so the program should compile for a real architecture or for an older PTX ISA.
pub(crate) fn warn_if_ptx_too_new(ptx: &[u8]) {
    let Some((major, minor)) = ptx_isa_version(ptx) else {
        return;
    };
    let Ok(driver) = crate::system::get_user_mode_driver_version() else {
        return;
    };
    if let Some(warning) = ptx_too_new(major, minor, driver) {
        warn(warning);
    }
}

/// The warning for PTX ISA `major.minor` under a driver of CUDA `driver`, if it is too new.
fn ptx_too_new(major: u32, minor: u32, driver: (u32, u32)) -> Option<Warning> {
    let needs = cuda_for_ptx_isa(major, minor);
    (needs > driver).then(|| {
        Warning::new(
            WarningCategory::Runtime,
            format!(
                "the PTX generated is of ISA version {major}.{minor}, which needs CUDA {}.{}; the installed driver \
                 supports CUDA {}.{} and cannot load it: update the driver, or compile to a cubin (CodeType::Cubin) \
                 or for an older PTX ISA",
                needs.0, needs.1, driver.0, driver.1
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_newer_than_the_driver_is_warned_of() {
        assert_eq!(ptx_isa_version(b"//\n.version 8.5\n.target sm_90\n"), Some((8, 5)));
        assert_eq!(ptx_isa_version(b".target sm_90\n"), None);
        assert_eq!(cuda_for_ptx_isa(7, 8), (11, 8));
        assert_eq!(cuda_for_ptx_isa(8, 0), (12, 0));
        assert_eq!(cuda_for_ptx_isa(8, 7), (12, 8));
        assert_eq!(cuda_for_ptx_isa(9, 0), (13, 0));
        assert_eq!(cuda_for_ptx_isa(6, 4), (10, 1));
        let w = ptx_too_new(9, 0, (12, 4)).expect("PTX 9.0 needs CUDA 13.0");
        assert_eq!(w.category(), WarningCategory::Runtime);
        assert!(
            w.message().contains("CUDA 13.0") && w.message().contains("CUDA 12.4"),
            "{w}"
        );
        assert!(ptx_too_new(8, 4, (12, 4)).is_none());
        assert!(ptx_too_new(8, 0, (13, 0)).is_none());
    }
}
