//! `/metrics`: the gateway's counters and histograms in the Prometheus text format, kept and
//! encoded by `prometheus-client` (the Prometheus project's Rust client).

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use sluice_kernel::CallResult;

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
/// reading), `sluice_http_refused_connections_total` (closed at accept: the cap or the peer's
/// share) and `sluice_http_timed_out_connections_total` (closed idle, or on a slow header).
pub struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    wait: Family<TenantLabels, Histogram>,
    run: Family<TenantLabels, Histogram>,
    in_flight: Family<TenantLabels, Gauge>,
    stalled: Counter,
    refused: Counter,
    timed_out: Counter,
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
        let refused = Counter::default();
        registry.register(
            "sluice_http_refused_connections",
            "Connections closed at accept: every place taken, or the peer's share",
            refused.clone(),
        );
        let timed_out = Counter::default();
        registry.register(
            "sluice_http_timed_out_connections",
            "Connections closed idle, or because a request's header came too slowly",
            timed_out.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            calls,
            wait,
            run,
            in_flight,
            stalled,
            refused,
            timed_out,
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

    /// A call of `tenant` ended with `r` (its batch started when it was submitted); `tool` is
    /// its label: the tool's id when it is registered, else `unknown`, so that the names a
    /// client sends never add series.
    pub fn observe(&self, tenant: &str, tool: &str, r: &CallResult) {
        let t = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.in_flight.get_or_create(&t).dec();
        self.calls
            .get_or_create(&CallLabels {
                tenant: tenant.to_owned(),
                tool: tool.to_owned(),
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

    /// A connection was closed at accept (`--max-connections`, or its peer's share).
    pub fn refused_connection(&self) {
        self.refused.inc();
    }

    /// A connection was closed by its idle or header timeout.
    pub fn timed_out_connection(&self) {
        self.timed_out.inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// The metrics one tenant may read: only the samples labelled with its tenant (the
    /// gateway-wide ones, such as stalled connections, are the operator's), with every family's
    /// description. `None`: everything.
    pub fn encode_for(&self, tenant: Option<&str>) -> String {
        let all = self.encode();
        let Some(tenant) = tenant else {
            return all;
        };
        let mut out = String::with_capacity(all.len());
        for line in all.lines() {
            let keep = line.starts_with('#') || tenant_label(line).as_deref() == Some(tenant);
            if keep {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// The value of the `tenant` label of a sample line (`name{a="x",tenant="t"} 1`), unescaped as
/// the text format escapes it (`\\`, `\"`, `\n`); `None` for a sample without one.
fn tenant_label(line: &str) -> Option<String> {
    let open = line.find('{')?;
    let mut rest = line[open + 1..].chars();
    loop {
        let name: String = rest.by_ref().take_while(|c| *c != '=').collect();
        if rest.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        loop {
            match rest.next()? {
                '"' => break,
                '\\' => match rest.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        if name.trim() == "tenant" {
            return Some(value);
        }
        match rest.next()? {
            ',' => continue,
            _ => return None,
        }
    }
}

/// A batch's calls in the in-flight gauge: each leaves it when it is observed ended, and those
/// never observed (a defect, or a task that panicked) leave it when the guard drops, so the
/// gauge never counts a call that is gone.
pub(crate) struct InFlightCalls {
    metrics: std::sync::Arc<Metrics>,
    tenant: String,
    left: usize,
}

impl InFlightCalls {
    /// `n` calls of `tenant` were submitted.
    pub(crate) fn started(metrics: std::sync::Arc<Metrics>, tenant: &str, n: usize) -> Self {
        for _ in 0..n {
            metrics.started(tenant);
        }
        InFlightCalls {
            metrics,
            tenant: tenant.to_owned(),
            left: n,
        }
    }

    /// One of them ended with `r`.
    pub(crate) fn ended(&mut self, tool: &str, r: &CallResult) {
        if self.left > 0 {
            self.left -= 1;
            self.metrics.observe(&self.tenant, tool, r);
        }
    }
}

impl Drop for InFlightCalls {
    fn drop(&mut self) {
        let g = self.metrics.in_flight.get_or_create(&TenantLabels {
            tenant: std::mem::take(&mut self.tenant),
        });
        for _ in 0..self.left {
            g.dec();
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::tenant_label;

    #[test]
    fn the_tenant_label_is_read_wherever_it_stands_and_unescaped() {
        let cases = [
            (r#"sluice_calls_in_flight{tenant="acme"} 1"#, Some("acme")),
            (
                r#"sluice_calls_total{tenant="a,b",tool="x",status="ok"} 1"#,
                Some("a,b"),
            ),
            (
                r#"sluice_call_wait_seconds_bucket{le="0.5",tenant="zeta"} 3"#,
                Some("zeta"),
            ),
            (r#"m{tool="tenant=\"acme\"",tenant="zeta"} 1"#, Some("zeta")),
            (r#"m{tenant="say \"hi\"\\\n"} 1"#, Some("say \"hi\"\\\n")),
            (r#"m{tool="acme"} 1"#, None),
            ("sluice_http_stalled_connections_total 0", None),
            (r#"m{tenant="unterminated} 1"#, None),
        ];
        for (line, want) in cases {
            assert_eq!(tenant_label(line).as_deref(), want, "{line}");
        }
    }
}
