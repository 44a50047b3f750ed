//! GET /tareas, POST /tareas, POST /tareas/:id/retire — `tareas@`'s catalogue (spec §23,
//! docs/SPEC.md §23). The catalogue is public; the operator keeps it with the house token. A
//! house without `tareas@` answers 404.

use nyx5_proto::json::{field, obj};
use nyx5_proto::{Error, Object, Refusal, Value};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::libro::tareas::{MAX_STATEMENT_BYTES, Task, task_terms};
use crate::libro::verifica;
use crate::ports::{Db, Net};
use crate::{House, ok_body};

fn require_tareas<D: Db, N: Net>(house: &House<D, N>) -> Result<(), Error> {
    if house.config.tareas_enabled {
        Ok(())
    } else {
        Err(Refusal::NoTareas.because(format!("{} offers no tareas@", house.config.domain)))
    }
}

/// GET /tareas — the desk, the arbiter, the caps, what is left today, and every task offered
/// with its price, statement and whole terms (its test included). `?all=1` (the operator's
/// token) lists retired tasks too.
pub async fn list<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    require_tareas(house)?;
    let all = match req.query("all") {
        None | Some("0") => false,
        Some("1") => {
            house.registry().require_admin(req)?;
            true
        }
        Some(_) => return Err(Refusal::BadQuery.because("`all` is 0 or 1")),
    };
    let tasks: Vec<Task> = house.libro().tasks(all).await?;
    let today = house.libro().claims_today().await?;
    let list = tasks
        .iter()
        .map(|t| {
            let mut v = t.to_value();
            if let Value::Object(o) = &mut v
                && all
            {
                o.insert("retired".into(), Value::Bool(t.retired));
            }
            v
        })
        .collect();
    let per_day = house.config.tareas_per_day;
    let body = obj([
        ("desk", house.libro().tareas_address()?.as_str().into()),
        ("arbiter", house.libro().verifica_address()?.as_str().into()),
        ("house", house.config.domain.as_str().into()),
        ("contract", "escrow".into()),
        ("currency", nyx5_proto::libro::CURRENCY.into()),
        ("per_agent_per_day", house.config.tareas_per_agent_per_day.into()),
        ("per_day", per_day.into()),
        ("left_today", (per_day - today).max(0).into()),
        ("tests", Value::Array(verifica::TESTS.iter().map(|t| (*t).into()).collect())),
        ("tasks", Value::Array(list)),
    ]);
    Ok(Response::json(200, &Value::Object(body)))
}

/// POST /tareas `{id?, price, statement, verify, terms?}` (house token): adds a task. Its terms
/// are `terms` with `task` = the id and `verify` = the tests, which must be ones `verifica@` runs
/// and may fetch. 201 when added; the same task again is 200, another under a taken id 409.
pub async fn add<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    require_tareas(house)?;
    let body = json_body(req)?;
    let id = match field::opt_str(&body, "id")? {
        Some(id) => {
            nyx5_proto::address::check_id(id)?;
            id.to_owned()
        }
        None => house.new_id(),
    };
    let price = field::integer(&body, "price")?;
    if price <= 0 || price > nyx5_proto::limits::MAX_AMOUNT {
        return Err(Refusal::BadTask.because("`price` must be a whole number of tokens from 1 to 2^53 - 1"));
    }
    let statement = field::str(&body, "statement")?;
    if statement.trim().is_empty() || statement.len() > MAX_STATEMENT_BYTES {
        return Err(Refusal::BadTask.because(format!("`statement` is required, at most {MAX_STATEMENT_BYTES} bytes")));
    }
    let extra = match field::opt_object(&body, "terms")? {
        Some(t) if t.contains_key("task") || t.contains_key("verify") => {
            return Err(Refusal::BadTask.because("`terms` holds neither `task` nor `verify`: the house writes those"));
        }
        Some(t) => t.clone(),
        None => Object::new(),
    };
    let verify = body
        .get("verify")
        .cloned()
        .ok_or_else(|| Refusal::BadTask.because("`verify` (the task's tests) is required"))?;
    let terms = task_terms(&id, verify, extra);
    verifica::check_terms(nyx5_proto::quote::ContractKind::Escrow, Some(&terms), &house.config.verifica_policy())?;
    crate::libro::tareas::pays_for_work(&verifica::parse_tests(&terms, None)?)?;
    let terms_text = Value::Object(terms).canonical_string();
    if terms_text.len() > nyx5_proto::limits::MAX_DOCUMENT_BYTES / 4 {
        return Err(Refusal::BadTask.because("the task's terms are too large"));
    }
    let task = Task { id: id.clone(), price, statement: statement.to_owned(), terms: terms_text, retired: false };
    if let Some(before) = house.libro().task(&id).await? {
        let same = before.price == task.price && before.statement == task.statement && before.terms == task.terms;
        if !same {
            return Err(Refusal::TaskIdTaken.because(format!("task {id} exists with other contents")));
        }
        return Ok(Response::json(200, &ok_body([("task", before.to_value())])));
    }
    let added = house.libro().add_task(&task).await?;
    let status = if added { 201 } else { 200 };
    Ok(Response::json(status, &ok_body([("task", task.to_value())])))
}

/// POST /tareas/:id/retire (house token): the task is no longer offered. Tasks in flight go on.
pub async fn retire<D: Db, N: Net>(house: &House<D, N>, req: &Request, id: &str) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    require_tareas(house)?;
    nyx5_proto::address::check_id(id)?;
    let before = house.libro().task(id).await?.ok_or_else(|| Refusal::UnknownTask.because(format!("no task {id}")))?;
    house.libro().retire_task(id).await?;
    Ok(Response::json(200, &ok_body([("task", before.to_value()), ("retired", Value::Bool(true))])))
}
