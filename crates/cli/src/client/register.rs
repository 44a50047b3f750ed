//! `nyx5 init`, `register`, `rotate-key`, `subagent` — an agent's keys and its card (spec §4,
//! docs/SPEC.md §8b). Keys are saved in the profile before any request carries them, so a
//! command that fails half-way is simply run again.

use nyx5_proto::card::{AgentCard, Delegation, Scope};
use nyx5_proto::crypto::Context;
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Timestamp, Verified};

use super::Ctx;
use super::http::{house_url, read_object, send, token};
use super::output::{pretty, safe, text};
use super::profile::{AgentEntry, MAX_PREVIOUS, Profile};
use crate::error::Failure;
use crate::keyfile::KeyFile;
use crate::sys::{self, OsRng};

/// `nyx5 init ADDRESS --house URL`: fresh keys for a new agent in the profile.
pub(crate) fn init(ctx: &Ctx, address: &str, house: &str) -> Result<Value, Failure> {
    let address = Address::parse_lenient(address)
        .map_err(|e| Failure::usage(format!("address: {}", e.reason)).named(e.name()))?;
    let house = house_url(house)?;
    let mut rng = OsRng::new();
    let keys = KeyFile::generate(&mut rng);
    rng.check()?;
    let entry = AgentEntry::new(address.clone(), house.clone(), keys.clone());
    let count = Profile::update(&ctx.profile_path, |p| {
        if p.agents.iter().any(|a| a.address == address) {
            return Err(Failure::usage(format!(
                "{address} is already in {}; act as it with --as {address}, or use another --agent file",
                ctx.profile_path.display()
            )));
        }
        p.agents.push(entry);
        Ok(p.agents.len())
    })?;
    Ok(Value::Object(obj([
        ("address", address.as_str().into()),
        ("house", house.as_str().into()),
        ("sig", keys.sig_public().to_b64().into()),
        ("enc", keys.enc_public().to_b64().into()),
        ("profile", ctx.profile_path.display().to_string().into()),
        ("default", Value::Bool(count == 1)),
    ])))
}

pub(crate) fn init_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = format!(
        "{}: keys created in {}\n  house: {}\n  sig:   {}\n  enc:   {}\n",
        text(&o, "address"),
        text(&o, "profile"),
        text(&o, "house"),
        text(&o, "sig"),
        text(&o, "enc")
    );
    if o.get("default") != Some(&Value::Bool(true)) {
        s.push_str(&format!("  (not the profile's first agent: add --as {} to act as it)\n", text(&o, "address")));
    }
    s.push_str("next: nyx5 register   (with --invite CODE or --admin-token TOKEN if the house asks for one)\n");
    s
}

/// What `nyx5 register` may set.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegisterRequest {
    pub(crate) admin_token: Option<String>,
    pub(crate) invite: Option<String>,
    pub(crate) capabilities: Option<Object>,
    pub(crate) listed: Option<bool>,
    pub(crate) description: Option<String>,
    pub(crate) policy: Option<String>,
    pub(crate) pow_bits: Option<i64>,
    /// The stamp a stranger pays to write (`inbox.price`, with the `stamp` policy; spec §19).
    pub(crate) price: Option<i64>,
    /// The house whose Libro the stamp is paid at (`inbox.house`) [default: the agent's own].
    pub(crate) stamp_house: Option<String>,
    pub(crate) webhook: Option<String>,
    /// Send `webhook: null`: the house forgets the webhook.
    pub(crate) no_webhook: bool,
    pub(crate) valid_until: Option<Timestamp>,
    /// Previous keys to remove from the card at once (base64url).
    pub(crate) drop_previous: Vec<String>,
    /// Operator only: carry nothing forward.
    pub(crate) reset: bool,
}

