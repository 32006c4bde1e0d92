//! Authorization: may this call's accesses happen for this tenant, and who said so.
//!
//! Takes in: a call's tenant, tool and accesses ([`AuthRequest`]). Hands on: an [`Authorization`]
//! — `allow`, `ask` or `deny`, with a typed [`DecidedBy`] naming the rule, default or mode
//! behind it (rendered as the contract's text tokens). An `ask` goes
//! to the [`Approver`] (the human in the loop); only an explicit approval runs the call, and a
//! rejection, a timeout or an approver error is a rejection (fail closed).
//!
//! The kernel defines these traits and depends on no policy engine: `sluice-policy` implements
//! [`Authorizer`]; the default, [`AllowAll`], allows everything and asks nothing. Closures
//! implement both traits:
//!
//! ```
//! use sluice_kernel::authorize::{Authorization, AuthRequest, Authorizer, DecidedBy, Decision};
//! let no_deletes = |req: &AuthRequest<'_>| {
//!     if req.accesses.iter().any(|a| a.kind.as_str() == "deletes") {
//!         Authorization::new(Decision::Deny, DecidedBy::rule("no-deletes"))
//!     } else {
//!         Authorization::new(Decision::Allow, DecidedBy::Default)
//!     }
//! };
//! // A rule that happens to be named `default` is still a rule.
//! assert_ne!(DecidedBy::rule("default"), DecidedBy::Default);
//! assert_eq!(DecidedBy::rule("default").to_string(), "default");
//! fn takes(_: &dyn Authorizer) {}
//! takes(&no_deletes);
//! ```

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::access::Access;
use crate::error::Error;
use crate::model::Manifest;

/// The three decisions, loosest first: the strictest of several wins (`deny > ask > allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call may run.
    Allow,
    /// The call may run if a person approves it.
    Ask,
    /// The call may not run.
    Deny,
}

impl Decision {
    /// `"allow"`, `"ask"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What made a decision. Rendered (by `Display` and in JSON) as the contract's text tokens: a
/// rule's id, `default`, `mode:<mode>`, `pure`, `unknown-tenant`, `unknown-tool`, `no-policy`.
/// The text of a rule named `default` and of the default are the same; the values are not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecidedBy {
    /// A policy rule, by id.
    Rule(Arc<str>),
    /// The tenant's default decision (`default`).
    Default,
    /// The tool's human-in-the-loop mode, by name (`mode:always_ask`, `mode:ask_on_first_use`).
    Mode(Cow<'static, str>),
    /// No rule matched a call that changes nothing (`pure`).
    Pure,
    /// The tenant is not in the policy (`unknown-tenant`).
    UnknownTenant,
    /// The call names no registered tool (`unknown-tool`).
    UnknownTool,
    /// No policy is configured: the embedded default allows everything (`no-policy`).
    NoPolicy,
}

impl DecidedBy {
    /// A rule, by id.
    pub fn rule(id: impl Into<Arc<str>>) -> Self {
        DecidedBy::Rule(id.into())
    }

    /// A human-in-the-loop mode, by name (without the `mode:` prefix).
    pub fn mode(name: impl Into<Cow<'static, str>>) -> Self {
        DecidedBy::Mode(name.into())
    }

    /// The reason for a person or a model: the token in backticks, then what kind of reason it
    /// is (`rule `r``, `` `default` (the tenant's default decision)``).
    pub fn describe(&self) -> String {
        match self {
            DecidedBy::Rule(id) => format!("rule `{id}`"),
            DecidedBy::Default => "`default` (the tenant's default decision)".into(),
            DecidedBy::Mode(m) => format!("`mode:{m}` (the tool's human-in-the-loop mode)"),
            DecidedBy::Pure => "`pure` (no rule matched a call that changes nothing)".into(),
            DecidedBy::UnknownTenant => "`unknown-tenant` (the tenant is not in the policy)".into(),
            DecidedBy::UnknownTool => "`unknown-tool` (no such tool)".into(),
            DecidedBy::NoPolicy => "`no-policy` (no policy is configured)".into(),
        }
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecidedBy::Rule(id) => f.write_str(id),
            DecidedBy::Default => f.write_str("default"),
            DecidedBy::Mode(m) => write!(f, "mode:{m}"),
            DecidedBy::Pure => f.write_str("pure"),
            DecidedBy::UnknownTenant => f.write_str("unknown-tenant"),
            DecidedBy::UnknownTool => f.write_str("unknown-tool"),
            DecidedBy::NoPolicy => f.write_str("no-policy"),
        }
    }
}

impl Serialize for DecidedBy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A decision with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Authorization {
    /// The decision.
    pub decision: Decision,
    /// What made it.
    pub by: DecidedBy,
    /// For an `ask` that comes from the tool's `ask_on_first_use` mode: an approval is
    /// remembered per tenant and tool (see [`Authorizer::remember_approval`]), and concurrent
    /// first uses ask once.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_use: bool,
}

