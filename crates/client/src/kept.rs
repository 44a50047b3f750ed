//! The mail an agent keeps on its own side (issue 38 §1): every envelope it opened or sent,
//! as the view it was shown (`nyx5_proto::mailbox::view`), so that threads and search work over
//! sealed mail without the house ever reading it. These are the rules every store shares (the
//! CLI's SQLite file, the browser's IndexedDB): what a kept message records, how messages join
//! into a conversation, and how a search's words become a query that cannot be anything but
//! words. A thread is shown oldest first: by `at`, then the house's `seq`, then the id. The stores themselves do the I/O.
//!
//! A conversation is what its messages' **keys** connect: a message's own id and the id it
//! answers (`id:`), its Nyx5 `thread` (`thread:`), and for mail that came by email its
//! `Message-ID`, `In-Reply-To` and `References` (`msg:`). Two messages that share a key are in
//! one conversation when they are [`linked`] (each one's sender a party of the other), and so
//! is everything connected to either that way.

use nyx5_proto::Timestamp;
use nyx5_proto::json::{Object, Value};

/// Messages a thread shows at most (the oldest are left out past it: a thread is read, not
/// scrolled without end).
pub const MAX_THREAD: usize = 1000;

/// Keys a message joins its conversation by, at most (an email's `References` are cut first).
pub const MAX_KEYS: usize = 24;

/// Results a search answers at most, and by default.
pub const MAX_FOUND: usize = 500;
pub const DEFAULT_FOUND: usize = 50;

/// Words a search takes at most, and the longest word.
pub const MAX_WORDS: usize = 16;
pub const MAX_WORD: usize = 128;

/// Whether the agent received the message or sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    In,
    Out,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::In => "in",
            Dir::Out => "out",
        }
    }
}

/// One kept message: what a store indexes, and the view it returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub id: String,
    pub dir: Dir,
    /// When it arrived (received), or when it was written (sent): milliseconds.
    pub at: i64,
    /// Its place in the house's mailbox, for received mail.
    pub seq: Option<i64>,
    pub from: String,
    pub to: Vec<String>,
    /// Who wrote it, for [`linked`] and `--from`: `from`, or for bridged email the address its
    /// email came from (as the house read it, unverified), lower case.
    pub sender: String,
    /// Who it is between: `sender` and its recipients, lower case; none for bridged email whose
    /// house did not authenticate its sender's domain (it joins no conversation).
    pub parties: Vec<String>,
    /// `message`, `task`, `result`, `receipt`, `intro`.
    pub kind: String,
    pub subject: String,
    /// The text searched: the body as text (a structured body as its JSON).
    pub body: String,
    /// What joins it to its conversation (see the module's doc).
    pub keys: Vec<String>,
    /// The view as the agent was shown it, with `dir` added.
    pub view: Value,
}

fn text<'a>(o: &'a Object, name: &str) -> Option<&'a str> {
    o.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The record of a message view (`nyx5_proto::mailbox::view`), or `None` for a view without an
/// id (an item the house could not give an envelope for: nothing to keep). `now` stands in for
/// a time the view lacks.
pub fn kept(view: &Value, dir: Dir, now: Timestamp) -> Option<Kept> {
    let o = view.as_object()?;
    let id = text(o, "id")?.to_owned();
    let time = |name: &str| text(o, name).and_then(|t| Timestamp::parse(t).ok()).map(|t| t.millis());
    let at = match dir {
        Dir::In => time("received").or_else(|| time("created")),
        Dir::Out => time("created").or_else(|| time("received")),
    }
    .unwrap_or(now.millis());
    let email = o.get("email").and_then(Value::as_object);
    let content = o.get("content").and_then(Value::as_object);
    let subject = content
        .and_then(|c| text(c, "subject"))
        .or_else(|| email.and_then(|e| text(e, "subject")))
        .unwrap_or_default()
        .to_owned();
    let body = match content.and_then(|c| c.get("body")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.canonical_string(),
    };
    let mut keys = vec![format!("id:{id}")];
    if let Some(r) = text(o, "in_reply_to") {
        keys.push(format!("id:{r}"));
    }
    if let Some(t) = text(o, "thread") {
        keys.push(format!("thread:{t}"));
    }
    if let Some(e) = email {
        for name in ["message_id", "in_reply_to"] {
            if let Some(m) = text(e, name) {
                keys.push(format!("msg:{m}"));
            }
        }
        let refs = e.get("references").and_then(Value::as_array).unwrap_or_default();
        // The newest references first: they are the closest to this message.
        for r in refs.iter().rev().filter_map(Value::as_str).filter(|r| !r.is_empty()) {
            keys.push(format!("msg:{r}"));
        }
    }
    let mut unique: Vec<String> = Vec::with_capacity(keys.len().min(MAX_KEYS));
    for k in keys {
        if unique.len() < MAX_KEYS && !unique.contains(&k) {
            unique.push(k);
        }
    }
    let keys = unique;
    let mut view = o.clone();
    view.insert("dir".into(), dir.as_str().into());
    let from = text(o, "from").unwrap_or_default().to_owned();
    let to: Vec<String> = o
        .get("to")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let sender = email.and_then(|e| text(e, "from")).unwrap_or(&from).to_ascii_lowercase();
    // Bridged email is someone's only when its house authenticated the address's domain
    // (DMARC): a forged From: is no party of anything (the second hostile review of kept mail).
    let authenticated = email.is_none_or(|e| {
        let domain = sender.rsplit_once('@').map(|(_, d)| d);
        text(e, "authenticated_domain").is_some_and(|a| Some(a.to_ascii_lowercase().as_str()) == domain)
    });
    let mut parties = Vec::new();
    if authenticated {
        parties.push(sender.clone());
        for t in &to {
            let t = t.to_ascii_lowercase();
            if !parties.contains(&t) {
                parties.push(t);
            }
        }
    }
    Some(Kept {
        id,
        dir,
        at,
        seq: o.get("seq").and_then(Value::as_safe_integer),
        from,
        to,
        sender,
        parties,
        kind: text(o, "type").unwrap_or("message").to_owned(),
        subject,
        body,
        keys,
        view: Value::Object(view),
    })
}

