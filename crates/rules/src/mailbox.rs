//! What the mailbox answers for one recipient (spec §6): the vocabulary the inbound route, the
//! queue's local deliveries and the house's own agents (`libro@`, `tareas@`, `verifica@`) share.

use nyx5_proto::Error;

/// What happened to one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Now in the mailbox.
    Accepted,
    /// It was there already: nothing changed.
    Duplicate,
    /// Refused, with the §6 code and reason.
    Rejected(Error),
}
