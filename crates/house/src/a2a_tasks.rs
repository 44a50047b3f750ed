//! The A2A gateway's tasks once they are written (docs/SPEC.md "A2A gateway"; decision 0075):
//! an agent's `result` envelope to `a2a@` moving its task ([`Tasks::answer`], which the
//! mailbox's dispatch calls), the escrow a task is bound to settled before its end is written
//! (`Tasks::settle`), and the caller's webhook told. Apart
//! from `a2a`, which writes tasks and names the mailbox, so that the mailbox's dispatch can name
//! this without a circle.

use nyx5_proto::card::{AgentCard, AgentCardDraft};
use nyx5_proto::envelope::Envelope;
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Error, ErrorKind, Refusal, Timestamp, Verified};
use nyx5_rules::a2a::{self as rules, GATEWAY, State};
use nyx5_rules::mailbox::Outcome;

use crate::ports::{Db, Net, Row};
use crate::view::{Core, Post, view};
use crate::{port_error, store};

/// A task that has not moved for this long is forgotten (one that owes the Libro is kept).
pub const TASK_LIFE_MS: i64 = 30 * 86_400_000;
/// An ended task is forgotten this long after it ended.
pub const ENDED_LIFE_MS: i64 = 7 * 86_400_000;

/// The card of `a2a@<house>`: signed with the domain key, with no encryption key (results come
/// to it in the clear, from the house's own agents), taking results.
pub fn gateway_card(
    domain_card: &Verified<nyx5_proto::DomainCard>,
    key: &nyx5_proto::crypto::SigningKey,
    since: Timestamp,
) -> Result<Verified<AgentCard>, Error> {
    let address = Address::new(GATEWAY, domain_card.domain())?;
    let mut draft = AgentCardDraft::new(address, key.public(), None, since);
    draft.capabilities = obj([
        ("accepts", Value::Array(vec![rules::RESULT_MEDIA.into(), "text/plain".into(), "application/json".into()])),
        ("a2a", Value::Object(obj([("gateway", Value::Bool(true))]))),
    ]);
    draft.certify(key)?.verify(domain_card, None, since)
}

/// Where a caller's webhook may be: public `https`, or an origin the operator's hosts file names;
/// never the house's own endpoints (its DNS-over-HTTPS resolver, its email provider), which the
/// full outbound policy lets the house itself reach. The policy `verifica@`'s tests use, for
/// the same reason: a stranger chose the URL.
pub(crate) fn push_policy(config: &crate::config::Config) -> nyx5_client::outbound::Policy {
    config.verifica_policy()
}

/// The tasks, over one call's borrows.
pub struct Tasks<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Tasks);

fn text(r: &Row, name: &str) -> String {
    r.text(name).unwrap_or_default().to_owned()
}

/// Reads a stored task of an agent at `domain`.
pub fn task_of(r: &Row, domain: &str) -> Result<rules::Task, Error> {
    let broken = || Error::new(ErrorKind::Internal, "a stored A2A task that cannot be read");
    let request = Value::parse_str(r.text("request").unwrap_or("[]")).map_err(|_| broken())?;
    Ok(rules::Task {
        id: text(r, "id"),
        context: text(r, "context"),
        agent: Address::new(&text(r, "local"), domain).map_err(|_| broken())?,
        state: State::parse(r.text("state").unwrap_or_default()).ok_or_else(broken)?,
        request: request.as_array().map(<[Value]>::to_vec).unwrap_or_default(),
        answer: r.text("answer").and_then(|a| Value::parse_str(a).ok()),
        envelope: text(r, "envelope"),
        contract: r.text("contract").map(str::to_owned),
        updated: Timestamp::from_millis(r.int("updated").unwrap_or(0)),
    })
}

pub(crate) fn unknown_task(id: &str) -> Error {
    Refusal::UnknownA2aTask.because(format!("no A2A task {id} for this agent"))
}

impl<'h, D: Db, N: Net> Tasks<'h, D, N> {
    async fn batch(&self, stmts: Vec<crate::ports::Stmt>) -> Result<Vec<u64>, Error> {
        crate::live::batch(self.db, self.post.bell, stmts).await.map_err(port_error)
    }

