//! Accepting verified inbound envelopes into SQLite, on one core: envelopes per second through
//! `POST /inbound` (parse, relay signature, sender card from the 5-minute cache, envelope
//! signature, policy, one batch), against the raw Ed25519 verify rate on the same bytes.
//!
//! `cargo bench -p nyx5-house --features sqlite --bench inbound`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::indexing_slicing, clippy::panic)]

#[path = "../tests/kit/mod.rs"]
mod kit;

use std::hint::black_box;
use std::time::Instant;

use kit::*;
use nyx5_house::Registration;
use nyx5_proto::relay::RelayHeader;
use nyx5_proto::sign::Signature;
use nyx5_proto::{Envelope, json::canonical_without};

const ENVELOPES: usize = 3_000;

/// Headers and body of one prepared request.
type Prepared<'a> = (Vec<(&'a str, String)>, Vec<u8>);

fn envelopes(from: &Agent, to: &Agent, n: usize, tag: &str) -> Vec<Envelope> {
    (0..n)
        .map(|i| from.draft(&format!("{tag}-{i}"), &[&to.address], &"x".repeat(900)).sign(&from.sig).unwrap())
        .collect()
}

/// Envelopes per second through POST /inbound of `b`, with or without relay headers.
fn inbound_rate(with_relay: bool) -> (f64, usize) {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let mut cb = w.config("b.test", Registration::Admin);
    cb.require_relay = with_relay;
    cb.inbound_per_domain_per_minute = 1_000_000;
    let b = w.start(cb);
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    ana.register_admin(&a);
    bo.register_admin(&b);
    let tag = if with_relay { "r" } else { "n" };
    let envs = envelopes(&ana, &bo, ENVELOPES + 1, tag);
    let requests: Vec<Prepared<'_>> = envs
        .iter()
        .map(|e| {
            let mut h = vec![("content-type", "application/json".to_owned())];
            if with_relay {
                h.push(("x-nyx5-relay", RelayHeader::sign("a.test", &e.id, "b.test", &a.config.key).to_header()));
            }
            (h, e.canonical())
        })
        .collect();
    let send = |(h, body): &Prepared<'_>| {
        let headers: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call_raw(&b, "POST", "/inbound", &headers, body.clone())
    };
    // The first one warms the card cache (a real house keeps cards for five minutes).
    assert_eq!(send(&requests[0]).status, 202);
    let start = Instant::now();
    for r in &requests[1..] {
        let resp = send(r);
        assert_eq!(resp.status, 202);
    }
    let secs = start.elapsed().as_secs_f64();
    (ENVELOPES as f64 / secs, envs[0].canonical().len())
}

/// Raw strict Ed25519 verifications per second over the bytes an envelope signature covers.
fn raw_verify_rate() -> f64 {
    let ana = Agent::new("ana@a.test", 10);
    let bo = Agent::new("bo@b.test", 20);
    let env = envelopes(&ana, &bo, 1, "v").remove(0);
    let bytes = canonical_without(env.object(), "signature");
    let sig = Signature::read(env.object(), "signature").unwrap();
    let start = Instant::now();
    for _ in 0..ENVELOPES {
        assert!(black_box(sig.kid.verify(black_box(&bytes), &sig.value)));
    }
    ENVELOPES as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // Under `cargo test --all-targets`: one quick pass as a smoke test.
        return;
    }
    let raw = raw_verify_rate();
    let (relayed, size) = inbound_rate(true);
    let (direct, _) = inbound_rate(false);
    let raw2 = raw_verify_rate();
    let raw = raw.max(raw2);
    println!("inbound into SQLite, {ENVELOPES} envelopes of {size} bytes, one core");
    println!("{:<44} {:>10} {:>9}", "path", "env/s", "µs/env");
    println!("{:<44} {:>10.0} {:>9.1}", "raw Ed25519 verify (strict)", raw, 1e6 / raw);
    println!("{:<44} {:>10.0} {:>9.1}", "POST /inbound with relay header (2 sigs)", relayed, 1e6 / relayed);
    println!("{:<44} {:>10.0} {:>9.1}", "POST /inbound, relay not required (1 sig)", direct, 1e6 / direct);
    println!("ratio to raw verify: with relay {:.2}, without {:.2}", relayed / raw, direct / raw);
}
