//! The mail an agent keeps on its side (issue 38 §1), on one core, in a SQLite file as `nyx5`
//! keeps it: `find` over 100,000 kept messages (a rare word, a common word, a filter without
//! words), a thread of 200, and what keeping a page of 50 adds to reading it (the page's own
//! client-side work: each envelope's signature verified and its sealed content opened, as
//! `inbox` does with cards it holds; the network and the process are left out, so the share is an
//! upper bound: benches/kept_inbox.mjs times the whole command).
//!
//! `cargo bench -p nyx5-cli --bench kept` (benches/README.md, "kept mail", for the figures;
//! the goals are benches/budgets.json's `kept`: find ≤ 50 ms, a thread of 200 ≤ 10 ms, a page's
//! keeping ≤ 20 % of its reading). Without `--bench` (the test suite's bench smoke) it keeps
//! 2,000 messages and checks every answer, timing nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::indexing_slicing, clippy::panic)]

#[allow(dead_code)]
#[path = "../src/client/kept_store.rs"]
mod kept_store;

use std::hint::black_box;
use std::time::Instant;

use kept_store::Store;
use nyx5_client::kept::{self, Dir, Filters};
use nyx5_proto::crypto::{EncSecret, SigningKey};
use nyx5_proto::envelope::{Content, Draft};
use nyx5_proto::json::{Object, Value, obj};
use nyx5_proto::{Address, Timestamp, seal};

const WORDS: &[&str] = &[
    "invoice", "meeting", "report", "schedule", "payment", "contract", "review", "travel", "budget", "question",
    "answer", "draft", "figures", "quarter", "client", "supplier", "delivery", "order", "summary", "agenda",
];

/// A message view as `inbox` shows one, the `i`th of a mailbox: a few words of a pool, one in
/// a thousand carrying the rare word `zephyr`, every tenth in a thread of its own ten.
fn view(i: usize) -> Value {
    let mut words: Vec<&str> = (0..24).map(|k| WORDS[(i * 7 + k * 13) % WORDS.len()]).collect();
    if i % 1000 == 7 {
        words.push("zephyr");
    }
    let at = Timestamp(1_788_000_000_000 + i64::try_from(i).unwrap() * 60_000);
    Value::Object(obj([
        ("seq", i64::try_from(i).unwrap().into()),
        ("received", at.to_rfc3339().into()),
        ("id", format!("m{i:06}").into()),
        ("from", format!("sender{}@example.org", i % 50).into()),
        ("to", Value::Array(vec!["bo@b.test".into()])),
        ("type", "message".into()),
        ("trust", "verified".into()),
        ("thread", format!("t{}", i / 10).into()),
        ("content", Value::Object(obj([("media", "text/plain".into()), ("body", words.join(" ").into())]))),
    ]))
}

fn fill(store: &mut Store, n: usize) {
    for start in (0..n).step_by(500) {
        let page: Vec<Value> = (start..(start + 500).min(n)).map(view).collect();
        store.keep("bo@b.test", &page, Dir::In, Timestamp(0)).unwrap();
    }
}

/// A conversation of `n` messages under one thread id, ana and bo writing to each other.
fn thread(store: &mut Store, n: usize) {
    let page: Vec<Value> = (0..n)
        .map(|i| {
            let mut v = view(900_000 + i);
            let (from, to) = if i % 2 == 0 { ("ana@a.test", "bo@b.test") } else { ("bo@b.test", "ana@a.test") };
            if let Value::Object(o) = &mut v {
                o.insert("id".into(), format!("long{i:04}").into());
                o.insert("thread".into(), "the-long-one".into());
                o.insert("from".into(), from.into());
                o.insert("to".into(), Value::Array(vec![to.into()]));
            }
            v
        })
        .collect();
    store.keep("bo@b.test", &page, Dir::In, Timestamp(0)).unwrap();
}

fn words(w: &str) -> Option<String> {
    kept::words_query(&[w.to_owned()]).unwrap()
}

/// The best of `rounds` runs of `f`, in milliseconds.
fn best_ms(rounds: usize, mut f: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::MAX, f64::min)
}

/// A page of `n` sealed, signed envelopes to bo, as the house hands them out (`{seq, received,
/// envelope}`), and what opening them needs.
struct Page {
    items: Vec<Object>,
    me: Address,
    enc: EncSecret,
    sender: nyx5_proto::crypto::SigPublic,
}

fn page(n: usize) -> Page {
    let key = SigningKey::from_seed([2; 32]);
    let enc = EncSecret::from_bytes([4; 32]);
    let ana = Address::parse("ana@a.test").unwrap();
    let me = Address::parse("bo@b.test").unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rng = move |buf: &mut [u8]| {
        for b in buf {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state.to_le_bytes()[0];
        }
    };
    let items = (0..n)
        .map(|i| {
            let body = format!("{} {i}", WORDS.join(" ").repeat(4));
            let env = Draft::new(
                format!("p{i:04}"),
                ana.clone(),
                vec![me.clone()],
                Timestamp(1_788_548_400_123),
                Content::new("text/plain", body.into()),
            )
            .build()
            .unwrap();
            let sealed = seal::seal(env, &[(me.clone(), enc.public())], &mut rng).unwrap();
            let signed = sealed.sign(&key).unwrap();
            obj([
                ("seq", i64::try_from(i).unwrap().into()),
                ("received", "2026-12-07T10:00:00Z".into()),
                ("envelope", signed.to_value()),
            ])
        })
        .collect();
    Page { items, me, enc, sender: key.public() }
}

