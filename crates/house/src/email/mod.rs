//! The email bridge (spec §10, `urn:nyx5:ext:email`; docs/SPEC.md "Email bridge"): real email in
//! as unsigned envelopes, never disguised as signed ones.
//!
//! `parse` reads a raw message into the envelope (pure); `trust` decides whether a trusted
//! receiver vouches for its From domain (pure); `inbound` is [`Email::receive_email`], which
//! checks size, recipient, lists and the rate and stores it in one batch; `outbound` queues an
//! agent's email (`POST /email/out`) and sends it through the provider.

pub mod inbound;
pub mod outbound;

pub use nyx5_rules::email::{EXT_EMAIL, MAX_ATTACHMENTS, MAX_HEADER_CHARS, MAX_NAME_CHARS, MAX_REFERENCES};

pub use inbound::EmailOutcome;

use nyx5_proto::{Error, Refusal};

use crate::mailbox::Mailbox;
use crate::ports::{Db, Net, PortError};
use crate::view::{Core, Post, view};

pub use crate::config::{EMAIL_OUT_PER_AGENT_PER_MINUTE, EMAIL_PER_SENDER_PER_MINUTE, GATEWAY_LOCAL, RESEND_URL};
/// Longest outbound email body, in bytes.
pub const MAX_OUT_BODY_BYTES: usize = 32 * 1024;
/// Largest provider answer read.
pub const MAX_PROVIDER_ANSWER_BYTES: usize = nyx5_proto::limits::MAX_DOCUMENT_BYTES;

/// The email bridge (spec "Email"): mail that arrives for the gateway address becomes mail in
/// the mailboxes (`inbound`), and agents' mail to email addresses goes out through the
/// provider (`outbound`).
pub struct Email<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
    pub(crate) post: Post<'h>,
}

view!(Email);

impl<'h, D: Db, N: Net> Email<'h, D, N> {
    /// The mailboxes, over the same borrows.
    pub fn mailbox(&self) -> Mailbox<'h, D, N> {
        Mailbox { core: self.core, post: self.post }
    }
}

/// An email an agent asks the bridge to send.
pub use crate::store::email::NewEmail;

/// The bridge's reads and writes for the routes (issue 37 §2, "routes call services"): emails
/// received to reply to, emails queued out, an agent's sent emails.
impl<'h, D: Db, N: Net> Email<'h, D, N> {
    /// The stored text of email `id` received from the `gateway` into `local`'s mailbox.
    pub fn received(
        &self,
        local: &str,
        id: &str,
        gateway: &str,
    ) -> impl Future<Output = Result<Option<String>, Error>> {
        crate::store::email::received(self.db, local, id, gateway)
    }

    /// Queues `email` in one batch that counts it towards its agent's (`local`) minute (429 when
    /// full). `Ok(None)` when queued; the stored row when one with its id was queued before;
    /// `Err(None)` when the sender's tree has holds it was not judged against (docs/SPEC.md §7c).
    pub async fn queue_out(
        &self,
        email: &NewEmail<'_>,
        local: &str,
    ) -> Result<Result<Option<crate::ports::Row>, Unjudged>, Error> {
        let cap = self.config.email_out_per_agent_per_minute;
        let bucket = format!("email-out:{local}");
        let count = crate::store::agents::count_in_window(&bucket, email.now / 60_000, cap);
        match self.db.batch(vec![crate::store::email::insert_out(email), count]).await {
            Ok(_) => Ok(Ok(None)),
            Err(PortError::Constraint { name }) if name == crate::store::drafts::HELD_EMAIL => Ok(Err(Unjudged)),
            Err(PortError::Constraint { name }) if name == crate::store::constraint::RATE_CAP => {
                Err(Refusal::TooManyEmails
                    .because(format!("at most {cap} emails a minute from one agent; try again shortly")))
            }
            Err(PortError::Constraint { name }) => {
                let row = crate::store::email::out_entry(self.db, email.id)
                    .await?
                    .ok_or_else(|| crate::port_error(PortError::Constraint { name }))?;
                Ok(Ok(Some(row)))
            }
            Err(e) => Err(crate::port_error(e)),
        }
    }

    /// `sender`'s latest emails out, at most `limit`, read through the request's stale-tolerant
    /// `reads`.
    pub async fn sent_page(
        &self,
        reads: &crate::ports::Reads,
        sender: &str,
        limit: i64,
    ) -> Result<Vec<crate::ports::Row>, Error> {
        crate::store::email::out_page(&self.stale(reads), sender, limit).await
    }
}

/// An email the outbox of the bridge would not take: its sender's tree has holds it was not
/// judged against as they are now (docs/SPEC.md §7c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unjudged;
