//! POST /inbound — spec §6
//!
//! Another house relays an envelope: parse (400/413), signature present (403), recipients here
//! (421), relay header by the sender's domain for this destination (403; required when
//! `require_relay`; the sending domain's card fetched anew once when the header's key is one it
//! does not list: a domain-key rotation), the sender's card resolved through its domain
//! (refreshed once when the signing key is unknown: key rotation), the envelope verified, the sender's delegation scope
//! (when it is a subagent) checked for this type and this domain, then `Mailbox::accept` decides
//! per recipient. 202 when anything was accepted; 200 with `duplicate: true` when it was all
//! here already; otherwise the first rejection's code. The lists always come along.

use nyx5_proto::relay::{self, RelayHeader};
use nyx5_proto::{Address, Envelope, Error, ErrorKind, Refusal, Value, json::obj};

use crate::http::{Request, Response};
use crate::mailbox::Outcome;
use crate::ports::{Db, Net};
use crate::{House, ok_body};

/// A failure to verify who sent it: temporary failures stay temporary (the sender retries),
/// anything else is 403: a 403 keeps its name (`pin_mismatch`, `wrong_card`, …), any other
/// is `unverifiable_sender`.
fn unverifiable(who: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        let reason = format!("{who} cannot be verified: {}", e.reason);
        if e.kind.is_temporary() {
            e
        } else if e.kind == ErrorKind::Forbidden {
            e.with_reason(reason)
        } else {
            Refusal::UnverifiableSender.because(reason)
        }
    }
}

pub async fn post<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let env = Envelope::parse(&req.body, house.config.max_bytes)?;
    let Some(signature) = env.signature() else {
        return Err(Refusal::UnsignedEnvelope.because("envelope is not signed"));
    };
    let domain = house.config.domain.as_str();
    let recipients: Vec<Address> = env.to().iter().filter(|a| a.domain() == domain).cloned().collect();
    if recipients.is_empty() {
        return Err(Refusal::NotAtThisHouse.because(format!("no recipient of {} is at {domain}", env.id())));
    }

    match req.header(relay::HEADER) {
        Some(value) => {
            let header = RelayHeader::parse(value)?;
            if header.domain != env.from().domain() {
                return Err(Refusal::BadRelay.because(format!(
                    "relayed by {} for a sender at {}",
                    header.domain,
                    env.from().domain()
                )));
            }
            // A key the cached card does not list: the sending house may have rotated its key.
            let sending = house
                .lookup()
                .resolve_domain_knowing(&header.domain, &header.kid)
                .await
                .map_err(unverifiable("the sending house"))?;
            header.verify(&sending.card, &env, domain, house.now())?;
        }
        None if house.config.require_relay => {
            return Err(Refusal::RelayRequired.because(format!("this house requires the {} header", relay::HEADER)));
        }
        // This house's own agent handing its mail in directly: never past a hold over it, whose
        // way out is `POST /outbound` (docs/SPEC.md §7c).
        None if env.from().domain() == domain && !house.drafts().holds_over(env.from().local()).await?.is_empty() => {
            return Err(Refusal::RelayRequired
                .because(format!("{} is held for approval: its mail goes through POST /outbound", env.from())));
        }
        None => {}
    }

    let now = house.now();
    let who = format!("sender {}", env.from());
    // An unknown key: the card may have rotated since we cached it, and is fetched anew once.
    let card = house.lookup().resolve_agent_knowing(env.from(), &signature.kid).await.map_err(unverifiable(&who))?;
    // Signed by a previous key of the sender whose end passed lately by this house's clock: a
    // refusal the clock may be wrong about, so temporary (simulator seed 349: a house days ahead
    // refused the key, bounced, and took a copy once set right).
    // Only a signature that does verify by that key: a forgery naming it stays a 403 (hostile
    // review, L3).
    let lately = card.previous().iter().any(|p| {
        p.sig == signature.kid
            && nyx5_proto::limits::ended_lately(p.until, now)
            && env.clone().verify_with_key(&p.sig).is_ok()
    });
    let env = env.verify(&card, now).map_err(|e| match e.kind {
        ErrorKind::Forbidden if lately => Refusal::KeyEndedLately
            .because(format!("{who}: signed by a key whose end passed lately by this house's clock; try again later")),
        _ => e,
    })?;
    // A subagent's delegation binds it here too: the sending house is not trusted to check it.
    card.check_send(env.kind().as_str(), domain)?;
    let outcomes = house.mailbox().accept(&env, &card, &recipients).await?;
    Ok(answer(outcomes))
}

/// The §6 answer: per-recipient lists, and a status for the whole.
pub fn answer(outcomes: Vec<(Address, Outcome)>) -> Response {
    let (mut accepted, mut rejected) = (Vec::new(), Vec::new());
    let (mut fresh, mut duplicate, mut first) = (false, false, None);
    for (to, outcome) in outcomes {
        match outcome {
            Outcome::Accepted => {
                fresh = true;
                accepted.push(Value::from(to.as_str()));
            }
            Outcome::Duplicate => {
                duplicate = true;
                accepted.push(Value::from(to.as_str()));
            }
            Outcome::Rejected(e) => {
                let wire = e.to_wire();
                let reason = wire.as_object().and_then(|o| o.get("reason")).cloned().unwrap_or(Value::Null);
                rejected.push(Value::Object(obj([
                    ("to", to.as_str().into()),
                    ("code", i64::from(e.code()).into()),
                    ("reason", reason),
                ])));
                first.get_or_insert(e);
            }
        }
    }
    let lists = |mut o: nyx5_proto::Object| {
        o.insert("accepted".into(), Value::Array(accepted.clone()));
        o.insert("rejected".into(), Value::Array(rejected.clone()));
        Value::Object(o)
    };
    match (fresh, duplicate, first) {
        (true, _, _) | (false, false, None) => Response::json(202, &lists(ok_fields(202, false))),
        (false, true, _) => Response::json(200, &lists(ok_fields(200, true))),
        (false, false, Some(e)) => {
            let wire = match e.to_wire() {
                Value::Object(o) => o,
                _ => nyx5_proto::Object::new(),
            };
            Response::json(e.code(), &lists(wire))
        }
    }
}

fn ok_fields(code: i64, duplicate: bool) -> nyx5_proto::Object {
    let mut o = match ok_body([("code", code.into())]) {
        Value::Object(o) => o,
        _ => nyx5_proto::Object::new(),
    };
    if duplicate {
        o.insert("duplicate".into(), Value::Bool(true));
    }
    o
}
