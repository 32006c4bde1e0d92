//! The workspace's layout, checked (docs/architecture.md draws it):
//! - the crates depend one way: the kernel on no crate of the workspace, policy and provenance on
//!   the kernel only, postgres on those two, the gateway (serve) on the kernel only, the Python
//!   package (bindings/python) on the kernel, policy and provenance, the facade and CLI on any;
//! - each kernel stage folder imports only the stages below it (`model < access < {authorize,
//!   provenance} < transport < order < run < {builtin, adapters}`, with `error` under all);
//! - in no crate (the root package too: facade, CLI) does a module file import another that
//!   imports it back, inside a folder too (a child that reaches its parent `mod.rs` for something the parent re-exports from a
//!   sibling closes a circle: it names the sibling instead).
//!
//! Paths are read from the source text: `crate::…` and `super::…` paths (and `{…}` groups after
//! them), outside comments and `#[cfg(test)]` modules (tests may reach anything).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The kernel's top-level modules, bottom first, each with the rank it may import below.
const RANKS: &[(&str, u8)] = &[
    ("error", 0),
    ("model", 1),
    ("access", 2),
    ("authorize", 3),
    ("provenance", 3),
    ("transport", 4),
    ("order", 5),
    ("run", 6),
    ("builtin", 7),
    ("adapters", 7),
];

fn src() -> PathBuf {
    crate_src("kernel")
}

/// A crate's `src` folder (`.` is the root package: the facade and the CLI).
fn crate_src(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("src")
}

/// The crates whose modules the circle check reads: every crate of the workspace (`.` is the
/// root package: the facade and the CLI).
const CRATES: &[&str] = &[
    "kernel",
    "policy",
    "provenance",
    "postgres",
    "serve",
    "bindings/python",
    ".",
];

/// Every `.rs` file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The module path of a file: `transport/mcp/session.rs` is `[transport, mcp, session]`,
/// `transport/mcp/mod.rs` is `[transport, mcp]`, `lib.rs` is `[]`.
fn module_of(file: &Path) -> Vec<String> {
    module_in(&src(), file)
}

/// The module path of a file in the crate whose source root is `root`.
fn module_in(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file that defines a module path in the crate whose source root is `root`, if one does.
fn file_in(root: &Path, module: &[String]) -> Option<PathBuf> {
    if module.is_empty() {
        return Some(root.join("lib.rs"));
    }
    let base = module.iter().fold(root.to_path_buf(), |p, m| p.join(m));
    let flat = base.with_extension("rs");
    let folder = base.join("mod.rs");
    [flat, folder].into_iter().find(|p| p.exists())
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a piece of code names from `crate::` or `super::`, as segment lists relative to
/// `base` (the module the path starts from); `{a, b::c}` groups give one path per member.
fn paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let bytes: Vec<char> = code.chars().collect();
    let inline = inline_modules(&bytes);
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let boundary = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let start = if boundary && rest.starts_with("crate::") {
            Some((Vec::new(), 7))
        } else if boundary && rest.starts_with("super::") {
            // Inside an inline `mod x { … }`, `super` is this file's own module.
            if inline.iter().any(|(a, b)| *a < i && i < *b) {
                Some((here.to_vec(), 7))
            } else {
                Some((here[..here.len().saturating_sub(1)].to_vec(), 7))
            }
        } else {
            None
        };
        let Some((mut base, skip)) = start else {
            i += 1;
            continue;
        };
        i += skip;
        // Further `super::`s.
        while bytes[i..].iter().collect::<String>().starts_with("super::") {
            base.pop();
            i += 7;
        }
        let (segments, group, end) = segments_at(&bytes, i);
        i = end;
        let mut prefix = base.clone();
        prefix.extend(segments);
        if group.is_empty() {
            out.push(prefix);
        } else {
            for member in group {
                let mut p = prefix.clone();
                p.extend(member);
                out.push(p);
            }
        }
    }
    out
}

