//! The crate's folders form layers (`docs/architecture.md`, "cuda-core: layout"): a folder may use
//! its own modules and the layers below it, never a layer above it or a sibling layer. This test
//! reads the source tree and checks every `crate::` path outside comments against that order, and
//! that no hand-written file grows past the size a reader can take in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Each top-level module and its layer: a module may use modules of lower layers only.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("trace", 0),
    ("reaper", 1),
    ("system", 1),
    ("checkpoint", 1),
    ("device", 2),
    ("stream", 3),
    ("compile", 3),
    ("memory", 4),
    ("launch", 5),
    ("interop", 5),
    ("nccl", 5),
    ("graph", 6),
];

/// Hand-written files longer than this are split (generated code is exempt).
const MAX_LINES: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the source folder is readable") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`None` for `lib.rs`).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// The source without comments (line comments, doc comments, block comments) and string
/// literals, so that only code is checked.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The first segment of every path under `crate::`: `crate::a::b` gives `a`, and
/// `crate::{a::b, C}` gives `a` and `C`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before_ok = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if !before_ok {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group.
            let mut depth = 0;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        found.push(ident_at(&group[k..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident_at(rest).to_string());
        }
    }
    found
}

/// What `lib.rs` re-exports at the root, by name: the module each item comes from.
fn root_exports() -> HashMap<String, String> {
    let lib = code_only(&std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs is readable"));
    let mut map = HashMap::new();
    for statement in lib.split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(used).to_string();
        match used.find('{') {
            Some(open) => {
                for name in used[open + 1..].trim_end_matches('}').split(',') {
                    let name = name.trim();
                    if !name.is_empty() {
                        map.insert(name.to_string(), module.clone());
                    }
                }
            }
            None => {
                let name = used.rsplit([':', ' ']).next().unwrap_or_default().to_string();
                map.insert(name, module);
            }
        }
    }
    map
}

#[test]
fn no_module_uses_a_layer_above_or_beside_it() {
    let layers: HashMap<&str, u32> = LAYERS.iter().copied().collect();
    let exports = root_exports();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let Some(&own) = layers.get(module.as_str()) else {
            problems.push(format!("{}: module {module} has no layer in LAYERS", file.display()));
            continue;
        };
        let code = code_only(&std::fs::read_to_string(file).expect("source is readable"));
        for name in crate_paths(&code) {
            let target = match exports.get(&name) {
                Some(m) => m.clone(),
                None => name.clone(),
            };
            if target == module || target == "cuda_core" {
                continue;
            }
            match layers.get(target.as_str()) {
                Some(&layer) if layer < own => {}
                Some(&layer) => problems.push(format!(
                    "{}: {module} (layer {own}) uses crate::{name} from {target} (layer {layer})",
                    file.strip_prefix(src()).unwrap_or(file).display()
                )),
                None => problems.push(format!(
                    "{}: crate::{name} is neither a module nor a root re-export this test knows",
                    file.strip_prefix(src()).unwrap_or(file).display()
                )),
            }
        }
    }
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
}

#[test]
fn the_layer_check_reads_paths_as_written() {
    let code = code_only("use crate::{a::{b, c}, D};\n// crate::hidden\nlet x = crate::e::f(\"crate::g\");");
    assert_eq!(crate_paths(&code), ["a", "D", "e"]);
}

#[test]
fn hand_written_files_stay_short() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source is readable");
        if text.starts_with("// generated by") {
            continue;
        }
        let lines = text.lines().count();
        if lines > MAX_LINES {
            long.push(format!("{} ({lines} lines)", file.display()));
        }
    }
    assert!(long.is_empty(), "split these files by concern: {long:?}");
}
