//! Conditions ([`GraphCondition`]), conditional nodes (if, if-else, while, switch) and their body
//! graphs.

use super::*;

/// A condition a kernel sets (`cudaGraphSetConditional(handle, value)` in device code) to steer
/// a conditional node. Pass it to a kernel as an argument: it is the 64-bit
/// `cudaGraphConditionalHandle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct GraphCondition {
    pub(super) handle: driver::CUgraphConditionalHandle,
}

// SAFETY: a transparent u64, the layout of cudaGraphConditionalHandle.
unsafe impl DeviceRepr for GraphCondition {}

impl GraphCondition {
    /// The `CUgraphConditionalHandle`.
    pub fn handle(&self) -> driver::CUgraphConditionalHandle {
        self.handle
    }

    pub(crate) fn create(graph: driver::CUgraph, default_value: Option<u32>) -> Result<GraphCondition> {
        let context = current_context("create_condition")?;
        let mut handle = 0;
        let flags = if default_value.is_some() {
            driver::CU_GRAPH_COND_ASSIGN_DEFAULT
        } else {
            0
        };
        // SAFETY: graph and context are live; out-pointer to a local.
        unsafe {
            driver::cuGraphConditionalHandleCreate(&mut handle, graph, context, default_value.unwrap_or(0), flags)
        }
        .check("cuGraphConditionalHandleCreate")?;
        Ok(GraphCondition { handle })
    }
}

/// The kinds of conditional node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionalType {
    /// Runs its first body when the condition is non-zero (and its second, if any, otherwise).
    If,
    /// Runs its body as long as the condition is non-zero (checked before each iteration).
    While,
    /// Runs body `n` when the condition is `n`; nothing when it is out of range.
    Switch,
}

impl ConditionalType {
    fn to_driver(self) -> driver::CUgraphConditionalNodeType {
        match self {
            ConditionalType::If => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            ConditionalType::While => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
            ConditionalType::Switch => driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
        }
    }

    /// The kind of a conditional node this crate made (so one of the three).
    pub(super) fn from_driver(kind: driver::CUgraphConditionalNodeType) -> ConditionalType {
        ConditionalType::known(kind).unwrap_or(ConditionalType::If)
    }

    /// The kind the driver reports, `None` for a kind this crate does not know.
    fn known(kind: driver::CUgraphConditionalNodeType) -> Option<ConditionalType> {
        match kind {
            driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF => Some(ConditionalType::If),
            driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE => Some(ConditionalType::While),
            driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH => Some(ConditionalType::Switch),
            _ => None,
        }
    }

    /// cuda.core's name of the kind (`ConditionalNode.cond_type`): `"if"`, `"while"` or
    /// `"switch"` (an if-else node is an `"if"` with two branches).
    pub fn name(self) -> &'static str {
        match self {
            ConditionalType::If => "if",
            ConditionalType::While => "while",
            ConditionalType::Switch => "switch",
        }
    }
}

