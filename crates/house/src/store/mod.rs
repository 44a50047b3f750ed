//! Every SQL statement of the engine lives under this module, one file per area. Reads are
//! single queries; writes are returned as statement lists for one atomic `Db::batch`.

pub mod agents;
pub mod domain_keys;
pub mod email;
pub mod inbox;
pub mod mailbox;
pub mod queue;
pub mod resolver;
pub mod settings;

use nyx5_proto::Error;

use crate::port_error;
use crate::ports::{Db, Row, Stmt};

/// Runs a query, mapping port failures to protocol errors.
pub async fn query<D: Db>(db: &D, stmt: Stmt) -> Result<Vec<Row>, Error> {
    db.query(stmt).await.map_err(port_error)
}

/// The first row of a query, if any.
pub async fn one<D: Db>(db: &D, stmt: Stmt) -> Result<Option<Row>, Error> {
    Ok(query(db, stmt).await?.into_iter().next())
}
