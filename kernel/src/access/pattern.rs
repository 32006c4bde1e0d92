//! Resource patterns: parsing, matching, overlap and containment.
//!
//! Takes in: a pattern's text (`fs:/repo/*.rs`, `kv:users/42`, `blob:\*literal`). Hands on: a
//! [`Pattern`] that answers three questions exactly — does it match a string, does it *overlap*
//! another pattern (is there a string both match), does it *contain* another (does it match every
//! string the other matches). The conflict graph asks the second; the policy engine asks both.
//!
//! # Syntax
//!
//! `*` matches any run of zero or more characters, separators included; `**` is the same as `*`.
//! `?` matches exactly one character (a Unicode scalar value). `\` makes the next character
//! literal (`\*`, `\?`, `\\`, `\{`, `\}`). Everything else is itself; matching is case-sensitive
//! and whole-string. A pattern is therefore a word over three tokens: a literal character, *one*
//! and *star*.
//!
//! # Overlap: the product of two patterns, not a DFA
//!
//! The obvious way to intersect two globs is to compile each to a DFA and walk the product. That
//! is exponential in the worst case (a DFA for `*a*a*a*...` has to remember which `a`s it has
//! seen) and it allocates per pattern. But overlap does not need determinism: it asks for *one*
//! string, so it is reachability in the product of the two *NFAs*, whose states are just pairs of
//! positions `(i, j)`. From `(i, j)`:
//!
//! - a star at `a[i]` may match nothing: go to `(i+1, j)`; likewise a star at `b[j]`;
//! - both may consume one shared character: two literals only if they are equal, `?` with any
//!   literal or `?`; a star consumes the character the other side's literal or `?` consumes,
//!   staying where it is (`(i, j+1)` or `(i+1, j)`).
//!
//! The patterns overlap exactly when `(n, m)` is reachable. Every transition moves forward in
//! `i`, `j` or both, so one pass over the `(n+1) x (m+1)` table in row-major order decides it:
//! O(n*m) time, one bit per cell. Templated resources can be long (an input of tens of
//! kilobytes), and the table is filled under the tenant's lock, so the work is bounded: the
//! literal prefix and suffix the two patterns share are cut first (two different literals there
//! decide "no overlap" at once), and a table still over [`MAX_OVERLAP_CELLS`] answers "overlap"
//! — the safe answer, which orders the two calls — without being filled. Example: `fs:/a/*.rs` and `fs:*/b.rs` overlap because
//! `fs:/a/b.rs` is reached by letting the first star take `b` and the second take `/a`.
//!
//! # Containment: a bounded subset construction
//!
//! `A contains B` when every string B matches, A matches. Here the universal quantifier does need
//! determinism on one side: walk B's NFA (a path per string) paired with A's *subset* state (all
//! positions A can be in after the same string). B is not contained exactly when some reachable
//! pair has B accepting and A's subset holding no accepting position. B's `?` and star can produce
//! any character, but A only distinguishes its own literal characters from "anything else", so
//! those classes (at most one per distinct literal in A, plus one) are the only characters tried.
//! A's subsets are bitsets of `len(A) + 1` bits; patterns over [`MAX_CONTAINMENT_TOKENS`] tokens,
//! or a search beyond [`MAX_CONTAINMENT_STATES`] pairs, answer `false` — *not contained* is the
//! safe answer for every caller (an allow rule does not apply; an index entry is not pruned).
//!
//! # Strategies (fast paths)
//!
//! Most resources are literals (`kv:users/42`) or a literal then one star (`blob:*`). Each pattern
//! is sorted at parse time into its cheapest [`Strategy`]; the general routines above run only
//! when both sides need them. The tests hold every fast path to the general routine.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// Patterns longer than this many tokens are never reported as containing another pattern
/// (the safe answer); see the module docs.
pub const MAX_CONTAINMENT_TOKENS: usize = 127;

/// A containment search that visits more than this many states gives up with `false`.
pub const MAX_CONTAINMENT_STATES: usize = 100_000;

