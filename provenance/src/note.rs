//! Signed checkpoints: C2SP signed notes, Ed25519 keys, and the tlog-checkpoint body.
//!
//! Takes in: a log's size and tree head, a signer key; or a signed note and a verifier key.
//! Hands on: the signed checkpoint text, or the checkpoint it vouches for. The formats are the
//! C2SP ones (<https://c2sp.org/signed-note>, <https://c2sp.org/tlog-checkpoint>), as Go's
//! `golang.org/x/mod/sumdb/note` writes them:
//!
//! - a **verifier key** is `NAME+HEXID+BASE64(0x01 || public key)`; a **signer key** is
//!   `PRIVATE+KEY+NAME+HEXID+BASE64(0x01 || seed)`. The key id is the first four bytes of
//!   `SHA-256(NAME || "\n" || 0x01 || public key)`, big-endian, as eight hex digits. A name is
//!   non-empty UTF-8 without white space or `+`.
//! - a **signed note** is its text (ending in a newline), a blank line, then signature lines
//!   `— NAME BASE64(key id || Ed25519 signature of the text)`, each ending in a newline.
//! - a **checkpoint** is the text `ORIGIN\nSIZE\nBASE64(ROOT)\n` (extension lines may follow; this
//!   log writes none).
//!
//! ```
//! use sluice_provenance::note::{Checkpoint, SignerKey};
//! let key = SignerKey::generate("log.example").unwrap();
//! let text = Checkpoint { origin: "log.example".into(), size: 3, root: [7; 32] }.sign(&key);
//! let opened = Checkpoint::open(&text, &key.verifier()).unwrap();
//! assert_eq!(opened.size, 3);
//! ```

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::error::ProvenanceError;
use crate::merkle::Hash;

/// The signature type byte of Ed25519 keys.
const ED25519: u8 = 0x01;
/// What starts a signature line: an em dash and a space.
const SIG_PREFIX: &str = "\u{2014} ";

type NoteError = ProvenanceError;

fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '+') {
        return Err(NoteError::BadKey(format!(
            "the name `{name}` must be non-empty, without white space or `+`"
        )));
    }
    Ok(())
}

/// The key id: the first four bytes of `SHA-256(name || "\n" || 0x01 || public key)`.
pub fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ED25519]);
    h.update(public);
    let d: [u8; 32] = h.finalize().into();
    let [a, b, c, e, ..] = d;
    u32::from_be_bytes([a, b, c, e])
}

/// An Ed25519 signer key with its name.
#[derive(Clone)]
pub struct SignerKey {
    name: String,
    key: SigningKey,
}

impl std::fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed.
        f.debug_struct("SignerKey")
            .field("name", &self.name)
            .field("id", &format_args!("{:08x}", self.id()))
            .finish()
    }
}

impl SignerKey {
    /// A new key from the operating system's random generator.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        check_name(name)?;
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| NoteError::Random(e.to_string()))?;
        Ok(Self {
            name: name.to_owned(),
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Parses `PRIVATE+KEY+NAME+HEXID+BASE64`.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let text = text.trim();
        let rest = text.strip_prefix("PRIVATE+KEY+").ok_or_else(|| {
            NoteError::BadKey("a signer key starts with `PRIVATE+KEY+`".to_string())
        })?;
        let (name, id, material) = split_key(rest)?;
        let seed: [u8; 32] = material.try_into().map_err(|_| {
            NoteError::BadKey("an Ed25519 signer key holds a 32-byte seed".to_string())
        })?;
        let key = SigningKey::from_bytes(&seed);
        let me = Self {
            name: name.to_owned(),
            key,
        };
        if me.id() != id {
            return Err(NoteError::BadKey(format!(
                "the key id {id:08x} does not match the key (it is {:08x})",
                me.id()
            )));
        }
        Ok(me)
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn id(&self) -> u32 {
        key_id(&self.name, self.key.verifying_key().as_bytes())
    }

    /// The signer key's text, `PRIVATE+KEY+NAME+HEXID+BASE64` (secret: keep it so).
    pub fn to_text(&self) -> String {
        let mut material = vec![ED25519];
        material.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.id(),
            B64.encode(material)
        )
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            name: self.name.clone(),
            key: self.key.verifying_key(),
        }
    }

    /// Signs a note's text (which must end in a newline): the text, a blank line, one signature
    /// line.
    pub fn sign_note(&self, text: &str) -> String {
        let sig = self.key.sign(text.as_bytes());
        let mut blob = self.id().to_be_bytes().to_vec();
        blob.extend_from_slice(&sig.to_bytes());
        format!("{text}\n{SIG_PREFIX}{} {}\n", self.name, B64.encode(blob))
    }
}

