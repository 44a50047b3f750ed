//! The house on the web (issue 14): the home page, the protocol pages, A2A cards, and the
//! headers, HEAD, OPTIONS and conditional requests every route gets.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod kit;

use kit::*;
use nyx5_house::config::Registration;
use nyx5_house::web;
use nyx5_proto::Value;
use nyx5_proto::json::obj;

fn get(h: &TestHouse, path: &str, headers: &[(&str, &str)]) -> nyx5_house::Response {
    call_raw(h, "GET", path, headers, vec![])
}

fn text(r: &nyx5_house::Response) -> String {
    String::from_utf8(r.body.clone()).unwrap()
}

fn register(h: &TestHouse, a: &Agent, caps: Value, inbox: Option<Value>) {
    let mut extra = vec![("capabilities", caps)];
    if let Some(i) = inbox {
        extra.push(("inbox", i));
    }
    let admin = format!("Bearer admin-{}", h.config.domain);
    assert_eq!(call(h, "POST", "/agents", &[("authorization", &admin)], &a.registration(h, &extra)).status, 201);
}

fn caps(listed: bool, description: &str) -> Value {
    Value::Object(obj([
        ("listed", Value::Bool(listed)),
        ("description", description.into()),
        ("accepts", Value::Array(vec!["text/plain".into()])),
        ("translate", "Spanish to English".into()),
    ]))
}

