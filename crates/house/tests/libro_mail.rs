//! The Libro at the mailbox's door (spec §9, §19): stamps charged on accept and vouches backed by
//! a bond, through public routes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::LIBRO;
use nyx5_house::ports::Db;
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::{Envelope, Object, Value};
use nyx5_rules::policy::EXT_AVAL;

fn register(h: &TestHouse, agent: &Agent, inbox: Option<Value>) {
    let extra: Vec<(&str, Value)> = inbox.into_iter().map(|i| ("inbox", i)).collect();
    register_with(h, agent, &extra);
}

/// A clear message from `from` to `to` with `extra` members in its signed part.
fn message(w: &World, from: &Agent, to: &Agent, id: &str, extra: Object) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        vec![to.address.clone()],
        w.clock.now(),
        Content::new("text/plain", "hello".into()),
    );
    d.extra = extra;
    d.build().unwrap().sign(&from.sig).unwrap()
}

/// A quote from `seller` to `buyer` at a.test, signed now.
#[allow(clippy::too_many_arguments)]
fn quote_from(
    w: &World,
    seller: &Agent,
    buyer: &Agent,
    id: &str,
    contract: nyx5_proto::quote::ContractKind,
    price: i64,
    concept: &str,
    terms: Option<Object>,
) -> nyx5_proto::quote::Quote {
    nyx5_proto::quote::QuoteDraft {
        id: id.into(),
        house: "a.test".into(),
        seller: seller.address.clone(),
        buyer: buyer.address.clone(),
        contract,
        price,
        currency: "tok".into(),
        concept: concept.into(),
        terms,
        arbiter: None,
        referrer: None,
        issued: w.clock.now(),
        expires: None,
        extra: Object::new(),
    }
    .sign(&seller.sig)
    .unwrap()
}

fn holds(h: &TestHouse, who: &Agent, id: &str) -> bool {
    mailbox(h, who).iter().any(|e| e.id() == id)
}

fn operate(w: &World, h: &TestHouse, who: &Agent, id: &str, body: Object) {
    assert_eq!(who.send(h, &signed_op(w, who, &h.config.domain, id, body)).status, 202);
    w.tick_all();
    assert!(
        mailbox(h, who).iter().any(|e| e.from().local() == LIBRO && e.in_reply_to() == Some(id)),
        "a receipt for {id}"
    );
}

#[test]
fn a_stamp_is_charged_on_accept_and_refused_without_balance() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 60);
    let bo = Agent::new("bo@a.test", 61);
    register(&h, &ana, Some(Value::Object(obj([("policy", "stamp".into()), ("price", 10.into())]))));
    register(&h, &bo, None);

    let stamp =
        |amount: i64| obj([("stamp", Value::Object(obj([("house", "a.test".into()), ("amount", amount.into())])))]);
    // No stamp, a smaller one, one for another house, or no balance: 402, and nothing moves.
    let cases = [("s-0", Object::new()), ("s-1", stamp(5)), ("s-3", stamp(10))];
    for (id, extra) in cases {
        assert_eq!(bo.send(&h, &message(&w, &bo, &ana, id, extra)).status, 202);
    }
    let mut other = stamp(10);
    other.insert("stamp".into(), Value::Object(obj([("house", "b.test".into()), ("amount", 10.into())])));
    assert_eq!(bo.send(&h, &message(&w, &bo, &ana, "s-2", other)).status, 202);
    w.tick_all();
    for id in ["s-0", "s-1", "s-2", "s-3"] {
        assert_eq!(bounce(&h, &bo, id), 402, "{id}");
        assert!(!holds(&h, &ana, id));
    }
    // With balance, the stamp is charged in the batch that stores the envelope, fee to the house,
    // and the entry's id sits beside it in the mailbox.
    topup(&h, bo.address.as_str(), 25);
    assert_eq!(bo.send(&h, &message(&w, &bo, &ana, "s-4", stamp(10))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &bo, "s-4"), 0);
    assert!(holds(&h, &ana, "s-4"));
    assert_eq!((balance(&h, "bo@a.test"), balance(&h, "ana@a.test"), balance(&h, "casa@a.test")), (15, 9, -24));
    let page = json(&ana.get(&h, "/mailbox/ana?limit=10"), 200);
    let item = page.as_object().unwrap()["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.as_object().unwrap()["envelope"].as_object().unwrap()["id"].as_str() == Some("s-4"))
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    let entry_id = item["stamp"].as_str().expect("the stamp's entry id");
    let rows = block_on(nyx5_house::ports::Db::query(
        &h.db,
        nyx5_house::stmt!("SELECT entry FROM libro_entries WHERE id = ?", entry_id),
    ))
    .unwrap();
    let entry = Value::parse_str(rows[0].text("entry").unwrap()).unwrap();
    assert_eq!(entry.as_object().unwrap()["meta"].as_object().unwrap()["primitive"].as_str(), Some("stamp"));
    // The same envelope again is a duplicate: no second charge.
    let again = message(&w, &bo, &ana, "s-4", stamp(10));
    let card = block_on(h.lookup().local_card("bo")).unwrap().unwrap();
    let verified = again.verify(&card, h.now()).unwrap();
    let out = block_on(h.mailbox().accept(&verified, &card, verified.to())).unwrap();
    assert_eq!(out[0].1, nyx5_house::mailbox::Outcome::Duplicate);
    assert_eq!(balance(&h, "bo@a.test"), 15);
    // An allowlisted sender needs no stamp.
    assert_eq!(
        ana.post(
            &h,
            "/lists/ana",
            &Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec!["bo@a.test".into()]))])))]))
        )
        .status,
        200
    );
    assert_eq!(bo.send(&h, &message(&w, &bo, &ana, "s-5", Object::new())).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "s-5"));
    assert_eq!(balance(&h, "bo@a.test"), 15);
}

