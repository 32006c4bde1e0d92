//! The domain's shared state ([`Inner`]), one generation of its connections ([`Session`]), and
//! the public [`PgDomain`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_kernel::order::shared::{AdmitRequest, Admitted, Refusal, SharedDomain, SharedFuture};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::Client;

use crate::admission::{self, AdmitStatements, Pending, Release};
use crate::connection::{self, ConnectionTask, Names, Target};
use crate::listener::Waiter;
use crate::{leases, schema, PgError, PgOptions};

/// This process's lease as it last saw it.
pub(crate) struct Lease {
    /// Its name in `sluice_owners` (a new one for each lease: one that lapsed is never
    /// renewed).
    pub(crate) owner: Arc<str>,
    /// Counts the leases this process has held; a waiting call belongs to one.
    pub(crate) incarnation: u64,
    /// Until when the lease is surely fresh: the last heartbeat's send time plus the lease
    /// (the database set its expiry later than that send, so this errs early).
    pub(crate) fresh_until: Instant,
}

/// An admission whose outcome is unknown: (owner, batch, call).
pub(crate) type Doubtful = (Arc<str>, Arc<str>, String);

/// The state the domain's tasks share.
pub(crate) struct Inner {
    pub(crate) target: Target,
    pub(crate) options: PgOptions,
    pub(crate) names: Names,
    pub(crate) lease: Mutex<Lease>,
    pub(crate) waiters: Mutex<HashMap<u64, Waiter>>,
    /// The connections in use, or `None` while the database is unreachable.
    pub(crate) session: watch::Sender<Option<Arc<Session>>>,
    /// Why, and since when, the database is unreachable (`None` while it is reachable).
    pub(crate) down: Mutex<Option<(String, Instant)>>,
    /// Admissions whose outcome is unknown (the connection failed before the commit's answer):
    /// (owner, batch, call), marked failed once the database is back (they did not run).
    pub(crate) doubtful: Mutex<Vec<Doubtful>>,
    /// Set by [`PgDomain::close`].
    pub(crate) closed: watch::Sender<bool>,
    /// An admission found this process's lease lapsed: the supervisor starts a new one now.
    pub(crate) renew: tokio::sync::Notify,
    /// The lease (incarnation) each call admitted here and not yet released was admitted
    /// under, by ticket: the fence a call passes just before its handler starts.
    pub(crate) admitted: Mutex<HashMap<u64, u64>>,
    /// `SLUICE_FAULT_PAUSE_IN_ADMISSION_MS`, read once: a pause between an admission's two
    /// round trips, for the fault tests only (`None` unless set).
    pub(crate) fault_pause_in_admission: Option<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub(crate) fn lease(&self) -> MutexGuard<'_, Lease> {
        lock(&self.lease)
    }

    pub(crate) fn lock_waiters(&self) -> MutexGuard<'_, HashMap<u64, Waiter>> {
        lock(&self.waiters)
    }

    pub(crate) fn doubtful(&self) -> MutexGuard<'_, Vec<Doubtful>> {
        lock(&self.doubtful)
    }

    /// Whether a call admitted under lease `incarnation` may still start: that lease is this
    /// process's current one and surely fresh.
    pub(crate) fn lease_ok(&self, incarnation: u64) -> bool {
        let l = self.lease();
        l.incarnation == incarnation && Instant::now() < l.fresh_until
    }

    /// Whether the call admitted as `ticket` may start now: the lease it was admitted under is
    /// still this process's, and surely fresh by this process's monotonic clock.
    pub(crate) fn fence(&self, ticket: u64) -> Result<(), String> {
        let incarnation = lock(&self.admitted).get(&ticket).copied();
        match incarnation {
            Some(i) if self.lease_ok(i) => Ok(()),
            Some(_) => Err(self.lapsed()),
            None => Err(format!(
                "ticket {ticket} is not a call this process admitted in {}",
                self.target.shown
            )),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// The connections, if the database is reachable now.
    pub(crate) fn current(&self) -> Option<Arc<Session>> {
        self.session.borrow().clone()
    }

    /// The connections, waiting up to [`PgOptions::unavailable_after`] for the database.
    pub(crate) async fn session_within(&self) -> Result<Arc<Session>, String> {
        if self.is_closed() {
            return Err(closed());
        }
        let mut rx = self.session.subscribe();
        let waited = tokio::time::timeout(
            self.options.unavailable_after,
            rx.wait_for(|s| s.as_ref().is_some_and(|s| !s.is_dead())),
        )
        .await;
        match waited {
            Ok(Ok(s)) => s.clone().ok_or_else(|| self.unreachable()),
            _ => Err(self.unreachable()),
        }
    }

    /// Why the database cannot be used now, as a sentence naming it.
    pub(crate) fn unreachable(&self) -> String {
        if self.is_closed() {
            return closed();
        }
        match &*lock(&self.down) {
            Some((why, since)) => format!(
                "the database {} has been unreachable for {:.1}s: {why}",
                self.target.shown,
                since.elapsed().as_secs_f64()
            ),
            None => format!(
                "the database {} did not answer within {:?}",
                self.target.shown, self.options.unavailable_after
            ),
        }
    }

    /// The database answers again.
    pub(crate) fn up(&self, session: Arc<Session>) {
        *lock(&self.down) = None;
        self.session.send_replace(Some(session));
    }

    /// The database stopped answering (`why`); the first time, since now.
    pub(crate) fn went_down(&self, why: String) {
        self.session.send_replace(None);
        let mut down = lock(&self.down);
        match &mut *down {
            Some((w, _)) => *w = why,
            None => {
                tracing::error!(error = %why, url = %self.target.shown,
                    "the shared conflict domain lost its database: calls are not admitted until it is back");
                *down = Some((why, Instant::now()));
            }
        }
    }

    /// How long the database has been unreachable.
    pub(crate) fn down_for(&self) -> Option<Duration> {
        lock(&self.down).as_ref().map(|(_, since)| since.elapsed())
    }
}

fn closed() -> String {
    "the shared conflict domain was closed".to_owned()
}

/// One generation of the domain's connections: one for admissions, one for releases, checks
/// and heartbeats, one that listens. Any of them failing ends the generation (the supervisor
/// makes the next).
pub(crate) struct Session {
    pub(crate) admit: Client,
    pub(crate) admit_statements: AdmitStatements,
    pub(crate) control: Client,
    pub(crate) control_statements: leases::ControlStatements,
    _listen: Client,
    dead: watch::Sender<Option<String>>,
    /// The task that watches the connections (and hands notifications to the waiters).
    watcher: tokio::task::JoinHandle<()>,
}

impl Session {
    /// Connects the three connections, listens, prepares the statements. The lease is the
    /// supervisor's to (re)register.
    pub(crate) async fn open(inner: &Arc<Inner>) -> Result<Arc<Session>, String> {
        let db = |e: tokio_postgres::Error| {
            format!(
                "the database {}: {}",
                inner.target.shown,
                connection::why(&e)
            )
        };
        let text = |e: PgError| e.to_string();
        let (admit, admit_conn) = inner.target.connect().await.map_err(text)?;
        let (control, control_conn) = inner.target.connect().await.map_err(text)?;
        let (listen, listen_conn) = inner.target.connect().await.map_err(text)?;
        listen
            .batch_execute(&format!("LISTEN \"{}\"", inner.names.channel))
            .await
            .map_err(db)?;
        let admit_statements = AdmitStatements::prepare(&admit).await.map_err(db)?;
        let control_statements = leases::ControlStatements::prepare(&control)
            .await
            .map_err(db)?;
        let (dead, _) = watch::channel(None);
        let watcher = tokio::spawn(watch_connections(
            Arc::downgrade(inner),
            dead.clone(),
            [admit_conn, control_conn],
            listen_conn,
        ));
        Ok(Arc::new(Session {
            admit,
            admit_statements,
            control,
            control_statements,
            _listen: listen,
            dead,
            watcher,
        }))
    }

    /// Ends this generation: its connections are no longer used.
    pub(crate) fn kill(&self, why: String) {
        end(&self.dead, why);
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.borrow().is_some()
    }

    /// Resolves with why the generation ended.
    pub(crate) async fn died(&self) -> String {
        let mut rx = self.dead.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "the connections were dropped".to_owned(),
        };
        why
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Hands every notification to the waiters, and ends the generation when any connection ends.
async fn watch_connections(
    inner: std::sync::Weak<Inner>,
    dead: watch::Sender<Option<String>>,
    others: [ConnectionTask; 2],
    mut listen: ConnectionTask,
) {
    let [mut a, mut b] = others;
    let why = loop {
        tokio::select! {
            e = listen.events.recv() => match e {
                Some(Ok(payload)) => {
                    let Some(inner) = inner.upgrade() else { return };
                    inner.notified(&payload);
                }
                Some(Err(why)) => break format!("the listening connection failed: {why}"),
                None => break "the listening connection ended".to_owned(),
            },
            // These two listen to nothing: only their end matters.
            e = a.events.recv() => match e {
                Some(Ok(_)) => {}
                Some(Err(why)) => break format!("the admitting connection failed: {why}"),
                None => break "the admitting connection ended".to_owned(),
            },
            e = b.events.recv() => match e {
                Some(Ok(_)) => {}
                Some(Err(why)) => break format!("the connection for releases failed: {why}"),
                None => break "the connection for releases ended".to_owned(),
            },
        }
    };
    end(&dead, why);
}

/// Marks a generation ended with `why`, unless it already ended (the first reason stays).
fn end(dead: &watch::Sender<Option<String>>, why: String) {
    dead.send_if_modified(|d| {
        if d.is_none() {
            *d = Some(why);
            true
        } else {
            false
        }
    });
}

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
    pub fn health(&self) -> Result<(), String> {
        if self.inner.is_closed() {
            return Err(closed());
        }
        match self.inner.current() {
            Some(s) if !s.is_dead() => Ok(()),
            _ => Err(self.inner.unreachable()),
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

    fn release(
        &self,
        _tenant: &str,
        ticket: u64,
        failed: bool,
    ) -> SharedFuture<Result<(), String>> {
        lock(&self.inner.admitted).remove(&ticket);
        let (done, rx) = oneshot::channel();
        let sent = self.release.send(Release {
            ticket,
            failed,
            done,
        });
        let url = self.inner.target.shown.clone();
        Box::pin(async move {
            if sent.is_err() {
                return Err(format!("the release task of {url} stopped"));
            }
            rx.await
                .unwrap_or_else(|_| Err(format!("the release task of {url} stopped")))
        })
    }

    fn fence(&self, _tenant: &str, ticket: u64) -> Result<(), String> {
        self.inner.fence(ticket)
    }

    fn describe(&self) -> String {
        self.inner.target.shown.clone()
    }
}
