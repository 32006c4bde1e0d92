//! The `sluice` command line. Parses arguments and hands off to one module per command in
//! `cli/`; exit codes: 0 done, 1 invalid input or failed check, 2 usage error or unreadable file.

use std::process::ExitCode;

use clap::Parser;

#[macro_use]
mod cli;

fn main() -> ExitCode {
    // A bug must still end with one clear line, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("sluice: internal error (a bug in sluice, please report it): {info}");
    }));
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {}", cli::render_error(&e));
            ExitCode::from(cli::exit_code_of(&e))
        }
    }
}