/// The overlap table's largest size, in cells, once the shared literal prefix and suffix are cut
/// away; two patterns that would need more are reported as overlapping (the safe answer: the
/// calls are ordered), without the work. 4 Mi cells is 4 MiB and a few milliseconds.
pub const MAX_OVERLAP_CELLS: usize = 1 << 22;

/// One element of a parsed pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Token {
    /// Exactly this character.
    Lit(char),
    /// Any one character (`?`).
    One,
    /// Any run of characters, possibly empty (`*`).
    Star,
}

/// How a pattern is matched: the cheapest form that is exact for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No wildcard: matches one string.
    Exact,
    /// A literal followed by a single trailing star: matches every string with that prefix.
    Prefix,
    /// Just `*`: matches everything.
    Any,
    /// Anything else.
    General,
}

/// A parsed resource pattern.
///
/// Equality and hashing are on the pattern's meaning as written token by token: `a**` and `a*`
/// are the same pattern, `\a` and `a` too.
///
/// Cloning is cheap (a reference count): accesses and edges share one parse.
#[derive(Clone)]
pub struct Pattern(Arc<Inner>);

struct Inner {
    /// The tokens of a pattern with a wildcard; empty for an exact pattern, whose tokens are its
    /// `prefix`'s characters (one allocation fewer for the commonest resource).
    tokens: Box<[Token]>,
    /// The characters before the first wildcard, unescaped (the whole string for an exact
    /// pattern).
    prefix: Box<str>,
    strategy: Strategy,
}

/// Why a pattern's text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// The text ends with a `\` that escapes nothing.
    TrailingEscape,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternError::TrailingEscape => {
                f.write_str("ends with a `\\` that escapes nothing (write `\\\\` for a backslash)")
            }
        }
    }
}

impl std::error::Error for PatternError {}