    /// An agent's `result` envelope to `a2a@` (`env`, verified, from `sender`): its task moves
    /// to the state the answer says, and an escrow bound to it is settled.
    pub async fn answer(&self, env: &Verified<Envelope>, sender: &Verified<AgentCard>) -> Outcome {
        match self.take_answer(env, sender).await {
            Ok(o) => o,
            Err(e) => Outcome::Rejected(e),
        }
    }

    async fn take_answer(&self, env: &Verified<Envelope>, sender: &Verified<AgentCard>) -> Result<Outcome, Error> {
        let replied = env.in_reply_to().ok_or_else(|| {
            Refusal::BadA2aRequest.because("a result to a2a@ replies (in_reply_to) to the task's envelope")
        })?;
        let row = store::a2a::by_envelope(self.db, replied).await?.ok_or_else(|| unknown_task(replied))?;
        let t = task_of(&row, &self.config.domain)?;
        if sender.address().domain() != self.config.domain || *sender.address() != t.agent {
            return Err(Refusal::NotTheTasksAgent.because("only the task's own agent answers it"));
        }
        let answered_by =
            t.answer.as_ref().and_then(Value::as_object).and_then(|a| a.get("envelope")).and_then(Value::as_str);
        if answered_by == Some(env.id()) {
            return Ok(Outcome::Duplicate);
        }
        if t.state.is_final() {
            return Err(Refusal::TaskNotCancelable.because(format!("task {} has ended ({})", t.id, t.state.as_str())));
        }
        let mut a = rules::answer(env.kind(), env.content())?;
        // A bound escrow is settled first, and only then is the answer written where the caller
        // reads it: a caller never reads work it has not paid for, nor a refund it did not get.
        if let (Some(contract), Some(op)) = (&t.contract, a.state.settles()) {
            match self.settle(&t, contract, op, a.state).await {
                Ok(()) => {}
                // The escrow is gone without this task (its buyer refunded it first): the work is
                // not given, and the task ends failed, saying why.
                Err(e) if op == "release" && !e.kind.is_temporary() && e.kind != ErrorKind::Internal => {
                    a = rules::Answer {
                        state: State::Failed,
                        parts: vec![Value::Object(obj([(
                            "text",
                            format!(
                                "the escrow {contract} could not be released ({}); the answer was withheld",
                                e.reason
                            )
                            .into(),
                        )]))],
                        artifacts: Vec::new(),
                    };
                    self.record(&t, &a, env.id(), true).await?;
                    return Err(Refusal::BadTaskPayment.because(format!(
                        "the escrow {contract} could not be released: {}; the caller was not given the answer",
                        e.reason
                    )));
                }
                // A refund the Libro refused for good: the escrow moved on; the task still ends.
                Err(e) if op == "refund" && !e.kind.is_temporary() && e.kind != ErrorKind::Internal => {}
                // Busy or failing: the queue brings the answer again.
                Err(e) => return Err(e),
            }
        } else if t.contract.is_some() {
            // Asking for input: what it asks travels, no artifact does until the task is paid.
            a.artifacts.clear();
        }
        let settled = t.contract.is_some() && a.state.settles().is_some();
        self.record(&t, &a, env.id(), settled).await?;
        Ok(Outcome::Accepted)
    }

