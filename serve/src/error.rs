//! What can go wrong setting the gateway up.

/// Why the gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The token file is unreadable or malformed.
    #[error("the token file {path}: {why}")]
    Tokens {
        /// The file.
        path: String,
        /// What is wrong, with the JSON pointer where there is one.
        why: String,
    },
    /// The tools' names collide.
    #[error(transparent)]
    Kernel(#[from] sluice_kernel::Error),
    /// The OTLP endpoint is unusable.
    #[error("--otlp {url}: {why}")]
    Otlp {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
}
