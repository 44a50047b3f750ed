//! `nyx5 simulate`: the deterministic simulator of many houses (`nyx5_house::sim`). One seed is
//! one whole run; a failure prints the steps that led to it and the command that repeats it.

use nyx5_house::sim::{Params, run as run_seed};

use crate::error::{Failure, Outcome};
use crate::io;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many seeds, from `--seed` on.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Steps of workload and faults per seed, before the network heals.
    #[arg(long, default_value_t = 80)]
    steps: u64,
    /// Houses in the world (1–16).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    houses: u64,
    /// Agents each house registers at the start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=50))]
    agents: u64,
    /// The houses run verifica@, and some escrows are judged by it.
    #[arg(long)]
    services: bool,
    /// Databases each house spreads its mailboxes over (1–16) [default: 1 to 4 per house, from
    /// the seed].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    shards: Option<u64>,
}

/// Runs the seeds in order, one line each; stops at the first failure (exit 1).
pub(crate) fn run(args: &Args) -> Outcome {
    let houses = usize::try_from(args.houses).map_err(|_| Failure::usage("--houses is too large"))?;
    let agents = usize::try_from(args.agents).map_err(|_| Failure::usage("--agents is too large"))?;
    for seed in args.seed..args.seed.saturating_add(args.seeds) {
        let shards = args.shards.and_then(|n| usize::try_from(n).ok());
        let params = Params { seed, steps: args.steps, houses, agents, services: args.services, shards };
        match run_seed(params) {
            Ok(summary) => io::write_stdout(format!("seed {seed}: {summary}\n").as_bytes())?,
            Err(failure) => {
                eprintln!("{failure}");
                return Err(Failure::rejected(format!("seed {seed} broke an invariant")));
            }
        }
    }
    Ok(())
}
