//! A simulated agent: its keys, and the requests it makes of its house, built as `nyx5` builds
//! them (signed tokens, signed registrations, signed and sealed envelopes).

use nyx5_proto::auth::{Claims, Target};
use nyx5_proto::crypto::{Context, EncPublic, EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::obj;
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value};

use super::world::Prng;
use crate::http::Request;

#[derive(Debug)]
pub(super) struct SimAgent {
    pub address: Address,
    pub sig: SigningKey,
    pub enc: EncSecret,
    /// The key it had before its last rotation.
    pub old: Option<SigningKey>,
    pub registered: bool,
    nonce: u64,
}

impl SimAgent {
    pub(super) fn new(address: Address, rng: &mut Prng) -> SimAgent {
        SimAgent {
            address,
            sig: SigningKey::from_seed(rng.bytes32()),
            enc: EncSecret::from_bytes(rng.bytes32()),
            old: None,
            registered: false,
            nonce: 0,
        }
    }

    pub(super) fn domain(&self) -> &str {
        self.address.domain()
    }

    /// A request to its house signed with `key` (its current key unless told otherwise).
    pub(super) fn request_by(
        &mut self,
        key: Option<&SigningKey>,
        now: i64,
        method: &str,
        target: &str,
        body: Vec<u8>,
    ) -> Request {
        self.nonce += 1;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let claims = Claims {
            address: self.address.clone(),
            ts: Timestamp(now),
            nonce: format!("sim-{}-{:012}", self.address.local(), self.nonce),
            target: Target::new(method, path, query, self.address.domain(), &body),
        };
        let token = claims.sign(key.unwrap_or(&self.sig));
        Request::new(method, target, vec![("authorization".into(), token)], body)
    }

    /// Its registration (or, by the old key's token, its rotation to `self.sig`).
    pub(super) fn registration(&self, now: i64) -> Vec<u8> {
        self.registration_with(now, false)
    }

    /// Its registration; with `reset`, the operator's reset to `self.sig` (every previous key
    /// dropped at once: an agent that lost its key).
    pub(super) fn registration_with(&self, now: i64, reset: bool) -> Vec<u8> {
        let mut o = obj([
            ("local", self.address.local().into()),
            ("sig", self.sig.public().to_b64().into()),
            ("enc", self.enc.public().to_b64().into()),
            ("ts", Timestamp(now).to_rfc3339().into()),
        ]);
        if reset {
            o.insert("reset".into(), true.into());
        }
        sign_object(&mut o, "signature", Context::Registration, &self.sig);
        Value::Object(o).canonical()
    }

    /// A draft from this agent.
    pub(super) fn draft(&self, id: String, to: Vec<Address>, now: i64, content: Content) -> Draft {
        Draft::new(id, self.address.clone(), to, Timestamp(now), content)
    }

    /// `draft` built, sealed for `seal_for` (when any), and signed with its current key.
    pub(super) fn envelope(
        &self,
        draft: Draft,
        seal_for: &[(Address, EncPublic)],
        rng: &mut Prng,
    ) -> Result<Envelope, String> {
        let env = draft.build().map_err(|e| e.reason.into_owned())?;
        let env = if seal_for.is_empty() {
            env
        } else {
            let mut entropy = |buf: &mut [u8]| {
                for chunk in buf.chunks_mut(8) {
                    let word = rng.next_u64().to_le_bytes();
                    chunk.copy_from_slice(word.get(..chunk.len()).unwrap_or(&[]));
                }
            };
            nyx5_proto::seal::seal(env, seal_for, &mut entropy).map_err(|e| e.reason.into_owned())?
        };
        env.sign(&self.sig).map_err(|e| e.reason.into_owned())
    }

    /// An operation of a Libro, as an envelope to `libro@<house>`.
    pub(super) fn operation(&self, id: String, house: &str, body: Object, now: i64) -> Result<Envelope, String> {
        let libro = Address::new(crate::libro::LIBRO, house).map_err(|e| e.reason.into_owned())?;
        let mut draft = self.draft(id, vec![libro], now, Content::new(crate::libro::OP_MEDIA, Value::Object(body)));
        draft.kind = Kind::Task;
        draft.build().and_then(|e| e.sign(&self.sig)).map_err(|e| e.reason.into_owned())
    }
}
