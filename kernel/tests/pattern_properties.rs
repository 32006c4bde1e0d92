//! Property tests: resource patterns against a brute-force oracle, and every fast path against
//! the general routines.
//!
//! The alphabet is small (`a`, `b`, and `z` standing for "any other character") so that every
//! string up to the length any witness needs can be enumerated. Case counts follow proptest's
//! default (256) unless `PROPTEST_CASES` says otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use sluice_kernel::access::{general, Pattern, Token, MAX_CONTAINMENT_TOKENS};

/// Patterns of up to 3 tokens over {a, b, ?, *}.
fn small_pattern() -> impl Strategy<Value = Pattern> {
    prop::collection::vec(
        prop_oneof![
            Just(Token::Lit('a')),
            Just(Token::Lit('b')),
            Just(Token::One),
            Just(Token::Star),
        ],
        0..=3,
    )
    .prop_map(Pattern::from_tokens)
}

/// Every string over {a, b, z} of length 0..=6: long enough to witness any overlap or
/// non-containment of two 3-token patterns.
fn all_strings() -> Vec<String> {
    let mut out = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..6 {
        let mut next = Vec::new();
        for s in &frontier {
            for c in ['a', 'b', 'z'] {
                next.push(format!("{s}{c}"));
            }
        }
        out.extend(next.iter().cloned());
        frontier = next;
    }
    out
}

fn oracle_overlaps(a: &Pattern, b: &Pattern, strings: &[String]) -> bool {
    strings.iter().any(|s| a.matches(s) && b.matches(s))
}

fn oracle_contains(a: &Pattern, b: &Pattern, strings: &[String]) -> bool {
    strings.iter().all(|s| !b.matches(s) || a.matches(s))
}

/// A reference matcher: plain recursion over tokens, no cleverness.
fn reference_matches(t: &[Token], s: &[char]) -> bool {
    match t.split_first() {
        None => s.is_empty(),
        Some((Token::Star, rest)) => (0..=s.len()).any(|k| reference_matches(rest, &s[k..])),
        Some((Token::One, rest)) => !s.is_empty() && reference_matches(rest, &s[1..]),
        Some((Token::Lit(c), rest)) => s.first() == Some(c) && reference_matches(rest, &s[1..]),
    }
}

proptest! {
    #[test]
    fn overlap_agrees_with_the_oracle(a in small_pattern(), b in small_pattern()) {
        let strings = all_strings();
        prop_assert_eq!(a.overlaps(&b), oracle_overlaps(&a, &b, &strings), "{} vs {}", a, b);
        prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
    }

    #[test]
    fn containment_agrees_with_the_oracle(a in small_pattern(), b in small_pattern()) {
        let strings = all_strings();
        prop_assert_eq!(a.contains(&b), oracle_contains(&a, &b, &strings), "{} contains {}", a, b);
    }

    #[test]
    fn fast_paths_agree_with_the_general_routines(
        a in small_pattern(), b in small_pattern(), s in "[abz]{0,6}"
    ) {
        prop_assert_eq!(a.overlaps(&b), general::overlaps(&a.tokens(), &b.tokens()));
        prop_assert_eq!(a.contains(&b), general::contains(&a.tokens(), &b.tokens()));
        prop_assert_eq!(a.matches(&s), general::matches(&a.tokens(), &s));
        let chars: Vec<char> = s.chars().collect();
        prop_assert_eq!(a.matches(&s), reference_matches(&a.tokens(), &chars));
    }

    #[test]
    fn text_round_trips(a in small_pattern()) {
        prop_assert_eq!(Pattern::parse(&a.to_text()).unwrap(), a.clone());
        // `Display` (what messages and spans show) is the pattern's text.
        prop_assert_eq!(a.to_string(), a.to_text());
    }

    /// A pattern is exact exactly when it has no wildcard token, and then it is its own text.
    #[test]
    fn exact_means_no_wildcard(a in small_pattern()) {
        let literal = a.tokens().iter().all(|t| matches!(t, Token::Lit(_)));
        prop_assert_eq!(a.is_exact(), literal);
        prop_assert_eq!(a.as_exact().is_some(), literal);
        if let Some(text) = a.as_exact() {
            prop_assert!(a.matches(text));
        }
    }

    /// However a pattern is built (parsed, from its tokens, as a literal), equal patterns are
    /// equal and hash alike: exact patterns keep only their string, the others their tokens.
    #[test]
    fn every_way_of_building_a_pattern_agrees(a in small_pattern(), b in small_pattern()) {
        use std::hash::{BuildHasher, RandomState};
        let rebuilt = Pattern::from_tokens(a.tokens().into_owned());
        let hasher = RandomState::new();
        prop_assert_eq!(&rebuilt, &a);
        prop_assert_eq!(hasher.hash_one(&rebuilt), hasher.hash_one(&a));
        if let Some(text) = a.as_exact() {
            let literal = Pattern::literal(text);
            prop_assert_eq!(&literal, &a);
            prop_assert_eq!(hasher.hash_one(&literal), hasher.hash_one(&a));
        }
        prop_assert_eq!(a == b, a.tokens() == b.tokens());
    }

    #[test]
    fn unicode_and_escapes_match_literally(s in "[a*?\\\\{}é/:]{0,8}") {
        let p = Pattern::literal(&s);
        prop_assert!(p.is_exact());
        prop_assert!(p.matches(&s));
        prop_assert_eq!(Pattern::parse(&sluice_kernel::access::escape(&s)).unwrap(), p);
    }
}

