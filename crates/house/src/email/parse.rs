//! Reading a real email (RFC 5322 + MIME, with mail-parser) into the unsigned envelope the bridge
//! deposits (docs/SPEC.md "Email bridge"). Pure: the raw bytes, the recipient, the house's domain
//! and the time in; an [`Envelope`] without signature out.
//!
//! Nothing the sender wrote is trusted: every header we keep is clipped, the chosen text body is
//! clipped to a byte budget, attachments are only described (name, media, size, SHA-256), and the
//! authentication verdicts are recorded as the topmost `Authentication-Results` header says.

use mail_parser::{MessageParser, MimeHeaders};
use nyx5_proto::address::uuid_v4;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Envelope, Error, Object, Timestamp, Value};

use super::{EXT_EMAIL, MAX_ATTACHMENTS, MAX_HEADER_CHARS, MAX_NAME_CHARS, MAX_REFERENCES};

/// A mailbox as a header names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    /// Lower-cased `local@domain`, when the header held a plausible address.
    pub address: Option<String>,
    /// The display name, if any.
    pub name: Option<String>,
}

/// What the receiving MTA's `Authentication-Results` said. Recorded, never trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authentication {
    pub authserv_id: String,
    pub spf: Option<String>,
    pub dkim: Option<String>,
    pub dmarc: Option<String>,
}

/// An attachment, described: the house keeps no binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: Option<String>,
    pub media: String,
    pub bytes: usize,
    pub sha256: String,
}

/// What the bridge keeps of one email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub message_id: Option<String>,
    pub from: Option<Mailbox>,
    pub reply_to: Option<String>,
    pub subject: Option<String>,
    /// RFC 3339, when the Date header is readable.
    pub date: Option<String>,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
    /// The text/plain body, else the HTML body rendered as text; CRLF becomes LF.
    pub text: String,
    /// The text was longer than the budget and was cut.
    pub truncated: bool,
    pub authentication: Option<Authentication>,
    pub attachments: Vec<Attachment>,
    /// How many attachments the message had (only the first [`MAX_ATTACHMENTS`] are described).
    pub attachment_count: usize,
}

/// Cuts `text` to at most `max` characters.
pub fn clip_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => text.get(..cut).unwrap_or_default().to_owned(),
        None => text.to_owned(),
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary; says whether it cut.
fn clip_bytes(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut cut = max;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (text.get(..cut).unwrap_or_default().to_owned(), true)
}

/// A header value as we keep it: controls (CR, LF, NUL…) become spaces, runs of blanks one
/// space, trimmed and clipped. Empty is none.
pub fn header_text(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len().min(MAX_HEADER_CHARS));
    let mut blank = false;
    for c in text.chars() {
        if c.is_control() || c.is_whitespace() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push(' ');
            blank = false;
        }
        out.push(c);
        if out.len() >= MAX_HEADER_CHARS * 4 {
            break;
        }
    }
    let out = clip_chars(&out, MAX_HEADER_CHARS);
    (!out.is_empty()).then_some(out)
}

/// An email address we are willing to record or reply to: `local@domain`, printable ASCII without
/// blanks or the characters that delimit addresses, a domain of DNS labels. Lower-cased.
pub fn mail_address(text: &str) -> Option<String> {
    let t = text.trim().to_ascii_lowercase();
    let (local, domain) = t.rsplit_once('@')?;
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && local.bytes().all(|b| b.is_ascii_graphic() && !b"<>()[]\\,;:\"@".contains(&b));
    let domain_ok = domain.contains('.') && nyx5_proto::address::check_domain(domain).is_ok();
    (local_ok && domain_ok).then_some(t)
}

/// Reads `Authentication-Results` (RFC 8601): `authserv-id; method=result …; …`. Only `spf`,
/// `dkim` and `dmarc` are kept, the first result of each; comments are dropped.
pub fn authentication_results(value: &str) -> Option<Authentication> {
    let mut clean = String::with_capacity(value.len());
    let mut depth = 0usize;
    for c in value.chars() {
        match c {
            '(' => depth = depth.saturating_add(1),
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => clean.push(if c.is_control() { ' ' } else { c }),
            _ => {}
        }
    }
    let mut parts = clean.split(';');
    let authserv_id = parts.next()?.split_whitespace().next().map(|s| clip_chars(s, MAX_NAME_CHARS))?;
    let mut a = Authentication { authserv_id, ..Authentication::default() };
    for part in parts {
        let Some((method, rest)) = part.trim().split_once('=') else { continue };
        let result: String = rest.chars().take_while(char::is_ascii_alphabetic).take(16).collect();
        if result.is_empty() {
            continue;
        }
        let result = result.to_ascii_lowercase();
        let slot = match method.trim().to_ascii_lowercase().as_str() {
            "spf" => &mut a.spf,
            "dkim" => &mut a.dkim,
            "dmarc" => &mut a.dmarc,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(result);
        }
    }
    Some(a)
}

