//! The client profile's format (docs/SPEC.md, "Client profile"), as `nyx5` keeps it in its file
//! and the browser exports and imports it: the file's `nyx5`/`kind`, the bound a reader holds it
//! to, and an agent's two key pairs as its members (`sig`, `enc`, `sig_secret`, `enc_secret`,
//! base64url without padding; `sig_secret` the 32-byte Ed25519 seed, `enc_secret` the 32-byte
//! X25519 secret), read only when the public keys are the secrets' own; and the records of the
//! envelopes an agent saved before sending ([`Pending`]) and the house accepted ([`Sent`]), with
//! their bounds and their bookkeeping ([`mark_sent`], [`Sent::claim`]). The profile is one
//! document in a client's store ([`SLOT`]); where that lives, and its lock, are the caller's.

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
pub const SLOT: Slot = Slot { name: "profile", max: MAX_PROFILE_BYTES, cache: false };

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

/// Moves `id` (sent to `to`) from `pending` to `sent`, with its envelope kept while it can
/// bounce ([`trim_kept`]), forgetting the oldest sent ids beyond [`MAX_SENT`]. An id that was not
/// pending is recorded without its envelope.
pub fn mark_sent(
    pending: &mut BTreeMap<String, Pending>,
    sent: &mut BTreeMap<String, Sent>,
    id: &str,
    sha256: &str,
    to: Vec<String>,
    at: Timestamp,
) {
    let (request, summary, envelope, resend_of) = match pending.remove(id) {
        Some(p) => (p.request, p.summary, Some(p.envelope), p.resend_of),
        None => Default::default(),
    };
    let (sha256, retried) = (sha256.to_owned(), Vec::new());
    sent.insert(id.to_owned(), Sent { request, sha256, at, to, summary, envelope, retried, resend_of });
    trim_kept(sent, at);
    while sent.len() > MAX_SENT {
        let oldest = sent.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| k.clone());
        match oldest {
            Some(k) => sent.remove(&k),
            None => break,
        };
    }
}

impl Sent {
    /// Records that a 402 bounce of this envelope was handled for `to` (`resent_as` the new
    /// envelope's id, or `None`), only when none of `to` was handled before: each recipient
    /// once. Whether it was recorded.
    pub fn claim(&mut self, to: Vec<String>, resent_as: Option<&str>) -> bool {
        if to.iter().any(|a| self.retried_for(a)) {
            return false;
        }
        self.retried.push(Retried { to, resent_as: resent_as.map(str::to_owned) });
        true
    }

    /// Undoes [`Sent::claim`] of `resent_as` (its envelope was never saved), so the next read may
    /// try again.
    pub fn unclaim(&mut self, resent_as: &str) {
        self.retried.retain(|r| r.resent_as.as_deref() != Some(resent_as));
    }
}

impl Pending {
    /// As the profile keeps it (`envelope`, `request`, `saved`, `summary`, `resend_of`?).
    pub fn to_value(&self) -> Value {
        let mut v = obj([
            ("envelope", Value::Object(self.envelope.clone())),
            ("request", self.request.as_str().into()),
            ("saved", self.saved.to_rfc3339().into()),
            ("summary", self.summary.as_str().into()),
        ]);
        if let Some(of) = &self.resend_of {
            v.insert("resend_of".into(), of.as_str().into());
        }
        Value::Object(v)
    }

    /// Reads one entry of `pending`: its envelope is required, the rest defaults (an older
    /// client wrote less).
    pub fn from_value(v: &Value) -> Result<Pending, Error> {
        let p = v.as_object().ok_or_else(|| Refusal::BadProfile.because("each pending entry is an object"))?;
        let envelope = field::object(p, "envelope")?.clone();
        let request = field::opt_str(p, "request")?.unwrap_or("").to_owned();
        let saved = field::opt_str(p, "saved")?.map(Timestamp::parse).transpose()?.unwrap_or(Timestamp(0));
        let summary = field::opt_str(p, "summary")?.unwrap_or("").to_owned();
        let resend_of = field::opt_str(p, "resend_of")?.map(str::to_owned);
        Ok(Pending { envelope, request, saved, summary, resend_of })
    }
}

impl Sent {
    /// As the profile keeps it; `envelope`, `resend_of` and `retried` only when there are.
    pub fn to_value(&self) -> Value {
        let mut v = obj([
            ("request", self.request.as_str().into()),
            ("sha256", self.sha256.as_str().into()),
            ("at", self.at.to_rfc3339().into()),
            ("to", Value::Array(self.to.iter().map(|t| t.as_str().into()).collect())),
            ("summary", self.summary.as_str().into()),
        ]);
        if let Some(e) = &self.envelope {
            v.insert("envelope".into(), Value::Object(e.clone()));
        }
        if let Some(of) = &self.resend_of {
            v.insert("resend_of".into(), of.as_str().into());
        }
        if !self.retried.is_empty() {
            let list = self
                .retried
                .iter()
                .map(|r| {
                    Value::Object(obj([
                        ("to", Value::Array(r.to.iter().map(|t| t.as_str().into()).collect())),
                        ("resent_as", r.resent_as.as_deref().map_or(Value::Null, Value::from)),
                    ]))
                })
                .collect();
            v.insert("retried".into(), Value::Array(list));
        }
        Value::Object(v)
    }

