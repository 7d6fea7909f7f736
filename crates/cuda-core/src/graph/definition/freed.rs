//! What the driver frees with a node, and the registry entries that must go with it.
//!
//! The registry names nodes and graphs by their driver handles: `live` (node generations),
//! `conditionals` (a conditional node's bodies, by node), `recorded` and `recorded_seen` (what
//! captures recorded). The driver frees a node's nested graphs with it: destroying a conditional
//! node frees its bodies and everything in them, destroying a child-graph node frees its copy of
//! the child, and giving a child-graph node another graph (`update_child`) frees the copy it
//! replaces, with the nodes of all of them. The driver may then give a new node or graph the
//! address of a freed one; an entry left behind would name the new one as the freed one (a new
//! conditional node would be handed the freed bodies of the old, and nodes added to them would
//! reach the driver through freed graphs). So before such a call, [`Freed`] collects, while they
//! are still live, every graph and node nested in what is freed (asking the driver: the
//! registry alone does not know which conditional nodes a child graph's copy holds), and once
//! the call succeeded, [`Freed::forget`] removes every entry that names one of them.
//!
//! (The hierarchy's other ways of losing graphs need nothing here: a root graph is destroyed with
//! its registry, once no graph nested in it is left; a capture invalidated into one of its graphs
//! marks the whole hierarchy broken, refused from then on; executable graphs' updates, copies
//! and instantiation free nothing of the definition.)
//!
//! Graphs and nodes handed out before stay refused through their own checks: a graph nested in
//! a freed one names, up its owner chain, the destroyed node (whose generation is gone) or the
//! child-graph node given another graph (its `child_gen` changed), and a node's graph is checked
//! before the node.

use super::*;
use std::collections::HashSet;

/// The graphs and nodes the driver frees with a node or a replaced child graph.
#[derive(Debug, Default)]
pub(super) struct Freed {
    graphs: HashSet<usize>,
    nodes: HashSet<usize>,
}

impl Freed {
    /// What destroying node `h` of `graph` frees: `h`, and every graph and node nested in it.
    /// The caller holds the hierarchy's lock and checked that `h` is live.
    pub(super) fn with_node(reg: &Registry, graph: driver::CUgraph, h: driver::CUgraphNode) -> Result<Freed> {
        let mut freed = Freed::default();
        freed.nodes.insert(h as usize);
        freed.collect(reg, owned_graphs(reg, graph, h)?)?;
        Ok(freed)
    }

    /// What giving child-graph node `h` another graph frees: the copy it runs now, and every
    /// graph and node nested in it. The caller holds the hierarchy's lock and checked that `h` is
    /// a live child-graph node.
    pub(super) fn child_of(h: driver::CUgraphNode, reg: &Registry) -> Result<Freed> {
        let mut freed = Freed::default();
        freed.collect(reg, vec![child_graph(h)?])?;
        Ok(freed)
    }

    /// The graphs the registry alone knows to lie below `bodies`: the bodies, the bodies of the
    /// conditional nodes recorded in them, and so on (no driver call: usable whatever the
    /// driver still holds).
    pub(super) fn known_below(reg: &Registry, bodies: &[driver::CUgraph]) -> Freed {
        let mut freed = Freed::default();
        let mut pending: Vec<driver::CUgraph> = bodies.to_vec();
        while let Some(body) = pending.pop() {
            if !freed.graphs.insert(body as usize) {
                continue;
            }
            for info in reg.conditionals.values() {
                if info.graph == body {
                    pending.extend(info.bodies.iter().copied());
                }
            }
        }
        freed
    }

