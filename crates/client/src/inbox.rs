//! Mail in (docs/SPEC.md §8c): what `nyx5 inbox` and the browser's `open_item` decide alike of a
//! signed envelope once its sender's card is found (the CLI's resolver finds it, the page is
//! given it). A postmaster's notice is held to its domain card, any other envelope to its
//! sender's agent card. Both feed `nyx5_proto::mailbox::view`, which opens and shapes the item;
//! an envelope without a signature is `nyx5_proto::mailbox::unsigned`, before any card is looked
//! for.

use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::json::{Object, Value};
use nyx5_proto::mailbox::{POSTMASTER, Trust};
use nyx5_proto::{Address, Envelope, Timestamp, Verified};

fn invalid(why: impl Into<String>) -> Trust {
    ("invalid", Some(why.into()))
}

/// A notice from `env`'s postmaster, held to `domain` (its sender's domain card): `verified`
/// when its key is one the domain accepts now and the signature is that key's, else `invalid`.
/// An unsigned envelope is `invalid` here: ask `mailbox::unsigned` first.
pub fn notice_verdict(env: &Envelope, domain: &DomainCard, now: Timestamp) -> Trust {
    let Some(sig) = env.signature() else { return invalid("not signed") };
    if !domain.accepts_key(&sig.kid, now) {
        return invalid(format!("not signed by a key of {}", env.from().domain()));
    }
    match env.clone().verify_with_key(&sig.kid) {
        Ok(_) => ("verified", None),
        Err(e) => invalid(e.reason),
    }
}

/// An envelope held to its sender's verified card: `verified`, or `invalid` with why.
pub fn agent_verdict(env: &Envelope, card: &Verified<AgentCard>, now: Timestamp) -> Trust {
    match env.clone().verify(card, now) {
        Ok(_) => ("verified", None),
        Err(e) => invalid(format!("the signature is not by {}: {}", env.from(), e.reason)),
    }
}

/// The body of mailbox item `m` (as `nyx5_proto::mailbox::view` shows it) when it is a bounce
/// `me` can believe: a verified notice with `status: "bounced"` from the postmaster of `me`'s
/// own house, the only one that bounces what it sent (docs/SPEC.md §16). Another house's
/// postmaster, or an unverified notice, is not believed.
pub fn own_bounce<'a>(me: &Address, m: &'a Object) -> Option<&'a Object> {
    fn text<'a>(o: &'a Object, name: &str) -> &'a str {
        o.get(name).and_then(Value::as_str).unwrap_or("")
    }
    let from = text(m, "from");
    let postmaster = from.split_once('@').is_some_and(|(l, d)| l == POSTMASTER && d == me.domain());
    if !postmaster || text(m, "trust") != "verified" {
        return None;
    }
    let body = m.get("content").and_then(Value::as_object).and_then(|c| c.get("body")).and_then(Value::as_object)?;
    (text(body, "status") == "bounced").then_some(body)
}

/// The request target of one page of `local`'s mailbox: after `seq` `after`, at most `limit`.
pub fn page_target(local: &str, limit: Option<i64>, after: Option<i64>) -> String {
    let mut q = Vec::new();
    if let Some(a) = after {
        q.push(format!("after={a}"));
    }
    if let Some(l) = limit {
        q.push(format!("limit={l}"));
    }
    match q.is_empty() {
        true => format!("/mailbox/{local}"),
        false => format!("/mailbox/{local}?{}", q.join("&")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_a_verified_bounce_from_ones_own_postmaster_is_believed() {
        let me = Address::parse("bo@a.test").unwrap();
        let item = |from: &str, trust: &str| {
            let v = format!(
                r#"{{"from":"{from}","trust":"{trust}","content":{{"body":{{"status":"bounced","code":402}}}}}}"#
            );
            Value::parse(v.as_bytes(), 4096).unwrap().as_object().unwrap().clone()
        };
        assert!(own_bounce(&me, &item("postmaster@a.test", "verified")).is_some());
        assert!(own_bounce(&me, &item("postmaster@b.test", "verified")).is_none(), "another house's");
        assert!(own_bounce(&me, &item("postmaster@a.test", "unverified")).is_none());
        assert!(own_bounce(&me, &item("eve@a.test", "verified")).is_none());
    }

    #[test]
    fn a_page_asks_only_what_is_given() {
        assert_eq!(page_target("bo", None, None), "/mailbox/bo");
        assert_eq!(page_target("bo", Some(5), None), "/mailbox/bo?limit=5");
        assert_eq!(page_target("bo", Some(5), Some(9)), "/mailbox/bo?after=9&limit=5");
    }
}
