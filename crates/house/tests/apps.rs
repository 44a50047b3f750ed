//! The house's catalogue of App Cards (docs/SPEC.md "Apps — Pinned") through its routes, on
//! real SQLite: a listed card comes back in a catalogue signed `nyx5/1 app-catalogue` by the
//! domain key and pinned by its hash; only the operator lists and removes; a card that does not
//! verify is refused; the bound holds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod kit;

use kit::*;
use nyx5_house::Registration;
use nyx5_proto::app::{AppCard, SCHEMA, check_catalogue, integrity_of};
use nyx5_proto::crypto::{Context, SigningKey};
use nyx5_proto::json::obj;
use nyx5_proto::sign::verify_object;
use nyx5_proto::{Object, Value};

const ADMIN: (&str, &str) = ("authorization", "Bearer admin-a.test");

fn card(id: &str, version: &str, primitives: &[&str]) -> AppCard {
    let integrity = obj([("main.mjs", integrity_of(b"x").into())]);
    let draft = obj([
        ("schema", SCHEMA.into()),
        ("id", id.into()),
        ("name", "An app".into()),
        ("tagline", "For tests".into()),
        ("description", "A card made by the house tests.".into()),
        ("version", version.into()),
        ("category", "game".into()),
        ("primitives", Value::Array(primitives.iter().map(|p| (*p).into()).collect())),
        ("entry", Value::Object(obj([("main", "main.mjs".into()), ("integrity", Value::Object(integrity))]))),
        ("requires", Value::Array(vec![])),
        ("coreChanges", Value::Bool(false)),
    ]);
    AppCard::sign(draft, &SigningKey::from_seed([9; 32])).unwrap()
}

fn post(h: &TestHouse, headers: &[(&str, &str)], card: &AppCard, url: Option<&str>) -> nyx5_house::http::Response {
    let mut body = obj([("card", card.to_value())]);
    if let Some(u) = url {
        body.insert("url".into(), u.into());
    }
    call(h, "POST", "/apps", headers, &Value::Object(body))
}

fn catalogue(h: &TestHouse) -> Object {
    let o = json(&call_raw(h, "GET", "/apps", &[], vec![]), 200).as_object().unwrap().clone();
    let key = h.config.key.public();
    verify_object(&o, "signature", Context::AppCatalogue, |k| *k == key).expect("signed by the house");
    for other in Context::ALL.into_iter().filter(|c| *c != Context::AppCatalogue) {
        assert!(verify_object(&o, "signature", other, |k| *k == key).is_err(), "{other:?}");
    }
    o
}

#[test]
fn a_listed_card_is_pinned_in_a_signed_catalogue() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let empty = catalogue(&h);
    assert_eq!(empty["house"], Value::from("a.test"));
    assert_eq!(empty["apps"], Value::Array(vec![]));

    let c = card("chess", "1.0.0", &["send_message", "read_inbox"]);
    let r = json(&post(&h, &[ADMIN], &c, Some("https://apps.test/chess/app.json")), 201);
    let app = r.as_object().unwrap()["app"].as_object().unwrap().clone();
    assert_eq!(app["sha256"], Value::from(c.sha256_hex().as_str()));
    let cat = catalogue(&h);
    check_catalogue(&cat, &c).unwrap();
    let entry = cat["apps"].as_array().unwrap()[0].as_object().unwrap().clone();
    assert_eq!(entry["url"], Value::from("https://apps.test/chess/app.json"));
    assert_eq!(entry["author"], Value::from(c.author_did().as_str()));
    // The card itself, as signed.
    let served = json(&call_raw(&h, "GET", "/apps/chess", &[], vec![]), 200);
    assert_eq!(served, c.to_value());

    // A new version replaces the entry; the old card no longer matches the catalogue.
    let c2 = card("chess", "1.1.0", &["send_message"]);
    json(&post(&h, &[ADMIN], &c2, None), 201);
    let cat = catalogue(&h);
    assert_eq!(cat["apps"].as_array().unwrap().len(), 1);
    check_catalogue(&cat, &c2).unwrap();
    assert!(check_catalogue(&cat, &c).is_err());
    // A forged catalogue (an entry's hash changed) no longer verifies.
    let mut forged = cat.clone();
    forged.insert("apps".into(), Value::Array(vec![Value::Object(c.catalogue_entry(None))]));
    let key = h.config.key.public();
    assert!(verify_object(&forged, "signature", Context::AppCatalogue, |k| *k == key).is_err());

    // Removed.
    assert_eq!(call(&h, "DELETE", "/apps/chess", &[], &Value::Null).status, 401);
    json(&call(&h, "DELETE", "/apps/chess", &[ADMIN], &Value::Null), 200);
    assert_eq!(call(&h, "DELETE", "/apps/chess", &[ADMIN], &Value::Null).status, 404);
    assert_eq!(call_raw(&h, "GET", "/apps/chess", &[], vec![]).status, 404);
    assert_eq!(catalogue(&h)["apps"], Value::Array(vec![]));
}

