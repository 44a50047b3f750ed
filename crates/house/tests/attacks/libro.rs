//! Attacks on the Libro (issue 11's security review of `d2f0897`): each was open there and is
//! closed now. Operations are envelopes to `libro@`, delivered straight to the house as the
//! sending house's queue would (`deliver_op`), so each test reads the Libro's own answer.

use nyx5_house::libro::LIBRO;
use nyx5_house::mailbox::Outcome;
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, QuoteDraft};
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value};
use nyx5_rules::policy::EXT_AVAL;

use crate::common::*;
use crate::kit::*;

fn topup(h: &TestHouse, who: &str, amount: i64) {
    let body = obj([("address", who.into()), ("amount", amount.into())]);
    json(&call(h, "POST", "/libro/topup", &[("authorization", &admin(h))], &Value::Object(body)), 200);
}

fn balance(h: &TestHouse, account: &str) -> i64 {
    block_on(nyx5_house::store::libro::balance(&h.db, account)).unwrap()
}

fn op_envelope(who: &Agent, id: &str, house: &str, body: Object) -> Envelope {
    libro_op(&who.address, house, id, Timestamp(START), body).build().unwrap().sign(&who.sig).unwrap()
}

/// Hands an operation signed by `key` (the agent's own unless given) to the Libro at `h` and
/// answers its outcome there, as the operator's house would learn it.
fn operate_with(h: &TestHouse, who: &Agent, env: &Envelope) -> Outcome {
    let card = block_on(h.lookup().resolve_agent(&who.address, false)).unwrap();
    let verified = env.clone().verify(&card, h.now()).unwrap();
    let libro = Address::new(LIBRO, &h.config.domain).unwrap();
    block_on(h.mailbox().accept(&verified, &card, &[libro])).unwrap().remove(0).1
}

fn code(o: &Outcome) -> u16 {
    match o {
        Outcome::Accepted => 200,
        Outcome::Duplicate => 208,
        Outcome::Rejected(e) => e.code(),
    }
}

fn op(h: &TestHouse, who: &Agent, id: &str, body: Object) -> u16 {
    code(&operate_with(h, who, &op_envelope(who, id, &h.config.domain, body)))
}

/// A quote of 10 tok from `seller` to `buyer` at a.test, unsigned.
fn draft(seller: &Agent, buyer: &Address, id: &str, kind: ContractKind) -> QuoteDraft {
    QuoteDraft {
        id: id.into(),
        house: "a.test".into(),
        seller: seller.address.clone(),
        buyer: buyer.clone(),
        contract: kind,
        price: 10,
        currency: "tok".into(),
        concept: "work".into(),
        terms: None,
        arbiter: None,
        referrer: None,
        issued: Timestamp(START),
        expires: None,
        extra: Object::new(),
    }
}

/// [`draft`], adjusted by `edit` and signed by the seller.
fn quote(seller: &Agent, buyer: &Address, id: &str, kind: ContractKind, edit: impl FnOnce(&mut QuoteDraft)) -> Value {
    let mut q = draft(seller, buyer, id, kind);
    edit(&mut q);
    q.sign(&seller.sig).unwrap().to_value()
}

fn people(h: &TestHouse, names: &[(&str, u8)]) -> Vec<Agent> {
    names
        .iter()
        .map(|(a, seed)| {
            let agent = Agent::new(a, *seed);
            if agent.address.domain() == h.config.domain {
                json(&enrol(h, &agent, &[]), 201);
            }
            agent
        })
        .collect()
}

#[test]
fn operations_from_one_site_are_rate_limited() {
    let (w, a, b) = two_houses();
    let _ = w;
    let fay = Agent::new("fay@b.test", 30);
    json(&enrol(&b, &fay, &[]), 201);
    topup(&a, "fay@b.test", 5);
    let cap = a.config.inbound_per_domain_per_minute;
    let mut codes = Vec::new();
    for i in 0..cap + 3 {
        codes.push(op(&a, &fay, &format!("m-{i}"), obj([("op", "balance".into())])));
    }
    assert!(codes[..usize::try_from(cap).unwrap()].iter().all(|c| *c == 200), "{codes:?}");
    assert_eq!(codes.last(), Some(&429));
}

