//! Program caches: compiled code by [`Program::cache_key`](crate::Program::cache_key), in memory or
//! on disk, so a repeated compile costs a lookup.

use crate::{CudaError, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// What a cache keeps of a compile: the code and the name-expression mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub code: Vec<u8>,
    pub symbol_mapping: HashMap<String, String>,
}

impl CacheEntry {
    fn size(&self) -> u64 {
        (self.code.len()
            + self
                .symbol_mapping
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()) as u64
    }
}

/// A store of compiled programs. Implementations must be safe to share between threads.
pub trait ProgramCache: Send + Sync {
    /// The entry under `key`, if there is a sound one.
    fn get(&self, key: &[u8; 32]) -> Result<Option<CacheEntry>>;
    /// Stores `entry` under `key`, replacing any previous one.
    fn put(&self, key: &[u8; 32], entry: &CacheEntry) -> Result<()>;
    /// Removes the entry under `key`; `true` if there was one.
    fn remove(&self, key: &[u8; 32]) -> Result<bool>;
    /// Removes every entry.
    fn clear(&self) -> Result<()>;
    /// How many entries there are.
    fn len(&self) -> Result<usize>;
    /// Whether there are none.
    fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }
}

/// A cache in memory, least recently used entries evicted beyond `max_size_bytes`.
#[derive(Debug, Default)]
pub struct InMemoryProgramCache {
    max_size_bytes: Option<u64>,
    state: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    entries: HashMap<[u8; 32], (CacheEntry, u64)>,
    clock: u64,
    size: u64,
}