#[test]
fn only_the_operator_lists_and_only_cards_that_verify() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let c = card("chess", "1.0.0", &["whoami"]);
    assert_eq!(post(&h, &[], &c, None).status, 401);
    assert_eq!(post(&h, &[("authorization", "Bearer nope")], &c, None).status, 401);
    // Tampered after signing: 403.
    let mut raw = c.to_value().as_object().unwrap().clone();
    raw.insert("name".into(), "Another".into());
    let body = Value::Object(obj([("card", Value::Object(raw))]));
    assert_eq!(call(&h, "POST", "/apps", &[ADMIN], &body).status, 403);
    // A primitive Nyx5 does not grant, coreChanges true, a bad url, a stray member: 400.
    assert_eq!(post(&h, &[ADMIN], &card("rooms", "1.0.0", &["rooms"]), None).status, 400);
    let mut raw = c.to_value().as_object().unwrap().clone();
    raw.insert("coreChanges".into(), Value::Bool(true));
    let body = Value::Object(obj([("card", Value::Object(raw))]));
    assert_eq!(call(&h, "POST", "/apps", &[ADMIN], &body).status, 400);
    assert_eq!(post(&h, &[ADMIN], &c, Some("ftp://x.test/app.json")).status, 400);
    assert_eq!(post(&h, &[ADMIN], &c, Some("https://x.test/an app.json")).status, 400);
    assert_eq!(post(&h, &[ADMIN], &c, Some("https://x.test/app\n.json")).status, 400);
    // At most 1,024 bytes.
    let url = |n: usize| format!("https://x.test/{}", "a".repeat(n - "https://x.test/".len()));
    assert_eq!(post(&h, &[ADMIN], &c, Some(&url(1025))).status, 400);
    assert_eq!(catalogue(&h)["apps"], Value::Array(vec![]));
    assert_eq!(post(&h, &[ADMIN], &c, Some(&url(1024))).status, 201);
    assert_eq!(call_raw(&h, "DELETE", "/apps/chess", &[ADMIN], vec![]).status, 200);
    let body = Value::Object(obj([("card", c.to_value()), ("extra", 1.into())]));
    assert_eq!(call(&h, "POST", "/apps", &[ADMIN], &body).status, 400);
    assert_eq!(call_raw(&h, "GET", "/apps/Not%20an%20id", &[], vec![]).status, 400);
    assert_eq!(call_raw(&h, "PUT", "/apps", &[], vec![]).status, 405);
    assert_eq!(call_raw(&h, "OPTIONS", "/apps/x", &[], vec![]).status, 204);
    assert_eq!(catalogue(&h)["apps"], Value::Array(vec![]));
}

#[test]
fn the_catalogue_is_bounded() {
    let w = World::new();
    let h = w.house("a.test", Registration::Open);
    let max = nyx5_proto::app::MAX_CATALOGUE_ENTRIES;
    for i in 0..max {
        assert_eq!(post(&h, &[ADMIN], &card(&format!("app{i}"), "1.0.0", &[]), None).status, 201, "{i}");
    }
    let over = post(&h, &[ADMIN], &card("one-more", "1.0.0", &[]), None);
    assert_eq!(over.status, 409);
    let error = over.value().unwrap().as_object().unwrap()["error"].as_str().unwrap().to_owned();
    assert_eq!(error, "catalogue_full");
    // Replacing a listed app stays possible at the bound.
    assert_eq!(post(&h, &[ADMIN], &card("app0", "2.0.0", &[]), None).status, 201);
    assert_eq!(catalogue(&h)["apps"].as_array().unwrap().len(), max);
}