/// A header field's start: a name of one or more printable ASCII characters other than `:` (RFC
/// 5322 `ftext`), blanks before the colon allowed as RFC 5322's obsolete syntax allows them, `:`.
fn is_field(line: &[u8]) -> bool {
    let name = line.iter().take_while(|b| (33..=126).contains(*b) && **b != b':').count();
    let mut rest = line.iter().skip(name).skip_while(|b| matches!(b, b' ' | b'\t'));
    name > 0 && rest.next() == Some(&b':')
}

/// Where an empty line must go when none ends the header block: before the first line that is not
/// a header field, a continuation (it starts with a blank) or, first of all, an mbox `From ` line —
/// where Python's `email` package starts the body too — or at the end when every line is a header.
/// None when an empty line ends the header block already. mail-parser would take every line up to
/// the next empty one as headers (dropping those without a `:`), losing the text.
pub fn missing_separator(raw: &[u8]) -> Option<usize> {
    let mut offset = 0usize;
    for (n, line) in raw.split_inclusive(|b| *b == b'\n').enumerate() {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            return None;
        }
        let header =
            matches!(text.first(), Some(b' ' | b'\t')) || (n == 0 && text.starts_with(b"From ")) || is_field(text);
        if !header {
            return Some(offset);
        }
        offset += line.len();
    }
    Some(offset)
}

/// `raw` with the empty line that ends its header block, when it lacks one ([`missing_separator`]).
pub fn with_separator(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let Some(at) = missing_separator(raw) else { return raw.into() };
    let (head, body) = raw.split_at(at.min(raw.len()));
    let mut out = Vec::with_capacity(raw.len() + 4);
    out.extend_from_slice(head);
    if !head.is_empty() && !head.ends_with(b"\n") {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out.into()
}

fn text_list(v: &mail_parser::HeaderValue<'_>) -> Vec<String> {
    match v {
        mail_parser::HeaderValue::Text(t) => header_text(t).into_iter().collect(),
        mail_parser::HeaderValue::TextList(list) => list.iter().filter_map(|t| header_text(t)).collect(),
        _ => Vec::new(),
    }
}

fn mailbox(a: Option<&mail_parser::Address<'_>>) -> Option<Mailbox> {
    let first = a?.first()?;
    let address = first.address.as_deref().and_then(mail_address);
    let name = first.name.as_deref().and_then(header_text).map(|n| clip_chars(&n, MAX_NAME_CHARS));
    (address.is_some() || name.is_some()).then_some(Mailbox { address, name })
}

/// Parses a raw message. `max_text_bytes` bounds the kept body. A message mail-parser cannot read
/// at all (empty input) is refused (400).
pub fn parse(raw: &[u8], max_text_bytes: usize) -> Result<Parsed, Error> {
    if raw.is_empty() {
        return Err(Error::malformed("not an email message: it is empty"));
    }
    // The body starts at the first line that is not a header, empty line or not; a message whose
    // first line is no header at all is a body without headers. Should mail-parser still find no
    // end to the headers, the whole message is read as a body, rather than refused.
    let separated = with_separator(raw);
    let headerless;
    let message = match MessageParser::default().parse(separated.as_ref()) {
        Some(m) => m,
        None => {
            headerless = [b"\r\n".as_slice(), raw].concat();
            MessageParser::default().parse(&headerless).ok_or_else(|| Error::malformed("not an email message"))?
        }
    };
    let message_id = message.message_id().and_then(header_text);
    let subject = message.subject().and_then(header_text);
    let date = message.date().filter(|d| d.is_valid()).map(|d| d.to_rfc3339());
    let in_reply_to = text_list(message.in_reply_to()).into_iter().next();
    let references = text_list(message.references()).into_iter().take(MAX_REFERENCES).collect();
    let reply_to = message.reply_to().and_then(|a| a.first()).and_then(|a| a.address.as_deref()).and_then(mail_address);
    let authentication = message
        .headers_raw()
        .find(|(name, _)| name.eq_ignore_ascii_case("authentication-results"))
        .and_then(|(_, value)| authentication_results(value));
    let body = message.body_text(0).map(|t| t.replace("\r\n", "\n")).unwrap_or_default();
    let (text, truncated) = clip_bytes(&body, max_text_bytes);
    let mut attachments = Vec::new();
    let mut attachment_count = 0usize;
    for part in message.attachments() {
        attachment_count += 1;
        if attachments.len() >= MAX_ATTACHMENTS {
            continue;
        }
        let media = part
            .content_type()
            .map(|ct| match ct.subtype() {
                Some(sub) => format!("{}/{}", ct.ctype(), sub),
                None => ct.ctype().to_owned(),
            })
            .and_then(|m| header_text(&m.to_ascii_lowercase()))
            .map_or_else(|| "application/octet-stream".to_owned(), |m| clip_chars(&m, MAX_NAME_CHARS));
        let contents = part.contents();
        attachments.push(Attachment {
            name: part.attachment_name().and_then(header_text).map(|n| clip_chars(&n, MAX_NAME_CHARS)),
            media,
            bytes: contents.len(),
            sha256: hex(&sha256(contents)),
        });
    }
    Ok(Parsed {
        message_id,
        from: mailbox(message.from()),
        reply_to,
        subject,
        date,
        in_reply_to,
        references,
        text,
        truncated,
        authentication,
        attachments,
        attachment_count,
    })
}

/// The envelope id of an email to `domain`: a UUID made of the first 16 bytes of SHA-256 of
/// `nyx5 email:<domain>:<Message-ID>`, or of `nyx5 email raw:<domain>:` and the raw bytes when the
/// message has no Message-ID. A redelivered email gets the same id, so it is stored once.
pub fn envelope_id(domain: &str, message_id: Option<&str>, raw: &[u8]) -> String {
    let digest = match message_id {
        Some(id) => sha256(format!("nyx5 email:{domain}:{id}").as_bytes()),
        None => {
            let mut input = format!("nyx5 email raw:{domain}:").into_bytes();
            input.extend_from_slice(raw);
            sha256(&input)
        }
    };
    let mut bytes = [0u8; 16];
    for (b, d) in bytes.iter_mut().zip(digest) {
        *b = d;
    }
    uuid_v4(bytes)
}

fn opt(v: Option<&str>) -> Value {
    v.map_or(Value::Null, Value::from)
}

/// What the bridge knows besides the message itself.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The house's gateway address (`email@<domain>`), the envelope's `from`.
    pub gateway: &'a Address,
    /// The local recipient.
    pub to: &'a Address,
    /// The SMTP envelope sender (MAIL FROM), if known; used when the message has no From.
    pub envelope_from: Option<&'a str>,
    pub now: Timestamp,
}

