//! JSON-RPC 2.0 as MCP's stdio transport carries it: one message a line, the error codes, and
//! the two answers (a result, an error). Both `nyx5 mcp` and the wrapping proxy speak it.

use std::io::BufRead;

use nyx5_proto::Value;
use nyx5_proto::json::obj;

/// The longest line (message) read; longer ones are refused as parse errors.
pub(crate) const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;

pub(crate) fn error(id: Value, code: i64, message: &str) -> Value {
    Value::Object(obj([
        ("jsonrpc", "2.0".into()),
        ("id", id),
        ("error", Value::Object(obj([("code", code.into()), ("message", message.into())]))),
    ]))
}

pub(crate) fn result(id: Value, result: Value) -> Value {
    Value::Object(obj([("jsonrpc", "2.0".into()), ("id", id), ("result", result)]))
}

/// Reads one line of at most [`MAX_LINE_BYTES`]; `Ok(None)` at the end of input. A longer line
/// is read to its end and returned as `Err` (answered as a parse error).
pub(crate) fn read_line(input: &mut impl BufRead) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
    let mut line = Vec::new();
    let mut over = false;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !over {
                None
            } else if over {
                Some(Err(()))
            } else {
                Some(Ok(line))
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (buf.get(..i).unwrap_or_default(), Some(i + 1)),
            None => (buf, None),
        };
        if !over {
            if line.len() + chunk.len() > MAX_LINE_BYTES {
                over = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(Some(if over { Err(()) } else { Ok(line) }));
        }
    }
}
