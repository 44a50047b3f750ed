//! The email bridge's reader: any bytes either are refused with a 4xx or become an unsigned
//! envelope that parses back to itself, no larger than the bounds the bridge promises; reading
//! its `Authentication-Results` never panics and vouches for From's domain or nothing.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_rules::email::parse::{self, Arrival};
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;
use nyx5_proto::{Address, Envelope, Timestamp};

fuzz_target!(|data: &[u8]| {
    let parsed = match parse::parse(data, MAX_ENVELOPE_BYTES / 2) {
        Ok(p) => p,
        Err(e) => {
            assert!(e.code() < 500, "a message was refused as an internal error: {e}");
            return;
        }
    };
    assert!(parsed.text.len() <= MAX_ENVELOPE_BYTES / 2);
    let gateway = Address::parse("email@h.test").unwrap_or_else(|_| panic!("gateway"));
    let to = Address::parse("ana@h.test").unwrap_or_else(|_| panic!("recipient"));
    // Whatever the message says, deciding trust is total; a pass is only ever for From's domain.
    let trusted = ["mx.h.test".to_owned()];
    let authenticated = parsed.authenticated_domain(&trusted);
    if let Some(domain) = &authenticated {
        let from = parsed.from.as_ref().and_then(|m| m.address.as_deref()).unwrap_or_default();
        assert!(from.ends_with(&format!("@{domain}")), "{domain} vouched for {from}");
    }
    let arrival = Arrival {
        gateway: &gateway,
        to: &to,
        envelope_from: Some("x@example.com"),
        authenticated_domain: authenticated.as_deref(),
        now: Timestamp(0),
    };
    let id = parse::envelope_id("h.test", &parsed, authenticated.as_deref());
    let env = match parsed.envelope(id, &arrival) {
        Ok(e) => e,
        Err(e) => panic!("a parsed email does not make an envelope: {e}"),
    };
    let canonical = env.canonical();
    let again = match Envelope::parse(&canonical, usize::MAX) {
        Ok(e) => e,
        Err(e) => panic!("the email envelope does not re-parse: {e}"),
    };
    assert_eq!(env, again);
    assert!(again.signature.is_none());
});
