//! What one TCP connection may hold of the gateway: a place among `--max-connections` (and its
//! peer's share of them), and time, bounded at every phase of a request.
//!
//! - **Header** (`--header-read-timeout`): from the first byte of a request, its whole header
//!   must arrive in time; a half-sent request line, or one byte every few seconds, is cut.
//! - **Idle** (`--idle-timeout`): a connection with no request in progress (no request being
//!   read, no response being written, no SSE stream open) and no byte moved is closed.
//! - **Body** (`--body-read-timeout`): a request's body must arrive whole in time (read by
//!   [`crate::http`]).
//! - **Write** (`--write-timeout`): a write blocked on a client that stopped reading.
//!
//! The watchdog ([`watch`]) judges the first two from the connection's [`Activity`]: the I/O
//! wrapper ([`Tracked`]) stamps every byte read and written, and every request holds a
//! [`Busy`] guard from the moment hyper hands it over until its response body is dropped. hyper
//! gets a timer too, with its own header timeout set past both, as a backstop.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The connection limits of `sluice serve` (each a flag; docs/serve.md).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// How long a request's header may take to arrive, from its first byte (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a connection may sit with no request in progress (default 60 s).
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive, from the end of its header (default 30 s).
    pub body_read_timeout: Duration,
    /// The most connections open at once; `None`: derived from the process's descriptor limit
    /// (see [`ConnectionLimits::resolved_max`]).
    pub max: Option<usize>,
    /// The most connections one peer address may hold; `None`: a quarter of the maximum.
    pub per_peer: Option<usize>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(30),
            max: None,
            per_peer: None,
        }
    }
}

/// Descriptors kept out of the connection budget: the provenance log, database connections,
/// MCP servers' pipes, the listener, the runtime's own.
const RESERVED_DESCRIPTORS: u64 = 64;

/// The maximum when the descriptor limit cannot be read, or is very large.
const DEFAULT_MAX: usize = 4096;

impl ConnectionLimits {
    /// The connection cap: the one set, or the descriptor limit less 64 (kept for the log,
    /// database connections, MCP servers' pipes; at least 16, at most 4,096), so that the cap,
    /// not `EMFILE`, is what a flood of sockets meets.
    pub fn resolved_max(&self) -> usize {
        self.max.unwrap_or_else(|| match descriptor_limit() {
            Some(n) => usize::try_from(n.saturating_sub(RESERVED_DESCRIPTORS))
                .unwrap_or(DEFAULT_MAX)
                .clamp(16, DEFAULT_MAX),
            None => DEFAULT_MAX,
        })
    }

    /// One peer's share: the one set, or a quarter of [`ConnectionLimits::resolved_max`].
    pub fn resolved_per_peer(&self) -> usize {
        self.per_peer
            .unwrap_or_else(|| (self.resolved_max() / 4).max(1))
    }
}

/// The process's descriptor limit, after raising the soft limit to the hard one (as Go's
/// runtime does): a server should not be held to a shell's default of 1,024.
#[cfg(unix)]
pub fn descriptor_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// The process's descriptor limit (unknown off Unix).
#[cfg(not(unix))]
pub fn descriptor_limit() -> Option<u64> {
    None
}

/// The open connections, in all and per peer address, counted under one lock so that the cap
/// and the share are checked and taken in one step.
#[derive(Debug)]
pub(crate) struct Admission {
    max: usize,
    per_peer: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

impl Admission {
    pub(crate) fn new(limits: &ConnectionLimits) -> Arc<Self> {
        Arc::new(Admission {
            max: limits.resolved_max(),
            per_peer: limits.resolved_per_peer(),
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// A place for a connection from `peer`, or why there is none.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Place, Refused> {
        let peer = canonical(peer);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, peers) = &mut *open;
        if *total >= self.max {
            return Err(Refused::Full(self.max));
        }
        let mine = peers.entry(peer).or_insert(0);
        if *mine >= self.per_peer {
            return Err(Refused::PeerShare(self.per_peer));
        }
        *mine += 1;
        *total += 1;
        Ok(Place {
            admission: self.clone(),
            peer,
        })
    }
}

/// An IPv4 peer seen through an IPv4-mapped IPv6 address is that IPv4 peer.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refused {
    /// Every place is taken (`--max-connections`).
    Full(usize),
    /// The peer holds its whole share (`--max-connections-per-peer`).
    PeerShare(usize),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Full(n) => write!(f, "{n} connections are open (`--max-connections`)"),
            Refused::PeerShare(n) => write!(
                f,
                "this address holds {n} connections (`--max-connections-per-peer`)"
            ),
        }
    }
}

/// A connection's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    admission: Arc<Admission>,
    peer: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self
            .admission
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (total, peers) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = peers.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

