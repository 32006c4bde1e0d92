//! A batch's W3C trace context, and each call's: what a handler sends on as `traceparent`.
//!
//! A batch takes the client's `traceparent` when it has one ([`BatchOptions::with_traceparent`]);
//! else its trace id is derived from its own id. A call's span id is derived from the trace and
//! the call's id, so a call's context names one span of the batch's trace without any clock or
//! random draw (a schedule replays). An observer that exports spans gives the call's own span
//! instead ([`CallObserver::traceparent`]).
//!
//! [`BatchOptions::with_traceparent`]: crate::run::BatchOptions::with_traceparent
//! [`CallObserver::traceparent`]: crate::run::CallObserver::traceparent

use sha2::{Digest, Sha256};

/// The trace a batch's calls belong to: the client's, else one derived from the batch's id when
/// a handler first asks (opening a batch computes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchTrace {
    /// The batch's id.
    batch: std::sync::Arc<str>,
    /// The client's trace id (32 lowercase hex digits, not all zero) and flags (`01` sampled).
    client: Option<(String, String)>,
}

/// The parts of a valid version-00 `traceparent`: (trace id, parent id, flags). `None` for
/// anything else (a header that does not parse is ignored, as W3C Trace Context says).
pub(crate) fn parse(traceparent: &str) -> Option<(&str, &str, &str)> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let ok = parts.next().is_none()
        && version == "00"
        && hex(trace, 32)
        && !zero(trace)
        && hex(parent, 16)
        && !zero(parent)
        && hex(flags, 2);
    ok.then_some((trace, parent, flags))
}

impl BatchTrace {
    /// The batch's trace: the client's (`traceparent`, when valid), else one of its own.
    pub(crate) fn new(traceparent: Option<&str>, batch: std::sync::Arc<str>) -> Self {
        let client = traceparent
            .and_then(parse)
            .map(|(trace, _, flags)| (trace.to_owned(), flags.to_owned()));
        BatchTrace { batch, client }
    }

    /// The trace id and flags: the client's, else derived from the batch's id (not sampled).
    fn trace(&self) -> (String, &str) {
        if let Some((trace, flags)) = &self.client {
            return (trace.clone(), flags);
        }
        let digest = Sha256::new()
            .chain_update(b"sluice-trace\0")
            .chain_update(self.batch.as_bytes())
            .finalize();
        let mut trace_id = hex::encode(digest.get(..16).unwrap_or(&digest));
        if trace_id.bytes().all(|b| b == b'0') {
            trace_id.replace_range(31.., "1");
        }
        (trace_id, "00")
    }

    /// A call's `traceparent`: the batch's trace, a span id of the call's.
    pub(crate) fn for_call(&self, call_id: &str) -> String {
        let (trace_id, flags) = self.trace();
        let digest = Sha256::new()
            .chain_update(trace_id.as_bytes())
            .chain_update(b"\0")
            .chain_update(call_id.as_bytes())
            .finalize();
        let mut span = hex::encode(digest.get(..8).unwrap_or(&digest));
        if span.bytes().all(|b| b == b'0') {
            span.replace_range(15.., "1");
        }
        format!("00-{trace_id}-{span}-{flags}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_client_trace_is_kept_and_each_call_gets_its_own_span() {
        let t = BatchTrace::new(Some(TP), "b1".into());
        let a = t.for_call("a");
        let b = t.for_call("b");
        let (trace, span, flags) = parse(&a).unwrap();
        assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(flags, "01");
        assert_ne!(span, "00f067aa0ba902b7");
        assert_ne!(a, b);
        assert_eq!(a, BatchTrace::new(Some(TP), "b2".into()).for_call("a"));
    }

    #[test]
    fn without_a_valid_client_trace_the_batch_has_its_own() {
        for bad in [
            None,
            Some("nonsense"),
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        ] {
            let t = BatchTrace::new(bad, "b1".into());
            let tp = t.for_call("a");
            let (trace, _, flags) = parse(&tp).expect("a valid traceparent");
            assert_eq!(flags, "00");
            assert_ne!(trace, BatchTrace::new(None, "b2".into()).trace().0);
        }
    }

    #[test]
    fn parse_refuses_what_w3c_refuses() {
        assert!(parse(TP).is_some());
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
