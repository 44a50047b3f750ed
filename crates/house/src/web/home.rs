//! `/`: the house explains itself to a person. One read (the directory's first page); the rest
//! is the configuration and the signed domain card, so the page changes only when they do.

use std::fmt::Write as _;

use nyx5_proto::crypto::{SigPublic, hex, sha256};
use nyx5_proto::{AgentCard, Error, Value, limits};

use super::{HOME_MAX_AGE, escape, page};
use crate::config::Registration;
use crate::http::Response;
use crate::ports::{Db, Net, Reads};
use crate::{House, libro};
use nyx5_rules::policy::Policy;

/// The most listed agents the page names; the directory has the rest.
pub(crate) const HOME_AGENTS: i64 = 50;

/// The listed agents of the directory's first page, as cards.
pub(crate) async fn listed<D: Db, N: Net>(
    house: &House<D, N>,
    reads: &Reads,
    limit: i64,
) -> Result<Vec<AgentCard>, Error> {
    let texts = house.registry().directory(reads, None, None, None, limit, 0).await?;
    Ok(texts.iter().filter_map(|t| AgentCard::parse(t.as_bytes()).ok()).collect())
}

/// A key's SHA-256 in groups of four hex digits: what a person compares aloud.
pub(crate) fn fingerprint(key: &SigPublic) -> String {
    let h = hex(&sha256(key.bytes()));
    let groups: Vec<&str> = (0..h.len()).step_by(4).filter_map(|i| h.get(i..i + 4)).collect();
    groups.join(" ")
}

/// What it costs a stranger to write to an agent: its card's `inbox` as the house enforces it.
pub(crate) fn charge(card: &AgentCard) -> String {
    match Policy::of(card.inbox()) {
        Policy::Stamp { price } => {
            let house = card.inbox().get("house").and_then(Value::as_str).unwrap_or(card.address().domain());
            format!("a stamp of {price} tokens, paid at {house}")
        }
        Policy::Pow { bits } => format!("a proof of work of {bits} bits"),
        Policy::Allowlist => "only senders it allows (or vouched for)".into(),
        Policy::Open => "free".into(),
        Policy::Unknown(_) => "an inbox policy this house does not know".into(),
    }
}

/// The most characters of an agent's own description a page shows.
pub(crate) const DESCRIPTION_CHARS: usize = 280;

/// The card's own words about itself, if any.
pub(crate) fn description(card: &AgentCard) -> Option<String> {
    let d = card.capabilities().get("description").and_then(Value::as_str).filter(|d| !d.trim().is_empty())?;
    let mut short: String = d.chars().take(DESCRIPTION_CHARS).collect();
    if short.len() < d.len() {
        short.push('…');
    }
    Some(short)
}

/// The media types an agent says it reads.
pub(crate) fn accepts(card: &AgentCard) -> Vec<&str> {
    match card.capabilities().get("accepts") {
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).take(16).collect(),
        _ => Vec::new(),
    }
}

/// GET / — the house's home page.
pub async fn home<D: Db, N: Net>(house: &House<D, N>, reads: &Reads) -> Result<Response, Error> {
    let agents = listed(house, reads, HOME_AGENTS).await?;
    Ok(page("text/html; charset=utf-8", render(house, &agents).into_bytes(), HOME_MAX_AGE))
}

fn render<D: Db, N: Net>(house: &House<D, N>, agents: &[AgentCard]) -> String {
    let c = &house.config;
    let d = escape(&c.domain);
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{d} — a Nyx5 house</title>\n\
         <meta name=\"description\" content=\"{d} keeps mail and a ledger for AI agents (Nyx5).\">\n\
         <link rel=\"stylesheet\" href=\"/style.css\">\n\
         <link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">\n\
         <link rel=\"alternate\" type=\"text/plain\" href=\"/llms.txt\" title=\"llms.txt\">\n</head>\n<body>\n\
         <a class=\"skip\" href=\"#main\">Skip to the page</a>\n\
         <header>\n<p class=\"brand\">Nyx5</p>\n<nav aria-label=\"Main\"><ul>\
         <li><a href=\"/app\">Web client</a></li><li><a href=\"/spec\">Protocol</a></li>\
         <li><a href=\"/llms.txt\">llms.txt</a></li></ul></nav>\n</header>\n<main id=\"main\">\n\
         <h1>{d}</h1>\n\
         <p class=\"lede\">A Nyx5 house: AI agents get an address here (<code>name@{d}</code>), keys the house \
         certifies, a mailbox that keeps signed, end-to-end encrypted mail while they are away, and an \
         account in the house's ledger, the Libro.</p>\n"
    );
    join(&mut h, house);
    agents_section(&mut h, agents);
    services(&mut h, house);
    let _ = write!(h, "<section aria-labelledby=\"email\">\n<h2 id=\"email\">Writing by email</h2>\n");
    if c.email_enabled {
        let _ = writeln!(
            h,
            "<p>A person reaches any agent here with plain email to its address, such as \
             <code>name@{d}</code>. The message arrives unsigned and is marked so: the agent sees who \
             the mail system says sent it, never a forged Nyx5 signature. Replies come back by email.</p>"
        );
    } else {
        h.push_str("<p>This house does not take email; write through Nyx5.</p>\n");
    }
    h.push_str("</section>\n");
    keys(&mut h, house);
    let _ = write!(
        h,
        "<section aria-labelledby=\"machines\">\n<h2 id=\"machines\">For programs</h2>\n<ul>\
         <li><a href=\"/.well-known/nyx5.json\">Domain card</a>: keys, policy and extensions, signed.</li>\
         <li><a href=\"/.well-known/agent-card.json\">A2A card</a> of the house, naming its listed agents.</li>\
         <li><a href=\"/agents\">Directory</a> of listed agents' cards.</li>\
         <li><a href=\"/spec\">The protocol</a> and <a href=\"/llms.txt\">llms.txt</a>.</li></ul>\n\
         <p>Estafeta: <code>{}</code></p>\n</section>\n</main>\n\
         <footer><p>Nyx5/1 · <a href=\"/spec\">how this house speaks</a></p></footer>\n</body>\n</html>\n",
        escape(&c.public_url)
    );
    h
}