/// Splits `NAME+HEXID+BASE64` (the base64 may itself hold `+`).
fn split_key(text: &str) -> Result<(&str, u32, Vec<u8>), NoteError> {
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(NoteError::BadKey(
            "a key is `NAME+HEXID+BASE64`".to_string(),
        ));
    };
    check_name(name)?;
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NoteError::BadKey(format!(
            "the key id `{id}` is not eight hex digits"
        )));
    }
    let id = u32::from_str_radix(id, 16).map_err(|e| NoteError::BadKey(e.to_string()))?;
    let material = B64
        .decode(material)
        .map_err(|e| NoteError::BadKey(format!("the key material is not base64: {e}")))?;
    match material.split_first() {
        Some((&ED25519, rest)) => Ok((name, id, rest.to_vec())),
        Some((t, _)) => Err(NoteError::BadKey(format!(
            "signature type {t:#04x} is not Ed25519 (0x01)"
        ))),
        None => Err(NoteError::BadKey("the key material is empty".to_string())),
    }
}

/// An Ed25519 verifier key with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    key: VerifyingKey,
}

impl VerifierKey {
    /// Parses `NAME+HEXID+BASE64`.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let (name, id, material) = split_key(text.trim())?;
        let public: [u8; 32] = material.try_into().map_err(|_| {
            NoteError::BadKey("an Ed25519 verifier key holds a 32-byte public key".to_string())
        })?;
        if key_id(name, &public) != id {
            return Err(NoteError::BadKey(format!(
                "the key id {id:08x} does not match the key"
            )));
        }
        let key = VerifyingKey::from_bytes(&public)
            .map_err(|e| NoteError::BadKey(format!("not an Ed25519 public key: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            key,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn id(&self) -> u32 {
        key_id(&self.name, self.key.as_bytes())
    }

    /// The verifier key's text, `NAME+HEXID+BASE64`.
    pub fn to_text(&self) -> String {
        let mut material = vec![ED25519];
        material.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.id(), B64.encode(material))
    }

    /// Opens a signed note: its text, when a signature line by this key (name and id) verifies.
    /// Lines by other keys are ignored; the first line by this key decides.
    pub fn open_note<'a>(&self, note: &'a str) -> Result<&'a str, NoteError> {
        let split = note.rfind("\n\n").ok_or_else(|| {
            NoteError::MalformedNote("no blank line before the signatures".into())
        })?;
        let (text, sigs) = (&note[..split + 1], &note[split + 2..]);
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(NoteError::MalformedNote(
                "the signature lines must end with a newline".into(),
            ));
        }
        for line in sigs[..sigs.len() - 1].split('\n') {
            let rest = line.strip_prefix(SIG_PREFIX).ok_or_else(|| {
                NoteError::MalformedNote(format!("`{line}` is not a signature line (`— NAME SIG`)"))
            })?;
            let (name, blob) = rest.split_once(' ').ok_or_else(|| {
                NoteError::MalformedNote(format!(
                    "`{line}` lacks the space between name and signature"
                ))
            })?;
            let blob = B64
                .decode(blob)
                .map_err(|e| NoteError::MalformedNote(format!("a signature is not base64: {e}")))?;
            let Some((id, signature)) = blob.split_first_chunk::<4>() else {
                return Err(NoteError::MalformedNote("a signature is too short".into()));
            };
            let id = u32::from_be_bytes(*id);
            if name != self.name || id != self.id() {
                continue;
            }
            let sig = Signature::from_slice(signature)
                .map_err(|_| NoteError::BadSignature(self.name.clone()))?;
            return self
                .key
                .verify_strict(text.as_bytes(), &sig)
                .map(|()| text)
                .map_err(|_| NoteError::BadSignature(self.name.clone()));
        }
        Err(NoteError::NoSignature(self.to_text()))
    }
}

/// A C2SP tlog-checkpoint: the log's origin, its size and its tree head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The origin line (names the log).
    pub origin: String,
    /// Records (leaves) the checkpoint covers: the first `size` lines.
    pub size: u64,
    /// The RFC 6962 tree head of those leaves.
    pub root: Hash,
}

