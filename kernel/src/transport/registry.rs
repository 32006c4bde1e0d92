//! The tool registry: manifests, compiled once, with their handlers.
//!
//! Takes in: manifests (as JSON from [`crate::model::read_manifests`], or parsed) and, for native tools, their
//! handlers. Hands on: [`Tool`]s by id — each with its input and output schemas compiled once,
//! its [`AccessPlan`], and where it came from — for planning and dispatch. One id may have several
//! versions; a call names `id` (the highest by semver precedence) or `id@version`. Registration
//! refuses an invalid manifest (with every error and its JSON pointer) and a second tool with an
//! (id, version) already taken (naming both places).

use hashbrown::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::handler::Handler;
use crate::access::{Access, AccessPlan, Normalizers, PathRules};
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
    canonical_input: Option<AccessInput>,
    scope: TenantScope,
}

/// Rewrites a call's input before its resources are templated, given the call's tenant (the fs
/// tools make `path` absolute against their root — the tenant's own, with a root per tenant — so
/// that two spellings of one file are one resource).
pub type AccessInput = Arc<dyn Fn(&str, &Value) -> Value + Send + Sync>;

/// Whose things a tool's resources name: each tenant's own, or one set every tenant reaches.
///
/// Tenants never conflict on what is their own: each tenant's calls are ordered in its own
/// conflict domain only. A tool whose resources several tenants reach — one directory for
/// everyone, a remote service — is [`TenantScope::Shared`]: its calls are ordered in the
/// tenant's domain *and* in one domain common to every tenant, so two tenants' conflicting writes
/// of one shared resource never overlap and no update is lost. A call waiting there for another
/// tenant's call learns only that it waits, never whose call it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TenantScope {
    /// Each tenant's resources are its own (the default for a native tool; the built-in kv
    /// memory; the built-in fs tools with a root per tenant).
    #[default]
    PerTenant,
    /// Every tenant reaches the same resources (the default for a tool over HTTP or MCP: one
    /// service for all; the built-in fs tools under one root).
    Shared,
}

