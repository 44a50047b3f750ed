//! The self-generated domain key is created once and then always the same.
#![allow(clippy::unwrap_used)]

mod kit;

use kit::block_on;
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::store::settings::{admin_token, domain_key};
use nyx5_proto::Timestamp;

#[test]
fn domain_key_is_generated_once() {
    let db = SqliteDb::memory().unwrap();
    let (first, created) = block_on(domain_key(&db, [1; 32], Timestamp(10))).unwrap();
    let (again, created_again) = block_on(domain_key(&db, [2; 32], Timestamp(20))).unwrap();
    assert_eq!(first.public(), again.public());
    assert_eq!(created, Timestamp(10));
    assert_eq!(created_again, Timestamp(10));
    assert_eq!(first.seed(), [1; 32]);
}

#[test]
fn admin_token_is_generated_once_and_reported_once() {
    let db = SqliteDb::memory().unwrap();
    let (first, created) = block_on(admin_token(&db, [1; 32], Timestamp(10))).unwrap();
    let (again, created_again) = block_on(admin_token(&db, [2; 32], Timestamp(20))).unwrap();
    assert_eq!(first, nyx5_proto::b64::encode(&[1; 32]));
    assert_eq!(again, first);
    assert!(created);
    assert!(!created_again);
    // The domain key is a different setting: neither disturbs the other.
    let (key, _) = block_on(domain_key(&db, [3; 32], Timestamp(30))).unwrap();
    assert_eq!(key.seed(), [3; 32]);
}

#[test]
fn migrations_apply_once_and_are_recorded() {
    let dir = std::env::temp_dir().join(format!("nyx5-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("house.db");
    let _ = std::fs::remove_file(&path);
    drop(SqliteDb::open(&path).unwrap());
    // Opening again must not re-apply (CREATE TABLE would fail) and must keep the data.
    let db = SqliteDb::open(&path).unwrap();
    let (k, _) = block_on(domain_key(&db, [3; 32], Timestamp(1))).unwrap();
    drop(db);
    let db = SqliteDb::open(&path).unwrap();
    let (k2, _) = block_on(domain_key(&db, [4; 32], Timestamp(2))).unwrap();
    assert_eq!(k.public(), k2.public());
    let rows =
        block_on(nyx5_house::ports::Db::query(&db, nyx5_house::stmt!("SELECT name FROM d1_migrations ORDER BY id")))
            .unwrap();
    let names: Vec<_> = rows.iter().map(|r| r.text("name").unwrap().to_owned()).collect();
    assert_eq!(names, nyx5_house::migrations::MIGRATIONS.iter().map(|(n, _)| (*n).to_owned()).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rotating_the_stored_domain_key_keeps_the_old_one_until_its_end() {
    use nyx5_house::config::{parse_previous_keys, previous_keys_text};
    use nyx5_house::store::settings::{ROTATION_GRACE_MS, previous_domain_keys, rotate_domain_key};

    let db = SqliteDb::memory().unwrap();
    let (first, _) = block_on(domain_key(&db, [1; 32], Timestamp(10))).unwrap();
    assert!(block_on(previous_domain_keys(&db)).unwrap().is_empty());
    let (second, previous) = block_on(rotate_domain_key(&db, [2; 32], Timestamp(100), ROTATION_GRACE_MS)).unwrap();
    assert_eq!(second.seed(), [2; 32]);
    assert_eq!(block_on(domain_key(&db, [9; 32], Timestamp(200))).unwrap().0.seed(), [2; 32]);
    assert_eq!(previous.len(), 1);
    assert_eq!(previous[0].key.public(), first.public());
    assert_eq!(previous[0].until, Timestamp(100 + ROTATION_GRACE_MS));
    assert_eq!(previous[0].created, Some(Timestamp(10)));
    let stored = block_on(previous_domain_keys(&db)).unwrap();
    assert_eq!(
        stored.iter().map(|p| (p.key.public(), p.until)).collect::<Vec<_>>(),
        [(first.public(), previous[0].until)]
    );

    // A second rotation keeps both (newest first); one past its end is dropped by the next.
    let (_, previous) = block_on(rotate_domain_key(&db, [3; 32], Timestamp(1_000), 5)).unwrap();
    assert_eq!(previous.iter().map(|p| p.key.seed()).collect::<Vec<_>>(), [[2; 32], [1; 32]]);
    let (_, previous) = block_on(rotate_domain_key(&db, [4; 32], Timestamp(2_000), 5)).unwrap();
    assert_eq!(previous.iter().map(|p| p.key.seed()).collect::<Vec<_>>(), [[3; 32], [1; 32]]);

    // A key at its end to the millisecond is past it; the rest stand.
    let (_, previous) = block_on(rotate_domain_key(&db, [5; 32], Timestamp(2_005), 5)).unwrap();
    assert_eq!(previous.iter().map(|p| p.key.seed()).collect::<Vec<_>>(), [[4; 32], [1; 32]]);
    // Seven previous keys at most, the newest kept.
    for (i, seed) in (6u8..=12).enumerate() {
        let at = 3_000 + i64::try_from(i).unwrap();
        block_on(rotate_domain_key(&db, [seed; 32], Timestamp(at), ROTATION_GRACE_MS)).unwrap();
    }
    let kept: Vec<u8> = block_on(previous_domain_keys(&db)).unwrap().iter().map(|p| p.key.seed()[0]).collect();
    assert_eq!(kept, [11, 10, 9, 8, 7, 6, 5]);
    // The grace the operator's rotation gives is 30 days (docs/SPEC.md).
    assert_eq!(ROTATION_GRACE_MS, 30 * 24 * 60 * 60 * 1000);

    // The operator's format reads back what it writes, and refuses bad entries.
    assert_eq!(parse_previous_keys(&previous_keys_text(&previous)).unwrap().len(), 2);
    assert!(parse_previous_keys(r#"[{"key":"short","until":"2026-01-01"}]"#).is_err());
    assert!(parse_previous_keys(&format!(r#"[{{"key":"{}"}}]"#, nyx5_proto::b64::encode(&[1; 32]))).is_err());
    assert!(parse_previous_keys(r#"{"key":"x"}"#).is_err());
    let eight = format!(
        "[{}]",
        vec![format!(r#"{{"key":"{}","until":"2027-01-01"}}"#, nyx5_proto::b64::encode(&[1; 32])); 8].join(",")
    );
    assert!(parse_previous_keys(&eight).is_err());
}
