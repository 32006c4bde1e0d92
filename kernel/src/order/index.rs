//! The conflict graph: which call waits for which, and why.
//!
//! Takes in: calls one at a time in submission order, each as its list of [`Access`]es. Hands on:
//! for each call at once, its edges from earlier calls ([`ConflictIndex`]). For a whole batch,
//! [`super::ConflictGraph`] keeps the edges as a graph with levels ("waves") and a critical
//! path.
//!
//! # The rule
//!
//! Calls `a` (earlier) and `b` (later) conflict when some access of `a` and some access of `b`
//! have overlapping resources and at least one of the two is a write. Every conflicting pair must
//! be joined by a path `a -> ... -> b`; an edge that a path already implies may be left out. Each
//! edge carries one resource that causes it and its kind:
//!
//! | earlier | later | kind |
//! |---|---|---|
//! | write | read | `read-after-write` (causal: `b` may have seen what `a` wrote) |
//! | read | write | `write-after-read` |
//! | write | write | `write-after-write` |
//!
//! Worked example. `c1` reads `kv:a`, `c2` writes `kv:a`, `c3` reads `kv:*`, `c4` reads `kv:a`:
//! `c1 -> c2` (write-after-read), `c2 -> c3` and `c2 -> c4` (read-after-write). `c1` and `c3`,
//! `c3` and `c4` are reads of one resource and do not wait for each other.
//!
//! # Building it incrementally, near-linear
//!
//! Comparing every new access with every earlier one is quadratic. The index here keeps, per
//! *exact* resource, the state Solana's schedulers keep per account — its last writer and the
//! readers since — so that a new access links to its *nearest* conflicting predecessors only:
//! a read waits for the last writer; a write waits for the readers since it (or, if none, for the
//! last writer itself). Older calls are reached through them.
//!
//! Wildcard accesses (`blob:*`, `fs:/repo/*.rs`) are kept in buckets by literal prefix, read and
//! write entries apart, each bucket in insertion order. An exact resource `k` only looks in the
//! buckets whose prefix is a prefix of `k` (one hash probe per distinct prefix length in use); a
//! wildcard pattern `p` looks in buckets whose prefix is a prefix of `p`'s, or extends it, and
//! ranges over the exact resources that start with its prefix. Pattern pairs are interned and
//! their overlap and containment answers memoized.
//!
//! Two rules keep the wildcard side from growing without bound:
//!
//! - A wildcard *write* `p` takes over every exact resource it matches, as if it had written each
//!   one: it becomes that resource's last writer (invariant **no newer wildcard writer**, below).
//! - A wildcard *write* `p` removes every earlier wildcard entry whose pattern it contains: any
//!   later access that overlaps the removed pattern overlaps `p` too, and `p` is ordered after the
//!   removed entry, so the path goes through `p`.
//!
//! A read of a whole prefix (`kv:bucket7/*`, or `*`) whose bucket is open does not visit every
//! exact resource under the prefix: the bucket keeps the calls that wrote those resources
//! exactly (invariant **writers cover**), and the read waits for the ones still current — the
//! distinct last writers, however many resources each wrote. A resource last written through a
//! wildcard needs no such entry, since that write is itself a live entry the read finds among the
//! wildcard entries. This is the multi-granularity locking idea: the prefix carries a summary of
//! what lies under it.
//!
//! The tests hold this builder to [`super::naive_edges`], the all-pairs reference, on random batches:
//! every conflicting pair is joined by a path, and every edge joins a conflicting pair.

use std::collections::BTreeMap;
use std::fmt;

use hashbrown::hash_map::RawEntryMut;
use hashbrown::HashMap;

use serde::{Deserialize, Serialize};

use crate::access::{Access, Pattern};
use crate::model::AccessMode;

/// The kind of a conflict edge, from the modes of the two accesses that cause it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EdgeKind {
    /// The earlier call writes, the later reads: causal.
    ReadAfterWrite,
    /// The earlier call reads, the later writes.
    WriteAfterRead,
    /// Both write.
    WriteAfterWrite,
}

impl EdgeKind {
    /// The kind of the edge from an access in mode `earlier` to one in mode `later`, or `None`
    /// when both read (no conflict).
    pub fn between(earlier: AccessMode, later: AccessMode) -> Option<Self> {
        match (earlier, later) {
            (AccessMode::Write, AccessMode::Read) => Some(EdgeKind::ReadAfterWrite),
            (AccessMode::Read, AccessMode::Write) => Some(EdgeKind::WriteAfterRead),
            (AccessMode::Write, AccessMode::Write) => Some(EdgeKind::WriteAfterWrite),
            (AccessMode::Read, AccessMode::Read) => None,
        }
    }

    /// The name as the CLI and the provenance log spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::ReadAfterWrite => "read-after-write",
            EdgeKind::WriteAfterRead => "write-after-read",
            EdgeKind::WriteAfterWrite => "write-after-write",
        }
    }

    /// Whether the later call may have seen what the earlier one wrote.
    pub fn is_causal(self) -> bool {
        self == EdgeKind::ReadAfterWrite
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A conflict edge between two calls, named by their positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The earlier call.
    pub from: usize,
    /// The later call.
    pub to: usize,
    /// One overlapping pattern that causes the edge.
    pub resource: Pattern,
    /// Read-after-write, write-after-read or write-after-write.
    pub kind: EdgeKind,
}

