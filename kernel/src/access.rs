//! From a call to its accesses.
//!
//! Takes in: a tool's manifest (compiled once into [`AccessPlan`]) and a call's input. Hands on:
//! the list of [`Access`]es — `(kind, resource pattern)` pairs, each with its read/write mode —
//! that the conflict graph orders and the authorizer judges.
//!
//! The rules (semantics.md section 2):
//!
//! - Each declared effect gives one access; an effect without `resource` accesses `*`.
//! - `{name}` in a resource is replaced by the top-level input property `name`. A string is used
//!   as it is, a number or boolean as its JSON text, and the value is a *literal*: its `*`, `?`,
//!   `\`, `{`, `}` are escaped, so an input can never widen an access. An array gives one access
//!   per element; several arrays in one resource give every combination, at most
//!   [`MAX_COMBINATIONS`] (beyond that every array placeholder becomes `*`); a name used twice in
//!   one resource takes the same element in both places. A missing, null or object value (or an
//!   array element of those kinds) makes the placeholder `*`. An empty array gives no access.
//! - A registered [`Normalizer`] for the resource's scheme then gives one spelling per resource;
//!   `fs:` has one by default ([`FsNormalizer`]).
//! - A tool that is not read-only and declares no changing effect gets one implicit access
//!   `(writes, *)`: the kernel cannot know what it changes, so it runs alone.
//!
//! ```
//! use sluice_kernel::access::{AccessPlan, Normalizers};
//! use sluice_kernel::manifest::Manifest;
//! use serde_json::json;
//!
//! let m = Manifest::from_value(json!({
//!     "id": "acme.kv-put", "description": "Put a value", "version": "1.0.0",
//!     "input": {"type": "object"}, "output": {"type": "object"},
//!     "effects": [{"kind": "writes", "resource": "kv:{key}"}]
//! })).unwrap();
//! let plan = AccessPlan::compile(&m).unwrap();
//! let accesses = plan.accesses(&json!({"key": "users/*"}), &Normalizers::default());
//! assert_eq!(accesses[0].resource.to_text(), "kv:users/\\*"); // the input stays literal
//! ```

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::manifest::{AccessMode, EffectKind, Manifest};
use crate::pattern::{self, Pattern, Token};
use crate::template::TextPart as Part;

/// The most combinations several array placeholders in one resource may produce.
pub const MAX_COMBINATIONS: usize = 64;

/// One access of a call: what it does (`kind`) to which resources (`resource`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Access {
    /// The effect kind.
    pub kind: EffectKind,
    /// The resource pattern, after templating and normalization.
    pub resource: Pattern,
}

impl Access {
    /// Builds an access.
    pub fn new(kind: EffectKind, resource: Pattern) -> Self {
        Access { kind, resource }
    }

    /// The access's mode, from its kind.
    pub fn mode(&self) -> AccessMode {
        self.kind.mode()
    }
}

/// A parsed resource template such as `fs:/repo/{path}` or `kv:{bucket}/{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceTemplate {
    /// Literal parts are pattern text (escapes kept).
    parts: Vec<Part>,
}

/// Why a resource template is not well formed (the same error as a text template's).
pub type TemplateError = crate::template::TemplateSyntaxError;

