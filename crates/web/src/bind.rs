//! The wasm exports: each function of the crate under its own name, an `Err` thrown as a
//! JavaScript `Error` whose message is the `"<code> <name>: <reason>"` string (`name`: the refusal's stable name).

use wasm_bindgen::prelude::{JsError, wasm_bindgen};

fn thrown(r: Result<String, String>) -> Result<String, JsError> {
    r.map_err(|e| JsError::new(&e))
}

#[wasm_bindgen]
pub fn new_keys() -> Result<String, JsError> {
    thrown(crate::new_keys())
}

#[wasm_bindgen]
pub fn registration_body(keys: &str, local: &str, extra_json: &str, now_ms: f64) -> Result<String, JsError> {
    thrown(crate::registration_body(keys, local, extra_json, now_ms))
}

#[wasm_bindgen]
#[allow(clippy::too_many_arguments)]
pub fn token(
    keys: &str,
    address: &str,
    method: &str,
    path: &str,
    query: &str,
    host: &str,
    body_bytes: &[u8],
    now_ms: f64,
) -> Result<String, JsError> {
    thrown(crate::token(keys, address, method, path, query, host, body_bytes, now_ms))
}

#[wasm_bindgen]
pub fn verify_domain(card_json: &str, domain: &str, pin: &str, now_ms: f64) -> Result<String, JsError> {
    thrown(crate::verify_domain(card_json, domain, pin, now_ms))
}

#[wasm_bindgen]
pub fn verify_agent(
    card_json: &str,
    domain_card_json: &str,
    parent_card_json: &str,
    now_ms: f64,
) -> Result<String, JsError> {
    thrown(crate::verify_agent(card_json, domain_card_json, parent_card_json, now_ms))
}

#[wasm_bindgen]
#[allow(clippy::too_many_arguments)]
pub fn seal_message(
    keys: &str,
    from: &str,
    recipients_json: &str,
    body_text: &str,
    media: &str,
    kind: &str,
    thread: &str,
    in_reply_to: &str,
    now_ms: f64,
) -> Result<String, JsError> {
    thrown(crate::seal_message(keys, from, recipients_json, body_text, media, kind, thread, in_reply_to, now_ms))
}

#[wasm_bindgen]
pub fn libro_op(keys: &str, from: &str, house_domain: &str, op_json: &str, now_ms: f64) -> Result<String, JsError> {
    thrown(crate::libro_op(keys, from, house_domain, op_json, now_ms))
}

#[wasm_bindgen]
pub fn open_item(
    keys_list_json: &str,
    address: &str,
    item_json: &str,
    sender_card_json: &str,
    sender_domain_json: &str,
    now_ms: f64,
) -> Result<String, JsError> {
    thrown(crate::open_item(keys_list_json, address, item_json, sender_card_json, sender_domain_json, now_ms))
}

#[wasm_bindgen]
pub fn peek(item_json: &str) -> Result<String, JsError> {
    thrown(crate::peek(item_json))
}

#[wasm_bindgen]
pub fn own_view(keys_list_json: &str, address: &str, envelope_json: &str) -> Result<String, JsError> {
    thrown(crate::own_view(keys_list_json, address, envelope_json))
}

#[wasm_bindgen]
pub fn kept_record(view_json: &str, dir: &str, now_ms: f64) -> Result<String, JsError> {
    thrown(crate::kept_record(view_json, dir, now_ms))
}

#[wasm_bindgen]
pub fn profile_export(agents_json: &str, pins_json: &str) -> Result<String, JsError> {
    thrown(crate::profile_export(agents_json, pins_json))
}

#[wasm_bindgen]
pub fn profile_import(text: &str) -> Result<String, JsError> {
    thrown(crate::profile_import(text))
}

#[wasm_bindgen]
pub fn version() -> String {
    crate::version()
}

#[wasm_bindgen]
pub fn readers_for(
    keys_list_json: &str,
    address: &str,
    envelope_json: &str,
    approvers_json: &str,
    now_ms: f64,
) -> Result<String, JsError> {
    thrown(crate::readers_for(keys_list_json, address, envelope_json, approvers_json, now_ms))
}

#[wasm_bindgen]
pub fn open_draft(keys_list_json: &str, address: &str, draft_json: &str) -> Result<String, JsError> {
    thrown(crate::open_draft(keys_list_json, address, draft_json))
}