/// What a connection is doing, for its watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    /// When a byte last moved either way (ms since `start`).
    last_io: AtomicU64,
    /// When the first byte of a request not yet handed over arrived (ms since `start`, plus
    /// one; 0: none since the last request began).
    header_since: AtomicU64,
    /// When the connection last became free of requests (ms since `start`).
    idle_since: AtomicU64,
    /// Requests in progress (handed over by hyper, response body not yet dropped).
    busy: AtomicUsize,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Activity {
            start: Instant::now(),
            last_io: AtomicU64::new(0),
            header_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn read(&self, n: usize) {
        if n == 0 {
            return;
        }
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if self.busy.load(Ordering::Relaxed) == 0 {
            // The first byte of a request's header (later bytes keep the first's time).
            let _ = self.header_since.compare_exchange(
                0,
                now + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    fn wrote(&self, n: usize) {
        if n > 0 {
            self.last_io.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A request was handed over: its header is complete.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.header_since.store(0, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// When the connection must be closed unless it changes: `None` while a request is in
    /// progress (its own timeouts govern it).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<u64> {
        if self.busy.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match self.header_since.load(Ordering::Relaxed) {
            0 => {
                let since = self
                    .idle_since
                    .load(Ordering::Relaxed)
                    .max(self.last_io.load(Ordering::Relaxed));
                Some(since.saturating_add(ms(limits.idle_timeout)))
            }
            first => Some((first - 1).saturating_add(ms(limits.header_read_timeout))),
        }
    }
}

/// A request in progress on its connection; dropped with its response body.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let now = self.0.now();
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle_since.store(now, Ordering::Relaxed);
        }
    }
}

/// Resolves when the connection has been idle, or on one request's header, past its limit.
pub(crate) async fn watch(activity: Arc<Activity>, limits: ConnectionLimits) -> Expired {
    let step = limits
        .idle_timeout
        .min(limits.header_read_timeout)
        .max(Duration::from_millis(10));
    loop {
        match activity.deadline(&limits) {
            Some(at) if activity.now() >= at => {
                return if activity.header_since.load(Ordering::Relaxed) == 0 {
                    Expired::Idle
                } else {
                    Expired::Header
                };
            }
            Some(at) => {
                let wait = Duration::from_millis(at.saturating_sub(activity.now()));
                tokio::time::sleep(wait.clamp(Duration::from_millis(10), step)).await;
            }
            None => tokio::time::sleep(step).await,
        }
    }
}

/// Which limit a connection's watchdog enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No request for `--idle-timeout`.
    Idle,
    /// A request's header took longer than `--header-read-timeout`.
    Header,
}

/// A connection's I/O, stamping its [`Activity`] with every byte.
pub(crate) struct Tracked<S> {
    inner: Pin<Box<S>>,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Tracked {
            inner: Box::pin(inner),
            activity,
        }
    }
}

impl<S: AsyncRead> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            self.activity.read(buf.filled().len() - before);
        }
        polled
    }
}

impl<S: AsyncWrite> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = self.inner.as_mut().poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.activity.wrote(*n);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = self.inner.as_mut().poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &polled {
            self.activity.wrote(*n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that holds a guard until it is dropped: a [`Busy`] keeps its request counted
/// as in progress (an SSE stream that waits for a long call is not an idle connection); a
/// request id stays in flight until its answer is done.
pub(crate) struct Guarded<B, G> {
    inner: B,
    /// Held until the body ends (its last frame given) or is dropped, whichever comes first.
    guard: Option<G>,
}

impl<B, G> Guarded<B, G> {
    pub(crate) fn new(inner: B, guard: G) -> Self {
        Guarded {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin, G: Unpin> HttpBody for Guarded<B, G> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            // The answer is complete: the request is no longer in progress, and its id is free
            // for the client's next request, before hyper gets round to dropping the body.
            self.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_and_the_share_are_taken_in_one_step() {
        let limits = ConnectionLimits {
            max: Some(3),
            per_peer: Some(2),
            ..ConnectionLimits::default()
        };
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        let admission = Admission::new(&limits);
        let first = admission.admit(a).unwrap();
        let _second = admission.admit(mapped).unwrap();
        assert!(matches!(admission.admit(a), Err(Refused::PeerShare(2))));
        let _third = admission.admit(b).unwrap();
        assert!(matches!(admission.admit(b), Err(Refused::Full(3))));
        drop(first);
        let _again = admission.admit(a).unwrap();
    }

    #[test]
    fn the_default_cap_stays_under_the_descriptor_limit() {
        let limits = ConnectionLimits::default();
        let max = limits.resolved_max();
        if let Some(n) = descriptor_limit() {
            assert!(max as u64 <= n.saturating_sub(RESERVED_DESCRIPTORS).max(16));
        }
        assert!(limits.resolved_per_peer() < max);
    }

    #[test]
    fn an_idle_connection_and_a_slow_header_expire_a_busy_one_does_not() {
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(5),
            ..ConnectionLimits::default()
        };
        // Idle: nothing ever sent.
        let idle = Activity::new();
        assert!(idle.deadline(&limits).is_some());
        // Busy: a request in progress has no deadline of the watchdog's.
        let busy = Activity::new();
        let guard = busy.begin();
        assert_eq!(busy.deadline(&limits), None);
        drop(guard);
        assert!(busy.deadline(&limits).is_some());
        // A header begun: its deadline is the header limit from its first byte, which later
        // bytes do not move.
        let slow = Activity::new();
        slow.read(1);
        let first = slow.deadline(&limits).unwrap();
        slow.read(1);
        assert_eq!(slow.deadline(&limits), Some(first));
        assert!(first < idle.deadline(&limits).unwrap() + 1);
    }
}
