//! The properties the fuzz targets check, one function per target, each taking the fuzzer's bytes
//! and panicking when a property fails. `fuzz/` runs them under `cargo fuzz`; the ordinary
//! `cargo test` replays every kept input (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`)
//! through the same functions (`tests/fuzz_regressions.rs`), so a finding stays fixed.
//!
//! Not an API: the functions exist for the fuzzers and the tests.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a fuzz property fails by panicking, so that libFuzzer keeps the input"
)]

use std::collections::HashSet;

use serde_json::Value;
use sluice_kernel::access::{general, Access, Pattern};
use sluice_kernel::model::{EffectKind, Manifest, TextPart, UrlTemplate, ValidateOptions};
use sluice_kernel::order::{naive_edges, ConflictGraph};
use sluice_kernel::provenance::{BatchRecord, Record};
use sluice_provenance::chain;

/// The targets, by name (as `fuzz/fuzz_targets/<name>.rs` and the corpus folders name them).
pub const TARGETS: [&str; 9] = [
    "manifest",
    "pack_index",
    "path_rules",
    "pattern",
    "graph",
    "policy",
    "batch",
    "provenance",
    "url_template",
];

/// Runs the target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "manifest" => manifest(data),
        "pack_index" => pack_index(data),
        "path_rules" => path_rules(data),
        "pattern" => pattern(data),
        "graph" => graph(data),
        "policy" => policy(data),
        "batch" => batch(data),
        "provenance" => provenance(data),
        "url_template" => url_template(data),
        other => panic!("no fuzz target `{other}`"),
    }
}

/// Path rules (`metadata.sluice.paths`, how an MCP server resolves its paths) never panic: read
/// from any JSON (`{"rules": .., "input": ..}`), rules that read write back to themselves, and the
/// rewrite of any input leaves every field but the path fields as it was and makes each path
/// (a string, or a string in an array) either `null` (could be any file) or an absolute path
/// with no `.` or `..` component.
pub fn path_rules(data: &[u8]) {
    use sluice_kernel::access::PathRules;
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Some(rules) = value.get("rules") else {
        return;
    };
    let Ok(rules) = PathRules::from_value(rules) else {
        return;
    };
    assert_eq!(
        PathRules::from_value(&rules.to_value()).as_ref(),
        Ok(&rules),
        "the rules read back what they write"
    );
    let input = value.get("input").cloned().unwrap_or(Value::Null);
    let out = rules.rewrite(&input);
    let (Value::Object(before), Value::Object(after)) = (&input, &out) else {
        assert_eq!(out, input, "a non-object input is left as it is");
        return;
    };
    assert_eq!(before.len(), after.len());
    let normal = |v: &Value| match v {
        Value::Null => true,
        Value::String(p) => {
            let p = std::path::Path::new(p);
            p.is_absolute()
                && p.components().all(|c| {
                    !matches!(
                        c,
                        std::path::Component::CurDir | std::path::Component::ParentDir
                    )
                })
        }
        _ => false,
    };
    for (k, v) in before {
        let w = &after[k];
        if !rules.fields.contains(k) {
            assert_eq!(v, w, "`{k}` is not a path field");
            continue;
        }
        match (v, w) {
            (Value::String(_), w) => assert!(normal(w), "`{k}`: {v} became {w}"),
            (Value::Array(a), Value::Array(b)) => {
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(b) {
                    match x {
                        Value::String(_) => assert!(normal(y), "`{k}`: {x} became {y}"),
                        _ => assert_eq!(x, y),
                    }
                }
            }
            (v, w) => assert_eq!(v, w, "`{k}` holds no path"),
        }
    }
}

/// Manifest validation never panics, and the schema, the rules and the model agree: a manifest
/// `validate` finds no error in is one the model takes.
pub fn manifest(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let report = sluice_kernel::model::validate(&value, ValidateOptions::default());
    if report.errors.is_empty() {
        assert!(
            Manifest::from_value(value.clone()).is_ok(),
            "validate found no error but the model refuses {value}"
        );
    }
    for e in &report.errors {
        assert!(
            e.pointer.is_empty() || e.pointer.starts_with('/'),
            "a pointer is not a JSON pointer: {e:?}"
        );
    }
}

