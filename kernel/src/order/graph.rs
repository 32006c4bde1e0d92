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

    /// An empty graph with room for `calls` calls (about as many edges, three accesses each),
    /// so that planning a batch of known size does not grow its tables call by call.
    pub fn with_capacity(calls: usize) -> Self {
        ConflictGraph {
            graph: StableDiGraph::with_capacity(calls, calls),
            nodes: Vec::with_capacity(calls),
            index: ConflictIndex::with_capacity(calls * 3),
            scratch: Vec::new(),
        }
    }

    /// Adds the next call (position = number of calls added before) and returns its position.
    pub fn add_call(&mut self, accesses: &[Access]) -> usize {
        let pos = self.nodes.len();
        let node = self.graph.add_node(pos);
        self.nodes.push(node);
        self.scratch.clear();
        self.index.insert(pos, accesses, &mut self.scratch);
        for e in self.scratch.drain(..) {
            // The index finds only earlier calls, each already a node.
            if let Some(&from) = self.nodes.get(e.from) {
                self.graph.add_edge(from, node, e);
            }
        }
        pos
    }

    /// The edges into or out of `call` (none for a position past the end).
    fn edges_of(&self, call: usize, direction: Direction) -> impl Iterator<Item = &Edge> + '_ {
        self.nodes
            .get(call)
            .into_iter()
            .flat_map(move |&n| self.graph.edges_directed(n, direction))
            .map(|e| e.weight())
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
            .edges_of(call, Direction::Incoming)
            .map(|e| e.from)
            .collect();
        p.sort_unstable();
        p
    }

    /// The positions of the calls that wait directly for `call`, ascending.
    pub fn successors(&self, call: usize) -> Vec<usize> {
        let mut s: Vec<usize> = self
            .edges_of(call, Direction::Outgoing)
            .map(|e| e.to)
            .collect();
        s.sort_unstable();
        s
    }

    /// For each call, the number of calls on its longest chain of predecessors.
    pub fn levels(&self) -> Vec<usize> {
        let mut level: Vec<usize> = Vec::with_capacity(self.nodes.len());
        // Edges always go from an earlier position to a later one: positions are a topological
        // order, so each predecessor's level is known when its successor's is taken.
        for to in 0..self.nodes.len() {
            let l = self
                .edges_of(to, Direction::Incoming)
                .filter_map(|e| level.get(e.from))
                .map(|l| l + 1)
                .max()
                .unwrap_or(0);
            level.push(l);
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
            if let Some(wave) = waves.get_mut(l) {
                wave.push(call);
            }
        }
        waves
    }

    /// A longest chain of calls (by count), first to last; the earliest such chain.
    pub fn critical_path(&self) -> Vec<usize> {
        let levels = self.levels();
        let level = |call: usize| levels.get(call).copied().unwrap_or(0);
        let Some(mut at) = (0..levels.len()).max_by_key(|&i| (level(i), std::cmp::Reverse(i)))
        else {
            return Vec::new();
        };
        let mut path = vec![at];
        while level(at) > 0 {
            let prev = self
                .edges_of(at, Direction::Incoming)
                .map(|e| e.from)
                .filter(|&p| level(p) + 1 == level(at))
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
