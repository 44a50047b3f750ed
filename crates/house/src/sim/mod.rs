//! A deterministic simulator of many houses (issue 12 §1): several houses and their agents in
//! one process, on real SQLite with the shared migrations, with one seed driving everything —
//! the clock (and each house's skew), the network's faults (drops, lost answers, duplicates,
//! requests held and delivered late, so reordered; links cut; a house down for up to five days,
//! past the bounce window; a house's clock jumping days forward or back and set right later;
//! a house that dies in the middle of a tick and starts again on its database) and the workload
//! (registrations, key rotations, mail sealed and clear, deferred and expiring, reads and acks,
//! email in, the Libro's operations over the wire, replays of all of these).
//!
//! After every step the invariants of [`check`] hold, and once the network heals and the queues
//! drain, every envelope a house accepted is in each recipient's mailbox exactly once or bounced
//! to its sender, never both — or reported "undetermined" when an attempt may have reached it
//! and no answer came (never with a bounce). A failure names its seed and step, shows the last steps, and prints
//! the one command that runs it again (`nyx5 simulate --seed …`).
//!
//! Built with the `sim` feature (which needs `sqlite`): `cargo test -p nyx5-house --features sim
//! --test sim` and `nyx5 simulate` use it; the Worker never links it.

mod agent;
pub mod check;
mod workload;
pub mod world;

use std::fmt;

pub use workload::{MAX_SCRIPT, Scripted, Sim, run_script};

/// One run: its seed and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub seed: u64,
    /// Steps of workload and faults before the network heals.
    pub steps: u64,
    pub houses: usize,
    /// Agents each house registers at the start (more register during the run).
    pub agents: usize,
    /// The houses run `verifica@`, and some escrows name it arbiter with a test that fetches
    /// another house's `/health` (so the network's faults reach its checks). Off, a seed plays
    /// as if verifica@ did not exist: no draw of the seed goes to it.
    pub services: bool,
    /// Databases each house spreads its mailboxes over (issue 36 §3); `None`: 1 to 4 for each
    /// house, chosen from the seed (without drawing from the run's stream, so a seed's workload
    /// is the same whatever the count).
    pub shards: Option<usize>,
}

impl Params {
    pub fn new(seed: u64) -> Params {
        Params { seed, steps: 80, houses: 3, agents: 3, services: false, shards: None }
    }

    /// How many databases house `house` has: [`Params::shards`], or 1–4 from the seed.
    pub fn shards_of(&self, house: usize) -> usize {
        match self.shards {
            Some(n) => n.clamp(1, 16),
            None => {
                let mut mix = world::Prng::new(self.seed ^ 0x5a4d_5348_4152_4453 ^ (house as u64).wrapping_mul(0x9e37));
                1 + mix.below(4)
            }
        }
    }

    /// The command that runs this again.
    pub fn command(&self) -> String {
        format!(
            "cargo run -p nyx5-cli -- simulate --seed {} --steps {} --houses {} --agents {}{}",
            self.seed,
            self.steps,
            self.houses,
            self.agents,
            if self.services { " --services" } else { "" }
        ) + &self.shards.map(|n| format!(" --shards {n}")).unwrap_or_default()
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub steps: u64,
    /// Envelopes the houses accepted from their agents, and recipients they were for.
    pub accepted: u64,
    pub recipients: u64,
    /// Of those recipients: delivered, and bounced to the sender.
    pub delivered: u64,
    pub bounced: u64,
    /// Of those recipients: reported "undetermined (it may have been delivered)" to the sender
    /// (an attempt went unanswered, or a house said "not now", and no answer that it holds the
    /// envelope came before the sender stopped asking), and of
    /// those, delivered in fact.
    pub undetermined: u64,
    pub undetermined_delivered: u64,
    /// Emails accepted by the bridge.
    pub emails: u64,
    /// Libro operations sent, and entries in all journals at the end.
    pub operations: u64,
    pub entries: u64,
    /// Contracts settled by `verifica@`'s verdict, at the end (with `services`).
    pub verdicts: u64,
    /// Sub-mandates at the end, and those charged (so charged along a chain).
    pub sub_mandates: u64,
    pub charged_sub_mandates: u64,
    /// Houses that died in the middle of a tick.
    pub deaths: u64,
    /// Replays sent (mail, operations, top-ups and emails, by agents and by houses).
    pub replays: u64,
    pub net: world::NetStats,
    /// What the workload and the weather did, by kind ("key rotation", "sealed mail", "link
    /// cut", "charge sent", …): mail and operations when their house accepted them, rotations
    /// and registrations when they took, replays and emails when they were sent, faults, cuts
    /// and outages when they were set. A kind that never comes up in many seeds is a part of
    /// the workload that stopped.
    pub did: std::collections::BTreeMap<&'static str, u64>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.net;
        write!(
            f,
            "{} steps: {} envelopes accepted for {} recipients ({} delivered, {} bounced, {} undetermined of which \
             {} delivered), {} emails, {} Libro \
             operations ({} entries, {} verdicts, {} sub-mandates, {} of them charged), {} replays, {} houses died mid-tick; network: {} requests, {} refused, {} \
             dropped, {} answers lost, {} duplicated, {} held ({} delivered late)",
            self.steps,
            self.accepted,
            self.recipients,
            self.delivered,
            self.bounced,
            self.undetermined,
            self.undetermined_delivered,
            self.emails,
            self.operations,
            self.entries,
            self.verdicts,
            self.sub_mandates,
            self.charged_sub_mandates,
            self.replays,
            self.deaths,
            n.sent,
            n.refused,
            n.dropped,
            n.lost_answers,
            n.duplicated,
            n.delayed,
            n.late
        )
    }
}

