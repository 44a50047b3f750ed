//! The network port the client and the engine share: an [`OutRequest`] sent over [`Net`] gets an
//! [`OutResponse`] or a [`PortError`]. The caller supplies the transport: the Worker's `fetch`,
//! the CLI's blocking client, a test's in-memory houses.
#![allow(async_fn_in_trait)] // Single-threaded runtimes (workerd, the test kit, a CLI verb): no Send bound.

use std::fmt;

/// What a port reports when it fails (the house's database port reports with it too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortError {
    /// A constraint (UNIQUE, CHECK, NOT NULL, FOREIGN KEY) refused the write; the whole batch was
    /// undone. `name` is what the database names it (the house's `ports::constraint_name`): a named CHECK's
    /// name (`rate_cap`), or the columns of a UNIQUE or NOT NULL (`nonces.address, nonces.nonce`).
    /// Compare it with the constants of `store::constraint`, never by searching the text.
    Constraint { name: String },
    /// Anything else: the database or network is unavailable or misbehaved. For a request, its
    /// fate is unknown: it may have arrived and its answer been lost.
    Failed(String),
    /// The request certainly never reached its destination (no route, connection refused): a
    /// transport that can tell says so, and the queue then knows nothing arrived. One that cannot
    /// tell answers [`PortError::Failed`].
    Unreached(String),
    /// The outbound policy refused the target before anything was sent ([`crate::outbound`]);
    /// permanent, unlike a transport failure. The text names the rule, not the URL.
    Refused(String),
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Constraint { name } => write!(f, "constraint failed: {name}"),
            PortError::Failed(m) => write!(f, "failed: {m}"),
            PortError::Unreached(m) => write!(f, "unreachable: {m}"),
            PortError::Refused(m) => write!(f, "refused by the outbound policy: {m}"),
        }
    }
}

/// An HTTP request the house or the client sends (deliveries, card fetches, DNS-over-HTTPS,
/// webhooks, an agent's verbs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The answer to an [`OutRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The network. An `Err` is a transport failure (refused, timed out, DNS): always temporary.
pub trait Net {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError>;
}

#[cfg(test)]
mod tests {
    use super::PortError;

    #[test]
    fn a_port_error_says_what_kind_it_is() {
        let texts: Vec<String> = [
            PortError::Constraint { name: "rate_cap".into() },
            PortError::Failed("x".into()),
            PortError::Unreached("y".into()),
            PortError::Refused("z".into()),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            texts,
            ["constraint failed: rate_cap", "failed: x", "unreachable: y", "refused by the outbound policy: z"]
        );
    }
}
