//! `nyx5 serve`: the house engine on a SQLite file behind a real HTTP server, the queue ticking
//! on a timer. This module reads the options and prepares the house (database, domain key, admin
//! token, configuration); `server` runs it on tokio, accepting connections within their caps,
//! `conn` serves each connection's HTTP/1.1 within its deadlines, and `http` reads and writes the
//! bytes. The engine decides everything; nothing here knows a route.

mod assets;
mod blobs;
mod conn;
mod http;
mod server;
mod share;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nyx5_house::config::parse_hosts;
use nyx5_house::domain_keys as settings;
use nyx5_house::ports::{Clock, Rng};
use nyx5_house::shards::Shards;
use nyx5_house::sqlite::SqliteDb;
use nyx5_house::{Config, House, Registration};
use nyx5_proto::Timestamp;

use crate::error::{Failure, Outcome};
use crate::io::write_text;
use crate::net::HttpNet;

/// The house `nyx5 serve` runs.
type ServedHouse = House<Shards<SqliteDb>, HttpNet>;

/// Run a Nyx5 house: the engine on a SQLite file, over HTTP.
///
/// On first start the house makes its domain key and, without --admin-token, an admin token,
/// keeps both in the database and prints the token once. It prints
/// `nyx5 serve: <domain> at <public url>` when it is ready, works the delivery queue every
/// --tick-ms and right after each send, and stops cleanly on SIGINT or SIGTERM. Quotas and rates
/// come from the environment: NYX5_MAILBOX_MAX_ENVELOPES, NYX5_MAILBOX_MAX_BYTES,
/// NYX5_OUTBOUND_PER_MINUTE, NYX5_OPEN_REGISTRATIONS_PER_MINUTE, NYX5_INBOUND_PER_DOMAIN_PER_MINUTE.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The mail domain: agents here are `name@DOMAIN`.
    #[arg(long, value_name = "DOMAIN")]
    domain: String,
    /// The SQLite database file, created (0600) and migrated if needed.
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// A further SQLite file for mailboxes (repeat for more): agents registered from now on are
    /// spread over --db and these by a stable rule, and `nyx5 shard move` moves one. Give the
    /// same files, in the same order, at every start.
    #[arg(long = "shard", value_name = "FILE")]
    shards: Vec<PathBuf>,
    /// Where attachments' sealed parts are kept [default: the --db file's name with
    /// `.attachments`, beside it]
    #[arg(long, value_name = "DIR")]
    attachments: Option<PathBuf>,
    /// The address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// The base URL other houses and agents reach this house at [default: http://<listen>].
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// A hosts file: `{"<domain>": {"url": "<base URL>", "sig": "<optional pinned key>"}}`.
    #[arg(long, value_name = "FILE")]
    hosts: Option<PathBuf>,
    /// Who may register agents: the operator only, holders of an invitation, or anyone.
    #[arg(long, value_name = "MODE", default_value = "invite", value_parser = ["admin", "invite", "open"])]
    registration: String,
    /// The operator's bearer token [default: generated on first start and kept in the db].
    #[arg(long, value_name = "TOKEN", env = "NYX5_ADMIN_TOKEN", hide_env_values = true, allow_hyphen_values = true)]
    admin_token: Option<String>,
    /// A DNS-over-HTTPS JSON endpoint for `_nyx5.<domain>` TXT lookups (e.g. …/dns-query).
    #[arg(long, value_name = "URL")]
    doh_url: Option<String>,
    /// Test setups only: URLs learnt from peers (card estafetas, DNS records, webhooks) may be
    /// plain http and name loopback or private addresses. The hosts file may name them anyway.
    #[arg(long, env = "NYX5_ALLOW_PRIVATE_NETWORK", value_parser = clap::builder::FalseyValueParser::new())]
    allow_private_network: bool,
    /// The email bridge's provider key (Resend); with --email-sender, agents' email goes out.
    #[arg(long, value_name = "KEY", env = "NYX5_RESEND_KEY", hide_env_values = true, allow_hyphen_values = true)]
    resend_key: Option<String>,
    /// The sender address email goes out from (a domain verified with the provider).
    #[arg(long, value_name = "ADDRESS")]
    email_sender: Option<String>,
    /// The provider's API URL [default: https://api.resend.com/emails]
    #[arg(long, value_name = "URL")]
    email_provider_url: Option<String>,
    /// The authserv-ids (comma-separated) of the MTAs in front of `POST /email/in` whose topmost
    /// `Authentication-Results` the email bridge believes: a DMARC pass there makes the From
    /// domain authenticated (allowlists, its own rate). Without it all email is unauthenticated.
    #[arg(long, value_name = "IDS", env = "NYX5_EMAIL_AUTHSERV_IDS")]
    email_authserv_ids: Option<String>,
    /// Rotate the domain key before starting: a new key signs from now on, and the current one
    /// stays listed (with a handover to the new one) for 30 days while stored cards are
    /// certified again by the new key.
    #[arg(long)]
    rotate_domain_key: bool,
    /// How often the delivery queue is worked, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    tick_ms: u64,
    /// Refuse envelopes from other houses without a valid relay header (the domain card says
    /// so); `--require-relay=false` accepts them, checked by the sender's card alone.
    #[arg(
        long,
        value_name = "BOOL",
        env = "NYX5_REQUIRE_RELAY",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    require_relay: bool,
    /// Connections served at once. When all are held, a new one takes the place of an idle or
    /// silent one, or of one of the client holding the most; else it is answered 503 and closed
    /// (evicted connections keep their descriptor a moment longer). Keep it well under the
    /// process's open-file limit (`ulimit -n`, often 1024): the database and deliveries need
    /// descriptors too.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Connections from one IPv4 address, or one IPv6 /64, at once, and four times as many from
    /// one IPv6 /48 (0: no limit); more are answered 429 and closed. When every connection is
    /// held, a new one takes the place of one of the client holding the most. Behind a reverse
    /// proxy every connection comes from the proxy: raise it, or 0.
    #[arg(long, value_name = "N", default_value_t = 32)]
    max_connections_per_ip: u64,
    /// Behind a reverse proxy: the header it writes the client's address in (e.g.
    /// X-Forwarded-For; its last entry is taken). Without it, the connection's address is the
    /// client's, for each client's share of open registration.
    #[arg(long, value_name = "NAME", env = "NYX5_CLIENT_ADDRESS_HEADER")]
    client_address_header: Option<String>,
    /// Tokens the Libro gives each new agent (the operator's and open registrations; an
    /// invitation's `welcome` adds to it; subagents get none).
    #[arg(long, value_name = "N", env = "NYX5_WELCOME", default_value_t = 0,
          value_parser = clap::value_parser!(i64).range(0..=nyx5_proto::limits::MAX_AMOUNT))]
    welcome: i64,
    /// The Libro's fee on charges, releases and stamps, in basis points (1000 = 10 %).
    #[arg(long, value_name = "BPS", env = "NYX5_FEE_BPS", default_value_t = 1000,
          value_parser = clap::value_parser!(i64).range(0..=nyx5_proto::limits::BPS_WHOLE))]
    fee_bps: i64,
    /// How long a movement waits for a human's approval before its hold returns, in seconds.
    #[arg(long, value_name = "SECONDS", env = "NYX5_APPROVAL_SECONDS", default_value_t = 86_400,
          value_parser = clap::value_parser!(i64).range(1..=nyx5_rules::libro::authority::MAX_APPROVAL_SECONDS))]
    approval_seconds: i64,
    /// Run a federated index (spec §13): `/index/*` answers, and each tick crawls the houses
    /// registered with `POST /index/houses`.
    #[arg(long, env = "NYX5_INDEX", value_parser = clap::builder::BoolishValueParser::new(), default_missing_value = "true", num_args = 0..=1)]
    index: bool,
    /// Outbound requests one tick's crawl may make.
    #[arg(long, value_name = "N", env = "NYX5_INDEX_FETCHES", default_value_t = nyx5_house::config::INDEX_FETCHES_PER_TICK,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    index_fetches: u32,
    /// Run `verifica@` (spec §22): escrows that name it arbiter with `terms.verify` are judged
    /// by each tick with the tests `http_status` and `sha256` (`exit_0` is not offered).
    #[arg(long, env = "NYX5_VERIFICA", value_parser = clap::builder::BoolishValueParser::new(), default_missing_value = "true", num_args = 0..=1)]
    verifica: bool,
    /// Outbound requests one tick's checks may make.
    #[arg(long, value_name = "N", env = "NYX5_VERIFICA_FETCHES", default_value_t = nyx5_house::config::VERIFICA_FETCHES_PER_TICK,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    verifica_fetches: u32,
    /// A PEM file of certificates to trust for outbound https instead of the bundled Mozilla
    /// roots: a private PKI, or a test CA (tests/e2e/tls).
    #[arg(long, value_name = "FILE", env = "NYX5_TLS_ROOTS")]
    tls_roots: Option<PathBuf>,
    /// Serve the browser client at /app from DIR (scripts/build-app writes it to build/site:
    /// `app/` and its `_headers`), read once at start.
    #[arg(long, value_name = "DIR", env = "NYX5_APP")]
    app: Option<PathBuf>,
    /// Offer the catalogue's paid work through `tareas@` (spec §23; needs --verifica). Caps:
    /// NYX5_TAREAS_PER_AGENT_PER_DAY (default 1) and NYX5_TAREAS_PER_DAY (default 100).
    #[arg(long, env = "NYX5_TAREAS", value_parser = clap::builder::BoolishValueParser::new(), default_missing_value = "true", num_args = 0..=1, requires = "verifica")]
    tareas: bool,
}

