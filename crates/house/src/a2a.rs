//! The A2A gateway (issue 39; docs/SPEC.md "A2A gateway"; decision 0075): any A2A 1.0 client
//! reaches a listed agent by JSON-RPC at `POST /agents/:local/a2a`, even while it is offline.
//!
//! `SendMessage` judges the caller's message (`nyx5_rules::a2a::message`: only the parts read
//! travel on), decides who is calling (unverified, as email is; or a Nyx5 agent whose proof
//! verified), applies the agent's lists, its inbox policy and a rate per caller site, and writes
//! in one batch the task, the rate count and an unsigned envelope from `a2a@<house>` in the
//! agent's mailbox. The agent answers with a `result` envelope to `a2a@` (`nyx5 send --plain
//! --type result --in-reply-to <envelope>`), which `a2a_tasks::Tasks::answer` turns into the
//! task's new state, message and artifacts. A task bound to an escrow that names `a2a@` its
//! arbiter settles it before its end is written: released when completed, refunded when it
//! failed, was rejected or canceled.

use nyx5_proto::card::AgentCard;
use nyx5_proto::crypto::Context;
use nyx5_proto::envelope::{Content, Draft, Kind};
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Error, ErrorKind, Refusal, Verified, b64};
use nyx5_rules::a2a::{self as rules, Call, EXT, GATEWAY, State, TASK_MEDIA};
use nyx5_rules::policy::{self, Policy};

use crate::a2a_tasks::{task_of, unknown_task};
use crate::http::Response;
use crate::ports::{Db, Net, PortError};
use crate::view::{Core, Post, view};
use crate::{port_error, store};

/// What one agent's tasks may hold (ended ones too, until forgotten): 10,000 tasks and 64 MiB
/// of callers' messages and answers. The callers its allow list names are held to that alone;
/// every other caller (a stranger) together to half of it, and each stranger's share (the
/// unverified callers together, the verified callers of one site together) to 1,000 tasks and
/// 8 MiB: strangers cannot shut out the callers the agent knows, nor one stranger the others
/// before it takes four sites.
pub const ROOM: store::a2a::Room = store::a2a::Room {
    tasks: 10_000,
    bytes: 64 << 20,
    strangers_tasks: 5_000,
    strangers_bytes: 32 << 20,
    share_tasks: 1_000,
    share_bytes: 8 << 20,
};
/// The caller's messages one task keeps, in bytes at most (a row stays well within D1's 2 MB,
/// with an answer of up to the envelope limit beside them).
const MAX_REQUEST_BYTES: usize = 512 << 10;
/// A ListTasks page's bytes, at most (past its first task).
const LIST_PAGE_BYTES: usize = 2 << 20;
/// The prefix of the gateway's rate windows.
const BUCKET_PREFIX: &str = "a2a:";

/// The gateway, over one call's borrows.
pub struct Gateway<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Gateway);

fn param_id(params: &Object, name: &str) -> Result<String, Error> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(str::to_owned)
        .ok_or_else(|| Refusal::BadA2aRequest.because(format!("`{name}` is required")))
}

fn opt_count(params: &Object, name: &str, max: i64) -> Result<Option<i64>, Error> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_safe_integer()
            .filter(|n| (0..=max).contains(n))
            .map(Some)
            .ok_or_else(|| Refusal::BadA2aRequest.because(format!("`{name}` is an integer from 0 to {max}"))),
    }
}

/// Who is calling, as the gate decided.
struct Caller {
    /// A Nyx5 agent whose proof verified.
    address: Option<Address>,
    /// The proof, kept in the envelope so the agent can check it too.
    proof: Option<Object>,
    /// The escrow it pays with.
    contract: Option<String>,
}

impl<'h, D: Db, N: Net> Gateway<'h, D, N> {
    /// `a2a@<house>`.
    pub fn gateway_address(&self) -> Result<Address, Error> {
        Address::new(GATEWAY, &self.config.domain)
    }