impl Pattern {
    /// Parses pattern text.
    ///
    /// ```
    /// use sluice_kernel::access::Pattern;
    /// let p = Pattern::parse("fs:/a/*.rs").unwrap();
    /// assert!(p.matches("fs:/a/b/c.rs"));
    /// assert!(p.overlaps(&Pattern::parse("fs:*/b.rs").unwrap()));
    /// assert!(Pattern::parse("blob:*").unwrap().contains(&Pattern::parse("blob:a/?").unwrap()));
    /// ```
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let mut tokens = Vec::with_capacity(text.len());
        push_tokens(&mut tokens, text)?;
        Ok(Self::from_tokens(tokens))
    }

    /// A pattern that matches exactly `s` (its wildcards taken literally).
    pub fn literal(s: &str) -> Self {
        Self::exact(s.into())
    }

    /// The pattern that matches exactly `s`, taking the string over (no copy).
    pub(crate) fn exact(s: Box<str>) -> Self {
        Pattern(Arc::new(Inner {
            tokens: Box::default(),
            prefix: s,
            strategy: Strategy::Exact,
        }))
    }

    /// The pattern `*`, which matches everything.
    pub fn any() -> Self {
        // One shared `*`: every implicitly exclusive call names it.
        static ANY: std::sync::OnceLock<Pattern> = std::sync::OnceLock::new();
        ANY.get_or_init(|| Self::from_tokens(vec![Token::Star]))
            .clone()
    }

    /// Builds a pattern from tokens (runs of stars are collapsed).
    pub fn from_tokens(mut tokens: Vec<Token>) -> Self {
        tokens.dedup_by(|a, b| *a == Token::Star && *b == Token::Star);
        let first_wild = tokens
            .iter()
            .position(|t| !matches!(t, Token::Lit(_)))
            .unwrap_or(tokens.len());
        let mut prefix = String::with_capacity(first_wild);
        for t in tokens.iter().take(first_wild) {
            if let Token::Lit(c) = t {
                prefix.push(*c);
            }
        }
        let strategy = if first_wild == tokens.len() {
            return Self::exact(prefix.into_boxed_str());
        } else if first_wild + 1 == tokens.len() && tokens.get(first_wild) == Some(&Token::Star) {
            if first_wild == 0 {
                Strategy::Any
            } else {
                Strategy::Prefix
            }
        } else {
            Strategy::General
        };
        Pattern(Arc::new(Inner {
            tokens: tokens.into_boxed_slice(),
            prefix: prefix.into_boxed_str(),
            strategy,
        }))
    }

    /// The tokens (built on the fly for an exact pattern, which keeps only its string).
    pub fn tokens(&self) -> Cow<'_, [Token]> {
        match self.0.strategy {
            Strategy::Exact => Cow::Owned(self.0.prefix.chars().map(Token::Lit).collect()),
            _ => Cow::Borrowed(&self.0.tokens),
        }
    }

    /// The strategy chosen for this pattern.
    pub fn strategy(&self) -> Strategy {
        self.0.strategy
    }

    /// The literal characters before the first wildcard (the whole string for an exact pattern).
    pub fn literal_prefix(&self) -> &str {
        &self.0.prefix
    }

    /// For a pattern without wildcards, the one string it matches.
    pub fn as_exact(&self) -> Option<&str> {
        (self.0.strategy == Strategy::Exact).then_some(&*self.0.prefix)
    }

    /// Whether the pattern has no wildcard.
    pub fn is_exact(&self) -> bool {
        self.0.strategy == Strategy::Exact
    }

    /// Whether the pattern matches `s` (whole string, case-sensitive).
    pub fn matches(&self, s: &str) -> bool {
        match self.0.strategy {
            Strategy::Exact => *self.0.prefix == *s,
            Strategy::Prefix => s.starts_with(&*self.0.prefix),
            Strategy::Any => true,
            Strategy::General => general::matches(&self.0.tokens, s),
        }
    }

    /// Whether some string matches both patterns.
    pub fn overlaps(&self, other: &Pattern) -> bool {
        use Strategy::*;
        match (self.0.strategy, other.0.strategy) {
            (Any, _) | (_, Any) => true,
            (Exact, _) => other.matches(&self.0.prefix),
            (_, Exact) => self.matches(&other.0.prefix),
            (Prefix, Prefix) => {
                self.0.prefix.starts_with(&*other.0.prefix)
                    || other.0.prefix.starts_with(&*self.0.prefix)
            }
            _ => {
                // A cheap refusal first: the literal prefixes must agree as far as both go.
                let (a, b) = (self.0.prefix.as_bytes(), other.0.prefix.as_bytes());
                a.iter().zip(b).all(|(x, y)| x == y)
                    && general::overlaps(&self.0.tokens, &other.0.tokens)
            }
        }
    }

    /// Whether every string that matches `other` matches `self`.
    pub fn contains(&self, other: &Pattern) -> bool {
        use Strategy::*;
        match (self.0.strategy, other.0.strategy) {
            (Any, _) => true,
            (_, Exact) => self.matches(&other.0.prefix),
            // An exact pattern matches one string; any wildcard matches at least two.
            (Exact, _) => false,
            (Prefix, _) => other.0.prefix.starts_with(&*self.0.prefix),
            // Only `*` contains `*`.
            (_, Any) => false,
            _ => general::contains(&self.0.tokens, &other.0.tokens),
        }
    }

    /// The canonical text of the pattern: wildcards as `*` and `?`, and the characters
    /// `* ? \ { }` escaped where they are literal. `Pattern::parse(&p.to_string()) == p`.
    pub fn to_text(&self) -> String {
        if self.0.strategy == Strategy::Exact {
            return escape(&self.0.prefix);
        }
        let mut s = String::with_capacity(self.0.tokens.len() + 4);
        write_tokens(&mut s, &self.0.tokens);
        s
    }
}

/// Appends the tokens of pattern text to `tokens` (runs of stars kept as one); the text's own
/// parse, without building a pattern. Resource templates prepare their literal parts with it once.
pub(crate) fn push_tokens(tokens: &mut Vec<Token>, text: &str) -> Result<(), PatternError> {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let t = match c {
            '\\' => Token::Lit(chars.next().ok_or(PatternError::TrailingEscape)?),
            '*' => Token::Star,
            '?' => Token::One,
            c => Token::Lit(c),
        };
        // `**` means `*`: keep runs of stars as one.
        if t == Token::Star && tokens.last() == Some(&Token::Star) {
            continue;
        }
        tokens.push(t);
    }
    Ok(())
}

