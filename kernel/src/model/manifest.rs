//! The Kindgi tool manifest, schema 1.1.0, as Rust types.
//!
//! Takes in: a JSON value (one manifest object). Hands on: a [`Manifest`] whose every field and
//! variant mirrors `tool-schema-1.1.0`: unknown fields are errors, absent optional fields stay
//! absent (so parse -> serialize -> parse is the identity), and the shapes the schema constrains
//! (non-empty strings, `x.y.z` versions, positive integers, status codes) are newtypes that cannot
//! hold a value the schema refuses.
//!
//! Shape only: the rules beyond the schema (URL templates, resource templates, transport
//! coherence, lints) live in [`crate::model::validate()`].

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A JSON object: how manifests carry JSON Schemas and free-form metadata.
pub type JsonObject = Map<String, Value>;

/// One tool manifest (Kindgi tool schema 1.1.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    /// Unique tool identifier, by convention `<pack>.<tool>`.
    pub id: NonEmptyString,
    /// What the tool does, as the model will read it.
    pub description: NonEmptyString,
    /// The tool's version, `MAJOR.MINOR.PATCH`.
    pub version: Version,
    /// JSON Schema of the input (Draft 2020-12 unless the tool is an MCP tool).
    pub input: JsonObject,
    /// JSON Schema of the output.
    pub output: JsonObject,
    /// Named context slots the runtime injects.
    #[serde(
        default,
        deserialize_with = "some_objects",
        skip_serializing_if = "Option::is_none"
    )]
    pub needs: Option<Vec<Need>>,
    /// Declared side effects: what the kernel schedules and authorizes on.
    #[serde(
        default,
        deserialize_with = "some_objects",
        skip_serializing_if = "Option::is_none"
    )]
    pub effects: Option<Vec<Effect>>,
    /// Transport hint (absent means [`Transport::Auto`]).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub transport: Option<Transport>,
    /// The MCP endpoint, for tools carried out by an MCP server.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub mcp_endpoint: Option<McpEndpoint>,
    /// Free-form annotations; not interpreted by the kernel.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<JsonObject>,
    /// Isolation posture the runtime enforces around the handler.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub sandbox: Option<Sandbox>,
    /// Whether the tool causes observable side effects (absent means `true`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub mutating: Option<bool>,
    /// Resource caps enforced at dispatch.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub limits: Option<Limits>,
    /// Network egress policy (absent means unrestricted).
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub network: Option<NetworkPolicy>,
    /// Typed, discriminated needs.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub needs_spec: Option<NeedsSpec>,
    /// Pointer to an imperative handler artifact.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub code_artifact_ref: Option<CodeArtifactRef>,
    /// Declarative handler spec.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub spec: Option<ToolSpec>,
}

impl Manifest {
    /// Parses one manifest from a JSON value, refusing unknown fields and every shape the
    /// schema refuses.
    pub fn from_value(value: Value) -> Result<Self, serde_json::Error> {
        if !value.is_object() {
            return Err(serde::de::Error::custom(format!(
                "a manifest is a JSON object, found {value}"
            )));
        }
        serde_json::from_value(value)
    }

    /// Serializes the manifest back to JSON (absent fields stay absent).
    pub fn to_value(&self) -> Value {
        // Serializing these types cannot fail: every map key is a string.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The declared effects (empty when absent).
    pub fn effects(&self) -> &[Effect] {
        self.effects.as_deref().unwrap_or(&[])
    }

    /// `mutating` with its default applied (`true` when absent).
    pub fn is_mutating(&self) -> bool {
        self.mutating.unwrap_or(true)
    }

    /// Whether the tool declares at least one changing effect.
    pub fn declares_changing_effect(&self) -> bool {
        self.effects()
            .iter()
            .any(|e| e.kind.mode() == AccessMode::Write)
    }

    /// A tool is read-only when `mutating` is `false` and it declares no changing effect.
    pub fn is_read_only(&self) -> bool {
        !self.is_mutating() && !self.declares_changing_effect()
    }

    /// The transport with its default applied.
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or(Transport::Auto)
    }