/// The signed body of POST /agents: `extra` plus `local`, `sig`, `enc`, `ts`, signed by `keys`.
fn body(local: &str, keys: &KeyFile, mut extra: Object, now: Timestamp) -> Value {
    extra.insert("local".into(), local.into());
    extra.insert("sig".into(), keys.sig_public().to_b64().into());
    extra.insert("enc".into(), keys.enc_public().to_b64().into());
    extra.insert("ts".into(), now.to_rfc3339().into());
    sign_object(&mut extra, "signature", Context::Registration, &keys.sig);
    Value::Object(extra)
}

/// POSTs a registration body and checks the certified card that comes back.
fn post(
    ctx: &Ctx,
    me: &AgentEntry,
    body: &Value,
    auth: &str,
    expect_sig: &KeyFile,
    what: &str,
) -> Result<(u16, Object, Verified<AgentCard>), Failure> {
    let url = format!("{}/agents", me.house);
    let headers = [("authorization", auth), ("content-type", "application/json"), ("accept", "application/json")];
    let (status, answer) = send(ctx.net.as_ref(), "POST", &url, &headers, &body.canonical(), what)?;
    let answer = read_object(status, &answer, what)?;
    let card = field::object(&answer, "card")
        .map_err(|_| Failure::network(format!("{what}: the house answered without a card")))?
        .clone();
    let card = AgentCard::from_object(card)
        .map_err(|e| Failure::rejected(format!("{what}: the card: {}", e.reason)).named(e.name()))?;
    if card.address() != me.address || card.sig() != expect_sig.sig_public() {
        return Err(Failure::rejected(format!("{what}: the house certified another address or key")));
    }
    let res = ctx.resolver(Some(me), sys::now()?)?;
    let domain = res.domain(me.address.domain())?;
    let card = res.verify_card(card, &domain)?;
    Ok((status, answer, card))
}

/// The agent's current card at its house, if it has one.
fn current_card(ctx: &Ctx, me: &AgentEntry) -> Result<Option<Verified<AgentCard>>, Failure> {
    let res = ctx.resolver(Some(me), sys::now()?)?;
    match res.agent(&me.address) {
        Ok(c) => Ok(Some(c)),
        Err(f) if f.status() == Some(404) => Ok(None),
        Err(f) => Err(f),
    }
}

fn answer(card: &Verified<AgentCard>, status: u16, via: &str) -> Value {
    Value::Object(obj([
        ("address", card.address().as_str().into()),
        ("card", card.to_value()),
        ("registered_via", via.into()),
        ("created", Value::Bool(status == 201)),
    ]))
}