impl Parsed {
    /// The real sender: the From header's address, else the SMTP envelope sender.
    pub fn sender(&self, envelope_from: Option<&str>) -> Option<String> {
        self.from.as_ref().and_then(|m| m.address.clone()).or_else(|| envelope_from.and_then(mail_address))
    }

    /// The `urn:nyx5:ext:email` member.
    pub fn extension(&self, arrival: &Arrival<'_>) -> Value {
        let authentication = self.authentication.as_ref().map_or(Value::Null, |a| {
            Value::Object(obj([
                ("authserv_id", a.authserv_id.as_str().into()),
                ("spf", opt(a.spf.as_deref())),
                ("dkim", opt(a.dkim.as_deref())),
                ("dmarc", opt(a.dmarc.as_deref())),
            ]))
        });
        let attachments = self
            .attachments
            .iter()
            .map(|a| {
                Value::Object(obj([
                    ("name", opt(a.name.as_deref())),
                    ("media", a.media.as_str().into()),
                    ("bytes", (a.bytes as i64).into()),
                    ("sha256", a.sha256.as_str().into()),
                ]))
            })
            .collect();
        let mut o: Object = obj([
            ("from", opt(self.sender(arrival.envelope_from).as_deref())),
            ("from_name", opt(self.from.as_ref().and_then(|m| m.name.as_deref()))),
            ("envelope_from", opt(arrival.envelope_from.and_then(mail_address).as_deref())),
            ("reply_to", opt(self.reply_to.as_deref())),
            ("to", arrival.to.as_str().into()),
            ("subject", opt(self.subject.as_deref())),
            ("message_id", opt(self.message_id.as_deref())),
            ("date", opt(self.date.as_deref())),
            ("in_reply_to", opt(self.in_reply_to.as_deref())),
            ("references", Value::Array(self.references.iter().map(|r| r.as_str().into()).collect())),
            ("authentication", authentication),
            ("attachments", Value::Array(attachments)),
            ("verified", Value::Bool(false)),
        ]);
        if self.attachment_count > self.attachments.len() {
            o.insert("attachment_count".into(), (self.attachment_count as i64).into());
        }
        if self.truncated {
            o.insert("truncated".into(), Value::Bool(true));
        }
        Value::Object(o)
    }

