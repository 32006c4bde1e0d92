//! The tenant's conflict domain: one incremental conflict index per tenant, shared by all its
//! batches, and a slot per call that has not released its successors yet (see [`TenantDomain`]).
//!
//! Invariant (**release after predecessors**): an inserted call releases its successors only
//! after its own predecessors have finished — even when it is rejected, skipped or cancelled.
//! The graph leaves out edges that a path implies; releasing a middle call early would let the two
//! ends of such a path overlap.

use dashmap::DashMap;
use hashbrown::HashMap;
use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::index::{CompactEdge, ConflictIndex, Edge};
use crate::access::Access;
use crate::transport::Tool;

/// What a call learns when its predecessors are done.
#[derive(Debug, Clone, Default)]
pub(crate) struct Upstream {
    /// A predecessor that failed (its call id), for `skip-dependents`.
    pub(crate) failed: Option<String>,
}

/// A call that has not released its successors yet.
#[derive(Debug)]
struct Slot {
    pending: usize,
    successors: Vec<usize>,
    ready: Option<oneshot::Sender<Upstream>>,
    failed_upstream: Option<String>,
}

/// What the domain knows of one position the index may still name.
#[derive(Debug)]
struct Entry {
    /// Who it is, for edge records (`None` when nothing is recorded).
    owner: Option<Owner>,
    /// `Some` until the call releases its successors.
    slot: Option<Slot>,
    /// Whether the call's batch has ended (no more edges inside it will be asked for).
    batch_ended: bool,
    /// After it released: its id when its dependents should count it as failed. A dependent
    /// submitted after it finished (a batch streamed call by call) learns it from here.
    failed: Option<String>,
}

