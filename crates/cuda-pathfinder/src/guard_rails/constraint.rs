//! A constraint on the toolkit version: a PEP 440 specifier set such as `>=13.2,<14` or
//! `==12.*`, applied to a toolkit's `major.minor`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    Ne,
    Compatible,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Clause {
    op: Op,
    version: Vec<u32>,
    /// `==13.*` / `!=12.*`: compare the given components only.
    prefix: bool,
}

/// A toolkit version constraint (`ctk_version` of `cuda.pathfinder`'s guard rails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtkVersionConstraint {
    text: String,
    clauses: Vec<Clause>,
}

fn compare(a: &[u32], b: &[u32]) -> Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

impl Clause {
    fn matches(&self, v: &[u32]) -> bool {
        let prefix_eq = || {
            v.iter()
                .chain(std::iter::repeat(&0))
                .zip(&self.version)
                .all(|(a, b)| a == b)
        };
        match (self.op, self.prefix) {
            (Op::Eq, true) => prefix_eq(),
            (Op::Ne, true) => !prefix_eq(),
            (Op::Eq, false) => compare(v, &self.version).is_eq(),
            (Op::Ne, false) => compare(v, &self.version).is_ne(),
            (Op::Ge, _) => compare(v, &self.version).is_ge(),
            (Op::Gt, _) => compare(v, &self.version).is_gt(),
            (Op::Le, _) => compare(v, &self.version).is_le(),
            (Op::Lt, _) => compare(v, &self.version).is_lt(),
            (Op::Compatible, _) => {
                // ~=13.2 means >=13.2 and ==13.*
                let head = &self.version[..self.version.len().saturating_sub(1)];
                compare(v, &self.version).is_ge()
                    && v.iter().chain(std::iter::repeat(&0)).zip(head).all(|(a, b)| a == b)
            }
        }
    }
}

fn parse_clause(text: &str) -> Result<Clause, String> {
    let t = text.trim();
    let ops = [
        ("~=", Op::Compatible),
        ("==", Op::Eq),
        ("!=", Op::Ne),
        (">=", Op::Ge),
        ("<=", Op::Le),
        (">", Op::Gt),
        ("<", Op::Lt),
    ];
    let (op, rest) = ops
        .iter()
        .find_map(|(s, op)| t.strip_prefix(s).map(|r| (*op, r.trim())))
        .ok_or_else(|| format!("{t:?} has no comparison operator (==, !=, >=, <=, >, <, ~=)"))?;
    let (digits, prefix) = match rest.strip_suffix(".*") {
        Some(d) => (d, true),
        None => (rest, false),
    };
    if prefix && !matches!(op, Op::Eq | Op::Ne) {
        return Err(format!("{t:?}: a trailing .* is only allowed with == and !="));
    }
    let version = digits
        .split('.')
        .map(|p| {
            p.parse::<u32>()
                .map_err(|_| format!("{t:?}: {rest:?} is not a version"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if op == Op::Compatible && version.len() < 2 {
        return Err(format!("{t:?}: ~= needs at least major.minor"));
    }
    Ok(Clause { op, version, prefix })
}

impl CtkVersionConstraint {
    /// Parses a non-empty specifier set: comma-separated clauses of `==`, `!=`, `>=`, `<=`, `>`,
    /// `<` or `~=` and a version (`==`/`!=` also take `13.*`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err("ctk_version must be a non-empty specifier such as \">=13.2,<14\"".into());
        }
        let clauses = trimmed
            .split(',')
            .map(parse_clause)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("invalid ctk_version {trimmed:?}: {e}"))?;
        Ok(CtkVersionConstraint {
            text: trimmed.to_string(),
            clauses,
        })
    }

    /// Whether toolkit `major.minor` satisfies every clause.
    pub fn matches(&self, major: u32, minor: u32) -> bool {
        self.clauses.iter().all(|c| c.matches(&[major, minor]))
    }
}

impl FromStr for CtkVersionConstraint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CtkVersionConstraint::parse(s)
    }
}

impl fmt::Display for CtkVersionConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
