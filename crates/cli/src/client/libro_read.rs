//! Reading the Libro without mail — `nyx5 balance` (`GET /libro/cuenta/:address`), `contract`
//! (`GET /libro/contrato/:id`), `historial` (`GET /agents/:local/historial`, public, signed by
//! the house) — and the operator's `topup` (`POST /libro/topup`) and `journal`
//! (`GET /libro/diario`) (docs/SPEC.md §16, §21).

use nyx5_proto::crypto::{Context, SigPublic};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::sign::{Signature, verify_object};
use nyx5_proto::{Address, libro, limits};

use super::directory::{operator_hint, operator_house};
use super::http::{house_url, read_object, send};
use super::libro::{contract_line, house_domain, lines, mandate_line};
use super::output::{one_line, pretty, safe, show, text};
use super::profile::AgentEntry;
use super::{Ctx, house_target};
use crate::error::Failure;
use crate::sys;

/// The most entries one journal page asks for (docs/SPEC.md §16).
pub(crate) const MAX_JOURNAL_PAGE: i64 = 200;
/// The most pages `journal --all` and `libro audit` follow: 200 × 100 000 = 20 million entries.
const MAX_JOURNAL_PAGES: usize = 100_000;
/// The most entries `journal --all` and `libro audit` hold in memory.
const MAX_JOURNAL_ENTRIES: usize = 2_000_000;
/// The most bytes of journal pages `journal --all` and `libro audit` read, all pages together.
const MAX_JOURNAL_BYTES: usize = 1 << 30;

/// The base URL of the house whose Libro is read: the agent's own, or `house` (a domain,
/// resolved and its card verified; a URL only when it is the agent's own house's).
fn libro_url(ctx: &Ctx, me: &AgentEntry, house: Option<&str>) -> Result<String, Failure> {
    let Some(h) = house else { return Ok(me.house.clone()) };
    if h.starts_with("http://") || h.starts_with("https://") {
        if house_url(h)? == me.house.trim_end_matches('/') {
            return Ok(me.house.clone());
        }
        return Err(Failure::usage(format!(
            "--house {h}: name the house by its domain (it is resolved and its card verified); a URL is taken \
             only for your own house ({})",
            me.house
        )));
    }
    let domain = house_domain(h)?;
    if domain == me.address.domain() {
        return Ok(me.house.clone());
    }
    let res = ctx.resolver(Some(me), sys::now()?)?;
    house_target(&res, &domain).map(|(url, _)| url)
}

/// `nyx5 balance`: an account at a house's Libro (the agent's own by default), read with the
/// agent's signed token.
pub(crate) fn balance(ctx: &Ctx, house: Option<&str>, account: Option<&str>) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let account = match account {
        Some(a) => {
            Address::parse_lenient(a).map_err(|e| Failure::usage(format!("--account: {}", e.reason)).named(e.name()))?
        }
        None => me.address.clone(),
    };
    let url = libro_url(ctx, &me, house)?;
    let what = format!("the account of {account}");
    let (_, answer) =
        ctx.call_at(&me, &url, "GET", &format!("/libro/cuenta/{account}"), None, &what).map_err(no_libro)?;
    Ok(Value::Object(answer))
}

/// A 404 or 405 for a Libro route means the house has none.
fn no_libro(f: Failure) -> Failure {
    match f.status() {
        Some(405 | 501) => f.hint("this house has no Libro"),
        _ => f,
    }
}

pub(crate) fn balance_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s =
        format!("{} at {}: {} tokens\n", safe(text(&o, "account")), safe(text(&o, "house")), show(&o, "balance"));
    let contracts = o.get("contracts").and_then(Value::as_array).unwrap_or_default();
    if !contracts.is_empty() {
        s.push_str("contracts:\n");
        for c in contracts.iter().filter_map(Value::as_object) {
            s.push_str(&format!("  {}\n", contract_line(c)));
        }
    }
    let mandates = o.get("mandates").and_then(Value::as_array).unwrap_or_default();
    if !mandates.is_empty() {
        s.push_str("mandates:\n");
        for m in mandates.iter().filter_map(Value::as_object) {
            s.push_str(&format!("  {}\n", mandate_line(m)));
        }
    }
    let entries = o.get("entries").and_then(Value::as_array).unwrap_or_default();
    if !entries.is_empty() {
        s.push_str("last entries:\n");
        for e in entries.iter().filter_map(Value::as_object) {
            s.push_str(&format!("  {} {} {}\n", show(e, "n"), show(e, "at"), safe(text(e, "concept"))));
            s.push_str(&lines(e));
        }
    }
    s
}

