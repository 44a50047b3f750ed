//! Drafts a person approves (docs/SPEC.md §7c; issue 38 §3): holds on agents, the envelopes
//! they keep at the house, and the approvers' decisions.
//!
//! A hold is kept **at the house**: the outbox's trigger (migration 0030) takes no row of a held
//! tree that was not judged against its holds as they are now, or approved, so a misbehaving
//! agent cannot skip it by any path into the queue. The send route queues as before; when the
//! trigger refuses, it asks [`Drafts::judge`], and either queues again with the version judged
//! or keeps the envelope as a draft ([`Drafts::hold`]). An approval that completes a draft
//! queues it in the batch that records it ([`Drafts::approve`] plans; the route queues), so an
//! approved draft leaves exactly once: the outbox's envelope id is unique, and the approval's
//! guard fails the batch when the draft changed.

use nyx5_proto::json::{field, obj};
use nyx5_proto::seal::{ReaderKey, readers_from_value, readers_to_value};
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Address, Envelope, Error, Object, Refusal, Timestamp, Value, Verified};
use nyx5_rules::drafts::{self as rules, Bound, Exit, Hold, Setter};

use crate::ports::{Db, Net, PortError, Row, Stmt};
use crate::store::drafts as store;
use crate::store::queue::root_address;
use crate::view::{Core, view};
use crate::{guard, port_error};

/// The holds, drafts and decisions of the house's agents (`House::drafts`).
pub struct Drafts<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
}

view!(Drafts);

/// The most approvers one envelope waits for: one per hold over its sender, and a name has at
/// most [`rules::MAX_CHAIN`] labels.
pub const MAX_APPROVERS: usize = rules::MAX_CHAIN;

/// What [`Drafts::judge`] found for an envelope whose tree has holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// No hold covers it: queue it, judged against this version of the tree's holds.
    Pass { version: String },
    /// It waits for these approvers (each once, nearest hold first), judged against this
    /// version of the tree's holds.
    Hold { approvers: Vec<String>, version: String },
}

/// What an approval does, decided on the draft as read.
#[derive(Debug)]
pub enum Approval {
    /// More approvers must still say yes: this statement records this one (one row, or none
    /// when the draft changed).
    Partial(Stmt),
    /// The last yes: `before` records it and fails the batch unless it did; queue the envelope
    /// after them in the same batch.
    Last { before: Vec<Stmt>, envelope: String },
}

/// The rows of `rows` (a tree's holds) on `local` or an agent above it, nearest first.
fn over(rows: Vec<Row>, local: &str) -> Vec<Row> {
    let mut over: Vec<Row> =
        rows.into_iter().filter(|r| r.text("local").is_some_and(|l| rules::is_self_or_above(l, local))).collect();
    over.sort_by_key(|r| std::cmp::Reverse(r.text("local").map_or(0, str::len)));
    over
}

/// Whether pushing mail of type `kind`, accepted for the local agent `to`, to its webhook `hook`
/// goes where none of its sender's `holds` ([`Drafts::push_holds`]) holds it: judged as mail to
/// `to` at the webhook's host. An approved draft is judged too: its approver let it go to its
/// recipients, not to wherever their webhooks point now (the mailbox keeps it either way).
pub fn push_allowed(holds: &[Hold], to: &Address, hook: &str, kind: &str, house: &str) -> bool {
    let bound = [Bound { to: to.clone(), exit: webhook_exit(hook) }];
    !holds.iter().any(|h| h.holds(&bound, kind, house))
}

