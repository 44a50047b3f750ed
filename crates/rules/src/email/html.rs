//! An HTML body as plain text, for the agent who reads it: what the bridge keeps of an email that
//! has no text/plain part (docs/SPEC.md "Email bridge").
//!
//! Not a browser, and not meant to be: markup goes, the words stay in order, and the elements that
//! shape lines in a mail client shape them here.
//!
//! - Tags, comments and declarations (`<!doctype …>`, Outlook's `<![if …]>`) are dropped; a `<`
//!   that opens none of them (`a < b`) is text. A tag that never closes drops the rest.
//! - What a reader never sees is dropped with its contents: `<script>`, `<style>`, `<title>`,
//!   `<template>`.
//! - Runs of white space are one space, and none starts or ends a line; inside `<pre>` they are
//!   kept as written.
//! - `<br>` ends a line; block elements (`<p>`, `<div>`, `<li>`, `<tr>`, headings, …) start and end
//!   one; a list item starts with `- `; table cells are apart by a space. At most one empty line
//!   is kept in a row.
//! - Character references: every numeric one (`&#233;`, `&#xE9;`; one that names no character is
//!   U+FFFD, 128 to 159 are Windows-1252's characters as in HTML, one for white space is white
//!   space) and the named ones of HTML 4 ([`ENTITIES`], 253, the set mail clients write). Other
//!   names (HTML5 added ~2,000, mostly mathematical symbols) stay as written.
//!
//! The bridge used mail-parser's converter until issue 12 measured what it costs the Worker: its
//! table of every HTML5 name, with the code around it, was 22 KB of the gzipped bundle.

