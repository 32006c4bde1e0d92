//! The tool registry: manifests, compiled once, with their handlers.
//!
//! Takes in: manifests (as JSON from [`crate::model::read_manifests`], or parsed) and, for native tools, their
//! handlers. Hands on: [`Tool`]s by id — each with its input and output schemas compiled once,
//! its [`AccessPlan`], and where it came from — for planning and dispatch. Registration refuses an
//! invalid manifest (with every error and its JSON pointer) and a second tool with an id already
//! taken (naming both places).

use hashbrown::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::handler::Handler;
use crate::access::{Access, AccessPlan, Normalizers};
use crate::error::{Diagnostic, Error, Result};
use crate::model::{self, compile_schema, Manifest, ManifestSource, RawManifest, ValidateOptions};

/// A registered tool.
pub struct Tool {
    manifest: Arc<Manifest>,
    source: ManifestSource,
    input_schema: jsonschema::Validator,
    output_schema: jsonschema::Validator,
    accesses: AccessPlan,
    handler: Option<Arc<dyn Handler>>,
    access_input: Option<AccessInput>,
}

/// Rewrites a call's input before its resources are templated (the fs tools make `path`
/// absolute against their root, so that two spellings of one file are one resource).
pub type AccessInput = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("id", &self.manifest.id.as_str())
            .field("source", &self.source.to_string())
            .field("native_handler", &self.handler.is_some())
            .finish()
    }
}

impl Tool {
    /// Compiles a parsed manifest. Checks the rules beyond the schema, as [`model::validate`]
    /// does (lints are not errors).
    pub fn new(
        manifest: Manifest,
        source: ManifestSource,
        handler: Option<Arc<dyn Handler>>,
    ) -> Result<Self> {
        let report = model::validate(&manifest.to_value(), ValidateOptions::default());
        if !report.is_valid() {
            return Err(invalid(&source, report.errors));
        }
        Self::compile(manifest, source, handler)
    }

    /// Compiles a manifest already validated.
    fn compile(
        manifest: Manifest,
        source: ManifestSource,
        handler: Option<Arc<dyn Handler>>,
    ) -> Result<Self> {
        let schema = |which: &str, s| {
            compile_schema(&manifest, s)
                .map_err(|why| invalid(&source, vec![Diagnostic::new(format!("/{which}"), why)]))
        };
        let input_schema = schema("input", &manifest.input)?;
        let output_schema = schema("output", &manifest.output)?;
        let accesses = AccessPlan::compile(&manifest).map_err(|e| {
            invalid(
                &source,
                vec![Diagnostic::new(
                    format!("/effects/{}/resource", e.index),
                    e.to_string(),
                )],
            )
        })?;
        Ok(Tool {
            manifest: Arc::new(manifest),
            source,
            input_schema,
            output_schema,
            accesses,
            handler,
            access_input: None,
        })
    }

    /// Sets the rewrite applied to a call's input before its resources are templated.
    pub fn with_access_input(
        mut self,
        f: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.access_input = Some(Arc::new(f));
        self
    }

    /// The accesses of a call of this tool with `input`.
    pub fn accesses(&self, input: &Value, normalizers: &Normalizers) -> Vec<Access> {
        match &self.access_input {
            Some(view) => self.accesses.accesses(&view(input), normalizers),
            None => self.accesses.accesses(input, normalizers),
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }

    /// The tool id.
    pub fn id(&self) -> &str {
        self.manifest.id.as_str()
    }

    /// Where the manifest came from.
    pub fn source(&self) -> &ManifestSource {
        &self.source
    }

    /// How to compute a call's accesses.
    pub fn access_plan(&self) -> &AccessPlan {
        &self.accesses
    }

    /// The native handler, if one is registered.
    pub fn handler(&self) -> Option<&Arc<dyn Handler>> {
        self.handler.as_ref()
    }

    /// Checks `input` against the input schema; on failure, the JSON pointer of the first
    /// failing value and what is wrong with it.
    pub fn check_input(&self, input: &Value) -> std::result::Result<(), Diagnostic> {
        first_error(&self.input_schema, input)
    }

    /// Checks `output` against the output schema, as [`Tool::check_input`] does.
    pub fn check_output(&self, output: &Value) -> std::result::Result<(), Diagnostic> {
        first_error(&self.output_schema, output)
    }
}

fn first_error(
    schema: &jsonschema::Validator,
    value: &Value,
) -> std::result::Result<(), Diagnostic> {
    if schema.is_valid(value) {
        return Ok(());
    }
    match schema.iter_errors(value).next() {
        Some(e) => Err(Diagnostic::new(
            e.instance_path().as_str().to_owned(),
            e.to_string(),
        )),
        None => Ok(()),
    }
}

fn invalid(source: &ManifestSource, errors: Vec<Diagnostic>) -> Error {
    Error::InvalidManifest {
        source_name: source.to_string(),
        errors: errors
            .into_iter()
            .map(|d| Diagnostic::new(format!("{}{}", source.pointer, d.pointer), d.message))
            .collect(),
    }
}

/// The registered tools, by id, in registration order.
#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: HashMap<String, Arc<Tool>>,
    order: Vec<String>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a compiled tool; refuses an id already taken, naming both places.
    pub fn insert(&mut self, tool: Tool) -> Result<()> {
        self.insert_arc(Arc::new(tool))
    }

    /// Registers a shared compiled tool, as [`ToolRegistry::insert`] does.
    pub fn insert_arc(&mut self, tool: Arc<Tool>) -> Result<()> {
        let id = tool.id().to_owned();
        if let Some(existing) = self.tools.get(&id) {
            return Err(Error::DuplicateTool {
                id,
                first: existing.source().to_string(),
                second: tool.source().to_string(),
            });
        }
        self.order.push(id.clone());
        self.tools.insert(id, tool);
        Ok(())
    }

    /// Validates and registers a manifest read from a file (no handler).
    pub fn insert_raw(&mut self, raw: RawManifest) -> Result<()> {
        let report = model::validate(&raw.value, ValidateOptions::default());
        match report.manifest {
            Some(m) if report.errors.is_empty() => self.insert(Tool::compile(m, raw.source, None)?),
            _ => Err(invalid(&raw.source, report.errors)),
        }
    }

    /// The tool with this id.
    pub fn get(&self, id: &str) -> Option<&Arc<Tool>> {
        self.tools.get(id)
    }

    /// The tools in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.order.iter().filter_map(|id| self.tools.get(id))
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}