#[test]
fn a_vouch_opens_an_allowlist_while_its_bond_stands() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let cy = Agent::new("cy@a.test", 70);
    let ana = Agent::new("ana@a.test", 71);
    let dan = Agent::new("dan@a.test", 72);
    let eve = Agent::new("eve@a.test", 73);
    register(&h, &cy, Some(Value::Object(obj([("policy", "allowlist".into())]))));
    for a in [&ana, &dan, &eve] {
        register(&h, a, None);
    }
    let allow =
        |who: &str| Value::Object(obj([("allow", Value::Object(obj([("add", Value::Array(vec![who.into()]))])))]));
    assert_eq!(cy.post(&h, "/lists/cy", &allow("ana@a.test")).status, 200);
    topup(&h, ana.address.as_str(), 20);
    topup(&h, eve.address.as_str(), 20);
    let aval = |voucher: &str, bond: &str| {
        obj([(
            "extensions",
            Value::Object(obj([(EXT_AVAL, Value::Object(obj([("voucher", voucher.into()), ("bond", bond.into())])))])),
        )])
    };
    // ana (on cy's list) bonds 5 for dan with cy as verifier and beneficiary.
    let bond = |vouchee: &str| {
        obj([
            ("op", "bond".into()),
            ("amount", 5.into()),
            ("claim", format!("{vouchee} writes nothing you do not want").into()),
            ("verifier", "cy@a.test".into()),
            ("beneficiary", "cy@a.test".into()),
            ("vouchee", vouchee.into()),
        ])
    };
    operate(&w, &h, &ana, "bond-dan", bond("dan@a.test"));
    operate(&w, &h, &eve, "bond-eve", bond("dan@a.test"));
    // A stranger without a vouch is refused; with someone else's bond, or a bond by a voucher cy
    // does not list, too.
    let sends = [
        ("v-0", Object::new(), 403),
        ("v-1", aval("ana@a.test", "bond-eve"), 402),
        ("v-2", aval("eve@a.test", "bond-eve"), 402),
        ("v-3", aval("ana@a.test", "no-such-bond"), 402),
        ("v-4", aval("ana@a.test", "bond-dan"), 0),
    ];
    for (id, extra, _) in &sends {
        assert_eq!(dan.send(&h, &message(&w, &dan, &cy, id, extra.clone())).status, 202);
    }
    w.tick_all();
    for (id, _, code) in &sends {
        assert_eq!(bounce(&h, &dan, id), *code, "{id}");
        assert_eq!(holds(&h, &cy, id), *code == 0, "{id}");
    }
    // The bond vouches for dan only.
    assert_eq!(eve.send(&h, &message(&w, &eve, &cy, "v-5", aval("ana@a.test", "bond-dan"))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &eve, "v-5"), 402);
    // cy finds dan's mail junk and forfeits the bond: it is cy's now, and the vouch opens nothing.
    operate(
        &w,
        &h,
        &cy,
        "forfeit-1",
        obj([("op", "forfeit".into()), ("contract", "bond-dan".into()), ("reason", "junk".into())]),
    );
    assert_eq!((balance(&h, "cy@a.test"), balance(&h, "ana@a.test"), balance(&h, "escrow:bond-dan")), (5, 15, 0));
    assert_eq!(dan.send(&h, &message(&w, &dan, &cy, "v-6", aval("ana@a.test", "bond-dan"))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &dan, "v-6"), 402);
}

#[test]
fn an_escrow_deadline_sends_notices_to_both_parties_when_it_comes() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 80);
    let bo = Agent::new("bo@b.test", 81);
    register(&a, &ana, None);
    register(&b, &bo, None);
    topup(&a, ana.address.as_str(), 50);
    let deadline = nyx5_proto::Timestamp(w.clock.now().millis() + 3 * 3_600_000);
    let quote = quote_from(
        &w,
        &bo,
        &ana,
        "q-deadline",
        nyx5_proto::quote::ContractKind::Escrow,
        30,
        "report",
        Some(obj([("deadline", deadline.to_rfc3339().into())])),
    );
    operate(&w, &a, &ana, "accept-1", obj([("op", "accept".into()), ("quote", quote.to_value())]));
    let notice = |h: &TestHouse, who: &Agent| libro_notices(h, who).into_iter().next();
    w.tick_all();
    assert!(notice(&a, &ana).is_none() && notice(&b, &bo).is_none(), "not before the deadline");
    w.clock.advance(3 * 3_600_000 + 1_000);
    for _ in 0..3 {
        w.tick_all();
    }
    for (h, who) in [(&a, &ana), (&b, &bo)] {
        let n = notice(h, who).unwrap_or_else(|| panic!("a deadline notice for {}", who.address));
        let body = n.content().unwrap().body.as_object().unwrap().clone();
        assert_eq!(body["contract"].as_str(), Some("q-deadline"));
        assert_eq!(body["deadline"].as_str(), Some(deadline.to_rfc3339().as_str()));
    }
}

