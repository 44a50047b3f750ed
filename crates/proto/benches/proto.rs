//! Benchmarks for the hot paths of nyx5-proto on a 1 KB envelope, with only `std`.
//!
//! `cargo bench -p nyx5-proto` runs them (bench profile = release: opt-level "s", crypto crates
//! at 3, LTO). Each operation is warmed up, then timed in three samples of about 0.5 s each,
//! taken in interleaved rounds; the table shows the median sample. Under
//! `cargo test --all-targets` (no `--bench` argument) every operation runs once, checked, as a
//! smoke test instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::indexing_slicing, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use nyx5_proto::crypto::{Context, EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft, Payload};
use nyx5_proto::json::canonical_without;
use nyx5_proto::{Address, Timestamp, seal};

const WARMUP: Duration = Duration::from_millis(150);
const SAMPLE: Duration = Duration::from_millis(500);
const SAMPLES: usize = 3;

/// A deterministic xorshift64 filler: fine for timing, never for keys.
fn xorshift(mut state: u64) -> impl FnMut(&mut [u8]) {
    move |buf: &mut [u8]| {
        for b in buf {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
    }
}

struct Row {
    name: &'static str,
    /// Iterations per sample, sized in the warmup to take about [`SAMPLE`].
    n: u64,
    /// Seconds per operation of each sample.
    secs: Vec<f64>,
}

impl Row {
    fn sorted(&self) -> Vec<f64> {
        let mut s = self.secs.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    /// The median sample, in seconds per operation.
    fn median(&self) -> f64 {
        self.sorted()[self.secs.len() / 2]
    }
}

type Op<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// Warms every operation up and sizes its sample to about [`SAMPLE`]; then takes [`SAMPLES`]
/// rounds, each timing every operation once, so a slow moment (another process, frequency
/// scaling) spreads over all operations instead of skewing one.
fn measure(ops: &mut [Op<'_>]) -> Vec<Row> {
    let mut rows: Vec<Row> = ops
        .iter_mut()
        .map(|(name, op)| {
            let start = Instant::now();
            let mut warm = 0u64;
            while start.elapsed() < WARMUP {
                op();
                warm += 1;
            }
            let per_op = start.elapsed().as_secs_f64() / warm as f64;
            let n = ((SAMPLE.as_secs_f64() / per_op) as u64).max(1);
            Row { name, n, secs: Vec::with_capacity(SAMPLES) }
        })
        .collect();
    for _ in 0..SAMPLES {
        for (row, (_, op)) in rows.iter_mut().zip(ops.iter_mut()) {
            let t = Instant::now();
            for _ in 0..row.n {
                op();
            }
            row.secs.push(t.elapsed().as_secs_f64() / row.n as f64);
        }
    }
    rows
}

/// A named operation whose result is kept alive through [`black_box`].
fn op<'a, R>(name: &'static str, mut f: impl FnMut() -> R + 'a) -> Op<'a> {
    (
        name,
        Box::new(move || {
            black_box(f());
        }),
    )
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");

    // The fixture: a signed cleartext envelope with a ~1 KiB text body and one recipient.
    let ana_key = SigningKey::from_seed([2; 32]);
    let bob_enc = EncSecret::from_bytes([4; 32]);
    let ana = Address::parse("ana@sigo.uk").unwrap();
    let bob = Address::parse("bob@example.org").unwrap();
    let body: String = "Nyx5 benchmark body, one kibibyte of text. ".chars().cycle().take(1024).collect();
    let env = Draft::new(
        "0b6f3c1e-8d0a-4c1a-9d5e-1f2a3b4c5d6e".into(),
        ana.clone(),
        vec![bob.clone()],
        Timestamp::from_millis(1_788_548_400_123),
        Content::new("text/plain", body.into()),
    )
    .build()
    .unwrap();
    let value = env.to_value();
    let signed = env.clone().sign(&ana_key).unwrap();
    let pk = ana_key.public();
    signed.clone().verify_with_key(&pk).unwrap();
    let recipients = [(bob.clone(), bob_enc.public())];
    let mut rng = xorshift(0x9e37_79b9_7f4a_7c15);
    let sealed = seal::seal(env.clone(), &recipients, &mut rng).unwrap();
    let opened = seal::open(&sealed, &bob, &bob_enc).unwrap();
    assert!(matches!(env.payload(), Payload::Clear(c) if *c == opened));
    // Raw Ed25519 over exactly the bytes the envelope signature covers (label included).
    let signed_bytes = Context::Envelope.frame(&canonical_without(signed.object(), "signature"));
    let raw_sig = ana_key.sign_raw(&signed_bytes);
    assert!(pk.verify_raw(&signed_bytes, &raw_sig));

    let canonical_len = value.canonical().len();
    let signed_len = signed.canonical().len();
    let sealed_len = sealed.canonical().len();

    if !bench_mode {
        // Smoke test: every operation once more, checked.
        assert_eq!(value.canonical(), env.canonical());
        assert!(env.clone().sign(&ana_key).is_ok());
        assert!(signed.clone().verify_with_key(&pk).is_ok());
        assert!(seal::seal(env.clone(), &recipients, &mut rng).is_ok());
        assert!(seal::open(&sealed, &bob, &bob_enc).is_ok());
        println!("proto benches: smoke test passed (run `cargo bench -p nyx5-proto` to time them)");
        return;
    }

    println!(
        "nyx5-proto benches: envelope canonical {canonical_len} B, signed {signed_len} B, \
         sealed {sealed_len} B; Ed25519 message {} B",
        signed_bytes.len()
    );
    let total = Instant::now();
    let mut ops = [
        op("canonicalize", || black_box(&value).canonical()),
        op("sign", || black_box(&env).clone().sign(&ana_key)),
        op("verify", || black_box(&signed).clone().verify_with_key(&pk)),
        op("seal", || seal::seal(black_box(&env).clone(), &recipients, &mut rng)),
        op("open", || seal::open(black_box(&sealed), &bob, &bob_enc)),
        op("ed25519 verify (raw)", || pk.verify_raw(black_box(&signed_bytes), black_box(&raw_sig))),
    ];
    let rows = measure(&mut ops);

    println!();
    println!("| {:<22} | {:>10} | {:>19} | {:>12} | {:>9} |", "operation", "µs/op", "min..max µs", "ops/s", "iters");
    println!("|{:-<24}|{:->12}|{:->21}|{:->14}|{:->11}|", "", "", "", "", "");
    for r in &rows {
        let sorted = r.sorted();
        println!(
            "| {:<22} | {:>10.2} | {:>19} | {:>12.0} | {:>9} |",
            r.name,
            r.median() * 1e6,
            format!("{:.2}..{:.2}", sorted[0] * 1e6, sorted[sorted.len() - 1] * 1e6),
            1.0 / r.median(),
            r.n * r.secs.len() as u64
        );
    }
    let verify = rows.iter().find(|r| r.name == "verify").unwrap().median();
    let raw = rows.iter().find(|r| r.name == "ed25519 verify (raw)").unwrap().median();
    println!();
    println!(
        "envelope verify / raw Ed25519 verify = {:.3} (overhead {:.2} µs per envelope)",
        verify / raw,
        (verify - raw) * 1e6
    );
    println!("total {:.1} s", total.elapsed().as_secs_f64());
}
