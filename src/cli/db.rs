//! `sluice db migrate URL`: brings a PostgreSQL database's schema to this version's (docs/scale.md).

use std::process::ExitCode;

use super::failure::Failure;

/// `sluice db`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Create or migrate the schema of the shared conflict domain (versioned migrations; each
    /// runs once). `run` and `serve` with `--domain` do it on first use too.
    Migrate {
        /// The database: `postgres://USER@HOST:PORT/DB`.
        url: String,
    },
}

pub(crate) fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate { url } => {
            let runtime = tokio::runtime::Runtime::new()?;
            let (before, after) = runtime
                .block_on(sluice::postgres::migrate_url(&url))
                .map_err(|e| Failure {
                    code: 2,
                    message: e.to_string(),
                })?;
            if before == after {
                outln!(
                    "the schema of {} is at version {after}: nothing to do",
                    sluice::postgres::redact_url(&url)
                );
            } else {
                outln!(
                    "migrated {} from version {before} to {after}",
                    sluice::postgres::redact_url(&url)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