/// A deadline that has come by the moment the escrow is accepted sends no notice: there is no
/// deadline left to warn of.
#[test]
fn a_deadline_that_has_come_at_acceptance_sends_no_notice() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 80);
    let bo = Agent::new("bo@a.test", 81);
    register(&a, &ana, None);
    register(&a, &bo, None);
    topup(&a, ana.address.as_str(), 50);
    let now = w.clock.now();
    assert_eq!(now.millis() % 1_000, 0, "the deadline below is this very instant");
    let terms = obj([("deadline", now.to_rfc3339().into())]);
    let kind = nyx5_proto::quote::ContractKind::Escrow;
    let quote = quote_from(&w, &bo, &ana, "q-now", kind, 30, "report", Some(terms));
    operate(&w, &a, &ana, "accept-now", obj([("op", "accept".into()), ("quote", quote.to_value())]));
    assert_eq!(balance(&a, "escrow:q-now"), 30, "accepted");
    w.clock.advance(1_000);
    for _ in 0..3 {
        w.tick_all();
    }
    for who in [&ana, &bo] {
        assert_eq!(libro_notices(&a, who).len(), 0, "{}", who.address);
    }
}

/// The Libro's notices (a deadline come, a bond returned) in `who`'s mailbox.
fn libro_notices(h: &TestHouse, who: &Agent) -> Vec<Envelope> {
    mailbox(h, who)
        .into_iter()
        .filter(|e| {
            e.from().local() == LIBRO && e.content().is_some_and(|c| c.media == nyx5_house::libro::NOTICE_MEDIA)
        })
        .collect()
}

#[test]
fn an_expired_bond_returns_to_its_bondholder_with_a_notice() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 90);
    let vic = Agent::new("vic@a.test", 91);
    register(&h, &ana, None);
    register(&h, &vic, None);
    topup(&h, ana.address.as_str(), 10);
    let expires = nyx5_proto::Timestamp(w.clock.now().millis() + 3_600_000);
    operate(
        &w,
        &h,
        &ana,
        "bond-1",
        obj([
            ("op", "bond".into()),
            ("amount", 7.into()),
            ("claim", "the build is green".into()),
            ("verifier", "vic@a.test".into()),
            ("expires", expires.to_rfc3339().into()),
        ]),
    );
    assert_eq!((balance(&h, "ana@a.test"), balance(&h, "escrow:bond-1")), (3, 7));
    w.tick_all();
    assert_eq!(balance(&h, "escrow:bond-1"), 7, "not before it expires");
    w.clock.advance(3_600_000);
    w.tick_all();
    assert_eq!((balance(&h, "ana@a.test"), balance(&h, "escrow:bond-1")), (10, 0));
    let notice = libro_notices(&h, &ana).into_iter().next().expect("a notice of the return");
    let body = notice.content().unwrap().body.as_object().unwrap().clone();
    assert_eq!((body["contract"].as_str(), body["state"].as_str()), (Some("bond-1"), Some("released")));
    // Released by expiry, it can be forfeited no more; a second tick changes nothing.
    let forfeit = obj([("op", "forfeit".into()), ("contract", "bond-1".into()), ("reason", "late".into())]);
    assert_eq!(vic.send(&h, &signed_op(&w, &vic, "a.test", "forfeit-1", forfeit)).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &vic, "forfeit-1"), 409);
    assert_eq!(balance(&h, "ana@a.test"), 10);
}

#[test]
fn a_receipt_for_another_house_leaves_in_the_tick_that_did_the_operation() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 95);
    let bo = Agent::new("bo@b.test", 96);
    register(&a, &ana, None);
    register(&b, &bo, None);
    topup(&a, ana.address.as_str(), 50);
    let quote = quote_from(&w, &bo, &ana, "q-fast", nyx5_proto::quote::ContractKind::Spot, 10, "fast", None);
    let accept = obj([("op", "accept".into()), ("quote", quote.to_value())]);
    let resp = ana.send(&a, &signed_op(&w, &ana, "a.test", "acc-fast", accept));
    assert_eq!(resp.status, 202);
    // One tick of a.test does the operation and sends bo's receipt on to b.test.
    block_on(a.tick()).unwrap();
    assert!(
        mailbox(&b, &bo).iter().any(|e| e.from().local() == LIBRO && e.in_reply_to() == Some("acc-fast")),
        "bo's receipt arrived in the same tick"
    );
}

#[test]
fn an_operation_from_another_house_asks_for_a_delivery_kick() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let bo = Agent::new("bo@b.test", 97);
    register(&b, &bo, None);
    topup(&a, bo.address.as_str(), 5);
    let env = signed_op(&w, &bo, "a.test", "bal-1", obj([("op", "balance".into())]));
    let relay = nyx5_proto::relay::RelayHeader::sign("b.test", &env, "a.test", &b.config.key).to_header();
    let resp = call_raw(&a, "POST", "/inbound", &[(nyx5_proto::relay::HEADER, &relay)], env.canonical());
    assert_eq!(resp.status, 202);
    assert!(resp.kick, "the receipt for b.test waits in a.test's queue: the answer asks for a kick");
    // A plain read with nothing queued asks for none.
    let again = call_raw(&a, "GET", "/health", &[], vec![]);
    assert!(!again.kick);
}

