//! The one outbound policy (issue 10 §1) lives in the client crate ([`nyx5_client::outbound`]),
//! which the house and the `nyx5` client share; what is the house's own is which origins its
//! configuration names as the operator's.

pub use nyx5_client::outbound::*;

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
