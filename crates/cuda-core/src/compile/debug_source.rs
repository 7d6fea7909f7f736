//! The source of a C++ program compiled with debug information, written to disk so that
//! cuda-gdb can show it, as `cuda.core` does.
//!
//! NVRTC records the program name it is given as the source file's path in the debug line
//! table. A program compiled from a string has no file at that path, so a debugger finds the
//! lines but cannot show them. So, when [`ProgramOptions::debug`](super::ProgramOptions) is set:
//!
//! - without a program name, the source is written to `<digest>.cu` (the first 32 hex digits of
//!   its SHA-256) in a directory of this process, `cuda-core-jit-*` under the temporary
//!   directory (owner-only), and NVRTC is given that absolute path as the name. The directory is
//!   removed when the process exits normally. Identical source reuses one file.
//! - with a name, the path it names (relative to the working directory) is written if nothing
//!   is there; something that is there is left alone, with a warning when its lines differ from
//!   the source (a debugger would show that file's lines).
//!
//! Writing is best effort: a read-only or full disk leaves the compile as it would have been.
//! `CUDA_CORE_JIT_SOURCE_CACHE=0` (or `false`, `off`, `no`) turns it off.

use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The environment variable that turns the writing off (`cuda.core`'s).
pub(crate) const DISABLE_ENV_VAR: &str = "CUDA_CORE_JIT_SOURCE_CACHE";

/// The process's directory, made on first use.
static SOURCE_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

fn enabled() -> bool {
    match std::env::var(DISABLE_ENV_VAR) {
        Ok(v) => !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no"),
        Err(_) => true,
    }
}

extern "C" fn remove_source_dir() {
    // Never waits: a thread that holds the lock while the process exits keeps the directory.
    let dir = match SOURCE_DIR.try_lock() {
        Ok(mut slot) => slot.take(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().take(),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The process's directory (owner-only, made now if it is not there: a cleaner of the
/// temporary directory may have removed it).
fn source_dir() -> std::io::Result<PathBuf> {
    let mut slot = SOURCE_DIR.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = slot.as_ref() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        return Ok(dir.clone());
    }
    let base = std::env::temp_dir();
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for attempt in 0..16u32 {
        let dir = base.join(format!("cuda-core-jit-{pid}-{nanos:08x}{attempt:x}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // SAFETY: registers a plain function that takes the slot's path and removes
                // the directory; it touches nothing that exit tears down before it runs.
                unsafe { libc::atexit(remove_source_dir) };
                *slot = Some(dir.clone());
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "no free name for the JIT source directory",
    ))
}

/// Writes `data` to `target` without ever showing a partial file: written owner-only beside it,
/// then renamed over it.
fn write_atomically(target: &Path, data: &[u8]) -> std::io::Result<()> {
    let parent = target.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file_name = target
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = parent.join(format!(".{file_name}.{}.{n}.part", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staged)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&staged, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    result
}

/// Writes `source` to the process's directory and returns its absolute path, or `None` when
/// writing is off or fails.
pub(crate) fn materialize(source: &[u8]) -> Option<PathBuf> {
    if !enabled() {
        return None;
    }
    let digest = Sha256::digest(source);
    let name = crate::compile::ffi::hex(&digest[..16]);
    let dir = source_dir().ok()?;
    let target = dir.join(format!("{name}.cu"));
    if !target.is_file() {
        write_atomically(&target, source).ok()?;
    }
    Some(target)
}

/// For a program the caller named `name`: writes the source there (relative to the working
/// directory) if nothing is there, and returns that absolute path. Something already there is
/// left alone, with a warning when its lines differ from `source`.
pub(crate) fn reconcile_named(name: &str, source: &[u8]) -> Option<PathBuf> {
    if !enabled() {
        return None;
    }
    let target = std::path::absolute(name).ok()?;
    match std::fs::read(&target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_atomically(&target, source).ok()?;
        }
        Err(_) => return None,
        Ok(on_disk) => {
            if !on_disk
                .split(|b| *b == b'\n')
                .map(trim_cr)
                .eq(source.split(|b| *b == b'\n').map(trim_cr))
            {
                // cuda.core's UserWarning.
                crate::error::warn(crate::Warning::new(
                    crate::WarningCategory::User,
                    format!(
                        "ProgramOptions.name={name:?} resolves to {}, which already exists with different contents \
                         than the compiled source; NVRTC records that path in the debug information, so a debugger \
                         will show that file's lines for this program. It was left untouched; leave name unset to let \
                         cuda-core write the source elsewhere",
                        target.display()
                    ),
                ));
            }
        }
    }
    Some(target)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_written_once_under_its_digest_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let source = b"extern \"C\" __global__ void debug_source_test() {}\n";
        let path = materialize(source).expect("the temporary directory is writable");
        assert!(path.is_absolute());
        assert_eq!(std::fs::read(&path).unwrap(), source);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name.len(), 32 + 3, "{name}");
        assert!(name.ends_with(".cu"));
        let dir = path.parent().unwrap();
        assert!(dir.file_name().unwrap().to_string_lossy().starts_with("cuda-core-jit-"));
        assert_eq!(std::fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // The same source: the same file, not a second copy.
        assert_eq!(materialize(source).unwrap(), path);
        let other = materialize(b"// another\n").unwrap();
        assert_ne!(other, path);
        assert_eq!(other.parent(), path.parent());
    }

    #[test]
    fn a_named_source_is_written_where_it_names_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("kernel_named.cu");
        let name = target.to_str().unwrap();
        assert_eq!(reconcile_named(name, b"a\nb\n").unwrap(), target);
        assert_eq!(std::fs::read(&target).unwrap(), b"a\nb\n");
        // Different contents: left alone (a warning is emitted).
        assert_eq!(reconcile_named(name, b"c\n").unwrap(), target);
        assert_eq!(std::fs::read(&target).unwrap(), b"a\nb\n");
    }
}