/// What an edge's resource is, as the index finds it: one of the later call's own accesses (the
/// commonest case, which takes no reference count), or a pattern the index holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Label {
    /// The access at this index among those the later call was inserted with.
    Access(u32),
    /// Another pattern: a resource under a wildcard, or an earlier wildcard entry.
    Pattern(Pattern),
}

/// An edge as the index finds it ([`ConflictIndex::insert_compact`]): its resource is named, not
/// held, when it is one of the later call's own accesses, so that finding an edge costs no
/// reference count. [`CompactEdge::resource`] and [`CompactEdge::resolve`] give the
/// pattern, from the accesses the call was inserted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactEdge {
    /// The earlier call.
    pub from: usize,
    /// The later call.
    pub to: usize,
    /// Read-after-write, write-after-read or write-after-write.
    pub kind: EdgeKind,
    label: Label,
}

impl CompactEdge {
    /// One overlapping pattern that causes the edge. `accesses` are those the later call was
    /// inserted with; given others, the answer is `*`, which overlaps every access (an edge's
    /// resource names why two calls are ordered, and this one cannot say more).
    pub fn resource<'a>(&'a self, accesses: &'a [Access]) -> &'a Pattern {
        match &self.label {
            Label::Pattern(p) => p,
            Label::Access(i) => match accesses.get(*i as usize) {
                Some(a) => &a.resource,
                None => any_pattern(),
            },
        }
    }

    /// The edge with its resource held ([`Edge`]); `accesses` as for
    /// [`CompactEdge::resource`].
    pub fn resolve(self, accesses: &[Access]) -> Edge {
        let resource = match self.label {
            Label::Pattern(p) => p,
            Label::Access(_) => self.resource(accesses).clone(),
        };
        Edge {
            from: self.from,
            to: self.to,
            resource,
            kind: self.kind,
        }
    }
}

/// `*`, parsed once.
fn any_pattern() -> &'static Pattern {
    static ANY: std::sync::OnceLock<Pattern> = std::sync::OnceLock::new();
    ANY.get_or_init(Pattern::any)
}

/// An exact resource as a map key: the access's own pattern (cloning it is a reference count, not
/// an allocation), hashed, compared and borrowed as its one string.
#[derive(Clone)]
struct ExactKey(Pattern);

impl ExactKey {
    fn as_str(&self) -> &str {
        self.0.literal_prefix()
    }
}

impl std::borrow::Borrow<str> for ExactKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::hash::Hash for ExactKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq for ExactKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ExactKey {}

impl PartialOrd for ExactKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExactKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

/// Per exact resource: the state that lets a new access link to its nearest predecessors.
#[derive(Debug, Default)]
struct KeyState {
    /// The latest call that wrote this resource, exactly or through a wildcard write.
    /// Invariant (**no newer wildcard writer**): no live wildcard write entry that matches this
    /// resource was inserted after this state was last updated — every wildcard write updates
    /// the states of the resources it matches (see `insert_wild`).
    last_writer: Option<usize>,
    /// Calls that read this resource exactly since `last_writer` (each after it).
    readers: smallvec::SmallVec<[usize; 4]>,
    /// Invariant (**reads synced**): every live wildcard read entry with a sequence number below
    /// this one that matches the resource is ordered before `last_writer`; a new write need only
    /// look at wildcard reads from this number on.
    reads_synced: u64,
}

/// What the wildcard side keeps per exact resource, beside its state (in a slab of its own, so
/// that batches of exact resources never pay for it).
#[derive(Debug)]
struct KeyMeta {
    /// The resource: the label of the edges a read of a prefix finds through a bucket's writers.
    /// Set whenever the resource's slot is entered among a bucket's writers.
    key: Option<Pattern>,
    /// The open buckets whose prefix covers the resource, as of bucket generation `generation`
    /// (a write looks there; recomputed when buckets have opened or closed since).
    covering: smallvec::SmallVec<[u32; 2]>,
    generation: u64,
}

impl Default for KeyMeta {
    fn default() -> Self {
        KeyMeta {
            key: None,
            covering: smallvec::SmallVec::new(),
            generation: STALE,
        }
    }
}

/// The generation of a [`KeyMeta`] whose covering buckets are unknown.
const STALE: u64 = u64::MAX;

/// The meta of `slot`, grown to it.
fn meta_of(meta: &mut Vec<KeyMeta>, slot: u32) -> Option<&mut KeyMeta> {
    let at = slot as usize;
    if meta.len() <= at {
        meta.resize_with(at + 1, KeyMeta::default);
    }
    meta.get_mut(at)
}

