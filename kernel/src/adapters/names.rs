//! Tool ids as API function names, reversibly, within every API's limits.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::transport::{ToolRegistry, Version};

/// Longest function name every API takes (OpenAI, Anthropic and Gemini: 64).
pub const MAX_NAME: usize = 64;

/// Encodes a Kindgi id (or `id@version`) as an API function name: letters, digits and `-` stay
/// (a leading digit or `-` is escaped, so every name starts with a letter or `_`, as Gemini
/// requires); `.` becomes `__`; `_` becomes `_u`; any other character becomes `_x<hex>_` (its
/// code point). Reversible by [`decode_name`] unless it had to be shortened (over
/// [`MAX_NAME`]: cut to 55 characters plus `_h` and 7 hex digits of the id's sha256).
///
/// ```
/// use sluice_kernel::adapters::{decode_name, encode_name};
/// assert_eq!(encode_name("sluice.kv.get"), "sluice__kv__get");
/// assert_eq!(encode_name("acme.kv-get@1.2.0"), "acme__kv-get_x40_1__2__0");
/// assert_eq!(encode_name("3d.render"), "_x33_d__render");
/// assert_eq!(decode_name("_x33_d__render").as_deref(), Some("3d.render"));
/// ```
pub fn encode_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 4);
    // Where each encoded character ends: a shortened name is cut only there, so its `_h` marker
    // always starts an escape the decoder refuses.
    let mut ends = Vec::with_capacity(id.len());
    for (i, c) in id.chars().enumerate() {
        match c {
            'a'..='z' | 'A'..='Z' => out.push(c),
            '0'..='9' | '-' if i > 0 => out.push(c),
            '.' => out.push_str("__"),
            '_' => out.push_str("_u"),
            c => out.push_str(&format!("_x{:x}_", c as u32)),
        }
        ends.push(out.len());
    }
    if out.len() > MAX_NAME || out.is_empty() {
        let digest = hex::encode(Sha256::digest(id.as_bytes()));
        let cut = ends.iter().copied().filter(|e| *e <= 55).max().unwrap_or(0);
        out.truncate(cut);
        out.push_str("_h");
        out.push_str(&digest[..7]);
    }
    out
}

/// Decodes a name made by [`encode_name`] (not a shortened one: those carry `_h` + digest and
/// are resolved through a [`ToolNames`] table).
pub fn decode_name(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '_' => out.push('.'),
            'u' => out.push('_'),
            'x' => {
                let mut hexs = String::new();
                loop {
                    match chars.next()? {
                        '_' => break,
                        h => hexs.push(h),
                    }
                }
                out.push(char::from_u32(u32::from_str_radix(&hexs, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The name table of a registry, collision-checked: each id's highest version under the id's
/// name, every other version under the name of `id@version`. A call to either name resolves
/// (through [`ToolRegistry::get`]) to exactly that version.
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    /// `id` or `id@version` -> API name.
    pub(crate) to_name: HashMap<String, String>,
    /// API name -> `id` or `id@version`.
    pub(crate) to_id: HashMap<String, String>,
    /// Each id's highest version.
    latest: HashMap<String, Version>,
}

impl ToolNames {
    /// Builds the table; two tools that map to one name are an error naming both.
    pub fn new(registry: &ToolRegistry) -> Result<Self> {
        let mut t = ToolNames::default();
        for tool in registry.iter() {
            let versioned = format!("{}@{}", tool.id(), tool.manifest().version.as_str());
            let key = if registry.is_latest(tool) {
                if let Some(v) = Version::parse(tool.manifest().version.as_str()) {
                    t.latest.insert(tool.id().to_owned(), v);
                }
                // The highest version answers to its `id@version` name too.
                t.claim(encode_name(&versioned), versioned)?;
                tool.id().to_owned()
            } else {
                versioned
            };
            let name = encode_name(&key);
            t.claim(name.clone(), key.clone())?;
            t.to_name.insert(key, name);
        }
        Ok(t)
    }

    /// Takes `name` for `key`, refusing a name another tool holds.
    fn claim(&mut self, name: String, key: String) -> Result<()> {
        if let Some(other) = self.to_id.get(&name) {
            return Err(Error::NameCollision {
                name,
                first: other.clone(),
                second: key,
            });
        }
        self.to_id.insert(name, key);
        Ok(())
    }

    /// The API name of a tool id (or `id@version`).
    pub fn name(&self, key: &str) -> String {
        self.to_name
            .get(key)
            .cloned()
            .unwrap_or_else(|| encode_name(key))
    }

    /// The API name the model called a tool of this id and version by: the id's name for its
    /// highest version, `id@version`'s for another.
    pub fn name_of(&self, id: &str, version: Option<&str>) -> String {
        match version.and_then(|raw| Some((raw, Version::parse(raw)?))) {
            Some((raw, v)) if self.latest.get(id) != Some(&v) => self.name(&format!("{id}@{raw}")),
            Some(_) => self.name(id),
            // No registered tool: the call kept the name the model wrote.
            None => id.to_owned(),
        }
    }

    /// The tool (`id` or `id@version`) behind an API name. A name that is no registered tool's
    /// stays as the model wrote it, so the call fails `unknown-tool` naming what the model
    /// called, and the reply names it back the same way.
    pub fn id(&self, name: &str) -> String {
        self.to_id
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_fit_every_api() {
        for id in [
            "sluice.kv.get",
            "acme.kv-get",
            "a_b.c",
            "weird/id:with spaces",
            "é.ü",
            "9lives",
            "-dash",
            "acme.t@1.2.3",
        ] {
            let n = encode_name(id);
            assert!(n.len() <= MAX_NAME);
            assert!(n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
            let first = n.chars().next().unwrap();
            assert!(first.is_ascii_alphabetic() || first == '_', "{n}");
            assert_eq!(decode_name(&n).as_deref(), Some(id));
        }
        let long = "x.".repeat(40);
        assert!(encode_name(&long).len() <= MAX_NAME);
    }
}
