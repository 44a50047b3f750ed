//! The Libro's rules (spec §14–§21): [`op`] reads an operation, [`kernel::decide`] decides what
//! it does over the facts the house read, and [`authority`] decides what an agent's authority
//! lets through and what waits for an approver; both read and decide over [`model`] (the
//! kernel calls the gate, the gate never names the kernel). [`state`] names the states and roles
//! they speak of.

pub mod authority;
pub mod kernel;
pub mod model;
pub mod op;
pub mod state;

/// The Libro's own local part: operations are envelopes to `libro@<house>`.
pub const LIBRO: &str = "libro";

/// `tareas@`'s local part: the house's desk of seeded, paid work.
pub const TAREAS: &str = "tareas";

/// `verifica@`'s local part: the house's own arbiter (a contract it arbitrates is checked by it).
pub const VERIFICA: &str = "verifica";

/// How long a decided or expired approval stays readable before the house removes it.
pub const KEEP_DECIDED_MS: i64 = 30 * 86_400_000;
