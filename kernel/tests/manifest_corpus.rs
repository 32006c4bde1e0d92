//! The fixture corpus (tests/fixtures/manifests): every valid manifest validates and round-trips,
//! every invalid one reports the JSON pointer `expected.json` names, each expected warning is
//! raised, and the serde model and the JSON Schema give the same verdict on the shape of every
//! file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::Value;
use sluice_kernel::model::{read_manifests, schema_accepts, validate, Manifest, ValidateOptions};

fn expected() -> Value {
    support::read_json(&support::fixture("manifests/expected.json"))
}

#[test]
fn the_corpus_is_large_enough() {
    let n = |d: &str| std::fs::read_dir(support::fixture(d)).unwrap().count();
    assert!(n("manifests/valid") + n("manifests/invalid") >= 40);
}

#[test]
fn valid_manifests_validate_and_round_trip() {
    for raw in read_manifests(&support::fixture("manifests/valid")).unwrap() {
        let report = validate(&raw.value, ValidateOptions::default());
        assert!(report.is_valid(), "{}: {:?}", raw.source, report.errors);
        let m = report.manifest.unwrap();
        let again = Manifest::from_value(m.to_value()).unwrap();
        assert_eq!(m, again, "{} does not round-trip", raw.source);
    }
}

#[test]
fn invalid_manifests_report_their_pointer() {
    let exp = expected();
    let invalid = exp["invalid"].as_object().unwrap();
    assert_eq!(
        invalid.len(),
        std::fs::read_dir(support::fixture("manifests/invalid"))
            .unwrap()
            .count(),
        "every invalid fixture names its pointer in expected.json"
    );
    for (file, pointer) in invalid {
        let raw = &read_manifests(&support::fixture(&format!("manifests/{file}"))).unwrap()[0];
        let report = validate(&raw.value, ValidateOptions::default());
        assert!(!report.is_valid(), "{file} should be invalid");
        let pointers: Vec<&str> = report.errors.iter().map(|d| d.pointer.as_str()).collect();
        assert!(
            pointers.contains(&pointer.as_str().unwrap()),
            "{file}: expected an error at {pointer}, got {:?}",
            report.errors
        );
        assert!(report.errors.iter().all(|d| !d.message.is_empty()));
    }
}

#[test]
fn lints_are_warnings_where_expected() {
    let exp = expected();
    for (file, pointer) in exp["warnings"].as_object().unwrap() {
        let raw = &read_manifests(&support::fixture(&format!("manifests/{file}"))).unwrap()[0];
        let report = validate(&raw.value, ValidateOptions::default());
        assert!(report.is_valid(), "{file}: {:?}", report.errors);
        assert!(
            report
                .warnings
                .iter()
                .any(|d| d.pointer == pointer.as_str().unwrap()),
            "{file}: expected a warning at {pointer}, got {:?}",
            report.warnings
        );
    }
    for (file, pointer) in exp["production_errors"].as_object().unwrap() {
        let raw = &read_manifests(&support::fixture(&format!("manifests/{file}"))).unwrap()[0];
        let report = validate(&raw.value, ValidateOptions::default().with_production(true));
        assert!(
            report
                .errors
                .iter()
                .any(|d| d.pointer == pointer.as_str().unwrap()),
            "{file}: --production should make {pointer} an error"
        );
    }
}

#[test]
fn the_serde_model_and_the_schema_agree_on_every_file() {
    for dir in ["manifests/valid", "manifests/invalid"] {
        for raw in read_manifests(&support::fixture(dir)).unwrap() {
            let by_schema = schema_accepts(&raw.value);
            let by_model = Manifest::from_value(raw.value.clone()).is_ok();
            assert_eq!(
                by_schema, by_model,
                "{}: schema says {by_schema}, serde model says {by_model}",
                raw.source
            );
        }
    }
}

#[test]
fn the_schema_file_declares_its_version_and_draft() {
    let schema: Value = serde_json::from_str(sluice_kernel::model::MANIFEST_SCHEMA).unwrap();
    assert_eq!(schema["$comment"], "schema-version: 1.1.0");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}
