//! `sluice provenance`: verify a log, ask it questions, export it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use serde_json::json;
use sluice::kernel::access::Pattern;
use sluice::kernel::provenance::{BatchRecord, Record};
use sluice::provenance::{query, verify_file, Durability, ProvenanceLog, VerifyError};

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

/// Reads a log for a question; unreadable is exit 2, damaged exit 1 (naming the line).
fn records(file: &Path) -> anyhow::Result<Vec<Record>> {
    match verify_file(file) {
        Ok(v) => Ok(v.records),
        Err(e @ VerifyError::Unreadable { .. }) => Err(super::unreadable(&e)),
        Err(e) => Err(super::invalid(format!("{}: {e}", file.display()))),
    }
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Verify { file, head, format } => verify(&file, head.as_deref(), format),
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
pub(crate) fn open(file: &Path, durability: Durability) -> anyhow::Result<ProvenanceLog> {
    let log = ProvenanceLog::open(file, durability).map_err(|e| match &e {
        sluice::provenance::ProvenanceError::Io { .. } => super::unreadable(&e),
        _ => super::invalid(e.to_string()),
    })?;
    if let Some(r) = &log.opened().repaired {
        eprintln!(
            "sluice: repaired the provenance log {}: {r}",
            file.display()
        );
    }
    Ok(log)
}

/// `verify`: the chain intact (and, with `--head`, ending where it should).
fn verify(file: &Path, head: Option<&str>, format: TextOrJson) -> anyhow::Result<ExitCode> {
    let v = match verify_file(file) {
        Ok(v) => v,
        Err(e @ VerifyError::Unreadable { .. }) => return Err(super::unreadable(&e)),
        Err(VerifyError::Damaged(d)) => {
            let repair = if d.is_torn_tail() {
                " — the last line is torn (a write was cut short); opening the log for \
                 writing (`sluice run --provenance`) repairs it"
            } else {
                ""
            };
            match format {
                TextOrJson::Json => outln!(
                    "{}",
                    json!({"valid": false, "line": d.line, "message": d.why,
                           "torn_tail": d.is_torn_tail()})
                ),
                TextOrJson::Text => outln!(
                    "{}: line {}: the line {}{repair}",
                    file.display(),
                    d.line,
                    d.why
                ),
            }
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(expected) = head {
        if !expected.eq_ignore_ascii_case(&v.head) {
            outln!(
                "{}: the head is {} where {expected} was expected: records were cut \
                 from the end or the log is another one",
                file.display(),
                v.head
            );
            return Ok(ExitCode::from(1));
        }
    }
    match format {
        TextOrJson::Json => outln!(
            "{}",
            json!({"valid": true, "records": v.records.len(), "head": v.head})
        ),
        TextOrJson::Text => outln!(
            "{}: intact, {} records, head {}",
            file.display(),
            v.records.len(),
            v.head
        ),
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
    let log = open(file, durability)?;
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
