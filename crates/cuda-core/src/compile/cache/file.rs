//! [`FileStreamProgramCache`]: entries in files under a private folder, written atomically and
//! checked when read back.

use super::{CacheEntry, ProgramCache};
use crate::compile::ffi::hex;
use crate::{CudaError, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A cache on disk, shared safely by several processes of one user: entries are written to a
/// temporary file and renamed into place, each carries a checksum (a damaged entry is removed and
/// recompiled, never used), and the least recently used entries are evicted beyond
/// `max_size_bytes`.
///
/// The default folder is `$XDG_CACHE_HOME/cuda-rs/program-cache` (else
/// `~/.cache/cuda-rs/program-cache`); entries live at `entries/<2 hex>/<64 hex>`, temporary files
/// at `tmp/<name>` (see [`new`](Self::new) for the exact names).
///
/// # What protects the cache
///
/// The checksum detects damage (a torn write, a bad disk), **not tampering**: anyone who can write
/// the folder can also write a valid checksum, and a keyed MAC would not help either, since its
/// key would have to live where that person can read it. What protects the cache is the folder's
/// ownership and permissions: the cache creates its folders with mode `0700` and refuses a folder
/// (the root, `entries` or `tmp`) that is a symbolic link, is not a folder, is not owned by the
/// current user, or is writable by its group or by others, since whoever can write there could
/// plant entries (device code that `compile_cached` would return without compiling). The folders
/// above the root are trusted: do not put the cache under a folder that others can rename or
/// replace entries of.
///
/// The cache never follows a symbolic link inside its folder, and deletes (when clearing,
/// evicting, sweeping or removing) only names it makes itself: shard folders of 2 lowercase hex
/// digits, entry files of 64 lowercase hex digits in the shard of their first two, and temporary
/// files of the pattern above. Anything else in the folder is left alone.
#[derive(Debug)]
pub struct FileStreamProgramCache {
    root: PathBuf,
    max_size_bytes: Option<u64>,
}

const MAGIC: &[u8; 8] = b"CUDARSPC";
const FORMAT: u32 = 1;
/// Temporary files older than this are from writers that died.
const STALE_TMP: Duration = Duration::from_secs(3600);

fn io(what: &str, path: &Path, e: std::io::Error) -> CudaError {
    CudaError::Cache(format!("{what} {}: {e}", path.display()))
}

/// Whether `name` is exactly `len` lowercase hex digits.
fn is_lower_hex(name: &str, len: usize) -> bool {
    name.len() == len && name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a shard folder the cache makes: 2 lowercase hex digits.
fn is_shard_name(name: &str) -> bool {
    is_lower_hex(name, 2)
}

/// Whether `name` is an entry file the cache makes in `shard`: 64 lowercase hex digits (the key),
/// the first two of which are the shard's.
fn is_entry_name(name: &str, shard: &str) -> bool {
    is_lower_hex(name, 64) && name.starts_with(shard)
}

/// The name of a temporary file: `<k>-<p>-<c>-<t>`, where `<k>` is the key's first 8 bytes in 16
/// lowercase hex digits, `<p>` the process id, `<c>` a per-process counter and `<t>` the time in
/// nanoseconds since the Unix epoch, all three in decimal without leading zeros. Only names of
/// exactly this pattern are swept ([`is_tmp_name`]).
fn tmp_name(key: &[u8; 32], pid: u32, counter: u64, nanos: u128) -> String {
    format!("{}-{pid}-{counter}-{nanos}", hex(&key[..8]))
}

/// Whether `name` is exactly of the pattern [`tmp_name`] makes.
fn is_tmp_name(name: &str) -> bool {
    // A decimal number of at most `max` digits, without sign or leading zeros.
    let decimal = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let mut parts = name.split('-');
    match (parts.next(), parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(key), Some(pid), Some(counter), Some(nanos), None) => {
            is_lower_hex(key, 16) && decimal(pid, 10) && decimal(counter, 20) && decimal(nanos, 39)
        }
        _ => false,
    }
}

/// The current user's id.
fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks, without following links, that `path` is a folder the cache can trust: a real folder
/// (not a symbolic link), owned by the current user, not writable by its group or by others.
fn check_private_dir(path: &Path, what: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| io(&format!("cannot inspect the {what}"), path, e))?;
    if meta.file_type().is_symlink() {
        return Err(CudaError::Cache(format!(
            "the {what} {shown} is a symbolic link; the cache does not follow links (whoever controls \
             the link would choose what it reads and deletes): give the real folder's path"
        )));
    }
    if !meta.is_dir() {
        return Err(CudaError::Cache(format!(
            "the {what} {shown} exists but is not a folder: remove it or choose another cache path"
        )));
    }
    let uid = current_uid();
    if meta.uid() != uid {
        return Err(CudaError::Cache(format!(
            "the {what} {shown} is owned by user {}, not by you (user {uid}): its owner could plant \
             entries or make the cache delete files; use a folder of your own",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(CudaError::Cache(format!(
            "the {what} {shown} is writable by its group or by others (mode {mode:o}): they could plant \
             entries or make the cache delete files; run `chmod 700` on it or use a folder of your own"
        )));
    }
    Ok(())
}

/// Creates the folder `path` with mode 0700 if it is missing (its parent must exist).
fn create_dir_0700(path: &Path, what: &str) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        // Another process may have made it first; the caller checks what is there.
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(io(&format!("cannot create the {what}"), path, e))
        }
        _ => Ok(()),
    }
}

