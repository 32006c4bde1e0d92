//! What the commands print: standard output that a closed pipe ends quietly, and the formats
//! shared by several commands.

use clap::ValueEnum;

/// Writes to standard output; exits with status 0 when the reader has gone away.
pub(crate) fn emit(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let r = out
        .write_fmt(args)
        .and_then(|_| {
            if newline {
                out.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|_| out.flush());
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("sluice: cannot write to standard output: {e}");
        std::process::exit(2);
    }
}

/// Output format of `validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TextOrJson {
    /// For people.
    Text,
    /// For programs.
    Json,
}
