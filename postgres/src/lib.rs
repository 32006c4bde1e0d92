//! Sluice on PostgreSQL: a conflict domain and a provenance log shared by every process that
//! points at one database.
//!
//! # The conflict domain ([`PgDomain`])
//!
//! Each process keeps its own in-memory domain for its own calls; [`PgDomain`] adds the one the
//! processes share (the kernel's [`SharedDomain`](sluice_kernel::order::shared::SharedDomain)
//! seam). The crate is laid out by job:
//!
//! - `connection`: a URL made into a driver configuration whose every wait is bounded (connect,
//!   statement, TCP user timeout, keepalives), TLS with rustls for `sslmode=require`, errors as
//!   sentences with no password in them ([`redact_url`]), and the names that keep two
//!   deployments in two schemas of one database apart (their notification channel and their
//!   advisory-lock keys).
//! - `admission`: one task admits every call waiting, as one group, in one transaction of two
//!   round trips: the tenants' advisory locks (once per group), a check that this process's
//!   lease is still fresh, the tenants' unfinished calls and the group's admission numbers go
//!   out together; then every row in one insert and the commit. Conflicts are decided by the
//!   kernel's own pattern code ([`first_conflict`](sluice_kernel::order::first_conflict)),
//!   globs included, so the two domains cannot disagree. A call the database cannot hold (a NUL
//!   in its id) fails alone, `invalid-input`. Another task sends the releases, grouped too.
//! - `listener`: the calls waiting for calls of any process, woken by `LISTEN`/`NOTIFY` (the
//!   payload is a ticket and a flag, never a caller's text) and re-checked on every heartbeat.
//! - `statements` and `state`, below the tasks: the SQL each connection prepares once, and the
//!   state every task shares (the lease, the waiters, the current generation of connections, the
//!   bounded round trip); `PgDomain` (`domain`) sits on top. No module imports one that imports
//!   it back (`tests/layout.rs` checks it).
//! - `leases`: the supervisor. It heartbeats this process's lease (each process's lease is its
//!   own: its row holds its expiry, and other processes judge it by that), marks the calls of
//!   processes whose lease ran out `lost`, and when a connection fails it reconnects with
//!   backoff, re-registers, and resends what did not reach the database.
//!
//! The admission number is the call's fencing token. A process that cannot reach the database
//! admits nothing: a call waits at most [`PgOptions::unavailable_after`] for it to come back,
//! then ends `domain-unavailable` (fail closed); after it comes back the same process admits
//! again, no restart needed. A process whose lease lapsed (a long pause, a long outage) runs
//! none of the calls it had admitted and starts a new lease before it admits again.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_kernel::{builtin, Kernel};
//! use sluice_postgres::{PgDomain, PgOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let options = PgOptions::new(Duration::from_secs(10)).unavailable_after(Duration::from_secs(5));
//! let domain = PgDomain::connect_with("postgres://sluice@127.0.0.1:5432/sluice", options).await?;
//! let kernel = Kernel::builder()
//!     .tools(builtin::registry(builtin::BuiltinConfig::default())?)
//!     .shared_domain(domain.clone())
//!     .build()?;
//! // ... run batches: conflicting calls of a tenant never overlap across processes ...
//! assert!(domain.health().is_ok());
//! domain.close().await;
//! # Ok(()) }
//! ```
//!
//! # Shared provenance ([`PgProvenance`])
//!
//! One append-only table, one hash chain per tenant, written with group commit; each tenant's
//! chain is read back as a [`LogSource`](sluice_provenance::LogSource) ([`PgChain`]).

mod admission;
mod connection;
mod domain;
mod leases;
mod listener;
mod provenance;
mod schema;
mod state;
mod statements;

use std::time::Duration;

pub use connection::{is_postgres_url, redact_url};
pub use domain::PgDomain;
pub use provenance::{PgChain, PgProvenance};
pub use schema::{migrate, MIGRATIONS};

/// Connects to `url` and brings its schema to the newest version (`sluice db migrate`): returns
/// (version before, version after).
pub async fn migrate_url(url: &str) -> Result<(i32, i32), PgError> {
    let target = connection::Target::parse(url, PgOptions::DEFAULT_UNAVAILABLE_AFTER)?;
    let (mut client, _conn) = target.connect().await?;
    migrate(&mut client).await.map_err(|e| PgError::Database {
        url: target.shown.clone(),
        why: connection::why(&e),
    })
}

/// Why the shared domain or log could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The database cannot be reached, or refused a statement.
    #[error("the database {url}: {why}")]
    Database {
        /// The URL, without its password.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The URL is not a PostgreSQL URL.
    #[error("`{0}` is not a postgres:// URL")]
    NotAUrl(String),
    /// The options cannot work (a lease too short to heartbeat within it, say).
    #[error("{0}")]
    Options(String),
}

/// How a [`PgDomain`] keeps its lease and how long it waits for the database.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PgOptions {
    /// This process's lease: it heartbeats every third of it; another process marks its
    /// unfinished calls `lost` once its last heartbeat is older than this.
    pub lease: Duration,
    /// How long anything waits for the database: a call for a connection to admit it on, a
    /// waiting call for the database to come back, a statement, a connection attempt. Past it
    /// the call ends `domain-unavailable`.
    pub unavailable_after: Duration,
}

impl PgOptions {
    /// The shortest lease: a heartbeat every third of it must have time to reach the database.
    pub const MIN_LEASE: Duration = Duration::from_millis(300);
    /// The default for [`PgOptions::unavailable_after`].
    pub const DEFAULT_UNAVAILABLE_AFTER: Duration = Duration::from_secs(5);

    /// A lease of `lease`, waits of [`PgOptions::DEFAULT_UNAVAILABLE_AFTER`].
    pub fn new(lease: Duration) -> Self {
        PgOptions {
            lease,
            unavailable_after: Self::DEFAULT_UNAVAILABLE_AFTER,
        }
    }

    /// Waits for the database of at most `wait`.
    pub fn unavailable_after(mut self, wait: Duration) -> Self {
        self.unavailable_after = wait;
        self
    }

    fn check(&self) -> Result<(), PgError> {
        if self.lease < Self::MIN_LEASE {
            return Err(PgError::Options(format!(
                "a lease of {:?} is too short to heartbeat (every third of it): a lease is at \
                 least {:?}",
                self.lease,
                Self::MIN_LEASE
            )));
        }
        if self.unavailable_after < Duration::from_millis(100) {
            return Err(PgError::Options(format!(
                "a wait for the database of {:?} is too short: at least 100ms",
                self.unavailable_after
            )));
        }
        Ok(())
    }
}
