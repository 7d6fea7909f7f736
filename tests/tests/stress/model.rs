//! What the test believes each tracked buffer holds, and how work changes it.
//!
//! Every tracked buffer is written whole with one 32-bit value at a time (fills, kernels, copies
//! from the host or from a buffer of the same size), so its content is described by the values
//! its elements may hold: one value after a write that succeeded, the old values and the new one
//! after a write that failed (it may or may not have run), nothing known before the first write.
//! A read that finds an element outside that set is a mismatch: a failure of the test.
//!
//! Graphs carry a recipe: the steps they recorded, in order, with how each recording went.
//! Launching a graph applies the recipe's effects to the buffers still in the pool, in that order.

use std::fmt;

/// The most values a buffer is allowed to hold before the test stops following it.
const MAX_VALUES: usize = 16;

/// The values the elements of a buffer may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every element holds one of these (sorted, no duplicates, at least one).
    OneOf(Vec<u32>),
    /// Not known: never written, or written by work the model cannot follow.
    Unknown,
}

impl Expect {
    pub fn value(v: u32) -> Expect {
        Expect::OneOf(vec![v])
    }

    /// Either this or `other`.
    pub fn union(&self, other: &Expect) -> Expect {
        match (self, other) {
            (Expect::OneOf(a), Expect::OneOf(b)) => {
                let mut v: Vec<u32> = a.iter().chain(b).copied().collect();
                v.sort_unstable();
                v.dedup();
                if v.len() > MAX_VALUES {
                    Expect::Unknown
                } else {
                    Expect::OneOf(v)
                }
            }
            _ => Expect::Unknown,
        }
    }

    /// After adding `k` to every element.
    pub fn plus(&self, k: u32) -> Expect {
        match self {
            Expect::OneOf(v) => {
                let mut v: Vec<u32> = v.iter().map(|x| x.wrapping_add(k)).collect();
                v.sort_unstable();
                Expect::OneOf(v)
            }
            Expect::Unknown => Expect::Unknown,
        }
    }

    /// Whether an element may hold `x`.
    pub fn admits(&self, x: u32) -> bool {
        match self {
            Expect::OneOf(v) => v.binary_search(&x).is_ok(),
            Expect::Unknown => true,
        }
    }

    pub fn is_known(&self) -> bool {
        matches!(self, Expect::OneOf(_))
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::OneOf(v) if v.len() == 1 => write!(f, "{:#010x}", v[0]),
            Expect::OneOf(v) => {
                write!(f, "one of [")?;
                for (i, x) in v.iter().enumerate() {
                    write!(f, "{}{x:#010x}", if i > 0 { ", " } else { "" })?;
                }
                write!(f, "]")
            }
            Expect::Unknown => write!(f, "unknown"),
        }
    }
}

/// A tracked buffer as a step names it: its slot in the pool and the buffer's id (a slot is
/// refilled with new buffers; a step's effect applies only while its buffer is still there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufRef {
    pub slot: usize,
    pub id: u64,
}

/// What one piece of work does to a tracked buffer.
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// Nothing (a read, a prefetch).
    None,
    /// Every element becomes the value.
    Set(u32),
    /// The value is added to every element.
    Add(u32),
    /// The content becomes unspecified (a discard).
    Garbage,
}

impl Change {
    /// `old` after the change; `certain`: the work ran (else it may or may not have).
    pub fn apply(self, old: &Expect, certain: bool) -> Expect {
        let new = match self {
            Change::None => return old.clone(),
            Change::Set(v) => Expect::value(v),
            Change::Add(k) => old.plus(k),
            Change::Garbage => Expect::Unknown,
        };
        if certain {
            new
        } else {
            old.union(&new)
        }
    }
}