#[test]
fn a_refused_operation_stays_refused_when_it_comes_again() {
    // Found by the simulator (seed 162): a bond refused for want of balance bounced to its
    // sender; a late copy of the same envelope, arriving after a top-up, was then done.
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bea = Agent::new("bea@b.test", 11);
    register(&a, &ana, None);
    register(&b, &bea, None);
    let body = obj([
        ("op", "bond".into()),
        ("amount", 30.into()),
        ("claim", "it holds".into()),
        ("verifier", ana.address.as_str().into()),
    ]);
    let env = signed_op(&w, &bea, "a.test", "bond-1", body);
    assert_eq!(bea.send(&b, &env).status, 202);
    w.tick_all();
    w.tick_all();
    assert_eq!(bounce(&b, &bea, "bond-1"), 402);
    // Bea is topped up; the same envelope arrives again, as a copy the network held would.
    topup(&a, bea.address.as_str(), 100);
    let relay = nyx5_proto::relay::RelayHeader::sign("b.test", &env, "a.test", &b.config.key).to_header();
    let again = call_raw(&a, "POST", "/inbound", &[(nyx5_proto::relay::HEADER, &relay)], env.canonical());
    let answer = json(&again, 402);
    let rejected = answer.as_object().unwrap()["rejected"].as_array().unwrap()[0].as_object().unwrap().clone();
    assert_eq!(rejected["code"].as_safe_integer(), Some(402), "{}", answer.canonical_string());
    assert_eq!(balance(&a, "bea@b.test"), 100);
    let contracts = block_on(a.db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM libro_contracts"))).unwrap();
    assert_eq!(contracts[0].int("n"), Some(0));
    // The refusal is kept, with its code and reason, as the envelope's answer.
    let kept =
        block_on(a.db.query(nyx5_house::stmt!("SELECT refused, receipt FROM libro_ops WHERE envelope_id = 'bond-1'")))
            .unwrap();
    assert_eq!((kept[0].int("refused"), kept[0].text("receipt")), (Some(402), Some("")));
}

#[test]
fn a_subagents_stamps_keep_within_its_authority_and_its_hour() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 70);
    let bo = Agent::new("bo@a.test", 71);
    register(&h, &ana, Some(Value::Object(obj([("policy", "stamp".into()), ("price", 5.into())]))));
    register(&h, &bo, None);
    // bot.bo may pay 10 a movement alone, once an hour.
    let bot = subagent_under(
        &h,
        &bo,
        "bot.bo@a.test",
        72,
        r#"{"level":"autonomous","consequence":"costly","max_amount":10,"currency":"tok","max_per_hour":1}"#,
    );
    topup(&h, "bot.bo@a.test", 100);
    let stamp =
        |amount: i64| obj([("stamp", Value::Object(obj([("house", "a.test".into()), ("amount", amount.into())])))]);
    // Above what it may pay alone: mail does not wait for a human, so it is refused.
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "b-1", stamp(20))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &bot, "b-1"), 403);
    assert!(!holds(&h, &ana, "b-1"));
    // Within it: paid.
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "b-2", stamp(5))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "b-2"));
    assert_eq!(balance(&h, "bot.bo@a.test"), 95);
    // The hour holds one movement: the next stamp is refused, and an hour later it goes.
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "b-3", stamp(5))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &bot, "b-3"), 403);
    w.clock.advance(3_600_001);
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "b-4", stamp(5))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "b-4"));
    assert_eq!(balance(&h, "bot.bo@a.test"), 90);
}

/// `address`, a subagent of `parent` whose delegation carries `authority` (JSON), registered.
fn subagent_under(h: &TestHouse, parent: &Agent, address: &str, seed: u8, authority: &str) -> Agent {
    use nyx5_proto::authority::Authority;
    use nyx5_proto::card::{Delegation, Scope};
    let child = Agent::new(address, seed);
    let authority = Authority::from_value(&Value::parse_str(authority).unwrap()).unwrap();
    let scope = Scope { authority: Some(authority), ..Scope::default() };
    let d = Delegation::sign(&parent.address, &child.address, &child.sig.public(), &scope, None, h.now(), &parent.sig)
        .unwrap();
    register_with(h, &child, &[("delegation", d.to_value())]);
    child
}

fn register_with(h: &TestHouse, agent: &Agent, extra: &[(&str, Value)]) {
    let body = agent.registration(h, extra);
    let admin = format!("Bearer admin-{}", h.config.domain);
    assert_eq!(call(h, "POST", "/agents", &[("authorization", &admin)], &body).status, 201);
}

