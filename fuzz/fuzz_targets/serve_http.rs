//! `nyx5 serve`'s HTTP/1.1 reader (`crates/cli/src/serve/http.rs`, compiled in here as it is: the
//! binary crate has no library to link). Any bytes as they might arrive on a connection: the head
//! parser never panics, refuses only with a 4xx of the engine's table, and an accepted head is
//! sane (origin-form target, lower-case names, a length within the cap); the rest of the bytes,
//! fed to the chunked decoder in uneven pieces when the head says chunked, decode the same
//! whatever the pieces, never past the cap, and stop where the body ends.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Declared here at the crate root, not inside `mod serve`: there `#[path]` is taken from
// `fuzz_targets/serve/`, a directory git does not keep, so a clean checkout could not find it.
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/cli/src/serve/http.rs"]
mod http;

mod serve {
    use super::http::{Chunked, Framing, parse_head};

    /// The cap the target reads bodies under (small, so the 413 path is reached).
    const MAX_BODY: usize = 4096;

    pub fn check(data: &[u8]) {
        let head = match parse_head(data, MAX_BODY) {
            Ok(Some(head)) => head,
            Ok(None) => return, // the head is not complete yet
            Err(e) => {
                assert!((400..500).contains(&e.code()), "the head parser refused with {}", e.code());
                return;
            }
        };
        assert!(head.target.starts_with('/'), "target {:?}", head.target);
        assert!(head.len <= data.len());
        for (name, _) in &head.headers {
            assert_eq!(name, &name.to_ascii_lowercase());
        }
        let rest = &data[head.len..];
        match head.body {
            Framing::Empty => {}
            Framing::Length(n) => assert!(n <= MAX_BODY, "a length of {n} past the cap"),
            Framing::Chunked => {
                // All at once, and one byte at a time: the same data and the same end.
                let whole = decode(rest, rest.len().max(1));
                let bytewise = decode(rest, 1);
                assert_eq!(whole, bytewise, "the chunked decoder depends on how the bytes arrive");
            }
        }
    }

    /// Feeds `input` to a decoder `step` bytes at a time: the data, the bytes taken and whether
    /// the body ended, or the refusal's code.
    fn decode(input: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), u16> {
        let mut dec = Chunked::new(MAX_BODY);
        let mut out = Vec::new();
        let mut taken = 0;
        while taken < input.len() && !dec.done() {
            let end = (taken + step).min(input.len());
            let n = dec.feed(&input[taken..end], &mut out).map_err(|e| {
                assert!((400..500).contains(&e.code()), "the chunked decoder refused with {}", e.code());
                e.code()
            })?;
            assert!(n <= end - taken);
            assert!(out.len() <= MAX_BODY, "{} bytes decoded past the cap", out.len());
            // It takes all it is given unless the body ended.
            assert!(n == end - taken || dec.done(), "took {n} of {} before the end", end - taken);
            taken += n;
        }
        Ok((out, taken, dec.done()))
    }
}

fuzz_target!(|data: &[u8]| serve::check(data));
