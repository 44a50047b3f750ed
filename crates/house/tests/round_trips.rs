//! Round trips to the database per request on the hot routes (issue 36 §5): each query or batch
//! the engine makes is one round trip to D1 on the Worker, where a round trip costs far more than
//! the statement. Counted on real SQLite through the test kit's database (the engine's code is
//! the Worker's), in the steady state — cards cached, the pair of houses warm — for `POST
//! /outbound`, the delivery kick (a tick), `POST /inbound` at the recipient's house, a page of
//! `GET /mailbox` and `POST /mailbox/<local>/ack`. Two calls in flight together (`join::both`)
//! are one wait, as they are on the Worker: every call yields once before it runs, so the one
//! beside it starts first, and the kit counts waits, not calls. The counts must stay within
//! `benches/budgets.json` ("round_trips"); its `goal` (2 per request) is printed beside them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::print_stdout)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Value};

/// The round trips `f` makes on `house`'s database: its waits for it, in sequence.
fn counted(house: &TestHouse, f: impl FnOnce()) -> u64 {
    let before = house.db.waits();
    f();
    house.db.waits() - before
}

fn budgets() -> Value {
    Value::parse_str(include_str!("../../../benches/budgets.json")).unwrap()
}

#[test]
fn hot_routes_stay_within_their_round_trips() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let b = w.house("b.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(bo.register_admin(&b).status, 201);
    let to: Vec<&Address> = vec![&bo.address];
    // Warm: one envelope each way delivered, read and acknowledged (cards fetched and cached).
    json(&ana.send(&a, &ana.draft("warm-1", &to, "hi").sign(&ana.sig).unwrap()), 202);
    w.tick_all();
    let ack = |id: &str| Value::Object(obj([("ids", Value::Array(vec![id.into()]))]));
    json(&bo.get(&b, "/mailbox/bo"), 200);
    json(&bo.post(&b, "/mailbox/bo/ack", &ack("warm-1")), 200);

    // From here every call yields once before it runs (see the module's doc).
    a.db.stall(true);
    b.db.stall(true);
    let env = ana.draft("hot-1", &to, "hello").sign(&ana.sig).unwrap();
    let outbound = counted(&a, || assert_eq!(ana.send(&a, &env).status, 202));
    let before_b = b.db.waits();
    let kick = counted(&a, || assert_eq!(w.tick_all().delivered, 1));
    let inbound = b.db.waits() - before_b;
    // (`tick_all` ticks b too, after a: its tick has nothing to do but its upkeep.)
    let idle_tick = counted(&b, || assert_eq!(w.tick_all().delivered, 0));
    let inbound = inbound - idle_tick;
    // The first tick of a minute (the cron's, as a rule) also purges and does the minute's upkeep.
    w.clock.advance(nyx5_house::queue::UPKEEP_EVERY_MS);
    let minute_tick = counted(&b, || assert_eq!(block_on(b.tick()).unwrap().delivered, 0));
    let page = counted(&b, || {
        let v = json(&bo.get(&b, "/mailbox/bo"), 200);
        assert_eq!(v.as_object().unwrap()["envelopes"].as_array().unwrap().len(), 1);
    });
    let acked =
        counted(&b, || json(&bo.post(&b, "/mailbox/bo/ack", &ack("hot-1")), 200).as_object().map(drop).unwrap());

    let budgets = budgets();
    let rt = budgets.as_object().unwrap()["round_trips"].as_object().unwrap();
    let goal = rt["goal"].as_safe_integer().unwrap() as u64;
    let routes = rt["routes"].as_object().unwrap();
    let mut over = Vec::new();
    for (what, got) in [
        ("outbound", outbound),
        ("kick", kick),
        ("inbound", inbound),
        ("idle_tick", idle_tick),
        ("minute_tick", minute_tick),
        ("mailbox_page", page),
        ("mailbox_ack", acked),
    ] {
        let budget = routes[what].as_safe_integer().unwrap() as u64;
        println!("round trips: {what:<13} {got:>3} (budget {budget}, goal {goal})");
        if got > budget {
            over.push(format!("{what}: {got} > {budget}"));
        }
    }
    assert!(over.is_empty(), "over their round-trip budgets (benches/budgets.json): {over:?}");
}
