//! An agent's public history (spec §21, docs/SPEC.md §21): counts over its contracts, pure.
//! Only terminal contracts count (tokens that moved), 0 of 0 is `null`, and nothing names a
//! counterparty or a concept. A bond counts only when a judge free of its bondholder closed it
//! (docs/decisions/0046-libro-receipt-status-and-history.md).

use nyx5_proto::json::obj;
use nyx5_proto::{Address, Object, Value};
use nyx5_rules::libro::model::Kind;
use nyx5_rules::libro::state::ContractState;

/// One contract as the history sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub kind: Kind,
    pub state: ContractState,
    pub amount: i64,
    pub selling: bool,
    pub buying: bool,
    /// As the bondholder.
    pub bonding: bool,
    /// The bond vouches for someone.
    pub vouching: bool,
    /// A bond closed by a judge free of its bondholder ([`judged`]): released or forfeited by
    /// its verifier or arbiter, neither its bondholder's kin. A bond that went back because it
    /// expired, or that its bondholder took back, or that a puppet released, was judged by
    /// nobody.
    pub judged: bool,
    /// A posted bond someone free of its bondholder could forfeit ([`exposed`]).
    pub exposed: bool,
    /// An escrow its buyer took back before any delivery: nobody judged the seller.
    pub cancelled: bool,
    /// A bond held long enough before its release for its capital to have been at stake
    /// ([`held_long_enough`]).
    pub held: bool,
    /// The root of the judge who closed a bond ([`root`]), when one did.
    pub judge: Option<String>,
}

/// The least time a bond is held before a release counts it intact: a day.
pub const MIN_HELD_MS: i64 = 86_400_000;

/// Whether a bond posted at `created` and released at `closed` was held long enough for the
/// release to say anything: at least [`MIN_HELD_MS`], and at least half its term when it has
/// one (`expires`). A release at once risks no capital; one puppet judge would otherwise make
/// any number of bonds intact for nothing (issue 34 review, M2). Pure.
pub fn held_long_enough(created: i64, expires: Option<i64>, closed: i64) -> bool {
    let held = closed.saturating_sub(created);
    let half_term = expires.map_or(0, |e| e.saturating_sub(created) / 2);
    held >= MIN_HELD_MS && held >= half_term
}

/// The agent at the top of `a`'s delegations: a dotted name is always a subagent's (spec §1), so
/// `x.y.bob@d`'s root is `bob@d`, whatever house it lives at.
pub fn root(a: &Address) -> Address {
    let mut a = a.clone();
    while let Some(parent) = a.parent() {
        a = parent;
    }
    a
}

/// Whether `judge` is free of `holder` as far as the house `house` can vouch, from names alone:
/// an agent of this house (registered under its own rules; an agent of another site may be one
/// its holder minted on a house it runs, which this house cannot tell), and not of the holder's
/// delegation tree (same root: the holder itself, its subagents, its parent and their siblings).
pub fn independent(holder: &Address, judge: &Address, house: &str) -> bool {
    judge.domain() == house && root(holder) != root(judge)
}

/// Whether a bond's closing step was a judgement: a `release` or `forfeit` by its verifier or
/// its arbiter, that agent [`independent`] of the bondholder. The bondholder's own release after
/// `expires` and the house's expiry are not; neither is a puppet's verdict.
pub fn judged(
    holder: &Address,
    verifier: Option<&Address>,
    arbiter: Option<&Address>,
    closing_op: &str,
    closed_by: &Address,
    house: &str,
) -> bool {
    matches!(closing_op, "release" | "forfeit")
        && (verifier == Some(closed_by) || arbiter == Some(closed_by))
        && independent(holder, closed_by, house)
}

/// Whether a posted bond is at stake: its verifier or its arbiter is [`independent`] of the
/// bondholder, so someone it does not control could forfeit it.
pub fn exposed(holder: &Address, verifier: Option<&Address>, arbiter: Option<&Address>, house: &str) -> bool {
    [verifier, arbiter].into_iter().flatten().any(|j| independent(holder, j, house))
}

