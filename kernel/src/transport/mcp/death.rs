//! Why a session ended: declared once, seen by every call in flight.

use std::sync::OnceLock;

use tokio_util::sync::CancellationToken;

use crate::transport::handler::ToolError;

/// Why a session ended, once it has: the calls in flight fail with this.
#[derive(Debug, Default)]
pub(crate) struct Death {
    token: CancellationToken,
    reason: OnceLock<ToolError>,
}

impl Death {
    /// Declares the session dead (the first reason wins) and wakes the calls in flight.
    pub(crate) fn declare(&self, why: ToolError) {
        let _ = self.reason.set(why);
        self.token.cancel();
    }

    /// Wakes the calls in flight without a reason (the session was dropped).
    pub(crate) fn end(&self) {
        self.token.cancel();
    }

    pub(crate) fn is_declared(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) async fn wait(&self) {
        self.token.cancelled().await;
    }

    pub(crate) fn reason(&self) -> Option<ToolError> {
        self.reason.get().cloned()
    }
}
