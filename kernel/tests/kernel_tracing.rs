//! Each call runs inside a `tracing` span carrying its ids, tool, accesses and decision (and its
//! status when it ends), so an embedder's subscriber sees what the provenance log records.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use sluice_kernel::builtin::{self, BuiltinConfig};
use sluice_kernel::run::Kernel;
use sluice_kernel::{Batch, Call};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

#[derive(Default, Clone)]
struct Spans(Arc<Mutex<HashMap<u64, HashMap<String, String>>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if attrs.metadata().name() != "sluice.call" {
            return;
        }
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().insert(id.into_u64(), fields);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(fields) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

#[test]
fn every_call_has_a_span_with_its_story() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let kernel = Kernel::builder()
            .tools(builtin::registry(BuiltinConfig::default()).unwrap())
            .build()
            .unwrap();
        let batch = Batch::new(
            "acme",
            vec![
                Call::new("w", "sluice.kv.put", json!({"key": "k", "value": 1})),
                Call::new("bad", "sluice.kv.get", json!({"key": 3})),
            ],
        )
        .unwrap();
        let result = rt.block_on(kernel.run(batch)).unwrap();
        let spans = spans.0.lock().unwrap();
        let by_call: HashMap<&str, &HashMap<String, String>> =
            spans.values().map(|f| (f["call"].as_str(), f)).collect();
        let w = by_call["w"];
        assert_eq!(w["tenant"], "acme");
        assert_eq!(w["batch"], result.batch_id);
        assert_eq!(w["tool"], "sluice.kv.put");
        assert_eq!(w["accesses"], "writes kv:k");
        assert_eq!(w["decision"], "allow");
        assert_eq!(w["status"], "ok");
        let bad = by_call["bad"];
        assert_eq!(bad["status"], "error");
        assert!(
            !bad.contains_key("decision"),
            "a call refused before authorization has no decision"
        );
    });
}
