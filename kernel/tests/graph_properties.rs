//! Property tests of the conflict graph: for random tools, inputs and batches,
//! - safety: every conflicting pair is joined by a path in submission order;
//! - no false waits: every edge joins a truly conflicting pair, with a kind and resource that
//!   one of its conflicting access pairs gives;
//! - the incremental builder reaches exactly what the naive all-pairs builder reaches;
//! - templating keeps input values literal.
//!
//! Case counts follow proptest's default (256) unless `PROPTEST_CASES` says otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use proptest::prelude::*;
use serde_json::json;
use sluice_kernel::access::{Access, AccessPlan, Normalizers, Pattern};
use sluice_kernel::model::{EffectKind, Manifest};
use sluice_kernel::order::{naive_edges, ConflictGraph, ConflictIndex, Edge, EdgeKind};

/// Resources over a small space so that collisions are frequent: exact keys, prefixes, general
/// wildcards and the universal pattern.
fn resource() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        6 => "kv:[abc]{1,2}",
        2 => "kv:[abc]?\\*",
        1 => "kv:[ab?*]{1,3}",
        1 => "(fs|kv):\\*",
        1 => Just("*".to_string()),
        1 => "[kv:ab*?]{0,4}",
    ]
    .prop_map(|s| Pattern::parse(&s).unwrap())
}

fn access() -> impl Strategy<Value = Access> {
    (prop::sample::select(EffectKind::ALL.to_vec()), resource())
        .prop_map(|(kind, r)| Access::new(kind, r))
}

fn batch() -> impl Strategy<Value = Vec<Vec<Access>>> {
    prop::collection::vec(prop::collection::vec(access(), 0..4), 0..24)
}

fn check_graph(calls: &[Vec<Access>], edges: &[Edge]) -> Result<(), TestCaseError> {
    let n = calls.len();
    let reach = support::reachability(n, edges.iter().map(|e| (e.from, e.to)));
    let naive = naive_edges(calls);
    let mut pairs: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
    pairs.sort_unstable();
    let before = pairs.len();
    pairs.dedup();
    prop_assert_eq!(
        pairs.len(),
        before,
        "an edge is recorded twice for one pair"
    );
    for e in edges {
        prop_assert!(e.from < e.to, "edge {:?} goes backwards", (e.from, e.to));
        // The edge's kind and resource come from a real conflicting access pair.
        let justified = calls[e.from].iter().any(|a| {
            calls[e.to].iter().any(|b| {
                EdgeKind::between(a.mode(), b.mode()) == Some(e.kind)
                    && a.resource.overlaps(&b.resource)
                    && e.resource.overlaps(&a.resource)
                    && e.resource.overlaps(&b.resource)
            })
        });
        prop_assert!(
            justified,
            "edge {} -> {} ({} {}) is a false wait",
            e.from,
            e.to,
            e.kind,
            e.resource
        );
    }
    for e in &naive {
        prop_assert!(
            reach[e.from][e.to],
            "conflicting pair {} -> {} is not ordered",
            e.from,
            e.to
        );
    }
    // Exactly the naive builder's reachability.
    let naive_reach = support::reachability(n, naive.iter().map(|e| (e.from, e.to)));
    prop_assert_eq!(reach, naive_reach);
    Ok(())
}

