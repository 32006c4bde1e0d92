//! The `sluice` command line. Parses arguments and hands off to one module per command in
//! `cli/`; exit codes: 0 done, 1 invalid input or failed check, 2 usage error or unreadable file.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {}", cli::render_error(&e));
            ExitCode::from(cli::exit_code_of(&e))
        }
    }
}