#[test]
fn an_operation_too_large_to_keep_never_waits_for_approval() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 80);
    let bo = Agent::new("bo@a.test", 81);
    register(&h, &ana, None);
    register(&h, &bo, None);
    // Everything bot.bo does with money waits for bo.
    let bot = subagent_under(&h, &bo, "bot.bo@a.test", 82, r#"{"level":"needs_approval","consequence":"costly"}"#);
    topup(&h, "bot.bo@a.test", 100);
    let bond = |pad: usize| {
        obj([
            ("op", "bond".into()),
            ("amount", 30.into()),
            ("claim", "it holds".into()),
            ("verifier", ana.address.as_str().into()),
            ("pad", "x".repeat(pad).into()),
        ])
    };
    let pending =
        || block_on(h.db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM libro_pending"))).unwrap()[0].int("n");
    // Kept whole to be decided again, a waiting operation is at most 64 KiB: refused, nothing held.
    assert_eq!(bot.send(&h, &signed_op(&w, &bot, "a.test", "big-1", bond(70_000))).status, 202);
    w.tick_all();
    assert_eq!(bounce(&h, &bot, "big-1"), 413);
    assert_eq!(pending(), Some(0));
    assert_eq!(balance(&h, "bot.bo@a.test"), 100);
    // The same bond, small, waits with its 30 held.
    operate(&w, &h, &bot, "small-1", bond(10));
    assert_eq!(pending(), Some(1));
    assert_eq!(balance(&h, "bot.bo@a.test"), 70);
    // Both the subagent and the approver see it waiting on their account pages; ana does not.
    let waiting = |who: &Agent| {
        let page = json(&who.get(&h, &format!("/libro/cuenta/{}", who.address)), 200);
        let list = page.as_object().unwrap()["pending"].as_array().unwrap();
        list.iter().map(|p| p.as_object().unwrap()["state"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(waiting(&bot), ["pending"]);
    assert_eq!(waiting(&bo), ["pending"]);
    assert!(waiting(&ana).is_empty());
}

/// A clear message from `from` to several recipients with `extra` members in its signed part.
fn message_to(w: &World, from: &Agent, to: &[&Agent], id: &str, extra: Object) -> Envelope {
    let mut d = Draft::new(
        id.into(),
        from.address.clone(),
        to.iter().map(|a| a.address.clone()).collect(),
        w.clock.now(),
        Content::new("text/plain", "hello".into()),
    );
    d.extra = extra;
    d.build().unwrap().sign(&from.sig).unwrap()
}

fn stamp_of(amount: i64) -> Object {
    obj([("stamp", Value::Object(obj([("house", "a.test".into()), ("amount", amount.into())])))])
}

/// A stamped envelope to two mailboxes that ask for stamps is paid once for each, from what the
/// first payment left: with 15 the second is refused (402) and the first is kept; with 30 both
/// are paid. Kills `accept`'s `balance -= amount` → `+=` (both decided, the batch refused by the
/// balance's guard, and the whole delivery refused) or `/=` (the second refused with 20 left).
#[test]
fn a_stamp_to_two_mailboxes_is_paid_from_what_the_first_left() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, cy, bo) = (Agent::new("ana@a.test", 80), Agent::new("cy@a.test", 81), Agent::new("bo@a.test", 82));
    for agent in [&ana, &cy] {
        register(&h, agent, Some(Value::Object(obj([("policy", "stamp".into()), ("price", 10.into())]))));
    }
    register(&h, &bo, None);
    topup(&h, "bo@a.test", 15);
    assert_eq!(bo.send(&h, &message_to(&w, &bo, &[&ana, &cy], "two-15", stamp_of(10))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "two-15"));
    assert!(!holds(&h, &cy, "two-15"));
    assert_eq!(bounce(&h, &bo, "two-15"), 402);
    assert_eq!(balance(&h, "bo@a.test"), 5);
    topup(&h, "bo@a.test", 25);
    assert_eq!(bo.send(&h, &message_to(&w, &bo, &[&ana, &cy], "two-30", stamp_of(10))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "two-30") && holds(&h, &cy, "two-30"));
    assert_eq!(balance(&h, "bo@a.test"), 10);
}

/// A delegated sender's stamp is within its card's cap: exactly the cap is paid, one more is
/// refused (403) with the cap named. Kills `accept`'s cap guard → `false` and its `>` → `>=`,
/// `==`, `<`.
#[test]
fn a_delegated_senders_stamp_is_paid_up_to_its_cap() {
    use nyx5_proto::card::{Delegation, Scope};
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, bo) = (Agent::new("ana@a.test", 83), Agent::new("bo@a.test", 84));
    register(&h, &ana, Some(Value::Object(obj([("policy", "stamp".into()), ("price", 5.into())]))));
    register(&h, &bo, None);
    let bot = Agent::new("bot.bo@a.test", 85);
    let scope = Scope { cap: Some(10), ..Scope::default() };
    let d = Delegation::sign(&bo.address, &bot.address, &bot.sig.public(), &scope, None, h.now(), &bo.sig).unwrap();
    register_with(&h, &bot, &[("delegation", d.to_value())]);
    topup(&h, "bot.bo@a.test", 100);
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "cap-10", stamp_of(10))).status, 202);
    assert_eq!(bot.send(&h, &message(&w, &bot, &ana, "cap-11", stamp_of(11))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "cap-10"));
    assert!(!holds(&h, &ana, "cap-11"));
    assert_eq!(bounce(&h, &bot, "cap-11"), 403);
    assert_eq!(balance(&h, "bot.bo@a.test"), 90);
    let told = mailbox(&h, &bot)
        .into_iter()
        .find(|e| e.from().local() == "postmaster")
        .and_then(|e| e.content().and_then(|c| c.body.as_object()?.get("reason")?.as_str().map(str::to_owned)))
        .unwrap();
    assert_eq!(told, "bot.bo@a.test is delegated with a cap of 10 tok; its stamp is 11");
}

/// A subagent allowed one movement an hour stamps one envelope to two mailboxes: the first stamp
/// is its movement, the second would be another and is refused (403). Kills `accept`'s
/// `stamp_uses += 1` → `-=` or `*=`.
#[test]
fn one_envelope_to_two_mailboxes_is_two_stamps_in_the_subagents_hour() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, cy, bo) = (Agent::new("ana@a.test", 86), Agent::new("cy@a.test", 87), Agent::new("bo@a.test", 88));
    for agent in [&ana, &cy] {
        register(&h, agent, Some(Value::Object(obj([("policy", "stamp".into()), ("price", 5.into())]))));
    }
    register(&h, &bo, None);
    let bot = subagent_under(
        &h,
        &bo,
        "bot.bo@a.test",
        89,
        r#"{"level":"autonomous","consequence":"costly","max_amount":10,"currency":"tok","max_per_hour":1}"#,
    );
    topup(&h, "bot.bo@a.test", 100);
    assert_eq!(bot.send(&h, &message_to(&w, &bot, &[&ana, &cy], "hour-2", stamp_of(5))).status, 202);
    w.tick_all();
    assert!(holds(&h, &ana, "hour-2"));
    assert!(!holds(&h, &cy, "hour-2"));
    assert_eq!(bounce(&h, &bot, "hour-2"), 403);
    assert_eq!(balance(&h, "bot.bo@a.test"), 95);
}