/// `nyx5 approvals`: the movements waiting for approval that the agent asked for or may decide
/// (`pending` of `GET /libro/cuenta/:address`); `all` keeps decided and expired ones too.
pub(crate) fn approvals(ctx: &Ctx, house: Option<&str>, all: bool) -> Result<Value, Failure> {
    let account = balance(ctx, house, None)?;
    let o = account.as_object().cloned().unwrap_or_default();
    let list: Vec<Value> = o
        .get("pending")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter(|p| all || p.as_object().and_then(|p| p.get("state")).and_then(Value::as_str) == Some("pending"))
        .cloned()
        .collect();
    Ok(Value::Object(obj([
        ("house", o.get("house").cloned().unwrap_or(Value::Null)),
        ("account", o.get("account").cloned().unwrap_or(Value::Null)),
        ("pending", Value::Array(list)),
    ])))
}

/// One approval as a person reads it before deciding: what would move, who asked, why its
/// authority asked, who still has to say yes, and until when.
pub(crate) fn approval_text(p: &Object) -> String {
    let hold = p.get("hold").and_then(Value::as_object);
    let what = match hold {
        Some(h) => format!("{} tok from {}", one_line(&show(h, "amount")), one_line(text(h, "account"))),
        None => "nothing held".to_owned(),
    };
    let mut s = format!(
        "{} [{}] {} by {}: {what}, for \"{}\"\n",
        one_line(text(p, "id")),
        one_line(text(p, "state")),
        one_line(text(p, "op")),
        one_line(text(p, "operator")),
        one_line(text(p, "concept"))
    );
    if let Some(what) = p.get("summary").and_then(Value::as_object).filter(|o| !o.is_empty()) {
        let parts: Vec<String> = what
            .iter()
            .map(|(k, v)| match v {
                Value::String(t) => format!("{k}: {}", one_line(t)),
                other => format!("{k}: {}", one_line(&other.canonical_string())),
            })
            .collect();
        s.push_str(&format!("  what: {}\n", parts.join("; ")));
    }
    for a in p.get("asks").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_object) {
        s.push_str(&format!("  asks: {}\n", one_line(text(a, "reason"))));
        if let Some(r) =
            a.get("authority").and_then(Value::as_object).and_then(|x| x.get("rationale")).and_then(Value::as_str)
        {
            s.push_str(&format!("  because: {}\n", one_line(r)));
        }
    }
    let names = |name: &str| -> String {
        p.get(name)
            .and_then(Value::as_array)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(one_line)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let waiting = names("awaiting");
    if !waiting.is_empty() && text(p, "state") == "pending" {
        s.push_str(&format!("  waits on: {waiting}; until {}\n", one_line(text(p, "expires"))));
    }
    let approved = names("approved_by");
    if !approved.is_empty() {
        s.push_str(&format!("  approved by: {approved}\n"));
    }
    s
}

pub(crate) fn approvals_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let list = o.get("pending").and_then(Value::as_array).unwrap_or_default();
    if list.is_empty() {
        return format!("nothing waits for approval at {}\n", safe(text(&o, "house")));
    }
    list.iter().filter_map(Value::as_object).map(approval_text).collect()
}

/// The approval `id` still waiting that the agent may see, as `nyx5 approvals` lists it.
pub(crate) fn waiting_approval(ctx: &Ctx, house: Option<&str>, id: &str) -> Result<Object, Failure> {
    approvals(ctx, house, false)?
        .as_object()
        .and_then(|o| o.get("pending"))
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_object)
        .find(|p| text(p, "id") == id)
        .cloned()
        .ok_or_else(|| Failure::usage(format!("no approval {id} waits for you (nyx5 approvals)")))
}

/// Before `nyx5 approve ID`: shows the approval and asks on the terminal; refuses when nothing
/// reads the question (no terminal: give --yes) or the answer is not yes.
pub(crate) fn confirm_approval(ctx: &Ctx, house: Option<&str>, id: &str) -> Result<(), Failure> {
    let found = waiting_approval(ctx, house, id)?;
    crate::io::confirm_on_terminal(&format!("{}Approve it? [y/N] ", approval_text(&found)))
}

