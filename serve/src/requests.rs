//! What the gateway knows of a request besides its body: where it came from (the provenance
//! origin of what it submits) and, for MCP, its JSON-RPC id while it is in flight.

use std::sync::Arc;

use serde_json::{json, Value};
use sluice_kernel::provenance::BatchOrigin;

/// Where a request came from, put in its extensions as it arrives: the provenance origin of
/// the batches it submits.
#[derive(Debug, Clone)]
pub(crate) struct RequestOrigin {
    /// `<gateway instance>/<connection number>`.
    pub(crate) connection: Arc<str>,
    /// The client's address.
    pub(crate) peer: std::net::SocketAddr,
    /// The request's number on its connection, from 1.
    pub(crate) request: u64,
}

impl RequestOrigin {
    /// The origin of a batch this request submits over `transport`; `rpc_id`, the JSON-RPC id
    /// of an MCP request.
    pub(crate) fn batch_origin(&self, transport: &str, rpc_id: Option<&str>) -> BatchOrigin {
        BatchOrigin {
            transport: transport.into(),
            connection: Some(self.connection.to_string()),
            peer: Some(self.peer.to_string()),
            request: Some(match rpc_id {
                Some(id) => format!("{} id={id}", self.request),
                None => self.request.to_string(),
            }),
            ..BatchOrigin::default()
        }
    }
}

/// The JSON-RPC request ids in flight, per MCP session: a second request with an id already in
/// flight in its session is refused at once (rmcp routes answers by id, so the two would share
/// one route and one of them would never be answered).
#[derive(Debug, Default)]
pub(crate) struct InFlightIds {
    ids: dashmap::DashSet<(String, String)>,
}

impl InFlightIds {
    /// Claims `id` (its JSON text: `5` and `"5"` are two ids) in `session`; `None` when it is
    /// already in flight there.
    pub(crate) fn claim(self: &Arc<Self>, session: &str, id: &str) -> Option<IdClaim> {
        let key = (session.to_owned(), id.to_owned());
        self.ids.insert(key.clone()).then(|| IdClaim {
            ids: self.clone(),
            key,
        })
    }
}

/// A request id in flight; released when dropped (with the request's answer).
#[derive(Debug)]
pub(crate) struct IdClaim {
    ids: Arc<InFlightIds>,
    key: (String, String),
}

impl Drop for IdClaim {
    fn drop(&mut self) {
        self.ids.ids.remove(&self.key);
    }
}

/// The JSON-RPC error for a request whose id is already in flight in its session.
pub(crate) fn duplicate_id(id: &Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!(
                "request id {id} is already in flight in this session: a request id must be \
                 unique among the session's unanswered requests"
            ),
            "data": {"code": "duplicate-request-id"}
        }
    })
}
