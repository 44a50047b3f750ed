//! nyx5: an agent's command (profiles, every API verb, the MCP server), the offline tools (keys,
//! canonical JSON, seal, open, verify) and `nyx5 serve`.
//!
//! This file owns the arguments and the exit codes; each verb lives in its own module and
//! leaves every protocol rule to `nyx5-proto`. Exit codes: 0 success, 1 a signature that does
//! not verify or an envelope that does not open, 2 bad usage or input, 3 a house or resolver
//! that cannot be reached (or answers 5xx), 4 a request the house refused (4xx).

mod app;
mod app_broker;
mod app_card;
mod canon;
mod client;
mod error;
mod io;
mod jsonrpc;
mod keyfile;
mod keys;
mod mcp;
mod mcp_tools;
mod mcp_watch;
mod mcp_wrap;
mod net;
mod open;
mod sanitise;
mod seal;
mod serve;
mod shard;
mod simulate;
mod sys;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::{EXIT_USAGE, Outcome};

/// Nyx5/1 for agents: mail between agents (init, register, send, inbox, ack, outbox, …), an MCP
/// server (`nyx5 mcp`), a house (`nyx5 serve`), and offline tools for keys and documents.
///
/// Exit status: 0 on success; 1 when a signature or card does not verify or an envelope does
/// not open; 2 for usage and input errors; 3 when a house or resolver cannot be reached or
/// answers 5xx (try again later; a repeated `send` never sends twice); 4 when the house refused
/// the request (4xx: the message says why). With --json a failure also prints
/// `{"ok":false,"exit",…}` on standard output.
#[derive(Debug, Parser)]
#[command(name = "nyx5", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make an agent key file, or show its public keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the canonical form of the JSON on standard input (no trailing newline).
    Canon,
    /// Seal the envelope on standard input for its recipients, sign it, and print it.
    Seal {
        /// The sender's key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// A recipient and its X25519 key (base64url); once per recipient.
        #[arg(
            long = "to",
            value_name = "ADDRESS=ENC_PUB",
            required_unless_present = "plain",
            allow_hyphen_values = true
        )]
        to: Vec<String>,
        /// Sign without sealing: the content stays in clear.
        #[arg(long, conflicts_with = "to")]
        plain: bool,
    },
    /// Verify the envelope on standard input against its sender's key, and decrypt it.
    Open {
        /// The recipient's key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The recipient's address.
        #[arg(long = "as", value_name = "ADDRESS")]
        as_address: String,
        /// The sender's Ed25519 key (base64url; it may start with `-`).
        #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true)]
        sender_key: String,
    },
    /// Verify the signature of the document on standard input (card, envelope, quote, receipt);
    /// or, with --receipt, a Libro receipt and the operation and quote it vouches for.
    ///
    /// With --receipt R: the house's signature of R (by --house-key or a key of --house-card);
    /// with --op E: the operation envelope's signature (by --key or the agent card --card), its
    /// id equal to R's `of`, its SHA-256 to `op_sha256` and its sender to `from`; with --quote Q
    /// (or the quote inside an `accept` operation): the seller's signature (by --seller-key or
    /// --seller-card) and its SHA-256 equal to R's `cotizacion_sha256`. Each file may also be a
    /// document that holds the one wanted (`nyx5 accept --wait --json`'s answer holds the
    /// operation and the receipt; an inbox item, its envelope). The receipt's `status` must be
    /// `done` (a `pending` movement moved only a hold, a `declined` one nothing) unless
    /// `--allow-status` names it. Prints every check; exit 1 when one fails. Nothing is fetched.
    Verify {
        /// The Ed25519 key (base64url) that must have signed it: an agent's, or a domain's for
        /// an agent card's certification; with --receipt, the operator's key (the sender of
        /// --op). Base64url keys may start with `-`.
        #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true, required_unless_present = "receipt")]
        key: Option<String>,
        /// The member to verify [default: `signature`, else `certification`].
        #[arg(long, value_name = "NAME")]
        member: Option<String>,
        /// What kind of document it is (domain-card, agent-card, delegation, envelope,
        /// registration, quote, receipt) [default: told by its members].
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        #[command(flatten)]
        proof: verify::ProofArgs,
    },
    /// Run a house: the engine on a SQLite file over HTTP, for self-hosting and tests.
    Serve(serve::Args),
    /// The house's mailbox shards: move an agent's mailbox to another database.
    #[command(subcommand)]
    Shard(shard::ShardCommand),
    /// Run the deterministic simulator: houses, agents and a faulty network from one seed,
    /// checking the invariants after every step.
    Simulate(simulate::Args),
    #[command(flatten)]
    Client(client::cli::ClientCommand),
    #[command(flatten)]
    Libro(client::libro_cli::LibroCommand),
    /// Serve the agent's mail as tools to an MCP client, over standard input and output.
    Mcp(mcp::McpArgs),
    /// List the wrapped MCP calls (`nyx5 mcp --wrap`) waiting for a person's approval.
    McpApprovals(mcp_wrap::ListArgs),
    /// Approve one waiting wrapped MCP call: that call only, never the next.
    McpApprove(mcp_wrap::DecideArgs),
    /// Decline one waiting wrapped MCP call: it is answered with an error and never runs.
    McpDecline(mcp_wrap::DecideArgs),
    /// Apps: verify an App Card and its files, sign one, run one under a per-run broker, or list
    /// one in a house's catalogue.
    #[command(subcommand)]
    App(app::AppCommand),
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Generate an Ed25519 signing key and an X25519 encryption key into a new 0600 file.
    New {
        /// Where to write the key file.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Replace the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Print the public keys of a key file.
    Show {
        /// The key file.
        file: PathBuf,
        /// Print `{"enc":…,"sig":…}` instead of two lines.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("nyx5: {}", failure.one_line());
            failure.exit_code()
        }
    }
}

