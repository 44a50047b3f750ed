//! The app catalogue (docs/SPEC.md "Apps"; `routes/apps.rs`): the App Cards the operator lists
//! here, each with its author, digest and where to fetch it, and the signed list anyone reads.

use nyx5_proto::app::{AppCard, MAX_CATALOGUE_ENTRIES};
use nyx5_proto::{Error, ErrorKind, Refusal, Verified};

use crate::ports::{Db, Net, PortError, Row};
use crate::store::apps as store;
use crate::view::{Core, view};
use crate::{port_error, store::constraint};

/// The app catalogue, a view of the house's borrows (`House::apps`).
pub struct Apps<'h, D, N> {
    pub(crate) core: Core<'h, D, N>,
}

view!(Apps);

/// The most apps the catalogue lists, as the store counts them.
fn max_entries() -> i64 {
    i64::try_from(MAX_CATALOGUE_ENTRIES).unwrap_or(i64::MAX)
}

impl<'h, D: Db, N: Net> Apps<'h, D, N> {
    /// Every listed app, by id: `id`, `name`, `version`, `author`, `sha256`, `url`.
    pub fn list(&self) -> impl Future<Output = Result<Vec<Row>, Error>> {
        store::list(self.db, max_entries())
    }

    /// The stored card of app `id`, as its text; `None` when it is not listed.
    pub async fn card(&self, id: &str) -> Result<Option<String>, Error> {
        let Some(row) = store::get(self.db, id).await? else { return Ok(None) };
        let card = row.text("card").ok_or_else(|| Error::new(ErrorKind::Internal, "apps row without its card"))?;
        Ok(Some(card.to_owned()))
    }

    /// Lists `card` (fetched from `url`, when given) in one batch guarded by the catalogue's size
    /// (409 when [`MAX_CATALOGUE_ENTRIES`] other apps are listed); a new version replaces the
    /// one under its id.
    pub async fn put(&self, card: &Verified<AppCard>, url: Option<&str>) -> Result<(), Error> {
        let author = card.author_did();
        let sha256 = card.sha256_hex();
        let text = card.to_value().canonical_string();
        let listed = store::Listed {
            id: card.id(),
            name: card.name(),
            version: card.version(),
            author: &author,
            sha256: &sha256,
            url,
            card: &text,
        };
        self.db.batch(store::put(&listed, self.now().millis(), max_entries())).await.map_err(|e| match e {
            PortError::Constraint { name } if name == constraint::GUARD => {
                Refusal::CatalogueFull.because(format!("{MAX_CATALOGUE_ENTRIES} apps are listed; remove one first"))
            }
            e => port_error(e),
        })?;
        Ok(())
    }

    /// Removes app `id`: whether it was listed.
    pub async fn remove(&self, id: &str) -> Result<bool, Error> {
        let changed = self.db.batch(vec![store::remove(id)]).await.map_err(port_error)?;
        Ok(changed.first() == Some(&1))
    }
}
