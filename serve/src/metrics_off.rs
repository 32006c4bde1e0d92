//! The gateway's metrics in a build without the `metrics` feature: nothing is counted, and
//! `GET /metrics` answers 404 naming the feature.

use std::sync::Arc;

use sluice_kernel::CallResult;

/// The gateway's metrics, left out of this build (the `metrics` feature is off): every method
/// does nothing.
#[derive(Debug, Default)]
pub struct Metrics;

impl Metrics {
    /// Metrics that count nothing.
    pub fn new() -> Self {
        Metrics
    }

    /// Counts nothing.
    pub fn stalled(&self) {}

    /// Counts nothing.
    pub fn refused_connection(&self) {}

    /// Counts nothing.
    pub fn timed_out_connection(&self) {}
}

/// A batch's calls, counted nowhere.
pub(crate) struct InFlightCalls;

impl InFlightCalls {
    /// Counts nothing.
    pub(crate) fn started(_metrics: Arc<Metrics>, _tenant: &str, _n: usize) -> Self {
        InFlightCalls
    }

    /// Counts nothing.
    pub(crate) fn ended(&mut self, _tool: &str, _r: &CallResult) {}
}

/// As the counting guard does when it drops (here: nothing), so that the gateway ends both the
/// same way.
impl Drop for InFlightCalls {
    fn drop(&mut self) {}
}