/// `nyx5 register`: asks the house to certify the agent's card; an already registered agent
/// updates its card (what is not given is kept from the current card).
pub(crate) fn register(ctx: &Ctx, req: &RegisterRequest) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let now = sys::now()?;
    let current = current_card(ctx, &me)?.filter(|c| c.sig() == me.keys.sig_public());
    let mut extra = Object::new();
    let mut caps = current.as_ref().map(|c| c.capabilities().clone()).unwrap_or_default();
    if let Some(c) = &req.capabilities {
        caps = c.clone();
    }
    if let Some(l) = req.listed {
        caps.insert("listed".into(), Value::Bool(l));
    }
    if let Some(d) = &req.description {
        caps.insert("description".into(), d.as_str().into());
    }
    extra.insert("capabilities".into(), Value::Object(caps));
    let mut inbox = current.as_ref().map(|c| c.inbox().clone()).unwrap_or_else(|| obj([("policy", "open".into())]));
    if let Some(p) = &req.policy {
        if !["open", "allowlist", "pow", "stamp"].contains(&p.as_str()) {
            return Err(Failure::usage(format!("--policy {p:?}: choose open, allowlist, pow or stamp")));
        }
        inbox.insert("policy".into(), p.as_str().into());
    }
    if let Some(b) = req.pow_bits {
        if !(0..=i64::from(nyx5_proto::limits::MAX_POW_BITS)).contains(&b) {
            return Err(Failure::usage("--pow-bits must be 0 to 32"));
        }
        inbox.insert("pow_bits".into(), b.into());
    }
    if let Some(p) = req.price {
        if !(1..=nyx5_proto::limits::MAX_AMOUNT).contains(&p) {
            return Err(Failure::usage("--price must be a positive whole number of tokens"));
        }
        inbox.insert("price".into(), p.into());
    }
    if let Some(h) = &req.stamp_house {
        inbox.insert("house".into(), super::libro::house_domain(h)?.into());
    }
    extra.insert("inbox".into(), Value::Object(inbox));
    let valid_until = req.valid_until.or_else(|| current.as_ref().and_then(|c| c.valid_until()));
    if let Some(v) = valid_until {
        extra.insert("valid_until".into(), v.to_rfc3339().into());
    }
    if let Some(w) = &req.webhook {
        extra.insert("webhook".into(), w.as_str().into());
    } else if req.no_webhook {
        extra.insert("webhook".into(), Value::Null);
    }
    if let Some(i) = &req.invite {
        extra.insert("invite".into(), i.as_str().into());
    }
    if let Some(d) = current.as_ref().and_then(|c| c.delegation()) {
        extra.insert("delegation".into(), d.to_value());
    }
    if !req.drop_previous.is_empty() {
        let keys = req.drop_previous.iter().map(|k| Value::from(k.as_str())).collect();
        extra.insert("drop_previous".into(), Value::Array(keys));
    }
    if req.reset {
        extra.insert("reset".into(), Value::Bool(true));
    }
    let body = body(me.address.local(), &me.keys, extra, now);
    let auth = match &req.admin_token {
        Some(t) => format!("Bearer {t}"),
        None => token(&me.address, &me.keys.sig, "POST", &format!("{}/agents", me.house), &body.canonical(), now)?,
    };
    let (status, answer_obj, card) = post(ctx, &me, &body, &auth, &me.keys, &format!("registering {}", me.address))
        .map_err(|f| match f.status() {
            Some(403) if req.admin_token.is_none() && req.invite.is_none() => {
                f.hint("this house registers agents with an invitation or through its operator: retry with --invite CODE or --admin-token TOKEN")
            }
            _ => f,
        })?;
    Ok(answer(&card, status, text(&answer_obj, "registered_via")))
}

/// An invitation redeemed for a new agent (the apps' `invite_accept`): fresh keys for `address`
/// in the profile, beside the others (an address it holds already is refused, never replaced),
/// then `register --invite` as that agent at the house its domain names, found and verified as
/// every house is (never a URL the caller gives). When the house refuses for good (a 4xx that
/// is no timeout or rate limit), the fresh entry is taken out again, so nothing is left half
/// done; after a network failure or a 5xx the house may have registered it, so its keys stay.
pub(crate) fn accept_invitation(mut ctx: Ctx, address: &str, code: &str) -> Result<Value, Failure> {
    let fresh = Address::parse_lenient(address)
        .map_err(|e| Failure::usage(format!("address: {}", e.reason)).named(e.name()))?;
    let (house, _) = super::house_target(&ctx.resolver(None, sys::now()?)?, fresh.domain())?;
    let made = init(&ctx, address, &house)?;
    let sig = text(made.as_object().unwrap_or(&Object::new()), "sig").to_owned();
    ctx.as_address = Some(fresh.clone());
    let req = RegisterRequest { invite: Some(code.to_owned()), ..RegisterRequest::default() };
    register(&ctx, &req).inspect_err(|f| {
        if !super::send::final_refusal(f.status()) {
            return;
        }
        let _ = Profile::update(&ctx.profile_path, |p| {
            p.agents.retain(|a| !(a.address == fresh && a.keys.sig_public().to_b64() == sig));
            Ok(())
        });
    })
}

pub(crate) fn register_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let verb = if o.get("created") == Some(&Value::Bool(true)) { "registered" } else { "updated" };
    let card = o.get("card").cloned().unwrap_or(Value::Null);
    format!(
        "{verb} {} (via {}); its certified card:\n{}",
        text(&o, "address"),
        text(&o, "registered_via"),
        pretty(&card)
    )
}