proptest! {
    #[test]
    fn incremental_graph_is_safe_and_exact(calls in batch()) {
        let mut graph = ConflictGraph::new();
        for c in &calls {
            graph.add_call(c);
        }
        let edges: Vec<Edge> = graph.edges().into_iter().cloned().collect();
        check_graph(&calls, &edges)?;
        prop_assert_eq!(graph.len(), calls.len());
        prop_assert_eq!(graph.is_empty(), calls.is_empty());
        // Each call's neighbours are exactly the ends of its edges, ascending.
        for i in 0..calls.len() {
            let mut into: Vec<usize> =
                edges.iter().filter(|e| e.to == i).map(|e| e.from).collect();
            let mut out: Vec<usize> = edges.iter().filter(|e| e.from == i).map(|e| e.to).collect();
            into.sort_unstable();
            out.sort_unstable();
            prop_assert_eq!(graph.predecessors(i), into);
            prop_assert_eq!(graph.successors(i), out);
        }
        // Levels: a call is one past its deepest predecessor.
        let levels = graph.levels();
        for e in &edges {
            prop_assert!(levels[e.to] > levels[e.from]);
        }
        let path = graph.critical_path();
        prop_assert_eq!(path.len(), levels.iter().max().map_or(0, |m| m + 1));
    }

    #[test]
    fn a_reader_is_linked_causally_to_the_last_writer_of_what_it_reads(calls in batch()) {
        // Over exact resources: whenever a call reads a key, the last earlier call that wrote
        // that key (exactly) has a direct read-after-write edge to it, so `why` can follow it.
        let mut graph = ConflictGraph::new();
        for c in &calls {
            graph.add_call(c);
        }
        let edges: Vec<Edge> = graph.edges().into_iter().cloned().collect();
        for (j, later) in calls.iter().enumerate() {
            for r in later.iter().filter(|a| a.mode() == sluice_kernel::model::AccessMode::Read) {
                let Some(key) = r.resource.as_exact() else { continue };
                let writer = (0..j).rev().find(|&i| calls[i].iter().any(|a| {
                    a.mode() == sluice_kernel::model::AccessMode::Write && a.resource.matches(key)
                }));
                let Some(i) = writer else { continue };
                if !calls[i].iter().any(|a| a.resource.as_exact() == Some(key)) {
                    continue; // the last writer wrote through a wildcard: ordering only
                }
                prop_assert!(
                    edges.iter().any(|e| e.from == i && e.to == j && e.kind == EdgeKind::ReadAfterWrite),
                    "call {} reads {} last written by call {}, but no read-after-write edge joins them", j, key, i
                );
            }
        }
    }

    #[test]
    fn forgetting_finished_calls_keeps_the_order_among_live_ones(
        calls in batch(), cut in 0usize..24
    ) {
        // Calls before `cut` finish and are forgotten; the rest must still be ordered among
        // themselves exactly as without forgetting.
        let cut = cut.min(calls.len());
        let mut index = ConflictIndex::new();
        let mut edges = Vec::new();
        for (i, c) in calls[..cut].iter().enumerate() {
            index.insert(i, c, &mut edges);
        }
        index.forget(|c| c < cut);
        let mut live_edges = Vec::new();
        for (i, c) in calls.iter().enumerate().skip(cut) {
            index.insert(i, c, &mut live_edges);
        }
        for e in &live_edges {
            prop_assert!(e.from >= cut, "edge to a forgotten call {}", e.from);
        }
        let shifted: Vec<Edge> = live_edges
            .into_iter()
            .map(|mut e| { e.from -= cut; e.to -= cut; e })
            .collect();
        check_graph(&calls[cut..], &shifted)?;
    }

    #[test]
    fn forgetting_calls_as_they_finish_keeps_every_live_pair_ordered(
        calls in batch(), finishing in prop::collection::vec(any::<u64>(), 24)
    ) {
        // The domain's use: calls are inserted while earlier ones finish, in any order their
        // edges allow, and each finished call is forgotten. Every conflicting pair whose earlier
        // call was still live when the later one arrived must be ordered, and every edge must
        // join a conflicting pair of live calls.
        let mut index = ConflictIndex::new();
        let mut edges: Vec<Edge> = Vec::new();
        let mut finished = vec![false; calls.len()];
        let mut live_at_insert = vec![vec![false; calls.len()]; calls.len()];
        for (i, c) in calls.iter().enumerate() {
            for j in 0..i {
                live_at_insert[i][j] = !finished[j];
            }
            let before = edges.len();
            index.insert(i, c, &mut edges);
            for e in &edges[before..] {
                prop_assert!(!finished[e.from], "edge {} -> {} from a forgotten call", e.from, e.to);
            }
            // Finish, in ascending order, each chosen call whose predecessors have finished.
            let bits = finishing[i % finishing.len()];
            let mut any = false;
            for c in 0..=i {
                let ready = !finished[c]
                    && edges.iter().filter(|e| e.to == c).all(|e| finished[e.from]);
                if ready && bits & (1 << (c % 64)) != 0 {
                    finished[c] = true;
                    any = true;
                }
            }
            if any {
                index.forget(|c| finished.get(c).copied().unwrap_or(false));
            }
        }
        let reach = support::reachability(calls.len(), edges.iter().map(|e| (e.from, e.to)));
        for e in &edges {
            let justified = calls[e.from].iter().any(|a| {
                calls[e.to].iter().any(|b| {
                    EdgeKind::between(a.mode(), b.mode()) == Some(e.kind)
                        && a.resource.overlaps(&b.resource)
                        && e.resource.overlaps(&a.resource)
                        && e.resource.overlaps(&b.resource)
                })
            });
            prop_assert!(justified, "edge {} -> {} ({} {}) is a false wait", e.from, e.to, e.kind, e.resource);
        }
        for e in naive_edges(&calls) {
            if live_at_insert[e.to][e.from] {
                prop_assert!(
                    reach[e.from][e.to],
                    "conflicting pair {} -> {} of live calls is not ordered", e.from, e.to
                );
            }
        }
    }

    #[test]
    fn input_values_never_widen_an_access(key in "[a-z*?\\\\{}/.]{0,8}") {
        let m = Manifest::from_value(json!({
            "id": "t.put", "description": "d", "version": "1.0.0",
            "input": {"type": "object"}, "output": {"type": "object"},
            "effects": [{"kind": "writes", "resource": "kv:{key}"},
                        {"kind": "reads", "resource": "kv:{keys}"}]
        })).unwrap();
        let plan = AccessPlan::compile(&m).unwrap();
        let accesses = plan.accesses(&json!({"key": key, "keys": [key]}), &Normalizers::default());
        prop_assert_eq!(accesses.len(), 2);
        let expected = format!("kv:{key}");
        for a in &accesses {
            prop_assert_eq!(a.resource.as_exact(), Some(expected.as_str()));
        }
    }
}

