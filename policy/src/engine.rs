//! The policy engine: decisions per access and per call, with their reasons.
//!
//! Takes in: a checked [`PolicyDocument`], then calls (tenant, tool, accesses). Hands on: an
//! [`Authorization`] per call — `deny > ask > allow`, with `by` naming the rule, `default`, the
//! mode (`mode:<mode>`), `pure` or `unknown-tenant` — and explanations for people.
//!
//! # The rules (semantics.md section 4)
//!
//! - A deny or ask rule applies to an access when its kind and tool filters match and its
//!   resource *overlaps* the access's resource; an allow rule only when its resource *contains*
//!   the access's (a rule for `memory:*` allows `memory:facts`, never `*`).
//! - Per access: deny if any deny rule applies, else ask if any ask rule, else allow if any allow
//!   rule, else the tenant's default. The first applicable rule in document order is named.
//! - Per call: the strictest access decision (among equals, the first write names the reason). A
//!   call with no access (a *pure* call) takes the
//!   strictest matching *tool rule*, and is allowed (`by: pure`) when none matches; the tenant
//!   default never applies to it. An unknown tenant is denied everything.
//! - Human in the loop on top: the tool's own mode (read-only: `never_ask`, else
//!   `ask_on_first_use`) tightened by every matching `hitl` entry. A call allowed by its accesses
//!   still asks under `always_ask`, or under `ask_on_first_use` until one call of that tool by
//!   that tenant was approved (remembered for the engine's life, revocable).
//!
//! # The index
//!
//! Each tenant's rules are compiled per effect kind into buckets: rules with an exact resource by
//! that resource, rules with a wildcard resource by its literal prefix. A decision for an exact
//! resource looks up its own key and each prefix length in use — a handful of candidate rules —
//! instead of scanning every rule. (Wildcard accesses, rarer, scan the kind's rules.) The tests
//! hold the index to [`crate::linear`], a plain scan of the same rules.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dashmap::DashSet;
use serde::Serialize;
use sluice_kernel::access::{Access, Pattern};
use sluice_kernel::authorize::{AuthRequest, Authorization, Authorizer, DecidedBy, Decision};
use sluice_kernel::model::{AccessMode, EffectKind, Manifest};

use crate::document::{Mode, PolicyDocument, Rule, TenantPolicy};
use crate::error::PolicyError;

/// The decision for one access, and what made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessDecision {
    /// The decision.
    pub decision: Decision,
    /// The rule, or the tenant's default.
    pub by: DecidedBy,
}

#[derive(Debug, Default)]
struct KindIndex {
    /// Rules whose resource is exact, by that resource.
    exact: HashMap<Box<str>, Vec<u32>>,
    /// Rules whose resource has a wildcard (or is absent: prefix ""), by literal prefix.
    prefixed: HashMap<Box<str>, Vec<u32>>,
    /// The distinct prefix lengths in `prefixed`, ascending.
    prefix_lens: Vec<usize>,
    /// Every rule of this kind, in document order (for wildcard accesses).
    all: Vec<u32>,
}

#[derive(Debug)]
struct CompiledTenant {
    policy: TenantPolicy,
    /// The rules' ids, shared: a decision names its rule without allocating.
    rule_ids: Vec<Arc<str>>,
    kinds: Vec<KindIndex>,
    tool_rules: Vec<u32>,
}

fn kind_slot(k: EffectKind) -> usize {
    EffectKind::ALL.iter().position(|x| *x == k).unwrap_or(0)
}

