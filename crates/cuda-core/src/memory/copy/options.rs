//! Options of copies (`cuda.core`'s `CopyOptions`, `MemcpySrcAccessOrder`, `MemcpyOverlapMode`),
//! their driver form (`CUmemcpyAttributes`), and how a batch's options become the driver's
//! attribute runs (`attrs`, `attrsIdxs` of `cuMemcpyBatchAsync`).

use super::super::MemoryLocation;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::str::FromStr;

/// When a copy may read its source (`CUmemcpySrcAccessOrder`).
///
/// The destination is always written in stream order; only the source reads move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MemcpySrcAccessOrder {
    /// The source is read in stream order, after the work queued before the copy
    /// (`CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`, the default).
    #[default]
    Stream,
    /// The source may be read out of stream order, and all reads are done before the call
    /// returns (`CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL`). No earlier work on the stream may
    /// be writing the source when the copy is queued, or the bytes copied are unspecified.
    DuringApiCall,
    /// The source may be read out of stream order, even after the call returns, until the copy
    /// is done (`CU_MEMCPY_SRC_ACCESS_ORDER_ANY`). No earlier work on the stream may be writing
    /// the source, and nothing may change it until the copy is done, or the bytes copied are
    /// unspecified.
    Any,
}

impl MemcpySrcAccessOrder {
    /// `cuda.core`'s name: `"stream"`, `"during_api_call"` or `"any"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemcpySrcAccessOrder::Stream => "stream",
            MemcpySrcAccessOrder::DuringApiCall => "during_api_call",
            MemcpySrcAccessOrder::Any => "any",
        }
    }

    /// The driver's value.
    pub(crate) fn to_driver(self) -> driver::CUmemcpySrcAccessOrder {
        use driver::CUmemcpySrcAccessOrder as O;
        match self {
            MemcpySrcAccessOrder::Stream => O::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            MemcpySrcAccessOrder::DuringApiCall => O::CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL,
            MemcpySrcAccessOrder::Any => O::CU_MEMCPY_SRC_ACCESS_ORDER_ANY,
        }
    }
}

impl fmt::Display for MemcpySrcAccessOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MemcpySrcAccessOrder {
    type Err = CudaError;
    /// `cuda.core`'s names; anything else is refused with its message
    /// (`invalid src_access_order: 'x'`).
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "stream" => Ok(MemcpySrcAccessOrder::Stream),
            "during_api_call" => Ok(MemcpySrcAccessOrder::DuringApiCall),
            "any" => Ok(MemcpySrcAccessOrder::Any),
            other => Err(CudaError::InvalidArgument(format!(
                "invalid src_access_order: {}",
                py_repr(other)
            ))),
        }
    }
}

/// Whether a copy should overlap with compute work (`CUmemcpyFlags`). Advisory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MemcpyOverlapMode {
    /// The driver's own scheduling (`CU_MEMCPY_FLAG_DEFAULT`).
    #[default]
    Default,
    /// Prefer overlapping the copy with compute work on the SMs
    /// (`CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`); devices may ignore it.
    PreferOverlapWithCompute,
}

impl MemcpyOverlapMode {
    /// `cuda.core`'s name: `"default"` or `"prefer_overlap_with_compute"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemcpyOverlapMode::Default => "default",
            MemcpyOverlapMode::PreferOverlapWithCompute => "prefer_overlap_with_compute",
        }
    }

    /// The driver's flags.
    pub(crate) fn to_driver(self) -> driver::CUmemcpyFlags {
        match self {
            MemcpyOverlapMode::Default => driver::CUmemcpyFlags::CU_MEMCPY_FLAG_DEFAULT,
            MemcpyOverlapMode::PreferOverlapWithCompute => {
                driver::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE
            }
        }
    }
}

impl fmt::Display for MemcpyOverlapMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MemcpyOverlapMode {
    type Err = CudaError;
    /// `cuda.core`'s names; anything else is refused with its message
    /// (`invalid overlap_mode: 'x'`).
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "default" => Ok(MemcpyOverlapMode::Default),
            "prefer_overlap_with_compute" => Ok(MemcpyOverlapMode::PreferOverlapWithCompute),
            other => Err(CudaError::InvalidArgument(format!(
                "invalid overlap_mode: {}",
                py_repr(other)
            ))),
        }
    }
}