/// One access, from its kind and its pattern's text.
fn acc(kind: EffectKind, resource: &str) -> Access {
    Access::new(kind, Pattern::parse(resource).unwrap())
}

/// However many reasons a call has to wait for an earlier one, the pair gets one edge: the
/// provenance log writes one record per edge. Checked with a few predecessors (the scan) and with
/// a crowd of readers (the set that takes over past 16).
#[test]
fn each_pair_gets_one_edge_whatever_the_number_of_predecessors() {
    let read = |r: &str| acc(EffectKind::Reads, r);
    let write = |r: &str| acc(EffectKind::Writes, r);
    for readers in [1, 3, 15, 16, 17, 40] {
        let mut index = ConflictIndex::new();
        let mut edges = Vec::new();
        for i in 0..readers {
            index.insert(i, &[read("kv:a"), read("kv:b"), read("kv:*")], &mut edges);
        }
        assert!(edges.is_empty(), "readers never wait for readers");
        index.insert(
            readers,
            &[write("kv:a"), write("kv:b"), write("kv:c*")],
            &mut edges,
        );
        let mut from: Vec<usize> = edges.iter().map(|e| e.from).collect();
        from.sort_unstable();
        assert_eq!(
            from,
            (0..readers).collect::<Vec<_>>(),
            "with {readers} readers the writer waits for each exactly once"
        );
        assert!(edges
            .iter()
            .all(|e| e.to == readers && e.kind == EdgeKind::WriteAfterRead));
    }
}

/// When a call has two reasons to wait for one predecessor, the edge keeps the causal one
/// (read-after-write): provenance follows causal edges. Here `b` first meets `a` through `kv:r1`
/// (a read of `a`'s, so write-after-read), then through `kv:r2` (a write of `a`'s that `b` reads),
/// while it also waits for `c`.
#[test]
fn a_second_reason_that_is_causal_makes_the_edge_causal() {
    let (reads, writes) = (EffectKind::Reads, EffectKind::Writes);
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(reads, "kv:r1"), acc(writes, "kv:r2")], &mut edges);
    index.insert(1, &[acc(writes, "kv:r3")], &mut edges);
    assert!(edges.is_empty());
    let both = |r: &str| [acc(reads, r), acc(writes, r)];
    let b: Vec<Access> = [both("kv:r3"), both("kv:r1"), both("kv:r2")].concat();
    index.insert(2, &b, &mut edges);
    edges.sort_by_key(|e| e.from);
    let got: Vec<(usize, EdgeKind, String)> = edges
        .iter()
        .map(|e| (e.from, e.kind, e.resource.to_text()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, EdgeKind::ReadAfterWrite, "kv:r2".to_string()),
            (1, EdgeKind::ReadAfterWrite, "kv:r3".to_string()),
        ]
    );
}

/// The first access to an exact resource starts from the latest wildcard write that matches it,
/// across buckets: here `k*y*` (bucket `k`) is newer than `kv:*x*` (bucket `kv:`), both match
/// `kv:xy`, and a read of `kv:xy` must come after the newer one.
#[test]
fn a_new_exact_resource_starts_from_the_latest_matching_wildcard_write() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(EffectKind::Writes, "kv:*x*")], &mut edges);
    index.insert(1, &[acc(EffectKind::Writes, "k*y*")], &mut edges);
    edges.clear();
    index.insert(2, &[acc(EffectKind::Reads, "kv:xy")], &mut edges);
    let got: Vec<(usize, EdgeKind)> = edges.iter().map(|e| (e.from, e.kind)).collect();
    assert_eq!(got, vec![(1, EdgeKind::ReadAfterWrite)]);
}

