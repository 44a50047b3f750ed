//! Apps (docs/SPEC.md "Apps — Pinned"): the App Card an author signs, the table that turns its
//! declared primitives into Nyx5 verbs, the broker's line protocol, and the catalogue a house
//! publishes. Pure: the caller reads files, runs processes and talks to houses.
//!
//! An App Card (`app.json`) is a JSON object kept whole (unknown members stay and are signed, as
//! every document here). Its `sig` is Ed25519 by the key its `author` names (`did:key`), over
//! [`Context::AppCard`]'s label, a zero byte and the canonical card without `sig`: the label is
//! ours, not the seed format's, so an App Card signature can never be taken for another document.

use crate::b64;
use crate::crypto::{Context, SigPublic, SigningKey, hex, sha256};
use crate::json::{Object, Value, canonical_without, field};
use crate::sign::Verified;
use crate::vecmap::VecMap;
use crate::{Error, Refusal};

/// The `schema` every card carries.
pub const SCHEMA: &str = "nyx5/app/1";
/// Most bytes of an `app.json`.
pub const MAX_CARD_BYTES: usize = 64 * 1024;
/// Most bytes of an `id`.
pub const MAX_ID_BYTES: usize = 64;
/// Most bytes of `name`, `tagline`, `description`.
pub const MAX_NAME_BYTES: usize = 64;
pub const MAX_TAGLINE_BYTES: usize = 140;
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most bytes of a `version`.
pub const MAX_VERSION_BYTES: usize = 64;
/// Most primitives a card declares.
pub const MAX_PRIMITIVES: usize = 32;
/// Most files `entry.integrity` lists, and most bytes of one path.
pub const MAX_FILES: usize = 256;
pub const MAX_PATH_BYTES: usize = 256;
/// Most bytes of one listed file, and of all of them together.
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_TOTAL_BYTES: usize = 32 * 1024 * 1024;
/// Members of `entry` that name files (each must be in `integrity`): strings, or lists of them.
pub const ENTRY_FILES: [&str; 5] = ["main", "readme", "stage", "wasm", "scripts"];
/// The `did:key` prefix of an Ed25519 key: base58btc (`z`) of the multicodec 0xed 0x01 + 32 bytes.
pub const DID_KEY_PREFIX: &str = "did:key:z";

/// What kind of app it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    Game,
    Social,
    Productivity,
    Commerce,
    Creative,
    Utility,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::Game,
        Category::Social,
        Category::Productivity,
        Category::Commerce,
        Category::Creative,
        Category::Utility,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Game => "game",
            Category::Social => "social",
            Category::Productivity => "productivity",
            Category::Commerce => "commerce",
            Category::Creative => "creative",
            Category::Utility => "utility",
        }
    }

    pub fn parse(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A primitive Nyx5 grants: each is one broker method of the same name, acting as the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Primitive {
    /// `send`: a message to other agents (sealed), optionally stamped.
    SendMessage,
    /// `inbox`: one page of the agent's mailbox.
    ReadInbox,
    /// `inbox --follow`, once: waits (bounded) until mail after a cursor arrives.
    WaitForMessage,
    /// `card`: the agent's own address and verified card.
    Whoami,
    /// `lists`: the agent's allow list, the agents it chose to hear from.
    ListConnections,
    /// `remind`: a note to self, delivered later into the agent's own mailbox.
    Remember,
    /// `invite new`: an invitation code of the agent's house (the house token, given to `app run`).
    InviteCreate,
    /// `init` + `register --invite`: an invitation redeemed for a new agent of the user's, its
    /// fresh keys kept in the profile beside the others (never replacing one).
    InviteAccept,
}

impl Primitive {
    pub const ALL: [Primitive; 8] = [
        Primitive::SendMessage,
        Primitive::ReadInbox,
        Primitive::WaitForMessage,
        Primitive::Whoami,
        Primitive::ListConnections,
        Primitive::Remember,
        Primitive::InviteCreate,
        Primitive::InviteAccept,
    ];

    /// The name a card declares and the broker method it grants.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::SendMessage => "send_message",
            Primitive::ReadInbox => "read_inbox",
            Primitive::WaitForMessage => "wait_for_message",
            Primitive::Whoami => "whoami",
            Primitive::ListConnections => "list_connections",
            Primitive::Remember => "remember",
            Primitive::InviteCreate => "invite_create",
            Primitive::InviteAccept => "invite_accept",
        }
    }

    /// The `nyx5` verb it acts through.
    pub fn verb(self) -> &'static str {
        match self {
            Primitive::SendMessage => "nyx5 send",
            Primitive::ReadInbox => "nyx5 inbox",
            Primitive::WaitForMessage => "nyx5 inbox --follow",
            Primitive::Whoami => "nyx5 card (own)",
            Primitive::ListConnections => "nyx5 lists (allow)",
            Primitive::Remember => "nyx5 remind",
            Primitive::InviteCreate => "nyx5 invite new",
            Primitive::InviteAccept => "nyx5 init + nyx5 register --invite",
        }
    }

    /// Whether a call can move money (a stamp on a send): judged by the run's authority.
    pub fn moves_money(self) -> bool {
        matches!(self, Primitive::SendMessage)
    }

    pub fn parse(s: &str) -> Option<Primitive> {
        Primitive::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The seed format's names that Nyx5 has no meaning for, and why: a card declaring one is
/// refused (`unknown_primitive`), never granted in part.
pub const REFUSED: [(&str, &str); 8] = [
    ("recall", "Nyx5 keeps no memory store; notes made with `remember` come back through `read_inbox`"),
    ("get_persona", "Nyx5 agents have cards, not personas"),
    ("set_persona", "Nyx5 agents have cards, not personas"),
    ("set_profile", "a card changes only by registering again, which an app never does for its agent"),
    ("coord", "Nyx5 has no coordination service"),
    ("beatless", "Nyx5 does not start apps by itself when mail arrives"),
    ("persona", "Nyx5 agents have cards, not personas"),
    ("rooms", "Nyx5 has no rooms; mail has threads"),
];

/// Why a declared (or called) name is not granted.
pub fn refusal(name: &str) -> Option<&'static str> {
    REFUSED.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}

