//! `Net` on Workers `fetch`, `Clock` on `Date.now()`, `Rng` on the platform's CSPRNG.

use futures_util::StreamExt;
use nyx5_house::outbound::{MAX_ANSWER_BYTES, TIMEOUT_MS};
use nyx5_house::ports::{Clock, Net, OutRequest, OutResponse, PortError, Rng};
use nyx5_proto::Timestamp;
use wasm_bindgen::JsValue;
use worker::{AbortSignal, ByteStream, Fetch, Headers, Request};

/// Outbound HTTP through the Workers runtime, as `nyx5 serve`'s client does it: a deadline over
/// the whole exchange, redirects handed back rather than followed, and the answer read as a
/// stream up to [`MAX_ANSWER_BYTES`]. The engine has already held the URL to its outbound
/// policy (`nyx5_house::outbound`): workerd resolves names itself, so the check is by name.
pub(crate) struct FetchNet;

fn failed(e: worker::Error) -> PortError {
    PortError::Failed(e.to_string())
}

/// Reads a body stream, failing as soon as it passes `cap` bytes. No stream is an empty body.
pub(crate) async fn read_capped(stream: worker::Result<ByteStream>, cap: usize) -> Result<Vec<u8>, Capped> {
    let Ok(mut stream) = stream else { return Ok(Vec::new()) };
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Capped::Unreadable(e.to_string()))?;
        if body.len().saturating_add(chunk.len()) > cap {
            return Err(Capped::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a request body as the runtime hands it over, failing as soon as it passes `cap` bytes.
/// Unlike [`read_capped`] (workers-rs' `ByteStream`, which ends quietly on an `aborted` error),
/// every rejected read is [`Capped::Unreadable`]: a body that breaks off is never a shorter
/// whole one. No stream (a request without a body) is an empty body.
pub(crate) async fn read_stream_capped(stream: Option<web_sys::ReadableStream>, cap: usize) -> Result<Vec<u8>, Capped> {
    use wasm_bindgen::JsCast;
    let Some(stream) = stream else { return Ok(Vec::new()) };
    let reader: web_sys::ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let mut body = Vec::new();
    loop {
        let read = worker::wasm_bindgen_futures::JsFuture::from(reader.read()).await;
        let result: web_sys::ReadableStreamReadResult = match read {
            Ok(r) => r.unchecked_into(),
            Err(e) => return Err(Capped::Unreadable(format!("{e:?}"))),
        };
        if result.get_done().unwrap_or(false) {
            return Ok(body);
        }
        let Ok(chunk) = result.get_value().dyn_into::<js_sys::Uint8Array>() else {
            return Err(Capped::Unreadable("a body chunk that is not bytes".into()));
        };
        if body.len().saturating_add(chunk.length() as usize) > cap {
            // Nothing more is wanted from this body; whether the cancel settles does not matter.
            drop(reader.cancel());
            return Err(Capped::TooLarge);
        }
        body.extend_from_slice(&chunk.to_vec());
    }
}

/// Why [`read_capped`] and [`read_stream_capped`] stopped.
#[derive(Debug)]
pub(crate) enum Capped {
    TooLarge,
    Unreadable(String),
}

impl Net for FetchNet {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        let headers = Headers::new();
        for (k, v) in &request.headers {
            headers.set(k, v).map_err(failed)?;
        }
        // web-sys's own init, not workers-rs's: converting that one sets every member it has
        // (10 KB of the wasm), where a request sets four.
        let init = web_sys::RequestInit::new();
        init.set_method(&request.method);
        init.set_headers(&headers.0);
        init.set_redirect(web_sys::RequestRedirect::Manual);
        if !request.body.is_empty() {
            init.set_body(&JsValue::from(js_sys::Uint8Array::from(request.body.as_slice())));
        }
        let req =
            Request::from(web_sys::Request::new_with_str_and_init(&request.url, &init).map_err(|e| failed(e.into()))?);
        // One deadline for connecting, the answer's head and its whole body.
        let signal = AbortSignal::from(web_sys::AbortSignal::timeout_with_u32(TIMEOUT_MS));
        let mut resp = Fetch::Request(req).send_with_signal(&signal).await.map_err(failed)?;
        let body = read_capped(resp.stream(), MAX_ANSWER_BYTES).await.map_err(|e| match e {
            Capped::TooLarge => PortError::Failed(format!("answer larger than {MAX_ANSWER_BYTES} bytes")),
            Capped::Unreadable(why) => PortError::Failed(why),
        })?;
        // workers-rs ends an aborted body stream quietly: a body cut short by the deadline must
        // not pass for a whole one.
        if signal.aborted() {
            return Err(PortError::Failed(format!("no whole answer within {TIMEOUT_MS} ms")));
        }
        Ok(OutResponse { status: resp.status_code(), body })
    }
}

/// The Workers clock (frozen during a request's synchronous parts, as the platform defines).
pub(crate) struct WorkerClock;

impl Clock for WorkerClock {
    fn now(&self) -> Timestamp {
        Timestamp(worker::Date::now().as_millis() as i64)
    }

    /// `setTimeout` (a timer is I/O to workerd: the clock moves on when it fires).
    fn sleep(&self, ms: u64) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> {
        Some(Box::pin(worker::Delay::from(std::time::Duration::from_millis(ms))))
    }
}

/// `crypto.getRandomValues` through getrandom.
pub(crate) struct WorkerRng;

impl Rng for WorkerRng {
    fn fill(&self, buf: &mut [u8]) {
        // getrandom on wasm_js fails only without Web Crypto, which Workers always have. Never go
        // on with predictable bytes: end this invocation with a JS exception instead.
        if getrandom::fill(buf).is_err() {
            wasm_bindgen::throw_str("nyx5: no cryptographic randomness available");
        }
    }
}
