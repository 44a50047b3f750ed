//! The networked verbs' arguments (clap) and how their answers are printed: one JSON document
//! with `--json`, text otherwise. A failure with `--json` also prints its JSON document
//! (`{"ok":false,"exit","reason","status"?,"error"?}`) before the one-line reason on stderr.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use nyx5_proto::Value;
use nyx5_proto::crypto::SigPublic;

use super::directory::{self, DirectoryRequest, InviteRequest};
use super::drafts;
use super::kept;
use super::lists::{self, Change};
use super::mailbox::{self, INBOX_MAX_LIMIT, OUTBOX_MAX_LIMIT, check_limit};
use super::register::{self, RegisterRequest, SubagentRequest};
use super::search::{self, SearchRequest};
use super::send::{self, SendRequest, body_from_bytes, stderr_is_terminal};
use super::{Ctx, when};
use super::{settings, stale, tareas};
use crate::error::{Failure, Outcome};
use crate::{io, sys};

/// Options every networked verb takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct Common {
    /// The profile file [default: $NYX5_AGENT, else $XDG_CONFIG_HOME/nyx5/agents.json, else
    /// ~/.config/nyx5/agents.json]
    #[arg(long = "agent", value_name = "FILE")]
    pub(crate) agent: Option<PathBuf>,
    /// Act as this agent of the profile [default: its first agent]
    #[arg(long = "as", value_name = "ADDRESS")]
    pub(crate) as_address: Option<String>,
    /// Hosts file `{"<domain>":{"url":…,"sig":…}}`, consulted before DNS [default: $NYX5_HOSTS]
    #[arg(long, value_name = "FILE")]
    pub(crate) hosts: Option<PathBuf>,
    /// Print one JSON document instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

impl Common {
    pub(crate) fn ctx(&self) -> Result<Ctx, Failure> {
        Ctx::new(self.agent.as_deref(), self.as_address.as_deref(), self.hosts.as_deref())
    }
}