    /// The sandbox posture with its default applied ([`Sandbox::None`]).
    pub fn sandbox(&self) -> Sandbox {
        self.sandbox.unwrap_or(Sandbox::None)
    }
}

/// Deserializes an optional field that, when present, must hold a value: `null` is refused,
/// as the schema refuses it (serde's `Option` would read it as absent).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Deserializes a struct-typed value, refusing anything but a JSON object (serde's derive would
/// also read a struct from an array, which the schema refuses).
fn object<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let v = Value::deserialize(d)?;
    if !v.is_object() {
        return Err(serde::de::Error::custom(format!(
            "expected an object, found {v}"
        )));
    }
    serde_json::from_value(v).map_err(serde::de::Error::custom)
}

/// [`object`] for an optional field (absent is `None`, `null` is refused).
fn some_object<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    object(d).map(Some)
}

/// An optional array of struct-typed values, each of which must be a JSON object.
fn some_objects<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    let items = Vec::<Value>::deserialize(d)?;
    items
        .into_iter()
        .map(|v| {
            if v.is_object() {
                serde_json::from_value(v).map_err(serde::de::Error::custom)
            } else {
                Err(serde::de::Error::custom(format!(
                    "expected an object, found {v}"
                )))
            }
        })
        .collect::<Result<Vec<T>, D::Error>>()
        .map(Some)
}

/// A string of at least one character.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NonEmptyString(String);

impl NonEmptyString {
    /// Wraps `s`, refusing the empty string.
    pub fn new(s: impl Into<String>) -> Result<Self, ShapeError> {
        let s = s.into();
        if s.is_empty() {
            Err(ShapeError("must not be empty".into()))
        } else {
            Ok(Self(s))
        }
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for NonEmptyString {
    type Error = ShapeError;
    fn try_from(s: String) -> Result<Self, ShapeError> {
        Self::new(s)
    }
}

impl From<NonEmptyString> for String {
    fn from(s: NonEmptyString) -> String {
        s.0
    }
}

impl std::ops::Deref for NonEmptyString {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NonEmptyString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A shape the schema refuses, found while deserializing a newtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError(String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

/// A version `MAJOR.MINOR.PATCH` (ASCII digits, `^[0-9]+\.[0-9]+\.[0-9]+$`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version(String);

impl Version {
    /// Parses `s`, refusing anything but three dot-separated runs of ASCII digits.
    pub fn new(s: impl Into<String>) -> Result<Self, ShapeError> {
        let s = s.into();
        let parts: Vec<&str> = s.split('.').collect();
        let ok = parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if ok {
            Ok(Self(s))
        } else {
            Err(ShapeError(format!("`{s}` is not a version like 1.2.3")))
        }
    }

    /// The version text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Version {
    type Error = ShapeError;
    fn try_from(s: String) -> Result<Self, ShapeError> {
        Self::new(s)
    }
}

impl From<Version> for String {
    fn from(v: Version) -> String {
        v.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An integer >= 1. Accepts a JSON number with a zero fraction (`5.0`), as JSON Schema's
/// `integer` does, so that the model and the schema give the same verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PositiveInt(NonZeroU64);

impl PositiveInt {
    /// Wraps `n`, refusing 0.
    pub fn new(n: u64) -> Option<Self> {
        NonZeroU64::new(n).map(Self)
    }

    /// The value.
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

impl Serialize for PositiveInt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0.get())
    }
}

impl<'de> Deserialize<'de> for PositiveInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = integer_from_json(d)?;
        if n > i128::from(u64::MAX) {
            return Err(serde::de::Error::custom(format!(
                "{n} is larger than Sluice takes: an integer from 1 to {}",
                u64::MAX
            )));
        }
        u64::try_from(n)
            .ok()
            .and_then(PositiveInt::new)
            .ok_or_else(|| serde::de::Error::custom(format!("{n} is less than the minimum of 1")))
    }
}

/// Reads a JSON integer (a number with no fractional part) as i128.
fn integer_from_json<'de, D: Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(i) = n.as_i64() {
        return Ok(i.into());
    }
    if let Some(u) = n.as_u64() {
        return Ok(u.into());
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e30 => Ok(f as i128),
        Some(f) if f.fract() == 0.0 => Err(serde::de::Error::custom(format!(
            "{n} is larger than Sluice takes: an integer from 1 to {}",
            u64::MAX
        ))),
        _ => Err(serde::de::Error::custom(format!("{n} is not an integer"))),
    }
}