/// Who a position in the domain is (kept only when someone asks: a provenance sink for its edge
/// records, a batch observer for what a call waits for).
#[derive(Clone)]
pub(crate) struct Owner {
    pub(crate) batch: Arc<str>,
    pub(crate) call: Arc<str>,
    /// Its tool (`None`: unknown).
    pub(crate) tool: Option<Arc<Tool>>,
    /// What its batch's observer marked it with.
    pub(crate) mark: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("batch", &self.batch)
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

/// An edge found for a new call, with who its source is.
#[derive(Debug, Clone)]
pub(crate) struct FoundEdge {
    pub(crate) edge: Edge,
    pub(crate) from: Owner,
    /// Whether the source had not released yet: the new call waits for it.
    pub(crate) pending: bool,
}

/// A call inserted into its tenant's domain.
#[derive(Debug)]
pub(crate) struct Inserted {
    pub(crate) position: usize,
    pub(crate) edges: Vec<FoundEdge>,
    /// How many unreleased calls it waits for that have no [`Owner`] (or are behind a
    /// quarantine barrier).
    pub(crate) unnamed: usize,
    pub(crate) ready: Ready,
}

/// The conflict index panicked while inserting a call: a defect of Sluice, not of the call. The
/// call is refused (`internal`) and the domain is still usable (see [`TenantDomain::insert`]).
#[derive(Debug)]
pub(crate) struct IndexPanicked;

/// Resolves when a call's predecessors are done (at once when it has none).
#[derive(Debug)]
pub(crate) enum Ready {
    /// Nothing to wait for (and what an already finished predecessor left, for
    /// `skip-dependents`).
    Now(Upstream),
    /// Waiting for predecessors.
    Later(oneshot::Receiver<Upstream>),
    /// Already resolved (the future was polled to completion).
    Done,
}

impl std::future::Future for Ready {
    type Output = Upstream;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Upstream> {
        match &mut *self {
            Ready::Now(u) => {
                let u = std::mem::take(u);
                *self = Ready::Done;
                std::task::Poll::Ready(u)
            }
            Ready::Done => std::task::Poll::Ready(Upstream::default()),
            Ready::Later(rx) => match std::pin::Pin::new(rx).poll(cx) {
                std::task::Poll::Ready(u) => {
                    *self = Ready::Done;
                    std::task::Poll::Ready(u.unwrap_or_default())
                }
                std::task::Poll::Pending => std::task::Poll::Pending,
            },
        }
    }
}

/// Resolves when a call's predecessors are done in its tenant's domain and, for a tool shared
/// between tenants, in the commons too; with what the tenant's domain left (a commons
/// predecessor is another tenant's business: its failure skips nothing here).
#[derive(Debug)]
pub(crate) struct Readiness {
    tenant: Ready,
    commons: Option<Ready>,
}

impl Readiness {
    /// Both signals, awaited together.
    pub(crate) fn new(tenant: Ready, commons: Option<Ready>) -> Self {
        Readiness { tenant, commons }
    }
}

impl std::future::Future for Readiness {
    type Output = Upstream;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Upstream> {
        if let Some(c) = &mut self.commons {
            match std::pin::Pin::new(c).poll(cx) {
                std::task::Poll::Ready(_) => self.commons = None,
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
        std::pin::Pin::new(&mut self.tenant).poll(cx)
    }
}

/// The one domain that every tenant's calls of a tool shared between tenants also enter
/// (`TenantScope::Shared`): two tenants' conflicting calls of one shared resource are ordered
/// here, in the order they entered it, and never overlap.
///
/// A call enters it while its tenant's domain is locked (lock order: tenant, then commons), so
/// the commons admits a tenant's calls in the order they entered the tenant's domain; every wait,
/// in either domain, is then for a call that entered both earlier, and no cycle can form. Its
/// calls have no owner: a call waiting here learns how many calls it waits for, never whose.
/// Nothing asks for a commons call's edges, so a call is forgotten as soon as it releases.
#[derive(Debug, Default)]
pub(crate) struct Commons {
    domain: Mutex<TenantDomain>,
}

/// A call's place in the commons.
#[derive(Debug)]
pub(crate) struct CommonsPlace {
    pub(crate) position: usize,
    pub(crate) ready: Ready,
    /// How many unreleased calls (of any tenant) it waits for there.
    pub(crate) waits_for: usize,
}

impl Commons {
    /// Enters a call's accesses (see [`TenantDomain::insert`] for a panic inside the index).
    pub(crate) fn insert(&self, accesses: &[Access]) -> Result<CommonsPlace, IndexPanicked> {
        let mut d = lock(&self.domain);
        let inserted = d.insert(None, accesses)?;
        d.batch_ended(&[inserted.position]);
        Ok(CommonsPlace {
            position: inserted.position,
            ready: inserted.ready,
            waits_for: inserted.unnamed,
        })
    }

    /// A call releases its successors there (after its predecessors there: the caller keeps
    /// **release after predecessors**).
    pub(crate) fn release(&self, position: usize) {
        lock(&self.domain).finish(position, None);
    }

    /// (calls not released, positions remembered); both 0 when no shared call is alive.
    pub(crate) fn load(&self) -> (usize, usize) {
        let d = lock(&self.domain);
        (d.live(), d.remembered())
    }
}

/// How many forgettable positions may pile up beyond the live calls before a sweep: the sweep
/// costs O(index), so it runs once per this many finished calls (amortized O(1) per call).
const SWEEP_SLACK: usize = 64;

/// One tenant's conflict domain (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TenantDomain {
    index: ConflictIndex,
    next: usize,
    /// Every position the index may still name.
    ///
    /// Invariant (**forget only the settled**): a position leaves `entries` (and the index
    /// forgets it) only once its call has released its successors (`slot` is `None`) *and* its
    /// batch has ended. Forgetting an unreleased call would drop the only link from a resource to
    /// the calls still ahead of it (a cancelled call reports at once but keeps its place until
    /// its predecessors finish); forgetting a call of a live batch would lose the edges its batch
    /// may still record.
    entries: HashMap<usize, Entry>,
    /// Positions with a slot (calls that have not released).
    live: usize,
    /// Positions that satisfy **forget only the settled** and are not yet swept.
    forgettable: Vec<usize>,
    /// After the index panicked: the calls that were live then. The index was rebuilt empty, so
    /// it no longer knows them; every call inserted since waits for those still live (more
    /// waiting than needed, never less).
    barrier: Vec<usize>,
    /// The new call's edges as the index finds them: each is resolved to an [`Edge`] only when
    /// its source has an [`Owner`] to report it to.
    scratch: Vec<CompactEdge>,
    /// Test hook: the next index insert panics.
    #[cfg(test)]
    pub(crate) panic_next_insert: bool,
}

impl TenantDomain {
    /// Inserts a call; its ready signal fires at once when it waits for nobody.
    ///
    /// A panic inside the conflict index is caught here, with the domain's lock still held (so
    /// it is not poisoned): the call is refused, the index is rebuilt empty, and every call live
    /// at that moment becomes a barrier that later calls wait for.
    pub(crate) fn insert(
        &mut self,
        owner: Option<Owner>,
        accesses: &[Access],
    ) -> Result<Inserted, IndexPanicked> {
        let position = self.next;
        self.next += 1;
        self.scratch.clear();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            if std::mem::take(&mut self.panic_next_insert) {
                panic!("injected: the conflict index panicked");
            }
            self.index
                .insert_compact(position, accesses, &mut self.scratch);
        }));
        if caught.is_err() {
            self.quarantine();
            return Err(IndexPanicked);
        }
        let mut pending = 0;
        let mut named = 0;
        let mut edges = Vec::new();
        let mut failed_upstream = None;
        for e in self.scratch.drain(..) {
            let Some(pred) = self.entries.get_mut(&e.from) else {
                continue;
            };
            let waits = match &mut pred.slot {
                Some(slot) => {
                    slot.successors.push(position);
                    pending += 1;
                    true
                }
                // Finished already: a failure it left still counts (`skip-dependents`).
                None => {
                    if failed_upstream.is_none() {
                        failed_upstream.clone_from(&pred.failed);
                    }
                    false
                }
            };
            if let Some(from) = &pred.owner {
                named += usize::from(waits);
                edges.push(FoundEdge {
                    from: from.clone(),
                    edge: e.resolve(accesses),
                    pending: waits,
                });
            }
        }
        if !self.barrier.is_empty() {
            let entries = &mut self.entries;
            self.barrier
                .retain(|p| entries.get(p).is_some_and(|e| e.slot.is_some()));
            for p in &self.barrier {
                if let Some(slot) = entries.get_mut(p).and_then(|e| e.slot.as_mut()) {
                    if slot.successors.last() != Some(&position) {
                        slot.successors.push(position);
                        pending += 1;
                    }
                }
            }
        }
        let (ready, rx) = if pending == 0 {
            (
                None,
                Ready::Now(Upstream {
                    failed: failed_upstream.clone(),
                }),
            )
        } else {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Ready::Later(rx))
        };
        self.entries.insert(
            position,
            Entry {
                owner,
                slot: Some(Slot {
                    pending,
                    successors: Vec::new(),
                    ready,
                    failed_upstream,
                }),
                batch_ended: false,
                failed: None,
            },
        );
        self.live += 1;
        Ok(Inserted {
            position,
            edges,
            unnamed: pending - named,
            ready: rx,
        })
    }

    /// After a panic in the index: start a fresh index; the calls live now become the barrier.
    fn quarantine(&mut self) {
        self.index = ConflictIndex::new();
        self.scratch.clear();
        self.forgettable.clear();
        // Positions that have released are no longer named by anyone; the live ones stay until
        // they release and their batch ends.
        self.entries.retain(|_, e| e.slot.is_some());
        self.barrier = self.entries.keys().copied().collect();
        self.barrier.sort_unstable();
    }

    /// A call releases its successors: they wait for one fewer call. `failed` names the call
    /// when its dependents should count it as failed (for `skip-dependents`).
    pub(crate) fn finish(&mut self, position: usize, failed: Option<&str>) {
        let Some(entry) = self.entries.get_mut(&position) else {
            return;
        };
        let Some(slot) = entry.slot.take() else {
            return;
        };
        entry.failed = failed.map(str::to_owned);
        self.live -= 1;
        if entry.batch_ended {
            self.forgettable.push(position);
        }
        for s in slot.successors {
            let Some(succ) = self.entries.get_mut(&s).and_then(|e| e.slot.as_mut()) else {
                continue;
            };
            if succ.failed_upstream.is_none() {
                succ.failed_upstream = failed.map(str::to_owned);
            }
            succ.pending = succ.pending.saturating_sub(1);
            if succ.pending == 0 {
                if let Some(tx) = succ.ready.take() {
                    let _ = tx.send(Upstream {
                        failed: succ.failed_upstream.clone(),
                    });
                }
            }
        }
        self.settle();
    }

    /// A batch has ended: its calls may be forgotten once each has released.
    pub(crate) fn batch_ended(&mut self, positions: &[usize]) {
        for p in positions {
            if let Some(e) = self.entries.get_mut(p) {
                if !e.batch_ended {
                    e.batch_ended = true;
                    if e.slot.is_none() {
                        self.forgettable.push(*p);
                    }
                }
            }
        }
        self.settle();
    }

    /// Forgets what may be forgotten: everything at once when nothing else is remembered, else
    /// in a sweep once enough has piled up.
    fn settle(&mut self) {
        if self.live == 0 && self.forgettable.len() == self.entries.len() {
            // Idle: every remembered position is settled.
            self.forgettable.clear();
            self.entries.clear();
            self.barrier.clear();
            self.index = ConflictIndex::new();
        } else if self.forgettable.len() > self.live + SWEEP_SLACK {
            let gone: hashbrown::HashSet<usize> = self.forgettable.drain(..).collect();
            for p in &gone {
                self.entries.remove(p);
            }
            self.index.forget(|p| gone.contains(&p));
        }
    }

    /// Whether the domain holds no state: no call live or remembered. (The index names only
    /// positions in `entries`: it is emptied with them, and restarted empty by a quarantine.)
    pub(crate) fn is_idle(&self) -> bool {
        debug_assert!(!self.entries.is_empty() || self.index.is_empty());
        self.entries.is_empty()
    }

    /// Calls that have not released their successors.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Positions the index may still name (live calls, and finished calls not yet forgotten).
    pub(crate) fn remembered(&self) -> usize {
        self.entries.len()
    }
}