impl InMemoryProgramCache {
    /// An empty cache holding at most `max_size_bytes` of code (unbounded for `None`).
    pub fn new(max_size_bytes: Option<u64>) -> InMemoryProgramCache {
        InMemoryProgramCache {
            max_size_bytes,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ProgramCache for InMemoryProgramCache {
    fn get(&self, key: &[u8; 32]) -> Result<Option<CacheEntry>> {
        let mut s = self.state();
        s.clock += 1;
        let clock = s.clock;
        Ok(s.entries.get_mut(key).map(|(entry, used)| {
            *used = clock;
            entry.clone()
        }))
    }

    fn put(&self, key: &[u8; 32], entry: &CacheEntry) -> Result<()> {
        let mut s = self.state();
        s.clock += 1;
        let clock = s.clock;
        if let Some((old, _)) = s.entries.insert(*key, (entry.clone(), clock)) {
            s.size -= old.size();
        }
        s.size += entry.size();
        if let Some(max) = self.max_size_bytes {
            while s.size > max && s.entries.len() > 1 {
                let Some(oldest) = s
                    .entries
                    .iter()
                    .filter(|(k, _)| *k != key)
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                if let Some((gone, _)) = s.entries.remove(&oldest) {
                    s.size -= gone.size();
                }
            }
        }
        Ok(())
    }

    fn remove(&self, key: &[u8; 32]) -> Result<bool> {
        let mut s = self.state();
        Ok(match s.entries.remove(key) {
            Some((gone, _)) => {
                s.size -= gone.size();
                true
            }
            None => false,
        })
    }

    fn clear(&self) -> Result<()> {
        let mut s = self.state();
        s.entries.clear();
        s.size = 0;
        Ok(())
    }

    fn len(&self) -> Result<usize> {
        Ok(self.state().entries.len())
    }
}

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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
mod tests {
    use super::*;

    fn entry(code: &[u8]) -> CacheEntry {
        CacheEntry {
            code: code.to_vec(),
            symbol_mapping: HashMap::from([("f<int>".into(), "_Z1fIiEvv".into())]),
        }
    }

    #[test]
    fn memory_cache_evicts_the_least_recently_used() {
        let c = InMemoryProgramCache::new(Some(150)); // two entries of 55 bytes fit, three do not
        c.put(&[1; 32], &entry(&[0; 40])).unwrap();
        c.put(&[2; 32], &entry(&[0; 40])).unwrap();
        assert!(c.get(&[1; 32]).unwrap().is_some()); // 1 is now the most recent
        c.put(&[3; 32], &entry(&[0; 40])).unwrap();
        assert!(c.get(&[2; 32]).unwrap().is_none(), "2 was least recently used");
        assert!(c.get(&[1; 32]).unwrap().is_some() && c.get(&[3; 32]).unwrap().is_some());
        assert!(c.remove(&[1; 32]).unwrap() && !c.remove(&[1; 32]).unwrap());
        c.clear().unwrap();
        assert!(c.is_empty().unwrap());
    }

    #[test]
    fn disk_entries_round_trip_and_damage_is_never_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let c = FileStreamProgramCache::new(Some(dir.path().to_path_buf()), None).unwrap();
        let e = entry(b"\x7fELF...");
        c.put(&[7; 32], &e).unwrap();
        assert_eq!(c.get(&[7; 32]).unwrap(), Some(e.clone()));
        let path = c.entry_path(&[7; 32]);
        assert!(path.starts_with(dir.path().join("entries").join("07")));
        // Flip a byte of the code: the checksum no longer matches.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(c.get(&[7; 32]).unwrap(), None);
        assert!(!path.exists(), "the damaged entry is removed");
        // Truncated, or not ours at all.
        c.put(&[8; 32], &e).unwrap();
        std::fs::write(c.entry_path(&[8; 32]), b"CUDARSPC").unwrap();
        assert_eq!(c.get(&[8; 32]).unwrap(), None);
        assert_eq!(c.len().unwrap(), 0);
    }

    #[test]
    fn disk_cache_stays_under_its_size_bound() {
        let dir = tempfile::tempdir().unwrap();
        let c = FileStreamProgramCache::new(Some(dir.path().to_path_buf()), Some(3 * 1100)).unwrap();
        for i in 0..6u8 {
            c.put(&[i; 32], &entry(&[i; 1000])).unwrap();
            // distinct modification times
            std::thread::sleep(Duration::from_millis(15));
        }
        let total: u64 = c.entries().unwrap().iter().map(|(_, m)| m.len()).sum();
        assert!(total <= 3 * 1100, "{total}");
        assert!(c.get(&[5; 32]).unwrap().is_some(), "the newest survives");
        assert!(c.get(&[0; 32]).unwrap().is_none(), "the oldest went first");
    }

    #[test]
    fn concurrent_writers_leave_whole_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let c = FileStreamProgramCache::new(Some(path), None).unwrap();
                    for round in 0..20u8 {
                        // Everyone writes the same key with their own content, and reads it back.
                        c.put(&[9; 32], &entry(&vec![t ^ round; 4096])).unwrap();
                        let got = c.get(&[9; 32]).unwrap().expect("an entry is always there once written");
                        assert!(got.code.iter().all(|b| *b == got.code[0]), "a torn entry");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = FileStreamProgramCache::new(Some(path.clone()), None).unwrap();
        assert_eq!(c.len().unwrap(), 1);
        assert_eq!(
            std::fs::read_dir(path.join("tmp")).unwrap().count(),
            0,
            "no temporary files left"
        );
    }

    fn two_hours_ago(path: &Path) {
        let f = std::fs::File::options().append(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn private_dir(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    fn refused(path: &Path, needle: &str) {
        let err = FileStreamProgramCache::new(Some(path.to_path_buf()), None).unwrap_err();
        assert!(matches!(err, CudaError::Cache(_)), "{err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
    }

    #[test]
    fn created_folders_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a").join("b").join("cache");
        let c = FileStreamProgramCache::new(Some(root.clone()), None).unwrap();
        for p in [root.clone(), root.join("entries"), root.join("tmp")] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        c.put(&[0xab; 32], &entry(b"x")).unwrap();
        assert_eq!(mode(&root.join("entries").join("ab")), 0o700);
        assert_eq!(mode(&c.entry_path(&[0xab; 32])), 0o600);
        // Opening it again is fine.
        FileStreamProgramCache::new(Some(root), None).unwrap();
    }

    #[test]
    fn unsafe_folders_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for m in [0o777, 0o770, 0o702] {
            let open = dir.path().join(format!("open{m:o}"));
            std::fs::create_dir(&open).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(m)).unwrap();
            refused(&open, "writable by its group or by others");
            assert!(!open.join("entries").exists(), "nothing is made in a refused folder");
        }
        let real = dir.path().join("real");
        private_dir(&real);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        refused(&link, "symbolic link");
        assert!(!real.join("entries").exists(), "nothing is made behind the link");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        refused(&dangling, "symbolic link");
        assert!(!dir.path().join("nowhere").exists());
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        refused(&file, "not a folder");
        // A private root whose entries folder is a link, or writable by others.
        let root = dir.path().join("root");
        private_dir(&root);
        let outside = dir.path().join("outside");
        private_dir(&outside);
        std::os::unix::fs::symlink(&outside, root.join("entries")).unwrap();
        refused(&root, "symbolic link");
        std::fs::remove_file(root.join("entries")).unwrap();
        std::fs::create_dir(root.join("entries")).unwrap();
        std::fs::set_permissions(root.join("entries"), std::fs::Permissions::from_mode(0o777)).unwrap();
        refused(&root, "writable by its group or by others");
    }

    #[test]
    fn a_linked_tmp_folder_is_refused_and_what_is_behind_it_survives() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        private_dir(&root);
        private_dir(&root.join("entries"));
        let outside = dir.path().join("outside");
        private_dir(&outside);
        let victims = [outside.join(tmp_name(&[1; 32], 1, 0, 1)), outside.join("precious.txt")];
        for v in &victims {
            std::fs::write(v, b"precious").unwrap();
            two_hours_ago(v);
        }
        std::os::unix::fs::symlink(&outside, root.join("tmp")).unwrap();
        refused(&root, "symbolic link");
        for v in &victims {
            assert_eq!(std::fs::read(v).unwrap(), b"precious", "{}", v.display());
        }
    }

    #[test]
    fn only_stale_temporary_files_of_the_cache_pattern_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        FileStreamProgramCache::new(Some(root.clone()), None).unwrap();
        let tmp = root.join("tmp");
        let stale = tmp.join(tmp_name(&[1; 32], 42, 0, 1_700_000_000_000_000_000));
        let fresh = tmp.join(tmp_name(&[2; 32], 42, 1, 1_700_000_000_000_000_001));
        let foreign = [
            tmp.join("notes.txt"),
            tmp.join(format!("{}-42-01-5", hex(&[3; 8]))),
            tmp.join(format!("{}-42-1-5", hex(&[0xab; 8]).to_uppercase())),
            tmp.join(format!("{}-42-1-5-6", hex(&[3; 8]))),
            tmp.join(format!("{}-+42-1-5", hex(&[3; 8]))),
            tmp.join(format!("{}-42-1-5.bak", hex(&[3; 8]))),
        ];
        for f in foreign.iter().chain([&stale, &fresh]) {
            std::fs::write(f, b"x").unwrap();
        }
        for f in foreign.iter().chain([&stale]) {
            two_hours_ago(f);
        }
        // A link of the pattern to a stale file outside the cache.
        let outside = dir.path().join("precious");
        std::fs::write(&outside, b"precious").unwrap();
        two_hours_ago(&outside);
        let link = tmp.join(tmp_name(&[4; 32], 42, 2, 3));
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        FileStreamProgramCache::new(Some(root), None).unwrap();
        assert!(!stale.exists(), "a stale temporary file of the cache is swept");
        assert!(fresh.exists(), "a fresh one is being written");
        for f in &foreign {
            assert!(f.exists(), "{} is not the cache's", f.display());
        }
        assert!(std::fs::symlink_metadata(&link).is_ok(), "links are left alone");
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    }

    #[test]
    fn temporary_names_match_their_pattern_exactly() {
        let key = [0x5a; 32];
        for (pid, counter, nanos) in [(0, 0, 0), (1, 2, 3), (u32::MAX, u64::MAX, u128::MAX)] {
            let name = tmp_name(&key, pid, counter, nanos);
            assert!(is_tmp_name(&name), "{name}");
            assert!(
                !is_tmp_name(&format!("{name}0x")) && !is_tmp_name(&format!("x{name}")),
                "{name}"
            );
        }
        for name in [
            "",
            "-1-2-3",
            "5a5a5a5a5a5a5a5a-1-2",
            "5a5a5a5a5a5a5a5a-1-2-",
            "5a5a5a5a5a5a5a5a-01-2-3",
        ] {
            assert!(!is_tmp_name(name), "{name:?}");
        }
        assert!(is_entry_name(&hex(&key), "5a") && !is_entry_name(&hex(&key), "5b"));
        assert!(!is_entry_name(&hex(&key).to_uppercase(), "5A") && !is_shard_name("5A"));
    }

    #[test]
    fn links_and_foreign_files_in_the_entries_survive_clear_evict_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let c = FileStreamProgramCache::new(Some(root.clone()), None).unwrap();
        let entries = root.join("entries");
        let outside = dir.path().join("outside");
        private_dir(&outside);
        // A linked shard holding a file of an entry's name.
        let behind_shard = outside.join(hex(&[0xab; 32]));
        std::os::unix::fs::symlink(&outside, entries.join("ab")).unwrap();
        // A linked entry file in a real shard.
        let behind_entry = outside.join("behind-entry");
        private_dir(&entries.join("cd"));
        let linked_entry = entries.join("cd").join(hex(&[0xcd; 32]));
        std::os::unix::fs::symlink(&behind_entry, &linked_entry).unwrap();
        // Files of other names, in a real shard and in a folder that is not a shard.
        private_dir(&entries.join("backup"));
        let foreign = [
            entries.join("cd").join("notes.txt"),
            entries.join("cd").join(hex(&[0xef; 32])),
            entries.join("cd").join(hex(&[0xcd; 32]).to_uppercase()),
            entries.join("cd").join(format!("{}.bak", hex(&[0xcd; 32]))),
            entries.join("backup").join(hex(&[0xba; 32])),
            entries.join("stray-file"),
        ];
        for f in foreign.iter().chain([&behind_shard, &behind_entry]) {
            std::fs::write(f, b"precious").unwrap();
            two_hours_ago(f);
        }
        let survived = || {
            for f in foreign.iter().chain([&behind_shard, &behind_entry]) {
                assert_eq!(std::fs::read(f).unwrap(), b"precious", "{}", f.display());
            }
        };
        assert_eq!(c.len().unwrap(), 0, "links and foreign files are not entries");
        for key in [[0xab; 32], [0xcd; 32]] {
            assert_eq!(c.get(&key).unwrap(), None);
            assert!(!c.remove(&key).unwrap());
        }
        assert!(
            std::fs::symlink_metadata(&linked_entry).is_ok(),
            "the link is left alone"
        );
        survived();
        c.put(&[0x01; 32], &entry(b"ours")).unwrap();
        assert_eq!(c.len().unwrap(), 1);
        c.clear().unwrap();
        assert_eq!(c.len().unwrap(), 0);
        survived();
        // Every bounded put evicts; a size of 1 evicts everything it may.
        let bounded = FileStreamProgramCache::new(Some(root.clone()), Some(1)).unwrap();
        bounded.put(&[0x02; 32], &entry(b"ours")).unwrap();
        assert_eq!(bounded.len().unwrap(), 0);
        survived();
        // A put never writes through a linked shard; through a linked entry it replaces the link.
        let err = c.put(&[0xab; 32], &entry(b"ours")).unwrap_err();
        assert!(err.to_string().contains("not a folder"), "{err}");
        c.put(&[0xcd; 32], &entry(b"ours")).unwrap();
        assert_eq!(c.get(&[0xcd; 32]).unwrap(), Some(entry(b"ours")));
        survived();
        c.clear().unwrap();
        survived();
        FileStreamProgramCache::new(Some(root), None).unwrap();
        survived();
    }
}
