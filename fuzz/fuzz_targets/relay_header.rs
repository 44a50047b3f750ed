//! `X-Nyx5-Relay` header: an accepted value, written back with `to_header`, must parse to the
//! same header.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::relay::RelayHeader;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(header) = RelayHeader::parse(text) else {
        return;
    };
    let written = header.to_header();
    match RelayHeader::parse(&written) {
        Ok(again) => assert_eq!(header, again, "re-parsed relay header differs"),
        Err(e) => panic!("to_header() does not re-parse: {e}\nwritten: {written:?}"),
    }
});