    /// Writes the task's new state and the agent's answer (moved only from the state `t` was
    /// read in), then tells the caller where it asked to be.
    /// `settled`: its escrow was settled for this end, which is then written from any open state
    /// (`store::a2a::ended`); otherwise only from the state `t` was read in.
    async fn record(&self, t: &rules::Task, a: &rules::Answer, envelope: &str, settled: bool) -> Result<(), Error> {
        let mut kept = match a.to_value() {
            Value::Object(o) => o,
            _ => Object::new(),
        };
        kept.insert("envelope".into(), envelope.into());
        let kept = Value::Object(kept).canonical_string();
        let now = self.now().millis();
        let write = if settled {
            store::a2a::ended(&t.id, a.state.as_str(), Some(&kept), now)
        } else {
            store::a2a::moved(&t.id, t.state.as_str(), a.state.as_str(), Some(&kept), now)
        };
        let changes = self.batch(vec![write]).await?;
        if changes.first().is_none_or(|n| *n == 0) {
            return Err(Refusal::TaskNotCancelable.because(format!("task {} moved meanwhile (canceled?)", t.id)));
        }
        // Whoever streams the task reads it again once this request is done.
        self.post.bell.arrived(&rules::stream_key(&t.id));
        if let Some(r) = store::a2a::get(self.db, t.agent.local(), &t.id).await? {
            self.told(&r)?;
        }
        Ok(())
    }

    /// Tells the caller of the task in row `r` where it asked to be (A2A push: the task, once,
    /// after the answer goes out).
    pub(crate) fn told(&self, r: &Row) -> Result<(), Error> {
        let push = r.text("push").and_then(|p| Value::parse_str(p).ok()).and_then(|v| rules::Push::from_value(&v));
        if let Some(p) = push {
            self.notify(&p, &task_of(r, &self.config.domain)?);
        }
        Ok(())
    }

    /// Queues the push of task `t` to `p` (sent once the answer is out, as webhook pushes are:
    /// `Mailbox::send_pushes`), if the outbound policy still allows its URL: `POST` of A2A's
    /// `StreamResponse` `{"task": …}` with `X-A2A-Notification-Token`. One attempt; the task,
    /// which `GetTask` reads, stays authoritative.
    fn notify(&self, p: &rules::Push, t: &rules::Task) {
        if push_policy(self.config).check(&p.url).is_err() {
            return;
        }
        let body = Value::Object(obj([("task", t.to_wire(None, true))])).canonical();
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if let Some(token) = &p.token {
            headers.push(("x-a2a-notification-token".to_owned(), token.clone()));
        }
        let request = crate::ports::OutRequest { method: "POST".into(), url: p.url.clone(), headers, body };
        if let Ok(mut pending) = self.post.pushes.try_borrow_mut()
            && pending.len() < crate::view::MAX_PENDING_PUSHES
            && pending.iter().filter(|q| q.url == request.url).count() < crate::view::MAX_PUSHES_PER_WEBHOOK
        {
            pending.push(request);
        }
    }

    /// Settles escrow `contract` of task `t`, which ends `state`: `op` (`release` or `refund`)
    /// by `a2a@`, its arbiter, through the Libro's own door. Done when the contract is, after
    /// this, in the state `op` leads to, whoever moved it there: an attempt again (the queue
    /// bringing the answer again, a caller canceling again) finds it so, as does a buyer who
    /// released the escrow itself. Refused otherwise (the Libro's reason, or the contract's state).
    pub async fn settle(&self, t: &rules::Task, contract: &str, op: &str, state: State) -> Result<(), Error> {
        let want = if op == "release" { "released" } else { "refunded" };
        let mut body = obj([("op", op.into()), ("contract", contract.into())]);
        if op == "refund" {
            body.insert("note".into(), format!("the A2A task {} ended {}", t.id, state.as_str()).into());
        }
        let libro = crate::libro::Libro { core: self.core, post: self.post };
        let id = libro.derived_id(&format!("a2a-{op}"), contract, GATEWAY);
        let refused = match libro.operate_as(&self.systems.a2a, id, body, None).await {
            Ok(Outcome::Accepted | Outcome::Duplicate) => return Ok(()),
            Ok(Outcome::Rejected(e)) | Err(e) => e,
        };
        if refused.kind.is_temporary() || refused.kind == ErrorKind::Internal {
            return Err(refused);
        }
        let row = store::libro::contract(self.db, contract).await?;
        let record = row.and_then(|r| r.text("record").and_then(|t| Value::parse_str(t).ok()));
        let now = record.as_ref().and_then(Value::as_object).and_then(|o| o.get("state")).and_then(Value::as_str);
        if now == Some(want) { Ok(()) } else { Err(refused) }
    }
}