/// A wildcard write takes over the earlier wildcard entries it contains: a later access that
/// overlaps them waits for the write alone (the older entry is reached through it).
#[test]
fn a_wildcard_write_prunes_the_entries_it_contains() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(EffectKind::Writes, "kv:ab*")], &mut edges);
    index.insert(1, &[acc(EffectKind::Writes, "kv:*")], &mut edges);
    assert_eq!(
        edges.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>(),
        vec![(0, 1)]
    );
    edges.clear();
    index.insert(2, &[acc(EffectKind::Reads, "kv:a*")], &mut edges);
    let got: Vec<(usize, EdgeKind)> = edges.iter().map(|e| (e.from, e.kind)).collect();
    assert_eq!(got, vec![(1, EdgeKind::ReadAfterWrite)]);
}

/// A write after readers waits for the readers, not past them to the writer before them (that
/// order goes through the readers): each edge is a provenance record, so an implied one is noise.
/// The same for a wildcard write taking an exact resource over.
#[test]
fn a_write_after_readers_waits_for_the_readers_alone() {
    for write in ["kv:a", "kv:*"] {
        let mut index = ConflictIndex::new();
        let mut edges = Vec::new();
        index.insert(0, &[acc(EffectKind::Writes, "kv:a")], &mut edges);
        index.insert(1, &[acc(EffectKind::Reads, "kv:a")], &mut edges);
        index.insert(2, &[acc(EffectKind::Reads, "kv:a")], &mut edges);
        index.insert(3, &[acc(EffectKind::Writes, write)], &mut edges);
        let got: Vec<(usize, usize, EdgeKind)> =
            edges.iter().map(|e| (e.from, e.to, e.kind)).collect();
        assert_eq!(
            got,
            vec![
                (0, 1, EdgeKind::ReadAfterWrite),
                (0, 2, EdgeKind::ReadAfterWrite),
                (1, 3, EdgeKind::WriteAfterRead),
                (2, 3, EdgeKind::WriteAfterRead),
            ],
            "{write}"
        );
    }
}

/// A write prunes the entries it contains and keeps the others of the same bucket: a read
/// entry it does not contain still makes a later write of what that read covers wait.
#[test]
fn pruning_keeps_the_entries_a_write_does_not_contain() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    // One bucket, `kv:a`: a read of `kv:a?`, a write of `kv:a*b`.
    index.insert(0, &[acc(EffectKind::Reads, "kv:a?")], &mut edges);
    index.insert(1, &[acc(EffectKind::Writes, "kv:a*b")], &mut edges);
    // Contains the write entry, not the read one.
    index.insert(2, &[acc(EffectKind::Writes, "kv:a*b")], &mut edges);
    edges.clear();
    // Covered by the read (`kv:a?`), by neither write.
    index.insert(3, &[acc(EffectKind::Writes, "kv:ax")], &mut edges);
    let got: Vec<(usize, EdgeKind)> = edges.iter().map(|e| (e.from, e.kind)).collect();
    assert_eq!(got, vec![(0, EdgeKind::WriteAfterRead)]);
}

/// Forgetting frees the state of a forgotten resource for reuse, never a live one: a resource
/// first seen after the forgetting does not take over a live resource's state.
#[test]
fn forgetting_frees_only_the_forgotten_states() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(EffectKind::Writes, "kv:a")], &mut edges);
    index.insert(1, &[acc(EffectKind::Writes, "kv:b")], &mut edges);
    index.forget(|c| c == 0);
    index.insert(2, &[acc(EffectKind::Writes, "kv:c")], &mut edges);
    edges.clear();
    index.insert(3, &[acc(EffectKind::Reads, "kv:b")], &mut edges);
    let got: Vec<(usize, EdgeKind)> = edges.iter().map(|e| (e.from, e.kind)).collect();
    assert_eq!(got, vec![(1, EdgeKind::ReadAfterWrite)]);
}

