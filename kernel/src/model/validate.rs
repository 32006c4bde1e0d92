//! Judging manifests: the JSON Schema, then the rules beyond it, then lints.
//!
//! Takes in: a manifest as JSON. Hands on: a [`Report`] — errors and warnings, each with the JSON
//! pointer of what it is about and a sentence a person understands — and, when there is no
//! error, the parsed [`Manifest`].
//!
//! The stages:
//! 1. **Shape**: the project's own schema, `kernel/schema/tool.schema.json` (Draft 2020-12,
//!    written from tool-schema 1.1.0). The serde model in [`crate::model::Manifest`] gives the same
//!    verdict; a test holds them together on the fixture corpus.
//! 2. **Rules beyond the schema** (errors): input and output schemas compile in their dialect
//!    (Draft 2020-12, or what an MCP tool's `$schema` declares; no network fetch ever happens);
//!    URL templates (http or https, a host, no placeholder in scheme, userinfo, host or port,
//!    placeholders `{word}`); header values and text bodies well formed (no CR or LF in a
//!    header); resource templates well formed; an `mcpEndpoint`'s command line splits;
//!    `transport: mcp` carries no `spec`; `spec` and `codeArtifactRef` never together;
//!    `successStatus.min <= max`; env, secret and config schemas use only Draft 2020-12
//!    keywords and compile; an env `default` is a string.
//! 3. **Lints** (warnings; some become errors under `production`): `transport: mcp` without an
//!    `mcpEndpoint` (bound at deployment); a tool that is not read-only
//!    but declares no changing effect; `mutating: false` with a changing effect; a placeholder the
//!    input schema does not declare; a `filesystem` codeArtifactRef (an error in production); an
//!    artifactVersion not like `YYYYMMDD.N`; an empty allowlist; `network: none` on a tool that
//!    declares network effects or is an HTTP tool.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::manifest::{
    AccessMode, CodeArtifactRef, HttpRequestBodySpec, HttpToolSpec, Manifest, NetworkPolicy,
    ToolSpec, Transport,
};
use super::template::{self, TextTemplate, UrlTemplate};
use crate::error::escape_pointer;
use crate::error::Diagnostic;

/// The project's JSON Schema for Kindgi tool manifests, schema 1.1.0.
pub const MANIFEST_SCHEMA: &str = include_str!("../../schema/tool.schema.json");

/// The verdict on one manifest.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Findings that make the manifest invalid.
    pub errors: Vec<Diagnostic>,
    /// Findings that do not.
    pub warnings: Vec<Diagnostic>,
    /// The parsed manifest, when the shape is right (even if a rule failed).
    pub manifest: Option<Manifest>,
}

impl Report {
    /// Whether the manifest is valid (no error).
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Options for [`validate`].
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ValidateOptions {
    /// Turn what production servers SHOULD refuse into errors (a `filesystem`
    /// codeArtifactRef). Default: `false` (they are warnings).
    pub production: bool,
}

impl ValidateOptions {
    /// These options with `production` set.
    pub fn with_production(mut self, production: bool) -> Self {
        self.production = production;
        self
    }
}

fn manifest_schema() -> Option<&'static jsonschema::Validator> {
    static SCHEMA: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let schema: Value = serde_json::from_str(MANIFEST_SCHEMA).ok()?;
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .build(&schema)
                .ok()
        })
        .as_ref()
}

/// Whether `value` has the shape of a manifest by the JSON Schema alone (no further rules).
pub fn schema_accepts(value: &Value) -> bool {
    manifest_schema().is_some_and(|s| s.is_valid(value))
}