    /// Adds the graphs `pending`, and every graph and node nested in them, asking the driver
    /// (the graphs are live: the caller holds the hierarchy's lock, before the call that frees
    /// them).
    fn collect(&mut self, reg: &Registry, mut pending: Vec<driver::CUgraph>) -> Result<()> {
        while let Some(graph) = pending.pop() {
            if !self.graphs.insert(graph as usize) {
                continue;
            }
            let nodes = node_array(|out, n| {
                // SAFETY: the graph is live (nested in a live node, under the hierarchy's lock);
                // out is null (count only) or has room for n nodes.
                unsafe { driver::cuGraphGetNodes(graph, out, n) }.check("cuGraphGetNodes")
            })?;
            for node in nodes {
                self.nodes.insert(node as usize);
                pending.extend(owned_graphs(reg, graph, node)?);
            }
        }
        Ok(())
    }

    /// Whether a capture records into one of the graphs (freeing it would pull the graph from
    /// under the capture).
    pub(super) fn capturing(&self, reg: &Registry) -> bool {
        reg.capturing.iter().any(|g| self.graphs.contains(g))
    }

    /// Forgets every registry entry that names a freed node or graph (the driver freed them: see
    /// the module documentation). A node registered again at a freed node's address gets a new
    /// generation, so handles of the freed one stay refused.
    pub(super) fn forget(&self, reg: &mut Registry) {
        reg.live.retain(|node, _| !self.nodes.contains(node));
        reg.conditionals
            .retain(|node, info| !self.nodes.contains(node) && !self.graphs.contains(&(info.graph as usize)));
        reg.recorded
            .retain(|(graph, node)| !self.graphs.contains(graph) && !self.nodes.contains(&(node.handle as usize)));
        reg.recorded_seen.retain(|node| !self.nodes.contains(node));
    }
}

/// The graph child-graph node `h` (live, under the hierarchy's lock) runs.
pub(super) fn child_graph(h: driver::CUgraphNode) -> Result<driver::CUgraph> {
    let mut child: driver::CUgraph = std::ptr::null_mut();
    // SAFETY: the node is live and a child-graph node (the caller's check); out-pointer to a
    // local.
    unsafe { driver::cuGraphChildGraphNodeGetGraph(h, &mut child) }.check("cuGraphChildGraphNodeGetGraph")?;
    Ok(child)
}

