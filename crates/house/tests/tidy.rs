//! The crates' layers, read from their source (issue 37 §3; rust-analyzer's tidy tests are the
//! model). Each module of each crate in [`CRATES`] has a layer in its table (the house's is
//! [`LAYERS`]); a module may name one of its own layer or below, never above: the rules decide
//! without the store, the store knows no service, no service calls a route, a document of proto
//! is built on its keys and data and never the other way. The test reads every `crate::…` and
//! `super::…` path in the code (comments left out) and fails on an arrow that runs back up, or on
//! a circle of modules. (Between crates the manifests hold the arrows: `proto ← rules ← client ← house ←
//! {Worker, cli}`, web on proto alone.)
//!
//! The arrows and circles a crate has today are listed beside its table (the house's are
//! [`KNOWN_UPWARD`] and [`KNOWN_CIRCLES`], both empty): the debt issue 37 pays off. The lists
//! only shrink: a new arrow up fails the test, and so does a listed one that is gone (take it off
//! the list, so it cannot come back unseen). The engine's services are views of the house's
//! borrows (issue 37 §2): a service that needs another builds it by name (`self.libro()` is
//! `crate::libro::Libro`), so a call between rooms is a path the test reads, and a service that
//! named the house (`crate::House`) would run up to the root that builds it. Routes call
//! services, never the store: no module of the routes layer names `store` (nor the root's
//! `port_error`), so a route holds no SQL ([`routes_into_store`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::print_stdout, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers, lowest first, by module path (the longest prefix that is listed wins). `crate` is
/// the crate root (`lib.rs`: `House`, the composition root), above the services it builds.
const LAYERS: &[(&str, &str)] = &[
    // Ports and plain utilities: no rule, no SQL, no engine.
    ("ports", "base"),
    ("join", "base"),
    ("live", "base"),
    ("shards", "base"),
    ("weburl", "base"),
    ("site", "base"),
    ("migrations", "base"),
    ("sqlite", "base"),
    ("http", "base"),
    ("bookmark", "base"),
    ("config", "base"),
    ("ground", "base"),
    // Rules: pure decisions over facts.
    ("outbound", "rules"),
    // SQL, and nothing above it.
    ("store", "store"),
    // The engine's services: views of the house's borrows, one per noun (issue 37 §2). A
    // service builds another from its own borrows; none names the house. `view` is what every
    // view is made of (the shared borrows and memos), below the services that name it.
    ("view", "services"),
    ("inboxes", "services"),
    ("auth", "services"),
    ("mailbox", "services"),
    ("queue", "services"),
    ("resolver", "services"),
    ("domain_keys", "services"),
    ("index", "services"),
    ("libro", "services"),
    ("email", "services"),
    ("apps", "services"),
    ("drafts", "services"),
    ("attachments", "services"),
    ("a2a", "services"),
    ("a2a_tasks", "services"),
    ("a2a_stream", "services"),
    // The composition root: `House` owns the state, builds the services, answers and ticks.
    ("crate", "house"),
    // What a fresh isolate runs once: it drives the request path as a request would.
    ("warm", "top"),
    // What answers requests.
    ("routes", "routes"),
    ("router", "routes"),
    ("web", "routes"),
    // The simulator drives everything.
    ("sim", "top"),
];

const ORDER: &[&str] = &["base", "rules", "store", "services", "house", "routes", "top"];

/// Arrows up that the code has today: `from -> to`, each a module path.
const KNOWN_UPWARD: &[&str] = &[];

/// Circles of modules in one layer that the code has today, each as its modules, sorted. None:
/// the last, `libro mailbox`, went when the Libro's system agents took their operations to
/// `operate` directly and the inbox policies the Libro asks moved to `inboxes`.
const KNOWN_CIRCLES: &[&str] = &[];

/// A crate whose modules keep layers: where its code is, its table of layers (lowest first in
/// `order`; the longest listed prefix of a module's path wins), the items its root re-exports
/// from a module (so `crate::Error` is an arrow to `error`, not to the root), and the arrows up
/// and circles it has today (each list only shrinks).
struct Crate {
    src: &'static str,
    layers: &'static [(&'static str, &'static str)],
    order: &'static [&'static str],
    root_items: &'static [(&'static str, &'static str)],
    known_upward: &'static [&'static str],
    known_circles: &'static [&'static str],
}

impl Crate {
    fn layer_of(&self, module: &str) -> &'static str {
        self.layers
            .iter()
            .filter(|(prefix, _)| module == *prefix || module.starts_with(&format!("{prefix}::")))
            .max_by_key(|(prefix, _)| prefix.len())
            .map_or_else(|| panic!("{}: {module} has no layer", self.src), |(_, layer)| *layer)
    }

    fn rank(&self, layer: &str) -> usize {
        self.order.iter().position(|l| *l == layer).unwrap()
    }
}

const HOUSE: Crate = Crate {
    src: "crates/house/src",
    layers: LAYERS,
    order: ORDER,
    root_items: ROOT_ITEMS,
    known_upward: KNOWN_UPWARD,
    known_circles: KNOWN_CIRCLES,
};

