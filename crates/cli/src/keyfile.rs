//! The agent key file: `{"enc","enc_secret","kind":"agent-keys","nyx5":"1","sig","sig_secret"}`,
//! canonical JSON plus a newline, created with mode 0600.
//!
//! `sig_secret` is the 32-byte Ed25519 seed and `enc_secret` the 32-byte X25519 secret, both
//! base64url without padding; `sig` and `enc` are their public keys and must match them.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nyx5_proto::b64;
use nyx5_proto::crypto::{EncPublic, EncSecret, Entropy, SigPublic, SigningKey};
use nyx5_proto::json::{Value, field, obj};

use crate::error::{Failure, Outcome};

/// The `kind` of an agent key file.
pub(crate) const KIND: &str = "agent-keys";
/// The protocol version the file belongs to.
pub(crate) const VERSION: &str = "1";
/// A key file is about 250 bytes; anything much larger is not one.
const MAX_KEY_FILE_BYTES: usize = 4096;
/// Exactly these members, no more.
const MEMBERS: [&str; 6] = ["enc", "enc_secret", "kind", "nyx5", "sig", "sig_secret"];

/// An agent's two key pairs.
#[derive(Debug, Clone)]
pub(crate) struct KeyFile {
    pub(crate) sig: SigningKey,
    pub(crate) enc: EncSecret,
}

impl KeyFile {
    /// Fresh keys from `rng`.
    pub(crate) fn generate(rng: &mut dyn Entropy) -> KeyFile {
        KeyFile { sig: SigningKey::generate(rng), enc: EncSecret::generate(rng) }
    }

    pub(crate) fn sig_public(&self) -> SigPublic {
        self.sig.public()
    }

    pub(crate) fn enc_public(&self) -> EncPublic {
        self.enc.public()
    }

    /// The whole file as JSON.
    pub(crate) fn to_value(&self) -> Value {
        Value::Object(obj([
            ("nyx5", VERSION.into()),
            ("kind", KIND.into()),
            ("sig", self.sig_public().to_b64().into()),
            ("enc", self.enc_public().to_b64().into()),
            ("sig_secret", b64::encode(&self.sig.seed()).into()),
            ("enc_secret", b64::encode(&self.enc.bytes()).into()),
        ]))
    }

    /// The public half: `{"enc","sig"}`.
    pub(crate) fn public_value(&self) -> Value {
        Value::Object(obj([("sig", self.sig_public().to_b64().into()), ("enc", self.enc_public().to_b64().into())]))
    }

    /// Reads a key file and checks that its public keys belong to its secrets.
    pub(crate) fn from_value(value: &Value) -> Result<KeyFile, String> {
        let o = value.as_object().ok_or_else(|| "a key file is a JSON object".to_owned())?;
        if let Some(extra) = o.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
            return Err(format!("unknown member {extra:?}"));
        }
        let text = |name: &str| field::str(o, name).map_err(|e| e.reason.to_string());
        if text("nyx5")? != VERSION {
            return Err(format!("`nyx5` must be {VERSION:?}"));
        }
        if text("kind")? != KIND {
            return Err(format!("`kind` must be {KIND:?}"));
        }
        let secret = |name: &str| -> Result<[u8; 32], String> {
            b64::decode_array(text(name)?).ok_or_else(|| format!("`{name}` is not 32 bytes of base64url"))
        };
        let keys = KeyFile {
            sig: SigningKey::from_seed(secret("sig_secret")?),
            enc: EncSecret::from_bytes(secret("enc_secret")?),
        };
        let sig = SigPublic::parse(text("sig")?).map_err(|e| e.reason.to_string())?;
        if sig != keys.sig_public() {
            return Err("`sig` is not the public key of `sig_secret`".to_owned());
        }
        let enc = EncPublic::parse(text("enc")?).map_err(|e| e.reason.to_string())?;
        if enc != keys.enc_public() {
            return Err("`enc` is not the public key of `enc_secret`".to_owned());
        }
        Ok(keys)
    }

    /// Reads and checks the key file at `path`.
    pub(crate) fn read(path: &Path) -> Result<KeyFile, Failure> {
        let shown = path.display();
        let file =
            std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read key file {shown}: {e}")))?;
        let mut bytes = Vec::new();
        let cap = u64::try_from(MAX_KEY_FILE_BYTES + 1).unwrap_or(u64::MAX);
        file.take(cap)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::usage(format!("cannot read key file {shown}: {e}")))?;
        let value = Value::parse(&bytes, MAX_KEY_FILE_BYTES)
            .map_err(|e| Failure::usage(format!("key file {shown}: {}", e.reason)).named(e.name()))?;
        KeyFile::from_value(&value).map_err(|why| Failure::usage(format!("key file {shown}: {why}")))
    }

    /// Writes the key file to `path`, created with mode 0600. An existing file is refused
    /// unless `force`; then the keys go to a fresh 0600 file beside it that replaces it.
    pub(crate) fn write(&self, path: &Path, force: bool, rng: &mut dyn Entropy) -> Outcome {
        let mut bytes = self.to_value().canonical();
        bytes.push(b'\n');
        if !force {
            return create_private(path, &bytes).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Failure::usage(format!("{} exists; use --force to replace it", path.display()))
                } else {
                    Failure::usage(format!("cannot create {}: {e}", path.display()))
                }
            });
        }
        let tmp = sibling_temp(path, rng)?;
        let written = create_private(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Failure::usage(format!("cannot write {}: {e}", path.display()))
        })
    }
}

/// Creates `path` (never an existing file) with mode 0600 and writes `bytes` to disk.
fn create_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A unique hidden name in the directory of `path`.
fn sibling_temp(path: &Path, rng: &mut dyn Entropy) -> Result<PathBuf, Failure> {
    let name = path.file_name().ok_or_else(|| Failure::usage(format!("{} is not a file name", path.display())))?;
    let tag: [u8; 8] = nyx5_proto::crypto::random(rng);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", nyx5_proto::crypto::hex(&tag)));
    Ok(path.with_file_name(tmp_name))
}