/// The tenants' conflict domains: one for each tenant with state, none for an idle tenant.
///
/// A domain is reached only through a [`DomainRef`]. Dropping a ref removes the domain from the
/// map when the domain is idle and nobody else holds it: the check runs under the map's shard
/// lock, where no one can take a new ref, so a tenant never has two domains at once (two would
/// let conflicting calls of one tenant overlap).
#[derive(Debug, Default)]
pub(crate) struct Domains {
    map: DashMap<Arc<str>, Arc<Mutex<TenantDomain>>>,
}

/// A handle on one tenant's domain (see [`Domains`]).
#[derive(Debug)]
pub(crate) struct DomainRef {
    domains: Arc<Domains>,
    tenant: Arc<str>,
    domain: Option<Arc<Mutex<TenantDomain>>>,
}

impl Domains {
    /// The tenant's domain, made when it has none.
    pub(crate) fn get(self: &Arc<Self>, tenant: &Arc<str>) -> DomainRef {
        let domain = match self.map.get(&**tenant) {
            Some(d) => d.clone(),
            None => self.map.entry(tenant.clone()).or_default().clone(),
        };
        DomainRef {
            domains: self.clone(),
            tenant: tenant.clone(),
            domain: Some(domain),
        }
    }

    /// The tenant's domain if it has one.
    pub(crate) fn existing(self: &Arc<Self>, tenant: &Arc<str>) -> Option<DomainRef> {
        let domain = self.map.get(&**tenant)?.clone();
        Some(DomainRef {
            domains: self.clone(),
            tenant: tenant.clone(),
            domain: Some(domain),
        })
    }