/// The state of an exact resource at its first access: its last writer is the latest live
/// wildcard write that matches it (every earlier such write is ordered before that one), and every
/// wildcard read older than that write is ordered before it too. `prefixes` holds the bucket
/// prefixes of `key`.
fn initial_state(
    buckets: &[Bucket],
    patterns: &[Pattern],
    prefixes: &[u32],
    key: &str,
) -> KeyState {
    let mut latest: Option<WildEntry> = None;
    for &b in prefixes {
        let Some(bucket) = buckets.get(b as usize) else {
            continue;
        };
        for e in bucket.writes.iter().rev() {
            if latest.is_some_and(|l| l.seq > e.seq) {
                break;
            }
            // An id is an index into the interned patterns; were it not, the safe reading is
            // a conflict (an extra edge orders two calls; a missing one would race them).
            if patterns
                .get(e.pattern as usize)
                .is_none_or(|p| p.matches(key))
            {
                latest = Some(*e);
                break;
            }
        }
    }
    KeyState {
        last_writer: latest.map(|e| e.call),
        readers: smallvec::SmallVec::new(),
        reads_synced: latest.map_or(0, |e| e.seq + 1),
    }
}

/// Appends to `out` the ids of the open buckets whose prefix is a prefix of `s` (or `s` itself
/// when `or_equal`): one hash probe per prefix length in use.
fn covering_buckets(
    prefix_lens: &BTreeMap<usize, usize>,
    bucket_ids: &HashMap<Box<str>, u32>,
    s: &str,
    or_equal: bool,
    out: &mut impl Extend<u32>,
) {
    for &len in prefix_lens.keys() {
        if len > s.len() || (len == s.len() && !or_equal) {
            break;
        }
        let Some(head) = s.get(..len) else {
            continue; // not a character boundary: no bucket's prefix
        };
        if let Some(&id) = bucket_ids.get(head) {
            out.extend([id]);
        }
    }
}

/// A slot for `value` in a slab: a freed one (overwritten) when there is one, else a new one at
/// the end.
fn occupy<T>(slab: &mut Vec<T>, free: &mut Vec<u32>, value: T) -> u32 {
    match free.pop() {
        Some(slot) => {
            // A freed slot is in the slab: slabs never shrink.
            if let Some(s) = slab.get_mut(slot as usize) {
                *s = value;
            }
            slot
        }
        None => {
            slab.push(value);
            (slab.len() - 1) as u32
        }
    }
}

/// A wildcard access in a bucket.
#[derive(Debug, Clone, Copy)]
struct WildEntry {
    seq: u64,
    call: usize,
    pattern: u32,
}

/// A call that wrote an exact resource, and the slot of that resource's state.
#[derive(Debug, Clone, Copy)]
struct Writer {
    call: usize,
    slot: u32,
}

/// The wildcard entries whose patterns share one literal prefix. Buckets live in a slab and are
/// named by their index there, so that finding the buckets of a resource is a hash probe per
/// prefix length and costs no allocation.
#[derive(Debug, Default)]
struct Bucket {
    /// The literal prefix (empty while the slot is free).
    prefix: Box<str>,
    /// Read entries, in insertion (sequence) order.
    reads: Vec<WildEntry>,
    /// Write entries, in insertion (sequence) order.
    writes: Vec<WildEntry>,
    /// The summary a read of the whole prefix (`prefix*`) takes instead of visiting every exact
    /// resource under it. Invariant (**writers cover**): every exact resource under `prefix`
    /// whose last writer wrote it exactly has that writer here, with its state's slot. An entry
    /// is *current* while its state's last writer is still its call; stale entries are skipped
    /// and compacted away. A resource whose last writer wrote it through a wildcard needs no
    /// entry: that write is a live entry of a bucket the read looks in (or was forgotten), so the
    /// read finds it among the wildcard entries.
    writers: Vec<Writer>,
    /// The length at which `writers` is next compacted (twice its current part, amortized).
    compact_at: usize,
}

impl Bucket {
    /// Records that `call` wrote the exact resource in `slot`, compacting the stale entries away
    /// when they come to outnumber the current ones.
    fn wrote(&mut self, call: usize, slot: u32, states: &[KeyState]) {
        self.writers.push(Writer { call, slot });
        if self.writers.len() >= self.compact_at {
            self.compact(states);
        }
    }

    /// Drops the stale writers: those no longer their resource's last writer.
    fn compact(&mut self, states: &[KeyState]) {
        self.writers.retain(|w| is_current(states, *w));
        self.compact_at = next_compaction(self.writers.len());
    }
}

/// The length at which a bucket's writers are next compacted, given `current` entries that are
/// all current: once the stale ones could outnumber them (plus slack, so that small lists are not
/// compacted on every write).
fn next_compaction(current: usize) -> usize {
    2 * current + 16
}

/// Lists `call` as the writer of the resource `key` in `slot`, for a bucket about to open.
fn enter_writer(
    writers: &mut Vec<Writer>,
    meta: &mut Vec<KeyMeta>,
    call: usize,
    slot: u32,
    key: &Pattern,
) {
    writers.push(Writer { call, slot });
    if let Some(m) = meta_of(meta, slot) {
        m.key = Some(key.clone());
    }
}

/// Whether `w` is still the last writer of its resource.
fn is_current(states: &[KeyState], w: Writer) -> bool {
    states
        .get(w.slot as usize)
        .is_some_and(|s| s.last_writer == Some(w.call))
}