impl Checkpoint {
    /// The checkpoint's text (the note body).
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        )
    }

    /// The checkpoint signed with `key`, as a signed note.
    pub fn sign(&self, key: &SignerKey) -> String {
        key.sign_note(&self.body())
    }

    /// Parses a checkpoint body (extension lines after the third are allowed and ignored).
    pub fn parse_body(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::NotACheckpoint(why.to_owned());
        let mut lines = text.split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| bad("the first line (the origin) is empty"))?;
        let size = lines.next().ok_or_else(|| bad("no size line"))?;
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return Err(bad("the second line is not a decimal record count"));
        }
        let size = size
            .parse()
            .map_err(|_| bad("the record count is too large"))?;
        let root = lines.next().ok_or_else(|| bad("no root hash line"))?;
        let root: Hash = B64
            .decode(root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| bad("the third line is not a base64 SHA-256 hash"))?;
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }

    /// Opens a signed checkpoint: verifies the signature by `verifier`, then parses the body.
    pub fn open(note: &str, verifier: &VerifierKey) -> Result<Self, NoteError> {
        Self::parse_body(verifier.open_note(note)?)
    }

    /// Parses a signed checkpoint's body without checking any signature (for `prove`, which
    /// checks the tree head against the log instead).
    pub fn parse_unverified(note: &str) -> Result<Self, NoteError> {
        let split = note.rfind("\n\n").ok_or_else(|| {
            NoteError::MalformedNote("no blank line before the signatures".into())
        })?;
        Self::parse_body(&note[..split + 1])
    }
}

/// The signed notes of a `.checkpoints` file (each note followed by a blank line), in order.
pub fn split_checkpoints(file: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let blocks: Vec<&str> = file
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .collect();
    for pair in blocks.chunks(2) {
        if let [text, sigs] = pair {
            notes.push(format!("{text}\n\n{}\n", sigs.trim_end_matches('\n')));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example key and note of the signed-note format (Go's sumdb/note documentation and
    // tests, repeated in the C2SP specification's ecosystem): Ed25519 signing is deterministic,
    // so the same key must give the same bytes.
    const VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const SKEY: &str =
        "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const TEXT: &str = "If you think cryptography is the answer to your problem,\n\
                        then you don't know what your problem is.\n";
    const SIG: &str = "\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

    #[test]
    fn the_formats_own_example_signs_and_verifies_byte_for_byte() {
        let signer = SignerKey::parse(SKEY).unwrap();
        assert_eq!(signer.to_text(), SKEY);
        assert_eq!(signer.verifier().to_text(), VKEY);
        let note = signer.sign_note(TEXT);
        assert_eq!(note, format!("{TEXT}\n{SIG}"));
        let v = VerifierKey::parse(VKEY).unwrap();
        assert_eq!(v.open_note(&note).unwrap(), TEXT);
        let changed = note.replace("cryptography", "cryptographY");
        assert!(matches!(
            v.open_note(&changed),
            Err(NoteError::BadSignature(n)) if n == "PeterNeumann"
        ));
    }

    #[test]
    fn keys_that_do_not_check_are_refused() {
        for bad in [
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a3+AhpC2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a3",
            "",
        ] {
            assert!(VerifierKey::parse(bad).is_err(), "{bad}");
        }
        assert!(SignerKey::parse(VKEY).is_err());
    }

    #[test]
    fn another_keys_signature_is_no_signature() {
        let other = SignerKey::generate("someone-else").unwrap();
        let note = other.sign_note(TEXT);
        let v = VerifierKey::parse(VKEY).unwrap();
        assert!(matches!(v.open_note(&note), Err(NoteError::NoSignature(_))));
    }

    #[test]
    fn a_checkpoint_round_trips_and_its_body_is_the_c2sp_one() {
        let key = SignerKey::generate("example.com/log").unwrap();
        let c = Checkpoint {
            origin: "example.com/log".into(),
            size: 8,
            root: [0xab; 32],
        };
        assert_eq!(
            c.body(),
            format!("example.com/log\n8\n{}\n", B64.encode([0xab; 32]))
        );
        let signed = c.sign(&key);
        assert_eq!(Checkpoint::open(&signed, &key.verifier()).unwrap(), c);
        let both = format!("{signed}\n{}\n", c.sign(&key));
        assert_eq!(split_checkpoints(&both), [signed.clone(), signed.clone()]);
        for bad in ["\n1\nAA==\n", "o\n01\n", "o\nx\n", "o\n1\nnot-base64\n"] {
            assert!(Checkpoint::parse_body(bad).is_err(), "{bad:?}");
        }
    }
}