/// Wildcard buckets emptied (by a containing write, or by forgetting) are reused for other
/// prefixes; a reused bucket holds its new prefix's entries alone.
#[test]
fn emptied_wildcard_buckets_are_reused_cleanly() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(EffectKind::Reads, "kv:a/*")], &mut edges);
    index.insert(1, &[acc(EffectKind::Reads, "kv:b/*")], &mut edges);
    // Contains both: both buckets are emptied.
    index.insert(2, &[acc(EffectKind::Writes, "kv:*")], &mut edges);
    index.forget(|c| c == 2);
    assert!(index.is_empty());
    edges.clear();
    index.insert(3, &[acc(EffectKind::Writes, "x:1/*")], &mut edges);
    index.insert(4, &[acc(EffectKind::Writes, "y:2/*")], &mut edges);
    index.insert(5, &[acc(EffectKind::Reads, "x:1/z")], &mut edges);
    index.insert(6, &[acc(EffectKind::Reads, "y:2/z")], &mut edges);
    let got: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(got, vec![(3, 5), (4, 6)]);
}

/// Forgetting finished calls keeps what the live ones impose: a live reader of a resource nobody
/// wrote still makes a later write wait, and so does a live wildcard reader.
#[test]
fn forgetting_keeps_the_live_readers_of_an_unwritten_resource() {
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(EffectKind::Reads, "kv:a")], &mut edges);
    index.insert(1, &[acc(EffectKind::Reads, "kv:b")], &mut edges);
    index.insert(2, &[acc(EffectKind::Reads, "kv:c*")], &mut edges);
    index.insert(3, &[acc(EffectKind::Writes, "kv:d*")], &mut edges);
    index.forget(|c| c == 1 || c == 3);
    assert!(!index.is_empty());
    let mut only_wild = ConflictIndex::new();
    only_wild.insert(0, &[acc(EffectKind::Reads, "kv:*")], &mut Vec::new());
    assert!(!only_wild.is_empty(), "a wildcard entry is state");
    only_wild.forget(|_| true);
    assert!(only_wild.is_empty());
    edges.clear();
    index.insert(4, &[acc(EffectKind::Writes, "kv:a")], &mut edges);
    index.insert(5, &[acc(EffectKind::Writes, "kv:cc")], &mut edges);
    let got: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(got, vec![(0, 4), (2, 5)]);
}

/// Inserts call `call` with its accesses (kind and pattern text) and returns its edges.
fn insert(index: &mut ConflictIndex, call: usize, accesses: &[(EffectKind, &str)]) -> Vec<Edge> {
    let accesses: Vec<Access> = accesses.iter().map(|(k, r)| acc(*k, r)).collect();
    let mut edges = Vec::new();
    index.insert(call, &accesses, &mut edges);
    edges
}

/// A read of a whole prefix waits for each distinct last writer under it once, labelled with a
/// resource that writer wrote, and not for writers a later write has replaced.
#[test]
fn a_read_of_a_whole_prefix_waits_for_the_current_writers_under_it() {
    use EffectKind::{Reads, Writes};
    let mut index = ConflictIndex::new();
    insert(&mut index, 0, &[(Reads, "kv:a/*")]);
    insert(&mut index, 1, &[(Writes, "kv:a/1"), (Writes, "kv:a/2")]);
    insert(&mut index, 2, &[(Writes, "kv:a/3")]);
    insert(&mut index, 3, &[(Writes, "kv:a/3")]);
    insert(&mut index, 4, &[(Writes, "kv:b/1")]);
    let mut got: Vec<(usize, EdgeKind, String)> = insert(&mut index, 5, &[(Reads, "kv:a/*")])
        .iter()
        .map(|e| (e.from, e.kind, e.resource.to_string()))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (1, EdgeKind::ReadAfterWrite));
    assert!(["kv:a/1", "kv:a/2"].contains(&got[0].2.as_str()), "{got:?}");
    assert_eq!(got[1], (3, EdgeKind::ReadAfterWrite, "kv:a/3".to_string()));
    // A write of the whole prefix takes every resource over: the next read waits for it alone.
    insert(&mut index, 6, &[(Writes, "kv:a/*")]);
    let got: Vec<usize> = insert(&mut index, 7, &[(Reads, "kv:a/*")])
        .iter()
        .map(|e| e.from)
        .collect();
    assert_eq!(got, vec![6]);
}

