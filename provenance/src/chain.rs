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

use serde_json::Value;
use sha2::{Digest, Sha256};

use sluice_kernel::provenance::{canonical_json, Record};

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// sha256 (hex) of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_of(&Sha256::digest(bytes).into())
}

/// Lowercase hex of a hash, without the per-character iterator `hex::encode` uses (it showed up
/// in the writer's profile).
fn hex_of(h: &[u8; 32]) -> String {
    let mut out = [0u8; 64];
    write_hex(h, &mut out);
    // Hex digits are ASCII.
    String::from_utf8_lossy(&out).into_owned()
}

fn write_hex(h: &[u8; 32], out: &mut [u8]) {
    fn digit(n: u8) -> u8 {
        match n {
            0..=9 => b'0' + n,
            _ => b'a' + (n - 10),
        }
    }
    for (pair, b) in out.chunks_exact_mut(2).zip(h) {
        if let [hi, lo] = pair {
            *hi = digit(b >> 4);
            *lo = digit(b & 0xf);
        }
    }
}

/// Appends the canonical JSON of a record. The record structs declare their fields in sorted
/// order and their tag, `type`, sorts after every field, so the struct is serialized as it is
/// and the tag is put before its closing brace — no detour through a `Value` (the writer's
/// largest cost before). The tests check the result against [`canonical_json`].
fn write_record(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    let (tag, written) = match record {
        Record::Call(c) => ("call", serde_json::to_writer(&mut *out, c)),
        Record::Edge(e) => ("edge", serde_json::to_writer(&mut *out, e)),
        Record::Batch(b) => ("batch", serde_json::to_writer(&mut *out, b)),
        Record::Intent(i) => ("intent", serde_json::to_writer(&mut *out, i)),
    };
    if written.is_ok() && out.last() == Some(&b'}') {
        out.pop();
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(tag.as_bytes());
        out.extend_from_slice(b"\"}");
    } else {
        out.truncate(start);
        let v = serde_json::to_value(record).unwrap_or(Value::Null);
        out.extend_from_slice(canonical_json(&v).as_bytes());
    }
}

/// Appends the canonical line (without newline) for a record at `seq` after a line whose hash is
/// `prev`, and returns where it starts in `out`.
///
/// The keys `hash < prev < record < seq` are already in order and `prev` and `hash` are hex, which
/// needs no escaping: the line is written once, with room for `hash`, which is then the sha256 of
/// `{` and the bytes after it. The result is exactly the canonical JSON of the four fields (the
/// tests check it).
pub fn write_line(seq: u64, prev: &str, record: &Record, out: &mut Vec<u8>) -> usize {
    const HEAD: &[u8] = b"{\"hash\":\"";
    let start = out.len();
    out.extend_from_slice(HEAD);
    let hash_at = out.len();
    out.extend_from_slice(&[b'0'; 64]);
    out.extend_from_slice(b"\",");
    let content_at = out.len();
    out.extend_from_slice(b"\"prev\":\"");
    out.extend_from_slice(prev.as_bytes());
    out.extend_from_slice(b"\",\"record\":");
    write_record(record, out);
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'}');
    let mut h = Sha256::new();
    h.update(b"{");
    h.update(out.get(content_at..).unwrap_or_default());
    let hash: [u8; 32] = h.finalize().into();
    // The 64 placeholder digits written above.
    if let Some(digits) = out.get_mut(hash_at..hash_at + 64) {
        write_hex(&hash, digits);
    }
    start
}

/// The canonical line (without newline) for a record at `seq` after a line whose hash is `prev`.
pub fn line(seq: u64, prev: &str, record: &Record) -> String {
    let mut out = Vec::with_capacity(1024);
    write_line(seq, prev, record, &mut out);
    String::from_utf8_lossy(&out).into_owned()
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
    let (Some(stated), Some(b"\","), Some(content)) =
        (rest.get(..64), rest.get(64..66), rest.get(66..))
    else {
        return false;
    };
    if stated != hash.as_bytes() {
        return false;
    }
    let mut h = Sha256::new();
    h.update(b"{");
    h.update(content);
    hex_of(&h.finalize().into()) == hash
}

/// Checks one line against what the chain expects; returns its record.
///
/// The `hash` covers the line's bytes as written (its content, after `{"hash":"…",`), so any
/// change to a line — white space included — is detected, and the line must be the canonical
/// one the writer writes.
fn check_line(text: &str, seq: u64, prev: &str) -> Result<Record, String> {
    let fields = match serde_json::from_str::<Fields>(text) {
        Ok(f) => f,
        Err(e) => return Err(describe(text, &e)),
    };
    if !content_hash_matches(text.as_bytes(), &fields.hash) {
        return Err("was changed: its content does not match its `hash`".into());
    }
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

/// Why a line does not parse as one, said plainly.
fn describe(text: &str, e: &serde_json::Error) -> String {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return format!("is not JSON: {e}");
    };
    let has = |k: &str| v.get(k).is_some();
    if !(has("seq") && has("prev") && has("hash")) {
        return "lacks `seq`, `prev` or `hash`".into();
    }
    format!("holds no valid record: {e}")
}