    /// (calls not released, positions remembered) for a tenant; (0, 0) without a domain.
    pub(crate) fn load(&self, tenant: &str) -> (usize, usize) {
        self.map.get(tenant).map_or((0, 0), |d| {
            let d = lock(&d);
            (d.live(), d.remembered())
        })
    }

    /// Whether the tenant has a domain.
    pub(crate) fn contains(&self, tenant: &str) -> bool {
        self.map.contains_key(tenant)
    }

    /// How many tenants have a domain.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn evict_if_idle(&self, tenant: &str) {
        let evictable =
            |d: &Arc<Mutex<TenantDomain>>| Arc::strong_count(d) == 1 && lock(d).is_idle();
        // Look under the read lock first: most drops find the domain busy.
        if self.map.get(tenant).is_some_and(|d| evictable(&d)) {
            self.map.remove_if(tenant, |_, d| evictable(d));
        }
    }
}

impl DomainRef {
    /// The domain, locked. Every update of a domain leaves it consistent and a panic inside the
    /// conflict index is caught under the lock, so a poisoned lock is recovered, never fatal.
    pub(crate) fn lock(&self) -> MutexGuard<'_, TenantDomain> {
        match &self.domain {
            Some(d) => lock(d),
            // Only `drop` takes the domain out.
            None => unreachable!("a DomainRef holds its domain until it is dropped"),
        }
    }
}

