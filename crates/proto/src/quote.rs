//! Quotes (spec §15): a document signed by the seller, independent of the envelope carrying it.

use crate::address::{Address, check_domain, check_id};
use crate::card::AgentCard;
use crate::crypto::{Context, SigPublic, SigningKey, hex, sha256};
use crate::error::Error;
use crate::json::{Object, Value, canonical_object, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::sign::{Verified, sign_object, verify_object};
use crate::time::Timestamp;

/// The `tipo` of a quote.
pub const TIPO: &str = "cotizacion";
/// The media type of a quote carried in an envelope.
pub const MEDIA: &str = "application/nyx5.cotizacion+json";

/// The kind of contract a quote offers (§17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractKind {
    Spot,
    Escrow,
    Metered,
}

impl ContractKind {
    pub fn parse(text: &str) -> Result<ContractKind, Error> {
        match text {
            "spot" => Ok(ContractKind::Spot),
            "escrow" => Ok(ContractKind::Escrow),
            "metered" => Ok(ContractKind::Metered),
            other => Err(Refusal::BadQuote.because(format!("unknown contract kind {other:?}"))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContractKind::Spot => "spot",
            ContractKind::Escrow => "escrow",
            ContractKind::Metered => "metered",
        }
    }
}

/// Who brought the deal, and the share of the seller's proceeds they get (basis points).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    pub address: Address,
    pub share_bps: i64,
}

/// A quote, parsed but not verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Quote {
    pub id: String,
    pub house: String,
    pub seller: Address,
    pub buyer: Address,
    pub contract: ContractKind,
    pub price: i64,
    pub currency: String,
    pub concept: String,
    pub terms: Option<Object>,
    pub arbiter: Option<Address>,
    pub referrer: Option<Referrer>,
    pub issued: Timestamp,
    pub expires: Option<Timestamp>,
    raw: Object,
}

/// The fields of a new quote; `extra` holds any further members.
#[derive(Debug, Clone)]
pub struct QuoteDraft {
    pub id: String,
    pub house: String,
    pub seller: Address,
    pub buyer: Address,
    pub contract: ContractKind,
    pub price: i64,
    pub currency: String,
    pub concept: String,
    pub terms: Option<Object>,
    pub arbiter: Option<Address>,
    pub referrer: Option<Referrer>,
    pub issued: Timestamp,
    pub expires: Option<Timestamp>,
    pub extra: Object,
}

impl QuoteDraft {
    /// The seller signs the quote.
    pub fn sign(self, seller_key: &SigningKey) -> Result<Quote, Error> {
        let mut doc = self.extra;
        let members = [
            ("tipo", TIPO.into()),
            ("id", self.id.into()),
            ("house", self.house.into()),
            ("seller", self.seller.as_str().into()),
            ("buyer", self.buyer.as_str().into()),
            ("contract", self.contract.as_str().into()),
            ("price", self.price.into()),
            ("currency", self.currency.into()),
            ("concept", self.concept.into()),
            ("terms", self.terms.map(Value::Object).unwrap_or(Value::Null)),
            ("arbiter", self.arbiter.map(|a| a.as_str().to_owned()).into()),
            ("issued", self.issued.to_rfc3339().into()),
            ("expires", self.expires.map(|t| t.to_rfc3339()).into()),
        ];
        for (k, v) in members {
            doc.insert(k.to_owned(), v);
        }
        if let Some(r) = self.referrer {
            doc.insert(
                "referrer".into(),
                Value::Object(obj([("address", r.address.as_str().into()), ("share", r.share_bps.into())])),
            );
        }
        sign_object(&mut doc, "signature", Context::Quote, seller_key);
        Quote::from_object(doc)
    }
}

impl Quote {
    pub fn from_object(raw: Object) -> Result<Quote, Error> {
        if field::str(&raw, "tipo")? != TIPO {
            return Err(Refusal::BadQuote.because("a quote has `tipo: cotizacion`"));
        }
        // The house copies a quote into contracts, entries and receipts: it stays small.
        if canonical_object(&raw).len() > limits::MAX_QUOTE_BYTES {
            return Err(Refusal::QuoteTooLarge
                .because(format!("a quote may be {} bytes of canonical JSON", limits::MAX_QUOTE_BYTES)));
        }
        if field::str(&raw, "concept")?.len() > limits::MAX_CONCEPT_BYTES {
            return Err(
                Refusal::BadQuote.because(format!("a quote's `concept` may be {} bytes", limits::MAX_CONCEPT_BYTES))
            );
        }
        let id = field::str(&raw, "id")?.to_owned();
        check_id(&id)?;
        let house = field::str(&raw, "house")?.to_owned();
        check_domain(&house).map_err(|why| Refusal::BadQuote.because(format!("quote house: {why}")))?;
        let seller = Address::parse(field::str(&raw, "seller")?)?;
        let price = field::integer(&raw, "price")?;
        if price <= 0 || price > limits::MAX_AMOUNT {
            return Err(Refusal::BadQuote.because("`price` must be a positive integer"));
        }
        let referrer = field::opt_object(&raw, "referrer")?
            .map(|r| -> Result<Referrer, Error> {
                let address = Address::parse(field::str(r, "address")?)?;
                let share_bps = field::integer(r, "share")?;
                if share_bps <= 0 || share_bps > limits::BPS_WHOLE {
                    return Err(Refusal::BadQuote.because("`referrer.share` must be 1 to 10000 basis points"));
                }
                if address == seller {
                    return Err(Refusal::BadQuote.because("the referrer cannot be the seller"));
                }
                Ok(Referrer { address, share_bps })
            })
            .transpose()?;
        Ok(Quote {
            id,
            house,
            buyer: Address::parse(field::str(&raw, "buyer")?)?,
            contract: ContractKind::parse(field::str(&raw, "contract")?)?,
            price,
            currency: field::str(&raw, "currency")?.to_owned(),
            concept: field::str(&raw, "concept")?.to_owned(),
            terms: field::opt_object(&raw, "terms")?.cloned(),
            arbiter: field::opt_str(&raw, "arbiter")?.map(Address::parse).transpose()?,
            referrer,
            issued: Timestamp::parse(field::str(&raw, "issued")?)?,
            expires: field::opt_str(&raw, "expires")?.map(Timestamp::parse).transpose()?,
            seller,
            raw,
        })
    }

