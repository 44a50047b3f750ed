//! `nyx5 canon`: JSON on standard input, its canonical bytes (spec §5) on standard output.

use nyx5_proto::Value;
use nyx5_proto::limits::MAX_ENVELOPE_BYTES;

use crate::error::{Failure, Outcome};
use crate::io;

/// Reads JSON, refuses what the strict parser refuses, writes the canonical form (no newline).
pub(crate) fn run() -> Outcome {
    let bytes = io::read_stdin(MAX_ENVELOPE_BYTES)?;
    let value = Value::parse(&bytes, MAX_ENVELOPE_BYTES).map_err(|e| Failure::input("standard input", &e))?;
    io::write_stdout(&value.canonical())
}
