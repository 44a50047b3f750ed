//! A deterministic simulator of many houses (issue 12 §1): several houses and their agents in
//! one process, on real SQLite with the shared migrations, with one seed driving everything —
//! the clock (and each house's skew), the network's faults (drops, lost answers, duplicates,
//! requests held and delivered late, so reordered; links cut; a house down for up to two days;
//! a house that dies in the middle of a tick and starts again on its database) and the workload
//! (registrations, key rotations, mail sealed and clear, deferred and expiring, reads and acks,
//! email in, the Libro's operations over the wire, replays of all of these).
//!
//! After every step the invariants of [`check`] hold, and once the network heals and the queues
//! drain, every envelope a house accepted is in each recipient's mailbox exactly once or bounced
//! to its sender, never both. A failure names its seed and step, shows the last steps, and prints
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
    /// exactly as it did before verifica@ existed: the regression seeds stay what they were.
    pub services: bool,
}

impl Params {
    pub fn new(seed: u64) -> Params {
        Params { seed, steps: 80, houses: 3, agents: 3, services: false }
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
        )
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
    /// Replays sent (mail and operations, by agents and by houses).
    pub replays: u64,
    pub net: world::NetStats,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.net;
        write!(
            f,
            "{} steps: {} envelopes accepted for {} recipients ({} delivered, {} bounced), {} emails, {} Libro \
             operations ({} entries, {} verdicts, {} sub-mandates, {} of them charged), {} replays, {} houses died mid-tick; network: {} requests, {} refused, {} \
             dropped, {} answers lost, {} duplicated, {} held ({} delivered late)",
            self.steps,
            self.accepted,
            self.recipients,
            self.delivered,
            self.bounced,
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
    /// The step after which it was found (`steps + 1` once the network healed).
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
