//! Filesystem paths as a tool's server resolves them, so that two spellings of one file are one
//! resource and two files are two.
//!
//! A tool whose effects name files through its input (`fs:{path}`) may take paths relative to
//! something only its server knows: the filesystem MCP server resolves `notes.md` against its
//! allowed directories and `~/x` against the home directory, and follows symbolic links. A
//! [`PathRules`] says how, for the fields of the input that hold paths; the kernel rewrites
//! those fields before the tool's resources are templated (the handler still receives the input
//! as it came: the server resolves it itself). A manifest carries its rules in
//! `metadata.sluice.paths` ([`PathRules::from_metadata`]).

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

/// How many symbolic links one path may pass through before it counts as a loop (Linux's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// `path` made absolute against `root` and normalized lexically (`.` dropped, `..` resolved,
/// never above `/`).
pub fn lexical_absolute(root: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        root.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The file the OS would touch for the absolute `path`: every symbolic link that exists along
/// it followed (the last component's too, a dangling one included), `..` taken physically
/// after a link and lexically below what does not exist. After 40 links (Linux's
/// `MAXSYMLINKS`) the rest is taken as spelled (the OS then refuses the loop when the file is
/// opened).
pub fn resolve_links(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    // The components still to walk, last first.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut links = 0;
    let mut exists = true;
    while let Some(c) = pending.pop() {
        if c == ".." {
            out.pop();
            continue;
        }
        if c == "." {
            continue;
        }
        out.push(&c);
        if !exists {
            continue;
        }
        match std::fs::symlink_metadata(&out) {
            Ok(m) if m.file_type().is_symlink() && links < MAX_LINKS => {
                links += 1;
                let Ok(target) = std::fs::read_link(&out) else {
                    continue;
                };
                out.pop();
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_components(&mut pending, &target);
            }
            Ok(_) => {}
            Err(_) => exists = false,
        }
    }
    out
}

/// Pushes `path`'s components onto `pending` so that its first component is popped first.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

/// How a tool's server turns the paths in its input into files.
///
/// - `~` and `~/…` are the home directory, when [`PathRules::home`] is set;
/// - an absolute path is itself;
/// - a relative path, with [`PathRules::roots`] (the filesystem server's allowed directories),
///   is joined to the first root under which it stays, else to the first root; without roots,
///   it is joined to [`PathRules::base`] (the server's working directory); with neither, it
///   could be any file, and becomes `*`;
/// - `.` and `..` are resolved, and every symbolic link that exists along the path on this
///   machine is followed ([`resolve_links`]), as far as Sluice can see: a server on another
///   machine sees its own files.
///
/// The result is the path's text with `*`, `?`, `\`, `{`, `}` left as they are: the resource
/// template escapes them, as it does any value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PathRules {
    /// The input fields that hold a path or an array of paths (top-level names).
    pub fields: Vec<String>,
    /// The directories the server confines itself to, in its order, links followed.
    pub roots: Vec<PathBuf>,
    /// What a relative path is relative to when there are no roots.
    pub base: Option<PathBuf>,
    /// The home directory `~` names.
    pub home: Option<PathBuf>,
}

impl PathRules {
    /// Rules for these input fields, with no root, base or home yet.
    pub fn new(fields: impl IntoIterator<Item = impl Into<String>>) -> Self {
        PathRules {
            fields: fields.into_iter().map(Into::into).collect(),
            ..PathRules::default()
        }
    }

    /// These rules with these roots (made absolute and lexically normal; links followed).
    pub fn with_roots(mut self, roots: impl IntoIterator<Item = PathBuf>) -> Self {
        self.roots = roots
            .into_iter()
            .map(|r| resolve_links(&lexical_absolute(Path::new("/"), &r)))
            .collect();
        self
    }

    /// These rules with this base directory for relative paths.
    pub fn with_base(mut self, base: impl Into<PathBuf>) -> Self {
        self.base = Some(base.into());
        self
    }

