//! The new text of a person's reply: what they wrote this time, without the history their mail
//! client quoted below or around it, their signature, or "Sent from my iPhone" (docs/SPEC.md
//! "Email bridge", `new_text`; decision 0068). A heuristic over the formats mail clients write,
//! in English, Spanish, Portuguese, French and German; the full text stays the envelope's body.
//!
//! Plain text ([`new_text`]), line by line:
//! - a quoted line (`>` first, after blanks) is dropped; the text around it is kept, so a reply
//!   written between quotes (interleaved, or below them) keeps every line its writer wrote, one
//!   empty line standing where a quoted block was;
//! - an attribution ("On … wrote:", "El … escribió:", "Em … escreveu:", "Le … a écrit :",
//!   "Am … schrieb …:", on one line or wrapped on two) is dropped when quoted lines follow it;
//!   otherwise a dated one (led by its word and naming a number) ends the new text (the history
//!   below it is not quoted), and any other is text ("Here is what I wrote:");
//! - a signature separator (`-- `), a mobile client's line ("Sent from my iPhone", "Enviado desde
//!   mi iPhone", "Enviado do meu iPhone", "Envoyé de mon iPhone", "Von meinem iPhone gesendet", …),
//!   an original-message separator ("-----Original Message-----" and its translations) and a
//!   header block (a From line and at least two of Sent/Date/To/Cc/Subject in the six lines below,
//!   in the five languages, as Outlook writes them) end the new text;
//! - a forward's separator ("---------- Forwarded message ---------", "Begin forwarded
//!   message:", and their translations) ends the search: a forward's body is its content, kept;
//! - trailing empty lines and rules (`____`, `----`) are dropped, and the rest is trimmed.
//!
//! HTML ([`new_text_html`]) first uses the quote structure clients mark: elements with Gmail's
//! `gmail_quote`, `<blockquote type="cite">` (Apple Mail, Thunderbird), Thunderbird's
//! `moz-cite-prefix`, Yahoo's `yahoo_quoted` and Proton's `protonmail_quote` are dropped with
//! their contents (one line `>` stands for each, so the text rules see a quote there), Gmail's
//! `gmail_signature` is dropped, and Outlook's `appendonsend` / `divRplyFwdMsg` / the border-top
//! header `<div>` / Outlook for Mac's reference container end the text; the rest is rendered by
//! [`html::to_text`] and read by the text rules. An element whose first bytes name a forward is
//! kept. Never empty when the message has text: when the cut leaves nothing, the full text
//! (trimmed) is the answer. Linear in the input.

use super::html::{self, Markup};

/// What the new text is when the reply's body is `text` (plain text; LF or CRLF).
pub fn new_text(text: &str) -> String {
    cut(text).unwrap_or_else(|| text.trim().to_owned())
}

/// What the new text is when the reply's body is the HTML `html`: its quote structure first,
/// then the text rules on what is left, rendered (see the module's documentation).
pub fn new_text_html(html: &str) -> String {
    cut(&html::to_text(&without_quotes(html))).unwrap_or_else(|| html::to_text(html).trim().to_owned())
}

/// The text rules; None when they leave nothing.
fn cut(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut gap = false;
    let mut i = 0;
    while let Some(&line) = lines.get(i) {
        let t = line.trim();
        if is_quoted(line) {
            gap = true;
            i += 1;
            continue;
        }
        if is_forward(t) {
            kept.extend(lines.get(i..).unwrap_or_default());
            break;
        }
        if let Some((n, dated)) = attribution(&lines, i) {
            let next = lines.iter().skip(i + n).find(|l| !l.trim().is_empty());
            if next.is_some_and(|l| is_quoted(l)) {
                gap = true;
                i += n;
                continue;
            }
            // Unquoted history follows only a dated attribution; "Here is what I wrote:" is text.
            if dated {
                break;
            }
        }
        if line.trim_end() == "--" || is_mobile(t) || is_original(t) || header_block(&lines, i) {
            break;
        }
        if gap && kept.last().is_some_and(|l| !l.trim().is_empty()) && !t.is_empty() {
            kept.push("");
        }
        gap = false;
        kept.push(line);
        i += 1;
    }
    while kept.last().is_some_and(|l| is_rule(l.trim())) {
        kept.pop();
    }
    let start = kept.iter().position(|l| !l.trim().is_empty()).unwrap_or(kept.len());
    let out = kept.get(start..).unwrap_or_default().join("\n");
    (!out.trim().is_empty()).then_some(out)
}

