//! `sluice validate`: judge manifests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};
use sluice::kernel::access::PathRules;
use sluice::kernel::builtin::{self, BuiltinConfig};
use sluice::kernel::model::{
    read_manifests, validate, Diagnostic, ManifestSource, ValidateOptions,
};
use sluice::kernel::transport::Version;

use super::output::TextOrJson;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Turn what production servers SHOULD refuse (a `filesystem` codeArtifactRef) into errors.
    #[arg(long)]
    production: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: TextOrJson,
    /// Manifest files, directories of *.json manifests, or Kindgi pack indexes (each tool entry
    /// judged as a manifest).
    #[arg(required_unless_present_any = ["pack", "effects"])]
    paths: Vec<PathBuf>,
    /// A Kindgi pack's index to judge, `INDEX` or `INDEX=URL` as `run` takes it (the service is
    /// not contacted; repeatable).
    #[arg(long = "pack", value_name = "INDEX[=URL]")]
    pack: Vec<String>,
    /// An effects overlay (JSON or TOML) to check: its shape and effects, and that each tool it
    /// names exists among the manifests given here that were imported from its server
    /// (repeatable). See docs/mcp-effects.md.
    #[arg(long = "effects", value_name = "FILE")]
    effects: Vec<PathBuf>,
}

struct Entry {
    source: ManifestSource,
    id: Option<String>,
    version: Option<Version>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = ValidateOptions::default().with_production(args.production);
    let mut entries: Vec<Entry> = Vec::new();
    let mut paths = args.paths.clone();
    for p in &args.pack {
        paths.push(super::common::PackSpec::parse(p)?.index);
    }
    let mut manifests: Vec<Value> = Vec::new();
    for path in &paths {
        let raws = match read_manifests(path) {
            Ok(r) => r,
            Err(sluice::kernel::Error::NotJson { path, message, .. }) => {
                entries.push(Entry {
                    source: ManifestSource {
                        path,
                        pointer: String::new(),
                    },
                    id: None,
                    version: None,
                    errors: vec![Diagnostic::new("", format!("not JSON: {message}"))],
                    warnings: Vec::new(),
                });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for raw in raws {
            let mut report = validate(&raw.value, options);
            if let Err(why) =
                PathRules::from_metadata(raw.value.get("metadata").and_then(Value::as_object))
            {
                report
                    .errors
                    .push(Diagnostic::new("/metadata/sluice/paths", why));
            }
            let prefix = |d: Diagnostic| {
                Diagnostic::new(format!("{}{}", raw.source.pointer, d.pointer), d.message)
            };
            entries.push(Entry {
                id: raw
                    .value
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                version: raw
                    .value
                    .get("version")
                    .and_then(Value::as_str)
                    .and_then(Version::parse),
                errors: report.errors.into_iter().map(prefix).collect(),
                warnings: report.warnings.into_iter().map(prefix).collect(),
                source: raw.source,
            });
            manifests.push(raw.value);
        }
    }
    flag_duplicate_ids(&mut entries);
    check_overlays(&args.effects, &mut entries, &manifests)?;

    let all_valid = entries.iter().all(|e| e.errors.is_empty());
    match args.format {
        TextOrJson::Json => {
            let manifests: Vec<Value> = entries
                .iter()
                .map(|e| {
                    json!({
                        "path": e.source.path.to_string_lossy(),
                        "id": e.id,
                        "valid": e.errors.is_empty(),
                        "errors": e.errors,
                        "warnings": e.warnings,
                    })
                })
                .collect();
            outln!(
                "{}",
                serde_json::to_string_pretty(&json!({"manifests": manifests}))?
            );
        }
        TextOrJson::Text => {
            for e in &entries {
                let verdict = if e.errors.is_empty() {
                    "valid"
                } else {
                    "INVALID"
                };
                outln!(
                    "{}  {}  {verdict}",
                    e.source,
                    e.id.as_deref().unwrap_or("(no id)")
                );
                for d in &e.errors {
                    outln!("  error   {}: {}", pointer_text(&d.pointer), d.message);
                }
                for d in &e.warnings {
                    outln!("  warning {}: {}", pointer_text(&d.pointer), d.message);
                }
            }
            let invalid = entries.iter().filter(|e| !e.errors.is_empty()).count();
            outln!(
                "{} manifest(s), {} invalid, {} warning(s)",
                entries.len(),
                invalid,
                entries.iter().map(|e| e.warnings.len()).sum::<usize>()
            );
        }
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Each overlay as an entry: not one when it cannot be read as an overlay, and an error for each
/// tool it names that the manifests imported from its server lack.
fn check_overlays(
    files: &[PathBuf],
    entries: &mut Vec<Entry>,
    manifests: &[Value],
) -> anyhow::Result<()> {
    let all: Vec<&Value> = manifests.iter().collect();
    for file in files {
        let source = ManifestSource {
            path: file.clone(),
            pointer: String::new(),
        };
        let errors = match super::adopt::read_overlay(file) {
            Ok(overlay) => super::adopt::overlay_problems(&overlay, &all)
                .into_iter()
                .map(|(pointer, why)| Diagnostic::new(pointer, why))
                .collect(),
            Err(e) if super::failure::exit_code_of(&e) == 2 => return Err(e),
            Err(e) => vec![Diagnostic::new("", super::failure::render_error(&e))],
        };
        entries.push(Entry {
            source,
            id: None,
            version: None,
            errors,
            warnings: Vec::new(),
        });
    }
    Ok(())
}

fn pointer_text(p: &str) -> &str {
    if p.is_empty() {
        "(the manifest)"
    } else {
        p
    }
}

/// The same tool (id and version) in two places gets a warning on the later one, naming the
/// first: each manifest is valid on its own (the reference SDK's corpus repeats pairs across
/// files), but one registry cannot hold both, so `plan`, `run` and `tools` refuse to load them
/// together. So does the id of a built-in tool, in any version. One id in several versions is
/// fine: a call names `id` (the highest) or `id@version`.
fn flag_duplicate_ids(entries: &mut [Entry]) {
    let mut builtins: HashMap<String, ()> = HashMap::new();
    if let Ok(tools) = builtin::tools(BuiltinConfig::default()) {
        for t in tools {
            builtins.insert(t.id().to_owned(), ());
        }
    }
    let mut first: HashMap<(String, Option<Version>), String> = HashMap::new();
    for e in entries.iter_mut() {
        let Some(id) = e.id.clone() else { continue };
        let pointer = format!("{}/id", e.source.pointer);
        if builtins.contains_key(&id) {
            e.warnings.push(Diagnostic::new(
                pointer,
                format!(
                    "the tool id `{id}` is a built-in tool's: `plan`, `run` and `tools` refuse \
                     to load it; choose another id"
                ),
            ));
            continue;
        }
        let key = (id, e.version.clone());
        match first.get(&key) {
            Some(other) => e.warnings.push(Diagnostic::new(
                pointer,
                match &key.1 {
                    Some(v) => format!(
                        "the tool `{}` version {v} is also defined at {other}: one registry \
                         cannot hold both (`plan`, `run` and `tools` refuse to load them together)",
                        key.0
                    ),
                    None => format!("the tool id `{}` is also defined at {other}", key.0),
                },
            )),
            None => {
                first.insert(key, e.source.to_string());
            }
        }
    }
}