/// A named context slot the runtime injects (`tenant`, `db`, `memory:facts`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Need {
    /// The slot's name.
    pub name: NonEmptyString,
    /// Whether the tool can run without it (absent means `false`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub optional: Option<bool>,
}

impl Need {
    /// `optional` with its default applied.
    pub fn is_optional(&self) -> bool {
        self.optional.unwrap_or(false)
    }
}

/// One declared side effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effect {
    /// What the tool does to the resource.
    pub kind: EffectKind,
    /// The resource template (absent means every resource, `*`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub resource: Option<String>,
    /// Free text for people.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub notes: Option<String>,
}

/// The kinds of effect a tool may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectKind {
    /// Reads the resource.
    Reads,
    /// Writes the resource.
    Writes,
    /// Deletes the resource.
    Deletes,
    /// Talks to the network.
    Network,
    /// Starts a run.
    SpawnsRun,
    /// Emits an event.
    EmitsEvent,
    /// Has an effect outside the system (sends mail, pays, deploys).
    ExternalSideEffect,
    /// Sends sensitive data out.
    SensitiveDataEgress,
}

impl EffectKind {
    /// Every kind, in schema order.
    pub const ALL: [EffectKind; 8] = [
        EffectKind::Reads,
        EffectKind::Writes,
        EffectKind::Deletes,
        EffectKind::Network,
        EffectKind::SpawnsRun,
        EffectKind::EmitsEvent,
        EffectKind::ExternalSideEffect,
        EffectKind::SensitiveDataEgress,
    ];

    /// Whether the kind changes its resource (write mode) or only observes it (read mode).
    pub fn mode(self) -> AccessMode {
        match self {
            EffectKind::Reads | EffectKind::Network | EffectKind::SensitiveDataEgress => {
                AccessMode::Read
            }
            EffectKind::Writes
            | EffectKind::Deletes
            | EffectKind::SpawnsRun
            | EffectKind::EmitsEvent
            | EffectKind::ExternalSideEffect => AccessMode::Write,
        }
    }

    /// The kind's name as the schema spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectKind::Reads => "reads",
            EffectKind::Writes => "writes",
            EffectKind::Deletes => "deletes",
            EffectKind::Network => "network",
            EffectKind::SpawnsRun => "spawns-run",
            EffectKind::EmitsEvent => "emits-event",
            EffectKind::ExternalSideEffect => "external-side-effect",
            EffectKind::SensitiveDataEgress => "sensitive-data-egress",
        }
    }

    /// Parses a kind by its schema name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for EffectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an access observes (`read`) or changes (`write`) its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    /// Observes: never conflicts with another read.
    Read,
    /// Changes: conflicts with any access to an overlapping resource.
    Write,
}

impl AccessMode {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::Read => "read",
            AccessMode::Write => "write",
        }
    }
}

/// Transport hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The runtime picks: a native handler, else the spec, else the MCP endpoint.
    Auto,
    /// In-process execution only.
    Native,
    /// MCP execution only.
    Mcp,
}