/// Appends the canonical text of `tokens` to `out`.
pub(crate) fn write_tokens(out: &mut String, tokens: &[Token]) {
    for t in tokens {
        match t {
            Token::Star => out.push('*'),
            Token::One => out.push('?'),
            Token::Lit(c) => push_literal_char(out, *c),
        }
    }
}

/// Appends `c` to a pattern's text, escaped when it would otherwise be special.
pub fn push_literal_char(out: &mut String, c: char) {
    if matches!(c, '*' | '?' | '\\' | '{' | '}') {
        out.push('\\');
    }
    out.push(c);
}

/// Escapes `s` so that, as pattern text, it matches exactly `s`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        push_literal_char(&mut out, c);
    }
    out
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        // Tokens are kept for wildcard patterns only; an exact pattern is its string.
        Arc::ptr_eq(&self.0, &other.0)
            || match (self.0.strategy, other.0.strategy) {
                (Strategy::Exact, Strategy::Exact) => self.0.prefix == other.0.prefix,
                (Strategy::Exact, _) | (_, Strategy::Exact) => false,
                _ => self.0.tokens == other.0.tokens,
            }
    }
}

impl Eq for Pattern {}

impl std::hash::Hash for Pattern {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self.0.strategy {
            Strategy::Exact => {
                state.write_u8(0);
                self.0.prefix.hash(state);
            }
            _ => {
                state.write_u8(1);
                self.0.tokens.hash(state);
            }
        }
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.to_text())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl std::str::FromStr for Pattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, PatternError> {
        Pattern::parse(s)
    }
}

/// The general routines, on token slices; exact for every pattern.
pub mod general {
    use super::{Token, MAX_CONTAINMENT_STATES, MAX_CONTAINMENT_TOKENS, MAX_OVERLAP_CELLS};
    use std::collections::{HashSet, VecDeque};

    /// Whether `tokens` matches `s`: the classic two-pointer glob match with backtracking to the
    /// last star, O(len * len) in the worst case and linear in the common one.
    pub fn matches(tokens: &[Token], s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        let (mut ti, mut si) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while si < chars.len() {
            match tokens.get(ti) {
                Some(Token::Lit(c)) if chars.get(si) == Some(c) => {
                    ti += 1;
                    si += 1;
                }
                Some(Token::One) => {
                    ti += 1;
                    si += 1;
                }
                Some(Token::Star) => {
                    star = Some((ti, si));
                    ti += 1;
                }
                _ => match star {
                    // Let the last star take one more character and retry.
                    Some((st, ss)) => {
                        ti = st + 1;
                        si = ss + 1;
                        star = Some((st, ss + 1));
                    }
                    None => return false,
                },
            }
        }
        tokens.iter().skip(ti).all(|t| *t == Token::Star)
    }

