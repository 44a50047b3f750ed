//! POST /email/in — spec §10 (`urn:nyx5:ext:email`): the operator hands the house one raw email
//! (an MTA's pipe, `nyx5 email-in`), as the Worker's `email` event does on Cloudflare.

use nyx5_proto::{Error, Value};

use crate::email::EmailOutcome;
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::{House, ok_body};

/// POST /email/in?to=ADDRESS&from=SENDER — house token; the body is the raw RFC 5322 message.
/// 202 `{ok, code, id}` when stored, 200 `{…, duplicate: true}` when it was there already.
pub async fn post_in<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.require_admin(req)?;
    let to = req.query("to").ok_or_else(|| Error::malformed("`to` (the recipient's address) is required"))?;
    let from = req.query("from").unwrap_or_default();
    let (code, duplicate, id) = match house.receive_email(&req.body, from, to).await? {
        EmailOutcome::Accepted { id } => (202_i64, false, id),
        EmailOutcome::Duplicate { id } => (200, true, id),
    };
    let mut body = ok_body([("code", code.into()), ("id", id.as_str().into())]);
    if duplicate && let Value::Object(o) = &mut body {
        o.insert("duplicate".into(), Value::Bool(true));
    }
    Ok(Response::json(code as u16, &body))
}
