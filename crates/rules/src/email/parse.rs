//! Reading a real email (RFC 5322 + MIME, with mail-parser) into the unsigned envelope the bridge
//! deposits (docs/SPEC.md "Email bridge"). Pure: the raw bytes, the recipient, the house's domain
//! and the time in; an [`Envelope`] without signature out.
//!
//! Nothing the sender wrote is trusted: every header we keep is clipped, the chosen text body is
//! clipped to a byte budget, attachments are only described (name, media, size, SHA-256), and the
//! authentication verdicts are recorded as the topmost `Authentication-Results` header says. All
//! of those headers are kept, read, for [`Parsed::authenticated_domain`] (see `trust`).

use mail_parser::{MessageParser, MimeHeaders};
use nyx5_proto::address::uuid_v4;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::obj;
use nyx5_proto::{Address, Envelope, Error, Object, Refusal, Timestamp, Value};

use super::trust::{self, AuthResults};
use super::{EXT_EMAIL, MAX_ATTACHMENTS, MAX_HEADER_CHARS, MAX_NAME_CHARS, MAX_REFERENCES};
use super::{html, reply};

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

/// An attachment: described in the extension, and its bytes, which a house with a store for
/// attachments keeps sealed as an attachment of the envelope (docs/SPEC.md "Attachments").
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: Option<String>,
    pub media: String,
    pub bytes: usize,
    pub sha256: String,
    pub contents: Vec<u8>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("name", &self.name)
            .field("media", &self.media)
            .field("bytes", &self.bytes)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
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
    /// The new text of a reply ([`reply`]), when it is not the whole text and fits the budget
    /// beside it.
    pub new_text: Option<String>,
    pub authentication: Option<Authentication>,
    /// Every `Authentication-Results` header, read, topmost first (None where one was unreadable).
    pub authentication_results: Vec<Option<AuthResults>>,
    /// The message has one From header naming one mailbox (DMARC is about that one domain).
    pub single_from: bool,
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

/// Reads `Authentication-Results` (RFC 8601) for the record: `authserv-id; method=result …; …`.
/// Only `spf`, `dkim` and `dmarc` are kept, the first result of each; comments are dropped.
pub fn authentication_results(value: &str) -> Option<Authentication> {
    summary(&trust::read(value)?)
}