/// What `Mailbox::accept` answers when every batch that stores ana's copy fails on a constraint (a
/// TEMP trigger raises it), for each kind of failure, with and without stamps to pay: a lost race
/// on her minute or her quota is read again and, lost on every attempt, ends in 429 for every
/// recipient that still needed a count or room (the batch cannot say whose it was, and cy's
/// copy goes with hers); a race on the Libro (only when stamps or a vouch need it) is
/// tried again and ends in 402 for the balance, 503 for the journal; any other constraint ends
/// the delivery at once with 409. Kills `accept`'s `attempt + 1` → `* 1` (never the last
/// attempt: nobody decided), the three race guards → `true`/`false`, their `&&`, `||`, `==` and
/// `!` mutants, and the `balance_negative` arm.
#[test]
fn a_batch_that_fails_on_every_attempt_ends_by_what_failed() {
    // What fails, whether stamps are paid, the constraint raised, and the answer: `Ok` for every
    // recipient refused with this code and words, `Err` for the whole delivery.
    type Case<'a> = (&'a str, bool, &'a str, Result<(u16, &'a str), (u16, &'a str)>);
    let cases: [Case<'_>; 6] = [
        ("her minute", false, "CHECK constraint failed: rate_cap", Ok((429, "too many"))),
        ("her quota", false, "CHECK constraint failed: mailbox_quota", Ok((429, "is full"))),
        ("another constraint", false, "CHECK constraint failed: house_test", Err((409, "house_test"))),
        (
            "a Libro race without the Libro",
            false,
            "CHECK constraint failed: balance_negative",
            Err((409, "balance_negative")),
        ),
        (
            "the balance, stamped",
            true,
            "CHECK constraint failed: balance_negative",
            Err((402, "not enough balance for the stamp")),
        ),
        (
            "the journal, stamped",
            true,
            "UNIQUE constraint failed: libro_entries.cause",
            Err((503, "the Libro is busy; try again")),
        ),
    ];
    for (what, stamped, raise, expected) in cases {
        let w = World::new();
        let h = w.house("a.test", Registration::Admin);
        let (ana, cy, bo) = (Agent::new("ana@a.test", 90), Agent::new("cy@a.test", 91), Agent::new("bo@a.test", 92));
        let policy = stamped.then(|| Value::Object(obj([("policy", "stamp".into()), ("price", 5.into())])));
        register(&h, &ana, policy.clone());
        register(&h, &cy, policy);
        register(&h, &bo, None);
        topup(&h, "bo@a.test", 100);
        let sql = format!(
            "CREATE TEMP TRIGGER fail_ana BEFORE INSERT ON mailbox WHEN NEW.local = 'ana'
             BEGIN SELECT RAISE(ABORT, '{raise}'); END"
        );
        let sql: &'static str = Box::leak(sql.into_boxed_str());
        block_on(h.db.sqlite.batch(vec![nyx5_house::ports::Stmt::new(sql, Vec::new())])).unwrap();
        let env = message_to(&w, &bo, &[&ana, &cy], "fails", if stamped { stamp_of(5) } else { Object::new() });
        let card = block_on(h.lookup().local_card("bo")).unwrap().unwrap();
        let verified = env.verify(&card, h.now()).unwrap();
        let answer = block_on(h.mailbox().accept(&verified, &card, &[ana.address.clone(), cy.address.clone()]));
        match (answer, expected) {
            (Ok(outcomes), Ok((code, reason))) => {
                assert_eq!(outcomes.len(), 2, "{what}: {outcomes:?}");
                for (to, outcome) in outcomes {
                    match outcome {
                        nyx5_house::mailbox::Outcome::Rejected(e) => {
                            assert_eq!(e.code(), code, "{what}: {to}");
                            assert!(e.reason.contains(reason), "{what}: {e:?}");
                        }
                        other => panic!("{what}: {to} {other:?}"),
                    }
                }
            }
            (Err(e), Err((code, reason))) => {
                assert_eq!(e.code(), code, "{what}: {e:?}");
                assert!(e.reason.contains(reason), "{what}: {e:?}");
            }
            (got, _) => panic!("{what}: {got:?}"),
        }
        assert!(!holds(&h, &ana, "fails") && !holds(&h, &cy, "fails"), "{what}: nothing kept");
    }
}

/// The deltas for `account` of a list of entries, in the list's order.
fn deltas(entries: &[Value], account: &str) -> Vec<i64> {
    entries
        .iter()
        .map(|e| {
            let lines = e.as_object().unwrap()["lines"].as_array().unwrap();
            let line = lines.iter().map(|l| l.as_object().unwrap()).find(|l| l["account"].as_str() == Some(account));
            line.expect("the entry names the account")["delta"].as_safe_integer().unwrap()
        })
        .collect()
}

