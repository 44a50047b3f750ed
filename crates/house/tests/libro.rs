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
//!       [approval=SECONDS]              how long an approval waits
//! agent ana@a.test                      registered by its house's operator
//! agent bot.ana@a.test cap=N            a subagent, delegated by ana with `scope.cap` N
//!       [authority={…}]                 … and `scope.authority` (JSON without spaces)
//! rotate ana@a.test                     ana rotates to a new key (the old one in its grace)
//! block ana@a.test bo@b.test            ana puts bo on its block list
//! topup ana@a.test 100 => 200 [balances]
//! quote bo@b.test q1 buyer=ana@a.test contract=escrow price=40 concept=work [arbiter=…]
//!       [referrer=… share=BPS] [expires=+1h] [terms={"deadline":"…"}] [house=a.test] [pad=N]
//! ana@a.test accept quote=q1 [id=ENVELOPE] [key=old] [via=accept] [until=+30m] => CODE [account=balance …]
//!       [receipts=ana@a.test,bo@b.test] [lines=N] [state:ID=STATE] [spent:ID=N]
//! clock +2h                             the shared clock moves
//! fee a.test 0                          the house restarts with another fee (basis points)
//! tick                                  one queue tick on every house
//! replay => 200 [balances]              the last operation's envelope, delivered again
//! ```
//!
//! `CODE` is 200 when the receipt arrived, else the bounce's code; a step without an operation
//! (`agent`, `tick`, `clock`) may still expect balances (`tick => ana@a.test=5`). Values parse as
//! JSON when they can (`cap=5`, `scope={"concepts":["gpu"]}`), else they are strings, and `x*N`
//! is N times `x` (`concept=x*257`, to pass a limit); a quote's `pad=N` adds `terms.pad`, N bytes;
//! `quote=q1` is the quote the table signed as `q1`; `key=old` signs the operation with the key
//! the agent rotated away from; `until=+30m` gives the envelope that `expires`; `via=accept` hands the envelope straight to the Libro's house
//! (`Mailbox::accept`, or `/inbound` for a foreign operator) and reads the code from its answer
//! rather than from a receipt or a bounce. Expectations beside balances: `receipts=…` lists exactly the
//! table's agents whose mailboxes hold the operation's receipt (each checked against the house
//! key, foreign ones after crossing houses); `lines=N` the lines of the entry the operation
//! posted (0: none); `state:ID=S` a contract's state; `spent:ID=N` a mandate's `spent`, and
//! `revoked:ID=1|0` whether it is revoked; `pending:ID=S` an approval's state (and its hold, if
//! any, is held while pending and returned otherwise: an invariant); `allowed_by:OP=SUBJECT`
//! and `approved_by:OP=ADDRESS`: the entry of operation OP names that authority, or approver; `named=NAME` that the refusal handed over directly
//! (`via=accept`) has that name; `says=WORD` / `hides=WORD` that the refusal's reason
//! does / does not contain WORD (a bounce carries no name); `asks:ID=a,b` the members of what approval ID shows its
//! approver (its `summary`); `status=S` that every receipt of the operation says `status` S
//! (done, pending, declined); `primitive=P` that the entry the operation posted has
//! `meta.primitive` P and `refs` naming the operation's envelope and its hash. A receipt that
//! shows a mandate must show the `spent` the house keeps. A quote whose referrer is its seller, or past the limits of a
//! quote, is signed as such, for the Libro to refuse.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use std::collections::BTreeMap;
use std::rc::Rc;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::libro::LIBRO;
use nyx5_proto::card::{Delegation, Scope};
use nyx5_proto::crypto::Context;
use nyx5_proto::envelope::Kind;
use nyx5_proto::json::obj;
use nyx5_proto::quote::{ContractKind, QuoteDraft, Referrer};
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Envelope, Object, Timestamp, Value};

