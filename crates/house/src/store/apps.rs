//! The SQL of the house's app catalogue (migration `0012_apps.sql`; routes/apps.rs).

use nyx5_proto::Error;

use super::{one, query};
use crate::ports::{Db, Row, Stmt};
use crate::stmt;

/// One listed app, as the catalogue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub version: &'a str,
    pub author: &'a str,
    pub sha256: &'a str,
    pub url: Option<&'a str>,
    pub card: &'a str,
}

/// Lists an app (a new version replaces the one under its id), after a guard that fewer than
/// `max` other apps are listed.
pub fn put(app: &Listed<'_>, now: i64, max: i64) -> Vec<Stmt> {
    vec![
        crate::guard!("apps_listed", "(SELECT count(*) FROM apps WHERE id <> ?) < ?", app.id, max),
        stmt!(
            "INSERT INTO apps (id, name, version, author, sha256, url, card, added_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, version = excluded.version,
               author = excluded.author, sha256 = excluded.sha256, url = excluded.url,
               card = excluded.card, added_at = excluded.added_at",
            app.id,
            app.name,
            app.version,
            app.author,
            app.sha256,
            app.url,
            app.card,
            now
        ),
    ]
}

/// Removes an app from the catalogue.
pub fn remove(id: &str) -> Stmt {
    stmt!("DELETE FROM apps WHERE id = ?1", id)
}

/// Every listed app, by id (at most `limit`).
pub async fn list<D: Db>(db: &D, limit: i64) -> Result<Vec<Row>, Error> {
    query(db, stmt!("SELECT id, name, version, author, sha256, url FROM apps ORDER BY id LIMIT ?1", limit)).await
}

/// One app with its card.
pub async fn get<D: Db>(db: &D, id: &str) -> Result<Option<Row>, Error> {
    one(db, stmt!("SELECT id, sha256, card FROM apps WHERE id = ?1", id)).await
}
