//! The one error table: every protocol failure has a kind (`kind.rs`: each kind's one HTTP
//! status), the refusal it names where its cause has a name (`refusal.rs`) and a reason. The
//! wire form, `{"ok":false,"code":<u16>,"error":"<name>","reason":"<text>"}`, is written by
//! `Error::to_wire` beside the JSON writer (`json.rs`), so this table names no document type.

use std::borrow::Cow;
use std::fmt;

pub use crate::kind::ErrorKind;
use crate::refusal::Refusal;

/// A protocol error: a kind from the table, the refusal's stable name and a human reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// The refusal's row in the table (`Refusal::because` makes it), or none where the cause has
    /// no name of its own; [`Error::name`] reads the wire's `error` from it. A row, not text: one
    /// byte in the padding an `Error` already had, where a name as text made every `Error`, and
    /// the Worker, larger (docs/decisions/0063-refusals-by-name.md). A peer's name this build does
    /// not know is the client's to keep (`nyx5`'s `Failure` does), read with [`Error::wire_name`].
    refusal: Option<Refusal>,
    pub reason: Cow<'static, str>,
}

impl Error {
    /// An error named by its kind alone (`malformed`, `forbidden`, …). A refusal a client may
    /// branch on is named by its cause instead (`Refusal::because`).
    pub fn new(kind: ErrorKind, reason: impl Into<Cow<'static, str>>) -> Self {
        Error { kind, refusal: None, reason: reason.into() }
    }

    /// An error as an answer said it: its code's kind (`Unavailable` for a code not in the table;
    /// a kind's own name with that code, such as `mailbox_moving`, gives that kind), named by the
    /// name it gave if that is one of the table's with this code, else by the kind's own.
    pub fn from_wire(code: u16, name: &str, reason: impl Into<Cow<'static, str>>) -> Self {
        let by_code = ErrorKind::from_code(code).unwrap_or(ErrorKind::Unavailable);
        let kind = ErrorKind::ALL.into_iter().find(|k| k.slug() == name && k.code() == code).unwrap_or(by_code);
        let refusal = Refusal::from_name(name).filter(|r| r.kind() == kind);
        Error { kind, refusal, reason: reason.into() }
    }

    /// A refusal of the table, with its reason (what `Refusal::because` makes).
    pub(crate) fn of(refusal: Refusal, reason: Cow<'static, str>) -> Self {
        Error { kind: refusal.kind(), refusal: Some(refusal), reason }
    }

    /// The stable machine name (the wire's `error`): the refusal's, or the kind's own where the
    /// cause has none.
    pub fn name(&self) -> &'static str {
        self.refusal().map_or(self.kind.slug(), Refusal::name)
    }

    /// The refusal this error names, if it is one of the table's.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal.filter(|r| r.kind() == self.kind)
    }

    /// `name` as a peer's answer with `code` gave it, if it may be believed: a name (`[a-z0-9_]`,
    /// 1 to 64 of them) that is not ours with another code (a 403 called `not_found`, a 409
    /// called `pin_mismatch`). A name this build does not know is kept: a newer house may have it.
    pub fn wire_name(code: u16, name: &str) -> Option<&str> {
        let well_formed = (1..=64).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let ours = Refusal::from_name(name)
            .map(|r| r.kind().code())
            .or_else(|| ErrorKind::ALL.into_iter().find(|k| k.slug() == name).map(ErrorKind::code));
        (well_formed && ours.is_none_or(|c| c == code)).then_some(name)
    }

    /// The same refusal with another reason (a caller that says where it happened).
    pub fn with_reason(mut self, reason: impl Into<Cow<'static, str>>) -> Self {
        self.reason = reason.into();
        self
    }

    pub fn code(&self) -> u16 {
        self.kind.code()
    }
}

impl Refusal {
    /// This refusal, with the reason a person reads.
    pub fn because(self, reason: impl Into<Cow<'static, str>>) -> Error {
        Error::of(self, reason.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.kind.code(), self.name(), self.reason)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        for k in ErrorKind::ALL {
            let back = if k == ErrorKind::MailboxMoving { ErrorKind::Unavailable } else { k };
            assert_eq!(ErrorKind::from_code(k.code()), Some(back));
        }
        assert!(ErrorKind::MailboxMoving.is_temporary());
        assert!(ErrorKind::RateLimited.is_temporary());
        assert!(!ErrorKind::Forbidden.is_temporary());
    }

    /// A name of the table with its own code is kept; any other falls back to the code's own
    /// name (a client keeps a newer house's names itself: `wire_name`).
    #[test]
    fn a_peers_name_is_kept_only_if_it_is_one() {
        let e = Error::from_wire(403, "some_new_cause", "why");
        assert_eq!((e.kind, e.name()), (ErrorKind::Forbidden, "forbidden"));
        assert_eq!(Error::wire_name(403, "some_new_cause"), Some("some_new_cause"));
        assert_eq!(Error::wire_name(409, "pin_mismatch"), None);
        let moving = Error::from_wire(503, "mailbox_moving", "later");
        assert_eq!(moving.kind, ErrorKind::MailboxMoving);
        for bad in ["", "Bad", "with space", "a\u{7}b", &"x".repeat(65)] {
            assert_eq!(Error::from_wire(409, bad, "r").name(), "conflict", "{bad:?}");
        }
        assert_eq!(Error::from_wire(299, "", "r").kind, ErrorKind::Unavailable);
        // A name of ours with another code is not believed: a 403 is no `not_found`, a 409 no
        // `pin_mismatch`.
        assert_eq!(Error::from_wire(403, "not_found", "r").name(), "forbidden");
        assert_eq!(Error::from_wire(409, "pin_mismatch", "r").name(), "conflict");
        assert_eq!(Error::from_wire(403, "pin_mismatch", "r").name(), "pin_mismatch");
    }

    #[test]
    fn internal_reasons_never_leak() {
        let e = Error::new(ErrorKind::Internal, "db password is hunter2");
        let wire = e.to_wire().canonical_string();
        assert!(!wire.contains("hunter2"));
        assert_eq!(wire, r#"{"code":500,"error":"internal","ok":false,"reason":"internal error"}"#);
    }

    #[test]
    fn an_error_displays_as_its_code_its_slug_and_its_reason() {
        let e = Error::new(ErrorKind::Forbidden, "the quote is not signed by its seller");
        assert_eq!(e.to_string(), "403 (forbidden): the quote is not signed by its seller");
        assert_eq!(Error::new(ErrorKind::HeadersTooLarge, "x").to_string(), "431 (headers_too_large): x");
        // Unlike the wire form, the text keeps an internal reason: it is for logs.
        assert_eq!(Error::new(ErrorKind::Internal, "disk full").to_string(), "500 (internal): disk full");
    }
}
