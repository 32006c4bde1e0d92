//! `--approve elicit`: a call whose authorization asks is put to the user of the MCP client that
//! sent it, as a form with one boolean, `approve`. Only an accepted form with `approve: true`
//! runs the call; a client without the capability, a decline, a cancel, an error or the approval
//! timeout rejects it (fail closed).
//!
//! Two ways to ask, by the protocol revision the request speaks:
//! - up to 2025-11-25, an `elicitation/create` request to the client while the call waits
//!   ([`Elicit`]);
//! - from 2026-07-28 on, where a server may not send requests, the `tools/call` is answered with
//!   an `input_required` result holding the form and an opaque `requestState`; the call keeps
//!   its place in the conflict domain meanwhile, and the client's retry with the answer resumes
//!   it ([`Relay`], [`PendingAsks`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use rmcp::model::{
    BooleanSchema, ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, PrimitiveSchemaDefinition,
};
use rmcp::service::Peer;
use rmcp::RoleServer;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use sluice_kernel::authorize::{ApprovalFuture, ApprovalOutcome, ApprovalRequest, Approver};
use sluice_kernel::{CallResult, Error};

/// The approver recorded when the client cannot be asked.
const NO_ELICITATION: &str = "no-elicitation";

/// The form of an ask: what the user reads, and the one boolean they answer.
pub(crate) fn form(request: &ApprovalRequest) -> ElicitRequestParams {
    let accesses = request
        .accesses
        .iter()
        .map(|a| format!("{} {}", a.kind, a.resource))
        .collect::<Vec<_>>()
        .join(", ");
    let message = format!(
        "Allow `{}` (call `{}`) to run? It would {}. Asked by {}.",
        request.tool,
        request.call_id,
        if accesses.is_empty() {
            "touch no declared resource".to_owned()
        } else {
            accesses
        },
        request.authorization.by.describe()
    );
    let approve = BooleanSchema::new()
        .title("Approve")
        .description(format!("Run `{}` now", request.tool));
    let mut schema = ElicitationSchema::new(BTreeMap::from([(
        "approve".to_owned(),
        PrimitiveSchemaDefinition::Boolean(approve),
    )]));
    schema.property_order = None;
    schema.required = Some(vec!["approve".to_owned()]);
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// The answer to a form, as an approval outcome. `client` names who approved.
pub(crate) fn outcome(client: &str, answer: ElicitResult) -> ApprovalOutcome {
    let by = format!("elicitation:{client}");
    let approved = answer
        .content
        .as_ref()
        .and_then(|c| c.get("approve"))
        .and_then(Value::as_bool);
    match (answer.action, approved) {
        (ElicitationAction::Accept, Some(true)) => ApprovalOutcome::Approved { by },
        (ElicitationAction::Accept, _) => ApprovalOutcome::Rejected {
            by,
            reason: "the user did not approve".into(),
        },
        (ElicitationAction::Decline, _) => ApprovalOutcome::Rejected {
            by,
            reason: "the user declined".into(),
        },
        (ElicitationAction::Cancel, _) => ApprovalOutcome::Rejected {
            by,
            reason: "the user cancelled the question".into(),
        },
        (other, _) => ApprovalOutcome::Rejected {
            by,
            reason: format!("the client answered `{other:?}`, which approves nothing"),
        },
    }
}

/// Whether a client declared form elicitation (a bare `elicitation: {}` means form).
pub(crate) fn can_elicit(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The rejection of an ask that cannot reach a person.
pub(crate) fn cannot_ask(why: &str) -> ApprovalOutcome {
    ApprovalOutcome::Rejected {
        by: NO_ELICITATION.into(),
        reason: why.to_owned(),
    }
}

/// Asks through an `elicitation/create` request (protocol revisions up to 2025-11-25).
pub(crate) struct Elicit {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) client: String,
    pub(crate) capable: bool,
}

impl Approver for Elicit {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        if !self.capable {
            return Box::pin(async {
                Ok(cannot_ask(
                    "the MCP client declared no elicitation capability, so nobody can approve",
                ))
            });
        }
        let peer = self.peer.clone();
        let client = self.client.clone();
        Box::pin(async move {
            let answer = peer.create_elicitation(form(&request)).await.map_err(|e| {
                Error::ApproverFailed {
                    why: format!("the elicitation failed: {e}"),
                }
            })?;
            Ok(outcome(&client, answer))
        })
    }
}

