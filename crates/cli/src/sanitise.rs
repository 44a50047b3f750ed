//! The one sanitiser for text another party controls, before it reaches a terminal.
//!
//! Everything the CLI prints that a peer wrote (a house's envelopes, cards, directory and search
//! results, app names, error reasons from servers, a wrapped MCP server's output and tool list, the
//! approvals it files) goes through [`text`] or [`line`]. Controls (C0, DEL, C1) and the invisible
//! characters that reorder or hide text (bidi embeddings, overrides and isolates, the marks
//! U+200E/U+200F, zero-width characters) are shown escaped as `\u{…}`, so nobody can move the
//! cursor, retitle the window, ring the bell, forge a line beside an approval code, or show one
//! thing and say another. A backslash is left as it is: an escape a peer typed stays visible text.

/// Whether `c` is shown escaped: a control (C0, DEL, C1) or an invisible character that changes
/// how the text around it is shown.
pub(crate) fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

fn escape(c: char, out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
    }
}

/// `text` for a terminal, keeping its line breaks and tabs: every other character [`hidden`]
/// is shown escaped.
pub(crate) fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c if hidden(c) => escape(c, &mut out),
            c => out.push(c),
        }
    }
    out
}

/// `text` on one line of a prompt a person decides on: line breaks and tabs too are shown
/// escaped (`\n`, `\r`, `\t`), so nothing another party wrote can forge a line.
pub(crate) fn line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) { escape(c, &mut out) } else { out.push(c) }
    }
    out
}

/// Bytes a peer wrote (not necessarily UTF-8) on one line: invalid UTF-8 is replaced, the rest
/// as [`line`].
pub(crate) fn bytes_line(bytes: &[u8]) -> String {
    line(&String::from_utf8_lossy(bytes))
}

/// `value` as canonical JSON for a terminal or a line-based reader: the same JSON value, with
/// every [`hidden`] character that canonical JSON leaves raw (DEL, C1, bidi and zero-width
/// characters, U+2028/U+2029) written as a `\uXXXX` escape. Such characters occur only inside
/// strings, so whoever parses the output reads the same value, and whoever looks at it (or
/// splits it into lines at U+0085 or U+2028) sees no control.
pub(crate) fn json(value: &nyx5_proto::Value) -> Vec<u8> {
    let canonical = value.canonical_string();
    let mut out = String::with_capacity(canonical.len());
    for c in canonical.chars() {
        if c >= '\u{7f}' && hidden(c) {
            // Every hidden character is in the Basic Multilingual Plane: one escape each.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_escaped() {
        assert_eq!(text("a\u{1b}[2Jb\nc\td\u{7}"), "a\\u{1b}[2Jb\nc\td\\u{7}");
        assert_eq!(line("a\n  until: x\tb\r"), "a\\n  until: x\\tb\\r");
        assert_eq!(line("pay \u{202E}001\u{200B}"), "pay \\u{202e}001\\u{200b}");
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{85}', '\u{9b}', '\u{7f}']
        {
            let shown = line(&format!("x{c}y"));
            assert!(shown.starts_with("x\\u{") && !shown.contains(c), "{c:?}: {shown}");
            assert!(!text(&format!("x{c}y")).contains(c), "{c:?}");
        }
        assert_eq!(line("ñandú 5 tok"), "ñandú 5 tok");
        assert_eq!(bytes_line(b"\x1b]0;t\x07\xff"), "\\u{1b}]0;t\\u{7}\u{FFFD}");
    }

    #[test]
    fn json_keeps_its_value_and_shows_no_control() {
        let v = nyx5_proto::Value::parse_str(r#"{"a\u202e":"x\u001b\u0085\u2028\u009b\u007fñ"}"#).unwrap();
        let out = String::from_utf8(json(&v)).unwrap();
        assert_eq!(out, r#"{"a\u202e":"x\u001b\u0085\u2028\u009b\u007fñ"}"#);
        assert_eq!(nyx5_proto::Value::parse_str(&out).unwrap(), v);
    }
}

#[cfg(test)]
mod write_text_tests {
    #[test]
    fn text_for_people_goes_through_the_sanitiser() {
        // What `io::write_text` writes: already-escaped text stays as it is (the sanitiser is
        // idempotent), raw controls and bidi characters do not survive.
        let once = super::text("subject \u{1b}[2J\u{202e}x\nnext");
        assert_eq!(super::text(&once), once);
        assert!(!once.contains('\u{1b}') && !once.contains('\u{202e}') && once.contains('\n'));
    }
}