/// The edges of the call being inserted, deduplicated by source. A struct of its own so that
/// recording an edge borrows only it, while the index's states are walked.
#[derive(Default)]
struct Pending {
    edges: Vec<CompactEdge>,
    /// The index, among the call's accesses, of the one being inserted: the label
    /// [`Pending::add`] records for `None`.
    own: u32,
    /// The sources in `edges` and their places there, kept once `edges` grows past a handful
    /// (a wildcard read finds the same writer again and again).
    from: HashMap<usize, usize>,
}

impl Pending {
    /// Records the edge `from -> to` once. A second reason for the same edge replaces the first
    /// only when it is causal (read-after-write) and the first was not: provenance follows causal
    /// edges. `resource` is the pattern that causes it, or `None` for the access being inserted.
    fn add(&mut self, from: usize, to: usize, resource: Option<&Pattern>, kind: EdgeKind) {
        if from == to {
            return;
        }
        // Few edges per call is the norm: a scan; many (a write after a crowd of readers, a
        // wildcard read of many resources): a map from source to place.
        let known = if self.edges.len() < 16 {
            self.edges.iter().position(|e| e.from == from)
        } else {
            self.from.get(&from).copied()
        };
        if let Some(at) = known {
            if kind.is_causal() && self.edges.get(at).is_some_and(|e| !e.kind.is_causal()) {
                let label = self.label(resource);
                if let Some(e) = self.edges.get_mut(at) {
                    e.kind = kind;
                    e.label = label;
                }
            }
            return;
        }
        if self.edges.len() == 15 {
            self.from.clear();
            self.from
                .extend(self.edges.iter().enumerate().map(|(i, e)| (e.from, i)));
        }
        if self.edges.len() >= 15 {
            self.from.insert(from, self.edges.len());
        }
        let label = self.label(resource);
        self.edges.push(CompactEdge {
            from,
            to,
            kind,
            label,
        });
    }

    fn label(&self, resource: Option<&Pattern>) -> Label {
        match resource {
            Some(p) => Label::Pattern(p.clone()),
            None => Label::Access(self.own),
        }
    }

    /// The edges of a write that takes a resource over: from the readers since the last writer
    /// (write-after-read), and from the last writer itself when there were no readers
    /// (write-after-write) or when this call also reads the resource (read-after-write: it sees
    /// the last writer's value, so the causal edge is kept even when the readers imply the order).
    /// The readers are drained; the call's own read is not a reader to wait for.
    fn write(
        &mut self,
        call: usize,
        resource: Option<&Pattern>,
        last_writer: Option<usize>,
        readers: &mut smallvec::SmallVec<[usize; 4]>,
        reads: bool,
    ) {
        let others = readers.iter().any(|r| *r != call);
        if let Some(w) = last_writer.filter(|_| reads || !others) {
            let kind = if reads {
                EdgeKind::ReadAfterWrite
            } else {
                EdgeKind::WriteAfterWrite
            };
            self.add(w, call, resource, kind);
        }
        for r in readers.drain(..) {
            self.add(r, call, resource, EdgeKind::WriteAfterRead);
        }
    }
}

/// The incremental conflict index: insert calls in submission order, get each one's edges.
///
/// ```
/// use sluice_kernel::access::Access;
/// use sluice_kernel::order::{ConflictIndex, EdgeKind};
/// use sluice_kernel::model::EffectKind;
/// use sluice_kernel::access::Pattern;
///
/// let w = |r: &str| Access::new(EffectKind::Writes, Pattern::parse(r).unwrap());
/// let r = |r: &str| Access::new(EffectKind::Reads, Pattern::parse(r).unwrap());
/// let mut index = ConflictIndex::new();
/// let mut edges = Vec::new();
/// index.insert(0, &[w("kv:a")], &mut edges);
/// index.insert(1, &[r("kv:*")], &mut edges);
/// assert_eq!((edges[0].from, edges[0].to, edges[0].kind), (0, 1, EdgeKind::ReadAfterWrite));
/// ```
#[derive(Default)]
pub struct ConflictIndex {
    /// Exact resource -> its state's slot in `states`.
    exact: HashMap<ExactKey, u32>,
    /// The states of exact resources, in a slab; `free_states` holds the emptied slots.
    states: Vec<KeyState>,
    free_states: Vec<u32>,
    /// Per state slot, what the wildcard side keeps (grown on first use).
    meta: Vec<KeyMeta>,
    /// The keys of `exact` with their slots, sorted, for prefix range scans by wildcard
    /// accesses (which reach each state without a hash probe). Built the first time a wildcard
    /// access arrives and kept from then on, so that batches of exact resources never pay for it.
    exact_sorted: Option<BTreeMap<ExactKey, u32>>,
    /// The buckets of wildcard entries, by id; `free` holds the ids of emptied slots.
    buckets: Vec<Bucket>,
    free: Vec<u32>,
    /// Live bucket prefix -> id: the probe an exact resource makes per prefix length.
    bucket_ids: HashMap<Box<str>, u32>,
    /// The same, ordered: the range scan a wildcard makes for the buckets that extend its prefix.
    bucket_order: BTreeMap<Box<str>, u32>,
    /// Byte length of bucket prefixes in use -> how many buckets have it.
    prefix_lens: BTreeMap<usize, usize>,
    patterns: Vec<Pattern>,
    interned: HashMap<Pattern, u32>,
    overlap_memo: HashMap<(u32, u32), bool>,
    contains_memo: HashMap<(u32, u32), bool>,
    seq: u64,
    /// Scratch: the edges of the call being inserted.
    pending: Pending,
    /// Bumped whenever a bucket opens or closes: a resource's cached covering buckets (in `meta`)
    /// are current while their generation is this one.
    bucket_generation: u64,
    /// Scratch: bucket ids.
    scratch_prefixes: Vec<u32>,
    /// Scratch: the writers under a new bucket's prefix, found by the access that opens it.
    scratch_writers: Vec<Writer>,
}

