//! The domain's shared state: [`Inner`] (what every task of the domain shares: the lease, the
//! waiters, the current connections), one generation of its connections ([`Session`]), the
//! waiters' data, and the bounded round trip every task uses. Below the tasks that run on it
//! (listener, admission, leases) and the public [`crate::PgDomain`], which import it and which it
//! imports none of.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio_postgres::Client;

use crate::connection::{self, refused_by_server, why, ConnectionTask, Names, Target};
use crate::statements::{AdmitStatements, ControlStatements};
use crate::{PgError, PgOptions};

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
    /// Set by [`crate::PgDomain::close`].
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

pub(crate) fn closed() -> String {
    "the shared conflict domain was closed".to_owned()
}

/// One generation of the domain's connections: one for admissions, one for releases, checks
/// and heartbeats, one that listens. Any of them failing ends the generation (the supervisor
/// makes the next).
pub(crate) struct Session {
    pub(crate) admit: Client,
    pub(crate) admit_statements: AdmitStatements,
    pub(crate) control: Client,
    pub(crate) control_statements: ControlStatements,
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
        let control_statements = ControlStatements::prepare(&control).await.map_err(db)?;
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

/// A local call waiting for calls of any process.
pub(crate) struct Waiter {
    /// The lease it was admitted under.
    pub(crate) incarnation: u64,
    /// The tickets it still waits for.
    pub(crate) remaining: HashSet<u64>,
    /// Their call ids, to name one that failed (`skip-dependents`).
    pub(crate) names: HashMap<u64, String>,
    pub(crate) failed: Option<String>,
    pub(crate) tx: Option<oneshot::Sender<Result<Option<String>, String>>>,
}

/// Runs one round trip on `session` within [`crate::PgOptions::unavailable_after`]. A statement
/// the server refused leaves the connection as it was; a connection that failed or did not
/// answer in time ends the session (the supervisor reconnects).
pub(crate) async fn with_timeout<T>(
    inner: &Inner,
    session: &Session,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(inner.options.unavailable_after, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let text = format!("the database {}: {}", inner.target.shown, why(&e));
            if !refused_by_server(&e) {
                session.kill(text.clone());
            }
            Err(text)
        }
        Err(_) => {
            let text = format!(
                "the database {} did not answer within {:?}",
                inner.target.shown, inner.options.unavailable_after
            );
            session.kill(text.clone());
            Err(text)
        }
    }
}
