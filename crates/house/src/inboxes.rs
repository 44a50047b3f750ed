//! The local agents' inboxes as other services see them (spec §9b): the keys of the mailbox's
//! facts query (rate buckets, JSON lists), and which agents' inbox policies would refuse an
//! envelope from its sender. The mailbox reads them when it accepts mail; the Libro when it
//! delivers receipts to agents who are not parties (so it never calls the mailbox, which calls
//! it to pay stamps and to answer operations).

use nyx5_proto::{Envelope, Error, Value};
use nyx5_rules::policy::{self, Decision, Facts};

use crate::ports::Db;
use crate::store;
use crate::view::{Core, PolicyMemo};

/// `items` as a canonical JSON array of strings: how the facts query takes a list.
pub(crate) fn json_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    Value::Array(items.into_iter().map(Value::from).collect()).canonical_string()
}

/// The rate window bucket for envelopes from `site` to `local`: `inbound:<local>:<site>`.
pub(crate) fn bucket(local: &str, site: &str) -> String {
    format!("{BUCKET_PREFIX}{local}{}", bucket_suffix(site))
}

/// What every inbound rate bucket starts with.
pub(crate) const BUCKET_PREFIX: &str = "inbound:";

/// What follows the local part in [`bucket`].
pub(crate) fn bucket_suffix(site: &str) -> String {
    format!(":{site}")
}

/// The local agents among `locals` whose inbox would not take `env` from its sender now: a
/// block (of the sender, an agent above it, or its site), or a card's `inbox.policy` that
/// refuses it or asks a stamp, proof of work or an intro it does not carry (docs/SPEC.md
/// §9b). What the Libro delivers to anyone but an operation's operator is bounded so
/// (docs/SPEC.md §16, "What an operation delivers to others"); the quota is checked by the
/// write itself ([`crate::store::libro::deliver_counted`]). Rates are not counted: the
/// operation was counted at the Libro's door.
pub(crate) async fn closed<D: Db, N>(
    core: &Core<'_, D, N>,
    policies: &PolicyMemo,
    env: &Envelope,
    locals: &[&str],
) -> Result<Vec<String>, Error> {
    if locals.is_empty() {
        return Ok(Vec::new());
    }
    let now = core.now();
    let blocks = policy::block_entries(env.from(), crate::site::psl());
    let allows = policy::sender_entries(env.from());
    let lookup = store::mailbox::Lookup {
        locals: &json_list(locals.iter().copied()),
        envelope_id: env.id(),
        blocks: &json_list(blocks.iter().map(String::as_str)),
        allows: &json_list(allows.iter().map(String::as_str)),
        vouchers: "[]",
        bucket_prefix: BUCKET_PREFIX,
        bucket_suffix: &bucket_suffix(crate::site::site(env.from().domain())),
        window: now.millis() / 60_000,
    };
    let rows = store::mailbox::inbound_facts(core.db, &lookup).await?;
    let mut open = Vec::new();
    for r in &rows {
        let (Some(local), Some(card)) = (r.text("local"), r.text("card")) else { continue };
        let Ok(policy) = policies.policy(local, card, now) else { continue };
        let facts = Facts {
            blocked: r.int("blocked") != Some(0),
            allowed: r.int("allowed") == Some(1),
            rate_count: 0,
            rate_cap: i64::MAX,
            balance: 0,
            vouch: policy::Vouch::Absent,
        };
        if matches!(policy::decide(&policy, env, env.from(), &facts, &core.config.domain), Decision::Accept { .. }) {
            open.push(local);
        }
    }
    Ok(locals.iter().filter(|l| !open.contains(l)).map(|l| (*l).to_owned()).collect())
}
