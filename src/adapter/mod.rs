//! The Worker adapter: `fetch`, `scheduled` and `email` events onto the house engine, over D1 and
//! Workers `fetch`. No engine logic lives here.

mod d1;
mod ed25519;
mod env;
mod fetch;
mod r2;

use std::cell::RefCell;
use std::rc::Rc;

use nyx5_house::a2a_stream::Follow;
use nyx5_house::weburl::WebUrl;
use nyx5_house::{House, Request as HouseRequest, Response as HouseResponse};
use nyx5_proto::{Error, ErrorKind, Refusal, limits};
use worker::{Context, Env, ForwardableEmailMessage, Request, Response, ScheduleContext, ScheduledEvent, event};

use d1::D1Db;
use fetch::{FetchNet, WorkerClock, WorkerRng};
use nyx5_house::shards::Shards;

type WorkerHouse = House<Shards<D1Db>, FetchNet>;

/// Most mailbox databases a Worker binds: `DB_SHARD_1` to `DB_SHARD_15`, besides `DB`.
const MAX_SHARDS: usize = 15;

/// What D1 billed every database of the house since the last call, summed (metering on).
fn take(db: &Shards<D1Db>) -> Option<d1::Meter> {
    let mut sum: Option<d1::Meter> = None;
    for m in (0..db.count()).filter_map(|i| db.get(i)).filter_map(D1Db::take) {
        let s = sum.get_or_insert_with(Default::default);
        s.queries += m.queries;
        s.batches += m.batches;
        s.statements += m.statements;
        s.rows_read += m.rows_read;
        s.rows_written += m.rows_written;
    }
    sum
}

thread_local! {
    /// One house per isolate, built at the first event (like the first implementation's instance).
    static HOUSE: RefCell<Option<Rc<WorkerHouse>>> = const { RefCell::new(None) };
}

/// Requests larger than this are refused before their body is read.
const MAX_REQUEST_BYTES: usize = 2 * limits::MAX_ENVELOPE_BYTES;

async fn house(env: &Env) -> Result<Rc<WorkerHouse>, Error> {
    if let Some(h) = HOUSE.with(|h| h.borrow().clone()) {
        return Ok(h);
    }
    suffix_list(env).await?;
    let db = env.d1("DB").map_err(|e| Error::new(ErrorKind::Internal, format!("D1 binding DB: {e}")))?;
    let meter = env::metering(env).then(Default::default);
    let mut dbs = vec![D1Db { db, meter, written: Default::default() }];
    // Mailbox shards (issue 36 §3; docs/decisions/0060-mailbox-shards.md): `DB_SHARD_1`,
    // `DB_SHARD_2`, … in wrangler.toml, each migrated like `DB`, numbered without gaps, never
    // reordered.
    for n in 1..=MAX_SHARDS {
        let Ok(shard) = env.d1(&format!("DB_SHARD_{n}")) else { break };
        dbs.push(D1Db { db: shard, meter: env::metering(env).then(Default::default), written: Default::default() });
    }
    let db = Shards::new(dbs, Box::new(WorkerClock), Box::new(WorkerRng))
        .ok_or_else(|| Error::new(ErrorKind::Internal, "no D1 database"))?;
    let now = nyx5_house::ports::Clock::now(&WorkerClock);
    let (key, created) = match env::domain_key(env)? {
        // A key from the secret carries no creation time: the card says when this isolate signed it.
        Some(key) => (key, now),
        None => {
            let mut seed = [0u8; 32];
            nyx5_house::ports::Rng::fill(&WorkerRng, &mut seed);
            let (key, created) = nyx5_house::domain_keys::domain_key(&db, seed, now).await?;
            worker::console_warn!(
                "nyx5: no NYX5_DOMAIN_KEY secret; using the key kept in D1 ({}). Production must set the secret.",
                key.public().to_b64()
            );
            (key, created)
        }
    };
    let config = env::config(env, key, created)?;
    let house = House::new(config, db, FetchNet, Box::new(WorkerClock), Box::new(WorkerRng))?;
    // Attachments' parts, when the bucket is bound (wrangler.toml `ATTACHMENTS`).
    let house = match r2::R2Blobs::bound(env) {
        Some(bucket) => house.with_blobs(Box::new(bucket)),
        None => house,
    };
    let house = Rc::new(house);
    HOUSE.with(|h| *h.borrow_mut() = Some(house.clone()));
    Ok(house)
}