/// The primitive a card's name grants, or why not (400, reason starting `unknown_primitive`).
pub fn primitive(name: &str) -> Result<Primitive, Error> {
    if let Some(p) = Primitive::parse(name) {
        return Ok(p);
    }
    Err(Refusal::UnknownPrimitive.because(match refusal(name) {
        Some(why) => format!("unknown_primitive: `{name}` has no meaning in Nyx5 ({why})"),
        None => format!("unknown_primitive: `{name}` is not a primitive"),
    }))
}

/// A lowercase id: ASCII letters, digits, `.`, `-`, `_`; starting with a letter or digit.
pub fn check_app_id(id: &str) -> Result<(), Error> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_ID_BYTES
        && b.first().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(Refusal::BadAppId.because(format!(
            "`id` must be 1 to {MAX_ID_BYTES} lowercase letters, digits, `.`, `-` or `_`, starting with a letter or digit"
        )))
    }
}

/// Semantic Versioning 2.0.0, strictly: `MAJOR.MINOR.PATCH`, numbers without leading zeros, an
/// optional `-prerelease` (numeric identifiers without leading zeros) and `+build`.
pub fn check_semver(v: &str) -> Result<(), Error> {
    let bad = || Refusal::BadAppCard.because(format!("`version` {v:?} is not a semantic version (2.0.0)"));
    if v.is_empty() || v.len() > MAX_VERSION_BYTES {
        return Err(bad());
    }
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    let ident = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 || !parts.iter().all(|p| numeric(p)) {
        return Err(bad());
    }
    if let Some(pre) = pre
        && !pre.split('.').all(|s| ident(s) && (!s.bytes().all(|c| c.is_ascii_digit()) || numeric(s)))
    {
        return Err(bad());
    }
    if let Some(build) = build
        && !build.split('.').all(ident)
    {
        return Err(bad());
    }
    Ok(())
}

/// A path `entry.integrity` may list: POSIX, relative, no `.`/`..`/empty segments, no backslash
/// or NUL (or any control character), at most [`MAX_PATH_BYTES`].
pub fn check_path(p: &str) -> Result<(), Error> {
    let bad = |why: &str| Refusal::BadAppCard.because(format!("file path {p:?} {why}"));
    if p.is_empty() || p.len() > MAX_PATH_BYTES {
        return Err(bad(&format!("must be 1 to {MAX_PATH_BYTES} bytes")));
    }
    if p.starts_with('/') {
        return Err(bad("must be relative"));
    }
    if p.chars().any(|c| c == '\\' || c.is_control()) {
        return Err(bad("holds a backslash or a control character"));
    }
    // Fetched relative to a URL, these would change the request rather than name a file.
    if p.chars().any(|c| matches!(c, '?' | '#' | '%')) {
        return Err(bad("holds `?`, `#` or `%`"));
    }
    if p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err(bad("has an empty, `.` or `..` segment"));
    }
    Ok(())
}

const B58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Base58 (the Bitcoin alphabet) of `bytes`: leading zero bytes as `1`s.
pub fn base58_encode(bytes: &[u8]) -> String {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    // Little-endian base-58 digits.
    let mut digits: Vec<u8> = Vec::with_capacity(bytes.len() * 138 / 100 + 1);
    for &byte in bytes.iter().skip(zeros) {
        let mut carry = u32::from(byte);
        for d in digits.iter_mut() {
            carry += u32::from(*d) << 8;
            *d = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    let mut out = String::with_capacity(zeros + digits.len());
    out.extend(std::iter::repeat_n('1', zeros));
    out.extend(digits.iter().rev().filter_map(|d| B58.get(usize::from(*d)).map(|c| char::from(*c))));
    out
}

/// Decodes base58 (Bitcoin alphabet); `None` for any other character or more than `max` bytes.
pub fn base58_decode(text: &str, max: usize) -> Option<Vec<u8>> {
    // Each character carries under 6 bits: a text longer than this cannot fit in `max` bytes.
    if text.len() > max.saturating_mul(2).saturating_add(2) {
        return None;
    }
    let ones = text.bytes().take_while(|c| *c == b'1').count();
    let mut bytes: Vec<u8> = Vec::new(); // little-endian
    for c in text.bytes().skip(ones) {
        let mut carry = B58.iter().position(|a| *a == c)? as u32;
        for b in bytes.iter_mut() {
            carry += u32::from(*b) * 58;
            *b = (carry & 0xff) as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let mut out = vec![0u8; ones];
    out.extend(bytes.iter().rev());
    if out.len() > max { None } else { Some(out) }
}

/// The `did:key` of an Ed25519 key.
pub fn did_key(key: &SigPublic) -> String {
    let mut b = vec![0xed, 0x01];
    b.extend_from_slice(key.bytes());
    format!("{DID_KEY_PREFIX}{}", base58_encode(&b))
}

/// The Ed25519 key a `did:key` names (400 for anything else).
pub fn parse_did_key(did: &str) -> Result<SigPublic, Error> {
    let bad = || Refusal::BadAppCard.because(format!("`author` {did:?} is not the did:key of an Ed25519 key"));
    let b58 = did.strip_prefix(DID_KEY_PREFIX).ok_or_else(bad)?;
    let bytes = base58_decode(b58, 34).ok_or_else(bad)?;
    match bytes.as_slice() {
        [0xed, 0x01, key @ ..] => {
            let key: [u8; 32] = key.try_into().map_err(|_| bad())?;
            let public = SigPublic::from_bytes(key);
            // The canonical spelling only: one key, one DID.
            if did_key(&public) != did {
                return Err(bad());
            }
            Ok(public)
        }
        _ => Err(bad()),
    }
}

/// A file of the card that did not check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFailure {
    pub path: String,
    pub problem: FileProblem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileProblem {
    /// Not there (or not readable).
    Missing,
    /// Larger than [`MAX_FILE_BYTES`], or all files together than [`MAX_TOTAL_BYTES`].
    TooLarge,
    /// Its bytes hash to something else (the hash they have).
    Differs { actual: String },
}

impl std::fmt::Display for FileFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.problem {
            FileProblem::Missing => write!(f, "file {:?} is listed in entry.integrity but missing", self.path),
            FileProblem::TooLarge => write!(f, "file {:?} is over the size limit", self.path),
            FileProblem::Differs { actual } => {
                write!(f, "file {:?} does not match entry.integrity (its sha256 is {actual})", self.path)
            }
        }
    }
}

impl From<FileFailure> for Error {
    fn from(f: FileFailure) -> Error {
        let refusal =
            if f.problem == FileProblem::TooLarge { Refusal::AppFileTooLarge } else { Refusal::AppFileMismatch };
        refusal.because(f.to_string())
    }
}

/// An App Card, parsed: its raw object (what is signed) and the typed view of its members.
#[derive(Debug, Clone, PartialEq)]
pub struct AppCard {
    raw: Object,
    id: String,
    name: String,
    version: String,
    category: Category,
    primitives: Vec<String>,
    integrity: VecMap<String, [u8; 32]>,
    main: Option<String>,
    author: SigPublic,
    sig: [u8; 64],
}

fn text<'a>(o: &'a Object, name: &str, max: usize) -> Result<&'a str, Error> {
    let s = field::str(o, name)?;
    if s.trim().is_empty() || s.len() > max {
        return Err(Refusal::BadAppCard.because(format!("`{name}` must be 1 to {max} bytes")));
    }
    if s.chars().any(|c| c.is_control() && c != '\n') {
        return Err(Refusal::BadAppCard.because(format!("`{name}` holds control characters")));
    }
    Ok(s)
}

