//! The house's Public Suffix List: the one table every site rule of this process reads
//! (`nyx5_rules::site::Psl`). Native builds use the table the rules crate embeds; the Worker
//! loads the same bytes from its static assets at its first event and hands them to [`install`],
//! which keeps them only if they are the ones this build was made with. Until a list is there
//! only the implicit rule `*` would hold, so `House::new` refuses to build a house without one.

pub use nyx5_rules::site::{ASSET_BYTES, ASSET_PATH, Psl};

/// The table the Worker installed (wasm32; native builds use the embedded one), checked once.
static INSTALLED: std::sync::OnceLock<Psl<'static>> = std::sync::OnceLock::new();

/// The table: the embedded one, else the installed one, else none (the implicit rule `*`).
pub fn psl() -> Psl<'static> {
    pick(Psl::embedded(), INSTALLED.get().copied())
}

/// Which table lookups read: the one this build embeds, else the one installed, else none.
fn pick(embedded: Option<Psl<'static>>, installed: Option<Psl<'static>>) -> Psl<'static> {
    embedded.or(installed).unwrap_or(Psl::NONE)
}

/// Whether lookups have the list (always, in a native build).
pub fn loaded() -> bool {
    psl().is_list()
}

/// The registrable domain of `domain` by this process's list ([`Psl::site`]).
pub fn site(domain: &str) -> &str {
    psl().site(domain)
}

/// `domain` and each parent of it down to its site ([`Psl::lineage`]).
pub fn lineage(domain: &str) -> Vec<&str> {
    psl().lineage(domain)
}

/// Keeps the coded table (the Worker's static asset at [`ASSET_PATH`]) if [`Psl::check`] takes
/// it: the length and checksum this build was made with. Another is refused, whatever it says. A
/// table already there stays. The bytes are kept as they came and read in place from then on.
pub fn install(coded: Vec<u8>) -> Result<(), nyx5_proto::Error> {
    install_into(&INSTALLED, coded)
}

fn install_into(cell: &std::sync::OnceLock<Psl<'static>>, coded: Vec<u8>) -> Result<(), nyx5_proto::Error> {
    Psl::check(&coded)?;
    cell.get_or_init(|| {
        // Kept for the life of the process, as a `static` would be: leaked once (only the first
        // install gets here), checked again only to give the borrow its lifetime.
        Psl::check(Box::leak(coded.into_boxed_slice())).unwrap_or(Psl::NONE)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset() -> Vec<u8> {
        nyx5_pages::psl::code(include_str!("../../rules/data/psl/public_suffix_list.dat")).unwrap().bytes
    }

    /// `install` keeps exactly the bytes this build was made with; a refused table leaves the
    /// cell empty, and a second table never replaces the first.
    #[test]
    fn install_takes_only_the_table_this_build_was_made_with() {
        let asset = asset();
        let cell = std::sync::OnceLock::new();
        let mut flipped = asset.clone();
        flipped[asset.len() / 2] ^= 0x20;
        assert!(install_into(&cell, flipped.clone()).is_err());
        assert!(install_into(&cell, vec![]).is_err());
        assert!(cell.get().is_none(), "a refused table was kept");
        assert!(install_into(&cell, asset.clone()).is_ok());
        let kept = *cell.get().unwrap();
        assert!(kept.is_list());
        assert_eq!(kept.site("a.b.c.kobe.jp"), "b.c.kobe.jp");
        assert!(install_into(&cell, flipped).is_err(), "checked even when one is kept");
        assert!(install_into(&cell, asset).is_ok());
        assert!(std::ptr::eq(cell.get().unwrap(), cell.get().unwrap()));
    }

    /// The embedded table wins; without one (wasm32) the installed one is read; without either,
    /// only the implicit rule `*`.
    #[test]
    fn lookups_read_the_embedded_else_the_installed_table() {
        let embedded = Psl::embedded().unwrap();
        let asset: &'static [u8] = Box::leak(asset().into_boxed_slice());
        let installed = Psl::check(asset).unwrap();
        assert_eq!(pick(None, Some(installed)).site("a.b.c.kobe.jp"), "b.c.kobe.jp");
        assert_eq!(pick(Some(embedded), None).site("a.b.c.kobe.jp"), "b.c.kobe.jp");
        assert_eq!(pick(None, None).site("a.b.c.kobe.jp"), "kobe.jp", "the implicit rule `*`");
        assert!(!pick(None, None).is_list());
        assert!(loaded(), "a native build embeds the list");
    }
}
