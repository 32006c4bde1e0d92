//! The hash chain: how a line is written, and how a log is checked.
//!
//! Takes in: records (to write) or a log's bytes (to check). Hands on: the canonical line of a
//! record, or a [`Verified`] log — its records and head — or the first bad line and why.
//!
//! A line is canonical JSON (keys sorted, no white space) of four fields:
//!
//! - `seq`: 1 for the first line, then one more per line;
//! - `prev`: the sha256 (hex) of the previous line's bytes, without its newline (64 zeros for the
//!   first line);
//! - `record`: the record;
//! - `hash`: the sha256 of the canonical JSON of `{"prev", "record", "seq"}` — the line's own
//!   content.
//!
//! An edited line fails its own `hash`; a deleted, inserted or reordered line breaks the `seq` or
//! `prev` of the line after it. The head — the sha256 of the last line — names the whole log: a
//! reader that kept it detects a truncated tail too.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sluice_kernel::provenance::{canonical_json, Record};

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// sha256 (hex) of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The canonical line (without newline) for a record at `seq` after a line whose hash is `prev`.
///
/// Written by hand around one canonical rendering of the record: the keys `hash < prev < record <
/// seq` are already in order, and `prev` and `hash` are hex, which needs no escaping. The result
/// is exactly the canonical JSON of the four fields (the tests check it).
pub fn line(seq: u64, prev: &str, record: &Record) -> String {
    let record = canonical_json(&serde_json::to_value(record).unwrap_or(Value::Null));
    let content = format!(r#"{{"prev":"{prev}","record":{record},"seq":{seq}}}"#);
    let hash = sha256_hex(content.as_bytes());
    format!(r#"{{"hash":"{hash}","prev":"{prev}","record":{record},"seq":{seq}}}"#)
}

/// A log that checked out.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The records, in order.
    pub records: Vec<Record>,
    /// The sha256 of the last line (the genesis value for an empty log).
    pub head: String,
    /// Bytes of the log up to and including the last complete, valid line.
    pub valid_len: usize,
}

/// What is wrong with a log, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: String,
    /// What kind of damage it is.
    pub kind: DamageKind,
}

/// Whether opening the log for writing can repair the damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// A line in the log is wrong: the log cannot be repaired.
    Broken,
    /// The last line has no newline (a write was cut short). `complete`: the line parses and
    /// checks, so it is kept and its newline added; otherwise it is cut.
    TornTail {
        /// Whether the torn line is whole and valid.
        complete: bool,
    },
}

impl Damage {
    /// Whether opening the log for writing repairs it.
    pub fn is_torn_tail(&self) -> bool {
        matches!(self.kind, DamageKind::TornTail { .. })
    }
}

/// Checks one line against what the chain expects; returns its record.
fn check_line(text: &str, seq: u64, prev: &str) -> Result<Record, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
    let got_seq = v.get("seq").and_then(Value::as_u64);
    let got_prev = v.get("prev").and_then(Value::as_str);
    let got_hash = v.get("hash").and_then(Value::as_str);
    let record = v.get("record").cloned().unwrap_or(Value::Null);
    let (Some(got_seq), Some(got_prev), Some(got_hash)) = (got_seq, got_prev, got_hash) else {
        return Err("lacks `seq`, `prev` or `hash`".into());
    };
    let content = json!({"prev": got_prev, "record": record, "seq": got_seq});
    if sha256_hex(canonical_json(&content).as_bytes()) != got_hash {
        return Err("was changed: its content does not match its `hash`".into());
    }
    if got_seq != seq {
        return Err(format!(
            "has seq {got_seq} where {seq} was expected: a line was deleted, inserted or moved"
        ));
    }
    if got_prev != prev {
        return Err(
            "does not follow the line before it (`prev` differs): a line before it was changed, \
             deleted, inserted or moved"
                .into(),
        );
    }
    serde_json::from_value(record).map_err(|e| format!("holds no valid record: {e}"))
}

/// Checks a whole log.
pub fn verify(bytes: &[u8]) -> Result<Verified, Damage> {
    let mut records = Vec::new();
    let mut prev = GENESIS.to_owned();
    let mut offset = 0usize;
    let mut number = 0usize;
    while offset < bytes.len() {
        number += 1;
        let rest = &bytes[offset..];
        let (text_bytes, complete) = match rest.iter().position(|b| *b == b'\n') {
            Some(nl) => (&rest[..nl], true),
            None => (rest, false),
        };
        let damage = |why: String| Damage {
            line: number,
            why,
            kind: if complete {
                DamageKind::Broken
            } else {
                DamageKind::TornTail { complete: false }
            },
        };
        let text =
            std::str::from_utf8(text_bytes).map_err(|_| damage("is not UTF-8".to_string()))?;
        if !complete {
            // A torn tail: kept when it checks (opening for writing adds the newline).
            return Err(match check_line(text, number as u64, &prev) {
                Ok(_) => Damage {
                    line: number,
                    why: "has no newline (a write was cut short), though it is whole".into(),
                    kind: DamageKind::TornTail { complete: true },
                },
                Err(why) => damage(format!("is torn (a write was cut short) and {why}")),
            });
        }
        let record = check_line(text, number as u64, &prev).map_err(damage)?;
        records.push(record);
        prev = sha256_hex(text_bytes);
        offset += text_bytes.len() + 1;
    }
    Ok(Verified {
        records,
        head: prev,
        valid_len: offset,
    })
}

/// How to repair a log whose only damage is a torn last line: the length to keep, and whether a
/// newline must be added (the torn line was complete and valid).
pub fn repair_plan(bytes: &[u8]) -> Result<(usize, bool), Damage> {
    match verify(bytes) {
        Ok(v) => Ok((v.valid_len, false)),
        Err(Damage {
            kind: DamageKind::TornTail { complete },
            ..
        }) => {
            let start = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            Ok(if complete {
                (bytes.len(), true)
            } else {
                (start, false)
            })
        }
        Err(d) => Err(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_kernel::provenance::BatchRecord;

    #[test]
    fn the_hand_written_line_is_the_canonical_json_of_its_fields() {
        let r = Record::Batch(BatchRecord {
            batch: "b\"1".into(),
            tenant: "t\u{e9}".into(),
            calls: vec!["c".into()],
            started_at_ms: 1.5,
            ended_at_ms: 2.0,
        });
        let l = line(7, GENESIS, &r);
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(canonical_json(&v), l);
        let content = json!({"prev": v["prev"], "record": v["record"], "seq": v["seq"]});
        assert_eq!(v["hash"], sha256_hex(canonical_json(&content).as_bytes()));
    }
}