struct Run {
    w: World,
    houses: Vec<Rc<TestHouse>>,
    agents: BTreeMap<String, Agent>,
    /// Agents as they were before `rotate`: the key now in its grace.
    old: BTreeMap<String, Agent>,
    quotes: BTreeMap<String, Value>,
    last: Option<(String, Envelope)>,
    /// The reason of the last operation's refusal (its bounce, or `Mailbox::accept`'s answer).
    reason: Option<String>,
    /// The name of the last operation's refusal, when handed over directly (a bounce carries
    /// its code and reason, no name).
    named: Option<String>,
    seq: u32,
    file: String,
}

fn value(text: &str) -> Value {
    Value::parse_str(text).unwrap_or_else(|_| Value::from(expand(text)))
}

/// `x*N` is N times `x`; anything else is itself.
fn expand(text: &str) -> String {
    match text.rsplit_once('*') {
        Some((unit, n)) if !unit.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            unit.repeat(n.parse().unwrap())
        }
        _ => text.to_owned(),
    }
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
            old: BTreeMap::new(),
            quotes: BTreeMap::new(),
            last: None,
            reason: None,
            named: None,
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

    /// The operation's outcome as the operator sees it: 200 for a receipt, a bounce's code (and
    /// its reason).
    fn outcome(&self, who: &Agent, op_id: &str) -> Option<(u16, Option<String>)> {
        let house = self.house_of(&who.address);
        for env in mailbox(&house, who) {
            let Some(content) = env.content() else { continue };
            if env.from().local() == LIBRO && env.in_reply_to() == Some(op_id) {
                assert_eq!(env.kind(), Kind::Receipt);
                assert_eq!(content.media, nyx5_proto::receipt::MEDIA);
                let receipt =
                    nyx5_proto::receipt::Receipt::from_object(content.body.as_object().unwrap().clone()).unwrap();
                receipt.verify(&[self.libro().config.key.public()]).expect("a receipt the house signed");
                return Some((200, None));
            }
            let body = content.body.as_object();
            if env.from().local() == "postmaster"
                && body.and_then(|b| b.get("of")).and_then(Value::as_str) == Some(op_id)
            {
                let code = body.and_then(|b| b.get("code")).and_then(Value::as_safe_integer).unwrap_or(0);
                let reason = body.and_then(|b| b.get("reason")).and_then(Value::as_str).map(str::to_owned);
                return Some((u16::try_from(code).unwrap(), reason));
            }
        }
        None
    }

    fn send_op(
        &mut self,
        who: &str,
        body: Object,
        id: Option<String>,
        old: bool,
        until: Option<Timestamp>,
    ) -> (String, Envelope) {
        self.seq += 1;
        let id = id.unwrap_or_else(|| format!("op-{}", self.seq));
        let agent = if old {
            self.old.get(who).unwrap_or_else(|| panic!("{}: {who} has no rotated key", self.file))
        } else {
            self.agent(who)
        };
        let mut draft = libro_op(&agent.address, &self.libro().config.domain, &id, self.w.clock.now(), body);
        draft.expires = until;
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
        let (code, reason) = self
            .outcome(self.agent(who), id)
            .unwrap_or_else(|| panic!("{}: no receipt and no bounce for {id}", self.file));
        self.reason = reason;
        code
    }

    /// Hands `env` to the Libro's house as a sending house's delivery would (`Mailbox::accept` for
    /// a local operator, `POST /inbound` for a foreign one) and answers the code it got.
    fn hand_over(&mut self, who: &str, env: &Envelope) -> u16 {
        let agent = self.agent(who);
        let house = self.house_of(&agent.address);
        let libro = self.libro();
        let code = if house.config.domain == libro.config.domain {
            let card = block_on(house.lookup().local_card(agent.address.local())).unwrap().unwrap();
            let verified = env.clone().verify(&card, house.now()).unwrap();
            let outcomes = block_on(house.mailbox().accept(&verified, &card, verified.to())).unwrap();
            match &outcomes[0].1 {
                nyx5_house::mailbox::Outcome::Rejected(e) => {
                    self.reason = Some(e.reason.to_string());
                    self.named = Some(e.name().to_string());
                    e.code()
                }
                _ => 200,
            }
        } else {
            let relay = nyx5_proto::relay::RelayHeader::sign(
                &house.config.domain,
                env,
                &libro.config.domain,
                &house.config.key,
            )
            .to_header();
            let resp = call_raw(libro, "POST", "/inbound", &[(nyx5_proto::relay::HEADER, &relay)], env.canonical());
            match resp.status {
                200 | 202 => 200,
                other => {
                    let member = |name: &str| {
                        resp.value().ok().and_then(|v| {
                            v.as_object().and_then(|o| o.get(name)).and_then(Value::as_str).map(str::to_owned)
                        })
                    };
                    self.reason = member("reason");
                    self.named = member("error");
                    other
                }
            }
        };
        self.settle();
        code
    }

    fn check_balances(&self, line: &str, expected: &[&str], op: Option<&str>) {
        let op = || op.unwrap_or_else(|| panic!("{}: `{line}`: that expectation needs an operation", self.file));
        for e in expected {
            let (what, want) = e.rsplit_once('=').unwrap_or_else(|| panic!("{line}: balance {e}"));
            match what.split_once(':') {
                _ if what == "receipts" => self.check_receipts(line, op(), want),
                _ if what == "status" => self.check_status(line, op(), want),
                _ if what == "named" => {
                    let _ = op();
                    let named = self
                        .named
                        .as_deref()
                        .unwrap_or_else(|| panic!("{}: `{line}`: no name (only via=accept answers one)", self.file));
                    assert_eq!(named, want, "{}: `{line}`: the refusal's name", self.file);
                }
                _ if what == "says" || what == "hides" => {
                    let _ = op();
                    let reason = self.reason.as_deref().unwrap_or_else(|| panic!("{}: `{line}`: no reason", self.file));
                    assert_eq!(reason.contains(want), what == "says", "{}: `{line}`: the reason {reason:?}", self.file);
                }
                // The entry the operation posted says which primitive moved the money, and
                // points back at the operation: its envelope id and that envelope's hash.
                _ if what == "primitive" => {
                    let entry = block_on(nyx5_house::store::libro::entry_for(&self.libro().db, op())).unwrap();
                    let entry = Value::parse_str(&entry.unwrap_or_else(|| panic!("{line}: no entry"))).unwrap();
                    let entry = entry.as_object().unwrap();
                    let member = |o: &str, m: &str| {
                        entry[o].as_object().and_then(|o| o.get(m)).and_then(Value::as_str).map(str::to_owned)
                    };
                    assert_eq!(member("meta", "primitive").as_deref(), Some(want), "{}: `{line}`", self.file);
                    let (_, env) = self.last.as_ref().unwrap();
                    assert_eq!((env.id(), member("refs", "op").as_deref()), (op(), Some(op())), "{line}: refs.op");
                    assert_eq!(member("refs", "op_sha256"), Some(env.sha256_hex()), "{line}: refs.op_sha256");
                }
                _ if what == "lines" => {
                    let entry = block_on(nyx5_house::store::libro::entry_for(&self.libro().db, op())).unwrap();
                    let lines = entry.map_or(0, |t| {
                        Value::parse_str(&t).unwrap().as_object().unwrap()["lines"].as_array().unwrap().len()
                    });
                    assert_eq!(lines.to_string(), want, "{}: `{line}`: lines of the entry", self.file);
                }
                Some(("state", id)) => {
                    let row = block_on(nyx5_house::store::libro::contract(&self.libro().db, id)).unwrap();
                    let record =
                        Value::parse_str(row.unwrap_or_else(|| panic!("{line}: no {id}")).text("record").unwrap())
                            .unwrap();
                    let state = record.as_object().unwrap()["state"].as_str().unwrap().to_owned();
                    assert_eq!(state, want, "{}: `{line}`: state of {id}", self.file);
                }
                Some(("approved_by" | "allowed_by", id)) => {
                    // The entry operation `id` posted says which authority let it move, and who
                    // approved it.
                    let entry = block_on(nyx5_house::store::libro::entry_for(&self.libro().db, id)).unwrap();
                    let entry =
                        Value::parse_str(&entry.unwrap_or_else(|| panic!("{line}: no entry for {id}"))).unwrap();
                    let authority = entry.as_object().unwrap()["meta"].as_object().unwrap()["authority"].clone();
                    let list =
                        authority.as_object().unwrap()[what.split_once(':').unwrap().0].as_array().unwrap().to_vec();
                    let names: Vec<String> = list
                        .iter()
                        .map(|v| {
                            v.as_str().map_or_else(
                                || v.as_object().unwrap()["of"].as_str().unwrap().to_owned(),
                                str::to_owned,
                            )
                        })
                        .collect();
                    assert!(names.iter().any(|n| n == want), "{}: `{line}`: {what} of {id}: {names:?}", self.file);
                }
                Some(("pending", id)) => {
                    let rows = block_on(nyx5_house::ports::Db::query(
                        &self.libro().db,
                        nyx5_house::stmt!("SELECT state FROM libro_pending WHERE id = ?", id),
                    ))
                    .unwrap();
                    let state = rows.first().and_then(|r| r.text("state")).unwrap_or("none");
                    assert_eq!(state, want, "{}: `{line}`: approval {id}", self.file);
                }
                // What the approver is shown of a waiting movement: the members of its summary.
                Some(("asks", id)) => {
                    let rows = block_on(nyx5_house::ports::Db::query(
                        &self.libro().db,
                        nyx5_house::stmt!("SELECT record FROM libro_pending WHERE id = ?", id),
                    ))
                    .unwrap();
                    let record = Value::parse_str(rows[0].text("record").unwrap()).unwrap();
                    let summary = record.as_object().unwrap()["summary"].as_object().unwrap().clone();
                    let got: Vec<&str> = summary.keys().map(String::as_str).collect();
                    let mut want: Vec<&str> = want.split(',').collect();
                    want.sort_unstable();
                    assert_eq!(got, want, "{}: `{line}`: what approval {id} shows", self.file);
                }
                Some(("spent" | "revoked", id)) => {
                    let rows = block_on(nyx5_house::ports::Db::query(
                        &self.libro().db,
                        nyx5_house::stmt!(
                            "SELECT spent, state = 'revoked' AS revoked FROM libro_mandates WHERE id = ?",
                            id
                        ),
                    ))
                    .unwrap();
                    let row = rows.first().unwrap_or_else(|| panic!("{line}: no mandate {id}"));
                    let got = row.int(what.split_once(':').unwrap().0).unwrap();
                    assert_eq!(got.to_string(), want, "{}: `{line}`: {what}", self.file);
                }
                _ => {
                    let want: i64 = want.parse().unwrap();
                    assert_eq!(self.balance(what), want, "{}: `{line}`: balance of {what}", self.file);
                }
            }
        }
    }

    /// Exactly the agents in `list` (comma-separated) hold a receipt of operation `op`, one each,
    /// signed by the house (the envelope and the receipt).
    fn check_receipts(&self, line: &str, op: &str, list: &str) {
        let want: Vec<&str> = list.split(',').filter(|s| !s.is_empty()).collect();
        let key = self.libro().config.key.public();
        for (name, agent) in &self.agents {
            let house = self.house_of(&agent.address);
            let receipts: Vec<Envelope> = mailbox(&house, agent)
                .into_iter()
                .filter(|e| e.from().local() == LIBRO && e.kind() == Kind::Receipt && e.in_reply_to() == Some(op))
                .collect();
            let expected = usize::from(want.contains(&name.as_str()));
            assert_eq!(receipts.len(), expected, "{}: `{line}`: receipts of {op} in {name}'s mailbox", self.file);
            for env in receipts {
                assert_eq!(env.from().domain(), self.libro().config.domain);
                let env = env.verify_with_key(&key).expect("a receipt envelope the house signed");
                let body = env.content().unwrap().body.as_object().unwrap().clone();
                // A receipt that shows a mandate shows it as the house keeps it after the operation.
                if let Some(m) = body.get("mandate").and_then(Value::as_object) {
                    let id = m["id"].as_str().unwrap();
                    let rows = block_on(nyx5_house::ports::Db::query(
                        &self.libro().db,
                        nyx5_house::stmt!("SELECT spent FROM libro_mandates WHERE id = ?", id),
                    ))
                    .unwrap();
                    let kept = rows.first().and_then(|r| r.int("spent"));
                    assert_eq!(m["spent"].as_safe_integer(), kept, "{}: `{line}`: {name}'s receipt of {op}", self.file);
                }
                let receipt = nyx5_proto::receipt::Receipt::from_object(body).unwrap();
                assert_eq!(receipt.of, op);
                receipt.verify(&[key]).expect("a receipt the house signed");
            }
        }
        for w in want {
            assert!(self.agents.contains_key(w), "{}: `{line}`: {w} is not one of the table's agents", self.file);
        }
    }

    /// Every receipt of operation `op`, in every mailbox, says `status` (at least one does).
    fn check_status(&self, line: &str, op: &str, status: &str) {
        let key = self.libro().config.key.public();
        let mut seen = 0;
        for agent in self.agents.values() {
            let house = self.house_of(&agent.address);
            for env in mailbox(&house, agent)
                .into_iter()
                .filter(|e| e.from().local() == LIBRO && e.kind() == Kind::Receipt && e.in_reply_to() == Some(op))
            {
                let body = env.content().unwrap().body.as_object().unwrap().clone();
                let receipt = nyx5_proto::receipt::Receipt::from_object(body)
                    .unwrap_or_else(|e| panic!("{}: `{line}`: a receipt of {op}: {}", self.file, e.reason));
                receipt.clone().verify(&[key]).expect("a receipt the house signed");
                assert_eq!(receipt.status.as_str(), status, "{}: `{line}`: the status of {op}", self.file);
                seen += 1;
            }
        }
        assert!(seen > 0, "{}: `{line}`: no receipt of {op}", self.file);
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
        // A waiting approval holds what it would pay; a decided or expired one holds nothing.
        let rows = block_on(nyx5_house::ports::Db::query(
            &libro.db,
            nyx5_house::stmt!("SELECT id, state, amount FROM libro_pending"),
        ))
        .unwrap();
        for r in rows {
            let id = r.text("id").unwrap();
            let held = if r.text("state") == Some("pending") { r.int("amount").unwrap() } else { 0 };
            let account = nyx5_rules::libro::model::hold_account(id);
            assert_eq!(self.balance(&account), held, "{}: after `{line}`: the hold of {id}", self.file);
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
                let parts: Vec<&str> = e.split_whitespace().collect();
                match parts.first().and_then(|p| p.parse::<u16>().ok()) {
                    Some(code) => (Some(code), parts[1..].to_vec()),
                    None => (None, parts),
                }
            }
            None => (None, Vec::new()),
        };
        let mut op_id = None;
        let got: Option<u16> = match words[0] {
            "house" => {
                let mut config = self.w.config(words[1], Registration::Admin);
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap();
                    match k {
                        "fee" => config.fee_bps = v.parse().unwrap(),
                        "welcome" => config.welcome = v.parse().unwrap(),
                        "approval" => config.approval_ttl_ms = v.parse::<i64>().unwrap() * 1_000,
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
                let mut cap = None;
                let mut authority = None;
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap();
                    match k {
                        "inbox" => extra.push(("inbox", value(v))),
                        "cap" => cap = Some(v.parse::<i64>().unwrap()),
                        "authority" => {
                            authority = Some(nyx5_proto::authority::Authority::from_value(&value(v)).unwrap());
                        }
                        _ => panic!("{line}: unknown agent option {k}"),
                    }
                }
                // A dotted name is a subagent: its parent delegates to it (any type, any domain,
                // the table's cap).
                if let Some(parent) = agent.address.parent() {
                    let parent = self.agent(parent.as_str());
                    let scope = Scope { types: None, to_domains: None, cap, authority };
                    let delegation = Delegation::sign(
                        &parent.address,
                        &agent.address,
                        &agent.sig.public(),
                        &scope,
                        None,
                        house.now(),
                        &parent.sig,
                    )
                    .unwrap();
                    extra.push(("delegation", delegation.to_value()));
                } else {
                    assert!(
                        cap.is_none() && authority.is_none(),
                        "{line}: only a subagent (a dotted name) has a cap or an authority"
                    );
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
            "rotate" => {
                let old = self.agents.remove(words[1]).unwrap_or_else(|| panic!("{line}: unknown agent"));
                let seed = u8::try_from(200 + self.old.len()).unwrap();
                let new = Agent::new(words[1], seed);
                let house = self.house_of(&old.address);
                let body = new.registration(&house, &[]);
                let token = old.token(&house, "POST", "/agents", &body.canonical());
                let resp = call(&house, "POST", "/agents", &[("authorization", &token)], &body);
                assert_eq!(resp.status, 200, "{line}: {:?}", resp.value());
                self.agents.insert(words[1].to_owned(), new);
                self.old.insert(words[1].to_owned(), old);
                None
            }
            "block" => {
                let agent = self.agent(words[1]);
                let house = self.house_of(&agent.address);
                let list = Value::Array(words[2..].iter().map(|w| Value::from(*w)).collect());
                let body = Value::Object(obj([("block", Value::Object(obj([("add", list)])))]));
                let resp = agent.post(&house, &format!("/lists/{}", agent.address.local()), &body);
                assert_eq!(resp.status, 200, "{line}: {:?}", resp.value());
                None
            }
            "clock" => {
                self.w.clock.advance(duration_ms(words[1]));
                None
            }
            // `fee a.test 0`: the operator restarts the house with another fee (basis points).
            "fee" => {
                let at = self.houses.iter().position(|h| h.config.domain == words[1]).expect("a house of the table");
                let old = self.houses.remove(at);
                let mut config = old.config.clone();
                config.fee_bps = words[2].parse().unwrap();
                drop(old);
                let h = self.w.restart(config);
                self.houses.insert(at, h);
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
                let referrer = o.get("referrer").map(|r| Address::parse(r).unwrap());
                // A referrer that is the seller, a concept or a quote past its limits cannot be
                // drafted: sign stand-ins, then put the real ones in their place and sign again,
                // for the Libro to refuse.
                let self_referred = referrer.as_ref() == Some(&seller.address);
                let concept = expand(o.get("concept").copied().unwrap_or("work"));
                let pad = o.get("pad").map(|n| "x".repeat(n.parse().unwrap()));
                let resign = self_referred || pad.is_some() || concept.len() > 256;
                let q = QuoteDraft {
                    id: words[2].to_owned(),
                    house: o.get("house").map_or(self.libro().config.domain.clone(), |h| (*h).to_owned()),
                    seller: seller.address.clone(),
                    buyer: Address::parse(o["buyer"]).unwrap(),
                    contract: ContractKind::parse(o.get("contract").copied().unwrap_or("spot")).unwrap(),
                    price: o["price"].parse().unwrap(),
                    currency: o.get("currency").copied().unwrap_or("tok").to_owned(),
                    concept: if resign { "work".to_owned() } else { concept.clone() },
                    terms: o.get("terms").map(|t| value(t).as_object().unwrap().clone()),
                    arbiter: o.get("arbiter").map(|a| Address::parse(a).unwrap()),
                    referrer: referrer.map(|r| Referrer {
                        address: if self_referred { Address::parse("stand-in@x.test").unwrap() } else { r },
                        share_bps: o["share"].parse().unwrap(),
                    }),
                    issued: now,
                    expires: o.get("expires").map(|e| Timestamp(now.millis() + duration_ms(e))),
                    extra: Object::new(),
                }
                .sign(&seller.sig)
                .unwrap();
                let mut q = q.object().clone();
                if self_referred {
                    let mut r = q["referrer"].as_object().unwrap().clone();
                    r.insert("address".into(), seller.address.as_str().into());
                    q.insert("referrer".into(), Value::Object(r));
                }
                if let Some(pad) = pad {
                    let mut terms = q["terms"].as_object().cloned().unwrap_or_default();
                    terms.insert("pad".into(), pad.into());
                    q.insert("terms".into(), Value::Object(terms));
                }
                if resign {
                    q.insert("concept".into(), concept.into());
                    sign_object(&mut q, "signature", Context::Quote, &seller.sig);
                }
                self.quotes.insert(words[2].to_owned(), Value::Object(q));
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
                    let card = block_on(house.lookup().local_card(agent.address.local())).unwrap().unwrap();
                    let verified = env.clone().verify(&card, house.now()).unwrap();
                    let outcomes = block_on(house.mailbox().accept(&verified, &card, verified.to())).unwrap();
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
                let mut old = false;
                let mut direct = false;
                let mut until = None;
                for kv in &words[2..] {
                    let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{line}: {kv} is not key=value"));
                    match k {
                        "id" => id = Some(v.to_owned()),
                        "key" => {
                            assert_eq!(v, "old", "{line}: key=old is the only choice");
                            old = true;
                        }
                        "until" => until = Some(Timestamp(self.w.clock.now().millis() + duration_ms(v))),
                        "via" => {
                            assert_eq!(v, "accept", "{line}: via=accept is the only choice");
                            direct = true;
                        }
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
                let (id, env) = self.send_op(who, body, id, old, until);
                self.reason = None;
                self.named = None;
                let code = if direct { self.hand_over(who, &env) } else { self.deliver(who, &id, &env) };
                self.last = Some((who.to_owned(), env));
                op_id = Some(id);
                Some(code)
            }
            _ => panic!("{}: cannot read `{line}`", self.file),
        };
        if let Some(want) = code {
            assert_eq!(got, Some(want), "{}: `{line}`", self.file);
        }
        self.check_balances(line, &balances, op_id.as_deref());
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
fn authority_asks_before_money_moves() {
    run("authority.txt");
}

#[test]
fn escrow_across_houses() {
    run("escrow.txt");
}

#[test]
fn spot_with_fee_referrer_and_every_refusal_of_accept() {
    run("spot.txt");
}

#[test]
fn escrow_released_refunded_and_arbitrated() {
    run("escrow_paths.txt");
}

#[test]
fn bonds_released_forfeited_and_expired() {
    run("bonds.txt");
}

#[test]

fn an_expired_bond_cannot_be_forfeited() {
    run("bond_forfeit_after_expiry.txt");
}

#[test]
fn metered_and_chained_mandates_and_the_revoke_cascade() {
    run("mandates.txt");
}

#[test]
fn a_subagents_cap_and_a_rotated_key_bound_what_moves() {
    run("delegation.txt");
}

#[test]
fn welcome_gifts_and_idempotent_topups() {
    run("topups.txt");
}

#[test]

fn a_misdirected_quote_is_bounced() {
    run("misdirected_quote.txt");
}

#[test]
fn a_contract_settles_under_the_fee_it_was_accepted_under() {
    run("fee_change.txt");
}

#[test]
fn strangers_act_on_what_names_them_and_create_nothing() {
    run("strangers.txt");
}
