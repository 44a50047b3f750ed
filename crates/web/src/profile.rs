//! The CLI's profile file (docs/SPEC.md, "Client profile"), written and read, so keys move
//! between `nyx5` and the browser:
//!
//! ```text
//! {"agents":[{"address","house","sig","enc","sig_secret","enc_secret","pending":{},"sent":{},
//!             "previous"?:[{"sig","enc","sig_secret","enc_secret","retired"?}]}],
//!  "kind":"agent-profile","nyx5":"1","pins":{"<domain>":"<domain key>"}}
//! ```
//!
//! canonical JSON and a newline. The browser keeps no unsent envelopes, so `pending` and `sent`
//! are written empty and not read back.

use nyx5_proto::json::{Object, Value, field, obj};
use nyx5_proto::{Address, Error, Refusal, Timestamp};

use crate::keys::Keys;
use crate::util::{about, address, object, value};

use nyx5_client::profile::{KIND, MAX_PROFILE_BYTES, VERSION};

/// One agent as the browser holds it.
#[derive(Debug)]
struct Agent {
    address: Address,
    house: String,
    keys: Keys,
    /// Retired keys, newest first, with when they were retired when known.
    previous: Vec<(Keys, Option<Timestamp>)>,
}

/// A house base URL: http(s), no trailing slash, no query.
fn house_url(text: &str) -> Result<String, Error> {
    let url = text.trim().trim_end_matches('/');
    let ok = (url.starts_with("https://") || url.starts_with("http://")) && !url.contains(['?', '#', ' ']);
    if !ok || url.split_once("://").is_none_or(|(_, host)| host.is_empty()) {
        return Err(Refusal::BadProfile
            .because(format!("house {text:?} is not a house base URL such as https://mail.example.org")));
    }
    Ok(url.to_owned())
}

/// A retired key set: its keys and, when present, `retired`.
fn previous(v: &Value, what: &str) -> Result<(Keys, Option<Timestamp>), Error> {
    let o = v.as_object().ok_or_else(|| Refusal::BadProfile.because(format!("{what} must be an object")))?;
    let keys = Keys::from_object(o).map_err(about(what))?;
    let retired = field::opt_str(o, "retired").map_err(about(what))?.map(Timestamp::parse).transpose()?;
    Ok((keys, retired))
}

fn previous_list(o: &Object, who: &str) -> Result<Vec<(Keys, Option<Timestamp>)>, Error> {
    let list = field::opt_array(o, "previous").map_err(about(who))?.unwrap_or_default();
    list.iter().enumerate().map(|(i, p)| previous(p, &format!("{who} previous [{i}]"))).collect()
}

fn previous_value(list: &[(Keys, Option<Timestamp>)]) -> Value {
    let list = list
        .iter()
        .map(|(k, retired)| {
            let mut p = k.to_object();
            if let Some(r) = retired {
                p.insert("retired".into(), r.to_rfc3339().into());
            }
            Value::Object(p)
        })
        .collect();
    Value::Array(list)
}

/// The pins: domain → domain key, each key checked (the client crate's reader, the CLI's).
fn pins(o: Option<&Object>) -> Result<Object, Error> {
    nyx5_client::pins::read(o).map(|pins| pins.into_iter().map(|(domain, key)| (domain, key.into())).collect())
}

/// Refuses a second entry for one address, as the CLI's reader does.
fn push_once(agents: &mut Vec<Agent>, a: Agent) -> Result<(), Error> {
    if agents.iter().any(|x| x.address == a.address) {
        return Err(Refusal::BadProfile.because(format!("{} is listed twice", a.address)));
    }
    agents.push(a);
    Ok(())
}

