//! The email bridge's rules (spec §10, `urn:nyx5:ext:email`): [`parse`] reads a raw message into
//! an unsigned envelope, [`html`] turns an HTML body into text, [`reply`] finds the new text of a
//! reply, and [`trust`] decides whether a trusted receiver vouches for the message's From domain.

pub mod html;
pub mod parse;
pub mod reply;
pub mod trust;

/// The extension's URI: the bridge's data lives under `extensions[EXT_EMAIL]`.
pub const EXT_EMAIL: &str = nyx5_proto::mailbox::EXT_EMAIL;
/// Most attachments described per email (the rest are only counted).
pub const MAX_ATTACHMENTS: usize = nyx5_proto::limits::MAX_ATTACHMENTS;
/// Longest header text kept (subject, Message-ID, …), in characters: RFC 5322's line limit.
pub const MAX_HEADER_CHARS: usize = 998;
/// Longest display name, attachment name or media type kept, in characters.
pub const MAX_NAME_CHARS: usize = 255;
/// Most `References` kept (the last ones matter least to an agent; the first is the thread root).
pub const MAX_REFERENCES: usize = 32;
