//! Authority (docs/SPEC.md "Authority"): how far something may go on its own, by level, by
//! consequence, by amount and by rate, and the evidence a claim that moves money carries.
//!
//! An [`Authority`] is a ceiling a grantor sets: on a mandate (what its grantee may charge), on a
//! delegated card's scope (what a subagent may commit), on a wrapped MCP tool (`nyx5 mcp
//! --wrap`). [`Authority::judge`] decides one concrete movement against it: allowed now, asked of
//! a human first, or refused whoever asks. Pure: the caller says what the hour already used.

use crate::json::{field, obj};
use crate::{Error, Object, Refusal, Value, limits};

/// Most bytes of an authority's `rationale`.
pub const MAX_RATIONALE_BYTES: usize = 512;
/// The largest `max_per_hour`.
pub const MAX_PER_HOUR: i64 = 10_000;
/// The window `max_per_hour` counts in, in milliseconds (a rolling hour).
pub const HOUR_MS: i64 = 3_600_000;

/// How far something goes on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// It acts alone, within the authority's limits.
    Autonomous,
    /// It prepares; a human approves before it happens.
    NeedsApproval,
    /// Never, whoever asks.
    Prohibited,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Autonomous, Level::NeedsApproval, Level::Prohibited];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Autonomous => "autonomous",
            Level::NeedsApproval => "needs_approval",
            Level::Prohibited => "prohibited",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// How grave a mistake is. On an authority it is the gravest consequence the authority covers:
/// a graver movement is asked of a human first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Consequence {
    /// Undone by a later step (an escrow held, a mandate granted).
    Reversible,
    /// Money paid to someone else (a charge, a spot purchase, a bond that may be forfeited).
    Costly,
    /// Not undone at all (what a wrapped tool deletes or sends).
    Irreversible,
}

impl Consequence {
    pub const ALL: [Consequence; 3] = [Consequence::Reversible, Consequence::Costly, Consequence::Irreversible];

    pub fn as_str(self) -> &'static str {
        match self {
            Consequence::Reversible => "reversible",
            Consequence::Costly => "costly",
            Consequence::Irreversible => "irreversible",
        }
    }

    pub fn parse(s: &str) -> Option<Consequence> {
        Consequence::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// `{level, consequence, max_amount?, currency?, max_per_hour?, rationale?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub level: Level,
    pub consequence: Consequence,
    /// Most per movement that goes alone; above it, a human is asked.
    pub max_amount: Option<i64>,
    /// The currency of `max_amount`: required with it ("500" means nothing).
    pub currency: Option<String>,
    /// Most movements in a rolling hour that go alone; beyond them, a human is asked.
    pub max_per_hour: Option<i64>,
    /// Why it was granted so; shown to whoever approves.
    pub rationale: Option<String>,
}

/// The members an authority may have.
const MEMBERS: [&str; 6] = ["level", "consequence", "max_amount", "currency", "max_per_hour", "rationale"];

/// One concrete movement to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intent<'a> {
    /// What it moves, if it moves money.
    pub amount: Option<i64>,
    pub currency: Option<&'a str>,
    pub consequence: Consequence,
    /// Movements this authority already allowed in the past hour.
    pub hour_ops: i64,
    /// A human approved this very movement (it never lifts `prohibited`).
    pub approved: bool,
}

/// What an authority says of one movement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// A human must approve it first; why.
    Ask(String),
    /// Never; why (403).
    Refused(Error),
}

impl Authority {
    /// The autonomous authority with no limits: what holds where none is declared.
    pub fn unlimited() -> Authority {
        Authority {
            level: Level::Autonomous,
            consequence: Consequence::Irreversible,
            max_amount: None,
            currency: None,
            max_per_hour: None,
            rationale: None,
        }
    }

    /// Reads and checks an authority (400 for anything it cannot mean).
    pub fn from_value(v: &Value) -> Result<Authority, Error> {
        let o = v.as_object().ok_or_else(|| Refusal::BadAuthority.because("an authority is an object"))?;
        Authority::from_object(o)
    }