/// Reading a Kindgi pack's index never panics; each tool entry comes out with the index's own
/// fields lifted into `metadata.kindgi` beside the pack's id (unless its `metadata` is not an
/// object, which the validator then names), its source pointing into `/tools`; and an entry the
/// validator finds no error in is one the model takes.
pub fn pack_index(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let path = std::path::Path::new("index.json");
    let Ok(index) = sluice_kernel::model::PackIndex::from_value(path, value) else {
        return;
    };
    for (i, raw) in index.tools.iter().enumerate() {
        assert_eq!(raw.source.pointer, format!("/tools/{i}"));
        let Some(entry) = raw.value.as_object() else {
            continue;
        };
        let lifted = entry
            .get("metadata")
            .and_then(|m| m.get("kindgi"))
            .and_then(Value::as_object);
        if let Some(kindgi) = lifted {
            assert_eq!(
                kindgi.get("packId"),
                Some(&Value::String(index.pack_id.clone()))
            );
            for field in sluice_kernel::model::INDEX_ONLY_FIELDS {
                assert!(
                    !entry.contains_key(field),
                    "`{field}` left at the root: {entry:?}"
                );
            }
        }
        let report = sluice_kernel::model::validate(&raw.value, ValidateOptions::default());
        if report.errors.is_empty() {
            assert!(
                Manifest::from_value(raw.value.clone()).is_ok(),
                "validate found no error but the model refuses {}",
                raw.value
            );
        }
    }
}

/// Patterns over a small alphabet from bytes: `a`, `b`, `*`, `?`.
fn small_pattern(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(4)
        .map(|b| match b % 4 {
            0 => 'a',
            1 => 'b',
            2 => '*',
            _ => '?',
        })
        .collect()
}

/// Every string over `{a, b, c}` up to `len` (at most 8) characters, made once.
fn strings(len: usize) -> &'static [String] {
    static ALL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = ALL.get_or_init(|| {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..8 {
            let next: Vec<String> = last
                .iter()
                .flat_map(|s| ['a', 'b', 'c'].map(|c| format!("{s}{c}")))
                .collect();
            all.extend(next.iter().cloned());
            last = next;
        }
        all
    });
    // Sorted by length: the strings of at most `len` characters are a prefix.
    let count: usize = (0..=len.min(8) as u32).map(|k| 3usize.pow(k)).sum();
    &all[..count]
}

/// Overlap is exact and containment never false, against brute force: two patterns of at most
/// four tokens share a string of at most eight characters when they share any, so the brute
/// force over `{a, b, c}` decides overlap exactly; containment claimed must hold on every
/// string tried. The fast paths agree with the general routine.
pub fn pattern(data: &[u8]) {
    let split = data
        .iter()
        .position(|b| *b == b'|')
        .unwrap_or(data.len() / 2);
    let (x, y) = data.split_at(split);
    let (ta, tb) = (small_pattern(x), small_pattern(y.get(1..).unwrap_or(&[])));
    let (Ok(a), Ok(b)) = (Pattern::parse(&ta), Pattern::parse(&tb)) else {
        return;
    };
    let all = strings(ta.len() + tb.len());
    let common = all.iter().find(|s| a.matches(s) && b.matches(s));
    assert_eq!(
        a.overlaps(&b),
        common.is_some(),
        "`{ta}` and `{tb}` overlap: {common:?}"
    );
    assert_eq!(a.overlaps(&b), b.overlaps(&a), "`{ta}` `{tb}` asymmetric");
    assert_eq!(
        a.overlaps(&b),
        general::overlaps(&a.tokens(), &b.tokens()),
        "fast path and general routine differ on `{ta}` `{tb}`"
    );
    if a.contains(&b) {
        let escape = all.iter().find(|s| b.matches(s) && !a.matches(s));
        assert!(
            escape.is_none(),
            "`{ta}` claims to contain `{tb}`: {escape:?}"
        );
    }
}

/// The conflict graph orders every conflicting pair by a path (against `naive_edges`), and its
/// edges go forward.
pub fn graph(data: &[u8]) {
    let kinds = EffectKind::ALL;
    let calls: Vec<Vec<Access>> = data
        .chunks(3)
        .take(24)
        .map(|c| {
            c.iter()
                .take((c[0] % 3) as usize + 1)
                .map(|b| {
                    let kind = kinds[usize::from(*b) % kinds.len()];
                    let r = match b / 16 {
                        0..=5 => format!("kv:{}", ["a", "b", "ab"][usize::from(*b % 3)]),
                        6..=9 => format!("kv:{}*", ["", "a"][usize::from(*b % 2)]),
                        10..=12 => "kv:?b".to_string(),
                        13 => "*".to_string(),
                        _ => format!("fs:{}", b % 2),
                    };
                    Access::new(kind, Pattern::parse(&r).unwrap_or_else(|_| Pattern::any()))
                })
                .collect()
        })
        .collect();
    let mut g = ConflictGraph::new();
    for c in &calls {
        g.add_call(c);
    }
    let n = calls.len();
    let mut edges: Vec<(usize, usize)> = g.edges().iter().map(|e| (e.from, e.to)).collect();
    // By destination: every edge into a call is taken before the edges out of it.
    edges.sort_unstable_by_key(|&(f, t)| (t, f));
    for &(f, t) in &edges {
        assert!(f < t, "edge {f} -> {t} goes backwards");
    }
    // ancestors[t][f]: a path of edges leads from f to t.
    let mut ancestors = vec![vec![false; n]; n];
    for &(f, t) in &edges {
        ancestors[t][f] = true;
        let (before, from_t) = ancestors.split_at_mut(t);
        for (x, y) in from_t[0].iter_mut().zip(&before[f]) {
            *x |= *y;
        }
    }
    for e in naive_edges(&calls) {
        assert!(
            ancestors[e.to][e.from],
            "conflicting calls {} and {} are not ordered",
            e.from, e.to
        );
    }
}

