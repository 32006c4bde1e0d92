//! Property tests of access computation: the `fs:` normalizer against a plain reference for
//! literal paths (its fast path included), idempotence, and templating fast path against the
//! general expansion.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use proptest::prelude::*;
use serde_json::json;
use sluice_kernel::access::{Normalizers, Pattern, ResourceTemplate};

/// POSIX-style normpath for absolute or relative literal paths, as the normalizer documents it.
fn normpath(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut segs: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => match segs.last() {
                Some(&"..") | None if !absolute => segs.push(".."),
                None => {}
                Some(_) => {
                    segs.pop();
                }
            },
            s => segs.push(s),
        }
    }
    let joined = segs.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

proptest! {
    #[test]
    fn fs_paths_normalize_like_normpath(path in "[/a.]{1,12}") {
        let n = Normalizers::default();
        let p = Pattern::literal(&format!("fs:{path}"));
        let out = n.apply(p);
        let expected = format!("fs:{}", normpath(&path));
        prop_assert_eq!(out.as_exact(), Some(expected.as_str()), "{}", path);
        prop_assert_eq!(n.apply(out.clone()), out);
    }

    #[test]
    fn normalizing_is_idempotent_for_patterns(path in "[/a.*?]{1,12}") {
        let n = Normalizers::default();
        let once = n.apply(Pattern::parse(&format!("fs:{path}")).unwrap());
        prop_assert_eq!(n.apply(once.clone()), once);
    }

    #[test]
    fn the_one_placeholder_fast_path_agrees_with_the_general_expansion(v in "[a*?\\\\{}é/]{0,8}", head in "[a-z:/]{0,6}") {
        // `{v}{x}` takes the general path (two placeholders, `x` absent -> `*`); strip the star.
        let fast = ResourceTemplate::parse(&format!("{head}{{v}}")).unwrap().expand(&json!({"v": v}));
        let general = ResourceTemplate::parse(&format!("{head}{{v}}{{x}}")).unwrap().expand(&json!({"v": v}));
        prop_assert_eq!(fast.len(), 1);
        prop_assert_eq!(format!("{}*", fast[0]), general[0].clone());
    }

    /// Planning expands templates straight into tokens; the texts, parsed back, are the
    /// reference.
    #[test]
    fn expanding_into_patterns_agrees_with_parsing_the_texts(
        template in "([a*?/:]|\\\\[*?{}]|\\{[abx]\\}){0,8}",
        a in prop_oneof![
            "[a*?\\\\{}é/]{0,6}".prop_map(|s| json!(s)),
            (0u32..100).prop_map(|n| json!(n)),
            proptest::collection::vec("[a*]{0,3}", 0..3).prop_map(|v| json!(v)),
            Just(json!(null)),
            Just(json!({"k": 1})),
        ],
        b in "[a?]{0,3}",
    ) {
        let t = ResourceTemplate::parse(&template).unwrap();
        let input = json!({"a": a, "b": b});
        let want: Vec<Pattern> = t.expand(&input).iter().map(|s| Pattern::parse(s).unwrap()).collect();
        let mut got = Vec::new();
        t.expand_patterns(&input, |p| got.push(p));
        prop_assert_eq!(got, want, "{} with {}", template, input);
    }
}