    /// Reads one entry of `sent`; every member defaults (an older client wrote less), and an
    /// unreadable `at` is the epoch.
    pub fn from_value(v: &Value) -> Result<Sent, Error> {
        let s = v.as_object().ok_or_else(|| Refusal::BadProfile.because("each sent entry is an object"))?;
        let t = |name: &str| field::opt_str(s, name).map(|v| v.unwrap_or("").to_owned());
        let at = Timestamp::parse(&t("at")?).unwrap_or(Timestamp(0));
        let strings =
            |list: &[Value]| -> Vec<String> { list.iter().filter_map(Value::as_str).map(str::to_owned).collect() };
        let to = strings(field::opt_array(s, "to")?.unwrap_or_default());
        let summary = t("summary")?;
        let envelope = field::opt_object(s, "envelope")?.cloned();
        let mut retried = Vec::new();
        for r in field::opt_array(s, "retried")?.unwrap_or_default() {
            let r = r.as_object().ok_or_else(|| Refusal::BadProfile.because("each retried entry is an object"))?;
            let to = strings(field::opt_array(r, "to")?.unwrap_or_default());
            let resent_as = field::opt_str(r, "resent_as")?.map(str::to_owned);
            retried.push(Retried { to, resent_as });
        }
        let (request, sha256) = (t("request")?, t("sha256")?);
        let resend_of = field::opt_str(s, "resend_of")?.map(str::to_owned);
        Ok(Sent { request, sha256, at, to, summary, envelope, retried, resend_of })
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

    fn pending_of(n: usize) -> Pending {
        Pending {
            envelope: obj([("id", format!("m{n}").as_str().into())]),
            request: format!("r{n}"),
            saved: Timestamp(1_000),
            summary: format!("hola {n}"),
            resend_of: None,
        }
    }

    /// The outbox's bookkeeping over an in-memory port, as a client keeps it in its profile: a
    /// pending envelope moves to `sent` with its record and envelope, the newest [`MAX_SENT`]
    /// ids stay, each recipient of a bounce is handled once, and every record reads back as it
    /// was written.
    #[test]
    fn sent_records_are_merged_bounded_and_read_back() {
        use crate::store::Store;
        let store = crate::store::Memory::default();
        let at = |n: usize| Timestamp(1_800_000_000_000 + i64::try_from(n).unwrap());
        for n in 0..(MAX_SENT + 3) {
            store
                .update(&SLOT, |doc| {
                    let read = |name: &str, v: &Value| -> BTreeMap<String, Value> {
                        v.as_object()
                            .and_then(|o| o.get(name))
                            .and_then(Value::as_object)
                            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                            .unwrap_or_default()
                    };
                    let doc = doc?.unwrap_or(Value::Object(Object::new()));
                    let mut pending: BTreeMap<String, Pending> = read("pending", &doc)
                        .iter()
                        .map(|(k, v)| (k.clone(), Pending::from_value(v).unwrap()))
                        .collect();
                    let mut sent: BTreeMap<String, Sent> =
                        read("sent", &doc).iter().map(|(k, v)| (k.clone(), Sent::from_value(v).unwrap())).collect();
                    pending.insert(format!("m{n}"), pending_of(n));
                    mark_sent(&mut pending, &mut sent, &format!("m{n}"), "sha", vec!["bo@b.test".into()], at(n));
                    assert!(pending.is_empty());
                    let all = |m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect());
                    let doc = obj([
                        ("pending", all(pending.iter().map(|(k, p)| (k.clone(), p.to_value())).collect())),
                        ("sent", all(sent.iter().map(|(k, s)| (k.clone(), s.to_value())).collect())),
                    ]);
                    Ok((Some(Value::Object(doc)), ()))
                })
                .unwrap();
        }
        let doc = store.read(&SLOT).unwrap().unwrap();
        let sent = doc.as_object().and_then(|o| o.get("sent")).and_then(Value::as_object).unwrap();
        assert_eq!(sent.len(), MAX_SENT, "the newest ids stay");
        assert!(sent.get("m0").is_none() && sent.get("m2").is_none() && sent.get("m3").is_some());
        let mut last = Sent::from_value(sent.get(&format!("m{}", MAX_SENT + 2)).unwrap()).unwrap();
        assert_eq!(
            (last.request.clone(), last.summary.clone()),
            (format!("r{}", MAX_SENT + 2), format!("hola {}", MAX_SENT + 2))
        );
        assert_eq!(last.envelope, Some(pending_of(MAX_SENT + 2).envelope), "its envelope, kept while it can bounce");

        // Each recipient of a bounce is handled once; an unsaved resend is undone.
        assert!(last.claim(vec!["bo@b.test".into()], Some("m-new")));
        assert!(!last.claim(vec!["bo@b.test".into(), "cy@c.test".into()], None), "bo was handled");
        assert!(last.claim(vec!["cy@c.test".into()], None));
        let back = Sent::from_value(&last.to_value()).unwrap();
        assert_eq!(back.retried, last.retried);
        last.unclaim("m-new");
        assert!(!last.retried_for("bo@b.test") && last.retried_for("cy@c.test"));
        // An id that was never pending is recorded without an envelope.
        let (mut pending, mut sent) = (BTreeMap::new(), BTreeMap::new());
        mark_sent(&mut pending, &mut sent, "x", "sha", Vec::new(), at(0));
        assert!(sent.get("x").is_some_and(|s| s.envelope.is_none() && s.request.is_empty()));
        let refused = Pending::from_value(&Value::Bool(true)).unwrap_err();
        assert_eq!(
            (refused.name(), refused.reason.as_ref()),
            (Refusal::BadProfile.name(), "each pending entry is an object")
        );
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