/// The Public Suffix List, which the wasm leaves out (docs/decisions/0040-psl-coded-table.md):
/// read once per isolate from the static assets, before the house is built, and taken only if
/// it is the list this build was made with. Without it no event is served: limits and
/// blocks key on sites.
async fn suffix_list(env: &Env) -> Result<(), Error> {
    use nyx5_house::site;
    if site::loaded() {
        return Ok(());
    }
    let read = async {
        let assets = env.assets("ASSETS").map_err(|e| format!("ASSETS binding: {e}"))?;
        // The assets binding answers by path; the host is not looked at. A request of our own,
        // not `Fetcher::fetch`'s URL and options, which links workers-rs's `RequestInit`
        // conversion (10 KB of the wasm) for options this never gives.
        let url = format!("https://assets.invalid{}", site::ASSET_PATH);
        let request = web_sys::Request::new_with_str(&url).map_err(|e| format!("{e:?}"))?;
        let mut resp = assets.fetch_request(Request::from(request)).await;
        let resp = resp.as_mut().map_err(|e| e.to_string())?;
        if resp.status_code() != 200 {
            return Err(format!("status {}", resp.status_code()));
        }
        let bytes = fetch::read_capped(resp.stream(), site::ASSET_BYTES).await.map_err(|e| match e {
            fetch::Capped::TooLarge => format!("larger than this build's {} bytes", site::ASSET_BYTES),
            fetch::Capped::Unreadable(why) => why,
        })?;
        // A body cut short (`read_capped` ends quietly on an aborted stream) is a failed read,
        // not another build's list.
        if bytes.len() < site::ASSET_BYTES {
            return Err(format!("{} of {} bytes read", bytes.len(), site::ASSET_BYTES));
        }
        Ok(bytes)
    };
    match read.await {
        Ok(bytes) => site::install(bytes),
        // The reason is the operator's, in the log; the client hears to come back.
        Err(why) => {
            worker::console_error!("nyx5: Public Suffix List asset {}: {why}", site::ASSET_PATH);
            Err(Refusal::PslUnavailable.because("the house could not load its Public Suffix List; try again later"))
        }
    }
}

fn to_worker(resp: &HouseResponse) -> worker::Result<Response> {
    // A 204 or 304 has no body at all (a zero-length one is "technically incorrect" to workerd).
    let out =
        if matches!(resp.status, 204 | 304) { Response::empty()? } else { Response::from_bytes(resp.body.clone())? };
    with_head(out, resp)
}

/// `out` with the engine's status, type and headers.
fn with_head(out: Response, resp: &HouseResponse) -> worker::Result<Response> {
    let mut out = out.with_status(resp.status);
    let headers = out.headers_mut();
    headers.set("content-type", resp.content_type)?;
    for (name, value) in &resp.headers {
        headers.set(name, value)?;
    }
    Ok(out)
}

/// A streamed answer (A2A's Server-Sent Events, `nyx5_house::a2a_stream`): the body of a
/// `TransformStream`, whose writing side gets the answer's body, then each chunk the house gives
/// for `follow` as it comes, until it gives none or the client is gone (a write refused), under
/// `waitUntil` (the platform's streaming pattern). Not workers-rs's `from_stream`: the same size
/// (benches/README.md, "Bundle"), and here a client gone ends the writing plainly.
fn streamed(
    resp: &HouseResponse,
    house: Rc<WorkerHouse>,
    mut follow: Follow,
    ctx: &Context,
) -> worker::Result<Response> {
    use wasm_bindgen_futures::JsFuture;
    let pipe = web_sys::TransformStream::new().map_err(|e| worker::Error::JsError(format!("{e:?}")))?;
    let writer = pipe.writable().get_writer().map_err(|e| worker::Error::JsError(format!("{e:?}")))?;
    let first = resp.body.clone();
    ctx.wait_until(async move {
        let mut chunk = Some(first);
        while let Some(bytes) = chunk.take() {
            let array = js_sys::Uint8Array::from(bytes.as_slice());
            if JsFuture::from(writer.write_with_chunk(&array)).await.is_err() {
                return;
            }
            chunk = house.follow(&mut follow).await;
        }
        let _ = JsFuture::from(writer.close()).await;
    });
    with_head(worker::ResponseBuilder::new().stream(pipe.readable()), resp)
}

fn error_response(e: &Error) -> worker::Result<Response> {
    if e.kind == ErrorKind::Internal {
        worker::console_error!("nyx5: {e}");
    }
    to_worker(&nyx5_house::web::common(HouseResponse::error(e)))
}