/// The protocol crate: plain data and encodings, then keys and signatures, then the documents
/// (cards, envelopes, the Libro's), then the root's re-exports.
const PROTO: Crate = Crate {
    src: "crates/proto/src",
    layers: &[
        ("json", "data"),
        ("b64", "data"),
        ("vecmap", "data"),
        ("time", "data"),
        ("limits", "data"),
        ("kind", "data"),
        ("error", "data"),
        ("refusal", "data"),
        ("address", "data"),
        ("crypto", "keys"),
        ("sign", "keys"),
        ("pow", "keys"),
        ("jws", "keys"),
        ("card", "documents"),
        ("envelope", "documents"),
        ("seal", "documents"),
        ("sealed", "documents"),
        ("auth", "documents"),
        ("relay", "documents"),
        ("quote", "documents"),
        ("receipt", "documents"),
        ("libro", "documents"),
        ("ops", "documents"),
        ("authority", "documents"),
        ("app", "documents"),
        ("mailbox", "documents"),
        ("crate", "top"),
    ],
    order: &["data", "keys", "documents", "top"],
    root_items: &[
        ("Address", "address"),
        ("AgentCard", "card"),
        ("DomainCard", "card"),
        ("Envelope", "envelope"),
        ("Error", "error"),
        ("ErrorKind", "error"),
        ("Object", "json"),
        ("Value", "json"),
        ("Refusal", "refusal"),
        ("Verified", "sign"),
        ("Timestamp", "time"),
    ],
    known_upward: PROTO_UPWARD,
    known_circles: PROTO_CIRCLES,
};

/// The rules crate: each family of rules on its own; the policy reads the Libro's contracts. The
/// Libro's model (its states and roles, and what its kernel and authority gate read and decide
/// over) is below its rules: the kernel decides and calls the gate, the gate names the model
/// alone.
const RULES: Crate = Crate {
    src: "crates/rules/src",
    layers: &[
        ("site", "base"),
        ("psl_checksum", "base"),
        ("mailbox", "base"),
        ("libro::state", "model"),
        ("libro::model", "model"),
        ("email", "rules"),
        ("libro", "rules"),
        ("profile", "rules"),
        ("queue", "rules"),
        ("drafts", "rules"),
        ("a2a", "rules"),
        ("policy", "policies"),
        ("crate", "top"),
    ],
    order: &["base", "model", "rules", "policies", "top"],
    root_items: &[],
    known_upward: &[],
    known_circles: &[],
};

/// The client crate: the port and plain data, then the rules (the outbound policy, the cards'
/// trust, the agent verbs' shared steps: send, inbox, libro, the profile format), then the
/// resolver over them.
const CLIENT: Crate = Crate {
    src: "crates/client/src",
    layers: &[
        ("ports", "base"),
        ("weburl", "base"),
        ("site", "base"),
        ("hosts", "base"),
        ("store", "base"),
        ("bookmark", "rules"),
        ("cards", "rules"),
        ("outbound", "rules"),
        ("trust", "rules"),
        ("asks", "rules"),
        ("attach", "rules"),
        ("send", "rules"),
        ("inbox", "rules"),
        ("kept", "rules"),
        ("libro", "rules"),
        ("profile", "rules"),
        ("resolver", "resolver"),
        ("pins", "resolver"),
        ("crate", "top"),
    ],
    order: &["base", "rules", "resolver", "top"],
    root_items: &[],
    known_upward: &[],
    known_circles: &[],
};

/// The `nyx5` binary: plumbing, then the agent's client, then what runs on it (MCP, apps, the
/// offline tools), then the servers and the simulator, then `main`.
const CLI: Crate = Crate {
    src: "crates/cli/src",
    layers: &[
        ("error", "base"),
        ("io", "base"),
        ("sys", "base"),
        ("sanitise", "base"),
        ("net", "base"),
        ("keyfile", "base"),
        ("jsonrpc", "base"),
        ("client", "client"),
        ("keys", "tools"),
        ("canon", "tools"),
        ("seal", "tools"),
        ("open", "tools"),
        ("verify", "tools"),
        ("mcp", "tools"),
        ("mcp_tools", "tools"),
        ("mcp_watch", "tools"),
        ("mcp_wrap", "tools"),
        ("app", "tools"),
        ("app_broker", "tools"),
        ("app_card", "tools"),
        ("serve", "servers"),
        ("shard", "servers"),
        ("simulate", "servers"),
        ("crate", "top"),
    ],
    order: &["base", "client", "tools", "servers", "top"],
    root_items: &[],
    known_upward: CLI_UPWARD,
    known_circles: CLI_CIRCLES,
};

/// The browser's functions: helpers, then each verb, then the wasm bindings.
const WEB: Crate = Crate {
    src: "crates/web/src",
    layers: &[
        ("util", "base"),
        ("keys", "verbs"),
        ("auth", "verbs"),
        ("cards", "verbs"),
        ("profile", "verbs"),
        ("mail", "verbs"),
        ("send", "verbs"),
        ("drafts", "verbs"),
        ("bind", "top"),
        ("crate", "top"),
    ],
    order: &["base", "verbs", "top"],
    root_items: &[],
    known_upward: WEB_UPWARD,
    known_circles: WEB_CIRCLES,
};

const PROTO_UPWARD: &[&str] = &[];
const PROTO_CIRCLES: &[&str] = &[];
const CLI_UPWARD: &[&str] = &[];
const CLI_CIRCLES: &[&str] = &[];
const WEB_UPWARD: &[&str] = &[];
const WEB_CIRCLES: &[&str] = &[];