    /// Verifies the seller's signature with its verified card, and that the quote is current.
    pub fn verify(self, seller: &Verified<AgentCard>, now: Timestamp) -> Result<Verified<Quote>, Error> {
        if seller.address() != self.seller {
            return Err(Refusal::WrongSigner.because("the quote is not signed by its seller"));
        }
        verify_object(&self.raw, "signature", Context::Quote, |kid| seller.accepts_key(kid, now))?;
        self.check_current(now)?;
        Ok(Verified::new(self))
    }

    /// Verifies the signature with one known key (offline tools).
    pub fn verify_with_key(self, key: &SigPublic, now: Timestamp) -> Result<Verified<Quote>, Error> {
        verify_object(&self.raw, "signature", Context::Quote, |kid| kid == key)?;
        self.check_current(now)?;
        Ok(Verified::new(self))
    }

    fn check_current(&self, now: Timestamp) -> Result<(), Error> {
        if self.expires.is_some_and(|e| now >= e) {
            return Err(Refusal::QuoteExpired.because(format!("quote {} expired", self.id)));
        }
        Ok(())
    }

    /// Hex SHA-256 of the canonical quote (`quote_sha256`, `cotizacion_sha256`).
    pub fn sha256_hex(&self) -> String {
        hex(&sha256(&canonical_object(&self.raw)))
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    fn key() -> SigningKey {
        SigningKey::from_seed([7; 32])
    }

    fn draft() -> QuoteDraft {
        QuoteDraft {
            id: "q-1".into(),
            house: "a.test".into(),
            seller: Address::parse("ana@a.test").unwrap(),
            buyer: Address::parse("bo@a.test").unwrap(),
            contract: ContractKind::Spot,
            price: 40,
            currency: "tok".into(),
            concept: "a review".into(),
            terms: None,
            arbiter: None,
            referrer: None,
            issued: NOW,
            expires: None,
            extra: Object::new(),
        }
    }

    #[test]
    fn a_quote_is_at_most_16384_bytes_of_canonical_json() {
        // The signature's length is fixed, so `pad` grows the signed quote byte for byte.
        let padded = |n: usize| {
            let mut d = draft();
            d.extra = obj([("pad", "x".repeat(n).into())]);
            d.sign(&key())
        };
        let base = canonical_object(padded(0).unwrap().object()).len();
        let fits = padded(limits::MAX_QUOTE_BYTES - base).unwrap();
        assert_eq!(canonical_object(fits.object()).len(), 16_384);
        assert_eq!(Quote::from_object(fits.object().clone()).unwrap(), fits);
        let err = padded(limits::MAX_QUOTE_BYTES - base + 1).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::QuoteTooLarge));
        assert_eq!(err.reason, "a quote may be 16384 bytes of canonical JSON");
    }

    #[test]
    fn a_quotes_concept_is_at_most_256_bytes_not_characters() {
        let mut d = draft();
        d.concept = "é".repeat(128);
        assert_eq!(d.clone().sign(&key()).unwrap().concept.len(), 256);
        d.concept.push('x');
        let err = d.sign(&key()).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::BadQuote));
        assert_eq!(err.reason, "a quote's `concept` may be 256 bytes");
    }

    #[test]
    fn a_quotes_price_is_1_to_the_largest_amount() {
        for ok in [1, 40, limits::MAX_AMOUNT] {
            let mut d = draft();
            d.price = ok;
            assert_eq!(d.sign(&key()).unwrap().price, ok);
        }
        for bad in [0, -1, -limits::MAX_AMOUNT] {
            let mut d = draft();
            d.price = bad;
            assert_eq!(d.sign(&key()).unwrap_err().reason, "`price` must be a positive integer", "{bad}");
        }
        // Past the largest amount the number is no safe integer: refused before the check.
        let mut d = draft();
        d.price = limits::MAX_AMOUNT + 1;
        assert_eq!(d.sign(&key()).unwrap_err().refusal(), Some(Refusal::BadMember));
    }

    #[test]
    fn a_quote_verifies_with_its_sellers_key_and_no_other() {
        let q = draft().sign(&key()).unwrap();
        assert_eq!(q.clone().verify_with_key(&key().public(), NOW).unwrap().into_inner(), q);
        let err = q.clone().verify_with_key(&SigningKey::from_seed([8; 32]).public(), NOW).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::UntrustedKey));
        let mut d = draft();
        d.expires = Some(Timestamp(NOW.0 + 1));
        let q = d.sign(&key()).unwrap();
        assert!(q.clone().verify_with_key(&key().public(), NOW).is_ok());
        let err = q.verify_with_key(&key().public(), Timestamp(NOW.0 + 1)).unwrap_err();
        assert_eq!(err.refusal(), Some(Refusal::QuoteExpired));
    }
}
