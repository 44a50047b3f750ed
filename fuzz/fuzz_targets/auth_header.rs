//! `Authorization: Nyx5 <token>.<sig>` on arbitrary UTF-8: must never panic. The claims of an
//! accepted header, signed again (`Claims::sign`), must parse back to the same claims.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::auth::AuthHeader;
use nyx5_proto::crypto::SigningKey;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(header) = AuthHeader::parse(text) else {
        return;
    };
    let written = header.claims.sign(&SigningKey::from_seed([7; 32]));
    match AuthHeader::parse(&written) {
        Ok(again) => assert_eq!(header.claims, again.claims, "re-signed claims differ"),
        Err(e) => panic!("re-signed header does not parse: {e}\nwritten: {written:?}"),
    }
});
