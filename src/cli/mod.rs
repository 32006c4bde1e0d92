//! Argument parsing and dispatch to the commands.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use failure::{exit_code_of, render_error};

/// Prints to standard output; a closed pipe (`sluice ... | head`) ends the program quietly
/// instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::emit(format_args!($($arg)*), false)
    };
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::emit(format_args!($($arg)*), true)
    };
}

mod adopt;
pub(crate) mod common;
mod db;
mod demo;
mod failure;
#[cfg(feature = "mcp")]
mod mcp;
mod output;
mod plan;
mod policy;
mod provenance;
mod run;
mod serve;
mod tools;
mod validate;

/// Sluice: run an AI agent's batch of tool calls concurrently where they cannot conflict, in
/// order where they can, each one authorized and recorded.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check tool manifests (Kindgi tool schema 1.1.0): the schema, the rules beyond it, lints.
    ///
    /// Each PATH is a manifest file (one manifest or an array of them) or a directory of *.json
    /// files. Exit 1 when any manifest is invalid; warnings do not fail the check.
    Validate(validate::Args),
    /// Show how a batch would run: each call's accesses, the conflict edges between calls (with
    /// the resource and kind behind each), the waves and a critical path. Runs nothing.
    Plan(plan::Args),
    /// Run a batch: calls that cannot conflict run together, conflicting ones in submission
    /// order, each starting as soon as its predecessors finish. Prints every call's result in
    /// submission order. Exit 0 when the batch ran, whatever each call's status.
    Run(run::Args),
    /// The main job: one agent turn of 12 tool calls run serially, behind one global read/write
    /// lock, and with Sluice; timelines, identical results, and the speed-up.
    Demo(demo::Args),
    /// Policy documents: check one, or explain a decision.
    #[command(subcommand)]
    Policy(policy::Command),
    /// List the registered tools, or print them as OpenAI, Anthropic or MCP tool definitions.
    Tools(tools::Args),
    /// Provenance logs: verify one, ask who wrote what and why a call saw what it saw, export.
    #[command(subcommand)]
    Provenance(provenance::Command),
    /// The gateway: an MCP server (streamable HTTP or stdio) and an HTTP batch API in front of
    /// one kernel, with tenants from bearer tokens (docs/serve.md).
    Serve(serve::Args),
    /// The PostgreSQL database of a shared conflict domain: its schema (docs/scale.md).
    #[command(subcommand)]
    Db(db::Command),
    /// MCP servers: import a server's tools as Kindgi manifests.
    #[cfg(feature = "mcp")]
    #[command(subcommand)]
    Mcp(mcp::Command),
}

/// Runs the parsed command.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(a) => validate::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Run(a) => run::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Policy(c) => policy::run(c),
        Command::Provenance(c) => provenance::run(c),
        Command::Tools(a) => tools::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Db(c) => db::run(c),
        #[cfg(feature = "mcp")]
        Command::Mcp(c) => mcp::run(c),
    }
}