/// The engine's request: `url` is the request's own, parsed once by [`fetch`].
async fn to_house(req: Request, url: Option<&WebUrl>) -> Result<HouseRequest, Error> {
    let declared = req.headers().get("content-length").ok().flatten().and_then(|l| l.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES) {
        return Err(Refusal::BodyTooLarge.because("request body too large"));
    }
    let target = url
        .and_then(|u| u.path_and_query().map(str::to_owned))
        .ok_or_else(|| Refusal::BadUrl.because(format!("bad URL: {}", req.inner().url())))?;
    let headers = req.headers().entries().collect();
    let method = req.method().to_string();
    // Streamed and capped: a chunked body declares no length, and must not be buffered whole.
    // A body whose stream fails (a bad chunk size, a client gone mid-body) or that ends before
    // its declared length is refused, never read as the shorter body it became.
    let body = fetch::read_stream_capped(req.inner().body(), MAX_REQUEST_BYTES).await.map_err(|e| match e {
        fetch::Capped::TooLarge => Refusal::BodyTooLarge.because("request body too large"),
        fetch::Capped::Unreadable(_) => Refusal::BodyUnreadable.because("request body could not be read whole"),
    })?;
    if declared.is_some_and(|n| n != body.len()) {
        return Err(Refusal::BodyUnreadable.because("request body does not match its Content-Length"));
    }
    Ok(HouseRequest::new(&method, &target, headers, body))
}

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
    ed25519::install();
    // The hot paths' code compiled now, in the start's own budget, not in the first request's
    // CPU (crates/house/src/warm.rs; issue 36 §4).
    if let Err(e) = nyx5_house::warm::run() {
        worker::console_warn!("nyx5: the start's warm-up stopped ({}); the first request compiles its code", e.reason);
    }
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let path = req.path();
    // The meter's header is for an operator measuring a house on this machine, never for a
    // stranger: what D1 billed (interleaved with other requests of the isolate) tells of traffic.
    let url = WebUrl::parse(&req.inner().url());
    let loopback = url.as_ref().is_some_and(|u| matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]")));
    // Tests only: the switch is the gate (a Host header can say "localhost" to a dev server).
    let selftest = req.method() == worker::Method::Post && loopback && env::selftest(&env);
    if path == "/_selftest/site" && selftest {
        return match site_selftest(req, &env).await {
            Ok(json) => Response::ok(json),
            Err(e) => error_response(&e),
        };
    }
    if path == "/_selftest/ed25519" && selftest {
        let body = match fetch::read_stream_capped(req.inner().body(), ed25519::SELFTEST_MAX_BYTES).await {
            Ok(body) => body,
            Err(_) => {
                return error_response(&Refusal::BodyTooLarge.because("self-test body over 4 MiB or unreadable"));
            }
        };
        return match ed25519::selftest(&body) {
            Ok(json) => Response::ok(json),
            Err(e) => error_response(&e),
        };
    }
    let house = match house(&env).await {
        Ok(h) => h,
        Err(e) => return error_response(&e),
    };
    let hreq = match to_house(req, url.as_ref()).await {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let what = format!("{} {}", hreq.method, hreq.path);
    take(&house.db);
    let resp = house.handle(hreq).await;
    let metered = take(&house.db);
    // A refusal for now (5xx) says why in the log: a peer's delivery that waits for the next tick
    // is otherwise seen only as a status (an internal error is logged where it happened).
    if resp.status >= 500 && resp.content_type == "application/json" {
        let why = String::from_utf8_lossy(resp.body.get(..resp.body.len().min(300)).unwrap_or_default());
        worker::console_warn!("nyx5: {what} answered {}: {why}", resp.status);
    }
    // After the answer: the delivery kick, then webhook pushes (the tick may add some).
    if resp.kick || house.mailbox().has_pushes() {
        let h = house.clone();
        let kick = resp.kick;
        ctx.wait_until(async move {
            if kick {
                take(&h.db);
                // A delivery that fails for now is tried once more a second later, within this
                // `waitUntil`: the cron would wait a minute (`House::kick`).
                if let Err(e) = h.kick().await {
                    worker::console_error!("nyx5: delivery kick: {e}");
                }
                log_tick(&h, "kick");
            }
            h.mailbox().send_pushes().await;
        });
    }
    let mut out = match resp.follow.clone() {
        Some(follow) => streamed(&resp, house.clone(), follow, &ctx)?,
        None => to_worker(&resp)?,
    };
    if let Some(m) = metered {
        worker::console_log!("nyx5 d1: {what} {} {}", resp.status, m.line());
        if loopback {
            out.headers_mut().set(METER_HEADER, &m.line())?;
        }
    }
    Ok(out)
}

/// `POST /_selftest/site` (only with `NYX5_SELFTEST=on`, only from loopback): the site of each
/// line of the body, as a JSON array, after loading the Public Suffix List as every event does:
/// tests/e2e/ed25519_workerd.mjs holds the Worker to the list's own test cases with it.
async fn site_selftest(req: Request, env: &Env) -> Result<String, Error> {
    let body = fetch::read_stream_capped(req.inner().body(), 64 * 1024)
        .await
        .map_err(|_| Refusal::BodyTooLarge.because("self-test body over 64 KiB or unreadable"))?;
    suffix_list(env).await?;
    let names = String::from_utf8_lossy(&body);
    let sites = names.lines().map(|name| nyx5_house::site::site(name).into()).collect();
    Ok(nyx5_proto::Value::Array(sites).canonical_string())
}