#[test]
fn a_party_who_blocked_the_operator_gets_no_receipts() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let [cy, eve]: [Agent; 2] = people(&h, &[("cy@a.test", 31), ("eve@a.test", 32)]).try_into().ok().unwrap();
    let block = Value::Object(obj([("block", Value::Object(obj([("add", Value::Array(vec!["eve@a.test".into()]))])))]));
    json(&cy.post(&h, "/lists/cy", &block), 200);
    for i in 0..5 {
        let body = obj([("op", "mandate".into()), ("grantee", "cy@a.test".into()), ("cap", 1.into())]);
        assert_eq!(op(&h, &eve, &format!("m-{i}"), body), 200);
    }
    assert!(mailbox(&h, &cy).iter().all(|e| e.from().local() != LIBRO), "no receipt reached cy");
    assert_eq!(mailbox(&h, &eve).iter().filter(|e| e.from().local() == LIBRO).count(), 5);
}

#[test]
fn an_oversized_quote_is_refused() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let [ana, bo]: [Agent; 2] = people(&h, &[("ana@a.test", 33), ("bo@a.test", 34)]).try_into().ok().unwrap();
    topup(&h, "bo@a.test", 10);
    // A concept of 600 KB no longer makes a quote, so no receipt of a megabyte is ever signed.
    let mut q = draft(&ana, &bo.address, "big", ContractKind::Spot);
    q.concept = "x".repeat(600_000);
    assert_eq!(q.clone().sign(&ana.sig).unwrap_err().code(), 413);
    q.concept = "x".repeat(300);
    assert_eq!(q.clone().sign(&ana.sig).unwrap_err().code(), 400);
    // Sent raw, the house refuses it as well.
    let mut raw = quote(&ana, &bo.address, "big", ContractKind::Spot, |_| {}).as_object().unwrap().clone();
    raw.insert("terms".into(), Value::Object(obj([("pad", "y".repeat(20_000).into())])));
    let body = obj([("op", "accept".into()), ("quote", Value::Object(raw))]);
    assert_eq!(op(&h, &bo, "acc-big", body), 413);
    assert_eq!(balance(&h, "bo@a.test"), 10);
}

#[test]
fn a_vouch_backed_by_a_puppet_verifier_or_a_short_bond_opens_nothing() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let people = people(&h, &[("ana@a.test", 35), ("dan@a.test", 36), ("pup@a.test", 37)]);
    let (ana, dan) = (&people[0], &people[1]);
    let cy = Agent::new("cy@a.test", 38);
    json(&enrol(&h, &cy, &[("inbox", Value::Object(obj([("policy", "allowlist".into())])))]), 201);
    let allow = Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["ana@a.test".into()]))])))]));
    json(&cy.post(&h, "/lists/cy", &allow), 200);
    topup(&h, "ana@a.test", 10);
    let bond = |verifier: &str, beneficiary: &str, expires: Option<i64>| {
        let mut o = obj([
            ("op", "bond".into()),
            ("amount", 1.into()),
            ("claim", "dan is fine".into()),
            ("verifier", verifier.into()),
            ("beneficiary", beneficiary.into()),
            ("vouchee", "dan@a.test".into()),
        ]);
        if let Some(ms) = expires {
            o.insert("expires".into(), Timestamp(START + ms).to_rfc3339().into());
        }
        o
    };
    // The review's attack: cy is beneficiary, ana's puppet verifies (and would release it).
    assert_eq!(op(&h, ana, "b-puppet", bond("pup@a.test", "cy@a.test", None)), 200);
    // cy verifies, but ana is the beneficiary: a forfeit would pay ana.
    assert_eq!(op(&h, ana, "b-self", bond("cy@a.test", "ana@a.test", None)), 200);
    // Right parties, but it expires in a minute.
    assert_eq!(op(&h, ana, "b-short", bond("cy@a.test", "cy@a.test", Some(60_000))), 200);
    for (i, bond_id) in ["b-puppet", "b-self", "b-short"].iter().enumerate() {
        let ext = obj([(
            "extensions",
            Value::Object(obj([(
                EXT_AVAL,
                Value::Object(obj([("voucher", "ana@a.test".into()), ("bond", (*bond_id).into())])),
            )])),
        )]);
        let env = envelope(dan, &format!("v-{i}"), &[&cy.address], |d| d.extra = ext);
        let card = block_on(h.lookup().local_card("dan")).unwrap().unwrap();
        let verified = env.verify(&card, h.now()).unwrap();
        let out = block_on(h.mailbox().accept(&verified, &card, std::slice::from_ref(&cy.address))).unwrap();
        assert_eq!(code(&out[0].1), 402, "{bond_id}");
    }
}

