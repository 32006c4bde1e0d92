//! Policy documents: reading and judging them.
//!
//! Takes in: a policy document as JSON (or TOML). Hands on: a [`PolicyDocument`] whose every
//! rule, filter and mode is checked — or every error found, each with its JSON pointer. A document
//! with an error is never half-applied.
//!
//! ```json
//! {"tenants": {"acme": {
//!   "default": "deny",
//!   "rules": [{"id": "read-memory", "decision": "allow", "effects": ["reads"], "resource": "memory:*"}],
//!   "hitl": {"acme.deploy": "always_ask"}
//! }}}
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;
use sluice_kernel::access::Pattern;
use sluice_kernel::authorize::Decision;
use sluice_kernel::model::EffectKind;

use crate::error::{PolicyError, Problem};

/// Human-in-the-loop modes, loosest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Never asks.
    NeverAsk,
    /// Asks on the first use of a tool by a tenant; an approval is remembered.
    AskOnFirstUse,
    /// Asks every time.
    AlwaysAsk,
}

impl Mode {
    /// The mode's name as documents spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::NeverAsk => "never_ask",
            Mode::AskOnFirstUse => "ask_on_first_use",
            Mode::AlwaysAsk => "always_ask",
        }
    }

    /// Parses a mode by name.
    pub fn parse(s: &str) -> Option<Self> {
        [Mode::NeverAsk, Mode::AskOnFirstUse, Mode::AlwaysAsk]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Unique within the tenant.
    pub id: String,
    /// What it decides.
    pub decision: Decision,
    /// The effect kinds it applies to (`None`: all).
    pub effects: Option<Vec<EffectKind>>,
    /// Patterns over tool ids (`None`: all tools).
    pub tools: Option<Vec<Pattern>>,
    /// The resource pattern (`None`: `*`).
    pub resource: Option<Pattern>,
}

impl Rule {
    /// A *tool rule*: `tools` and neither `effects` nor `resource`. It also decides pure calls.
    pub fn is_tool_rule(&self) -> bool {
        self.tools.is_some() && self.effects.is_none() && self.resource.is_none()
    }

    /// Whether the kind and tool filters let the rule look at an access of `kind` by `tool`.
    pub fn filters_match(&self, kind: EffectKind, tool: &str) -> bool {
        self.effects.as_ref().is_none_or(|k| k.contains(&kind)) && self.matches_tool(tool)
    }

    /// Whether the tool filter matches `tool`.
    pub fn matches_tool(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|t| t.matches(tool)))
    }

    /// Whether the rule applies to an access (filters, then overlap for deny and ask rules,
    /// containment for allow rules).
    pub fn applies(&self, kind: EffectKind, tool: &str, resource: &Pattern) -> bool {
        if !self.filters_match(kind, tool) {
            return false;
        }
        match (&self.resource, self.decision) {
            (None, _) => true,
            (Some(r), Decision::Allow) => r.contains(resource),
            (Some(r), _) => r.overlaps(resource),
        }
    }
}

/// One tenant's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPolicy {
    /// The decision when no rule applies (`deny` unless stated).
    pub default: Decision,
    /// The rules, in document order.
    pub rules: Vec<Rule>,
    /// Tool-id pattern -> mode; every matching entry can only tighten a tool's own mode.
    pub hitl: Vec<(Pattern, Mode)>,
}

/// A checked policy document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyDocument {
    /// The tenants, by name.
    pub tenants: BTreeMap<String, TenantPolicy>,
}

