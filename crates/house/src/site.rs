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
    Psl::embedded().or_else(|| INSTALLED.get().copied()).unwrap_or(Psl::NONE)
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
    if INSTALLED.get().is_some() {
        return Psl::check(&coded).map(drop);
    }
    let table = Psl::keep(coded)?;
    INSTALLED.get_or_init(|| table);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `install` keeps exactly the bytes this build was made with, and a refused table is never
    /// kept.
    #[test]
    fn install_takes_only_the_table_this_build_was_made_with() {
        let asset = nyx5_pages::psl::code(include_str!("../../rules/data/psl/public_suffix_list.dat")).unwrap().bytes;
        let mut flipped = asset.clone();
        flipped[asset.len() / 2] ^= 0x20;
        assert!(install(flipped).is_err());
        assert!(install(vec![]).is_err());
        assert!(INSTALLED.get().is_none_or(|kept| kept.is_list()), "a refused table was kept");
        assert!(install(asset.clone()).is_ok());
        assert!(INSTALLED.get().is_some_and(|kept| kept.is_list()));
        assert_eq!(site("a.b.c.kobe.jp"), "b.c.kobe.jp");
        assert!(loaded());
    }
}