/// A conditional node's parameters as the driver reports them (`cuGraphNodeGetParams`, CUDA
/// 13.2+ drivers), for nodes this crate did not add (recorded into a capture, or added to a
/// graph, by raw driver calls of other code): `Ok(None)` when the driver cannot
/// report them (older than 13.2, like `cuda.core`, which then knows neither the type nor the
/// branches) or reports a kind this crate does not know.
///
/// The caller holds the hierarchy's lock and has checked that `node` is a live conditional node
/// of `graph`.
pub(super) fn read_conditional(graph: driver::CUgraph, node: driver::CUgraphNode) -> Result<Option<ConditionalInfo>> {
    // SAFETY: an all-zero CUgraphNodeParams is valid plain data (the reserved fields must be
    // zero); the driver fills it in.
    let mut params: driver::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    // SAFETY: the node is live (the caller's lock and check); the out-pointer is a local of the
    // type the call fills.
    let status = unsafe { driver::cuGraphNodeGetParams(node, &mut params) };
    match status.check("cuGraphNodeGetParams") {
        Ok(()) => {}
        // Not in this driver (it is older than 13.2): the documented fallback.
        Err(e) if e.load_error().is_some() => return Ok(None),
        Err(e) => return Err(e),
    }
    if params.type_ != driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL {
        return Err(CudaError::InvalidState(format!(
            "cuGraphNodeGetParams reported node type {} for a conditional node",
            params.type_.0
        )));
    }
    // SAFETY: the driver reported a conditional node, whose parameters are the union's
    // `conditional` member.
    let p = unsafe { params.__bindgen_anon_1.conditional };
    if ConditionalType::known(p.type_).is_none() {
        return Ok(None);
    }
    let size = usize::try_from(p.size)
        .map_err(|_| CudaError::InvalidState(format!("the driver reported {} conditional bodies", p.size)))?;
    let bodies = if size == 0 {
        Vec::new()
    } else if p.phGraph_out.is_null() {
        return Err(CudaError::InvalidState(format!(
            "the driver reported {size} conditional bodies but no array of them"
        )));
    } else {
        // SAFETY: the driver returned `size` body graphs in an array it owns while the node
        // lives (it does: the caller holds the lock under which nodes are destroyed); copied out
        // now.
        unsafe { std::slice::from_raw_parts(p.phGraph_out, size) }.to_vec()
    };
    if bodies.iter().any(|b| b.is_null()) {
        return Err(CudaError::InvalidState(
            "the driver reported a null conditional body".into(),
        ));
    }
    Ok(Some(ConditionalInfo {
        condition: p.handle,
        kind: p.type_,
        graph,
        bodies,
    }))
}

/// What conditional node `h` of `graph` (live, under the hierarchy's lock) was made with: what
/// the driver reports when it can (CUDA 13.2+: what the node owns now, whatever the registry
/// says), else the registry's entry for it (kept exact by `freed`: entries of nodes the driver
/// freed are forgotten with them, so an entry found here is the node's own even when the driver
/// gave it a freed node's address); `None` when neither knows (a node this crate did not add,
/// on an older driver: nothing of its bodies was ever handed out, so nothing below them is
/// registered either).
pub(super) fn conditional_info(
    reg: &Registry,
    graph: driver::CUgraph,
    h: driver::CUgraphNode,
) -> Result<Option<ConditionalInfo>> {
    if let Some(info) = read_conditional(graph, h)? {
        return Ok(Some(info));
    }
    Ok(reg.conditionals.get(&(h as usize)).cloned())
}

/// A conditional node and its body graphs, to fill with nodes.
#[derive(Debug, Clone)]
pub struct ConditionalNode {
    node: GraphNode,
    /// At least one (the node adders refuse a count of 0).
    first: GraphDefinition,
    rest: Vec<GraphDefinition>,
}

impl ConditionalNode {
    fn new(node: GraphNode, branches: Vec<GraphDefinition>) -> Result<ConditionalNode> {
        let mut branches = branches.into_iter();
        let first = branches
            .next()
            .ok_or_else(|| CudaError::InvalidArgument("a conditional node has at least one body".into()))?;
        Ok(ConditionalNode {
            node,
            first,
            rest: branches.collect(),
        })
    }

    /// The conditional node itself.
    pub fn node(&self) -> &GraphNode {
        &self.node
    }

    /// Every body, in order (for if-else: then, else; for switch: body `n` at index `n`).
    pub fn branches(&self) -> Vec<&GraphDefinition> {
        std::iter::once(&self.first).chain(&self.rest).collect()
    }

    /// Body `n` (switch), if there is one.
    pub fn branch(&self, n: usize) -> Option<&GraphDefinition> {
        match n {
            0 => Some(&self.first),
            _ => self.rest.get(n - 1),
        }
    }

    /// The body run when the condition is non-zero (if, if-else).
    pub fn then(&self) -> &GraphDefinition {
        &self.first
    }
    /// The body run when the condition is zero (if-else only).
    pub fn else_(&self) -> Option<&GraphDefinition> {
        self.rest.first()
    }
    /// The loop body (while).
    pub fn body(&self) -> &GraphDefinition {
        &self.first
    }
}