impl ResourceTemplate {
    /// Parses a template: pattern text with `{name}` placeholders (name: ASCII letters, digits,
    /// `_`). A `{` that does not open a placeholder, a lone `}` or a trailing `\` is an error;
    /// write `\{`, `\}`, `\\` for the literal characters.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        Ok(ResourceTemplate {
            parts: crate::template::scan(text, true)?,
        })
    }

    /// The distinct placeholder names, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for p in &self.parts {
            if let Part::Var(n) = p {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
        }
        names
    }

    /// Expands the template against `input`, giving zero or more pattern texts (see the module
    /// docs for the rules).
    pub fn expand(&self, input: &Value) -> Vec<String> {
        // The common case, without the general machinery: one placeholder, one scalar value.
        if let [Part::Lit(head), Part::Var(name)] = self.parts.as_slice() {
            if let Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) =
                input.get(name)
            {
                let mut s = String::with_capacity(head.len() + 16);
                s.push_str(head);
                match v {
                    Value::String(v) => {
                        for c in v.chars() {
                            pattern::push_literal_char(&mut s, c);
                        }
                    }
                    v => s.push_str(&pattern::escape(&v.to_string())),
                }
                return vec![s];
            }
        }
        let names = self.placeholders();
        if names.is_empty() {
            return vec![self.render(&[], &[])];
        }
        let mut values: Vec<Binding> = names.iter().map(|n| bind(input.get(*n))).collect();
        if values
            .iter()
            .any(|b| matches!(b, Binding::Many(v) if v.is_empty()))
        {
            return Vec::new();
        }
        let combos = values.iter().try_fold(1usize, |acc, b| match b {
            Binding::Many(v) => acc.checked_mul(v.len()),
            _ => Some(acc),
        });
        if combos.is_none_or(|n| n > MAX_COMBINATIONS) {
            for b in &mut values {
                if matches!(b, Binding::Many(_)) {
                    *b = Binding::One("*".into());
                }
            }
        }
        // An odometer over the array placeholders.
        let mut digits = vec![0usize; values.len()];
        let mut out = Vec::new();
        loop {
            let chosen: Vec<&str> = values
                .iter()
                .zip(&digits)
                .map(|(b, d)| match b {
                    Binding::One(s) => s.as_str(),
                    Binding::Many(v) => v[*d].as_str(),
                })
                .collect();
            out.push(self.render(&names, &chosen));
            let mut k = 0;
            loop {
                if k == values.len() {
                    return out;
                }
                if let Binding::Many(v) = &values[k] {
                    digits[k] += 1;
                    if digits[k] < v.len() {
                        break;
                    }
                    digits[k] = 0;
                }
                k += 1;
            }
        }
    }

    fn render(&self, names: &[&str], chosen: &[&str]) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(t) => s.push_str(t),
                Part::Var(n) => {
                    if let Some(i) = names.iter().position(|x| x == n) {
                        s.push_str(chosen[i]);
                    }
                }
            }
        }
        s
    }
}

/// What a placeholder stands for: one pattern text, or one per array element.
enum Binding {
    One(String),
    Many(Vec<String>),
}

/// A scalar as escaped pattern text; anything else as `*`.
fn scalar_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => pattern::escape(s),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => pattern::escape(&v.to_string()),
        _ => "*".into(),
    }
}

fn bind(v: Option<&Value>) -> Binding {
    match v {
        Some(Value::Array(items)) => {
            Binding::Many(items.iter().map(|i| scalar_text(Some(i))).collect())
        }
        v => Binding::One(scalar_text(v)),
    }
}

/// Gives one spelling per resource for a scheme (the text before the first `:`).
pub trait Normalizer: Send + Sync {
    /// Returns the normal form of `pattern`. Must be idempotent, and must never narrow: every
    /// string the input matches must, in normal form, match the output.
    fn normalize(&self, pattern: Pattern) -> Pattern;
}

impl<F> Normalizer for F
where
    F: Fn(Pattern) -> Pattern + Send + Sync,
{
    fn normalize(&self, pattern: Pattern) -> Pattern {
        self(pattern)
    }
}

/// The normalizers by scheme. [`Normalizers::default`] holds `fs` -> [`FsNormalizer`].
#[derive(Clone)]
pub struct Normalizers {
    /// Few schemes: a scan beats hashing the scheme of every access.
    by_scheme: Vec<(String, Arc<dyn Normalizer>)>,
}

impl fmt::Debug for Normalizers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut schemes: Vec<&String> = self.by_scheme.iter().map(|(k, _)| k).collect();
        schemes.sort();
        f.debug_struct("Normalizers")
            .field("schemes", &schemes)
            .finish()
    }
}

impl Default for Normalizers {
    fn default() -> Self {
        let mut n = Normalizers::empty();
        n.register("fs", FsNormalizer);
        n
    }
}

impl Normalizers {
    /// No normalizer at all (not even `fs`).
    pub fn empty() -> Self {
        Normalizers {
            by_scheme: Vec::new(),
        }
    }

    /// Registers (or replaces) the normalizer for `scheme` (without the `:`).
    pub fn register(&mut self, scheme: &str, normalizer: impl Normalizer + 'static) -> &mut Self {
        let n: Arc<dyn Normalizer> = Arc::new(normalizer);
        match self.by_scheme.iter_mut().find(|(k, _)| k == scheme) {
            Some(slot) => slot.1 = n,
            None => self.by_scheme.push((scheme.to_owned(), n)),
        }
        self
    }