    /// These rules with this home directory for `~`.
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Reads the rules from a manifest's `metadata` (its `sluice.paths` member:
    /// `{"fields": [..], "roots": [..], "base": "..", "home": ".."}`, every member but
    /// `fields` optional). `Ok(None)` when there is none; `Err` names the member that is wrong.
    pub fn from_metadata(metadata: Option<&Map<String, Value>>) -> Result<Option<Self>, String> {
        let Some(rules) = metadata
            .and_then(|m| m.get("sluice"))
            .and_then(|s| s.get("paths"))
        else {
            return Ok(None);
        };
        Self::from_value(rules).map(Some)
    }

    /// Reads rules from their JSON form (see [`PathRules::from_metadata`]); `Err` names the
    /// member that is wrong.
    pub fn from_value(rules: &Value) -> Result<Self, String> {
        let Value::Object(o) = rules else {
            return Err("must be an object with `fields` (and `roots`, `base`, `home`)".into());
        };
        let strings = |key: &str| -> Result<Vec<String>, String> {
            match o.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| match v {
                        Value::String(s) if !s.is_empty() => Ok(s.clone()),
                        _ => Err(format!("`{key}` must be an array of non-empty strings")),
                    })
                    .collect(),
                Some(_) => Err(format!("`{key}` must be an array of non-empty strings")),
            }
        };
        let dir = |key: &str| -> Result<Option<PathBuf>, String> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if Path::new(s).is_absolute() => Ok(Some(s.into())),
                Some(_) => Err(format!("`{key}` must be an absolute path")),
            }
        };
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "fields" | "roots" | "base" | "home"))
        {
            return Err(format!(
                "`{k}` is not a member (`fields`, `roots`, `base`, `home`)"
            ));
        }
        let fields = strings("fields")?;
        if fields.is_empty() {
            return Err("`fields` must name at least one input field".into());
        }
        let roots = strings("roots")?;
        if let Some(r) = roots.iter().find(|r| !Path::new(r).is_absolute()) {
            return Err(format!(
                "`roots` holds `{r}`, which is not an absolute path"
            ));
        }
        Ok(PathRules {
            fields,
            roots: roots.into_iter().map(PathBuf::from).collect(),
            base: dir("base")?,
            home: dir("home")?,
        })
    }

    /// The JSON form of the rules (what [`PathRules::from_value`] reads).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("fields".into(), self.fields.clone().into());
        let text = |p: &PathBuf| Value::String(p.to_string_lossy().into_owned());
        if !self.roots.is_empty() {
            o.insert(
                "roots".into(),
                Value::Array(self.roots.iter().map(text).collect()),
            );
        }
        if let Some(b) = &self.base {
            o.insert("base".into(), text(b));
        }
        if let Some(h) = &self.home {
            o.insert("home".into(), text(h));
        }
        Value::Object(o)
    }

    /// The file `raw` names, as the server would resolve it (see [`PathRules`]); `None` when
    /// it could be any file.
    pub fn resolve(&self, raw: &str) -> Option<PathBuf> {
        let expanded: PathBuf = match (&self.home, raw.strip_prefix('~')) {
            (Some(home), Some("")) => home.clone(),
            (Some(home), Some(rest)) if rest.starts_with('/') => {
                home.join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(raw),
        };
        let absolute = if expanded.is_absolute() {
            lexical_absolute(Path::new("/"), &expanded)
        } else if let Some(first) = self.roots.first() {
            self.roots
                .iter()
                .map(|r| lexical_absolute(r, &expanded))
                .find(|c| self.roots.iter().any(|r| c.starts_with(r)))
                .unwrap_or_else(|| lexical_absolute(first, &expanded))
        } else {
            lexical_absolute(self.base.as_deref()?, &expanded)
        };
        Some(resolve_links(&absolute))
    }

    /// `input` with each path field resolved ([`PathRules::resolve`]). A path that could be any
    /// file is made `null` (in an array, that element), which a resource template takes as `*`. The handler's input is not this one: it gets the call's own.
    pub fn rewrite(&self, input: &Value) -> Value {
        let mut out = input.clone();
        let Some(o) = out.as_object_mut() else {
            return out;
        };
        let text = |s: &str| {
            self.resolve(s).map_or(Value::Null, |p| {
                Value::String(p.to_string_lossy().into_owned())
            })
        };
        for f in &self.fields {
            let Some(v) = o.get_mut(f) else { continue };
            let resolved = match v {
                Value::String(s) => text(s),
                Value::Array(items) => Value::Array(
                    items
                        .iter()
                        .map(|i| i.as_str().map_or_else(|| i.clone(), text))
                        .collect(),
                ),
                _ => continue,
            };
            *v = resolved;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_resolve_as_the_server_does() {
        let rules = PathRules::new(["path", "paths"])
            .with_roots([PathBuf::from("/srv/a"), PathBuf::from("/srv/b")])
            .with_home("/home/u");
        let r = |s: &str| rules.resolve(s).map(|p| p.display().to_string());
        assert_eq!(r("x.txt").as_deref(), Some("/srv/a/x.txt"));
        assert_eq!(r("./d/../x.txt").as_deref(), Some("/srv/a/x.txt"));
        // Relative, leaving the first root but inside the second: the server takes the second.
        assert_eq!(r("../b/y").as_deref(), Some("/srv/b/y"));
        // Leaving every root: joined to the first (the server then refuses it).
        assert_eq!(r("../../etc/passwd").as_deref(), Some("/etc/passwd"));
        assert_eq!(r("~/notes").as_deref(), Some("/home/u/notes"));
        assert_eq!(r("~").as_deref(), Some("/home/u"));
        assert_eq!(r("~other/x").as_deref(), Some("/srv/a/~other/x"));
        assert_eq!(r("/abs//z/./q").as_deref(), Some("/abs/z/q"));
        let base = PathRules::new(["repo"]).with_base("/work");
        assert_eq!(base.resolve("r").unwrap(), PathBuf::from("/work/r"));
        assert_eq!(PathRules::new(["p"]).resolve("rel"), None);
        assert_eq!(
            PathRules::new(["p"]).resolve("/x/y"),
            Some(PathBuf::from("/x/y"))
        );
    }

    #[test]
    fn rewrite_touches_the_path_fields_only() {
        let rules = PathRules::new(["path", "paths"]).with_base("/w");
        let out = rules.rewrite(&json!({"path": "a", "paths": ["b", 3], "other": "c"}));
        assert_eq!(
            out,
            json!({"path": "/w/a", "paths": ["/w/b", 3], "other": "c"})
        );
        let unknown =
            PathRules::new(["path", "paths"]).rewrite(&json!({"path": "a", "paths": ["/b", "c"]}));
        assert_eq!(unknown, json!({"path": null, "paths": ["/b", null]}));
    }

    #[test]
    fn rules_read_back_what_they_write_and_name_what_is_wrong() {
        let rules = PathRules::new(["path"])
            .with_roots([PathBuf::from("/srv")])
            .with_home("/h");
        assert_eq!(PathRules::from_value(&rules.to_value()).unwrap(), rules);
        let err = |v: Value| PathRules::from_value(&v).unwrap_err();
        assert!(err(json!({"fields": []})).contains("`fields`"));
        assert!(err(json!({"fields": ["p"], "roots": ["rel"]})).contains("`rel`"));
        assert!(err(json!({"fields": ["p"], "base": "rel"})).contains("`base`"));
        assert!(err(json!({"fields": ["p"], "root": []})).contains("`root`"));
        let meta: Map<String, Value> =
            serde_json::from_value(json!({"sluice": {"paths": {"fields": ["p"]}}})).unwrap();
        assert!(PathRules::from_metadata(Some(&meta)).unwrap().is_some());
        assert_eq!(PathRules::from_metadata(None), Ok(None));
    }
}
