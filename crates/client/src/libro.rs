//! The Libro's client side (spec §15–§20, docs/SPEC.md §16), as `nyx5`'s Libro verbs and the
//! browser's `libro_op` share it. An operation is an envelope to `libro@<house>`, `type: task`,
//! `media: application/nyx5.libro+json`, in clear, whose body is `{op, …}` as the protocol's
//! table makes it (`nyx5_proto::ops::body`). Its answer is a receipt the house's Libro signs,
//! believed only when it verifies against the house's domain keys valid now and names this very
//! operation (its id, its SHA-256, its sender); or a bounce, named by its code's class unless
//! the notice names a refusal that may be believed.

use nyx5_proto::card::DomainCard;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Object, Value};
use nyx5_proto::receipt::Receipt;
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Timestamp};

/// The local part of a house's Libro.
pub const LIBRO: &str = nyx5_rules::libro::LIBRO;

/// Operation `body` from `from` to the Libro of `house`, unsigned: the envelope a client signs.
pub fn op_envelope(id: String, from: Address, house: &str, body: Object, now: Timestamp) -> Result<Envelope, Error> {
    let libro = Address::new(LIBRO, house)?;
    let mut draft = Draft::new(id, from, vec![libro], now, Content::new(nyx5_proto::ops::MEDIA, Value::Object(body)));
    draft.kind = Kind::Task;
    draft.build()
}

/// Why a receipt from a house's Libro is not read.
#[derive(Debug)]
pub enum ReceiptFault {
    /// It is not a receipt.
    Malformed(Error),
    /// It says it is from another house (named).
    OtherHouse(String),
}

/// The receipt in `body`, which says it is from `house`'s Libro: read, not yet verified (its
/// house's domain card is fetched only for a receipt that names it; then [`verify_receipt`]).
pub fn read_receipt(body: &Object, house: &str) -> Result<Receipt, ReceiptFault> {
    let r = Receipt::from_object(body.clone()).map_err(ReceiptFault::Malformed)?;
    if r.house != house {
        return Err(ReceiptFault::OtherHouse(r.house));
    }
    Ok(r)
}

/// Receipt `r`, its signature held to the keys of `domain` (its house's domain card) valid at
/// `now`.
pub fn verify_receipt(r: Receipt, domain: &DomainCard, now: Timestamp) -> Result<Receipt, Error> {
    let keys: Vec<_> = domain.keys().iter().filter(|k| k.valid_at(now)).map(|k| k.sig).collect();
    r.verify(&keys).map(nyx5_proto::Verified::into_inner)
}

/// Whether receipt `r` is of operation `id` (with SHA-256 `sha256`, when known) sent by `me`.
pub fn is_receipt_of(r: &Receipt, id: &str, sha256: &str, me: &Address) -> bool {
    r.of == id && (sha256.is_empty() || r.op_sha256 == sha256) && r.from == *me
}

/// The name a bounce of `code` is reported under: the refusal `error` the notice names when it
/// is one `code` may carry, else the code's class, else `bounced`.
pub fn bounce_name(code: u16, error: &str) -> &str {
    let class = ErrorKind::from_code(code).map_or("bounced", ErrorKind::slug);
    Error::wire_name(code, error).unwrap_or(class)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_operation_goes_to_the_houses_libro_as_a_task_in_clear() {
        let from = Address::parse("bo@a.test").unwrap();
        let mut body = Object::default();
        body.insert("op".into(), "statement".into());
        let env = op_envelope("x1".into(), from, "b.test", body, Timestamp(1_800_000_000_000)).unwrap();
        assert_eq!(env.to().iter().map(Address::as_str).collect::<Vec<_>>(), ["libro@b.test"]);
        assert_eq!(env.content().unwrap().media, nyx5_proto::ops::MEDIA);
        assert_eq!(env.kind(), Kind::Task);
    }

    #[test]
    fn a_bounce_without_a_name_is_named_by_its_class() {
        assert_eq!(bounce_name(999, ""), "bounced");
        assert_ne!(bounce_name(402, ""), "bounced");
    }
}
