//! Strict JSON parser and canonical form: any accepted input must canonicalize to bytes that
//! parse back to an equal value and canonicalize to the very same bytes (a fixed point).
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::json::Value;
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = Value::parse(data, MAX_ENVELOPE_BYTES) else {
        return;
    };
    let canonical = value.canonical();
    // Canonical bytes may be longer than the input (`1e20` is written in full): no size limit.
    let again = match Value::parse(&canonical, usize::MAX) {
        Ok(v) => v,
        Err(e) => panic!(
            "canonical form does not re-parse: {e}\ninput:     {:?}\ncanonical: {:?}",
            String::from_utf8_lossy(data),
            String::from_utf8_lossy(&canonical)
        ),
    };
    assert_eq!(value, again, "re-parsed canonical form differs");
    assert_eq!(canonical, again.canonical(), "canonical form is not a fixed point");
});