/// 128 random bits as hex: a `requestState` nobody can guess; `None` when the operating system
/// gives no random bytes (the ask is then rejected: fail closed).
pub(crate) fn request_state() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex::encode(bytes))
}

/// An ask on its way to the `tools/call` handler that will put it in an `input_required`
/// result, with where the answer goes.
pub(crate) type Relayed = (ApprovalRequest, oneshot::Sender<ApprovalOutcome>);

/// Asks through the request that carries the call (protocol 2026-07-28 and later): the handler
/// receives the ask and answers `input_required`; the client's retry brings the answer.
pub(crate) struct Relay(pub(crate) mpsc::Sender<Relayed>);

impl Approver for Relay {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        let tx = self.0.clone();
        Box::pin(async move {
            let (answer, rx) = oneshot::channel();
            if tx.send((request, answer)).await.is_err() {
                return Ok(cannot_ask("the request that carried the call has ended"));
            }
            rx.await.map_err(|_| Error::ApproverFailed {
                why: "the client never answered the approval form".to_owned(),
            })
        })
    }
}

/// A call that answered `input_required` and waits for the client's retry.
struct PendingAsk {
    tenant: String,
    answer: oneshot::Sender<ApprovalOutcome>,
    resumed: Resumed,
    since: Instant,
}

/// A call resumed by its client's retry: wait for it, or cancel it.
pub(crate) struct Resumed {
    /// The call, running on.
    pub(crate) call: tokio::task::JoinHandle<Option<CallResult>>,
    /// Cancels it.
    pub(crate) cancel: CancellationToken,
}

/// The calls waiting for a retry, by `requestState`.
#[derive(Default)]
pub(crate) struct PendingAsks {
    map: DashMap<String, PendingAsk>,
}

impl std::fmt::Debug for PendingAsks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingAsks")
            .field("pending", &self.map.len())
            .finish()
    }
}

/// Why a retry cannot resume a call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ResumeError {
    /// No call waits under this state (never, already resumed, or forgotten).
    Unknown,
}

impl PendingAsks {
    /// Keeps a call under `state` ([`request_state`]) until its client retries. Entries whose
    /// call has ended and that nobody resumed within `keep` are forgotten here.
    pub(crate) fn insert(
        &self,
        state: &str,
        tenant: &str,
        answer: oneshot::Sender<ApprovalOutcome>,
        call: tokio::task::JoinHandle<Option<CallResult>>,
        cancel: CancellationToken,
        keep: Duration,
    ) {
        self.map
            .retain(|_, p| !(p.resumed.call.is_finished() && p.since.elapsed() > keep));
        self.map.insert(
            state.to_owned(),
            PendingAsk {
                tenant: tenant.to_owned(),
                answer,
                resumed: Resumed { call, cancel },
                since: Instant::now(),
            },
        );
    }