fn summary(read: &AuthResults) -> Option<Authentication> {
    let mut a =
        Authentication { authserv_id: clip_chars(&read.authserv_id, MAX_NAME_CHARS), ..Authentication::default() };
    for r in read.results.iter().filter(|r| !r.result.is_empty()) {
        let slot = match r.method.as_str() {
            "spf" => &mut a.spf,
            "dkim" => &mut a.dkim,
            "dmarc" => &mut a.dmarc,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(clip_chars(&r.result, 16));
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

/// The body an agent reads: the first text part mail-parser chose, an HTML one rendered as text
/// by [`html::to_text`] (mail-parser's own converter costs the Worker 22 KB: see that module).
///
/// When mail-parser found no text part, the first part whose `Content-Type` cannot be read
/// ([`defaults_to_plain`]) is the body: RFC 2045 §5.2 reads such a part as `text/plain`, where
/// mail-parser keeps it as an attachment and the person's words would reach the agent as nothing.
/// Returns the text and, when it came from such a part, that part (not then an attachment).
/// The third value is the HTML source when the text was rendered from it (for [`reply`]).
fn body_text<'m>(
    message: &'m mail_parser::Message<'m>,
) -> (String, Option<&'m mail_parser::MessagePart<'m>>, Option<&'m str>) {
    let part = message.text_body.first().and_then(|&i| message.parts.get(i as usize));
    match part.map(|p| &p.body) {
        Some(mail_parser::PartType::Text(text)) => (text.to_string(), None, None),
        Some(mail_parser::PartType::Html(html)) => (html::to_text(html), None, Some(html.as_ref())),
        _ => match message.parts.iter().find(|p| defaults_to_plain(p)) {
            Some(p) => (String::from_utf8_lossy(p.contents()).into_owned(), Some(p), None),
            None => (String::new(), None, None),
        },
    }
}

/// A leaf part that RFC 2045 §5.2 reads as `text/plain` although mail-parser does not: its
/// `Content-Type` has no subtype (`text`, `multipart`, or a word that is no type at all), or is
/// a `multipart/*` without the boundary that makes it one. A part its sender marked as an
/// attachment stays an attachment.
fn defaults_to_plain(part: &mail_parser::MessagePart<'_>) -> bool {
    let leaf = !matches!(part.body, mail_parser::PartType::Multipart(_) | mail_parser::PartType::Message(_));
    let attached = part.content_disposition().is_some_and(|d| d.ctype().eq_ignore_ascii_case("attachment"));
    let unreadable = part.content_type().is_some_and(|ct| {
        ct.subtype().is_none_or(|s| s.trim().is_empty())
            || (ct.ctype().eq_ignore_ascii_case("multipart") && ct.attribute("boundary").is_none())
    });
    leaf && unreadable && !attached
}

/// Parses a raw message. `max_text_bytes` bounds the kept body. A message mail-parser cannot read
/// at all (empty input) is refused (400).
pub fn parse(raw: &[u8], max_text_bytes: usize) -> Result<Parsed, Error> {
    if raw.is_empty() {
        return Err(Refusal::BadEmail.because("not an email message: it is empty"));
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
            MessageParser::default()
                .parse(&headerless)
                .ok_or_else(|| Refusal::BadEmail.because("not an email message"))?
        }
    };
    let message_id = message.message_id().and_then(header_text);
    let subject = message.subject().and_then(header_text);
    let date = message.date().filter(|d| d.is_valid()).map(|d| d.to_rfc3339());
    let in_reply_to = text_list(message.in_reply_to()).into_iter().next();
    let references = text_list(message.references()).into_iter().take(MAX_REFERENCES).collect();
    let reply_to = message.reply_to().and_then(|a| a.first()).and_then(|a| a.address.as_deref()).and_then(mail_address);
    // Every one, in order, even one that is not UTF-8 (where a receiver quoted what a sender
    // chose): skipping it would make the header below it the topmost.
    let authentication_results: Vec<Option<AuthResults>> = message
        .headers()
        .iter()
        .filter(|h| h.name.as_str().eq_ignore_ascii_case("authentication-results"))
        .map(|h| {
            let value = message.raw_message().get(h.offset_start as usize..h.offset_end as usize).unwrap_or_default();
            trust::read(&String::from_utf8_lossy(value))
        })
        .collect();
    let authentication = authentication_results.first().and_then(|a| a.as_ref()).and_then(summary);
    let from_headers = message.headers().iter().filter(|h| h.name == mail_parser::HeaderName::From).count();
    let single_from = from_headers == 1 && message.from().is_some_and(|a| a.iter().count() == 1);
    let (body, body_part, html_source) = body_text(&message);
    let body = body.replace("\r\n", "\n");
    let (text, truncated) = clip_bytes(&body, max_text_bytes);
    // The new text shares the body's budget: the envelope grows by no more than it could before
    // (a body that was cut has none).
    // A forward (by its subject) is content, all of it: Outlook's forward looks like a reply.
    let forward = subject.as_deref().is_some_and(reply::is_forward_subject);
    let new_text = match html_source {
        _ if forward || truncated => None,
        Some(h) => Some(reply::new_text_html(&h.replace("\r\n", "\n"))),
        None => Some(reply::new_text(&body)),
    };
    let new_text = new_text.filter(|n| n.as_str() != text.trim() && text.len() + n.len() <= max_text_bytes);
    let mut attachments = Vec::new();
    let mut attachment_count = 0usize;
    for part in message.attachments().filter(|p| !body_part.is_some_and(|b| std::ptr::eq(*p, b))) {
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
            contents: contents.to_vec(),
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
        new_text,
        authentication,
        authentication_results,
        single_from,
        attachments,
        attachment_count,
    })
}