/// Validates one manifest: shape, rules, lints.
///
/// ```
/// use sluice_kernel::model::{validate, ValidateOptions};
/// let report = validate(&serde_json::json!({
///     "id": "acme.kv-get", "description": "Get", "version": "1.0.0",
///     "input": {"type": "object"}, "output": {"type": "object"},
///     "mutating": false, "effects": [{"kind": "reads", "resource": "kv:{key}"}]
/// }), ValidateOptions::default());
/// assert!(report.is_valid());
/// // `key` is not declared by the input schema: a warning, not an error.
/// assert_eq!(report.warnings[0].pointer, "/effects/0/resource");
/// ```
pub fn validate(value: &Value, options: ValidateOptions) -> Report {
    let mut report = Report::default();
    shape(value, &mut report);
    if !report.errors.is_empty() {
        return report;
    }
    match Manifest::from_value(value.clone()) {
        Ok(m) => {
            rules(&m, options, &mut report);
            report.manifest = Some(m);
        }
        Err(e) => report.errors.push(Diagnostic::new("", format!("{e}"))),
    }
    report
}

/// The integers the schema bounds only below (`minimum: 1`) that Sluice holds as 64-bit
/// unsigned numbers: a larger value passes the schema, so it is refused here, where it is.
const POSITIVE_INTS: [&str; 3] = ["/limits/memMB", "/limits/cpuMs", "/spec/timeoutMs"];

fn shape(value: &Value, report: &mut Report) {
    for pointer in POSITIVE_INTS {
        if let Some(Value::Number(n)) = value.pointer(pointer) {
            let too_big = n.as_u64().is_none()
                && n.as_i64().is_none()
                && n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f >= 18_446_744_073_709_551_616.0);
            if too_big {
                report.errors.push(Diagnostic::new(
                    pointer,
                    format!(
                        "{n} is larger than Sluice takes: an integer from 1 to {}",
                        u64::MAX
                    ),
                ));
            }
        }
    }
    let Some(schema) = manifest_schema() else {
        report.errors.push(Diagnostic::new(
            "",
            "the manifest schema bundled with Sluice does not compile (a bug in Sluice)",
        ));
        return;
    };
    for e in schema.iter_errors(value) {
        let pointer = e.instance_path().as_str().to_owned();
        let d = match e.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                // Point at each unknown key, not at the object holding it.
                for key in unexpected {
                    push_unique(
                        &mut report.errors,
                        Diagnostic::new(
                            format!("{pointer}/{}", escape_pointer(key)),
                            format!("unknown field `{key}`"),
                        ),
                    );
                }
                continue;
            }
            jsonschema::error::ValidationErrorKind::Pattern { .. } if pointer == "/version" => {
                Diagnostic::new(
                    pointer,
                    format!("{} is not a version like 1.2.3", e.instance()),
                )
            }
            jsonschema::error::ValidationErrorKind::Pattern { .. } if pointer == "/mcpEndpoint" => {
                Diagnostic::new(
                    pointer,
                    format!(
                        "{} is not an MCP endpoint: use mcp+stdio://<command line>, \
                         mcp+http://<host>/<path> or mcp+sse://<host>/<path>",
                        e.instance()
                    ),
                )
            }
            _ => Diagnostic::new(pointer, humanize(&e.to_string())),
        };
        push_unique(&mut report.errors, d);
    }
}

fn push_unique(list: &mut Vec<Diagnostic>, d: Diagnostic) {
    if !list.contains(&d) {
        list.push(d);
    }
}

