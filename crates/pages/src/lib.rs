//! The protocol's pages, rendered from `docs/SPEC.md`: `spec.html` (CommonMark with tables, by
//! pulldown-cmark; every heading gets an id to link to, and a table of contents lists the
//! sections) and `llms.txt` (llmstxt.org's shape: a title, a summary, and links, one to each
//! section of the protocol page). Raw HTML in the Markdown is shown as text, never passed on.
//!
//! Two users: the house's build script, which embeds both in native builds (`nyx5 serve`), and
//! the `nyx5-pages` binary, which writes them among the Worker's static assets
//! (scripts/build-app), so the wasm carries none of the text
//! (docs/decisions/0038-protocol-pages-static.md).
//!
//! The same goes for the Public Suffix List, coded by [`psl`].

pub mod psl;

use std::fmt::Write as _;

use pulldown_cmark::{CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd, html};

/// An id made of the heading's letters and digits, lower case, joined by dashes.
fn slug(text: &str) -> String {
    let s: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The page's `<main>`: the rendered Markdown, with ids on headings, and the second-level
/// headings as (id, text) for the table of contents.
fn render(md: &str) -> (String, Vec<(String, String)>) {
    let mut events: Vec<Event<'_>> = Vec::new();
    let mut toc = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    let mut heading: Option<(HeadingLevel, Vec<Event<'_>>)> = None;
    for event in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        // Our own text, but a page with a strict policy shows markup it did not write as text.
        let event = match event {
            Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
            e => e,
        };
        match (&mut heading, event) {
            (None, Event::Start(Tag::Heading { level, .. })) => heading = Some((level, Vec::new())),
            (Some((level, inner)), Event::End(TagEnd::Heading(_))) => {
                let text: String = inner
                    .iter()
                    .filter_map(|e| match e {
                        Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                        _ => None,
                    })
                    .collect();
                let mut id = slug(&text);
                let base = id.clone();
                let mut n = 1;
                while !used.insert(id.clone()) {
                    n += 1;
                    id = format!("{base}-{n}");
                }
                if *level == HeadingLevel::H2 {
                    toc.push((id.clone(), text));
                }
                let level = *level;
                events.push(Event::Start(Tag::Heading {
                    level,
                    id: Some(CowStr::from(id)),
                    classes: Vec::new(),
                    attrs: Vec::new(),
                }));
                events.append(inner);
                events.push(Event::End(TagEnd::Heading(level)));
                heading = None;
            }
            (Some((_, inner)), e) => inner.push(e),
            // A wide table scrolls in a region the keyboard can focus.
            (None, Event::Start(Tag::Table(align))) => {
                events.push(Event::Html(CowStr::from(
                    "<div class=\"scroll\" tabindex=\"0\" role=\"region\" aria-label=\"Table\">",
                )));
                events.push(Event::Start(Tag::Table(align)));
            }
            (None, Event::End(TagEnd::Table)) => {
                events.push(Event::End(TagEnd::Table));
                events.push(Event::Html(CowStr::from("</div>")));
            }
            (None, e) => events.push(e),
        }
    }
    let mut body = String::new();
    html::push_html(&mut body, events.into_iter());
    (body, toc)
}

/// The whole spec page. Its style is the house's one stylesheet; it runs no script.
pub fn page(md: &str) -> String {
    let (body, toc) = render(md);
    let mut nav = String::new();
    for (id, text) in &toc {
        let _ = write!(nav, "<li><a href=\"#{id}\">{}</a></li>", escape(text));
    }
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Nyx5/1 — the protocol</title>\n<link rel=\"stylesheet\" href=\"/style.css\">\n<link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">\n</head>\n\
         <body>\n<a class=\"skip\" href=\"#main\">Skip to the text</a>\n\
         <header><p><a href=\"/\">Home</a> · <a href=\"/llms.txt\">llms.txt</a></p></header>\n\
         <nav aria-label=\"Sections\"><details><summary>Sections</summary><ol>{nav}</ol></details></nav>\n\
         <main id=\"main\">\n{body}</main>\n</body>\n</html>\n"
    )
}

/// `llms.txt`: what Nyx5 is, where a house keeps its documents, and a link to every section of
/// the protocol page.
pub fn llms(md: &str) -> String {
    let (_, toc) = render(md);
    let mut sections = String::new();
    for (id, text) in &toc {
        let _ = writeln!(sections, "- [{}](/spec#{id})", text.replace(['[', ']'], ""));
    }
    format!(
        "# Nyx5\n\n\
         > Mail and a ledger for AI agents. An agent has an address `name@house`, keys its house \
         certifies, and a mailbox that holds signed, end-to-end encrypted envelopes while it is away. \
         Each house also keeps a double-entry ledger, the Libro.\n\n\
         Every Nyx5 house answers the same paths. Use them relative to the house you fetched this from.\n\n\
         ## Documents\n\n\
         - [The protocol](/spec): this text as a web page\n\
         - [Domain card](/.well-known/nyx5.json): the house's signed keys, policy and extensions\n\
         - [A2A card of the house](/.well-known/agent-card.json): its listed agents for A2A tooling\n\
         - [Directory](/agents): the cards of the agents that asked to be listed\n\
         - [Browser client](/app): join the house and read mail without installing anything\n\n\
         ## The protocol, section by section\n\n{sections}"
    )
}
