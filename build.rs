//! Renders docs/SPEC.md into the spec page (`spec.html`) and `llms.txt` at build time, so the
//! Worker serves the same text the repository holds. A build script may stop the build loudly.
#![allow(clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=docs/SPEC.md");
    let spec = std::fs::read_to_string("docs/SPEC.md").unwrap_or_else(|e| panic!("docs/SPEC.md: {e}"));
    let out = std::env::var("OUT_DIR").unwrap_or_else(|e| panic!("OUT_DIR: {e}"));
    let write = |name: &str, text: &str| {
        std::fs::write(Path::new(&out).join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    write("spec.html", &page(&spec));
    write("llms.txt", &llms(&spec));
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Inline markup: `code` and **bold**, after escaping.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            for (j, piece) in part.split("**").enumerate() {
                if j % 2 == 1 {
                    let _ = write!(out, "<strong>{piece}</strong>");
                } else {
                    out.push_str(piece);
                }
            }
        }
    }
    out
}

fn slug(text: &str) -> String {
    let s: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

fn page(md: &str) -> String {
    let mut body = String::new();
    let mut para: Vec<&str> = Vec::new();
    let mut in_list = false;
    let mut in_code = false;
    let mut in_table = false;
    let flush = |para: &mut Vec<&str>, body: &mut String| {
        if !para.is_empty() {
            let _ = writeln!(body, "<p>{}</p>", inline(&para.join(" ")));
            para.clear();
        }
    };
    for line in md.lines() {
        if in_code {
            if line.starts_with("```") {
                body.push_str("</code></pre>\n");
                in_code = false;
            } else {
                let _ = writeln!(body, "{}", escape(line));
            }
            continue;
        }
        let trimmed = line.trim_start();
        let is_item = trimmed.starts_with("- ")
            || trimmed.chars().next().is_some_and(|c| c.is_ascii_digit()) && trimmed.contains(". ");
        let is_row = trimmed.starts_with('|');
        if in_list && !is_item && !line.starts_with("  ") {
            body.push_str("</ul>\n");
            in_list = false;
        }
        if in_table && !is_row {
            body.push_str("</table>\n");
            in_table = false;
        }
        if line.starts_with("```") {
            flush(&mut para, &mut body);
            body.push_str("<pre><code>");
            in_code = true;
        } else if let Some(h) = line.strip_prefix('#') {
            flush(&mut para, &mut body);
            let level = 1 + h.chars().take_while(|c| *c == '#').count();
            let text = h.trim_start_matches('#').trim();
            let _ = writeln!(body, "<h{level} id=\"{}\">{}</h{level}>", slug(text), inline(text));
        } else if is_row {
            flush(&mut para, &mut body);
            if trimmed.contains("---") {
                continue;
            }
            let cell = if in_table { "td" } else { "th" };
            if !in_table {
                body.push_str("<table>\n");
                in_table = true;
            }
            let cells: Vec<String> = trimmed
                .trim_matches('|')
                .split('|')
                .map(|c| format!("<{cell}>{}</{cell}>", inline(c.trim())))
                .collect();
            let _ = writeln!(body, "<tr>{}</tr>", cells.concat());
        } else if is_item {
            flush(&mut para, &mut body);
            if !in_list {
                body.push_str("<ul>\n");
                in_list = true;
            }
            let text = trimmed.split_once(' ').map_or(trimmed, |(_, rest)| rest);
            let _ = writeln!(body, "<li>{}</li>", inline(text));
        } else if in_list && line.starts_with("  ") {
            // A continuation line of the last list item.
            let _ = writeln!(body, "{}", inline(trimmed));
        } else if trimmed.is_empty() {
            flush(&mut para, &mut body);
        } else {
            para.push(trimmed);
        }
    }
    flush(&mut para, &mut body);
    for (open, close) in [(in_list, "</ul>\n"), (in_table, "</table>\n"), (in_code, "</code></pre>\n")] {
        if open {
            body.push_str(close);
        }
    }
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>Nyx5/1 — the protocol</title>\n<style>body{{max-width:50rem;margin:2rem auto;padding:0 1rem;font:16px/1.6 system-ui,sans-serif}}pre{{overflow-x:auto;background:#f4f4f2;padding:.8rem}}table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:.3rem .6rem;text-align:left}}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )
}

fn llms(md: &str) -> String {
    format!(
        "# Nyx5\n\n> Mail and a ledger for AI agents: `agent@house` addresses, house-certified keys, signed and end-to-end encrypted envelopes, a mailbox that holds while the agent is offline, and a double-entry ledger (the Libro).\n\nThe protocol as this house speaks it follows.\n\n{md}"
    )
}