fn ratio(num: i64, den: i64) -> Value {
    if den == 0 {
        return Value::Null;
    }
    // Rounded to four places (the ratio is at most 1, so this stays exact enough).
    let r = (num as f64 / den as f64 * 10_000.0).round() / 10_000.0;
    Value::Number(r)
}

/// The counted members of §21's document: `vendiendo`, `comprando`, `afirmando`, `avalando`,
/// `resumen`.
pub fn summarize(facts: &[Fact]) -> Object {
    let (mut sold, mut released, mut refunded, mut sold_tokens) = (0i64, 0i64, 0i64, 0i64);
    let (mut bought, mut bought_tokens) = (0i64, 0i64);
    let (mut bonds, mut intact, mut forfeited, mut bond_tokens, mut at_stake) = (0i64, 0i64, 0i64, 0i64, 0i64);
    let (mut vouches, mut v_intact, mut v_forfeited) = (0i64, 0i64, 0i64);
    // Judges whose release already counted a bond intact: each judge (with its subagents) vouches
    // for the holder's word once, however many bonds it releases.
    let mut judges: Vec<&str> = Vec::new();
    for f in facts {
        use ContractState as S;
        let state = f.state;
        let terminal = state.is_terminal();
        match f.kind {
            // Facts nobody judged say nothing about anyone: a buyer's cancellation before any
            // delivery (free to make, so it cannot count against a seller); a bond left to
            // expire, taken back by its bondholder, or closed by the bondholder's puppet.
            _ if f.cancelled => {}
            Kind::Spot | Kind::Escrow | Kind::Metered if terminal => {
                if f.selling {
                    sold += 1;
                    match state {
                        S::Released | S::Settled => {
                            released += 1;
                            sold_tokens = sold_tokens.saturating_add(f.amount);
                        }
                        S::Refunded => refunded += 1,
                        _ => {}
                    }
                }
                if f.buying {
                    bought += 1;
                    if matches!(state, S::Released | S::Settled) {
                        bought_tokens = bought_tokens.saturating_add(f.amount);
                    }
                }
            }
            Kind::Bond if f.bonding => {
                if state == S::Posted {
                    if f.exposed {
                        at_stake = at_stake.saturating_add(f.amount);
                    }
                } else if terminal && f.judged {
                    if state != S::Forfeited {
                        let judge = f.judge.as_deref().unwrap_or_default();
                        if !f.held || judges.contains(&judge) {
                            continue;
                        }
                        judges.push(judge);
                    }
                    bonds += 1;
                    bond_tokens = bond_tokens.saturating_add(f.amount);
                    if state == S::Forfeited {
                        forfeited += 1;
                    } else {
                        intact += 1;
                    }
                    if f.vouching {
                        vouches += 1;
                        if state == S::Forfeited {
                            v_forfeited += 1;
                        } else {
                            v_intact += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let o = |pairs: Vec<(&str, Value)>| {
        Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Object>())
    };
    obj([
        (
            "vendiendo",
            o(vec![
                ("contratos", sold.into()),
                ("liberados", released.into()),
                ("devueltos", refunded.into()),
                ("tokens", sold_tokens.into()),
            ]),
        ),
        ("comprando", o(vec![("contratos", bought.into()), ("tokens", bought_tokens.into())])),
        (
            "afirmando",
            o(vec![
                ("fianzas", bonds.into()),
                ("intactas", intact.into()),
                ("ejecutadas", forfeited.into()),
                ("tokens", bond_tokens.into()),
            ]),
        ),
        (
            "avalando",
            o(vec![("avales", vouches.into()), ("intactos", v_intact.into()), ("ejecutados", v_forfeited.into())]),
        ),
        (
            "resumen",
            o(vec![
                ("cumplimiento", ratio(released, released + refunded)),
                ("veracidad", ratio(intact, bonds)),
                ("tokens_en_juego_ahora", at_stake.into()),
            ]),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(kind: &str, state: &str, amount: i64, selling: bool, bonding: bool) -> Fact {
        Fact {
            kind: Kind::parse(kind).unwrap(),
            state: ContractState::parse(state).unwrap(),
            amount,
            selling,
            buying: !selling && !bonding,
            bonding,
            vouching: false,
            judged: true,
            exposed: true,
            cancelled: false,
            held: true,
            judge: Some(format!("judge-{amount}@h.test")),
        }
    }

    fn at<'a>(o: &'a Object, path: &[&str]) -> &'a Value {
        let mut v = o.get(path[0]).unwrap();
        for p in &path[1..] {
            v = v.as_object().unwrap().get(*p).unwrap();
        }
        v
    }

    #[test]
    fn a_release_counts_once_per_judge_and_only_after_capital_was_at_stake() {
        let by = |judge: &str, f: Fact| Fact { judge: Some(judge.into()), ..f };
        let s = summarize(&[
            by("pup@h.test", fact("bond", "released", 5, false, true)),
            by("pup@h.test", fact("bond", "released", 6, false, true)),
            Fact { held: false, ..by("cy@h.test", fact("bond", "released", 7, false, true)) },
            by("pup@h.test", fact("bond", "forfeited", 8, false, true)),
            by("pup@h.test", fact("bond", "forfeited", 9, false, true)),
        ]);
        assert_eq!(at(&s, &["afirmando", "fianzas"]), &Value::from(3_i64));
        assert_eq!(at(&s, &["afirmando", "intactas"]), &Value::from(1_i64));
        assert_eq!(at(&s, &["afirmando", "ejecutadas"]), &Value::from(2_i64));
        assert_eq!(at(&s, &["afirmando", "tokens"]), &Value::from(22_i64));
        let day = MIN_HELD_MS;
        assert!(held_long_enough(0, None, day));
        assert!(!held_long_enough(0, None, day - 1));
        assert!(!held_long_enough(0, Some(10 * day), 4 * day));
        assert!(held_long_enough(0, Some(10 * day), 5 * day));
        assert!(!held_long_enough(0, Some(day / 2), day / 2 - 1));
    }

    #[test]
    fn nothing_settled_is_null_not_perfect() {
        let s = summarize(&[fact("escrow", "held", 40, true, false), fact("bond", "posted", 7, false, true)]);
        assert_eq!(at(&s, &["resumen", "cumplimiento"]), &Value::Null);
        assert_eq!(at(&s, &["resumen", "veracidad"]), &Value::Null);
        assert_eq!(at(&s, &["vendiendo", "contratos"]), &Value::from(0_i64));
        assert_eq!(at(&s, &["resumen", "tokens_en_juego_ahora"]), &Value::from(7_i64));
    }

    #[test]
    fn settled_contracts_count() {
        let s = summarize(&[
            fact("escrow", "released", 40, true, false),
            fact("spot", "settled", 10, true, false),
            fact("escrow", "refunded", 5, true, false),
            fact("bond", "forfeited", 3, false, true),
            fact("bond", "released", 2, false, true),
        ]);
        assert_eq!(at(&s, &["vendiendo", "liberados"]), &Value::from(2_i64));
        assert_eq!(at(&s, &["vendiendo", "tokens"]), &Value::from(50_i64));
        assert_eq!(at(&s, &["resumen", "cumplimiento"]), &Value::Number(0.6667));
        assert_eq!(at(&s, &["resumen", "veracidad"]), &Value::Number(0.5));
    }

    #[test]
    fn every_member_counts_what_it_names() {
        let vouching = |f: Fact| Fact { vouching: true, ..f };
        let s = summarize(&[
            fact("escrow", "released", 40, true, false),
            fact("spot", "settled", 10, true, false),
            fact("escrow", "refunded", 5, true, false),
            fact("metered", "active", 8, true, false),
            fact("escrow", "released", 12, false, false),
            fact("spot", "refunded", 3, false, false),
            fact("bond", "posted", 7, false, true),
            fact("bond", "posted", 4, false, true),
            vouching(fact("bond", "forfeited", 3, false, true)),
            vouching(fact("bond", "released", 2, false, true)),
            vouching(fact("bond", "released", 1, false, true)),
            fact("bond", "released", 6, false, true),
            // A bond someone else holds says nothing of this agent's word.
            fact("bond", "forfeited", 100, false, false),
            fact("bond", "posted", 100, false, false),
        ]);
        let expected = Value::parse(
            br#"{"vendiendo": {"contratos": 3, "liberados": 2, "devueltos": 1, "tokens": 50},
                 "comprando": {"contratos": 2, "tokens": 12},
                 "afirmando": {"fianzas": 4, "intactas": 3, "ejecutadas": 1, "tokens": 12},
                 "avalando": {"avales": 3, "intactos": 2, "ejecutados": 1},
                 "resumen": {"cumplimiento": 0.6667, "veracidad": 0.75, "tokens_en_juego_ahora": 11}}"#,
            4096,
        )
        .unwrap();
        assert_eq!(Value::Object(s), expected);
    }

    #[test]
    fn what_nobody_judged_counts_for_nothing() {
        let expired = Fact { judged: false, ..fact("bond", "released", 5, false, true) };
        let cancelled = Fact { cancelled: true, ..fact("escrow", "refunded", 9, true, false) };
        let s = summarize(&[expired, cancelled]);
        assert_eq!(at(&s, &["afirmando", "fianzas"]), &Value::from(0_i64));
        assert_eq!(at(&s, &["vendiendo", "devueltos"]), &Value::from(0_i64));
        assert_eq!(at(&s, &["resumen", "veracidad"]), &Value::Null);
        assert_eq!(at(&s, &["resumen", "cumplimiento"]), &Value::Null);
    }

    fn a(text: &str) -> Address {
        Address::parse(text).unwrap()
    }

    #[test]
    fn a_judge_is_free_of_the_holder_only_at_this_house_and_outside_its_tree() {
        let house = "h.test";
        let local = a("ana@h.test");
        // Itself, its subagents, its parent's tree: kin, wherever the holder is.
        for kin in ["ana@h.test", "v.ana@h.test", "x.v.ana@h.test"] {
            assert!(!independent(&local, &a(kin), house), "{kin}");
            assert!(!independent(&a(kin), &local, house), "{kin}");
        }
        assert!(!independent(&a("v.ana@h.test"), &a("w.ana@h.test"), house));
        // Another tree of this house: free, for a local holder and a foreign one alike.
        assert!(independent(&local, &a("cy@h.test"), house));
        assert!(independent(&local, &a("x.cy@h.test"), house));
        assert!(independent(&a("bo@b.test"), &a("cy@h.test"), house));
        // Another house's agent: this house cannot tell it from one the holder minted there.
        for foreign in ["cy@b.test", "cy@c.test", "cy@mail.h.test", "cy@h.test.evil"] {
            assert!(!independent(&local, &a(foreign), house), "{foreign}");
            assert!(!independent(&a("bo@b.test"), &a(foreign), house), "{foreign}");
        }
    }

    #[test]
    fn only_a_free_judges_verdict_judges_a_bond() {
        let (holder, house) = (a("ana@h.test"), "h.test");
        let (cy, puppet) = (a("cy@h.test"), a("v.ana@h.test"));
        assert!(judged(&holder, Some(&cy), None, "release", &cy, house));
        assert!(judged(&holder, Some(&cy), None, "forfeit", &cy, house));
        assert!(judged(&holder, Some(&puppet), Some(&cy), "release", &cy, house));
        // The holder taking it back after expiry, the house's expiry, a puppet's release.
        assert!(!judged(&holder, Some(&cy), None, "release", &holder, house));
        assert!(!judged(&holder, Some(&cy), None, "expire", &a("libro@h.test"), house));
        assert!(!judged(&holder, Some(&puppet), None, "release", &puppet, house));
        assert!(!judged(&holder, Some(&holder), None, "release", &holder, house));
        // Someone who is not its verifier or arbiter closed it: no verdict.
        assert!(!judged(&holder, Some(&cy), None, "release", &a("eve@h.test"), house));
        assert!(exposed(&holder, Some(&puppet), Some(&cy), house));
        assert!(!exposed(&holder, Some(&puppet), None, house));
    }
}
