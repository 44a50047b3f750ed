//! Holds for approval (docs/SPEC.md §7c): which of an agent's envelopes wait at its house for a
//! person, who may set or lift a hold, and who may approve. Pure: the house reads the holds of
//! the sender's tree, asks [`Hold::holds`], and writes what follows in one batch.
//!
//! A hold is set on an agent and covers its subagents too (a held agent could otherwise enrol a
//! subagent and send through it). Every hold of the tree that covers an envelope asks its own
//! approver; the envelope leaves once each has said yes.

use nyx5_proto::json::field;
use nyx5_proto::{Address, Error, Object, Refusal, Value};

/// The most entries a hold's `known`, `domains` or `types` list holds.
pub const MAX_HOLD_ENTRIES: usize = 100;

/// The most labels a local part has (64 characters, one-character labels): [`chain`] walks
/// them all, so no subagent is too deep for its tree's holds.
pub const MAX_CHAIN: usize = 32;

/// Where an envelope goes, as a hold judges it: its address, and whether it leaves the house
/// beyond its address (`exit`): a local recipient whose webhook pushes it elsewhere is at the
/// webhook's domain too, and an operation for the house's Libro or desk reaches whoever it names,
/// so it counts as a stranger at every domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub to: Address,
    pub exit: Exit,
}

/// How far a recipient's mail goes beyond its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Where its address says.
    Address,
    /// Also to this domain (a webhook's host).
    Domain(String),
    /// Anywhere: treat it as a stranger at every domain (an operation, whose receipts go to the
    /// parties it names).
    Anywhere,
}

/// What a hold covers: an envelope is held when any member says so.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hold {
    /// Every envelope.
    pub all: bool,
    /// Envelopes with a recipient outside this house who is not in `known`.
    pub strangers: bool,
    /// Addresses (`bo@sigo.uk`) and domains (`sigo.uk`) that are not strangers.
    pub known: Vec<String>,
    /// Envelopes with a recipient at one of these domains.
    pub domains: Vec<String>,
    /// Envelopes of one of these types (`message`, `task`, …).
    pub types: Vec<String>,
}

fn list(o: &Object, name: &str) -> Result<Vec<String>, Error> {
    let Some(items) = field::opt_array(o, name)? else { return Ok(Vec::new()) };
    if items.len() > MAX_HOLD_ENTRIES {
        return Err(Refusal::BadHold.because(format!("`{name}` holds at most {MAX_HOLD_ENTRIES} entries")));
    }
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(s)
                if !s.is_empty()
                    && s.len() <= 253
                    && !s.chars().any(|c| c.is_whitespace() || c.is_control())
                    && (name != "types" || nyx5_proto::envelope::Kind::parse(s).is_ok()) =>
            {
                Ok(s.to_ascii_lowercase())
            }
            _ if name == "types" => {
                Err(Refusal::BadHold.because("`types` lists envelope types: message, task, result, receipt, intro"))
            }
            _ if name == "types" => {
                Err(Refusal::BadHold.because("`types` lists envelope types: message, task, result, receipt, intro"))
            }
            _ => Err(Refusal::BadHold.because(format!("`{name}` lists non-empty strings without blanks"))),
        })
        .collect()
}

impl Hold {
    /// Reads `{all?, strangers?, known?, domains?, types?}`; nothing else, and at least one of
    /// `all`, `strangers`, `domains` or `types` (400 `bad_hold`).
    pub fn parse(o: &Object) -> Result<Hold, Error> {
        if let Some(k) = o.keys().find(|k| !["all", "strangers", "known", "domains", "types"].contains(&k.as_str())) {
            return Err(Refusal::BadHold.because(format!(
                "unknown member `{k}`: a hold says `all`, `strangers` (with `known`), `domains` or `types`"
            )));
        }
        let flag = |name: &str| field::opt_bool(o, name).map(|b| b.unwrap_or(false));
        let hold = Hold {
            all: flag("all")?,
            strangers: flag("strangers")?,
            known: list(o, "known")?,
            domains: list(o, "domains")?,
            types: list(o, "types")?,
        };
        if !hold.all && !hold.strangers && hold.domains.is_empty() && hold.types.is_empty() {
            return Err(
                Refusal::BadHold.because("a hold names what it holds: `all`, `strangers`, `domains` or `types`")
            );
        }
        if !hold.known.is_empty() && !hold.strangers {
            return Err(Refusal::BadHold.because("`known` says who is no stranger: it goes with `strangers: true`"));
        }
        Ok(hold)
    }

