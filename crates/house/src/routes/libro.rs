//! The Libro's direct reads and its administration (spec §16, docs/SPEC.md §16), and the public
//! history (§21):
//!
//! - `GET /libro/cuenta/:address` — the account of the agent that asks (local or foreign, by its
//!   signed token), or any account for the operator.
//! - `GET /libro/contrato/:id` — a contract, for its parties or the operator.
//! - `POST /libro/topup {address, amount, id?, note?}` — the operator issues tokens.
//! - `GET /libro/diario?after&limit` — the journal, for the operator (and `nyx5 libro audit`).
//! - `GET /agents/:local/historial` — public, signed by the house.

use nyx5_proto::crypto::Context;
use nyx5_proto::json::field;
use nyx5_proto::sign::sign_object;
use nyx5_proto::{Address, Error, Refusal, Value};

use crate::auth::json_body;
use crate::http::{Request, Response, percent_decode};
use crate::libro::history::{self, Fact, summarize};
use crate::ports::{Db, Net, Reads, Row};
use crate::routes::agents::page_param;
use crate::{House, ok_body};
use nyx5_rules::libro::model::{Contract, Kind, Mandate};
use nyx5_rules::libro::state::{self, ContractState};

/// Most contracts and mandates `cuenta` lists; how many entries it shows.
pub const ACCOUNT_LIST_MAX: i64 = 100;
pub const ACCOUNT_ENTRIES: i64 = 20;
/// The journal's page: default and most.
pub const JOURNAL_DEFAULT: i64 = 100;
pub const JOURNAL_MAX: i64 = 200;

fn parsed(texts: Vec<String>) -> Value {
    Value::Array(texts.iter().filter_map(|t| Value::parse_str(t).ok()).collect())
}

fn contract_of(row: &Row) -> Option<Contract> {
    let record = Value::parse_str(row.text("record")?).ok()?;
    Contract::from_record(record.as_object()?.clone(), row.int("version").unwrap_or(0)).ok()
}

/// GET /libro/cuenta/:address
pub async fn account<D: Db, N: Net>(house: &House<D, N>, req: &Request, address: &str) -> Result<Response, Error> {
    let address = Address::parse(&percent_decode(address))?;
    if !house.registry().is_admin(req) {
        let card = house.registry().authenticate_any(req).await?;
        if *card.address() != address {
            return Err(Refusal::NotTheOwner.because(format!("{} may read only its own account", card.address())));
        }
    }
    let who = address.as_str();
    let account = house.libro().account(who, ACCOUNT_LIST_MAX, ACCOUNT_ENTRIES).await?;
    let balance = account.balance;
    let contracts: Vec<Value> = account.contracts.iter().filter_map(contract_of).map(|c| c.view()).collect();
    let mandates: Vec<Value> = account
        .mandates
        .iter()
        .filter_map(|r| {
            let record = Value::parse_str(r.text("record")?).ok()?;
            Mandate::from_value(record.as_object()?, r.int("version").unwrap_or(0)).ok()
        })
        .map(|m| m.to_value())
        .collect();
    // Movements it asked approval for, or may decide, those still waiting first.
    let pending: Vec<Value> = account
        .pending
        .iter()
        .filter_map(|r| {
            let record = Value::parse_str(r.text("record")?).ok()?;
            nyx5_rules::libro::model::Pending::from_value(record.as_object()?, r.int("version").unwrap_or(0)).ok()
        })
        .map(|p| p.to_value())
        .collect();
    let entries = parsed(account.entries);
    Ok(Response::json(
        200,
        &ok_body([
            ("house", house.config.domain.as_str().into()),
            ("account", who.into()),
            ("balance", balance.into()),
            ("contracts", Value::Array(contracts)),
            ("mandates", Value::Array(mandates)),
            ("pending", Value::Array(pending)),
            ("entries", entries),
        ]),
    ))
}

/// GET /libro/contrato/:id
pub async fn contract<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str) -> Result<Response, Error> {
    let id = percent_decode(id);
    nyx5_proto::address::check_id(&id)?;
    let who = if house.registry().is_admin(req) { None } else { Some(house.registry().authenticate_any(req).await?) };
    let c = house
        .libro()
        .contract_row(&id)
        .await?
        .as_ref()
        .and_then(contract_of)
        .ok_or_else(|| Refusal::UnknownContract.because(format!("no contract {id} here")))?;
    if let Some(card) = who
        && !c.has_party(card.address())
    {
        // Whether it exists is the parties' business too.
        return Err(Refusal::UnknownContract.because(format!("no contract {id} here")));
    }
    Ok(Response::json(200, &ok_body([("contract", c.view())])))
}