/// The named character references of HTML 4.01 (its Latin-1, symbol and special sets, with
/// XHTML's `apos`), at the code points HTML5 gives them (it moved `lang` and `rang` to U+27E8 and
/// U+27E9). Sorted by name, byte by byte, for [`entity`]'s binary search.
#[rustfmt::skip]
pub const ENTITIES: [(&str, u32); 253] = [
    ("AElig", 198), ("Aacute", 193), ("Acirc", 194), ("Agrave", 192), ("Alpha", 913),
    ("Aring", 197), ("Atilde", 195), ("Auml", 196), ("Beta", 914), ("Ccedil", 199), ("Chi", 935),
    ("Dagger", 8225), ("Delta", 916), ("ETH", 208), ("Eacute", 201), ("Ecirc", 202),
    ("Egrave", 200), ("Epsilon", 917), ("Eta", 919), ("Euml", 203), ("Gamma", 915), ("Iacute", 205),
    ("Icirc", 206), ("Igrave", 204), ("Iota", 921), ("Iuml", 207), ("Kappa", 922), ("Lambda", 923),
    ("Mu", 924), ("Ntilde", 209), ("Nu", 925), ("OElig", 338), ("Oacute", 211), ("Ocirc", 212),
    ("Ograve", 210), ("Omega", 937), ("Omicron", 927), ("Oslash", 216), ("Otilde", 213),
    ("Ouml", 214), ("Phi", 934), ("Pi", 928), ("Prime", 8243), ("Psi", 936), ("Rho", 929),
    ("Scaron", 352), ("Sigma", 931), ("THORN", 222), ("Tau", 932), ("Theta", 920), ("Uacute", 218),
    ("Ucirc", 219), ("Ugrave", 217), ("Upsilon", 933), ("Uuml", 220), ("Xi", 926), ("Yacute", 221),
    ("Yuml", 376), ("Zeta", 918), ("aacute", 225), ("acirc", 226), ("acute", 180), ("aelig", 230),
    ("agrave", 224), ("alefsym", 8501), ("alpha", 945), ("amp", 38), ("and", 8743), ("ang", 8736),
    ("apos", 39), ("aring", 229), ("asymp", 8776), ("atilde", 227), ("auml", 228), ("bdquo", 8222),
    ("beta", 946), ("brvbar", 166), ("bull", 8226), ("cap", 8745), ("ccedil", 231), ("cedil", 184),
    ("cent", 162), ("chi", 967), ("circ", 710), ("clubs", 9827), ("cong", 8773), ("copy", 169),
    ("crarr", 8629), ("cup", 8746), ("curren", 164), ("dArr", 8659), ("dagger", 8224),
    ("darr", 8595), ("deg", 176), ("delta", 948), ("diams", 9830), ("divide", 247), ("eacute", 233),
    ("ecirc", 234), ("egrave", 232), ("empty", 8709), ("emsp", 8195), ("ensp", 8194),
    ("epsilon", 949), ("equiv", 8801), ("eta", 951), ("eth", 240), ("euml", 235), ("euro", 8364),
    ("exist", 8707), ("fnof", 402), ("forall", 8704), ("frac12", 189), ("frac14", 188),
    ("frac34", 190), ("frasl", 8260), ("gamma", 947), ("ge", 8805), ("gt", 62), ("hArr", 8660),
    ("harr", 8596), ("hearts", 9829), ("hellip", 8230), ("iacute", 237), ("icirc", 238),
    ("iexcl", 161), ("igrave", 236), ("image", 8465), ("infin", 8734), ("int", 8747), ("iota", 953),
    ("iquest", 191), ("isin", 8712), ("iuml", 239), ("kappa", 954), ("lArr", 8656), ("lambda", 955),
    ("lang", 10216), ("laquo", 171), ("larr", 8592), ("lceil", 8968), ("ldquo", 8220), ("le", 8804),
    ("lfloor", 8970), ("lowast", 8727), ("loz", 9674), ("lrm", 8206), ("lsaquo", 8249),
    ("lsquo", 8216), ("lt", 60), ("macr", 175), ("mdash", 8212), ("micro", 181), ("middot", 183),
    ("minus", 8722), ("mu", 956), ("nabla", 8711), ("nbsp", 160), ("ndash", 8211), ("ne", 8800),
    ("ni", 8715), ("not", 172), ("notin", 8713), ("nsub", 8836), ("ntilde", 241), ("nu", 957),
    ("oacute", 243), ("ocirc", 244), ("oelig", 339), ("ograve", 242), ("oline", 8254),
    ("omega", 969), ("omicron", 959), ("oplus", 8853), ("or", 8744), ("ordf", 170), ("ordm", 186),
    ("oslash", 248), ("otilde", 245), ("otimes", 8855), ("ouml", 246), ("para", 182),
    ("part", 8706), ("permil", 8240), ("perp", 8869), ("phi", 966), ("pi", 960), ("piv", 982),
    ("plusmn", 177), ("pound", 163), ("prime", 8242), ("prod", 8719), ("prop", 8733), ("psi", 968),
    ("quot", 34), ("rArr", 8658), ("radic", 8730), ("rang", 10217), ("raquo", 187), ("rarr", 8594),
    ("rceil", 8969), ("rdquo", 8221), ("real", 8476), ("reg", 174), ("rfloor", 8971), ("rho", 961),
    ("rlm", 8207), ("rsaquo", 8250), ("rsquo", 8217), ("sbquo", 8218), ("scaron", 353),
    ("sdot", 8901), ("sect", 167), ("shy", 173), ("sigma", 963), ("sigmaf", 962), ("sim", 8764),
    ("spades", 9824), ("sub", 8834), ("sube", 8838), ("sum", 8721), ("sup", 8835), ("sup1", 185),
    ("sup2", 178), ("sup3", 179), ("supe", 8839), ("szlig", 223), ("tau", 964), ("there4", 8756),
    ("theta", 952), ("thetasym", 977), ("thinsp", 8201), ("thorn", 254), ("tilde", 732),
    ("times", 215), ("trade", 8482), ("uArr", 8657), ("uacute", 250), ("uarr", 8593),
    ("ucirc", 251), ("ugrave", 249), ("uml", 168), ("upsih", 978), ("upsilon", 965), ("uuml", 252),
    ("weierp", 8472), ("xi", 958), ("yacute", 253), ("yen", 165), ("yuml", 255), ("zeta", 950),
    ("zwj", 8205), ("zwnj", 8204),
];

/// Elements whose contents are not read: scripts, styles, the title, templates.
const UNREAD: [&str; 4] = ["script", "style", "template", "title"];

/// Elements that start and end a line where they begin and end.
const BLOCKS: [&str; 33] = [
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "dd",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "tbody",
    "tr",
    "ul",
    "caption",
];

