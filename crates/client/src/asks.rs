//! What a recipient's card asks of an envelope (spec §9, §19), read as the recipient's house reads
//! it: a proof of work of the bits a `pow` inbox names, a stamp of the price a `stamp` inbox names
//! at the house it names ([`stamp_asked`]). A client pays what it asks when it sends; and since an
//! envelope sealed for a card as the client held it may not give what the card asks now,
//! [`lacks`] judges a sent envelope against the card as it is (docs/decisions/0054-stale-card-mended-once.md):
//! the client that reads the 402 bounce decides from it whether to send once more.

use nyx5_proto::json::{Object, Value};
use nyx5_proto::{Address, Envelope, pow};

/// What a recipient's card asks that an envelope does not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lack {
    /// Proof of work of `bits`.
    Pow { bits: u32 },
    /// A stamp of at least `price` tokens paid at `house`.
    Stamp { house: String, price: i64 },
}

/// The most proof of work a read of the mailbox mints unasked for a resend: a card asking more
/// (up to 32 bits: minutes of CPU) is answered with the command that does it (hostile review of
/// issue 35, L3).
pub const MAX_UNASKED_POW_BITS: u32 = 24;

/// What `inbox` (the card of `to`, as its house serves it now) asks that `env` does not give,
/// judged as `to`'s house judges it (`nyx5_rules::policy::decide`): a `pow` inbox asks a proof
/// of work of its bits for this very envelope; a `stamp` inbox a stamp of at least its price at
/// the house it names (the recipient's own by default). Other policies ask nothing an envelope
/// can carry. `None`: the envelope gives all the card asks.
pub fn lacks(env: &Envelope, to: &Address, inbox: &Object) -> Option<Lack> {
    let bits = pow::bits_asked(inbox);
    if bits > 0 {
        let proved = env.pow().is_some_and(|p| p.bits >= bits && pow::check(&env.work_digest(), &p.nonce, bits));
        return (!proved).then_some(Lack::Pow { bits });
    }
    if let Some((house, price)) = stamp_asked(inbox, to) {
        let paid = env.stamp().is_some_and(|s| s.house == house && s.amount >= price);
        return (!paid).then_some(Lack::Stamp { house, price });
    }
    None
}

/// The stamp the inbox of `to` asks, if it is a `stamp` inbox: the house it is paid at (the one
/// named, lower-cased, else the recipient's own) and its price (the one named if positive, else 1).
pub fn stamp_asked(inbox: &Object, to: &Address) -> Option<(String, i64)> {
    if inbox.get("policy").and_then(Value::as_str) != Some("stamp") {
        return None;
    }
    let price = inbox.get("price").and_then(Value::as_safe_integer).filter(|p| *p > 0).unwrap_or(1);
    let house = inbox.get("house").and_then(Value::as_str).unwrap_or(to.domain()).to_ascii_lowercase();
    Some((house, price))
}

#[cfg(test)]
mod tests {
    use nyx5_proto::json::obj;

    use super::*;

    #[test]
    fn a_stamp_inbox_asks_its_price_at_its_house_or_one_token_at_the_recipients() {
        let bo = Address::parse("bo@b.test").unwrap();
        assert_eq!(stamp_asked(&obj([("policy", "open".into())]), &bo), None);
        assert_eq!(stamp_asked(&obj([("policy", "stamp".into())]), &bo), Some(("b.test".into(), 1)));
        let named = obj([("policy", "stamp".into()), ("price", 7.into()), ("house", "Bank.TEST".into())]);
        assert_eq!(stamp_asked(&named, &bo), Some(("bank.test".into(), 7)));
        for bad in [0, -3] {
            let price = obj([("policy", "stamp".into()), ("price", Value::from(bad))]);
            assert_eq!(stamp_asked(&price, &bo), Some(("b.test".into(), 1)), "{bad}");
        }
    }
}
