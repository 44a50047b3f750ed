//! Every SQL statement of the engine lives under this module, one file per area. Reads are
//! single queries; writes are returned as statement lists for one atomic `Db::batch`.

pub mod a2a;
pub mod agents;
pub mod apps;
pub mod attachments;
pub mod domain_keys;
pub mod drafts;
pub mod email;
pub mod guard;
pub mod inbox;
pub mod index;
pub mod libro;
pub mod mailbox;
pub mod queue;
pub mod resolver;
pub mod services;
pub mod settings;

use nyx5_proto::{Error, Refusal};

use crate::ports::{Db, PortError, Row, Stmt};

/// The constraints the engine tells apart, as [`crate::ports::PortError::Constraint`] names them
/// (see [`crate::ports::constraint_name`]). Match failures against these, never against text.
pub mod constraint {
    /// `rate_windows`: a window's count may not pass its cap.
    pub const RATE_CAP: &str = "rate_cap";
    /// `invitations`: a code is never used more often than it allows.
    pub const INVITATION_USES: &str = "invitation_uses";
    /// `nonces`: a token's nonce is used once.
    pub const NONCE_USED: &str = "nonces.address, nonces.nonce";
    /// An envelope id the outbox holds already (a resend, or another envelope under that id).
    pub const OUTBOX_ID: &str = "outbox.envelope_id";
    /// `agents`: a name is registered once; a second first registration fails.
    pub const AGENT_TAKEN: &str = "agents.local";
    /// `agents.mbox`: a house numbers at most 2^23 − 1 mailboxes (migration 0013).
    pub const MAILBOX_NUMBER: &str = "mailbox_number";
    /// `guards`: an assertion of [`super::guard`] did not hold.
    pub const GUARD: &str = "guard";
    /// `mailbox_usage`: a mailbox may not hold more than its quota.
    pub const MAILBOX_QUOTA: &str = "mailbox_quota";
    /// `mailbox_usage.acked_through`: an acknowledgment's decision met a watermark, or envelopes,
    /// another acknowledgment had changed since it read them (migration 0021).
    pub const MAILBOX_ACK_RACED: &str = "mailbox_ack_raced";
    /// `tareas_claims`: a task taken past the desk's quota (migration 0010).
    pub const TAREAS_QUOTA: &str = "tareas_quota";
}

/// A port failure as a protocol error: the caller sees 503 (retry later), never our internals.
pub fn port_error(e: PortError) -> Error {
    match e {
        // A movement that would take a balance past what JSON holds exactly (migration 0017).
        PortError::Constraint { name } if name == libro::BALANCE_MAX => Refusal::BalanceMax
            .because("this would take a balance past 2^53 - 1 tok, the most an account holds; nothing moved"),
        // Mailbox shards: a write met a mailbox moving between databases. Temporary (spec §8b).
        PortError::Constraint { name } if name.contains(crate::shards::MOVING) => Refusal::MailboxMoving
            .because("the mailbox is moving between this house's databases; try again in a few seconds"),
        // A step of a move that another request or tick holds (its lease): temporary too.
        PortError::Constraint { name } if name == crate::shards::MOVE_STEP_HELD => Refusal::MailboxMoving
            .because("a step of this mailbox's move is under way elsewhere; try again in a few seconds"),
        PortError::Constraint { name } if name == crate::shards::MOVE_UNDER_WAY => Refusal::MoveUnderWay
            .because("another move of this mailbox, to another database, is under way (or raced this one)"),
        PortError::Constraint { name } => {
            Refusal::ConstraintRefused.because(format!("refused by a constraint: {name}"))
        }
        PortError::Failed(_) | PortError::Unreached(_) => {
            Refusal::StorageUnavailable.because("storage or network unavailable, try again")
        }
        PortError::Refused(why) => Refusal::UrlRefused.because(format!("refused by the outbound policy: {why}")),
    }
}

/// Runs a query, mapping port failures to protocol errors.
pub async fn query<D: Db>(db: &D, stmt: Stmt) -> Result<Vec<Row>, Error> {
    db.query(stmt).await.map_err(port_error)
}

/// The first row of a query, if any.
pub async fn one<D: Db>(db: &D, stmt: Stmt) -> Result<Option<Row>, Error> {
    Ok(query(db, stmt).await?.into_iter().next())
}