/// A writer that the forgetting of a later writer leaves behind is no resource's writer: a read
/// of the prefix does not wait for it, even once the forgotten resource's state is reused by a
/// resource that call did write (through a wildcard, elsewhere).
#[test]
fn forgetting_leaves_no_stale_writer_under_a_prefix() {
    use EffectKind::{Reads, Writes};
    let mut index = ConflictIndex::new();
    insert(&mut index, 0, &[(Reads, "kv:a*")]);
    insert(&mut index, 1, &[(Writes, "kv:a1"), (Writes, "kv:b*")]);
    insert(&mut index, 2, &[(Writes, "kv:a1")]);
    // Forgetting call 2 alone frees `kv:a1`'s state: its last writer is gone.
    index.forget(|c| c == 2);
    // `kv:b1` is new and starts from call 1's wildcard write, in the freed slot.
    insert(&mut index, 3, &[(Reads, "kv:b1")]);
    let got: Vec<(usize, String)> = insert(&mut index, 4, &[(Reads, "kv:a*")])
        .iter()
        .map(|e| (e.from, e.resource.to_string()))
        .collect();
    assert_eq!(got, Vec::<(usize, String)>::new());
}

/// A wildcard write that is not a whole prefix leaves the resources it does not match to their
/// writers, also when it empties its own bucket: a later read of the whole prefix still waits for
/// them.
#[test]
fn a_partial_wildcard_write_keeps_the_writers_it_does_not_match() {
    use EffectKind::{Reads, Writes};
    for opener in [Reads, Writes] {
        let mut index = ConflictIndex::new();
        insert(&mut index, 0, &[(Writes, "kv:bb")]);
        // Opens the `kv:` bucket; the write that follows contains this entry and empties it.
        insert(&mut index, 1, &[(opener, "kv:?a")]);
        insert(&mut index, 2, &[(Writes, "kv:?a")]);
        let mut got: Vec<(usize, String)> = insert(&mut index, 3, &[(Reads, "kv:*")])
            .iter()
            .map(|e| (e.from, e.resource.to_string()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![(0, "kv:bb".to_string()), (2, "kv:?a".to_string())],
            "opened by a {opener:?}"
        );
    }
}

/// A compact edge names the access of the later call that causes it (here its second one, so a
/// label fixed to the first access would read `kv:b`), and holds any other pattern: a read of a
/// whole prefix is labelled with the resource its writer wrote. Given accesses that are not the
/// call's, the resource is `*`, which overlaps every access, never a pattern that could mislead.
#[test]
fn a_compact_edge_names_the_access_that_causes_it() {
    let (reads, writes) = (EffectKind::Reads, EffectKind::Writes);
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert_compact(0, &[acc(writes, "kv:a")], &mut edges);
    let second = [acc(reads, "kv:b"), acc(reads, "kv:a")];
    index.insert_compact(1, &second, &mut edges);
    let third = [acc(reads, "kv:*")];
    index.insert_compact(2, &third, &mut edges);
    let got: Vec<(usize, usize, EdgeKind, String)> = edges
        .iter()
        .map(|e| {
            let accesses: &[Access] = if e.to == 1 { &second } else { &third };
            (e.from, e.to, e.kind, e.resource(accesses).to_text())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 1, EdgeKind::ReadAfterWrite, "kv:a".to_string()),
            (0, 2, EdgeKind::ReadAfterWrite, "kv:a".to_string()),
        ]
    );
    assert_eq!(edges[0].resource(&[]).to_text(), "*");
    assert_eq!(edges[1].resource(&[]).to_text(), "kv:a", "held, not named");
    let resolved = edges[0].clone().resolve(&second);
    assert_eq!(
        (resolved.from, resolved.to, resolved.kind, resolved.resource),
        (
            0,
            1,
            EdgeKind::ReadAfterWrite,
            Pattern::parse("kv:a").unwrap()
        )
    );
}

/// Two reasons for one edge that are both not causal: the edge keeps the first found (its kind
/// and resource), as `insert` promises; only a causal reason replaces it.
#[test]
fn a_second_reason_that_is_not_causal_changes_nothing() {
    let (reads, writes) = (EffectKind::Reads, EffectKind::Writes);
    let mut index = ConflictIndex::new();
    let mut edges = Vec::new();
    index.insert(0, &[acc(reads, "kv:a"), acc(writes, "kv:b")], &mut edges);
    index.insert(1, &[acc(writes, "kv:a"), acc(writes, "kv:b")], &mut edges);
    let got: Vec<(usize, usize, EdgeKind, String)> = edges
        .iter()
        .map(|e| (e.from, e.to, e.kind, e.resource.to_text()))
        .collect();
    assert_eq!(
        got,
        vec![(0, 1, EdgeKind::WriteAfterRead, "kv:a".to_string())]
    );
}
