//! The hash chain: how a line is written, and how a log is checked.
//!
//! Takes in: records (to write) or a log's bytes (to check, streaming: [`scan`]). Hands on: the
//! canonical line of a record, or each valid line in turn and the chain's state after the last —
//! or the first bad line and why.
//!
//! A line is canonical JSON (keys sorted, no white space) of four fields:
//!
//! - `seq`: 1 for the first line, then one more per line;
//! - `prev`: the sha256 (hex) of the previous line's bytes, without its newline (64 zeros for the
//!   first line);
//! - `record`: the record;
//! - `hash`: the sha256 of the canonical JSON of `{"prev", "record", "seq"}` — the line's own
//!   content, which is exactly the bytes after `{"hash":"…",` with a `{` before them, so a
//!   reader hashes them where they lie.
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

/// What a scan of a log found: the state of the chain after its last visited line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// Lines visited (the records).
    pub records: u64,
    /// The sha256 of the last visited line (the genesis value for an empty log).
    pub head: String,
    /// Bytes of the log up to and including the last complete, valid line.
    pub valid_len: u64,
}

impl Default for Scanned {
    fn default() -> Self {
        Self {
            records: 0,
            head: GENESIS.to_owned(),
            valid_len: 0,
        }
    }
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

/// Why a scan stopped early.
#[derive(Debug)]
pub enum ScanError {
    /// The log could not be read.
    Io(std::io::Error),
    /// A line is bad; `at` is the chain's state before it — or, for a torn last line that is
    /// whole and valid, after it (the line was visited).
    Damaged {
        /// What is wrong, and where.
        damage: Damage,
        /// The chain's state.
        at: Scanned,
    },
}

/// A line's fields, read in one pass.
#[derive(serde::Deserialize)]
struct Fields {
    hash: String,
    prev: String,
    seq: u64,
    record: Record,
}

/// The fast check of a line's own `hash`: the line as written is `{"hash":"H",` followed by its
/// content, so the content's bytes are hashed where they lie. Lines written another way (still
/// canonical JSON of the same fields) take the slow path.
fn content_hash_matches(line: &[u8], hash: &str) -> bool {
    const HEAD: &[u8] = b"{\"hash\":\"";
    let Some(rest) = line.strip_prefix(HEAD) else {
        return false;
    };
    if rest.len() < 66 || &rest[..64] != hash.as_bytes() || &rest[64..66] != b"\"," {
        return false;
    }
    let mut h = Sha256::new();
    h.update(b"{");
    h.update(&rest[66..]);
    hex::encode(h.finalize()) == hash
}

/// Checks one line against what the chain expects; returns its record.
fn check_line(text: &str, seq: u64, prev: &str) -> Result<Record, String> {
    let fields = match serde_json::from_str::<Fields>(text) {
        Ok(f) if content_hash_matches(text.as_bytes(), &f.hash) => f,
        _ => slow_check(text)?,
    };
    if fields.seq != seq {
        return Err(format!(
            "has seq {} where {seq} was expected: a line was deleted, inserted or moved",
            fields.seq
        ));
    }
    if fields.prev != prev {
        return Err(
            "does not follow the line before it (`prev` differs): a line before it was changed, \
             deleted, inserted or moved"
                .into(),
        );
    }
    Ok(fields.record)
}

/// The check by the definition: the sha256 of the canonical JSON of `{"prev","record","seq"}`.
fn slow_check(text: &str) -> Result<Fields, String> {
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
    Ok(Fields {
        hash: got_hash.to_owned(),
        prev: got_prev.to_owned(),
        seq: got_seq,
        record: serde_json::from_value(record)
            .map_err(|e| format!("holds no valid record: {e}"))?,
    })
}

/// Reads a log line by line, checking the chain, and hands each valid line (its bytes without
/// the newline) and record to `visit`. Memory: one line at a time.
///
/// A torn last line (no newline) is damage of kind [`DamageKind::TornTail`]; when it is whole
/// and valid it is visited first (opening for writing keeps it).
pub fn scan<R: std::io::BufRead>(
    mut reader: R,
    mut visit: impl FnMut(&[u8], Record),
) -> Result<Scanned, ScanError> {
    let mut at = Scanned::default();
    let mut buf = Vec::with_capacity(1024);
    let mut number = 0usize;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(ScanError::Io)?;
        if n == 0 {
            return Ok(at);
        }
        number += 1;
        let complete = buf.last() == Some(&b'\n');
        let text_bytes = if complete { &buf[..n - 1] } else { &buf[..] };
        let fail = |why: String, at: Scanned| ScanError::Damaged {
            damage: Damage {
                line: number,
                why,
                kind: if complete {
                    DamageKind::Broken
                } else {
                    DamageKind::TornTail { complete: false }
                },
            },
            at,
        };
        let Ok(text) = std::str::from_utf8(text_bytes) else {
            return Err(fail("is not UTF-8".to_string(), at));
        };
        match check_line(text, at.records + 1, &at.head) {
            Ok(record) => {
                visit(text_bytes, record);
                at.records += 1;
                at.head = sha256_hex(text_bytes);
                if !complete {
                    return Err(ScanError::Damaged {
                        damage: Damage {
                            line: number,
                            why: "has no newline (a write was cut short), though it is whole"
                                .into(),
                            kind: DamageKind::TornTail { complete: true },
                        },
                        at,
                    });
                }
                at.valid_len += n as u64;
            }
            Err(why) if complete => return Err(fail(why, at)),
            Err(why) => {
                return Err(fail(
                    format!("is torn (a write was cut short) and {why}"),
                    at,
                ))
            }
        }
    }
}

/// Checks a whole log held in memory, returning its records.
pub fn verify(bytes: &[u8]) -> Result<(Vec<Record>, Scanned), Damage> {
    let mut records = Vec::new();
    match scan(bytes, |_, r| records.push(r)) {
        Ok(at) => Ok((records, at)),
        Err(ScanError::Damaged { damage, .. }) => Err(damage),
        Err(ScanError::Io(e)) => Err(Damage {
            line: 0,
            why: e.to_string(),
            kind: DamageKind::Broken,
        }),
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
