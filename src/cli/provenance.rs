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
    checkpoint_file, prove, query, read_records, verify_checkpoint, verify_file, Durability,
    LogOptions, ProvenanceError, ProvenanceLog,
};

use super::{Failure, TextOrJson};

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check the hash chain: exit 0 with the record count and head hash, or exit 1 naming the
    /// first bad line.
    Verify {
        /// The log.
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
    },
    /// Export the log.
    Export {
        /// The log.
        file: PathBuf,
        /// The export format.
        #[arg(long, value_enum)]
        format: ExportFormat,
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
        super::unreadable(&e)
    } else {
        super::invalid(e.to_string())
    }
}

/// Reads a log for a question; unreadable is exit 2, damaged exit 1 (naming the line).
fn records(file: &Path) -> anyhow::Result<Vec<Record>> {
    read_records(file).map_err(failed)
}

/// Reads a text file (exit 2 when it cannot be read).
fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        super::unreadable(&Failure {
            code: 2,
            message: format!("cannot read the {what} `{}`: {e}", path.display()),
        })
    })
}

/// Reads a signer key file.
pub(crate) fn read_signer_key(path: &Path) -> anyhow::Result<SignerKey> {
    SignerKey::parse(&read_text(path, "signer key")?)
        .map_err(|e| super::invalid(format!("{}: {e}", path.display())))
}

/// A verifier key given as text, or the file that holds it.
fn read_verifier_key(arg: &str) -> anyhow::Result<VerifierKey> {
    if let Ok(k) = VerifierKey::parse(arg) {
        return Ok(k);
    }
    let path = Path::new(arg);
    if !path.exists() {
        return Err(super::invalid(format!(
            "the verifier key `{arg}` is neither a key (`NAME+HEXID+BASE64`) nor a file"
        )));
    }
    VerifierKey::parse(&read_text(path, "verifier key")?)
        .map_err(|e| super::invalid(format!("{}: {e}", path.display())))
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
        } => {
            let checkpoint = match (checkpoint, verifier) {
                (Some(c), Some(v)) => Some((read_checkpoint(&c)?, read_verifier_key(&v)?)),
                _ => None,
            };
            verify(&file, head.as_deref(), checkpoint, format)
        }
        Command::Keygen { name, out } => keygen(&name, &out),
        Command::Checkpoint { file, key, origin } => {
            let key = read_signer_key(&key)?;
            let (_, signed) = checkpoint_file(&file, &key, origin.as_deref()).map_err(failed)?;
            out!("{signed}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Prove {
            file,
            call,
            batch,
            checkpoint,
        } => {
            let signed = read_checkpoint(&checkpoint)?;
            let proof = prove(&file, &call, batch.as_deref(), &signed).map_err(failed)?;
            outln!("{}", serde_json::to_string_pretty(&proof.to_json())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Lineage { file, resource } => {
            let pattern = Pattern::parse(&resource).map_err(|e| Failure {
                code: 2,
                message: format!("the resource `{resource}` {e}"),
            })?;
            let l = query::lineage(&records(&file)?, &pattern);
            outln!("{}", serde_json::to_string_pretty(&l)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Why { file, call, batch } => {
            let answers = query::why(&records(&file)?, &call, batch.as_deref());
            if answers.is_empty() {
                return Err(super::invalid(format!(
                    "no call `{call}`{} in {}",
                    batch
                        .map(|b| format!(" in batch `{b}`"))
                        .unwrap_or_default(),
                    file.display()
                )));
            }
            outln!("{}", serde_json::to_string_pretty(&answers)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            file,
            format: ExportFormat::ProvJson,
        } => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&query::prov_json(&records(&file)?))?
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
    let key = SignerKey::generate(name).map_err(|e| super::invalid(e.to_string()))?;
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
        return Err(super::unreadable(&Failure {
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
    file: &Path,
    head: Option<&str>,
    checkpoint: Option<(String, VerifierKey)>,
    format: TextOrJson,
) -> anyhow::Result<ExitCode> {
    let fail = |message: String, extra: serde_json::Value| {
        match format {
            TextOrJson::Json => {
                let mut v = json!({"valid": false, "message": message});
                if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                    o.extend(e.clone());
                }
                outln!("{v}")
            }
            TextOrJson::Text => outln!("{}: {message}", file.display()),
        }
        Ok(ExitCode::from(1))
    };
    let checked = match &checkpoint {
        Some((signed, verifier)) => {
            verify_checkpoint(file, signed, verifier).map(|(v, c)| (v, Some(c)))
        }
        None => verify_file(file).map(|v| (v, None)),
    };
    let (v, checkpoint) = match checked {
        Ok(ok) => ok,
        Err(e) if e.is_io() => return Err(super::unreadable(&e)),
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
                format!("line {line}: the line {why}{repair}"),
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
    match format {
        TextOrJson::Json => {
            let mut out = json!({"valid": true, "records": v.records, "head": v.head});
            if let Some(c) = &checkpoint {
                out["checkpoint"] = json!({"origin": c.origin, "size": c.size});
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
                file.display(),
                v.records,
                v.head
            )
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
