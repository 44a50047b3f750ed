//! What every service stands on: the house's configuration, its clock and its randomness,
//! borrowed from the house for one call (issue 37 §2). A service asks the ground for the time
//! and for fresh ids; it never holds the house itself.

use nyx5_proto::Timestamp;

use crate::config::Config;
use crate::ports::{Clock, Rng};

/// The configuration, clock and randomness of one house, borrowed.
#[derive(Clone, Copy)]
pub struct Ground<'h> {
    pub config: &'h Config,
    pub clock: &'h dyn Clock,
    pub rng: &'h dyn Rng,
}

impl std::fmt::Debug for Ground<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ground").field("domain", &self.config.domain).finish_non_exhaustive()
    }
}

impl Ground<'_> {
    /// The house's time now.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// `K` random bytes.
    pub fn random<const K: usize>(&self) -> [u8; K] {
        let mut b = [0u8; K];
        self.rng.fill(&mut b);
        b
    }

    /// A fresh UUID v4.
    pub fn new_id(&self) -> String {
        nyx5_proto::address::uuid_v4(self.random())
    }
}