/// Every crate the layer test reads.
const CRATES: &[&Crate] = &[&PROTO, &RULES, &CLIENT, &HOUSE, &CLI, &WEB];

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module a file is: `store/mailbox.rs` → `store::mailbox`, `lib.rs` → `crate`, a
/// `mod.rs` → its folder's module (`store/mod.rs` → `store::mod`, so that a folder's own file is
/// told from the modules in it).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let path: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if path == ["lib"] || path == ["main"] { "crate".to_owned() } else { path.join("::") }
}

/// The code of a file without its comments (`//` to the end of the line, `/* … */`), and with
/// string literals kept (a path in a string is no arrow, but SQL never names a module).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        if in_str {
            if b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            (b'"', _) => {
                in_str = true;
                out.push(' ');
                i += 1;
            }
            (b'\'', _) if b.get(i + 2) == Some(&b'\'') => {
                // A char literal such as '"' (a lifetime has no closing quote there).
                i += 3;
            }
            (b'\'', Some(b'\\')) => {
                // An escaped char literal ('\'', '\"', '\\', '\u{…}'): to its closing quote.
                let close = b[i + 2..].iter().take(12).skip(1).position(|&c| c == b'\'');
                i += close.map_or(2, |at| at + 4);
            }
            (b'r', Some(b'#' | b'"')) if i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') => {
                // A raw string, r"…" or r#"…"#: to the quote followed by as many hashes.
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let end: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                let body = i + 2 + hashes;
                let close = b[body..].windows(end.len()).position(|w| w == end.as_slice());
                out.push(' ');
                i = close.map_or(b.len(), |at| body + at + end.len());
            }
            (c, _) => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// Where the brace closing an opened `{` is in `body` (the text after it), or `body`'s end.
fn closing(body: &str) -> usize {
    let mut depth = 1;
    body.char_indices()
        .find(|&(_, c)| {
            depth += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            depth == 0
        })
        .map_or(body.len(), |(i, _)| i)
}

/// The path a `super::rest` names, read in module `base`'s parent (`base` given): each further
/// `super::` at the start of `rest` goes one module up.
fn above(base: &str, rest: &str) -> String {
    let (mut base, mut rest) = (base, rest);
    while let Some(r) = rest.strip_prefix("super::") {
        rest = r;
        base = base.rsplit_once("::").map_or("", |(p, _)| p);
    }
    if base.is_empty() { rest.to_owned() } else { format!("{base}::{rest}") }
}

/// `code` without its test modules (`#[cfg(test)] mod … { … }`): tests may name anything. Other
/// `#[cfg(test)]` items stay (read as code: an arrow there counts).
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    while let Some(at) = find_test_module(&out) {
        out.replace_range(at, " ");
    }
    out
}

/// The first `#[cfg(test)] mod name { … }` of `code`, attribute to closing brace.
fn find_test_module(code: &str) -> Option<std::ops::Range<usize>> {
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(test)]") {
        let at = from + found;
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        if let Some(rest) = after.strip_prefix("mod ") {
            let name = ident(rest.trim_start());
            if let Some(body) = rest.trim_start()[name.len()..].trim_start().strip_prefix('{') {
                let open = code.len() - body.len();
                return Some(at..(open + closing(body) + 1).min(code.len()));
            }
        }
        from = at + 1;
    }
    None
}

fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The modules a path after `crate::` names: its leading lower-case segments that are modules
/// (`store::mailbox::insert` → `store::mailbox`; `House` → `crate`). `known` holds every module.
fn target(rest: &str, known: &BTreeSet<String>, root_items: &[(&str, &str)]) -> String {
    let mut path = String::new();
    let mut cur = rest;
    loop {
        let seg = ident(cur);
        if seg.is_empty() {
            break;
        }
        let next = if path.is_empty() { seg.to_owned() } else { format!("{path}::{seg}") };
        if known.contains(&next) || known.contains(&format!("{next}::mod")) {
            path = next;
            match cur[seg.len()..].strip_prefix("::") {
                Some(r) => cur = r,
                None => break,
            }
        } else {
            break;
        }
    }
    if path.is_empty() {
        let item = ident(rest);
        root_items.iter().find(|(name, _)| *name == item).map_or("crate", |(_, module)| module).to_owned()
    } else if known.contains(&format!("{path}::mod")) {
        // A folder named as a whole: its own file.
        format!("{path}::mod")
    } else {
        path
    }
}

/// The paths a group names: `a, b::{c, d}` (without its braces) → `a`, `b::c`, `b::d`.
fn expand(prefix: &str, group: &str, out: &mut Vec<String>) {
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in group.chars() {
        match c {
            '{' => {
                depth += 1;
                item.push(c);
            }
            '}' => {
                depth -= 1;
                item.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => item.push(c),
        }
    }
    items.push(item);
    for item in items {
        let item: String = item.chars().filter(|c| !c.is_whitespace()).collect();
        match item.split_once('{') {
            Some((head, rest)) => expand(&format!("{prefix}{head}"), rest.strip_suffix('}').unwrap_or(rest), out),
            None if !item.is_empty() => out.push(format!("{prefix}{item}")),
            None => {}
        }
    }
}

/// Every `crate::…` path in `code`, the groups of a `use` opened: `crate::{a, b::{c}}` → `a`,
/// `b::c`.
fn crate_paths(code: &str) -> Vec<String> {
    paths_after(code, "crate::")
}

/// Every path after `prefix` (`crate::`, `nyx5_house::`) in `code`, groups opened.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        // `$crate::` (a macro's) is the crate too.
        if prefix != "crate::" && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let head = rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).next().unwrap();
        match rest[head.len()..].strip_prefix('{') {
            Some(group) => {
                expand(head, &group[..closing(group)], &mut out);
            }
            None if !head.is_empty() => out.push(head.to_owned()),
            None => {}
        }
    }
    out
}