/// Light rewording of the validator's messages (it quotes JSON values; keep them).
fn humanize(msg: &str) -> String {
    msg.replace("is a required property", "is required")
}

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// The dialect a tool's input or output schema is in: Draft 2020-12, or for an MCP tool what its
/// `$schema` declares (draft-06, draft-07, 2019-09 or 2020-12).
pub(crate) fn schema_dialect(
    manifest: &Manifest,
    schema: &Map<String, Value>,
) -> Result<jsonschema::Draft, String> {
    let declared = match schema.get("$schema") {
        None => return Ok(jsonschema::Draft::Draft202012),
        Some(Value::String(s)) => s.trim_end_matches('#'),
        Some(_) => return Err("`$schema` must be a string".into()),
    };
    let draft = match declared {
        DRAFT_2020_12 => jsonschema::Draft::Draft202012,
        "https://json-schema.org/draft/2019-09/schema" => jsonschema::Draft::Draft201909,
        "http://json-schema.org/draft-07/schema" => jsonschema::Draft::Draft7,
        "http://json-schema.org/draft-06/schema" => jsonschema::Draft::Draft6,
        other => {
            return Err(format!(
                "`$schema` is `{other}`: the dialects accepted are Draft 2020-12, and for MCP \
                 tools also draft-06, draft-07 and 2019-09"
            ))
        }
    };
    if draft != jsonschema::Draft::Draft202012 && manifest.transport() != Transport::Mcp {
        return Err(format!(
            "`$schema` is `{declared}`, but only an MCP tool (`transport: mcp`) may use a dialect \
             other than Draft 2020-12"
        ));
    }
    Ok(draft)
}

/// Compiles one of a tool's schemas in its dialect. No `$ref` is ever fetched from the network
/// or the file system.
pub(crate) fn compile_schema(
    manifest: &Manifest,
    schema: &Map<String, Value>,
) -> Result<jsonschema::Validator, String> {
    let draft = schema_dialect(manifest, schema)?;
    jsonschema::options()
        .with_draft(draft)
        .build(&Value::Object(schema.clone()))
        .map_err(|e| format!("does not compile as a JSON Schema: {e}"))
}

/// The findings of the rules beyond the schema, as they are made.
struct Findings<'a> {
    m: &'a Manifest,
    /// The input schema's top-level property names (placeholders should name one).
    declared: Option<Vec<&'a str>>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

fn rules(m: &Manifest, options: ValidateOptions, report: &mut Report) {
    let mut f = Findings {
        m,
        declared: m
            .input
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect()),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    f.schemas();
    f.resource_templates();
    f.transport();
    if let Some(ToolSpec::Http(http)) = &m.spec {
        f.http_spec(http);
    }
    f.needs_spec();
    f.effect_lints();
    f.artifact_lint(options);
    f.network_lint();
    report.errors.append(&mut f.errors);
    report.warnings.append(&mut f.warnings);
}

