//! Which transport carries out each tool, decided once when the kernel is built.
//!
//! `transport: native` takes a handler registered in code, else the handler synthesized from its
//! `spec`; `mcp` only the MCP endpoint (from the manifest or bound at deployment);
//! `auto` (the default) a native handler, else the handler a synthesizer makes from the `spec`,
//! else the MCP endpoint. MCP servers are not started here: each endpoint's session starts with
//! its first call.

use std::collections::HashMap;
use std::sync::Arc;

use super::handler::Handler;
#[cfg(feature = "mcp")]
use super::mcp::{self, McpOptions, McpSessions};
use super::registry::Tool;
use super::synth::Synthesizers;
use crate::error::{Diagnostic, Error, Result};
use crate::model::{Manifest, Transport};

/// The tools with their handlers, and the MCP sessions that carry some of them.
pub(crate) struct Resolved {
    /// Every tool; a tool with no handler is unrunnable (refused unless accepted).
    pub(crate) tools: Vec<Arc<Tool>>,
    /// The endpoints of the tools carried out over MCP.
    #[cfg(feature = "mcp")]
    pub(crate) mcp: McpSessions,
}

/// What resolution needs besides the tools.
pub(crate) struct ResolveOptions<'a> {
    pub(crate) synthesizers: &'a Synthesizers,
    /// The embedder's `needsSpec.env` values (an MCP server started over stdio gets them).
    pub(crate) env: &'a HashMap<String, String>,
    #[cfg(feature = "mcp")]
    pub(crate) mcp: &'a McpOptions,
    /// Accept tools with no way to run (their calls end `no-handler`).
    pub(crate) allow_unrunnable: bool,
}

/// Resolves every tool's transport; refuses (unless allowed) a tool that has no way to run,
/// naming what is missing.
pub(crate) fn resolve(pending: Vec<Arc<Tool>>, options: &ResolveOptions<'_>) -> Result<Resolved> {
    let staged = native_and_spec(pending, options.synthesizers)?;
    #[cfg(not(feature = "mcp"))]
    let _ = options.env;
    #[cfg(feature = "mcp")]
    let sessions = McpSessions::new(
        staged
            .iter()
            .filter(|(_, by_mcp)| *by_mcp)
            .map(|(t, _)| &**t.manifest()),
        options.env,
        options.mcp,
    );
    let mut tools = Vec::with_capacity(staged.len());
    for (t, by_mcp) in staged {
        #[cfg(feature = "mcp")]
        let t = match mcp::handler(&sessions, t.manifest()).filter(|_| by_mcp) {
            Some(handler) => with_handler(&t, handler)?,
            None => t,
        };
        #[cfg(not(feature = "mcp"))]
        let _ = by_mcp;
        if !options.allow_unrunnable && t.handler().is_none() {
            return Err(Error::Unrunnable {
                id: t.id().to_owned(),
                source_name: t.source().to_string(),
                why: unrunnable_reason(t.manifest()).to_owned(),
            });
        }
        tools.push(t);
    }
    Ok(Resolved {
        tools,
        #[cfg(feature = "mcp")]
        mcp: sessions,
    })
}

/// Resolves each tool's transport as far as native handlers and specs go: each tool (a spec's
/// handler synthesized in), and whether the MCP transport carries it out.
fn native_and_spec(
    pending: Vec<Arc<Tool>>,
    synthesizers: &Synthesizers,
) -> Result<Vec<(Arc<Tool>, bool)>> {
    let mut resolved = Vec::with_capacity(pending.len());
    for t in pending {
        let m = t.manifest();
        let entry = match m.transport() {
            Transport::Native if t.handler().is_some() || m.spec.is_none() => (t, false),
            Transport::Mcp => (t, true),
            Transport::Auto if t.handler().is_some() => (t, false),
            // `native` with a `spec` and no handler: the spec's handler runs in process.
            Transport::Native | Transport::Auto => match synthesizers.synthesize(m) {
                Some(made) => {
                    let handler = made.map_err(|why| Error::InvalidManifest {
                        source_name: t.source().to_string(),
                        errors: vec![Diagnostic::new("/spec", why.to_string())],
                    })?;
                    (with_handler(&t, handler)?, false)
                }
                None => {
                    let by_mcp = m.mcp_endpoint.is_some() && m.transport() == Transport::Auto;
                    (t, by_mcp)
                }
            },
        };
        resolved.push(entry);
    }
    Ok(resolved)
}

/// The same tool, carried out by `handler`: still the remote service it was (its tenant scope
/// is kept, not re-derived as a native handler's).
fn with_handler(t: &Tool, handler: Arc<dyn Handler>) -> Result<Arc<Tool>> {
    let tool = Tool::new((**t.manifest()).clone(), t.source().clone(), Some(handler))?
        .with_scope(t.scope());
    Ok(Arc::new(tool))
}

/// Why a tool has no way to run: for [`Error::Unrunnable`] at build, and for the `no-handler`
/// result of a call to a tool the embedder accepted anyway.
pub(crate) fn unrunnable_reason(m: &Manifest) -> &'static str {
    reason_in_build(m, cfg!(feature = "http"), cfg!(feature = "mcp"))
}

/// [`unrunnable_reason`] in a build with (or without) the `http` and `mcp` features.
fn reason_in_build(m: &Manifest, http: bool, mcp: bool) -> &'static str {
    match (m.transport(), &m.mcp_endpoint) {
        (Transport::Native | Transport::Auto, _)
            if matches!(m.spec, Some(crate::model::ToolSpec::Http(_))) && !http =>
        {
            "its `spec` is an HTTP request, which needs the `http` feature this build leaves out"
        }
        (Transport::Native, _) => {
            "it is `transport: native` and no native handler is registered under its id"
        }
        (Transport::Mcp, None) => {
            "it is `transport: mcp` and names no `mcpEndpoint`: bind one at deployment with \
             `--mcp-endpoint ID=URI` (or `ToolRegistry::bind_mcp_endpoint`)"
        }
        (_, Some(_)) if !mcp => {
            "its MCP endpoint needs the `mcp` feature, which this build leaves out"
        }
        _ => "it has no native handler registered in code, no `spec` and no `mcpEndpoint`",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tool whose transport this build leaves out is refused naming the feature to turn on.
    #[test]
    fn a_tool_whose_transport_is_left_out_names_the_feature() {
        let http = Manifest::from_value(json!({"id": "svc.get", "description": "remote",
            "version": "1.0.0", "input": {"type": "object"}, "output": {}, "mutating": false,
            "effects": [{"kind": "reads", "resource": "svc:x"}],
            "spec": {"kind": "http", "method": "GET", "urlTemplate": "http://127.0.0.1:9/x"}}))
        .unwrap();
        assert!(reason_in_build(&http, false, true).contains("the `http` feature"));
        assert!(!reason_in_build(&http, true, true).contains("feature"));
        let mcp = Manifest::from_value(json!({"id": "svc.mcp", "description": "remote",
            "version": "1.0.0", "input": {"type": "object"}, "output": {}, "mutating": false,
            "effects": [], "transport": "mcp", "mcpEndpoint": "mcp+stdio://server"}))
        .unwrap();
        assert!(reason_in_build(&mcp, true, false).contains("the `mcp` feature"));
    }
}