#[test]
fn the_home_page_names_the_house_its_listed_agents_and_how_to_join() {
    let w = World::new();
    let h = w.house("a.test", Registration::Invite);
    let listed = Agent::new("translator@a.test", 1);
    let hidden = Agent::new("hidden@a.test", 2);
    register(
        &h,
        &listed,
        caps(true, "Translates <b>Spanish</b> & \"more\""),
        Some(Value::Object(obj([("policy", "stamp".into()), ("price", 3.into())]))),
    );
    register(&h, &hidden, caps(false, "secret"), None);
    let r = get(&h, "/", &[]);
    assert_eq!((r.status, r.content_type), (200, "text/html; charset=utf-8"));
    let page = text(&r);
    assert!(page.starts_with("<!doctype html>\n<html lang=\"en\">"));
    assert!(page.contains("<h1>a.test</h1>"));
    assert!(page.contains("<main id=\"main\">") && page.contains("<nav aria-label=\"Main\">"));
    // Listed agents only, their words escaped, their price said.
    assert!(page.contains("<code>translator@a.test</code>"));
    assert!(page.contains("Translates &lt;b&gt;Spanish&lt;/b&gt; &amp; &quot;more&quot;"));
    assert!(!page.contains("<b>Spanish"));
    assert!(page.contains("a stamp of 3 tokens, paid at a.test"));
    assert!(!page.contains("hidden@a.test") && !page.contains("secret"));
    // How to join, in this house's mode; the key and its fingerprint.
    assert!(page.contains("takes an invitation code"));
    assert!(page.contains("--invite CODE"));
    let key = h.card().keys()[0].sig;
    assert!(page.contains(&key.to_b64()));
    // The fingerprint is the key's SHA-256 in groups of four hex digits.
    let digest = nyx5_proto::crypto::hex(&nyx5_proto::crypto::sha256(key.bytes()));
    let grouped: Vec<&str> = (0..64).step_by(4).map(|i| &digest[i..i + 4]).collect();
    assert!(page.contains(&format!("SHA-256 {}", grouped.join(" "))));
    assert!(page.contains("<a href=\"/agents/translator/agent-card.json\">A2A card</a>"));
    // A strict policy, a tag, a cache lifetime, and the headers every answer gets.
    assert_eq!(r.header("content-security-policy"), Some(web::PAGE_POLICY));
    assert!(!web::PAGE_POLICY.contains("unsafe"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    // The page follows the directory: a new listed agent changes it, and its tag.
    let tag = r.header("etag").unwrap().to_owned();
    register(&h, &Agent::new("second@a.test", 3), caps(true, "Second"), None);
    let again = get(&h, "/", &[]);
    assert!(text(&again).contains("second@a.test"));
    assert_ne!(again.header("etag").unwrap(), tag);
}

#[test]
fn the_home_page_says_what_each_mode_and_service_offers() {
    let w = World::new();
    let mut config = w.config("b.test", Registration::Open);
    config.email_enabled = false;
    config.verifica_enabled = true;
    config.tareas_enabled = true;
    let h = w.start(config);
    let page = text(&get(&h, "/", &[]));
    assert!(page.contains("Anyone may register an agent here."));
    assert!(!page.contains("--invite"));
    assert!(page.contains("verifica@b.test") && page.contains("tareas@b.test"));
    assert!(page.contains("does not take email"));
    assert!(page.contains("No agent here has asked to be listed yet."));
    let w = World::new();
    let h = w.house("c.test", Registration::Admin);
    let page = text(&get(&h, "/", &[]));
    assert!(page.contains("The operator registers the agents"));
    assert!(!page.contains("verifica@c.test"));
    assert!(page.contains("plain email"));
}

#[test]
fn a_client_holding_the_page_gets_304_and_head_gets_the_same_headers() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    for path in ["/", "/spec", "/llms.txt", "/style.css", "/favicon.svg", "/.well-known/agent-card.json"] {
        let full = get(&h, path, &[]);
        assert_eq!(full.status, 200, "{path}");
        let tag = full.header("etag").unwrap().to_owned();
        let held = get(&h, path, &[("if-none-match", &tag)]);
        assert_eq!((held.status, held.body.len()), (304, 0), "{path}");
        assert_eq!(held.header("etag"), Some(tag.as_str()));
        let head = call_raw(&h, "HEAD", path, &[], vec![]);
        assert_eq!((head.status, head.content_type, &head.headers), (200, full.content_type, &full.headers), "{path}");
        // The adapters send no body for HEAD; the engine's length is the GET's.
        assert_eq!(head.body.len(), full.body.len());
    }
    // HEAD answers wherever GET does, API routes included; elsewhere the same errors.
    assert_eq!(call_raw(&h, "HEAD", "/health", &[], vec![]).status, 200);
    assert_eq!(call_raw(&h, "HEAD", "/.well-known/nyx5.json", &[], vec![]).status, 200);
    assert_eq!(call_raw(&h, "HEAD", "/nowhere", &[], vec![]).status, 404);
    assert_eq!(call_raw(&h, "HEAD", "/outbound", &[], vec![]).status, 405);
    assert_eq!(call_raw(&h, "POST", "/spec", &[], vec![]).status, 405);
}

#[test]
fn a_preflight_is_answered_for_routes_the_house_has_and_only_those() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let pages = [
        "/",
        "/spec",
        "/llms.txt",
        "/style.css",
        "/favicon.svg",
        "/.well-known/agent-card.json",
        "/agents/x/agent-card.json",
    ];
    for path in pages {
        assert_eq!(call_raw(&h, "POST", path, &[], vec![]).status, 405, "{path}");
    }
    for path in ["/outbound", "/mailbox/x", "/mailbox/x/ack", "/agents", "/libro/cuenta/x@a.test"].iter().chain(&pages)
    {
        let r = call_raw(&h, "OPTIONS", path, &[("origin", "https://elsewhere.test")], vec![]);
        assert_eq!(r.status, 204, "{path}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        let allowed = r.header("access-control-allow-headers").unwrap();
        assert!(allowed.contains("authorization") && allowed.contains("content-type"));
        // A browser may send back the bookmark it was given (docs/SPEC.md "Reading your own writes").
        assert!(allowed.contains("nyx5-bookmark"));
        assert!(r.header("access-control-allow-methods").unwrap().contains("POST"));
    }
    let r = call_raw(&h, "OPTIONS", "/nowhere", &[], vec![]);
    assert_eq!(r.status, 404);
    assert!(r.value().unwrap().as_object().unwrap().contains_key("code"));
    // An error carries the origin header too, so a browser can read why.
    let r = call_raw(&h, "GET", "/agents/nobody", &[], vec![]);
    assert_eq!((r.status, r.header("access-control-allow-origin")), (404, Some("*")));
}

#[test]
fn the_spec_page_is_the_markdown_rendered_with_ids_and_escaped() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let r = get(&h, "/spec", &[]);
    assert_eq!(r.content_type, "text/html; charset=utf-8");
    let page = text(&r);
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.contains("<h1 id=\"nyx5-1-as-this-implementation-speaks-it\">"));
    assert!(page.contains("<code>X25519+HKDF-SHA256+A256GCM</code>"));
    assert!(page.contains("<table>") && page.contains("<th>"));
    // A section link in the table of contents points at a heading that exists.
    let link = page.split("<li><a href=\"#").nth(1).unwrap().split('"').next().unwrap();
    assert!(page.contains(&format!(" id=\"{link}\"")));
    // The Markdown's angle brackets are text, never markup; no style or script in the page.
    assert!(page.contains("&lt;"));
    assert!(!page.contains("<id>") && !page.contains("<script") && !page.contains("<style"));
    let llms = get(&h, "/llms.txt", &[]);
    assert_eq!(llms.content_type, "text/plain; charset=utf-8");
    let llms = text(&llms);
    assert!(llms.starts_with("# Nyx5\n\n> "));
    assert!(llms.contains("- [The protocol](/spec)"));
    // A link to every section of the page, each to an id the page has.
    let page_ids = text(&get(&h, "/spec", &[]));
    let sections: Vec<&str> = llms.lines().filter(|l| l.starts_with("- [") && l.contains("](/spec#")).collect();
    assert!(sections.len() > 20, "{llms}");
    assert!(sections.iter().any(|l| l.contains("Authority")), "{llms}");
    for l in sections {
        let id = l.split("](/spec#").nth(1).unwrap().trim_end_matches(')');
        assert!(page_ids.contains(&format!(" id=\"{id}\"")), "{id}");
    }
}