impl fmt::Debug for ConflictIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConflictIndex")
            .field("exact_resources", &self.exact.len())
            .field("wildcard_buckets", &self.bucket_ids.len())
            .field("patterns", &self.patterns.len())
            .finish()
    }
}

impl ConflictIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index with room for `resources` exact resources.
    pub fn with_capacity(resources: usize) -> Self {
        ConflictIndex {
            exact: HashMap::with_capacity(resources),
            states: Vec::with_capacity(resources),
            ..Self::default()
        }
    }

    /// Inserts call `call` (which must be later than every call inserted before) with its
    /// accesses, appending its edges from earlier calls to `out` — at most one edge per earlier
    /// call, with the resource and kind of the first conflict found.
    pub fn insert(&mut self, call: usize, accesses: &[Access], out: &mut Vec<Edge>) {
        self.find(call, accesses);
        out.extend(self.pending.edges.drain(..).map(|e| e.resolve(accesses)));
    }

    /// [`ConflictIndex::insert`], with the edges in their compact form: an edge caused by one of
    /// the call's own accesses names it rather than holding its pattern (no reference count per
    /// edge), and [`CompactEdge::resolve`] gives the [`Edge`] when it is wanted.
    pub fn insert_compact(&mut self, call: usize, accesses: &[Access], out: &mut Vec<CompactEdge>) {
        self.find(call, accesses);
        out.append(&mut self.pending.edges);
    }

    /// Inserts the call, leaving its edges in `self.pending.edges`.
    fn find(&mut self, call: usize, accesses: &[Access]) {
        self.pending.edges.clear();
        self.pending.own = 0;
        if let [a] = accesses {
            let reads = a.mode() == AccessMode::Read;
            match a.resource.as_exact() {
                Some(key) => self.insert_exact(call, key, &a.resource, a.mode(), reads),
                None => self.insert_wild(call, &a.resource, a.mode(), reads),
            }
            return;
        }
        // One entry per pattern, in the strictest mode of its accesses; entries that read go
        // first (pure reads, then reads-and-writes, then pure writes): a read must see the last
        // writer before this call's own writes take the resource over.
        let mut entries: smallvec::SmallVec<[(u8, u32, AccessMode, bool); 8]> =
            smallvec::SmallVec::new();
        for (i, a) in accesses.iter().enumerate() {
            if accesses.iter().take(i).any(|b| b.resource == a.resource) {
                continue;
            }
            let (mut writes, mut reads) = (false, false);
            for b in accesses.iter().skip(i).filter(|b| b.resource == a.resource) {
                match b.mode() {
                    AccessMode::Write => writes = true,
                    AccessMode::Read => reads = true,
                }
            }
            let (order, mode) = match (writes, reads) {
                (false, _) => (0, AccessMode::Read),
                (true, true) => (1, AccessMode::Write),
                (true, false) => (2, AccessMode::Write),
            };
            entries.push((order, i as u32, mode, reads));
        }
        entries.sort_by_key(|e| e.0);
        for (_, i, mode, reads) in entries {
            let Some(a) = accesses.get(i as usize) else {
                continue; // an entry names one of `accesses`
            };
            self.pending.own = i;
            match a.resource.as_exact() {
                Some(key) => self.insert_exact(call, key, &a.resource, mode, reads),
                None => self.insert_wild(call, &a.resource, mode, reads),
            }
        }
    }

    fn intern(&mut self, p: &Pattern) -> u32 {
        if let Some(id) = self.interned.get(p) {
            return *id;
        }
        let id = self.patterns.len() as u32;
        self.patterns.push(p.clone());
        self.interned.insert(p.clone(), id);
        id
    }

    fn overlaps(&mut self, a: u32, b: u32) -> bool {
        let key = if a <= b { (a, b) } else { (b, a) };
        if let Some(v) = self.overlap_memo.get(&key) {
            return *v;
        }
        // Ids index the interned patterns; were one missing, the safe reading is an overlap.
        let v = match (self.patterns.get(a as usize), self.patterns.get(b as usize)) {
            (Some(pa), Some(pb)) => pa.overlaps(pb),
            _ => true,
        };
        self.overlap_memo.insert(key, v);
        v
    }

    fn contains(&mut self, a: u32, b: u32) -> bool {
        if let Some(v) = self.contains_memo.get(&(a, b)) {
            return *v;
        }
        // Containment prunes entries: were an id missing, the safe reading is "no" (keep it).
        let v = match (self.patterns.get(a as usize), self.patterns.get(b as usize)) {
            (Some(pa), Some(pb)) => pa.contains(pb),
            _ => false,
        };
        self.contains_memo.insert((a, b), v);
        v
    }

    /// `reads`: the call also reads this resource (a read and a write of one resource merge into
    /// one write-mode entry; the read still makes the edge from the last writer causal).
    fn insert_exact(
        &mut self,
        call: usize,
        key: &str,
        resource: &Pattern,
        mode: AccessMode,
        reads: bool,
    ) {
        // The covering buckets: found for a new resource, and cached beside its state for its
        // writes (a read of a known resource needs none).
        self.scratch_prefixes.clear();
        let slot = match self.exact.raw_entry_mut().from_key(key) {
            RawEntryMut::Occupied(o) => *o.get(),
            RawEntryMut::Vacant(v) => {
                covering_buckets(
                    &self.prefix_lens,
                    &self.bucket_ids,
                    key,
                    true,
                    &mut self.scratch_prefixes,
                );
                let state =
                    initial_state(&self.buckets, &self.patterns, &self.scratch_prefixes, key);
                let slot = occupy(&mut self.states, &mut self.free_states, state);
                // A reused slot's meta is another resource's.
                if let Some(m) = self.meta.get_mut(slot as usize) {
                    m.generation = STALE;
                }
                if let Some(sorted) = &mut self.exact_sorted {
                    sorted.insert(ExactKey(resource.clone()), slot);
                }
                v.insert(ExactKey(resource.clone()), slot);
                slot
            }
        };
        let Some(state) = self.states.get_mut(slot as usize) else {
            return; // a slot the map names always exists
        };
        match mode {
            AccessMode::Read => {
                if state.readers.last() != Some(&call) {
                    state.readers.push(call);
                }
                // No newer wildcard writer: the last writer is the only write to wait for.
                if let Some(w) = state.last_writer {
                    self.pending.add(w, call, None, EdgeKind::ReadAfterWrite);
                }
            }
            AccessMode::Write => {
                self.scratch_prefixes.clear();
                if !self.bucket_ids.is_empty() {
                    if let Some(m) = meta_of(&mut self.meta, slot) {
                        if m.generation != self.bucket_generation {
                            m.covering.clear();
                            covering_buckets(
                                &self.prefix_lens,
                                &self.bucket_ids,
                                key,
                                true,
                                &mut m.covering,
                            );
                            m.generation = self.bucket_generation;
                            // A slot's resource changes only when it is reused, which makes
                            // its meta stale: the key is set here, once per resource.
                            m.key = Some(resource.clone());
                        }
                        self.scratch_prefixes.extend_from_slice(&m.covering);
                    }
                }
                let last_writer = state.last_writer.replace(call);
                let reads_synced = std::mem::replace(&mut state.reads_synced, self.seq);
                self.pending
                    .write(call, None, last_writer, &mut state.readers, reads);
                // Reads synced: only wildcard reads newer than the last write can be unordered.
                // The buckets are read while only the pending edges change; then each covering
                // bucket learns its new writer (invariant **writers cover**).
                for &b in &self.scratch_prefixes {
                    let Some(bucket) = self.buckets.get_mut(b as usize) else {
                        continue;
                    };
                    let from = bucket.reads.partition_point(|e| e.seq < reads_synced);
                    for e in bucket.reads.get(from..).unwrap_or_default() {
                        let pattern = self.patterns.get(e.pattern as usize);
                        if pattern.is_none_or(|p| p.matches(key)) {
                            self.pending
                                .add(e.call, call, None, EdgeKind::WriteAfterRead);
                        }
                    }
                    bucket.wrote(call, slot, &self.states);
                }
            }
        }
    }

    /// A wildcard access, in four steps: against the exact resources it matches, against the
    /// earlier wildcard entries it overlaps, pruning the entries a write contains, and recording
    /// its own entry.
    ///
    /// A read of a whole prefix (`prefix*`, or `*`) whose bucket is open takes step 1 from the
    /// bucket's writers rather than from every resource under the prefix: it waits for the
    /// distinct last writers, however many resources they wrote.
    fn insert_wild(&mut self, call: usize, resource: &Pattern, mode: AccessMode, reads: bool) {
        let id = self.intern(resource);
        let prefix = resource.literal_prefix();
        let whole = matches!(
            resource.strategy(),
            crate::access::Strategy::Prefix | crate::access::Strategy::Any
        );
        let open = self.bucket_ids.get(prefix).copied();
        match open {
            Some(b) if whole && mode == AccessMode::Read => self.read_through_writers(call, b),
            // A bucket opened by this access learns the writers under its prefix from the scan,
            // unless this access writes all of them (then none wrote exactly).
            _ => {
                let collect = open.is_none() && !(whole && mode == AccessMode::Write);
                self.wild_against_exact(call, resource, mode, reads, collect);
            }
        }
        let (buckets, shorter) = self.overlapping_buckets(prefix);
        self.wild_against_wild(call, id, mode, reads, &buckets);
        if mode == AccessMode::Write {
            // The entries a write contains can only sit in buckets whose prefix starts with ours.
            let longer = buckets.get(shorter..).unwrap_or_default();
            self.prune_contained(id, prefix, longer);
            if whole {
                // Every resource under these prefixes is now written by this call, through a
                // wildcard: no exact writer is current there.
                for &b in longer {
                    if let Some(bucket) = self.buckets.get_mut(b as usize) {
                        bucket.writers.clear();
                        bucket.compact_at = next_compaction(0);
                    }
                }
            }
        }
        self.scratch_prefixes = buckets;
        self.record_wild(call, id, prefix, mode);
    }

    /// Step 1 for a read of bucket `b`'s whole prefix: an edge from each current writer.
    fn read_through_writers(&mut self, call: usize, b: u32) {
        let Self {
            buckets,
            states,
            meta,
            pending,
            ..
        } = self;
        let Some(bucket) = buckets.get(b as usize) else {
            return;
        };
        for w in &bucket.writers {
            if !is_current(states, *w) {
                continue;
            }
            // A writer's slot has its resource in its meta (set when it was entered).
            let key = meta.get(w.slot as usize).and_then(|m| m.key.as_ref());
            if let Some(key) = key {
                pending.add(w.call, call, Some(key), EdgeKind::ReadAfterWrite);
            }
        }
    }

    /// Step 1: the exact resources the pattern matches. A read waits for each one's last writer;
    /// a write takes each one over (invariant **no newer wildcard writer**).
    /// With `collect`, every resource under the prefix with a last writer is also listed in
    /// `scratch_writers`, for the bucket this access opens.
    fn wild_against_exact(
        &mut self,
        call: usize,
        resource: &Pattern,
        mode: AccessMode,
        reads: bool,
        collect: bool,
    ) {
        let prefix = resource.literal_prefix();
        // A prefix pattern matches exactly the keys the range scan finds.
        let every_key = resource.strategy() == crate::access::Strategy::Prefix;
        // The fields apart: the sorted keys are walked while the states and the edges change.
        let Self {
            exact,
            exact_sorted,
            states,
            meta,
            pending,
            seq,
            scratch_writers,
            ..
        } = self;
        scratch_writers.clear();
        let sorted = exact_sorted
            .get_or_insert_with(|| exact.iter().map(|(k, v)| (k.clone(), *v)).collect());
        for (k, slot) in sorted.range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        )) {
            if !k.as_str().starts_with(prefix) {
                break;
            }
            let Some(state) = states.get_mut(*slot as usize) else {
                continue;
            };
            let label = &k.0;
            if every_key || resource.matches(k.as_str()) {
                match mode {
                    AccessMode::Read => {
                        if let Some(w) = state.last_writer {
                            pending.add(w, call, Some(label), EdgeKind::ReadAfterWrite);
                        }
                    }
                    AccessMode::Write => {
                        let last_writer = state.last_writer.replace(call);
                        state.reads_synced = *seq + 1;
                        pending.write(call, Some(label), last_writer, &mut state.readers, reads);
                    }
                }
            }
            // Matched or not, the resource is under the prefix of the bucket being opened.
            if let Some(w) = state.last_writer.filter(|_| collect) {
                enter_writer(scratch_writers, meta, w, *slot, label);
            }
        }
    }

    /// Step 2's buckets: those whose prefix is a prefix of `prefix` (shorter), then those whose
    /// prefix starts with it (equal or longer), and how many are shorter. The list is the
    /// index's scratch buffer: the caller gives it back.
    fn overlapping_buckets(&mut self, prefix: &str) -> (Vec<u32>, usize) {
        let mut buckets = std::mem::take(&mut self.scratch_prefixes);
        buckets.clear();
        covering_buckets(
            &self.prefix_lens,
            &self.bucket_ids,
            prefix,
            false,
            &mut buckets,
        );
        let shorter = buckets.len();
        for (p, id) in self.bucket_order.range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        )) {
            if !p.starts_with(prefix) {
                break;
            }
            buckets.push(*id);
        }
        (buckets, shorter)
    }

    /// Step 2: an edge from each earlier wildcard entry the pattern overlaps and conflicts with.
    fn wild_against_wild(
        &mut self,
        call: usize,
        id: u32,
        mode: AccessMode,
        reads: bool,
        buckets: &[u32],
    ) {
        let after_write = if reads {
            EdgeKind::ReadAfterWrite
        } else {
            EdgeKind::WriteAfterWrite
        };
        for &b in buckets {
            // The writes, then (for a write) the reads; entries are `Copy`, read one at a time
            // so that recording an edge may borrow the index.
            for (of_reads, kind) in [(false, after_write), (true, EdgeKind::WriteAfterRead)] {
                if of_reads && mode == AccessMode::Read {
                    break;
                }
                for i in 0.. {
                    let entry = self.buckets.get(b as usize).and_then(|b| match of_reads {
                        false => b.writes.get(i),
                        true => b.reads.get(i),
                    });
                    let Some(&e) = entry else {
                        break;
                    };
                    if e.call != call && self.overlaps(id, e.pattern) {
                        // The label: the narrower pattern when one contains the other, else
                        // the new one (`None`: the access itself). Borrowed, so that the
                        // edge takes the one reference count it keeps.
                        let narrower = self.contains(id, e.pattern);
                        let label = self.patterns.get(e.pattern as usize).filter(|_| narrower);
                        self.pending.add(e.call, call, label, kind);
                    }
                }
            }
        }
    }

    /// Step 3: a write removes the earlier entries it contains (a later access that overlaps
    /// one of them overlaps the write too, and is ordered after it). The bucket of the write's
    /// own `prefix` stays open even when emptied: the write's entry goes there next, and its
    /// writers still cover the resources the write did not match.
    fn prune_contained(&mut self, id: u32, prefix: &str, buckets: &[u32]) {
        for &b in buckets {
            let Some(bucket) = self.buckets.get_mut(b as usize) else {
                continue;
            };
            let (mut reads, mut writes) = (
                std::mem::take(&mut bucket.reads),
                std::mem::take(&mut bucket.writes),
            );
            let mut keep = |e: &WildEntry| !self.contains(id, e.pattern);
            reads.retain(&mut keep);
            writes.retain(&mut keep);
            let mut emptied = reads.is_empty() && writes.is_empty();
            if let Some(bucket) = self.buckets.get_mut(b as usize) {
                (bucket.reads, bucket.writes) = (reads, writes);
                emptied &= &*bucket.prefix != prefix;
            }
            if emptied {
                self.free_bucket(b);
            }
        }
    }

    /// Frees an emptied bucket's slot and forgets its prefix.
    /// Freeing a slot twice does nothing: a slot handed out twice would put two prefixes' entries
    /// in one bucket.
    fn free_bucket(&mut self, b: u32) {
        let Some(bucket) = self.buckets.get_mut(b as usize) else {
            return;
        };
        if self.bucket_ids.get(&*bucket.prefix) != Some(&b) {
            return; // free already (a live bucket is the one its prefix names)
        }
        let prefix = std::mem::take(&mut bucket.prefix);
        self.bucket_generation += 1;
        self.bucket_ids.remove(&prefix);
        self.bucket_order.remove(&prefix);
        self.drop_prefix_len(prefix.len());
        self.free.push(b);
    }

    /// Step 4: the access's own entry, in its prefix's bucket.
    fn record_wild(&mut self, call: usize, id: u32, prefix: &str, mode: AccessMode) {
        let entry = WildEntry {
            seq: self.seq,
            call,
            pattern: id,
        };
        self.seq += 1;
        let b = match self.bucket_ids.get(prefix) {
            Some(&b) => b,
            None => {
                *self.prefix_lens.entry(prefix.len()).or_insert(0) += 1;
                // A new bucket, whatever the slot held before, with the writers the scan found.
                let writers = std::mem::take(&mut self.scratch_writers);
                let bucket = Bucket {
                    prefix: prefix.into(),
                    compact_at: next_compaction(writers.len()),
                    writers,
                    ..Bucket::default()
                };
                let b = occupy(&mut self.buckets, &mut self.free, bucket);
                self.bucket_generation += 1;
                self.bucket_ids.insert(prefix.into(), b);
                self.bucket_order.insert(prefix.into(), b);
                b
            }
        };
        if let Some(bucket) = self.buckets.get_mut(b as usize) {
            match mode {
                AccessMode::Read => bucket.reads.push(entry),
                AccessMode::Write => bucket.writes.push(entry),
            }
        }
    }

    fn drop_prefix_len(&mut self, len: usize) {
        if let Some(n) = self.prefix_lens.get_mut(&len) {
            *n -= 1;
            if *n == 0 {
                self.prefix_lens.remove(&len);
            }
        }
    }

    /// Forgets every call for which `finished` answers `true`: they impose no more waiting.
    /// Later calls get no edges to them, so an embedder that wants every historical edge keeps
    /// the calls until its batch ends. Memory is then bounded by the calls still alive.
    pub fn forget(&mut self, mut finished: impl FnMut(usize) -> bool) {
        let (states, free_states) = (&mut self.states, &mut self.free_states);
        self.exact.retain(|_, slot| {
            let Some(s) = states.get_mut(*slot as usize) else {
                return false;
            };
            s.readers.retain(|r| !finished(*r));
            if s.last_writer.is_some_and(&mut finished) {
                s.last_writer = None;
            }
            let live = s.last_writer.is_some() || !s.readers.is_empty();
            if !live {
                free_states.push(*slot);
            }
            live
        });
        let exact = &self.exact;
        if let Some(sorted) = &mut self.exact_sorted {
            sorted.retain(|k, _| exact.contains_key(k));
        }
        let mut emptied = Vec::new();
        for &id in self.bucket_ids.values() {
            let Some(b) = self.buckets.get_mut(id as usize) else {
                continue;
            };
            b.reads.retain(|e| !finished(e.call));
            b.writes.retain(|e| !finished(e.call));
            // A forgotten writer is no resource's last writer any more, and a freed state's
            // slot may be reused: only current writers stay.
            b.compact(&self.states);
            if b.reads.is_empty() && b.writes.is_empty() {
                emptied.push(id);
            }
        }
        for id in emptied {
            self.free_bucket(id);
        }
    }

    /// Whether the index holds no state at all.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.bucket_ids.is_empty()
    }
}