// The hot path of every policy check indexes what compiling made: a rule index is a position
// enumerated from this tenant's rules (which never change after compile), a kind's slot is below
// `EffectKind::ALL.len()` (the length of `kinds`), a decision's slot is below 3 (the length of
// `best`). A checked lookup could only add a branch that never runs, and no safe answer for it.
#[allow(
    clippy::indexing_slicing,
    reason = "indices made by compiling this tenant's policy, see above"
)]
impl CompiledTenant {
    fn compile(policy: TenantPolicy) -> Self {
        let mut kinds: Vec<KindIndex> = EffectKind::ALL
            .iter()
            .map(|_| KindIndex::default())
            .collect();
        let mut tool_rules = Vec::new();
        for (i, rule) in policy.rules.iter().enumerate() {
            let i = i as u32;
            if rule.is_tool_rule() {
                tool_rules.push(i);
            }
            for kind in EffectKind::ALL {
                if !rule.effects.as_ref().is_none_or(|ks| ks.contains(&kind)) {
                    continue;
                }
                let idx = &mut kinds[kind_slot(kind)];
                idx.all.push(i);
                match rule.resource.as_ref().and_then(|r| r.as_exact()) {
                    Some(exact) => idx.exact.entry(exact.into()).or_default().push(i),
                    None => {
                        let prefix = rule.resource.as_ref().map_or("", |r| r.literal_prefix());
                        idx.prefixed.entry(prefix.into()).or_default().push(i);
                    }
                }
            }
        }
        for idx in &mut kinds {
            let mut lens: Vec<usize> = idx.prefixed.keys().map(|p| p.len()).collect();
            lens.sort_unstable();
            lens.dedup();
            idx.prefix_lens = lens;
        }
        CompiledTenant {
            rule_ids: policy
                .rules
                .iter()
                .map(|r| Arc::from(r.id.as_str()))
                .collect(),
            policy,
            kinds,
            tool_rules,
        }
    }

    /// The first applicable rule per decision class, by the index.
    fn decide_access(&self, tool: &str, kind: EffectKind, resource: &Pattern) -> AccessDecision {
        let idx = &self.kinds[kind_slot(kind)];
        let mut best: [Option<u32>; 3] = [None, None, None]; // allow, ask, deny
        let mut consider = |i: u32| {
            let rule = &self.policy.rules[i as usize];
            let slot = rule.decision as usize;
            if best[slot].is_some_and(|b| b <= i) {
                return;
            }
            if rule.applies(kind, tool, resource) {
                best[slot] = Some(i);
            }
        };
        match resource.as_exact() {
            Some(key) => {
                if let Some(rs) = idx.exact.get(key) {
                    rs.iter().copied().for_each(&mut consider);
                }
                for &len in &idx.prefix_lens {
                    if len > key.len() {
                        break;
                    }
                    if !key.is_char_boundary(len) {
                        continue;
                    }
                    if let Some(rs) = idx.prefixed.get(&key[..len]) {
                        rs.iter().copied().for_each(&mut consider);
                    }
                }
            }
            None => idx.all.iter().copied().for_each(&mut consider),
        }
        self.pick(best)
    }

    fn pick(&self, best: [Option<u32>; 3]) -> AccessDecision {
        for d in [Decision::Deny, Decision::Ask, Decision::Allow] {
            if let Some(i) = best[d as usize] {
                return AccessDecision {
                    decision: d,
                    by: DecidedBy::Rule(self.rule_ids[i as usize].clone()),
                };
            }
        }
        AccessDecision {
            decision: self.policy.default,
            by: DecidedBy::Default,
        }
    }

    /// A pure call: the strictest matching tool rule, else allowed as pure.
    fn decide_pure(&self, tool: &str) -> AccessDecision {
        let mut best: [Option<u32>; 3] = [None, None, None];
        for &i in &self.tool_rules {
            let rule = &self.policy.rules[i as usize];
            let slot = rule.decision as usize;
            if best[slot].is_none() && rule.matches_tool(tool) {
                best[slot] = Some(i);
            }
        }
        if best.iter().all(Option::is_none) {
            return AccessDecision {
                decision: Decision::Allow,
                by: DecidedBy::Pure,
            };
        }
        self.pick(best)
    }

    fn mode(&self, tool: &str, read_only: bool) -> Mode {
        let own = if read_only {
            Mode::NeverAsk
        } else {
            Mode::AskOnFirstUse
        };
        self.tightened(tool, own)
    }

