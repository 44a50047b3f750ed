//! `Net` on Workers `fetch`, `Clock` on `Date.now()`, `Rng` on the platform's CSPRNG.

use nyx5_house::ports::{Clock, Net, OutRequest, OutResponse, PortError, Rng};
use nyx5_proto::Timestamp;
use wasm_bindgen::JsValue;
use worker::{Fetch, Headers, Method, Request, RequestInit};

/// Outbound HTTP through the Workers runtime.
pub(crate) struct FetchNet;

fn failed(e: worker::Error) -> PortError {
    PortError::Failed(e.to_string())
}

impl Net for FetchNet {
    async fn send(&self, request: OutRequest) -> Result<OutResponse, PortError> {
        let headers = Headers::new();
        for (k, v) in &request.headers {
            headers.set(k, v).map_err(failed)?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::from(request.method.clone())).with_headers(headers);
        if !request.body.is_empty() {
            init.with_body(Some(JsValue::from(js_sys::Uint8Array::from(request.body.as_slice()))));
        }
        let req = Request::new_with_init(&request.url, &init).map_err(failed)?;
        let mut resp = Fetch::Request(req).send().await.map_err(failed)?;
        let body = resp.bytes().await.map_err(failed)?;
        Ok(OutResponse { status: resp.status_code(), body })
    }
}

/// The Workers clock (frozen during a request's synchronous parts, as the platform defines).
pub(crate) struct WorkerClock;

impl Clock for WorkerClock {
    fn now(&self) -> Timestamp {
        Timestamp(worker::Date::now().as_millis() as i64)
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