/// The spans (from `{` to its `}`) of the inline `mod x { … }` blocks.
fn inline_modules(chars: &[char]) -> Vec<(usize, usize)> {
    let text: String = chars.iter().collect();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(k) = text[from..].find("mod ") {
        let at = from + k;
        from = at + 4;
        let name_end = text[from..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| from + e);
        if !text[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let open = name_end + text[name_end..].find('{').unwrap_or(0);
        let (mut depth, mut close) = (0i32, text.len());
        for (j, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + j;
                        break;
                    }
                }
                _ => {}
            }
        }
        // Byte offsets to char offsets (the source is ASCII around these, but be exact).
        let to_char = |b: usize| text[..b].chars().count();
        spans.push((to_char(open), to_char(close)));
    }
    spans
}

/// Reads `a::b::c` (and a trailing `::{x, y::z}` group's first-level members) at `i`.
fn segments_at(chars: &[char], mut i: usize) -> (Vec<String>, Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    loop {
        if chars.get(i) == Some(&'{') {
            return group_at(chars, i, segments);
        }
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if i > start {
            segments.push(chars[start..i].iter().collect());
        }
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            continue;
        }
        return (segments, Vec::new(), i);
    }
}

/// Reads a `{x, y::z}` group at `i` (its members' first segments).
fn group_at(
    chars: &[char],
    i: usize,
    segments: Vec<String>,
) -> (Vec<String>, Vec<Vec<String>>, usize) {
    let close = (i..chars.len())
        .find(|&j| chars[j] == '}')
        .unwrap_or(chars.len());
    let inner: String = chars[i + 1..close].iter().collect();
    let group = inner
        .split(',')
        .map(|m| {
            m.trim()
                .split("::")
                .map(|s| s.trim().split(' ').next().unwrap_or("").to_owned())
                .filter(|s| !s.is_empty() && s != "self" && s != "*")
                .take(1)
                .collect::<Vec<_>>()
        })
        .collect();
    (segments, group, close)
}

/// The file a path lands in: the deepest module file along it.
fn target(path: &[String]) -> Option<PathBuf> {
    target_in(&src(), path)
}

/// [`target`] in the crate whose source root is `root`.
fn target_in(root: &Path, path: &[String]) -> Option<PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|k| file_in(root, &path[..k]).filter(|_| k > 0 || path.is_empty()))
}

/// Every kernel file's imports of other files.
fn imports() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    imports_in(&src())
}

/// Every file's imports of other files of its crate (`root`: its source root). The binary's
/// `main.rs` is a root of its own: its `crate::` is itself, and `mod` lines declare its modules.
fn imports_in(root: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut graph = BTreeMap::new();
    for file in files(root) {
        let here = module_in(root, &file);
        let text = std::fs::read_to_string(&file).unwrap();
        let code = code(&text);
        let mut to = BTreeSet::new();
        for path in paths(&code, &here) {
            if let Some(t) = target_in(root, &path) {
                if t != file {
                    to.insert(t);
                }
            }
        }
        // A folder's mod.rs imports the children it declares.
        if file.ends_with("mod.rs") || file.ends_with("lib.rs") || file.ends_with("main.rs") {
            for line in code.lines() {
                let l = line.trim();
                if let Some(name) = l
                    .strip_prefix("pub mod ")
                    .or_else(|| l.strip_prefix("pub(crate) mod "))
                    .or_else(|| l.strip_prefix("mod "))
                    .and_then(|n| n.strip_suffix(';'))
                {
                    let mut child = here.clone();
                    child.push(name.to_owned());
                    to.extend(file_in(root, &child));
                }
            }
        }
        graph.insert(file, to);
    }
    graph
}

fn rank(file: &Path) -> Option<(String, u8)> {
    let stage = module_of(file).first()?.clone();
    RANKS
        .iter()
        .find(|(s, _)| *s == stage)
        .map(|(s, r)| (s.to_string(), *r))
}

fn short(p: &Path) -> String {
    p.strip_prefix(src()).unwrap().display().to_string()
}

