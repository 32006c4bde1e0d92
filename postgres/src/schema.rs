//! The schema, by versioned migrations: each runs once, in order, in the transaction that records
//! it; a process that finds the schema older than itself migrates it (under an advisory lock, so
//! that two processes starting at once do not both try), and `sluice db migrate` does it
//! explicitly. No table is changed by hand.

use tokio_postgres::Client;

/// The migrations, in order: (version, what it does, the SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "the shared conflict domain: processes and their leases, admitted calls",
        "CREATE TABLE sluice_owners (
         owner     text PRIMARY KEY,
         heartbeat timestamptz NOT NULL,
         started   timestamptz NOT NULL DEFAULT now()
     );
     CREATE SEQUENCE sluice_admission;
     CREATE TABLE sluice_calls (
         ticket      bigint PRIMARY KEY,
         tenant      text NOT NULL,
         batch       text NOT NULL,
         call        text NOT NULL,
         tool        text NOT NULL,
         owner       text NOT NULL,
         accesses    jsonb NOT NULL,
         waits_for   bigint[] NOT NULL,
         state       text NOT NULL CHECK (state IN ('admitted', 'ok', 'failed', 'lost')),
         admitted_at timestamptz NOT NULL DEFAULT now(),
         ended_at    timestamptz
     );
     CREATE INDEX sluice_calls_open ON sluice_calls (tenant, ticket) WHERE state = 'admitted';
     CREATE INDEX sluice_calls_owner ON sluice_calls (owner) WHERE state = 'admitted';",
    ),
    (
        2,
        "shared provenance: one append-only table, one hash chain per tenant",
        // `line` is the record's line exactly as a log file holds it (crate sluice-provenance,
        // module chain): its `seq` and `prev` are the tenant's, so each tenant's rows in `seq`
        // order are a chain a reader checks as it would a file. Rows are only ever inserted:
        // the triggers refuse UPDATE, DELETE and TRUNCATE (one who bypasses them — a superuser
        // disabling triggers — is caught by `sluice provenance verify`).
        "CREATE TABLE sluice_provenance (
             tenant       text NOT NULL,
             seq          bigint NOT NULL CHECK (seq > 0),
             line         text NOT NULL,
             committed_at timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (tenant, seq)
         );
         CREATE FUNCTION sluice_provenance_append_only() RETURNS trigger
             LANGUAGE plpgsql AS $$
             BEGIN
                 RAISE EXCEPTION 'sluice_provenance is append-only: % refused', TG_OP;
             END
             $$;
         CREATE TRIGGER sluice_provenance_no_change
             BEFORE UPDATE OR DELETE ON sluice_provenance
             FOR EACH ROW EXECUTE FUNCTION sluice_provenance_append_only();
         CREATE TRIGGER sluice_provenance_no_truncate
             BEFORE TRUNCATE ON sluice_provenance
             FOR EACH STATEMENT EXECUTE FUNCTION sluice_provenance_append_only();",
    ),
    (
        3,
        "each process's lease is its own: its row holds its expiry",
        // Judged by the row's own expiry, a process with a short lease never reaps one with a
        // long lease. The default serves a row written by an older version (its lease was 10 s).
        "ALTER TABLE sluice_owners
             ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now() + interval '10 seconds';",
    ),
    (
        4,
        "each tenant's last writers, so that a process resumes a chain from its head",
        // One row per (tenant, written resource): the writer of the latest call that wrote it,
        // kept in the transaction that appends the call. A row with the empty resource says the
        // tenant's index is complete (a chain written before this table is indexed once).
        "CREATE TABLE sluice_last_writers (
             tenant   text NOT NULL,
             resource text NOT NULL,
             batch    text NOT NULL,
             call     text NOT NULL,
             PRIMARY KEY (tenant, resource)
         );",
    ),
    (
        5,
        "last writers keyed by a digest: a resource of any length keeps its record",
        // A btree entry holds at most ~2,700 bytes, so a (tenant, resource) key refused a long
        // resource and, with it, its whole group's records. The key is now the SHA-256 of
        // tenant, NUL, resource (computed by the server, the same way for old rows and new);
        // the text stays; a hash index (which stores only a hash) finds a tenant's rows.
        "ALTER TABLE sluice_last_writers ADD COLUMN key bytea;
         UPDATE sluice_last_writers SET key = sha256(
             convert_to(tenant, 'UTF8') || '\\x00'::bytea || convert_to(resource, 'UTF8'));
         ALTER TABLE sluice_last_writers ALTER COLUMN key SET NOT NULL;
         ALTER TABLE sluice_last_writers DROP CONSTRAINT sluice_last_writers_pkey;
         ALTER TABLE sluice_last_writers ADD PRIMARY KEY (key);
         CREATE INDEX sluice_last_writers_tenant ON sluice_last_writers USING hash (tenant);",
    ),
];

/// Brings the schema to the newest version; returns (version before, version after).
pub async fn migrate(client: &mut Client) -> Result<(i32, i32), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    // One lock per schema: two deployments in two schemas of one database migrate apart.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(coalesce(current_schema(), ''), 7261))",
        &[],
    )
    .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS sluice_schema (
             version     integer PRIMARY KEY,
             description text NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let before: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM sluice_schema", &[])
        .await?
        .get(0);
    let mut now = before;
    for (version, description, sql) in MIGRATIONS {
        if *version <= before {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO sluice_schema (version, description) VALUES ($1, $2)",
            &[version, description],
        )
        .await?;
        now = *version;
    }
    tx.commit().await?;
    Ok((before, now))
}