/// Policy documents (JSON, or TOML when the first byte is odd) never panic the parser, and the
/// engine decides every access as the linear reference does.
pub fn policy(data: &[u8]) {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let value = if first % 2 == 1 {
        match toml::from_str::<toml::Value>(text) {
            Ok(v) => serde_json::to_value(v).unwrap_or(Value::Null),
            Err(_) => return,
        }
    } else {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => v,
            Err(_) => return,
        }
    };
    let Ok(doc) = sluice_policy::PolicyDocument::from_value(&value) else {
        return;
    };
    let engine = sluice_policy::PolicyEngine::new(doc.clone());
    let accesses = [
        ("reads", "kv:a"),
        ("writes", "kv:*"),
        ("deletes", "fs:/x/y"),
        ("network", "net:api.example"),
    ];
    for (tenant, policy) in &doc.tenants {
        for tool in ["t.a", "u.b", "sluice.kv.put"] {
            for (kind, resource) in accesses {
                let (Some(kind), Ok(resource)) =
                    (EffectKind::parse(kind), Pattern::parse(resource))
                else {
                    continue;
                };
                let access = Access::new(kind, resource.clone());
                let fast = engine
                    .decide_access(tenant, tool, kind, &resource)
                    .map(|d| (d.decision, d.by));
                let slow = sluice_policy::linear::decide_access(policy, tool, &access);
                assert_eq!(fast, Some(slow), "{tenant} {tool} {kind} {resource}");
            }
        }
    }
}

/// Batches and every model API's ingest never panic; an accepted batch has unique call ids, and
/// ids Sluice makes up never make a batch a duplicate.
pub fn batch(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(b) = sluice_kernel::Batch::from_value(&value) {
        let ids: HashSet<&str> = b.calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), b.calls.len(), "duplicate ids accepted");
    }
    let registry = match sluice_kernel::builtin::registry(Default::default()) {
        Ok(r) => r,
        Err(e) => panic!("the built-in registry: {e}"),
    };
    let Ok(names) = sluice_kernel::adapters::ToolNames::new(&registry) else {
        return;
    };
    let options = sluice_kernel::adapters::IngestOptions::default();
    for api in sluice_kernel::adapters::Api::ALL {
        match api.batch("t", &value, &names, &options) {
            Ok(b) => {
                let ids: HashSet<&str> = b.calls.iter().map(|c| c.id.as_str()).collect();
                assert_eq!(ids.len(), b.calls.len(), "{api}: duplicate ids accepted");
                // The reply answers every call, and nothing when there was none.
                let results: Vec<sluice_kernel::CallResult> = b
                    .calls
                    .iter()
                    .map(|c| stub_result(&c.id, &c.tool))
                    .collect();
                let reply = api.results(&results, &names);
                assert_eq!(
                    reply.is_empty(),
                    b.calls.is_empty(),
                    "{api}: reply {reply:?}"
                );
            }
            Err(sluice_kernel::Error::DuplicateCallId { id, .. }) => {
                // A made-up id never collides: a duplicate is the model's own id, twice.
                let mut own = Vec::new();
                model_ids(&value, &mut own);
                assert!(
                    own.iter().filter(|o| **o == id).count() >= 2,
                    "{api}: a made-up id collided: {id} for {value}"
                );
            }
            Err(_) => {}
        }
    }
}

/// A finished call, for replies.
fn stub_result(id: &str, tool: &str) -> sluice_kernel::CallResult {
    sluice_kernel::CallResult {
        id: id.to_owned(),
        tool: tool.to_owned(),
        version: None,
        status: sluice_kernel::Status::Ok,
        output: Some(Value::Null),
        error: None,
        started: None,
        ended: None,
        authorization: None,
        approver: None,
        recorded: None,
    }
}

/// Every id the document itself holds (`id` and `call_id` values, strings and numbers, at any
/// depth): a model's own ids are among them.
fn model_ids(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("id" | "call_id", Value::String(s)) => out.push(s.clone()),
                    ("id" | "call_id", Value::Number(n)) => out.push(n.to_string()),
                    _ => model_ids(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| model_ids(v, out)),
        _ => {}
    }
}

