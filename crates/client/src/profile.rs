//! The client profile's format (docs/SPEC.md, "Client profile"), as `nyx5` keeps it in its file
//! and the browser exports and imports it: the file's `nyx5`/`kind`, the bound a reader holds it
//! to, and an agent's two key pairs as its members (`sig`, `enc`, `sig_secret`, `enc_secret`,
//! base64url without padding; `sig_secret` the 32-byte Ed25519 seed, `enc_secret` the 32-byte
//! X25519 secret), read only when the public keys are the secrets' own; and the records of the
//! envelopes an agent saved before sending ([`Pending`]) and the house accepted ([`Sent`]), with
//! their bounds. Where the file lives, its lock and its reading and writing are the CLI's.

use std::collections::BTreeMap;

use nyx5_proto::crypto::{EncPublic, EncSecret, Entropy, SigPublic, SigningKey};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Error, Refusal, Timestamp, b64};

use crate::store::Slot;

/// The `kind` of a profile file.
pub const KIND: &str = "agent-profile";
/// The protocol version a profile file belongs to (its `nyx5`).
pub const VERSION: &str = "1";
/// The largest profile read: saved envelopes are at most 1 MiB each.
pub const MAX_PROFILE_BYTES: usize = 128 * 1024 * 1024;
/// Where the profile lives in a client's store (`crate::store`), and the largest read.
pub const SLOT: Slot = Slot { name: "profile", max: MAX_PROFILE_BYTES };

/// An agent's signing and encryption keys.
#[derive(Debug, Clone)]
pub struct KeySet {
    pub sig: SigningKey,
    pub enc: EncSecret,
}

impl KeySet {
    /// Fresh keys from `rng`.
    pub fn generate(rng: &mut dyn Entropy) -> KeySet {
        KeySet { sig: SigningKey::generate(rng), enc: EncSecret::generate(rng) }
    }

    pub fn sig_public(&self) -> SigPublic {
        self.sig.public()
    }

    pub fn enc_public(&self) -> EncPublic {
        self.enc.public()
    }

    /// The four members, as a key file and a profile's agent write them.
    pub fn to_object(&self) -> Object {
        obj([
            ("sig", self.sig_public().to_b64().into()),
            ("enc", self.enc_public().to_b64().into()),
            ("sig_secret", b64::encode(&self.sig.seed()).into()),
            ("enc_secret", b64::encode(&self.enc.bytes()).into()),
        ])
    }

    /// Reads the four members of `o` (others are ignored) and checks that the public keys
    /// belong to the secrets.
    pub fn from_object(o: &Object) -> Result<KeySet, Error> {
        let secret = |name: &str| -> Result<[u8; 32], Error> {
            b64::decode_array(field::str(o, name)?)
                .ok_or_else(|| Refusal::BadKeySet.because(format!("`{name}` is not 32 bytes of base64url")))
        };
        let keys = KeySet {
            sig: SigningKey::from_seed(secret("sig_secret")?),
            enc: EncSecret::from_bytes(secret("enc_secret")?),
        };
        if SigPublic::parse(field::str(o, "sig")?)? != keys.sig_public() {
            return Err(Refusal::BadKeySet.because("`sig` is not the public key of `sig_secret`"));
        }
        if EncPublic::parse(field::str(o, "enc")?)? != keys.enc_public() {
            return Err(Refusal::BadKeySet.because("`enc` is not the public key of `enc_secret`"));
        }
        Ok(keys)
    }
}

/// Most envelopes an agent may have saved but not yet handed to its house.
pub const MAX_PENDING: usize = 64;
/// Most sent envelope ids remembered, so a retried `send --id` is answered without a second
/// envelope.
pub const MAX_SENT: usize = 64;
/// Most retired key sets kept to open envelopes sealed before a rotation.
pub const MAX_PREVIOUS: usize = 8;
/// Most characters of a body's first line kept in the local record of what was sent.
pub const SUMMARY_CHARS: usize = 80;
/// How long the signed envelope of a send is kept, to rebuild it when a 402 bounce says the
/// recipient's card had changed (docs/decisions/0054-stale-card-mended-once.md): the 72-hour bounce
/// window and a day more.
pub const KEEP_ENVELOPE_MS: i64 = 4 * 24 * 3_600_000;
/// The most bytes (canonical JSON) of sent envelopes kept in all, per agent; the oldest leave
/// first, and an envelope alone larger than this is not kept.
pub const MAX_KEPT_ENVELOPE_BYTES: usize = 2 * 1024 * 1024;

