#![no_main]
//! The `policy` property of `sluice::fuzzing` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::policy(data));