/// `address` registered with one key, then rotated by its owner to the next: (old, new).
fn rotated(h: &TestHouse, address: &str, seed: u8) -> (Agent, Agent) {
    let old = Agent::new(address, seed);
    json(&register(h, &old, &[], &[]), 201);
    let new = Agent::new(address, seed + 1);
    json(&register_by(h, &old, &new, &[]), 200);
    (old, new)
}

#[test]
fn a_stamp_is_not_paid_by_a_rotated_out_key() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Open);
    let (old, _new) = rotated(&h, "vic@a.test", 39);
    let thief = Agent::new("t@a.test", 41);
    json(
        &register(&h, &thief, &[], &[("inbox", Value::Object(obj([("policy", "stamp".into()), ("price", 1.into())])))]),
        201,
    );
    topup(&h, "vic@a.test", 50);
    let stamp =
        |amount: i64| obj([("stamp", Value::Object(obj([("house", "a.test".into()), ("amount", amount.into())])))]);
    let env = envelope(&old, "s-old", &[&thief.address], |d| d.extra = stamp(50));
    let card = block_on(h.lookup().local_card("vic")).unwrap().unwrap();
    let verified = env.verify(&card, h.now()).expect("an old key in its grace still signs mail");
    let out = block_on(h.mailbox().accept(&verified, &card, std::slice::from_ref(&thief.address))).unwrap();
    assert_eq!(code(&out[0].1), 403);
    assert_eq!(balance(&h, "vic@a.test"), 50);
}

#[test]
fn quotes_under_a_rotated_out_seller_key_sell_nothing() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Open);
    let (old, new) = rotated(&h, "sel@a.test", 42);
    let bo = Agent::new("bo@a.test", 44);
    json(&register(&h, &bo, &[], &[]), 201);
    topup(&h, "bo@a.test", 20);
    let q = quote(&old, &bo.address, "q-old", ContractKind::Metered, |_| {});
    assert_eq!(op(&h, &bo, "acc-old", obj([("op", "accept".into()), ("quote", q)])), 403);
    let q = quote(&new, &bo.address, "q-new", ContractKind::Spot, |_| {});
    assert_eq!(op(&h, &bo, "acc-new", obj([("op", "accept".into()), ("quote", q)])), 200);
}

#[test]
fn strangers_to_a_contract_learn_nothing_of_it_and_arbiters_are_third_parties() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let p = people(&h, &[("sel@a.test", 45), ("bo@a.test", 46), ("eve@a.test", 47)]);
    let (sel, bo, eve) = (&p[0], &p[1], &p[2]);
    topup(&h, "bo@a.test", 50);
    topup(&h, "eve@a.test", 1);
    // A seller that arbitrates its own escrow could release it to itself.
    let q = quote(sel, &bo.address, "q-arb", ContractKind::Escrow, |q| q.arbiter = Some(sel.address.clone()));
    assert_eq!(op(&h, bo, "acc-arb", obj([("op", "accept".into()), ("quote", q)])), 400);
    let q = quote(sel, &bo.address, "q-1", ContractKind::Escrow, |_| {});
    assert_eq!(op(&h, bo, "acc-1", obj([("op", "accept".into()), ("quote", q)])), 200);
    // eve is no party: every operation on it is 404, as the read is, whatever its kind or state.
    for (i, (name, extra)) in
        [("refund", None), ("deliver", None), ("release", None), ("forfeit", Some("junk")), ("contract", None)]
            .iter()
            .enumerate()
    {
        let mut body = obj([("op", (*name).into()), ("contract", "q-1".into())]);
        if let Some(r) = extra {
            body.insert("reason".into(), (*r).into());
        }
        assert_eq!(op(&h, eve, &format!("e-{i}"), body), 404, "{name}");
    }
}

