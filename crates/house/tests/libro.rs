//! The Libro through public routes only, driven by scenario tables (`tests/libro/*.txt`): every
//! operation is an envelope to `libro@` sent through `POST /outbound`, delivered by the queue
//! (across houses through `/inbound`), and answered by a receipt in the operator's mailbox or a
//! bounce from its postmaster. After every step the Libro's invariants are checked: balances
//! sum to zero, none but the house's is negative, the journal audits (signatures, sums, chain),
//! and terminal contracts hold nothing.
//!
//! The table format, one step per line (`#` starts a comment):
//!
//! ```text
//! house a.test [fee=BPS] [welcome=N]   the first house keeps the Libro under test
//! agent ana@a.test [cap=N] [parent]     registered by its house's operator (cap: a subagent's scope.cap)
//! topup ana@a.test 100 => 200 [balances]
//! quote bo@b.test q1 buyer=ana@a.test contract=escrow price=40 concept=work [arbiter=…]
//!       [referrer=… share=BPS] [expires=+1h] [terms={"deadline":"…"}] [house=a.test]
//! ana@a.test accept quote=q1 [id=ENVELOPE] => CODE [account=balance …]
//! clock +2h                             the shared clock moves
//! tick                                  one queue tick on every house
//! replay => 200 [balances]              the last operation's envelope, delivered again
//! ```
//!
//! `CODE` is 200 when the receipt arrived, else the bounce's code. Values parse as JSON when
//! they can (`cap=5`, `scope={"concepts":["gpu"]}`), else they are strings; `quote=q1` is the
//! quote the table signed as `q1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::collections::BTreeMap;
use std::rc::Rc;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::{LIBRO, OP_MEDIA};
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, QuoteDraft, Referrer};
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value};

struct Run {
    w: World,
    houses: Vec<Rc<TestHouse>>,
    agents: BTreeMap<String, Agent>,
    quotes: BTreeMap<String, Value>,
    last: Option<(String, Envelope)>,
    seq: u32,
    file: String,
}

fn value(text: &str) -> Value {
    Value::parse_str(text).unwrap_or_else(|_| Value::from(text))
}

fn duration_ms(text: &str) -> i64 {
    let t = text.trim_start_matches('+');
    let (n, unit) = t.split_at(t.len() - 1);
    let n: i64 = n.parse().unwrap();
    n * match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => panic!("unknown unit {other}"),
    }
}

impl Run {
    fn new(file: &str) -> Run {
        Run {
            w: World::new(),
            houses: Vec::new(),
            agents: BTreeMap::new(),
            quotes: BTreeMap::new(),
            last: None,
            seq: 0,
            file: file.into(),
        }
    }

    fn libro(&self) -> &Rc<TestHouse> {
        &self.houses[0]
    }

    fn house_of(&self, a: &Address) -> Rc<TestHouse> {
        self.houses.iter().find(|h| h.config.domain == a.domain()).cloned().expect("a house for that agent")
    }

    fn agent(&self, name: &str) -> &Agent {
        self.agents.get(name).unwrap_or_else(|| panic!("{}: unknown agent {name}", self.file))
    }

    fn settle(&self) {
        for _ in 0..4 {
            self.w.tick_all();
        }
    }

    fn balance(&self, account: &str) -> i64 {
        block_on(nyx5_house::store::libro::balance(&self.libro().db, account)).unwrap()
    }

    /// The operation's outcome as the operator sees it: 200 for a receipt, a bounce's code.
    fn outcome(&self, who: &Agent, op_id: &str) -> Option<u16> {
        let house = self.house_of(&who.address);
        for env in mailbox(&house, who) {
            let Some(content) = env.content() else { continue };
            if env.from().local() == LIBRO && env.in_reply_to() == Some(op_id) {
                assert_eq!(env.kind(), Kind::Receipt);
                assert_eq!(content.media, nyx5_proto::receipt::MEDIA);
                let receipt =
                    nyx5_proto::receipt::Receipt::from_object(content.body.as_object().unwrap().clone()).unwrap();
                receipt.verify(&[self.libro().config.key.public()]).expect("a receipt the house signed");
                return Some(200);
            }
            let body = content.body.as_object();
            if env.from().local() == "postmaster"
                && body.and_then(|b| b.get("of")).and_then(Value::as_str) == Some(op_id)
            {
                let code = body.and_then(|b| b.get("code")).and_then(Value::as_safe_integer).unwrap_or(0);
                return Some(u16::try_from(code).unwrap());
            }
        }
        None
    }

    fn send_op(&mut self, who: &str, body: Object, id: Option<String>) -> (String, Envelope) {
        self.seq += 1;
        let id = id.unwrap_or_else(|| format!("op-{}", self.seq));
        let agent = self.agent(who);
        let libro = Address::new(LIBRO, &self.libro().config.domain).unwrap();
        let mut draft = Draft::new(
            id.clone(),
            agent.address.clone(),
            vec![libro],
            self.w.clock.now(),
            Content::new(OP_MEDIA, Value::Object(body)),
        );
        draft.kind = Kind::Task;
        let env = draft.build().unwrap().sign(&agent.sig).unwrap();
        (id, env)
    }

