//! Accesses, and the access plan that turns a call's input into them.

use std::fmt;

use serde_json::Value;

use super::normalize::Normalizers;
use super::pattern::Pattern;
use super::resource::{ResourceTemplate, TemplateError};
use crate::model::{AccessMode, EffectKind, Manifest};

/// One access of a call: what it does (`kind`) to which resources (`resource`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Access {
    /// The effect kind.
    pub kind: EffectKind,
    /// The resource pattern, after templating and normalization.
    pub resource: Pattern,
}

impl Access {
    /// Builds an access.
    pub fn new(kind: EffectKind, resource: Pattern) -> Self {
        Access { kind, resource }
    }

    /// The access's mode, from its kind.
    pub fn mode(&self) -> AccessMode {
        self.kind.mode()
    }
}

/// A tool's effects, compiled once: how to turn any input into the call's accesses.
#[derive(Debug, Clone)]
pub struct AccessPlan {
    effects: Vec<(EffectKind, ResourceTemplate)>,
    implicit_exclusive: bool,
    read_only: bool,
}

/// Why a manifest's effects cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectError {
    /// Index of the effect in `effects`.
    pub index: usize,
    /// The template problem.
    pub error: TemplateError,
}

impl fmt::Display for EffectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the resource of effect {} is not well formed: {}",
            self.index, self.error
        )
    }
}

impl std::error::Error for EffectError {}

impl AccessPlan {
    /// Compiles a manifest's effects.
    pub fn compile(manifest: &Manifest) -> Result<Self, EffectError> {
        let effects = manifest
            .effects()
            .iter()
            .enumerate()
            .map(|(index, e)| {
                let template = ResourceTemplate::parse(e.resource.as_deref().unwrap_or("*"))
                    .map_err(|error| EffectError { index, error })?;
                Ok((e.kind, template))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let read_only = manifest.is_read_only();
        Ok(AccessPlan {
            effects,
            implicit_exclusive: !read_only && !manifest.declares_changing_effect(),
            read_only,
        })
    }

    /// Whether the tool is read-only (`mutating: false` and no changing effect).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the tool gets the implicit `(writes, *)` access.
    pub fn is_implicitly_exclusive(&self) -> bool {
        self.implicit_exclusive
    }

    /// The accesses of a call with this input, in effect order, without duplicates.
    pub fn accesses(&self, input: &Value, normalizers: &Normalizers) -> Vec<Access> {
        let mut out: Vec<Access> = Vec::with_capacity(self.effects.len() + 1);
        for (kind, template) in &self.effects {
            template.expand_patterns(input, |p| {
                let access = Access::new(*kind, normalizers.apply(p));
                if !out.contains(&access) {
                    out.push(access);
                }
            });
        }
        if self.implicit_exclusive {
            out.push(Access::new(EffectKind::Writes, Pattern::any()));
        }
        out
    }
}
