//! A batch's W3C trace context, and each call's: what a handler sends on as `traceparent`.
//!
//! A batch takes the client's `traceparent` when it has one ([`BatchOptions::with_traceparent`]);
//! else its trace id is derived from its own id, when a handler first asks. A call's span id is
//! derived from the trace and the call's id, so a call's context names one span of the batch's
//! trace without any clock or random draw (a schedule replays). An observer that exports spans gives the call's own span
//! instead ([`CallObserver::traceparent`]).
//!
//! [`BatchOptions::with_traceparent`]: crate::run::BatchOptions::with_traceparent
//! [`CallObserver::traceparent`]: crate::run::CallObserver::traceparent

use sha2::{Digest, Sha256};

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

/// The client's trace, as a batch keeps it: `<trace id>-<flags>` of a valid `traceparent`, else
/// `None` (the batch's trace is then derived from its id when a handler first asks: opening a
/// batch computes nothing).
pub(crate) fn client_trace(traceparent: Option<&str>) -> Option<std::sync::Arc<str>> {
    let (trace, _, flags) = parse(traceparent?)?;
    Some(format!("{trace}-{flags}").into())
}

/// A call's `traceparent`: its batch's trace (the client's, `<trace id>-<flags>`, else one
/// derived from the batch's id, not sampled) and a span id of the call's.
pub(crate) fn for_call(batch_id: &str, client: Option<&str>, call_id: &str) -> String {
    let (trace_id, flags) = match client.and_then(|c| c.split_once('-')) {
        Some((trace, flags)) => (trace.to_owned(), flags),
        None => {
            let digest = Sha256::new()
                .chain_update(b"sluice-trace\0")
                .chain_update(batch_id.as_bytes())
                .finalize();
            (
                nonzero(hex::encode(digest.get(..16).unwrap_or(&digest))),
                "00",
            )
        }
    };
    let digest = Sha256::new()
        .chain_update(trace_id.as_bytes())
        .chain_update(b"\0")
        .chain_update(call_id.as_bytes())
        .finalize();
    let span = nonzero(hex::encode(digest.get(..8).unwrap_or(&digest)));
    format!("00-{trace_id}-{span}-{flags}")
}

/// An id of hex digits, its last digit made 1 if all are 0 (W3C refuses an all-zero id).
fn nonzero(mut id: String) -> String {
    if id.bytes().all(|b| b == b'0') {
        let last = id.len().saturating_sub(1);
        id.replace_range(last.., "1");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn call(client: Option<&str>, batch: &str, call: &str) -> String {
        for_call(batch, client_trace(client).as_deref(), call)
    }

    #[test]
    fn a_client_trace_is_kept_and_each_call_gets_its_own_span() {
        let a = call(Some(TP), "b1", "a");
        let b = call(Some(TP), "b1", "b");
        let (trace, span, flags) = parse(&a).unwrap();
        assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(flags, "01");
        assert_ne!(span, "00f067aa0ba902b7");
        assert_ne!(a, b);
        assert_eq!(a, call(Some(TP), "b2", "a"));
    }

    #[test]
    fn without_a_valid_client_trace_the_batch_has_its_own() {
        let zero = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        for bad in [None, Some("nonsense"), Some(zero)] {
            let tp = call(bad, "b1", "a");
            let (trace, _, flags) = parse(&tp).expect("a valid traceparent");
            assert_eq!(flags, "00");
            let other = call(None, "b2", "a");
            assert_ne!(trace, parse(&other).unwrap().0);
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

    #[test]
    fn an_all_zero_id_is_made_valid() {
        assert_eq!(nonzero("0000".into()), "0001");
        assert_eq!(nonzero("0a00".into()), "0a00");
    }
}