/// Isolation posture around the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sandbox {
    /// No isolation beyond the process.
    None,
    /// The handler reaches only the context it declared.
    ContextIsolated,
    /// As context-isolated, and stdio servers get only the declared environment.
    Strict,
}

/// Resource caps enforced at dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Memory cap in MiB.
    #[serde(rename = "memMB")]
    pub mem_mb: PositiveInt,
    /// CPU (wall-clock deadline, in Sluice) in milliseconds.
    pub cpu_ms: PositiveInt,
}

/// Network egress policy, discriminated on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum NetworkPolicy {
    /// No egress at all. (An empty struct variant, so that extra keys are refused.)
    None {},
    /// Any host.
    Unrestricted {},
    /// Only the listed hosts (exact match); an empty list allows nothing.
    Allowlist {
        /// Host names allowed.
        hosts: Vec<NonEmptyString>,
    },
}

/// Typed, discriminated needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeedsSpec {
    /// Environment values: name -> JSON Schema of the (string) value.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub env: Option<BTreeMap<String, JsonObject>>,
    /// Secrets: name -> JSON Schema of the (string) value.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub secrets: Option<BTreeMap<String, JsonObject>>,
    /// Reserved configuration: name -> JSON Schema.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub config: Option<BTreeMap<String, JsonObject>>,
    /// Capabilities the tool needs granted.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub capabilities: Option<Vec<NonEmptyString>>,
    /// Bindings the tool needs granted.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub bindings: Option<Vec<NonEmptyString>>,
}

/// Pointer to an imperative handler artifact, discriminated on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum CodeArtifactRef {
    /// The deploy-pipeline shape.
    #[serde(rename_all = "camelCase")]
    Oci {
        /// The image reference.
        image_ref: NonEmptyString,
        /// The module inside the image.
        module_path: NonEmptyString,
        /// The artifact version, like `YYYYMMDD.N`.
        artifact_version: NonEmptyString,
    },
    /// The local-development shape (production servers should reject it).
    #[serde(rename_all = "camelCase")]
    Filesystem {
        /// Absolute host path of the handler file.
        module_path: String,
    },
}

/// Declarative handler spec, discriminated on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ToolSpec {
    /// A declarative HTTP call.
    Http(HttpToolSpec),
}

/// Declarative HTTP invocation (`spec.kind = "http"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpToolSpec {
    /// The HTTP method.
    pub method: HttpMethod,
    /// URL with `{param}` placeholders filled from the input.
    pub url_template: NonEmptyString,
    /// Extra request headers (values may hold placeholders).
    #[serde(
        default,
        deserialize_with = "some_objects",
        skip_serializing_if = "Option::is_none"
    )]
    pub headers: Option<Vec<HttpHeaderSpec>>,
    /// How the request is authorized.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub authorization: Option<HttpAuthSpec>,
    /// How the request body is made.
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_body: Option<HttpRequestBodySpec>,
    /// Wall-clock timeout in ms (default 30,000).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_ms: Option<PositiveInt>,
    /// Parse the response body as JSON (default `true`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub parse_json: Option<bool>,
    /// The status range that means success (default 200..=299).
    #[serde(
        default,
        deserialize_with = "some_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub success_status: Option<StatusRange>,
}

/// HTTP methods an HTTP tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// PATCH
    Patch,
    /// DELETE
    Delete,
}

/// One request header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpHeaderSpec {
    /// Header name.
    pub name: NonEmptyString,
    /// Header value (may hold `{param}` placeholders).
    pub value: String,
}

/// A reference to a secret, resolved at call time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSecretRef {
    /// The environment variable that holds it (for resolvers that read the environment).
    pub env_name: NonEmptyString,
    /// The secret's name.
    pub name: NonEmptyString,
}

