//! Signed checkpoints (issue 16): the Merkle tree against RFC 6962's published vectors and an
//! independent implementation (Python's hashlib), and the CLI's keygen, checkpoint,
//! verify --checkpoint --verifier, prove and run --checkpoint-every.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use sluice_provenance::merkle::{self, Frontier, Hash};
use sluice_provenance::note::{split_checkpoints, Checkpoint, VerifierKey};
use support::{sluice, temp_dir};

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

fn hash(s: &str) -> Hash {
    unhex(s).try_into().unwrap()
}

// The RFC 6962 test vectors of the Certificate Transparency reference implementation
// (merkle_tree_test.cc, also used by Trillian and transparency-dev): eight leaves, the root of each
// prefix, and audit paths.
const LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];
const ROOTS: [&str; 8] = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

#[test]
fn the_tree_matches_the_rfc_6962_reference_vectors() {
    assert_eq!(
        hex::encode(merkle::empty_root()),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let leaves: Vec<Hash> = LEAVES
        .iter()
        .map(|l| merkle::leaf_hash(&unhex(l)))
        .collect();
    let mut f = Frontier::new();
    for (n, l) in LEAVES.iter().enumerate() {
        f.push_line(&unhex(l));
        assert_eq!(hex::encode(f.root()), ROOTS[n], "root of {} leaves", n + 1);
        assert_eq!(hex::encode(merkle::root_of(&leaves[..=n])), ROOTS[n]);
    }
    // (leaf index, tree size, audit path)
    let paths: [(usize, usize, &[&str]); 5] = [
        (0, 1, &[]),
        (
            0,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            5,
            8,
            &[
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            2,
            3,
            &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
        ),
        (
            1,
            5,
            &[
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
    ];
    for (index, size, expected) in paths {
        let proof = merkle::inclusion_proof(&leaves[..size], index).unwrap();
        let proof_hex: Vec<String> = proof.iter().map(hex::encode).collect();
        assert_eq!(proof_hex, expected, "path of leaf {index} in {size}");
        let root = hash(ROOTS[size - 1]);
        assert!(merkle::verify_inclusion(
            index as u64,
            size as u64,
            &leaves[index],
            &proof,
            &root
        ));
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One `sluice run` of `batch` appending to `log`.
fn run_on(dir: &Path, log: &Path, batch: &Value) {
    let r = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--root",
            s(dir),
            "--provenance",
            s(log),
        ],
        Some(&batch.to_string()),
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A log with `n` calls in two turns (writes, then reads of what was written), by `sluice run`.
fn make_log(dir: &Path, n: usize) -> PathBuf {
    let log = dir.join("log.jsonl");
    for turn in ["put", "get"] {
        let calls: Vec<Value> = (0..n)
            .map(|i| match turn {
                "put" => json!({"id": format!("p{i}"), "tool": "sluice.kv.put",
                                "input": {"key": format!("k{}", i % 3), "value": i}}),
                _ => json!({"id": format!("g{i}"), "tool": "sluice.kv.get",
                            "input": {"key": format!("k{}", i % 3)}}),
            })
            .collect();
        run_on(dir, &log, &json!({"tenant": "acme", "calls": calls}));
    }
    log
}

/// `keygen`: the signer key at `dir/name.key`, and the verifier key it printed.
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(format!("{}.key", name.replace('/', "_")));
    let r = sluice(
        &["provenance", "keygen", "--name", name, "--out", s(&key)],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    (key, r.stdout.trim().to_owned())
}

fn checkpoint(log: &Path, key: &Path, out: &Path) -> String {
    let r = sluice(
        &["provenance", "checkpoint", s(log), "--key", s(key)],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(out, &r.stdout).unwrap();
    r.stdout
}

fn verify_against(log: &Path, ckpt: &Path, vkey: &str) -> support::Run {
    sluice(
        &[
            "provenance",
            "verify",
            s(log),
            "--checkpoint",
            s(ckpt),
            "--verifier",
            vkey,
        ],
        None,
        None,
    )
}

#[test]
fn keygen_writes_a_private_key_and_prints_its_verifier() {
    let dir = temp_dir("keygen");
    let (key, vkey) = keygen(&dir, "example.com/sluice");
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(
        text.starts_with("PRIVATE+KEY+example.com/sluice+"),
        "{text}"
    );
    let v = VerifierKey::parse(&vkey).unwrap();
    assert_eq!(v.name(), "example.com/sluice");
    assert_eq!(
        vkey.split('+').nth(1),
        text.trim().split('+').nth(3),
        "the same key id"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // A key is never overwritten; a bad name is refused.
    let again = sluice(
        &["provenance", "keygen", "--name", "x", "--out", s(&key)],
        None,
        None,
    );
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("exists"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text);
    let bad = sluice(
        &[
            "provenance",
            "keygen",
            "--name",
            "a b",
            "--out",
            s(&dir.join("bad.key")),
        ],
        None,
        None,
    );
    assert_eq!(bad.code, 1, "{}", bad.stderr);
}

#[test]
fn a_checkpoint_verifies_and_truncation_rewriting_forks_and_bad_signatures_do_not() {
    let dir = temp_dir("checkpoint");
    let log = make_log(&dir, 6);
    let (key, vkey) = keygen(&dir, "sluice.test/log");
    let ckpt = dir.join("ckpt.txt");
    let signed = checkpoint(&log, &key, &ckpt);
    // The C2SP form: origin, size, base64 root, a blank line, an em-dash signature line.
    let lines: Vec<&str> = signed.split('\n').collect();
    assert_eq!(lines[0], "sluice.test/log");
    let size: usize = lines[1].parse().unwrap();
    let records = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(size, records);
    assert_eq!(B64.decode(lines[2]).unwrap().len(), 32);
    assert_eq!(lines[3], "");
    assert!(
        lines[4].starts_with("\u{2014} sluice.test/log "),
        "{signed}"
    );

    let ok = verify_against(&log, &ckpt, &vkey);
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    assert!(ok.stdout.contains("intact"), "{}", ok.stdout);
    // The verifier key may be a file too.
    let vfile = dir.join("vkey.txt");
    std::fs::write(&vfile, &vkey).unwrap();
    assert_eq!(verify_against(&log, &ckpt, s(&vfile)).code, 0);

    // The log grows: still fine (the checkpoint covers its first records).
    let more = json!({"tenant": "acme", "calls": [
        {"id": "late", "tool": "sluice.kv.put", "input": {"key": "k0", "value": 1}}]});
    run_on(&dir, &log, &more);
    assert_eq!(verify_against(&log, &ckpt, &vkey).code, 0);

    // Truncated: the tail cut at a line boundary (the chain alone cannot see it).
    let all = std::fs::read_to_string(&log).unwrap();
    let keep: String = all
        .lines()
        .take(size - 2)
        .map(|l| format!("{l}\n"))
        .collect();
    let cut = dir.join("cut.jsonl");
    std::fs::write(&cut, keep).unwrap();
    assert_eq!(
        sluice(&["provenance", "verify", s(&cut)], None, None).code,
        0
    );
    let r = verify_against(&cut, &ckpt, &vkey);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("truncated"), "{}", r.stdout);

    // Forked (or rewritten and re-chained): another log with as many records.
    let other_dir = temp_dir("checkpoint-fork");
    let fork = make_log(&other_dir, 7);
    assert_eq!(
        sluice(&["provenance", "verify", s(&fork)], None, None).code,
        0
    );
    let r = verify_against(&fork, &ckpt, &vkey);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("rewritten or forked"), "{}", r.stdout);
    let json = sluice(
        &[
            "provenance",
            "verify",
            s(&fork),
            "--checkpoint",
            s(&ckpt),
            "--verifier",
            &vkey,
            "--format",
            "json",
        ],
        None,
        None,
    );
    assert_eq!(json.code, 1);
    assert_eq!(json.json()["failed"], "forked");

    // A changed checkpoint, or another key's verifier: the signature does not verify.
    let bent = dir.join("bent.txt");
    std::fs::write(&bent, signed.replacen(&format!("\n{size}\n"), "\n3\n", 1)).unwrap();
    let r = verify_against(&log, &bent, &vkey);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("does not verify"), "{}", r.stdout);
    let (_, other_vkey) = keygen(&dir, "someone.else/log");
    let r = verify_against(&log, &ckpt, &other_vkey);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("no signature"), "{}", r.stdout);
    // A broken chain is named as plain verify names it.
    let broken = dir.join("broken.jsonl");
    let changed = all.replacen("\"outcome\":\"ok\"", "\"outcome\":\"error\"", 1);
    assert_ne!(changed, all);
    std::fs::write(&broken, changed).unwrap();
    let r = verify_against(&broken, &ckpt, &vkey);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("line "), "{}", r.stdout);
}

#[test]
fn prove_prints_an_inclusion_proof_that_python_checks_independently() {
    let dir = temp_dir("prove");
    let log = make_log(&dir, 5);
    let (key, vkey) = keygen(&dir, "sluice.test/prove");
    let ckpt = dir.join("ckpt.txt");
    let signed = checkpoint(&log, &key, &ckpt);
    let cp = Checkpoint::open(&signed, &VerifierKey::parse(&vkey).unwrap()).unwrap();

    // g3 is in the second batch: the only call with that id.
    let r = sluice(
        &[
            "provenance",
            "prove",
            s(&log),
            "--call",
            "g3",
            "--checkpoint",
            s(&ckpt),
        ],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = r.json();
    let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["leaf_hash", "leaf_index", "proof", "root", "tree_size"]
    );
    assert_eq!(p["tree_size"], cp.size);
    assert_eq!(p["root"], B64.encode(cp.root));
    let index = p["leaf_index"].as_u64().unwrap() as usize;
    let line = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .nth(index)
        .unwrap()
        .to_owned();
    assert!(line.contains("\"call\":\"g3\""), "{line}");

    // An independent implementation: RFC 6962 in Python's hashlib, over the file's bytes.
    let script = r#"
import base64, hashlib, json, sys
log, ckpt, proof = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
lines = open(log, 'rb').read().split(b'\n')[:-1]
leaf = lambda b: hashlib.sha256(b'\x00' + b).digest()
node = lambda l, r: hashlib.sha256(b'\x01' + l + r).digest()
def mth(d):
    if len(d) == 0: return hashlib.sha256(b'').digest()
    if len(d) == 1: return leaf(d[0])
    k = 1
    while k * 2 < len(d): k *= 2
    return node(mth(d[:k]), mth(d[k:]))
origin, size, root = open(ckpt).read().split('\n')[:3]
size = int(size)
assert base64.b64decode(root) == mth(lines[:size]), 'checkpoint root'
# RFC 9162 2.1.3.2, inclusion proof verification.
i, n = proof['leaf_index'], proof['tree_size']
assert base64.b64decode(proof['leaf_hash']) == leaf(lines[i]), 'leaf hash'
fn, sn, r = i, n - 1, leaf(lines[i])
for p in proof['proof']:
    p = base64.b64decode(p)
    assert sn != 0
    if fn & 1 or fn == sn:
        r = node(p, r)
        while not fn & 1 and fn != 0:
            fn >>= 1; sn >>= 1
    else:
        r = node(r, p)
    fn >>= 1; sn >>= 1
assert sn == 0 and r == base64.b64decode(proof['root']) == base64.b64decode(root), 'proof'
print('ok', size)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, s(&log), s(&ckpt), &p.to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok {}", cp.size)
    );

    // A call appended after the checkpoint is not in its prefix; an unknown call neither.
    let late = json!({"tenant": "acme", "calls": [
        {"id": "late", "tool": "sluice.kv.get", "input": {"key": "k1"}}]});
    run_on(&dir, &log, &late);
    for call in ["late", "nobody"] {
        let r = sluice(
            &[
                "provenance",
                "prove",
                s(&log),
                "--call",
                call,
                "--checkpoint",
                s(&ckpt),
            ],
            None,
            None,
        );
        assert_eq!(r.code, 1, "{call}: {}", r.stdout);
        assert!(
            r.stderr.contains(&format!("no call `{call}`")),
            "{}",
            r.stderr
        );
    }
    // The first batch's calls are in it too; a second turn with the same ids needs --batch.
    let r = sluice(
        &[
            "provenance",
            "prove",
            s(&log),
            "--call",
            "p0",
            "--checkpoint",
            s(&ckpt),
        ],
        None,
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn run_appends_signed_checkpoints_every_n_records() {
    let dir = temp_dir("every");
    let (key, vkey) = keygen(&dir, "sluice.test/every");
    let log = dir.join("log.jsonl");
    let calls: Vec<Value> = (0..8)
        .map(|i| {
            json!({"id": format!("c{i}"), "tool": "sluice.kv.put",
                        "input": {"key": "k", "value": i}})
        })
        .collect();
    let batch = json!({"tenant": "acme", "calls": calls}).to_string();
    let r = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--root",
            s(&dir),
            "--provenance",
            s(&log),
            "--checkpoint-every",
            "5",
            "--key",
            s(&key),
        ],
        Some(&batch),
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let records = std::fs::read_to_string(&log).unwrap().lines().count() as u64;
    let file = std::fs::read_to_string(dir.join("log.jsonl.checkpoints")).unwrap();
    let notes = split_checkpoints(&file);
    let verifier = VerifierKey::parse(&vkey).unwrap();
    let sizes: Vec<u64> = notes
        .iter()
        .map(|n| Checkpoint::open(n, &verifier).unwrap().size)
        .collect();
    // Every fifth record, then the end of the run.
    let mut expected: Vec<u64> = (1..=records / 5).map(|k| k * 5).collect();
    if !records.is_multiple_of(5) {
        expected.push(records);
    }
    assert_eq!(sizes, expected, "{file}");
    // Each one checks against the log; verify takes the last of a checkpoints file.
    for note in &notes {
        let one = dir.join("one.txt");
        std::fs::write(&one, note).unwrap();
        assert_eq!(verify_against(&log, &one, &vkey).code, 0);
    }
    let r = verify_against(&log, &dir.join("log.jsonl.checkpoints"), &vkey);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("first {records} records")),
        "{}",
        r.stdout
    );

    // --checkpoint-every needs --key (a usage error), and a bad key file is refused before running.
    let r = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--provenance",
            s(&log),
            "--checkpoint-every",
            "5",
        ],
        Some(&batch),
        None,
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    let bad = dir.join("bad.key");
    std::fs::write(&bad, "PRIVATE+KEY+nope").unwrap();
    let before = std::fs::read_to_string(&log).unwrap();
    let r = sluice(
        &[
            "run",
            "--batch",
            "-",
            "--provenance",
            s(&log),
            "--checkpoint-every",
            "5",
            "--key",
            s(&bad),
        ],
        Some(&batch),
        None,
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("bad.key"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), before);
}