    /// The hold as JSON, members in a fixed order and empty ones left out.
    pub fn to_value(&self) -> Value {
        let mut o = Object::new();
        let strings = |l: &[String]| Value::Array(l.iter().map(|s| s.as_str().into()).collect());
        if self.all {
            o.insert("all".into(), Value::Bool(true));
        }
        if self.strangers {
            o.insert("strangers".into(), Value::Bool(true));
        }
        for (name, l) in [("known", &self.known), ("domains", &self.domains), ("types", &self.types)] {
            if !l.is_empty() {
                o.insert(name.into(), strings(l));
            }
        }
        Value::Object(o)
    }

    /// Whether an envelope of type `kind` to `to` (as [`Bound`]), sent from `house`, waits under
    /// this hold. A domain named covers its subdomains; an address or domain `known` covers
    /// that address, or everyone at that domain and its subdomains.
    pub fn holds(&self, to: &[Bound], kind: &str, house: &str) -> bool {
        let under = |domain: &str, d: &str| domain == d || domain.strip_suffix(d).is_some_and(|r| r.ends_with('.'));
        let named = |domain: &str| self.domains.iter().any(|d| under(domain, d));
        let known_at = |domain: &str| self.known.iter().any(|k| !k.contains('@') && under(domain, k));
        let stranger_at = |domain: &str| domain != house && !known_at(domain);
        let stranger = |a: &Address| stranger_at(a.domain()) && !self.known.iter().any(|k| k == a.as_str());
        let covers = |b: &Bound| match &b.exit {
            Exit::Anywhere => !self.domains.is_empty() || self.strangers,
            Exit::Domain(d) => {
                named(b.to.domain()) || named(d) || (self.strangers && (stranger(&b.to) || stranger_at(d)))
            }
            Exit::Address => named(b.to.domain()) || (self.strangers && stranger(&b.to)),
        };
        self.all || self.types.iter().any(|t| t == kind) || to.iter().any(covers)
    }
}

/// Who set a hold, or asks to: the operator, or an agent of the house.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setter {
    Operator,
    Agent(String),
}

impl Setter {
    /// As stored: `operator`, or the agent's local part.
    pub fn as_str(&self) -> &str {
        match self {
            Setter::Operator => "operator",
            Setter::Agent(local) => local,
        }
    }

    /// Reads what [`Setter::as_str`] wrote.
    pub fn parse(s: &str) -> Setter {
        if s == "operator" { Setter::Operator } else { Setter::Agent(s.to_owned()) }
    }
}

/// Whether `above` is `below` or an agent above it (`ana` over `x.ana` and `y.x.ana`).
pub fn is_self_or_above(above: &str, below: &str) -> bool {
    below == above || below.strip_suffix(above).is_some_and(|rest| rest.ends_with('.'))
}

/// The local parts a hold of `local`'s tree may sit on: itself and every agent above it,
/// nearest first (`y.x.ana` → `y.x.ana`, `x.ana`, `ana`), however deep.
pub fn chain(local: &str) -> Vec<&str> {
    let mut out = vec![local];
    let mut rest = local;
    while let Some((_, up)) = rest.split_once('.') {
        out.push(up);
        rest = up;
    }
    out
}

/// May `actor` set a hold on `held` (a local part) where `existing` (who set the one there, if
/// any) is? The agent itself sets one only where none is (and cannot change it after); an
/// agent above it, or the operator, sets or replaces one set by someone no higher than itself.
pub fn may_set(actor: &Setter, held: &str, existing: Option<&Setter>) -> Result<(), Error> {
    match (actor, existing) {
        (Setter::Operator, _) => Ok(()),
        (Setter::Agent(a), None) if is_self_or_above(a, held) => Ok(()),
        (Setter::Agent(a), Some(_)) if a == held => Err(Refusal::HoldIrrevocable
            .because(format!("{held} is held: only an agent above it or the operator may change that"))),
        (Setter::Agent(a), Some(set_by)) if is_self_or_above(a, held) => outranks(a, set_by),
        (Setter::Agent(a), _) => Err(Refusal::NotYourHold.because(format!("{a} is not {held} nor an agent above it"))),
    }
}