/// The byte ranges of the modules a file writes inline (`mod name { … }`).
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + 4..];
        let name = ident(rest);
        let Some(body) = rest[name.len()..].trim_start().strip_prefix('{') else { continue };
        let open = code.len() - body.len();
        out.push(open..open + closing(body));
    }
    out
}

/// Items of the crate root that are defined elsewhere: exported macros and re-exports.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("stmt", "ports"),
    ("guard", "store::guard"),
    ("Config", "config"),
    ("Registration", "config"),
    ("Request", "http"),
    ("Response", "http"),
    ("Clock", "ports"),
    ("Db", "ports"),
    ("Net", "ports"),
    ("PortError", "ports"),
    ("Reads", "ports"),
    ("Rng", "ports"),
    ("port_error", "store::mod"),
    // Modules of the client crate the root re-exports under their own names.
    ("site", "site"),
    ("weburl", "weburl"),
    ("RESERVED", "auth"),
];

/// The arrows of a crate's modules: module → the modules it names.
fn arrows(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(krate.src);
    let files = sources(&root);
    let known = modules(krate);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(&root, file);
        let text = std::fs::read_to_string(file).unwrap();
        let to = arrows_of(&from, &text, &known, krate.root_items);
        graph.insert(from, to);
    }
    graph
}

/// Every module of a crate, as [`module_of`] names them.
fn modules(krate: &Crate) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(krate.src);
    sources(&root).iter().map(|f| module_of(&root, f)).collect()
}

/// The modules that module `from`, whose source is `text`, names (`known` holds every module of
/// its crate).
fn arrows_of(from: &str, text: &str, known: &BTreeSet<String>, root_items: &[(&str, &str)]) -> BTreeSet<String> {
    // A file's tests (at its end, by the house's style) may name anything.
    let code = without_test_modules(&code_of(text));
    let mut to = BTreeSet::new();
    for path in crate_paths(&code) {
        to.insert(target(&path, known, root_items));
    }
    // `super::x` from `a::b` names `a::x`; inside a module written inline in the file
    // (`mod platform { … }`), `super` is the file's own module.
    let inline = inline_modules(&code);
    let parent = from.rsplit_once("::").map_or("", |(p, _)| p);
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue; // the second `super` of a `super::super::`, read with the first
        }
        let base = if inline.iter().any(|r| r.contains(&at)) { from.trim_end_matches("::mod") } else { parent };
        let full = above(base, &code[at + "super::".len()..]);
        to.insert(target(&full, known, root_items));
    }
    to.remove(from);
    if from.ends_with("::mod") {
        // A folder's own file naming the modules in it is no arrow.
        let folder = from.trim_end_matches("::mod");
        to.retain(|t| !t.starts_with(&format!("{folder}::")));
    }
    to
}

fn upward(krate: &Crate, graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (from, tos) in graph {
        for to in tos {
            let (lf, lt) =
                (krate.layer_of(from.trim_end_matches("::mod")), krate.layer_of(to.trim_end_matches("::mod")));
            if krate.rank(lt) > krate.rank(lf) {
                out.insert(format!("{} -> {}", from.trim_end_matches("::mod"), to.trim_end_matches("::mod")));
            }
        }
    }
    out
}

