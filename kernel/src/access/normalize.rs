//! Normalizers: one spelling per resource, so that two spellings of one file are one resource.

use std::fmt;
use std::sync::Arc;

use super::pattern::{Pattern, Token};

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
        // The scheme is the text before the first `:`: for a name without `:` (a name with one
        // is never a scheme), "starts with `k:`" says it without searching the text for a colon.
        let prefix = pattern.literal_prefix();
        let has_scheme = |k: &str| {
            prefix.as_bytes().get(k.len()) == Some(&b':')
                && prefix.starts_with(k)
                && !k.contains(':')
        };
        match self.by_scheme.iter().find(|(k, _)| has_scheme(k)) {
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
        // Most paths are exact and already normal: decided on the string, no tokens built.
        if let Some(path) = pattern.as_exact().and_then(|s| s.strip_prefix("fs:")) {
            let normal = path.split('/').enumerate().all(|(i, seg)| {
                !matches!(seg, "." | "..") && (!seg.is_empty() || (i == 0 && path.len() > 1))
            });
            if path.is_empty() || normal || path == "/" {
                return pattern;
            }
        }
        let tokens = pattern.tokens();
        let head = [Token::Lit('f'), Token::Lit('s'), Token::Lit(':')];
        let Some(path) = tokens.strip_prefix(&head[..]).filter(|p| !p.is_empty()) else {
            return pattern;
        };
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
        let absolute = path.first() == Some(&Token::Lit('/'));
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
        if out[..] == tokens[..] {
            return pattern; // already normal: keep the very same pattern
        }
        Pattern::from_tokens(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Paths of dots alone: the string fast path must not take them for normal.
        assert_eq!(norm("fs:./."), "fs:.");
        assert_eq!(norm("fs:./.."), "fs:..");
        assert_eq!(norm("fs:/./"), "fs:/");
    }

    /// A normalizer applies to the patterns whose scheme (the literal text before the first `:`)
    /// is its own, and to no other: the reference is the text split at its first colon.
    #[test]
    fn a_normalizer_applies_to_its_scheme_alone() {
        let mut n = Normalizers::empty();
        let marked = |_p: Pattern| Pattern::literal("normalized");
        n.register("ab", marked).register("x:y", marked);
        for text in [
            "ab:1", "ab:*", "abc:1", "cd:1", "ab", "a:1", "x:y:z", "x:1", "a*:1", "ab\\:1", "",
        ] {
            let p = Pattern::parse(text).unwrap();
            let scheme = p.literal_prefix().split_once(':').map(|(s, _)| s);
            let want = matches!(scheme, Some("ab"));
            let got = n.apply(p.clone()).as_exact() == Some("normalized");
            assert_eq!(got, want, "{text}");
        }
    }
}