/// What an element marked by a mail client is.
enum Quote {
    /// The quoted history (or its attribution): dropped, a `>` line in its place.
    Drop,
    /// A signature: dropped.
    Signature,
    /// The start of the history, which runs to the end.
    Rest,
}

fn quote_kind(name: &str, tag: &str) -> Option<Quote> {
    let tag: String = tag.chars().filter(|c| !matches!(c, '"' | '\'' | ' ')).collect::<String>().to_lowercase();
    let has = |s: &str| tag.contains(s);
    if has("gmail_signature") {
        Some(Quote::Signature)
    } else if has("gmail_quote")
        || has("moz-cite-prefix")
        || has("yahoo_quoted")
        || has("protonmail_quote")
        || (name.eq_ignore_ascii_case("blockquote") && has("type=cite"))
    {
        Some(Quote::Drop)
    } else if has("id=appendonsend")
        || has("id=divrplyfwdmsg")
        || has("id=mail-editor-reference-message-container")
        || (name.eq_ignore_ascii_case("div") && (has("border-top:solid#e1e1e1") || has("border-top:solid#b5c4df")))
    {
        Some(Quote::Rest)
    } else {
        None
    }
}

/// `html` without the elements mail clients mark as quoted history or signature.
fn without_quotes(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let (mut copied, mut i) = (0usize, 0usize);
    while let Some(p) = html.get(i..).and_then(|rest| rest.find('<')).map(|p| i + p) {
        match html::markup(html, p) {
            Markup::Tag { name, closing: false, end } => {
                let tag = html.get(p..end).unwrap_or_default();
                i = end;
                let kind = match quote_kind(name, tag) {
                    // A forward is content: its element stays (judged by its first bytes only).
                    Some(Quote::Drop) if names_forward(html.get(p..).unwrap_or_default()) => None,
                    kind => kind,
                };
                let Some(kind) = kind else { continue };
                out.push_str(html.get(copied..p).unwrap_or_default());
                if matches!(kind, Quote::Rest) {
                    return out;
                }
                if matches!(kind, Quote::Drop) {
                    out.push_str("<p>&gt;</p>");
                }
                // Skipped once: the work stays linear.
                copied = element_end(html, end, name, tag);
                i = copied;
            }
            Markup::Tag { end, .. } | Markup::Comment(end) | Markup::Other(end) => i = end,
            Markup::Text => i = p + 1,
        }
    }
    out.push_str(html.get(copied..).unwrap_or_default());
    out
}

/// The position after the end tag that closes the element `name` whose start tag `tag` ends at
/// `from`, nested elements of that name counted; the end of the input when none does.
fn element_end(html: &str, from: usize, name: &str, tag: &str) -> usize {
    if tag.ends_with("/>") {
        return from;
    }
    let mut depth = 1usize;
    let mut i = from;
    while let Some(p) = html.get(i..).and_then(|rest| rest.find('<')).map(|p| i + p) {
        i = match html::markup(html, p) {
            Markup::Tag { name: n, closing, end } => {
                if n.eq_ignore_ascii_case(name) {
                    if closing {
                        depth -= 1;
                        if depth == 0 {
                            return end;
                        }
                    } else if !html.get(p..end).unwrap_or_default().ends_with("/>") {
                        depth += 1;
                    }
                }
                end
            }
            Markup::Comment(end) | Markup::Other(end) => end,
            Markup::Text => p + 1,
        };
    }
    html.len()
}