/// `nyx5 contract ID`: a contract the agent is party to.
pub(crate) fn contract(ctx: &Ctx, id: &str, house: Option<&str>) -> Result<Value, Failure> {
    nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(format!("contract: {}", e.reason)).named(e.name()))?;
    let me = ctx.me()?;
    let url = libro_url(ctx, &me, house)?;
    let what = format!("contract {id}");
    let (_, answer) = ctx.call_at(&me, &url, "GET", &format!("/libro/contrato/{id}"), None, &what).map_err(no_libro)?;
    Ok(answer.get("contract").cloned().unwrap_or(Value::Null))
}

pub(crate) fn contract_human(v: &Value) -> String {
    let c = v.as_object().cloned().unwrap_or_default();
    let acp = c.get("acp").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut s = format!(
        "contract {} ({}) at {}: {} (ACP {}{}), {} tokens, {}\n",
        safe(text(&c, "id")),
        safe(text(&c, "kind")),
        safe(text(&c, "house")),
        safe(text(&c, "state")),
        safe(text(&acp, "phase")),
        acp.get("outcome").and_then(Value::as_str).map(|o| format!(" {}", safe(o))).unwrap_or_default(),
        show(&c, "amount"),
        safe(text(&c, "concept"))
    );
    for h in c.get("history").and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_object) {
        s.push_str(&format!(
            "  {} {} by {} (envelope {})\n",
            show(h, "at"),
            safe(text(h, "op")),
            safe(text(h, "by")),
            show(h, "envelope")
        ));
    }
    s.push_str(&pretty(v));
    s
}

/// `nyx5 historial ADDRESS`: an agent's public record, its house's signature checked against the
/// domain card.
pub(crate) fn historial(ctx: &Ctx, who: &str) -> Result<Value, Failure> {
    let who =
        Address::parse_lenient(who).map_err(|e| Failure::usage(format!("address: {}", e.reason)).named(e.name()))?;
    let profile = ctx.profile()?;
    let me = if profile.agents.is_empty() {
        None
    } else {
        profile.agent(ctx.as_address.as_ref(), &ctx.profile_path).ok().cloned()
    };
    let now = sys::now()?;
    let res = ctx.resolver(me.as_ref(), now)?;
    let d = res.domain(who.domain())?;
    let what = format!("the history of {who}");
    let target = format!("{}/agents/{}/historial", d.url, who.local());
    let (status, body) = send(ctx.net.as_ref(), "GET", &target, &[("accept", "application/json")], &[], &what)?;
    let doc = read_object(status, &body, &what).map_err(no_libro)?;
    if field::str(&doc, "address").ok() != Some(who.as_str()) {
        return Err(Failure::rejected(format!("{what}: the house answered the history of someone else")));
    }
    let kid = Signature::read(&doc, "signature")
        .map_err(|e| Failure::rejected(format!("{what} is not signed: {}", e.reason)).named(e.name()))?
        .kid;
    if !d.card.accepts_key(&kid, now) {
        return Err(Failure::rejected(format!("{what} is not signed by a key of {}", who.domain())));
    }
    verify_object(&doc, "signature", Context::Historial, |k| d.card.accepts_key(k, now)).map_err(|_| {
        Failure::rejected(format!("{what} does not verify: the document was altered or the signature is forged"))
    })?;
    Ok(Value::Object(obj([
        ("historial", Value::Object(doc)),
        ("verified", Value::Bool(true)),
        ("signature", format!("signed by {} ({})", who.domain(), kid.to_b64()).into()),
        ("signed_by", who.domain().into()),
    ])))
}

