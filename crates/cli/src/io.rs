//! Standard input and output: bounded reads, and the writes every verb ends with.

use std::io::{Read, Write};
use std::path::Path;

use nyx5_proto::Value;

use crate::error::{Failure, Outcome};

/// Reads standard input to the end, but never more than `limit + 1` bytes: one byte over the
/// limit is enough for the parser to refuse the input as too large.
pub(crate) fn read_stdin(limit: usize) -> Result<Vec<u8>, Failure> {
    let mut buf = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    std::io::stdin()
        .lock()
        .take(cap)
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("cannot read standard input: {e}")))?;
    Ok(buf)
}

/// Writes `bytes` to standard output as they are.
pub(crate) fn write_stdout(bytes: &[u8]) -> Outcome {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::usage(format!("cannot write standard output: {e}")))
}

/// Writes the canonical JSON of `value` and a newline. Its bytes are canonical JSON, which
/// programs compare and hash as they are, so they are not sanitised: C0 controls are escaped
/// by JSON itself, and text for people goes through [`write_text`].
pub(crate) fn write_json_line(value: &Value) -> Outcome {
    let mut bytes = value.canonical();
    bytes.push(b'\n');
    write_stdout(&bytes)
}

/// Writes text for people (it carries its own newlines) through the one sanitiser,
/// [`crate::sanitise::text`]: whatever a verb's text holds that a peer wrote and was not already
/// made safe, no control or bidi character of it reaches the terminal.
pub(crate) fn write_text(text: &str) -> Outcome {
    write_stdout(crate::sanitise::text(text).as_bytes())
}

/// Reads at most `max` bytes of `path` (more is an error), which must be a regular file: a FIFO
/// or a device put where a file is expected (by an app, or by whatever can write a directory
/// `nyx5` reads) would hang the read or never end it.
pub(crate) fn read_capped(path: &Path, max: usize) -> Result<Vec<u8>, String> {
    if !std::fs::metadata(path).map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() > max { Err(format!("larger than {max} bytes")) } else { Ok(buf) }
}

/// Asks `question` (which ends with its own prompt, e.g. `Approve it? [y/N] `) on the terminal
/// and reads the answer: a yes passes; anything else, or no terminal to ask on (`--yes` is the
/// way without one), refuses with `not approved`.
pub(crate) fn confirm_on_terminal(question: &str) -> Outcome {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage("approve asks on a terminal; with no terminal, give --yes"));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question}");
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::usage(format!("cannot read the answer: {e}")))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(Failure::usage("not approved")),
    }
}
