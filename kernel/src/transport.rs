//! Transports: how a tool is carried out.
//!
//! Takes in: a tool's manifest. Hands on: its handler. With `transport: auto` (the default) the
//! kernel picks, in order: a native handler registered in code; else the handler a *spec
//! synthesizer* makes from the manifest's `spec` (the `http` synthesizer for
//! `spec: {kind: "http"}`, see [`crate::http`]); else the MCP endpoint (`crate::mcp`, feature
//! `mcp`). `transport: native` takes only the first, `transport: mcp` only the last. A tool with
//! none of them is refused at build unless the embedder accepts unrunnable tools.
//!
//! [`Synthesizers`] maps a spec kind to its synthesizer; an embedder can replace one or add its
//! own through [`crate::kernel::KernelBuilder::synthesizer`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::manifest::{Manifest, ToolSpec};
use crate::tool::Handler;

/// Makes a handler from a manifest's declarative `spec`.
pub trait SpecSynthesizer: Send + Sync + 'static {
    /// The handler for this manifest (whose `spec` is of this synthesizer's kind), or why not.
    fn synthesize(&self, manifest: &Arc<Manifest>) -> Result<Arc<dyn Handler>, String>;
}

/// Spec kind -> synthesizer. [`Synthesizers::default`] holds `http` (with the `http` feature).
#[derive(Clone)]
pub struct Synthesizers {
    by_kind: HashMap<String, Arc<dyn SpecSynthesizer>>,
}

impl fmt::Debug for Synthesizers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&String> = self.by_kind.keys().collect();
        kinds.sort();
        f.debug_struct("Synthesizers")
            .field("kinds", &kinds)
            .finish()
    }
}

impl Default for Synthesizers {
    fn default() -> Self {
        #[cfg_attr(not(feature = "http"), allow(unused_mut))]
        let mut s = Synthesizers::empty();
        #[cfg(feature = "http")]
        if let Ok(h) = crate::http::HttpSynthesizer::new(crate::http::HttpOptions::default()) {
            s.register("http", h);
        }
        s
    }
}

impl Synthesizers {
    /// No synthesizer at all.
    pub fn empty() -> Self {
        Synthesizers {
            by_kind: HashMap::new(),
        }
    }

    /// Registers (or replaces) the synthesizer of a spec kind.
    pub fn register(&mut self, kind: &str, s: impl SpecSynthesizer) -> &mut Self {
        self.by_kind.insert(kind.to_owned(), Arc::new(s));
        self
    }

    /// The handler for a manifest's spec: `None` when it has no spec, `Some(Err)` when no
    /// synthesizer takes its kind or the synthesizer refuses it.
    pub fn synthesize(&self, manifest: &Arc<Manifest>) -> Option<Result<Arc<dyn Handler>, String>> {
        let kind = match manifest.spec.as_ref()? {
            ToolSpec::Http(_) => "http",
        };
        Some(match self.by_kind.get(kind) {
            Some(s) => s.synthesize(manifest),
            None => Err(format!(
                "no synthesizer is registered for spec kind `{kind}`"
            )),
        })
    }
}
