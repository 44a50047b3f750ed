//! Receipts: the Libro's signed receipt document (spec §20), and the delivery notices a house
//! sends from `postmaster@` (spec §7): bounces and delivery acknowledgements.

use crate::address::{Address, check_domain, check_id};
use crate::crypto::{Context, SigPublic, SigningKey, check_sha256_hex};
use crate::envelope::{Content, Draft, Envelope, Kind};
use crate::error::Error;
use crate::json::{Object, Value, field, obj};
use crate::refusal::Refusal;
use crate::sign::{Verified, sign_object, verify_object};
use crate::time::Timestamp;

/// The `tipo` of a Libro receipt.
pub const TIPO: &str = "recibo";
/// Media type of a Libro receipt carried in an envelope.
pub const MEDIA: &str = "application/nyx5.recibo+json";
/// Media type of a delivery notice (bounce or acknowledgement) from a postmaster.
pub const NOTICE_MEDIA: &str = "application/nyx5.notice+json";

/// What became of the movement a receipt answers for (its `status` member). A receipt is a proof
/// that money moved only when it says `done`: a movement waiting for approval has moved nothing
/// but a hold, and a declined one got its hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done as the receipt says.
    Done,
    /// Waiting for approval (spec §16b): only a hold moved, if anything.
    Pending,
    /// Declined: what was held went back; nothing else moved.
    Declined,
}

impl Status {
    pub const ALL: [Status; 3] = [Status::Done, Status::Pending, Status::Declined];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Pending => "pending",
            Status::Declined => "declined",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A Libro receipt: `{tipo, house, of, op, op_sha256, from, issued, status, …, signature}`. The
/// optional members (`contract`, `mandate`, `asiento`, `cotizacion_sha256`, `chain`, …) are kept
/// as they are and signed.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    pub house: String,
    /// The envelope id of the operation.
    pub of: String,
    pub op: String,
    pub op_sha256: String,
    /// Who operated.
    pub from: Address,
    pub issued: Timestamp,
    /// What became of the movement: only `done` proves it happened.
    pub status: Status,
    raw: Object,
}

impl Receipt {
    /// The house signs a receipt for operation `op` (envelope `of`, hash `op_sha256`) by `from`,
    /// saying what became of it (`status`); `extra` carries the rest (`contract`, `asiento`,
    /// `chain`, …).
    #[allow(clippy::too_many_arguments)]
    pub fn sign(
        house: &str,
        of: &str,
        op: &str,
        op_sha256: &str,
        from: &Address,
        issued: Timestamp,
        status: Status,
        extra: Object,
        house_key: &SigningKey,
    ) -> Result<Receipt, Error> {
        let mut doc = extra;
        for (k, v) in [
            ("tipo", Value::from(TIPO)),
            ("house", house.into()),
            ("of", of.into()),
            ("op", op.into()),
            ("op_sha256", op_sha256.into()),
            ("from", from.as_str().into()),
            ("issued", issued.to_rfc3339().into()),
            ("status", status.as_str().into()),
        ] {
            doc.insert(k.to_owned(), v);
        }
        sign_object(&mut doc, "signature", Context::Receipt, house_key);
        Receipt::from_object(doc)
    }

    pub fn from_object(raw: Object) -> Result<Receipt, Error> {
        if field::str(&raw, "tipo")? != TIPO {
            return Err(Refusal::BadReceipt.because("a receipt has `tipo: recibo`"));
        }
        let house = field::str(&raw, "house")?.to_owned();
        check_domain(&house).map_err(|why| Refusal::BadReceipt.because(format!("receipt house: {why}")))?;
        let of = field::str(&raw, "of")?.to_owned();
        check_id(&of)?;
        let op_sha256 = field::str(&raw, "op_sha256")?.to_owned();
        check_sha256_hex(&op_sha256, "op_sha256")?;
        // A receipt without a status could be a movement that waits or was declined: it proves
        // nothing, so it is not read as a receipt at all.
        let status = Status::parse(field::str(&raw, "status")?)
            .ok_or_else(|| Refusal::BadReceipt.because("a receipt's status is done, pending or declined"))?;
        if let Some(q) = field::opt_str(&raw, "cotizacion_sha256")? {
            check_sha256_hex(q, "cotizacion_sha256")?;
        }
        Ok(Receipt {
            house,
            of,
            op: field::str(&raw, "op")?.to_owned(),
            op_sha256,
            from: Address::parse(field::str(&raw, "from")?)?,
            issued: Timestamp::parse(field::str(&raw, "issued")?)?,
            status,
            raw,
        })
    }

    /// Verifies the house's signature with one of its keys.
    pub fn verify(self, house_keys: &[SigPublic]) -> Result<Verified<Receipt>, Error> {
        verify_object(&self.raw, "signature", Context::Receipt, |kid| house_keys.contains(kid))?;
        Ok(Verified::new(self))
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

/// What a delivery notice says about an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Delivered to these recipients' mailboxes (sent only when the envelope asked for it).
    Delivered { recipients: Vec<Address> },
    /// Not delivered to these recipients, with the wire code and reason.
    Bounced { recipients: Vec<Address>, code: u16, reason: String },
    /// Neither delivered nor bounced, for good: an attempt went unanswered, or the destination
    /// read one and said "not now" (a copy of it may yet be taken), and no later answer said it
    /// holds the envelope before the house stopped asking.
    /// Never sent for a recipient the house bounced, nor with a bounce for the same one.
    Undetermined { recipients: Vec<Address>, reason: String },
}

/// Builds the signed notice envelope `postmaster@<domain>` sends to the original sender:
/// `type: receipt`, `in_reply_to` the original id, and a body with the original's `sha256`.
pub fn notice(
    original: &Envelope,
    notice: &Notice,
    postmaster: &Address,
    id: String,
    now: Timestamp,
    domain_key: &SigningKey,
) -> Result<Envelope, Error> {
    let list = |r: &[Address]| Value::Array(r.iter().map(|a| a.as_str().into()).collect());
    let mut body = obj([("of", original.id().into()), ("sha256", original.sha256_hex().into())]);
    match notice {
        Notice::Delivered { recipients } => {
            body.insert("status".into(), "delivered".into());
            body.insert("recipients".into(), list(recipients));
        }
        Notice::Bounced { recipients, code, reason } => {
            body.insert("status".into(), "bounced".into());
            body.insert("recipients".into(), list(recipients));
            body.insert("code".into(), i64::from(*code).into());
            body.insert("reason".into(), reason.as_str().into());
        }
        Notice::Undetermined { recipients, reason } => {
            body.insert("status".into(), "undetermined".into());
            body.insert("recipients".into(), list(recipients));
            body.insert("reason".into(), reason.as_str().into());
        }
    }
    let mut draft = Draft::new(
        id,
        postmaster.clone(),
        vec![original.from().clone()],
        now,
        Content::new(NOTICE_MEDIA, Value::Object(body)),
    );
    draft.kind = Kind::Receipt;
    draft.in_reply_to = Some(original.id().to_owned());
    draft.thread = original.thread().map(str::to_owned);
    draft.build()?.sign(domain_key)
}