impl Findings<'_> {
    /// A warning for each placeholder the input schema does not declare.
    fn undeclared(&mut self, pointer: String, names: Vec<&str>) {
        for n in names {
            if !self.declared.as_ref().is_some_and(|d| d.contains(&n)) {
                self.warnings.push(Diagnostic::new(
                    pointer.clone(),
                    format!(
                        "the placeholder `{{{n}}}` names no property of the input schema: a \
                         call without it gets `*` here"
                    ),
                ));
            }
        }
    }

    /// A warning for each `{…}` that looks like a placeholder but is not one (its name holds a
    /// character that is not a word character, such as `{user-id}`): it is sent as literal text.
    fn literal_braces(&mut self, pointer: &str, text: &str) {
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let Some(close) = after.find(['{', '}']) else {
                break;
            };
            let inner = &after[..close];
            let looks_like_name = after[close..].starts_with('}')
                && !inner.is_empty()
                && !inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && inner
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'));
            if looks_like_name {
                self.warnings.push(Diagnostic::new(
                    pointer,
                    format!(
                        "`{{{inner}}}` is literal text, not a placeholder: placeholder names \
                         are word characters (letters, digits, `_`)"
                    ),
                ));
            }
            rest = &after[close..];
        }
    }

    /// The input and output schemas compile in their dialect.
    fn schemas(&mut self) {
        let m = self.m;
        for (name, schema) in [("input", &m.input), ("output", &m.output)] {
            if let Err(why) = compile_schema(m, schema) {
                let pointer = if why.starts_with("`$schema`") {
                    format!("/{name}/$schema")
                } else {
                    format!("/{name}")
                };
                self.errors
                    .push(Diagnostic::new(pointer, format!("the {name} schema {why}")));
            }
        }
    }

    /// Resource templates are well formed.
    fn resource_templates(&mut self) {
        let m = self.m;
        for (i, e) in m.effects().iter().enumerate() {
            if let Some(r) = &e.resource {
                let pointer = format!("/effects/{i}/resource");
                match template::resource_placeholders(r) {
                    Ok(names) => {
                        self.undeclared(pointer, names.iter().map(String::as_str).collect())
                    }
                    Err(err) => self.errors.push(Diagnostic::new(
                        pointer,
                        format!("the resource template `{r}` is not well formed {err}"),
                    )),
                }
            }
        }
    }

    /// `transport`, `mcpEndpoint`, `spec` and `codeArtifactRef` agree.
    fn transport(&mut self) {
        let m = self.m;
        let transport = m.transport();
        if transport == Transport::Mcp && m.mcp_endpoint.is_none() {
            // The endpoint is a deployment concern (tool-schema 1.1.0, compatibility): valid,
            // and its calls end `no-handler` until one is bound.
            self.warnings.push(Diagnostic::new(
                "/transport",
                "`transport: mcp` without an `mcpEndpoint`: bind one at deployment \
                 (`--mcp-endpoint ID=URI`), or its calls end `no-handler`",
            ));
        }
        if let Some(endpoint) = &m.mcp_endpoint {
            if let Some(Err(why)) = endpoint.argv() {
                self.errors
                    .push(Diagnostic::new("/mcpEndpoint", format!("{why}")));
            }
            if transport == Transport::Native {
                self.warnings.push(Diagnostic::new(
                    "/mcpEndpoint",
                    "`transport: native` runs the tool in process: its `mcpEndpoint` is never used",
                ));
            }
        }
        if m.spec.is_some() {
            // `spec` with `transport: native` is valid: the spec's handler runs in process.
            if transport == Transport::Mcp {
                self.errors.push(Diagnostic::new(
                    "/spec",
                    "`transport: mcp` cannot carry a `spec`: the MCP server carries the tool out",
                ));
            }
            if m.code_artifact_ref.is_some() {
                self.errors.push(Diagnostic::new(
                    "/codeArtifactRef",
                    "`spec` and `codeArtifactRef` never come together: a tool has one handler",
                ));
            }
        }
    }

    /// The HTTP spec: URL template, headers, body template, success range, auth header.
    fn http_spec(&mut self, http: &HttpToolSpec) {
        match UrlTemplate::parse(&http.url_template) {
            Ok(u) => {
                self.undeclared("/spec/urlTemplate".into(), u.template().placeholders());
                self.literal_braces("/spec/urlTemplate", &http.url_template);
            }
            Err(err) => self.errors.push(Diagnostic::new(
                "/spec/urlTemplate",
                format!("the URL template `{}` {err}", http.url_template.as_str()),
            )),
        }
        for (i, h) in http.headers.iter().flatten().enumerate() {
            let pointer = format!("/spec/headers/{i}");
            if !h.name.bytes().all(is_header_name_byte) {
                self.errors.push(Diagnostic::new(
                    format!("{pointer}/name"),
                    format!("`{}` is not a valid HTTP header name", h.name.as_str()),
                ));
            }
            if h.value.contains(['\r', '\n']) {
                self.errors.push(Diagnostic::new(
                    format!("{pointer}/value"),
                    "a header value may not hold a CR or LF",
                ));
            }
            match TextTemplate::parse(&h.value) {
                Ok(t) => {
                    self.undeclared(format!("{pointer}/value"), t.placeholders());
                    self.literal_braces(&format!("{pointer}/value"), &h.value);
                }
                Err(err) => self.errors.push(Diagnostic::new(
                    format!("{pointer}/value"),
                    format!("the header value template is not well formed {err}"),
                )),
            }
        }
        if let Some(HttpRequestBodySpec::Text { template }) = &http.request_body {
            match TextTemplate::parse(template) {
                Ok(t) => {
                    self.undeclared("/spec/requestBody/template".into(), t.placeholders());
                    self.literal_braces("/spec/requestBody/template", template);
                }
                Err(err) => self.errors.push(Diagnostic::new(
                    "/spec/requestBody/template",
                    format!("the body template is not well formed {err}"),
                )),
            }
        }
        if let Some(s) = &http.success_status {
            if s.min > s.max {
                self.errors.push(Diagnostic::new(
                    "/spec/successStatus",
                    format!(
                        "`min` ({}) is above `max` ({}): no status would be a success",
                        s.min.get(),
                        s.max.get()
                    ),
                ));
            }
        }
        if let Some(super::manifest::HttpAuthSpec::Header { header_name, .. }) = &http.authorization
        {
            if !header_name.bytes().all(is_header_name_byte) {
                self.errors.push(Diagnostic::new(
                    "/spec/authorization/headerName",
                    format!("`{}` is not a valid HTTP header name", header_name.as_str()),
                ));
            }
        }
    }

    /// The `needsSpec` schemas compile strictly (every keyword known to Draft 2020-12, as the
    /// reference SDK compiles them), and an env entry's `default` is a string.
    fn needs_spec(&mut self) {
        let m = self.m;
        if let Some(ns) = &m.needs_spec {
            for (field, map) in [
                ("env", &ns.env),
                ("secrets", &ns.secrets),
                ("config", &ns.config),
            ] {
                for (name, schema) in map.iter().flatten() {
                    let pointer = format!("/needsSpec/{field}/{}", escape_pointer(name));
                    if field == "env" {
                        if let Some(d) = schema.get("default").filter(|d| !d.is_string()) {
                            self.errors.push(Diagnostic::new(
                                format!("{pointer}/default"),
                                format!(
                                    "the default of `{name}` is {d}: an env value is a string, \
                                     never coerced, so its default must be a string"
                                ),
                            ));
                        }
                    }
                    if let Some((at, key)) = unknown_keyword(schema, &pointer) {
                        self.errors.push(Diagnostic::new(
                            at,
                            format!(
                                "the schema of `{name}` uses `{key}`, which is no keyword of \
                                 JSON Schema Draft 2020-12 (needsSpec schemas compile strictly)"
                            ),
                        ));
                        continue;
                    }
                    if let Err(e) = jsonschema::options()
                        .with_draft(jsonschema::Draft::Draft202012)
                        .build(&Value::Object(schema.clone()))
                    {
                        self.errors.push(Diagnostic::new(
                            pointer,
                            format!("the schema of `{name}` does not compile: {e}"),
                        ));
                    }
                }
            }
        }
    }

    /// A tool that is not read-only but declares no changing effect; `mutating: false` with a
    /// changing effect.
    fn effect_lints(&mut self) {
        let m = self.m;
        if !m.is_read_only() && !m.declares_changing_effect() {
            let pointer = if m.effects.is_some() {
                "/effects"
            } else if m.mutating.is_some() {
                "/mutating"
            } else {
                ""
            };
            self.warnings.push(Diagnostic::new(
                pointer,
                "the tool is not read-only but declares no changing effect, so it will run alone: \
                 the kernel cannot know what it changes; set `mutating: false` or declare its \
                 changing effects",
            ));
        }
        if m.mutating == Some(false) {
            if let Some((i, e)) = m
                .effects()
                .iter()
                .enumerate()
                .find(|(_, e)| e.kind.mode() == AccessMode::Write)
            {
                self.warnings.push(Diagnostic::new(
                    format!("/effects/{i}/kind"),
                    format!(
                        "`mutating: false` but the tool declares a changing effect (`{}`): the \
                         effect wins, the tool is treated as mutating",
                        e.kind
                    ),
                ));
            }
        }
    }

    /// A `filesystem` codeArtifactRef (an error in production); an artifactVersion not like
    /// `YYYYMMDD.N`.
    fn artifact_lint(&mut self, options: ValidateOptions) {
        let m = self.m;
        match &m.code_artifact_ref {
            Some(CodeArtifactRef::Filesystem { .. }) => {
                let d = Diagnostic::new(
                    "/codeArtifactRef",
                    "a `filesystem` codeArtifactRef points at a handler on a developer's disk; \
                     production servers refuse it",
                );
                if options.production {
                    self.errors.push(d);
                } else {
                    self.warnings.push(d);
                }
            }
            Some(CodeArtifactRef::Oci {
                artifact_version, ..
            }) if !looks_like_artifact_version(artifact_version) => {
                self.warnings.push(Diagnostic::new(
                    "/codeArtifactRef/artifactVersion",
                    format!(
                        "`{}` does not look like YYYYMMDD.N",
                        artifact_version.as_str()
                    ),
                ));
            }
            _ => {}
        }
    }

    /// An empty allowlist; `network: none` on a tool that needs the network.
    fn network_lint(&mut self) {
        let m = self.m;
        match &m.network {
            Some(NetworkPolicy::Allowlist { hosts }) if hosts.is_empty() => {
                self.warnings.push(Diagnostic::new(
                    "/network/hosts",
                    "an empty allowlist allows no host at all",
                ));
            }
            Some(NetworkPolicy::None {}) => {
                let network_effect = m
                    .effects()
                    .iter()
                    .position(|e| e.kind == super::manifest::EffectKind::Network);
                if let Some(i) = network_effect {
                    self.warnings.push(Diagnostic::new(
                    format!("/effects/{i}"),
                    "the tool declares a `network` effect but `network: none` refuses all egress",
                ));
                }
                if matches!(m.spec, Some(ToolSpec::Http(_))) {
                    self.warnings.push(Diagnostic::new(
                        "/network",
                        "an HTTP tool with `network: none` can never send its request",
                    ));
                }
            }
            _ => {}
        }
    }
}