/// Refuses an envelope whose `signature`, `encrypted` or wrapped keys carry members of their own
/// (400): readers ignore them, so an approver would not be shown them, yet they would leave with
/// the envelope. Honest clients write none.
fn plumbing_is_known(env: &Envelope) -> Result<(), Error> {
    let o = env.object();
    let extra = |v: Option<&Value>, known: &[&str]| {
        v.and_then(Value::as_object).and_then(|m| m.keys().find(|k| !known.contains(&k.as_str())).cloned())
    };
    let encrypted = o.get("encrypted");
    let keys = encrypted.and_then(Value::as_object).and_then(|e| e.get("keys")).and_then(Value::as_object);
    let found = extra(o.get("signature"), &["alg", "kid", "value"])
        .map(|k| format!("signature.{k}"))
        .or_else(|| {
            extra(encrypted, &["alg", "epk", "iv", "ct", "tag", "commit", "keys"]).map(|k| format!("encrypted.{k}"))
        })
        .or_else(|| {
            keys.and_then(|m| m.values().find_map(|w| extra(Some(w), &["iv", "ct", "tag"])))
                .map(|k| format!("encrypted.keys[].{k}"))
        });
    match found {
        Some(member) => Err(Refusal::BadMember.because(format!(
            "`{member}` is not a member the protocol knows: a held envelope carries nothing its approver cannot be shown"
        ))),
        None => Ok(()),
    }
}

/// Where a webhook pushes: its host as the outbound fetch parses the URL (the WHATWG reading, so
/// `https://evil.example\@h.test/` is at `evil.example`), lower case and without a final dot; a
/// URL that does not parse, or has no host, reaches anywhere.
fn webhook_exit(url: &str) -> Exit {
    match nyx5_client::weburl::WebUrl::parse(url).as_ref().and_then(|u| u.host_str()) {
        Some(host) => Exit::Domain(host.trim_end_matches('.').to_ascii_lowercase()),
        None => Exit::Anywhere,
    }
}

/// A draft's state as its readers see it: `expired` once its time passed undecided.
fn shown_state(row: &Row, now: i64) -> &'static str {
    match row.text("state") {
        Some("approved") => "approved",
        Some("declined") => "declined",
        _ if row.int("expires").unwrap_or(0) <= now => "expired",
        _ => "pending",
    }
}

fn strings(text: Option<&str>) -> Vec<String> {
    Value::parse_str(text.unwrap_or("[]"))
        .ok()
        .and_then(|v| v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()))
        .unwrap_or_default()
}

impl<'h, D: Db, N: Net> Drafts<'h, D, N> {
    /// The holds over `local`: on itself and each agent above it, nearest first, as rows.
    pub async fn holds_over(&self, local: &str) -> Result<Vec<Row>, Error> {
        let address = Address::new(local, &self.config.domain)
            .map_err(|_| Refusal::UnknownAgent.because(format!("no agent {local:?}")))?;
        Ok(over(store::holds_of_tree(self.db, &root_address(address.as_str())).await?, local))
    }

    /// Judges `env` against its sender's tree's holds as they are now.
    pub async fn judge(&self, env: &Envelope) -> Result<Judgement, Error> {
        self.judge_to(env.from(), env.to(), env.kind().as_str()).await
    }

    /// Judges mail of type `kind` from `sender` to `to` against the sender's tree's holds as they
    /// are now: every hold on the sender or an agent above it, however deep. Where the mail goes
    /// is judged as [`Bound`]s: a local recipient with a webhook is also at the webhook's domain,
    /// one of the house's own agents (an operation) reaches anyone, and an empty `to` (an email
    /// address that is no Nyx5 address) is a stranger to every hold.
    pub async fn judge_to(&self, sender: &Address, to: &[Address], kind: &str) -> Result<Judgement, Error> {
        let bound = self.bounds(to).await?;
        self.judge_bounds(sender, &bound, kind).await
    }

    /// Judges mail of type `kind` from `sender` that goes where `bound` says.
    async fn judge_bounds(&self, sender: &Address, bound: &[Bound], kind: &str) -> Result<Judgement, Error> {
        let rows = store::holds_of_tree(self.db, &root_address(sender.as_str())).await?;
        let version = rules::version(&rows.iter().filter_map(|r| r.int("seq")).collect::<Vec<_>>());
        let covering = over(rows, sender.local());
        if covering.is_empty() {
            return Ok(Judgement::Pass { version });
        }
        let mut approvers: Vec<String> = Vec::new();
        for row in &covering {
            let rule = Value::parse_str(row.text("rule").unwrap_or("{}"))?;
            let hold = Hold::parse(rule.as_object().unwrap_or(&Object::new()))?;
            if bound.is_empty() || hold.holds(bound, kind, &self.config.domain) {
                let approver = row.text("approver").unwrap_or_default().to_owned();
                if !approvers.contains(&approver) {
                    approvers.push(approver);
                }
            }
        }
        Ok(if approvers.is_empty() { Judgement::Pass { version } } else { Judgement::Hold { approvers, version } })
    }