pub(crate) fn historial_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let h = o.get("historial").and_then(Value::as_object).cloned().unwrap_or_default();
    let part = |name: &str| h.get(name).and_then(Value::as_object).cloned().unwrap_or_default();
    let (sell, buy, bonds, vouch, sum) =
        (part("vendiendo"), part("comprando"), part("afirmando"), part("avalando"), part("resumen"));
    let verdict = if o.get("verified") == Some(&Value::Bool(true)) {
        format!("signed by {}", safe(text(&o, "signed_by")))
    } else {
        format!("signature {}", safe(text(&o, "signature")))
    };
    format!(
        "{} since {} ({verdict})\n  selling: {} contracts, {} released, {} refunded, {} tokens\n  buying: {} contracts, \
         {} tokens\n  bonds: {} settled, {} intact, {} forfeited, {} tokens\n  vouching: {} vouches, {} intact, {} \
         forfeited\n  delivery rate {}, truthfulness {}, tokens at stake now {}\n",
        safe(text(&h, "address")),
        show(&h, "since"),
        show(&sell, "contratos"),
        show(&sell, "liberados"),
        show(&sell, "devueltos"),
        show(&sell, "tokens"),
        show(&buy, "contratos"),
        show(&buy, "tokens"),
        show(&bonds, "fianzas"),
        show(&bonds, "intactas"),
        show(&bonds, "ejecutadas"),
        show(&bonds, "tokens"),
        show(&vouch, "avales"),
        show(&vouch, "intactos"),
        show(&vouch, "ejecutados"),
        show(&sum, "cumplimiento"),
        show(&sum, "veracidad"),
        show(&sum, "tokens_en_juego_ahora"),
    )
}

/// What `nyx5 topup` asks.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopupRequest {
    pub(crate) address: String,
    pub(crate) amount: i64,
    pub(crate) id: Option<String>,
    pub(crate) note: Option<String>,
}

/// The acting agent, when the profile has one.
fn me_if_any(ctx: &Ctx) -> Result<Option<AgentEntry>, Failure> {
    let profile = ctx.profile()?;
    if profile.agents.is_empty() && ctx.as_address.is_none() {
        return Ok(None);
    }
    profile.agent(ctx.as_address.as_ref(), &ctx.profile_path).cloned().map(Some)
}