#[test]
fn a_listed_agent_has_an_a2a_card_derived_from_its_nyx5_card() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let a = Agent::new("translator@a.test", 1);
    register(&h, &a, caps(true, "Translates Spanish"), None);
    register(&h, &Agent::new("hidden@a.test", 2), caps(false, "x"), None);
    let r = get(&h, "/agents/translator/agent-card.json", &[]);
    assert_eq!((r.status, r.content_type), (200, "application/json"));
    let v = r.value().unwrap();
    let c = v.as_object().unwrap();
    assert_eq!(c["name"].as_str(), Some("translator@a.test"));
    assert_eq!(c["description"].as_str(), Some("Translates Spanish"));
    // A2A's JSON-RPC binding first (the gateway, tests/a2a.rs), then Nyx5 mail.
    let ifaces = c["supportedInterfaces"].as_array().unwrap();
    let rpc = ifaces[0].as_object().unwrap();
    assert_eq!(rpc["url"].as_str().unwrap(), format!("{}/agents/translator/a2a", h.config.public_url));
    assert_eq!((rpc["protocolBinding"].as_str(), rpc["protocolVersion"].as_str()), (Some("JSONRPC"), Some("1.0")));
    let iface = ifaces[1].as_object().unwrap();
    assert_eq!(iface["url"].as_str(), Some(h.config.public_url.as_str()));
    assert_eq!(iface["protocolBinding"].as_str(), Some("NYX5"));
    let ext = c["capabilities"].as_object().unwrap()["extensions"].as_array().unwrap()[0].as_object().unwrap();
    assert_eq!(ext["uri"].as_str(), Some(web::a2a::EXT_A2A));
    // Optional now that A2A's own binding reaches the agent (written as A2A's default: absent).
    assert_eq!(ext.get("required"), None);
    let params = ext["params"].as_object().unwrap();
    assert_eq!(params["address"].as_str(), Some("translator@a.test"));
    assert_eq!(params["sig"].as_str(), Some(a.sig.public().to_b64().as_str()));
    assert_eq!(params["enc"].as_str(), Some(a.enc.public().to_b64().as_str()));
    assert_eq!(params["card"].as_str().unwrap(), format!("{}/agents/translator", h.config.public_url));
    // Skills from its capabilities, never the card's own members.
    let skills: Vec<&str> =
        c["skills"].as_array().unwrap().iter().map(|s| s.as_object().unwrap()["id"].as_str().unwrap()).collect();
    assert_eq!(skills, ["translate"]);
    // A capability's text is its skill's description.
    let skill = c["skills"].as_array().unwrap()[0].as_object().unwrap();
    assert_eq!(skill["description"].as_str(), Some("Spanish to English"));
    assert_eq!(c["defaultInputModes"], Value::Array(vec!["text/plain".into()]));
    // Unlisted, unknown and the house's own agents have none.
    for who in ["hidden", "nobody", "libro"] {
        assert_eq!(get(&h, &format!("/agents/{who}/agent-card.json"), &[]).status, 404, "{who}");
    }
    // The house's card names each listed agent as a skill, with the URL of its own card.
    let house = get(&h, "/.well-known/agent-card.json", &[]).value().unwrap();
    let house = house.as_object().unwrap();
    assert_eq!(house["name"].as_str(), Some("a.test"));
    let skills = house["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1);
    let s = skills[0].as_object().unwrap();
    assert_eq!(s["id"].as_str(), Some("translator@a.test"));
    assert!(s["examples"].as_array().unwrap()[0].as_str().unwrap().ends_with("/agents/translator/agent-card.json"));
}

#[test]
fn the_domain_card_declares_only_extensions_the_house_serves() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let ext = h.card().extensions();
    assert!(ext.iter().any(|e| e == web::a2a::EXT_A2A));
    // The house runs no MCP server: `nyx5 mcp` is the agent's own bridge, so it is not declared.
    assert!(!ext.iter().any(|e| e == "urn:nyx5:ext:mcp"));
}

