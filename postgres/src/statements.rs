//! The statements each connection of the domain prepares once: the admitting connection's and
//! the control connection's (releases, checks, heartbeats, reaping). Plain SQL and its
//! preparation, below everything that runs it.

use tokio_postgres::{Client, Statement};

/// The admitting connection's statements, prepared once per connection.
pub(crate) struct AdmitStatements {
    pub(crate) begin: Statement,
    pub(crate) lock: Statement,
    pub(crate) fresh: Statement,
    pub(crate) open: Statement,
    pub(crate) numbers: Statement,
    pub(crate) insert: Statement,
    pub(crate) commit: Statement,
}

impl AdmitStatements {
    pub(crate) async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            begin: client.prepare("BEGIN").await?,
            // `unnest` keeps the array's (sorted) order.
            lock: client
                .prepare(
                    "SELECT pg_advisory_xact_lock(hashtextextended($3 || t, $2)) \
                     FROM unnest($1::text[]) t",
                )
                .await?,
            fresh: client
                .prepare(
                    "SELECT 1 FROM sluice_owners WHERE owner = $1 AND expires_at > now() \
                     FOR SHARE",
                )
                .await?,
            open: client
                .prepare(
                    "SELECT tenant, ticket, accesses, call FROM sluice_calls \
                     WHERE tenant = ANY($1) AND state = 'admitted' ORDER BY ticket",
                )
                .await?,
            numbers: client
                .prepare("SELECT nextval('sluice_admission') FROM generate_series(1, $1::integer)")
                .await?,
            insert: client
                .prepare(
                    "INSERT INTO sluice_calls \
                     (ticket, tenant, batch, call, tool, owner, accesses, waits_for, state) \
                     SELECT t, tenant, batch, call, tool, $6, a, \
                       ARRAY(SELECT jsonb_array_elements_text(w)::bigint), 'admitted' \
                     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                       $7::jsonb[], $8::jsonb[]) AS r(t, tenant, batch, call, tool, a, w)",
                )
                .await?,
            commit: client.prepare("COMMIT").await?,
        })
    }
}

/// The control connection's statements, prepared once per connection.
pub(crate) struct ControlStatements {
    pub(crate) release: Statement,
    pub(crate) check: Statement,
    pub(crate) heartbeat: Statement,
    pub(crate) register: Statement,
    pub(crate) reap: Statement,
    pub(crate) settle_doubtful: Statement,
}

impl ControlStatements {
    pub(crate) async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            // Releases, many at once; each announces its ticket and whether it failed.
            release: client
                .prepare(
                    "WITH r AS (SELECT * FROM unnest($1::bigint[], $2::text[]) AS r(ticket, state)), \
                     ended AS (UPDATE sluice_calls c SET state = r.state, ended_at = now() FROM r \
                       WHERE c.ticket = r.ticket AND c.state = 'admitted' \
                       RETURNING c.ticket, c.state) \
                     SELECT pg_notify($3, ticket || CASE WHEN state = 'ok' THEN ' 0' ELSE ' 1' END) \
                     FROM ended",
                )
                .await?,
            check: client
                .prepare(
                    "SELECT ticket, state FROM sluice_calls \
                     WHERE ticket = ANY($1) AND state <> 'admitted'",
                )
                .await?,
            heartbeat: client
                .prepare(
                    "UPDATE sluice_owners SET heartbeat = now(), \
                     expires_at = now() + make_interval(secs => $2) WHERE owner = $1",
                )
                .await?,
            register: client
                .prepare(
                    "INSERT INTO sluice_owners (owner, heartbeat, expires_at) \
                     VALUES ($1, now(), now() + make_interval(secs => $2))",
                )
                .await?,
            // Judged by each owner's own expiry; a call whose owner is gone is lost too. An
            // owner row locked by a transaction of its own (a process paused inside an
            // admission) is skipped, never waited for: the server ends that transaction
            // (`idle_in_transaction_session_timeout`) and the next heartbeat reaps it.
            reap: client
                .prepare(
                    "WITH dead AS (DELETE FROM sluice_owners WHERE owner IN ( \
                         SELECT owner FROM sluice_owners WHERE expires_at < now() \
                         FOR UPDATE SKIP LOCKED) \
                       RETURNING owner), \
                     lost AS (UPDATE sluice_calls SET state = 'lost', ended_at = now() \
                       WHERE state = 'admitted' AND (owner IN (SELECT owner FROM dead) \
                         OR owner NOT IN (SELECT owner FROM sluice_owners)) \
                       RETURNING ticket) \
                     SELECT pg_notify($1, ticket || ' 1') FROM lost",
                )
                .await?,
            settle_doubtful: client
                .prepare(
                    "WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) \
                       AS d(owner, batch, call)), \
                     ended AS (UPDATE sluice_calls c SET state = 'failed', ended_at = now() \
                       FROM d WHERE c.owner = d.owner AND c.batch = d.batch AND c.call = d.call \
                       AND c.state = 'admitted' RETURNING c.ticket) \
                     SELECT pg_notify($4, ticket || ' 1') FROM ended",
                )
                .await?,
        })
    }
}
