//! `/metrics`: the gateway's counters and histograms in the Prometheus text format, kept and
//! encoded by `prometheus-client` (the Prometheus project's Rust client).

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::kernel::CallResult;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tenant: String,
    tool: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

/// The gateway's metrics: `sluice_calls_total{tenant,tool,status}`, the
/// `sluice_call_wait_seconds` and `sluice_call_run_seconds` histograms (waiting for conflicting
/// calls or approval, and running), `sluice_calls_in_flight{tenant}`, and
/// `sluice_http_stalled_connections_total` (connections dropped because their client stopped
/// reading).
pub struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    wait: Family<TenantLabels, Histogram>,
    run: Family<TenantLabels, Histogram>,
    in_flight: Family<TenantLabels, Gauge>,
    stalled: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn seconds() -> Histogram {
    // 100 µs to ~100 s.
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

impl Metrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let calls = Family::<CallLabels, Counter>::default();
        let wait = Family::<TenantLabels, Histogram>::new_with_constructor(seconds as fn() -> _);
        let run = Family::<TenantLabels, Histogram>::new_with_constructor(seconds as fn() -> _);
        let in_flight = Family::<TenantLabels, Gauge>::default();
        let mut registry = Registry::default();
        registry.register(
            "sluice_calls",
            "Calls ended, by tenant, tool and status",
            calls.clone(),
        );
        registry.register(
            "sluice_call_wait_seconds",
            "Time a call waited for conflicting calls or approval",
            wait.clone(),
        );
        registry.register("sluice_call_run_seconds", "Time a call ran", run.clone());
        registry.register(
            "sluice_calls_in_flight",
            "Calls submitted and not yet ended",
            in_flight.clone(),
        );
        let stalled = Counter::default();
        registry.register(
            "sluice_http_stalled_connections",
            "Connections dropped because their client stopped reading",
            stalled.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            calls,
            wait,
            run,
            in_flight,
            stalled,
        }
    }

    /// A call of `tenant` was submitted.
    pub fn started(&self, tenant: &str) {
        self.in_flight
            .get_or_create(&TenantLabels {
                tenant: tenant.to_owned(),
            })
            .inc();
    }

    /// A call of `tenant` ended with `r` (its batch started when it was submitted).
    pub fn observe(&self, tenant: &str, r: &CallResult) {
        let t = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.in_flight.get_or_create(&t).dec();
        self.calls
            .get_or_create(&CallLabels {
                tenant: tenant.to_owned(),
                tool: r.tool.clone(),
                status: r.status.to_string(),
            })
            .inc();
        if let (Some(start), Some(end)) = (r.started, r.ended) {
            self.wait.get_or_create(&t).observe(start.as_secs_f64());
            self.run
                .get_or_create(&t)
                .observe(end.saturating_sub(start).as_secs_f64());
        }
    }

    /// A connection was dropped because its client stopped reading.
    pub fn stalled(&self) {
        self.stalled.inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
