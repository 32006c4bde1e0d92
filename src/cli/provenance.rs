//! `sluice provenance`: verify a log (against a signed checkpoint too), ask it questions, export
//! it, make keys, sign checkpoints and prove a call's record is in a checkpointed log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use serde_json::json;
use sluice::kernel::access::Pattern;
use sluice::kernel::provenance::{BatchRecord, Record};
use sluice::provenance::note::{split_checkpoints, SignerKey, VerifierKey};
use sluice::provenance::{
    checkpoint_source, prove_source, query, read_source, verify_checkpoint_source, Durability,
    FileSource, LogOptions, LogSource, ProvenanceError, ProvenanceLog,
};
use sluice_postgres::PgChain;

use super::failure::Failure;
use super::output::TextOrJson;

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check the hash chain: exit 0 with the record count and head hash, or exit 1 naming the
    /// first bad line.
    Verify {
        /// The log: a file, or `postgres://…` (its tenants' chains).
        file: PathBuf,
        /// The head hash the log must end with (detects a cut tail).
        #[arg(long)]
        head: Option<String>,
        /// A signed checkpoint (a file holding one, or a `.checkpoints` file: its last one is
        /// used); exit 1 when the signature does not verify, the log holds fewer records than it
        /// covers (truncated), or the Merkle root of its first records differs (rewritten or
        /// forked).
        #[arg(long, value_name = "CKPT", requires = "verifier")]
        checkpoint: Option<PathBuf>,
        /// The verifier key (`NAME+HEXID+BASE64`, or a file holding it).
        #[arg(long, value_name = "VKEY", requires = "checkpoint")]
        verifier: Option<String>,
        /// For a `postgres://` log: the tenant whose chain to verify (default: every tenant's).
        #[arg(long)]
        tenant: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: TextOrJson,
    },
    /// The calls that wrote resources overlapping a pattern, in order, with their edges.
    Lineage {
        /// The log.
        file: PathBuf,
        /// The resource pattern.
        #[arg(long)]
        resource: String,
        /// For a `postgres://` log: the tenant whose chain to read (default `default`); for a
        /// file, only that tenant's records are considered.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// A call's causal ancestors, through read-after-write edges.
    Why {
        /// The log.
        file: PathBuf,
        /// The call id.
        #[arg(long)]
        call: String,
        /// The batch, when several batches have a call with that id.
        #[arg(long)]
        batch: Option<String>,
        /// For a `postgres://` log: the tenant whose chain to read (default `default`); for a
        /// file, only that tenant's records are considered.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Export the log.
    Export {
        /// The log.
        file: PathBuf,
        /// The export format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// For a `postgres://` log: the tenant whose chain to read (default `default`); for a
        /// file, only that tenant's records are considered.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Write a new Ed25519 signer key (mode 0600) and print its verifier key.
    Keygen {
        /// The key's name (no white space or `+`), e.g. the log's host and path.
        #[arg(long)]
        name: String,
        /// Where to write the signer key (refused if the file exists).
        #[arg(long, value_name = "KEYFILE")]
        out: PathBuf,
    },
    /// Print a signed checkpoint of the log as it stands.
    Checkpoint {
        /// The log.
        file: PathBuf,
        /// The signer key file.
        #[arg(long, value_name = "KEYFILE")]
        key: PathBuf,
        /// The origin line (default: the key's name).
        #[arg(long)]
        origin: Option<String>,
        /// For a `postgres://` log: the tenant whose chain (default `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Print the RFC 6962 inclusion proof of a call's record in a checkpointed log.
    Prove {
        /// The log.
        file: PathBuf,
        /// The call id.
        #[arg(long)]
        call: String,
        /// The batch, when several batches have a call with that id.
        #[arg(long)]
        batch: Option<String>,
        /// The signed checkpoint (a file).
        #[arg(long, value_name = "CKPT")]
        checkpoint: PathBuf,
        /// For a `postgres://` log: the tenant whose chain (default `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Append synthetic batch records as fast as the log takes them, printing each record's
    /// sequence number once the log has acknowledged it (a load and crash-test tool).
    Soak {
        /// The log.
        file: PathBuf,
        /// How many records (default: until killed).
        #[arg(long)]
        count: Option<u64>,
        /// Acknowledge on enqueue instead of after the sync.
        #[arg(long)]
        buffered: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportFormat {
    /// W3C PROV-JSON.
    ProvJson,
}

/// A provenance error as the CLI's exit: files that cannot be read are 2, the rest 1.
fn failed(e: ProvenanceError) -> anyhow::Error {
    if e.is_io() {
        super::failure::unreadable(&e)
    } else {
        super::failure::invalid(e.to_string())
    }
}

/// The default tenant of a database chain.
const DEFAULT_TENANT: &str = "default";

/// A log named on the command line: a file, or `postgres://…`.
fn is_database(file: &Path) -> Option<&str> {
    file.to_str()
        .filter(|u| sluice_postgres::is_postgres_url(u))
}

/// The one chain a command reads: a file's, or a tenant's in a database. A file has one chain
/// for every tenant, so a tenant is refused for it (exit 2).
fn chain<'a>(file: &'a Path, tenant: Option<&str>) -> anyhow::Result<Box<dyn LogSource + 'a>> {
    match (is_database(file), tenant) {
        (Some(url), t) => Ok(Box::new(PgChain::new(url, t.unwrap_or(DEFAULT_TENANT)))),
        (None, None) => Ok(Box::new(FileSource(file))),
        (None, Some(_)) => Err(Failure {
            code: 2,
            message: format!(
                "--tenant applies to a `postgres://` log; the file {} holds one chain for every \
                 tenant",
                file.display()
            ),
        }
        .into()),
    }
}

/// Reads a log for a question (only `tenant`'s records when given); unreadable is exit 2,
/// damaged exit 1 (naming the line).
fn records(file: &Path, tenant: Option<&str>) -> anyhow::Result<Vec<Record>> {
    let mut records = match is_database(file) {
        Some(url) => read_source(&PgChain::new(url, tenant.unwrap_or(DEFAULT_TENANT))),
        None => read_source(&FileSource(file)),
    }
    .map_err(failed)?;
    if let Some(t) = tenant {
        records.retain(|r| r.tenant() == t);
    }
    Ok(records)
}

/// How a log is named in answers: a file's path, a database's URL without its password.
fn shown(file: &Path) -> String {
    match is_database(file) {
        Some(url) => sluice_postgres::redact_url(url),
        None => file.display().to_string(),
    }
}

/// Reads a text file (exit 2 when it cannot be read).
fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        super::failure::unreadable(&Failure {
            code: 2,
            message: format!("cannot read the {what} `{}`: {e}", path.display()),
        })
    })
}

/// Reads a signer key file.
pub(crate) fn read_signer_key(path: &Path) -> anyhow::Result<SignerKey> {
    SignerKey::parse(&read_text(path, "signer key")?)
        .map_err(|e| super::failure::invalid(format!("{}: {e}", path.display())))
}

/// A verifier key given as text, or the file that holds it.
fn read_verifier_key(arg: &str) -> anyhow::Result<VerifierKey> {
    if let Ok(k) = VerifierKey::parse(arg) {
        return Ok(k);
    }
    let path = Path::new(arg);
    if !path.exists() {
        return Err(super::failure::invalid(format!(
            "the verifier key `{arg}` is neither a key (`NAME+HEXID+BASE64`) nor a file"
        )));
    }
    VerifierKey::parse(&read_text(path, "verifier key")?)
        .map_err(|e| super::failure::invalid(format!("{}: {e}", path.display())))
}

/// A signed checkpoint from a file: the one it holds, or the last of a `.checkpoints` file.
fn read_checkpoint(path: &Path) -> anyhow::Result<String> {
    let text = read_text(path, "checkpoint")?;
    Ok(split_checkpoints(&text).pop().unwrap_or(text))
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Verify {
            file,
            head,
            format,
            checkpoint,
            verifier,
            tenant,
        } => {
            let checkpoint = match (checkpoint, verifier) {
                (Some(c), Some(v)) => Some((read_checkpoint(&c)?, read_verifier_key(&v)?)),
                _ => None,
            };
            match (is_database(&file), tenant) {
                (Some(url), None) => {
                    if head.is_some() || checkpoint.is_some() {
                        return Err(Failure {
                            code: 2,
                            message: "--head and --checkpoint name one chain: with a \
                                      `postgres://` log, say whose with --tenant"
                                .into(),
                        }
                        .into());
                    }
                    verify_tenants(url, format)
                }
                (_, tenant) => verify(
                    &*chain(&file, tenant.as_deref())?,
                    head.as_deref(),
                    checkpoint,
                    format,
                ),
            }
        }
        Command::Keygen { name, out } => keygen(&name, &out),
        Command::Checkpoint {
            file,
            key,
            origin,
            tenant,
        } => {
            let key = read_signer_key(&key)?;
            let (_, signed) =
                checkpoint_source(&*chain(&file, tenant.as_deref())?, &key, origin.as_deref())
                    .map_err(failed)?;
            out!("{signed}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Prove {
            file,
            call,
            batch,
            checkpoint,
            tenant,
        } => {
            let signed = read_checkpoint(&checkpoint)?;
            refuse_ambiguous(
                &file,
                &records(&file, tenant.as_deref())?,
                &call,
                batch.as_deref(),
            )?;
            let source = chain(&file, tenant.as_deref())?;
            let proof = prove_source(&*source, &call, batch.as_deref(), &signed).map_err(failed)?;
            outln!("{}", serde_json::to_string_pretty(&proof.to_json())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Lineage {
            file,
            resource,
            tenant,
        } => {
            let pattern = Pattern::parse(&resource).map_err(|e| Failure {
                code: 2,
                message: format!("the resource `{resource}` {e}"),
            })?;
            let l = query::lineage(&records(&file, tenant.as_deref())?, &pattern);
            outln!("{}", serde_json::to_string_pretty(&l)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Why {
            file,
            call,
            batch,
            tenant,
        } => {
            let records = records(&file, tenant.as_deref())?;
            refuse_ambiguous(&file, &records, &call, batch.as_deref())?;
            let answers = query::why(&records, &call, batch.as_deref());
            if answers.is_empty() {
                let whose = match (is_database(&file), &tenant) {
                    (Some(_), t) => {
                        format!(" (tenant `{}`)", t.as_deref().unwrap_or(DEFAULT_TENANT))
                    }
                    (None, Some(t)) => format!(" among tenant `{t}`'s records"),
                    (None, None) => String::new(),
                };
                return Err(super::failure::invalid(format!(
                    "no call `{call}`{} in {}{whose}",
                    batch
                        .map(|b| format!(" in batch `{b}`"))
                        .unwrap_or_default(),
                    shown(&file)
                )));
            }
            outln!("{}", serde_json::to_string_pretty(&answers)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            file,
            format: ExportFormat::ProvJson,
            tenant,
        } => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&query::prov_json(&records(
                    &file,
                    tenant.as_deref()
                )?))?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Soak {
            file,
            count,
            buffered,
        } => soak(&file, count, buffered),
    }
}

/// Refuses a `--call` (with `--batch`, when given) that names several calls: call ids repeat
/// across batches (each turn's, each client's), and an answer about the wrong one misleads.
/// The error lists each call with what tells it apart (its batch, tool, start and origin).
fn refuse_ambiguous(
    file: &Path,
    records: &[Record],
    call: &str,
    batch: Option<&str>,
) -> anyhow::Result<()> {
    let named = query::candidates(records, call, batch);
    if named.len() < 2 {
        return Ok(());
    }
    let list: Vec<String> = named.iter().map(|c| format!("  {c}")).collect();
    Err(super::failure::invalid(format!(
        "{} calls have the id `{call}`{} in {}: say which with --batch\n{}",
        named.len(),
        batch
            .map(|b| format!(" in batch `{b}`"))
            .unwrap_or_default(),
        shown(file),
        list.join("\n")
    )))
}

/// Opens a log for writing, saying on standard error what a repair changed.
pub(crate) fn open(file: &Path, options: LogOptions) -> anyhow::Result<ProvenanceLog> {
    let log = ProvenanceLog::open_with(file, options).map_err(failed)?;
    if let Some(r) = &log.opened().repaired {
        eprintln!(
            "sluice: repaired the provenance log {}: {r}",
            file.display()
        );
    }
    Ok(log)
}

/// `keygen`: a new signer key, written with mode 0600; the verifier key on stdout.
fn keygen(name: &str, out: &Path) -> anyhow::Result<ExitCode> {
    let key = SignerKey::generate(name).map_err(|e| super::failure::invalid(e.to_string()))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(out)
        .and_then(|mut f| writeln!(f, "{}", key.to_text()).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "it exists (a key is never overwritten; remove it first)".to_string()
        } else {
            e.to_string()
        };
        return Err(super::failure::unreadable(&Failure {
            code: 2,
            message: format!("cannot write the signer key `{}`: {why}", out.display()),
        }));
    }
    outln!("{}", key.verifier().to_text());
    Ok(ExitCode::SUCCESS)
}

/// `verify`: the chain intact (and, with `--head`, ending where it should; with a checkpoint,
/// holding exactly the records it signed).
fn verify(
    source: &dyn LogSource,
    head: Option<&str>,
    checkpoint: Option<(String, VerifierKey)>,
    format: TextOrJson,
) -> anyhow::Result<ExitCode> {
    let name = source.name();
    let fail = |message: String, extra: serde_json::Value| {
        match format {
            TextOrJson::Json => {
                let mut v = json!({"valid": false, "message": message});
                if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                    o.extend(e.clone());
                }
                outln!("{v}")
            }
            TextOrJson::Text => outln!("{}: {message}", name.display()),
        }
        Ok(ExitCode::from(1))
    };
    // Durable first: calls whose intent is here and whose outcome is not started and never
    // finished (a crash, a kill): their effects are in doubt, and each is named.
    let mut outcomes = query::OutcomeTracker::default();
    let checked = match &checkpoint {
        Some((signed, verifier)) => {
            verify_checkpoint_source(source, signed, verifier).map(|(v, c)| (v, Some(c)))
        }
        None => source.scan(&mut |_, r| outcomes.add(&r)).map(|v| (v, None)),
    };
    let (v, checkpoint) = match checked {
        Ok(ok) => ok,
        Err(e) if e.is_io() => return Err(super::failure::unreadable(&e)),
        Err(ProvenanceError::Damaged {
            line,
            why,
            torn_tail,
            ..
        }) => {
            let repair = if torn_tail {
                " — the last line is torn (a write was cut short); opening the log for \
                 writing (`sluice run --provenance`) repairs it"
            } else {
                ""
            };
            return fail(
                format!(
                    "{unit} {line}: the {unit} {why}{repair}",
                    unit = source.unit()
                ),
                json!({"line": line, "torn_tail": torn_tail}),
            );
        }
        Err(e) => {
            let which = match &e {
                ProvenanceError::Truncated { .. } => "truncated",
                ProvenanceError::Forked { .. } => "forked",
                ProvenanceError::BadSignature(_) | ProvenanceError::NoSignature(_) => "signature",
                _ => "checkpoint",
            };
            return fail(e.to_string(), json!({"failed": which}));
        }
    };
    if let Some(expected) = head {
        if !expected.eq_ignore_ascii_case(&v.head) {
            return fail(
                format!(
                    "the head is {} where {expected} was expected: records were cut from the \
                     end or the log is another one",
                    v.head
                ),
                json!({"failed": "head"}),
            );
        }
    }
    let unknown = match checkpoint {
        // The checkpoint's check reads the log its own way: read the records once more.
        Some(_) => query::outcome_unknown(&read_source(source).map_err(failed)?),
        None => outcomes.unfinished(),
    };
    match format {
        TextOrJson::Json => {
            let mut out = json!({"valid": true, "records": v.records, "head": v.head,
                                 "outcome_unknown": unknown});
            if let Some(c) = &checkpoint {
                if let Some(o) = out.as_object_mut() {
                    o.insert(
                        "checkpoint".into(),
                        json!({"origin": c.origin, "size": c.size}),
                    );
                }
            }
            outln!("{out}")
        }
        TextOrJson::Text => {
            let covered = checkpoint
                .map(|c| {
                    format!(
                        "; its first {} records match the checkpoint signed for `{}`",
                        c.size, c.origin
                    )
                })
                .unwrap_or_default();
            outln!(
                "{}: intact, {} records, head {}{covered}",
                name.display(),
                v.records,
                v.head
            );
            print_unknown(&unknown);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// After an intact chain: the calls that started and never finished, each named.
fn print_unknown(unknown: &[query::Unfinished]) {
    if unknown.is_empty() {
        return;
    }
    outln!(
        "{} calls started and never finished (outcome unknown: their effects are in doubt):",
        unknown.len()
    );
    for u in unknown {
        outln!(
            "  --batch {} --call {} ({}, tenant {}, idempotency key {})",
            u.batch,
            u.call,
            u.tool,
            u.tenant,
            u.idempotency_key
        );
    }
}

/// `verify` of every tenant's chain in a database: exit 0 with each one's records and head, or 1
/// naming the first damaged record of the first damaged chain.
fn verify_tenants(url: &str, format: TextOrJson) -> anyhow::Result<ExitCode> {
    let tenants = PgChain::tenants(url).map_err(failed)?;
    let mut chains = Vec::new();
    // Every tenant's chain is read, so a report names each broken one, not only the first.
    let mut broken = Vec::new();
    let mut outcomes = query::OutcomeTracker::default();
    for tenant in &tenants {
        let source = PgChain::new(url, tenant);
        match source.scan(&mut |_, r| outcomes.add(&r)) {
            Ok(v) => chains.push((tenant, v)),
            Err(e) if e.is_io() => return Err(super::failure::unreadable(&e)),
            Err(ProvenanceError::Damaged { line, why, .. }) => {
                let message = format!("{unit} {line}: the {unit} {why}", unit = source.unit());
                broken.push((tenant, line, message, source.name().display().to_string()));
            }
            Err(e) => return Err(failed(e)),
        }
    }
    if let Some((tenant, line, message, _)) = broken.first() {
        match format {
            // The first broken chain's report has a file's shape; `broken` lists them all.
            TextOrJson::Json => outln!(
                "{}",
                json!({"valid": false, "tenant": tenant, "line": line, "message": message,
                       "broken": broken.iter().map(|(t, l, m, _)| {
                           json!({"tenant": t, "line": l, "message": m})
                       }).collect::<Vec<_>>()})
            ),
            TextOrJson::Text => {
                for (_, _, message, name) in &broken {
                    outln!("{name}: {message}");
                }
            }
        }
        return Ok(ExitCode::from(1));
    }
    let records: u64 = chains.iter().map(|(_, v)| v.records).sum();
    let unknown = outcomes.unfinished();
    match format {
        TextOrJson::Json => outln!(
            "{}",
            json!({"valid": true, "records": records, "tenants": chains.iter().map(|(t, v)| {
                json!({"tenant": t, "records": v.records, "head": v.head})
            }).collect::<Vec<_>>(), "outcome_unknown": unknown})
        ),
        TextOrJson::Text => {
            outln!(
                "{}: intact, {records} records in {} tenant chain(s)",
                sluice_postgres::redact_url(url),
                chains.len()
            );
            for (t, v) in &chains {
                outln!("  {t}: {} records, head {}", v.records, v.head);
            }
            print_unknown(&unknown);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `soak`: appends batch records as fast as the log takes them, printing each sequence number
/// once it is acknowledged (for crash tests).
fn soak(file: &Path, count: Option<u64>, buffered: bool) -> anyhow::Result<ExitCode> {
    let durability = if buffered {
        Durability::Buffered
    } else {
        Durability::Durable
    };
    let log = open(file, LogOptions::new(durability))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut pending = std::collections::VecDeque::new();
        let mut out = std::io::stdout().lock();
        let mut i = 0u64;
        loop {
            if count.is_some_and(|c| i >= c) && pending.is_empty() {
                break;
            }
            // Keep many appends in flight, so that groups form.
            while pending.len() < 64 && count.is_none_or(|c| i < c) {
                i += 1;
                let r = Record::Batch(BatchRecord {
                    batch: format!("soak-{i}"),
                    tenant: "soak".into(),
                    calls: vec![format!("c{i}")],
                    started_at_ms: i as f64,
                    ended_at_ms: i as f64 + 1.0,
                    origin: None,
                });
                pending.push_back(log.append(r));
            }
            if let Some(ack) = pending.pop_front() {
                match ack.await {
                    Ok(Ok(seq)) => {
                        let _ = writeln!(out, "{seq}");
                        let _ = out.flush();
                    }
                    _ => anyhow::bail!("the log refused a record"),
                }
            }
        }
        anyhow::Ok(())
    })?;
    log.close();
    Ok(ExitCode::SUCCESS)
}