    /// The holds a push of `env` to a local agent's webhook is judged against
    /// ([`push_allowed`]): none for a sender of another house or a tree without holds over the
    /// sender, else every hold over the sender. Read once per envelope, before its pushes.
    pub async fn push_holds(&self, env: &Envelope) -> Result<Vec<Hold>, Error> {
        let sender = env.from();
        if sender.domain() != self.config.domain {
            return Ok(Vec::new());
        }
        over(store::holds_of_tree(self.db, &root_address(sender.as_str())).await?, sender.local())
            .iter()
            .map(|row| {
                let rule = Value::parse_str(row.text("rule").unwrap_or("{}"))?;
                Hold::parse(rule.as_object().unwrap_or(&Object::new()))
            })
            .collect()
    }

    /// Judges an email from `sender` to the email address `to` (docs/SPEC.md §7c): an email always
    /// leaves the house, so one to this house's own domain (its MX may send it anywhere) or to
    /// no Nyx5 address is a stranger at every domain.
    pub async fn judge_email(&self, sender: &Address, to: &str) -> Result<Judgement, Error> {
        let bound = match Address::parse(to) {
            Ok(a) if a.domain() != self.config.domain => Bound { to: a, exit: Exit::Address },
            Ok(a) => Bound { to: a, exit: Exit::Anywhere },
            Err(_) => Bound { to: sender.clone(), exit: Exit::Anywhere },
        };
        self.judge_bounds(sender, &[bound], "message").await
    }

    /// Where mail to `to` goes, as holds judge it (see [`Drafts::judge_to`]).
    async fn bounds(&self, to: &[Address]) -> Result<Vec<Bound>, Error> {
        let house = self.config.domain.as_str();
        let locals: Vec<&str> = to.iter().filter(|a| a.domain() == house).map(Address::local).collect();
        let hooks = if locals.is_empty() {
            Vec::new()
        } else {
            store::webhooks(self.db, &crate::inboxes::json_list(locals.iter().copied())).await?
        };
        Ok(to
            .iter()
            .map(|a| {
                let exit = if a.domain() != house {
                    Exit::Address
                } else if crate::libro::SYSTEM.contains(&a.local()) {
                    Exit::Anywhere
                } else {
                    match hooks.iter().find(|r| r.text("local") == Some(a.local())).and_then(|r| r.text("webhook")) {
                        Some(url) => webhook_exit(url),
                        None => Exit::Address,
                    }
                };
                Bound { to: a.clone(), exit }
            })
            .collect())
    }

