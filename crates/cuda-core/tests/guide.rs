//! The guide (`docs/guide/`) stays true to the code: every chapter is compiled as doc tests
//! (included in `lib.rs`), is listed in the guide's index, and every `no_run` block (code that
//! needs a GPU) appears line for line in the example its chapter names, which the GPU bundle
//! runs. Hidden lines (`# ...`) are the doc test's scaffolding and are not compared.

use std::path::{Path, PathBuf};

fn guide() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide")
}

/// The numbered chapters (`NN-topic.md`), sorted.
fn chapters() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(guide())
        .expect("docs/guide is readable")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .map(|n| {
            let text = std::fs::read_to_string(guide().join(&n)).expect("a chapter is readable");
            (n, text)
        })
        .collect();
    found.sort();
    found
}

/// The fenced blocks of `text` whose info string starts with `rust`: (info, lines).
fn rust_blocks(text: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match (&mut current, trimmed.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_string(), Vec::new())),
            (Some(_), Some(_)) => {
                let (info, lines) = current.take().expect("inside a block");
                if info.starts_with("rust") {
                    blocks.push((info, lines));
                }
            }
            (Some((_, lines)), None) => lines.push(line.to_string()),
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "a code block is not closed");
    blocks
}

/// The lines a reader sees, trimmed, without blank ones.
fn visible(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && *l != "#" && !l.starts_with("# "))
        .map(str::to_string)
        .collect()
}

fn example_of(chapter: &str) -> Option<String> {
    let start = chapter.find("<!-- example: ")? + "<!-- example: ".len();
    let end = chapter[start..].find(" -->")?;
    Some(chapter[start..start + end].to_string())
}

#[test]
fn every_chapter_is_compiled_and_indexed() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let index = std::fs::read_to_string(guide().join("README.md")).expect("docs/guide/README.md");
    let chapters = chapters();
    assert!(chapters.len() >= 9, "{} chapters", chapters.len());
    for (name, _) in &chapters {
        assert!(
            lib.contains(&format!("include_str!(\"../../../docs/guide/{name}\")")),
            "{name} is not included in lib.rs as a doc test"
        );
        assert!(
            index.contains(&format!("]({name})")),
            "{name} is not linked from the index"
        );
    }
}

#[test]
fn gpu_blocks_are_in_the_examples_the_bundle_runs() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for (name, text) in chapters() {
        let blocks: Vec<_> = rust_blocks(&text)
            .into_iter()
            .filter(|(info, _)| info.split(',').any(|a| a == "no_run"))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let example = example_of(&text).unwrap_or_else(|| panic!("{name} has no_run blocks but names no example"));
        let path = examples.join(format!("{example}.rs"));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()));
        let program = visible(&source.lines().map(str::to_string).collect::<Vec<_>>());
        for (i, (_, lines)) in blocks.iter().enumerate() {
            let shown = visible(lines);
            assert!(!shown.is_empty(), "{name}: block {i} shows nothing");
            let found = program.windows(shown.len()).any(|w| w == shown.as_slice());
            assert!(
                found,
                "{name}: no_run block {i} (starting `{}`) is not in examples/{example}.rs line for line",
                shown[0]
            );
        }
    }
}
