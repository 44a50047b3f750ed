//! What a fresh isolate runs once, at its start, before any request (issue 36 §4).
//!
//! V8 compiles a WebAssembly function at its first call (lazy compilation, on by default in
//! workerd as in Node). A cold isolate's first inbound envelope thus paid for compiling every
//! function on its path: the edge harness measured ~4 ms over a warm envelope, 30 raw verifies,
//! where the goal is 1 ms (and the Free plan's whole invocation 10 ms). Run once in the Worker's
//! `start` event, [`run`] takes that path on documents of its own — a domain card, an agent card
//! it certifies, an envelope, its relay header and a token, each written, then read back and
//! verified as a request's would be — so the first request finds its code compiled. The start
//! has a budget of its own (Workers' startup limit, 1 s), apart from the invocation's CPU.
//!
//! Keys come from fixed seeds and the documents are never stored or sent; nothing here is a
//! credential. The harness (`benches/edge/cold.mjs`) runs it as the start event does and prints
//! what it costs.

use nyx5_proto::auth::{AuthHeader, Claims, Keys, Target};
use nyx5_proto::card::{AgentCard, AgentCardDraft, DomainCard, DomainCardDraft};
use nyx5_proto::crypto::SigningKey;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::{Address, Envelope, Error, Timestamp, limits};

use crate::mailbox::Outcome;
use crate::routes::inbound;

/// The moment the documents are made and checked at (any fixed time inside their validity).
const AT: Timestamp = Timestamp(1_790_000_000_000);

/// Writes and reads back the documents of an inbound envelope and of an agent's request: the
/// size of what it read, so nothing is optimised away. An error says which step failed; the
/// Worker logs it and serves on (a cold first request is slower, never wrong).
pub fn run() -> Result<usize, Error> {
    let house_key = SigningKey::from_seed([0x5a; 32]);
    let agent_key = SigningKey::from_seed([0xa5; 32]);
    let sender = Address::parse("warm@warm.invalid")?;
    let to = Address::parse("up@start.invalid")?;

    let card = DomainCardDraft {
        domain: sender.domain().into(),
        estafeta: format!("https://{}", sender.domain()),
        other_keys: vec![],
        previous: vec![],
        policy: obj([("inbound", "verified".into())]),
        extensions: vec![],
        issued: AT,
    }
    .sign(&house_key, AT)?
    .to_value()
    .canonical_string();
    let agent = AgentCardDraft::new(sender.clone(), agent_key.public(), None, AT)
        .certify(&house_key)?
        .to_value()
        .canonical_string();
    let draft =
        Draft::new("warm-1".into(), sender.clone(), vec![to.clone()], AT, Content::new("text/plain", "up".into()));
    let mail = draft.build()?.sign(&agent_key)?.canonical();

    // What a request's handler does with them: the cached cards verified, the envelope and its
    // relay header read and verified, the sender's scope checked, the answer written.
    let card = DomainCard::parse(card.as_bytes())?.verify(None)?;
    let agent = AgentCard::parse(agent.as_bytes())?.verify(&card, None, AT)?;
    let env = Envelope::parse(&mail, limits::MAX_ENVELOPE_BYTES)?;
    let relay = RelayHeader::sign(sender.domain(), &env, to.domain(), &house_key).to_header();
    RelayHeader::parse(&relay)?.verify(&card, &env, to.domain(), AT)?;
    let env = env.verify(&agent, AT)?;
    agent.check_send(env.kind().as_str(), to.domain())?;
    let site = crate::site::site(env.from().domain()).len();
    let answer = inbound::answer(vec![(to, Outcome::Accepted)]);

    // And an agent's own request: its token read and verified against its card.
    let target = Target::new("POST", "/outbound", "", sender.domain(), &mail);
    let token = Claims { address: sender, ts: AT, nonce: "warm-start-0000000001".into(), target: target.clone() }
        .sign(&agent_key);
    // The nonce is not spent: nothing is stored, and the token never leaves this function.
    let _nonce = AuthHeader::parse(&token)?.verify(&agent, &target, Keys::Current, AT)?;
    Ok(answer.body.len() + site + mail.len())
}

#[cfg(test)]
mod tests {
    /// Every step succeeds: a warm-up that failed would leave the first request cold, silently.
    #[test]
    fn the_warm_up_runs_every_step() {
        assert!(super::run().unwrap() > 100);
    }
}