/// A broken invariant: where, what, and the steps that led there.
#[derive(Debug, Clone)]
pub struct Failure {
    pub params: Params,
    /// The step after which it was found (one past the last step once the network healed).
    pub step: u64,
    pub what: String,
    pub recent: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {} failed at step {}: {}", self.params.seed, self.step, self.what)?;
        writeln!(f, "last steps:")?;
        for line in &self.recent {
            writeln!(f, "  {line}")?;
        }
        write!(f, "reproduce: {}", self.params.command())
    }
}

/// Runs one seed: the steps, then the healing, checking the invariants throughout.
pub fn run(params: Params) -> Result<Summary, Failure> {
    let mut sim = Sim::new(params)?;
    for _ in 0..params.steps {
        sim.step()?;
    }
    sim.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_where_what_how_it_came_and_how_to_run_it_again() {
        let params = Params { services: true, houses: 2, ..Params::new(7) };
        assert_eq!(
            params.command(),
            "cargo run -p nyx5-cli -- simulate --seed 7 --steps 80 --houses 2 --agents 3 --services"
        );
        assert!(Params::new(7).command().ends_with("--agents 3"), "no --services when it is off");
        let failure = Failure {
            params,
            step: 12,
            what: "the balances sum to 1".into(),
            recent: vec!["step 11: a sends".into(), "step 12: tick".into()],
        };
        assert_eq!(
            failure.to_string(),
            format!(
                "seed 7 failed at step 12: the balances sum to 1\nlast steps:\n  step 11: a sends\n  step 12: tick\n\
                 reproduce: {}",
                params.command()
            )
        );
    }

    #[test]
    fn a_summary_names_every_count() {
        let s = Summary {
            steps: 1,
            accepted: 2,
            recipients: 3,
            delivered: 4,
            bounced: 5,
            undetermined: 23,
            undetermined_delivered: 24,
            emails: 6,
            operations: 7,
            entries: 8,
            verdicts: 9,
            sub_mandates: 10,
            charged_sub_mandates: 11,
            deaths: 12,
            replays: 13,
            net: world::NetStats {
                sent: 14,
                arrived: 21,
                cut_off: 22,
                refused: 15,
                dropped: 16,
                lost_answers: 17,
                duplicated: 18,
                delayed: 19,
                late: 20,
            },
            did: Default::default(),
        };
        assert_eq!(
            s.to_string(),
            "1 steps: 2 envelopes accepted for 3 recipients (4 delivered, 5 bounced, 23 undetermined of which 24 \
             delivered), 6 emails, 7 Libro operations \
             (8 entries, 9 verdicts, 10 sub-mandates, 11 of them charged), 13 replays, 12 houses died mid-tick; \
             network: 14 requests, 15 refused, 16 dropped, 17 answers lost, 18 duplicated, 19 held (20 delivered late)"
        );
    }
}