/// Checks a chain one line at a time, wherever its lines come from (a file's lines, a database's
/// rows): each line must be canonical, hash to its own `hash`, carry the next `seq` and the hash
/// of the line before it as `prev`.
#[derive(Debug, Clone, Default)]
pub struct Checker {
    at: Scanned,
}

impl Checker {
    /// A checker for a chain's first line.
    pub fn new() -> Self {
        Self::default()
    }

    /// A checker that continues a chain from a known state (its records and head).
    pub fn resume(records: u64, head: &str) -> Self {
        Self {
            at: Scanned {
                records,
                head: head.to_owned(),
                valid_len: 0,
            },
        }
    }

    /// Checks the next line (its bytes, without a newline): its record, or why it is bad. A bad
    /// line leaves the state as it was.
    pub fn check(&mut self, line: &[u8]) -> Result<Record, String> {
        let Ok(text) = std::str::from_utf8(line) else {
            return Err("is not UTF-8".to_string());
        };
        let record = check_line(text, self.at.records + 1, &self.at.head)?;
        self.at.records += 1;
        self.at.head = sha256_hex(line);
        Ok(record)
    }

    /// The chain's state after the last good line.
    pub fn state(&self) -> &Scanned {
        &self.at
    }

    /// The state, taken.
    pub fn into_state(self) -> Scanned {
        self.at
    }
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
    let mut checker = Checker::new();
    let mut buf = Vec::with_capacity(1024);
    let mut number = 0usize;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(ScanError::Io)?;
        if n == 0 {
            return Ok(checker.into_state());
        }
        number += 1;
        let (complete, text_bytes) = match buf.strip_suffix(b"\n") {
            Some(line) => (true, line),
            None => (false, &buf[..]),
        };
        match checker.check(text_bytes) {
            Ok(record) => {
                visit(text_bytes, record);
                if !complete {
                    return Err(ScanError::Damaged {
                        damage: Damage {
                            line: number,
                            why: "has no newline (a write was cut short), though it is whole"
                                .into(),
                            kind: DamageKind::TornTail { complete: true },
                        },
                        at: checker.into_state(),
                    });
                }
                checker.at.valid_len += n as u64;
            }
            Err(why) => {
                let (why, kind) = if complete {
                    (why, DamageKind::Broken)
                } else {
                    (
                        format!("is torn (a write was cut short) and {why}"),
                        DamageKind::TornTail { complete: false },
                    )
                };
                return Err(ScanError::Damaged {
                    damage: Damage {
                        line: number,
                        why,
                        kind,
                    },
                    at: checker.into_state(),
                });
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
    use serde_json::json;
    use sluice_kernel::provenance::BatchRecord;

    #[test]
    fn every_kind_of_record_is_written_as_its_canonical_json() {
        use sluice_kernel::provenance::{AccessRecord, CallRecord, EdgeRecord};
        let call = Record::Call(CallRecord {
            accesses: vec![AccessRecord {
                kind: "writes".into(),
                mode: "write".into(),
                resource: "fs:/a \"b\"/\u{e9}\\*".into(),
            }],
            approver: Some("ann".into()),
            batch: "b".into(),
            call: "c".into(),
            decided_by: Some("rule".into()),
            decision: Some("ask".into()),
            ended_at_ms: Some(1.0e12 + 0.25),
            error_code: Some("x".into()),
            error_message: Some("line\nbreak\ttab \u{1}".into()),
            input_sha256: "0".repeat(64),
            outcome: sluice_kernel::Status::Error,
            output_sha256: None,
            started_at_ms: Some(3.0),
            tenant: "t".into(),
            tool: "x.y".into(),
            tool_version: Some("1.2.3".into()),
        });
        let edge = Record::Edge(EdgeRecord {
            causal: true,
            from: "a".into(),
            from_batch: "b1".into(),
            kind: "read-after-write".into(),
            resource: "kv:k".into(),
            tenant: "t".into(),
            to: "c".into(),
            to_batch: "b2".into(),
        });
        for r in [call, edge] {
            let mut out = Vec::new();
            write_record(&r, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text, canonical_json(&serde_json::to_value(&r).unwrap()));
            let l = line(3, GENESIS, &r);
            let v: Value = serde_json::from_str(&l).unwrap();
            assert_eq!(canonical_json(&v), l);
            assert!(content_hash_matches(
                l.as_bytes(),
                v["hash"].as_str().unwrap()
            ));
        }
    }

    #[test]
    fn the_hand_written_line_is_the_canonical_json_of_its_fields() {
        let r = Record::Batch(BatchRecord {
            batch: "b\"1".into(),
            tenant: "t\u{e9}".into(),
            calls: vec!["c".into()],
            started_at_ms: 1.5,
            ended_at_ms: 2.0,
            origin: None,
        });
        let l = line(7, GENESIS, &r);
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(canonical_json(&v), l);
        let content = json!({"prev": v["prev"], "record": v["record"], "seq": v["seq"]});
        assert_eq!(v["hash"], sha256_hex(canonical_json(&content).as_bytes()));
    }
}
