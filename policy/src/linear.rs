//! The reference evaluator: every rule scanned in document order, no index.
//!
//! Takes in: a [`PolicyDocument`] and one call. Hands on: the same [`Authorization`] the
//! [`crate::PolicyEngine`] gives, computed the plain way — the oracle the engine's property test
//! and benchmark compare against.

use sluice_kernel::access::Access;
use sluice_kernel::authorize::{Authorization, DecidedBy, Decision};
use sluice_kernel::model::AccessMode;

use crate::document::{Mode, PolicyDocument, TenantPolicy};

/// The decision and reason for one access by scanning every rule.
pub fn decide_access(t: &TenantPolicy, tool: &str, access: &Access) -> (Decision, DecidedBy) {
    for d in [Decision::Deny, Decision::Ask, Decision::Allow] {
        for r in &t.rules {
            if r.decision == d && r.applies(access.kind, tool, &access.resource) {
                return (d, DecidedBy::rule(r.id.as_str()));
            }
        }
    }
    (t.default, DecidedBy::Default)
}

/// The decision for a call by scanning every rule (`approved`: whether the tool's first use was
/// approved for the tenant).
pub fn decide(
    doc: &PolicyDocument,
    tenant: &str,
    tool: &str,
    read_only: bool,
    accesses: &[Access],
    approved: bool,
) -> Authorization {
    let Some(t) = doc.tenants.get(tenant) else {
        return Authorization::new(Decision::Deny, DecidedBy::UnknownTenant);
    };
    let (decision, by) = if accesses.is_empty() {
        let mut out = (Decision::Allow, DecidedBy::Pure);
        'found: for d in [Decision::Deny, Decision::Ask, Decision::Allow] {
            for r in &t.rules {
                if r.decision == d && r.is_tool_rule() && r.matches_tool(tool) {
                    out = (d, DecidedBy::rule(r.id.as_str()));
                    break 'found;
                }
            }
        }
        out
    } else {
        let mut best = (Decision::Allow, DecidedBy::Pure);
        let mut best_write = false;
        let mut first = true;
        for a in accesses {
            let d = decide_access(t, tool, a);
            let write = a.mode() == AccessMode::Write;
            if first || d.0 > best.0 || (d.0 == best.0 && write && !best_write) {
                best = d;
                best_write = write;
                first = false;
            }
        }
        best
    };
    let mut mode = if read_only {
        Mode::NeverAsk
    } else {
        Mode::AskOnFirstUse
    };
    for (p, m) in &t.hitl {
        if p.matches(tool) && *m > mode {
            mode = *m;
        }
    }
    match decision {
        Decision::Deny | Decision::Ask => Authorization::new(decision, by),
        Decision::Allow => match mode {
            Mode::AlwaysAsk => {
                Authorization::new(Decision::Ask, DecidedBy::mode(Mode::AlwaysAsk.as_str()))
            }
            Mode::AskOnFirstUse if !approved => {
                let mut a = Authorization::new(
                    Decision::Ask,
                    DecidedBy::mode(Mode::AskOnFirstUse.as_str()),
                );
                a.first_use = true;
                a
            }
            _ => Authorization::new(Decision::Allow, by),
        },
    }
}
