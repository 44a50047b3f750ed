//! The one outbound policy (issue 10 §1) lives in the client crate ([`nyx5_client::outbound`]),
//! which the house and the `nyx5` client share; what is the house's own is which origins its
//! configuration names as the operator's.

pub use nyx5_client::outbound::*;

use nyx5_proto::{Error, Timestamp};

impl crate::config::Config {
    /// The outbound policy: the origins this configuration names (hosts file, DNS-over-HTTPS,
    /// email provider) are the operator's; everything else is learnt.
    pub fn outbound_policy(&self) -> Policy {
        let named = self.hosts.values().map(|h| h.url.as_str());
        let urls = named.chain(self.doh_url.as_deref()).chain([self.email_provider_url.as_str()]);
        Policy::new(urls, self.allow_private_network, self.allow_http)
    }

    /// Where `verifica@`'s tests may point: public https, or an origin the hosts file names (not
    /// the DNS-over-HTTPS endpoint or the email provider, which the house names for its own use).
    pub fn verifica_policy(&self) -> Policy {
        let named = self.hosts.values().map(|h| h.url.as_str());
        Policy::new(named, self.allow_private_network, self.allow_http)
    }
}

/// The oldest an envelope's `created` may be when it is queued: 6 days. The house remembers what
/// it queued for the queue's `OUTBOX_KEEP_MS` (7 days) after the last job ends, and answers
/// the same envelope again "exists"; past that it has forgotten it, so an older envelope could
/// be queued a second time. (Found by the `libro_sequence` fuzz target.)
pub const MAX_CREATED_AGE_MS: i64 = 6 * 24 * 3_600_000;

/// Refuses an envelope created more than [`MAX_CREATED_AGE_MS`] before `now`, or more than the
/// clock tolerance ([`nyx5_proto::limits::CLOCK_SKEW_MS`], 5 minutes) after it (400). Pure.
///
/// Together with the outbox's purge (rows queued more than 7 days ago whose jobs ended more than
/// 7 days ago), this is what makes "the same envelope again queues nothing" hold for good: an
/// envelope queued at `t` was created before `t` + 5 min, is forgotten only after `t` + 7 days,
/// and by then is more than 6 days old.
pub fn check_created(created: Timestamp, now: Timestamp) -> Result<(), Error> {
    if created.millis() > now.millis().saturating_add(nyx5_proto::limits::CLOCK_SKEW_MS) {
        return Err(nyx5_proto::Refusal::CreatedInFuture.because(format!(
            "`created` is more than 5 minutes ahead of this house's clock ({}); check the sender's clock",
            now.to_rfc3339()
        )));
    }
    if created.millis() < now.millis().saturating_sub(MAX_CREATED_AGE_MS) {
        return Err(nyx5_proto::Refusal::CreatedTooOld.because(format!(
            "`created` is more than {} days ago: a house queues only fresh envelopes; sign it again \
             under the same id (a copy delivered before is then recognised by its id)",
            MAX_CREATED_AGE_MS / (24 * 3_600_000)
        )));
    }
    Ok(())
}
