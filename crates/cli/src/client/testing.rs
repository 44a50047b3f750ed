//! Test doubles for the client verbs: a house at `http://b` for `b.test`, played by a closure.
#![allow(clippy::expect_used)]

use nyx5_proto::Timestamp;
use nyx5_proto::card::{DomainCard, DomainCardDraft};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::json::Object;

use super::http::Transport;

/// b.test's domain card, signed by `key` at `now`, naming `http://b` as its estafeta.
pub(crate) fn domain_card(key: &SigningKey, now: Timestamp) -> DomainCard {
    DomainCardDraft {
        domain: "b.test".into(),
        estafeta: "http://b".into(),
        other_keys: vec![],
        previous: vec![],
        policy: Object::new(),
        extensions: vec![],
        issued: now,
    }
    .sign(key, now)
    .expect("a card made of fixed, valid parts signs")
}

/// The house at `http://b`: its domain card at the well-known URL, `answer` for `POST /agents`,
/// 404 for anything else.
pub(crate) struct HouseB {
    pub(crate) domain_card: Vec<u8>,
    pub(crate) answer: Vec<u8>,
}

impl HouseB {
    pub(crate) fn serving(card: &DomainCard) -> HouseB {
        HouseB { domain_card: card.to_value().canonical(), answer: b"{}".to_vec() }
    }
}

impl Transport for HouseB {
    fn call(&self, _: &str, url: &str, _: &[(&str, &str)], _: &[u8]) -> Result<(u16, Vec<u8>), String> {
        match url {
            "http://b/.well-known/nyx5.json" => Ok((200, self.domain_card.clone())),
            "http://b/agents" => Ok((201, self.answer.clone())),
            _ => Ok((404, b"{}".to_vec())),
        }
    }
}