/// Whether the first bytes of an element (`from` its start tag on) name a forwarded message.
fn names_forward(from: &str) -> bool {
    let mut head = from.len().min(400);
    while !from.is_char_boundary(head) {
        head -= 1;
    }
    let head = html::to_text(from.get(..head).unwrap_or_default()).to_lowercase();
    FORWARDS.iter().any(|f| head.contains(f))
}

/// Whether a subject says its message is a forward (`Fwd:`, `FW:`, and Spanish `RV:`, Portuguese
/// `ENC:`, French `TR:`, German `WG:`): a forward's body is its content, all of it new.
pub fn is_forward_subject(subject: &str) -> bool {
    let s = subject.trim_start().to_lowercase();
    ["fwd:", "fw:", "rv:", "enc:", "tr:", "wg:"].iter().any(|p| s.starts_with(p))
}

fn is_quoted(line: &str) -> bool {
    line.trim_start().starts_with('>')
}

/// A line of rule characters (`____`, `-----`, `=====`), or empty.
fn is_rule(t: &str) -> bool {
    t.chars().all(|c| matches!(c, '_' | '-' | '=' | '*' | '—'))
}

/// Phrases that name a forward, lower case.
const FORWARDS: [&str; 11] = [
    "forwarded message",
    "mensaje reenviado",
    "mensagem encaminhada",
    "mensagem reencaminhada",
    "message transféré",
    "message réexpédié",
    "weitergeleitete nachricht",
    "mensaje original reenviado",
    "inicio del mensaje reenviado",
    "início da mensagem reencaminhada",
    "anfang der weitergeleiteten",
];

fn is_forward(t: &str) -> bool {
    let lower = t.to_lowercase();
    t.len() <= 120 && (t.starts_with('-') || t.ends_with(':')) && FORWARDS.iter().any(|f| lower.contains(f))
}

/// "-----Original Message-----" and its translations, as Outlook and Thunderbird write them.
fn is_original(t: &str) -> bool {
    const ORIGINALS: [&str; 8] = [
        "original message",
        "original-nachricht",
        "ursprüngliche nachricht",
        "mensaje original",
        "mensagem original",
        "message d'origine",
        "message d’origine",
        "message original",
    ];
    let lower = t.to_lowercase();
    t.len() <= 120 && (t.starts_with("--") || t.starts_with("__")) && ORIGINALS.iter().any(|o| lower.contains(o))
}

/// A mobile client's signature line, in the five languages.
fn is_mobile(t: &str) -> bool {
    const MOBILE: [&str; 20] = [
        "sent from my ",
        "sent from outlook",
        "sent from yahoo",
        "sent from mail for",
        "get outlook for ",
        "enviado desde mi ",
        "enviado desde outlook",
        "enviado desde yahoo",
        "obtener outlook para",
        "enviado do meu ",
        "enviado do outlook",
        "enviado do yahoo",
        "obter o outlook para",
        "envoyé de mon ",
        "envoyé depuis mon ",
        "envoyé de yahoo",
        "obtenir outlook pour",
        "gesendet von meinem ",
        "gesendet von yahoo",
        "outlook für ",
    ];
    let lower = t.to_lowercase();
    let german = lower.starts_with("von meinem ") && lower.trim_end_matches('.').ends_with("gesendet");
    t.chars().count() <= 60 && (german || MOBILE.iter().any(|m| lower.starts_with(m)))
}

/// How many lines (1 or 2) an attribution at `i` takes, if one starts there, and whether it is
/// dated (led by "On"/"El"/"Em"/"Le"/"Am" and naming a number: a date or a time).
fn attribution(lines: &[&str], i: usize) -> Option<(usize, bool)> {
    let one = lines.get(i)?.trim();
    if one.is_empty() || one.len() > 300 {
        return None;
    }
    if let Some(dated) = is_attribution(one) {
        return Some((1, dated));
    }
    let lower = one.to_lowercase();
    let led = LEADS.iter().any(|w| lower.starts_with(w));
    let two = lines.get(i + 1)?.trim();
    if !led || two.is_empty() || two.starts_with('>') || two.len() > 300 {
        return None;
    }
    is_attribution(&format!("{one} {two}")).map(|dated| (2, dated))
}