/// Whether `url`'s host is loopback (`localhost`, 127.0.0.0/8, `::1`).
fn loopback(url: &str) -> bool {
    let authority = super::http::host_of(url);
    let host = authority.rsplit_once('@').map_or(authority.as_str(), |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The operator token to send to the house at `url`: the one given (`--admin-token`), else
/// `$NYX5_ADMIN_TOKEN` only when `url` is the acting agent's own house (the URL its profile
/// names) — the environment's token is never sent to a house the user did not name for it. It
/// is never sent over plain `http://` but to a loopback host.
pub(crate) fn operator_token(ctx: &Ctx, url: &str, given: Option<&str>) -> Result<String, Failure> {
    if url.starts_with("http://") && !loopback(url) {
        return Err(Failure::usage(format!(
            "{url} is plain http://: the operator token is sent only over https:// (or to a loopback host)"
        )));
    }
    if let Some(t) = given.filter(|t| !t.is_empty()) {
        return Ok(t.to_owned());
    }
    let env = std::env::var("NYX5_ADMIN_TOKEN").ok().filter(|t| !t.is_empty());
    let own = me_if_any(ctx)?.is_some_and(|me| me.house.trim_end_matches('/') == url.trim_end_matches('/'));
    match env {
        Some(t) if own => Ok(t),
        Some(_) => Err(Failure::usage(format!(
            "$NYX5_ADMIN_TOKEN is sent only to your own house; for {url} give its operator token with --admin-token"
        ))),
        None => Err(Failure::usage("give the house's operator token with --admin-token (or NYX5_ADMIN_TOKEN)")),
    }
}

/// `nyx5 topup ADDRESS AMOUNT`: casa@ issues tokens to an account (the operator only).
pub(crate) fn topup(
    ctx: &Ctx,
    house: Option<&str>,
    admin_token: Option<&str>,
    req: &TopupRequest,
) -> Result<Value, Failure> {
    let address = Address::parse_lenient(&req.address)
        .map_err(|e| Failure::usage(format!("address: {}", e.reason)).named(e.name()))?;
    if !(1..=limits::MAX_AMOUNT).contains(&req.amount) {
        return Err(Failure::usage("AMOUNT must be a positive whole number of tokens"));
    }
    let mut body = obj([("address", address.as_str().into()), ("amount", req.amount.into())]);
    if let Some(id) = &req.id {
        nyx5_proto::address::check_id(id).map_err(|e| Failure::usage(format!("--id: {}", e.reason)).named(e.name()))?;
        body.insert("id".into(), id.as_str().into());
    }
    if let Some(n) = &req.note {
        body.insert("note".into(), n.as_str().into());
    }
    let url = operator_house(ctx, house)?;
    let admin_token = operator_token(ctx, &url, admin_token)?;
    let auth = format!("Bearer {admin_token}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let what = format!("topping up {address}");
    let bytes = Value::Object(body).canonical();
    let (status, answer) = send(ctx.net.as_ref(), "POST", &format!("{url}/libro/topup"), &headers, &bytes, &what)?;
    let o = read_object(status, &answer, &what).map_err(operator_hint).map_err(no_libro)?;
    Ok(Value::Object(obj([("asiento", o.get("asiento").cloned().unwrap_or(Value::Null))])))
}

pub(crate) fn topup_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let a = o.get("asiento").and_then(Value::as_object).cloned().unwrap_or_default();
    format!("entry {} at {} ({}):\n{}", show(&a, "n"), safe(text(&a, "house")), safe(text(&a, "concept")), lines(&a))
}

/// One page of a house's journal, read with the operator's token: `(house, entries, next,
/// bytes)`.
pub(crate) fn journal_page(
    ctx: &Ctx,
    url: &str,
    admin_token: &str,
    after: Option<i64>,
    limit: Option<i64>,
) -> Result<(String, Vec<Value>, Option<i64>, usize), Failure> {
    let q: Vec<String> =
        [("after", after), ("limit", limit)].into_iter().filter_map(|(n, v)| v.map(|v| format!("{n}={v}"))).collect();
    let target =
        if q.is_empty() { format!("{url}/libro/diario") } else { format!("{url}/libro/diario?{}", q.join("&")) };
    let auth = format!("Bearer {admin_token}");
    let what = "reading the journal";
    let (status, body) = send(ctx.net.as_ref(), "GET", &target, &[("authorization", auth.as_str())], &[], what)?;
    let o = read_object(status, &body, what).map_err(operator_hint).map_err(no_libro)?;
    let house = field::str(&o, "house").map_err(|_| Failure::network(format!("{what}: the answer names no house")))?;
    let entries = field::opt_array(&o, "entries").ok().flatten().unwrap_or_default().to_vec();
    let next = o.get("next").and_then(Value::as_safe_integer);
    Ok((house.to_owned(), entries, next, body.len()))
}

/// Every entry of a house's journal, following `next` from `after`: `{house, entries}`.
pub(crate) fn journal_all(ctx: &Ctx, url: &str, admin_token: &str, after: Option<i64>) -> Result<Object, Failure> {
    let mut all = Vec::new();
    let mut after = after;
    let mut house = String::new();
    let mut bytes = 0usize;
    for _ in 0..MAX_JOURNAL_PAGES {
        let (h, entries, next, size) = journal_page(ctx, url, admin_token, after, Some(MAX_JOURNAL_PAGE))?;
        if !house.is_empty() && h != house {
            return Err(Failure::rejected(format!("the journal at {url} changed its house from {house} to {h}")));
        }
        house = h;
        bytes = bytes.saturating_add(size);
        if all.len().saturating_add(entries.len()) > MAX_JOURNAL_ENTRIES || bytes > MAX_JOURNAL_BYTES {
            return Err(Failure::usage(format!(
                "the journal at {url} is larger than this command holds ({MAX_JOURNAL_ENTRIES} entries or \
                 {MAX_JOURNAL_BYTES} bytes); read it by pages with `nyx5 journal --after N`"
            )));
        }
        all.extend(entries);
        match next {
            Some(n) if after.is_none_or(|a| n > a) => after = Some(n),
            Some(_) => return Err(Failure::rejected(format!("the journal at {url} does not move forward"))),
            None => return Ok(obj([("house", house.into()), ("entries", Value::Array(all))])),
        }
    }
    Err(Failure::usage(format!("the journal at {url} is longer than {MAX_JOURNAL_PAGES} pages")))
}

/// `nyx5 journal`: a page of a house's journal, or all of it from `after` with `all`.
pub(crate) fn journal(
    ctx: &Ctx,
    house: Option<&str>,
    admin_token: Option<&str>,
    after: Option<i64>,
    limit: Option<i64>,
    all: bool,
) -> Result<Value, Failure> {
    if let Some(l) = limit
        && !(1..=MAX_JOURNAL_PAGE).contains(&l)
    {
        return Err(Failure::usage(format!("--limit must be 1 to {MAX_JOURNAL_PAGE}")));
    }
    if after.is_some_and(|a| a < 0) {
        return Err(Failure::usage("--after must be 0 or more"));
    }
    let url = operator_house(ctx, house)?;
    let admin_token = operator_token(ctx, &url, admin_token)?;
    if all {
        return journal_all(ctx, &url, &admin_token, after).map(Value::Object);
    }
    let (house, entries, next, _) = journal_page(ctx, &url, &admin_token, after, limit)?;
    Ok(Value::Object(obj([
        ("house", house.into()),
        ("entries", Value::Array(entries)),
        ("next", next.map_or(Value::Null, Value::from)),
    ])))
}

pub(crate) fn journal_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let entries = o.get("entries").and_then(Value::as_array).unwrap_or_default();
    let mut s = format!("the journal of {}: {} entries\n", safe(text(&o, "house")), entries.len());
    for e in entries.iter().filter_map(Value::as_object) {
        let meta = e.get("meta").and_then(Value::as_object).cloned().unwrap_or_default();
        s.push_str(&format!(
            "{} {} {} ({})\n",
            show(e, "n"),
            show(e, "at"),
            safe(text(&meta, "primitive")),
            safe(text(e, "concept"))
        ));
        s.push_str(&lines(e));
    }
    if let Some(n) = o.get("next").and_then(Value::as_safe_integer) {
        s.push_str(&format!("more: nyx5 journal --after {n}\n"));
    }
    s
}

/// The largest journal file `libro audit` reads.
const MAX_JOURNAL_FILE_BYTES: usize = 1 << 30;

/// `nyx5 libro audit FILE|URL`: reads a whole journal (a file holding `{house, entries}`, or the
/// pages of `<URL>/libro/diario` with the operator's token) and checks it offline
/// (`nyx5_proto::libro::audit`) against the house's domain keys: `keys` when given, else the
/// keys of its domain card resolved the usual way (hosts file, DNS, well-known — never from the
/// URL read), each valid at the entry's `at`. For a URL, the house resolved must answer at that
/// URL: a server's own word for whose journal it serves is not trusted.
pub(crate) fn audit(ctx: &Ctx, source: &str, admin_token: Option<&str>, keys: &[String]) -> Result<Value, Failure> {
    let keys = keys
        .iter()
        .map(|k| SigPublic::parse(k).map_err(|e| Failure::input("--key", &e)))
        .collect::<Result<Vec<_>, _>>()?;
    let is_url = source.starts_with("http://") || source.starts_with("https://");
    let (journal, url) = if is_url {
        let url = house_url(source)?;
        let token = operator_token(ctx, &url, admin_token)?;
        (journal_all(ctx, &url, &token, None)?, Some(url))
    } else {
        (read_journal(std::path::Path::new(source))?, None)
    };
    let house = field::str(&journal, "house")
        .map_err(|_| Failure::usage(format!("{source}: a journal is {{house, entries}}; it names no house")))?
        .to_owned();
    let entries = field::array(&journal, "entries")
        .map_err(|_| Failure::usage(format!("{source}: a journal is {{house, entries}}; it has no entries")))?;
    let (keys, from, card) = if keys.is_empty() {
        let me = ctx.me().ok();
        let res = ctx.resolver(me.as_ref(), sys::now()?)?;
        let d = res.domain(&house)?;
        if let Some(url) = &url
            && d.url.trim_end_matches('/') != url.trim_end_matches('/')
        {
            return Err(Failure::rejected(format!(
                "{url} says it serves the journal of {house}, but {house} answers at {} (found by {}): the keys \
                 of {house} do not vouch for what {url} serves",
                d.url, d.via
            ))
            .hint(format!("audit {house} at its own URL, or give the keys to check against with --key")));
        }
        let from = format!("the domain card of {house} (found by {}, its key checked against {})", d.via, d.anchor);
        (d.card.keys().iter().map(|k| k.sig).collect::<Vec<_>>(), from, Some(d.card))
    } else {
        (keys, "--key".to_owned(), None)
    };
    let report = libro::audit(&house, &keys, entries).map_err(|e| {
        Failure::rejected(format!("the journal of {house} does not hold: {}", e.reason)).named(e.name())
    })?;
    if let Some(card) = &card {
        for (i, e) in entries.iter().enumerate() {
            let e = e.as_object().cloned().unwrap_or_default();
            let kid = Signature::read(&e, "signature").map(|s| s.kid);
            let at = field::str(&e, "at").ok().and_then(|a| nyx5_proto::Timestamp::parse(a).ok());
            let ok = matches!((kid, at), (Ok(k), Some(at)) if card.accepts_key(&k, at));
            if !ok {
                return Err(Failure::rejected(format!(
                    "the journal of {house} does not hold: entry {}: signed by a key of {house} not valid at its \
                     `at`",
                    i.saturating_add(1)
                )));
            }
        }
    }
    let balances: Object = report.balances.iter().map(|(a, b)| (a.clone(), Value::from(*b))).collect();
    Ok(Value::Object(obj([
        ("ok", Value::Bool(true)),
        ("house", house.as_str().into()),
        ("entries", i64::try_from(report.entries).unwrap_or(i64::MAX).into()),
        ("issued", report.issued.into()),
        ("head", report.head.as_str().into()),
        ("balances", Value::Object(balances)),
        ("keys", Value::Array(keys.iter().map(|k| k.to_b64().into()).collect())),
        ("keys_from", from.into()),
    ])))
}

fn read_journal(path: &std::path::Path) -> Result<Object, Failure> {
    use std::io::Read;
    let shown = path.display();
    let f = std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read {shown}: {e}")))?;
    let mut buf = Vec::new();
    f.take(u64::try_from(MAX_JOURNAL_FILE_BYTES).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("cannot read {shown}: {e}")))?;
    match Value::parse(&buf, MAX_JOURNAL_FILE_BYTES) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Failure::usage(format!("{shown}: a journal is {{house, entries}}"))),
        Err(e) => Err(Failure::usage(format!("{shown}: {}", e.reason))),
    }
}