    pub fn from_object(o: &Object) -> Result<Authority, Error> {
        if let Some(k) = o.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
            return Err(Refusal::BadAuthority.because(format!("an authority has no member {k:?}")));
        }
        let level = field::str(o, "level")?;
        let level = Level::parse(level).ok_or_else(|| {
            Refusal::BadAuthority
                .because(format!("an authority's level is autonomous, needs_approval or prohibited, not {level:?}"))
        })?;
        let consequence = field::str(o, "consequence")?;
        let consequence = Consequence::parse(consequence).ok_or_else(|| {
            Refusal::BadAuthority.because(format!(
                "an authority's consequence is reversible, costly or irreversible, not {consequence:?}"
            ))
        })?;
        let max_amount = field::opt_integer(o, "max_amount")?;
        if max_amount.is_some_and(|a| !(1..=limits::MAX_AMOUNT).contains(&a)) {
            return Err(Refusal::BadAuthority.because("an authority's max_amount is a whole number from 1 to 2^53 - 1"));
        }
        let currency = field::opt_str(o, "currency")?.map(str::to_owned);
        if currency
            .as_ref()
            .is_some_and(|c| c.is_empty() || c.len() > 16 || !c.bytes().all(|b| b.is_ascii_alphanumeric()))
        {
            return Err(Refusal::BadAuthority.because("an authority's currency is a short code such as tok"));
        }
        let max_per_hour = field::opt_integer(o, "max_per_hour")?;
        if max_per_hour.is_some_and(|n| !(1..=MAX_PER_HOUR).contains(&n)) {
            return Err(Refusal::BadAuthority.because(format!("an authority's max_per_hour is 1 to {MAX_PER_HOUR}")));
        }
        let rationale = field::opt_str(o, "rationale")?.map(str::to_owned);
        if rationale.as_ref().is_some_and(|r| r.len() > MAX_RATIONALE_BYTES) {
            return Err(Refusal::BadAuthority
                .because(format!("an authority's rationale is at most {MAX_RATIONALE_BYTES} bytes")));
        }
        let a = Authority { level, consequence, max_amount, currency, max_per_hour, rationale };
        a.check()?;
        Ok(a)
    }

    /// The rules every declared authority keeps, each closing one way to cause harm: a cap names
    /// its currency; what acts alone covers nothing irreversible; what acts alone on costly
    /// movements has a cap per movement.
    pub fn check(&self) -> Result<(), Error> {
        if self.max_amount.is_some() && self.currency.is_none() {
            return Err(Refusal::BadAuthority
                .because("an authority's max_amount needs its currency: \"500\" alone means nothing"));
        }
        if self.level == Level::Autonomous && self.consequence == Consequence::Irreversible {
            return Err(Refusal::BadAuthority.because(
                "an authority that acts alone cannot cover irreversible consequences; make it needs_approval",
            ));
        }
        if self.level == Level::Autonomous && self.consequence == Consequence::Costly && self.max_amount.is_none() {
            return Err(
                Refusal::BadAuthority.because("an authority that acts alone on costly movements needs a max_amount")
            );
        }
        Ok(())
    }

    pub fn to_value(&self) -> Value {
        let mut o = obj([("level", self.level.as_str().into()), ("consequence", self.consequence.as_str().into())]);
        if let Some(a) = self.max_amount {
            o.insert("max_amount".into(), a.into());
        }
        if let Some(c) = &self.currency {
            o.insert("currency".into(), c.as_str().into());
        }
        if let Some(n) = self.max_per_hour {
            o.insert("max_per_hour".into(), n.into());
        }
        if let Some(r) = &self.rationale {
            o.insert("rationale".into(), r.as_str().into());
        }
        Value::Object(o)
    }

    /// Whether `self` is at least as strict as `other` in every respect: as high a level, no
    /// graver consequence covered, no larger cap (none under a cap is larger), no higher rate.
    pub fn within(&self, other: &Authority) -> bool {
        fn at_most(mine: Option<i64>, theirs: Option<i64>) -> bool {
            match (mine, theirs) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(m), Some(t)) => m <= t,
            }
        }
        // A cap counts in its ceiling's currency, whether the ceiling caps an amount or only
        // names the currency.
        let same_currency = match (&self.max_amount, &other.currency) {
            (Some(_), Some(_)) => self.currency == other.currency,
            _ => true,
        };
        self.level >= other.level
            && self.consequence <= other.consequence
            && at_most(self.max_amount, other.max_amount)
            && same_currency
            && at_most(self.max_per_hour, other.max_per_hour)
    }

    /// `self` declared under `parent` (a sub-mandate under its parent, a mandate under its
    /// grantor's own authority, a subagent's under its parent's): refused (403) where it names
    /// something looser than the parent; otherwise the strictest of both, so what it leaves
    /// unsaid comes from the parent.
    pub fn under(&self, parent: &Authority) -> Result<Authority, Error> {
        let looser = |what: &str| {
            Err(Refusal::AuthorityTooLoose.because(format!("its authority may not be looser than {what}")))
        };
        if self.level < parent.level {
            return looser(&format!("its ceiling's level ({})", parent.level.as_str()));
        }
        if self.consequence > parent.consequence {
            return looser(&format!("its ceiling's consequence ({})", parent.consequence.as_str()));
        }
        if let (Some(mine), Some(theirs)) = (self.max_amount, parent.max_amount)
            && mine > theirs
        {
            return looser(&format!("its ceiling's max_amount ({theirs})"));
        }
        if self.max_amount.is_some() && parent.currency.is_some() && self.currency != parent.currency {
            return looser("its ceiling's currency");
        }
        if let (Some(mine), Some(theirs)) = (self.max_per_hour, parent.max_per_hour)
            && mine > theirs
        {
            return looser(&format!("its ceiling's max_per_hour ({theirs})"));
        }
        let both = self.strictest(parent);
        both.check()?;
        Ok(both)
    }

    /// The strictest of two authorities: what a movement under both must keep. A workflow's
    /// authority is the strictest of its steps'; a sub-mandate's, of its own and its parent's.
    pub fn strictest(&self, other: &Authority) -> Authority {
        fn least(a: Option<i64>, b: Option<i64>) -> Option<i64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        let max_amount = least(self.max_amount, other.max_amount);
        let currency = match (self.max_amount, other.max_amount) {
            (Some(a), Some(b)) if b < a => other.currency.clone(),
            (Some(_), _) => self.currency.clone(),
            (None, Some(_)) => other.currency.clone(),
            (None, None) => self.currency.clone().or_else(|| other.currency.clone()),
        };
        Authority {
            level: self.level.max(other.level),
            consequence: self.consequence.min(other.consequence),
            max_amount,
            currency,
            max_per_hour: least(self.max_per_hour, other.max_per_hour),
            rationale: self.rationale.clone().or_else(|| other.rationale.clone()),
        }
    }

    /// Judges one movement: refused if prohibited (or in a currency the cap does not count);
    /// otherwise allowed if a human approved it, or if it keeps within the level, the
    /// consequence, the cap and the hour; else asked.
    pub fn judge(&self, i: &Intent<'_>) -> Verdict {
        if self.level == Level::Prohibited {
            return Verdict::Refused(Refusal::ProhibitedByAuthority.because(match &self.rationale {
                Some(r) => format!("prohibited by its authority ({r})"),
                None => "prohibited by its authority".to_owned(),
            }));
        }
        if let (Some(_), Some(mine), Some(theirs)) = (i.amount, self.currency.as_deref(), i.currency)
            && mine != theirs
        {
            return Verdict::Refused(
                Refusal::AuthorityOtherCurrency
                    .because(format!("its authority counts {mine}, and this moves {theirs}")),
            );
        }
        if i.approved {
            return Verdict::Allowed;
        }
        if self.level == Level::NeedsApproval {
            return Verdict::Ask("its authority needs approval for every movement".to_owned());
        }
        if i.consequence > self.consequence {
            return Verdict::Ask(format!(
                "a {} movement, and its authority covers {} ones alone",
                i.consequence.as_str(),
                self.consequence.as_str()
            ));
        }
        if let (Some(amount), Some(max)) = (i.amount, self.max_amount)
            && amount > max
        {
            let currency = self.currency.as_deref().unwrap_or_default();
            return Verdict::Ask(format!("{amount} {currency} is above the {max} {currency} it may move alone"));
        }
        if let Some(n) = self.max_per_hour
            && i.hour_ops >= n
        {
            return Verdict::Ask(format!("{n} movements in the past hour is as many as it may make alone"));
        }
        Verdict::Allowed
    }
}