    /// Applies the normalizer of the pattern's scheme, if the scheme is literal and has one.
    pub fn apply(&self, pattern: Pattern) -> Pattern {
        if self.by_scheme.is_empty() {
            return pattern;
        }
        let scheme = match pattern.literal_prefix().split_once(':') {
            Some((scheme, _)) => scheme,
            None => return pattern,
        };
        match self.by_scheme.iter().find(|(k, _)| k == scheme) {
            Some((_, n)) => n.normalize(pattern),
            None => pattern,
        }
    }
}

/// The `fs:` normalizer: resolves `.` and `..` segments and folds repeated `/`, on the pattern's
/// tokens (so escapes are respected). `fs:/r/a/../b.txt`, `fs:/r/./b.txt` and `fs:/r//b.txt` are
/// all `fs:/r/b.txt`. A trailing `/` is dropped (`fs:/r/` is `fs:/r`; the root stays `fs:/`).
/// `..` at the root stays at the root. A `..` whose parent segment holds a wildcard cannot be
/// resolved (the wildcard may span segments): the pattern from that parent segment on becomes
/// `*`, which is wider and so safe.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsNormalizer;

impl Normalizer for FsNormalizer {
    fn normalize(&self, pattern: Pattern) -> Pattern {
        let tokens = pattern.tokens();
        let head = [Token::Lit('f'), Token::Lit('s'), Token::Lit(':')];
        if !tokens.starts_with(&head) {
            return pattern;
        }
        let path = &tokens[3..];
        if path.is_empty() {
            return pattern;
        }
        // Most paths are already normal: no empty, `.` or `..` segment, no trailing `/`.
        let normal = path
            .split(|t| *t == Token::Lit('/'))
            .enumerate()
            .all(|(i, seg)| {
                !matches!(seg, [Token::Lit('.')] | [Token::Lit('.'), Token::Lit('.')])
                    && (!seg.is_empty() || (i == 0 && path.len() > 1))
            });
        if normal || path == [Token::Lit('/')] {
            return pattern;
        }
        let absolute = path[0] == Token::Lit('/');
        let mut segs: Vec<&[Token]> = Vec::new();
        let mut widened = false;
        for seg in path.split(|t| *t == Token::Lit('/')) {
            match seg {
                [] | [Token::Lit('.')] => {}
                [Token::Lit('.'), Token::Lit('.')] => match segs.last() {
                    Some(parent) if parent.iter().any(|t| !matches!(t, Token::Lit(_))) => {
                        segs.pop();
                        widened = true;
                        break;
                    }
                    Some(parent) if *parent != [Token::Lit('.'), Token::Lit('.')] => {
                        segs.pop();
                    }
                    None if absolute => {}
                    _ => segs.push(seg),
                },
                seg => segs.push(seg),
            }
        }
        let mut out: Vec<Token> = head.to_vec();
        if absolute {
            out.push(Token::Lit('/'));
        }
        for (i, seg) in segs.iter().enumerate() {
            if i > 0 {
                out.push(Token::Lit('/'));
            }
            out.extend_from_slice(seg);
        }
        if widened {
            if !segs.is_empty() {
                out.push(Token::Lit('/'));
            }
            out.push(Token::Star);
        } else if segs.is_empty() && !absolute {
            out.push(Token::Lit('.'));
        }
        if out == tokens {
            return pattern; // already normal: keep the very same pattern
        }
        Pattern::from_tokens(out)
    }
}

/// A tool's effects, compiled once: how to turn any input into the call's accesses.
#[derive(Debug, Clone)]
pub struct AccessPlan {
    effects: Vec<(EffectKind, ResourceTemplate)>,
    implicit_exclusive: bool,
    read_only: bool,
}

/// Why a manifest's effects cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectError {
    /// Index of the effect in `effects`.
    pub index: usize,
    /// The template problem.
    pub error: TemplateError,
}

impl fmt::Display for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the resource of effect {} is not well formed: {}",
            self.index, self.error
        )
    }
}

impl std::error::Error for EffectError {}

