//! Reaching the database: a URL made into a driver configuration with bounded waits (connect,
//! statement, TCP keepalive and user timeouts) and, when the URL asks for it, TLS with rustls;
//! connections whose driver task reports what it hears; errors as sentences without the password.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::PgError;

/// Whether `text` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// A URL without any password: the one in `user:password@`, and the value of every query
/// parameter whose name holds `password` (`password=`, `sslpassword=`), so that no message a
/// model or a log reads carries one.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let mut out = match (head.find("://"), head.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &head[scheme + 3..at];
            let user = user.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &head[..scheme + 3], &head[at + 1..])
        }
        _ => head.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// A driver error as a sentence. The driver's own text of a server error is only "db error":
/// this gives the server's message and SQLSTATE (and its detail), and for other errors the
/// chain of causes.
pub(crate) fn why(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(": ");
            text.push_str(detail);
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether the server refused a statement (the connection itself is fine: the transaction's
/// outcome is known, nothing of it was kept), as opposed to a connection that failed.
pub(crate) fn refused_by_server(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some()
}

/// Whether a statement the server refused was refused for the data it was given (SQLSTATE
/// class 22, data exception: a NUL in text, say; class 54, a value over a limit: an index row
/// too large), not for the state of the database.
pub(crate) fn refused_for_its_data(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| matches!(&db.code().code()[..2], "22" | "54"))
}

/// A database to connect to, with its waits bounded.
pub(crate) struct Target {
    config: Config,
    tls: Option<MakeRustlsConnect>,
    /// The URL without its password.
    pub(crate) shown: String,
    /// How long the server keeps a silent client's transaction open (`None`: as the URL says).
    idle_transactions: Option<Duration>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Target {
    /// Reads `url`. `timeout` bounds every wait on the network: the connection (connect
    /// timeout), a statement the server runs (`statement_timeout`), data the peer does not
    /// acknowledge (`tcp_user_timeout`), and a peer that went silent (keepalives), unless the
    /// URL sets them itself.
    ///
    /// `sslmode=require` (also `verify-ca`, `verify-full`) means TLS with rustls, the server's
    /// certificate checked against `sslrootcert=FILE` (PEM) when given, else the system's
    /// roots; it is never accepted unchecked (libpq's `require` does not check: the safe
    /// reading is to always check). `sslmode=disable` and `prefer` (the default) connect
    /// without TLS.
    pub(crate) fn parse(url: &str, timeout: Duration) -> Result<Self, PgError> {
        let shown = redact_url(url);
        if !is_postgres_url(url) {
            return Err(PgError::NotAUrl(shown));
        }
        let bad = |why: String| PgError::Database {
            url: shown.clone(),
            why,
        };
        // Our own parameters come out of the URL before the driver reads it.
        let mut rootcert = None;
        let mut verify = false;
        let (head, query) = match url.split_once('?') {
            Some((h, q)) => (h, q),
            None => (url, ""),
        };
        let mut kept = Vec::new();
        for p in query.split('&').filter(|p| !p.is_empty()) {
            match p.split_once('=') {
                Some(("sslrootcert", v)) => rootcert = Some(PathBuf::from(v)),
                Some(("sslmode", "verify-ca" | "verify-full")) => {
                    verify = true;
                    kept.push("sslmode=require".to_owned());
                }
                Some(("sslmode", "require")) => {
                    verify = true;
                    kept.push(p.to_owned());
                }
                _ => kept.push(p.to_owned()),
            }
        }
        let driver_url = if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        };
        let mut config = Config::from_str(&driver_url).map_err(|e| bad(why(&e)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(timeout);
        }
        if config.get_keepalives() {
            let probe = (timeout / 4).max(Duration::from_secs(1));
            config.keepalives_idle(probe);
            if config.get_keepalives_interval().is_none() {
                config.keepalives_interval(probe);
            }
            if config.get_keepalives_retries().is_none() {
                config.keepalives_retries(3);
            }
        }
        let statement_timeout = format!("-c statement_timeout={}", timeout.as_millis().max(1));
        let options = match config.get_options() {
            Some(o) if o.contains("statement_timeout") => o.to_owned(),
            Some(o) => format!("{o} {statement_timeout}"),
            None => statement_timeout,
        };
        // A transaction whose client went silent is ended by the server (see
        // `with_idle_transactions`), unless the URL says otherwise.
        let idle_transactions =
            (!options.contains("idle_in_transaction_session_timeout")).then_some(timeout / 2);
        config.options(options);
        let tls = if verify || config.get_ssl_mode() == SslMode::Require {
            Some(tls_connector(rootcert.as_deref()).map_err(bad)?)
        } else {
            if rootcert.is_some() {
                return Err(bad(
                    "sslrootcert is given but sslmode does not ask for TLS: add sslmode=require"
                        .into(),
                ));
            }
            None
        };
        Ok(Target {
            config,
            tls,
            shown,
            idle_transactions,
        })
    }

    /// Bounds how long the server keeps a transaction open while this client says nothing
    /// (`idle_in_transaction_session_timeout`), unless the URL sets it: a process paused or
    /// lost inside a transaction (holding a tenant's advisory lock and its owner row) has the
    /// transaction ended by the server, its locks freed, within `limit`.
    pub(crate) fn with_idle_transactions(mut self, limit: Duration) -> Self {
        if self.idle_transactions.is_some() {
            self.idle_transactions = Some(limit);
        }
        self
    }

    /// The driver's configuration for one connection: the URL's, with the bound on idle
    /// transactions.
    fn connection_config(&self) -> Config {
        let mut config = self.config.clone();
        if let Some(limit) = self.idle_transactions {
            let option = format!(
                "-c idle_in_transaction_session_timeout={}",
                limit.as_millis().max(50)
            );
            let options = match config.get_options() {
                Some(o) => format!("{o} {option}"),
                None => option,
            };
            config.options(options);
        }
        config
    }

    /// One connection, its driver running on a task of its own.
    pub(crate) async fn connect(&self) -> Result<(Client, ConnectionTask), PgError> {
        let failed = |e: tokio_postgres::Error| PgError::Database {
            url: self.shown.clone(),
            why: why(&e),
        };
        match &self.tls {
            None => {
                let (client, connection) = self
                    .connection_config()
                    .connect(NoTls)
                    .await
                    .map_err(failed)?;
                Ok((client, ConnectionTask::drive(connection)))
            }
            Some(tls) => {
                let (client, connection) = self
                    .connection_config()
                    .connect(tls.clone())
                    .await
                    .map_err(failed)?;
                Ok((client, ConnectionTask::drive(connection)))
            }
        }
    }
}

/// rustls, checking the server against `rootcert` (PEM) or the system's roots.
fn tls_connector(rootcert: Option<&std::path::Path>) -> Result<MakeRustlsConnect, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match rootcert {
        Some(file) => {
            let certs = CertificateDer::pem_file_iter(file)
                .map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "sslrootcert {}: no certificate in it",
                    file.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(
                    "sslmode=require: the system has no root certificates; give \
                            sslrootcert=FILE"
                        .into(),
                );
            }
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// A connection's driver, and what it heard (notifications, or why it ended).
pub(crate) struct ConnectionTask {
    pub(crate) task: tokio::task::JoinHandle<()>,
    pub(crate) events: mpsc::UnboundedReceiver<Result<String, String>>,
}

impl ConnectionTask {
    fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>) -> Self
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(m) = messages.next().await {
                match m {
                    Ok(AsyncMessage::Notification(n)) => {
                        let _ = tx.send(Ok(n.payload().to_owned()));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(why(&e)));
                        return;
                    }
                }
            }
            let _ = tx.send(Err("the connection closed".to_owned()));
        });
        ConnectionTask { task, events }
    }
}

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The schema this connection's unqualified names resolve to (the one the migrations create
/// their tables in): two deployments in one database are told apart by it.
pub(crate) async fn schema_of(client: &Client) -> Result<String, tokio_postgres::Error> {
    let row = client
        .query_one("SELECT coalesce(current_schema(), '')", &[])
        .await?;
    Ok(row.get(0))
}