#[test]
fn a_buyers_cancellation_and_an_expired_bond_count_for_nothing_in_history() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let p = people(&h, &[("sel@a.test", 48), ("bo@a.test", 49), ("ver@a.test", 50)]);
    let (sel, bo) = (&p[0], &p[1]);
    topup(&h, "bo@a.test", 50);
    for i in 0..3 {
        let q = quote(sel, &bo.address, &format!("q-{i}"), ContractKind::Escrow, |_| {});
        assert_eq!(op(&h, bo, &format!("acc-{i}"), obj([("op", "accept".into()), ("quote", q)])), 200);
        assert_eq!(
            op(&h, bo, &format!("ref-{i}"), obj([("op", "refund".into()), ("contract", format!("q-{i}").into())])),
            200
        );
    }
    let bond = obj([
        ("op", "bond".into()),
        ("amount", 5.into()),
        ("claim", "true".into()),
        ("verifier", "ver@a.test".into()),
        ("expires", Timestamp(START + 1_000).to_rfc3339().into()),
    ]);
    assert_eq!(op(&h, bo, "bond-1", bond), 200);
    w.clock.advance(2_000);
    w.tick_all();
    assert_eq!(balance(&h, "escrow:bond-1"), 0);
    let seller = json(&call_raw(&h, "GET", "/agents/sel/historial", &[], vec![]), 200);
    let s = seller.as_object().unwrap();
    assert_eq!(s["vendiendo"].as_object().unwrap()["devueltos"], Value::from(0_i64));
    assert_eq!(s["resumen"].as_object().unwrap()["cumplimiento"], Value::Null);
    let buyer = json(&call_raw(&h, "GET", "/agents/bo/historial", &[], vec![]), 200);
    let a = buyer.as_object().unwrap()["afirmando"].as_object().unwrap().clone();
    assert_eq!((a["fianzas"].as_safe_integer(), a["intactas"].as_safe_integer()), (Some(0), Some(0)));
}