/// Python's `repr` of a string (single quotes), as `cuda.core`'s messages show values.
fn py_repr(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Hints for one copy (`cuda.core`'s `CopyOptions`): [`Buffer::copy_batch_with`],
/// [`Buffer::copy_to_with`], [`Buffer::copy_from_with`]. The default is a plain stream-ordered
/// copy. Options steer how the driver stages a transfer, never the bytes it produces.
///
/// [`Buffer::copy_batch_with`]: crate::Buffer::copy_batch_with
/// [`Buffer::copy_to_with`]: crate::Buffer::copy_to_with
/// [`Buffer::copy_from_with`]: crate::Buffer::copy_from_with
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CopyOptions {
    /// When the source may be read ([`MemcpySrcAccessOrder::Stream`] by default).
    pub src_access_order: MemcpySrcAccessOrder,
    /// Where the source memory is, for managed memory on devices with concurrent managed access
    /// and pageable memory on devices that access it (ignored for other memory); it does not
    /// prefetch nor advise. `None`: no hint.
    pub src_location_hint: Option<MemoryLocation>,
    /// Where the destination memory is, as for `src_location_hint`.
    pub dst_location_hint: Option<MemoryLocation>,
    /// Whether to prefer overlap with compute ([`MemcpyOverlapMode::Default`] by default).
    pub overlap_mode: MemcpyOverlapMode,
}

impl CopyOptions {
    /// The driver's attributes; a hint that is `None` stays zeroed (`CU_MEM_LOCATION_TYPE_INVALID`).
    pub(crate) fn to_driver(self) -> driver::CUmemcpyAttributes {
        let mut attrs = driver::CUmemcpyAttributes {
            srcAccessOrder: self.src_access_order.to_driver(),
            flags: self.overlap_mode.to_driver().0,
            ..Default::default()
        };
        if let Some(l) = self.src_location_hint {
            attrs.srcLocHint = l.to_driver();
        }
        if let Some(l) = self.dst_location_hint {
            attrs.dstLocHint = l.to_driver();
        }
        attrs
    }
}

/// The options of a batch ([`Buffer::copy_batch_with`]): one [`CopyOptions`] for every copy, or
/// one per copy (paired by index; a slice is never broadcast, so its length must be the batch's).
/// Made from a `CopyOptions`, or a slice, array or vector of them.
///
/// [`Buffer::copy_batch_with`]: crate::Buffer::copy_batch_with
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchCopyOptions<'a> {
    /// The same options for every copy.
    All(CopyOptions),
    /// The options of each copy, by index.
    PerCopy(&'a [CopyOptions]),
}

impl From<CopyOptions> for BatchCopyOptions<'_> {
    fn from(o: CopyOptions) -> Self {
        BatchCopyOptions::All(o)
    }
}

impl<'a> From<&'a CopyOptions> for BatchCopyOptions<'a> {
    fn from(o: &'a CopyOptions) -> Self {
        BatchCopyOptions::All(*o)
    }
}

impl<'a> From<&'a [CopyOptions]> for BatchCopyOptions<'a> {
    fn from(o: &'a [CopyOptions]) -> Self {
        BatchCopyOptions::PerCopy(o)
    }
}

impl<'a, const N: usize> From<&'a [CopyOptions; N]> for BatchCopyOptions<'a> {
    fn from(o: &'a [CopyOptions; N]) -> Self {
        BatchCopyOptions::PerCopy(o)
    }
}

impl<'a> From<&'a Vec<CopyOptions>> for BatchCopyOptions<'a> {
    fn from(o: &'a Vec<CopyOptions>) -> Self {
        BatchCopyOptions::PerCopy(o)
    }
}

impl BatchCopyOptions<'_> {
    /// Checks the options against a batch of `n` copies (`cuda.core`'s message when a slice's
    /// length is not `n`).
    pub(crate) fn check(&self, n: usize) -> Result<()> {
        match self {
            BatchCopyOptions::PerCopy(each) if each.len() != n => Err(CudaError::InvalidArgument(format!(
                "copy_batch: options length {} does not match buffers length {n}",
                each.len()
            ))),
            _ => Ok(()),
        }
    }

    /// The options of copy `i` (of a checked batch).
    pub(crate) fn get(&self, i: usize) -> Option<&CopyOptions> {
        match self {
            BatchCopyOptions::All(o) => Some(o),
            BatchCopyOptions::PerCopy(each) => each.get(i),
        }
    }

    /// The first copy (of `n`) that reads its source during the call, if any.
    pub(crate) fn first_during_api_call(&self, n: usize) -> Option<usize> {
        (0..n).find(|&i| {
            self.get(i)
                .is_some_and(|o| o.src_access_order == MemcpySrcAccessOrder::DuringApiCall)
        })
    }

    /// The driver's attribute runs for the copies `copies` (indices into a checked batch), in
    /// that order: `attrs[k]` applies to the copies from position `idxs[k]` up to `idxs[k + 1]`
    /// (or the end); equal neighbours share a run, so options for all copies reach the driver
    /// once. Empty when `copies` is.
    pub(crate) fn runs(&self, copies: &[usize]) -> (Vec<driver::CUmemcpyAttributes>, Vec<usize>) {
        if copies.is_empty() {
            return (Vec::new(), Vec::new());
        }
        match self {
            BatchCopyOptions::All(o) => (vec![o.to_driver()], vec![0]),
            BatchCopyOptions::PerCopy(_) => {
                // (A checked batch has options for every copy.)
                let each: Vec<CopyOptions> = copies
                    .iter()
                    .map(|&i| self.get(i).copied().unwrap_or_default())
                    .collect();
                let starts = run_starts(&each);
                let attrs = starts.iter().map(|&k| each[k].to_driver()).collect();
                (attrs, starts)
            }
        }
    }
}

