//! The `_meta` keys by which a tool's effects travel on in MCP's `tools/list`: `sluice serve`
//! publishes them, and `sluice mcp import` of a server the operator trusts reads them.

/// A tool's Kindgi effects, as an array: what it declares, and `{"kind": "writes"}` (every
/// resource) for a mutating tool that declares no changing effect, so that the array alone says
/// everything the tool may touch.
pub const EFFECTS_META: &str = "io.sluice/effects";

/// How a tool's path fields resolve (`metadata.sluice.paths`: see
/// [`crate::access::PathRules`]), beside [`EFFECTS_META`] for a tool that has them.
pub const PATHS_META: &str = "io.sluice/paths";
