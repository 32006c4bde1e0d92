#![no_main]
//! The `provenance` property of `sluice::fuzzing` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::provenance(data));