/// `nyx5 rotate-key`: new keys for the agent. The new keys are saved (as `next`) before the
/// request; after the house certifies them they become current and the old ones are kept to
/// open envelopes sealed to them. Run again after a failure: it finishes the same rotation.
/// The house clears the webhook on a rotation unless the request names one (`webhook`).
pub(crate) fn rotate_key(ctx: &Ctx, webhook: Option<&str>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let next = match &me.next {
        Some(k) => k.clone(),
        None => {
            let mut rng = OsRng::new();
            let k = KeyFile::generate(&mut rng);
            rng.check()?;
            let saved = k.clone();
            Profile::update(&ctx.profile_path, |p| {
                let a = p
                    .agent_mut(&me.address)
                    .ok_or_else(|| Failure::usage(format!("{} left the profile", me.address)))?;
                a.next.get_or_insert(saved);
                Ok(a.next.clone())
            })?
            .unwrap_or(k)
        }
    };
    let now = sys::now()?;
    let current = current_card(ctx, &me)?.ok_or_else(|| {
        Failure::refusal(
            nyx5_proto::Refusal::UnknownAgent,
            format!("{} has no card at its house yet; run `nyx5 register` first", me.address),
        )
    })?;
    let (card, via, status, sent) = if current.sig() == next.sig_public() {
        // The house took the new keys before; only the profile was left to update.
        (current, "self".to_owned(), 200, false)
    } else {
        let mut extra = Object::new();
        extra.insert("capabilities".into(), Value::Object(current.capabilities().clone()));
        extra.insert("inbox".into(), Value::Object(current.inbox().clone()));
        if let Some(v) = current.valid_until() {
            extra.insert("valid_until".into(), v.to_rfc3339().into());
        }
        if let Some(w) = webhook {
            extra.insert("webhook".into(), w.into());
        }
        if let Some(d) = &current.delegation() {
            let parent = me.address.parent().ok_or_else(|| Failure::usage("a delegated card without a parent name"))?;
            let profile = ctx.profile()?;
            let parent_entry = profile.agents.iter().find(|a| a.address == parent).ok_or_else(|| {
                Failure::usage(format!(
                    "{} is a subagent of {parent}, whose keys are not in this profile: its parent must sign a \
                     new delegation (`nyx5 subagent` run by {parent})",
                    me.address
                ))
            })?;
            let renewed = Delegation::sign(
                &parent,
                &me.address,
                &next.sig_public(),
                &d.scope,
                d.valid_until,
                now,
                &parent_entry.keys.sig,
            )
            .map_err(|e| Failure::usage(format!("cannot sign the delegation: {}", e.reason)).named(e.name()))?;
            extra.insert("delegation".into(), renewed.to_value());
        }
        let body = body(me.address.local(), &next, extra, now);
        let auth = token(&me.address, &me.keys.sig, "POST", &format!("{}/agents", me.house), &body.canonical(), now)?;
        let (status, answer_obj, card) =
            post(ctx, &me, &body, &auth, &next, &format!("rotating the key of {}", me.address))?;
        (card, text(&answer_obj, "registered_via").to_owned(), status, true)
    };
    let old_sig = me.keys.sig_public().to_b64();
    Profile::update(&ctx.profile_path, |p| {
        let a = p.agent_mut(&me.address).ok_or_else(|| Failure::usage(format!("{} left the profile", me.address)))?;
        if let Some(n) = a.next.take() {
            let old = std::mem::replace(&mut a.keys, n);
            a.previous.insert(0, (old, now));
            a.previous.truncate(MAX_PREVIOUS);
        }
        Ok(())
    })?;
    let mut v = answer(&card, status, &via);
    if let Value::Object(o) = &mut v {
        o.insert("previous_sig".into(), old_sig.into());
        o.insert("sig".into(), next.sig_public().to_b64().into());
        o.insert("enc".into(), next.enc_public().to_b64().into());
        // What this run's request set; after a retry the webhook is whatever the first set.
        if sent {
            o.insert("webhook".into(), webhook.into());
        }
    }
    Ok(v)
}

