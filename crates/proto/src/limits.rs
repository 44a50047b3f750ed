//! Every limit in one place (TigerBeetle's "put a limit on everything").

/// Default largest envelope, in canonical bytes (spec §5: 1 MB). Houses may declare less.
pub const MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
/// Largest `intro` envelope, in canonical bytes (spec §9).
pub const MAX_INTRO_BYTES: usize = 4 * 1024;
/// Deepest JSON nesting any parser here accepts.
pub const MAX_JSON_DEPTH: usize = 32;
/// Largest card or other small signed document, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Most recipients on one envelope.
pub const MAX_RECIPIENTS: usize = 100;
/// Longest envelope id, thread or reply reference.
pub const MAX_ID_LEN: usize = 128;
/// Longest local part of an address (spec §1: one leading character and up to 63 more).
pub const MAX_LOCAL_LEN: usize = 64;
/// Longest domain name.
pub const MAX_DOMAIN_LEN: usize = 253;
/// Longest media type string.
pub const MAX_MEDIA_LEN: usize = 255;
/// Most attachments referenced by one envelope.
pub const MAX_ATTACHMENTS: usize = 64;
/// Most keys a domain card may list (rotation), and previous keys an agent card may list.
pub const MAX_KEYS: usize = 8;
/// Most `previous` keys on an agent card.
pub const MAX_PREVIOUS_KEYS: usize = 8;
/// How far an auth token's `ts` may be from the house's clock, either way (spec §8).
pub const AUTH_WINDOW_MS: i64 = 5 * 60 * 1000;
/// How far apart two houses' clocks may be: a card that becomes valid no more than this ahead of
/// the verifier's clock is valid (docs/SPEC.md, "Clocks"). The same as the tokens' window.
pub const CLOCK_SKEW_MS: i64 = AUTH_WINDOW_MS;
/// How long after an end (an envelope's `expires`, a previous key's `until`) a house receiving
/// from another house refuses by that end only temporarily (503): its own clock may be the one
/// that ran ahead, and a copy taken once it is set right must not meet a bounce already told
/// for good (docs/SPEC.md, "Clocks"). The sender's house ends the job by its own clock.
pub const TIME_REFUSAL_DOUBT_MS: i64 = 10 * 24 * 3_600_000;

/// Whether `end` passed at `now`, but less than [`TIME_REFUSAL_DOUBT_MS`] before it.
pub fn ended_lately(end: crate::Timestamp, now: crate::Timestamp) -> bool {
    end <= now && now.millis().saturating_sub(end.millis()) < TIME_REFUSAL_DOUBT_MS
}
/// Shortest and longest auth nonce.
pub const MIN_NONCE_LEN: usize = 16;
pub const MAX_NONCE_LEN: usize = 64;
/// Longest `Authorization` or `X-Nyx5-Relay` header value we parse.
pub const MAX_HEADER_LEN: usize = 4096;
/// Most proof-of-work bits a mailbox may ask for; a check refuses more.
pub const MAX_POW_BITS: u32 = 32;
/// Longest proof-of-work nonce string.
pub const MAX_POW_NONCE_LEN: usize = 64;
/// The largest integer every JSON reader represents exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;
/// Largest token amount (prices, stamps, caps): JavaScript's safe integer range.
pub const MAX_AMOUNT: i64 = MAX_SAFE_INTEGER;
/// Most bytes of a quote's canonical JSON, and of its `concept` (a Libro entry's too).
pub const MAX_QUOTE_BYTES: usize = 16 * 1024;
pub const MAX_CONCEPT_BYTES: usize = 256;
/// Basis points in a whole (referral shares and fees).
pub const BPS_WHOLE: i64 = 10_000;
/// How long a card stays cached (spec §2).
pub const CARD_CACHE_MS: i64 = 5 * 60 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_the_spec_names_have_its_values() {
        // docs/SPEC.md §5: envelopes are at most `policy.max_bytes`, "default 1 MiB".
        assert_eq!(MAX_ENVELOPE_BYTES, 1_048_576);
        // §5, pinned: "an `intro` is at most 4096 bytes of canonical JSON".
        assert_eq!(MAX_INTRO_BYTES, 4096);
        // §6.1: fetched "documents over 64 KiB, 403"; "Limits": "small documents 64 KiB".
        assert_eq!(MAX_DOCUMENT_BYTES, 65_536);
        // §15: "A quote is at most 16 KiB of canonical JSON (413) and its `concept` at most 256 bytes".
        assert_eq!(MAX_QUOTE_BYTES, 16_384);
        assert_eq!(MAX_CONCEPT_BYTES, 256);
        // §8: a token is accepted "within 5 minutes either side of `ts`".
        assert_eq!(AUTH_WINDOW_MS, 300_000);
        // §6.1: "Verified cards are reused for 5 minutes from their fetch"; "Limits": "card cache 5 minutes".
        assert_eq!(CARD_CACHE_MS, 300_000);
    }
}