#[test]
fn longer_patterns_use_the_general_routines_correctly() {
    // Beyond the proptest alphabet: separators, several stars, a question mark in a segment.
    let p = |s: &str| Pattern::parse(s).unwrap();
    assert!(p("fs:/repo/*/mod.rs").overlaps(&p("fs:/repo/src/*")));
    assert!(!p("fs:/repo/*.rs").overlaps(&p("fs:/repo/*.md")));
    assert!(p("fs:/repo/*").contains(&p("fs:/repo/src/*.rs")));
    assert!(!p("fs:/repo/src/*.rs").contains(&p("fs:/repo/*")));
    assert!(p("kv:user?/*").overlaps(&p("kv:*/42")));
}

#[test]
fn a_malformed_pattern_says_what_is_wrong() {
    let e = Pattern::parse("kv:a\\").unwrap_err();
    assert!(e.to_string().contains("escapes nothing"), "{e}");
}

/// Containment is decided up to `MAX_CONTAINMENT_TOKENS` tokens on the containing side and
/// answers `false` (the safe answer) beyond, without overflowing its bitsets.
#[test]
fn containment_is_exact_up_to_its_token_limit_and_safe_beyond() {
    let at_limit = format!("*{}*", "a".repeat(MAX_CONTAINMENT_TOKENS - 2));
    let p = Pattern::parse(&at_limit).unwrap();
    assert_eq!(p.tokens().len(), MAX_CONTAINMENT_TOKENS);
    assert!(general::contains(&p.tokens(), &p.tokens()));
    for extra in [1, 2, 80] {
        let beyond = format!("*{}*", "a".repeat(MAX_CONTAINMENT_TOKENS - 2 + extra));
        let q = Pattern::parse(&beyond).unwrap();
        assert!(
            !general::contains(&q.tokens(), &q.tokens()),
            "{} tokens",
            q.tokens().len()
        );
        assert!(!q.contains(&q));
    }
}

/// Containment gives up with `false` (the safe answer) once its search passes
/// `MAX_CONTAINMENT_STATES`: `*a` followed by n `?` needs 2^n subsets of its own positions to
/// decide that it contains itself.
#[test]
fn containment_gives_up_safely_past_its_state_budget() {
    let p = |n: usize| Pattern::parse(&format!("*a{}", "?".repeat(n))).unwrap();
    let small = p(8);
    assert!(general::contains(&small.tokens(), &small.tokens()));
    let big = p(18);
    assert!(!general::contains(&big.tokens(), &big.tokens()));
}
