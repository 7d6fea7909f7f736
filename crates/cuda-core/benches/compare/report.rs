//! The rows' goals and verdicts, the table and the JSON.

use crate::measure::{Column, Op, Samples};
use serde_json::{json, Value};

/// What a row's safe figure must meet.
pub enum Goal {
    /// Within this many percent of the baseline (at most above it for times, at most below it
    /// for throughputs), as the median of the per-round ratios.
    Within(f64),
    /// At least this many percent of the baseline (throughputs).
    AtLeast(f64),
    /// The safe figure under this many of the row's unit.
    Under(f64),
    /// No goal: the figure is there for reference.
    Reference(&'static str),
}

/// Which round count a row takes (see `Rounds` in main).
#[derive(Clone, Copy)]
pub enum Cost {
    /// A sample of a few milliseconds.
    Cheap,
    /// A sample of tens of milliseconds, or one that starts threads.
    Dear,
    /// A sample is a fresh process.
    Process,
}

pub struct Spec {
    pub name: &'static str,
    pub unit: &'static str,
    pub op: Op,
    pub goal: Goal,
    pub cost: Cost,
}

pub struct Row {
    pub spec: &'static Spec,
    pub samples: Samples,
    pub seconds: f64,
}

impl Row {
    fn higher_is_better(&self) -> bool {
        matches!(self.spec.unit, "M/s" | "GB/s" | "TB/s")
    }

    /// What the ratios are to: C where the row has C figures, else raw Rust.
    fn baseline(&self) -> Option<Column> {
        [Column::C, Column::Raw]
            .into_iter()
            .find(|&c| c != Column::Safe && self.samples.median(c).is_some())
    }

    /// Whether `ratio` (of the safe side to another) is on the good side of `limit`.
    fn good(&self, ratio: f64, limit: f64) -> bool {
        if self.higher_is_better() {
            ratio >= limit
        } else {
            ratio <= limit
        }
    }

    /// Whether the safe figure meets the goal and is ahead of cudarc's (where the row has
    /// cudarc figures); `None` for a row there for reference.
    fn verdict(&self) -> Option<bool> {
        let ratio = || self.samples.ratio(Column::Safe, self.baseline()?);
        let sign = if self.higher_is_better() { -1.0 } else { 1.0 };
        let met = match self.spec.goal {
            Goal::Within(p) => ratio().is_some_and(|r| self.good(r, 1.0 + sign * p / 100.0)),
            Goal::AtLeast(p) => ratio().is_some_and(|r| r >= p / 100.0),
            Goal::Under(limit) => self.samples.median(Column::Safe).is_some_and(|v| v < limit),
            Goal::Reference(_) => return None,
        };
        let ahead = self
            .samples
            .ratio(Column::Safe, Column::Cudarc)
            .is_none_or(|r| self.good(r, 1.0));
        Some(met && ahead)
    }

    fn goal_text(&self) -> String {
        let base = self.baseline().map_or("-", Column::title);
        let goal = match self.spec.goal {
            Goal::Within(p) => format!("within {p}% of {base}"),
            Goal::AtLeast(p) => format!("at least {p}% of {base}"),
            Goal::Under(limit) => format!("under {limit} {}", self.spec.unit),
            Goal::Reference(what) => what.to_string(),
        };
        match self.samples.median(Column::Cudarc) {
            Some(_) => format!("{goal}, ahead of cudarc"),
            None => goal,
        }
    }

    fn verdict_text(&self) -> &'static str {
        match self.verdict() {
            Some(true) => "ok",
            Some(false) => "check",
            None => "for reference",
        }
    }

    /// A column's median and its ratio to the baseline, as printed.
    fn cell(&self, column: Column) -> String {
        let Some(median) = self.samples.median(column) else {
            return "-".into();
        };
        match self.baseline().filter(|&b| b != column) {
            Some(base) => match self.samples.ratio(column, base) {
                Some(ratio) => format!("{median:.3} ({ratio:.3})"),
                None => format!("{median:.3}"),
            },
            None => format!("{median:.3}"),
        }
    }

    fn json(&self) -> Value {
        let base = self.baseline();
        let columns: serde_json::Map<String, Value> = Column::ALL
            .into_iter()
            .filter_map(|c| {
                let median = self.samples.median(c)?;
                let ratio = base.filter(|&b| b != c).and_then(|b| self.samples.ratio(c, b));
                let samples = self.samples.of(c);
                let figure = json!({ "median": median, "ratio": ratio, "samples": samples });
                Some((c.key().to_string(), figure))
            })
            .collect();
        json!({
            "name": self.spec.name,
            "unit": self.spec.unit,
            "goal": self.goal_text(),
            "verdict": self.verdict().map(|ok| if ok { "ok" } else { "check" }),
            "ratios_to": base.map(Column::key),
            "cuda_core_to_cudarc": self.samples.ratio(Column::Safe, Column::Cudarc),
            "rounds": self.samples.columns.first().map_or(0, |(_, v)| v.len()),
            // The samples of each instance of the servers, in order (the process rows: null).
            "rounds_per_instance": (!self.spec.op.is_process()).then_some(&self.samples.blocks),
            "seconds": self.seconds,
            "columns": columns,
        })
    }
}

const NAME: usize = 48;
const UNIT: usize = 5;
const CELL: usize = 17;

/// The table, with its footnote: `instances` of every server gave each row's samples (fewer
/// where a server failed: `per_side`, the instances of each side's server that answered).
pub fn print(rows: &[Row], instances: usize, per_side: &[(Column, usize)]) {
    let mut header = format!("{:<NAME$} {:<UNIT$}", "operation", "unit");
    for c in Column::ALL {
        header += &format!(" {:>CELL$}", c.title());
    }
    println!("{header}  goal");
    for row in rows {
        let mut line = format!("{:<NAME$} {:<UNIT$}", row.spec.name, row.spec.unit);
        for c in Column::ALL {
            line += &format!(" {:>CELL$}", row.cell(c));
        }
        println!("{line}  {} ({})", row.goal_text(), row.verdict_text());
    }
    let judged: Vec<bool> = rows.iter().filter_map(Row::verdict).collect();
    let ok = judged.iter().filter(|&&ok| ok).count();
    println!("{ok} of {} rows ok", judged.len());
    let fewer: Vec<String> = per_side
        .iter()
        .filter(|&&(_, n)| n > 0 && n < instances)
        .map(|&(c, n)| format!("{} {n}", c.title()))
        .collect();
    let fewer = if fewer.is_empty() {
        String::new()
    } else {
        format!(" (fewer where a server failed: {})", fewer.join(", "))
    };
    println!(
        "Every side runs in a process of its own, a server restarted between passes over the rows: each row's \
         samples come from {instances} process instances per side{fewer}, the process rows' from a fresh process \
         each. Medians over interleaved rounds; in brackets, the median of the per-round ratios to C where the row \
         has a C figure, else to raw Rust. Times are host time per operation (lower is better); M/s, GB/s and TB/s \
         are throughput (higher is better). cuda.core's first compile starts after the interpreter's start and \
         imports."
    );
}

/// `$OUT/bench.json`: every row's figures and ratios, with `meta` (device, rounds, time).
pub fn write_json(rows: &[Row], meta: Value, out: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let json = json!({ "meta": meta, "rows": rows.iter().map(Row::json).collect::<Vec<_>>() });
    std::fs::create_dir_all(out)?;
    let path = out.join("bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("plain values") + "\n")?;
    Ok(path)
}