/// The envelope id of an email to `domain`: a UUID made of the first 16 bytes of SHA-256 of
/// `nyx5 email id:` and the canonical JSON of [`Parsed::id_material`]. It binds the Message-ID and
/// everything the house keeps of the message (and the domain a trusted receiver vouched for), but
/// nothing a delivery adds (trace headers, the SMTP envelope, the receiver's verdict text): the
/// same message delivered twice has one id, different messages sharing a Message-ID have two.
pub fn envelope_id(domain: &str, parsed: &Parsed, authenticated_domain: Option<&str>) -> String {
    let mut input = b"nyx5 email id:".to_vec();
    input.extend_from_slice(parsed.id_material(domain, authenticated_domain).canonical_string().as_bytes());
    let digest = sha256(&input);
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
    /// The From domain a trusted receiver's DMARC pass vouches for ([`Parsed::authenticated_domain`]).
    pub authenticated_domain: Option<&'a str>,
    pub now: Timestamp,
}

impl Parsed {
    /// The real sender: the From header's address, else the SMTP envelope sender.
    pub fn sender(&self, envelope_from: Option<&str>) -> Option<String> {
        self.from.as_ref().and_then(|m| m.address.clone()).or_else(|| envelope_from.and_then(mail_address))
    }

    /// The attachments as the extension describes them.
    fn attachment_values(&self) -> Value {
        let described = self.attachments.iter().map(|a| {
            Value::Object(obj([
                ("name", opt(a.name.as_deref())),
                ("media", a.media.as_str().into()),
                ("bytes", (a.bytes as i64).into()),
                ("sha256", a.sha256.as_str().into()),
            ]))
        });
        Value::Array(described.collect())
    }

    /// The From domain, when a trusted receiver says DMARC passed for it (`trusted`: authserv-ids,
    /// see [`trust::dmarc_pass`]) and the message has one From mailbox. Otherwise the sender is
    /// unverified, whatever From says.
    pub fn authenticated_domain(&self, trusted: &[String]) -> Option<String> {
        if !self.single_from {
            return None;
        }
        let address = self.from.as_ref()?.address.as_deref()?;
        let (_, domain) = address.rsplit_once('@')?;
        trust::dmarc_pass(&self.authentication_results, trusted, domain).then(|| domain.to_owned())
    }

