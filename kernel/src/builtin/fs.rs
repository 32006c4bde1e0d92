//! `sluice.fs.read` and `sluice.fs.write`: files under a root, named by the file the OS touches.
//!
//! One rule, held everywhere: **the resource of an fs access is the file the operating system
//! will touch.** A call's `path` is made absolute against its root, `.` and `..` are resolved,
//! and then every symbolic link that exists along it is followed, the last component included
//! (a dangling link is followed to the file it would create; what does not exist yet is resolved
//! through its existing parent). This is computed once, when the call is prepared, and written
//! back into the call's input: the policy judges that path, the conflict graph orders it,
//! provenance records it, and the handler writes there and nowhere else. So `alias/keep.txt`
//! with `alias -> protected` *is* `protected/keep.txt` to a deny rule, and a write of
//! `link.txt -> target.txt` conflicts with a write of `target.txt`.
//!
//! A path is shown under the root as it was configured (a root reached through a symbolic link
//! keeps the operator's spelling, so policies written against it apply); a path whose target
//! is outside the root keeps its real absolute spelling, and the handler refuses it with
//! `path-escapes-root`.
//!
//! Between that check and the write, another process could swap a directory for a link. The
//! handler therefore opens the file through a [`cap_std::fs::Dir`] handle on the root: every
//! path below it is resolved by the OS beneath that directory (on Linux, `openat2` with
//! `RESOLVE_BENEATH`; elsewhere cap-std walks the path one component at a time), so a link
//! swapped in at the last moment cannot lead outside the root, whatever it points to.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde_json::{json, Value};

use super::manifest::manifest;
pub use crate::access::{lexical_absolute, resolve_links};
use crate::error::{ErrorCode, Result};
use crate::model::ManifestSource;
use crate::transport::{handler, Handler, TenantScope, Tool, ToolContext, ToolError};

/// Whether `tenant` can name a directory of its own: one path component of letters, digits,
/// `.`, `_` and `-`, not starting with `.` (so never `.` or `..`), at most 255 bytes.
pub fn is_directory_name(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant.len() <= 255
        && !tenant.starts_with('.')
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `tenant`'s root under `dir` with a root per tenant: `dir/<tenant>`, or `None` when the
/// tenant's name cannot be a directory's (see [`is_directory_name`]).
pub fn tenant_root(dir: &Path, tenant: &str) -> Option<PathBuf> {
    is_directory_name(tenant).then(|| lexical_absolute(dir, Path::new(tenant)))
}

/// A tenant's root: as configured (how paths under it are shown) and as the OS finds it.
#[derive(Debug, Clone)]
struct Root {
    shown: PathBuf,
    real: PathBuf,
}

impl Root {
    /// The canonical absolute path of `raw` (see the module docs): under [`Root::shown`] when
    /// its file is inside the root, else the file's real absolute path.
    fn canonical(&self, raw: &str) -> PathBuf {
        let lexical = lexical_absolute(&self.shown, Path::new(raw));
        let start = match lexical.strip_prefix(&self.shown) {
            Ok(rel) => self.real.join(rel),
            Err(_) => lexical,
        };
        let resolved = resolve_links(&start);
        match resolved.strip_prefix(&self.real) {
            Ok(rel) => self.shown.join(rel),
            Err(_) => resolved,
        }
    }

    /// The part of the canonical `path` below the root, or `None` when it names no file
    /// inside it (outside, or the root itself).
    fn inside<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        path.strip_prefix(&self.shown)
            .ok()
            .filter(|rel| !rel.as_os_str().is_empty())
    }
}

/// Where the fs tools are confined: one root, or `base/<tenant>` for each tenant.
#[derive(Debug)]
pub(super) struct Roots {
    /// The root (or the folder of the tenants' roots) as configured, made absolute.
    base: PathBuf,
    /// `base` with its links followed, once, when the tools were made.
    real_base: PathBuf,
    per_tenant: bool,
}

impl Roots {
    pub(super) fn new(root: &Path, per_tenant: bool) -> Self {
        let base = lexical_absolute(root, Path::new("."));
        let real_base = resolve_links(&base);
        Roots {
            base,
            real_base,
            per_tenant,
        }
    }

    /// The root of `tenant`'s calls, or why it has none.
    fn of(&self, tenant: &str) -> Result<Root, ToolError> {
        if !self.per_tenant {
            return Ok(Root {
                shown: self.base.clone(),
                real: self.real_base.clone(),
            });
        }
        if !is_directory_name(tenant) {
            return Err(ToolError::new(
                ErrorCode::PathEscapesRoot,
                format!(
                    "the tenant `{tenant}` has no root under `{}`: with a root per tenant, a \
                     tenant's name must be a directory name (letters, digits, `.`, `_`, `-`, not \
                     starting with `.`)",
                    self.base.display()
                ),
            ));
        }
        Ok(Root {
            shown: self.base.join(tenant),
            real: self.real_base.join(tenant),
        })
    }