/// Whether two messages that share a key are one conversation, for the agent `me`: each one's
/// sender is a party of the other (wrote it or was written to), and they share a party besides
/// the agent. A stranger who names a thread, an id or a Message-ID of someone else's
/// conversation joins nothing, and neither does the agent's answer to them (two of the agent's
/// own messages join only when they went to someone in common), so a thread read on their
/// message never shows them the mail they named (the hostile reviews of kept mail). Bridged email
/// counts by the address it came from, when its house authenticated it.
pub fn linked(me: &str, a_sender: &str, a_parties: &[String], b_sender: &str, b_parties: &[String]) -> bool {
    a_parties.iter().any(|p| p == b_sender)
        && b_parties.iter().any(|p| p == a_sender)
        && a_parties.iter().any(|p| !p.eq_ignore_ascii_case(me) && b_parties.contains(p))
}

/// A search's words as a full-text query that means only those words: each split into words as
/// the index splits text (runs of letters and digits), each quoted (no operator, column filter
/// or prefix a word could smuggle in), all of them required. `None` when there is no word to
/// look for. `e-mail` asks for `e` then `mail`; a run the index splits further (a script whose
/// vowel signs it does not count as letters) is a phrase of its pieces.
pub fn words_query(words: &[String]) -> Result<Option<String>, String> {
    let words: Vec<&str> =
        words.iter().flat_map(|w| w.split(|c: char| !c.is_alphanumeric())).filter(|w| !w.is_empty()).collect();
    if words.len() > MAX_WORDS {
        return Err(format!("at most {MAX_WORDS} words"));
    }
    if let Some(w) = words.iter().find(|w| w.chars().count() > MAX_WORD) {
        return Err(format!(
            "a word of at most {MAX_WORD} characters (one begins {:?})",
            w.chars().take(16).collect::<String>()
        ));
    }
    if words.is_empty() {
        return Ok(None);
    }
    Ok(Some(words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" ")))
}