fn run(command: Command) -> Outcome {
    match command {
        Command::Keys(KeysCommand::New { out, force }) => keys::new(&out, force),
        Command::Keys(KeysCommand::Show { file, json }) => keys::show(&file, json),
        Command::Canon => canon::run(),
        Command::Seal { key, to, plain } => seal::run(&key, &to, plain),
        Command::Open { key, as_address, sender_key } => open::run(&key, &as_address, &sender_key),
        Command::Verify { key, member, kind, proof } => match (&proof.receipt, key) {
            (Some(_), key) => verify::proof(&proof, key.as_deref()),
            (None, Some(key)) => verify::run(&key, member.as_deref(), kind.as_deref()),
            (None, None) => Err(error::Failure::usage("give --key (or --receipt)")),
        },
        Command::Serve(args) => serve::run(args),
        Command::Shard(command) => shard::run(command),
        Command::Simulate(args) => simulate::run(&args),
        Command::Client(command) => client::cli::run(command),
        Command::Libro(command) => client::libro_cli::run(command),
        Command::Mcp(args) => mcp::run(args),
        Command::McpApprovals(args) => mcp_wrap::list(&args),
        Command::McpApprove(args) => mcp_wrap::decide(&args, true),
        Command::McpDecline(args) => mcp_wrap::decide(&args, false),
        Command::App(command) => app::run(command),
    }
}

/// Help and version go to standard output with status 0; any other argument error becomes
/// one line on standard error with status 2.
fn clap_exit(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!("nyx5: missing a command (see `nyx5 help`)");
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            // The first paragraph of clap's message (the usage block follows a blank line).
            let text = e.render().to_string();
            let first: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
            let first = first.join(" ");
            let reason = first.strip_prefix("error: ").unwrap_or(&first);
            eprintln!("nyx5: {} (see `nyx5 help`)", sanitise::line(reason));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Tokens, keys and codes are base64url or hex: a random one starts with `-` one time in
    /// 64 and must still be read as a value, on every command that takes one (known by its
    /// value's name, or by a name that says token or secret).
    #[test]
    fn every_secret_or_key_option_takes_a_leading_hyphen() {
        const RANDOM: [&str; 6] = ["TOKEN", "ADMIN_TOKEN", "KEY", "SIG_PUB", "CODE", "ADDRESS=ENC_PUB"];
        fn walk(c: &clap::Command, path: &str, seen: &mut usize, wrong: &mut Vec<String>) {
            for a in c.get_arguments().filter(|a| a.get_action().takes_values()) {
                let names = a.get_value_names().unwrap_or_default();
                let id = a.get_id().as_str();
                if names.iter().any(|n| RANDOM.contains(&n.as_str())) || id.contains("token") || id.contains("secret") {
                    *seen += 1;
                    if !a.is_allow_hyphen_values_set() {
                        wrong.push(format!("{path} --{}", a.get_id()));
                    }
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), seen, wrong);
            }
        }
        let (mut seen, mut wrong) = (0, Vec::new());
        walk(&super::Cli::command(), "nyx5", &mut seen, &mut wrong);
        assert!(seen >= 12, "only {seen} options carry a token or key: the walk is not reaching them");
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}
