//! Requests from hyper to the engine and answers back: the body limit, the body deadline, and
//! nothing else. Every refusal is the engine's JSON error shape.

use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::http::{HeaderValue, StatusCode, header};
use nyx5_house::http::{Request as HouseRequest, Response as HouseResponse};
use nyx5_proto::{Error, ErrorKind, limits};

/// Requests larger than this are refused with 413 before more of their body is read (the same
/// limit as the Worker's: twice the largest envelope).
pub(super) const MAX_REQUEST_BYTES: usize = 2 * limits::MAX_ENVELOPE_BYTES;

/// How long a client may take to send its body once its headers are in.
pub(super) const BODY_TIMEOUT: Duration = Duration::from_secs(30);

fn too_large() -> Error {
    Error::new(ErrorKind::TooLarge, format!("request body larger than {MAX_REQUEST_BYTES} bytes"))
}

/// The engine's request: method, `path?query`, headers (lower-case names; values that are not
/// UTF-8 are read lossily and then refused by whoever parses them), and the whole body.
pub(super) async fn to_house<B>(req: hyper::Request<B>) -> Result<HouseRequest, Error>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    if let Some(length) = parts.headers.get(header::CONTENT_LENGTH) {
        let declared = length.to_str().ok().and_then(|l| l.trim().parse::<u64>().ok());
        match declared {
            Some(n) if n > MAX_REQUEST_BYTES as u64 => return Err(too_large()),
            Some(_) => {}
            None => return Err(Error::malformed("content-length is not a number")),
        }
    }
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let collected = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_REQUEST_BYTES).collect())
        .await
        .map_err(|_| Error::malformed("request body not received in time"))?;
    let body = match collected {
        Ok(c) => c.to_bytes().to_vec(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Err(_) => return Err(Error::malformed("unreadable request body")),
    };
    Ok(HouseRequest::new(parts.method.as_str(), target, headers, body))
}

/// The engine's answer as hyper's.
pub(super) fn to_hyper(resp: HouseResponse) -> hyper::Response<Full<Bytes>> {
    let mut out = hyper::Response::new(Full::new(Bytes::from(resp.body)));
    *out.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    out.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(resp.content_type));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    fn request(headers: &[(&str, &str)], body: Vec<u8>) -> hyper::Request<Full<Bytes>> {
        let mut b = hyper::Request::builder().method("POST").uri("/mailbox/ana?after=3&limit=x%20y");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Full::new(Bytes::from(body))).unwrap()
    }

    #[test]
    fn converts_method_target_headers_and_body() {
        let req = run(to_house(request(&[("X-Nyx5-Relay", "abc")], b"{}".to_vec()))).unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/mailbox/ana");
        assert_eq!(req.query("limit"), Some("x y"));
        assert_eq!(req.header("x-nyx5-relay"), Some("abc"));
        assert_eq!(req.body, b"{}");
    }

    #[test]
    fn a_declared_length_over_the_limit_is_413_before_reading() {
        let big = (MAX_REQUEST_BYTES + 1).to_string();
        let e = run(to_house(request(&[("content-length", &big)], vec![]))).unwrap_err();
        assert_eq!(e.code(), 413);
        let e = run(to_house(request(&[("content-length", "many")], vec![]))).unwrap_err();
        assert_eq!(e.code(), 400);
    }

    #[test]
    fn a_body_over_the_limit_without_a_length_is_413() {
        let e = run(to_house(request(&[], vec![b'x'; MAX_REQUEST_BYTES + 1]))).unwrap_err();
        assert_eq!(e.code(), 413);
        let ok = run(to_house(request(&[], vec![b'x'; MAX_REQUEST_BYTES]))).unwrap();
        assert_eq!(ok.body.len(), MAX_REQUEST_BYTES);
    }

    #[test]
    fn answers_keep_status_type_and_body() {
        let e = Error::new(ErrorKind::TooLarge, "x");
        let out = to_hyper(HouseResponse::error(&e));
        assert_eq!(out.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(out.headers()[header::CONTENT_TYPE], "application/json");
    }
}
