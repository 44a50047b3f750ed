//! What the protocol crate refuses to own: the operating system's random bytes and the clock.

use std::time::{SystemTime, UNIX_EPOCH};

use nyx5_proto::Timestamp;
use nyx5_proto::crypto::Entropy;

use crate::error::{Failure, Outcome};

/// `getrandom` as an [`Entropy`]. `Entropy::fill` cannot fail, so a failure is remembered and
/// [`OsRng::check`] must pass before anything made with these bytes leaves the process.
#[derive(Debug, Default)]
pub(crate) struct OsRng {
    failed: Option<getrandom::Error>,
}

impl Entropy for OsRng {
    fn fill(&mut self, buf: &mut [u8]) {
        if let Err(e) = getrandom::fill(buf) {
            buf.fill(0);
            self.failed.get_or_insert(e);
        }
    }
}

impl OsRng {
    pub(crate) fn new() -> OsRng {
        OsRng::default()
    }

    /// `N` random bytes.
    pub(crate) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        nyx5_proto::crypto::random(self)
    }

    /// Fails if any request for random bytes failed.
    pub(crate) fn check(&self) -> Outcome {
        match self.failed {
            None => Ok(()),
            Some(e) => Err(Failure::usage(format!("the operating system gave no random bytes: {e}"))),
        }
    }
}

/// The wall clock, in whole milliseconds.
pub(crate) fn now() -> Result<Timestamp, Failure> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Failure::usage("the system clock is set before 1970"))?;
    let ms = i64::try_from(since.as_millis()).map_err(|_| Failure::usage("the system clock is out of range"))?;
    Ok(Timestamp::from_millis(ms))
}
