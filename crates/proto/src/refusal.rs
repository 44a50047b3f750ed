//! The refusals, by name: the one table of what a house (or a client, or a wrapped server's
//! gate) says when it refuses, each with its wire code and a stable machine name (the `error`
//! member of the wire body). Agents branch on the name; people read the reason beside it; tests
//! match names, never prose. docs/SPEC.md ("Refusals by name") lists the same table, and a test
//! holds the two together.
//!
//! A name is for ever: a refusal whose meaning changes gets a new name. Where a cause has no name
//! of its own yet, an [`Error`] carries its kind's name ([`ErrorKind::slug`]), which is still a
//! name from this table's first column.

use std::borrow::Cow;

use crate::error::{Error, ErrorKind};

/// Declares the table: each row a variant, its kind (and so its wire code), its name and what it
/// means (the doc comment, which `Refusal::meaning` returns for the SPEC's table).
macro_rules! refusals {
    ($( $(#[doc = $doc:literal])+ $variant:ident($kind:ident) = $name:literal, )*) => {
        /// A cause of refusal with a stable name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Refusal {
            $( $(#[doc = $doc])+ $variant, )*
        }

        impl Refusal {
            /// Every refusal, in the table's order.
            pub const ALL: &[Refusal] = &[$(Refusal::$variant),*];

            /// The stable machine name: the wire's `error`.
            pub const fn name(self) -> &'static str {
                match self { $(Refusal::$variant => $name,)* }
            }

            /// Its kind, and so its wire code.
            pub const fn kind(self) -> ErrorKind {
                match self { $(Refusal::$variant => ErrorKind::$kind,)* }
            }

            /// What it means, in a line (the row's doc comment).
            pub fn meaning(self) -> &'static str {
                match self { $(Refusal::$variant => concat!($($doc),+).trim_ascii(),)* }
            }
        }
    };
}

impl Refusal {
    /// This refusal, with the reason a person reads.
    pub fn because(self, reason: impl Into<Cow<'static, str>>) -> Error {
        Error { kind: self.kind(), name: Cow::Borrowed(self.name()), reason: reason.into() }
    }

    /// The refusal of this name, if it is one of the table's.
    pub fn from_name(name: &str) -> Option<Refusal> {
        Refusal::ALL.iter().copied().find(|r| r.name() == name)
    }
}

impl Error {
    /// The refusal this error names, if its name is one of the table's.
    pub fn refusal(&self) -> Option<Refusal> {
        Refusal::from_name(&self.name)
    }
}

refusals! {
    // ---- proto: documents, signatures, tokens ----
    /// The JSON is not well formed, or not canonical where it must be.
    BadJson(Malformed) = "bad_json",
    // ---- end proto ----

    // ---- house: auth, registration, cards, mailbox, inbound, outbound ----
    /// The `Authorization` token is missing or cannot be read.
    BadToken(Unauthenticated) = "bad_token",
    // ---- end house ----

    // ---- libro: operations, contracts, mandates, authority, stamps ----
    /// The operation is not one the Libro knows.
    UnknownOperation(Malformed) = "unknown_operation",
    // ---- end libro ----

    // ---- edges: email bridge, apps, index, web, cli, worker ----
    /// The message is not an email the bridge can read.
    BadEmail(Malformed) = "bad_email",
    // ---- end edges ----
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, snake_case, and never a kind's own name with another kind (a client
    /// reading `not_found` must not get a 403).
    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Refusal::ALL {
            let name = r.name();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert!(!r.meaning().is_empty(), "{name} says nothing");
            if let Some(k) = ErrorKind::ALL.iter().find(|k| k.slug() == name) {
                assert_eq!(*k, r.kind(), "{name} is a kind's name with another kind");
            }
            assert_eq!(Refusal::from_name(name), Some(*r));
        }
    }

    #[test]
    fn a_named_refusal_goes_on_the_wire_by_name() {
        let e = Refusal::BadToken.because("no token");
        assert_eq!(e.code(), 401);
        assert_eq!(e.name, "bad_token");
        assert_eq!(e.refusal(), Some(Refusal::BadToken));
        assert_eq!(
            e.to_wire().canonical_string(),
            r#"{"code":401,"error":"bad_token","ok":false,"reason":"no token"}"#
        );
        assert_eq!(e.to_string(), "401 (bad_token): no token");
    }
}
