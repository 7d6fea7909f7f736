//! `cargo run -p cuda-pathfinder [-- --json] [-- --verbose]`: what this machine has of CUDA,
//! where each piece was found and by which rule, the order the rules were tried in and why each
//! candidate was passed over, which toolkit version each piece belongs to, and what the
//! compatibility guard rails say about the set.

use cuda_pathfinder as pf;

struct Row {
    kind: &'static str,
    name: String,
    path: Option<String>,
    found_via: Option<String>,
    version: Option<pf::ToolkitVersion>,
    searched: Vec<pf::Attempt>,
    error: Option<String>,
    item: Option<pf::ResolvedItem>,
}

fn located(kind: &'static str, name: &str, r: Result<pf::LocatedFile, pf::NotFoundError>) -> Row {
    match r {
        Ok(l) => {
            // The guard rails name kinds as NotFoundError does.
            let full = match kind {
                "headers" => "header directory",
                "bitcode" => "bitcode library",
                "static" => "static library",
                other => other,
            };
            let item = pf::ResolvedItem::located(full, &l).ok();
            Row {
                kind,
                name: name.to_string(),
                path: Some(l.abs_path.display().to_string()),
                found_via: Some(l.found_via.to_string()),
                version: item.as_ref().and_then(|i| i.ctk_version.clone()),
                searched: l.searched,
                error: None,
                item,
            }
        }
        Err(e) => failed(kind, name, &e),
    }
}

fn failed(kind: &'static str, name: &str, e: &pf::NotFoundError) -> Row {
    Row {
        kind,
        name: name.to_string(),
        path: None,
        found_via: None,
        version: None,
        searched: e.attempts.clone(),
        error: Some(e.to_string()),
        item: None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let verbose = args.iter().any(|a| a == "--verbose" || a == "-v");
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: cuda-pathfinder [--json] [--verbose]\n\nReports every CUDA library, header folder, tool, bitcode and \
             static library cuda-pathfinder knows: found or not, where, by which rule, the rules tried before, and \
             from which toolkit version; then what the compatibility guard rails say. --verbose lists every \
             candidate tried and why it was passed over.\n\n{}=DEBUG logs the searches of any program on standard \
             error; {}=off|best_effort|strict sets the guard rails.",
            pf::LOG_LEVEL_ENV_VAR,
            pf::GUARD_RAILS_ENV_VAR
        );
        return;
    }

    let mut rows = Vec::new();
    for name in pf::supported_libnames() {
        rows.push(match pf::unguarded::load_nvidia_dynamic_lib(name) {
            Ok(l) => {
                let item = pf::ResolvedItem::dynamic_lib(name, l).ok();
                Row {
                    kind: "library",
                    name: name.to_string(),
                    path: Some(
                        l.abs_path
                            .as_deref()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "?".into()),
                    ),
                    found_via: Some(l.found_via.to_string()),
                    version: l.abs_path.as_deref().and_then(pf::toolkit_version_of),
                    searched: l.searched.clone(),
                    error: None,
                    item,
                }
            }
            Err(e) => match e.as_not_found() {
                Some(nf) => failed("library", name, nf),
                None => Row {
                    error: Some(e.to_string()),
                    ..failed("library", name, &dummy(name))
                },
            },
        });
    }
    for (name, _) in pf::supported_headers() {
        rows.push(located(
            "headers",
            name,
            pf::unguarded::locate_nvidia_header_directory(name),
        ));
    }
    for name in pf::SUPPORTED_BINARY_UTILITIES {
        rows.push(located("tool", name, pf::unguarded::find_nvidia_binary_utility(name)));
    }
    for (name, _) in pf::SUPPORTED_BITCODE_LIBS {
        rows.push(located("bitcode", name, pf::unguarded::find_bitcode_lib(name)));
    }
    for (name, _) in pf::SUPPORTED_STATIC_LIBS {
        rows.push(located("static", name, pf::unguarded::find_static_lib(name)));
    }
    let driver = pf::query_driver_cuda_version().ok();
    let release = pf::query_driver_release_version().ok();
    let mut warnings = pf::warnings();
    let (rejected, undecided) = compatibility(&rows);
    warnings.extend(rejected);

    if json {
        print_json(&rows, driver, &warnings);
    } else {
        print_table(&rows, driver, release, &warnings, undecided, verbose);
    }
}

fn dummy(name: &str) -> pf::NotFoundError {
    pf::NotFoundError {
        kind: "library",
        name: name.to_string(),
        cause: pf::NotFoundCause::NotAvailable,
        attempts: Vec::new(),
        hint: String::new(),
    }
}