    /// What [`envelope_id`] hashes: the Message-ID and what the envelope keeps of the message
    /// (From as the header says it, the text as kept, by its SHA-256), the house's domain and the
    /// authenticated domain; never the SMTP sender or `Authentication-Results`, which a delivery adds.
    pub fn id_material(&self, domain: &str, authenticated_domain: Option<&str>) -> Value {
        Value::Object(obj([
            ("domain", domain.into()),
            ("message_id", opt(self.message_id.as_deref())),
            ("from", opt(self.from.as_ref().and_then(|m| m.address.as_deref()))),
            ("from_name", opt(self.from.as_ref().and_then(|m| m.name.as_deref()))),
            ("reply_to", opt(self.reply_to.as_deref())),
            ("subject", opt(self.subject.as_deref())),
            ("date", opt(self.date.as_deref())),
            ("in_reply_to", opt(self.in_reply_to.as_deref())),
            ("references", Value::Array(self.references.iter().map(|r| r.as_str().into()).collect())),
            ("text_sha256", hex(&sha256(self.text.as_bytes())).into()),
            ("truncated", Value::Bool(self.truncated)),
            ("attachments", self.attachment_values()),
            ("attachment_count", (self.attachment_count as i64).into()),
            ("authenticated_domain", opt(authenticated_domain)),
        ]))
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
            ("authenticated_domain", opt(arrival.authenticated_domain)),
            ("attachments", self.attachment_values()),
            ("verified", Value::Bool(false)),
        ]);
        if self.attachment_count > self.attachments.len() {
            o.insert("attachment_count".into(), (self.attachment_count as i64).into());
        }
        if self.truncated {
            o.insert("truncated".into(), Value::Bool(true));
        }
        if let Some(new_text) = &self.new_text {
            o.insert("new_text".into(), new_text.as_str().into());
        }
        Value::Object(o)
    }

    /// The unsigned envelope for `arrival.to` (docs/SPEC.md "Email bridge").
    pub fn envelope(&self, id: String, arrival: &Arrival<'_>) -> Result<Envelope, Error> {
        self.envelope_with(id, arrival, Vec::new())
    }

    /// As [`Parsed::envelope`], its content carrying `files` (the attachments the house keeps
    /// for the recipient, as `content.attachments` describes them) when there are any.
    pub fn envelope_with(&self, id: String, arrival: &Arrival<'_>, files: Vec<Value>) -> Result<Envelope, Error> {
        let mut content = Content::new("text/plain", self.text.as_str().into());
        if !files.is_empty() {
            content.extra.insert("attachments".into(), Value::Array(files));
        }
        let mut draft = Draft::new(id, arrival.gateway.clone(), vec![arrival.to.clone()], arrival.now, content);
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
        // The domain must have a dot and be a domain: both, not either.
        assert_eq!(mail_address("a@localhost"), None);
        assert_eq!(mail_address("a@under_score.test"), None);
        assert_eq!(mail_address("a@-dash.test"), None);
        assert_eq!(header_text(" hi\r\n\tthere\0 ").as_deref(), Some("hi there"));
        assert_eq!(header_text(" \r\n "), None);
        assert_eq!(header_text(&"é".repeat(5000)).map(|t| t.chars().count()), Some(MAX_HEADER_CHARS));
    }

    #[test]
    fn the_body_is_clipped_on_a_character_boundary() {
        assert_eq!(clip_bytes("abc", 3), ("abc".to_owned(), false));
        assert_eq!(clip_bytes("abcd", 3), ("abc".to_owned(), true));
        assert_eq!(clip_bytes("", 0), (String::new(), false));
        // "é" is two bytes: a cut inside it moves back to before it.
        assert_eq!(clip_bytes("aé", 2), ("a".to_owned(), true));
        assert_eq!(clip_bytes("aéb", 3), ("aé".to_owned(), true));
        assert_eq!(clip_bytes("€", 2), (String::new(), true));
        assert_eq!(clip_bytes("x€y", 3), ("x".to_owned(), true));
        assert_eq!(clip_bytes("x€y", 4), ("x€".to_owned(), true));
    }

    #[test]
    fn a_content_type_that_cannot_be_read_is_plain_text() {
        // RFC 2045 §5.2: no subtype, or no type at all, reads as text/plain; the words arrive.
        for ct in ["text", "TEXT", "text/", "garbage", "application", "multipart", "multipart/mixed", "text/ ; x=y"] {
            let p = parsed(&format!("From: a@b.test\r\nContent-Type: {ct}\r\n\r\nhello there\r\n"));
            assert_eq!((p.text.as_str(), p.attachment_count), ("hello there\n", 0), "Content-Type: {ct}");
        }
        // Inside a multipart message too, with a real attachment beside it still described.
        let p = parsed(
            "From: a@b.test\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text\r\n\r\n\
             the words\r\n--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=x.pdf\r\n\r\n\
             %PDF\r\n--b--\r\n",
        );
        assert_eq!(p.text.trim_end(), "the words");
        assert_eq!((p.attachment_count, p.attachments.first().map(|a| a.media.as_str())), (1, Some("application/pdf")));
        // A part its sender attached stays an attachment; a readable binary type is no text.
        let p = parsed("From: a@b.test\r\nContent-Type: text\r\nContent-Disposition: attachment\r\n\r\nx\r\n");
        assert_eq!((p.text.as_str(), p.attachment_count), ("", 1));
        let p = parsed("From: a@b.test\r\nContent-Type: application/octet-stream\r\n\r\nx\r\n");
        assert_eq!((p.text.as_str(), p.attachment_count), ("", 1));
    }

    #[test]
    fn threading_headers_are_kept_one_or_many() {
        let p = parsed("From: a@b.test\r\nIn-Reply-To: <one@x.test>\r\nReferences: <r1@x.test>\r\n\r\nhi\r\n");
        assert_eq!(p.in_reply_to.as_deref(), Some("one@x.test"));
        assert_eq!(p.references, ["r1@x.test"]);
        let p = parsed("In-Reply-To: <one@x.test> <two@x.test>\r\nReferences: <r1@x.test> <r2@x.test>\r\n\r\nhi\r\n");
        assert_eq!(p.in_reply_to.as_deref(), Some("one@x.test"));
        assert_eq!(p.references, ["r1@x.test", "r2@x.test"]);
        let many: String = (0..MAX_REFERENCES + 3).map(|i| format!(" <r{i}@x.test>")).collect();
        let p = parsed(&format!("References:{many}\r\n\r\nhi\r\n"));
        assert_eq!(p.references.len(), MAX_REFERENCES);
        assert_eq!(p.references.first().map(String::as_str), Some("r0@x.test"));
    }

    #[test]
    fn every_attachment_is_counted_and_the_first_ones_described() {
        let message = |n: usize| {
            let mut m = String::from(
                "From: a@b.test\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                 Content-Type: text/plain\r\n\r\nsee the files\r\n",
            );
            for i in 0..n {
                m.push_str(&format!(
                    "--b\r\nContent-Type: application/octet-stream\r\n\
                     Content-Disposition: attachment; filename=\"f{i}.bin\"\r\n\r\nbytes {i}\r\n"
                ));
            }
            m.push_str("--b--\r\n");
            m
        };
        let p = parsed(&message(3));
        assert_eq!((p.attachment_count, p.attachments.len()), (3, 3));
        assert_eq!(p.attachments.first().and_then(|a| a.name.as_deref()), Some("f0.bin"));
        assert_eq!(p.text, "see the files");
        let p = parsed(&message(MAX_ATTACHMENTS + 2));
        assert_eq!((p.attachment_count, p.attachments.len()), (MAX_ATTACHMENTS + 2, MAX_ATTACHMENTS));
        let last = format!("f{}.bin", MAX_ATTACHMENTS - 1);
        assert_eq!(p.attachments.last().and_then(|a| a.name.as_deref()), Some(last.as_str()));
        // The extension states the count only when it says more than the list.
        let (gateway, to) = (Address::parse("email@h.test").unwrap(), Address::parse("ana@h.test").unwrap());
        let arrival =
            Arrival { gateway: &gateway, to: &to, envelope_from: None, authenticated_domain: None, now: Timestamp(0) };
        let count = |p: &Parsed| p.extension(&arrival).as_object().unwrap().get("attachment_count").cloned();
        assert_eq!(count(&p), Some(Value::from((MAX_ATTACHMENTS + 2) as i64)));
        assert_eq!(count(&parsed(&message(MAX_ATTACHMENTS))), None);
        assert_eq!(count(&parsed(&message(1))), None);
    }

    #[test]
    fn a_reply_has_its_new_text_and_a_forward_none() {
        let body = "Noted.\r\n\r\n-----Original Message-----\r\nFrom: C <c@d.test>\r\nSent: Friday\r\n\
                    To: S <s@d.test>\r\nSubject: x\r\n\r\nThe old text.\r\n";
        let m = |subject: &str| parsed(&format!("From: a@b.test\r\nSubject: {subject}\r\n\r\n{body}"));
        assert_eq!(m("RE: x").new_text.as_deref(), Some("Noted."));
        // Outlook forwards like it replies: the subject tells them apart, and a forward is content.
        for subject in ["FW: x", "Fwd: x", "RV: x", "ENC: x", "TR: x", "WG: x", " fw: x"] {
            assert_eq!(m(subject).new_text, None, "{subject}");
        }
        // Nothing quoted: the body is the new text, and no member says so twice.
        assert_eq!(parsed("From: a@b.test\r\n\r\nJust this.\r\n").new_text, None);
    }

    fn parsed(raw: &str) -> Parsed {
        parse(raw.as_bytes(), 1 << 20).unwrap()
    }

    fn id(raw: &str) -> String {
        envelope_id("h.test", &parsed(raw), None)
    }

    #[test]
    fn ids_bind_the_message_not_the_delivery() {
        let m = "From: a@b.test\r\nMessage-ID: <x@y>\r\nSubject: s\r\n\r\nbody\r\n";
        let a = id(m);
        assert!(nyx5_proto::address::check_id(&a).is_ok());
        // The derivation is pinned (docs/SPEC.md, "Email bridge"): this id was worked out from
        // the spec's text alone (Python's hashlib and json, the body as `body\n`). Another label,
        // member or encoding of the material gives another id, and redelivered mail lands twice.
        assert_eq!(a, "2a94da94-e594-4872-bd33-3541ce4937d5");
        // Another delivery of the same message: new trace headers and verdicts, the same id.
        let again = format!(
            "Received: from mx by h.test; Mon, 30 Nov 2026 10:00:01 +0000\r\n\
             Authentication-Results: mx.h.test; dmarc=fail header.from=b.test\r\nARC-Seal: i=1; cv=none\r\n\
             DKIM-Signature: v=1; d=b.test; b=xyz\r\nX-Spam-Score: 3\r\n{m}"
        );
        assert_eq!(a, id(&again));
        assert_eq!(a, id(&m.replace("\r\n", "\n")));
        // Another message under the same Message-ID, another house, another verdict: other ids.
        assert_ne!(a, id(&m.replace("body", "other body")));
        assert_ne!(a, id(&m.replace("a@b.test", "c@b.test")));
        assert_ne!(a, id(&m.replace("Subject: s", "Subject: t")));
        assert_ne!(a, envelope_id("g.test", &parsed(m), None));
        assert_ne!(a, envelope_id("h.test", &parsed(m), Some("b.test")));
        // Without a Message-ID the content alone decides.
        let bare = "From: a@b.test\r\n\r\none\r\n";
        assert_eq!(id(bare), id(&format!("Received: by mx\r\n{bare}")));
        assert_ne!(id(bare), id(&bare.replace("one", "two")));
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

    #[test]
    fn the_authenticated_domain_needs_a_trusted_pass_for_one_from() {
        let trusted = vec!["mx.h.test".to_owned()];
        let m = |from: &str, ar: &str| parsed(&format!("{ar}From: {from}\r\nSubject: s\r\n\r\nx\r\n"));
        let ok = "Authentication-Results: mx.h.test; dmarc=pass header.from=b.test\r\n";
        assert_eq!(m("A <a@B.test>", ok).authenticated_domain(&trusted).as_deref(), Some("b.test"));
        assert_eq!(m("a@b.test", ok).authenticated_domain(&[]), None);
        assert_eq!(m("a@c.test", ok).authenticated_domain(&trusted), None);
        assert_eq!(m("a@b.test, c@c.test", ok).authenticated_domain(&trusted), None);
        assert_eq!(m("a@b.test\r\nFrom: c@c.test", ok).authenticated_domain(&trusted), None);
        // A receiver's header that is not UTF-8 (it quotes a sender's bytes) is still the topmost
        // one: the forged pass below it does not move up.
        let raw = [
            b"Authentication-Results: mx.h.test; spf=pass smtp.mailfrom=\xff@c.test; dmarc=fail header.from=b.test\r\n"
                .as_slice(),
            ok.as_bytes(),
        ]
        .concat();
        let p = parse(&[raw, b"From: a@b.test\r\n\r\nx\r\n".to_vec()].concat(), 1 << 20).unwrap();
        assert_eq!(p.authentication_results.len(), 2);
        assert_eq!(p.authenticated_domain(&trusted), None);
        let below = format!("Authentication-Results: mx.evil.test; none\r\n{ok}");
        assert_eq!(m("a@b.test", &below).authenticated_domain(&trusted), None);
        // The recorded summary is the topmost header's, trusted or not.
        let a = m("a@b.test", &below).authentication.unwrap();
        assert_eq!((a.authserv_id.as_str(), a.dmarc), ("mx.evil.test", None));
    }
}