/// The graphs node `h` of `graph` (live, under the hierarchy's lock) owns: a child-graph node's
/// copy, a conditional node's bodies (see [`conditional_info`](super::conditional::conditional_info));
/// none for other nodes.
fn owned_graphs(reg: &Registry, graph: driver::CUgraph, h: driver::CUgraphNode) -> Result<Vec<driver::CUgraph>> {
    use driver::CUgraphNodeType as T;
    Ok(match node_type(h)? {
        T::CU_GRAPH_NODE_TYPE_GRAPH => vec![child_graph(h)?],
        T::CU_GRAPH_NODE_TYPE_CONDITIONAL => super::conditional::conditional_info(reg, graph, h)?
            .map(|info| info.bodies)
            .unwrap_or_default(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(n: usize) -> driver::CUgraph {
        n as driver::CUgraph
    }

    fn node(n: usize) -> driver::CUgraphNode {
        n as driver::CUgraphNode
    }

    fn info(graph_: usize, bodies: &[usize]) -> ConditionalInfo {
        ConditionalInfo {
            condition: 1,
            kind: driver::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            graph: graph(graph_),
            bodies: bodies.iter().map(|b| graph(*b)).collect(),
        }
    }

    /// A registry of root 0x100 holding conditional node 0x10 (bodies 0x200, 0x201), a
    /// conditional node 0x20 in body 0x200 (body 0x300), a child-graph node 0x30 of the root
    /// whose copy 0x400 holds conditional node 0x40 (body 0x500), and an unrelated conditional
    /// node 0x50 of the root (body 0x600).
    fn registry() -> Registry {
        let mut reg = Registry::default();
        for (n, g, bodies) in [
            (0x10, 0x100, &[0x200, 0x201][..]),
            (0x20, 0x200, &[0x300][..]),
            (0x40, 0x400, &[0x500][..]),
            (0x50, 0x100, &[0x600][..]),
        ] {
            reg.conditionals.insert(n, info(g, bodies));
        }
        for n in [0x10, 0x20, 0x21, 0x30, 0x40, 0x41, 0x50] {
            let r = reg.register(node(n));
            reg.recorded.push((0x100, r));
            reg.recorded_seen.insert(n);
        }
        reg
    }

    fn freed(graphs: &[usize], nodes: &[usize]) -> Freed {
        Freed {
            graphs: graphs.iter().copied().collect(),
            nodes: nodes.iter().copied().collect(),
        }
    }

    #[test]
    fn a_destroyed_conditional_takes_every_entry_below_it_along() {
        let mut reg = registry();
        let old = reg.register(node(0x20));
        // Destroying 0x10 frees its bodies 0x200 and 0x201, node 0x20 and 0x21 in 0x200, and
        // 0x20's body 0x300.
        freed(&[0x200, 0x201, 0x300], &[0x10, 0x20, 0x21]).forget(&mut reg);
        let mut left: Vec<usize> = reg.conditionals.keys().copied().collect();
        left.sort_unstable();
        assert_eq!(left, [0x40, 0x50], "entries of nodes of other graphs stay");
        for n in [0x10, 0x20, 0x21] {
            assert!(!reg.live.contains_key(&n), "{n:#x} is no longer live");
            assert!(!reg.recorded_seen.contains(&n));
            assert!(reg.recorded.iter().all(|(_, r)| r.handle != node(n)));
        }
        assert!(reg.live.contains_key(&0x30) && reg.recorded_seen.contains(&0x30));
        // A node the driver makes at a freed address is a new node: handles of the old one
        // (and graphs owned by it) stay refused.
        let new = reg.register(node(0x20));
        assert!(reg.is_live(new));
        assert!(!reg.is_live(old), "the freed node's generation is not handed out again");
    }

    #[test]
    fn a_replaced_or_destroyed_child_copy_takes_the_entries_of_its_nodes_along() {
        // What the driver walk finds in the child copy 0x400: nodes 0x40 and 0x41, and 0x40's
        // body 0x500. The entry of 0x40 goes, by its node and by its graph.
        for nodes in [&[0x40, 0x41][..], &[][..]] {
            let mut reg = registry();
            freed(&[0x400, 0x500], nodes).forget(&mut reg);
            assert!(
                !reg.conditionals.contains_key(&0x40),
                "the entry of a node in the copy goes"
            );
            assert_eq!(reg.conditionals.len(), 3);
        }
        // Destroying the child-graph node itself frees it too.
        let mut reg = registry();
        freed(&[0x400, 0x500], &[0x30, 0x40, 0x41]).forget(&mut reg);
        assert!(!reg.conditionals.contains_key(&0x40));
        assert!(!reg.live.contains_key(&0x30) && !reg.live.contains_key(&0x40));
        assert!(reg.live.contains_key(&0x10) && reg.live.contains_key(&0x50));
    }

    #[test]
    fn the_registry_alone_follows_bodies_through_nested_conditionals() {
        let reg = registry();
        let below = Freed::known_below(&reg, &[graph(0x200), graph(0x201)]);
        let mut graphs: Vec<usize> = below.graphs.iter().copied().collect();
        graphs.sort_unstable();
        assert_eq!(graphs, [0x200, 0x201, 0x300]);
        assert!(below.nodes.is_empty());
        assert!(Freed::known_below(&reg, &[]).graphs.is_empty());
    }

    #[test]
    fn a_capture_into_any_freed_graph_is_seen() {
        let mut reg = registry();
        let below = freed(&[0x200, 0x300], &[0x10]);
        assert!(!below.capturing(&reg));
        reg.capturing.push(0x600);
        assert!(!below.capturing(&reg), "a capture into another graph");
        reg.capturing.push(0x300);
        assert!(below.capturing(&reg), "a capture into a nested body");
    }
}