    /// The call's input with `path` made canonical for `tenant` (a tenant without a root —
    /// its calls fail — resolves against a folder no tenant's root can be, since no tenant
    /// directory starts with `.`).
    fn canonical_input(&self, tenant: &str, input: &Value) -> Value {
        let mut v = input.clone();
        if let Some(p) = input.get("path").and_then(Value::as_str) {
            let root = self.of(tenant).unwrap_or_else(|_| Root {
                shown: self.base.join(".no-root"),
                real: self.real_base.join(".no-root"),
            });
            let canonical = root.canonical(p).to_string_lossy().into_owned();
            if let Some(o) = v.as_object_mut() {
                o.insert("path".into(), Value::String(canonical));
            }
        }
        v
    }

    fn scope(&self) -> TenantScope {
        if self.per_tenant {
            TenantScope::PerTenant
        } else {
            TenantScope::Shared
        }
    }

    /// Opens `root` as a directory handle, made first when it is a tenant's (its first write).
    /// A tenant's root that is a symbolic link is refused: it would lead into another's.
    fn open(&self, root: &Root, create: bool) -> Result<Dir, ToolError> {
        let io = |what: &str, e: std::io::Error| {
            ToolError::new(
                ErrorCode::Io,
                format!("cannot {what} the root `{}`: {e}", root.shown.display()),
            )
        };
        if !self.per_tenant {
            return Dir::open_ambient_dir(&root.real, ambient_authority())
                .map_err(|e| io("open", e));
        }
        if create {
            std::fs::create_dir_all(&self.real_base).map_err(|e| io("make", e))?;
            let base = Dir::open_ambient_dir(&self.real_base, ambient_authority())
                .map_err(|e| io("open", e))?;
            let name = root.real.file_name().unwrap_or_default();
            match base.create_dir(name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("make", e)),
            }
        }
        let dir =
            Dir::open_ambient_dir(&root.real, ambient_authority()).map_err(|e| io("open", e))?;
        // The handle must be the directory entry itself, not a link's target.
        let entry = std::fs::symlink_metadata(&root.real).map_err(|e| io("open", e))?;
        let opened = dir.dir_metadata().map_err(|e| io("open", e))?;
        if entry.file_type().is_symlink() || !same_file(&entry, &opened) {
            return Err(ToolError::new(
                ErrorCode::PathEscapesRoot,
                format!(
                    "the root `{}` is a symbolic link: a tenant's root must be a directory of \
                     its own",
                    root.shown.display()
                ),
            ));
        }
        Ok(dir)
    }
}

#[cfg(unix)]
fn same_file(entry: &std::fs::Metadata, opened: &cap_std::fs::Metadata) -> bool {
    use cap_std::fs::MetadataExt as _;
    use std::os::unix::fs::MetadataExt as _;
    entry.dev() == opened.dev() && entry.ino() == opened.ino()
}

#[cfg(not(unix))]
fn same_file(_entry: &std::fs::Metadata, _opened: &cap_std::fs::Metadata) -> bool {
    true
}

/// The call's path checked against its root: the relative path to open beneath the root's
/// handle, or `path-escapes-root`.
fn confined(root: &Root, input: &Value) -> Result<(PathBuf, PathBuf), ToolError> {
    let raw = input
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // The kernel hands over the canonical path, resolved once when the call was prepared: it
    // is taken as it is (resolving it again could follow a link swapped in since, to a file
    // other than the one the policy judged). Whatever a link does now, the open beneath the
    // root's handle cannot leave the root.
    let path = lexical_absolute(&root.shown, Path::new(raw));
    match root.inside(&path) {
        Some(rel) => Ok((path.clone(), rel.to_owned())),
        None => Err(escape(raw, root)),
    }
}

fn escape(raw: &str, root: &Root) -> ToolError {
    ToolError::new(
        ErrorCode::PathEscapesRoot,
        format!(
            "`{raw}` is outside the root `{}` (symbolic links followed): the fs tools reach only \
             files under it",
            root.shown.display()
        ),
    )
}

/// An error of an open beneath the root: `path-escapes-root` when the OS refused to leave it
/// (a link swapped in since the call was prepared), else `io`.
fn beneath_error(what: &str, raw: &str, path: &Path, root: &Root, e: std::io::Error) -> ToolError {
    if root.inside(&root.canonical(raw)).is_none() {
        return escape(raw, root);
    }
    ToolError::new(
        ErrorCode::Io,
        format!("cannot {what} `{}`: {e}", path.display()),
    )
}

