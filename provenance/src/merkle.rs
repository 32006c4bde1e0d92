//! The log's records as the leaves of an RFC 6962 Merkle tree.
//!
//! Takes in: lines (a record's bytes without its newline). Hands on: leaf hashes, tree heads and
//! inclusion proofs, exactly as RFC 6962 section 2.1 (and RFC 9162 section 2.1) define them:
//!
//! - leaf hash: `SHA-256(0x00 || line)`;
//! - interior node: `SHA-256(0x01 || left || right)`;
//! - the tree head of `n` leaves: the leaf hash for one leaf; for more, split at `k`, the largest
//!   power of two below `n`, and hash the node of the two heads; the empty tree's head is
//!   `SHA-256("")`.
//!
//! [`Frontier`] keeps a growing tree in O(log n) space — the heads of the perfect subtrees that
//! `n`'s binary digits name, largest first — so an append costs one leaf hash and, amortized, one
//! node hash. [`inclusion_proof`] and [`verify_inclusion`] are the audit paths of RFC 6962
//! section 2.1.1 and their check (RFC 9162 section 2.1.3.2).

use sha2::{Digest, Sha256};

/// A SHA-256 hash.
pub type Hash = [u8; 32];

/// The leaf hash of a line: `SHA-256(0x00 || line)`.
pub fn leaf_hash(line: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(line);
    h.finalize().into()
}

/// An interior node: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The head of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two smaller than `n` (`n >= 2`).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// A growing tree, kept as the heads of its perfect subtrees (O(log n) hashes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Heads of perfect subtrees, largest (leftmost) first; their sizes are the set bits of
    /// `size`, from the highest.
    heads: Vec<Hash>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Leaves so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends a leaf by its line.
    pub fn push_line(&mut self, line: &[u8]) {
        self.push_leaf(leaf_hash(line));
    }

    /// Appends a leaf by its leaf hash.
    pub fn push_leaf(&mut self, leaf: Hash) {
        let mut h = leaf;
        let mut s = self.size;
        // Each trailing one bit of the old size is a perfect subtree the new leaf completes.
        while s & 1 == 1 {
            let left = self.heads.pop().unwrap_or_default();
            h = node_hash(&left, &h);
            s >>= 1;
        }
        self.heads.push(h);
        self.size += 1;
    }

    /// The tree head of the leaves so far.
    pub fn root(&self) -> Hash {
        let mut it = self.heads.iter().rev();
        let Some(last) = it.next() else {
            return empty_root();
        };
        it.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

/// The tree head of a list of leaf hashes (RFC 6962's `MTH`).
pub fn root_of(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => empty_root(),
        [one] => *one,
        _ => match leaves.split_at_checked(split(leaves.len())) {
            Some((left, right)) => node_hash(&root_of(left), &root_of(right)),
            None => empty_root(), // split(n) < n: never
        },
    }
}

/// The audit path of leaf `index` in the tree of `leaves` (RFC 6962's `PATH(m, D[n])`), nearest
/// sibling first. `None` when `index` is not a leaf of the tree.
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    fn path(leaves: &[Hash], m: usize, out: &mut Vec<Hash>) {
        let n = leaves.len();
        if n <= 1 {
            return;
        }
        let k = split(n);
        let Some((left, right)) = leaves.split_at_checked(k) else {
            return; // split(n) < n: never
        };
        if m < k {
            path(left, m, out);
            out.push(root_of(right));
        } else {
            path(right, m - k, out);
            out.push(root_of(left));
        }
    }
    let mut out = Vec::new();
    path(leaves, index, &mut out);
    Some(out)
}

/// Checks an audit path: that `leaf` is leaf `index` of the tree of `size` leaves whose head is
/// `root` (RFC 9162 section 2.1.3.2).
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s_n == 0 {
            return false;
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    s_n == 0 && r == *root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("line {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn split_is_the_largest_power_of_two_below_n() {
        for (n, k) in [(2, 1), (3, 2), (4, 2), (5, 4), (8, 4), (9, 8), (1025, 1024)] {
            assert_eq!(split(n), k, "n = {n}");
        }
    }

    #[test]
    fn the_frontier_agrees_with_the_recursive_definition_at_every_size() {
        let all = leaves(130);
        let mut f = Frontier::new();
        assert_eq!(f.root(), root_of(&[]));
        for (i, l) in all.iter().enumerate() {
            f.push_leaf(*l);
            assert_eq!(f.root(), root_of(&all[..=i]), "size {}", i + 1);
            assert_eq!(f.heads.len(), (i + 1).count_ones() as usize);
        }
    }

    #[test]
    fn every_audit_path_verifies_and_a_wrong_one_does_not() {
        for n in 1..40 {
            let all = leaves(n);
            let root = root_of(&all);
            for i in 0..n {
                let p = inclusion_proof(&all, i).unwrap();
                assert!(verify_inclusion(i as u64, n as u64, &all[i], &p, &root));
                let other = (i + 1) % n;
                if other != i {
                    assert!(!verify_inclusion(
                        other as u64,
                        n as u64,
                        &all[i],
                        &p,
                        &root
                    ));
                }
                assert!(!verify_inclusion(i as u64, n as u64, &all[i], &p, &[0; 32]));
                if let Some((first, rest)) = p.split_first() {
                    let mut bent = vec![node_hash(first, first)];
                    bent.extend_from_slice(rest);
                    assert!(!verify_inclusion(i as u64, n as u64, &all[i], &bent, &root));
                }
            }
            assert!(inclusion_proof(&all, n).is_none());
        }
    }
}