    /// The unsigned envelope for `arrival.to` (docs/SPEC.md "Email bridge").
    pub fn envelope(&self, id: String, arrival: &Arrival<'_>) -> Result<Envelope, Error> {
        let mut draft = Draft::new(
            id,
            arrival.gateway.clone(),
            vec![arrival.to.clone()],
            arrival.now,
            Content::new("text/plain", self.text.as_str().into()),
        );
        draft.extra = obj([
            ("extensions", Value::Object(obj([(EXT_EMAIL, self.extension(arrival))]))),
            ("from_verified", Value::Bool(false)),
            ("via", "email".into()),
        ]);
        draft.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_authentication_results() {
        let a = authentication_results(
            "mx.example.net;\r\n spf=pass (sender ok) smtp.mailfrom=a.test;\r\n dkim=FAIL header.d=a.test; dkim=pass; dmarc=none",
        )
        .unwrap();
        assert_eq!(a.authserv_id, "mx.example.net");
        assert_eq!(a.spf.as_deref(), Some("pass"));
        assert_eq!(a.dkim.as_deref(), Some("fail"));
        assert_eq!(a.dmarc.as_deref(), Some("none"));
        assert_eq!(authentication_results("mx; none").unwrap().spf, None);
    }

    #[test]
    fn addresses_and_headers_are_cleaned() {
        assert_eq!(mail_address(" Ana@Example.COM ").as_deref(), Some("ana@example.com"));
        assert_eq!(mail_address("a@b.test\r\nBcc: x@y.test"), None);
        assert_eq!(mail_address("a b@c.test"), None);
        assert_eq!(mail_address("nobody"), None);
        assert_eq!(header_text(" hi\r\n\tthere\0 ").as_deref(), Some("hi there"));
        assert_eq!(header_text(" \r\n "), None);
        assert_eq!(header_text(&"é".repeat(5000)).map(|t| t.chars().count()), Some(MAX_HEADER_CHARS));
    }

    #[test]
    fn ids_are_stable() {
        let a = envelope_id("h.test", Some("x@y"), b"one");
        assert_eq!(a, envelope_id("h.test", Some("x@y"), b"two"));
        assert_ne!(a, envelope_id("g.test", Some("x@y"), b"one"));
        assert_ne!(envelope_id("h.test", None, b"one"), envelope_id("h.test", None, b"two"));
        assert!(nyx5_proto::address::check_id(&a).is_ok());
    }

    fn parsed(raw: &str) -> Parsed {
        parse(raw.as_bytes(), 1 << 20).unwrap()
    }

    #[test]
    fn a_header_block_without_an_empty_line_keeps_its_text() {
        assert_eq!(missing_separator(b"A: 1\r\n\r\nbody"), None);
        assert_eq!(missing_separator(b"A: 1\r\nbody text\r\n"), Some(6));
        assert_eq!(missing_separator(b"A: 1\r\n folded\r\nHi there: friend\r\n"), Some(15));
        assert_eq!(missing_separator(b"From bob Mon Nov 30 10:00:00 2026\nA: 1\nbody"), Some(39));
        assert_eq!(missing_separator(b"A: 1\nFrom here on\n"), Some(5));
        assert_eq!(missing_separator(b":-) hi\n"), Some(0));
        assert_eq!(missing_separator(b"Subject : obsolete but a header\nbody"), Some(32));
        assert_eq!(missing_separator(b"A: 1\r\nB: 2"), Some(10));
        assert_eq!(with_separator(b"A: 1\r\nB: 2").as_ref(), b"A: 1\r\nB: 2\r\n\r\n");
        assert_eq!(with_separator(b"A: 1\nbody\n").as_ref(), b"A: 1\n\r\nbody\n");

        let p = parsed("From: a@b.test\r\nSubject: hi\r\nThis is the text.\r\n\r\nSecond paragraph.\r\n");
        assert_eq!(p.subject.as_deref(), Some("hi"));
        assert_eq!(p.from.unwrap().address.as_deref(), Some("a@b.test"));
        assert_eq!(p.text, "This is the text.\n\nSecond paragraph.\n");
        let p = parsed("Subject: hi\nno empty line at all");
        assert_eq!((p.subject.as_deref(), p.text.as_str()), (Some("hi"), "no empty line at all"));
        let p = parsed("just a line of text");
        assert_eq!((p.subject, p.text.as_str()), (None, "just a line of text"));
        let p = parsed("Subject: only headers");
        assert_eq!((p.subject.as_deref(), p.text.as_str()), (Some("only headers"), ""));
    }
}
