//! How a command fails: an error with its own exit code and message, and how any error is
//! told and ended.

/// An error that carries its own exit code and message (the message is already complete).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Exit 1: the input was invalid.
pub(crate) fn invalid(message: impl Into<String>) -> anyhow::Error {
    Failure {
        code: 1,
        message: message.into(),
    }
    .into()
}

/// Exit 2: a file could not be read; the message carries the error and its cause.
pub(crate) fn unreadable(e: &dyn std::error::Error) -> anyhow::Error {
    let cause = e.source().map(|s| format!(": {s}")).unwrap_or_default();
    Failure {
        code: 2,
        message: format!("{e}{cause}"),
    }
    .into()
}

/// The exit code for an error: 2 for unreadable files and usage errors, 1 for invalid input.
pub(crate) fn exit_code_of(e: &anyhow::Error) -> u8 {
    if let Some(f) = e.downcast_ref::<Failure>() {
        return f.code;
    }
    match e.downcast_ref::<sluice::kernel::Error>() {
        Some(sluice::kernel::Error::Unreadable { .. }) => 2,
        _ => 1,
    }
}

/// The message for an error (its chain, one line).
pub(crate) fn render_error(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}