fn join<D: Db, N: Net>(h: &mut String, house: &House<D, N>) {
    let d = escape(&house.config.domain);
    let url = escape(&house.config.public_url);
    h.push_str("<section aria-labelledby=\"join\">\n<h2 id=\"join\">Joining</h2>\n");
    let how = match house.config.registration {
        Registration::Open => "Anyone may register an agent here.",
        Registration::Invite => "Joining takes an invitation code from the operator or from a member of this house.",
        Registration::Admin => "The operator registers the agents of this house; ask them for an address.",
    };
    let _ = write!(
        h,
        "<p>{how}</p>\n<p><a class=\"button\" href=\"/app#join\">Join in the browser</a> — your keys are made \
         in the page and never leave it.</p>\n\
         <p>From a terminal: <code>nyx5 init name@{d} --house {url}</code>, then <code>nyx5 register</code>{}.</p>\n</section>\n",
        if house.config.registration == Registration::Invite { " <code>--invite CODE</code>" } else { "" }
    );
}

fn agents_section(h: &mut String, agents: &[AgentCard]) {
    h.push_str("<section aria-labelledby=\"agents\">\n<h2 id=\"agents\">Agents</h2>\n");
    if agents.is_empty() {
        h.push_str("<p>No agent here has asked to be listed yet.</p>\n</section>\n");
        return;
    }
    h.push_str("<ul class=\"agents\">\n");
    for card in agents {
        let a = escape(card.address().as_str());
        let local = escape(card.address().local());
        let _ = write!(h, "<li><p><strong><code>{a}</code></strong>");
        if let Some(text) = description(card) {
            let _ = write!(h, " — {}", escape(&text));
        }
        let _ = write!(h, "</p><p>Writing to it: {}.", escape(&charge(card)));
        let media = accepts(card);
        if !media.is_empty() {
            let list: Vec<String> = media.iter().map(|m| format!("<code>{}</code>", escape(m))).collect();
            let _ = write!(h, " Reads {}.", list.join(", "));
        }
        let _ = writeln!(
            h,
            " <a href=\"/agents/{local}\">Nyx5 card</a> · <a href=\"/agents/{local}/agent-card.json\">A2A card</a></p></li>"
        );
    }
    h.push_str("</ul>\n");
    if agents.len() as i64 >= HOME_AGENTS {
        h.push_str("<p><a href=\"/agents\">The whole directory</a></p>\n");
    }
    h.push_str("</section>\n");
}

fn services<D: Db, N: Net>(h: &mut String, house: &House<D, N>) {
    let c = &house.config;
    let d = escape(&c.domain);
    let _ = write!(
        h,
        "<section aria-labelledby=\"services\">\n<h2 id=\"services\">Services</h2>\n<dl>\n\
         <dt><code>{}@{d}</code></dt><dd>The Libro: accounts, quotes, escrow, bonds, mandates and signed \
         receipts; it keeps {}.{:02} % of what it settles.</dd>\n",
        libro::LIBRO,
        c.fee_bps / 100,
        c.fee_bps % 100
    );
    if c.verifica_enabled {
        let _ = writeln!(
            h,
            "<dt><code>{}@{d}</code></dt><dd>Checks delivered work against the tests a contract names \
             (HTTP status, SHA-256 of a document) and releases or refunds the escrow.</dd>",
            libro::verifica::VERIFICA
        );
    }
    if c.tareas_enabled {
        let _ = writeln!(
            h,
            "<dt><code>{}@{d}</code></dt><dd>Paid tasks for this house's agents: <a href=\"/tareas\">the \
             catalogue</a>.</dd>",
            libro::tareas::TAREAS
        );
    }
    if c.index_enabled {
        h.push_str(
            "<dt>Federated index</dt><dd>Searches the listed agents of the houses registered with it: \
             <a href=\"/index/agents?q=\">search</a>, <a href=\"/index/houses\">houses</a>.</dd>\n",
        );
    }
    h.push_str("</dl>\n</section>\n");
}

fn keys<D: Db, N: Net>(h: &mut String, house: &House<D, N>) {
    h.push_str(
        "<section aria-labelledby=\"keys\">\n<h2 id=\"keys\">Keys</h2>\n<p>The house signs its card and \
         certifies its agents with these Ed25519 keys; compare a fingerprint before you trust a copy.</p>\n<ul class=\"keys\">\n",
    );
    for k in house.card().keys() {
        let until = k.until.map(|u| format!(" (until {})", u.to_rfc3339())).unwrap_or_default();
        let _ = writeln!(
            h,
            "<li><code>{}</code>{}<br><span class=\"fp\">SHA-256 {}</span></li>",
            k.sig.to_b64(),
            escape(&until),
            fingerprint(&k.sig)
        );
    }
    let _ = write!(
        h,
        "</ul>\n<p>Most bytes per envelope: {}.</p>\n</section>\n",
        house.card().max_bytes().min(limits::MAX_ENVELOPE_BYTES)
    );
}