impl Clone for DomainRef {
    fn clone(&self) -> Self {
        DomainRef {
            domains: self.domains.clone(),
            tenant: self.tenant.clone(),
            domain: self.domain.clone(),
        }
    }
}

impl Drop for DomainRef {
    fn drop(&mut self) {
        // Let go first, then look: the last holder to let go sees the count at one.
        drop(self.domain.take());
        self.domains.evict_if_idle(&self.tenant);
    }
}

fn lock(d: &Mutex<TenantDomain>) -> MutexGuard<'_, TenantDomain> {
    d.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Pattern;
    use crate::model::EffectKind;

    fn w(r: &str) -> Vec<Access> {
        vec![Access::new(EffectKind::Writes, Pattern::parse(r).unwrap())]
    }

    fn waits(i: &Inserted) -> bool {
        matches!(i.ready, Ready::Later(_))
    }

    #[test]
    fn a_released_call_of_a_live_batch_and_an_unreleased_call_of_an_ended_batch_are_both_kept() {
        let mut d = TenantDomain::default();
        let a = d.insert(None, &w("kv:r")).unwrap(); // batch 1, running
        let c = d.insert(None, &w("kv:r")).unwrap(); // batch 2, waits for a
        assert!(waits(&c));
        // Batch 2 also ran 70 quick calls, then ended (c was reported cancelled at once).
        let quick: Vec<usize> = (0..70)
            .map(|i| d.insert(None, &w(&format!("kv:q{i}"))).unwrap().position)
            .collect();
        for q in &quick {
            d.finish(*q, None);
        }
        let mut ended = quick.clone();
        ended.push(c.position);
        d.batch_ended(&ended);
        assert_eq!(
            d.remembered(),
            2,
            "the sweep forgot the settled, kept a and c"
        );
        // Batch 3: d must wait for c (and so for a), not start beside a.
        let d3 = d.insert(None, &w("kv:r")).unwrap();
        assert!(waits(&d3), "c kept its place although its batch ended");
        d.finish(a.position, None);
        d.finish(c.position, Some("c"));
        d.finish(d3.position, None);
        assert!(!d.is_idle());
        d.batch_ended(&[a.position, d3.position]);
        assert!(d.is_idle(), "idle at the end");
        assert_eq!((d.live(), d.remembered()), (0, 0));
    }

    #[test]
    fn the_domain_is_idle_when_the_last_release_comes_after_the_batch_ended() {
        let mut d = TenantDomain::default();
        let a = d.insert(None, &w("kv:r")).unwrap();
        let c = d.insert(None, &w("kv:r")).unwrap();
        d.batch_ended(&[c.position]);
        d.finish(a.position, None);
        d.batch_ended(&[a.position]);
        assert!(!d.is_idle());
        // The last event is c's (deferred) release: the domain must still empty itself.
        d.finish(c.position, None);
        assert!(d.is_idle());
    }

    #[test]
    fn a_panic_in_the_index_refuses_the_call_and_later_calls_wait_for_every_live_call() {
        let mut d = TenantDomain::default();
        let a = d.insert(None, &w("kv:a")).unwrap();
        d.panic_next_insert = true;
        assert!(d.insert(None, &w("kv:x")).is_err());
        // The index was rebuilt: it no longer knows a, so b (even of another resource) waits
        // for a through the barrier: more waiting than needed, never less.
        let b = d.insert(None, &w("kv:b")).unwrap();
        assert!(waits(&b));
        let a2 = d.insert(None, &w("kv:a")).unwrap();
        assert!(waits(&a2));
        d.finish(a.position, None);
        let mut ready = b.ready;
        assert!(ready_now(&mut ready).is_some(), "b is released by a");
        // Once a has gone, the barrier is gone: a fresh call of another resource waits for nobody.
        let c = d.insert(None, &w("kv:c")).unwrap();
        assert!(!waits(&c));
        d.finish(b.position, None);
        d.finish(a2.position, None);
        d.finish(c.position, None);
        d.batch_ended(&[a.position, b.position, a2.position, c.position]);
        assert!(d.is_idle());
    }

    #[test]
    fn a_call_that_finished_in_a_live_batch_still_gives_its_edges() {
        let owner = |call: &str| {
            Some(Owner {
                batch: Arc::from("b"),
                call: Arc::from(call),
                tool: None,
                mark: None,
            })
        };
        let mut d = TenantDomain::default();
        let a = d.insert(owner("a"), &w("kv:r")).unwrap();
        d.finish(a.position, None);
        // Nothing is live, but a's batch has not ended: a is remembered, and b's edge names it.
        assert_eq!((d.live(), d.remembered()), (0, 1));
        let b = d.insert(owner("b"), &w("kv:r")).unwrap();
        assert!(!waits(&b), "a has released");
        let from: Vec<&str> = b.edges.iter().map(|e| &*e.from.call).collect();
        assert_eq!(from, ["a"]);
        assert!(!b.edges[0].pending, "b does not wait for a");
    }

    #[test]
    fn an_inserted_call_says_which_unreleased_calls_it_waits_for() {
        let named = |call: &str| {
            Some(Owner {
                batch: Arc::from("b"),
                call: Arc::from(call),
                tool: None,
                mark: Some(Arc::new(call.to_owned())),
            })
        };
        let mut d = TenantDomain::default();
        let a = d.insert(named("a"), &w("kv:r")).unwrap();
        let anon = d.insert(None, &w("kv:s")).unwrap();
        let done = d.insert(named("done"), &w("kv:t")).unwrap();
        d.finish(done.position, None);
        let c = d.insert(named("c"), &w("kv:*")).unwrap();
        assert!(waits(&c));
        let pending: Vec<(&str, bool)> =
            c.edges.iter().map(|e| (&*e.from.call, e.pending)).collect();
        assert_eq!(pending, [("a", true), ("done", false)]);
        assert_eq!(
            c.unnamed, 1,
            "the call without an owner is counted, not named"
        );
        let mark = c.edges[0].from.mark.as_ref().unwrap();
        assert_eq!(mark.downcast_ref::<String>().unwrap(), "a");
        d.finish(a.position, None);
        d.finish(anon.position, None);
        d.finish(c.position, None);
    }

    #[test]
    fn a_domain_with_only_pure_calls_is_idle_only_once_they_are_settled() {
        let mut d = TenantDomain::default();
        let p = d.insert(None, &[]).unwrap();
        assert!(!d.is_idle(), "a live pure call is state");
        d.finish(p.position, None);
        assert!(!d.is_idle(), "its batch has not ended");
        d.batch_ended(&[p.position]);
        assert!(d.is_idle());
    }

    fn ready_now(r: &mut Ready) -> Option<Upstream> {
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        match std::future::Future::poll(std::pin::Pin::new(r), &mut cx) {
            std::task::Poll::Ready(u) => Some(u),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn an_idle_domain_leaves_the_map_when_its_last_holder_lets_go() {
        let domains = Arc::new(Domains::default());
        let t: Arc<str> = Arc::from("t");
        let first = domains.get(&t);
        let second = domains.get(&t);
        let p = first.lock().insert(None, &w("kv:a")).unwrap().position;
        first.lock().finish(p, None);
        second.lock().batch_ended(&[p]);
        drop(first);
        assert_eq!(domains.len(), 1, "still held by the second ref");
        drop(second);
        assert_eq!(domains.len(), 0);
        // A busy domain stays.
        let r = domains.get(&t);
        let busy = r.lock().insert(None, &w("kv:a")).unwrap().position;
        drop(r);
        assert_eq!(domains.load("t"), (1, 1));
        let r = domains
            .existing(&t)
            .expect("a busy domain stays in the map");
        r.lock().finish(busy, None);
        r.lock().batch_ended(&[busy]);
        drop(r);
        assert!(!domains.contains("t"));
    }
}