/// Runs blocking file work off the runtime's worker threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ToolError::new(
            ErrorCode::Internal,
            format!("the file task failed: {e}"),
        ))
    })
}

/// What an fs tool does with its file, given the root's handle, the path beneath it and the
/// input: the output beside `path`.
type FileOp = fn(&Dir, &Path, &Value) -> std::io::Result<Value>;

/// The handler of an fs tool: the call's path confined to its tenant's root (made first when
/// `create`, for a write), then `op` on it beneath the root's handle; the output is `{"path",
/// ...op's}`, `path-escapes-root` or `io` naming the path and `what` was tried.
fn beneath(roots: Arc<Roots>, what: &'static str, create: bool, op: FileOp) -> Arc<dyn Handler> {
    handler(move |ctx: ToolContext, input: Value| {
        let roots = roots.clone();
        let root = roots.of(ctx.tenant());
        blocking(move || {
            let root = root?;
            let raw = input.get("path").and_then(Value::as_str).unwrap_or("");
            let (path, rel) = confined(&root, &input)?;
            let dir = roots.open(&root, create)?;
            let mut out =
                op(&dir, &rel, &input).map_err(|e| beneath_error(what, raw, &path, &root, e))?;
            if let Some(o) = out.as_object_mut() {
                o.insert(
                    "path".into(),
                    Value::String(path.to_string_lossy().into_owned()),
                );
            }
            Ok(out)
        })
    })
}

/// `sluice.fs.read` and `sluice.fs.write`, confined to the tenant's root; their resources are
/// the files the OS touches (see the module docs).
pub(super) fn tools(roots: Arc<Roots>) -> Result<Vec<Tool>> {
    let src = ManifestSource::built_in;
    let mut out = Vec::new();
    let canonical = {
        let roots = roots.clone();
        move |tenant: &str, input: &Value| roots.canonical_input(tenant, input)
    };
    let path_schema = json!({"type": "string", "minLength": 1});

    out.push(
        Tool::new(
            manifest(json!({
                "id": "sluice.fs.read", "version": "1.0.0",
                "description": "Read the UTF-8 text file at `path` (relative to the root, or \
                                absolute inside it).",
                "input": {"type": "object", "required": ["path"], "additionalProperties": false,
                          "properties": {"path": path_schema}},
                "output": {"type": "object", "required": ["path", "content"]},
                "mutating": false,
                "effects": [{"kind": "reads", "resource": "fs:{path}"}]
            }))?,
            src(),
            Some(beneath(roots.clone(), "read", false, |dir, rel, _input| {
                Ok(json!({"content": dir.read_to_string(rel)?}))
            })),
        )?
        .with_canonical_input(canonical.clone())
        .with_scope(roots.scope()),
    );

    out.push(
        Tool::new(
            manifest(json!({
                "id": "sluice.fs.write", "version": "1.0.0",
                "description": "Write `content` to the file at `path` (relative to the root, or \
                                absolute inside it), creating or replacing it.",
                "input": {"type": "object", "required": ["path", "content"],
                          "additionalProperties": false,
                          "properties": {"path": path_schema, "content": {"type": "string"}}},
                "output": {"type": "object", "required": ["path", "bytes"]},
                "mutating": true,
                "effects": [{"kind": "writes", "resource": "fs:{path}"}]
            }))?,
            src(),
            Some(beneath(roots.clone(), "write", true, |dir, rel, input| {
                let content = input.get("content").and_then(Value::as_str).unwrap_or("");
                dir.write(rel, content)?;
                Ok(json!({"bytes": content.len()}))
            })),
        )?
        .with_canonical_input(canonical)
        .with_scope(roots.scope()),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_followed_as_far_as_they_exist() {
        let dir = std::env::temp_dir().join(format!("sluice-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("alias")).unwrap();
        std::os::unix::fs::symlink("sub/../missing.txt", dir.join("real/rel")).unwrap();
        std::os::unix::fs::symlink("/nowhere/out.txt", dir.join("real/dangling")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("real/loop")).unwrap();
        let real = resolve_links(&dir);
        assert_eq!(
            resolve_links(&dir.join("alias/a.txt")),
            real.join("real/a.txt")
        );
        assert_eq!(
            resolve_links(&dir.join("alias/rel")),
            real.join("real/missing.txt")
        );
        assert_eq!(
            resolve_links(&dir.join("real/dangling")),
            PathBuf::from("/nowhere/out.txt")
        );
        assert_eq!(
            resolve_links(&dir.join("alias/new/deeper/x")),
            real.join("real/new/deeper/x")
        );
        // A loop stops after MAX_LINKS links instead of spinning.
        assert_eq!(
            resolve_links(&dir.join("real/loop")),
            real.join("real/loop")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
