//! The reference builder the conflict index is held to: every pair of calls compared, every
//! conflicting pair kept as an edge. Quadratic; for tests and benchmarks.

use super::index::{Edge, EdgeKind};
use crate::access::{Access, Pattern};

/// The reference builder: compares every pair of calls, and keeps every conflicting pair as an
/// edge (no edge is left out). Quadratic; for tests and benchmarks.
pub fn naive_edges(calls: &[Vec<Access>]) -> Vec<Edge> {
    let mut edges = Vec::new();
    for (j, later) in calls.iter().enumerate() {
        for (i, earlier) in calls.iter().take(j).enumerate() {
            if let Some((resource, kind)) = first_conflict(earlier, later) {
                edges.push(Edge {
                    from: i,
                    to: j,
                    resource,
                    kind,
                });
            }
        }
    }
    edges
}

/// The first conflict between two calls' accesses, if any.
pub fn first_conflict(earlier: &[Access], later: &[Access]) -> Option<(Pattern, EdgeKind)> {
    for b in later {
        for a in earlier {
            if let Some(kind) = EdgeKind::between(a.mode(), b.mode()) {
                if a.resource.overlaps(&b.resource) {
                    return Some((b.resource.clone(), kind));
                }
            }
        }
    }
    None
}