/// What `inbox` does with a page on the client: each envelope checked against its sender's key
/// and opened.
fn read(p: &Page) -> Vec<Value> {
    p.items
        .iter()
        .map(|item| {
            nyx5_proto::mailbox::view(
                item,
                &p.me,
                |env, _| match env.clone().verify_with_key(&p.sender) {
                    Ok(_) => ("verified", None),
                    Err(e) => ("invalid", Some(e.reason.to_string())),
                },
                |env| nyx5_proto::mailbox::open_with(env, &p.me, [&p.enc]),
            )
        })
        .collect()
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nyx5-kept-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench { 100_000 } else { 2_000 };
    let d = dir(if bench { "bench" } else { "smoke" });
    let mut store = Store::open(&d.join("agents.json.mail.db")).unwrap();
    let t = Instant::now();
    fill(&mut store, n);
    let fill_s = t.elapsed().as_secs_f64();
    thread(&mut store, 200);
    let all = Filters { limit: kept::DEFAULT_FOUND, ..Filters::default() };

    // Each answer checked, timed or not.
    let (rare, _) = store.find("bo@b.test", words("zephyr").as_deref(), &all).unwrap();
    let carrying = (0..n).chain(900_000..900_200).filter(|i| i % 1000 == 7).count();
    assert_eq!(rare.len(), carrying.min(kept::DEFAULT_FOUND));
    let (common, more) = store.find("bo@b.test", words("invoice").as_deref(), &all).unwrap();
    assert!(common.len() == kept::DEFAULT_FOUND && more);
    let from = Filters { from: Some("sender7@example.org".into()), ..all.clone() };
    let (filtered, _) = store.find("bo@b.test", None, &from).unwrap();
    assert!(filtered.iter().all(|v| v.as_object().unwrap()["from"].as_str() == Some("sender7@example.org")));
    let (long, _) = store.thread("bo@b.test", "long0100").unwrap().unwrap();
    assert_eq!(long.len(), 200);
    let p = page(50);
    let views = read(&p);
    assert!(views.iter().all(|v| v.as_object().unwrap()["trust"].as_str() == Some("verified")));
    assert!(views.iter().all(|v| v.as_object().unwrap().get("content").is_some_and(|c| !c.is_null())));
    if !bench {
        let _ = std::fs::remove_dir_all(&d);
        return;
    }

    let rounds = 7;
    let rare_ms = best_ms(rounds, || {
        black_box(store.find("bo@b.test", words("zephyr").as_deref(), &all).unwrap());
    });
    let common_ms = best_ms(rounds, || {
        black_box(store.find("bo@b.test", words("invoice").as_deref(), &all).unwrap());
    });
    let two_ms = best_ms(rounds, || {
        black_box(store.find("bo@b.test", words("invoice budget").as_deref(), &all).unwrap());
    });
    let filtered_ms = best_ms(rounds, || {
        black_box(store.find("bo@b.test", words("invoice").as_deref(), &from).unwrap());
    });
    let unread = Filters { unread: true, ..all.clone() };
    let unread_ms = best_ms(rounds, || {
        black_box(store.find("bo@b.test", None, &unread).unwrap());
    });
    let thread_ms = best_ms(rounds, || {
        black_box(store.thread("bo@b.test", "long0100").unwrap());
    });
    let read_ms = best_ms(rounds, || {
        black_box(read(&p));
    });
    // Keeping a page as `inbox` does: the store (there already) opened, the page kept. A fresh
    // store each round, made before the clock starts (a page kept again is a lookup a message).
    let (mut keep_ms, mut open_ms) = (f64::MAX, f64::MAX);
    for round in 0..rounds {
        let path = d.join(format!("page{round}.db"));
        drop(Store::open(&path).unwrap());
        let t = Instant::now();
        let mut s = Store::open(&path).unwrap();
        let opened = t.elapsed().as_secs_f64() * 1e3;
        s.keep("bo@b.test", &views, Dir::In, Timestamp(0)).unwrap();
        keep_ms = keep_ms.min(t.elapsed().as_secs_f64() * 1e3);
        open_ms = open_ms.min(opened);
    }
    let size = std::fs::metadata(d.join("agents.json.mail.db")).map(|m| m.len()).unwrap_or(0);
    println!(
        "kept mail, {n} messages kept in {fill_s:.1} s ({:.0} per second), {:.1} MiB on disk",
        n as f64 / fill_s,
        size as f64 / 1048576.0
    );
    println!("  find, a rare word (1 in 1000)        {rare_ms:7.2} ms   goal 50 ms: {:.2} of it", rare_ms / 50.0);
    println!("  find, a common word (first 50)       {common_ms:7.2} ms   goal 50 ms: {:.2} of it", common_ms / 50.0);
    println!("  find, two common words               {two_ms:7.2} ms   goal 50 ms: {:.2} of it", two_ms / 50.0);
    println!(
        "  find, a common word from one sender  {filtered_ms:7.2} ms   goal 50 ms: {:.2} of it",
        filtered_ms / 50.0
    );
    println!("  find, unread, no words               {unread_ms:7.2} ms   goal 50 ms: {:.2} of it", unread_ms / 50.0);
    println!("  thread of 200                        {thread_ms:7.2} ms   goal 10 ms: {:.2} of it", thread_ms / 10.0);
    println!(
        "  a page of 50: its client work (verify + open) {read_ms:.2} ms, its keeping {keep_ms:.2} ms (the store opened in \
         {open_ms:.2}): {:.1} % of that work alone (the goal, ≤ 20 % of the whole `nyx5 inbox`: benches/kept_inbox.mjs)",
        keep_ms / read_ms * 100.0
    );
    let _ = std::fs::remove_dir_all(&d);
}