/// The character a named reference stands for, when HTML 4 names it.
pub fn entity(name: &str) -> Option<char> {
    let at = ENTITIES.binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes())).ok()?;
    ENTITIES.get(at).and_then(|&(_, code)| char::from_u32(code))
}

/// The text of an HTML document, by the rules in the module's documentation. Linear in the
/// input's length, and never longer than the input.
pub fn to_text(html: &str) -> String {
    let mut out = Text { out: String::with_capacity(html.len() / 2), space: false, item: false };
    let bytes = html.as_bytes();
    let mut pre = 0usize; // how many `<pre>` are open
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'<' => match markup(html, i) {
                Markup::Text => {
                    out.word("<");
                    i += 1;
                }
                Markup::Comment(end) | Markup::Other(end) => i = end,
                Markup::Tag { name, closing, end } => {
                    i = end;
                    let is = |list: &[&str]| list.iter().any(|n| n.eq_ignore_ascii_case(name));
                    if name.eq_ignore_ascii_case("br") {
                        out.line_break();
                    } else if is(&UNREAD) && !closing {
                        // `<script/>` opens a script all the same: HTML ignores the slash there.
                        i = after_closing(html, i, name);
                    } else if is(&BLOCKS) {
                        out.end_line();
                        if name.eq_ignore_ascii_case("pre") {
                            pre = if closing { pre.saturating_sub(1) } else { pre + 1 };
                        } else if name.eq_ignore_ascii_case("li") && !closing {
                            out.item = true;
                        }
                    } else if !closing && (name.eq_ignore_ascii_case("td") || name.eq_ignore_ascii_case("th")) {
                        out.space = true;
                    }
                }
            },
            b'&' => {
                let (c, len) = reference(html.get(i..).unwrap_or_default());
                match c {
                    // `&#10;` is white space like any other; in `<pre>` a line break.
                    Some(c) if c.is_ascii_whitespace() && pre == 0 => out.space = true,
                    Some('\n') => out.line_break(),
                    Some(c) => out.word(c.encode_utf8(&mut [0; 4])),
                    None => out.word("&"),
                }
                i += len;
            }
            _ if pre > 0 => {
                let end = next_markup(bytes, i);
                let run = html.get(i..end).unwrap_or_default();
                for (k, line) in run.split('\n').enumerate() {
                    if k > 0 {
                        out.line_break();
                    }
                    out.word(line.trim_end_matches('\r'));
                }
                i = end;
            }
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {
                out.space = true;
                i += 1;
            }
            _ => {
                let end = bytes
                    .get(i..)
                    .and_then(|rest| {
                        rest.iter().position(|b| matches!(b, b'<' | b'&' | b' ' | b'\t' | b'\n' | b'\r' | b'\x0c'))
                    })
                    .map_or(bytes.len(), |n| i + n);
                out.word(html.get(i..end).unwrap_or_default());
                i = end;
            }
        }
    }
    out.finish()
}

/// The text being written, with a space owed between words.
struct Text {
    out: String,
    /// White space came since the last word: the next word on this line is written after one.
    space: bool,
    /// A list item began: its first word is written after `- `.
    item: bool,
}

impl Text {
    fn word(&mut self, w: &str) {
        if w.is_empty() {
            return;
        }
        if self.item {
            self.out.push_str("- ");
            self.item = false;
        } else if self.space && !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push(' ');
        }
        self.space = false;
        self.out.push_str(w);
    }

    /// `<br>`: ends the line, an empty one too, keeping at most one empty line in a row.
    fn line_break(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
        self.space = false;
    }

    /// A block's edge: ends the line unless it is ended already.
    fn end_line(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        self.space = false;
    }

    fn finish(mut self) -> String {
        let end = self.out.trim_end().len();
        self.out.truncate(end);
        self.out
    }
}

/// What a `<` opens.
pub(crate) enum Markup<'a> {
    /// Nothing: the `<` is text.
    Text,
    /// `<!-- … -->`; the position after it (the end of the input when it never closes).
    Comment(usize),
    /// `<!…>` or `<?…>`; the position after its `>`.
    Other(usize),
    /// A start or end tag, and the position after its `>`.
    Tag { name: &'a str, closing: bool, end: usize },
}