/// Circles among modules of one layer: the strongly connected components of more than one.
fn circles(krate: &Crate, graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    // Tarjan's algorithm, small enough to write out.
    struct T<'a> {
        krate: &'a Crate,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let layer = t.krate.layer_of(v.trim_end_matches("::mod"));
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            if !g.contains_key(w.as_str()) || t.krate.layer_of(w.trim_end_matches("::mod")) != layer {
                continue;
            }
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w.as_str()) {
                let iw = t.index[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        krate,
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
        .into_iter()
        .map(|mut c| {
            c.sort_unstable();
            c.iter().map(|m| m.trim_end_matches("::mod")).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

#[test]
fn every_module_has_a_layer() {
    for krate in CRATES {
        for module in arrows(krate).keys() {
            krate.layer_of(module.trim_end_matches("::mod"));
        }
    }
}

/// The ratchet: `found` may hold nothing `known` lacks, and `known` nothing `found` lacks.
fn ratchet(what: &str, list: &str, found: &BTreeSet<String>, known: &[&str]) {
    let known: BTreeSet<String> = known.iter().map(|s| (*s).to_owned()).collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(found).collect();
    println!("{what}: {}", found.len());
    assert!(new.is_empty(), "{what}, new: {new:#?}");
    assert!(gone.is_empty(), "no longer in the code: take them off {list}: {gone:#?}");
}

#[test]
fn no_new_arrow_runs_up_the_layers_and_none_listed_is_gone() {
    for krate in CRATES {
        let what = format!("{}: arrows up the layers (issue 37 takes them to 0)", krate.src);
        ratchet(&what, "its known arrows up", &upward(krate, &arrows(krate)), krate.known_upward);
    }
}

#[test]
fn no_new_circle_of_modules_and_none_listed_is_gone() {
    for krate in CRATES {
        let what = format!("{}: circles of modules", krate.src);
        ratchet(&what, "its known circles", &circles(krate, &arrows(krate)), krate.known_circles);
    }
}

/// The layer test fails when an import runs back up (issue 37 "done means"): a rule that named
/// the store, a store that named a route, each is caught; an arrow down is not.
#[test]
fn an_arrow_up_is_caught_and_one_down_is_not() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("policy".to_owned(), ["store::inbox".to_owned()].into()),
        ("store::inbox".to_owned(), ["routes::mailbox".to_owned(), "ports".to_owned()].into()),
        ("routes::mailbox".to_owned(), ["mailbox".to_owned()].into()),
    ]
    .into();
    let mut krate = HOUSE;
    krate.layers =
        &[("policy", "rules"), ("store", "store"), ("routes", "routes"), ("mailbox", "services"), ("ports", "base")];
    assert_eq!(
        upward(&krate, &graph),
        ["policy -> store::inbox".to_owned(), "store::inbox -> routes::mailbox".to_owned()].into()
    );
    // With the house's own table: a service that names the house (`crate::House`) runs up, as
    // one that names a route does; the root that builds the services names them freely.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("mailbox".to_owned(), ["crate".to_owned()].into()),
        ("libro::tareas".to_owned(), ["routes::tareas".to_owned()].into()),
        ("crate".to_owned(), ["mailbox".to_owned(), "libro::mod".to_owned()].into()),
    ]
    .into();
    assert_eq!(
        upward(&HOUSE, &graph),
        ["libro::tareas -> routes::tareas".to_owned(), "mailbox -> crate".to_owned()].into()
    );
    let circle: BTreeMap<String, BTreeSet<String>> =
        [("a".to_owned(), ["b".to_owned()].into()), ("b".to_owned(), ["a".to_owned()].into())].into();
    krate.layers = &[("a", "base"), ("b", "base")];
    assert_eq!(circles(&krate, &circle), ["a b".to_owned()].into());
}

/// The arrows from what answers requests (the `routes` layer: `routes`, `router`, `web`) into
/// the store, `from -> to`: a route reaches data only through a service (issue 37 §2, "routes
/// call services"), so it holds no SQL and names no store builder, constraint or `port_error`
/// (the root's re-export of the store's).
fn routes_into_store(krate: &Crate, graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let layer = |m: &str| krate.layer_of(m.trim_end_matches("::mod"));
    graph
        .iter()
        .filter(|(from, _)| layer(from) == "routes")
        .flat_map(|(from, tos)| {
            tos.iter()
                .filter(|to| layer(to) == "store")
                .map(move |to| format!("{} -> {}", from.trim_end_matches("::mod"), to.trim_end_matches("::mod")))
        })
        .collect()
}

#[test]
fn no_route_names_the_store() {
    let found = routes_into_store(&HOUSE, &arrows(&HOUSE));
    assert!(found.is_empty(), "routes reach into the store (call a service's method instead): {found:#?}");
}

/// The rule has teeth: a route that names the store (by path, in a group, through `super::`, or
/// by the root's `port_error`) is caught; one that calls services, or names the store only in a
/// comment, a string or its tests, is not.
#[test]
fn a_route_that_names_the_store_is_caught_and_one_that_calls_a_service_is_not() {
    let known = modules(&HOUSE);
    let fake = |from: &str, code: &str| -> BTreeMap<String, BTreeSet<String>> {
        [(from.to_owned(), arrows_of(from, code, &known, ROOT_ITEMS))].into()
    };
    for (from, code, caught) in [
        ("routes::fake", "use crate::store::agents as store;", "routes::fake -> store::agents"),
        ("routes::fake", "use crate::{House, store};\nfn f() { store::x(); }", "routes::fake -> store"),
        ("web::fake", "fn f() { super::super::store::agents::card(); }", "web::fake -> store::agents"),
        ("router", "fn f(e: PortError) -> Error { crate::port_error(e) }", "router -> store"),
    ] {
        assert_eq!(routes_into_store(&HOUSE, &fake(from, code)), [caught.to_owned()].into(), "{from}: {code}");
    }
    let code = "use crate::auth::Registry;\n// crate::store::agents\nlet s = \"crate::store\";\n\
                fn f() { crate::mailbox::PageBounds; }\n#[cfg(test)]\nmod tests { use crate::store::agents; }";
    assert_eq!(routes_into_store(&HOUSE, &fake("routes::fake", code)), BTreeSet::new());
    // A service may name the store: the rule is the routes' alone.
    assert_eq!(routes_into_store(&HOUSE, &fake("mailbox", "use crate::store::inbox;")), BTreeSet::new());
}

#[test]
fn the_reader_finds_arrows_and_ignores_comments() {
    let code = code_of(
        "use crate::{House, store::{inbox, mailbox}, ports::Db};\n// crate::routes::x\nlet s = \"crate::web\"; crate::queue::plan(x);",
    );
    let paths = crate_paths(&code);
    assert_eq!(paths, ["House", "store::inbox", "store::mailbox", "ports::Db", "queue::plan"]);
    // Char literals with escapes and raw strings hide nothing after them.
    let code = code_of("let q = '\\\"'; let r = r#\"a \" b\"#; crate::routes::x(); let c = '\\''; crate::store::y();");
    assert_eq!(crate_paths(&code), ["routes::x", "store::y"]);
    // A test module is left out; a test-only item before it is not, nor what follows it.
    let code = without_test_modules(&code_of(
        "#[cfg(test)]\nstruct Nobody;\nfn a() { crate::mcp_wrap::x(); }\n#[cfg(test)]\nmod tests { fn t() { crate::routes::z(); } }\nfn b() { crate::store::w(); }",
    ));
    assert_eq!(crate_paths(&code), ["mcp_wrap::x", "store::w"]);
    // `super::super::` from `store::queue` (read in `store`) is the crate's `routes::…`.
    assert_eq!(above("store", "super::routes::outbox::X"), "routes::outbox::X");
    assert_eq!(above("store", "inbox::page"), "store::inbox::page");
    assert_eq!(above("", "queue::plan"), "queue::plan");
    // An adapter's `use nyx5_house::{House, store}` names the store too.
    let paths = paths_after(&code_of("use nyx5_house::{House, store};\nuse my_nyx5_house::store;"), "nyx5_house::");
    assert_eq!(paths, ["House", "store"]);
    let known: BTreeSet<String> =
        ["store::mod", "store::inbox", "ports", "queue"].iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(target("House", &known, ROOT_ITEMS), "crate");
    assert_eq!(target("Db", &known, ROOT_ITEMS), "ports");
    assert_eq!(target("store::inbox::page", &known, ROOT_ITEMS), "store::inbox");
    assert_eq!(target("store::constraint::X", &known, ROOT_ITEMS), "store::mod");
    assert_eq!(target("queue::plan", &known, ROOT_ITEMS), "queue");
}

#[test]
#[ignore = "prints the lists, to copy into KNOWN_UPWARD and KNOWN_CIRCLES"]
fn print_the_lists() {
    for krate in CRATES {
        let g = arrows(krate);
        println!("{}: arrows up", krate.src);
        for a in upward(krate, &g) {
            println!("    \"{a}\",");
        }
        println!("{}: circles", krate.src);
        for c in circles(krate, &g) {
            println!("    \"{c}\",");
        }
    }
}

/// The adapters (the Worker's `src/`, the CLI's `nyx5 serve`) use the engine's public surface,
/// never its store: what they need of it (the stored keys, the admin token) the engine exports
/// (`domain_keys`). Fails on any `nyx5_house::store` in their code.
#[test]
fn adapters_never_reach_into_the_store() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found = Vec::new();
    for dir in ["src", "crates/cli/src", "crates/web/src"] {
        for file in sources(&root.join(dir)) {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            if paths_after(&code, "nyx5_house::").iter().any(|p| p == "store" || p.starts_with("store::")) {
                found.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert!(found.is_empty(), "adapters reach into the house's store: {found:?}");
}

/// The agent's verbs and the tools on them (the CLI's `client/`, `net.rs`, `app.rs`) and the
/// browser stand on the client crate (issue 37 §6), never on the engine: only `nyx5 serve`, the
/// simulator and the shard tool (`serve/`, `simulate.rs`, `shard.rs`) and the Worker name
/// `nyx5_house`. Fails on any `nyx5_house::` elsewhere in their code, tests included.
#[test]
fn the_agents_verbs_and_the_browser_name_no_engine() {
    let root = repo_root();
    let engine_side = ["crates/cli/src/serve/", "crates/cli/src/simulate.rs", "crates/cli/src/shard.rs"];
    let mut found = Vec::new();
    for dir in ["crates/cli/src", "crates/web/src"] {
        for file in sources(&root.join(dir)) {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            if engine_side.iter().any(|e| rel.starts_with(e)) {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            if !paths_after(&code, "nyx5_house::").is_empty() {
                found.push(rel);
            }
        }
    }
    assert!(found.is_empty(), "the agent's side names the engine: {found:?}");
}

// ---- The docs: decisions resolve, and ARCHITECTURE.md stays a map (issue 37 §7) ----

/// The repository's root: this crate is `crates/house`.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every text file of the repository: build outputs (`target*`, `build`), `node_modules` and
/// hidden folders (`.git`, `.wrangler`; `.ci` and `.github` are kept) are left out, and so is
/// anything that is not UTF-8.
fn text_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let skip = name.starts_with("target")
                    || name == "node_modules"
                    || name == "build"
                    || (name.starts_with('.') && name != ".ci" && name != ".github");
                if !skip {
                    stack.push(path);
                }
            } else if path.metadata().is_ok_and(|m| m.is_file() && m.len() <= 4 << 20)
                && let Some(text) = std::fs::read(&path).ok().and_then(|b| String::from_utf8(b).ok())
            {
                out.push((path, text));
            }
        }
    }
    out.sort();
    out
}