    /// Whether some string matches both `a` and `b`: reachability of `(n, m)` in the product of
    /// the two NFAs (see the module docs). O(n*m) time and bits.
    pub fn overlaps(a: &[Token], b: &[Token]) -> bool {
        // Cut the shared literal prefix and suffix: a common string starts (and ends) with them;
        // two different literals at either end rule every common string out.
        let (mut a, mut b) = (a, b);
        while let ([Token::Lit(x), ra @ ..], [Token::Lit(y), rb @ ..]) = (a, b) {
            if x != y {
                return false;
            }
            (a, b) = (ra, rb);
        }
        while let ([ra @ .., Token::Lit(x)], [rb @ .., Token::Lit(y)]) = (a, b) {
            if x != y {
                return false;
            }
            (a, b) = (ra, rb);
        }
        let (n, m) = (a.len(), b.len());
        if (n + 1).saturating_mul(m + 1) > MAX_OVERLAP_CELLS {
            return true;
        }
        let w = m + 1;
        // The (n + 1) x (m + 1) table, row by row: cell (i, j) at i * w + j.
        let mut reach = vec![false; (n + 1) * w];
        let mark = |reach: &mut Vec<bool>, cell: usize| {
            if let Some(r) = reach.get_mut(cell) {
                *r = true;
            }
        };
        mark(&mut reach, 0);
        for i in 0..=n {
            for j in 0..=m {
                if reach.get(i * w + j) != Some(&true) {
                    continue;
                }
                if i == n && j == m {
                    return true;
                }
                let ta = a.get(i).copied();
                let tb = b.get(j).copied();
                if ta == Some(Token::Star) {
                    mark(&mut reach, (i + 1) * w + j); // a's star matches nothing
                }
                if tb == Some(Token::Star) {
                    mark(&mut reach, i * w + j + 1); // b's star matches nothing
                }
                match (ta, tb) {
                    (Some(Token::Star), Some(Token::Lit(_) | Token::One)) => {
                        mark(&mut reach, i * w + j + 1); // a's star takes b's character
                    }
                    (Some(Token::Lit(_) | Token::One), Some(Token::Star)) => {
                        mark(&mut reach, (i + 1) * w + j); // b's star takes a's character
                    }
                    (Some(Token::Lit(x)), Some(Token::Lit(y))) if x != y => {}
                    (Some(Token::Lit(_) | Token::One), Some(Token::Lit(_) | Token::One)) => {
                        mark(&mut reach, (i + 1) * w + j + 1);
                    }
                    _ => {}
                }
            }
        }
        reach.get(n * w + m) == Some(&true)
    }

    /// A set of positions in `a`, as a bitset (position `k` is bit `k`).
    type Set = u128;

    /// Adds the positions reachable by stars matching nothing.
    fn closure(a: &[Token], mut s: Set) -> Set {
        for (k, t) in a.iter().enumerate() {
            if *t == Token::Star && s & (1 << k) != 0 {
                s |= 1 << (k + 1);
            }
        }
        s
    }

    /// The positions after reading one character of class `c` (`None`: a character that is no
    /// literal of `a`).
    fn step(a: &[Token], s: Set, c: Option<char>) -> Set {
        let mut next: Set = 0;
        for (k, t) in a.iter().enumerate() {
            if s & (1 << k) == 0 {
                continue;
            }
            match t {
                Token::Star => next |= 1 << k,
                Token::One => next |= 1 << (k + 1),
                Token::Lit(x) if Some(*x) == c => next |= 1 << (k + 1),
                Token::Lit(_) => {}
            }
        }
        closure(a, next)
    }