/// A small valid log, its lines, and the records in it.
fn sample_log(times: [f64; 2]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut bytes = Vec::new();
    let mut lines = Vec::new();
    let mut prev = chain::GENESIS.to_owned();
    for i in 0..4u64 {
        let r = Record::Batch(BatchRecord {
            batch: format!("b{i}"),
            calls: vec![format!("c{i}")],
            ended_at_ms: times[1],
            origin: None,
            started_at_ms: times[0],
            tenant: "t".into(),
        });
        let line = chain::line(i + 1, &prev, &r);
        prev = chain::sha256_hex(line.as_bytes());
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        lines.push(line.into_bytes());
    }
    (bytes, lines)
}

/// Provenance: a log Sluice writes always verifies (whatever the times); every change to a
/// complete line is detected; a torn tail is reported as one, and repair keeps every complete
/// record before it.
pub fn provenance(data: &[u8]) {
    let mut times = [0.0f64; 2];
    for (k, t) in times.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        for (i, x) in data.iter().skip(k * 8).take(8).enumerate() {
            b[i] = *x;
        }
        *t = f64::from_bits(u64::from_le_bytes(b));
    }
    let (original, lines) = sample_log(times);
    assert!(
        chain::verify(&original).is_ok(),
        "a log Sluice wrote does not verify (times {times:?})"
    );
    // The mutation: (position, operation, byte) triples after the first 16 bytes.
    let mut m = original.clone();
    for op in data.get(16..).unwrap_or(&[]).chunks(3).take(4) {
        let (pos, kind, byte) = (op[0] as usize, op.get(1).copied(), op.get(2).copied());
        if m.is_empty() {
            break;
        }
        let at = (pos * 7) % m.len();
        match kind.map(|k| k % 4) {
            Some(0) => m[at] = byte.unwrap_or(b' '),
            Some(1) => m.insert(at, byte.unwrap_or(b' ')),
            Some(2) => {
                m.remove(at);
            }
            _ => m.truncate(at),
        }
    }
    if m == original {
        return;
    }
    let complete: Vec<&[u8]> = match m.iter().rposition(|b| *b == b'\n') {
        Some(last) => m[..last].split(|b| *b == b'\n').collect(),
        None => Vec::new(),
    };
    let intact_prefix = complete.len() <= lines.len()
        && complete.iter().zip(&lines).all(|(a, b)| *a == b.as_slice());
    let tail_len = m.len() - m.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let kept = complete
        .iter()
        .zip(&lines)
        .take_while(|(a, b)| **a == b.as_slice())
        .count();
    let mut visited = 0usize;
    match chain::scan(m.as_slice(), |_, _| visited += 1) {
        Ok(_) => {
            assert!(intact_prefix, "a changed complete line verified");
            assert_eq!(tail_len, 0);
        }
        Err(chain::ScanError::Damaged { damage, at }) => {
            if damage.is_torn_tail() {
                assert!(
                    intact_prefix,
                    "a changed line passed as a torn tail: {damage:?}"
                );
                // Repair keeps every complete record before the tail.
                assert!(
                    at.records as usize >= kept,
                    "repair would drop a complete record"
                );
            } else {
                assert!(!intact_prefix, "an intact log was refused: {damage:?}");
            }
        }
        Err(chain::ScanError::Io(e)) => panic!("reading bytes failed: {e}"),
    }
}

/// URL templates: a template Sluice accepts, filled with any values (percent-encoded, as the
/// HTTP transport fills it), is parsed by the URL parser with the template's host and port.
pub fn url_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (template, values) = text.split_once('\u{0}').unwrap_or((&text, ""));
    let Ok(t) = UrlTemplate::parse(template) else {
        return;
    };
    let mut vals = values.split('\u{1}');
    let rendered: String = t
        .template()
        .parts()
        .iter()
        .map(|p| match p {
            TextPart::Lit(l) => l.clone(),
            TextPart::Var(_) => {
                sluice_kernel::transport::http::percent_encode(vals.next().unwrap_or("v"))
            }
        })
        .collect();
    let url = match url::Url::parse(&rendered) {
        Ok(u) => u,
        Err(e) => {
            panic!("accepted template `{template}` renders `{rendered}`, which does not parse: {e}")
        }
    };
    let host = url
        .host()
        .map(|h| h.to_owned())
        .and_then(sluice_kernel::model::canonical);
    assert_eq!(
        host.as_ref(),
        Some(t.parsed_host()),
        "template `{template}` rendered `{rendered}` goes to `{:?}`",
        url.host_str()
    );
    assert_eq!(url.port_or_known_default(), Some(t.port()), "`{rendered}`");
}
