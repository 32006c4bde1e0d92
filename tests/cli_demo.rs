//! `sluice demo`, the README's first command: it runs, the three ways and the gateway agree, and
//! it leaves a verified provenance log and an SVG timeline in the folder it names.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

#[test]
fn the_demo_runs_three_ways_with_identical_results() {
    let out = support::temp_dir("demo");
    let run = support::sluice(&["demo", "--out", out.to_str().unwrap()], None, None);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("identical in all three runs: yes"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("denied by rule `no-deletes`"));
    assert!(run.stdout.contains("approved by demo-reviewer"));
    assert!(run.stdout.contains("read-after-write"));
    // Through the gateway: the OpenAI-shaped turn on /v1/run agrees with the kernel's run, and
    // two MCP sessions editing one file keep both edits.
    assert!(
        run.stdout
            .contains("12 results; statuses, files and memory identical to run 3: yes"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("both edits kept: yes"),
        "{}",
        run.stdout
    );
    let log = out.join("provenance.jsonl");
    let verified = sluice_provenance::verify_file(&log).unwrap();
    assert!(verified.records >= 13);
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    // The edited workspace holds both edits of the parser, in order.
    let parser = std::fs::read_to_string(out.join("sluice/workspace/src/parser.rs")).unwrap();
    assert!(parser.contains("parse_expr(input)") && parser.contains("errors are reported"));
}
