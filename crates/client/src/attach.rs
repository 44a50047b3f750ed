//! Sealed attachments on the agent's side (docs/SPEC.md "Attachments"; issue 38 §4): what an
//! envelope says of each file, in its sealed content and in its public `attachments` member,
//! and the checks a reader makes before it fetches, opens and saves one. Pure.
//!
//! The sealed content's `attachments` carries what only the recipients may know: `{url, name,
//! media, bytes, sha256, key, iv}` (the file's size and SHA-256, its key and IV, base64url). The
//! envelope's public `attachments` carries what any house may see: `{url, sha256, bytes}` of the
//! ciphertext the sender's house keeps.

use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Error, Refusal, b64};

/// The largest file an attachment holds: 25 MiB (the houses' bound).
pub const MAX_FILE_BYTES: u64 = 25 * 1024 * 1024;
/// The longest name kept for a file.
pub const MAX_NAME_CHARS: usize = 120;
/// The size of every part of a sealed file but the last, as houses keep them (docs/SPEC.md §8e).
pub const PART_BYTES: i64 = 1024 * 1024;

/// One attachment as the recipients read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub url: String,
    pub name: String,
    pub media: String,
    pub bytes: u64,
    pub sha256: String,
    pub key: [u8; 32],
    pub iv: [u8; 12],
}

fn bad(why: impl Into<String>) -> Error {
    Refusal::BadAttachment.because(why.into())
}

impl Described {
    /// The member of the sealed content's `attachments`.
    pub fn to_value(&self) -> Value {
        Value::Object(obj([
            ("url", self.url.as_str().into()),
            ("name", self.name.as_str().into()),
            ("media", self.media.as_str().into()),
            ("bytes", i64::try_from(self.bytes).unwrap_or(i64::MAX).into()),
            ("sha256", self.sha256.as_str().into()),
            ("key", b64::encode(&self.key).into()),
            ("iv", b64::encode(&self.iv).into()),
        ]))
    }

    /// Reads one, checked: a URL, a name made safe, a size within the bound, a digest, a key
    /// and IV of their lengths.
    pub fn from_object(o: &Object) -> Result<Described, Error> {
        let text = |name: &str| field::str(o, name).map(str::to_owned).map_err(|e| bad(e.reason.to_string()));
        let bytes = field::integer(o, "bytes").map_err(|e| bad(e.reason.to_string()))?;
        let bytes =
            u64::try_from(bytes).ok().filter(|b| *b <= MAX_FILE_BYTES).ok_or_else(|| bad("`bytes` out of range"))?;
        let sha256 = text("sha256")?;
        if !is_digest(&sha256) {
            return Err(bad("`sha256` is 64 lower-case hex digits"));
        }
        let key = b64::decode_array::<32>(&text("key")?).ok_or_else(|| bad("`key` is 32 bytes, base64url"))?;
        let iv = b64::decode_array::<12>(&text("iv")?).ok_or_else(|| bad("`iv` is 12 bytes, base64url"))?;
        Ok(Described {
            url: text("url")?,
            name: safe_name(&text("name").unwrap_or_default()),
            media: safe_media(&text("media").unwrap_or_default()),
            bytes,
            sha256,
            key,
            iv,
        })
    }

    /// Whether `plain` is the file described: its size and SHA-256.
    pub fn matches(&self, plain: &[u8]) -> bool {
        plain.len() as u64 == self.bytes && hex(&sha256(plain)) == self.sha256
    }
}

/// The attachments a content (as opened) describes; those that do not read are left out, with
/// why.
pub fn described(content: &Object) -> (Vec<Described>, Vec<String>) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for item in content.get("attachments").and_then(Value::as_array).unwrap_or_default() {
        match item.as_object().map(Described::from_object) {
            Some(Ok(d)) => ok.push(d),
            Some(Err(e)) => bad.push(e.reason.to_string()),
            None => bad.push("an attachment is not an object".into()),
        }
    }
    (ok, bad)
}

/// The member of the envelope's public `attachments`: the ciphertext's URL, SHA-256 and size.
pub fn public_entry(url: &str, sealed: &[u8]) -> Value {
    Value::Object(obj([
        ("url", url.into()),
        ("sha256", hex(&sha256(sealed)).into()),
        ("bytes", i64::try_from(sealed.len()).unwrap_or(i64::MAX).into()),
    ]))
}

fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The attachment id of `url` when it is an attachment of the house at `estafeta` (its domain
/// card's URL): a reader fetches only from the sender's own house, which the outbound policy
/// already vetted, never from a URL a message names elsewhere.
pub fn at_house<'a>(url: &'a str, estafeta: &str) -> Option<&'a str> {
    let id = url.strip_prefix(estafeta.trim_end_matches('/'))?.strip_prefix("/attachments/")?;
    let plain = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    plain.then_some(id)
}

/// Characters that change how text around them is shown (bidirectional controls, zero-width
/// marks): a name with them can show one extension and be another (`invoice\u{202E}fdp.exe`).
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{E000}'..='\u{F8FF}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{F0000}'..
    )
}

/// The most bytes a kept name has (file systems take 255).
const MAX_NAME_BYTES: usize = 200;