/// POST /libro/topup
pub async fn topup<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let body = json_body(req)?;
    let address = Address::parse(field::str(&body, "address")?)?;
    let amount = field::integer(&body, "amount")?;
    if amount <= 0 || amount > nyx5_proto::limits::MAX_AMOUNT {
        return Err(Refusal::BadTopUp.because("`amount` must be a whole number of tokens from 1 to 2^53 - 1"));
    }
    if house.libro().is_libro(&address) || address.as_str() == nyx5_proto::libro::house_account(&house.config.domain) {
        return Err(Refusal::BadTopUp.because("the house does not top itself up"));
    }
    let id = match field::opt_str(&body, "id")? {
        Some(id) => {
            nyx5_proto::address::check_id(id)?;
            id.to_owned()
        }
        None => house.new_id(),
    };
    let note = field::opt_str(&body, "note")?.unwrap_or("top-up");
    if note.len() > nyx5_rules::libro::op::MAX_TEXT_BYTES {
        return Err(Refusal::BadTopUp.because("`note` is too long"));
    }
    let cause = format!("topup:{id}");
    let entry = house.libro().issue(&cause, &address, amount, note, Vec::new()).await?;
    // The same id for another top-up is a conflict, not a silent answer about the first.
    let same = entry.as_object().and_then(|e| e.get("lines")).and_then(Value::as_array).is_some_and(|lines| {
        lines.iter().any(|l| {
            let l = l.as_object();
            l.and_then(|l| l.get("account")).and_then(Value::as_str) == Some(address.as_str())
                && l.and_then(|l| l.get("delta")).and_then(Value::as_safe_integer) == Some(amount)
        })
    });
    if !same {
        return Err(Refusal::TopUpIdTaken.because(format!("top-up {id} was another amount or account")));
    }
    Ok(Response::json(200, &ok_body([("asiento", entry)])))
}

/// GET /libro/diario
pub async fn journal<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let after = page_param(req, "after", 0, i64::MAX)?;
    let limit = page_param(req, "limit", JOURNAL_DEFAULT, JOURNAL_MAX)?.max(1);
    let entries = house.libro().journal(after, limit).await?;
    let count = i64::try_from(entries.len()).unwrap_or(0);
    let next = if count == limit { Value::from(after + count) } else { Value::Null };
    Ok(Response::json(
        200,
        &ok_body([("house", house.config.domain.as_str().into()), ("entries", parsed(entries)), ("next", next)]),
    ))
}

/// GET /agents/:local/historial
pub async fn history<D: Db, N: Net>(house: &House<D, N>, reads: &Reads, local: &str) -> Result<Response, Error> {
    let address = house.registry().local_address(local)?;
    let (since, rows) = house
        .libro()
        .history_rows(reads, local, &address)
        .await?
        .ok_or_else(|| Refusal::UnknownAgent.because(format!("no agent {address}")))?;
    let facts: Vec<Fact> = rows
        .iter()
        .filter_map(|r| {
            // A bond's parties and who closed it, for whether a judge free of its bondholder
            // closed it; anything unreadable judges nothing.
            let who = |name: &str| r.text(name).and_then(|t| Address::parse(t).ok());
            let (holder, verifier, arbiter) = (who("bondholder"), who("verifier"), who("arbiter"));
            let house_domain = house.config.domain.as_str();
            let judged = match (&holder, who("closed_by")) {
                (Some(h), Some(by)) => history::judged(
                    h,
                    verifier.as_ref(),
                    arbiter.as_ref(),
                    r.text("closing_op").unwrap_or_default(),
                    &by,
                    house_domain,
                ),
                _ => false,
            };
            let exposed =
                holder.as_ref().is_some_and(|h| history::exposed(h, verifier.as_ref(), arbiter.as_ref(), house_domain));
            let held = r
                .int("created")
                .zip(r.int("updated"))
                .is_some_and(|(created, closed)| history::held_long_enough(created, r.int("expires"), closed));
            let judge = who("closed_by").map(|by| history::root(&by).as_str().to_owned());
            let (kind, state) = (r.text("kind")?, r.text("state")?);
            let Some(kind) = Kind::parse(kind) else { return Some(Err(state::stored("contract kind", kind))) };
            let Some(state) = ContractState::parse(state) else {
                return Some(Err(state::stored("contract state", state)));
            };
            Some(Ok(Fact {
                kind,
                state,
                amount: r.int("amount")?,
                selling: r.int("selling") == Some(1),
                buying: r.int("buying") == Some(1),
                bonding: r.int("bonding") == Some(1),
                vouching: r.int("vouching") == Some(1),
                judged,
                exposed,
                cancelled: r.int("cancelled") == Some(1),
                held,
                judge,
            }))
        })
        .collect::<Result<_, Error>>()?;
    let mut doc = summarize(&facts);
    doc.insert("address".into(), address.as_str().into());
    doc.insert("house".into(), house.config.domain.as_str().into());
    doc.insert("since".into(), nyx5_proto::Timestamp(since).to_rfc3339().into());
    doc.insert("issued".into(), house.now().to_rfc3339().into());
    sign_object(&mut doc, "signature", Context::Historial, &house.config.key);
    Ok(Response::json(200, &Value::Object(doc)))
}