/// One step of a graph's recipe.
#[derive(Clone, Debug)]
pub enum Step {
    /// `fill_u32` (a memset node in explicit graphs).
    Fill { dst: BufRef, value: u32 },
    /// `fill_u8` with a byte: each element becomes the byte four times.
    FillByte { dst: BufRef, byte: u8 },
    /// The `fill` kernel.
    KernelFill { dst: BufRef, value: u32 },
    /// The `add` kernel.
    KernelAdd { dst: BufRef, k: u32 },
    /// A whole-buffer copy between two buffers of the same size (a memcpy node).
    Copy { dst: BufRef, src: BufRef },
    /// A temporary buffer allocated during the capture (graph memory, or whatever the resource
    /// gives a capturing stream), filled with the value and copied into `dst`.
    ViaTemp { dst: BufRef, value: u32, resource: usize },
    /// A host callback counting its calls.
    Callback,
    /// A fill of an untracked buffer.
    JunkFill { slot: usize, value: u32 },
    /// Two branches recorded in parallel ([`cuda_core::graph::GraphBuilder::split`]), on
    /// disjoint buffers (even slots in the first, odd ones in the second).
    Split(Vec<Planned>, Vec<Planned>),
}

/// How recording a step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Not recorded yet.
    Planned,
    /// Recorded: the graph does it at every launch.
    Done,
    /// Its recording failed part way: it may or may not run.
    Maybe,
    /// Recorded so that its buffer ends unspecified (a temporary copied before it was filled).
    Garbage,
    /// Nothing recorded (its slot was empty, or the call was refused before recording).
    Skipped,
    /// An explicit graph's node disabled in the executable graph.
    Disabled,
}

#[derive(Clone, Debug)]
pub struct Planned {
    pub step: Step,
    pub mark: Mark,
}

impl Planned {
    pub fn new(step: Step) -> Planned {
        Planned {
            step,
            mark: Mark::Planned,
        }
    }
}

/// One effect of a launch on the tracked buffers.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    Change {
        dst: BufRef,
        change: Change,
        certain: bool,
    },
    /// `dst` becomes what `src` holds (`certain`: surely; else `dst` keeps its old values too).
    Copy {
        dst: BufRef,
        src: BufRef,
        certain: bool,
    },
}

/// What launching a recipe does, in order, and how many callbacks run: surely, and at most.
pub fn effects(recipe: &[Planned]) -> (Vec<Effect>, u64, u64) {
    let mut out = Vec::new();
    let (mut sure, mut most) = (0, 0);
    flatten(recipe, &mut out, &mut sure, &mut most);
    (out, sure, most)
}

fn flatten(recipe: &[Planned], out: &mut Vec<Effect>, sure: &mut u64, most: &mut u64) {
    for p in recipe {
        let (certain, garbage) = match p.mark {
            Mark::Done => (true, false),
            Mark::Maybe => (false, false),
            Mark::Garbage => (true, true),
            Mark::Planned | Mark::Skipped | Mark::Disabled => {
                if let Step::Split(a, b) = &p.step {
                    // A split's mark is its branches'.
                    flatten(a, out, sure, most);
                    flatten(b, out, sure, most);
                }
                continue;
            }
        };
        let change = |dst, change| Effect::Change {
            dst,
            change: if garbage { Change::Garbage } else { change },
            certain,
        };
        match &p.step {
            Step::Fill { dst, value } => out.push(change(*dst, Change::Set(*value))),
            Step::FillByte { dst, byte } => out.push(change(*dst, Change::Set(u32::from(*byte) * 0x0101_0101))),
            Step::KernelFill { dst, value } => out.push(change(*dst, Change::Set(*value))),
            Step::KernelAdd { dst, k } => out.push(change(*dst, Change::Add(*k))),
            Step::ViaTemp { dst, value, .. } => out.push(change(*dst, Change::Set(*value))),
            Step::Copy { dst, src } => out.push(if garbage {
                change(*dst, Change::Garbage)
            } else {
                Effect::Copy {
                    dst: *dst,
                    src: *src,
                    certain,
                }
            }),
            Step::Callback => {
                *most += 1;
                if certain {
                    *sure += 1;
                }
            }
            Step::JunkFill { .. } => {}
            Step::Split(a, b) => {
                flatten(a, out, sure, most);
                flatten(b, out, sure, most);
            }
        }
    }
}

/// The tracked buffers a launch may change: those still in their slots (locked by the caller).
pub trait Buffers {
    /// What `r` holds, when its buffer is still in its slot.
    fn get(&self, r: BufRef) -> Option<Expect>;
    /// Sets what `r` holds (ignored when its buffer left its slot).
    fn set(&mut self, r: BufRef, e: Expect);
}