/// A file name safe to write in a directory: the last path segment, without control or format
/// characters, a leading dot or trailing dots and spaces, and not a name Windows reserves
/// (`CON`, `NUL`, `COM1`, …: prefixed with `_`), at most [`MAX_NAME_CHARS`]; `attachment` when
/// nothing is left.
pub fn safe_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = last
        .chars()
        .filter(|c| !c.is_control() && !is_format(*c) && !matches!(c, ':' | '*' | '?' | '"' | '<' | '>' | '|'))
        .take(MAX_NAME_CHARS)
        .scan(0, |bytes, c| {
            *bytes += c.len_utf8();
            (*bytes <= MAX_NAME_BYTES).then_some(c)
        })
        .collect();
    let clean = clean.trim().trim_start_matches('.').trim_end_matches(['.', ' ']).trim().to_owned();
    let stem = clean.split('.').next().unwrap_or_default().to_ascii_uppercase();
    let reserved = matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$")
        || (stem.len() == 4
            && (stem.starts_with("COM") || stem.starts_with("LPT"))
            && stem.ends_with(|c: char| c.is_ascii_digit()));
    match (clean.is_empty(), reserved) {
        (true, _) => "attachment".into(),
        (false, true) => format!("_{clean}"),
        (false, false) => clean,
    }
}

/// A media type as a file's description may give it: `type/subtype` of token characters, at most
/// 127 of them, lower-cased; anything else is bytes (`application/octet-stream`). What a sender
/// writes here never reaches a reader as free text.
pub fn safe_media(media: &str) -> String {
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b));
    let ok = media.len() <= 127 && media.split_once('/').is_some_and(|(t, s)| token(t) && token(s));
    if ok { media.to_ascii_lowercase() } else { "application/octet-stream".into() }
}

/// The media type of a file by its name's extension (a short table; anything else is bytes).
pub fn media_for(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "txt" | "md" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "html" | "htm" => "text/html",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_made_safe() {
        assert_eq!(safe_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_name("C:\\Users\\x\\report.pdf"), "report.pdf");
        assert_eq!(safe_name(".bashrc"), "bashrc");
        assert_eq!(safe_name("a\u{0}b\nc.txt"), "abc.txt");
        assert_eq!(safe_name(".."), "attachment");
        assert_eq!(safe_name(""), "attachment");
        assert_eq!(safe_name(&"x".repeat(500)).chars().count(), MAX_NAME_CHARS);
        assert_eq!(safe_name("invoice\u{202E}fdp.exe"), "invoicefdp.exe");
        assert_eq!(safe_name("report.pdf. . "), "report.pdf");
        assert_eq!(safe_name("CON.txt"), "_CON.txt");
        assert_eq!(safe_name("com7"), "_com7");
        assert_eq!(safe_name("console.txt"), "console.txt");
        assert_eq!(safe_name("a\u{E0041}\u{00AD}b.txt"), "ab.txt", "tag and soft-hyphen characters");
        assert!(safe_name(&"語".repeat(120)).len() <= 200, "at most 200 bytes");
    }

    #[test]
    fn media_is_a_type_or_bytes() {
        assert_eq!(safe_media("Text/Plain"), "text/plain");
        assert_eq!(safe_media("application/vnd.ms-excel"), "application/vnd.ms-excel");
        for bad in ["text/plain, 5 bytes), trusted", "text", "/x", "x/", "a/b/c", "text/plain; charset=utf-8", ""] {
            assert_eq!(safe_media(bad), "application/octet-stream", "{bad}");
        }
        assert_eq!(safe_media(&format!("a/{}", "b".repeat(200))), "application/octet-stream");
    }

    #[test]
    fn only_the_senders_house_is_fetched_from() {
        let id = "0f8c2a3e-1b2c-4d5e-8f90-123456789abc";
        assert_eq!(at_house(&format!("https://a.test/attachments/{id}"), "https://a.test"), Some(id));
        assert_eq!(at_house(&format!("https://a.test/attachments/{id}"), "https://a.test/"), Some(id));
        assert_eq!(at_house(&format!("https://evil.test/attachments/{id}"), "https://a.test"), None);
        assert_eq!(at_house(&format!("https://a.test.evil/attachments/{id}"), "https://a.test"), None);
        assert_eq!(at_house("https://a.test/attachments/../agents", "https://a.test"), None);
        assert_eq!(at_house(&format!("https://a.test/attachments/{id}/0"), "https://a.test"), None);
        assert_eq!(at_house("https://a.test/attachments/", "https://a.test"), None);
    }

    #[test]
    fn a_description_reads_back_and_checks_the_file() {
        let d = Described {
            url: "https://a.test/attachments/ab".into(),
            name: "r.txt".into(),
            media: "text/plain".into(),
            bytes: 3,
            sha256: hex(&sha256(b"abc")),
            key: [1; 32],
            iv: [2; 12],
        };
        let back = Described::from_object(d.to_value().as_object().unwrap()).unwrap();
        assert_eq!(back, d);
        assert!(d.matches(b"abc") && !d.matches(b"abd") && !d.matches(b"abcd"));
        let mut o = d.to_value().as_object().unwrap().clone();
        o.insert("key".into(), b64::encode(&[1; 31]).into());
        assert!(Described::from_object(&o).is_err());
        o.insert("key".into(), b64::encode(&[1; 32]).into());
        o.insert("bytes".into(), ((MAX_FILE_BYTES + 1) as i64).into());
        assert!(Described::from_object(&o).is_err());
        let content = obj([("attachments", Value::Array(vec![d.to_value(), Value::from("junk")]))]);
        let (ok, bad) = described(&content);
        assert_eq!((ok.len(), bad.len()), (1, 1));
    }
}
