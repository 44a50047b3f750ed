//! The email bridge (spec §10, `urn:nyx5:ext:email`; docs/SPEC.md "Email bridge"): real email in
//! as unsigned envelopes, never disguised as signed ones.
//!
//! `parse` reads a raw message into the envelope (pure); `trust` decides whether a trusted
//! receiver vouches for its From domain (pure); `inbound` is [`House::receive_email`], which
//! checks size, recipient, lists and the rate and stores it in one batch; `outbound` queues an
//! agent's email (`POST /email/out`) and sends it through the provider.
//!
//! [`House::receive_email`]: crate::House::receive_email

pub mod inbound;
pub mod outbound;

pub use nyx5_rules::email::{EXT_EMAIL, MAX_ATTACHMENTS, MAX_HEADER_CHARS, MAX_NAME_CHARS, MAX_REFERENCES};

pub use inbound::EmailOutcome;

/// The local part of the house's gateway address, the `from` of every email envelope. Reserved.
pub const GATEWAY_LOCAL: &str = "email";
pub use crate::config::{EMAIL_OUT_PER_AGENT_PER_MINUTE, EMAIL_PER_SENDER_PER_MINUTE, RESEND_URL};
/// Longest outbound email body, in bytes.
pub const MAX_OUT_BODY_BYTES: usize = 32 * 1024;
/// Largest provider answer read.
pub const MAX_PROVIDER_ANSWER_BYTES: usize = nyx5_proto::limits::MAX_DOCUMENT_BYTES;