/// May `actor` lift the hold on `held` that `set_by` set? Never the agent itself; an agent above
/// it when the one who set it is no higher than itself; the operator always.
pub fn may_lift(actor: &Setter, held: &str, set_by: &Setter) -> Result<(), Error> {
    match actor {
        Setter::Operator => Ok(()),
        Setter::Agent(a) if a == held => Err(Refusal::HoldIrrevocable
            .because(format!("{held} cannot lift its own hold: only an agent above it or the operator can"))),
        Setter::Agent(a) if is_self_or_above(a, held) => outranks(a, set_by),
        Setter::Agent(a) => Err(Refusal::NotYourHold.because(format!("{a} is not an agent above {held}"))),
    }
}

fn outranks(actor: &str, set_by: &Setter) -> Result<(), Error> {
    match set_by {
        Setter::Agent(s) if is_self_or_above(actor, s) => Ok(()),
        Setter::Agent(s) => Err(Refusal::NotYourHold.because(format!("the hold was set by {s}, above {actor}"))),
        Setter::Operator => Err(Refusal::NotYourHold.because("the hold was set by the operator")),
    }
}

/// Whether `approver` may approve what `held` (a local part of `house`) sends: an agent of this
/// house that is neither `held` nor one of its subagents (which `held` controls).
pub fn check_approver(approver: &Address, held: &str, house: &str) -> Result<(), Error> {
    if approver.domain() != house {
        return Err(Refusal::BadHold.because(format!("the approver {approver} is not an agent of {house}")));
    }
    if is_self_or_above(held, approver.local()) {
        return Err(Refusal::BadHold
            .because(format!("{approver} is {held} or one of its subagents: a hold's approver is someone else")));
    }
    Ok(())
}

