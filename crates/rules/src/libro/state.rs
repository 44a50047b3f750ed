//! The Libro's closed sets of names (issue 37 §5): the states of its contracts, mandates,
//! approvals and `verifica@`'s checks, and the roles a contract names its parties by. Each is an
//! enum whose `as_str` is the exact text the house stores and signs (records are hashed: the
//! bytes never change) and whose `parse` reads it back; a stored text outside the set is the
//! house's own fault ([`stored`]: 500, never an answer that guesses).
//!
//! SQL compares the same texts as literals (`state = 'active'`); the schema's `CHECK`s allow
//! exactly these sets, which `crates/house/tests/schema.rs` holds them to.

use nyx5_proto::{Error, ErrorKind};

/// A closed set of names with one text each.
macro_rules! names {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every one, in declaration order.
            pub const ALL: [$name; [$($text,)+].len()] = [$($name::$variant,)+];

            /// Its text, as stored and sent.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The one `text` names; `None` for any other text.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|s| s.as_str() == text)
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names! {
    /// Where a contract is (§17; `libro_contracts.state` and the record's `state`).
    ContractState {
        /// Named by §17's table (`acp` phase `Open`); no operation of this Libro leaves a
        /// contract in it (an accepted quote is at once settled, held or active).
        Accepted = "accepted",
        /// An escrow holding the price for its seller.
        Held = "held",
        /// An escrow its seller delivered, waiting for release or refund.
        Delivered = "delivered",
        /// Paid to its seller (an escrow) or returned to its bondholder (a bond).
        Released = "released",
        /// An escrow returned to its buyer.
        Refunded = "refunded",
        /// A spot contract, paid when accepted.
        Settled = "settled",
        /// A bond its verifier or arbiter took for the beneficiary.
        Forfeited = "forfeited",
        /// A bond standing.
        Posted = "posted",
        /// A metered contract, its mandate granted to the seller.
        Active = "active",
    }
}

impl ContractState {
    /// Whether nothing more happens to the contract.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            ContractState::Released | ContractState::Refunded | ContractState::Settled | ContractState::Forfeited
        )
    }
}

names! {
    /// Whether a mandate may still be charged (§18; `libro_mandates.state`).
    MandateState {
        Active = "active",
        /// Revoked, itself or a mandate above it.
        Revoked = "revoked",
    }
}

names! {
    /// Where a movement waiting for approval is (docs/SPEC.md §16b; `libro_pending.state`).
    ApprovalState {
        Pending = "pending",
        Approved = "approved",
        Declined = "declined",
        /// Nobody decided it in time; its hold returned.
        Expired = "expired",
    }
}

names! {
    /// A check `verifica@` owes (docs/SPEC.md §22; `verifica_checks.state`).
    CheckState {
        /// To be run at its `next_at`.
        Due = "due",
        /// Its last attempt decided nothing, and nothing more is tried.
        Undecided = "undecided",
    }
}

names! {
    /// The roles a contract names its parties by: members of its record and columns of
    /// `libro_contracts`, [`Role::ALL`] in the columns' order.
    Role {
        Seller = "seller",
        Buyer = "buyer",
        Bondholder = "bondholder",
        Verifier = "verifier",
        Beneficiary = "beneficiary",
        Arbiter = "arbiter",
        /// Whom a vouching bond vouches for (docs/SPEC.md §19).
        Vouchee = "vouchee",
    }
}

/// The refusal of a name (`what`: "contract state", …) the house read from its own records
/// that is none it knows: its own fault (500; the reason is logged, never sent).
pub fn stored(what: &str, text: &str) -> Error {
    Error::new(ErrorKind::Internal, format!("stored {what} {text:?} is none this house knows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself_and_nothing_else_reads() {
        fn round<T: Copy + PartialEq + core::fmt::Debug>(
            all: &[T],
            text: fn(T) -> &'static str,
            parse: fn(&str) -> Option<T>,
        ) {
            for &s in all {
                assert_eq!(parse(text(s)), Some(s));
                assert_eq!(parse(&text(s).to_uppercase()), None);
            }
            let mut texts: Vec<_> = all.iter().map(|&s| text(s)).collect();
            texts.sort_unstable();
            texts.dedup();
            assert_eq!(texts.len(), all.len(), "two names share a text");
            assert_eq!(parse(""), None);
        }
        round(&ContractState::ALL, ContractState::as_str, ContractState::parse);
        round(&MandateState::ALL, MandateState::as_str, MandateState::parse);
        round(&ApprovalState::ALL, ApprovalState::as_str, ApprovalState::parse);
        round(&CheckState::ALL, CheckState::as_str, CheckState::parse);
        round(&Role::ALL, Role::as_str, Role::parse);
        assert_eq!(stored("contract state", "lost").kind, ErrorKind::Internal);
    }
}