/// `profile_export`: `agents_json` is `[{address, house, keys: {…}, previous?: [{…keys,
/// retired?}]}]`, `pins_json` `{domain: key}` (or `""`).
pub(crate) fn export(agents_json: &str, pins_json: &str) -> Result<String, Error> {
    let list = value(agents_json, "agents")?;
    let list = list.as_array().ok_or_else(|| Refusal::BadProfile.because("agents must be an array"))?;
    let mut agents = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let who = format!("agent [{i}]");
        let o = a.as_object().ok_or_else(|| Refusal::BadProfile.because(format!("{who} must be an object")))?;
        let addr = address(field::str(o, "address").map_err(about(&who))?, &who)?;
        let who = addr.as_str().to_owned();
        let agent = Agent {
            house: house_url(field::str(o, "house").map_err(about(&who))?).map_err(about(&who))?,
            keys: Keys::from_object(field::object(o, "keys").map_err(about(&who))?).map_err(about(&who))?,
            previous: previous_list(o, &who)?,
            address: addr,
        };
        push_once(&mut agents, agent)?;
    }
    let pins = match pins_json.trim() {
        "" => Object::new(),
        text => pins(Some(&object(text, "pins")?))?,
    };
    let agents = agents
        .iter()
        .map(|a| {
            let mut o = a.keys.to_object();
            o.insert("address".into(), a.address.as_str().into());
            o.insert("house".into(), a.house.as_str().into());
            if !a.previous.is_empty() {
                o.insert("previous".into(), previous_value(&a.previous));
            }
            o.insert("pending".into(), Value::Object(Object::new()));
            o.insert("sent".into(), Value::Object(Object::new()));
            Value::Object(o)
        })
        .collect();
    let file = obj([
        ("nyx5", VERSION.into()),
        ("kind", KIND.into()),
        ("agents", Value::Array(agents)),
        ("pins", Value::Object(pins)),
    ]);
    let mut text = Value::Object(file).canonical_string();
    text.push('\n');
    Ok(text)
}

/// `profile_import`: reads a profile file as the CLI's reader does (every key pair checked,
/// each address once), answering `{agents: [{address, house, keys, previous}], pins}`.
pub(crate) fn import(text: &str) -> Result<Value, Error> {
    let o = Value::parse_object(text.as_bytes(), MAX_PROFILE_BYTES, "a profile").map_err(about("the profile"))?;
    if field::str(&o, "nyx5")? != VERSION {
        return Err(Refusal::BadProfile.because(format!("the profile: `nyx5` must be {VERSION:?}")));
    }
    if field::str(&o, "kind")? != KIND {
        return Err(Refusal::BadProfile.because(format!("the profile: `kind` must be {KIND:?}")));
    }
    let mut agents = Vec::new();
    for (i, a) in field::array(&o, "agents")?.iter().enumerate() {
        let who = format!("agent [{i}]");
        let a = a.as_object().ok_or_else(|| Refusal::BadProfile.because(format!("{who} must be an object")))?;
        let addr = Address::parse(field::str(a, "address").map_err(about(&who))?).map_err(about(&who))?;
        let who = addr.as_str().to_owned();
        // The keys of an unfinished rotation are checked too, as the CLI checks them.
        if let Some(next) = field::opt_object(a, "next").map_err(about(&who))? {
            Keys::from_object(next).map_err(about(&format!("{who} next")))?;
        }
        let agent = Agent {
            // Held to the rule export holds it to: what comes in must go out again.
            house: house_url(field::str(a, "house").map_err(about(&who))?).map_err(about(&who))?,
            keys: Keys::from_object(a).map_err(about(&who))?,
            previous: previous_list(a, &who)?,
            address: addr,
        };
        push_once(&mut agents, agent)?;
    }
    let pins = pins(field::opt_object(&o, "pins")?)?;
    let agents = agents
        .iter()
        .map(|a| {
            Value::Object(obj([
                ("address", a.address.as_str().into()),
                ("house", a.house.as_str().into()),
                ("keys", Value::Object(a.keys.to_object())),
                ("previous", previous_value(&a.previous)),
            ]))
        })
        .collect();
    Ok(Value::Object(obj([("agents", Value::Array(agents)), ("pins", Value::Object(pins))])))
}