/// A tree's hold version as the outbox's trigger computes it (`max(seq):count` over the root's
/// holds, migration 0030): any hold set or lifted in the tree changes it, as `seq` only grows.
pub fn version(seqs: &[i64]) -> String {
    format!("{}:{}", seqs.iter().max().copied().unwrap_or(0), seqs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    fn hold(json: &str) -> Result<Hold, Error> {
        Hold::parse(Value::parse_str(json).unwrap().as_object().unwrap())
    }

    #[test]
    fn a_hold_holds_what_its_members_name_and_nothing_else() {
        let house = "h.test";
        let to = |l: &[&str]| l.iter().map(|s| Bound { to: a(s), exit: Exit::Address }).collect::<Vec<_>>();
        let all = hold(r#"{"all":true}"#).unwrap();
        assert!(all.holds(&to(&["bo@h.test"]), "message", house));
        let strangers = hold(r#"{"strangers":true,"known":["Bo@Sigo.uk","friends.example"]}"#).unwrap();
        assert_eq!(strangers.known, ["bo@sigo.uk", "friends.example"]);
        assert!(!strangers.holds(&to(&["cy@h.test"]), "message", house), "at this house: no stranger");
        assert!(!strangers.holds(&to(&["bo@sigo.uk", "x@friends.example"]), "message", house));
        assert!(strangers.holds(&to(&["bo@sigo.uk", "cy@sigo.uk"]), "message", house), "one stranger is enough");
        let domains = hold(r#"{"domains":["sigo.uk"]}"#).unwrap();
        assert!(domains.holds(&to(&["cy@h.test", "bo@sigo.uk"]), "message", house));
        assert!(domains.holds(&to(&["bo@mail.sigo.uk"]), "message", house), "a subdomain is covered");
        assert!(!domains.holds(&to(&["cy@h.test", "bo@other.uk", "x@notsigo.uk"]), "message", house));
        // A known domain covers its subdomains too.
        assert!(!strangers.holds(&to(&["x@eu.friends.example"]), "message", house));
        // A local recipient whose webhook pushes elsewhere is a stranger there, and at its domain.
        let hooked = |d: &str| vec![Bound { to: a("cy@h.test"), exit: Exit::Domain(d.into()) }];
        assert!(strangers.holds(&hooked("evil.example"), "message", house));
        assert!(!strangers.holds(&hooked("friends.example"), "message", house));
        assert!(domains.holds(&hooked("sigo.uk"), "message", house));
        // An operation reaches whoever it names: held by `strangers` and `domains` alike.
        let op = vec![Bound { to: a("libro@h.test"), exit: Exit::Anywhere }];
        assert!(strangers.holds(&op, "task", house) && domains.holds(&op, "task", house));
        assert!(!hold(r#"{"types":["result"]}"#).unwrap().holds(&op, "task", house));
        let types = hold(r#"{"types":["task"]}"#).unwrap();
        assert!(types.holds(&to(&["cy@h.test"]), "task", house));
        assert!(!types.holds(&to(&["cy@h.test"]), "message", house));
        // The JSON round-trips.
        assert_eq!(Hold::parse(strangers.to_value().as_object().unwrap()).unwrap(), strangers);
    }

    #[test]
    fn a_hold_that_holds_nothing_or_says_more_is_refused() {
        for bad in [
            r#"{}"#,
            r#"{"all":false}"#,
            r#"{"known":["a.uk"]}"#,
            r#"{"all":true,"known":["a.uk"]}"#,
            r#"{"all":true,"also":1}"#,
            r#"{"domains":[""]}"#,
            r#"{"domains":["a b"]}"#,
            r#"{"types":[3]}"#,
            r#"{"types":["libro"]}"#,
        ] {
            assert_eq!(hold(bad).unwrap_err().refusal(), Some(Refusal::BadHold), "{bad}");
        }
        let many = format!(r#"{{"domains":[{}]}}"#, vec!["\"d.uk\""; MAX_HOLD_ENTRIES + 1].join(","));
        assert_eq!(hold(&many).unwrap_err().refusal(), Some(Refusal::BadHold));
    }

    #[test]
    fn chains_and_who_is_above_whom() {
        assert_eq!(chain("y.x.ana"), ["y.x.ana", "x.ana", "ana"]);
        assert_eq!(chain("ana"), ["ana"]);
        let deep = format!("{}ana", "x.".repeat(MAX_CHAIN - 1));
        assert_eq!(chain(&deep).len(), MAX_CHAIN, "every label, however deep");
        assert_eq!(chain(&deep).last(), Some(&"ana"));
        assert!(is_self_or_above("ana", "x.ana") && is_self_or_above("ana", "ana"));
        assert!(!is_self_or_above("ana", "xana") && !is_self_or_above("x.ana", "ana"));
        assert!(!is_self_or_above("na", "x.ana"), "a suffix is not a parent");
    }

    #[test]
    fn who_may_set_and_lift() {
        let op = Setter::Operator;
        let me = |s: &str| Setter::Agent(s.to_owned());
        // The agent itself: once, and never again, and never lifts.
        assert!(may_set(&me("x.ana"), "x.ana", None).is_ok());
        assert_eq!(
            may_set(&me("x.ana"), "x.ana", Some(&me("x.ana"))).unwrap_err().refusal(),
            Some(Refusal::HoldIrrevocable)
        );
        assert_eq!(
            may_lift(&me("x.ana"), "x.ana", &me("x.ana")).unwrap_err().refusal(),
            Some(Refusal::HoldIrrevocable)
        );
        // Its parent: replaces or lifts what it or the agent set, not what the operator or its own parent set.
        assert!(may_set(&me("x.ana"), "y.x.ana", Some(&me("y.x.ana"))).is_ok());
        assert!(may_lift(&me("x.ana"), "y.x.ana", &me("x.ana")).is_ok());
        assert_eq!(may_lift(&me("x.ana"), "y.x.ana", &me("ana")).unwrap_err().refusal(), Some(Refusal::NotYourHold));
        assert_eq!(may_lift(&me("ana"), "x.ana", &op).unwrap_err().refusal(), Some(Refusal::NotYourHold));
        assert!(may_lift(&me("ana"), "y.x.ana", &me("x.ana")).is_ok());
        // Strangers to the tree: nothing.
        assert_eq!(may_set(&me("bo"), "x.ana", None).unwrap_err().refusal(), Some(Refusal::NotYourHold));
        assert_eq!(may_set(&me("y.x.ana"), "x.ana", None).unwrap_err().refusal(), Some(Refusal::NotYourHold));
        // The operator: always.
        assert!(may_set(&op, "ana", Some(&me("ana"))).is_ok() && may_lift(&op, "ana", &me("ana")).is_ok());
        assert_eq!(Setter::parse(op.as_str()), op);
        assert_eq!(Setter::parse(me("ana").as_str()), me("ana"));
    }

    #[test]
    fn an_approver_is_someone_else_of_this_house() {
        assert!(check_approver(&a("ana@h.test"), "x.ana", "h.test").is_ok());
        assert!(check_approver(&a("bo@h.test"), "ana", "h.test").is_ok());
        for (approver, held) in [("ana@h.test", "ana"), ("x.ana@h.test", "ana"), ("bo@other.test", "ana")] {
            assert_eq!(
                check_approver(&a(approver), held, "h.test").unwrap_err().refusal(),
                Some(Refusal::BadHold),
                "{approver} for {held}"
            );
        }
        assert_eq!(version(&[]), "0:0");
        assert_eq!(version(&[3, 9, 4]), "9:3");
    }
}
