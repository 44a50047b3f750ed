//! The `nyx5-bookmark` header as a client sees it (docs/SPEC.md "Reading your own writes"): an
//! opaque value a house hands out and reads back. How a house seals it is the house's
//! (`nyx5_house::bookmark`); its name and the longest value a house reads are the wire's.

/// The header's name, in requests and answers.
pub const HEADER: &str = "nyx5-bookmark";
/// The longest bookmark a house seals (D1's are 59 characters); an answer whose bookmark is
/// longer carries none.
pub const MAX_BOOKMARK_BYTES: usize = 256;
/// The sealed value's nonce (AES-256-GCM's IV) and tag, around the bookmark.
pub const IV_BYTES: usize = 12;
pub const TAG_BYTES: usize = 16;
/// The longest header value read: a sealed bookmark of [`MAX_BOOKMARK_BYTES`] in base64url
/// (380 characters). A longer one is refused unread.
pub const MAX_HEADER_CHARS: usize = ((IV_BYTES + MAX_BOOKMARK_BYTES + TAG_BYTES) * 4).div_ceil(3);