/// `"sha256:" + 64 lowercase hex`.
fn digest(s: &str, path: &str) -> Result<[u8; 32], Error> {
    let bad = || {
        Refusal::BadAppCard
            .because(format!("entry.integrity[{path:?}] must be \"sha256:\" and 64 lowercase hex digits"))
    };
    let hexs = s.strip_prefix("sha256:").ok_or_else(bad)?;
    if hexs.len() != 64 || !hexs.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        let pair = hexs.get(i * 2..i * 2 + 2).ok_or_else(bad)?;
        *o = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// `"sha256:" + hex(sha256(bytes))`, as `entry.integrity` writes a file.
pub fn integrity_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&sha256(bytes)))
}

impl AppCard {
    /// Parses `app.json`'s bytes strictly (400 for every rule broken; the signature and the
    /// primitives are [`AppCard::verify`]'s).
    pub fn parse(bytes: &[u8]) -> Result<AppCard, Error> {
        if bytes.len() > MAX_CARD_BYTES {
            return Err(Refusal::AppCardTooLarge.because(format!("an App Card is at most {MAX_CARD_BYTES} bytes")));
        }
        let raw = Value::parse_object(bytes, MAX_CARD_BYTES, "an App Card")?;
        AppCard::from_object(raw)
    }

    pub fn from_object(raw: Object) -> Result<AppCard, Error> {
        let o = &raw;
        if field::str(o, "schema")? != SCHEMA {
            return Err(Refusal::BadAppCard.because(format!("`schema` must be {SCHEMA:?}")));
        }
        let id = field::str(o, "id")?;
        check_app_id(id)?;
        let name = text(o, "name", MAX_NAME_BYTES)?;
        text(o, "tagline", MAX_TAGLINE_BYTES)?;
        text(o, "description", MAX_DESCRIPTION_BYTES)?;
        let version = field::str(o, "version")?;
        check_semver(version)?;
        let category = Category::parse(field::str(o, "category")?).ok_or_else(|| {
            Refusal::BadAppCard.because("`category` is one of game, social, productivity, commerce, creative, utility")
        })?;
        let list = field::array(o, "primitives")?;
        if list.len() > MAX_PRIMITIVES {
            return Err(Refusal::BadAppCard.because(format!("`primitives` lists at most {MAX_PRIMITIVES}")));
        }
        let mut primitives = Vec::with_capacity(list.len());
        for p in list {
            let p = p.as_str().ok_or_else(|| Refusal::BadAppCard.because("`primitives` lists strings"))?;
            if p.is_empty() || p.len() > 64 {
                return Err(Refusal::BadAppCard.because("a primitive's name is 1 to 64 bytes"));
            }
            if primitives.iter().any(|q: &String| q == p) {
                return Err(Refusal::BadAppCard.because(format!("`primitives` lists {p:?} twice")));
            }
            primitives.push(p.to_owned());
        }
        let entry = field::object(o, "entry")?;
        let listed = field::object(entry, "integrity")?;
        if listed.is_empty() || listed.len() > MAX_FILES {
            return Err(Refusal::BadAppCard.because(format!("entry.integrity lists 1 to {MAX_FILES} files")));
        }
        let mut integrity = VecMap::new();
        for (path, v) in listed {
            check_path(path)?;
            let d = v.as_str().ok_or_else(|| Refusal::BadAppCard.because("entry.integrity's values are strings"))?;
            integrity.insert(path.clone(), digest(d, path)?);
        }
        for member in ENTRY_FILES {
            let named: Vec<&str> = match field::optional(entry, member) {
                None => vec![],
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .ok_or_else(|| Refusal::BadAppCard.because(format!("entry.{member} lists file paths")))
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => {
                    return Err(Refusal::BadAppCard.because(format!("entry.{member} is a file path or a list of them")));
                }
            };
            for p in named {
                if !integrity.contains_key(p) {
                    return Err(
                        Refusal::BadAppCard.because(format!("entry.{member} names {p:?}, which entry.integrity lacks"))
                    );
                }
            }
        }
        let main = field::opt_str(entry, "main")?.map(str::to_owned);
        match field::required(o, "requires")? {
            Value::Object(_) | Value::Array(_) => {}
            _ => return Err(Refusal::BadAppCard.because("`requires` is an object or a list")),
        }
        match field::required(o, "coreChanges")? {
            Value::Bool(false) => {}
            _ => {
                return Err(
                    Refusal::BadAppCard.because("`coreChanges` must be false: an app never changes Nyx5 itself")
                );
            }
        }
        let author = parse_did_key(field::str(o, "author")?)?;
        let sig = b64::decode_array::<64>(field::str(o, "sig")?)
            .ok_or_else(|| Refusal::BadAppCard.because("`sig` is 64 bytes of base64url without padding"))?;
        Ok(AppCard {
            id: id.to_owned(),
            name: name.to_owned(),
            version: version.to_owned(),
            category,
            primitives,
            integrity,
            main,
            author,
            sig,
            raw,
        })
    }