/// The keywords of JSON Schema Draft 2020-12 (core, applicator, unevaluated, validation,
/// meta-data, format and content vocabularies).
const KEYWORDS_2020_12: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "const",
    "enum",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// The first keyword of `schema` (or of a subschema in it) that Draft 2020-12 does not define,
/// with its JSON pointer.
fn unknown_keyword(schema: &Map<String, Value>, pointer: &str) -> Option<(String, String)> {
    for (key, value) in schema {
        let at = format!("{pointer}/{}", escape_pointer(key));
        if !KEYWORDS_2020_12.contains(&key.as_str()) {
            return Some((at, key.clone()));
        }
        let found = match (key.as_str(), value) {
            (
                "$defs" | "definitions" | "properties" | "patternProperties" | "dependentSchemas",
                Value::Object(map),
            ) => map.iter().find_map(|(k, v)| {
                v.as_object()
                    .and_then(|s| unknown_keyword(s, &format!("{at}/{}", escape_pointer(k))))
            }),
            ("allOf" | "anyOf" | "oneOf" | "prefixItems", Value::Array(list)) => {
                list.iter().enumerate().find_map(|(i, v)| {
                    v.as_object()
                        .and_then(|s| unknown_keyword(s, &format!("{at}/{i}")))
                })
            }
            (
                "not"
                | "if"
                | "then"
                | "else"
                | "items"
                | "contains"
                | "additionalProperties"
                | "propertyNames"
                | "unevaluatedItems"
                | "unevaluatedProperties"
                | "contentSchema",
                Value::Object(s),
            ) => unknown_keyword(s, &at),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn looks_like_artifact_version(v: &str) -> bool {
    match v.split_once('.') {
        Some((date, n)) => {
            date.len() == 8
                && date.bytes().all(|b| b.is_ascii_digit())
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}