impl PolicyDocument {
    /// Reads a document from a file: TOML when the name ends in `.toml`, JSON otherwise.
    pub fn from_path(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let value = if path.extension().is_some_and(|e| e == "toml") {
            let v: toml::Value = toml::from_str(&text).map_err(|e| PolicyError::NotParseable {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            serde_json::to_value(v).map_err(|e| PolicyError::NotParseable {
                path: path.to_owned(),
                message: e.to_string(),
            })?
        } else {
            serde_json::from_str(&text).map_err(|e| PolicyError::NotParseable {
                path: path.to_owned(),
                message: e.to_string(),
            })?
        };
        Self::from_value(&value)
    }

    /// Checks a document given as JSON; every problem is reported, with its pointer.
    ///
    /// ```
    /// use sluice_policy::PolicyDocument;
    /// let err = PolicyDocument::from_value(&serde_json::json!({"tenants": {"acme": {
    ///     "rules": [{"id": "r", "decision": "maybe"}]}}})).unwrap_err();
    /// assert!(err.to_string().contains("/tenants/acme/rules/0/decision"));
    /// ```
    pub fn from_value(value: &Value) -> Result<Self, PolicyError> {
        let mut problems = Vec::new();
        let doc = parse_document(value, &mut problems);
        if problems.is_empty() {
            Ok(doc)
        } else {
            Err(PolicyError::Invalid { problems })
        }
    }
}

fn esc(key: &str) -> String {
    sluice_kernel::error::escape_pointer(key)
}

fn problem(problems: &mut Vec<Problem>, pointer: String, message: impl Into<String>) {
    problems.push(Problem {
        pointer,
        message: message.into(),
    });
}

fn unknown_keys(
    obj: &serde_json::Map<String, Value>,
    at: &str,
    known: &[&str],
    problems: &mut Vec<Problem>,
) {
    for k in obj.keys() {
        if !known.contains(&k.as_str()) {
            problem(
                problems,
                format!("{at}/{}", esc(k)),
                format!("unknown key `{k}` (expected one of: {})", known.join(", ")),
            );
        }
    }
}

fn decision(v: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<Decision> {
    match v.as_str() {
        Some("allow") => Some(Decision::Allow),
        Some("ask") => Some(Decision::Ask),
        Some("deny") => Some(Decision::Deny),
        _ => {
            problem(
                problems,
                at.to_owned(),
                format!("{v} is not a decision (allow, ask or deny)"),
            );
            None
        }
    }
}

fn pattern(v: &Value, at: &str, what: &str, problems: &mut Vec<Problem>) -> Option<Pattern> {
    let Some(s) = v.as_str() else {
        problem(problems, at.to_owned(), format!("{what} must be a string"));
        return None;
    };
    match Pattern::parse(s) {
        Ok(p) => Some(p),
        Err(e) => {
            problem(problems, at.to_owned(), format!("the pattern `{s}` {e}"));
            None
        }
    }
}

fn parse_document(value: &Value, problems: &mut Vec<Problem>) -> PolicyDocument {
    let mut doc = PolicyDocument::default();
    let Some(top) = value.as_object() else {
        problem(
            problems,
            String::new(),
            "a policy document is an object with `tenants`",
        );
        return doc;
    };
    unknown_keys(top, "", &["tenants"], problems);
    let Some(tenants) = top.get("tenants") else {
        problem(problems, String::new(), "`tenants` is required");
        return doc;
    };
    let Some(tenants) = tenants.as_object() else {
        problem(
            problems,
            "/tenants".into(),
            "`tenants` must be an object of tenant policies",
        );
        return doc;
    };
    for (name, t) in tenants {
        let at = format!("/tenants/{}", esc(name));
        if let Some(tp) = parse_tenant(t, &at, problems) {
            doc.tenants.insert(name.clone(), tp);
        }
    }
    doc
}

fn parse_tenant(t: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<TenantPolicy> {
    let Some(obj) = t.as_object() else {
        problem(problems, at.to_owned(), "a tenant policy is an object");
        return None;
    };
    unknown_keys(obj, at, &["default", "rules", "hitl"], problems);
    let default = match obj.get("default") {
        None => Decision::Deny,
        Some(v) => decision(v, &format!("{at}/default"), problems).unwrap_or(Decision::Deny),
    };
    let mut rules = Vec::new();
    match obj.get("rules") {
        None => {}
        Some(Value::Array(items)) => {
            let mut ids: BTreeMap<String, usize> = BTreeMap::new();
            for (i, r) in items.iter().enumerate() {
                let rat = format!("{at}/rules/{i}");
                // Duplicates are checked on every rule's id, valid or not.
                if let Some(id) = r.get("id").and_then(Value::as_str) {
                    if let Some(first) = ids.insert(id.to_owned(), i) {
                        problem(
                            problems,
                            format!("{rat}/id"),
                            format!("the rule id `{id}` is already used by {at}/rules/{first}"),
                        );
                    }
                }
                if let Some(rule) = parse_rule(r, &rat, problems) {
                    rules.push(rule);
                }
            }
        }
        Some(_) => problem(problems, format!("{at}/rules"), "`rules` must be an array"),
    }
    let mut hitl = Vec::new();
    match obj.get("hitl") {
        None => {}
        Some(Value::Object(m)) => {
            for (tool, mode) in m {
                let hat = format!("{at}/hitl/{}", esc(tool));
                let p = pattern(
                    &Value::String(tool.clone()),
                    &hat,
                    "a tool pattern",
                    problems,
                );
                let md = match mode.as_str().and_then(Mode::parse) {
                    Some(m) => Some(m),
                    None => {
                        problem(
                            problems,
                            hat.clone(),
                            format!(
                                "{mode} is not a mode (never_ask, ask_on_first_use, always_ask)"
                            ),
                        );
                        None
                    }
                };
                if let (Some(p), Some(m)) = (p, md) {
                    hitl.push((p, m));
                }
            }
        }
        Some(_) => problem(
            problems,
            format!("{at}/hitl"),
            "`hitl` must be an object of tool pattern -> mode",
        ),
    }
    Some(TenantPolicy {
        default,
        rules,
        hitl,
    })
}

fn parse_rule(r: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<Rule> {
    let Some(obj) = r.as_object() else {
        problem(problems, at.to_owned(), "a rule is an object");
        return None;
    };
    unknown_keys(
        obj,
        at,
        &["id", "decision", "effects", "tools", "resource"],
        problems,
    );
    let before = problems.len();
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => {
            problem(
                problems,
                format!("{at}/id"),
                "a rule id is a non-empty string",
            );
            String::new()
        }
        None => {
            problem(problems, at.to_owned(), "`id` is required");
            String::new()
        }
    };
    let decision = match obj.get("decision") {
        Some(v) => decision(v, &format!("{at}/decision"), problems),
        None => {
            problem(problems, at.to_owned(), "`decision` is required");
            None
        }
    };
    let effects = match obj.get("effects") {
        None => None,
        Some(Value::Array(ks)) => Some(
            ks.iter()
                .enumerate()
                .filter_map(|(i, k)| {
                    let parsed = k.as_str().and_then(EffectKind::parse);
                    if parsed.is_none() {
                        problem(
                            problems,
                            format!("{at}/effects/{i}"),
                            format!("{k} is not an effect kind"),
                        );
                    }
                    parsed
                })
                .collect(),
        ),
        Some(_) => {
            problem(
                problems,
                format!("{at}/effects"),
                "`effects` must be an array of kinds",
            );
            None
        }
    };
    let tools = match obj.get("tools") {
        None => None,
        Some(Value::Array(ts)) => Some(
            ts.iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    pattern(t, &format!("{at}/tools/{i}"), "a tool pattern", problems)
                })
                .collect(),
        ),
        Some(_) => {
            problem(
                problems,
                format!("{at}/tools"),
                "`tools` must be an array of patterns",
            );
            None
        }
    };
    let resource = obj
        .get("resource")
        .and_then(|v| pattern(v, &format!("{at}/resource"), "`resource`", problems));
    if problems.len() > before {
        return None;
    }
    Some(Rule {
        id,
        decision: decision?,
        effects,
        tools,
        resource,
    })
}
