//! The email bridge (spec §10, `urn:nyx5:ext:email`; docs/SPEC.md "Email bridge"): real email in
//! as unsigned envelopes, never disguised as signed ones.
//!
//! `parse` reads a raw message into the envelope (pure); `trust` decides whether a trusted
//! receiver vouches for its From domain (pure); `inbound` is [`Email::receive_email`], which
//! checks size, recipient, lists and the rate and stores it in one batch; `outbound` queues an
//! agent's email (`POST /email/out`) and sends it through the provider.

pub mod inbound;
pub mod outbound;

pub use nyx5_rules::email::{EXT_EMAIL, MAX_ATTACHMENTS, MAX_HEADER_CHARS, MAX_NAME_CHARS, MAX_REFERENCES};

pub use inbound::EmailOutcome;

use crate::mailbox::Mailbox;
use crate::ports::{Db, Net};
use crate::view::{Core, Post, view};

pub use crate::config::{EMAIL_OUT_PER_AGENT_PER_MINUTE, EMAIL_PER_SENDER_PER_MINUTE, GATEWAY_LOCAL, RESEND_URL};
/// Longest outbound email body, in bytes.
pub const MAX_OUT_BODY_BYTES: usize = 32 * 1024;
/// Largest provider answer read.
pub const MAX_PROVIDER_ANSWER_BYTES: usize = nyx5_proto::limits::MAX_DOCUMENT_BYTES;

/// The email bridge (spec "Email"): mail that arrives for the gateway address becomes mail in
/// the mailboxes (`inbound`), and agents' mail to email addresses goes out through the
/// provider (`outbound`).
pub struct Email<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Email);

impl<'h, D: Db, N: Net> Email<'h, D, N> {
    /// The mailboxes, over the same borrows.
    pub fn mailbox(&self) -> Mailbox<'h, D, N> {
        Mailbox { core: self.core, post: self.post }
    }
}