/// What a search asks besides its words: each is a filter all results pass (the command's store
/// applies them in its query; `Kept`'s `sender`, `to`, `at`, `kind` are what they compare).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Its sender's address, exactly (case folded).
    pub from: Option<String>,
    /// One of its recipients' addresses, exactly (case folded).
    pub to: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub kind: Option<String>,
    /// Received and not yet acknowledged.
    pub unread: bool,
    pub limit: usize,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn view(json: &str) -> Value {
        Value::parse_str(json).unwrap()
    }

    #[test]
    fn a_view_keeps_its_keys_times_and_text() {
        let v = view(
            r#"{"seq": 7, "received": "2026-12-01T10:00:00Z", "id": "b2", "from": "ana@a.test", "to": ["bo@b.test"],
                "created": "2026-12-01T09:59:59Z", "type": "message", "thread": "t1", "in_reply_to": "a1",
                "content": {"media": "text/plain", "body": "the quarterly figures"}}"#,
        );
        let k = kept(&v, Dir::In, Timestamp(0)).unwrap();
        assert_eq!(k.id, "b2");
        assert_eq!(k.at, Timestamp::parse("2026-12-01T10:00:00Z").unwrap().millis());
        assert_eq!(k.seq, Some(7));
        assert_eq!(k.keys, ["id:b2", "id:a1", "thread:t1"]);
        assert_eq!(k.body, "the quarterly figures");
        assert_eq!(k.view.as_object().unwrap()["dir"].as_str(), Some("in"));
        // Sent mail is placed at the time it was written.
        let out = kept(&v, Dir::Out, Timestamp(0)).unwrap();
        assert_eq!(out.at, Timestamp::parse("2026-12-01T09:59:59Z").unwrap().millis());
        // No id: nothing to keep.
        assert!(kept(&view(r#"{"seq": 1, "trust": "invalid"}"#), Dir::In, Timestamp(0)).is_none());
    }

    #[test]
    fn email_joins_by_message_ids_newest_reference_first_and_bounded() {
        let refs: Vec<String> = (0..40).map(|i| format!("\"<r{i}@mail>\"")).collect();
        let v = view(&format!(
            r#"{{"id": "e1", "from": "email@h.test", "email": {{"subject": "Re: plans", "message_id": "<m2@mail>",
                "in_reply_to": "<m1@mail>", "references": [{}]}}, "content": {{"body": "yes"}}}}"#,
            refs.join(",")
        ));
        let k = kept(&v, Dir::In, Timestamp(5)).unwrap();
        assert_eq!(k.subject, "Re: plans");
        assert_eq!(k.at, 5, "no time in the view: now");
        assert_eq!(&k.keys[..4], ["id:e1", "msg:<m2@mail>", "msg:<m1@mail>", "msg:<r39@mail>"]);
        assert_eq!(k.keys.len(), MAX_KEYS);
    }

    #[test]
    fn a_stranger_naming_a_conversation_is_not_linked_to_it() {
        let k = |json: &str| kept(&view(json), Dir::In, Timestamp(0)).unwrap();
        let from_p = k(r#"{"id": "x1", "from": "P@p.test", "to": ["me@h.test", "q@q.test"], "thread": "t"}"#);
        let from_q = k(r#"{"id": "x2", "from": "q@q.test", "to": ["p@p.test", "me@h.test"], "thread": "t"}"#);
        let mine = kept(
            &view(r#"{"id": "x3", "from": "me@h.test", "to": ["p@p.test"], "in_reply_to": "x1"}"#),
            Dir::Out,
            Timestamp(0),
        )
        .unwrap();
        let eve = k(r#"{"id": "s1", "from": "eve@e.test", "to": ["me@h.test"], "thread": "t", "in_reply_to": "x3"}"#);
        let l = |a: &Kept, b: &Kept| linked("me@h.test", &a.sender, &a.parties, &b.sender, &b.parties);
        assert_eq!(from_p.sender, "p@p.test");
        assert!(l(&from_p, &from_q) && l(&from_q, &from_p), "a reply to all");
        assert!(l(&from_p, &mine) && l(&mine, &from_p), "my answer");
        assert!(!l(&eve, &from_p) && !l(&eve, &mine) && !l(&from_q, &eve), "a stranger naming them");
        // My answer to the stranger, in the thread she named, links her to nothing of mine.
        let to_eve = kept(
            &view(r#"{"id": "r1", "from": "me@h.test", "to": ["eve@e.test"], "thread": "t", "in_reply_to": "s1"}"#),
            Dir::Out,
            Timestamp(0),
        )
        .unwrap();
        assert!(l(&to_eve, &eve) && !l(&to_eve, &mine) && !l(&to_eve, &from_p));
        // Bridged email counts by the address it came from, when its house authenticated it.
        let email = |id: &str, who: &str, authenticated: &str| {
            k(&format!(
                r#"{{"id": "{id}", "from": "email@h.test", "to": ["me@h.test"],
                     "email": {{"from": "{who}", "message_id": "<{id}@x>", "authenticated_domain": {authenticated}}}}}"#
            ))
        };
        let bob1 = email("e1", "bob@example.com", r#""example.com""#);
        let bob2 = email("e2", "Bob@Example.com", r#""EXAMPLE.com""#);
        let eve2 = email("e3", "eve@example.net", r#""example.net""#);
        let forged = email("e4", "bob@example.com", "null");
        assert_eq!(bob1.sender, "bob@example.com");
        assert!(l(&bob1, &bob2) && !l(&bob1, &eve2));
        assert!(forged.parties.is_empty() && !l(&bob1, &forged) && !l(&forged, &bob2), "a forged From: joins nothing");
    }

    #[test]
    fn words_are_only_words() {
        let q = |w: &[&str]| words_query(&w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(q(&[]), Ok(None));
        assert_eq!(q(&["  "]), Ok(None));
        assert_eq!(q(&["invoice march"]).unwrap().unwrap(), r#""invoice" "march""#);
        // FTS5's syntax is no word: what is left is quoted.
        assert_eq!(
            q(&["subject:x", "a*", "NOT", "say\"hi"]).unwrap().unwrap(),
            r#""subject" "x" "a" "NOT" "say" "hi""#
        );
        assert_eq!(q(&["¿traduces?", "e-mail"]).unwrap().unwrap(), r#""traduces" "e" "mail""#);
        assert_eq!(q(&["\"*:-()"]), Ok(None));
        assert!(q(&["x"; 17]).is_err());
        assert!(q(&[&"y".repeat(129)]).is_err());
    }
}