impl AccessPlan {
    /// Compiles a manifest's effects.
    pub fn compile(manifest: &Manifest) -> Result<Self, EffectError> {
        let effects = manifest
            .effects()
            .iter()
            .enumerate()
            .map(|(index, e)| {
                let template = ResourceTemplate::parse(e.resource.as_deref().unwrap_or("*"))
                    .map_err(|error| EffectError { index, error })?;
                Ok((e.kind, template))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let read_only = manifest.is_read_only();
        Ok(AccessPlan {
            effects,
            implicit_exclusive: !read_only && !manifest.declares_changing_effect(),
            read_only,
        })
    }

    /// Whether the tool is read-only (`mutating: false` and no changing effect).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the tool gets the implicit `(writes, *)` access.
    pub fn is_implicitly_exclusive(&self) -> bool {
        self.implicit_exclusive
    }

    /// The accesses of a call with this input, in effect order, without duplicates.
    pub fn accesses(&self, input: &Value, normalizers: &Normalizers) -> Vec<Access> {
        let mut out: Vec<Access> = Vec::with_capacity(self.effects.len() + 1);
        for (kind, template) in &self.effects {
            for text in template.expand(input) {
                // Expansion only inserts escaped values into a parsed template, so the text
                // always parses; `*` is the safe fallback all the same.
                let p = Pattern::parse(&text).unwrap_or_else(|_| Pattern::any());
                let access = Access::new(*kind, normalizers.apply(p));
                if !out.contains(&access) {
                    out.push(access);
                }
            }
        }
        if self.implicit_exclusive {
            out.push(Access::new(EffectKind::Writes, Pattern::any()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(t: &str, input: Value) -> Vec<String> {
        ResourceTemplate::parse(t).unwrap().expand(&input)
    }

    #[test]
    fn values_are_escaped_literals() {
        assert_eq!(texts("kv:{k}", json!({"k": "a*?"})), vec!["kv:a\\*\\?"]);
        assert_eq!(texts("kv:{k}", json!({"k": 4.5})), vec!["kv:4.5"]);
        assert_eq!(texts("kv:{k}", json!({"k": true})), vec!["kv:true"]);
        assert_eq!(texts("kv:{k}", json!({"k": {"x": 1}})), vec!["kv:*"]);
        assert_eq!(texts("kv:{k}", json!({})), vec!["kv:*"]);
        assert_eq!(texts("kv:{k}", json!({"k": null})), vec!["kv:*"]);
    }

    #[test]
    fn arrays_expand_and_repeat_consistently() {
        assert_eq!(
            texts("kv:{k}", json!({"k": ["a", "b"]})),
            vec!["kv:a", "kv:b"]
        );
        assert_eq!(texts("kv:{k}", json!({"k": []})), Vec::<String>::new());
        assert_eq!(
            texts("{a}/{b}/{a}", json!({"a": ["x", "y"], "b": ["1", "2"]})),
            vec!["x/1/x", "y/1/y", "x/2/x", "y/2/y"]
        );
        let big: Vec<u32> = (0..9).collect();
        assert_eq!(
            texts("{a}{b}", json!({"a": big, "b": big})),
            vec!["**".to_string()]
        );
    }

    #[test]
    fn malformed_templates_are_refused() {
        assert!(ResourceTemplate::parse("kv:{").is_err());
        assert!(ResourceTemplate::parse("kv:{a-b}").is_err());
        assert!(ResourceTemplate::parse("kv:}").is_err());
        assert!(ResourceTemplate::parse("kv:{}").is_err());
        assert!(ResourceTemplate::parse("kv:\\").is_err());
        assert!(ResourceTemplate::parse("kv:\\{x\\}").is_ok());
    }

    fn norm(s: &str) -> String {
        Normalizers::default()
            .apply(Pattern::parse(s).unwrap())
            .to_text()
    }

    #[test]
    fn fs_paths_have_one_spelling() {
        assert_eq!(norm("fs:/r/a/../b.txt"), "fs:/r/b.txt");
        assert_eq!(norm("fs:/r/./b.txt"), "fs:/r/b.txt");
        assert_eq!(norm("fs:/r//b.txt"), "fs:/r/b.txt");
        assert_eq!(norm("fs:/r/"), "fs:/r");
        assert_eq!(norm("fs:/../x"), "fs:/x");
        assert_eq!(norm("fs:/"), "fs:/");
        assert_eq!(norm("fs:a/../.."), "fs:..");
        assert_eq!(norm("fs:/a/*/../b"), "fs:/a/*");
        assert_eq!(norm("fs:/a/\\*/../b"), "fs:/a/b");
        assert_eq!(norm("kv:/a/../b"), "kv:/a/../b");
        assert_eq!(norm("fs:/r/b.txt"), "fs:/r/b.txt");
    }
}
