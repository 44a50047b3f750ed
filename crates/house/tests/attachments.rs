//! Sealed attachments at the house (docs/SPEC.md "Attachments"; issue 38 §4): an owner describes
//! one and stores its parts; its readers, at this house or another, read it with their own
//! tokens; nobody else learns it is there; quotas, sizes and part numbers hold; an attachment past
//! its end loses its parts at the upkeep; a house without a blob store refuses them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_house::attachments::{MAX_LIVE, PART_BYTES, PURGE_GRACE_MS};
use nyx5_proto::Value;
use nyx5_proto::json::obj;

fn error(resp: &nyx5_house::http::Response) -> String {
    resp.value().unwrap().as_object().unwrap()["error"].as_str().unwrap().to_owned()
}

fn describe(bytes: i64, to: &[&str]) -> Value {
    Value::Object(obj([
        ("bytes", bytes.into()),
        ("sha256", "ab".repeat(32).into()),
        ("to", Value::Array(to.iter().map(|a| (*a).into()).collect())),
    ]))
}

trait Delete {
    fn call_delete(&self, house: &TestHouse, path: &str) -> nyx5_house::http::Response;
}

impl Delete for Agent {
    /// DELETE with the agent's token.
    fn call_delete(&self, house: &TestHouse, path: &str) -> nyx5_house::http::Response {
        let token = self.token(house, "DELETE", path, &[]);
        call_raw(house, "DELETE", path, &[("authorization", &token)], vec![])
    }
}

/// PUT with the agent's token and a raw body.
fn put(agent: &Agent, house: &TestHouse, path: &str, body: Vec<u8>) -> nyx5_house::http::Response {
    let token = agent.token(house, "PUT", path, &body);
    call_raw(house, "PUT", path, &[("authorization", &token), ("content-type", "application/octet-stream")], body)
}

#[test]
fn an_owner_stores_parts_and_only_its_readers_read_them() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let b = w.house("b.test", Registration::Admin);
    let (ana, cy, bo) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11), Agent::new("bo@b.test", 20));
    for (agent, house) in [(&ana, &a), (&cy, &a), (&bo, &b)] {
        assert_eq!(agent.register_admin(house).status, 201);
    }
    // Two parts: a whole one and the rest.
    let sealed: Vec<u8> = (0..PART_BYTES + 100).map(|i| (i % 251) as u8).collect();
    let made = json(&ana.post(&a, "/attachments", &describe(sealed.len() as i64, &["bo@b.test"])), 201);
    let made = made.as_object().unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["parts"].as_safe_integer(), Some(2));
    assert_eq!(made["url"].as_str().unwrap(), format!("{}/attachments/{id}", a.config.public_url));

    // Not complete: nobody reads a part yet.
    let first = sealed[..PART_BYTES as usize].to_vec();
    let rest = sealed[PART_BYTES as usize..].to_vec();
    let stored = json(&put(&ana, &a, &format!("/attachments/{id}/0"), first.clone()), 200);
    assert_eq!(stored.as_object().unwrap()["missing"].as_safe_integer(), Some(1));
    assert_eq!(error(&bo.get(&a, &format!("/attachments/{id}/0"))), "attachment_incomplete");
    // A part of the wrong size, a part that is not there, someone else's upload: refused.
    assert_eq!(error(&put(&ana, &a, &format!("/attachments/{id}/1"), first.clone())), "bad_attachment");
    assert_eq!(error(&put(&ana, &a, &format!("/attachments/{id}/2"), rest.clone())), "bad_attachment");
    assert_eq!(error(&put(&ana, &a, &format!("/attachments/{id}/01"), rest.clone())), "bad_attachment");
    assert_eq!(error(&put(&cy, &a, &format!("/attachments/{id}/1"), rest.clone())), "unknown_attachment");
    let stored = json(&put(&ana, &a, &format!("/attachments/{id}/1"), rest.clone()), 200);
    assert_eq!(stored.as_object().unwrap()["missing"].as_safe_integer(), Some(0));
    assert_eq!(blobs.0.borrow().len(), 2, "two parts kept");

    // bo (another house, his own token) reads it; ana too; cy, not named, learns nothing.
    let shown = json(&bo.get(&a, &format!("/attachments/{id}")), 200);
    let shown = shown.as_object().unwrap();
    assert_eq!(shown["complete"], Value::Bool(true));
    assert_eq!(shown["bytes"].as_safe_integer(), Some(sealed.len() as i64));
    let mut read = bo.get(&a, &format!("/attachments/{id}/0")).body;
    read.extend(ana.get(&a, &format!("/attachments/{id}/1")).body);
    assert_eq!(read, sealed, "the parts read back are the parts stored");
    for path in [format!("/attachments/{id}"), format!("/attachments/{id}/0")] {
        let refused = cy.get(&a, &path);
        assert_eq!((refused.status, error(&refused)), (404, "unknown_attachment".to_owned()), "{path}");
    }
    let unsigned = call(&a, "GET", &format!("/attachments/{id}/0"), &[], &Value::Null);
    assert_eq!(unsigned.status, 401);
}