    /// `own`, tightened by every `hitl` entry matching `tool`.
    fn tightened(&self, tool: &str, own: Mode) -> Mode {
        self.policy
            .hitl
            .iter()
            .filter(|(p, _)| p.matches(tool))
            .map(|(_, m)| *m)
            .fold(own, Mode::max)
    }
}

/// A compiled policy document: what the engine swaps atomically.
#[derive(Debug)]
pub struct CompiledPolicy {
    tenants: HashMap<String, CompiledTenant>,
}

impl CompiledPolicy {
    /// Compiles a checked document.
    pub fn compile(doc: PolicyDocument) -> Self {
        CompiledPolicy {
            tenants: doc
                .tenants
                .into_iter()
                .map(|(name, t)| (name, CompiledTenant::compile(t)))
                .collect(),
        }
    }
}

/// The engine: a compiled policy that can be swapped while batches run, and the approvals it
/// remembers. Implements the kernel's [`Authorizer`]; share it with `Arc` to keep a handle for
/// reloads:
///
/// ```
/// use std::sync::Arc;
/// use sluice_policy::{PolicyDocument, PolicyEngine};
/// let doc = |d: &str| PolicyDocument::from_value(&serde_json::json!({"tenants": {"acme": {"default": d}}})).unwrap();
/// let engine = Arc::new(PolicyEngine::new(doc("deny")));
/// let kernel = sluice_kernel::run::Kernel::builder().authorizer_arc(engine.clone()).build().unwrap();
/// engine.reload(doc("allow")); // takes effect for the next call, atomically
/// # let _ = kernel;
/// ```
#[derive(Debug)]
pub struct PolicyEngine {
    current: ArcSwap<CompiledPolicy>,
    approved: DashSet<(String, String)>,
}

/// Why a decision came out as it did, for people (`sluice policy explain`).
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The tenant.
    pub tenant: String,
    /// Whether the document defines the tenant.
    pub known_tenant: bool,
    /// The decision for the access alone.
    pub access: AccessDecision,
    /// Every rule of the tenant, with whether its filters matched and whether it applied.
    pub rules: Vec<RuleExplanation>,
    /// The tool's mode after the tenant's `hitl` entries.
    pub mode: String,
    /// The final decision for a call with this one access.
    pub decision: Decision,
    /// What made the final decision.
    pub by: DecidedBy,
}

/// One rule's part in an explanation.
#[derive(Debug, Clone, Serialize)]
pub struct RuleExplanation {
    /// The rule id.
    pub id: String,
    /// Its decision.
    pub decision: Decision,
    /// Whether its kind and tool filters match.
    pub filters_match: bool,
    /// Whether it applies (filters, and overlap or containment).
    pub applies: bool,
}

impl PolicyEngine {
    /// An engine for a checked document.
    pub fn new(doc: PolicyDocument) -> Self {
        PolicyEngine {
            current: ArcSwap::from_pointee(CompiledPolicy::compile(doc)),
            approved: DashSet::new(),
        }
    }

    /// An engine for the document in a file (JSON, or TOML by extension).
    pub fn from_path(path: &Path) -> Result<Self, PolicyError> {
        Ok(Self::new(PolicyDocument::from_path(path)?))
    }

    /// Swaps in a new document atomically: every decision sees the old policy or the new one,
    /// never a mix. Remembered approvals are kept.
    pub fn reload(&self, doc: PolicyDocument) {
        self.current.store(Arc::new(CompiledPolicy::compile(doc)));
    }

    /// Reads and swaps in the document in a file; a bad document is refused whole and the old
    /// policy stays in force.
    pub fn reload_from_path(&self, path: &Path) -> Result<(), PolicyError> {
        let doc = PolicyDocument::from_path(path)?;
        self.reload(doc);
        Ok(())
    }

    /// Forgets an `ask_on_first_use` approval: the tenant's next call of the tool asks again.
    pub fn revoke_approval(&self, tenant: &str, tool: &str) {
        self.approved.remove(&(tenant.to_owned(), tool.to_owned()));
    }