/// How an HTTP request is authorized, discriminated on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum HttpAuthSpec {
    /// `Authorization: Bearer <secret>`.
    #[serde(rename_all = "camelCase")]
    Bearer {
        /// The secret.
        #[serde(deserialize_with = "object")]
        secret_ref: ToolSecretRef,
    },
    /// `<headerName>: <secret>`.
    #[serde(rename_all = "camelCase")]
    Header {
        /// The header that carries the secret.
        header_name: NonEmptyString,
        /// The secret.
        #[serde(deserialize_with = "object")]
        secret_ref: ToolSecretRef,
    },
}

/// How an HTTP request body is made, discriminated on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum HttpRequestBodySpec {
    /// The input minus the keys the URL consumed, as JSON.
    JsonInput {},
    /// The whole input as JSON.
    InputPassthrough {},
    /// A text template with `{param}` placeholders, sent as text/plain.
    Text {
        /// The template.
        template: String,
    },
}

/// An inclusive range of HTTP status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRange {
    /// Lowest success status.
    pub min: StatusCode,
    /// Highest success status.
    pub max: StatusCode,
}

/// An HTTP status code, 100..=599.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatusCode(u16);

impl StatusCode {
    /// Wraps `n`, refusing anything outside 100..=599.
    pub fn new(n: u16) -> Option<Self> {
        (100..=599).contains(&n).then_some(Self(n))
    }

    /// The code.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl Serialize for StatusCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.0)
    }
}

impl<'de> Deserialize<'de> for StatusCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = integer_from_json(d)?;
        u16::try_from(n)
            .ok()
            .and_then(StatusCode::new)
            .ok_or_else(|| {
                serde::de::Error::custom(format!("{n} is not a status code in 100..599"))
            })
    }
}

/// Where an MCP server lives: `mcp+stdio://<command line>`, `mcp+http://<url>` or
/// `mcp+sse://<url>`.
///
/// Serializes back to the exact text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum McpEndpoint {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The text as written.
        raw: String,
        /// The command line after the scheme, unsplit (see [`McpEndpoint::argv`]).
        command: String,
    },
    /// Streamable HTTP.
    Http {
        /// The text as written.
        raw: String,
        /// The server URL (`http://...`).
        url: String,
    },
    /// The older HTTP+SSE transport.
    Sse {
        /// The text as written.
        raw: String,
        /// The server URL (`http://...`).
        url: String,
    },
}