/// Issue 34 §4: five "intact" bonds of 5,000 tok cost nothing. A bondholder taking its own bond
/// back once it expired counted as intact, and a verifier that is the bondholder's puppet (its
/// subagent, or an agent of a house it runs) released bonds at once. Only a verdict by a judge
/// free of the bondholder (of this house, outside its tree) counts, and only a bond such a judge
/// could forfeit is at stake.
#[test]
fn bonds_nobody_free_of_their_holder_judged_count_for_nothing_in_history() {
    let (w, h, b) = two_houses();
    let p = people(&h, &[("ana@a.test", 51), ("cy@a.test", 52)]);
    let (ana, cy) = (&p[0], &p[1]);
    // ana's puppet: a subagent she delegates, registered by the operator.
    let puppet = Agent::new("v.ana@a.test", 53);
    let d = nyx5_proto::card::Delegation::sign(
        &ana.address,
        &puppet.address,
        &puppet.sig.public(),
        &nyx5_proto::card::Scope::default(),
        None,
        h.now(),
        &ana.sig,
    )
    .unwrap();
    let body = puppet.registration(&h, &[("delegation", d.to_value())]);
    json(&call(&h, "POST", "/agents", &[("authorization", &admin(&h))], &body), 201);
    topup(&h, "ana@a.test", 60_000);
    let bond = |verifier: &str, expires: Option<i64>| {
        let mut b = obj([
            ("op", "bond".into()),
            ("amount", 5_000.into()),
            ("claim", "my work is sound".into()),
            ("verifier", verifier.into()),
        ]);
        if let Some(at) = expires {
            b.insert("expires".into(), Timestamp(at).to_rfc3339().into());
        }
        b
    };
    let release = |c: &str| obj([("op", "release".into()), ("contract", c.into())]);
    // Five bonds the puppet releases at once, and one it keeps standing.
    for i in 0..5 {
        assert_eq!(op(&h, ana, &format!("pb-{i}"), bond("v.ana@a.test", None)), 200);
        assert_eq!(op(&h, &puppet, &format!("pr-{i}"), release(&format!("pb-{i}"))), 200);
    }
    assert_eq!(op(&h, ana, "pb-standing", bond("v.ana@a.test", None)), 200);
    // A puppet on a house ana could run herself (b.test): a stranger here, it may release what
    // names it, and does at once. This house cannot tell it from a free judge: it counts nothing.
    let far = Agent::new("pup@b.test", 56);
    json(&enrol(&b, &far, &[]), 201);
    for i in 0..2 {
        assert_eq!(op(&h, ana, &format!("fb-{i}"), bond("pup@b.test", None)), 200);
        assert_eq!(op(&h, &far, &format!("fr-{i}"), release(&format!("fb-{i}"))), 200);
    }
    // A bond cy verifies, taken back by ana herself once it expired (before the tick came).
    let soon = START + 1_000;
    assert_eq!(op(&h, ana, "xb-1", bond("cy@a.test", Some(soon))), 200);
    w.clock.advance(2_000);
    let now = |who: &Agent, id: &str, body: Object| {
        let env = libro_op(&who.address, "a.test", id, w.clock.now(), body).build().unwrap().sign(&who.sig).unwrap();
        code(&operate_with(&h, who, &env))
    };
    assert_eq!(now(ana, "xr-1", release("xb-1")), 200);
    let state = |id: &str| {
        let row = block_on(nyx5_house::store::libro::contract(&h.db, id)).unwrap().unwrap();
        let record = Value::parse_str(row.text("record").unwrap()).unwrap();
        record.as_object().unwrap()["state"].as_str().unwrap().to_owned()
    };
    assert_eq!(state("xb-1"), "released", "ana took it back herself");
    // One bond cy judged: released by cy, who is free of ana. It alone counts.
    assert_eq!(now(ana, "cb-1", bond("cy@a.test", None)), 200);
    w.clock.advance(nyx5_house::libro::history::MIN_HELD_MS);
    assert_eq!(now(cy, "cr-1", release("cb-1")), 200);
    // One standing bond cy could forfeit: at stake, unlike the puppet's.
    assert_eq!(now(ana, "cb-2", bond("cy@a.test", None)), 200);

    let doc = json(&call_raw(&h, "GET", "/agents/ana/historial", &[], vec![]), 200);
    let member = |m: &str, k: &str| doc.as_object().unwrap()[m].as_object().unwrap()[k].clone();
    let counted = ["fianzas", "intactas", "ejecutadas", "tokens"].map(|k| member("afirmando", k).as_safe_integer());
    assert_eq!(counted, [Some(1), Some(1), Some(0), Some(5_000)], "only cy's verdict counts");
    assert_eq!(member("resumen", "veracidad"), Value::Number(1.0));
    assert_eq!(member("resumen", "tokens_en_juego_ahora").as_safe_integer(), Some(5_000), "only cy's standing bond");
}

