//! A small HTTP/1.1 server on loopback for the HTTP-tool tests and benchmark. It records every
//! request (method, target, headers, body) with the times it arrived and was answered.
//!
//! Routes (by path prefix):
//! - `/echo...` — 200, a JSON object describing the request;
//! - `/status/<code>` — that status, body `status <code>`;
//! - `/slow/<ms>` — waits, then 200 `{}`;
//! - `/hold/<key>` — waits 30 ms, then 200 `{}` (for ordering checks);
//! - `/barrier/<n>` — answers only once `n` barrier requests have arrived (200 `{}`), or 504
//!   after 10 s; independent requests can only all succeed if they were in flight together;
//! - `/text` — 200 `not json`; `/empty` — 200 with no body; `/redirect` — 302 to `/echo`;
//! - `/big/<n>` — 200 with a JSON string body of `n` bytes and its length; `/bigchunked/<n>` —
//!   the same, chunked (no length announced);
//! - `/away/<port>` — 302 to the same path on 127.0.0.1:`port`;
//! - `/incr/<key>` — a counter that loses updates unless its callers take turns: reads the
//!   count, waits 20 ms, stores the count read plus one and answers `{"count": n}`.
//!
//! Every accepted connection is counted too (`connections`), request or not.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub arrived: Instant,
    pub answered: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running server.
#[derive(Clone)]
pub struct Server {
    pub addr: std::net::SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
    pub counters: Counters,
}

/// The `/incr/<key>` counts.
pub type Counters = Arc<Mutex<std::collections::HashMap<String, i64>>>;

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
    /// What `/incr/<key>` has counted to.
    pub fn count(&self, key: &str) -> i64 {
        self.counters.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
    pub fn connection_count(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Starts the server on 127.0.0.1 (an ephemeral port) in the current runtime.
pub async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new((Mutex::new(0usize), tokio::sync::Notify::new()));
    let s = seen.clone();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    let counters = Counters::default();
    let c = counters.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (s, barrier, c) = (s.clone(), barrier.clone(), c.clone());
            tokio::spawn(async move {
                let _ = serve(sock, s, barrier, c).await;
            });
        }
    });
    Server {
        addr,
        seen,
        connections,
        counters,
    }
}

async fn serve(
    sock: tokio::net::TcpStream,
    seen: Arc<Mutex<Vec<Seen>>>,
    barrier: Arc<(Mutex<usize>, tokio::sync::Notify)>,
    counters: Counters,
) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut r = BufReader::new(sock);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let arrived = Instant::now();
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_owned();
        let target = parts.next().unwrap_or("").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).await?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).await?;
        let body = String::from_utf8_lossy(&body).into_owned();
        let path = target.split('?').next().unwrap_or("").to_owned();
        let (status, resp_body, extra): (u16, String, String) = if path.starts_with("/echo") {
            let v = serde_json::json!({"method": method, "target": target, "body": body,
                "headers": headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.clone())).collect::<std::collections::BTreeMap<_, _>>()});
            (200, v.to_string(), String::new())
        } else if let Some(code) = path.strip_prefix("/status/") {
            let code: u16 = code.parse().unwrap_or(500);
            (code, format!("status {code}"), String::new())
        } else if let Some(ms) = path.strip_prefix("/slow/") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
            (200, "{}".into(), String::new())
        } else if path.starts_with("/hold/") {
            tokio::time::sleep(Duration::from_millis(30)).await;
            (200, "{}".into(), String::new())
        } else if let Some(n) = path.strip_prefix("/barrier/") {
            let n: usize = n.parse().unwrap_or(1);
            let (count, notify) = &*barrier;
            let notified = notify.notified();
            let reached = {
                let mut c = count.lock().unwrap();
                *c += 1;
                *c >= n
            };
            if reached {
                notify.notify_waiters();
                (200, "{}".into(), String::new())
            } else {
                match tokio::time::timeout(Duration::from_secs(10), notified).await {
                    Ok(()) => (200, "{}".into(), String::new()),
                    Err(_) => (504, "the barrier was never reached".into(), String::new()),
                }
            }
        } else if let Some(key) = path.strip_prefix("/incr/") {
            let read = counters.lock().unwrap().get(key).copied().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(20)).await;
            counters.lock().unwrap().insert(key.to_owned(), read + 1);
            (
                200,
                serde_json::json!({"count": read + 1}).to_string(),
                String::new(),
            )
        } else if path == "/text" {
            (200, "not json".into(), String::new())
        } else if path == "/empty" {
            (200, String::new(), String::new())
        } else if path == "/redirect" {
            (302, String::new(), "Location: /echo\r\n".into())
        } else if let Some(port) = path.strip_prefix("/away/") {
            (
                302,
                String::new(),
                format!("Location: http://127.0.0.1:{port}/echo\r\n"),
            )
        } else if let Some(n) = path.strip_prefix("/bigchunked/") {
            let n: usize = n.parse().unwrap_or(0);
            seen.lock().unwrap().push(Seen {
                method,
                target,
                headers,
                body,
                arrived,
                answered: Instant::now(),
            });
            let head = "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n";
            r.get_mut().write_all(head.as_bytes()).await?;
            let chunk = vec![b'a'; 64 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                let mut out = format!("{k:x}\r\n").into_bytes();
                out.extend_from_slice(&chunk[..k]);
                out.extend_from_slice(b"\r\n");
                if r.get_mut().write_all(&out).await.is_err() {
                    return Ok(()); // the client stopped reading: that is the point
                }
                left -= k;
            }
            r.get_mut().write_all(b"0\r\n\r\n").await?;
            continue;
        } else if let Some(n) = path.strip_prefix("/big/") {
            let n: usize = n.parse().unwrap_or(2).max(2);
            (200, format!("\"{}\"", "a".repeat(n - 2)), String::new())
        } else {
            (404, "no such route".into(), String::new())
        };
        let answered = Instant::now();
        seen.lock().unwrap().push(Seen {
            method,
            target,
            headers,
            body,
            arrived,
            answered,
        });
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: application/json\r\n{extra}\r\n",
            resp_body.len()
        );
        // One write: a head and a body in two small writes meet Nagle and delayed ACK (~40 ms).
        let mut out = head.into_bytes();
        out.extend_from_slice(resp_body.as_bytes());
        r.get_mut().write_all(&out).await?;
    }
}