impl McpEndpoint {
    /// The known endpoint schemes.
    pub const SCHEMES: [&'static str; 3] = ["mcp+stdio://", "mcp+http://", "mcp+sse://"];

    /// Parses an endpoint's scheme and shape, saying what is wrong when it cannot. The stdio
    /// command line is split later, by [`McpEndpoint::argv`] (validation checks that it splits).
    pub fn parse(raw: &str) -> Result<Self, ShapeError> {
        if let Some(command) = raw.strip_prefix("mcp+stdio://") {
            if command.is_empty() {
                return Err(ShapeError(format!("`{raw}` names no command")));
            }
            return Ok(McpEndpoint::Stdio {
                raw: raw.to_owned(),
                command: command.to_owned(),
            });
        }
        for (prefix, sse) in [("mcp+http://", false), ("mcp+sse://", true)] {
            if let Some(rest) = raw.strip_prefix(prefix) {
                if rest.is_empty() || rest.starts_with('/') {
                    return Err(ShapeError(format!("`{raw}` names no host")));
                }
                let url = format!("http://{rest}");
                let raw = raw.to_owned();
                return Ok(if sse {
                    McpEndpoint::Sse { raw, url }
                } else {
                    McpEndpoint::Http { raw, url }
                });
            }
        }
        Err(ShapeError(format!(
            "`{raw}` has no known scheme (mcp+stdio://, mcp+http://, mcp+sse://)"
        )))
    }

    /// For a stdio endpoint, its command line split as a POSIX shell would (program first);
    /// `None` for the HTTP transports.
    pub fn argv(&self) -> Option<Result<Vec<String>, ShapeError>> {
        let McpEndpoint::Stdio { command, .. } = self else {
            return None;
        };
        Some(match split_command_line(command) {
            Ok(argv) if argv.is_empty() => Err(ShapeError("the command line is blank".into())),
            Ok(argv) => Ok(argv),
            Err(why) => Err(ShapeError(format!(
                "the command line cannot be split: {why}"
            ))),
        })
    }

    /// The text as written in the manifest.
    pub fn as_str(&self) -> &str {
        match self {
            McpEndpoint::Stdio { raw, .. }
            | McpEndpoint::Http { raw, .. }
            | McpEndpoint::Sse { raw, .. } => raw,
        }
    }
}

impl Serialize for McpEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for McpEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        McpEndpoint::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// Splits a command line as a POSIX shell would: whitespace separates words; single quotes keep
/// everything literal; double quotes keep everything but `\"`, `\\`, `\$` and `` \` ``; a
/// backslash outside quotes escapes the next character. No expansion of any kind happens.
pub fn split_command_line(s: &str) -> Result<Vec<String>, &'static str> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a single quote is not closed"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a double quote is not closed"),
                        },
                        Some(c) => word.push(c),
                        None => return Err("a double quote is not closed"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(c) => word.push(c),
                    None => return Err("the line ends in a lone backslash"),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn internally_tagged_variants_refuse_unknown_fields() {
        let bad = json!({"kind": "none", "hosts": []});
        assert!(serde_json::from_value::<NetworkPolicy>(bad).is_err());
        let good = json!({"kind": "allowlist", "hosts": ["a.example"]});
        assert!(serde_json::from_value::<NetworkPolicy>(good).is_ok());
        let spec = json!({"kind": "http", "method": "GET", "urlTemplate": "https://x", "bogus": 1});
        assert!(serde_json::from_value::<ToolSpec>(spec).is_err());
        let body = json!({"kind": "json-input", "template": "x"});
        assert!(serde_json::from_value::<HttpRequestBodySpec>(body).is_err());
        let n: NetworkPolicy = serde_json::from_value(json!({"kind": "none"})).unwrap();
        assert_eq!(serde_json::to_value(n).unwrap(), json!({"kind": "none"}));
    }

    #[test]
    fn command_lines_split_as_a_shell_would() {
        assert_eq!(
            split_command_line(r#"npx -y "@scope/pkg" 'a b' c\ d "e\"f""#).unwrap(),
            vec!["npx", "-y", "@scope/pkg", "a b", "c d", "e\"f"]
        );
        assert!(split_command_line("'open").is_err());
        assert_eq!(split_command_line("  ").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn endpoints_parse_and_keep_their_text() {
        let e = McpEndpoint::parse("mcp+http://127.0.0.1:8080/mcp").unwrap();
        assert_eq!(
            e,
            McpEndpoint::Http {
                raw: "mcp+http://127.0.0.1:8080/mcp".into(),
                url: "http://127.0.0.1:8080/mcp".into()
            }
        );
        assert!(McpEndpoint::parse("mcp+ws://x").is_err());
        assert!(McpEndpoint::parse("mcp+stdio://").is_err());
        let e = McpEndpoint::parse("mcp+stdio://npx -y 'a b'").unwrap();
        assert_eq!(e.argv().unwrap().unwrap(), vec!["npx", "-y", "a b"]);
        assert!(McpEndpoint::parse("mcp+stdio://'x")
            .unwrap()
            .argv()
            .unwrap()
            .is_err());
    }

    #[test]
    fn integers_with_zero_fraction_are_integers() {
        let l: Limits = serde_json::from_value(json!({"memMB": 5.0, "cpuMs": 1})).unwrap();
        assert_eq!(l.mem_mb.get(), 5);
        assert!(serde_json::from_value::<Limits>(json!({"memMB": 0, "cpuMs": 1})).is_err());
        assert!(serde_json::from_value::<Limits>(json!({"memMB": 1.5, "cpuMs": 1})).is_err());
    }
}
