//! Attachments' sealed parts in R2 (docs/SPEC.md §8e): the `ATTACHMENTS` bucket binding
//! (`wrangler.toml`; local under `wrangler dev`). Without the binding the house keeps no
//! attachments.
//!
//! The binding is called as JavaScript (`put`, `get` then `arrayBuffer`, `delete`) rather than
//! through workers-rs's `Bucket`: its builders and metadata types cost the bundle about 12 KB
//! gzipped for three calls (docs/decisions/0074-attachments.md).

use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
use nyx5_house::ports::{Blobs, PortError, PortFuture};
use wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;

/// The bucket, as its binding is.
pub(crate) struct R2Blobs(JsValue);

impl R2Blobs {
    /// The `ATTACHMENTS` binding of `env`, if bound.
    pub(crate) fn bound(env: &worker::Env) -> Option<R2Blobs> {
        let bucket = Reflect::get(env, &JsValue::from_str("ATTACHMENTS")).ok()?;
        (!bucket.is_undefined() && !bucket.is_null()).then_some(R2Blobs(bucket))
    }

    /// Calls the bucket's `method` with `args` and awaits the promise it answers.
    async fn call(&self, method: &str, args: &[JsValue]) -> Result<JsValue, PortError> {
        let failed = |what: &str, e: JsValue| PortError::Failed(format!("R2 {method}: {what}: {e:?}"));
        let f: Function = Reflect::get(&self.0, &JsValue::from_str(method))
            .map_err(|e| failed("no such call", e))?
            .dyn_into()
            .map_err(|e| failed("not a function", e))?;
        let list: Array = args.iter().collect();
        let promise: Promise = f
            .apply(&self.0, &list)
            .map_err(|e| failed("thrown", e))?
            .dyn_into()
            .map_err(|e| failed("not a promise", e))?;
        JsFuture::from(promise).await.map_err(|e| failed("refused", e))
    }
}

impl Blobs for R2Blobs {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> PortFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let body = Uint8Array::from(bytes.as_slice());
            self.call("put", &[JsValue::from_str(key), body.into()]).await.map(drop)
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> PortFuture<'a, Result<Option<Vec<u8>>, PortError>> {
        Box::pin(async move {
            let object = self.call("get", &[JsValue::from_str(key)]).await?;
            if object.is_null() || object.is_undefined() {
                return Ok(None);
            }
            let read: Function = Reflect::get(&object, &JsValue::from_str("arrayBuffer"))
                .ok()
                .and_then(|f| f.dyn_into().ok())
                .ok_or_else(|| PortError::Failed("R2 get: no body".into()))?;
            let promise: Promise = read
                .call0(&object)
                .ok()
                .and_then(|p| p.dyn_into().ok())
                .ok_or_else(|| PortError::Failed("R2 get: the body would not read".into()))?;
            let buffer = JsFuture::from(promise).await.map_err(|e| PortError::Failed(format!("R2 get: {e:?}")))?;
            Ok(Some(Uint8Array::new(&buffer).to_vec()))
        })
    }

    fn delete<'a>(&'a self, keys: Vec<String>) -> PortFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(());
            }
            let list: Array = keys.iter().map(|k| JsValue::from_str(k)).collect();
            self.call("delete", &[list.into()]).await.map(drop)
        })
    }
}