/// Applies `effects` in order (`launched`: the launch succeeded; else each effect may or may
/// not have happened). A copy from a buffer no longer in its slot leaves its destination
/// unknown.
pub fn apply(effects: &[Effect], buffers: &mut impl Buffers, launched: bool) {
    for e in effects {
        match *e {
            Effect::Change { dst, change, certain } => {
                if let Some(old) = buffers.get(dst) {
                    buffers.set(dst, change.apply(&old, certain && launched));
                }
            }
            Effect::Copy { dst, src, certain } => {
                let from = buffers.get(src).unwrap_or(Expect::Unknown);
                if let Some(old) = buffers.get(dst) {
                    buffers.set(dst, if certain && launched { from } else { old.union(&from) });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(slot: usize) -> BufRef {
        BufRef { slot, id: slot as u64 }
    }

    struct Map(std::collections::BTreeMap<usize, Expect>);

    impl Buffers for Map {
        fn get(&self, r: BufRef) -> Option<Expect> {
            self.0.get(&r.slot).cloned()
        }
        fn set(&mut self, r: BufRef, e: Expect) {
            self.0.insert(r.slot, e);
        }
    }

    #[test]
    fn expectations_follow_writes_and_failed_writes() {
        let a = Expect::value(5);
        assert!(a.admits(5) && !a.admits(6));
        let b = Change::Set(6).apply(&a, false);
        assert!(b.admits(5) && b.admits(6) && !b.admits(7));
        assert_eq!(Change::Add(1).apply(&b, true), Expect::OneOf(vec![6, 7]));
        assert_eq!(Change::Set(9).apply(&b, true), Expect::value(9));
        assert_eq!(Change::Garbage.apply(&b, true), Expect::Unknown);
        assert_eq!(Change::Add(1).apply(&Expect::value(u32::MAX), true), Expect::value(0));
        let mut many = Expect::value(0);
        for v in 1..=MAX_VALUES as u32 {
            many = Change::Set(v).apply(&many, false);
        }
        assert_eq!(many, Expect::Unknown, "too many values: no longer followed");
    }

    #[test]
    fn recipes_apply_in_order_and_skip_what_was_not_recorded() {
        let step = |step, mark| Planned { step, mark };
        let recipe = vec![
            step(Step::Fill { dst: at(0), value: 1 }, Mark::Done),
            step(Step::Copy { dst: at(1), src: at(0) }, Mark::Done),
            step(Step::KernelAdd { dst: at(0), k: 2 }, Mark::Done),
            step(Step::Fill { dst: at(2), value: 7 }, Mark::Skipped),
            step(Step::Callback, Mark::Done),
            step(Step::Callback, Mark::Maybe),
            step(
                Step::Split(
                    vec![step(Step::FillByte { dst: at(4), byte: 1 }, Mark::Done)],
                    vec![step(
                        Step::ViaTemp {
                            dst: at(3),
                            value: 4,
                            resource: 0,
                        },
                        Mark::Garbage,
                    )],
                ),
                Mark::Planned,
            ),
        ];
        let (effects, sure, most) = effects(&recipe);
        assert_eq!((sure, most), (1, 2));
        let mut state = Map([
            Expect::value(0),
            Expect::value(0),
            Expect::value(0),
            Expect::value(0),
            Expect::Unknown,
        ]
        .into_iter()
        .enumerate()
        .collect());
        apply(&effects, &mut state, true);
        assert_eq!(state.0[&0], Expect::value(3));
        assert_eq!(state.0[&1], Expect::value(1));
        assert_eq!(state.0[&2], Expect::value(0));
        assert_eq!(state.0[&3], Expect::Unknown);
        assert_eq!(state.0[&4], Expect::value(0x0101_0101));
        // A copy from a buffer that left the pool: unknown.
        let mut state = Map([(1, Expect::value(0))].into_iter().collect());
        let copy = Effect::Copy {
            dst: at(1),
            src: at(0),
            certain: true,
        };
        apply(&[copy], &mut state, true);
        assert_eq!(state.0[&1], Expect::Unknown);
        // A failed launch: each effect may or may not have happened.
        let mut state = Map([(0, Expect::value(1)), (1, Expect::value(2))].into_iter().collect());
        apply(&[copy], &mut state, false);
        assert_eq!(state.0[&1], Expect::OneOf(vec![1, 2]));
    }
}