impl TenantScope {
    /// `per-tenant` or `shared`.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantScope::PerTenant => "per-tenant",
            TenantScope::Shared => "shared",
        }
    }
}

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
        let scope = default_scope(&manifest, handler.is_some());
        // Paths resolved as the tool's server resolves them (`metadata.sluice.paths`).
        let paths = PathRules::from_metadata(manifest.metadata.as_ref()).map_err(|why| {
            invalid(
                &source,
                vec![Diagnostic::new("/metadata/sluice/paths", why)],
            )
        })?;
        let access_input = paths.map(|rules| -> AccessInput {
            Arc::new(move |_tenant: &str, input: &Value| rules.rewrite(input))
        });
        Ok(Tool {
            manifest: Arc::new(manifest),
            source,
            input_schema,
            output_schema,
            accesses,
            handler,
            access_input,
            canonical_input: None,
            scope,
        })
    }

    /// Sets the rewrite applied to a call's input before its resources are templated.
    pub fn with_access_input(
        mut self,
        f: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.access_input = Some(Arc::new(move |_tenant: &str, input: &Value| f(input)));
        self
    }

    /// Sets the rewrite applied to a call's input before its resources are templated, given the
    /// call's tenant (for a tool whose resources are the tenant's own, such as a root per tenant).
    pub fn with_tenant_access_input(
        mut self,
        f: impl Fn(&str, &Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.access_input = Some(Arc::new(f));
        self
    }

    /// Sets the canonical form of a call's input, given the call's tenant: computed once, when
    /// the call is prepared (after its input passed the schema), and then the only input there
    /// is — its resources are templated from it, so the policy judges it, the conflict graph
    /// orders it and provenance records it, and the handler receives it. The built-in fs tools
    /// use it to turn `path` into the file the OS will touch, links followed, so that what is
    /// checked is what is written.
    pub fn with_canonical_input(
        mut self,
        f: impl Fn(&str, &Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.canonical_input = Some(Arc::new(f));
        self
    }

    /// The canonical form of `tenant`'s call input (see [`Tool::with_canonical_input`]), or
    /// `None` when the tool keeps inputs as they come.
    pub fn canonical_input(&self, tenant: &str, input: &Value) -> Option<Value> {
        self.canonical_input.as_ref().map(|f| f(tenant, input))
    }

    /// Sets whose things the tool's resources name (default: [`TenantScope::Shared`] for a tool
    /// over HTTP or MCP, else [`TenantScope::PerTenant`]).
    pub fn with_scope(mut self, scope: TenantScope) -> Self {
        self.scope = scope;
        self
    }

    /// Whose things the tool's resources name (see [`TenantScope`]).
    pub fn scope(&self) -> TenantScope {
        self.scope
    }

    /// The accesses of a call of this tool with `input`, for no tenant in particular (a tool
    /// whose resources depend on the tenant sees the empty tenant name).
    pub fn accesses(&self, input: &Value, normalizers: &Normalizers) -> Vec<Access> {
        self.accesses_for("", input, normalizers)
    }

    /// The accesses of `tenant`'s call of this tool with `input`.
    pub fn accesses_for(
        &self,
        tenant: &str,
        input: &Value,
        normalizers: &Normalizers,
    ) -> Vec<Access> {
        let canonical = self.canonical_input(tenant, input);
        self.plan_accesses(tenant, canonical.as_ref().unwrap_or(input), normalizers)
    }

    /// The accesses of `tenant`'s call whose input is already canonical.
    pub(crate) fn plan_accesses(
        &self,
        tenant: &str,
        input: &Value,
        normalizers: &Normalizers,
    ) -> Vec<Access> {
        match &self.access_input {
            Some(view) => self.accesses.accesses(&view(tenant, input), normalizers),
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

/// A tool carried out by a remote service (HTTP or MCP) is one service for every tenant; a native
/// handler's state is taken to be the tenant's own unless the embedder says otherwise.
fn default_scope(m: &Manifest, native: bool) -> TenantScope {
    let remote = match m.transport() {
        model::Transport::Mcp => true,
        model::Transport::Native => !native && m.spec.is_some(),
        model::Transport::Auto => !native && (m.spec.is_some() || m.mcp_endpoint.is_some()),
    };
    if remote {
        TenantScope::Shared
    } else {
        TenantScope::PerTenant
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

/// A version `MAJOR.MINOR.PATCH` as semver precedence orders it: each part numerically, however
/// many digits it has (leading zeros do not count: `01.2.3` is `1.2.3`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version([String; 3]);

impl Version {
    /// Reads `MAJOR.MINOR.PATCH` (digits only); `None` for anything else.
    ///
    /// ```
    /// use sluice_kernel::transport::Version;
    /// let v = |s| Version::parse(s).unwrap();
    /// assert!(v("1.10.0") > v("1.9.7"));
    /// assert!(v("10.0.0") > v("9.99.99"));
    /// assert_eq!(v("01.2.3"), v("1.2.3"));
    /// assert!(Version::parse("1.2").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let mut out: [String; 3] = Default::default();
        for slot in &mut out {
            let p = parts.next()?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let trimmed = p.trim_start_matches('0');
            *slot = if trimmed.is_empty() { "0" } else { trimmed }.to_owned();
        }
        parts.next().is_none().then_some(Version(out))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0[0], self.0[1], self.0[2])
    }
}

/// The registered tools, by id and version, in registration order.
///
/// One id may have several versions. A call names a tool as `id` (the highest version by semver
/// precedence) or `id@version` (exactly that one):
///
/// ```
/// use sluice_kernel::transport::{Tool, ToolRegistry};
/// use sluice_kernel::model::{Manifest, ManifestSource};
/// let tool = |v: &str| {
///     let m = Manifest::from_value(serde_json::json!({"id": "acme.t", "description": "d",
///         "version": v, "input": {}, "output": {}})).unwrap();
///     Tool::new(m, ManifestSource::built_in(), None).unwrap()
/// };
/// let mut registry = ToolRegistry::new();
/// for v in ["1.2.0", "1.10.0", "1.9.0"] {
///     registry.insert(tool(v)).unwrap();
/// }
/// assert_eq!(registry.get("acme.t").unwrap().manifest().version.as_str(), "1.10.0");
/// assert_eq!(registry.get("acme.t@1.2.0").unwrap().manifest().version.as_str(), "1.2.0");
/// assert!(registry.get("acme.t@2.0.0").is_none());
/// assert!(registry.insert(tool("1.9.0")).is_err()); // the same (id, version) twice
/// ```
#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    /// By (id, version).
    tools: HashMap<(String, Version), Arc<Tool>>,
    /// Each id's highest version (looked up by `&str`, without allocating: the planner's path).
    latest: HashMap<String, (Version, Arc<Tool>)>,
    /// (id, version) in registration order.
    order: Vec<(String, Version)>,
}

/// The registry key of a tool: its id and its version read for precedence.
fn key_of(tool: &Tool) -> (String, Version) {
    let v = Version::parse(tool.manifest().version.as_str())
        .unwrap_or_else(|| Version(Default::default()));
    (tool.id().to_owned(), v)
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a compiled tool; refuses an (id, version) already taken, naming both places.
    pub fn insert(&mut self, tool: Tool) -> Result<()> {
        self.insert_arc(Arc::new(tool))
    }

    /// Registers a shared compiled tool, as [`ToolRegistry::insert`] does.
    pub fn insert_arc(&mut self, tool: Arc<Tool>) -> Result<()> {
        let key = key_of(&tool);
        if let Some(existing) = self.tools.get(&key) {
            return Err(Error::DuplicateTool {
                id: key.0,
                version: tool.manifest().version.to_string(),
                first: existing.source().to_string(),
                second: tool.source().to_string(),
            });
        }
        match self.latest.get_mut(&key.0) {
            Some((v, _)) if *v >= key.1 => {}
            Some(entry) => *entry = (key.1.clone(), tool.clone()),
            None => {
                self.latest
                    .insert(key.0.clone(), (key.1.clone(), tool.clone()));
            }
        }
        self.order.push(key.clone());
        self.tools.insert(key, tool);
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

    /// Binds an MCP endpoint (`mcp+stdio://…`, `mcp+http://…`, `mcp+sse://…`) to the MCP tool
    /// `name` names: `id` (every version of it that has no endpoint) or `id@version`. A manifest
    /// with `transport: mcp` and no `mcpEndpoint` is valid, its endpoint being a deployment
    /// concern; this is the deployment. Refuses an unknown tool, a tool that is not
    /// `transport: mcp`, one whose manifest already names an endpoint (a binding fills a gap, it
    /// never redirects a tool), and an endpoint that does not parse. Returns how many versions
    /// it bound.
    pub fn bind_mcp_endpoint(&mut self, name: &str, endpoint: &str) -> Result<usize> {
        let refuse = |why: String| Error::McpBinding {
            tool: name.to_owned(),
            why,
        };
        let parsed = model::McpEndpoint::parse(endpoint).map_err(|e| refuse(e.to_string()))?;
        if let Some(Err(e)) = parsed.argv() {
            return Err(refuse(e.to_string()));
        }
        let targets: Vec<Arc<Tool>> = if self.latest.contains_key(name) {
            self.versions(name).into_iter().cloned().collect()
        } else {
            self.get(name).cloned().into_iter().collect()
        };
        if targets.is_empty() {
            return Err(refuse("no tool of that name is registered".into()));
        }
        let mut bound = 0;
        let mut why_not = String::new();
        for t in targets {
            let m = t.manifest();
            if m.transport() != model::Transport::Mcp {
                why_not = format!(
                    "version {} is not an MCP tool (`transport: mcp`)",
                    m.version.as_str()
                );
                continue;
            }
            if let Some(own) = &m.mcp_endpoint {
                why_not = format!(
                    "version {} names its own endpoint `{}`: a binding fills a missing one, it \
                     never replaces one",
                    m.version.as_str(),
                    own.as_str()
                );
                continue;
            }
            let mut manifest = (**m).clone();
            manifest.mcp_endpoint = Some(parsed.clone());
            let mut tool = Tool::compile(manifest, t.source().clone(), t.handler.clone())?;
            tool.access_input = t.access_input.clone();
            tool.canonical_input = t.canonical_input.clone();
            tool.scope = TenantScope::Shared;
            let (id, version) = key_of(&tool);
            let tool = Arc::new(tool);
            if let Some(latest) = self.latest.get_mut(&id).filter(|(v, _)| *v == version) {
                latest.1 = tool.clone();
            }
            self.tools.insert((id, version), tool);
            bound += 1;
        }
        if bound == 0 {
            return Err(refuse(why_not));
        }
        Ok(bound)
    }

    /// The tool a call names: `id` (its highest version) or `id@version` (exactly that one). An
    /// id that itself holds `@` is found as written first.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        if let Some((_, tool)) = self.latest.get(name) {
            return Some(tool);
        }
        let (id, version) = name.rsplit_once('@')?;
        let version = Version::parse(version)?;
        self.tools.get(&(id.to_owned(), version))
    }

    /// Whether `tool` is the highest version of its id.
    pub fn is_latest(&self, tool: &Tool) -> bool {
        let (id, v) = key_of(tool);
        self.latest.get(&id).is_some_and(|(latest, _)| *latest == v)
    }

    /// Every tool, every version, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.order.iter().filter_map(|k| self.tools.get(k))
    }

    /// The highest version of each id, in the order each id was first registered.
    pub fn latest(&self) -> impl Iterator<Item = &Arc<Tool>> {
        let mut seen = std::collections::HashSet::new();
        self.order
            .iter()
            .filter(move |(id, _)| seen.insert(id.as_str()))
            .filter_map(|(id, _)| self.get(id))
    }

    /// The versions registered under `id`, lowest first.
    pub fn versions(&self, id: &str) -> Vec<&Arc<Tool>> {
        let mut v: Vec<&Arc<Tool>> = self
            .order
            .iter()
            .filter(|(i, _)| i == id)
            .filter_map(|k| self.tools.get(k))
            .collect();
        v.sort_by_key(|t| key_of(t).1);
        v
    }

    /// Number of tools (every version counts).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_by_semver_precedence() {
        let v = |s| Version::parse(s).unwrap();
        let mut list = [
            v("1.10.0"),
            v("1.2.0"),
            v("0.9.99"),
            v("1.2.10"),
            v("2.0.0"),
        ];
        list.sort();
        let shown: Vec<String> = list.iter().map(|v| v.to_string()).collect();
        assert_eq!(shown, ["0.9.99", "1.2.0", "1.2.10", "1.10.0", "2.0.0"]);
        let huge = v("1.0.123456789012345678901234567890");
        assert!(huge > v("1.0.99999999999999999999"));
        assert_eq!(huge.to_string(), "1.0.123456789012345678901234567890");
        for bad in ["", "1", "1.2", "1.2.3.4", "a.b.c", "1..2", "1.2.-3"] {
            assert!(Version::parse(bad).is_none(), "{bad}");
        }
    }
}