/// A `statement` answers the newest entries that name its account, newest first, as many as it
/// asks for; the account's page shows them too.
#[test]
fn a_statement_holds_the_newest_entries_naming_the_account() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, bo) = (Agent::new("ana@a.test", 1), Agent::new("bo@a.test", 2));
    register(&h, &ana, None);
    register(&h, &bo, None);
    for amount in [10, 20, 30] {
        topup(&h, "ana@a.test", amount);
    }
    topup(&h, "bo@a.test", 5);
    operate(&w, &h, &ana, "st-1", obj([("op", "statement".into()), ("limit", 2.into())]));
    let receipt = mailbox(&h, &ana).into_iter().find(|e| e.in_reply_to() == Some("st-1")).unwrap();
    let body = receipt.content().unwrap().body.as_object().unwrap().clone();
    let listed = body["statement"].as_array().unwrap();
    assert_eq!(deltas(listed, "ana@a.test"), [30, 20], "{body:?}");

    let page = json(&ana.get(&h, "/libro/cuenta/ana@a.test"), 200);
    let entries = page.as_object().unwrap()["entries"].as_array().unwrap();
    assert_eq!(deltas(entries, "ana@a.test")[..3], [30, 20, 10]);
}

/// The account page lists the contracts and mandates the agent is party to, and the public
/// history counts what it sold and bought.
#[test]
fn the_account_page_and_the_history_show_what_the_agent_took_part_in() {
    use nyx5_proto::quote::ContractKind;
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, bo, cy) = (Agent::new("ana@a.test", 1), Agent::new("bo@a.test", 2), Agent::new("cy@a.test", 3));
    for a in [&ana, &bo, &cy] {
        register(&h, a, None);
    }
    topup(&h, "ana@a.test", 100);
    let accept =
        |q: nyx5_proto::quote::Quote| obj([("op", "accept".into()), ("quote", Value::Object(q.object().clone()))]);
    // ana buys twice from bo: one spot, one escrow she releases.
    operate(&w, &h, &ana, "acc-spot", accept(quote_from(&w, &bo, &ana, "q-spot", ContractKind::Spot, 10, "a", None)));
    operate(&w, &h, &ana, "acc-esc", accept(quote_from(&w, &bo, &ana, "q-esc", ContractKind::Escrow, 20, "b", None)));
    operate(&w, &h, &ana, "rel-esc", obj([("op", "release".into()), ("contract", "q-esc".into())]));
    // And grants cy a mandate.
    let mandate = obj([("op", "mandate".into()), ("grantee", "cy@a.test".into()), ("cap", 7.into())]);
    operate(&w, &h, &ana, "m-cy", mandate);

    let page = json(&ana.get(&h, "/libro/cuenta/ana@a.test"), 200);
    let page = page.as_object().unwrap();
    let mut contracts: Vec<&str> =
        page["contracts"].as_array().unwrap().iter().map(|c| c.as_object().unwrap()["id"].as_str().unwrap()).collect();
    contracts.sort_unstable();
    assert_eq!(contracts, ["q-esc", "q-spot"]);
    let mandates = page["mandates"].as_array().unwrap();
    assert_eq!(mandates.len(), 1, "{mandates:?}");
    let m = mandates[0].as_object().unwrap();
    assert_eq!((m["grantee"].as_str(), m["cap"].as_safe_integer()), (Some("cy@a.test"), Some(7)));
    // cy holds the mandate too; bo holds none.
    let of = |who: &Agent| {
        let page = json(&who.get(&h, &format!("/libro/cuenta/{}", who.address)), 200);
        page.as_object().unwrap()["mandates"].as_array().unwrap().len()
    };
    assert_eq!((of(&cy), of(&bo)), (1, 0));
    // A contract, for its parties only: to anyone else it is not there.
    for who in [&ana, &bo] {
        let page = json(&who.get(&h, "/libro/contrato/q-esc"), 200);
        let c = page.as_object().unwrap()["contract"].as_object().unwrap().clone();
        assert_eq!((c["id"].as_str(), c["state"].as_str()), (Some("q-esc"), Some("released")), "{}", who.address);
    }
    assert_eq!(cy.get(&h, "/libro/contrato/q-esc").status, 404);

    // ana bonds her word twice with cy as verifier; cy releases one bond, the other stands.
    let bond = |claim: &str| {
        obj([("op", "bond".into()), ("amount", 5.into()), ("claim", claim.into()), ("verifier", "cy@a.test".into())])
    };
    operate(&w, &h, &ana, "bond-1", bond("the first holds"));
    operate(&w, &h, &ana, "bond-2", bond("the second holds"));
    // A release counts the bond intact once it was held a day (docs/SPEC.md §21).
    w.clock.advance(86_400_000);
    operate(&w, &h, &cy, "rel-bond", obj([("op", "release".into()), ("contract", "bond-1".into())]));

    let history = |local: &str| json(&call_raw(&h, "GET", &format!("/agents/{local}/historial"), &[], vec![]), 200);
    let counts = |doc: &Value, member: &str| -> Vec<(String, i64)> {
        let o = doc.as_object().unwrap()[member].as_object().unwrap();
        o.iter().map(|(k, v)| (k.clone(), v.as_safe_integer().unwrap_or(-1))).collect()
    };
    let pairs =
        |list: &[(&str, i64)]| -> Vec<(String, i64)> { list.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect() };
    let seller = history("bo");
    let selling = seller.as_object().unwrap()["vendiendo"].as_object().unwrap();
    assert_eq!(selling["contratos"].as_safe_integer(), Some(2));
    assert_eq!(selling["liberados"].as_safe_integer(), Some(2), "a spot settled counts as paid");
    assert_eq!(counts(&seller, "comprando"), pairs(&[("contratos", 0), ("tokens", 0)]), "bo bought nothing");
    assert_eq!(counts(&seller, "afirmando")[0], ("ejecutadas".to_owned(), 0));
    assert_eq!(counts(&seller, "afirmando")[1], ("fianzas".to_owned(), 0), "bo bonded nothing");
    let buyer = history("ana");
    let buying = buyer.as_object().unwrap()["comprando"].as_object().unwrap();
    assert_eq!((buying["contratos"].as_safe_integer(), buying["tokens"].as_safe_integer()), (Some(2), Some(30)));
    assert_eq!(counts(&buyer, "vendiendo")[0], ("contratos".to_owned(), 0), "ana sold nothing");
    assert_eq!(
        counts(&buyer, "afirmando"),
        pairs(&[("ejecutadas", 0), ("fianzas", 1), ("intactas", 1), ("tokens", 5)]),
        "the released bond"
    );
    assert_eq!(
        counts(&buyer, "avalando"),
        pairs(&[("avales", 0), ("ejecutados", 0), ("intactos", 0)]),
        "bonds that vouch for nobody"
    );
    let summary = buyer.as_object().unwrap()["resumen"].as_object().unwrap();
    assert_eq!(summary["tokens_en_juego_ahora"].as_safe_integer(), Some(5), "the bond that stands");
    // `since`: when the agent registered (the clock moved a day since, for the bond's release).
    let registered = nyx5_proto::Timestamp(w.clock.now().millis() - 86_400_000);
    assert_eq!(buyer.as_object().unwrap()["since"].as_str(), Some(registered.to_rfc3339().as_str()));
}