/// What the `<` at `at` opens.
pub(crate) fn markup(html: &str, at: usize) -> Markup<'_> {
    let bytes = html.as_bytes();
    let rest = bytes.get(at + 1..).unwrap_or_default();
    if rest.starts_with(b"!--") {
        // As HTML reads them: `<!-->` and `<!--->` are empty comments, and `--!>` ends one too.
        let body = at + 4;
        let end = match bytes.get(body..) {
            Some([b'>', ..]) => body + 1,
            Some([b'-', b'>', ..]) => body + 2,
            _ => [find(bytes, body, b"-->").map(|p| p + 3), find(bytes, body, b"--!>").map(|p| p + 4)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(bytes.len()),
        };
        return Markup::Comment(end);
    }
    let (closing, name_at) = if rest.first() == Some(&b'/') { (true, at + 2) } else { (false, at + 1) };
    match bytes.get(name_at) {
        Some(b'!' | b'?') if !closing => Markup::Other(after_gt(bytes, name_at)),
        Some(c) if c.is_ascii_alphabetic() => {
            let name_end = bytes
                .iter()
                .skip(name_at)
                .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b':' | b'-' | b'_')))
                .map_or(bytes.len(), |p| name_at + p);
            let end = tag_end(bytes, name_end);
            Markup::Tag { name: html.get(name_at..name_end).unwrap_or_default(), closing, end }
        }
        // `</>` and `</ …>`: not text, not an element.
        Some(_) if closing => Markup::Other(after_gt(bytes, name_at)),
        _ => Markup::Text,
    }
}

/// The position after the `>` that ends a tag whose attributes start at `from`: a `>` inside a
/// quoted attribute value does not. The end of the input when none does.
fn tag_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'>' => return i + 1,
            b'=' => {
                i += 1;
                while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
                    i += 1;
                }
                if let Some(&q @ (b'"' | b'\'')) = bytes.get(i) {
                    i = bytes.iter().skip(i + 1).position(|&b| b == q).map_or(bytes.len(), |p| i + 1 + p + 1);
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The position after `</name …>` from `from` on, ASCII case aside; the end of the input when
/// the element never closes.
fn after_closing(html: &str, from: usize, name: &str) -> usize {
    let bytes = html.as_bytes();
    let mut i = from;
    while let Some(p) = find(bytes, i, b"</") {
        let after = p + 2 + name.len();
        let same = bytes.get(p + 2..after).is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()));
        if same && !bytes.get(after).is_some_and(|b| b.is_ascii_alphanumeric()) {
            return tag_end(bytes, after);
        }
        i = p + 2;
    }
    bytes.len()
}

/// The position after the first `>` from `from` on; the end of the input when there is none.
fn after_gt(bytes: &[u8], from: usize) -> usize {
    bytes.iter().skip(from).position(|&b| b == b'>').map_or(bytes.len(), |p| from + p + 1)
}

/// Where the next `<` or `&` is, from `from` on.
fn next_markup(bytes: &[u8], from: usize) -> usize {
    bytes.iter().skip(from).position(|&b| b == b'<' || b == b'&').map_or(bytes.len(), |p| from + p)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| from + p)
}

/// A numeric reference from 128 to 159 names, as HTML reads it, the Windows-1252 character of
/// that byte (`&#146;` is `’`, not the C1 control U+0092); the five bytes that code page leaves
/// unassigned stay as they are, as does every other number.
fn windows_1252(code: u32) -> u32 {
    const HIGH: [u16; 32] = [
        0x20ac, 0x81, 0x201a, 0x192, 0x201e, 0x2026, 0x2020, 0x2021, 0x2c6, 0x2030, 0x160, 0x2039, 0x152, 0x8d, 0x17d,
        0x8f, 0x90, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x2dc, 0x2122, 0x161, 0x203a, 0x153, 0x9d,
        0x17e, 0x178,
    ];
    code.checked_sub(0x80).and_then(|i| HIGH.get(i as usize)).map_or(code, |&c| u32::from(c))
}