/// Issue 34 §4: a balance above 2^53 - 1 read as 0 and froze the account. No movement may take a
/// balance past it: casa@ may owe at most that much (so what everyone else holds never passes
/// it), and the batch that would is refused whole with a named reason (409), nothing moved.
#[test]
fn no_balance_passes_what_json_holds_exactly() {
    let w = World::new();
    let h = w.house("a.test", nyx5_house::Registration::Admin);
    let p = people(&h, &[("ana@a.test", 54), ("bo@a.test", 55)]);
    let (ana, bo) = (&p[0], &p[1]);
    let max = nyx5_proto::limits::MAX_AMOUNT;
    let topup_code = |who: &str, amount: i64| {
        let body = obj([("address", who.into()), ("amount", amount.into())]);
        call(&h, "POST", "/libro/topup", &[("authorization", &admin(&h))], &Value::Object(body))
    };
    let before = (balance(&h, "ana@a.test"), balance(&h, "bo@a.test"));
    let issued = -balance(&h, "casa@a.test");
    assert_eq!(topup_code("bo@a.test", 10).status, 200);
    // All casa@ may still issue, and not one token more.
    let room = max - issued - 10;
    let refused = topup_code("ana@a.test", room + 1);
    assert_eq!(refused.status, 409);
    let e = refused.value().unwrap();
    let e = e.as_object().unwrap();
    assert_eq!(e["error"].as_str(), Some("balance_max"));
    assert_eq!(balance(&h, "ana@a.test"), before.0, "nothing moved");
    assert_eq!(topup_code("ana@a.test", room).status, 200);
    assert_eq!(balance(&h, "casa@a.test"), -max);
    assert_eq!(balance(&h, "ana@a.test"), before.0 + room);
    assert_eq!(topup_code("bo@a.test", 1).status, 409, "casa@ owes all it may");
    // Near the top every account still reads and moves: bo buys from ana, ana bonds.
    let q = quote(ana, &bo.address, "q-top", ContractKind::Spot, |_| {});
    assert_eq!(op(&h, bo, "acc-top", obj([("op", "accept".into()), ("quote", q)])), 200);
    let got = balance(&h, "ana@a.test");
    assert!(got > before.0 + room && got <= max, "{got}");
    let bond = obj([
        ("op", "bond".into()),
        ("amount", (got - 1).into()),
        ("claim", "sound".into()),
        ("verifier", "bo@a.test".into()),
    ]);
    assert_eq!(op(&h, ana, "bond-top", bond), 200, "an account near the top is not frozen");
    assert_eq!(balance(&h, "ana@a.test"), 1);
}

/// Issue 34 review (M2): one puppet root on the same house (an ordinary registration) released
/// five bonds of 5,000 at once, and ana's history said 5 intact, 25,000 tok. A release counts a
/// bond intact only after it was held a day (and half its term), and each judge counts once:
/// the five count nothing, and two more held a day count one.
#[test]
fn one_puppet_root_cannot_inflate_a_history() {
    let (w, h, _b) = two_houses();
    let p = people(&h, &[("ana@a.test", 61), ("pup@a.test", 62)]);
    let (ana, pup) = (&p[0], &p[1]);
    topup(&h, "ana@a.test", 10_000);
    let bond = obj([
        ("op", "bond".into()),
        ("amount", 5_000.into()),
        ("claim", "my work is sound".into()),
        ("verifier", "pup@a.test".into()),
    ]);
    let release = |c: &str| obj([("op", "release".into()), ("contract", c.into())]);
    let now = |who: &Agent, id: &str, body: Object| {
        let env = libro_op(&who.address, "a.test", id, w.clock.now(), body).build().unwrap().sign(&who.sig).unwrap();
        code(&operate_with(&h, who, &env))
    };
    for i in 0..5 {
        assert_eq!(now(ana, &format!("qb-{i}"), bond.clone()), 200);
        assert_eq!(now(pup, &format!("qr-{i}"), release(&format!("qb-{i}"))), 200);
    }
    let afirmando = || {
        let doc = json(&call_raw(&h, "GET", "/agents/ana/historial", &[], vec![]), 200);
        let m = doc.as_object().unwrap()["afirmando"].as_object().unwrap().clone();
        ["fianzas", "intactas", "ejecutadas", "tokens"].map(|k| m[k].as_safe_integer().unwrap())
    };
    assert_eq!(afirmando(), [0, 0, 0, 0], "bonds released at once risked nothing");
    for i in 0..2 {
        assert_eq!(now(ana, &format!("hb-{i}"), bond.clone()), 200);
    }
    w.clock.advance(nyx5_house::libro::history::MIN_HELD_MS);
    for i in 0..2 {
        assert_eq!(now(pup, &format!("hr-{i}"), release(&format!("hb-{i}"))), 200);
    }
    assert_eq!(afirmando(), [1, 1, 0, 5_000], "one judge vouches once");
}
