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

/// How long a follower asks its house to hold an empty page open (`wait`, seconds; the house
/// allows up to 25, docs/SPEC.md §8): 20 keeps the house's rechecks at their shortest.
pub const FOLLOW_WAIT_S: i64 = 20;
/// A held read that answered sooner than this without new mail was not held (a house from
/// before `wait`, one that holds four reads of the mailbox already, one that stops): the
/// follower pauses before it asks again, from [`FOLLOW_PAUSE_MS`] doubling up to 30 s.
pub const FOLLOW_HELD_MS: u64 = 1_000;
/// The first pause after a read that was not held.
pub const FOLLOW_PAUSE_MS: u64 = 2_000;
/// The longest pause.
pub const FOLLOW_PAUSE_MAX_MS: u64 = 30_000;

/// Reads in a row a follower makes at once because each brought new mail, before it pauses
/// anyway (a house inventing ever newer mail cannot keep it busy).
pub const FOLLOW_QUICK_MAX: u32 = 10;

/// What a follower knows of the read it just made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Followed {
    /// Its `after` moved on: the read brought new mail.
    pub advanced: bool,
    /// How long the house took to answer, in milliseconds; `None` for a read that asked no
    /// `wait` (a follower's first, or one reading on past a full page), which is never a sign of
    /// a house that does not hold reads. A failed read is `Some(0)`.
    pub held_ms: Option<u64>,
    /// Reads in a row answered at once before this one.
    pub quick: u32,
}

/// How long a follower pauses before its next read: none after a read that brought new mail
/// (fewer than [`FOLLOW_QUICK_MAX`] in a row), that asked no `wait`, or that the house held open
/// ([`FOLLOW_HELD_MS`] or more); else the pause after `previous` (0: none yet) doubled, from
/// `first` (held between [`FOLLOW_PAUSE_MS`] and [`FOLLOW_PAUSE_MAX_MS`]) up to
/// [`FOLLOW_PAUSE_MAX_MS`]. Every client that follows a mailbox (CLI, MCP, browser) pauses so; a
/// failed read pauses as one not held.
pub fn follow_pause(read: Followed, previous: u64, first: u64) -> u64 {
    let first = first.clamp(FOLLOW_PAUSE_MS, FOLLOW_PAUSE_MAX_MS);
    let held = read.held_ms.is_none_or(|ms| ms >= FOLLOW_HELD_MS);
    if (read.advanced && read.quick < FOLLOW_QUICK_MAX) || (held && !read.advanced) {
        0
    } else {
        previous.saturating_mul(2).clamp(first, FOLLOW_PAUSE_MAX_MS)
    }
}

/// The request target of one page of `local`'s mailbox: after `seq` `after`, at most `limit`,
/// and when `wait` is given an empty page held open that many seconds for mail to arrive.
pub fn page_target(local: &str, limit: Option<i64>, after: Option<i64>, wait: Option<i64>) -> String {
    let mut q = Vec::new();
    if let Some(a) = after {
        q.push(format!("after={a}"));
    }
    if let Some(l) = limit {
        q.push(format!("limit={l}"));
    }
    if let Some(w) = wait {
        q.push(format!("wait={w}"));
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
    fn a_follower_pauses_only_after_a_read_that_was_not_held_and_brought_nothing() {
        let read = |advanced, held_ms, quick| Followed { advanced, held_ms, quick };
        assert_eq!(follow_pause(read(true, Some(0), 0), 8_000, 0), 0, "new mail: ask again at once");
        assert_eq!(follow_pause(read(false, Some(20_000), 0), 8_000, 0), 0, "held open: ask again at once");
        assert_eq!(follow_pause(read(false, None, 0), 8_000, 0), 0, "a read without wait says nothing of the house");
        assert_eq!(follow_pause(read(false, Some(3), 0), 0, 0), FOLLOW_PAUSE_MS);
        assert_eq!(follow_pause(read(false, Some(3), 0), 0, 5_000), 5_000, "a longer first pause");
        assert_eq!(follow_pause(read(false, Some(3), 0), 0, 60_000), FOLLOW_PAUSE_MAX_MS, "never past the longest");
        assert_eq!(follow_pause(read(false, Some(3), 0), FOLLOW_PAUSE_MS, 0), 2 * FOLLOW_PAUSE_MS);
        assert_eq!(follow_pause(read(false, Some(3), 0), 20_000, 0), FOLLOW_PAUSE_MAX_MS);
        assert_eq!(
            follow_pause(read(true, Some(3), FOLLOW_QUICK_MAX), 0, 0),
            FOLLOW_PAUSE_MS,
            "endless new mail pauses too"
        );
        for first in [0, 1, 2_000, 29_999, 30_000, 30_001, u64::MAX] {
            let p = follow_pause(read(false, Some(0), 0), 0, first);
            assert!((FOLLOW_PAUSE_MS..=FOLLOW_PAUSE_MAX_MS).contains(&p), "{first}: {p}");
        }
    }

    #[test]
    fn a_page_asks_only_what_is_given() {
        assert_eq!(page_target("bo", None, None, None), "/mailbox/bo");
        assert_eq!(page_target("bo", Some(5), None, None), "/mailbox/bo?limit=5");
        assert_eq!(page_target("bo", Some(5), Some(9), None), "/mailbox/bo?after=9&limit=5");
        assert_eq!(page_target("bo", None, Some(9), Some(25)), "/mailbox/bo?after=9&wait=25");
    }
}