    fn deliver(&mut self, who: &str, id: &str, env: &Envelope) -> u16 {
        let agent = self.agent(who);
        let house = self.house_of(&agent.address);
        let resp = agent.send(&house, env);
        if resp.status >= 300 {
            return resp.status;
        }
        self.settle();
        self.outcome(self.agent(who), id).unwrap_or_else(|| panic!("{}: no receipt and no bounce for {id}", self.file))
    }

    fn check_balances(&self, line: &str, expected: &[&str]) {
        for e in expected {
            let (account, want) = e.rsplit_once('=').unwrap_or_else(|| panic!("{line}: balance {e}"));
            let want: i64 = want.parse().unwrap();
            assert_eq!(self.balance(account), want, "{}: `{line}`: balance of {account}", self.file);
        }
    }

    fn invariants(&self, line: &str) {
        let libro = self.libro();
        let admin = format!("Bearer admin-{}", libro.config.domain);
        let mut entries = Vec::new();
        let mut after = 0;
        loop {
            let page = json(
                &call_raw(
                    libro,
                    "GET",
                    &format!("/libro/diario?after={after}&limit=200"),
                    &[("authorization", &admin)],
                    vec![],
                ),
                200,
            );
            let page = page.as_object().unwrap();
            entries.extend(page["entries"].as_array().unwrap().iter().cloned());
            match page["next"].as_safe_integer() {
                Some(n) => after = n,
                None => break,
            }
        }
        let report = nyx5_proto::libro::audit(&libro.config.domain, &[libro.config.key.public()], &entries)
            .unwrap_or_else(|e| panic!("{}: after `{line}`: the journal does not audit: {}", self.file, e.reason));
        // The balances the house keeps are the journal's.
        for (account, b) in &report.balances {
            assert_eq!(self.balance(account), *b, "{}: after `{line}`: {account}", self.file);
        }
        let sum: i64 = report.balances.values().sum();
        assert_eq!(sum, 0, "{}: after `{line}`: balances sum to {sum}", self.file);
        // Terminal contracts hold nothing.
        let rows = block_on(nyx5_house::ports::Db::query(
            &libro.db,
            nyx5_house::stmt!(
                "SELECT id FROM libro_contracts WHERE state IN ('released', 'refunded', 'settled', 'forfeited')"
            ),
        ))
        .unwrap();
        for r in rows {
            let id = r.text("id").unwrap();
            assert_eq!(self.balance(&format!("escrow:{id}")), 0, "{}: after `{line}`: escrow of {id}", self.file);
        }
    }