#[test]
fn sizes_readers_and_quotas_are_bounded() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(ana.register_admin(&a).status, 201);
    let create = |d: &Value| ana.post(&a, "/attachments", d);
    assert_eq!(error(&create(&describe(25 * 1024 * 1024 + 17, &["bo@b.test"]))), "attachment_too_large");
    assert_eq!(error(&create(&describe(16, &["bo@b.test"]))), "bad_attachment");
    assert_eq!(error(&create(&describe(100, &[]))), "bad_attachment");
    assert_eq!(error(&create(&describe(100, &["not an address"]))), "bad_attachment");
    let mut bad_hash = describe(100, &["bo@b.test"]);
    if let Value::Object(o) = &mut bad_hash {
        o.insert("sha256".into(), "AB".repeat(32).into());
    }
    assert_eq!(error(&create(&bad_hash)), "bad_attachment");
    let mut far = describe(100, &["bo@b.test"]);
    if let Value::Object(o) = &mut far {
        o.insert("expires".into(), nyx5_proto::Timestamp(a.now().millis() + 31 * 86_400_000).to_rfc3339().into());
    }
    assert_eq!(error(&create(&far)), "bad_attachment");
    // Shorter than an hour: refused (its parts would count until the purge anyway).
    let mut short = describe(100, &["bo@b.test"]);
    if let Value::Object(o) = &mut short {
        o.insert("expires".into(), nyx5_proto::Timestamp(a.now().millis() + 60_000).to_rfc3339().into());
    }
    assert_eq!(error(&create(&short)), "bad_attachment");
    // At most MAX_LIVE attachments; one ended but not yet purged still counts, one removed does not.
    let mut ids = Vec::new();
    for _ in 0..MAX_LIVE {
        ids.push(
            json(&create(&describe(100, &["bo@b.test"])), 201).as_object().unwrap()["id"].as_str().unwrap().to_owned(),
        );
    }
    assert_eq!(error(&create(&describe(100, &["bo@b.test"]))), "attachments_full");
    w.clock.advance(15 * 86_400_000);
    assert_eq!(error(&create(&describe(100, &["bo@b.test"]))), "attachments_full", "ended, not yet purged: counted");
    let removed = json(&ana.call_delete(&a, &format!("/attachments/{}", ids[0])), 200);
    assert_eq!(removed.as_object().unwrap()["removed"], Value::Bool(true));
    assert_eq!(error(&ana.call_delete(&a, &format!("/attachments/{}", ids[0]))), "unknown_attachment");
    json(&create(&describe(100, &["bo@b.test"])), 201);
}

#[test]
fn an_attachment_past_its_end_loses_its_parts_at_the_upkeep() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(ana.register_admin(&a).status, 201);
    let mut d = describe(100, &["bo@b.test"]);
    if let Value::Object(o) = &mut d {
        o.insert("expires".into(), nyx5_proto::Timestamp(a.now().millis() + 3_600_000).to_rfc3339().into());
    }
    let made = json(&ana.post(&a, "/attachments", &d), 201);
    let id = made.as_object().unwrap()["id"].as_str().unwrap().to_owned();
    json(&put(&ana, &a, &format!("/attachments/{id}/0"), vec![7; 100]), 200);
    assert_eq!(blobs.0.borrow().len(), 1);
    // Ended: no longer read, but its parts wait out the grace.
    w.clock.advance(3_601_000);
    assert_eq!(error(&ana.get(&a, &format!("/attachments/{id}"))), "unknown_attachment");
    w.tick_all();
    assert_eq!(blobs.0.borrow().len(), 1, "kept through the grace");
    w.clock.advance(PURGE_GRACE_MS + 60_000);
    w.tick_all();
    assert!(blobs.0.borrow().is_empty(), "the parts are gone");
    let rows =
        block_on(nyx5_house::ports::Db::query(&a.db, nyx5_house::stmt!("SELECT count(*) AS n FROM attachments")))
            .unwrap();
    assert_eq!(rows[0].int("n"), Some(0), "and the record");
}

#[test]
fn a_house_without_a_store_keeps_no_attachments() {
    let w = World::new();
    let a = w.house("a.test", Registration::Admin);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(ana.register_admin(&a).status, 201);
    let refused = ana.post(&a, "/attachments", &describe(100, &["bo@b.test"]));
    assert_eq!((refused.status, error(&refused)), (404, "attachments_off".to_owned()));
}

/// An email's attachment becomes an attachment like any other: sealed under its own key, kept for
/// the recipient alone, described in the envelope's content with its key; the recipient fetches
/// it with its token and opens it to the very bytes.
#[test]
fn an_emails_attachment_is_kept_sealed_for_its_recipient() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let (ana, cy) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11));
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(cy.register_admin(&a).status, 201);
    let raw = b"From: bob@example.com\r\nTo: ana@a.test\r\nSubject: files\r\nMessage-ID: <att@example.com>\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