pub(crate) fn rotate_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let webhook = match o.get("webhook") {
        Some(Value::String(url)) => format!("  webhook: {}\n", safe(url)),
        Some(_) => {
            "  no webhook now (a rotation clears it): set one with `nyx5 register --webhook URL` if you use one\n"
                .to_owned()
        }
        None => String::new(),
    };
    format!(
        "{}: new keys certified\n  sig: {}\n  enc: {}\n  the old key {} still signs for 7 days; its secrets stay in the profile to open older envelopes\n{webhook}",
        text(&o, "address"),
        text(&o, "sig"),
        text(&o, "enc"),
        text(&o, "previous_sig")
    )
}

/// What `nyx5 subagent` delegates.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubagentRequest {
    pub(crate) name: String,
    pub(crate) types: Option<Vec<String>>,
    pub(crate) to_domains: Option<Vec<String>>,
    pub(crate) cap: Option<i64>,
    /// How far its money-moving operations go alone (docs/SPEC.md §16b).
    pub(crate) authority: Option<nyx5_proto::authority::Authority>,
    pub(crate) valid_until: Option<Timestamp>,
    /// The profile file its keys go to [default: the acting agent's].
    pub(crate) out: Option<std::path::PathBuf>,
}

/// `nyx5 subagent NAME`: keys for `NAME.<local>@<domain>` saved in the profile, a delegation
/// signed by the acting agent, and the child's registration.
pub(crate) fn subagent(ctx: &Ctx, req: &SubagentRequest) -> Result<Value, Failure> {
    let parent = ctx.me()?;
    let name = req.name.trim().to_ascii_lowercase();
    if name.is_empty() || name.contains('.') || name.contains('@') {
        return Err(Failure::usage(format!("{:?}: a subagent name is one label, such as `tester`", req.name)));
    }
    let child = Address::new(&format!("{name}.{}", parent.address.local()), parent.address.domain())
        .map_err(|e| Failure::usage(format!("subagent name: {}", e.reason)).named(e.name()))?;
    if req.cap.is_some_and(|c| !(0..=nyx5_proto::limits::MAX_AMOUNT).contains(&c)) {
        return Err(Failure::usage("--cap must be a non-negative integer"));
    }
    let norm = |v: &Option<Vec<String>>| {
        v.as_ref()
            .map(|l| l.iter().map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect::<Vec<_>>())
    };
    let scope = Scope {
        types: norm(&req.types),
        to_domains: norm(&req.to_domains),
        cap: req.cap,
        authority: req.authority.clone(),
    };
    if let Some(t) = &scope.types {
        for kind in t {
            nyx5_proto::envelope::Kind::parse(kind).map_err(|_| {
                Failure::usage(format!("--scope-types {kind:?}: use message, task, result, receipt or intro"))
            })?;
        }
    }
    let mut rng = OsRng::new();
    let fresh = KeyFile::generate(&mut rng);
    rng.check()?;
    let target = req.out.clone().unwrap_or_else(|| ctx.profile_path.clone());
    let entry = Profile::update(&target, |p| {
        if let Some(a) = p.agents.iter().find(|a| a.address == child) {
            return Ok(a.clone());
        }
        let e = AgentEntry::new(child.clone(), parent.house.clone(), fresh);
        p.agents.push(e.clone());
        Ok(e)
    })?;
    let now = sys::now()?;
    let delegation = Delegation::sign(
        &parent.address,
        &child,
        &entry.keys.sig_public(),
        &scope,
        req.valid_until,
        now,
        &parent.keys.sig,
    )
    .map_err(|e| Failure::usage(format!("cannot sign the delegation: {}", e.reason)).named(e.name()))?;
    let mut extra =
        obj([("delegation", delegation.to_value()), ("inbox", Value::Object(obj([("policy", "open".into())])))]);
    if let Some(v) = req.valid_until {
        extra.insert("valid_until".into(), v.to_rfc3339().into());
    }
    let body = body(child.local(), &entry.keys, extra, now);
    let auth = token(&child, &entry.keys.sig, "POST", &format!("{}/agents", entry.house), &body.canonical(), now)?;
    let (status, answer_obj, card) = post(ctx, &entry, &body, &auth, &entry.keys, &format!("registering {child}"))?;
    let mut v = answer(&card, status, text(&answer_obj, "registered_via"));
    if let Value::Object(o) = &mut v {
        o.insert("parent".into(), parent.address.as_str().into());
        o.insert("scope".into(), scope.to_value());
        o.insert("profile".into(), target.display().to_string().into());
        if scope.authority.is_some() && req.out.is_none() {
            let why = "its keys share a profile with yours: an agent run from it can approve what its authority \
                       asks of you; keep them apart with --out FILE";
            o.insert("warning".into(), why.into());
        }
    }
    Ok(v)
}