/// An envelope signed and saved before it was sent.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The signed envelope.
    pub envelope: Object,
    /// SHA-256 (hex) of the send request it was made for: a repeated `send` finds it by this.
    pub request: String,
    pub saved: Timestamp,
    /// What it says, in a line: the body's first line, or its media type (see
    /// [`Sent::summary`]).
    pub summary: String,
    /// The envelope this one sends again after a 402 a stale card caused (the CLI's `client::stale`).
    pub resend_of: Option<String>,
}

/// An envelope the house accepted: what it was made for, remembered for retries, and the local
/// record `nyx5 outbox` shows when the house cannot be reached.
#[derive(Debug, Clone)]
pub struct Sent {
    pub request: String,
    pub sha256: String,
    pub at: Timestamp,
    /// The recipients, as the envelope names them.
    pub to: Vec<String>,
    /// The first line of a text body (at most [`SUMMARY_CHARS`] characters), else the body's
    /// media type.
    pub summary: String,
    /// The signed envelope, while it can still bounce ([`KEEP_ENVELOPE_MS`], within
    /// [`MAX_KEPT_ENVELOPE_BYTES`]: see [`trim_kept`]). Profiles written before it have none.
    pub envelope: Option<Object>,
    /// The recipients a 402 bounce of it was handled for, each once (the CLI's `client::stale`).
    pub retried: Vec<Retried>,
    /// The envelope it sends again (the CLI's `client::stale`): a resend is never resent unasked, however
    /// long ago its original left `sent`.
    pub resend_of: Option<String>,
}

/// What reading a 402 bounce of a sent envelope did for its recipients `to`: resent them a new
/// envelope `resent_as`, or (`None`) nothing, since their cards fetched afresh asked nothing the
/// envelope lacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retried {
    pub to: Vec<String>,
    pub resent_as: Option<String>,
}

impl Sent {
    /// Whether a 402 bounce for `to` was handled already.
    pub fn retried_for(&self, to: &str) -> bool {
        self.retried.iter().any(|r| r.to.iter().any(|t| t == to))
    }
}

/// Drops the kept envelopes that can no longer bounce (sent more than [`KEEP_ENVELOPE_MS`]
/// before `now`), then keeps the newest that fit in [`MAX_KEPT_ENVELOPE_BYTES`] together: the
/// oldest leave first, and one alone larger than the bound is never kept. The rest of each
/// entry stays.
pub fn trim_kept(sent: &mut BTreeMap<String, Sent>, now: Timestamp) {
    let mut kept: Vec<(&mut Sent, usize)> = sent
        .values_mut()
        .filter_map(|s| {
            let size = s.envelope.as_ref().map(|e| Value::Object(e.clone()).canonical().len())?;
            Some((s, size))
        })
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(k.0.at));
    let mut total = 0usize;
    for (s, size) in kept {
        let live = now.millis().saturating_sub(s.at.millis()) <= KEEP_ENVELOPE_MS;
        if live && total.saturating_add(size) <= MAX_KEPT_ENVELOPE_BYTES {
            total = total.saturating_add(size);
        } else {
            s.envelope = None;
        }
    }
}

/// What the local record says of a body: its first line (at most [`SUMMARY_CHARS`]
/// characters), or its media type when it is not text.
pub fn summary(body: &Value, media: &str) -> String {
    let Value::String(text) = body else { return format!("({media})") };
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let mut out: String = line.chars().filter(|c| !c.is_control()).take(SUMMARY_CHARS).collect();
    if line.chars().count() > SUMMARY_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_summary_is_the_first_line_cut_and_cleaned_or_the_media() {
        let long = format!("\n  {}\u{1b}x\nsecond", "a".repeat(SUMMARY_CHARS));
        let s = summary(&Value::from(long.as_str()), "text/plain");
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
        assert!(s.ends_with('…') && !s.contains('\u{1b}'));
        assert_eq!(summary(&Value::Bool(true), "application/json"), "(application/json)");
    }

    #[test]
    fn a_key_set_reads_back_and_a_foreign_public_key_is_refused() {
        let keys = KeySet::generate(&mut |b: &mut [u8]| b.fill(3));
        let o = keys.to_object();
        assert_eq!(KeySet::from_object(&o).unwrap().to_object(), o);
        let other = KeySet::generate(&mut |b: &mut [u8]| b.fill(4));
        let mut wrong = o.clone();
        wrong.insert("sig".into(), Value::from(other.sig_public().to_b64()));
        let e = KeySet::from_object(&wrong).unwrap_err();
        assert_eq!(e.name(), Refusal::BadKeySet.name());
        assert_eq!(e.reason, "`sig` is not the public key of `sig_secret`");
    }
}
