//! The seam for a conflict domain that several processes share (PostgreSQL, in the
//! `sluice-postgres` crate). The in-memory domain (`domain.rs`) still orders a process's own calls;
//! a shared domain orders them against every other process's calls of the tenant too.
//!
//! Why two domains cannot deadlock: a process hands its calls to [`SharedDomain::admit`] while it
//! holds the tenant's local lock, in the order they enter its local domain, so the shared domain
//! admits them in that order; every wait, local or shared, is then for a call that entered both
//! earlier, and no cycle can form.
//!
//! A call admitted there is released there exactly once, after its predecessors there: when it
//! ends, or, if it will not run (cancelled, its batch dropped), by a settling task once they
//! have ended ([`crate::Kernel::shared_settled`] waits for those).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::access::Access;
use crate::error::Error;

/// A future the shared domain answers with (boxed: the seam is a trait object).
pub type SharedFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One call to admit.
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    /// The tenant: only its calls conflict with each other.
    pub tenant: Arc<str>,
    /// The batch id.
    pub batch: Arc<str>,
    /// The call id.
    pub call: String,
    /// The tool id.
    pub tool: String,
    /// The call's accesses (patterns included).
    pub accesses: Vec<Access>,
}

/// A call the shared domain admitted.
pub struct Admitted {
    /// Its admission number: increasing per domain, the call's fencing token (handlers see it in
    /// [`ToolContext::fencing_token`](crate::transport::ToolContext::fencing_token)).
    pub ticket: u64,
    /// Resolves once every earlier unfinished conflicting call, in any process, has ended; with
    /// the id of one that failed (or whose process was lost), for `skip-dependents`. An `Err` is
    /// a domain that can no longer say (the call does not run: fail closed).
    pub ready: SharedFuture<Result<Option<String>, Error>>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

/// Why a shared domain did not admit a call: the call does not run either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The domain cannot admit now (its database is unreachable, its lease lapsed, it was
    /// closed): the call ends `domain-unavailable` (fail closed).
    Unavailable(String),
    /// The domain cannot hold this call as given (a call id, tool or resource the store cannot
    /// keep, such as one with a NUL): the call alone ends `invalid-input`; the calls admitted
    /// with it are not affected.
    Invalid(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unavailable(why) | Refusal::Invalid(why) => f.write_str(why),
        }
    }
}

/// A conflict domain shared by processes.
pub trait SharedDomain: Send + Sync + 'static {
    /// Admits a call: called synchronously, in the order the process's calls entered the
    /// tenant's local domain (admissions must keep that order: a call enqueues its admission
    /// before this returns), while the kernel holds that tenant's local lock — so it must not
    /// block; the future answers once the call is admitted, or with why it cannot be (the
    /// database is unreachable, or cannot hold this call: the call does not run).
    fn admit(&self, request: AdmitRequest) -> SharedFuture<Result<Admitted, Refusal>>;

    /// The call ended (ran or not; `failed` for `skip-dependents`): its successors may go.
    /// Answers once that is recorded. The kernel calls it once the provenance sink has answered
    /// for the call's records, so a log the processes share holds a writer before any reader it
    /// released elsewhere.
    fn release(&self, tenant: &str, ticket: u64, failed: bool) -> SharedFuture<Result<(), Error>>;

    /// Whether the call admitted as `ticket` may start **now**: the kernel asks immediately
    /// before its handler starts, after every wait (its predecessors, an approval, a permit
    /// under the caps, anything added later), on the one path every call takes to its handler.
    /// An `Err` (the process's lease lapsed while the call waited: other processes may already
    /// have run conflicting calls) ends the call `domain-unavailable` without running it.
    /// Must not block. Default: always `Ok`.
    fn fence(&self, tenant: &str, ticket: u64) -> Result<(), Error> {
        let _ = (tenant, ticket);
        Ok(())
    }

    /// Names the domain in messages (a URL without its password).
    fn describe(&self) -> String;

    /// Ends this process's part in the domain, once every call of its kernel has been released
    /// there ([`crate::Kernel::shutdown`] waits for that first): other processes stop waiting
    /// on it at once. The domain admits nothing after it. Default: nothing to end.
    fn close(&self) -> SharedFuture<()> {
        Box::pin(async {})
    }
}
