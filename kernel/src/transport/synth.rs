//! Spec synthesizers by kind: [`Synthesizers`] maps a spec kind to the [`SpecSynthesizer`] that
//! makes a handler from it; an embedder can replace one or add its own through
//! [`crate::run::KernelBuilder::synthesizer`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::handler::{Handler, SpecSynthesizer};
use crate::model::{Manifest, ToolSpec};

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
        if let Ok(h) = super::http::HttpSynthesizer::new(super::http::HttpOptions::default()) {
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
    pub fn synthesize(
        &self,
        manifest: &Arc<Manifest>,
    ) -> Option<Result<Arc<dyn Handler>, crate::Error>> {
        let kind = match manifest.spec.as_ref()? {
            ToolSpec::Http(_) => "http",
        };
        Some(match self.by_kind.get(kind) {
            Some(s) => s.synthesize(manifest),
            None => Err(crate::Error::SpecUnusable {
                why: format!("no synthesizer is registered for spec kind `{kind}`"),
            }),
        })
    }
}
