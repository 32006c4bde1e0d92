//! Every input kept for the fuzz targets — the seeds in `fuzz/corpus/<target>/` and the minimized
//! findings in `fuzz/regressions/<target>/` — replayed through the same properties the fuzzers
//! check (`sluice::fuzzing`), so a fixed finding stays fixed under the ordinary `cargo test`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;

#[test]
fn every_kept_fuzz_input_holds_its_property() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut replayed = 0;
    for target in sluice::fuzzing::TARGETS {
        let mut kept = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
                continue;
            };
            let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for file in files {
                // A fuzzer running beside the tests may replace its own corpus files.
                let Ok(data) = std::fs::read(&file) else {
                    continue;
                };
                let outcome = std::panic::catch_unwind(|| sluice::fuzzing::run(target, &data));
                assert!(
                    outcome.is_ok(),
                    "{target}: {} fails its property",
                    file.display()
                );
                kept += 1;
            }
        }
        assert!(kept > 0, "no kept input for the fuzz target `{target}`");
        replayed += kept;
    }
    eprintln!("{replayed} kept fuzz inputs replayed");
}