#[test]
fn the_home_page_states_a_policy_as_the_house_enforces_it_and_keeps_words_short() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let long = "word ".repeat(200);
    register(
        &h,
        &Agent::new("hard@a.test", 1),
        caps(true, &long),
        Some(Value::Object(obj([("policy", "pow".into()), ("pow_bits", 40.into())]))),
    );
    register(
        &h,
        &Agent::new("cheap@a.test", 2),
        caps(true, "x"),
        Some(Value::Object(obj([("policy", "stamp".into())]))),
    );
    let page = text(&get(&h, "/", &[]));
    assert!(page.contains("a proof of work of 32 bits"), "clamped as the house clamps it");
    assert!(page.contains("a stamp of 1 tokens"), "the house's least price");
    assert!(!page.contains(&long) && page.contains(&format!("{}…", &long[..280])));
    // An agent that names no media says nothing of what it reads.
    let plain = Value::Object(obj([("listed", Value::Bool(true)), ("description", "plain".into())]));
    register(&h, &Agent::new("plain@a.test", 3), plain, None);
    let page = text(&get(&h, "/", &[]));
    let entry = page.split("<code>plain@a.test</code>").nth(1).unwrap().split("</li>").next().unwrap();
    assert!(entry.contains("Writing to it: free.") && !entry.contains("Reads"), "{entry}");
    assert!(
        page.split("<code>cheap@a.test</code>")
            .nth(1)
            .unwrap()
            .split("</li>")
            .next()
            .unwrap()
            .contains("Reads <code>text/plain</code>")
    );
}

/// The Worker serves /spec and /llms.txt as static assets (scripts/build-app), with the headers
/// `web/_headers` gives them; those must be what the engine sends with the same pages under
/// `nyx5 serve`, or the two runtimes would answer one document under two policies.
#[test]
fn the_workers_static_pages_carry_the_headers_the_engine_sends() {
    let rules = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/_headers")).unwrap();
    let mut blocks: Vec<(&str, Vec<(String, &str)>)> = Vec::new();
    for line in rules.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        match (line.strip_prefix("  "), blocks.last_mut()) {
            (Some(header), Some((_, headers))) => {
                let (name, value) = header.split_once(": ").unwrap();
                headers.push((name.to_ascii_lowercase(), value));
            }
            _ => blocks.push((line, Vec::new())),
        }
    }
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    for path in ["/spec", "/llms.txt"] {
        let (_, headers) =
            blocks.iter().find(|(p, _)| *p == path).unwrap_or_else(|| panic!("web/_headers names no {path}"));
        let engine = get(&h, path, &[]);
        assert_eq!(engine.status, 200);
        for name in [
            "content-security-policy",
            "referrer-policy",
            "x-content-type-options",
            "access-control-allow-origin",
            "cache-control",
        ] {
            let asset = headers.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
            assert_eq!(asset, engine.header(name), "{path}: {name}");
        }
    }
    assert_eq!(web::SPEC_HTML.map(str::len), Some(text(&get(&h, "/spec", &[])).len()));
}

/// Every path the router knows answers a method it does not take with 405, in the error shape;
/// a path it does not know is 404, whatever the method.
#[test]
fn every_known_path_refuses_other_methods_with_405() {
    let w = World::new();
    let h = w.house("a.test", Registration::Admin);
    let wrong = [
        ("PUT", "/"),
        ("POST", "/spec"),
        ("POST", "/llms.txt"),
        ("POST", "/style.css"),
        ("POST", "/favicon.svg"),
        ("POST", "/.well-known/agent-card.json"),
        ("POST", "/agents/ana/agent-card.json"),
        ("POST", "/.well-known/nyx5.json"),
        ("POST", "/health"),
        ("DELETE", "/agents"),
        ("POST", "/agents/ana"),
        ("POST", "/agents/ana/settings"),
        ("POST", "/agents/ana/historial"),
        ("DELETE", "/invitations"),
        ("POST", "/mailbox/ana"),
        ("GET", "/mailbox/ana/ack"),
        ("GET", "/inbound"),
        ("PUT", "/lists/ana"),
        ("POST", "/pins"),
        ("GET", "/pins/b.test/confirm"),
        ("GET", "/email/in"),
        ("GET", "/email/out"),
        ("POST", "/libro/cuenta/ana@a.test"),
        ("POST", "/libro/contrato/c1"),
        ("GET", "/libro/topup"),
        ("POST", "/libro/diario"),
        ("DELETE", "/index/houses"),
        ("POST", "/index/agents"),
        ("DELETE", "/tareas"),
        ("GET", "/tareas/t1/retire"),
        ("PUT", "/apps"),
        ("POST", "/apps/x"),
        ("GET", "/outbound"),
        ("POST", "/outbox/ana"),
    ];
    for (method, path) in wrong {
        let r = call_raw(&h, method, path, &[], vec![]);
        assert_eq!(r.status, 405, "{method} {path}");
        let body = r.value().unwrap();
        assert_eq!(body.as_object().unwrap()["error"], Value::from("wrong_method"), "{method} {path}");
        // The reason names the method and the path.
        let reason = body.as_object().unwrap()["reason"].as_str().unwrap().to_owned();
        assert_eq!(reason, format!("{method} is not allowed on {path}"));
    }
    for (method, path) in
        [("GET", "/nope"), ("POST", "/agents/ana/nope"), ("GET", "/libro"), ("GET", "/tareas/t1"), ("PUT", "/apps/x/y")]
    {
        assert_eq!(call_raw(&h, method, path, &[], vec![]).status, 404, "{method} {path}");
    }
}