/// The account page is its agent's or the operator's; top-ups hold their bounds; the journal
/// pages from where the last page ended.
#[test]
fn accounts_topups_and_the_journal_hold_their_bounds() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let (ana, bo) = (Agent::new("ana@a.test", 1), Agent::new("bo@a.test", 2));
    register(&h, &ana, None);
    register(&h, &bo, None);
    let admin = format!("Bearer admin-{}", h.config.domain);
    assert_eq!(call_raw(&h, "GET", "/libro/cuenta/ana@a.test", &[], vec![]).status, 401);
    assert_eq!(bo.get(&h, "/libro/cuenta/ana@a.test").status, 403);
    assert_eq!(ana.get(&h, "/libro/cuenta/ana@a.test").status, 200);
    assert_eq!(call_raw(&h, "GET", "/libro/cuenta/ana@a.test", &[("authorization", &admin)], vec![]).status, 200);

    let topup_with = |amount: i64, note: &str| {
        let body = obj([("address", "ana@a.test".into()), ("amount", amount.into()), ("note", note.into())]);
        call(&h, "POST", "/libro/topup", &[("authorization", &admin)], &Value::Object(body)).status
    };
    let max = nyx5_proto::limits::MAX_AMOUNT;
    let longest = "n".repeat(nyx5_rules::libro::op::MAX_TEXT_BYTES);
    // Five entries (the two welcome gifts, if any, and the top-ups), paged below. casa@ may owe
    // at most 2^53 - 1 (migration 0017), so bo's come before ana's largest.
    topup(&h, "bo@a.test", 3);
    topup(&h, "bo@a.test", 4);
    assert_eq!(topup_with(max - 7, &longest), 200, "the largest amount casa@ can still issue, the longest note");
    assert_eq!(topup_with(max + 1, "x"), 400);
    assert_eq!(topup_with(1, &format!("{longest}n")), 400);
    assert_eq!(balance(&h, "ana@a.test"), max - 7);
    assert_eq!(balance(&h, "casa@a.test"), -max);

    let page = |after: i64| {
        let v = json(
            &call_raw(&h, "GET", &format!("/libro/diario?after={after}&limit=2"), &[("authorization", &admin)], vec![]),
            200,
        );
        let o = v.as_object().unwrap().clone();
        let ns: Vec<i64> = o["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_object().unwrap()["n"].as_safe_integer().unwrap())
            .collect();
        (ns, o["next"].as_safe_integer())
    };
    let total = block_on(h.db.query(nyx5_house::stmt!("SELECT count(*) AS n FROM libro_entries"))).unwrap()[0]
        .int("n")
        .unwrap();
    let (mut after, mut seen) = (0, Vec::new());
    loop {
        let (ns, next) = page(after);
        assert!(ns.len() <= 2);
        seen.extend(ns.iter().copied());
        match next {
            Some(n) => {
                assert_eq!((ns.len(), n), (2, after + 2), "a full page says where the next starts");
                after = n;
            }
            None => {
                assert!(ns.len() < 2, "only a short page ends the journal");
                break;
            }
        }
    }
    assert_eq!(seen, (1..=total).collect::<Vec<_>>(), "every entry once, in order");
    assert!(total >= 3);
}

/// The house reaching its own routes through the `Local` port (the index crawl of its own
/// directory, in the same tick as verdicts that queued receipts) leaves a pending kick for the
/// house's own answer: the nested answer must not swallow it (review of issue 37 §2).
#[test]
fn the_house_asking_itself_leaves_a_pending_kick_in_place() {
    use nyx5_house::ports::Local;
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let bo = Agent::new("bo@b.test", 98);
    register(&b, &bo, None);
    topup(&a, bo.address.as_str(), 5);
    let env = signed_op(&w, &bo, "a.test", "bal-local", obj([("op", "balance".into())]));
    let card = block_on(a.lookup().resolve_agent(&bo.address, false)).unwrap();
    let v = env.verify(&card, a.now()).unwrap();
    // Done outside a request (as a tick's verdict is): bo's receipt waits in a.test's queue.
    block_on(a.libro().operate(&v, &card));
    let inner = block_on(a.answer(nyx5_house::Request::new("GET", "/health", vec![], vec![])));
    assert_eq!(inner.status, 200);
    assert!(call_raw(&a, "GET", "/health", &[], vec![]).kick, "the receipt for b.test still asks for a kick");
}