/// Adds a conditional node after `deps` to `graph`, records what it was made with in `reg`, and
/// returns its handle and body graphs.
pub(crate) fn add_conditional_node(
    reg: &mut Registry,
    graph: driver::CUgraph,
    deps: &[driver::CUgraphNode],
    condition: GraphCondition,
    kind: ConditionalType,
    size: u32,
) -> Result<(driver::CUgraphNode, Vec<driver::CUgraph>)> {
    if size == 0 {
        return Err(CudaError::InvalidArgument("switch: count must be at least 1".into()));
    }
    let context = current_context("conditional node")?;
    // SAFETY: an all-zero CUgraphNodeParams is the documented starting point; the conditional
    // member is filled in below.
    let mut params: driver::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = driver::CUDA_CONDITIONAL_NODE_PARAMS {
        handle: condition.handle,
        type_: kind.to_driver(),
        size,
        phGraph_out: std::ptr::null_mut(),
        ctx: context,
    };
    let mut node: driver::CUgraphNode = std::ptr::null_mut();
    // SAFETY: graph and dependencies are live; params is initialised for a conditional node.
    unsafe {
        driver::cuGraphAddNode(
            &mut node,
            graph,
            deps.as_ptr(),
            std::ptr::null(),
            deps.len(),
            &mut params,
        )
    }
    .check("cuGraphAddNode")?;
    // SAFETY: the driver filled phGraph_out with `size` body graphs owned by the node.
    let bodies = unsafe {
        let out = params.__bindgen_anon_1.conditional.phGraph_out;
        std::slice::from_raw_parts(out, size as usize).to_vec()
    };
    reg.conditionals.insert(
        node as usize,
        ConditionalInfo {
            condition: condition.handle,
            kind: kind.to_driver(),
            graph,
            bodies: bodies.clone(),
        },
    );
    Ok((node, bodies))
}

macro_rules! conditional_adders {
    ($ty:ty) => {
        impl $ty {
            /// An if node: its body runs when `condition` is non-zero.
            pub fn if_then(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::If, 1)
            }

            /// An if-else node: the first body runs when `condition` is non-zero, the second
            /// when it is zero (CUDA 12.8+ drivers).
            pub fn if_else(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::If, 2)
            }

            /// A while node: its body runs as long as `condition` is non-zero (checked first).
            pub fn while_loop(&self, condition: &GraphCondition) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::While, 1)
            }

            /// A switch node with `count` bodies: body `n` runs when `condition` is `n`
            /// (CUDA 12.8+ drivers).
            pub fn switch(&self, condition: &GraphCondition, count: u32) -> Result<ConditionalNode> {
                self.conditional(condition, ConditionalType::Switch, count)
            }

            fn conditional(
                &self,
                condition: &GraphCondition,
                kind: ConditionalType,
                size: u32,
            ) -> Result<ConditionalNode> {
                let append = self.append();
                let mut bodies = Vec::new();
                let node = append.add(&[], nothing, |reg, g, deps| {
                    let (node, b) = add_conditional_node(reg, g, deps, *condition, kind, size)?;
                    bodies = b;
                    Ok(node)
                })?;
                let branches = bodies
                    .into_iter()
                    .map(|b| GraphDefinition {
                        inner: GraphInner::nested(append.graph, node.node, b),
                    })
                    .collect();
                ConditionalNode::new(node, branches)
            }
        }
    };
}

conditional_adders!(GraphDefinition);
conditional_adders!(GraphNode);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditional_types_read_back_from_the_driver_with_cuda_core_names() {
        use driver::CUgraphConditionalNodeType as K;
        for (k, t, name) in [
            (K::CU_GRAPH_COND_TYPE_IF, ConditionalType::If, "if"),
            (K::CU_GRAPH_COND_TYPE_WHILE, ConditionalType::While, "while"),
            (K::CU_GRAPH_COND_TYPE_SWITCH, ConditionalType::Switch, "switch"),
        ] {
            assert_eq!(ConditionalType::known(k), Some(t));
            assert_eq!(t.to_driver(), k);
            assert_eq!(t.name(), name);
        }
        // A kind a newer driver may add is not mistaken for one of these.
        assert_eq!(ConditionalType::known(K(99)), None);
    }
}
