//! The trust rules for cards (docs/SPEC.md §6.1), as pure functions: what a domain card must be
//! to speak for its domain, how it is held to a key kept for the domain (a pin, or the anchor of a
//! hosts file or a DNS record), and how deep a delegated agent card's chain may go. The resolver
//! calls them on what it fetched ([`crate::resolver`]), the browser (`nyx5-web`) on what it was
//! handed: one set of rules, so both trust a card for the same reasons.
//!
//! The rules name what failed; the caller says which card it was checking (`what`). One cause
//! has one name wherever it is found: a domain card signed by a key it does not list is
//! `untrusted_key` from the resolver and the browser alike (the resolver answered
//! `unverifiable_card` before they shared the rule; docs/SPEC.md "Refusals by name").

use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::crypto::SigPublic;
use nyx5_proto::{Address, Error, Refusal, Timestamp, Verified};

/// Most delegation levels followed above an agent card (a subagent's parents).
pub const MAX_DELEGATION_DEPTH: usize = 8;

/// Why a domain card cannot speak for a domain, before any key kept for it is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The card names another domain (this one).
    OtherDomain(String),
    /// The card names no signer that can be read (the proto's error).
    Signer(Error),
    /// The card is signed by a key it does not list, or one past its end.
    Unlisted,
}

impl Fault {
    /// The refusal for `what` (`domain card of a.test`): a card of another domain is
    /// `wrong_card`; an unreadable signer is the proto's error as `wrap` passes it on; an
    /// unlisted signer is `untrusted_key`.
    pub fn into_error(self, what: &str, wrap: impl Fn(Error) -> Error) -> Error {
        match self {
            Fault::OtherDomain(other) => Refusal::WrongCard.because(format!("{what} names another domain ({other})")),
            Fault::Signer(e) => wrap(e),
            Fault::Unlisted => {
                Refusal::UntrustedKey.because(format!("{what} is signed by a key that is not listed, or past its end"))
            }
        }
    }
}

/// The key that signed `card`, if the card may speak for `domain` at `now`: it names `domain`,
/// and is signed by one of the keys it lists, valid now. Nothing is verified yet: the signature
/// is checked against the key the caller holds the card to ([`held_to`]).
pub fn domain_signer(card: &DomainCard, domain: &str, now: Timestamp) -> Result<SigPublic, Fault> {
    if card.domain() != domain {
        return Err(Fault::OtherDomain(card.domain().to_owned()));
    }
    let kid = card.signer().map_err(Fault::Signer)?;
    if !card.accepts_key(&kid, now) {
        return Err(Fault::Unlisted);
    }
    Ok(kid)
}

/// Verifies `card` held to `key`, the key kept for its domain (a pin, or an anchor): signed by
/// it, or by a key it handed over to within the handover's `until`
/// ([`DomainCard::verify_continuing`]). `true` when the card moved on from `key`. Without a key
/// (trust on first use, or nothing kept) the card need only verify under its own signer.
pub fn held_to(
    card: DomainCard,
    key: Option<&SigPublic>,
    now: Timestamp,
) -> Result<(Verified<DomainCard>, bool), Error> {
    match key {
        None => card.verify(None).map(|card| (card, false)),
        Some(key) => card.verify_continuing(key, now),
    }
}

/// Refuses a chain of delegations deeper than [`MAX_DELEGATION_DEPTH`] above the card of
/// `address`, found at `depth` (0 for the card asked for).
pub fn check_depth(address: &Address, depth: usize) -> Result<(), Error> {
    if depth > MAX_DELEGATION_DEPTH {
        return Err(Refusal::DelegationTooDeep.because(format!("delegation of {address} is nested too deep")));
    }
    Ok(())
}

/// The parent whose verified card `card` needs: its parent address when the card is delegated,
/// `None` when its domain certifies it alone.
pub fn parent_needed(card: &AgentCard) -> Option<Address> {
    match (card.delegation(), card.address().parent()) {
        (Some(_), Some(parent)) => Some(parent),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use nyx5_proto::card::DomainCardDraft;
    use nyx5_proto::crypto::SigningKey;

    use super::*;

    fn card(domain: &str, key: &SigningKey) -> DomainCard {
        let draft = DomainCardDraft {
            domain: domain.into(),
            estafeta: "https://mail.example".into(),
            other_keys: vec![],
            previous: vec![],
            policy: Default::default(),
            extensions: vec![],
            issued: Timestamp(0),
        };
        draft.sign(key, Timestamp(0)).unwrap()
    }

    #[test]
    fn a_domain_card_speaks_for_its_own_domain_under_its_own_keys() {
        let key = SigningKey::from_seed([7; 32]);
        let now = Timestamp(1_000);
        let c = card("a.test", &key);
        assert_eq!(domain_signer(&c, "a.test", now), Ok(key.public()));
        assert_eq!(domain_signer(&c, "b.test", now), Err(Fault::OtherDomain("a.test".into())));
        let e = Fault::OtherDomain("a.test".into()).into_error("domain card of b.test", |e| e);
        assert_eq!(e.refusal(), Some(Refusal::WrongCard));
        assert_eq!(e.reason, "domain card of b.test names another domain (a.test)");
        let e = Fault::Unlisted.into_error("domain card of a.test", |e| e);
        assert_eq!(e.refusal(), Some(Refusal::UntrustedKey));
        assert_eq!(e.reason, "domain card of a.test is signed by a key that is not listed, or past its end");
    }

    #[test]
    fn a_card_is_held_to_the_key_kept_for_its_domain() {
        let (key, other) = (SigningKey::from_seed([7; 32]), SigningKey::from_seed([8; 32]));
        let now = Timestamp(1_000);
        assert!(held_to(card("a.test", &key), None, now).is_ok(), "nothing kept: its own signer");
        assert_eq!(held_to(card("a.test", &key), Some(&key.public()), now).map(|(_, moved)| moved), Ok(false));
        assert!(held_to(card("a.test", &other), Some(&key.public()), now).is_err(), "another key, no handover");
    }

    #[test]
    fn delegation_goes_eight_levels_deep_and_no_further() {
        let a = Address::parse("ana@a.test").unwrap();
        assert!(check_depth(&a, MAX_DELEGATION_DEPTH).is_ok());
        let e = check_depth(&a, MAX_DELEGATION_DEPTH + 1).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::DelegationTooDeep));
        assert_eq!(e.reason, "delegation of ana@a.test is nested too deep");
    }
}