    /// Whether a first use of `tool` by `tenant` was approved.
    pub fn is_approved(&self, tenant: &str, tool: &str) -> bool {
        self.approved
            .contains(&(tenant.to_owned(), tool.to_owned()))
    }

    /// The decision for one access (no mode), or `None` for an unknown tenant.
    pub fn decide_access(
        &self,
        tenant: &str,
        tool: &str,
        kind: EffectKind,
        resource: &Pattern,
    ) -> Option<AccessDecision> {
        let policy = self.current.load();
        policy
            .tenants
            .get(tenant)
            .map(|t| t.decide_access(tool, kind, resource))
    }

    /// Whether every call of `tool` is denied for `tenant` whatever its input: a tool rule of
    /// the tenant denies the tool (deny wins over every other rule), or the policy has no such
    /// tenant (fail closed). The gateway leaves such tools out of the tenant's `tools/list`.
    ///
    /// ```
    /// use sluice_policy::{PolicyDocument, PolicyEngine};
    /// let engine = PolicyEngine::new(PolicyDocument::from_value(&serde_json::json!({"tenants": {
    ///     "acme": {"default": "allow", "rules": [
    ///         {"id": "no-shell", "decision": "deny", "tools": ["acme.shell*"]},
    ///         {"id": "no-deletes", "decision": "deny", "effects": ["deletes"]}]}}})).unwrap());
    /// assert!(engine.tool_denied("acme", "acme.shell-exec"));
    /// assert!(!engine.tool_denied("acme", "acme.kv-delete")); // only its deletes are denied
    /// assert!(engine.tool_denied("globex", "acme.kv-get")); // no such tenant
    /// ```
    #[allow(
        clippy::indexing_slicing,
        reason = "a tool rule's index is a position in its tenant's compiled rules"
    )]
    pub fn tool_denied(&self, tenant: &str, tool: &str) -> bool {
        let policy = self.current.load();
        let Some(t) = policy.tenants.get(tenant) else {
            return true;
        };
        t.tool_rules.iter().any(|&i| {
            let rule = &t.policy.rules[i as usize];
            rule.decision == Decision::Deny && rule.matches_tool(tool)
        })
    }

    /// The decision for a call: the strictest access decision, then the mode.
    pub fn decide(&self, tenant: &str, tool: &Manifest, accesses: &[Access]) -> Authorization {
        let policy = self.current.load();
        let Some(t) = policy.tenants.get(tenant) else {
            return Authorization::new(Decision::Deny, DecidedBy::UnknownTenant);
        };
        let tool_id = tool.id.as_str();
        let access = if accesses.is_empty() {
            t.decide_pure(tool_id)
        } else {
            // The strictest access names the reason; among equals, the first write (a write's
            // rule says more about a call than a read's).
            let mut strictest: Option<(AccessDecision, bool)> = None;
            for a in accesses {
                let d = t.decide_access(tool_id, a.kind, &a.resource);
                let write = a.mode() == AccessMode::Write;
                let better = strictest.as_ref().is_none_or(|(s, s_write)| {
                    d.decision > s.decision || (d.decision == s.decision && write && !s_write)
                });
                if better {
                    strictest = Some((d, write));
                }
            }
            strictest.map(|(d, _)| d).unwrap_or(AccessDecision {
                decision: Decision::Allow,
                by: DecidedBy::Pure,
            })
        };
        // A pack tool marked `needsApprovalWhenUnattended` waits for a person in a run no person
        // started; Sluice cannot tell who started a run, so it always asks (docs/packs.md).
        let mode = if tool.needs_approval_when_unattended() {
            t.tightened(tool_id, Mode::AlwaysAsk)
        } else {
            t.mode(tool_id, tool.is_read_only())
        };
        self.with_mode(tenant, tool_id, access, mode)
    }

    fn with_mode(
        &self,
        tenant: &str,
        tool: &str,
        access: AccessDecision,
        mode: Mode,
    ) -> Authorization {
        match (access.decision, mode) {
            (Decision::Deny, _) | (Decision::Ask, _) => {
                Authorization::new(access.decision, access.by)
            }
            (Decision::Allow, Mode::AlwaysAsk) => {
                Authorization::new(Decision::Ask, DecidedBy::mode(Mode::AlwaysAsk.as_str()))
            }
            (Decision::Allow, Mode::AskOnFirstUse) if !self.is_approved(tenant, tool) => {
                let mut a = Authorization::new(
                    Decision::Ask,
                    DecidedBy::mode(Mode::AskOnFirstUse.as_str()),
                );
                a.first_use = true;
                a
            }
            (Decision::Allow, _) => Authorization::new(Decision::Allow, access.by),
        }
    }

    /// Explains the decision for one access of `tool` (read-only or not) by `tenant`.
    pub fn explain(
        &self,
        tenant: &str,
        tool: &str,
        read_only: bool,
        kind: EffectKind,
        resource: &Pattern,
    ) -> Explanation {
        let policy = self.current.load();
        let Some(t) = policy.tenants.get(tenant) else {
            return Explanation {
                tenant: tenant.to_owned(),
                known_tenant: false,
                access: AccessDecision {
                    decision: Decision::Deny,
                    by: DecidedBy::UnknownTenant,
                },
                rules: Vec::new(),
                mode: "-".into(),
                decision: Decision::Deny,
                by: DecidedBy::UnknownTenant,
            };
        };
        let rules = t
            .policy
            .rules
            .iter()
            .map(|r: &Rule| RuleExplanation {
                id: r.id.clone(),
                decision: r.decision,
                filters_match: r.filters_match(kind, tool),
                applies: r.applies(kind, tool, resource),
            })
            .collect();
        let access = t.decide_access(tool, kind, resource);
        let mode = t.mode(tool, read_only);
        let auth = self.with_mode(tenant, tool, access.clone(), mode);
        Explanation {
            tenant: tenant.to_owned(),
            known_tenant: true,
            access,
            rules,
            mode: mode.as_str().to_owned(),
            decision: auth.decision,
            by: auth.by,
        }
    }
}

