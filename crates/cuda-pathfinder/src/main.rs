//! `cargo run -p cuda-pathfinder [-- --json]`: what this machine has of CUDA, where each piece was
//! found and by which rule, which toolkit version it belongs to, and what does not fit together.

use cuda_pathfinder as pf;
use std::path::Path;

struct Row {
    kind: &'static str,
    name: String,
    path: Option<String>,
    found_via: Option<String>,
    version: Option<pf::ToolkitVersion>,
    error: Option<String>,
}

fn row(kind: &'static str, name: &str, result: Result<(&Path, pf::FoundVia), &pf::NotFoundError>) -> Row {
    match result {
        Ok((path, via)) => Row {
            kind,
            name: name.to_string(),
            path: Some(path.display().to_string()),
            found_via: Some(via.to_string()),
            version: pf::toolkit_version_of(path),
            error: None,
        },
        Err(e) => Row {
            kind,
            name: name.to_string(),
            path: None,
            found_via: None,
            version: None,
            error: Some(e.to_string()),
        },
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let verbose = args.iter().any(|a| a == "--verbose" || a == "-v");
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: cuda-pathfinder [--json] [--verbose]\n\nReports every CUDA library, header folder, tool and bitcode library cuda-pathfinder knows:\nfound or not, where, by which rule, and from which toolkit version. --verbose lists what was tried for what is missing.");
        return;
    }

    let mut rows = Vec::new();
    for name in pf::supported_libnames() {
        let r = pf::load_nvidia_dynamic_lib(name);
        let located = r
            .as_ref()
            .map(|l| (l.abs_path.as_deref().unwrap_or(Path::new("?")), l.found_via));
        rows.push(row("library", name, located));
    }
    for (name, marker) in pf::supported_headers() {
        let r = pf::locate_nvidia_header_directory(name);
        let mut row = row("headers", name, r.as_ref().map(|l| (l.abs_path.as_path(), l.found_via)));
        // The version of the header that marks the folder, not of whatever else shares it.
        if let Ok(l) = &r {
            row.version = pf::toolkit_version_of(&l.abs_path.join(marker));
        }
        rows.push(row);
    }
    for name in pf::SUPPORTED_BINARY_UTILITIES {
        let r = pf::find_nvidia_binary_utility(name);
        rows.push(row(
            "tool",
            name,
            r.as_ref().map(|l| (l.abs_path.as_path(), l.found_via)),
        ));
    }
    for (name, _) in pf::SUPPORTED_BITCODE_LIBS {
        let r = pf::find_bitcode_lib(name);
        rows.push(row(
            "bitcode",
            name,
            r.as_ref().map(|l| (l.abs_path.as_path(), l.found_via)),
        ));
    }
    for (name, _) in pf::SUPPORTED_STATIC_LIBS {
        let r = pf::find_static_lib(name);
        rows.push(row(
            "static",
            name,
            r.as_ref().map(|l| (l.abs_path.as_path(), l.found_via)),
        ));
    }

    let driver = pf::driver_cuda_version();
    let toolkit: Vec<(String, pf::ToolkitVersion)> = rows
        .iter()
        .filter(|r| r.kind == "library")
        .filter(|r| {
            pf::DESCRIPTORS
                .iter()
                .any(|d| d.name == r.name && d.packaged_with == pf::PackagedWith::Toolkit)
        })
        .filter_map(|r| Some((r.name.clone(), r.version.clone()?)))
        .collect();
    let mut warnings = pf::warnings();
    warnings.extend(pf::compatibility_warnings(&toolkit, driver));

    if json {
        print_json(&rows, driver, &warnings);
    } else {
        print_table(&rows, driver, &warnings, verbose);
    }
}

fn print_table(rows: &[Row], driver: Option<(u32, u32)>, warnings: &[String], verbose: bool) {
    let found = rows.iter().filter(|r| r.path.is_some()).count();
    match driver {
        Some((major, minor)) => println!("CUDA driver: supports CUDA {major}.{minor}"),
        None => println!("CUDA driver: not found (no libcuda.so.1)"),
    }
    println!("{found} of {} found\n", rows.len());
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4);
    println!(
        "{:<8} {:<width$} {:<5} {:<33} {:<8} PATH",
        "KIND", "NAME", "FOUND", "RULE", "VERSION"
    );
    for r in rows {
        let version = r
            .version
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<8} {:<width$} {:<5} {:<33} {:<8} {}",
            r.kind,
            r.name,
            if r.path.is_some() { "yes" } else { "no" },
            r.found_via.as_deref().unwrap_or("-"),
            version,
            r.path.as_deref().unwrap_or("-"),
        );
        if verbose {
            if let Some(e) = &r.error {
                for line in e.lines() {
                    println!("           {line}");
                }
            }
        }
    }
    if !warnings.is_empty() {
        println!("\nwarnings:");
        for w in warnings {
            println!("  - {w}");
        }
    }
    if !verbose && rows.iter().any(|r| r.error.is_some()) {
        println!("\n(--verbose lists every place searched for what was not found)");
    }
}

fn print_json(rows: &[Row], driver: Option<(u32, u32)>, warnings: &[String]) {
    let s = |v: Option<&str>| v.map(json_string).unwrap_or_else(|| "null".into());
    let mut out = String::from("{\n  \"driver_cuda_version\": ");
    out.push_str(&match driver {
        Some((major, minor)) => json_string(&format!("{major}.{minor}")),
        None => "null".into(),
    });
    out.push_str(",\n  \"items\": [\n");
    for (i, r) in rows.iter().enumerate() {
        out.push_str(&format!(
            "    {{\"kind\": {}, \"name\": {}, \"found\": {}, \"path\": {}, \"found_via\": {}, \"toolkit_version\": {}, \"version_source\": {}, \"error\": {}}}{}\n",
            json_string(r.kind),
            json_string(&r.name),
            r.path.is_some(),
            s(r.path.as_deref()),
            s(r.found_via.as_deref()),
            s(r.version.as_ref().map(ToString::to_string).as_deref()),
            s(r.version.as_ref().map(|v| v.source.as_str())),
            s(r.error.as_deref()),
            if i + 1 < rows.len() { "," } else { "" }
        ));
    }
    out.push_str("  ],\n  \"warnings\": [");
    out.push_str(&warnings.iter().map(|w| json_string(w)).collect::<Vec<_>>().join(", "));
    out.push_str("]\n}");
    println!("{out}");
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