/// Where each maximal run of equal options starts (`cuda.core`'s `_attr_run_starts`):
/// `[s, s, a, a, s]` gives `[0, 2, 4]`; an empty list gives none.
pub(crate) fn run_starts(options: &[CopyOptions]) -> Vec<usize> {
    let mut starts = Vec::new();
    for (i, o) in options.iter().enumerate() {
        if i == 0 || options[i - 1] != *o {
            starts.push(i);
        }
    }
    starts
}

/// `cuda.core`'s refusal of `DURING_API_CALL` where only a stream-ordered copy is available:
/// `requirement` says what the native path needs; `index` names the copy of a batch.
pub(crate) fn during_api_call_refusal(requirement: &str, index: Option<usize>) -> CudaError {
    let at = index.map(|i| format!(" at index {i}")).unwrap_or_default();
    CudaError::InvalidState(format!(
        "src_access_order=DURING_API_CALL{at} requires {requirement}. A plain cuMemcpyAsync fallback \
         reads the source in stream order only, which would silently violate the guarantee that all \
         source reads complete before the call returns, letting the caller reuse the source buffer \
         before the real (stream-ordered) read happens. Use src_access_order=STREAM or ANY, or omit \
         options, if that works for your use case."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(o: MemcpySrcAccessOrder) -> CopyOptions {
        CopyOptions {
            src_access_order: o,
            ..Default::default()
        }
    }

    #[test]
    fn adjacent_equal_options_share_a_run() {
        let s = order(MemcpySrcAccessOrder::Stream);
        let a = order(MemcpySrcAccessOrder::Any);
        let d = order(MemcpySrcAccessOrder::DuringApiCall);
        assert_eq!(run_starts(&[s, s, a, a, s]), [0, 2, 4]);
        assert_eq!(run_starts(&[s, a, d]), [0, 1, 2]);
        assert_eq!(run_starts(&[s, s, s]), [0]);
        assert_eq!(run_starts(&[CopyOptions::default()]), [0]);
        assert!(run_starts(&[]).is_empty());
        // Structural equality: hints and overlap mode count.
        let hinted = CopyOptions {
            dst_location_hint: Some(MemoryLocation::Host),
            ..s
        };
        let overlap = CopyOptions {
            overlap_mode: MemcpyOverlapMode::PreferOverlapWithCompute,
            ..s
        };
        assert_eq!(run_starts(&[s, hinted, hinted, overlap, s]), [0, 1, 3, 4]);
    }

    #[test]
    fn options_for_all_reach_the_driver_once() {
        let a = order(MemcpySrcAccessOrder::Any);
        let all = BatchCopyOptions::from(a);
        all.check(4).unwrap();
        let (attrs, idxs) = all.runs(&[0, 1, 2, 3]);
        assert_eq!(idxs, [0]);
        assert_eq!(attrs.len(), 1);
        assert_eq!(
            attrs[0].srcAccessOrder,
            driver::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_ANY
        );
        // An explicit list of the same options is the same to the driver.
        let listed = [a; 4];
        let (attrs, idxs) = BatchCopyOptions::from(&listed).runs(&[0, 1, 2, 3]);
        assert_eq!((attrs.len(), idxs), (1, vec![0]));
        // Per copy: one entry per run.
        let s = order(MemcpySrcAccessOrder::Stream);
        let each = vec![s, a, a, s];
        let (attrs, idxs) = BatchCopyOptions::from(&each).runs(&[0, 1, 2, 3]);
        assert_eq!(idxs, [0, 1, 3]);
        let orders: Vec<u32> = attrs.iter().map(|a| a.srcAccessOrder.0).collect();
        assert_eq!(orders, [1, 3, 1]);
        // Skipped copies (empty ones) leave runs over the copies passed: [s, a, s] by position.
        let (attrs, idxs) = BatchCopyOptions::from(&each).runs(&[0, 2, 3]);
        assert_eq!(idxs, [0, 1, 2]);
        assert_eq!(attrs.len(), 3);
        let (attrs, idxs) = BatchCopyOptions::from(&each).runs(&[1, 2]);
        assert_eq!((attrs.len(), idxs), (1, vec![0]));
        let (attrs, idxs) = BatchCopyOptions::from(a).runs(&[]);
        assert!(attrs.is_empty() && idxs.is_empty());
    }

    #[test]
    fn a_slice_is_never_broadcast() {
        let one = [CopyOptions::default()];
        let err = BatchCopyOptions::from(&one).check(4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "copy_batch: options length 1 does not match buffers length 4"
        );
        let three = [CopyOptions::default(); 3];
        let err = BatchCopyOptions::from(&three[..]).check(4).unwrap_err();
        assert!(err.to_string().contains("options length 3"), "{err}");
        BatchCopyOptions::from(CopyOptions::default()).check(7).unwrap();
        BatchCopyOptions::from(&[CopyOptions::default(); 2]).check(2).unwrap();
    }

    #[test]
    fn options_convert_to_the_drivers_attributes() {
        let plain = CopyOptions::default().to_driver();
        assert_eq!(
            plain.srcAccessOrder,
            driver::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
        );
        assert_eq!(plain.flags, 0);
        assert_eq!(
            plain.srcLocHint.type_,
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID
        );
        assert_eq!(
            plain.dstLocHint.type_,
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID
        );
        let full = CopyOptions {
            src_access_order: MemcpySrcAccessOrder::DuringApiCall,
            src_location_hint: Some(MemoryLocation::HostNuma(3)),
            dst_location_hint: Some(MemoryLocation::HostNumaCurrent),
            overlap_mode: MemcpyOverlapMode::PreferOverlapWithCompute,
        }
        .to_driver();
        assert_eq!(full.srcAccessOrder.0, 2);
        assert_eq!(full.flags, 1);
        assert_eq!(
            full.srcLocHint.type_,
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA
        );
        // SAFETY: the id member of the union is the one written (plain data either way).
        assert_eq!(unsafe { full.srcLocHint.__bindgen_anon_1.id }, 3);
        assert_eq!(
            full.dstLocHint.type_,
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
        );
        let host = CopyOptions {
            src_location_hint: Some(MemoryLocation::Host),
            ..Default::default()
        }
        .to_driver();
        assert_eq!(
            host.srcLocHint.type_,
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST
        );
        assert_eq!(host.srcAccessOrder.0, 1);
        assert_eq!(
            MemcpySrcAccessOrder::Any.to_driver(),
            driver::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_ANY
        );
    }

    #[test]
    fn names_are_cuda_cores() {
        for o in [
            MemcpySrcAccessOrder::Stream,
            MemcpySrcAccessOrder::DuringApiCall,
            MemcpySrcAccessOrder::Any,
        ] {
            assert_eq!(o.as_str().parse::<MemcpySrcAccessOrder>().unwrap(), o);
        }
        for m in [MemcpyOverlapMode::Default, MemcpyOverlapMode::PreferOverlapWithCompute] {
            assert_eq!(m.to_string().parse::<MemcpyOverlapMode>().unwrap(), m);
        }
        let err = "invalid_order".parse::<MemcpySrcAccessOrder>().unwrap_err();
        assert_eq!(err.to_string(), "invalid src_access_order: 'invalid_order'");
        let err = "invalid_mode".parse::<MemcpyOverlapMode>().unwrap_err();
        assert_eq!(err.to_string(), "invalid overlap_mode: 'invalid_mode'");
    }

    #[test]
    fn during_api_call_is_found_and_refused_with_cuda_cores_words() {
        let s = order(MemcpySrcAccessOrder::Stream);
        let d = order(MemcpySrcAccessOrder::DuringApiCall);
        assert_eq!(BatchCopyOptions::from(&[s, s, d, s]).first_during_api_call(4), Some(2));
        assert_eq!(BatchCopyOptions::from(s).first_during_api_call(4), None);
        assert_eq!(BatchCopyOptions::from(d).first_during_api_call(4), Some(0));
        let err = during_api_call_refusal("some requirement", Some(5)).to_string();
        assert!(err.starts_with("src_access_order=DURING_API_CALL at index 5 requires some requirement. A plain cuMemcpyAsync fallback reads the source in stream order only"), "{err}");
        assert!(err.ends_with("Use src_access_order=STREAM or ANY, or omit options, if that works for your use case."));
        let err = during_api_call_refusal("some requirement", None).to_string();
        assert!(!err.contains("at index"), "{err}");
        assert!(
            err.contains("letting the caller reuse the source buffer before the real (stream-ordered) read happens")
        );
    }
}