impl Authorizer for PolicyEngine {
    fn authorize(&self, request: &AuthRequest<'_>) -> Authorization {
        self.decide(request.tenant, request.tool, request.accesses)
    }

    fn remember_approval(&self, tenant: &str, tool: &str) {
        self.approved.insert((tenant.to_owned(), tool.to_owned()));
    }

    /// The tools a tool rule of the tenant's policy denies, and every tool of a tenant the
    /// policy does not know ([`PolicyEngine::tool_denied`]).
    fn hides(&self, tenant: &str, tool: &str) -> bool {
        self.tool_denied(tenant, tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_kernel::model::Manifest;

    /// A pack tool marked `needsApprovalWhenUnattended` (kept in `metadata.kindgi`) is asked
    /// every time, even read-only and after a first-use approval; a `hitl` entry cannot loosen it.
    #[test]
    fn needs_approval_when_unattended_always_asks() {
        let doc = crate::PolicyDocument::from_value(&json!({"tenants": {"acme": {
            "default": "allow", "hitl": {"ledger.*": "never_ask"}}}}))
        .unwrap();
        let engine = PolicyEngine::new(doc);
        let tool = |flag: bool| {
            Manifest::from_value(json!({"id": "ledger.balance", "description": "d",
                "version": "1.0.0", "input": {}, "output": {}, "mutating": false,
                "metadata": {"kindgi": {"needsApprovalWhenUnattended": flag}}}))
            .unwrap()
        };
        let marked = engine.decide("acme", &tool(true), &[]);
        assert_eq!(
            (marked.decision, marked.by),
            (Decision::Ask, DecidedBy::mode("always_ask"))
        );
        sluice_kernel::authorize::Authorizer::remember_approval(&engine, "acme", "ledger.balance");
        assert_eq!(
            engine.decide("acme", &tool(true), &[]).decision,
            Decision::Ask
        );
        assert_eq!(
            engine.decide("acme", &tool(false), &[]).decision,
            Decision::Allow
        );
    }
}