/// Where a claim's support comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceKind {
    /// A document or page it cites.
    Source,
    /// A computation anyone can repeat.
    Calculation,
    /// What the user said.
    User,
    /// Another system's answer.
    External,
    /// The agent's own inference.
    Inference,
}

impl EvidenceKind {
    pub const ALL: [EvidenceKind; 5] = [
        EvidenceKind::Source,
        EvidenceKind::Calculation,
        EvidenceKind::User,
        EvidenceKind::External,
        EvidenceKind::Inference,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Source => "source",
            EvidenceKind::Calculation => "calculation",
            EvidenceKind::User => "user",
            EvidenceKind::External => "external",
            EvidenceKind::Inference => "inference",
        }
    }

    pub fn parse(s: &str) -> Result<EvidenceKind, Error> {
        EvidenceKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            Refusal::BadEvidence
                .because(format!("an evidence kind is source, calculation, user, external or inference, not {s:?}"))
        })
    }
}

/// A contract's `terms.evidence`: `{accepts: [kind…], required?: bool}`. What a claim on it
/// must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidencePolicy {
    pub accepts: Vec<EvidenceKind>,
    pub required: bool,
}

impl EvidencePolicy {
    /// Reads `terms.evidence` (absent: no policy).
    pub fn of_terms(terms: Option<&Object>) -> Result<Option<EvidencePolicy>, Error> {
        let Some(e) = terms.and_then(|t| t.get("evidence")) else { return Ok(None) };
        let e =
            e.as_object().ok_or_else(|| Refusal::BadEvidence.because("`terms.evidence` is {accepts, required?}"))?;
        let list = field::array(e, "accepts")?;
        if list.is_empty() || list.len() > EvidenceKind::ALL.len() {
            return Err(Refusal::BadEvidence.because("`terms.evidence.accepts` lists one to five evidence kinds"));
        }
        let mut accepts = Vec::new();
        for k in list {
            let k = EvidenceKind::parse(k.as_str().unwrap_or_default())?;
            if !accepts.contains(&k) {
                accepts.push(k);
            }
        }
        let required = field::opt_bool(e, "required")?.unwrap_or(true);
        Ok(Some(EvidencePolicy { accepts, required }))
    }