    fn step(&mut self, line: &str) {
        let (action, expect) = match line.split_once("=>") {
            Some((a, e)) => (a.trim(), Some(e.trim())),
            None => (line.trim(), None),
        };
        let words: Vec<&str> = action.split_whitespace().collect();
        let (code, balances) = match expect {
            Some(e) => {
                let mut parts = e.split_whitespace();
                let code: u16 = parts.next().unwrap().parse().unwrap();
                (Some(code), parts.collect::<Vec<_>>())
            }
            None => (None, Vec::new()),
        };
        let got: Option<u16> = match words[0] {
            "house" => {
                let mut config = self.w.config(words[1], Registration::Admin);
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap();
                    match k {
                        "fee" => config.fee_bps = v.parse().unwrap(),
                        "welcome" => config.welcome = v.parse().unwrap(),
                        _ => panic!("{line}: unknown house option {k}"),
                    }
                }
                let h = self.w.start(config);
                self.houses.push(h);
                None
            }
            "agent" => {
                let seed = u8::try_from(self.agents.len() + 40).unwrap();
                let agent = Agent::new(words[1], seed);
                let house = self.house_of(&agent.address);
                let mut extra = Vec::new();
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap();
                    match k {
                        "inbox" => extra.push(("inbox", value(v))),
                        _ => panic!("{line}: unknown agent option {k}"),
                    }
                }
                let body = agent.registration(&house, &extra);
                let admin = format!("Bearer admin-{}", house.config.domain);
                let resp = call(&house, "POST", "/agents", &[("authorization", &admin)], &body);
                assert_eq!(resp.status, 201, "{line}: {:?}", resp.value());
                self.agents.insert(words[1].to_owned(), agent);
                None
            }
            "topup" => {
                let libro = self.libro().clone();
                let admin = format!("Bearer admin-{}", libro.config.domain);
                let amount: i64 = words[2].parse().unwrap();
                let mut body = obj([("address", words[1].into()), ("amount", amount.into())]);
                if let Some(id) = words.get(3) {
                    body.insert("id".into(), id.trim_start_matches("id=").into());
                }
                Some(call(&libro, "POST", "/libro/topup", &[("authorization", &admin)], &Value::Object(body)).status)
            }
            "clock" => {
                self.w.clock.advance(duration_ms(words[1]));
                None
            }
            "tick" => {
                self.settle();
                None
            }
            "quote" => {
                let seller = self.agent(words[1]);
                let mut o: BTreeMap<&str, &str> = BTreeMap::new();
                for kv in &words[3..] {
                    let (k, v) = kv.split_once('=').unwrap();
                    o.insert(k, v);
                }
                let now = self.w.clock.now();
                let q = QuoteDraft {
                    id: words[2].to_owned(),
                    house: o.get("house").map_or(self.libro().config.domain.clone(), |h| (*h).to_owned()),
                    seller: seller.address.clone(),
                    buyer: Address::parse(o["buyer"]).unwrap(),
                    contract: ContractKind::parse(o.get("contract").copied().unwrap_or("spot")).unwrap(),
                    price: o["price"].parse().unwrap(),
                    currency: o.get("currency").copied().unwrap_or("tok").to_owned(),
                    concept: o.get("concept").copied().unwrap_or("work").to_owned(),
                    terms: o.get("terms").map(|t| value(t).as_object().unwrap().clone()),
                    arbiter: o.get("arbiter").map(|a| Address::parse(a).unwrap()),
                    referrer: o.get("referrer").map(|r| Referrer {
                        address: Address::parse(r).unwrap(),
                        share_bps: o["share"].parse().unwrap(),
                    }),
                    issued: now,
                    expires: o.get("expires").map(|e| Timestamp(now.millis() + duration_ms(e))),
                    extra: Object::new(),
                }
                .sign(&seller.sig)
                .unwrap();
                self.quotes.insert(words[2].to_owned(), q.to_value());
                None
            }
            "replay" => {
                let (who, env) = self.last.clone().expect("an operation to replay");
                let before = (self.balance_snapshot(), self.journal_len());
                let agent = self.agent(&who);
                let house = self.house_of(&agent.address);
                // Delivered again straight to the Libro's house, as a sending house that lost
                // the answer would.
                let status = if house.config.domain == self.libro().config.domain {
                    let card = block_on(house.local_card(agent.address.local())).unwrap().unwrap();
                    let verified = env.clone().verify(&card, house.now()).unwrap();
                    let outcomes = block_on(house.accept(&verified, &card, verified.to())).unwrap();
                    assert_eq!(outcomes[0].1, nyx5_house::mailbox::Outcome::Duplicate, "{line}");
                    200
                } else {
                    let relay = nyx5_proto::relay::RelayHeader::sign(
                        &house.config.domain,
                        &env,
                        &self.libro().config.domain,
                        &house.config.key,
                    )
                    .to_header();
                    call_raw(self.libro(), "POST", "/inbound", &[(nyx5_proto::relay::HEADER, &relay)], env.canonical())
                        .status
                };
                assert!(status < 300, "{line}: a replay is answered {status}");
                self.settle();
                assert_eq!(
                    before,
                    (self.balance_snapshot(), self.journal_len()),
                    "{}: `{line}`: a replay changed the Libro",
                    self.file
                );
                Some(200)
            }
            who if words.len() >= 2 => {
                let op = words[1];
                let mut body = obj([("op", op.into())]);
                let mut id = None;
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{line}: {kv} is not key=value"));
                    match k {
                        "id" => id = Some(v.to_owned()),
                        "quote" => {
                            body.insert(
                                "quote".into(),
                                self.quotes.get(v).cloned().unwrap_or_else(|| panic!("{line}: no quote {v}")),
                            );
                        }
                        _ => {
                            body.insert(k.to_owned(), value(v));
                        }
                    }
                }
                let (id, env) = self.send_op(who, body, id);
                let code = self.deliver(who, &id, &env);
                self.last = Some((who.to_owned(), env));
                Some(code)
            }
            _ => panic!("{}: cannot read `{line}`", self.file),
        };
        if let Some(want) = code {
            assert_eq!(got, Some(want), "{}: `{line}`", self.file);
        }
        self.check_balances(line, &balances);
        if !self.houses.is_empty() {
            self.invariants(line);
        }
    }

    fn balance_snapshot(&self) -> Vec<(String, i64)> {
        let rows = block_on(nyx5_house::ports::Db::query(
            &self.libro().db,
            nyx5_house::stmt!("SELECT account, balance FROM libro_accounts ORDER BY account"),
        ))
        .unwrap();
        rows.iter().map(|r| (r.text("account").unwrap().to_owned(), r.int("balance").unwrap())).collect()
    }

    fn journal_len(&self) -> i64 {
        block_on(nyx5_house::store::libro::head(&self.libro().db)).unwrap().map_or(0, |(n, _)| n)
    }
}

fn run(file: &str) {
    let path = format!("{}/tests/libro/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut run = Run::new(file);
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if !line.is_empty() {
            run.step(line);
        }
    }
}

#[test]
fn escrow_across_houses() {
    run("escrow.txt");
}