    /// Signs a draft card (every member but `sig`; `author` is set to `key`'s did:key, and must
    /// name it if present) and parses the result.
    pub fn sign(mut draft: Object, key: &SigningKey) -> Result<AppCard, Error> {
        let did = did_key(&key.public());
        match field::opt_str(&draft, "author")? {
            Some(a) if a != did => {
                return Err(Refusal::BadAppCard.because("`author` names another key than the one signing"));
            }
            _ => {}
        }
        draft.insert("author".into(), did.into());
        draft.remove("sig");
        let sig = key.sign(Context::AppCard, &canonical_without(&draft, "sig"));
        draft.insert("sig".into(), b64::encode(&sig).into());
        AppCard::from_object(draft)
    }

    /// The author's signature (403 when it does not verify), then the primitives: every one
    /// must be one Nyx5 grants (400 `unknown_primitive` otherwise).
    pub fn verify(&self) -> Result<Verified<AppCard>, Error> {
        let message = canonical_without(&self.raw, "sig");
        if !self.author.verify(Context::AppCard, &message, &self.sig) {
            return Err(Refusal::BadSignature.because("the App Card's `sig` does not verify by its `author`"));
        }
        for p in &self.primitives {
            primitive(p)?;
        }
        Ok(Verified::new(self.clone()))
    }

    /// Checks every listed file: `read(path)` gives its bytes (`None`: missing). The first
    /// failure is reported with its path.
    pub fn check_files(&self, mut read: impl FnMut(&str) -> Option<Vec<u8>>) -> Result<(), FileFailure> {
        let mut total = 0usize;
        for (path, want) in &self.integrity {
            let fail = |problem| FileFailure { path: path.clone(), problem };
            let bytes = read(path).ok_or_else(|| fail(FileProblem::Missing))?;
            total = total.saturating_add(bytes.len());
            if bytes.len() > MAX_FILE_BYTES || total > MAX_TOTAL_BYTES {
                return Err(fail(FileProblem::TooLarge));
            }
            let got = sha256(&bytes);
            if &got != want {
                return Err(fail(FileProblem::Differs { actual: hex(&got) }));
            }
        }
        Ok(())
    }

    /// The primitives granted (all of them, once verified).
    pub fn grants(&self) -> Vec<Primitive> {
        self.primitives.iter().filter_map(|p| Primitive::parse(p)).collect()
    }

    /// SHA-256 (hex) of the canonical card, `sig` included: what a catalogue pins.
    pub fn sha256_hex(&self) -> String {
        hex(&sha256(&Value::Object(self.raw.clone()).canonical()))
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn version(&self) -> &str {
        &self.version
    }
    pub fn category(&self) -> Category {
        self.category
    }
    pub fn primitives(&self) -> &[String] {
        &self.primitives
    }
    /// The listed files, in path order.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.integrity.keys().map(String::as_str)
    }
    /// `entry.main`, the file `nyx5 app run` starts.
    pub fn main(&self) -> Option<&str> {
        self.main.as_deref()
    }
    pub fn author(&self) -> &SigPublic {
        &self.author
    }
    pub fn author_did(&self) -> String {
        did_key(&self.author)
    }
    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }

    /// What a catalogue lists of this card: `{id, name, version, author, sha256, url?}`.
    pub fn catalogue_entry(&self, url: Option<&str>) -> Object {
        let mut o = crate::json::obj([
            ("id", self.id.as_str().into()),
            ("name", self.name.as_str().into()),
            ("version", self.version.as_str().into()),
            ("author", self.author_did().into()),
            ("sha256", self.sha256_hex().into()),
        ]);
        if let Some(u) = url {
            o.insert("url".into(), u.into());
        }
        o
    }
}

/// The broker's error vocabulary (docs/SPEC.md "Broker").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerCode {
    BadToken,
    CapabilityDenied,
    UnknownPrimitive,
    TooLarge,
    BadRequest,
    Error,
}

impl BrokerCode {
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerCode::BadToken => "bad_token",
            BrokerCode::CapabilityDenied => "capability_denied",
            BrokerCode::UnknownPrimitive => "unknown_primitive",
            BrokerCode::TooLarge => "too_large",
            BrokerCode::BadRequest => "bad_request",
            BrokerCode::Error => "error",
        }
    }
}

/// Most bytes of one request line (without its newline).
pub const MAX_BROKER_LINE_BYTES: usize = 64 * 1024;
/// Most bytes of one answer's `text`.
pub const MAX_BROKER_TEXT_BYTES: usize = 1024 * 1024;

/// One request to the broker, accepted: its id, the primitive it calls and its params.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerCall {
    pub id: Value,
    pub primitive: Primitive,
    pub params: Object,
}

/// A refused request: the id to answer (null when unreadable), the code and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerRefusal {
    pub id: Value,
    pub code: BrokerCode,
    pub message: String,
}

fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Decides one request line: its size and JSON, its `id` (so refusals can answer it), the token
/// (constant-time), then the other members, then the method against
/// what the run `granted`: a granted method is a call; a Nyx5 primitive not granted is
/// `capability_denied`; anything else `unknown_primitive`. Pure.
pub fn decide_request(line: &[u8], token: &str, granted: &[Primitive]) -> Result<BrokerCall, BrokerRefusal> {
    let refuse = |id: Value, code, message: String| BrokerRefusal { id, code, message };
    if line.len() > MAX_BROKER_LINE_BYTES {
        return Err(refuse(
            Value::Null,
            BrokerCode::TooLarge,
            format!("a request is at most {MAX_BROKER_LINE_BYTES} bytes"),
        ));
    }
    let o = match Value::parse(line, MAX_BROKER_LINE_BYTES) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(refuse(Value::Null, BrokerCode::BadRequest, "a request is a JSON object".into())),
        Err(e) => return Err(refuse(Value::Null, BrokerCode::BadRequest, e.reason.into_owned())),
    };
    let id = match o.get("id") {
        Some(v @ Value::String(s)) if s.len() <= 128 => v.clone(),
        Some(v @ Value::Number(_)) if v.as_safe_integer().is_some() => v.clone(),
        _ => {
            return Err(refuse(
                Value::Null,
                BrokerCode::BadRequest,
                "`id` is a string (at most 128 bytes) or an integer".into(),
            ));
        }
    };
    match o.get("token").and_then(Value::as_str) {
        Some(t) if tokens_equal(t.as_bytes(), token.as_bytes()) => {}
        _ => return Err(refuse(id, BrokerCode::BadToken, "the token is not this run's".into())),
    }
    if let Some(extra) = o.keys().find(|k| !["token", "id", "method", "params"].contains(&k.as_str())) {
        return Err(refuse(id, BrokerCode::BadRequest, format!("unknown member {extra:?}")));
    }
    let Some(method) = o.get("method").and_then(Value::as_str) else {
        return Err(refuse(id, BrokerCode::BadRequest, "`method` is a string".into()));
    };
    let params = match o.get("params") {
        None | Some(Value::Null) => Object::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => return Err(refuse(id, BrokerCode::BadRequest, "`params` is an object".into())),
    };
    match Primitive::parse(method) {
        Some(p) if granted.contains(&p) => Ok(BrokerCall { id, primitive: p, params }),
        Some(p) => Err(refuse(id, BrokerCode::CapabilityDenied, format!("this app did not declare `{}`", p.as_str()))),
        None => {
            let mut name: String = method.chars().take(64).collect();
            name.retain(|c| !c.is_control());
            Err(refuse(id, BrokerCode::UnknownPrimitive, format!("`{name}` is not a Nyx5 primitive")))
        }
    }
}