/// The wall clock, in whole milliseconds.
#[derive(Debug)]
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// A timer of the runtime the house is served in (tokio's, inside `serve`); outside one (a
    /// house built by an offline command) nothing waits.
    fn sleep(&self, ms: u64) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> {
        tokio::runtime::Handle::try_current().ok()?;
        Some(Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms))))
    }
}

/// The operating system's randomness. A house must never go on with predictable bytes, and
/// `Rng::fill` cannot fail, so a failure ends the process.
#[derive(Debug)]
struct OsRandom;

impl Rng for OsRandom {
    fn fill(&self, buf: &mut [u8]) {
        if let Err(e) = getrandom::fill(buf) {
            eprintln!("nyx5 serve: the operating system gave no random bytes ({e}); stopping");
            std::process::abort();
        }
    }
}

fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    OsRandom.fill(&mut b);
    b
}

/// Creates the database file readable by its owner only (it holds the domain key and the admin
/// token); SQLite gives its `-wal` and `-shm` files the same mode.
fn create_private(path: &Path) -> Outcome {
    if path.exists() {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map(drop).map_err(|e| Failure::usage(format!("cannot create {}: {e}", path.display())))
}

/// The options, checked, as the engine's configuration (minus the key and the admin token).
struct Plan {
    domain: String,
    public_url: Option<String>,
    registration: Registration,
    hosts: Option<String>,
    doh_url: Option<String>,
    email_authserv_ids: Vec<String>,
}

fn plan(args: &Args) -> Result<Plan, Failure> {
    nyx5_proto::address::check_domain(&args.domain)
        .map_err(|why| Failure::usage(format!("--domain {:?}: {why}", args.domain)))?;
    let registration = Registration::parse(&args.registration).map_err(|e| Failure::usage(e.reason))?;
    let public_url = match &args.public_url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            Some(url.trim_end_matches('/').to_owned())
        }
        Some(url) => return Err(Failure::usage(format!("--public-url {url:?} must start with http:// or https://"))),
        None => None,
    };
    let hosts = match &args.hosts {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("cannot read the hosts file {}: {e}", path.display())))?,
        ),
        None => None,
    };
    if let Some(url) = &args.email_provider_url
        && !url.starts_with("https://")
        && !url.starts_with("http://")
    {
        return Err(Failure::usage(format!("--email-provider-url {url:?} must start with https:// or http://")));
    }
    if let Some(url) = &args.doh_url {
        nyx5_house::resolver::check_doh_url(url).map_err(|e| Failure::usage(format!("--doh-url: {}", e.reason)))?;
    }
    let email_authserv_ids = nyx5_house::config::parse_authserv_ids(args.email_authserv_ids.as_deref().unwrap_or(""))
        .map_err(|e| Failure::usage(format!("--email-authserv-ids: {}", e.reason)))?;
    Ok(Plan {
        domain: args.domain.clone(),
        public_url,
        registration,
        hosts,
        doh_url: args.doh_url.clone(),
        email_authserv_ids,
    })
}