See the file\r\n--b\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\nContent-Disposition: attachment; \
filename=\"r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n--b--\r\n";
    block_on(a.email().receive_email(raw, "", "ana@a.test", &[])).unwrap();
    let page = json(&ana.get(&a, "/mailbox/ana"), 200);
    let env = page.as_object().unwrap()["envelopes"].as_array().unwrap()[0].as_object().unwrap()["envelope"].clone();
    let content = env.as_object().unwrap()["content"].as_object().unwrap().clone();
    let (files, bad) = nyx5_client::attach::described(&content);
    assert!(bad.is_empty(), "{bad:?}");
    let d = &files[0];
    assert_eq!((d.name.as_str(), d.media.as_str(), d.bytes), ("r.pdf", "application/pdf", 5));
    let id = nyx5_client::attach::at_house(&d.url, &a.config.public_url).unwrap().to_owned();
    // Kept sealed: the store never holds the text.
    assert!(blobs.0.borrow().values().all(|b| !b.windows(5).any(|w| w == b"hello")));
    let sealed = ana.get(&a, &format!("/attachments/{id}/0")).body;
    let plain = nyx5_proto::seal::open_file(&d.key, &d.iv, &sealed).unwrap();
    assert_eq!(plain, b"hello");
    assert!(d.matches(&plain));
    // Another agent of the house reads none of it.
    assert_eq!(error(&cy.get(&a, &format!("/attachments/{id}/0"))), "unknown_attachment");
    // Kept apart from ana's own files: her quota is whole.
    let count = |owner: &str| {
        let rows = block_on(nyx5_house::ports::Db::query(
            &a.db,
            nyx5_house::stmt!("SELECT count(*) AS n FROM attachments WHERE owner = ?", owner),
        ))
        .unwrap();
        rows[0].int("n").unwrap()
    };
    assert_eq!((count("ana"), count("email:ana")), (0, 1));
    // The same email again is a duplicate: the files it would have brought are removed again.
    block_on(a.email().receive_email(raw, "", "ana@a.test", &[])).unwrap();
    assert_eq!(count("email:ana"), 1, "no second copy kept");
    assert_eq!(blobs.0.borrow().len(), 1);
}

/// A part written while its attachment is removed removes itself: the record is gone when the
/// part would be marked, and nothing is left that no record points at (the second review's race).
#[test]
fn a_part_written_while_its_attachment_goes_leaves_nothing() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let ana = Agent::new("ana@a.test", 10);
    assert_eq!(ana.register_admin(&a).status, 201);
    let made = json(&ana.post(&a, "/attachments", &describe(100, &["bo@b.test"])), 201);
    let id = made.as_object().unwrap()["id"].as_str().unwrap().to_owned();
    // The PUT's first batch spends its token; before its second (the mark) the attachment ends,
    // as a DELETE running beside it would end it.
    let (house, gone) = (a.clone(), id.clone());
    a.db.before_next_batch(move |_| {
        house.db.before_next_batch(move |db| {
            block_on(nyx5_house::ports::Db::batch(
                db,
                vec![nyx5_house::stmt!("UPDATE attachments SET expires = 0 WHERE id = ?", gone)],
            ))
            .unwrap();
        });
    });
    assert_eq!(error(&put(&ana, &a, &format!("/attachments/{id}/0"), vec![7; 100])), "unknown_attachment");
    assert!(blobs.0.borrow().is_empty(), "the part went with its attachment");
}

/// The recipient removes the files the email bridge keeps for it (strangers cannot lock them).
#[test]
fn a_recipient_removes_its_email_files() {
    let w = World::new();
    let blobs = MemBlobs::default();
    let a = w.house_with_blobs("a.test", Registration::Admin, &blobs);
    let (ana, cy) = (Agent::new("ana@a.test", 10), Agent::new("cy@a.test", 11));
    assert_eq!(ana.register_admin(&a).status, 201);
    assert_eq!(cy.register_admin(&a).status, 201);
    let raw = b"From: bob@example.com\r\nTo: ana@a.test\r\nSubject: files\r\nMessage-ID: <rm@example.com>\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
See the file\r\n--b\r\nContent-Type: text/plain; name=\"a.txt\"\r\nContent-Disposition: attachment; \
filename=\"a.txt\"\r\n\r\nhello\r\n--b--\r\n";
    block_on(a.email().receive_email(raw, "", "ana@a.test", &[])).unwrap();
    let page = json(&ana.get(&a, "/mailbox/ana"), 200);
    let env = page.as_object().unwrap()["envelopes"].as_array().unwrap()[0].as_object().unwrap()["envelope"].clone();
    let (files, _) = nyx5_client::attach::described(env.as_object().unwrap()["content"].as_object().unwrap());
    let id = nyx5_client::attach::at_house(&files[0].url, &a.config.public_url).unwrap().to_owned();
    assert_eq!(error(&cy.call_delete(&a, &format!("/attachments/{id}"))), "unknown_attachment", "not cy's");
    json(&ana.call_delete(&a, &format!("/attachments/{id}")), 200);
    assert!(blobs.0.borrow().is_empty());
}
