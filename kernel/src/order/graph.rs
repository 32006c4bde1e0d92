//! A batch's conflict graph: the index's edges kept whole, for planning and explaining (levels,
//! waves, the critical path). Execution never needs it: the scheduler acts on each call's edges
//! as they are found.

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::Direction;

use super::index::{ConflictIndex, Edge};
use crate::access::Access;

/// A batch's conflict graph: nodes are calls by position, edges are [`Edge`]s.
#[derive(Debug, Default)]
pub struct ConflictGraph {
    graph: StableDiGraph<usize, Edge>,
    nodes: Vec<NodeIndex>,
    index: ConflictIndex,
    scratch: Vec<Edge>,
}

impl ConflictGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next call (position = number of calls added before) and returns its position.
    pub fn add_call(&mut self, accesses: &[Access]) -> usize {
        let pos = self.nodes.len();
        let node = self.graph.add_node(pos);
        self.nodes.push(node);
        self.scratch.clear();
        self.index.insert(pos, accesses, &mut self.scratch);
        for e in self.scratch.drain(..) {
            self.graph.add_edge(self.nodes[e.from], node, e);
        }
        pos
    }

    /// Number of calls.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no call was added.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All edges, ordered by target then source.
    pub fn edges(&self) -> Vec<&Edge> {
        let mut edges: Vec<&Edge> = self.graph.edge_weights().collect();
        edges.sort_by_key(|e| (e.to, e.from));
        edges
    }

    /// The positions of the calls `call` waits for directly, ascending.
    pub fn predecessors(&self, call: usize) -> Vec<usize> {
        let mut p: Vec<usize> = self
            .graph
            .edges_directed(self.nodes[call], Direction::Incoming)
            .map(|e| e.weight().from)
            .collect();
        p.sort_unstable();
        p
    }

    /// The positions of the calls that wait directly for `call`, ascending.
    pub fn successors(&self, call: usize) -> Vec<usize> {
        let mut s: Vec<usize> = self
            .graph
            .edges_directed(self.nodes[call], Direction::Outgoing)
            .map(|e| e.weight().to)
            .collect();
        s.sort_unstable();
        s
    }

    /// For each call, the number of calls on its longest chain of predecessors.
    pub fn levels(&self) -> Vec<usize> {
        let mut level = vec![0usize; self.nodes.len()];
        // Edges always go from an earlier position to a later one: positions are a topological
        // order.
        for to in 0..self.nodes.len() {
            for e in self
                .graph
                .edges_directed(self.nodes[to], Direction::Incoming)
            {
                level[to] = level[to].max(level[e.weight().from] + 1);
            }
        }
        level
    }

    /// The calls grouped by level: `waves()[k]` holds the calls whose longest chain of
    /// predecessors has `k` calls. Informative only: execution never waits for a wave.
    pub fn waves(&self) -> Vec<Vec<usize>> {
        let levels = self.levels();
        let depth = levels.iter().max().map_or(0, |m| m + 1);
        let mut waves = vec![Vec::new(); depth];
        for (call, l) in levels.into_iter().enumerate() {
            waves[l].push(call);
        }
        waves
    }

    /// A longest chain of calls (by count), first to last; the earliest such chain.
    pub fn critical_path(&self) -> Vec<usize> {
        let levels = self.levels();
        let Some(mut at) = (0..levels.len()).max_by_key(|i| (levels[*i], std::cmp::Reverse(*i)))
        else {
            return Vec::new();
        };
        let mut path = vec![at];
        while levels[at] > 0 {
            let prev = self
                .graph
                .edges_directed(self.nodes[at], Direction::Incoming)
                .map(|e| e.weight().from)
                .filter(|p| levels[*p] + 1 == levels[at])
                .min();
            match prev {
                Some(p) => {
                    path.push(p);
                    at = p;
                }
                None => break,
            }
        }
        path.reverse();
        path
    }
}
