//! One file per endpoint (or per noun with its verbs). Each starts with the routes it serves.

pub mod agents;
pub mod apps;
pub mod attachments;
pub mod drafts;
pub mod email;
pub mod health;
pub mod inbound;
pub mod index;
pub mod invitations;
pub mod libro;
pub mod lists;
pub mod mailbox;
pub mod outbound;
pub mod outbox;
pub mod pins;
pub mod settings;
pub mod shards;
pub mod tareas;
pub mod well_known;