/// The answer's header carrying what D1 billed for the request, when metering is on.
const METER_HEADER: &str = "x-nyx5-d1";

/// One log line per tick with what D1 billed for it, when metering is on.
fn log_tick(house: &WorkerHouse, what: &str) {
    if let Some(m) = take(&house.db) {
        worker::console_log!("nyx5 d1: {what} {}", m.line());
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
    match house(&env).await {
        Ok(h) => {
            take(&h.db);
            match h.tick().await {
                Err(e) => worker::console_error!("nyx5: scheduled tick: {e}"),
                Ok(r) => {
                    if let Some(why) = r.settle_error {
                        worker::console_error!("nyx5: settling mailbox shard hand-offs: {why}");
                    }
                }
            }
            log_tick(&h, "tick");
            if h.mailbox().has_pushes() {
                ctx.wait_until(async move { h.mailbox().send_pushes().await });
            }
        }
        Err(e) => worker::console_error!("nyx5: scheduled: {e}"),
    }
}

/// The authserv-id of Cloudflare Email Routing's inbound MX: it evaluates SPF, DKIM and DMARC and
/// writes its `Authentication-Results: mx.cloudflare.net; …` on top of every message before it
/// hands the message to the `email` event, so for that event (and only for it) its verdict is the
/// receiver's own (docs/SPEC.md "Email bridge").
const CLOUDFLARE_AUTHSERV_ID: &str = "mx.cloudflare.net";

/// Email Routing hands each message here (spec §10, docs/SPEC.md "Email bridge"). A refusal
/// for good (unknown recipient, too large, blocked, …) is `setReject` with the house's reason; a
/// temporary one (rate limit, storage down) fails the event, so the sending side tries again.
#[event(email)]
async fn email(message: ForwardableEmailMessage, env: Env, ctx: Context) -> worker::Result<()> {
    let house = match house(&env).await {
        Ok(h) => h,
        Err(e) => {
            worker::console_error!("nyx5: email: {e}");
            return Err(worker::Error::RustError("nyx5: the house is not available, try again later".into()));
        }
    };
    let max = house.config.email_max_bytes.min(house.config.max_bytes);
    if message.raw_size() > max as f64 {
        // A count of bytes, written as one: `{}` of the `f64` workerd gives would link Rust's
        // float formatting, 7.6 KB of the gzipped wasm, for this message alone.
        let reason =
            format!("nyx5: message of {} bytes exceeds this house's limit of {max}", message.raw_size() as u64);
        return reject(&message, &reason).await;
    }
    let raw = message.raw_bytes().await?;
    let received = house.email().receive_email(&raw, &message.from(), &message.to(), &[CLOUDFLARE_AUTHSERV_ID]).await;
    // Whoever waits on the mailbox in this isolate reads it now (others at their recheck).
    house.bell().ring_arrived();
    match received {
        Ok(_) => {
            if house.mailbox().has_pushes() {
                let h = house.clone();
                ctx.wait_until(async move { h.mailbox().send_pushes().await });
            }
            Ok(())
        }
        Err(e) if e.kind.is_temporary() => {
            if e.kind == ErrorKind::Internal {
                worker::console_error!("nyx5: email: {e}");
            }
            // Only the class (`rate_limited`, …): an email's sender is anyone, and neither the
            // reason nor the refusal's name (`mailbox_full` would tell the recipient's quota) is
            // sent to it.
            Err(worker::Error::RustError(format!("nyx5: {} {}, try again later", e.code(), e.kind.slug())))
        }
        Err(e) => reject(&message, &format!("nyx5: {} {}", e.code(), e.reason)).await,
    }
}

/// `message.setReject(reason)`, awaited when it answers a thenable. On Cloudflare it is synchronous;
/// under `wrangler dev` the message comes over RPC, `setReject` answers a promise, and a handler
/// that returns before it settles has its rejection reported as delivered mail.
async fn reject(message: &ForwardableEmailMessage, reason: &str) -> worker::Result<()> {
    use worker::wasm_bindgen::JsCast;
    let answer = message.unchecked_ref::<RejectableEmail>().set_reject(reason);
    worker::wasm_bindgen_futures::JsFuture::from(worker::js_sys::Promise::resolve(&answer)).await?;
    Ok(())
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// The incoming message seen as "something with `setReject`", keeping what the call answers.
    type RejectableEmail;
    #[wasm_bindgen(method, js_name = setReject)]
    fn set_reject(this: &RejectableEmail, reason: &str) -> wasm_bindgen::JsValue;
}