#[test]
fn every_stage_imports_only_the_stages_below_it() {
    let mut wrong = Vec::new();
    for (file, to) in imports() {
        let Some((stage, r)) = rank(&file) else {
            assert!(file.ends_with("lib.rs"), "{} is in no stage", short(&file));
            continue;
        };
        for t in to {
            let Some((other, rt)) = rank(&t) else {
                wrong.push(format!("{} imports the crate root", short(&file)));
                continue;
            };
            if other != stage && rt >= r {
                wrong.push(format!(
                    "{} (stage `{stage}`) imports {} (stage `{other}`, not below it)",
                    short(&file),
                    short(&t)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layout:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_module_file_imports_one_that_imports_it_back() {
    for dir in CRATES {
        no_circle_in(&crate_src(dir));
    }
}

fn no_circle_in(root: &Path) {
    let graph = imports_in(root);
    // Depth-first search for a cycle, reporting it whole.
    fn visit(
        n: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if !state.contains_key(n) {
            if let Some(cycle) = visit(n, &graph, &mut state, &mut Vec::new()) {
                let names: Vec<String> = cycle
                    .iter()
                    .map(|p| p.strip_prefix(root).unwrap().display().to_string())
                    .collect();
                panic!(
                    "module files of {} import each other in a circle: {}",
                    root.display(),
                    names.join(" -> ")
                );
            }
        }
    }
}

/// The checker itself: it sees `crate::` and `super::` paths, groups, nested `super::super::`,
/// and skips comments and test modules.
#[test]
fn the_path_reader_sees_what_the_compiler_sees() {
    let here: Vec<String> = vec!["transport".into(), "mcp".into(), "session".into()];
    let code = code(
        "use super::{memory, sse::X};\nuse crate::model::{Manifest, McpEndpoint};\n\
         // use crate::run::Kernel;\nlet x = super::super::handler::ToolError::new();\n\
         #[cfg(test)]\nmod tests {\n use crate::builtin;\n}\n",
    );
    let got = paths(&code, &here);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        vec![
            s(&["transport", "mcp", "memory"]),
            s(&["transport", "mcp", "sse"]),
            s(&["model", "Manifest"]),
            s(&["model", "McpEndpoint"]),
            s(&["transport", "handler", "ToolError", "new"]),
        ]
    );
    assert_eq!(
        target(&s(&["transport", "handler", "ToolError"])),
        Some(src().join("transport/handler.rs"))
    );
    assert_eq!(
        target(&s(&["model", "Manifest"])),
        Some(src().join("model/mod.rs"))
    );
}

/// The workspace crates a crate's manifest depends on (not its dev-dependencies: tests may reach
/// anything).
fn workspace_deps(dir: &str) -> BTreeSet<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut section = String::new();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            section = l.to_owned();
            continue;
        }
        let runtime = section.ends_with("dependencies]") && !section.contains("dev-dependencies");
        if let Some(name) = l.split(['=', ' ', '.']).next() {
            if runtime && name.starts_with("sluice-") {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

#[test]
fn the_crates_depend_one_way() {
    let allowed: &[(&str, &[&str])] = &[
        ("kernel", &[]),
        ("policy", &["sluice-kernel"]),
        ("provenance", &["sluice-kernel"]),
        ("postgres", &["sluice-kernel", "sluice-provenance"]),
        ("serve", &["sluice-kernel"]),
        // The Python package: the kernel, with policy and provenance as the CLI has them; no
        // gateway, no database.
        (
            "bindings/python",
            &["sluice-kernel", "sluice-policy", "sluice-provenance"],
        ),
    ];
    for (dir, may) in allowed {
        let deps = workspace_deps(dir);
        let extra: Vec<&String> = deps.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(
            extra.is_empty(),
            "{dir} depends on {extra:?}; it may depend on {may:?} only (docs/architecture.md)"
        );
    }
    // The reader itself: the facade depends on every crate below it.
    let root = workspace_deps(".");
    for c in [
        "sluice-kernel",
        "sluice-policy",
        "sluice-provenance",
        "sluice-postgres",
        "sluice-serve",
    ] {
        assert!(root.contains(c), "{root:?}");
    }
}
