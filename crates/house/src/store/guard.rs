//! Assertions inside a batch: a statement that fails (and so undoes) its whole batch when its
//! condition does not hold at that point of the batch.
//!
//! D1 has no interactive transactions, so a batch cannot read, decide and then write. What it
//! can do is run statements in order inside one transaction and undo all of them when one
//! violates a constraint. A guard is such a statement: it writes its condition, evaluated by
//! SQLite right there, into `guards.holds`, whose CHECK (`guard`) refuses anything but 1. One
//! row per guard name is rewritten each time, so the table never grows. A failed guard comes
//! back as `PortError::Constraint { name: constraint::GUARD }`; the caller knows which guard its
//! batch carried (keep it to one guard per batch whose failures must be told apart).
//!
//! Put the guard before the writes whose premise it checks: it sees the database as the
//! statements before it in the batch left it.

/// A guard statement: `guard!("name", "<SQL condition>", params…)`. The condition is any SQL
/// expression (e.g. `EXISTS (SELECT …)`); false or NULL fails the batch.
#[macro_export]
macro_rules! guard {
    ($name:literal, $condition:literal $(, $p:expr)* $(,)?) => {
        $crate::stmt!(
            concat!(
                "INSERT INTO guards (name, holds) VALUES ('",
                $name,
                "', coalesce((",
                $condition,
                "), 0)) ON CONFLICT (name) DO UPDATE SET holds = excluded.holds"
            )
            $(, $p)*
        )
    };
}
