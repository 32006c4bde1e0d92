#![no_main]
//! The `url_template` property of `sluice::fuzzing` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::url_template(data));
