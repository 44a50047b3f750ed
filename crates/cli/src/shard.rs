//! `nyx5 shard move`: the operator's command that moves an agent's mailbox to another of the
//! house's databases (issue 36 §3; nyx5_house::shards), against the files `nyx5 serve` runs on.

use std::path::PathBuf;

use nyx5_house::ports::PortError;
use nyx5_house::shards::MOVE_STEP_HELD;

use crate::error::{Failure, Outcome};
use crate::io::write_text;

/// The house's mailbox shards.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ShardCommand {
    /// Move LOCAL's mailbox to database TO (0: --db, 1: the first --shard, …), losing nothing:
    /// mail to it meanwhile waits (a hand-off) or is answered 503 to be sent again. Safe to
    /// rerun after an interruption, and beside a running `nyx5 serve` on the same files.
    Move {
        /// The house's primary SQLite file, as `nyx5 serve --db`.
        #[arg(long, value_name = "FILE")]
        db: PathBuf,
        /// Its shard files, as `nyx5 serve --shard`, in the same order.
        #[arg(long = "shard", value_name = "FILE")]
        shards: Vec<PathBuf>,
        /// The agent's local part.
        local: String,
        /// The database to move it to.
        to: usize,
    },
}

pub(crate) fn run(command: ShardCommand) -> Outcome {
    match command {
        ShardCommand::Move { db, shards, local, to } => {
            for path in std::iter::once(&db).chain(&shards) {
                if !path.exists() {
                    return Err(Failure::usage(format!("no database at {}", path.display())));
                }
            }
            let house = crate::serve::open_files(&db, &shards)?;
            if to >= house.count() {
                return Err(Failure::usage(format!("database {to} is not one of the house's {}", house.count())));
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| Failure::usage(format!("cannot start the runtime: {e}")))?;
            // A step held by the running `nyx5 serve`'s tick (which advances moves under way
            // too): wait for it and go on, at most a few leases long.
            let mut waits = 0u32;
            let moved = loop {
                match runtime.block_on(house.move_mailbox(&local, to)) {
                    Err(PortError::Constraint { name }) if name == MOVE_STEP_HELD && waits < 200 => {
                        waits += 1;
                        std::thread::sleep(std::time::Duration::from_millis(500));
                    }
                    other => break other.map_err(|e| Failure::usage(format!("moving {local}: {e}")))?,
                }
            };
            write_text(&format!(
                "nyx5 shard: {local} moved from database {} to {} ({} envelopes)\n",
                moved.from, moved.to, moved.envelopes
            ))
        }
    }
}
