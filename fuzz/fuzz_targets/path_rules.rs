#![no_main]
//! The `path_rules` property of `sluice::fuzzing` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::path_rules(data));