    /// Keeps `env` (canonical `text`, `sha256`) as a draft for `approvers`. A sealed envelope
    /// needs each approver's content key in `readers` (the raw `readers` query value: base64url
    /// of `{"<address>": {epk, iv, ct, tag}}`), else 400 `approver_cannot_read`. Answers the draft's
    /// row as kept (a new one, or the same envelope held before).
    pub async fn hold(
        &self,
        env: &Verified<Envelope>,
        text: &str,
        sha256: &str,
        approvers: &[String],
        version: &str,
        readers: Option<&str>,
    ) -> Result<(bool, Row), Error> {
        let now = self.now();
        plumbing_is_known(env)?;
        let sealed = env.content().is_none();
        let kept = if sealed {
            let given = match readers {
                Some(raw) => {
                    let bytes = nyx5_proto::b64::decode(raw)
                        .ok_or_else(|| Refusal::BadEncrypted.because("`readers` is not base64url"))?;
                    let v = Value::parse(&bytes, nyx5_proto::limits::MAX_DOCUMENT_BYTES)?;
                    readers_from_value(&v, MAX_APPROVERS, "readers")?
                }
                None => VecMap::new(),
            };
            let mut kept: VecMap<Address, ReaderKey> = VecMap::new();
            let mut missing = Vec::new();
            for a in approvers {
                match Address::parse(a).ok().and_then(|addr| given.get(&addr).cloned().map(|w| (addr, w))) {
                    Some((addr, w)) => {
                        kept.insert(addr, w);
                    }
                    None => missing.push(a.as_str()),
                }
            }
            if !missing.is_empty() {
                return Err(Refusal::ApproverCannotRead.because(format!(
                    "this envelope waits for approval by {}: seal its content key for them too (`readers`)",
                    missing.join(", ")
                )));
            }
            Some(readers_to_value(&kept).canonical_string())
        } else {
            None
        };
        let by_age = env.created().millis().saturating_add(crate::outbound::MAX_CREATED_AGE_MS);
        let expires = [
            Some(now.millis().saturating_add(self.config.approval_ttl_ms)),
            env.expires().map(|e| e.millis()),
            Some(by_age),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(by_age);
        if expires <= now.millis() {
            return Err(
                Refusal::DraftExpired.because("the envelope is too old or expires too soon to wait for approval")
            );
        }
        let root = root_address(env.from().as_str());
        let draft = store::NewDraft {
            id: env.id(),
            root: &root,
            sender: env.from().as_str(),
            envelope: text,
            sha256,
            readers: kept,
            approvers,
            held_at: now.millis(),
            expires,
            version,
            cap: self.config.outbound_per_agent_per_minute,
        };
        let kept_before = |row: Row| {
            if row.text("sender") != Some(env.from().as_str()) || row.text("sha256") != Some(sha256) {
                return Err(Refusal::EnvelopeIdTaken
                    .because(format!("envelope id {} is already used for another envelope", env.id())));
            }
            Ok((false, row))
        };
        match self.db.batch(store::hold_draft(&draft)).await {
            Ok(changes) if changes.first() == Some(&0) => {
                return Err(Refusal::HoldChanged
                    .because("the holds on this agent changed while the house judged the envelope; send it again"));
            }
            Ok(_) => {}
            // The same envelope again is the draft kept before, whatever bound it meets now.
            Err(PortError::Constraint { name })
                if [store::BOUND, store::RATE, store::DRAFT_ID].contains(&name.as_str()) =>
            {
                if let Some(row) = store::draft(self.db, env.id()).await? {
                    return kept_before(row);
                }
                return Err(if name == store::RATE {
                    Refusal::TooManySends.because(format!(
                        "{root} may send {} envelopes a minute (with its subagents), drafts included; try again shortly",
                        self.config.outbound_per_agent_per_minute
                    ))
                } else {
                    Refusal::TooManyDrafts.because(format!(
                        "{root} (with its subagents) has 100 drafts waiting, 1,000 kept or 64 MiB of them; wait for some \
                         to be decided or to expire"
                    ))
                });
            }
            Err(e) => return Err(port_error(e)),
        }
        let row =
            store::draft(self.db, env.id()).await?.ok_or_else(|| Refusal::UnknownDraft.because("the draft is gone"))?;
        Ok((true, row))
    }

    /// Sets a hold on `local` for `actor` from `body` (`{approver, rule}`), replacing the one
    /// there if `actor` may (docs/SPEC.md §7c).
    pub async fn set_hold(&self, actor: &Setter, local: &str, body: &Object) -> Result<(), Error> {
        if let Some(k) = body.keys().find(|k| *k != "approver" && *k != "rule") {
            return Err(Refusal::BadMember.because(format!("unknown member `{k}`: a hold is `{{approver, rule}}`")));
        }
        let approver = Address::parse(field::str(body, "approver")?)?;
        rules::check_approver(&approver, local, &self.config.domain)?;
        let hold = Hold::parse(field::object(body, "rule")?)?;
        if crate::libro::SYSTEM.contains(&approver.local()) || crate::libro::SYSTEM.contains(&local) {
            return Err(Refusal::BadHold.because("the house's own agents neither approve drafts nor are held"));
        }
        if self.lookup().local_card(approver.local()).await?.is_none() {
            return Err(Refusal::BadHold.because(format!("no agent {approver} here to approve")));
        }
        if self.lookup().local_card(local).await?.is_none() {
            return Err(Refusal::UnknownAgent.because(format!("no agent {local}@{}", self.config.domain)));
        }
        let existing = store::hold_of(self.db, local).await?;
        let set_by = existing.as_ref().map(|r| Setter::parse(r.text("set_by").unwrap_or("operator")));
        rules::may_set(actor, local, set_by.as_ref())?;
        let address = self.registry().local_address(local)?;
        // An agent names itself, someone above the held agent, or someone who said it may ask
        // them: the asker's, the held agent's or its root's address on the approver's allow
        // list. Nobody is made an approver (and shown drafts) by a stranger; the operator may.
        let asker = match actor {
            Setter::Agent(a) => Some(format!("{a}@{}", self.config.domain)),
            Setter::Operator => None,
        };
        if let Some(asker) = asker.filter(|a| a != approver.as_str())
            && !rules::is_self_or_above(approver.local(), local)
        {
            let allows = crate::store::mailbox::lists(self.db, approver.local()).await?;
            let root = root_address(address.as_str());
            let consents = allows.iter().any(|r| {
                r.text("kind") == Some("allow")
                    && r.text("entry").is_some_and(|e| e == address.as_str() || e == root || e == asker)
            });
            if !consents {
                return Err(Refusal::BadHold.because(format!(
                    "{approver} has not agreed to approve for {address}: they put {address} (or {root}) on their \
                     allow list first (`nyx5 allow {address}`)"
                )));
            }
        }
        let now = self.now().millis();
        let mut stmts = store::set_hold(
            local,
            &root_address(address.as_str()),
            approver.as_str(),
            &hold.to_value().canonical_string(),
            actor.as_str(),
            now,
            existing.as_ref().and_then(|r| r.int("seq")),
        );
        stmts.push(store::decline_subtree(local, &root_address(address.as_str()), now, None));
        match self.db.batch(stmts).await {
            Ok(_) => Ok(()),
            Err(PortError::Constraint { name }) if name == store::HOLD_TAKEN => {
                Err(Refusal::HoldChanged.because("the hold changed while this request decided; ask again"))
            }
            Err(e) => Err(port_error(e)),
        }
    }

    /// Lifts the hold on `local` if `actor` may. Where there is none, `actor` is judged as if
    /// the agent had set one: whoever may not lift is refused either way, and learns nothing of
    /// whether a hold is there.
    pub async fn lift_hold(&self, actor: &Setter, local: &str) -> Result<bool, Error> {
        let existing = store::hold_of(self.db, local).await?;
        let set_by = existing
            .as_ref()
            .map_or_else(|| Setter::Agent(local.to_owned()), |r| Setter::parse(r.text("set_by").unwrap_or("operator")));
        rules::may_lift(actor, local, &set_by)?;
        let Some(existing) = existing else { return Ok(false) };
        let root = root_address(&format!("{local}@{}", self.config.domain));
        let seq = existing.int("seq").unwrap_or(0);
        let stmts =
            vec![store::decline_subtree(local, &root, self.now().millis(), Some(seq)), store::lift_hold(local, seq)];
        let changes = self.db.batch(stmts).await.map_err(port_error)?;
        if changes.get(1) != Some(&1) {
            return Err(Refusal::HoldChanged.because("the hold changed while this request decided; ask again"));
        }
        Ok(true)
    }

    /// The drafts `who` is asked to decide, and the ones it sent, as JSON without their
    /// envelopes (docs/SPEC.md §7c: one draft's is read alone).
    pub async fn list(&self, who: &Address) -> Result<(Vec<Value>, Vec<Value>), Error> {
        let now = self.now().millis();
        let asked = store::asked_of(self.db, who.as_str()).await?;
        let sent = store::sent_by(self.db, &root_address(who.as_str()), who.as_str()).await?;
        Ok((
            asked.iter().map(|r| draft_json(r, now, None)).collect(),
            sent.iter().map(|r| draft_json(r, now, None)).collect(),
        ))
    }

    /// The draft `id` as a decision's answer shows it: its state, never its envelope.
    pub async fn decided(&self, id: &str) -> Result<Value, Error> {
        let row = store::draft(self.db, id).await?.ok_or_else(|| Refusal::UnknownDraft.because("the draft is gone"))?;
        Ok(draft_json(&row, self.now().millis(), None))
    }

    /// The draft `id` as `who` may see it: an approver, with the envelope and its own key; the
    /// sender, without them; anyone else 404.
    pub async fn get(&self, who: &Address, id: &str) -> Result<Value, Error> {
        let row = self.readable(who, id).await?;
        let approver = strings(row.text("asks")).iter().any(|a| a == who.as_str());
        Ok(draft_json(&row, self.now().millis(), approver.then_some(who)))
    }

    async fn readable(&self, who: &Address, id: &str) -> Result<Row, Error> {
        let unknown = || Refusal::UnknownDraft.because(format!("no draft {id} waits here for {who}"));
        let row = store::draft(self.db, id).await?.ok_or_else(unknown)?;
        let asked = strings(row.text("asks")).iter().any(|a| a == who.as_str());
        if !asked && row.text("sender") != Some(who.as_str()) {
            return Err(unknown());
        }
        Ok(row)
    }

    /// Plans `approver`'s yes to draft `id` on the draft as read.
    pub async fn approve(&self, approver: &Address, id: &str) -> Result<Approval, Error> {
        let row = self.readable(approver, id).await?;
        let now = self.now().millis();
        let asks = strings(row.text("asks"));
        if !asks.iter().any(|a| a == approver.as_str()) {
            return Err(Refusal::NotTheApprover.because(format!("{approver} is not asked to approve draft {id}")));
        }
        match shown_state(&row, now) {
            "pending" => {}
            "expired" => return Err(Refusal::DraftExpired.because(format!("draft {id} expired undecided"))),
            state => return Err(Refusal::DraftDecided.because(format!("draft {id} is {state} already"))),
        }
        let before = row.text("approved_by").unwrap_or("[]").to_owned();
        let mut approved = strings(Some(&before));
        if approved.iter().any(|a| a == approver.as_str()) {
            return Err(Refusal::DraftDecided.because(format!("{approver} approved draft {id} already")));
        }
        approved.push(approver.as_str().to_owned());
        let last = asks.iter().all(|a| approved.contains(a));
        let after = Value::Array(approved.iter().map(|a| a.as_str().into()).collect()).canonical_string();
        let stmt = store::approve(id, &before, &after, last, approver.as_str(), now);
        if !last {
            return Ok(Approval::Partial(stmt));
        }
        let check = guard!(
            "draft_approved",
            "EXISTS (SELECT 1 FROM drafts WHERE id = ?1 AND state = 'approved' AND approved_by = ?2 AND decided_at = ?3)",
            id,
            after.as_str(),
            now
        );
        Ok(Approval::Last { before: vec![stmt, check], envelope: row.text("envelope").unwrap_or_default().to_owned() })
    }

    /// Records a partial approval planned by [`Drafts::approve`].
    pub async fn record(&self, stmt: Stmt) -> Result<(), Error> {
        let changes = self.db.batch(vec![stmt]).await.map_err(port_error)?;
        if changes.first() != Some(&1) {
            return Err(Refusal::DraftChanged.because("the draft changed while this request decided; ask again"));
        }
        Ok(())
    }

    /// `by`'s no to draft `id` (an approver, or its sender withdrawing it), with a `note`.
    pub async fn decline(&self, by: &Address, id: &str, note: Option<&str>) -> Result<(), Error> {
        let row = self.readable(by, id).await?;
        let now = self.now().millis();
        match shown_state(&row, now) {
            "pending" => {}
            "expired" => return Err(Refusal::DraftExpired.because(format!("draft {id} expired undecided"))),
            state => return Err(Refusal::DraftDecided.because(format!("draft {id} is {state} already"))),
        }
        let changes = self.db.batch(vec![store::decline(id, by.as_str(), note, now)]).await.map_err(port_error)?;
        if changes.first() != Some(&1) {
            return Err(Refusal::DraftChanged.because("the draft changed while this request decided; ask again"));
        }
        Ok(())
    }

    /// The draft `id`'s row (after a decision, for the answer).
    pub async fn row(&self, id: &str) -> Result<Option<Row>, Error> {
        store::draft(self.db, id).await
    }
}

/// A draft as JSON: `{id, sender, to, type, state, asks, approved_by, held_at, expires,
/// decided_at?, decided_by?, note?}`, and for an approver (`reader`) the `envelope` and its own
/// `key` (the content key wrapped for it, when sealed).
pub fn draft_json(row: &Row, now: i64, reader: Option<&Address>) -> Value {
    let env = Value::parse_str(row.text("envelope").unwrap_or("null")).unwrap_or(Value::Null);
    let listed = |column: &str| row.text(column).map(|t| Value::parse_str(t).unwrap_or(Value::Null));
    let member = |name: &str| match (name, env.as_object()) {
        (_, Some(o)) => o.get(name).cloned().unwrap_or(Value::Null),
        ("to", None) => listed("to_json").unwrap_or(Value::Null),
        (_, None) => row.text("kind").map_or(Value::Null, Value::from),
    };
    let time = |name: &str| row.int(name).map_or(Value::Null, |t| Timestamp(t).to_rfc3339().into());
    let list = |name: &str| Value::Array(strings(row.text(name)).into_iter().map(Value::from).collect());
    let mut o = obj([
        ("id", row.text("id").unwrap_or_default().into()),
        ("sender", row.text("sender").unwrap_or_default().into()),
        ("to", member("to")),
        ("type", member("type")),
        ("state", shown_state(row, now).into()),
        ("asks", list("asks")),
        ("approved_by", list("approved_by")),
        ("held_at", time("held_at")),
        ("expires", time("expires")),
    ]);
    for name in ["decided_by", "note"] {
        if let Some(v) = row.text(name) {
            o.insert(name.into(), v.into());
        }
    }
    if row.int("decided_at").is_some() {
        o.insert("decided_at".into(), time("decided_at"));
    }
    // What it carries is the approvers' to read while it is theirs to decide, and after they let
    // it go; a declined draft's envelope is nobody's business any more.
    if let Some(me) = reader.filter(|_| row.text("state") != Some("declined")) {
        o.insert("envelope".into(), env.clone());
        let key = row
            .text("readers")
            .and_then(|t| Value::parse_str(t).ok())
            .and_then(|v| v.as_object().and_then(|m| m.get(me.as_str()).cloned()));
        if let Some(key) = key {
            o.insert("key".into(), key);
        }
    }
    Value::Object(o)
}

/// The envelope of an approved draft, parsed again from what the house kept.
pub fn kept_envelope(text: &str, max_bytes: usize) -> Result<Envelope, Error> {
    Envelope::parse(text.as_bytes(), max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A webhook is where the fetch goes, read as the fetch reads it.
    #[test]
    fn a_webhooks_host_is_read_as_the_fetch_reads_it() {
        let at = |url: &str| match webhook_exit(url) {
            Exit::Domain(d) => d,
            Exit::Anywhere => "anywhere".into(),
            Exit::Address => "address".into(),
        };
        assert_eq!(at("https://evil.example\\@a.test/"), "evil.example", "a backslash ends the host");
        assert_eq!(at("https://user@EVIL.example.:8443/x?y#z"), "evil.example");
        assert_eq!(at("https://evil%2Eexample/"), "evil.example");
        assert_eq!(at("not a url"), "anywhere");
    }
}
