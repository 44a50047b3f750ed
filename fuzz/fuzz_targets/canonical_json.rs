//! Strict JSON parser and canonical form: any accepted input must canonicalize to bytes that
//! parse back to an equal value and canonicalize to the very same bytes (a fixed point); and the
//! parser takes an input as canonical as it came exactly when it is its own canonical form, with
//! the member it marks where the canonical writer marks it.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::json::{Value, canonical_marking, parse_marking};
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

    let Ok((same, taken)) = parse_marking(data, MAX_ENVELOPE_BYTES, "signature") else {
        panic!("accepted by Value::parse, refused by parse_marking: {:?}", String::from_utf8_lossy(data));
    };
    assert_eq!(same, value, "parse_marking reads another value");
    assert_eq!(taken.is_some(), canonical == data, "taken as canonical wrongly: {:?}", String::from_utf8_lossy(data));
    if let (Some(taken), Value::Object(map)) = (taken, &value) {
        assert_eq!((taken.text.to_owned(), taken.span), canonical_marking(map, "signature"), "mark misplaced");
    }
});