    /// Takes the call waiting under `state` for `tenant` and hands it the client's answer (the
    /// `approve` entry of `inputResponses`: anything but an accepted `approve: true` rejects).
    pub(crate) fn resume(
        &self,
        tenant: &str,
        state: &str,
        client: &str,
        response: Option<&Value>,
    ) -> Result<Resumed, ResumeError> {
        let (_, pending) = self
            .map
            .remove_if(state, |_, p| p.tenant == tenant)
            .ok_or(ResumeError::Unknown)?;
        let answer = match response.map(|v| serde_json::from_value::<ElicitResult>(v.clone())) {
            Some(Ok(a)) => outcome(client, a),
            Some(Err(e)) => ApprovalOutcome::Rejected {
                by: format!("elicitation:{client}"),
                reason: format!("the answer to the approval form is malformed: {e}"),
            },
            None => ApprovalOutcome::Rejected {
                by: format!("elicitation:{client}"),
                reason: "the retry carried no answer to the approval form".into(),
            },
        };
        // The call may have ended meanwhile (approval timeout): the answer is then moot.
        let _ = pending.answer.send(answer);
        Ok(pending.resumed)
    }

    /// How many calls wait for a retry.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// The elicitation request of an `input_required` result.
pub(crate) fn input_request(request: &ApprovalRequest) -> ElicitRequest {
    ElicitRequest::new(form(request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_kernel::authorize::{Authorization, DecidedBy, Decision};

    fn ask() -> ApprovalRequest {
        ApprovalRequest {
            tenant: "t".into(),
            call_id: "7".into(),
            tool: "sluice.fs.write".into(),
            input: json!({}),
            accesses: Vec::new(),
            authorization: Authorization::new(Decision::Ask, DecidedBy::rule("ask-writes")),
        }
    }

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let r = ElicitResult::new(action);
        match content {
            Some(c) => r.with_content(c),
            None => r,
        }
    }

    #[test]
    fn only_an_accepted_true_approves() {
        let approved = outcome(
            "c",
            answer(ElicitationAction::Accept, Some(json!({"approve": true}))),
        );
        assert_eq!(
            approved,
            ApprovalOutcome::Approved {
                by: "elicitation:c".into()
            }
        );
        for (action, content) in [
            (ElicitationAction::Accept, Some(json!({"approve": false}))),
            (ElicitationAction::Accept, Some(json!({"approve": "yes"}))),
            (ElicitationAction::Accept, None),
            (ElicitationAction::Decline, Some(json!({"approve": true}))),
            (ElicitationAction::Cancel, None),
        ] {
            let o = outcome("c", answer(action, content.clone()));
            assert!(
                matches!(o, ApprovalOutcome::Rejected { .. }),
                "{content:?}: {o:?}"
            );
        }
    }

    #[test]
    fn the_form_names_the_tool_the_call_and_the_rule() {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = form(&ask())
        else {
            panic!("a form");
        };
        assert!(message.contains("`sluice.fs.write`"), "{message}");
        assert!(message.contains("call `7`"), "{message}");
        assert!(message.contains("ask-writes"), "{message}");
        let schema = serde_json::to_value(requested_schema).unwrap();
        assert_eq!(schema["properties"]["approve"]["type"], "boolean");
        assert_eq!(schema["required"], json!(["approve"]));
    }

    #[tokio::test]
    async fn a_state_resumes_once_and_only_for_its_tenant() {
        let asks = PendingAsks::default();
        let (tx, rx) = oneshot::channel();
        let call = tokio::spawn(async { None });
        let state = request_state().unwrap();
        assert_eq!(state.len(), 32);
        asks.insert(
            &state,
            "acme",
            tx,
            call,
            CancellationToken::new(),
            Duration::from_secs(60),
        );
        let yes = json!({"action": "accept", "content": {"approve": true}});
        assert_eq!(
            asks.resume("other", &state, "c", Some(&yes)).err(),
            Some(ResumeError::Unknown),
            "another tenant cannot resume it"
        );
        assert!(asks.resume("acme", &state, "c", Some(&yes)).is_ok());
        assert!(matches!(rx.await, Ok(ApprovalOutcome::Approved { .. })));
        assert_eq!(
            asks.resume("acme", &state, "c", Some(&yes)).err(),
            Some(ResumeError::Unknown),
            "a state resumes once"
        );
        assert_eq!(asks.len(), 0);
    }
}
