//! The one sanitiser for text another party controls, before it reaches a terminal.
//!
//! Everything the CLI prints that a peer wrote (a house's envelopes, cards, directory and search
//! results, app names, error reasons from servers, a wrapped MCP server's output and tool list, the
//! approvals it files) goes through [`text`] or [`line()`]. Controls (C0, DEL, C1) and every
//! invisible character (General_Category Cf, Zl, Zp and Default_Ignorable_Code_Point: bidi
//! controls, zero-width characters, tag characters, variation selectors, fillers, …) are shown
//! escaped as `\u{…}`, so nobody can move the
//! cursor, retitle the window, ring the bell, forge a line beside an approval code, or show one
//! thing and say another. A backslash is left as it is: an escape a peer typed stays visible text.

/// The characters shown escaped besides controls: every character of General_Category Cf
/// (format), Zl and Zp (line and paragraph separators), and every Default_Ignorable_Code_Point,
/// as Unicode 16.0.0 lists them (`UnicodeData.txt`, `DerivedCoreProperties.txt`; the same ranges
/// as regex-syntax 0.8's `FORMAT`, `LINE_SEPARATOR`, `PARAGRAPH_SEPARATOR` and
/// `DEFAULT_IGNORABLE_CODE_POINT` tables), merged. They draw nothing, or reorder, join or
/// restyle what is around them: tag characters, variation selectors, Hangul fillers, the
/// combining grapheme joiner, bidi controls, zero-width characters, the Arabic number signs.
/// Sorted and disjoint.
const INVISIBLE: [(char, char); 25] = [
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{2028}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` is shown escaped: a control (C0, DEL, C1) or one of the [`INVISIBLE`]
/// characters.
pub(crate) fn hidden(c: char) -> bool {
    c.is_control() || INVISIBLE.binary_search_by(|&(lo, hi)| cmp_range(c, lo, hi)).is_ok()
}

/// Where the range `lo..=hi` lies relative to `c`, for a binary search.
fn cmp_range(c: char, lo: char, hi: char) -> std::cmp::Ordering {
    if hi < c {
        std::cmp::Ordering::Less
    } else if lo > c {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
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
/// as [`line()`].
pub(crate) fn bytes_line(bytes: &[u8]) -> String {
    line(&String::from_utf8_lossy(bytes))
}

/// `value` as canonical JSON for a terminal or a line-based reader: the same JSON value, with
/// every [`hidden`] character that canonical JSON leaves raw (DEL, C1, bidi and zero-width
/// characters, U+2028/U+2029) written as a `\u` escape of four hex digits. Such characters occur only inside
/// strings, so whoever parses the output reads the same value, and whoever looks at it (or
/// splits it into lines at U+0085 or U+2028) sees no control.
pub(crate) fn json(value: &nyx5_proto::Value) -> Vec<u8> {
    let canonical = value.canonical_string();
    let mut out = String::with_capacity(canonical.len());
    for c in canonical.chars() {
        if c >= '\u{7f}' && hidden(c) {
            // Outside the Basic Multilingual Plane (tag characters, say) as a surrogate pair.
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
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
    fn every_format_separator_and_default_ignorable_character_is_shown_escaped() {
        // Tag characters (an invisible copy of ASCII), the other deprecated format characters,
        // Hangul fillers, the combining grapheme joiner, variation selectors, Mongolian ones,
        // Arabic number signs, Egyptian format controls, the shorthand format controls.
        for c in [
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{206A}',
            '\u{206F}',
            '\u{3164}',
            '\u{115F}',
            '\u{1160}',
            '\u{FFA0}',
            '\u{034F}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{180B}',
            '\u{180F}',
            '\u{17B4}',
            '\u{0600}',
            '\u{06DD}',
            '\u{08E2}',
            '\u{13430}',
            '\u{1BCA0}',
            '\u{1D173}',
            '\u{FFF9}',
            '\u{FFF0}',
            '\u{2028}',
            '\u{2029}',
            '\u{110BD}',
        ] {
            assert!(hidden(c), "{c:?}");
            assert!(!line(&format!("x{c}y")).contains(c), "{c:?}");
            assert!(!text(&format!("x{c}y")).contains(c), "{c:?}");
        }
        assert_eq!(line("ok\u{E0041}\u{E0042}"), "ok\\u{e0041}\\u{e0042}");
        // Visible neighbours of those ranges stay as they are.
        for c in ['\u{034E}', '\u{3165}', '\u{FE10}', '\u{FFFC}', '\u{E1000}', '\u{1D172}', 'ᄀ', 'ñ', '中', '😀']
        {
            assert!(!hidden(c), "{c:?}");
        }
        let sorted = INVISIBLE.windows(2).all(|w| matches!(w, [a, b] if a.0 <= a.1 && a.1 < b.0));
        assert!(sorted);
    }

    #[test]
    fn json_escapes_invisible_characters_beyond_the_first_plane_as_surrogate_pairs() {
        let v = nyx5_proto::Value::from("a\u{E0041}\u{FE0F}b");
        let out = String::from_utf8(json(&v)).unwrap();
        assert_eq!(out, r#""a\udb40\udc41\ufe0fb""#);
        assert_eq!(nyx5_proto::Value::parse_str(&out).unwrap(), v);
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