pub(crate) fn subagent_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let scope = o.get("scope").map(Value::canonical_string).unwrap_or_default();
    let mut s = format!(
        "{} registered as a subagent of {} with scope {scope}\n  its keys are in {}; act as it with --as {}\n",
        text(&o, "address"),
        text(&o, "parent"),
        text(&o, "profile"),
        text(&o, "address")
    );
    if let Some(w) = o.get("warning").and_then(Value::as_str) {
        s.push_str(&format!("  warning: {w}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use nyx5_client::hosts::HostEntry;
    use nyx5_proto::card::AgentCardDraft;
    use nyx5_proto::crypto::SigningKey;

    use super::*;
    use crate::client::testing::{HouseB, domain_card};

    fn keyfile(seed: u8) -> KeyFile {
        KeyFile::generate(&mut |b: &mut [u8]| b.fill(seed))
    }

    /// Registers alice@b.test with key 1 at a house that certifies `address` with key `certified`.
    fn register_at(address: &str, certified: &KeyFile) -> Result<(u16, Object, Verified<AgentCard>), Failure> {
        let now = sys::now().unwrap();
        let domain_key = SigningKey::from_seed([40; 32]);
        let domain_card = domain_card(&domain_key, now);
        let card = AgentCardDraft::new(Address::parse(address).unwrap(), certified.sig_public(), None, now)
            .certify(&domain_key)
            .unwrap();
        let answer = obj([("ok", true.into()), ("card", card.to_value())]);
        let mut hosts = nyx5_proto::vecmap::VecMap::new();
        hosts.insert("b.test".into(), HostEntry { url: "http://b".into(), sig: Some(domain_key.public()) });
        let ctx = Ctx {
            profile_path: std::env::temp_dir().join(format!("nyx5-register-test-{}", std::process::id())),
            as_address: None,
            hosts,
            doh: None,
            net: Box::new(HouseB { answer: Value::Object(answer).canonical(), ..HouseB::serving(&domain_card) }),
            repin: false,
        };
        let keys = keyfile(1);
        let me = AgentEntry::new(Address::parse("alice@b.test").unwrap(), "http://b".into(), keyfile(1));
        let body = body("alice", &keys, Object::new(), now);
        post(&ctx, &me, &body, "Bearer x", &keys, "registration")
    }

    #[test]
    fn a_card_the_house_certified_for_another_key_or_address_is_refused() {
        let (status, _, card) = register_at("alice@b.test", &keyfile(1)).unwrap();
        assert_eq!((status, card.address().as_str()), (201, "alice@b.test"));
        for (address, key) in [("alice@b.test", keyfile(2)), ("mallory@b.test", keyfile(1))] {
            let Err(f) = register_at(address, &key) else { panic!("{address} with another key was accepted") };
            assert!(f.one_line().contains("another address or key"), "{}", f.one_line());
        }
    }
}