/// Creates the folder `path` with mode 0700 if it is missing, then checks it
/// ([`check_private_dir`]).
fn create_private_dir(path: &Path, what: &str) -> Result<()> {
    create_dir_0700(path, what)?;
    check_private_dir(path, what)
}

impl FileStreamProgramCache {
    /// A cache in `path` (the default folder for `None`), created if needed: missing parent
    /// folders with the default permissions, the cache's own folders (`path`, `entries`, `tmp`)
    /// with mode 0700. Errors if one of the cache's folders is a symbolic link, not a folder, not
    /// owned by the current user, or writable by its group or others (see the type's
    /// documentation).
    ///
    /// Temporary files are named `<k>-<p>-<c>-<t>`: `<k>` the key's first 8 bytes in 16 lowercase
    /// hex digits, `<p>` the writer's process id, `<c>` a per-process counter, `<t>` nanoseconds
    /// since the Unix epoch, the last three in decimal without leading zeros. Files of exactly this
    /// pattern left in `tmp` for over an hour (by writers that died) are deleted here.
    pub fn new(path: Option<PathBuf>, max_size_bytes: Option<u64>) -> Result<FileStreamProgramCache> {
        let root = match path {
            Some(p) => p,
            None => {
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .ok_or_else(|| CudaError::Cache("neither XDG_CACHE_HOME nor HOME is set: give a path".into()))?;
                base.join("cuda-rs").join("program-cache")
            }
        };
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
        }
        create_private_dir(&root, "cache folder")?;
        create_private_dir(&root.join("entries"), "cache's entries folder")?;
        create_private_dir(&root.join("tmp"), "cache's tmp folder")?;
        let cache = FileStreamProgramCache { root, max_size_bytes };
        cache.sweep_stale_tmp();
        Ok(cache)
    }

    /// The folder of the cache.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn shard_path(&self, key: &[u8; 32]) -> PathBuf {
        self.root.join("entries").join(hex(&key[..1]))
    }

    fn entry_path(&self, key: &[u8; 32]) -> PathBuf {
        self.shard_path(key).join(hex(key))
    }

    /// The entry path of `key` if its shard is a real folder (not a link); `None` if the shard is
    /// missing or anything else.
    fn existing_entry_path(&self, key: &[u8; 32]) -> Result<Option<PathBuf>> {
        let shard = self.shard_path(key);
        match std::fs::symlink_metadata(&shard) {
            Ok(meta) if meta.is_dir() => Ok(Some(shard.join(hex(key)))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot inspect", &shard, e)),
        }
    }

    /// The entry file of `key`, if it is a regular file in a real shard folder: a link (or
    /// anything else) is not an entry of ours, and is left alone.
    fn existing_entry_file(&self, key: &[u8; 32]) -> Result<Option<PathBuf>> {
        let Some(path) = self.existing_entry_path(key)? else {
            return Ok(None);
        };
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(Some(path)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot inspect", &path, e)),
        }
    }

    /// Every entry file, with its metadata: regular files of entry names in shard folders, none of
    /// them reached through a symbolic link.
    fn entries(&self) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
        let dir = self.root.join("entries");
        check_private_dir(&dir, "cache's entries folder")?;
        let mut out = Vec::new();
        for shard in std::fs::read_dir(&dir)
            .map_err(|e| io("cannot list", &dir, e))?
            .flatten()
        {
            // DirEntry::file_type does not follow links: a linked shard is not a folder here.
            let is_dir = shard.file_type().is_ok_and(|t| t.is_dir());
            let shard_name = shard.file_name();
            let Some(shard_name) = shard_name.to_str().filter(|n| is_dir && is_shard_name(n)) else {
                continue;
            };
            for entry in std::fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_file()) {
                    continue;
                }
                if !entry.file_name().to_str().is_some_and(|n| is_entry_name(n, shard_name)) {
                    continue;
                }
                // On Unix, DirEntry::metadata does not follow links either.
                if let Ok(meta) = entry.metadata() {
                    if meta.is_file() {
                        out.push((entry.path(), meta));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Deletes the temporary files (of exactly the pattern `put` makes, regular files, not links)
    /// older than [`STALE_TMP`].
    fn sweep_stale_tmp(&self) {
        let dir = self.root.join("tmp");
        if check_private_dir(&dir, "cache's tmp folder").is_err() {
            return;
        }
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if !entry.file_name().to_str().is_some_and(is_tmp_name) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TMP);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn evict(&self) {
        let Some(max) = self.max_size_bytes else { return };
        let Ok(mut entries) = self.entries() else { return };
        let mut total: u64 = entries.iter().map(|(_, m)| m.len()).sum();
        if total <= max {
            return;
        }
        // Least recently used first (reads touch the modification time).
        entries.sort_by_key(|(_, m)| m.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        for (path, meta) in entries {
            if total <= max {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= meta.len();
            }
        }
    }
}

fn encode(entry: &CacheEntry) -> Vec<u8> {
    let mut body = Vec::with_capacity(entry.code.len() + 64);
    let mut pairs: Vec<_> = entry.symbol_mapping.iter().collect();
    pairs.sort();
    body.extend((pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        for s in [k, v] {
            body.extend((s.len() as u32).to_le_bytes());
            body.extend(s.as_bytes());
        }
    }
    body.extend(&entry.code);
    let mut out = Vec::with_capacity(body.len() + 44);
    out.extend(MAGIC);
    out.extend(FORMAT.to_le_bytes());
    out.extend(Sha256::digest(&body));
    out.extend(body);
    out
}

fn decode(bytes: &[u8]) -> Option<CacheEntry> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (format, rest) = rest.split_at_checked(4)?;
    if format != FORMAT.to_le_bytes() {
        return None;
    }
    let (sum, body) = rest.split_at_checked(32)?;
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let take_u32 = |b: &mut &[u8]| -> Option<usize> {
        let (n, rest) = b.split_at_checked(4)?;
        *b = rest;
        Some(u32::from_le_bytes(n.try_into().ok()?) as usize)
    };
    let mut b = body;
    let n = take_u32(&mut b)?;
    let mut symbol_mapping = HashMap::new();
    for _ in 0..n {
        let mut pair = Vec::with_capacity(2);
        for _ in 0..2 {
            let len = take_u32(&mut b)?;
            let (s, rest) = b.split_at_checked(len)?;
            pair.push(String::from_utf8(s.to_vec()).ok()?);
            b = rest;
        }
        let v = pair.pop()?;
        symbol_mapping.insert(pair.pop()?, v);
    }
    Some(CacheEntry {
        code: b.to_vec(),
        symbol_mapping,
    })
}

impl ProgramCache for FileStreamProgramCache {
    fn get(&self, key: &[u8; 32]) -> Result<Option<CacheEntry>> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // A link or anything else is not an entry of ours: a miss, left alone.
        let Some(path) = self.existing_entry_file(key)? else {
            return Ok(None);
        };
        // O_NOFOLLOW: should the file have become a link since, the open fails instead of
        // following it; O_NONBLOCK: nor does it wait on a FIFO.
        let opened = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(io("cannot read", &path, e)),
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| io("cannot read", &path, e))?;
        match decode(&bytes) {
            Some(entry) => {
                // Mark it used for eviction (allowed on a read-only handle: the file is ours);
                // losing this race to another process is harmless.
                let _ = file.set_modified(SystemTime::now());
                Ok(Some(entry))
            }
            None => {
                // Damaged (a torn disk, an edit): never trusted, removed so it is recompiled. The
                // path is a regular file of our own name in a real shard folder (checked above).
                let _ = std::fs::remove_file(&path);
                Ok(None)
            }
        }
    }

    fn put(&self, key: &[u8; 32], entry: &CacheEntry) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp_dir = self.root.join("tmp");
        check_private_dir(&tmp_dir, "cache's tmp folder")?;
        // The shard lies in the private `entries` folder, so only its kind matters: a real folder,
        // never a link (a rename through a linked shard would write outside the cache).
        let shard = self.shard_path(key);
        create_dir_0700(&shard, "cache's shard folder")?;
        if !std::fs::symlink_metadata(&shard).is_ok_and(|m| m.is_dir()) {
            return Err(CudaError::Cache(format!(
                "the cache's shard folder {} is not a folder (a symbolic link, or a file), which the cache \
                 never writes through: remove it",
                shard.display()
            )));
        }
        let path = self.entry_path(key);
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = tmp_name(
            key,
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        let tmp = tmp_dir.join(name);
        let write = || -> std::io::Result<()> {
            // create_new: a fresh file (O_EXCL never follows a link), readable by its owner only.
            let mut f = std::fs::File::options()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&encode(entry))?;
            f.sync_all()
        };
        if let Err(e) = write() {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = std::fs::remove_file(&tmp);
            }
            return Err(io("cannot write", &tmp, e));
        }
        // rename is atomic within a filesystem: readers see the old entry or the new one, whole.
        // It replaces whatever has the entry's name (a link included, not what the link points to).
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("cannot move into place", &path, e)
        })?;
        self.evict();
        Ok(())
    }

    fn remove(&self, key: &[u8; 32]) -> Result<bool> {
        // Only a regular file is an entry; a link (or anything else) is left alone.
        let Some(path) = self.existing_entry_file(key)? else {
            return Ok(false);
        };
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("cannot remove", &path, e)),
        }
    }

    fn clear(&self) -> Result<()> {
        for (path, _) in self.entries()? {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                // Another process removed it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("cannot remove", &path, e)),
            }
        }
        Ok(())
    }

    fn len(&self) -> Result<usize> {
        Ok(self.entries()?.len())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