    /// Whether a claim carrying `kind` (and `hash`, the evidence's SHA-256) keeps the policy;
    /// the refusal says what was missing.
    pub fn admits(&self, kind: Option<EvidenceKind>, hash: Option<&str>) -> Result<(), Error> {
        let wanted = || self.accepts.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
        match kind {
            Some(k) if !self.accepts.contains(&k) => Err(Refusal::EvidenceRequired.because(format!(
                "the terms accept evidence of kind {}; this claim's is {}",
                wanted(),
                k.as_str()
            ))),
            Some(_) if self.required && hash.is_none() => Err(Refusal::EvidenceRequired
                .because("the terms require evidence: give evidence_sha256 with its evidence_kind")),
            None if self.required => Err(Refusal::EvidenceRequired.because(format!(
                "the terms require evidence of kind {}; this claim carries none (evidence_kind, evidence_sha256)",
                wanted()
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(text: &str) -> Result<Authority, Error> {
        Authority::from_value(&Value::parse_str(text).unwrap())
    }

    fn intent(amount: i64, consequence: Consequence, hour_ops: i64) -> Intent<'static> {
        Intent { amount: Some(amount), currency: Some("tok"), consequence, hour_ops, approved: false }
    }

    #[test]
    fn declarations_that_mean_nothing_or_harm_are_refused() {
        for bad in [
            r#"{"level":"autonomous","consequence":"reversible","max_amount":500}"#,
            r#"{"level":"autonomous","consequence":"irreversible"}"#,
            r#"{"level":"autonomous","consequence":"costly"}"#,
            r#"{"level":"sometimes","consequence":"costly"}"#,
            r#"{"level":"autonomous","consequence":"cheap"}"#,
            r#"{"level":"autonomous","consequence":"reversible","max_per_hour":0}"#,
            r#"{"level":"autonomous","consequence":"reversible","max_amount":0,"currency":"tok"}"#,
            r#"{"level":"autonomous","consequence":"reversible","extra":1}"#,
            r#"{"level":"autonomous","consequence":"reversible","currency":"t o k"}"#,
            r#"{"consequence":"reversible"}"#,
        ] {
            assert_eq!(a(bad).unwrap_err().code(), 400, "{bad}");
        }
        let ok = a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":3,"rationale":"gpu"}"#)
            .unwrap();
        assert_eq!(Authority::from_value(&ok.to_value()).unwrap(), ok);
        assert!(a(r#"{"level":"needs_approval","consequence":"irreversible"}"#).is_ok());
    }

    #[test]
    fn each_level_and_consequence_judges_as_pinned() {
        let alone =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":2}"#)
                .unwrap();
        assert_eq!(alone.judge(&intent(50, Consequence::Costly, 1)), Verdict::Allowed);
        assert!(
            matches!(alone.judge(&intent(51, Consequence::Costly, 0)), Verdict::Ask(r) if r.contains("above the 50"))
        );
        assert!(matches!(alone.judge(&intent(5, Consequence::Costly, 2)), Verdict::Ask(r) if r.contains("past hour")));
        assert!(matches!(alone.judge(&intent(5, Consequence::Irreversible, 0)), Verdict::Ask(_)));
        // Approval lifts every gate but prohibition, for this movement only.
        let approved = Intent { approved: true, ..intent(500, Consequence::Irreversible, 9) };
        assert_eq!(alone.judge(&approved), Verdict::Allowed);
        let reversible = a(r#"{"level":"autonomous","consequence":"reversible"}"#).unwrap();
        assert_eq!(reversible.judge(&intent(1_000, Consequence::Reversible, 0)), Verdict::Allowed);
        assert!(matches!(reversible.judge(&intent(1, Consequence::Costly, 0)), Verdict::Ask(_)));
        let ask = a(r#"{"level":"needs_approval","consequence":"irreversible"}"#).unwrap();
        assert!(matches!(ask.judge(&intent(1, Consequence::Reversible, 0)), Verdict::Ask(_)));
        let never = a(r#"{"level":"prohibited","consequence":"reversible","rationale":"no gambling"}"#).unwrap();
        for approved in [false, true] {
            let Verdict::Refused(e) = never.judge(&Intent { approved, ..intent(1, Consequence::Reversible, 0) }) else {
                panic!("prohibited is refused")
            };
            assert_eq!((e.code(), e.refusal()), (403, Some(Refusal::ProhibitedByAuthority)));
            assert!(e.reason.contains("no gambling"), "the reason quotes the rationale");
        }
        let usd = a(r#"{"level":"autonomous","consequence":"costly","max_amount":5,"currency":"usd"}"#).unwrap();
        assert!(matches!(usd.judge(&intent(1, Consequence::Costly, 0)), Verdict::Refused(_)));
    }

    #[test]
    fn ceilings_compose_to_the_strictest() {
        let parent =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":5}"#)
                .unwrap();
        let tighter = a(r#"{"level":"autonomous","consequence":"costly","max_amount":20,"currency":"tok"}"#).unwrap();
        let asks = a(r#"{"level":"needs_approval","consequence":"reversible"}"#).unwrap();
        let looser =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":80,"currency":"tok","max_per_hour":5}"#)
                .unwrap();
        assert!(parent.within(&parent) && !looser.within(&parent));
        // No rate under a rate is looser; so is a lower level.
        assert!(!tighter.within(&parent));
        assert!(!asks.within(&parent));
        // Declared under a ceiling: what it leaves unsaid comes from the parent; what it loosens
        // is refused.
        let under = asks.under(&parent).unwrap();
        assert_eq!((under.level, under.max_amount, under.max_per_hour), (Level::NeedsApproval, Some(50), Some(5)));
        assert!(under.within(&parent));
        assert_eq!(looser.under(&parent).unwrap_err().code(), 403);
        // A ceiling that only names its currency still binds a cap below it to that currency.
        let in_tok = a(r#"{"level":"needs_approval","consequence":"costly","currency":"tok"}"#).unwrap();
        let in_usd = a(r#"{"level":"needs_approval","consequence":"costly","max_amount":5,"currency":"usd"}"#).unwrap();
        let e = in_usd.under(&in_tok).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::AuthorityTooLoose));
        assert!(e.reason.contains("currency"), "the reason names the member");
        assert!(!in_usd.within(&in_tok));
        let graver = a(r#"{"level":"needs_approval","consequence":"irreversible"}"#).unwrap();
        let e = graver.under(&parent).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::AuthorityTooLoose));
        assert!(e.reason.contains("consequence"), "the reason names the member");
        assert_eq!(tighter.under(&parent).unwrap().max_per_hour, Some(5));
        assert!(parent.within(&Authority::unlimited()) && !Authority::unlimited().within(&parent));
        let both = tighter.strictest(&parent);
        assert_eq!((both.max_amount, both.max_per_hour, both.level), (Some(20), Some(5), Level::Autonomous));
        assert!(both.within(&parent) && both.within(&tighter));
        let worst = both.strictest(&asks);
        assert_eq!((worst.level, worst.consequence), (Level::NeedsApproval, Consequence::Reversible));
        assert!(worst.within(&both) && worst.within(&asks));
    }

    #[test]
    fn the_bounds_of_a_declaration_are_exact() {
        let with = |member: &str| a(&format!(r#"{{"level":"needs_approval","consequence":"costly",{member}}}"#));
        assert!(with(&format!(r#""currency":"{}""#, "t".repeat(16))).is_ok());
        for bad in [String::new(), "t".repeat(17), "t-k".into()] {
            assert!(with(&format!(r#""currency":"{bad}""#)).is_err(), "{bad:?}");
        }
        assert!(with(&format!(r#""rationale":"{}""#, "r".repeat(MAX_RATIONALE_BYTES))).is_ok());
        assert!(with(&format!(r#""rationale":"{}""#, "r".repeat(MAX_RATIONALE_BYTES + 1))).is_err());
        assert!(with(&format!(r#""max_per_hour":{MAX_PER_HOUR}"#)).is_ok());
        assert!(with(&format!(r#""max_per_hour":{}"#, MAX_PER_HOUR + 1)).is_err());
    }

    #[test]
    fn under_a_ceiling_equal_is_not_looser_and_the_binding_cap_keeps_its_currency() {
        let parent =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":5}"#)
                .unwrap();
        let same =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":5}"#)
                .unwrap();
        assert_eq!(same.under(&parent).unwrap(), parent);
        let faster =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":6}"#)
                .unwrap();
        let e = faster.under(&parent).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::AuthorityTooLoose));
        assert!(e.reason.contains("max_per_hour"), "the reason names the member");
        let slower =
            a(r#"{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok","max_per_hour":4}"#)
                .unwrap();
        assert_eq!(slower.under(&parent).unwrap().max_per_hour, Some(4));
        // Whichever way round, the strictest cap is the smaller one, in its own currency.
        let usd = a(r#"{"level":"needs_approval","consequence":"costly","max_amount":20,"currency":"usd"}"#).unwrap();
        for (x, y) in [(&parent, &usd), (&usd, &parent)] {
            let both = x.strictest(y);
            assert_eq!((both.max_amount, both.currency.as_deref()), (Some(20), Some("usd")));
        }
        let tok30 = a(r#"{"level":"needs_approval","consequence":"costly","max_amount":30,"currency":"tok"}"#).unwrap();
        let eur40 = a(r#"{"level":"needs_approval","consequence":"costly","max_amount":40,"currency":"eur"}"#).unwrap();
        assert_eq!(eur40.strictest(&tok30).currency.as_deref(), Some("tok"));
        assert_eq!(tok30.strictest(&eur40).currency.as_deref(), Some("tok"));
    }

    #[test]
    fn evidence_policies_say_what_is_missing() {
        let terms = Value::parse_str(r#"{"evidence":{"accepts":["source","calculation"]}}"#).unwrap();
        let p = EvidencePolicy::of_terms(terms.as_object()).unwrap().unwrap();
        assert!(p.required);
        let h = Some("ab");
        assert!(p.admits(Some(EvidenceKind::Source), h).is_ok());
        assert_eq!(p.admits(None, h).unwrap_err().refusal(), Some(Refusal::EvidenceRequired));
        assert_eq!(p.admits(Some(EvidenceKind::Inference), h).unwrap_err().refusal(), Some(Refusal::EvidenceRequired));
        assert!(p.admits(Some(EvidenceKind::Source), None).is_err());
        let optional = EvidencePolicy { required: false, ..p };
        assert!(optional.admits(None, None).is_ok());
        assert!(optional.admits(Some(EvidenceKind::User), None).is_err());
        let all = r#"{"evidence":{"accepts":["source","calculation","user","external","inference"]}}"#;
        assert_eq!(
            EvidencePolicy::of_terms(Value::parse_str(all).unwrap().as_object()).unwrap().unwrap().accepts.len(),
            5
        );
        let six = r#"{"evidence":{"accepts":["source","calculation","user","external","inference","user"]}}"#;
        for bad in [r#"{"evidence":{"accepts":[]}}"#, r#"{"evidence":{"accepts":["vibes"]}}"#, r#"{"evidence":1}"#, six]
        {
            let t = Value::parse_str(bad).unwrap();
            assert!(EvidencePolicy::of_terms(t.as_object()).is_err(), "{bad}");
        }
        assert_eq!(EvidencePolicy::of_terms(None).unwrap(), None);
    }
}
