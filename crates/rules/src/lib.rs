//! nyx5-rules: the house's rules as pure functions over facts.
//!
//! Everything here decides and nothing does: no database, no network, no clock and no global
//! hook (time, facts and tables are parameters). The house engine (`nyx5-house`) reads the
//! facts, calls a rule, and writes what it decided in one guarded batch; because the rules live in
//! a crate that depends on `nyx5-proto` alone, the compiler holds "decide performs no I/O", and
//! the clients can run the same rules.
//!
//! | module | spec | what |
//! |---|---|---|
//! | [`drafts`] | §7c | holds: which envelopes wait for a person, who sets them, who approves |
//! | [`policy`] | §9 | the inbox policy: who may deliver to a mailbox, and at what price |
//! | [`libro`] | §14–§21 | the Libro's kernel, authority and operations |
//! | [`mailbox`] | §6 | what the mailbox answers for one recipient |
//! | [`queue`] | §7 | what a destination's answer means, and the next state of a delivery job |
//! | [`email`] | §10 | an RFC 822 message as an envelope, HTML as text, whose word vouches for it |
//! | [`site`] | — | registrable domains by the Public Suffix List |
#![forbid(unsafe_code)]

pub mod a2a;
pub mod drafts;
pub mod email;
pub mod libro;
pub mod mailbox;
pub mod policy;
pub mod queue;
pub mod site;
