//! The caches on their own: eviction, damaged and foreign files, folder permissions, races.

use super::*;
use crate::compile::cache::InMemoryProgramCache;

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
fn update_stores_every_entry_as_put_does() {
    let dir = tempfile::tempdir().unwrap();
    let caches: [Box<dyn ProgramCache>; 2] = [
        Box::new(InMemoryProgramCache::new(None)),
        Box::new(FileStreamProgramCache::new(Some(dir.path().to_path_buf()), None).unwrap()),
    ];
    for c in &caches {
        c.update(&[([1; 32], entry(b"one")), ([2; 32], entry(b"two"))]).unwrap();
        assert_eq!(c.len().unwrap(), 2);
        assert_eq!(c.get(&[2; 32]).unwrap().unwrap().code, b"two");
        c.update(&[([1; 32], entry(b"uno"))]).unwrap();
        assert_eq!(
            c.get(&[1; 32]).unwrap().unwrap().code,
            b"uno",
            "replaced, as put replaces"
        );
    }
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