/// The names one deployment (one schema) uses where PostgreSQL has no schemas: its
/// notification channel and its advisory-lock keys' prefix.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// Prefixed to a tenant's name in its advisory-lock keys.
    pub(crate) lock_prefix: String,
    /// The channel releases are announced on.
    pub(crate) channel: String,
}

impl Names {
    pub(crate) fn for_schema(schema: &str) -> Self {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(schema.as_bytes());
        Names {
            lock_prefix: format!("{schema}\u{1}"),
            channel: format!(
                "sluice_released_{}",
                hex::encode(digest.get(..8).unwrap_or(&digest))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u@h:5432/db"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact_url("postgres://u@h/db?password=secret&sslmode=require"),
            "postgres://u@h/db?password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgresql://u:p%40ss@h/db?sslpassword=x"),
            "postgresql://u@h/db?sslpassword=***"
        );
        assert_eq!(
            redact_url("postgres://u:a@b@h/db"),
            "postgres://u@h/db",
            "a password holding @"
        );
    }

    #[test]
    fn waits_are_bounded_unless_the_url_sets_them() {
        let t = Target::parse("postgres://u@127.0.0.1:1/db", Duration::from_secs(4)).unwrap();
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&Duration::from_secs(4))
        );
        assert_eq!(
            t.config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(4))
        );
        assert_eq!(t.config.get_keepalives_idle(), Duration::from_secs(1));
        assert!(t
            .config
            .get_options()
            .unwrap()
            .contains("statement_timeout=4000"));
        assert!(t.tls.is_none());
        let t = Target::parse(
            "postgres://u@127.0.0.1:1/db?connect_timeout=9",
            Duration::from_secs(4),
        )
        .unwrap();
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&Duration::from_secs(9))
        );
    }

    #[test]
    fn tls_needs_a_root_it_can_read() {
        let e = Target::parse(
            "postgres://u:pw@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem",
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
        assert!(!e.contains("pw"), "{e}");
        let e = Target::parse(
            "postgres://u@h/db?sslrootcert=/tmp/ca.pem",
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sslmode=require"), "{e}");
    }

    #[test]
    fn deployments_in_two_schemas_use_different_names() {
        let a = Names::for_schema("public");
        let b = Names::for_schema("team_b");
        assert_ne!(a.channel, b.channel);
        assert_ne!(a.lock_prefix, b.lock_prefix);
        assert!(a.channel.len() < 63, "a channel is an identifier");
    }
}
