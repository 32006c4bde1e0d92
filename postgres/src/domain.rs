//! The public [`PgDomain`]: it connects, starts the domain's tasks, and answers the kernel's
//! shared-domain seam.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_kernel::order::shared::{AdmitRequest, Admitted, Refusal, SharedDomain, SharedFuture};
use sluice_kernel::Error;
use tokio::sync::{mpsc, oneshot, watch};

use crate::admission::{self, Pending, Release};
use crate::connection::{self, Names, Target};
use crate::state::{closed, lock, Inner, Lease, Session};
use crate::{leases, schema, PgError, PgOptions};

/// A conflict domain in PostgreSQL, shared by every process that connects to the database.
#[derive(Clone)]
pub struct PgDomain {
    inner: Arc<Inner>,
    admit: mpsc::UnboundedSender<Pending>,
    release: mpsc::UnboundedSender<Release>,
}

impl std::fmt::Debug for PgDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDomain")
            .field("url", &self.inner.target.shown)
            .field("owner", &self.inner.lease().owner)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl PgDomain {
    /// [`PgDomain::connect_with`] with a lease of `lease` and the default waits.
    pub async fn connect(url: &str, lease: Duration) -> Result<Arc<Self>, PgError> {
        Self::connect_with(url, PgOptions::new(lease)).await
    }

    /// Connects (three connections: admissions, releases and leases, and the listener), runs
    /// the migrations, registers this process with its lease, and starts the tasks that
    /// admit, release, heartbeat, reap lost processes and reconnect. Fails when the options
    /// cannot work or the database cannot be reached now (fail closed); once connected, an
    /// outage is survived.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<Arc<Self>, PgError> {
        options.check()?;
        // A transaction of this process left open by a pause or a lost machine holds its
        // tenants' advisory locks and its owner row: the server ends it within half the shorter
        // of the lease and the wait, so neither the others' admissions nor the reaper wait on
        // it past `--db-timeout`.
        let target = Target::parse(url, options.unavailable_after)?
            .with_idle_transactions(options.unavailable_after.min(options.lease) / 2);
        let shown = target.shown.clone();
        let db = |e: tokio_postgres::Error| PgError::Database {
            url: shown.clone(),
            why: connection::why(&e),
        };
        let names = {
            let (mut client, _conn) = target.connect().await?;
            schema::migrate(&mut client).await.map_err(db)?;
            Names::for_schema(&connection::schema_of(&client).await.map_err(db)?)
        };
        let inner = Arc::new(Inner {
            target,
            options,
            names,
            lease: Mutex::new(Lease {
                owner: leases::new_owner_name().into(),
                incarnation: 0,
                fresh_until: Instant::now(),
            }),
            waiters: Mutex::new(HashMap::new()),
            session: watch::channel(None).0,
            down: Mutex::new(None),
            doubtful: Mutex::new(Vec::new()),
            closed: watch::channel(false).0,
            renew: tokio::sync::Notify::new(),
            admitted: Mutex::new(HashMap::new()),
            fault_pause_in_admission: std::env::var("SLUICE_FAULT_PAUSE_IN_ADMISSION_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis),
        });
        let session = Session::open(&inner)
            .await
            .map_err(|why| PgError::Database {
                url: shown.clone(),
                why,
            })?;
        leases::register(&inner, &session, true)
            .await
            .map_err(|why| PgError::Database {
                url: shown.clone(),
                why,
            })?;
        inner.up(session.clone());
        let (admit, admit_rx) = mpsc::unbounded_channel();
        let (release, release_rx) = mpsc::unbounded_channel();
        tokio::spawn(admission::admissions(inner.clone(), admit_rx));
        tokio::spawn(admission::releases(inner.clone(), release_rx));
        tokio::spawn(leases::supervise(inner.clone(), session));
        Ok(Arc::new(PgDomain {
            inner,
            admit,
            release,
        }))
    }

    /// This process's current name in the database (it changes when a lapsed lease is
    /// replaced).
    pub fn owner(&self) -> String {
        self.inner.lease().owner.to_string()
    }

    /// `Ok` while the database answers and the domain is open; else why not (for a health
    /// check: `sluice serve`'s `/healthz` answers 503 with it).
    pub fn health(&self) -> Result<(), Error> {
        let failed = |why| Error::SharedDomainFailed { why };
        if self.inner.is_closed() {
            return Err(failed(closed()));
        }
        match self.inner.current() {
            Some(s) if !s.is_dead() => Ok(()),
            _ => Err(failed(self.inner.unreachable())),
        }
    }

    /// Ends this process's lease (its calls have all been released): other processes stop
    /// waiting on it at once rather than at its lease's end. A call it left unreleased is
    /// marked `lost` by the next heartbeat of any process.
    ///
    /// After it, the domain admits nothing (a call is refused naming the closed domain), and
    /// its connections end.
    pub async fn close(&self) {
        self.inner.closed.send_replace(true);
        if let Some(s) = self.inner.current() {
            let owner = self.inner.lease().owner.clone();
            let _ = tokio::time::timeout(
                self.inner.options.unavailable_after,
                s.control
                    .execute("DELETE FROM sluice_owners WHERE owner = $1", &[&&*owner]),
            )
            .await;
            s.kill(closed());
        }
        self.inner.session.send_replace(None);
        self.inner.fail_waiters(|_| true, &closed());
    }
}

impl SharedDomain for PgDomain {
    fn admit(&self, request: AdmitRequest) -> SharedFuture<Result<Admitted, Refusal>> {
        let (reply, rx) = oneshot::channel();
        let sent = self.admit.send(Pending { request, reply });
        let url = self.inner.target.shown.clone();
        Box::pin(async move {
            let stopped = || Refusal::Unavailable(format!("the admission task of {url} stopped"));
            if sent.is_err() {
                return Err(stopped());
            }
            rx.await.unwrap_or_else(|_| Err(stopped()))
        })
    }

    fn release(&self, _tenant: &str, ticket: u64, failed: bool) -> SharedFuture<Result<(), Error>> {
        lock(&self.inner.admitted).remove(&ticket);
        let (done, rx) = oneshot::channel();
        let sent = self.release.send(Release {
            ticket,
            failed,
            done,
        });
        let url = self.inner.target.shown.clone();
        Box::pin(async move {
            let stopped = || format!("the release task of {url} stopped");
            let done = match sent {
                Ok(()) => rx.await.unwrap_or_else(|_| Err(stopped())),
                Err(_) => Err(stopped()),
            };
            done.map_err(|why| Error::SharedDomainFailed { why })
        })
    }

    fn fence(&self, _tenant: &str, ticket: u64) -> Result<(), Error> {
        self.inner
            .fence(ticket)
            .map_err(|why| Error::SharedDomainFailed { why })
    }

    fn describe(&self) -> String {
        self.inner.target.shown.clone()
    }

    /// [`PgDomain::close`].
    fn close(&self) -> SharedFuture<()> {
        let me = self.clone();
        Box::pin(async move { PgDomain::close(&me).await })
    }
}