/// The character reference at the start of `s` (which starts with `&`): the character, or `None`
/// when it is none, and how many bytes it takes (1 for a lone `&`).
fn reference(s: &str) -> (Option<char>, usize) {
    let b = s.as_bytes();
    if b.get(1) == Some(&b'#') {
        let (radix, start) = if matches!(b.get(2), Some(b'x' | b'X')) { (16, 3) } else { (10, 2) };
        let digits = b.iter().skip(start).take_while(|c| char::from(**c).is_digit(radix)).count();
        if digits == 0 {
            return (None, 1);
        }
        // Past U+10FFFF it names no character however long it goes on: saturate, don't overflow.
        let code = b
            .iter()
            .skip(start)
            .take(digits)
            .fold(0u32, |n, c| n.saturating_mul(radix).saturating_add((*c as char).to_digit(radix).unwrap_or(0)));
        let end = start + digits;
        let len = if b.get(end) == Some(&b';') { end + 1 } else { end };
        let c =
            (code != 0).then(|| char::from_u32(windows_1252(code))).flatten().unwrap_or(char::REPLACEMENT_CHARACTER);
        return (Some(c), len);
    }
    let name_len = b.iter().skip(1).take(9).take_while(|c| c.is_ascii_alphanumeric()).count();
    if b.get(1 + name_len) != Some(&b';') {
        return (None, 1);
    }
    match s.get(1..1 + name_len).and_then(entity) {
        Some(c) => (Some(c), name_len + 2),
        None => (None, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_every_entry_a_character() {
        assert!(ENTITIES.windows(2).all(|w| w[0].0.as_bytes() < w[1].0.as_bytes()));
        for (name, code) in ENTITIES {
            assert_eq!(entity(name), char::from_u32(code), "{name}");
        }
        assert_eq!(entity("amp"), Some('&'));
        assert_eq!(entity("AMP"), None, "HTML 4 names only, case and all");
        assert_eq!(entity("nope"), None);
    }

    #[test]
    fn every_name_means_what_html5_says() {
        // mail-parser's converter knows all of HTML5's names: each of ours must read the same.
        for (name, code) in ENTITIES {
            let theirs = mail_parser::decoders::html::html_to_text(&format!("&{name};"));
            assert_eq!(theirs, char::from_u32(code).unwrap().to_string(), "&{name};");
        }
    }

    #[test]
    fn markup_goes_and_words_stay_in_their_lines() {
        let cases: &[(&str, &str)] = &[
            ("<p>  Hello \n  world  </p>", "Hello world"),
            ("a<br>b<br/>c<BR clear=\"all\">d", "a\nb\nc\nd"),
            ("<div>one</div><div>two</div>three", "one\ntwo\nthree"),
            ("a<br><br><br><br>b", "a\n\nb"),
            ("<p>a</p>\n\n<p>b</p>", "a\nb"),
            ("x<b>bold</b>y <i> it </i> z", "xboldy it z"),
            ("<ul><li>milk</li><li> eggs</li></ul>after", "- milk\n- eggs\nafter"),
            ("<table><tr><td>Name</td><td>Ana</td></tr><tr><th>Age</th><td>3</td></tr></table>", "Name Ana\nAge 3"),
            ("<pre>  a\n    b</pre>c", "  a\n    b\nc"),
            ("<h1>Title</h1>text", "Title\ntext"),
            ("   \n  ", ""),
            ("", ""),
        ];
        for (html, text) in cases {
            assert_eq!(to_text(html), *text, "{html:?}");
        }
    }

    #[test]
    fn what_a_reader_never_sees_is_dropped_with_its_contents() {
        let cases: &[(&str, &str)] = &[
            ("<head><title>T</title><style type=\"text/css\">p { x: 1 }</style></head><body>x</body>", "x"),
            ("<script>if (a</b) { y = '</scrip' }</script>y", "y"),
            ("<STYLE>p{}</Style >z", "z"),
            ("<template><p>t</p></template>w", "w"),
            ("<script/>x</script>kept", "kept"),
            ("<style>never closed", ""),
            ("a<!-- <p>hidden</p> -->b", "ab"),
            ("<!--[if mso]>x<![endif]-->y<![if !vml]>v<![endif]>", "yv"),
            ("<!doctype html><html><?xml version=\"1.0\"?>z</html>", "z"),
            ("a<!-- never closed", "a"),
            ("a<!-->b<!--->c<!-- d --!>e", "abce"),
            ("a</>b</ x>c", "abc"),
        ];
        for (html, text) in cases {
            assert_eq!(to_text(html), *text, "{html:?}");
        }
    }

    #[test]
    fn a_lone_angle_is_text_and_a_quoted_one_is_not_the_tag_end() {
        assert_eq!(to_text("1 < 2 and 3<4, <3"), "1 < 2 and 3<4, <3");
        assert_eq!(to_text("<a title=\"x>y\" href='>' data=it's>link</a>"), "link");
        assert_eq!(to_text("text <b"), "text");
        assert_eq!(to_text("<a title=\"never closed>link</a>"), "");
    }

    #[test]
    fn references_are_read_and_unknown_ones_kept() {
        assert_eq!(to_text("caf&eacute; &amp; cr&Egrave;me &#8364;5 &#x1F600;&#X41;&#65x"), "café & crÈme €5 😀AAx");
        assert_eq!(to_text("&#0; &#xD800; &#99999999999999999999; &#1114112;"), "\u{fffd} \u{fffd} \u{fffd} \u{fffd}");
        assert_eq!(to_text("a&nbsp;b&lang;c&rang;"), "a\u{a0}b\u{27e8}c\u{27e9}");
        // 128 to 159 as Windows-1252 reads them, as HTML does; its five holes as they are.
        assert_eq!(to_text("&#146;&#x96;&#128;&#159;&#129;&#x9D;"), "\u{2019}\u{2013}\u{20ac}\u{178}\u{81}\u{9d}");
        // A reference to white space is white space; in `<pre>`, `&#10;` breaks the line.
        assert_eq!(to_text("a&#10;&#10;&#9;b&#32;&#x20; c"), "a b c");
        assert_eq!(to_text("<pre>a&#10;b</pre>"), "a\nb");
        // Not HTML 4, not a name, no semicolon, no digits: as written.
        assert_eq!(
            to_text("&NotSquareSubset; &bogus; & alone &amp &#; &#x; &thetasymbol;"),
            "&NotSquareSubset; &bogus; & alone &amp &#; &#x; &thetasymbol;"
        );
    }

    #[test]
    fn words_survive_any_mix_of_markup_in_order() {
        // A seeded walk over words, inline tags, block tags and spaces: the words of the text are
        // the input's with the inline tags removed and the rest read as a break between words;
        // no line ends in a space, and no more than one empty line is in a row.
        let pieces = [
            "alpha",
            "beta",
            "γάμμα",
            "<b>",
            "</b>",
            "<p>",
            "</p>",
            "<br>",
            "<div class=\"a>b\">",
            "</div>",
            " ",
            "\n",
            "&amp;",
            "<!-- c -->",
            "<li>",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let (mut html, mut plain) = (String::new(), String::new());
            for _ in 0..(seed % 24) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let p = pieces[(seed % pieces.len() as u64) as usize];
                html.push_str(p);
                plain.push_str(match p {
                    "<b>" | "</b>" | "<!-- c -->" => "",
                    "&amp;" => "&",
                    "<li>" => " ",
                    p if p.starts_with('<') => " ",
                    p => p,
                });
            }
            let text = to_text(&html);
            // An item's `- ` is written only before a word: none of the pieces is `-`.
            let words: Vec<_> = text.split_whitespace().filter(|w| *w != "-").collect();
            assert_eq!(words, plain.split_whitespace().collect::<Vec<_>>(), "{html:?}");
            assert!(
                !text.contains("\n\n\n") && !text.contains("  ") && !text.contains(" \n"),
                "{html:?} gave {text:?}"
            );
            assert_eq!(text.trim(), text, "{html:?}");
        }
    }

    #[test]
    fn any_input_gives_text_no_longer_than_it_was() {
        // Seeded strings over the characters markup is made of: no panic, and the text never
        // grows past the input (a reference is never shorter than its character, a `<li>` than
        // its `- ` and line break).
        let alphabet = "<>/!-&#;xX9aAp brlisty\n=\"'?é€";
        let chars: Vec<char> = alphabet.chars().collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut html = String::new();
            for _ in 0..(seed % 40) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                html.push(chars[(seed % chars.len() as u64) as usize]);
            }
            let text = to_text(&html);
            assert!(text.len() <= html.len(), "{html:?} gave {text:?}");
        }
    }
}