const BOOKMARK: &str = "nyx5-bookmark";

#[test]
fn stale_reads_come_from_a_replica_and_the_bookmark_reads_its_own_writes() {
    let w = World::new();
    let h = w.house("a.test", Registration::Invite);
    let other = w.house("b.test", Registration::Invite);
    // Without replicas (nyx5 serve) an answer has no bookmark to give.
    assert_eq!(get(&other, "/", &[]).header(BOOKMARK), None);
    h.db.lag();
    other.db.lag();
    let ana = Agent::new("ana@a.test", 1);
    let admin = format!("Bearer admin-{}", h.config.domain);
    let r = call(
        &h,
        "POST",
        "/agents",
        &[("authorization", &admin)],
        &ana.registration(&h, &[("capabilities", caps(true, "x"))]),
    );
    assert_eq!(r.status, 201);
    let written = r.header(BOOKMARK).expect("a write's answer carries a bookmark").to_owned();
    assert_eq!(r.header("access-control-expose-headers"), Some(BOOKMARK));
    // Routes that may be a moment stale read the replica, which has not caught up…
    assert_eq!(get(&h, "/agents/ana/historial", &[]).status, 404);
    // …but a card, which other houses verify signatures by, is read on the primary: the card
    // after a key reset, never the one before it.
    for path in ["/agents/ana", "/agents/ana/agent-card.json"] {
        assert_eq!(get(&h, path, &[]).status, 200, "{path}");
    }
    let directory = json(&get(&h, "/agents", &[]), 200);
    assert_eq!(directory.as_object().unwrap()["agents"], Value::Array(vec![]));
    assert!(!text(&get(&h, "/", &[])).contains("ana@a.test"));
    // …while what decides stays on the primary: the owner's token checks there, and the page
    // (read through the replica) answers.
    let page = json(&ana.get(&h, "/mailbox/ana"), 200);
    assert_eq!(page.as_object().unwrap()["envelopes"], Value::Array(vec![]));
    // Another house's bookmark is not one this house gave: ignored, the read as stale as without.
    let b = Agent::new("bo@b.test", 2);
    let admin_b = format!("Bearer admin-{}", other.config.domain);
    let rb = call(&other, "POST", "/agents", &[("authorization", &admin_b)], &b.registration(&other, &[]));
    let foreign = rb.header(BOOKMARK).unwrap().to_owned();
    let r = get(&h, "/agents/ana/historial", &[(BOOKMARK, &foreign)]);
    assert_eq!(r.status, 404);
    assert!(r.header(BOOKMARK).is_some(), "the answer hands out a bookmark of this house");
    // A malformed one is refused by name, on any route.
    for bad in ["not a bookmark!", &"A".repeat(nyx5_house::bookmark::MAX_HEADER_CHARS + 1)] {
        for (method, path) in [("GET", "/agents/ana"), ("GET", "/health"), ("POST", "/agents")] {
            let r = call_raw(&h, method, path, &[(BOOKMARK, bad)], vec![]);
            let body = json(&r, 400);
            assert_eq!(body.as_object().unwrap()["error"], Value::from("bad_bookmark"), "{method} {path}");
        }
    }
    // The write's bookmark brings the read up to the write, and the answer carries one again
    // (sealed afresh: the same point never reads the same twice).
    let r = get(&h, "/agents/ana/historial", &[(BOOKMARK, &written)]);
    assert_eq!(r.status, 200);
    let again = r.header(BOOKMARK).unwrap();
    assert_ne!(again, written);
    assert!(text(&get(&h, "/agents", &[(BOOKMARK, again)])).contains("ana@a.test"));
}
