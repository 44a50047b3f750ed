//! Domain and agent cards: the same bytes through both parsers; an accepted card, written
//! canonically, must parse back to an equal card.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_proto::{AgentCard, DomainCard};

fuzz_target!(|data: &[u8]| {
    if let Ok(card) = DomainCard::parse(data) {
        let canonical = card.to_value().canonical();
        match DomainCard::parse(&canonical) {
            Ok(again) => assert_eq!(card, again, "re-parsed domain card differs"),
            Err(e) => panic!(
                "canonical domain card does not re-parse: {e}\ncanonical: {:?}",
                String::from_utf8_lossy(&canonical)
            ),
        }
    }
    if let Ok(card) = AgentCard::parse(data) {
        let canonical = card.to_value().canonical();
        match AgentCard::parse(&canonical) {
            Ok(again) => assert_eq!(card, again, "re-parsed agent card differs"),
            Err(e) => panic!(
                "canonical agent card does not re-parse: {e}\ncanonical: {:?}",
                String::from_utf8_lossy(&canonical)
            ),
        }
    }
});
