//! Helpers shared by the integration tests.
#![allow(dead_code)]

/// The transitive closure of a DAG whose edges go from lower to higher positions:
/// `reach[i][j]` is true when a path leads from `i` to `j`.
pub fn reachability(n: usize, edges: impl IntoIterator<Item = (usize, usize)>) -> Vec<Vec<bool>> {
    let mut succ = vec![Vec::new(); n];
    for (a, b) in edges {
        succ[a].push(b);
    }
    let mut reach = vec![vec![false; n]; n];
    for i in (0..n).rev() {
        for &j in &succ[i] {
            reach[i][j] = true;
            let row = reach[j].clone();
            for (k, r) in row.into_iter().enumerate() {
                if r {
                    reach[i][k] = true;
                }
            }
        }
    }
    reach
}