/// `{"id","ok":true,"text"}`.
pub fn answer_ok(id: &Value, text: &str) -> Value {
    Value::Object(crate::json::obj([("id", id.clone()), ("ok", Value::Bool(true)), ("text", text.into())]))
}

/// `{"id","ok":false,"error","message"}`.
pub fn answer_err(id: &Value, code: BrokerCode, message: &str) -> Value {
    Value::Object(crate::json::obj([
        ("id", id.clone()),
        ("ok", Value::Bool(false)),
        ("error", code.as_str().into()),
        ("message", message.into()),
    ]))
}

/// The members a catalogue entry has.
pub const CATALOGUE_ENTRY_MEMBERS: [&str; 6] = ["id", "name", "version", "author", "sha256", "url"];
/// Most entries a house's catalogue holds.
pub const MAX_CATALOGUE_ENTRIES: usize = 500;

/// The catalogue entry for `id` in a catalogue document (`{house, issued, apps: […]}`), checked
/// against `card`: the card's hash must be the entry's (403 otherwise: someone changed the app).
pub fn check_catalogue(catalogue: &Object, card: &AppCard) -> Result<(), Error> {
    let apps = field::array(catalogue, "apps")?;
    let entry = apps
        .iter()
        .filter_map(Value::as_object)
        .find(|e| e.get("id").and_then(Value::as_str) == Some(card.id()))
        .ok_or_else(|| Refusal::AppNotListed.because(format!("the catalogue does not list {:?}", card.id())))?;
    let want = field::str(entry, "sha256")?;
    if want != card.sha256_hex() {
        return Err(Refusal::AppNotAsListed.because(format!(
            "the card's sha256 is {}, the catalogue lists {want}: this is not the app it lists",
            card.sha256_hex()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::obj;

    fn key() -> SigningKey {
        SigningKey::from_seed([7; 32])
    }

    fn draft() -> Object {
        let integrity =
            obj([("main.mjs", integrity_of(b"console.log(1)").into()), ("README.md", integrity_of(b"# hi").into())]);
        let entry =
            obj([("main", "main.mjs".into()), ("readme", "README.md".into()), ("integrity", Value::Object(integrity))]);
        obj([
            ("schema", SCHEMA.into()),
            ("id", "echo".into()),
            ("name", "Echo".into()),
            ("tagline", "Answers what it hears".into()),
            ("description", "A small app.".into()),
            ("version", "1.0.0".into()),
            ("category", "utility".into()),
            ("primitives", Value::Array(vec!["send_message".into(), "whoami".into()])),
            ("entry", Value::Object(entry)),
            ("requires", Value::Object(Object::new())),
            ("coreChanges", Value::Bool(false)),
        ])
    }

    fn signed(d: Object) -> Result<AppCard, Error> {
        AppCard::sign(d, &key())
    }

    fn with(name: &str, v: Value) -> Object {
        let mut d = draft();
        d.insert(name.into(), v);
        d
    }

    fn files(path: &str) -> Option<Vec<u8>> {
        match path {
            "main.mjs" => Some(b"console.log(1)".to_vec()),
            "README.md" => Some(b"# hi".to_vec()),
            _ => None,
        }
    }

    #[test]
    fn a_good_card_verifies_and_round_trips() {
        let card = signed(draft()).unwrap();
        let v = card.verify().unwrap();
        assert_eq!(v.grants(), vec![Primitive::SendMessage, Primitive::Whoami]);
        assert_eq!(v.check_files(files), Ok(()));
        let again = AppCard::parse(&card.to_value().canonical()).unwrap();
        assert_eq!(again, card);
        again.verify().unwrap();
        assert_eq!(card.author_did(), did_key(&key().public()));
        assert_eq!(card.sha256_hex().len(), 64);
        assert_eq!((card.id(), card.name(), card.version(), card.main()), ("echo", "Echo", "1.0.0", Some("main.mjs")));
        assert_eq!(card.primitives(), ["send_message", "whoami"]);
        assert_eq!(card.files().collect::<Vec<_>>(), ["README.md", "main.mjs"]);
        // An `author` already in the draft must be the signing key's.
        let other = did_key(&SigningKey::from_seed([8; 32]).public());
        assert_eq!(signed(with("author", other.into())).unwrap_err().refusal(), Some(Refusal::BadAppCard));
        assert!(signed(with("author", did_key(&key().public()).into())).is_ok());
    }

    #[test]
    fn unknown_members_are_kept_and_signed() {
        let card = signed(with("homepage", "https://x.test".into())).unwrap();
        card.verify().unwrap();
        let mut raw = card.to_value().as_object().unwrap().clone();
        raw.insert("homepage".into(), "https://evil.test".into());
        assert_eq!(AppCard::from_object(raw).unwrap().verify().unwrap_err().refusal(), Some(Refusal::BadSignature));
    }

    #[test]
    fn a_tampered_card_or_another_context_does_not_verify() {
        let card = signed(draft()).unwrap();
        let mut raw = card.to_value().as_object().unwrap().clone();
        raw.insert("version".into(), "1.0.1".into());
        assert_eq!(AppCard::from_object(raw).unwrap().verify().unwrap_err().refusal(), Some(Refusal::BadSignature));
        // The same bytes signed under another label (or none, as the seed format signs).
        let mut d = draft();
        d.insert("author".into(), did_key(&key().public()).into());
        for sig in [
            key().sign(Context::Envelope, &canonical_without(&d, "sig")),
            key().sign_raw(&canonical_without(&d, "sig")),
        ] {
            let mut raw = d.clone();
            raw.insert("sig".into(), b64::encode(&sig).into());
            assert!(AppCard::from_object(raw).unwrap().verify().is_err());
        }
        // Another author's key.
        let mut raw = card.to_value().as_object().unwrap().clone();
        raw.insert("author".into(), did_key(&SigningKey::from_seed([8; 32]).public()).into());
        assert!(AppCard::from_object(raw).unwrap().verify().is_err());
    }

    #[test]
    fn each_field_rule_is_refused() {
        let bad: Vec<(&str, Value)> = vec![
            ("schema", "muretai/app/1".into()),
            ("id", "Echo".into()),
            ("id", "".into()),
            ("id", "-x".into()),
            ("id", "a/b".into()),
            ("id", "x".repeat(65).into()),
            ("name", "".into()),
            ("name", "n".repeat(65).into()),
            ("tagline", "t".repeat(141).into()),
            ("description", "d".repeat(4097).into()),
            ("description", "bell\u{7}".into()),
            ("version", "1.0".into()),
            ("version", "01.0.0".into()),
            ("version", "1.0.0-01".into()),
            ("version", "1.0.0-".into()),
            ("version", "1.0.0+".into()),
            ("version", "v1.0.0".into()),
            ("category", "games".into()),
            ("primitives", Value::Array(vec!["whoami".into(), "whoami".into()])),
            ("primitives", Value::Array(vec![Value::Number(1.0)])),
            ("primitives", "whoami".into()),
            ("requires", "node".into()),
            ("coreChanges", Value::Bool(true)),
            ("coreChanges", Value::Null),
            ("author", "did:key:z6Mk".into()),
            ("author", "did:web:x.test".into()),
            ("entry", Value::Object(Object::new())),
        ];
        for (name, v) in bad {
            assert!(signed(with(name, v.clone())).is_err(), "{name} = {v:?} was accepted");
        }
        for missing in ["schema", "id", "name", "tagline", "description", "version", "category", "primitives", "entry"]
        {
            let mut d = draft();
            d.remove(missing);
            assert!(signed(d).is_err(), "{missing} may be missing");
        }
        for missing in ["requires", "coreChanges"] {
            let mut d = draft();
            d.remove(missing);
            assert!(signed(d).is_err(), "{missing} may be missing");
        }
        let mut no_sig = signed(draft()).unwrap().to_value().as_object().unwrap().clone();
        no_sig.remove("sig");
        assert!(AppCard::from_object(no_sig).is_err());
        for ok in ["1.0.0-alpha.1+build.5", "0.0.0", "10.20.30-rc.1.x-y", "1.2.3+001"] {
            check_semver(ok).unwrap();
        }
        signed(with("requires", Value::Array(vec!["node>=20".into()]))).unwrap();
    }

    #[test]
    fn bad_paths_and_digests_are_refused() {
        for p in [
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a/.",
            "a\\b",
            "a\0b",
            "",
            "a/",
            "a?x=1",
            "a#b",
            "%2e%2e/x",
        ] {
            assert!(check_path(p).is_err(), "{p:?}");
            let mut d = draft();
            let Some(Value::Object(entry)) = d.get_mut("entry") else { panic!() };
            let Some(Value::Object(i)) = entry.get_mut("integrity") else { panic!() };
            i.insert(p.into(), integrity_of(b"").into());
            assert!(signed(d).is_err(), "{p:?} accepted");
        }
        check_path("lib/sdk.mjs").unwrap();
        for d in ["sha256:ABC", "sha1:00", &format!("sha256:{}", "A".repeat(64)), &"0".repeat(64)] {
            assert!(digest(d, "x").is_err(), "{d}");
        }
        // A file named by entry but not listed.
        let mut d = draft();
        let Some(Value::Object(entry)) = d.get_mut("entry") else { panic!() };
        entry.insert("scripts".into(), Value::Array(vec!["other.mjs".into()]));
        assert!(signed(d).is_err());
    }

    #[test]
    fn the_bounds_of_a_card_are_exact() {
        // id: 1 to 64 bytes, first a letter or a digit.
        for ok in ["a", "7up", &"a".repeat(MAX_ID_BYTES)] {
            assert_eq!(check_app_id(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", ".a", "A", &"a".repeat(MAX_ID_BYTES + 1)] {
            assert!(check_app_id(bad).is_err(), "{bad}");
        }
        // version: at most 64 bytes.
        let long = format!("1.0.0-{}", "a".repeat(MAX_VERSION_BYTES - 6));
        assert_eq!(check_semver(&long), Ok(()));
        assert!(check_semver(&format!("{long}a")).is_err());
        assert!(check_semver("").is_err());
        // a path: 1 to 256 bytes.
        let path = "a".repeat(MAX_PATH_BYTES);
        assert_eq!(check_path(&path), Ok(()));
        assert!(check_path(&format!("{path}a")).is_err());
        assert!(check_path("").is_err());
        // name: 1 to 64 bytes (tagline and description the same way).
        assert!(signed(with("name", "n".repeat(MAX_NAME_BYTES).into())).is_ok());
        assert!(signed(with("name", "n".repeat(MAX_NAME_BYTES + 1).into())).is_err());
        // primitives: at most 32 names (checked against the table when verifying), each 1 to 64 bytes.
        let names = |n: usize, len: usize| Value::Array((0..n).map(|i| format!("{i:0>len$}").into()).collect());
        assert!(signed(with("primitives", names(MAX_PRIMITIVES, 2))).is_ok());
        assert!(signed(with("primitives", names(MAX_PRIMITIVES + 1, 2))).is_err());
        assert!(signed(with("primitives", names(1, 64))).is_ok());
        assert!(signed(with("primitives", names(1, 65))).is_err());
        assert!(signed(with("primitives", Value::Array(vec!["".into()]))).is_err());
        // entry.integrity: 1 to 256 files.
        let listing = |n: usize| {
            let integrity: Object = (0..n).map(|i| (format!("f{i}"), integrity_of(b"").into())).collect();
            Value::Object(obj([("integrity", Value::Object(integrity))]))
        };
        assert!(signed(with("entry", listing(MAX_FILES))).is_ok());
        assert!(signed(with("entry", listing(MAX_FILES + 1))).is_err());
        assert!(signed(with("entry", listing(0))).is_err());
        // The card: its longest description fits; past 64 KiB it is too large to read.
        let long = signed(with("description", "d".repeat(MAX_DESCRIPTION_BYTES).into())).unwrap();
        let bytes = long.to_value().canonical();
        assert!(bytes.len() > 4096);
        assert_eq!(AppCard::parse(&bytes).unwrap(), long);
        let huge = signed(with("notes", "n".repeat(MAX_CARD_BYTES).into())).unwrap();
        assert_eq!(AppCard::parse(&huge.to_value().canonical()).unwrap_err().refusal(), Some(Refusal::AppCardTooLarge));
        // Exactly 64 KiB is read.
        let small = signed(with("notes", "".into())).unwrap().to_value().canonical().len();
        let exact = signed(with("notes", "n".repeat(MAX_CARD_BYTES - small).into())).unwrap();
        assert_eq!(exact.to_value().canonical().len(), MAX_CARD_BYTES);
        assert_eq!(AppCard::parse(&exact.to_value().canonical()).unwrap(), exact);
    }

    #[test]
    fn files_are_read_up_to_8_mib_each_and_32_in_all() {
        let big = vec![b'x'; MAX_FILE_BYTES];
        let names = ["a.bin", "b.bin", "c.bin", "d.bin"];
        let integrity: Object = names.iter().map(|n| ((*n).to_owned(), integrity_of(&big).into())).collect();
        let entry = obj([("main", "a.bin".into()), ("integrity", Value::Object(integrity))]);
        let card = signed(with("entry", Value::Object(entry))).unwrap();
        assert_eq!(card.check_files(|_| Some(big.clone())), Ok(()));
        // One byte more in a file, or in all of them together, is too large (and never hashed).
        let f = card.check_files(|p| Some(if p == "a.bin" { vec![b'x'; MAX_FILE_BYTES + 1] } else { big.clone() }));
        assert_eq!(f.unwrap_err().problem, FileProblem::TooLarge);
        let integrity: Object = names
            .iter()
            .chain(["e.bin"].iter())
            .map(|n| ((*n).to_owned(), integrity_of(if *n == "e.bin" { b"y" } else { &big }).into()))
            .collect();
        let entry = obj([("main", "a.bin".into()), ("integrity", Value::Object(integrity))]);
        let card = signed(with("entry", Value::Object(entry))).unwrap();
        let f = card.check_files(|p| Some(if p == "e.bin" { b"y".to_vec() } else { big.clone() })).unwrap_err();
        assert_eq!((f.path.as_str(), f.problem.clone()), ("e.bin", FileProblem::TooLarge));
        // What each failure says, and the error it is.
        assert_eq!(f.to_string(), "file \"e.bin\" is over the size limit");
        assert_eq!(Error::from(f).refusal(), Some(Refusal::AppFileTooLarge));
        let missing = FileFailure { path: "m".into(), problem: FileProblem::Missing };
        assert_eq!(missing.to_string(), "file \"m\" is listed in entry.integrity but missing");
        assert_eq!(Error::from(missing).refusal(), Some(Refusal::AppFileMismatch));
        let differs = FileFailure { path: "d".into(), problem: FileProblem::Differs { actual: "ab".into() } };
        assert_eq!(differs.to_string(), "file \"d\" does not match entry.integrity (its sha256 is ab)");
    }

    #[test]
    fn each_primitive_names_its_verb_and_only_a_send_moves_money() {
        let verbs: Vec<&str> = Primitive::ALL.iter().map(|p| p.verb()).collect();
        assert!(verbs.iter().all(|v| v.starts_with("nyx5 ")), "{verbs:?}");
        assert_eq!(Primitive::SendMessage.verb(), "nyx5 send");
        assert_eq!(Primitive::InviteAccept.verb(), "nyx5 init + nyx5 register --invite");
        let money: Vec<Primitive> = Primitive::ALL.into_iter().filter(|p| p.moves_money()).collect();
        assert_eq!(money, [Primitive::SendMessage]);
        // A refused name says why, in the card's refusal too.
        let why = refusal("rooms").unwrap();
        assert!(why.contains("threads"));
        let card = signed(with("primitives", Value::Array(vec!["rooms".into()]))).unwrap();
        assert!(card.verify().unwrap_err().reason.contains(why));
        assert_eq!(refusal("send_message"), None);
    }

    #[test]
    fn files_that_differ_or_are_missing_are_named() {
        let card = signed(draft()).unwrap();
        let f = card.check_files(|p| if p == "main.mjs" { Some(b"console.log(2)".to_vec()) } else { files(p) });
        let f = f.unwrap_err();
        assert_eq!(f.path, "main.mjs");
        assert!(matches!(f.problem, FileProblem::Differs { .. }));
        let f = card.check_files(|p| if p == "README.md" { None } else { files(p) }).unwrap_err();
        assert_eq!((f.path.as_str(), f.problem), ("README.md", FileProblem::Missing));
    }

    #[test]
    fn primitives_without_a_nyx5_meaning_are_refused_at_verify() {
        for (name, _) in REFUSED {
            let card = signed(with("primitives", Value::Array(vec![name.into()]))).unwrap();
            let e = card.verify().unwrap_err();
            assert_eq!(e.refusal(), Some(Refusal::UnknownPrimitive), "{name}: {}", e.reason);
        }
        let card = signed(with("primitives", Value::Array(vec!["launch_rockets".into()]))).unwrap();
        assert_eq!(card.verify().unwrap_err().refusal(), Some(Refusal::UnknownPrimitive));
        for p in Primitive::ALL {
            assert_eq!(primitive(p.as_str()), Ok(p));
            assert!(refusal(p.as_str()).is_none());
        }
    }

    #[test]
    fn base58_and_did_key() {
        // Vectors from the base58 draft (draft-msporny-base58).
        assert_eq!(base58_encode(b"Hello World!"), "2NEpo7TZRRrLZSi2U");
        assert_eq!(base58_encode(&[0, 0, 0x28, 0x7f, 0xb4, 0xcd]), "11233QC4");
        assert_eq!(base58_decode("2NEpo7TZRRrLZSi2U", 64).unwrap(), b"Hello World!");
        assert_eq!(base58_decode("11233QC4", 64).unwrap(), vec![0, 0, 0x28, 0x7f, 0xb4, 0xcd]);
        assert_eq!(base58_decode("", 8).unwrap(), Vec::<u8>::new());
        assert!(base58_decode("0OIl", 8).is_none());
        assert!(base58_decode("2NEpo7TZRRrLZSi2U", 4).is_none());
        for seed in 0..20u8 {
            let b: Vec<u8> = (0..seed).map(|i| i.wrapping_mul(37).wrapping_add(seed)).collect();
            assert_eq!(base58_decode(&base58_encode(&b), 64).unwrap(), b);
        }
        // The did:key spec's Ed25519 example.
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let k = parse_did_key(did).unwrap();
        assert_eq!(did_key(&k), did);
        assert!(did_key(&key().public()).starts_with("did:key:z6Mk"));
        assert!(parse_did_key("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2do").is_err());
        assert!(parse_did_key("did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme").is_err());
    }

    #[test]
    fn the_broker_decides_each_line() {
        let granted = [Primitive::SendMessage, Primitive::Whoami];
        let line = |s: &str| decide_request(s.as_bytes(), "tok", &granted);
        let call = line(r#"{"token":"tok","id":1,"method":"whoami"}"#).unwrap();
        assert_eq!(call.primitive, Primitive::Whoami);
        let code = |s: &str| line(s).unwrap_err().code;
        assert_eq!(code(r#"{"token":"tik","id":1,"method":"whoami"}"#), BrokerCode::BadToken);
        assert_eq!(code(r#"{"id":1,"method":"whoami"}"#), BrokerCode::BadToken);
        assert_eq!(code(r#"{"token":"tok","id":"a","method":"read_inbox"}"#), BrokerCode::CapabilityDenied);
        assert_eq!(code(r#"{"token":"tok","id":"a","method":"rooms_send"}"#), BrokerCode::UnknownPrimitive);
        assert_eq!(code(r#"{"token":"tok","id":"a","method":"coord"}"#), BrokerCode::UnknownPrimitive);
        assert_eq!(code(r#"{"token":"tok","id":"a"}"#), BrokerCode::BadRequest);
        assert_eq!(code(r#"{"token":"tok","id":[1],"method":"whoami"}"#), BrokerCode::BadRequest);
        assert_eq!(code(r#"{"token":"tok","id":1,"method":"whoami","params":3}"#), BrokerCode::BadRequest);
        assert_eq!(code(r#"{"token":"tok","id":1,"method":"whoami","x":3}"#), BrokerCode::BadRequest);
        assert_eq!(code("not json"), BrokerCode::BadRequest);
        let big = format!(r#"{{"token":"tok","id":1,"method":"whoami","params":{{"x":"{}"}}}}"#, "a".repeat(70_000));
        assert_eq!(code(&big), BrokerCode::TooLarge);
        let r = line(r#"{"token":"tok","id":"q","method":"read_inbox"}"#).unwrap_err();
        assert_eq!(r.id, Value::from("q"));
        let a = answer_err(&r.id, r.code, &r.message);
        assert_eq!(a.as_object().unwrap().get("error").unwrap().as_str(), Some("capability_denied"));
    }

    #[test]
    fn the_broker_holds_to_its_bounds_exactly() {
        let granted = [Primitive::Whoami];
        let line = |s: &str| decide_request(s.as_bytes(), "tok", &granted);
        // A line of exactly 64 KiB is read; one byte more is too large.
        let head = r#"{"token":"tok","id":1,"method":"whoami","params":{"x":"@"}}"#;
        let fill = "a".repeat(MAX_BROKER_LINE_BYTES - head.len() + 1);
        let exact = head.replace('@', &fill);
        assert_eq!(exact.len(), MAX_BROKER_LINE_BYTES);
        assert_eq!(line(&exact).unwrap().primitive, Primitive::Whoami);
        let over = head.replace('@', &format!("{fill}a"));
        assert_eq!(line(&over).unwrap_err().code, BrokerCode::TooLarge);
        // Ids: a string of at most 128 bytes, or an integer.
        let id = |v: &str| line(&format!(r#"{{"token":"tok","id":{v},"method":"whoami"}}"#));
        assert!(id(&format!("\"{}\"", "i".repeat(128))).is_ok());
        assert_eq!(id(&format!("\"{}\"", "i".repeat(129))).unwrap_err().code, BrokerCode::BadRequest);
        assert_eq!(id("1.5").unwrap_err().code, BrokerCode::BadRequest);
        // Tokens are equal only when every byte is (two differences never cancel out).
        let swapped = decide_request(br#"{"token":"ab","id":1,"method":"whoami"}"#, "ba", &granted);
        assert_eq!(swapped.unwrap_err().code, BrokerCode::BadToken);
        // An unknown method is named without its control characters.
        let r = line(r#"{"token":"tok","id":1,"method":"la\u001b[31mnch"}"#).unwrap_err();
        assert_eq!((r.code, r.message.as_str()), (BrokerCode::UnknownPrimitive, "`la[31mnch` is not a Nyx5 primitive"));
        // The numbers the spec pins: 64 KiB a request, 1 MiB an answer's text.
        assert_eq!((MAX_BROKER_LINE_BYTES, MAX_BROKER_TEXT_BYTES), (65_536, 1_048_576));
    }

    #[test]
    fn a_catalogue_pins_the_card() {
        let card = signed(draft()).unwrap();
        let cat = obj([("apps", Value::Array(vec![Value::Object(card.catalogue_entry(None))]))]);
        check_catalogue(&cat, &card).unwrap();
        let other = signed(with("version", "1.0.1".into())).unwrap();
        assert_eq!(check_catalogue(&cat, &other).unwrap_err().refusal(), Some(Refusal::AppNotAsListed));
        let none = obj([("apps", Value::Array(vec![]))]);
        assert_eq!(check_catalogue(&none, &card).unwrap_err().refusal(), Some(Refusal::AppNotListed));
    }
}
