#![no_main]
//! The `manifest` property of `sluice::fuzzing` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::manifest(data));