/// Every found item through fresh guard rails, in table order: the rejections, and how many items
/// they could not judge.
fn compatibility(rows: &[Row]) -> (Vec<String>, usize) {
    let rails = pf::CompatibilityGuardRails::new();
    let mut rejected = Vec::new();
    let mut undecided = 0;
    for item in rows.iter().filter_map(|r| r.item.clone()) {
        match rails.register_and_check(item) {
            Ok(()) => {}
            Err(pf::Error::CompatibilityCheck(e)) => rejected.push(format!("guard rails: {}", e.message)),
            Err(_) => undecided += 1,
        }
    }
    (rejected, undecided)
}

/// `site-packages (4) > conda (2) > system-search (2)`: the rules tried, in order, with the number
/// of candidates each passed over.
fn order(searched: &[pf::Attempt], winner: Option<&str>) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for a in searched {
        let rule = a.rule.to_string();
        match parts.last_mut() {
            Some((r, n)) if *r == rule => *n += 1,
            _ => parts.push((rule, 1)),
        }
    }
    let mut out: Vec<String> = parts.into_iter().map(|(r, n)| format!("{r} ({n})")).collect();
    if let Some(w) = winner {
        out.push(format!("{w}: found"));
    }
    out.join(" > ")
}

fn print_table(
    rows: &[Row],
    driver: Option<pf::DriverCudaVersion>,
    release: Option<pf::DriverReleaseVersion>,
    warnings: &[String],
    undecided: usize,
    verbose: bool,
) {
    let found = rows.iter().filter(|r| r.path.is_some()).count();
    println!("cuda-pathfinder {}", pf::VERSION);
    match (driver, release) {
        (Some(v), Some(r)) => println!("CUDA driver: supports CUDA {v} (release {})", r.text),
        (Some(v), None) => println!("CUDA driver: supports CUDA {v}"),
        _ => println!("CUDA driver: not found"),
    }
    match pf::GuardRailsMode::from_env() {
        Ok(mode) => println!("guard rails: {mode:?} ({})", pf::GUARD_RAILS_ENV_VAR),
        Err(e) => println!("guard rails: {e}"),
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
        if r.kind == "library" && (!r.searched.is_empty() || r.found_via.is_some()) {
            println!("           tried: {}", order(&r.searched, r.found_via.as_deref()));
        }
        if verbose {
            for a in &r.searched {
                println!("           - [{}] {}: {}", a.rule, a.candidate, a.rejected_because);
            }
            if let Some(e) = &r.error {
                if r.searched.is_empty() {
                    for line in e.lines() {
                        println!("           {line}");
                    }
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
    if undecided > 0 {
        println!(
            "\n{undecided} found item(s) the guard rails cannot judge (no toolkit version, not a toolkit item, or no \
             driver); {}=strict refuses them",
            pf::GUARD_RAILS_ENV_VAR
        );
    }
    if !verbose {
        println!("\n(--verbose lists every candidate tried and why it was passed over)");
    }
}

fn print_json(rows: &[Row], driver: Option<pf::DriverCudaVersion>, warnings: &[String]) {
    let s = |v: Option<&str>| v.map(json_string).unwrap_or_else(|| "null".into());
    let mut out = format!(
        "{{\n  \"version\": {},\n  \"driver_cuda_version\": ",
        json_string(pf::VERSION)
    );
    out.push_str(&match driver {
        Some(v) => json_string(&v.to_string()),
        None => "null".into(),
    });
    out.push_str(",\n  \"items\": [\n");
    for (i, r) in rows.iter().enumerate() {
        let tried: Vec<String> = r
            .searched
            .iter()
            .map(|a| {
                format!(
                    "{{\"rule\": {}, \"candidate\": {}, \"rejected_because\": {}}}",
                    json_string(a.rule.as_str()),
                    json_string(&a.candidate),
                    json_string(&a.rejected_because)
                )
            })
            .collect();
        out.push_str(&format!(
            "    {{\"kind\": {}, \"name\": {}, \"found\": {}, \"path\": {}, \"found_via\": {}, \"toolkit_version\": {}, \"version_source\": {}, \"error\": {}, \"tried\": [{}]}}{}\n",
            json_string(r.kind),
            json_string(&r.name),
            r.path.is_some(),
            s(r.path.as_deref()),
            s(r.found_via.as_deref()),
            s(r.version.as_ref().map(ToString::to_string).as_deref()),
            s(r.version.as_ref().map(|v| v.source.as_str())),
            s(r.error.as_deref()),
            tried.join(", "),
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
