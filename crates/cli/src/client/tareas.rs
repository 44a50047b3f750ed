//! `nyx5 tareas list|take|add|retire` — a house's paid work (docs/SPEC.md §23): the public
//! catalogue (`GET /tareas`), taking a task (a quote sent in the clear to `tareas@`, built from
//! the catalogue exactly as it stands), and the operator's `POST /tareas` and
//! `POST /tareas/:id/retire`.

use nyx5_proto::json::{Object, Value, field, obj};

use super::Ctx;
use super::directory::{operator_hint, operator_house};
use super::http::{read_object, send};
use super::libro::{QuoteRequest, quote};
use super::libro_read::operator_token;
use super::output::{pretty, safe, show, text};
use crate::error::Failure;

fn not_offered(f: Failure) -> Failure {
    if f.status() == Some(404) {
        f.hint("this house offers no tareas@ (NYX5_TAREAS=on, nyx5 serve --tareas)")
    } else {
        f
    }
}

/// The catalogue of `house` (a domain or URL) [default: the agent's own].
pub(crate) fn list(ctx: &Ctx, house: Option<&str>) -> Result<Value, Failure> {
    let url = operator_house(ctx, house)?;
    let what = "reading the catalogue";
    let (status, body) = send(ctx.net.as_ref(), "GET", &format!("{url}/tareas"), &[], &[], what)?;
    Ok(Value::Object(read_object(status, &body, what).map_err(not_offered)?))
}

pub(crate) fn list_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = format!(
        "{} pays for these tasks, judged by {} (at most {} a day per agent, {} left today of {}):\n",
        safe(text(&o, "desk")),
        safe(text(&o, "arbiter")),
        show(&o, "per_agent_per_day"),
        show(&o, "left_today"),
        show(&o, "per_day"),
    );
    let tasks = o.get("tasks").and_then(Value::as_array).unwrap_or_default();
    if tasks.is_empty() {
        s.push_str("  (none offered)\n");
    }
    for t in tasks {
        let t = t.as_object().cloned().unwrap_or_default();
        s.push_str(&format!(
            "- {}: {} tok — {}\n",
            safe(text(&t, "id")),
            show(&t, "price"),
            safe(text(&t, "statement"))
        ));
        if let Some(terms) = t.get("terms") {
            s.push_str(&format!("  terms: {}\n", pretty(terms).replace('\n', "\n  ")));
        }
    }
    s.push_str("take one with: nyx5 tareas take <id>\n");
    s
}

/// Takes task `id` at `house` [default: the agent's own]: reads the catalogue and sends
/// `tareas@` a quote with its price, its terms and its arbiter, exactly as published.
pub(crate) fn take(ctx: &Ctx, id: &str, house: Option<&str>) -> Result<Value, Failure> {
    let page = list(ctx, house)?;
    let page = page.as_object().cloned().unwrap_or_default();
    let desk = field::str(&page, "desk").map_err(|_| Failure::network("the catalogue names no desk"))?.to_owned();
    let arbiter =
        field::str(&page, "arbiter").map_err(|_| Failure::network("the catalogue names no arbiter"))?.to_owned();
    let domain = field::str(&page, "house").map_err(|_| Failure::network("the catalogue names no house"))?.to_owned();
    let task = page
        .get("tasks")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_object)
        .find(|t| t.get("id").and_then(Value::as_str) == Some(id))
        .cloned()
        .ok_or_else(|| Failure::usage(format!("no task {} in the catalogue (nyx5 tareas list)", safe(id))))?;
    let price =
        task.get("price").and_then(Value::as_safe_integer).ok_or_else(|| Failure::network("a task without price"))?;
    let terms = task.get("terms").and_then(Value::as_object).cloned();
    let statement = text(&task, "statement");
    let concept: String = statement.chars().take(200).collect();
    let req = QuoteRequest {
        buyer: desk,
        price,
        concept: if concept.trim().is_empty() { format!("task {id}") } else { concept },
        contract: Some("escrow".into()),
        terms,
        arbiter: Some(arbiter),
        expires: None,
        referrer: None,
        house: Some(domain),
        plain: true,
    };
    let mut answer = quote(ctx, &req)?;
    if let Value::Object(o) = &mut answer {
        o.insert("task".into(), id.into());
    }
    Ok(answer)
}

pub(crate) fn take_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    format!(
        "task {} taken as escrow {} (envelope {}); deliver it with: nyx5 deliver {} --evidence FILE (or --evidence-sha256 HEX)\n\
         the desk's answer comes to your inbox: a receipt from libro@, or a bounce saying why not\n",
        safe(text(&o, "task")),
        text(&o, "quote_id"),
        text(&o, "id"),
        text(&o, "quote_id"),
    )
}

/// What `nyx5 tareas add` asks for.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub(crate) id: Option<String>,
    pub(crate) price: i64,
    pub(crate) statement: String,
    pub(crate) verify: Value,
    pub(crate) terms: Option<Object>,
}

/// Adds a task to the catalogue (the operator's token).
pub(crate) fn add(ctx: &Ctx, house: Option<&str>, admin_token: Option<&str>, t: &NewTask) -> Result<Value, Failure> {
    let mut body =
        obj([("price", t.price.into()), ("statement", t.statement.as_str().into()), ("verify", t.verify.clone())]);
    if let Some(id) = &t.id {
        body.insert("id".into(), id.as_str().into());
    }
    if let Some(terms) = &t.terms {
        body.insert("terms".into(), Value::Object(terms.clone()));
    }
    admin_post(ctx, house, admin_token, "/tareas", &Value::Object(body), "adding a task")
}

/// Retires task `id` (the operator's token).
pub(crate) fn retire(ctx: &Ctx, house: Option<&str>, admin_token: Option<&str>, id: &str) -> Result<Value, Failure> {
    nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(format!("task id: {}", e.reason)).named(e.name()))?;
    admin_post(
        ctx,
        house,
        admin_token,
        &format!("/tareas/{id}/retire"),
        &Value::Object(Object::new()),
        "retiring a task",
    )
}

fn admin_post(
    ctx: &Ctx,
    house: Option<&str>,
    admin_token: Option<&str>,
    path: &str,
    body: &Value,
    what: &str,
) -> Result<Value, Failure> {
    let url = operator_house(ctx, house)?;
    let token = operator_token(ctx, &url, admin_token)?;
    let auth = format!("Bearer {token}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let (status, answer) = send(ctx.net.as_ref(), "POST", &format!("{url}{path}"), &headers, &body.canonical(), what)?;
    Ok(Value::Object(read_object(status, &answer, what).map_err(operator_hint).map_err(not_offered)?))
}

pub(crate) fn task_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let t = o.get("task").and_then(Value::as_object).cloned().unwrap_or_default();
    let retired = if o.get("retired") == Some(&Value::Bool(true)) { " (retired)" } else { "" };
    format!("task {}{retired}: {} tok — {}\n", safe(text(&t, "id")), show(&t, "price"), safe(text(&t, "statement")))
}