impl Authorization {
    /// A decision made by `by`.
    pub fn new(decision: Decision, by: DecidedBy) -> Self {
        Authorization {
            decision,
            by,
            first_use: false,
        }
    }
}

/// What an authorizer is asked about.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The call id.
    pub call_id: &'a str,
    /// The tool's manifest.
    pub tool: &'a Manifest,
    /// The call's input.
    pub input: &'a Value,
    /// The call's accesses.
    pub accesses: &'a [Access],
}

/// Decides calls. Synchronous: a decision must be quick and never wait on I/O (asking a person
/// is the [`Approver`]'s job).
pub trait Authorizer: Send + Sync + 'static {
    /// The decision for one call.
    fn authorize(&self, request: &AuthRequest<'_>) -> Authorization;

    /// Called after a person approved a `first_use` ask, so that later calls of the tool by the
    /// tenant are not asked again. Default: nothing is remembered.
    fn remember_approval(&self, _tenant: &str, _tool: &str) {}

    /// Whether `tenant` is not to be offered `tool` (an id) at all: left out of the tool
    /// listings made for the tenant (the gateway's `tools/list` and `/v1/tools`,
    /// [`crate::adapters::ExportOptions::hiding`]). A policy hides the tools it denies
    /// outright. Listing is not authorizing: a call of a hidden tool is still authorized with
    /// [`Authorizer::authorize`]. Default: nothing is hidden.
    fn hides(&self, _tenant: &str, _tool: &str) -> bool {
        false
    }
}

impl<F> Authorizer for F
where
    F: Fn(&AuthRequest<'_>) -> Authorization + Send + Sync + 'static,
{
    fn authorize(&self, request: &AuthRequest<'_>) -> Authorization {
        self(request)
    }
}

/// The default authorizer: everything is allowed (`by: no-policy`) and nothing asks.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(&self, _request: &AuthRequest<'_>) -> Authorization {
        Authorization::new(Decision::Allow, DecidedBy::NoPolicy)
    }
}

/// An `ask` on its way to a person.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// The tenant.
    pub tenant: String,
    /// The call id.
    pub call_id: String,
    /// The tool id.
    pub tool: String,
    /// The call's input.
    pub input: Value,
    /// The call's accesses.
    pub accesses: Vec<Access>,
    /// Why it asks.
    pub authorization: Authorization,
}

/// A person's (or a program's) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Run the call.
    Approved {
        /// Who approved.
        by: String,
    },
    /// Do not run it.
    Rejected {
        /// Who rejected.
        by: String,
        /// Why, for the model.
        reason: String,
    },
}

/// The future an approver returns; an `Err` ([`Error::ApproverFailed`]) is an approver failure,
/// treated as a rejection.
pub type ApprovalFuture =
    Pin<Box<dyn Future<Output = Result<ApprovalOutcome, Error>> + Send + 'static>>;

/// Answers asks. The kernel waits for it with a timeout (a timeout is a rejection).
pub trait Approver: Send + Sync + 'static {
    /// Asks about one call.
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture;
}

/// Approves every ask (`--approve all`), recording the approver as `auto-approve`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve(&self, _request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(async {
            Ok(ApprovalOutcome::Approved {
                by: "auto-approve".into(),
            })
        })
    }
}

/// Rejects every ask (`--approve none`, the default): fail closed.
#[derive(Debug, Clone, Copy, Default)]
pub struct RejectAll;

impl Approver for RejectAll {
    fn approve(&self, _request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(async {
            Ok(ApprovalOutcome::Rejected {
                by: "no-approver".into(),
                reason: "no approver is configured, so every ask is rejected".into(),
            })
        })
    }
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ApprovalOutcome, Error>> + Send + 'static,
{
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(self(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_prints_the_contract_s_tokens_and_says_what_kind_of_reason_it_is() {
        let cases = [
            (
                DecidedBy::rule("no-deletes"),
                "no-deletes",
                "rule `no-deletes`",
            ),
            (DecidedBy::rule("default"), "default", "rule `default`"),
            (
                DecidedBy::Default,
                "default",
                "the tenant's default decision",
            ),
            (
                DecidedBy::mode("always_ask"),
                "mode:always_ask",
                "human-in-the-loop mode",
            ),
            (DecidedBy::Pure, "pure", "changes nothing"),
            (
                DecidedBy::UnknownTenant,
                "unknown-tenant",
                "not in the policy",
            ),
            (DecidedBy::UnknownTool, "unknown-tool", "no such tool"),
            (DecidedBy::NoPolicy, "no-policy", "no policy is configured"),
        ];
        for (by, text, described) in cases {
            assert_eq!(by.to_string(), text);
            assert!(by.describe().contains(described), "{}", by.describe());
            let a = Authorization::new(Decision::Allow, by);
            assert_eq!(serde_json::to_value(&a).unwrap()["by"], text);
        }
    }
}
