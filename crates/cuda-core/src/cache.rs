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

/// A cache on disk, shared safely by several processes: entries are written to a temporary file
/// and renamed into place, each carries a checksum (a damaged entry is removed and recompiled,
/// never used), and the least recently used entries are evicted beyond `max_size_bytes`.
///
/// The default folder is `$XDG_CACHE_HOME/cuda-rs/program-cache` (else
/// `~/.cache/cuda-rs/program-cache`); entries live at `entries/<2 hex>/<64 hex>`.
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

impl FileStreamProgramCache {
    /// A cache in `path` (the default folder for `None`), created if needed.
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
        for dir in [root.join("entries"), root.join("tmp")] {
            std::fs::create_dir_all(&dir).map_err(|e| io("cannot create", &dir, e))?;
        }
        let cache = FileStreamProgramCache { root, max_size_bytes };
        cache.sweep_stale_tmp();
        Ok(cache)
    }

    /// The folder of the cache.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn entry_path(&self, key: &[u8; 32]) -> PathBuf {
        let h = hex(key);
        self.root.join("entries").join(&h[..2]).join(h)
    }

    fn entries(&self) -> Vec<(PathBuf, std::fs::Metadata)> {
        let mut out = Vec::new();
        for shard in std::fs::read_dir(self.root.join("entries"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for entry in std::fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                if let Ok(meta) = entry.metadata() {
                    if meta.is_file() {
                        out.push((entry.path(), meta));
                    }
                }
            }
        }
        out
    }

    fn sweep_stale_tmp(&self) {
        let now = SystemTime::now();
        for entry in std::fs::read_dir(self.root.join("tmp")).into_iter().flatten().flatten() {
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
        let mut entries = self.entries();
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
        let path = self.entry_path(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("cannot read", &path, e)),
        };
        match decode(&bytes) {
            Some(entry) => {
                // Mark it used for eviction; losing this race to another process is harmless.
                if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Ok(Some(entry))
            }
            None => {
                // Damaged (a torn disk, an edit): never trusted, removed so it is recompiled.
                let _ = std::fs::remove_file(&path);
                Ok(None)
            }
        }
    }

    fn put(&self, key: &[u8; 32], entry: &CacheEntry) -> Result<()> {
        use std::io::Write;
        let path = self.entry_path(key);
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create", dir, e))?;
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let unique = format!(
            "{}-{}-{}-{}",
            hex(&key[..8]),
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let tmp = self.root.join("tmp").join(unique);
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode(entry))?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("cannot write", &tmp, e));
        }
        // rename is atomic within a filesystem: readers see the old entry or the new one, whole.
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("cannot move into place", &path, e)
        })?;
        self.evict();
        Ok(())
    }

    fn remove(&self, key: &[u8; 32]) -> Result<bool> {
        let path = self.entry_path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("cannot remove", &path, e)),
        }
    }

    fn clear(&self) -> Result<()> {
        for (path, _) in self.entries() {
            std::fs::remove_file(&path).map_err(|e| io("cannot remove", &path, e))?;
        }
        Ok(())
    }

    fn len(&self) -> Result<usize> {
        Ok(self.entries().len())
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
        let total: u64 = c.entries().iter().map(|(_, m)| m.len()).sum();
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
}
