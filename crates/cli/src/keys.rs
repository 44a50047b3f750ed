//! `nyx5 keys new` and `nyx5 keys show`: make an agent key file, print its public keys.

use std::path::Path;

use crate::error::Outcome;
use crate::io;
use crate::keyfile::KeyFile;
use crate::sys::OsRng;

/// Generates an Ed25519 and an X25519 key and writes them to `out` (mode 0600).
pub(crate) fn new(out: &Path, force: bool) -> Outcome {
    let mut rng = OsRng::new();
    let keys = KeyFile::generate(&mut rng);
    rng.check()?;
    keys.write(out, force, &mut rng)?;
    io::write_text(&human(&keys))
}

/// Prints the public keys of the key file at `file`.
pub(crate) fn show(file: &Path, json: bool) -> Outcome {
    let keys = KeyFile::read(file)?;
    if json { io::write_json_line(&keys.public_value()) } else { io::write_text(&human(&keys)) }
}

fn human(keys: &KeyFile) -> String {
    format!("sig: {}\nenc: {}\n", keys.sig_public().to_b64(), keys.enc_public().to_b64())
}