/// The agent's verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Create keys for a new agent in the profile (0600); nothing is sent yet.
    Init {
        /// The agent's address, `name@domain`.
        address: String,
        /// The base URL of the agent's house, e.g. https://mail.example.org
        #[arg(long, value_name = "URL")]
        house: String,
        #[command(flatten)]
        common: Common,
    },
    /// Ask the agent's house to certify its card (open registration without a token or code);
    /// run again to update the card.
    Register(RegisterArgs),
    /// Replace the agent's keys; the old key keeps signing for 7 days. The house drops the
    /// webhook unless --webhook names one.
    RotateKey {
        /// The webhook to keep after the rotation (a rotation clears the old one)
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Delegate to a subagent NAME.<you>@<domain> with a scope; its keys go in the profile.
    Subagent(SubagentArgs),
    /// Prove you are the caller of an A2A message to TO: prints the `metadata` member to put in
    /// the message before an A2A client sends it (good for 5 minutes), naming the escrow it pays
    /// with when --contract is given (an escrow you hold for TO, arbitrated by `a2a@` of its house)
    A2aProof {
        /// The agent called, `name@domain`
        to: String,
        /// The A2A 1.0 message as the client will send it (JSON; `-` reads standard input)
        #[arg(long, value_name = "JSON")]
        message: String,
        /// The escrow that pays for the task
        #[arg(long, value_name = "ID")]
        contract: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Print an agent's card after verifying it (domain → agent → parent).
    Card {
        address: String,
        /// Accept a domain key that changed since it was pinned
        #[arg(long)]
        repin: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Resolve an address and show how its card was verified.
    Resolve {
        address: String,
        /// Accept a domain key that changed since it was pinned
        #[arg(long)]
        repin: bool,
        #[command(flatten)]
        common: Common,
    },
    /// List the agents a house publishes, each card verified [default house: your own].
    Directory(DirectoryArgs),
    /// Ask a federated index for agents in any house; its answer and every card are verified.
    Search(SearchArgs),
    /// Send an envelope: sealed for every recipient, signed, saved before it leaves.
    Send(SendArgs),
    /// Read the mailbox: each envelope verified against its sender's card and opened.
    Inbox {
        /// Envelopes per page (0-200) [default: the house's, 50]
        #[arg(long)]
        limit: Option<i64>,
        /// Start after this sequence number
        #[arg(long, value_name = "SEQ")]
        after: Option<i64>,
        /// Keep waiting for new envelopes and print each as it arrives (with --json, one
        /// document per line)
        #[arg(long)]
        follow: bool,
        /// With --follow: seconds to pause after a read the house answered at once with nothing
        /// new (it holds reads open otherwise), doubling up to 30
        #[arg(long, value_name = "SECONDS", default_value_t = 2)]
        interval: u64,
        /// Fetch, check and open the files the messages attach, and write them in DIR (never
        /// over another file)
        #[arg(long, value_name = "DIR")]
        save: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Mark envelopes handled so they leave the inbox.
    Ack {
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// A conversation in order: every kept message its ids, Nyx5 thread or email Message-IDs
    /// join to ID, each with its trust (mail is kept locally when read or sent from this profile).
    Thread {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Search the mail kept locally: all of WORDS in its text, subject or sender, newest first.
    Find {
        #[arg(value_name = "WORDS")]
        words: Vec<String>,
        /// Only from this address
        #[arg(long, value_name = "ADDRESS")]
        from: Option<String>,
        /// Only to this address
        #[arg(long, value_name = "ADDRESS")]
        to: Option<String>,
        /// Only since (RFC 3339, or back from now: -1d, -2h)
        #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
        since: Option<String>,
        /// Only before (RFC 3339, or back from now: -1d, -2h)
        #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
        until: Option<String>,
        /// Only of this type: message, task, result, receipt or intro
        #[arg(long = "type", value_name = "TYPE")]
        kind: Option<String>,
        /// Only received and not yet acknowledged
        #[arg(long)]
        unread: bool,
        /// Results at most (1-500) [default: 50]
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Remove kept mail from this profile's local store (acknowledging never does).
    Forget {
        #[arg(value_name = "ID")]
        ids: Vec<String>,
        /// Every message kept for the agent
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        common: Common,
    },
    /// What happened to what you sent: delivered, retrying, bounced, undetermined; and what is saved unsent.
    Outbox {
        /// Envelopes per page (0-100)
        #[arg(long)]
        limit: Option<i64>,
        /// Older than this sequence number
        #[arg(long, value_name = "SEQ")]
        before: Option<i64>,
        #[command(flatten)]
        common: Common,
    },
    /// Send yourself a sealed envelope that arrives at WHEN (RFC 3339, or +10m, +2h, +1d).
    Remind {
        when: String,
        /// The text (words are joined by spaces; `-` reads standard input)
        #[arg(required = true)]
        body: Vec<String>,
        #[arg(long)]
        thread: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Invitation codes (the house's operator only).
    #[command(subcommand)]
    Invite(InviteCommand),
    /// A federated index: ask it to crawl a house, or see what it crawls.
    #[command(subcommand)]
    Index(IndexCommand),
    /// A house's paid work (tareas@): list the catalogue, take a task; the operator adds and
    /// retires tasks.
    #[command(subcommand)]
    Tareas(TareasCommand),
    /// Email a person who has no Nyx5 address, through your house's email bridge; their reply
    /// comes back to your inbox, marked unverified.
    Email {
        /// An email address
        to: String,
        #[arg(long)]
        subject: Option<String>,
        /// The text (`-` reads standard input)
        #[arg(long, allow_hyphen_values = true)]
        body: String,
        /// The id of an email in your inbox this answers (keeps the thread)
        #[arg(long, value_name = "ID")]
        in_reply_to: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Hand one raw email (standard input) to a house's mailbox, as its operator: for an MTA's
    /// pipe transport in front of `nyx5 serve`.
    EmailIn {
        /// The house's base URL
        #[arg(long, value_name = "URL")]
        house: String,
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN]
        #[arg(long, value_name = "ADMIN_TOKEN", allow_hyphen_values = true)]
        token: Option<String>,
        /// The recipient, an agent of that house
        #[arg(long, value_name = "ADDRESS")]
        to: String,
        /// The SMTP envelope sender (MAIL FROM), if known
        #[arg(long, value_name = "SENDER")]
        from: Option<String>,
        /// Exit with <sysexits.h> codes for an MTA's pipe: 67 no such agent, 69 refused, 75 try
        /// again later
        #[arg(long)]
        sysexits: bool,
        /// Print one JSON document instead of text
        #[arg(long)]
        json: bool,
    },
    /// Always let in mail from these addresses or domains (`domain` or `@domain`: everyone
    /// there), whatever your inbox policy asks of strangers; takes them off the block list.
    Allow {
        #[arg(required = true, value_name = "ADDRESS|DOMAIN")]
        entries: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Refuse all mail from these addresses or domains; takes them off the allow list.
    Block {
        #[arg(required = true, value_name = "ADDRESS|DOMAIN")]
        entries: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Take addresses or domains off the allow and block lists.
    Unlist {
        #[arg(required = true, value_name = "ADDRESS|DOMAIN")]
        entries: Vec<String>,
        /// Only off this list
        #[arg(long, value_name = "LIST", value_parser = ["allow", "block"])]
        from: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Your allow and block lists.
    Lists {
        #[command(flatten)]
        common: Common,
    },
    /// Make an agent's mail wait at the house for a person's approval, show or lift it.
    #[command(subcommand)]
    Hold(HoldCommand),
    /// Mail that waits for approval: what you are asked to decide, and what you sent.
    Drafts(DraftsArgs),
    /// The domain keys your house pinned on first use, and any key it refused since (the
    /// house's operator only); --confirm accepts a refused key.
    Pins {
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long)]
        house: Option<String>,
        /// Make the key refused for DOMAIN its pin (after checking it some other way)
        #[arg(long, value_name = "DOMAIN", requires = "sig")]
        confirm: Option<String>,
        /// The refused key being confirmed, as `nyx5 pins` shows it
        #[arg(long, value_name = "KEY", requires = "confirm", allow_hyphen_values = true)]
        sig: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// What your house keeps about you privately: the webhook, the allow and block lists, the
    /// quotas that apply to your mailbox.
    Settings {
        #[command(flatten)]
        common: Common,
    },
    /// Whether a house is up, and how long its queue is.
    Health {
        /// A domain, or the house's URL
        house: String,
        #[command(flatten)]
        common: Common,
    },
}

/// Which agent a hold is on, and who asks.
#[derive(Debug, Clone, Args)]
pub(crate) struct HoldTarget {
    /// The agent the hold is on: yourself [default], one of your subagents (its NAME, or its
    /// address), or with --admin-token any agent of the house
    #[arg(long = "for", value_name = "AGENT")]
    for_local: Option<String>,
    /// Act as the house's operator (its token) instead of as the acting agent
    #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
    admin_token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HoldCommand {
    /// The holds over an agent (on it and every agent above it), nearest first.
    Show {
        #[command(flatten)]
        target: HoldTarget,
        #[command(flatten)]
        common: Common,
    },
    /// Make an agent's mail wait for APPROVER: all of it, to strangers, to some domains, or of
    /// some types (any that applies holds it). On yourself it cannot be undone by you.
    Set {
        /// Who approves: an agent of this house outside the held agent's own tree
        #[arg(long, value_name = "ADDRESS")]
        approver: String,
        /// Every envelope
        #[arg(long)]
        all: bool,
        /// Envelopes with a recipient outside this house who is not --known
        #[arg(long)]
        strangers: bool,
        /// An address or domain that is no stranger (with --strangers; repeat for more)
        #[arg(long, value_name = "ADDRESS|DOMAIN", requires = "strangers")]
        known: Vec<String>,
        /// Envelopes with a recipient at this domain (repeat for more)
        #[arg(long, value_name = "DOMAIN")]
        domain: Vec<String>,
        /// Envelopes of this type: message, task, result, receipt, intro (repeat for more)
        #[arg(long = "type", value_name = "TYPE")]
        kind: Vec<String>,
        #[command(flatten)]
        target: HoldTarget,
        #[command(flatten)]
        common: Common,
    },
    /// Lift a hold (an agent above the held one, or the operator; never the agent itself).
    Lift {
        #[command(flatten)]
        target: HoldTarget,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
pub(crate) struct DraftsArgs {
    #[command(subcommand)]
    command: Option<DraftsCommand>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DraftsCommand {
    /// One draft; as its approver, its content opened with the key its sender wrapped for you.
    Show {
        id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Let a draft leave: shows it and asks on the terminal first.
    Approve {
        id: String,
        /// Approve without asking on the terminal
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Refuse a draft for good (its approver), or withdraw your own.
    Decline {
        id: String,
        /// Why, for the sender
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
pub(crate) struct RegisterArgs {
    /// The house's operator token (any registration mode) [default: $NYX5_ADMIN_TOKEN]
    #[arg(long, value_name = "TOKEN", conflicts_with = "invite", allow_hyphen_values = true)]
    admin_token: Option<String>,
    /// An invitation code (houses in invite mode)
    #[arg(long, value_name = "CODE", allow_hyphen_values = true)]
    invite: Option<String>,
    /// The card's `capabilities` as a JSON object (replaces the current ones)
    #[arg(long, value_name = "JSON")]
    capabilities: Option<String>,
    /// Be listed in the house's directory
    #[arg(long, conflicts_with = "unlisted")]
    listed: bool,
    /// Leave the house's directory
    #[arg(long)]
    unlisted: bool,
    /// One line on what this agent does (shown in the directory)
    #[arg(long)]
    description: Option<String>,
    /// Inbox policy: open, allowlist, pow or stamp
    #[arg(long)]
    policy: Option<String>,
    /// Proof-of-work bits asked of strangers with --policy pow (0-32)
    #[arg(long)]
    pow_bits: Option<i64>,
    /// The stamp strangers pay to write to you, in tokens, with --policy stamp
    #[arg(long, value_name = "N")]
    price: Option<i64>,
    /// The house whose Libro your stamps are paid at [default: your own]
    #[arg(long, value_name = "DOMAIN")]
    stamp_house: Option<String>,
    /// A private URL the house POSTs each new envelope to
    #[arg(long, value_name = "URL", conflicts_with = "no_webhook")]
    webhook: Option<String>,
    /// Remove the webhook: new envelopes are no longer pushed anywhere
    #[arg(long)]
    no_webhook: bool,
    /// When the card stops being valid (RFC 3339 or +30d)
    #[arg(long, value_name = "WHEN")]
    valid_until: Option<String>,
    /// Remove this previous key from the card now (a key known to be stolen); repeatable
    #[arg(long, value_name = "SIG_PUB", allow_hyphen_values = true)]
    drop_previous: Vec<String>,
    /// With --admin-token: certify this agent's key alone, carrying nothing forward (no previous
    /// keys, no webhook) — the recovery after a key leaked
    #[arg(long, requires = "admin_token")]
    reset: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct SubagentArgs {
    /// The subagent's name: it becomes NAME.<your local part>@<your domain>
    name: String,
    /// Envelope types it may send (comma-separated) [default: any]
    #[arg(long, value_delimiter = ',', value_name = "TYPES")]
    scope_types: Option<Vec<String>>,
    /// Domains it may send to (comma-separated) [default: any]
    #[arg(long, value_delimiter = ',', value_name = "DOMAINS")]
    to_domains: Option<Vec<String>>,
    /// Most tokens it may commit in the Libro
    #[arg(long, value_name = "N")]
    cap: Option<i64>,
    /// How far its payments go alone: an authority as JSON, or @FILE (docs/SPEC.md §16b), e.g.
    /// '{"level":"autonomous","consequence":"costly","max_amount":50,"currency":"tok"}'
    #[arg(long, value_name = "JSON")]
    authority: Option<String>,
    /// When the delegation ends (RFC 3339 or +30d)
    #[arg(long, value_name = "WHEN")]
    valid_until: Option<String>,
    /// Keep the subagent's keys in this profile file, not yours: an agent run from a profile
    /// that also holds your keys can approve what its authority asks of you
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct DirectoryArgs {
    /// A domain, or the house's URL [default: your own house]
    house: Option<String>,
    /// Only agents with this capability
    #[arg(long)]
    capability: Option<String>,
    /// Only agents accepting this media type
    #[arg(long)]
    accepts: Option<String>,
    /// Words to look for in addresses and descriptions
    #[arg(long)]
    q: Option<String>,
    /// Cards per page (0-100) [default: 20]
    #[arg(long)]
    limit: Option<i64>,
    #[arg(long)]
    offset: Option<i64>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    /// Words to look for in addresses, capabilities and descriptions
    q: Option<String>,
    /// The index: a domain, or its URL [default: $NYX5_INDEX_HOUSE]
    #[arg(long, env = "NYX5_INDEX_HOUSE", value_name = "HOUSE")]
    index: String,
    /// Only agents with this capability
    #[arg(long)]
    capability: Option<String>,
    /// Only agents accepting this media type
    #[arg(long)]
    accepts: Option<String>,
    /// Only agents of this house (a domain)
    #[arg(long, value_name = "DOMAIN")]
    house: Option<String>,
    /// Cards per page (0-100) [default: 20]
    #[arg(long)]
    limit: Option<i64>,
    #[arg(long)]
    offset: Option<i64>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// Recipients; a `-` among them reads the body from standard input
    #[arg(value_name = "TO", required_unless_present = "id")]
    to: Vec<String>,
    /// The body, as text
    #[arg(long, conflicts_with = "file")]
    body: Option<String>,
    /// Read the body from a file (`-` for standard input)
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// The body's media type [default: text/plain; a JSON type parses the body as JSON]
    #[arg(long)]
    media: Option<String>,
    /// message, task, result, receipt or intro [default: message]
    #[arg(long = "type", value_name = "TYPE")]
    kind: Option<String>,
    #[arg(long)]
    thread: Option<String>,
    #[arg(long, value_name = "ID")]
    in_reply_to: Option<String>,
    /// Deliver no earlier than WHEN (RFC 3339 or +10m, +2h, +1d)
    #[arg(long, value_name = "WHEN")]
    deliver_after: Option<String>,
    /// Give up at WHEN (RFC 3339 or +1d)
    #[arg(long, value_name = "WHEN")]
    expires: Option<String>,
    /// Ask for a delivery receipt
    #[arg(long)]
    receipt: bool,
    /// Sign but do not encrypt (needed when a recipient publishes no encryption key)
    #[arg(long)]
    plain: bool,
    /// Use this envelope id; with an envelope saved under it, send that one again
    #[arg(long)]
    id: Option<String>,
    /// Send the envelope ID (kept in the profile for 4 days after it was sent) again to TO, as
    /// a new envelope made for what their cards ask now: after a 402 bounce `nyx5 inbox` names
    /// this when the stamp asked is more than is paid without --stamp
    #[arg(long, value_name = "ID", conflicts_with_all = ["body", "file", "id", "discard", "media", "kind", "thread", "in_reply_to", "deliver_after", "expires", "receipt", "plain", "aval"])]
    again: Option<String>,
    /// Drop the saved envelope --id instead of sending it
    #[arg(long, requires = "id")]
    discard: bool,
    /// Pay a stamp of N tokens [default: the price a recipient's `stamp` inbox asks, paid
    /// automatically at the house its card names]
    #[arg(long, value_name = "N")]
    stamp: Option<i64>,
    /// Enter an allowlist inbox on a vouch: VOUCHER (on the recipient's allow list) backs you
    /// with the bond contract BOND (`urn:nyx5:ext:aval`)
    #[arg(long, value_name = "VOUCHER:BOND")]
    aval: Option<String>,
    /// Send FILE sealed beside the body (repeat for more; each at most 25 MiB): kept at your
    /// house for the recipients, encrypted under its own key
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Subcommand)]
pub(crate) enum IndexCommand {
    /// Ask the index to crawl a house; it checks the house's domain card first.
    Add {
        /// The house to crawl (a domain)
        domain: String,
        /// The index: a domain, or its URL [default: $NYX5_INDEX_HOUSE]
        #[arg(long, env = "NYX5_INDEX_HOUSE", value_name = "HOUSE")]
        index: String,
        #[command(flatten)]
        common: Common,
    },
    /// The houses the index crawls and how their last pass went.
    Houses {
        /// The index: a domain, or its URL [default: $NYX5_INDEX_HOUSE]
        #[arg(long, env = "NYX5_INDEX_HOUSE", value_name = "HOUSE")]
        index: String,
        #[command(flatten)]
        common: Common,
    },
}

/// Who acts as a house's operator, for the operator's verbs.
#[derive(Debug, Clone, Args)]
pub(crate) struct Operator {
    /// The house's operator token [default: $NYX5_ADMIN_TOKEN, for your own house only]
    #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
    admin_token: Option<String>,
    /// The house (a domain or URL) [default: the acting agent's]
    #[arg(long, visible_alias = "house-url", value_name = "HOUSE")]
    house: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TareasCommand {
    /// The catalogue: each task with its price, statement and whole test.
    List {
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long, visible_alias = "house-url", value_name = "HOUSE")]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Take a task: sends tareas@ a quote with the catalogue's price, terms and arbiter.
    Take {
        /// The task's id
        id: String,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long, visible_alias = "house-url", value_name = "HOUSE")]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Add a task (the house's operator only).
    Add {
        /// Tokens paid for it, a whole number
        #[arg(long, value_name = "N")]
        price: i64,
        /// What to do
        #[arg(long)]
        statement: String,
        /// Its tests, as JSON, one URL naming the claim:
        /// `[{"type":"sha256","url":"https://…/{contract}","expect":"<64 hex>"}]`
        #[arg(long, value_name = "JSON")]
        verify: String,
        /// Further terms, as a JSON object (a `deadline`, …)
        #[arg(long, value_name = "JSON")]
        terms: Option<String>,
        /// The task's id [default: a new UUID]
        #[arg(long)]
        id: Option<String>,
        #[command(flatten)]
        operator: Operator,
        #[command(flatten)]
        common: Common,
    },
    /// Stop offering a task (the house's operator only); tasks in flight go on.
    Retire {
        id: String,
        #[command(flatten)]
        operator: Operator,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum InviteCommand {
    /// Create an invitation code.
    New {
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long)]
        house: Option<String>,
        /// How many registrations it allows [default: 1]
        #[arg(long)]
        uses: Option<i64>,
        /// When it stops working (RFC 3339 or +7d)
        #[arg(long, value_name = "WHEN")]
        expires: Option<String>,
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List invitation codes.
    List {
        /// The house's operator token [default: $NYX5_ADMIN_TOKEN]
        #[arg(long, value_name = "TOKEN", allow_hyphen_values = true)]
        admin_token: Option<String>,
        /// The house (a domain or URL) [default: the acting agent's]
        #[arg(long)]
        house: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

/// Prints a verb's answer (JSON or text), or its failure.
pub(crate) fn emit(json: bool, result: Result<Value, Failure>, human: fn(&Value) -> String) -> Outcome {
    match result {
        Ok(v) if json => io::write_json_line(&v),
        Ok(v) => io::write_text(&human(&v)),
        Err(f) => {
            if json {
                let _ = io::write_json_line(&f.to_value());
            }
            Err(f)
        }
    }
}

pub(crate) fn admin_token(flag: Option<String>) -> Result<String, Failure> {
    flag.or_else(|| std::env::var("NYX5_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()))
        .ok_or_else(|| Failure::usage("give the house's operator token with --admin-token (or NYX5_ADMIN_TOKEN)"))
}

fn time(text: Option<&str>, name: &str) -> Result<Option<nyx5_proto::Timestamp>, Failure> {
    let now = sys::now()?;
    text.map(|t| when::parse(t, now).map_err(|e| Failure::usage(format!("--{name}: {e}")))).transpose()
}

/// `--authority JSON|@FILE`: an authority, read and checked (docs/SPEC.md §16b).
pub(crate) fn authority_arg(text: &str) -> Result<nyx5_proto::authority::Authority, Failure> {
    let json = match text.strip_prefix('@') {
        Some(path) => crate::io::read_capped(std::path::Path::new(path), nyx5_proto::limits::MAX_ENVELOPE_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| Failure::usage(format!("cannot read {path} (a UTF-8 file of at most 1 MiB)")))?,
        None => text.to_owned(),
    };
    nyx5_proto::Value::parse_str(&json)
        .and_then(|v| nyx5_proto::authority::Authority::from_value(&v))
        .map_err(|e| Failure::usage(format!("--authority: {}", e.reason)).named(e.name()))
}

fn read_all(path: Option<&std::path::Path>) -> Result<Vec<u8>, Failure> {
    let cap = u64::try_from(nyx5_proto::limits::MAX_ENVELOPE_BYTES + 1).unwrap_or(u64::MAX);
    let mut buf = Vec::new();
    match path {
        None => io::read_stdin(nyx5_proto::limits::MAX_ENVELOPE_BYTES),
        Some(p) if p.as_os_str() == "-" => io::read_stdin(nyx5_proto::limits::MAX_ENVELOPE_BYTES),
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| Failure::usage(format!("cannot read {}: {e}", p.display())))?;
            f.take(cap)
                .read_to_end(&mut buf)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", p.display())))?;
            Ok(buf)
        }
    }
}

fn register_request(a: &RegisterArgs) -> Result<RegisterRequest, Failure> {
    let capabilities = match &a.capabilities {
        None => None,
        Some(t) => match Value::parse_str(t) {
            Ok(Value::Object(o)) => Some(o),
            _ => return Err(Failure::usage("--capabilities must be a JSON object")),
        },
    };
    let listed = if a.listed {
        Some(true)
    } else if a.unlisted {
        Some(false)
    } else {
        None
    };
    Ok(RegisterRequest {
        admin_token: a.admin_token.clone().or_else(|| std::env::var("NYX5_ADMIN_TOKEN").ok().filter(|t| !t.is_empty())),
        invite: a.invite.clone(),
        capabilities,
        listed,
        description: a.description.clone(),
        policy: a.policy.clone(),
        pow_bits: a.pow_bits,
        price: a.price,
        stamp_house: a.stamp_house.clone(),
        webhook: a.webhook.clone(),
        no_webhook: a.no_webhook,
        valid_until: time(a.valid_until.as_deref(), "valid-until")?,
        drop_previous: a
            .drop_previous
            .iter()
            .map(|k| SigPublic::parse(k).map(|_| k.clone()).map_err(|e| Failure::input("--drop-previous", &e)))
            .collect::<Result<_, _>>()?,
        reset: a.reset,
    })
}

fn send_request(a: &SendArgs) -> Result<SendRequest, Failure> {
    let stdin_marker = a.to.iter().any(|t| t == "-");
    let to: Vec<String> = a.to.iter().filter(|t| *t != "-").cloned().collect();
    let sources = usize::from(a.body.is_some()) + usize::from(a.file.is_some()) + usize::from(stdin_marker);
    if sources > 1 {
        return Err(Failure::usage("give the body once: --body TEXT, --file FILE or -"));
    }
    let body = match (&a.body, &a.file, stdin_marker) {
        (Some(b), _, _) => Some(body_from_bytes(b.as_bytes(), a.media.as_deref())?),
        (None, Some(f), _) => Some(body_from_bytes(&read_all(Some(f))?, a.media.as_deref())?),
        (None, None, true) => Some(body_from_bytes(&read_all(None)?, a.media.as_deref())?),
        (None, None, false) => None,
    };
    if body.is_some() && to.is_empty() {
        return Err(Failure::usage("name at least one recipient"));
    }
    Ok(SendRequest {
        to,
        body,
        media: a.media.clone(),
        kind: a.kind.clone(),
        thread: a.thread.clone(),
        in_reply_to: a.in_reply_to.clone(),
        deliver_after: a.deliver_after.clone(),
        expires: a.expires.clone(),
        receipt: a.receipt,
        plain: a.plain,
        id: a.id.clone(),
        extensions: a.aval.as_deref().map(super::libro::aval).transpose()?,
        discard: a.discard,
        stamp: a.stamp,
        auto_stamp_max: super::send::AUTO_STAMP_MAX,
        libro_op: false,
        request_key: None,
        resend_of: None,
        attach: a.attach.iter().map(|p| super::attach::File::read(p)).collect::<Result<_, _>>()?,
    })
}

/// Runs one networked verb.
pub(crate) fn run(command: ClientCommand) -> Outcome {
    match command {
        ClientCommand::Init { address, house, common } => {
            let r = common.ctx().and_then(|ctx| register::init(&ctx, &address, &house));
            emit(common.json, r, register::init_human)
        }
        ClientCommand::Register(a) => {
            let r = a.common.ctx().and_then(|ctx| register::register(&ctx, &register_request(&a)?));
            emit(a.common.json, r, register::register_human)
        }
        ClientCommand::RotateKey { webhook, common } => {
            let r = common.ctx().and_then(|ctx| register::rotate_key(&ctx, webhook.as_deref()));
            emit(common.json, r, register::rotate_human)
        }
        ClientCommand::Subagent(a) => {
            let r = a.common.ctx().and_then(|ctx| {
                let req = SubagentRequest {
                    name: a.name.clone(),
                    types: a.scope_types.clone(),
                    to_domains: a.to_domains.clone(),
                    cap: a.cap,
                    authority: a.authority.as_deref().map(authority_arg).transpose()?,
                    valid_until: time(a.valid_until.as_deref(), "valid-until")?,
                    out: a.out.clone(),
                };
                register::subagent(&ctx, &req)
            });
            emit(a.common.json, r, register::subagent_human)
        }
        ClientCommand::A2aProof { to, message, contract, common } => {
            let r = common.ctx().and_then(|ctx| super::a2a::proof(&ctx, &to, &message, contract.as_deref()));
            emit(common.json, r, super::a2a::proof_human)
        }
        ClientCommand::Card { address, repin, common } => {
            let r = common.ctx().and_then(|mut ctx| {
                ctx.repin = repin;
                directory::card(&ctx, &address)
            });
            emit(common.json, r, directory::card_human)
        }
        ClientCommand::Resolve { address, repin, common } => {
            let r = common.ctx().and_then(|mut ctx| {
                ctx.repin = repin;
                directory::resolve(&ctx, &address)
            });
            emit(common.json, r, directory::resolve_human)
        }
        ClientCommand::Directory(a) => {
            let req = DirectoryRequest {
                house: a.house.clone(),
                capability: a.capability.clone(),
                accepts: a.accepts.clone(),
                q: a.q.clone(),
                limit: a.limit,
                offset: a.offset,
            };
            let r = a.common.ctx().and_then(|ctx| directory::directory(&ctx, &req));
            emit(a.common.json, r, directory::directory_human)
        }
        ClientCommand::Search(a) => {
            let req = SearchRequest {
                index: a.index.clone(),
                q: a.q.clone(),
                capability: a.capability.clone(),
                accepts: a.accepts.clone(),
                house: a.house.clone(),
                limit: a.limit,
                offset: a.offset,
            };
            let r = a.common.ctx().and_then(|ctx| search::search(&ctx, &req));
            emit(a.common.json, r, search::search_human)
        }
        ClientCommand::Send(a) if a.again.is_some() => {
            let of = a.again.clone().unwrap_or_default();
            let r = a.common.ctx().and_then(|ctx| {
                if a.to.iter().any(|t| t == "-") {
                    return Err(Failure::usage("--again sends the kept envelope's own body; give no -"));
                }
                stale::again(&ctx, &of, &a.to, a.stamp, super::send::AUTO_STAMP_MAX)
            });
            emit(a.common.json, r, send::send_human)
        }
        ClientCommand::Send(a) => {
            let progress = stderr_is_terminal() && !a.common.json;
            let r = a.common.ctx().and_then(|ctx| send::send(&ctx, &send_request(&a)?, progress));
            emit(a.common.json, r, send::send_human)
        }
        ClientCommand::Inbox { limit, after, follow, interval, save, common } => {
            let limit = match check_limit(limit, INBOX_MAX_LIMIT) {
                Ok(l) => l,
                Err(f) => return emit(common.json, Err(f), mailbox::inbox_human),
            };
            if follow {
                let r = common.ctx().and_then(|ctx| {
                    let interval = Duration::from_secs(interval.max(1));
                    mailbox::follow(&ctx, limit, common.json, interval, super::send::AUTO_STAMP_MAX, save.as_deref())
                });
                return r.inspect_err(|f| {
                    if common.json {
                        let _ = io::write_json_line(&f.to_value());
                    }
                });
            }
            let r = common.ctx().and_then(|ctx| {
                let mut v = mailbox::inbox(&ctx, limit, after, super::send::AUTO_STAMP_MAX)?;
                if let Some(dir) = &save {
                    super::attach::save_all(&ctx, &mut v, dir)?;
                }
                Ok(v)
            });
            emit(common.json, r, mailbox::inbox_human)
        }
        ClientCommand::Ack { ids, common } => {
            let r = common.ctx().and_then(|ctx| mailbox::ack(&ctx, &ids));
            emit(common.json, r, mailbox::ack_human)
        }
        ClientCommand::Thread { id, common } => {
            let r = common.ctx().and_then(|ctx| kept::thread(&ctx, &id));
            emit(common.json, r, kept::thread_human)
        }
        ClientCommand::Find { words, from, to, since, until, kind, unread, limit, common } => {
            let req = kept::FindRequest { words, from, to, since, until, kind, unread, limit };
            let r = common.ctx().and_then(|ctx| kept::find(&ctx, &req));
            emit(common.json, r, kept::find_human)
        }
        ClientCommand::Forget { ids, all, common } => {
            let r = common.ctx().and_then(|ctx| kept::forget(&ctx, &ids, all));
            emit(common.json, r, kept::forget_human)
        }
        ClientCommand::Outbox { limit, before, common } => {
            let r = check_limit(limit, OUTBOX_MAX_LIMIT)
                .and_then(|limit| common.ctx().and_then(|ctx| mailbox::outbox(&ctx, limit, before)));
            emit(common.json, r, mailbox::outbox_human)
        }
        ClientCommand::Remind { when, body, thread, common } => {
            let progress = stderr_is_terminal() && !common.json;
            let r = (|| {
                let text = if body.len() == 1 && body.first().is_some_and(|b| b == "-") {
                    String::from_utf8(read_all(None)?).map_err(|_| Failure::usage("the reminder is not UTF-8 text"))?
                } else {
                    body.join(" ")
                };
                let ctx = common.ctx()?;
                send::remind(&ctx, &when, Value::String(text), thread.clone(), progress)
            })();
            emit(common.json, r, send::remind_human)
        }
        ClientCommand::Invite(InviteCommand::New { admin_token: t, house, uses, expires, note, common }) => {
            let r = (|| {
                let token = admin_token(t.clone())?;
                let req = InviteRequest { uses, expires: time(expires.as_deref(), "expires")?, note: note.clone() };
                directory::invite_new(&common.ctx()?, house.as_deref(), &token, &req)
            })();
            emit(common.json, r, directory::invite_new_human)
        }
        ClientCommand::Invite(InviteCommand::List { admin_token: t, house, common }) => {
            let r = admin_token(t).and_then(|token| directory::invite_list(&common.ctx()?, house.as_deref(), &token));
            emit(common.json, r, directory::invite_list_human)
        }
        ClientCommand::Index(IndexCommand::Add { domain, index, common }) => {
            let r = common.ctx().and_then(|ctx| search::add_house(&ctx, &index, &domain));
            emit(common.json, r, search::houses_human)
        }
        ClientCommand::Tareas(TareasCommand::List { house, common }) => {
            let r = common.ctx().and_then(|ctx| tareas::list(&ctx, house.as_deref()));
            emit(common.json, r, tareas::list_human)
        }
        ClientCommand::Tareas(TareasCommand::Take { id, house, common }) => {
            let r = common.ctx().and_then(|ctx| tareas::take(&ctx, &id, house.as_deref()));
            emit(common.json, r, tareas::take_human)
        }
        ClientCommand::Tareas(TareasCommand::Add { price, statement, verify, terms, id, operator, common }) => {
            let r = (|| {
                let verify = Value::parse_str(&verify)
                    .map_err(|e| Failure::usage(format!("--verify: {}", e.reason)).named(e.name()))?;
                let terms = match terms {
                    None => None,
                    Some(t) => match Value::parse_str(&t) {
                        Ok(Value::Object(o)) => Some(o),
                        _ => return Err(Failure::usage("--terms is a JSON object")),
                    },
                };
                let task = tareas::NewTask { id: id.clone(), price, statement: statement.clone(), verify, terms };
                tareas::add(&common.ctx()?, operator.house.as_deref(), operator.admin_token.as_deref(), &task)
            })();
            emit(common.json, r, tareas::task_human)
        }
        ClientCommand::Tareas(TareasCommand::Retire { id, operator, common }) => {
            let (house, token) = (operator.house.as_deref(), operator.admin_token.as_deref());
            let r = common.ctx().and_then(|ctx| tareas::retire(&ctx, house, token, &id));
            emit(common.json, r, tareas::task_human)
        }
        ClientCommand::Index(IndexCommand::Houses { index, common }) => {
            let r = common.ctx().and_then(|ctx| search::houses(&ctx, &index));
            emit(common.json, r, search::houses_human)
        }
        ClientCommand::Email { to, subject, body, in_reply_to, common } => {
            let r = (|| {
                let text = if body == "-" {
                    String::from_utf8(read_all(None)?)
                        .map_err(|_| Failure::usage("the email body is not UTF-8 text"))?
                } else {
                    body.clone()
                };
                super::email::email(&common.ctx()?, &to, subject.as_deref(), &text, in_reply_to.as_deref())
            })();
            emit(common.json, r, super::email::email_human)
        }
        ClientCommand::EmailIn { house, token, to, from, sysexits, json } => {
            let token = token
                .or_else(|| std::env::var("NYX5_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()))
                .ok_or_else(|| Failure::usage("give the house's operator token with --token (or NYX5_ADMIN_TOKEN)"));
            let r = token.and_then(|token| {
                let raw = io::read_stdin(super::email::MAX_EMAIL_BYTES)?;
                super::email::email_in(&house, &token, &to, from.as_deref(), &raw)
            });
            let r = if sysexits {
                r.map_err(|f| {
                    let code = super::email::sysexit(&f);
                    f.with_code(code)
                })
            } else {
                r
            };
            emit(json, r, super::email::email_in_human)
        }
        ClientCommand::Allow { entries, common } => {
            let r = common.ctx().and_then(|ctx| lists::change(&ctx, Change::Allow, &entries));
            emit(common.json, r, lists::lists_human)
        }
        ClientCommand::Block { entries, common } => {
            let r = common.ctx().and_then(|ctx| lists::change(&ctx, Change::Block, &entries));
            emit(common.json, r, lists::lists_human)
        }
        ClientCommand::Unlist { entries, from, common } => {
            let r =
                Change::unlist_from(from.as_deref()).and_then(|change| lists::change(&common.ctx()?, change, &entries));
            emit(common.json, r, lists::lists_human)
        }
        ClientCommand::Lists { common } => {
            let r = common.ctx().and_then(|ctx| lists::lists(&ctx));
            emit(common.json, r, lists::lists_human)
        }
        ClientCommand::Hold(HoldCommand::Show { target, common }) => {
            let op = drafts::AsOperator { admin_token: target.admin_token.as_deref() };
            let r = common.ctx().and_then(|ctx| drafts::hold_show(&ctx, target.for_local.as_deref(), &op));
            emit(common.json, r, drafts::holds_human)
        }
        ClientCommand::Hold(HoldCommand::Set { approver, all, strangers, known, domain, kind, target, common }) => {
            let op = drafts::AsOperator { admin_token: target.admin_token.as_deref() };
            let mut rule = nyx5_proto::Object::new();
            let list = |l: &[String]| Value::Array(l.iter().map(|s| s.as_str().into()).collect());
            if all {
                rule.insert("all".into(), Value::Bool(true));
            }
            if strangers {
                rule.insert("strangers".into(), Value::Bool(true));
            }
            for (name, l) in [("known", &known), ("domains", &domain), ("types", &kind)] {
                if !l.is_empty() {
                    rule.insert(name.into(), list(l));
                }
            }
            let r =
                common.ctx().and_then(|ctx| drafts::hold_set(&ctx, target.for_local.as_deref(), &approver, rule, &op));
            emit(common.json, r, drafts::holds_human)
        }
        ClientCommand::Hold(HoldCommand::Lift { target, common }) => {
            let op = drafts::AsOperator { admin_token: target.admin_token.as_deref() };
            let r = common.ctx().and_then(|ctx| drafts::hold_lift(&ctx, target.for_local.as_deref(), &op));
            emit(common.json, r, drafts::holds_human)
        }
        ClientCommand::Drafts(DraftsArgs { command: None, common }) => {
            let r = common.ctx().and_then(|ctx| drafts::list(&ctx));
            emit(common.json, r, drafts::list_human)
        }
        ClientCommand::Drafts(DraftsArgs { command: Some(DraftsCommand::Show { id, common }), .. }) => {
            let r = common.ctx().and_then(|ctx| drafts::show_draft(&ctx, &id));
            emit(common.json, r, drafts::show_human)
        }
        ClientCommand::Drafts(DraftsArgs { command: Some(DraftsCommand::Approve { id, yes, common }), .. }) => {
            let r = common.ctx().and_then(|ctx| drafts::approve(&ctx, &id, yes));
            emit(common.json, r, drafts::decided_human)
        }
        ClientCommand::Drafts(DraftsArgs { command: Some(DraftsCommand::Decline { id, note, common }), .. }) => {
            let r = common.ctx().and_then(|ctx| drafts::decline(&ctx, &id, note.as_deref()));
            emit(common.json, r, drafts::decided_human)
        }
        ClientCommand::Pins { admin_token: t, house, confirm, sig, common } => {
            let r = admin_token(t).and_then(|token| {
                let ctx = common.ctx()?;
                match (&confirm, &sig) {
                    (Some(domain), Some(sig)) => lists::confirm_pin(&ctx, house.as_deref(), &token, domain, sig),
                    _ => lists::pins(&ctx, house.as_deref(), &token),
                }
            });
            emit(common.json, r, lists::pins_human)
        }
        ClientCommand::Settings { common } => {
            let r = common.ctx().and_then(|ctx| settings::settings(&ctx));
            emit(common.json, r, settings::settings_human)
        }
        ClientCommand::Health { house, common } => {
            let r = common.ctx().and_then(|ctx| directory::health(&ctx, &house));
            emit(common.json, r, directory::health_human)
        }
    }
}