/// The house's databases: `db`, the primary, then each of `shards`, created (0600) and migrated.
pub(crate) fn open_files(db: &std::path::Path, shards: &[PathBuf]) -> Result<Shards<SqliteDb>, Failure> {
    let mut dbs = Vec::new();
    for path in std::iter::once(db).chain(shards.iter().map(PathBuf::as_path)) {
        create_private(path)?;
        dbs.push(
            SqliteDb::open(path)
                .map_err(|e| Failure::usage(format!("cannot open the database {}: {e}", path.display())))?,
        );
    }
    Shards::new(dbs, Box::new(SystemClock), Box::new(OsRandom)).ok_or_else(|| Failure::usage("no database"))
}

/// `nyx5 serve`.
pub(crate) fn run(args: Args) -> Outcome {
    let plan = plan(&args)?;
    if args.admin_token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(Failure::usage("--admin-token must not be empty"));
    }
    let hosts = match &plan.hosts {
        Some(text) => parse_hosts(text).map_err(|e| Failure::usage(format!("hosts file: {}", e.reason)))?,
        None => Default::default(),
    };
    let db = open_files(&args.db, &args.shards)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("cannot start the runtime: {e}")))?;
    let local = tokio::task::LocalSet::new();
    let outcome = local.block_on(&runtime, async move {
        let now = SystemClock.now();
        if args.rotate_domain_key {
            let (key, _) = settings::rotate_domain_key(&db, random32(), now, settings::ROTATION_GRACE_MS)
                .await
                .map_err(|e| Failure::usage(format!("rotating the domain key: {}", e.reason)))?;
            eprintln!("nyx5 serve: rotated the domain key; the new key is {}", key.public().to_b64());
        }
        let (key, created) = settings::domain_key(&db, random32(), now)
            .await
            .map_err(|e| Failure::usage(format!("domain key: {}", e.reason)))?;
        let previous_keys = settings::previous_domain_keys(&db)
            .await
            .map_err(|e| Failure::usage(format!("previous domain keys: {}", e.reason)))?;
        let (admin_token, new_token) = match args.admin_token {
            Some(token) => (token, false),
            None => settings::admin_token(&db, random32(), now)
                .await
                .map_err(|e| Failure::usage(format!("admin token: {}", e.reason)))?,
        };
        let listener = std::net::TcpListener::bind(args.listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.listen)))?;
        let bound = listener.local_addr().unwrap_or(args.listen);
        let public_url = plan.public_url.unwrap_or_else(|| format!("http://{bound}"));

        let mut config = Config::new(&plan.domain, &public_url, key, created);
        config.previous_keys = previous_keys;
        config.admin_token = Some(admin_token.clone());
        config.registration = plan.registration;
        config.hosts = hosts;
        config.doh_url = plan.doh_url;
        config.email_authserv_ids = plan.email_authserv_ids;
        config.resend_key = args.resend_key.filter(|k| !k.trim().is_empty());
        config.email_sender = args.email_sender.filter(|s| !s.trim().is_empty());
        if let Some(url) = args.email_provider_url {
            config.email_provider_url = url;
        }
        config.allow_private_network = args.allow_private_network;
        config.require_relay = args.require_relay;
        config.welcome = args.welcome;
        config.fee_bps = args.fee_bps;
        config.approval_ttl_ms = args.approval_seconds.saturating_mul(1_000);
        config.index_enabled = args.index;
        config.index_fetches = args.index_fetches;
        config.verifica_enabled = args.verifica;
        config.verifica_fetches = args.verifica_fetches;
        config.tareas_enabled = args.tareas;
        config.allow_http = args.allow_private_network;
        // Quotas and rates, named as on the Worker (nyx5_house::config::LIMIT_SETTINGS).
        config.read_limits(|name| std::env::var(name).ok()).map_err(|e| Failure::usage(e.reason.to_string()))?;
        let roots = match &args.tls_roots {
            None => None,
            Some(path) => {
                let pem =
                    std::fs::read(path).map_err(|e| Failure::usage(format!("--tls-roots {}: {e}", path.display())))?;
                Some(
                    crate::net::read_roots(&pem)
                        .map_err(|e| Failure::usage(format!("--tls-roots {}: {e}", path.display())))?,
                )
            }
        };
        let net = HttpNet::with_roots(config.outbound_policy(), roots.as_deref());
        let parts = args.attachments.clone().unwrap_or_else(|| args.db.with_extension("attachments"));
        let house = House::new(config, db, net, Box::new(SystemClock), Box::new(OsRandom))
            .map_err(|e| Failure::usage(format!("cannot start the house: {}", e.reason)))?
            .with_blobs(Box::new(blobs::DiskBlobs::new(parts)));
        let assets = match &args.app {
            Some(dir) => assets::Assets::load(dir).map_err(|e| Failure::usage(format!("--app: {e}")))?,
            None => assets::Assets::default(),
        };
        let signals = server::Signals::install().map_err(|e| Failure::usage(format!("cannot catch signals: {e}")))?;

        if new_token {
            write_text(&format!(
                "nyx5 serve: admin token (shown only this once; it is kept in the database): {admin_token}\n"
            ))?;
        }
        eprintln!("nyx5 serve: domain key {}", house.config.key.public().to_b64());
        write_text(&format!("nyx5 serve: {} at {}\n", house.config.domain, house.config.public_url))?;
        let client_header = args.client_address_header.map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty());
        let limits = conn::Limits {
            max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            max_per_ip: usize::try_from(args.max_connections_per_ip).unwrap_or(usize::MAX),
            // A /48 (one site) may hold four /64s' worth: 0 for no per-address cap means none here.
            max_per_site: usize::try_from(args.max_connections_per_ip.saturating_mul(4)).unwrap_or(usize::MAX),
            // Behind a proxy (no per-address cap) every connection has the proxy's address: the
            // client is then the one its header names, and without one there is no cap.
            max_busy_per_client: if args.max_connections_per_ip == 0 && client_header.is_none() {
                0
            } else {
                conn::BUSY_PER_CLIENT
            },
            client_header,
            ..conn::Limits::default()
        };
        server::serve(house, assets, listener, Duration::from_millis(args.tick_ms), limits, signals).await;
        Ok(())
    });
    // A delivery still waiting on the network has its own deadline; the job is leased and is
    // retried by the next start, so there is no need to wait for it.
    drop(local);
    runtime.shutdown_timeout(Duration::from_millis(200));
    outcome
}
