//! Program caches: compiled code by [`Program::cache_key`](crate::Program::cache_key), in memory or
//! on disk, so a repeated compile costs a lookup.

use crate::Result;
use std::collections::HashMap;
use std::sync::Mutex;

/// What a cache keeps of a compile: the code and the name-expression mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The compiled code's bytes (cubin, PTX, LTO-IR, ...: the compile's target).
    pub code: Vec<u8>,
    /// Each name expression given to the compile and its lowered (mangled) name, as
    /// [`ObjectCode::symbol_mapping`](crate::ObjectCode::symbol_mapping) holds them.
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
    /// Stores every `(key, entry)` pair as [`put`](Self::put) does, in order, stopping at the
    /// first error (`cuda.core`'s `ProgramCacheResource.update`).
    fn update(&self, entries: &[([u8; 32], CacheEntry)]) -> Result<()> {
        entries.iter().try_for_each(|(key, entry)| self.put(key, entry))
    }
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

mod file;

pub use file::FileStreamProgramCache;