    /// Whether every string matching `b` matches `a` (see the module docs). Answers `false` when
    /// `a` is longer than [`MAX_CONTAINMENT_TOKENS`] or the search exceeds
    /// [`MAX_CONTAINMENT_STATES`].
    pub fn contains(a: &[Token], b: &[Token]) -> bool {
        if a.len() > MAX_CONTAINMENT_TOKENS {
            return false;
        }
        let accept_a: Set = 1 << a.len();
        // The character classes that A tells apart: each of its literals, and "anything else".
        let mut classes: Vec<Option<char>> = a
            .iter()
            .filter_map(|t| match t {
                Token::Lit(c) => Some(Some(*c)),
                _ => None,
            })
            .collect();
        classes.sort_unstable();
        classes.dedup();
        classes.push(None);

        let start = (0usize, closure(a, 1));
        let mut seen: HashSet<(usize, Set)> = HashSet::new();
        let mut queue = VecDeque::new();
        seen.insert(start);
        queue.push_back(start);
        while let Some((j, s)) = queue.pop_front() {
            if seen.len() > MAX_CONTAINMENT_STATES {
                return false;
            }
            if s == 0 {
                // A has died on a string B can still extend: B matches at least one string
                // with this prefix (stars may take nothing), so B escapes A.
                return false;
            }
            let Some(&tb) = b.get(j) else {
                if s & accept_a == 0 {
                    return false;
                }
                continue;
            };
            let mut push = |state: (usize, Set)| {
                if seen.insert(state) {
                    queue.push_back(state);
                }
            };
            match tb {
                Token::Lit(c) => {
                    // The class of `c` in A: itself if A has it as a literal, else "anything".
                    let class = classes.iter().copied().find(|k| *k == Some(c)).flatten();
                    push((j + 1, step(a, s, class)));
                }
                Token::One => {
                    for c in &classes {
                        push((j + 1, step(a, s, *c)));
                    }
                }
                Token::Star => {
                    push((j + 1, s));
                    for c in &classes {
                        push((j, step(a, s, *c)));
                    }
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn long_templated_patterns_cost_bounded_work() {
        // Tens of kilobytes of shared literal around the wildcards: cut away, decided exactly.
        let big = "x".repeat(40_000);
        let a = p(&format!("fs:/{big}/*/{big}.rs"));
        let b = p(&format!("fs:/{big}/?a*/{big}.rs"));
        let c = p(&format!("fs:/{big}/*/{big}.md"));
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c), "different suffix literals");
        assert!(!general::overlaps(&a.tokens(), &c.tokens()));
        // Wildcards at both ends and spread over a long middle: over the bound, the safe answer
        // (overlap) without the work, though these two never match one string.
        let spread = |c: char| format!("?{}", format!("{c}?").repeat(1500));
        let (d, e) = (p(&spread('a')), p(&spread('b')));
        assert!((d.tokens().len() + 1) * (e.tokens().len() + 1) > MAX_OVERLAP_CELLS);
        assert!(general::overlaps(&d.tokens(), &e.tokens()));
    }

    #[test]
    fn strategies_are_chosen_by_shape() {
        assert_eq!(p("kv:a").strategy(), Strategy::Exact);
        assert_eq!(p("kv:\\*").strategy(), Strategy::Exact);
        assert_eq!(p("kv:*").strategy(), Strategy::Prefix);
        assert_eq!(p("**").strategy(), Strategy::Any);
        assert_eq!(p("kv:*a").strategy(), Strategy::General);
        assert_eq!(p("kv:?").strategy(), Strategy::General);
        assert_eq!(p("a**b"), p("a*b"));
        assert_eq!(p("\\a"), p("a"));
    }

    #[test]
    fn the_spec_examples_hold() {
        assert!(p("blob:*").overlaps(&p("blob:a/b")));
        assert!(p("fs:/a/*.rs").overlaps(&p("fs:*/b.rs")));
        assert!(!p("memory:facts").overlaps(&p("memory:facts2")));
        assert!(p("memory:*").contains(&p("memory:facts")));
        assert!(!p("memory:*").contains(&p("*")));
        assert!(p("fs:/r/c*").overlaps(&p("fs:/r/*")));
    }

    #[test]
    fn escapes_are_literal() {
        assert!(p("a\\*").matches("a*"));
        assert!(!p("a\\*").matches("ab"));
        assert!(p("a\\?b").matches("a?b"));
        assert!(!p("a\\?b").matches("axb"));
        assert_eq!(Pattern::parse("a\\"), Err(PatternError::TrailingEscape));
        assert_eq!(p(&escape("x*?\\{}")).as_exact(), Some("x*?\\{}"));
    }

    #[test]
    fn question_mark_is_one_unicode_scalar() {
        assert!(p("a?c").matches("aéc"));
        assert!(!p("a?c").matches("ac"));
        assert!(!p("a?c").matches("abbc"));
    }

    #[test]
    fn containment_in_general_form() {
        assert!(p("*a*").contains(&p("?a?")));
        assert!(!p("?a?").contains(&p("*a*")));
        assert!(p("a*b*c").contains(&p("a*bb*c")));
        assert!(!p("a*bb*c").contains(&p("a*b*c")));
        assert!(p("*").contains(&p("*")));
        assert!(p("??*").contains(&p("?*?")));
    }

    #[test]
    fn canonical_text_round_trips() {
        for s in ["fs:/a/*.rs", "kv:\\*x", "a?b", "\\{x\\}", "*"] {
            assert_eq!(p(&p(s).to_text()), p(s));
        }
    }
}
