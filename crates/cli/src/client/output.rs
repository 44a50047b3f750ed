//! Text for people: indented JSON, and small helpers the verbs' human output shares.

use nyx5_proto::json::{Object, Value, format_number, write_string};

/// `value` as indented JSON (two spaces), keys in canonical order, with a final newline.
pub(crate) fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write(value, 0, &mut out);
    out.push('\n');
    out
}

fn write(value: &Value, depth: usize, out: &mut String) {
    let pad = |n: usize, out: &mut String| out.extend(std::iter::repeat_n("  ", n));
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&format_number(*n)),
        Value::String(s) => write_string(s, out),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Array(a) => {
            out.push_str("[\n");
            for (i, v) in a.iter().enumerate() {
                pad(depth + 1, out);
                write(v, depth + 1, out);
                out.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push(']');
        }
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| nyx5_proto::json::cmp_utf16(a, b));
            out.push_str("{\n");
            for (i, k) in keys.iter().enumerate() {
                pad(depth + 1, out);
                write_string(k, out);
                out.push_str(": ");
                if let Some(v) = o.get(*k) {
                    write(v, depth + 1, out);
                }
                out.push_str(if i + 1 < keys.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push('}');
        }
    }
}

/// A string member, or `""`.
pub(crate) fn text<'a>(o: &'a Object, name: &str) -> &'a str {
    o.get(name).and_then(Value::as_str).unwrap_or("")
}

/// A member shown compactly: strings as they are, `null` as `-`, the rest as JSON; made
/// [`safe`] for a terminal, since members come from other houses.
pub(crate) fn show(o: &Object, name: &str) -> String {
    match o.get(name) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => safe(s),
        Some(v) => safe(&v.canonical_string()),
    }
}

/// Text from someone else, made safe for a terminal (line breaks and tabs kept): the one
/// sanitiser, [`crate::sanitise::text`].
pub(crate) fn safe(text: &str) -> String {
    crate::sanitise::text(text)
}

/// `text` made safe to show on one line of a prompt a person decides on: the one sanitiser,
/// [`crate::sanitise::line`].
pub(crate) fn one_line(text: &str) -> String {
    crate::sanitise::line(text)
}

/// `text` indented by `n` spaces on every line.
pub(crate) fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// The entries of the list `kind` in `o` (an array of strings), made safe and joined, or
/// `(empty)`.
pub(crate) fn list_shown(o: &Object, kind: &str) -> String {
    let entries: Vec<String> =
        o.get(kind).and_then(Value::as_array).unwrap_or_default().iter().filter_map(Value::as_str).map(safe).collect();
    if entries.is_empty() { "(empty)".to_owned() } else { entries.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_prints_canonical_order() {
        let v = Value::parse_str(r#"{"b":[1,{"x":null}],"a":"é\n","c":{}}"#).unwrap_or(Value::Null);
        assert_eq!(
            pretty(&v),
            "{\n  \"a\": \"é\\n\",\n  \"b\": [\n    1,\n    {\n      \"x\": null\n    }\n  ],\n  \"c\": {}\n}\n"
        );
        assert_eq!(safe("a\u{1b}[2Jb\nc"), "a\\u{1b}[2Jb\nc");
    }
}

#[cfg(test)]
mod one_line_tests {
    use super::one_line;

    #[test]
    fn nothing_forges_a_line_or_hides_itself() {
        assert_eq!(one_line("a\n  until: x\tb\r"), "a\\n  until: x\\tb\\r");
        assert_eq!(one_line("pay \u{202E}001\u{200B}"), "pay \\u{202e}001\\u{200b}");
        assert_eq!(one_line("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(one_line("ñandú 5 tok"), "ñandú 5 tok");
    }
}

/// How a message's trust reads for people.
pub(crate) fn trust_label(o: &Object) -> String {
    match text(o, "trust") {
        "verified" if o.get("notice") == Some(&Value::Bool(true)) => {
            if o.get("own_house") == Some(&Value::Bool(true)) {
                format!("verified notice from your house {}", safe(text(o, "notice_house")))
            } else {
                format!("verified notice from another house, {} (not yours)", safe(text(o, "notice_house")))
            }
        }
        "verified" => "verified".into(),
        "unverified" => "UNVERIFIED (not signed; anyone could have written it)".into(),
        "unchecked" => format!("UNCHECKED ({})", safe(text(o, "trust_reason"))),
        _ => format!("INVALID SIGNATURE ({}) — do not trust it", safe(text(o, "trust_reason"))),
    }
}

/// One message for people.
pub(crate) fn message_human(v: &Value) -> String {
    let Some(o) = v.as_object() else { return String::new() };
    let mut s = format!(
        "[{}] {}  from {}  {}{}  {}\n",
        show(o, "seq"),
        show(o, "received"),
        safe(&show(o, "from")),
        trust_label(o),
        if o.get("sealed") == Some(&Value::Bool(true)) { ", sealed" } else { "" },
        show(o, "type")
    );
    // Mail that came in by email: who the house says sent it, and the subject (both unverified).
    if let Some(Value::Object(e)) = o.get("email") {
        s.push_str(&format!("  by email from {}", safe(&show(e, "from"))));
        if let Some(Value::String(subject)) = e.get("subject") {
            s.push_str(&format!("  subject {}", safe(subject)));
        }
        s.push_str(&format!(
            "  (reply: nyx5 email {} --in-reply-to {} --body …)\n",
            safe(&show(e, "from")),
            safe(&show(o, "id"))
        ));
    }
    s.push_str(&format!("  id {}", safe(&show(o, "id"))));
    for (name, label) in [("thread", "thread"), ("in_reply_to", "in reply to")] {
        if let Some(Value::String(t)) = o.get(name) {
            s.push_str(&format!("  {label} {}", safe(t)));
        }
    }
    s.push('\n');
    match o.get("content") {
        Some(Value::Object(c)) => {
            let media = text(c, "media");
            let body = match c.get("body") {
                Some(Value::String(t)) => t.clone(),
                Some(b) => pretty(b),
                None => String::new(),
            };
            if !media.starts_with("text/plain") {
                s.push_str(&format!("  ({})\n", safe(media)));
            }
            s.push_str(&indent(&safe(&body), 4));
        }
        _ => {
            if let Some(e) = o.get("open_error").and_then(Value::as_str) {
                s.push_str(&format!("  cannot open: {}\n", safe(e)));
            }
        }
    }
    s
}
