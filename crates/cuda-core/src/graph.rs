//! CUDA graphs by stream capture (`cuda.core.graph`, first part): record the work queued on a
//! stream into a graph, instantiate it once, replay it cheaply.

use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// How a capture interacts with other threads' CUDA calls (`CUstreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMode {
    /// Unsafe calls from any thread fail while the capture runs (the default).
    #[default]
    Global,
    /// Only this thread's unsafe calls fail.
    ThreadLocal,
    /// Nothing is prohibited.
    Relaxed,
}

impl CaptureMode {
    fn to_driver(self) -> driver::CUstreamCaptureMode {
        match self {
            CaptureMode::Global => driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// A capture in progress on a stream: work queued on [`stream`](Self::stream) is recorded, not
/// run, until [`end_building`](Self::end_building). Dropping it ends the capture and discards
/// the graph.
pub struct GraphBuilder {
    stream: Stream,
    capturing: bool,
}

impl Stream {
    /// Starts recording the work queued on this stream into a graph.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<GraphBuilder> {
        // SAFETY: the stream is live.
        unsafe { driver::cuStreamBeginCapture(self.handle(), mode.to_driver()) }.check("cuStreamBeginCapture")?;
        Ok(GraphBuilder {
            stream: self.clone(),
            capturing: true,
        })
    }
}

impl GraphBuilder {
    /// The stream being captured: queue work on it to add it to the graph.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Ends the capture and returns the graph recorded.
    pub fn end_building(mut self) -> Result<GraphDefinition> {
        self.capturing = false;
        let mut graph: driver::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (begun by this builder); out-pointer to a local.
        unsafe { driver::cuStreamEndCapture(self.stream.handle(), &mut graph) }.check("cuStreamEndCapture")?;
        if graph.is_null() {
            return Err(CudaError::InvalidArgument(
                "the capture was invalidated: no graph was recorded".into(),
            ));
        }
        Ok(GraphDefinition { handle: graph })
    }
}

impl Drop for GraphBuilder {
    fn drop(&mut self) {
        if self.capturing {
            let mut graph: driver::CUgraph = std::ptr::null_mut();
            // SAFETY: ends the capture this builder began; the graph, if any, is destroyed.
            let result = unsafe {
                let r = driver::cuStreamEndCapture(self.stream.handle(), &mut graph).check("cuStreamEndCapture");
                if !graph.is_null() {
                    let _ = driver::cuGraphDestroy(graph);
                }
                r
            };
            if let Err(e) = result {
                record_drop_error(e);
            }
        }
    }
}

/// A graph: the recorded work, not yet runnable.
pub struct GraphDefinition {
    handle: driver::CUgraph,
}

// SAFETY: a CUgraph may be used from any thread, one at a time (&mut / owned use here).
unsafe impl Send for GraphDefinition {}

impl GraphDefinition {
    /// The `CUgraph`.
    pub fn handle(&self) -> driver::CUgraph {
        self.handle
    }

    /// How many nodes the graph has.
    pub fn num_nodes(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: the graph is live; a null array asks for the count only.
        unsafe { driver::cuGraphGetNodes(self.handle, std::ptr::null_mut(), &mut n) }.check("cuGraphGetNodes")?;
        Ok(n)
    }

    /// An executable graph, ready to launch.
    pub fn instantiate(&self) -> Result<Graph> {
        let mut exec: driver::CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph is live; out-pointer to a local.
        unsafe { driver::cuGraphInstantiate(&mut exec, self.handle, 0) }.check("cuGraphInstantiate")?;
        Ok(Graph { handle: exec })
    }
}

impl Drop for GraphDefinition {
    fn drop(&mut self) {
        // SAFETY: made by stream capture, destroyed once; executable graphs are independent.
        if let Err(e) = unsafe { driver::cuGraphDestroy(self.handle) }.check("cuGraphDestroy") {
            record_drop_error(e);
        }
    }
}

/// An executable graph.
pub struct Graph {
    handle: driver::CUgraphExec,
}

// SAFETY: a CUgraphExec may be launched from any thread; the driver orders launches on streams.
unsafe impl Send for Graph {}
// SAFETY: as above; launches take &self and are serialised by the driver per stream.
unsafe impl Sync for Graph {}

impl Graph {
    /// The `CUgraphExec`.
    pub fn handle(&self) -> driver::CUgraphExec {
        self.handle
    }

    /// Uploads the graph to the device ahead of its first launch.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { driver::cuGraphUpload(self.handle, stream.handle()) }.check("cuGraphUpload")
    }

    /// Runs the recorded work on `stream` (one `cuGraphLaunch`).
    ///
    /// # Safety
    /// The graph replays the kernels and copies recorded at capture: every memory they use must
    /// still be valid, as [`crate::launch`] requires of each launch. (Tying buffers to graphs so
    /// that this is checked is the rest of the graph work.)
    #[inline]
    pub unsafe fn launch(&self, stream: &Stream) -> Result<()> {
        // SAFETY: both handles are live; the caller vouches for the recorded work's memory.
        unsafe { driver::cuGraphLaunch(self.handle, stream.handle()) }.check("cuGraphLaunch")
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by cuGraphInstantiate, destroyed once (launches in flight finish first).
        if let Err(e) = unsafe { driver::cuGraphExecDestroy(self.handle) }.check("cuGraphExecDestroy") {
            record_drop_error(e);
        }
    }
}