/// The decision files a text names: each `docs/decisions/<name>.md`, `<name>` made of letters,
/// digits, `-`, `_` and `.`.
fn decision_links(text: &str) -> Vec<String> {
    const PREFIX: &str = "docs/decisions/";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        rest = &rest[at + PREFIX.len()..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c))).unwrap_or(rest.len());
        let name = rest[..end].trim_end_matches('.');
        if name.ends_with(".md") && name.len() > 3 {
            out.push(name.to_owned());
        }
    }
    out
}

#[test]
fn decision_links_resolve() {
    let root = repo_root();
    let dir = root.join("docs/decisions");
    let mut dangling = Vec::new();
    let mut links = 0;
    for (path, text) in text_files(&root) {
        for name in decision_links(&text) {
            links += 1;
            if !dir.join(&name).is_file() {
                dangling.push(format!("{}: docs/decisions/{name}", path.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    println!("links to decisions: {links}");
    assert!(links > 0, "no link to a decision found: is the walk reading the repository?");
    assert!(dangling.is_empty(), "links to decisions that do not exist: {dangling:#?}");
}

/// Decisions are numbered in one sequence, `0001-title.md` on without gaps, and
/// docs/decisions/README.md has a line for each.
#[test]
fn decisions_are_numbered_in_one_sequence_and_indexed() {
    let dir = repo_root().join("docs/decisions");
    let index = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md")
        .collect();
    names.sort();
    for (i, name) in names.iter().enumerate() {
        let well_formed = name.len() > 8
            && name.ends_with(".md")
            && name[..4].bytes().all(|b| b.is_ascii_digit())
            && name.as_bytes()[4] == b'-'
            && name[5..name.len() - 3].bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        assert!(well_formed, "{name}: a decision is NNNN-lower-case-title.md");
        assert_eq!(name[..4].parse::<usize>().unwrap(), i + 1, "{name}: numbers run 0001, 0002, … without gaps");
        assert!(index.contains(&format!("({name})")), "docs/decisions/README.md has no line for {name}");
    }
    for link in index.split("](").skip(1).filter_map(|rest| rest.split_once(')').map(|(link, _)| link)) {
        assert!(names.iter().any(|n| n == link), "docs/decisions/README.md links to {link}, which does not exist");
    }
}

/// The tests ARCHITECTURE.md's "Invariants" cite: each bullet ends with one or more
/// `` `path/to/file.rs::name` `` (a unit test may be `file.rs::tests::name`).
fn cited_tests(section: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for span in section.split('`').skip(1).step_by(2) {
        if let Some((file, path)) = span.split_once(".rs::") {
            let name = path.rsplit("::").next().unwrap();
            out.push((format!("{file}.rs"), name.to_owned()));
        }
    }
    out
}

#[test]
fn architecture_is_a_map() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let lines = text.lines().count();
    println!("ARCHITECTURE.md: {lines} lines");
    assert!(lines <= 320, "ARCHITECTURE.md has {lines} lines: a map stays within 320 (decisions go to docs/decisions)");
    let start = text.find("\n## Invariants").expect("ARCHITECTURE.md has an \"## Invariants\" section");
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let bullets: Vec<&str> = section.split("\n- ").skip(1).collect();
    assert!(bullets.len() >= 10, "the invariants are bullets, one line each ({} found)", bullets.len());
    let mut missing = Vec::new();
    for bullet in &bullets {
        let bullet = bullet.split("\n\n").next().unwrap();
        let cited = cited_tests(bullet);
        if cited.is_empty() {
            missing.push(format!("cites no test: {}", bullet.lines().next().unwrap()));
        }
        for (file, name) in cited {
            let ok = (file.starts_with("crates/") || file.starts_with("tests/") || file.starts_with("src/"))
                && std::fs::read_to_string(root.join(&file))
                    .is_ok_and(|code| code.contains(&format!("fn {name}(")) || code.contains(&format!("fn {name}<")));
            if !ok {
                missing.push(format!("{file}::{name}"));
            }
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md's invariants cite tests that do not exist: {missing:#?}");
}

#[test]
fn the_doc_readers_find_links_and_citations() {
    assert_eq!(
        decision_links("see docs/decisions/0001-own-json.md. And docs/decisions/ alone, docs/decisions/NNNN"),
        ["0001-own-json.md"]
    );
    assert_eq!(
        cited_tests("held — `crates/house/tests/schema.rs::a_b`, `crates/house/src/x.rs::tests::c` and `d`"),
        [
            ("crates/house/tests/schema.rs".to_owned(), "a_b".to_owned()),
            ("crates/house/src/x.rs".to_owned(), "c".to_owned())
        ]
    );
}

// ---- Refusals have names (issue 37 §4) ----

/// Files whose code still makes an error named only by its kind (`Error::new(ErrorKind::…)` but
/// `Internal`, `Error::malformed`, `Error::forbidden`), each as `path: count`. Only shrinks: a
/// refusal made anywhere is named by its cause from `nyx5_proto::Refusal`.
const KNOWN_UNNAMED: &[&str] = &[
    // `reword`'s fallback for an error of another kind than the refusal's (no rule gives one).
    "crates/rules/src/libro/model.rs: 1",
];

/// How many errors `code` (comments and strings blanked) makes that are named by their kind
/// alone. `Error::new(ErrorKind::Internal, …)` is not counted: an internal error says nothing
/// but `internal` on the wire.
fn unnamed_in(code: &str) -> usize {
    let plain = ["Error::malformed(", "Error::forbidden("].iter().map(|p| code.matches(p).count()).sum::<usize>();
    let by_kind = code
        .match_indices("Error::new(")
        .filter(|(i, _)| !code[..*i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        .filter(|(i, m)| {
            let rest = code[i + m.len()..].trim_start();
            !rest.starts_with("ErrorKind::Internal") && !rest.starts_with("nyx5_proto::ErrorKind::Internal")
        })
        .count();
    plain + by_kind
}

#[test]
fn every_refusal_is_named_by_its_cause() {
    let root = repo_root();
    let mut found = BTreeSet::new();
    for dir in [
        "crates/proto/src",
        "crates/rules/src",
        "crates/client/src",
        "crates/house/src",
        "crates/cli/src",
        "crates/web/src",
        "src",
    ] {
        for file in sources(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            // The code before its test module (tests may make any error they like).
            let code = code_of(text.split("#[cfg(test)]\nmod tests").next().unwrap_or(""));
            let n = unnamed_in(&code);
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            if n > 0 && !rel.ends_with("proto/src/error.rs") {
                found.insert(format!("{rel}: {n}"));
            }
        }
    }
    ratchet("files with refusals named by their kind alone", "KNOWN_UNNAMED", &found, KNOWN_UNNAMED);
}

/// Places where a client spells a refusal's name itself (`Failure::http(code, "name", …)`),
/// which the table cannot vouch for: a client that finds a cause itself names it through
/// `Failure::refusal(Refusal::…)`, and passes a house's name on as it came. Read from
/// [`code_of`], where a string literal is a blank: a name argument that is blank was one.
fn spelled_names_in(code: &str) -> usize {
    code.split("Failure::http(")
        .skip(1)
        .filter(|rest| rest.split(',').nth(1).is_some_and(|a| a.trim().is_empty()))
        .count()
}

/// No client names a refusal outside the one table (issue 37 §4): `no_email_bridge` was one.
#[test]
fn no_client_spells_a_refusal_name_of_its_own() {
    let root = repo_root();
    let mut found = BTreeSet::new();
    for dir in ["crates/cli/src", "crates/client/src", "crates/web/src"] {
        for file in sources(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = code_of(text.split("#[cfg(test)]\nmod tests").next().unwrap_or(""));
            if spelled_names_in(&code) > 0 {
                found.insert(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert!(found.is_empty(), "names spelled outside the refusal table: {found:?}");
    let teeth =
        code_of("Failure::http(501, \"no_email_bridge\", x); Failure::http(s, &slug, y); Failure::refusal(R, z)");
    assert_eq!(spelled_names_in(&teeth), 1);
}

#[test]
fn the_unnamed_counter_sees_what_it_counts() {
    let code = code_of(
        "Error::new(ErrorKind::Forbidden, \"x\"); Error::new(ErrorKind::Internal, \"y\");\n\
         Error::malformed(a); // Error::forbidden(b)\nRefusal::BadJson.because(c); Error::new( ErrorKind::Conflict, d)\n\
         JsError::new(&e);",
    );
    assert_eq!(unnamed_in(&code), 3);
}

/// Every row of the refusal table is made somewhere outside its tests (a row nothing sends would
/// be listed in the spec as a name clients can meet, and never be met).
#[test]
fn every_refusal_row_is_made_somewhere() {
    let root = repo_root();
    let table = std::fs::read_to_string(root.join("crates/proto/src/refusal.rs")).unwrap();
    let table = table.split("refusals! {").nth(1).unwrap();
    let rows: Vec<&str> = table
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.contains(") = \""))
        .map(|l| l.split('(').next().unwrap())
        .collect();
    assert!(rows.len() > 100, "{}", rows.len());
    let mut made = BTreeSet::new();
    for dir in [
        "crates/proto/src",
        "crates/rules/src",
        "crates/client/src",
        "crates/house/src",
        "crates/cli/src",
        "crates/web/src",
        "src",
    ] {
        for file in sources(&root.join(dir)) {
            if file.ends_with("refusal.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let code = without_test_modules(&code_of(&text));
            for (at, m) in code.match_indices("Refusal::") {
                made.insert(ident(&code[at + m.len()..]).to_owned());
            }
        }
    }
    let never: Vec<_> = rows.iter().filter(|r| !made.contains(**r)).collect();
    assert!(never.is_empty(), "rows of the refusal table nothing makes: {never:?}");
}

/// wasm-opt is never told that loads, stores or divisions cannot trap: with that promise it may
/// run one the source reaches only behind a check (`if c { load p }` becomes a `select` that
/// loads anyway), so a value from the network would trap the isolate (review of issue 37: a safe
/// Rust program that traps only with `--ignore-implicit-traps`; docs/decisions/0067).
#[test]
fn the_worker_is_never_optimised_on_a_promise_that_nothing_traps() {
    let budgets = std::fs::read_to_string(repo_root().join("benches/budgets.json")).unwrap();
    let build = std::fs::read_to_string(repo_root().join("scripts/build-worker")).unwrap();
    for text in [&budgets, &build] {
        for flag in ["--ignore-implicit-traps", "--traps-never-happen", "\"-iit\"", "\"-tnh\"", " -iit", " -tnh"] {
            assert!(!text.contains(flag), "wasm-opt must not be given {flag}");
        }
    }
    assert!(budgets.contains("\"wasm_opt\""), "the flags are where this test reads them");
}
