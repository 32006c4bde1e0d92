//! A pack tool's handler, and the registration of a pack's tools with it.

use std::sync::Arc;

use serde_json::Value;

use super::service::PackService;
use crate::error::{Error, Result};
use crate::model::{self, Manifest, PackIndex, ValidateOptions};
use crate::transport::context::ToolContext;
use crate::transport::handler::{Handler, HandlerFuture};
use crate::transport::registry::{TenantScope, Tool, ToolRegistry};

/// Carries out one pack tool's calls on its service.
#[derive(Debug)]
pub(crate) struct PackHandler {
    service: Arc<PackService>,
    id: Arc<str>,
    version: Arc<str>,
}

impl PackHandler {
    pub(crate) fn new(service: Arc<PackService>, manifest: &Manifest) -> Self {
        PackHandler {
            service,
            id: manifest.id.as_str().into(),
            version: manifest.version.as_str().into(),
        }
    }
}

impl Handler for PackHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let service = self.service.clone();
        let (id, version) = (self.id.clone(), self.version.clone());
        Box::pin(async move { service.invoke(&id, &version, ctx, input).await })
    }
}

impl PackService {
    /// Registers every tool of `index` (the index this service was made for) in `registry`: each
    /// validated like any manifest, carried out by this service (or, with a `spec`, by the
    /// spec's transport), its resources shared between tenants (one service serves them all).
    /// Returns how many it registered.
    pub fn register(
        self: &Arc<Self>,
        index: &PackIndex,
        registry: &mut ToolRegistry,
    ) -> Result<usize> {
        for raw in &index.tools {
            let report = model::validate(&raw.value, ValidateOptions::default());
            let Some(manifest) = report.manifest.filter(|_| report.errors.is_empty()) else {
                return Err(Error::InvalidManifest {
                    source_name: raw.source.to_string(),
                    errors: report.errors,
                });
            };
            let tool = if manifest.spec.is_some() {
                Tool::new(manifest, raw.source.clone(), None)?
            } else {
                let handler = Arc::new(PackHandler::new(self.clone(), &manifest));
                Tool::new(manifest, raw.source.clone(), Some(handler))?
                    .with_scope(TenantScope::Shared)
            };
            registry.insert(tool)?;
        }
        Ok(index.tools.len())
    }
}
