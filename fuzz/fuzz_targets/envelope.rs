//! Envelope codec: any accepted envelope, written canonically, must parse back to an equal one.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::Envelope;
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;

fuzz_target!(|data: &[u8]| {
    let Ok(env) = Envelope::parse(data, MAX_ENVELOPE_BYTES) else {
        return;
    };
    let canonical = env.canonical();
    let again = match Envelope::parse(&canonical, MAX_ENVELOPE_BYTES) {
        Ok(e) => e,
        Err(e) => {
            panic!("canonical envelope does not re-parse: {e}\ncanonical: {:?}", String::from_utf8_lossy(&canonical))
        }
    };
    assert_eq!(env, again, "re-parsed canonical envelope differs");
    assert_eq!(canonical, again.canonical());
});