/// The words an attribution starts with, lower case.
const LEADS: [&str; 5] = ["on ", "el ", "em ", "le ", "am "];

/// Whether `line` is an attribution ("On … wrote:" and the four others), and if so whether dated.
fn is_attribution(line: &str) -> Option<bool> {
    let lower = line.to_lowercase();
    let compact: String = lower.chars().filter(|c| !c.is_whitespace()).collect();
    let led = LEADS.iter().any(|w| lower.starts_with(w));
    let verb = ["wrote:", "escribió:", "escreveu:", "aécrit:", "writes:"].iter().any(|v| compact.ends_with(v));
    let german = (lower.starts_with("am ") && compact.contains("schrieb") || compact.ends_with("schrieb:"))
        && compact.ends_with(':');
    ((verb && (led || line.chars().count() <= 120)) || german).then(|| led && line.bytes().any(|b| b.is_ascii_digit()))
}

/// A header field's label (`From`, `*Sent:*`, `À :`), lower case, when the line starts with one.
fn label(line: &str) -> Option<String> {
    let t = line.trim().trim_start_matches('*');
    let (name, _) = t.split_once(':')?;
    let name = name.trim().trim_end_matches('*').trim();
    (!name.is_empty() && name.chars().count() <= 20).then(|| name.to_lowercase())
}

/// An Outlook header block starts at `i`: a From line, and at least two of the other fields in
/// the six lines below it.
fn header_block(lines: &[&str], i: usize) -> bool {
    const FROM: [&str; 3] = ["from", "de", "von"];
    const OTHER: [&str; 21] = [
        "sent",
        "date",
        "to",
        "cc",
        "subject",
        "enviado el",
        "enviado",
        "fecha",
        "para",
        "asunto",
        "enviada em",
        "enviada",
        "data",
        "assunto",
        "envoyé",
        "à",
        "objet",
        "gesendet",
        "datum",
        "an",
        "betreff",
    ];
    let from = lines.get(i).and_then(|l| label(l)).is_some_and(|l| FROM.contains(&l.as_str()));
    from && lines.iter().skip(i + 1).take(6).filter_map(|l| label(l)).filter(|l| OTHER.contains(&l.as_str())).count()
        >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_without_history_is_its_own_new_text() {
        assert_eq!(new_text("  Hello there.\n\nSecond line.\n"), "  Hello there.\n\nSecond line.");
        assert_eq!(new_text(""), "");
        // All quoted: nothing new, so the full text.
        assert_eq!(new_text("> only\n> quoted\n"), "> only\n> quoted");
    }

    #[test]
    fn an_attribution_needs_quotes_below_or_a_date() {
        // Ordinary text that ends in "wrote:" is kept when no quote follows it.
        let text = "Sure.\n\nHere is what I wrote:\n\nThe plan.\n\nOn reflection, Ana wrote:\nmore";
        assert_eq!(new_text(text), text);
        // A dated one ends the text, even with no quote below (HTML rendered, Outlook's plain).
        assert_eq!(new_text("Yes.\n\nOn Fri, Dec 4, 2026 Ana wrote:\nold text"), "Yes.");
        // Wrapped on two lines, CRLF, the French non-breaking space.
        assert_eq!(new_text("Oui.\r\n\r\nLe 4 déc. 2026 à 10:00, Ana <a@b.fr> a\r\nécrit\u{a0}:\r\nold"), "Oui.");
        // The second line of a wrapped one is never a quoted line.
        assert_eq!(new_text("Ok.\nOn 4 Dec\n> wrote:\nStill mine."), "Ok.\nOn 4 Dec\n\nStill mine.");
    }

    #[test]
    fn the_html_fallback_is_the_whole_rendered_text() {
        assert_eq!(new_text_html("<blockquote type=\"cite\">old</blockquote>"), "old");
        assert_eq!(
            new_text_html("<p>new</p><blockquote type=\"cite\"><div>x</div>old</blockquote><p>after</p>"),
            "new\n\nafter"
        );
    }
}
