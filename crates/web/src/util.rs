//! What every function here shares: reading its JSON arguments, the clock it is handed, the
//! browser's randomness, and the one error string.

use nyx5_proto::crypto::Entropy;
use nyx5_proto::json::{Object, Value};
use nyx5_proto::{Address, Error, Refusal, Timestamp};

/// The most JSON text one argument may be: a hundred recipients' cards and domain cards, or a
/// mailbox item holding a 1 MiB envelope, fit well within it.
pub(crate) const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// `"<code> <name>: <reason>"`, the error contract of every exported function: `name` is the
/// refusal's stable name (the wire's `error`, [`nyx5_proto::Refusal`]), which a caller branches on.
pub(crate) fn wire(e: &Error) -> String {
    format!("{} {}: {}", e.code(), e.name(), e.reason)
}

/// An answer as canonical JSON text, or the error string.
pub(crate) fn answer(r: Result<Value, Error>) -> Result<String, String> {
    r.map(|v| v.canonical_string()).map_err(|e| wire(&e))
}

/// The same error with `what` in front of its reason.
pub(crate) fn about(what: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        let reason = format!("{what}: {}", e.reason);
        e.with_reason(reason)
    }
}

/// `now_ms` (milliseconds since the epoch, as JavaScript's `Date.now()`) as a [`Timestamp`].
pub(crate) fn now(ms: f64) -> Result<Timestamp, Error> {
    // Years 0000 to 9999, as `toISOString` can write them.
    const MIN: f64 = -62_167_219_200_000.0;
    const MAX: f64 = 253_402_300_799_999.0;
    if !ms.is_finite() || !(MIN..=MAX).contains(&ms) {
        return Err(Refusal::BadInput.because(format!("now_ms {ms} is not a time in milliseconds since 1970")));
    }
    // In range and whole after `floor`, so the conversion is exact.
    Ok(Timestamp::from_millis(ms.floor() as i64))
}

/// Parses one JSON argument.
pub(crate) fn value(text: &str, what: &str) -> Result<Value, Error> {
    Value::parse(text.as_bytes(), MAX_INPUT_BYTES).map_err(about(what))
}

/// Parses one JSON argument that must be an object.
pub(crate) fn object(text: &str, what: &str) -> Result<Object, Error> {
    match value(text, what)? {
        Value::Object(o) => Ok(o),
        _ => Err(Refusal::BadInput.because(format!("{what} must be a JSON object"))),
    }
}

/// An address as a person may type it (trimmed, lower-cased).
pub(crate) fn address(text: &str, what: &str) -> Result<Address, Error> {
    Address::parse_lenient(text).map_err(about(what))
}

/// The browser's (or the operating system's) randomness as an [`Entropy`]. `Entropy::fill`
/// cannot fail, so a failure is remembered and [`OsRandom::check`] must pass before anything
/// made with these bytes is handed out.
#[derive(Debug, Default)]
pub(crate) struct OsRandom {
    failed: Option<getrandom::Error>,
}

impl Entropy for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) {
        if let Err(e) = getrandom::fill(buf) {
            buf.fill(0);
            self.failed.get_or_insert(e);
        }
    }
}

impl OsRandom {
    /// `N` random bytes.
    pub(crate) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        nyx5_proto::crypto::random(self)
    }

    /// Fails if any request for random bytes failed.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match self.failed {
            None => Ok(()),
            Some(e) => Err(Refusal::NoRandomness.because(format!("no cryptographic randomness available: {e}"))),
        }
    }
}