    /// One JSON-RPC call to listed agent `local` from `client` (its network, as
    /// `routes::agents::client` names it, when known): the answer, a JSON-RPC response whose HTTP
    /// status is the refusal's code when it failed.
    pub async fn rpc(&self, local: &str, body: &[u8], client: Option<&str>) -> Response {
        let parsed = Value::parse(body, self.config.max_bytes)
            .map_err(|e| Refusal::BadA2aJson.because(format!("the body is not JSON: {}", e.reason)));
        let id = parsed.as_ref().map(rules::request_id).unwrap_or(Value::Null);
        let result = match parsed.and_then(|v| rules::call(&v)) {
            Ok(call) if matches!(call.method.as_str(), "SendStreamingMessage" | "SubscribeToTask") => {
                match self.stream(local, &call, client).await {
                    Ok(resp) => return resp,
                    Err(e) => Err(e),
                }
            }
            Ok(call) => self.dispatch(local, &call, client).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => Response::json(200, &rules::success(&id, v)),
            Err(e) => Response::json(e.kind.code(), &rules::failure(&id, &e)),
        }
    }

    async fn dispatch(&self, local: &str, call: &Call, client: Option<&str>) -> Result<Value, Error> {
        let agent = self.listed_agent(local).await?;
        match call.method.as_str() {
            "SendMessage" => {
                let t = self.send(&agent, &call.params, client).await?;
                Ok(Value::Object(obj([("task", t.to_wire(None, true))])))
            }
            "GetTask" => {
                let id = param_id(&call.params, "id")?;
                let history = opt_count(&call.params, "historyLength", 1000)?;
                let task = self.task(local, &id).await?;
                Ok(task.to_wire(history.and_then(|n| usize::try_from(n).ok()), true))
            }
            "ListTasks" => self.list(local, &call.params).await,
            "CancelTask" => self.cancel(local, &param_id(&call.params, "id")?).await,
            "CreateTaskPushNotificationConfig" => {
                let task = param_id(&call.params, "taskId")?;
                self.task(local, &task).await?;
                let push = self.judged_push(&Value::Object(call.params.clone()))?;
                self.batch(vec![store::a2a::set_push(local, &task, Some(&push.to_value().canonical_string()))]).await?;
                Ok(push.to_wire(&task))
            }
            "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => {
                let task = param_id(&call.params, "taskId")?;
                let row = store::a2a::get(self.db, local, &task).await?.ok_or_else(|| unknown_task(&task))?;
                let push =
                    row.text("push").and_then(|p| Value::parse_str(p).ok()).and_then(|v| rules::Push::from_value(&v));
                let wanted = call.params.get("id").and_then(Value::as_str);
                let found = push.filter(|p| wanted.is_none_or(|w| w == p.id));
                match call.method.as_str() {
                    "ListTaskPushNotificationConfigs" => {
                        let configs: Vec<Value> = found.iter().map(|p| p.to_wire(&task)).collect();
                        Ok(Value::Object(obj([("configs", Value::Array(configs)), ("nextPageToken", "".into())])))
                    }
                    "GetTaskPushNotificationConfig" => found
                        .map(|p| p.to_wire(&task))
                        .ok_or_else(|| Refusal::UnknownA2aTask.because(format!("task {task} has no such push config"))),
                    _ => {
                        if found.is_some() {
                            self.batch(vec![store::a2a::set_push(local, &task, None)]).await?;
                        }
                        Ok(Value::Object(Object::new()))
                    }
                }
            }
            "GetExtendedAgentCard" => Err(Refusal::A2aUnsupported.because("there is no extended card")),
            m => Err(Refusal::UnknownA2aMethod.because(format!("no A2A method {m:?} here"))),
        }
    }

    /// `SendStreamingMessage` (as `SendMessage`) and `SubscribeToTask`: Server-Sent Events
    /// following the task (`crate::a2a_stream`), the first of them the task as it is.
    async fn stream(&self, local: &str, call: &Call, client: Option<&str>) -> Result<Response, Error> {
        let agent = self.listed_agent(local).await?;
        let t = if call.method == "SubscribeToTask" {
            self.task(local, &param_id(&call.params, "id")?).await?
        } else {
            self.send(&agent, &call.params, client).await?
        };
        Ok(crate::a2a_stream::open(&call.id, &t, self.now().millis(), self.config.live_bell))
    }

    /// A push notification config, judged, its URL allowed now by the policy for URLs strangers
    /// choose (`a2a_tasks::push_policy`); it is checked again when used.
    fn judged_push(&self, v: &Value) -> Result<rules::Push, Error> {
        let p = rules::push(v)?;
        crate::a2a_tasks::push_policy(self.config)
            .check(&p.url)
            .map_err(|r| Refusal::BadA2aPushUrl.because(format!("the push `url` is refused: {r}")))?;
        Ok(p)
    }

    /// The card of listed agent `local` (404 for anything else, as its A2A card is).
    async fn listed_agent(&self, local: &str) -> Result<Verified<AgentCard>, Error> {
        let missing = || Refusal::UnknownAgent.because(format!("no listed agent {local}@{}", self.config.domain));
        if self.lookup().system_card(local).is_some() || crate::auth::RESERVED.contains(&local) {
            return Err(missing());
        }
        let card = self.lookup().local_card(local).await?.ok_or_else(missing)?;
        if !card.listed() {
            return Err(missing());
        }
        Ok(card)
    }

    async fn task(&self, local: &str, id: &str) -> Result<rules::Task, Error> {
        let row = store::a2a::get(self.db, local, id).await?.ok_or_else(|| unknown_task(id))?;
        task_of(&row, &self.config.domain)
    }

    /// Checks a Nyx5 caller's proof: its time, its card (fetched through the outbound policy
    /// when it is another house's) and its signature over [`rules::call_document`].
    async fn caller(&self, m: &rules::Message, to: &Address) -> Result<Caller, Error> {
        let Some(claim) = &m.claim else { return Ok(Caller { address: None, proof: None, contract: None }) };
        let bad = |why: &str| Refusal::BadCallerProof.because(format!("the caller's proof {why}"));
        let now = self.now().millis();
        if (claim.ts.millis() - now).abs() > rules::PROOF_SKEW_MS {
            return Err(bad("is more than 5 minutes from this house's clock"));
        }
        let sig: [u8; 64] = b64::decode_array(&claim.sig).ok_or_else(|| bad("has no signature (`sig`, base64url)"))?;
        let card = self
            .lookup()
            .resolve_agent(&claim.from, false)
            .await
            .map_err(|e| bad(&format!("names {} whose card could not be had: {}", claim.from, e.reason)))?;
        if !card.sig().verify(Context::A2aCall, &rules::call_document(m, claim, to), &sig) {
            return Err(bad(&format!("is not signed by {}'s current key", claim.from)));
        }
        // What the caller's own card allows it: a subagent's delegation scopes the tasks it
        // sends, as it scopes its mail (`check_send`); and an agent of this house under a hold
        // (§7c) sends nothing a person has not approved, so it cannot call past it here.
        card.check_send(Kind::Task.as_str(), to.domain())?;
        if claim.from.domain() == self.config.domain {
            let drafts = crate::drafts::Drafts { core: self.core };
            if !drafts.holds_over(claim.from.local()).await?.is_empty() {
                return Err(Refusal::RelayRequired.because(format!(
                    "{} is held for approval: its calls go as mail it sends, which a person approves",
                    claim.from
                )));
            }
        }
        let mut proof = obj([("ts", claim.ts.to_rfc3339().into()), ("sig", claim.sig.as_str().into())]);
        if let Some(c) = &claim.contract {
            proof.insert("contract".into(), c.as_str().into());
        }
        Ok(Caller { address: Some(claim.from.clone()), proof: Some(proof), contract: claim.contract.clone() })
    }

    /// The escrow `contract` may pay for a task of `caller` to `agent` when it is held, its buyer
    /// is the caller, its seller the agent and its arbiter `a2a@` here, and no task has it.
    async fn check_payment(&self, contract: &str, caller: &Address, agent: &Address) -> Result<Object, Error> {
        let why = |s: String| Refusal::BadTaskPayment.because(s);
        let row = store::libro::contract(self.db, contract)
            .await?
            .ok_or_else(|| why(format!("no contract {contract} here")))?;
        let record = Value::parse_str(row.text("record").unwrap_or("{}"))?;
        let r = record.as_object().cloned().unwrap_or_default();
        let field = |n: &str| r.get(n).and_then(Value::as_str).unwrap_or_default().to_owned();
        let gateway = self.gateway_address()?;
        if field("kind") != "escrow" || field("state") != "held" {
            return Err(why(format!("{contract} is not an escrow held now")));
        }
        if field("buyer") != caller.as_str()
            || field("seller") != agent.as_str()
            || field("arbiter") != gateway.as_str()
        {
            return Err(why(format!(
                "{contract} must be an escrow whose buyer is {caller}, whose seller is {agent} and whose arbiter is {gateway}"
            )));
        }
        // What the agent is told the task pays: the escrow's price and what it is for.
        let mut told = obj([("contract", contract.into())]);
        for k in ["price", "currency", "concept"] {
            if let Some(v) = r.get(k) {
                told.insert(k.into(), v.clone());
            }
        }
        Ok(told)
    }

    /// `SendMessage`: a new task (or the next message of one waiting for input) in the agent's
    /// mailbox, in `submitted` (or the task a verified caller's message began already).
    async fn send(
        &self,
        agent: &Verified<AgentCard>,
        params: &Object,
        client: Option<&str>,
    ) -> Result<rules::Task, Error> {
        let to = agent.address().clone();
        let local = to.local().to_owned();
        let m = rules::message(params.get("message"))?;
        let push = match params
            .get("configuration")
            .and_then(Value::as_object)
            .and_then(|c| c.get("taskPushNotificationConfig"))
        {
            None | Some(Value::Null) => None,
            Some(p) => Some(self.judged_push(p)?.to_value().canonical_string()),
        };
        let caller = self.caller(&m, &to).await?;
        // A verified caller's message id is its own: sent again, the same task answers.
        if let Some(from) = &caller.address
            && let Some(row) = store::a2a::by_message(self.db, &local, from.as_str(), &m.message_id).await?
        {
            return task_of(&row, &self.config.domain);
        }
        // The task: the one waiting for this input, or a new one in the context given (one the
        // house gave this agent) or a new context.
        // A waiting task's share is the one its first message counted in.
        let mut waiting_share = String::new();
        let waiting = match &m.task_id {
            Some(id) => {
                let row = store::a2a::get(self.db, &local, id).await?.ok_or_else(|| unknown_task(id))?;
                if row.text("caller") != caller.address.as_ref().map(Address::as_str) {
                    return Err(unknown_task(id));
                }
                let t = task_of(&row, &self.config.domain)?;
                waiting_share = row.text("share").unwrap_or("unverified").to_owned();
                if t.state != State::InputRequired {
                    return Err(Refusal::TaskNotCancelable.because(format!("task {id} is not waiting for input")));
                }
                if caller.contract.is_some() {
                    return Err(Refusal::BadTaskPayment.because("an escrow is named on a task's first message"));
                }
                Some(t)
            }
            None => None,
        };
        if let Some(t) = &waiting {
            let kept: usize = t.request.iter().map(|m| m.canonical().len()).sum();
            if kept + m.to_wire("", "").canonical().len() > MAX_REQUEST_BYTES {
                return Err(Refusal::TooManyA2aTasks.because(format!(
                    "task {} holds as much of its caller's messages as a task may ({MAX_REQUEST_BYTES} bytes): begin another",
                    t.id
                )));
            }
        }
        if waiting.is_some() && push.is_some() {
            return Err(Refusal::BadA2aRequest
                .because("a task's push config is set on its first message, or by CreateTaskPushNotificationConfig"));
        }
        let context = match (&waiting, &m.context_id) {
            (Some(t), _) => t.context.clone(),
            (None, Some(c)) => {
                let caller_of = caller.address.as_ref().map(Address::as_str);
                if !store::a2a::context_known(self.db, &local, c, caller_of).await? {
                    return Err(
                        Refusal::BadA2aRequest.because(format!("contextId {c} is not one this agent's tasks have"))
                    );
                }
                c.clone()
            }
            (None, None) => self.new_id(),
        };
        let payment = match (&caller.contract, &caller.address) {
            (Some(contract), Some(from)) => Some(self.check_payment(contract, from, &to).await?),
            _ => None,
        };
        let task_id = waiting.as_ref().map_or_else(|| self.new_id(), |t| t.id.clone());
        // Each round of a task has an envelope of its own, whatever message id the caller reuses.
        let round = waiting.as_ref().map_or(0, |t| t.request.len());
        let envelope_id = rules::envelope_id(&self.config.domain, &task_id, &format!("{}#{round}", m.message_id));

        // Lists, policy and rate, as the email bridge reads them: a Nyx5 caller by its address and
        // site; an unverified caller by no list (any name it gives is its own choice) and by its
        // network for the rate.
        let now = self.now();
        let window = now.millis() / 60_000;
        let site = caller.address.as_ref().map(|a| crate::site::site(a.domain()));
        let (blocks, allows) = match &caller.address {
            Some(a) => (policy::block_entries(a, crate::site::psl()), policy::sender_entries(a).to_vec()),
            None => (Vec::new(), Vec::new()),
        };
        // The caller's rate window: a verified caller's site's; an unverified caller's network's
        // (an IPv4 address, an IPv6 /64), or, where the runtime names none, every unverified
        // caller's together.
        let suffix = match (site, client) {
            (None, Some(net)) => format!(":unverified:{net}"),
            _ => format!(":{}", store::a2a::share(false, site)),
        };
        let list = |v: &[String]| crate::inboxes::json_list(v.iter().map(String::as_str));
        let locals = crate::inboxes::json_list([local.as_str()]);
        let lookup = store::mailbox::Lookup {
            locals: &locals,
            envelope_id: &envelope_id,
            blocks: &list(&blocks),
            allows: &list(&allows),
            vouchers: "[]",
            bucket_prefix: BUCKET_PREFIX,
            bucket_suffix: &suffix,
            window,
        };
        let facts = store::mailbox::inbound_facts(self.db, &lookup)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {to}")))?;
        let who = caller.address.as_ref().map_or_else(|| "an unverified A2A caller".to_owned(), Address::to_string);
        if facts.int("blocked").unwrap_or(0) != 0 {
            return Err(Refusal::SenderBlocked.because(format!("{who} is blocked by {to}")));
        }
        let allowed = facts.int("allowed").unwrap_or(0) != 0;
        if Policy::of(agent.inbox()) != Policy::Open && !allowed {
            return Err(Refusal::NotOnAllowlist.because(format!(
                "{to} takes A2A calls only from Nyx5 agents on its allowlist, and {who} is not one"
            )));
        }
        let cap = self.config.email_per_sender_per_minute;
        if !allowed && facts.int("rate_count").unwrap_or(0) >= cap {
            return Err(too_many(&who));
        }
        // Its share of the agent's tasks: the allowed callers', or its site's or the unverified's.
        let share = store::a2a::share(allowed, site);

        // The envelope: unsigned, from the gateway, saying what the gate judged.
        let wire = m.to_wire(&context, &task_id);
        let mut note = obj([
            ("task", task_id.as_str().into()),
            ("context", context.as_str().into()),
            ("caller", caller.address.as_ref().map(Address::as_str).into()),
            ("verified", Value::Bool(caller.address.is_some())),
        ]);
        if let Some(p) = caller.proof {
            note.insert("proof".into(), Value::Object(p));
        }
        if let Some(p) = payment {
            note.insert("contract".into(), p.get("contract").cloned().unwrap_or(Value::Null));
            note.insert("payment".into(), Value::Object(p));
        }
        let body =
            obj([("task", task_id.as_str().into()), ("context", context.as_str().into()), ("message", wire.clone())]);
        let gateway = self.gateway_address()?;
        let mut draft = Draft::new(
            envelope_id.clone(),
            gateway.clone(),
            vec![to.clone()],
            now,
            Content::new(TASK_MEDIA, Value::Object(body)),
        );
        draft.kind = Kind::Task;
        draft.thread = Some(context.clone());
        draft.extra = obj([
            ("extensions", Value::Object(obj([(EXT, Value::Object(note))]))),
            ("from_verified", Value::Bool(false)),
            ("via", "a2a".into()),
        ]);
        let env = draft.build()?;
        env.check_size(self.config.max_bytes)?;
        let quota = self.config.quota();
        let size = i64::try_from(env.canonical_str().len()).unwrap_or(i64::MAX);
        let held = crate::mailbox::Held::of_facts(&facts);
        if let Some(full) = crate::mailbox::quota_full(&local, held, size, quota) {
            return Err(full);
        }

        // One batch: the rate count, the task (new, or the waiting one given its next message),
        // the envelope.
        let mut stmts = Vec::with_capacity(5);
        if !allowed {
            stmts.push(store::agents::count_in_window(&format!("{BUCKET_PREFIX}{local}{suffix}"), window, cap));
        }
        match &waiting {
            Some(t) => {
                let mut request = t.request.clone();
                request.push(wire);
                let request = Value::Array(request).canonical_string();
                stmts.push(crate::guard!(
                    "a2a_task_waits",
                    "EXISTS (SELECT 1 FROM a2a_tasks WHERE id = ?1 AND state = 'input-required')",
                    t.id.as_str()
                ));
                // The task grows: its share's bytes must have room, as a new task's would.
                stmts.push(store::a2a::room(&local, &ROOM.growing(), &waiting_share));
                stmts.push(store::a2a::followed(&t.id, &envelope_id, &request, now.millis()));
            }
            None => {
                let request = Value::Array(vec![wire]).canonical_string();
                stmts.push(store::a2a::room(&local, &ROOM, &share));
                stmts.push(store::a2a::insert(
                    &store::a2a::New {
                        id: &task_id,
                        local: &local,
                        context: &context,
                        envelope: &envelope_id,
                        caller: caller.address.as_ref().map(Address::as_str),
                        message_id: &m.message_id,
                        request: &request,
                        contract: caller.contract.as_deref(),
                        push: push.as_deref(),
                        share: &share,
                    },
                    now.millis(),
                ));
            }
        }
        stmts.push(store::mailbox::insert(
            &local,
            &envelope_id,
            gateway.as_str(),
            env.canonical_str(),
            now.millis(),
            quota,
        ));
        match crate::live::batch(self.db, self.post.bell, stmts).await {
            // The caller's next message moves a task someone may be streaming.
            Ok(_) => {
                if let Some(t) = &waiting {
                    self.post.bell.arrived(&rules::stream_key(&t.id));
                }
            }
            Err(PortError::Constraint { name }) if name == store::constraint::RATE_CAP => return Err(too_many(&who)),
            Err(PortError::Constraint { name }) if name == store::constraint::GUARD => {
                let full = || {
                    Refusal::TooManyA2aTasks
                        .because(format!("{to} holds as many A2A tasks (or bytes of them) as it may from such callers"))
                };
                return Err(match waiting {
                    // Still waiting: it was the room that refused it.
                    Some(t) if self.task(&local, &t.id).await.is_ok_and(|now| now.state == State::InputRequired) => {
                        full()
                    }
                    Some(t) => Refusal::TaskNotCancelable.because(format!("task {} is not waiting for input", t.id)),
                    None => full(),
                });
            }
            Err(PortError::Constraint { name }) if name == store::constraint::MAILBOX_QUOTA => {
                let full = crate::mailbox::Held { envelopes: quota.max_envelopes, bytes: 0 };
                return Err(crate::mailbox::quota_full(&local, full, size, quota)
                    .unwrap_or_else(|| Refusal::MailboxFull.because("the mailbox is full, try again later")));
            }
            // A unique index: the same verified message (or the same escrow) raced this one.
            Err(PortError::Constraint { name }) if name.starts_with("a2a_tasks.") => {
                if let Some(from) = &caller.address
                    && let Some(row) = store::a2a::by_message(self.db, &local, from.as_str(), &m.message_id).await?
                {
                    return task_of(&row, &self.config.domain);
                }
                return Err(Refusal::BadTaskPayment.because("that escrow already pays for another task"));
            }
            Err(e) => return Err(port_error(e)),
        }
        if let Some(hook) = facts.text("webhook") {
            self.mailbox().push(hook, &to, &env);
        }
        self.task(&local, &task_id).await
    }

    fn mailbox(&self) -> crate::mailbox::Mailbox<'h, D, N> {
        crate::mailbox::Mailbox { core: self.core, post: self.post }
    }

    /// `ListTasks`: the tasks of one context (required: a context id is the caller's to know),
    /// `pageSize` (1–100, default 50) at a time from `pageToken`.
    async fn list(&self, local: &str, params: &Object) -> Result<Value, Error> {
        let context = param_id(params, "contextId")?;
        let size = opt_count(params, "pageSize", rules::MAX_PAGE)?.filter(|n| *n > 0).unwrap_or(50);
        let offset = match params.get("pageToken").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            None => 0,
            Some(t) => t
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=100_000).contains(n))
                .ok_or_else(|| Refusal::BadA2aRequest.because("`pageToken` is one this house gave"))?,
        };
        let history = opt_count(params, "historyLength", 1000)?.and_then(|n| usize::try_from(n).ok());
        let artifacts = matches!(params.get("includeArtifacts"), Some(Value::Bool(true)));
        let budget = i64::try_from(LIST_PAGE_BYTES).unwrap_or(i64::MAX);
        let rows = store::a2a::list(self.db, local, &context, size, offset, budget).await?;
        let total = store::a2a::count(self.db, local, &context).await?;
        // A page stops at 2 MiB of tasks (the first always goes), as a mailbox page does.
        let mut tasks = Vec::new();
        let mut bytes = 0usize;
        for r in &rows {
            let t = task_of(r, &self.config.domain)?.to_wire(Some(history.unwrap_or(0)), artifacts);
            bytes += t.canonical().len();
            if !tasks.is_empty() && bytes > LIST_PAGE_BYTES {
                break;
            }
            tasks.push(t);
        }
        let next = offset + i64::try_from(tasks.len()).unwrap_or(0);
        let mut out = obj([("tasks", Value::Array(tasks)), ("pageSize", size.into()), ("totalSize", total.into())]);
        out.insert("nextPageToken".into(), if next < total { next.to_string().into() } else { "".into() });
        Ok(Value::Object(out))
    }

    /// `CancelTask`: an open task ends `canceled`, its escrow refunded first (a refund the Libro
    /// refuses for good means the escrow was settled otherwise: the task then cannot be canceled).
    async fn cancel(&self, local: &str, id: &str) -> Result<Value, Error> {
        let t = self.task(local, id).await?;
        if t.state.is_final() {
            return Err(Refusal::TaskNotCancelable.because(format!("task {id} has ended ({})", t.state.as_str())));
        }
        if let Some(contract) = &t.contract {
            self.tasks().settle(&t, contract, "refund", State::Canceled).await.map_err(|e| {
                if e.kind.is_temporary() || e.kind == ErrorKind::Internal {
                    e
                } else {
                    Refusal::TaskNotCancelable.because(format!("task {id}'s escrow cannot be refunded: {}", e.reason))
                }
            })?;
        }
        let now = self.now().millis();
        let write = if t.contract.is_some() {
            store::a2a::ended(id, State::Canceled.as_str(), None, now)
        } else {
            store::a2a::moved(id, t.state.as_str(), State::Canceled.as_str(), None, now)
        };
        let changes = self.batch(vec![write]).await?;
        if changes.first().is_none_or(|n| *n == 0) {
            return Err(Refusal::TaskNotCancelable.because(format!("task {id} moved meanwhile; read it again")));
        }
        self.post.bell.arrived(&rules::stream_key(id));
        let row = store::a2a::get(self.db, local, id).await?.ok_or_else(|| unknown_task(id))?;
        self.tasks().told(&row)?;
        Ok(task_of(&row, &self.config.domain)?.to_wire(None, true))
    }

    fn tasks(&self) -> crate::a2a_tasks::Tasks<'h, D, N> {
        crate::a2a_tasks::Tasks { core: self.core, post: self.post }
    }

    async fn batch(&self, stmts: Vec<crate::ports::Stmt>) -> Result<Vec<u64>, Error> {
        crate::live::batch(self.db, self.post.bell, stmts).await.map_err(port_error)
    }
}

fn too_many(who: &str) -> Error {
    Refusal::TooManyA2aCalls
        .because(format!("too many A2A calls from {who} to this agent this minute; try again shortly"))
}