pub(crate) fn audit_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = format!(
        "the journal of {} holds: {} entries, each signed by a key from {}, chained, balanced; {} tokens issued\n  \
         head {}\n",
        safe(text(&o, "house")),
        show(&o, "entries"),
        text(&o, "keys_from"),
        show(&o, "issued"),
        text(&o, "head")
    );
    for (account, balance) in o.get("balances").and_then(Value::as_object).cloned().unwrap_or_default() {
        s.push_str(&format!("  {:>12} {}\n", balance.as_safe_integer().unwrap_or(0), safe(&account)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{approval_text, loopback};

    #[test]
    fn an_approval_shows_each_member_on_its_own_line_whatever_it_holds() {
        // A payee, an approver and a hold account that try to break or reorder the prompt.
        let p = nyx5_proto::Value::parse_str(
            r#"{"id":"p1","state":"pending","op":"charge","operator":"bo@b.test","concept":"gpu\nApprove: yes",
                "hold":{"account":"sol@a.test\u202e","amount":80},"summary":{"payee":"bo@b.test\nok"},
                "asks":[{"reason":"above 20"}],"awaiting":["sol@a.test\n  approved by: me"],
                "expires":"2026-12-03T00:00:00Z"}"#,
        )
        .unwrap();
        let shown = approval_text(p.as_object().unwrap());
        assert_eq!(
            shown,
            "p1 [pending] charge by bo@b.test: 80 tok from sol@a.test\\u{202e}, for \"gpu\\nApprove: yes\"\n  \
             what: payee: bo@b.test\\nok\n  asks: above 20\n  waits on: sol@a.test\\n  approved by: me; \
             until 2026-12-03T00:00:00Z\n"
        );
    }

    #[test]
    fn only_loopback_hosts_are_loopback() {
        for url in ["http://127.0.0.1:8080", "http://localhost", "http://[::1]:9/x", "http://127.9.9.9"] {
            assert!(loopback(url), "{url}");
        }
        for url in ["http://example.org", "http://10.0.0.1:80", "http://127.0.0.1.evil.test", "http://[::2]"] {
            assert!(!loopback(url), "{url}");
        }
    }
}
