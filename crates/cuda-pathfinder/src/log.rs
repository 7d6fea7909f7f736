//! The opt-in search log: `CUDA_PATHFINDER_LOG_LEVEL` (`cuda.pathfinder`'s variable) set to a
//! level name (`DEBUG`, `INFO`, `WARNING`, `ERROR`, `CRITICAL`) or number prints, on standard
//! error, where each library was found (`INFO`), every candidate rejected on the way (`DEBUG`) and
//! guard-rail rejections (`WARNING`). Unset, nothing is printed; a bad value leaves it off with a
//! warning in [`crate::warnings`].

use std::sync::OnceLock;

/// The variable that turns the log on.
pub const LOG_LEVEL_ENV_VAR: &str = "CUDA_PATHFINDER_LOG_LEVEL";

pub(crate) const DEBUG: u32 = 10;
pub(crate) const INFO: u32 = 20;
pub(crate) const WARNING: u32 = 30;

/// The level a value of [`LOG_LEVEL_ENV_VAR`] names: a number, or a name of Python's logging
/// levels (any case). `Ok(None)`: unset or empty.
pub fn parse_level(value: Option<&str>) -> Result<Option<u32>, String> {
    let raw = value.unwrap_or("").trim();
    if raw.is_empty() {
        return Ok(None);
    }
    if let Ok(n) = raw.parse::<u32>() {
        return Ok(Some(n));
    }
    match raw.to_ascii_uppercase().as_str() {
        "CRITICAL" => Ok(Some(50)),
        "ERROR" => Ok(Some(40)),
        "WARNING" => Ok(Some(30)),
        "INFO" => Ok(Some(20)),
        "DEBUG" => Ok(Some(10)),
        _ => Err(format!(
            "{LOG_LEVEL_ENV_VAR}={raw:?} is not a valid logging level; logging stays disabled"
        )),
    }
}

fn level() -> Option<u32> {
    static LEVEL: OnceLock<Option<u32>> = OnceLock::new();
    *LEVEL.get_or_init(|| match parse_level(std::env::var(LOG_LEVEL_ENV_VAR).ok().as_deref()) {
        Ok(level) => level,
        Err(warning) => {
            crate::warn(warning);
            None
        }
    })
}

fn name(level: u32) -> &'static str {
    match level {
        0..=10 => "DEBUG",
        11..=20 => "INFO",
        21..=30 => "WARNING",
        31..=40 => "ERROR",
        _ => "CRITICAL",
    }
}

/// Prints `message()` when the log is on at `at` or below.
pub(crate) fn event(at: u32, message: impl FnOnce() -> String) {
    if level().is_some_and(|l| l <= at) {
        eprintln!("cuda.pathfinder {}: {}", name(at), message());
    }
}

/// The outcome of a library search: where it was found, or that it was not, and (at `DEBUG`)
/// every candidate passed over.
pub(crate) fn search(library: &str, found: &Result<crate::LoadedDl, crate::NotFoundError>) {
    if level().is_none() {
        return;
    }
    let attempts = match found {
        Ok(dl) => &dl.searched,
        Err(e) => &e.attempts,
    };
    for a in attempts {
        event(DEBUG, || {
            format!("{library}: [{}] {}: {}", a.rule, a.candidate, a.rejected_because)
        });
    }
    match found {
        Ok(dl) => event(INFO, || {
            let path = dl
                .abs_path
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "?".into());
            format!("found {library:?} at {path} via {}", dl.found_via)
        }),
        Err(e) => event(INFO, || {
            format!("{library:?} not found ({} places searched)", e.attempts.len())
        }),
    }
}
