//! POST /email/in and POST /email/out — spec §10 (`urn:nyx5:ext:email`): the operator hands the
//! house one raw email (an MTA's pipe, `nyx5 email-in`), as the Worker's `email` event does on
//! Cloudflare; an agent asks its house to email a person.

use nyx5_proto::address::check_id;
use nyx5_proto::auth::Keys;
use nyx5_proto::crypto::{hex, sha256};
use nyx5_proto::json::{field, obj};
use nyx5_proto::{Error, Refusal, Value};

use crate::auth::json_body;
use crate::drafts::Judgement;
use crate::email::NewEmail;
use crate::email::{EXT_EMAIL, EmailOutcome, MAX_OUT_BODY_BYTES, outbound};
use crate::http::{Request, Response};
use crate::ports::{Db, Net};
use crate::{House, ok_body};
use nyx5_rules::email::parse::{header_text, mail_address};

/// POST /email/in?to=ADDRESS&from=SENDER — house token; the body is the raw RFC 5322 message.
/// 202 `{ok, code, id}` when stored, 200 `{…, duplicate: true}` when it was there already. Only the
/// operator's `email_authserv_ids` are trusted: this route cannot know who received the message.
pub async fn post_in<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    house.registry().require_admin(req)?;
    let to = req.query("to").ok_or_else(|| Refusal::BadMember.because("`to` (the recipient's address) is required"))?;
    let from = req.query("from").unwrap_or_default();
    let (code, duplicate, id) = match house.email().receive_email(&req.body, from, to, &[]).await? {
        EmailOutcome::Accepted { id } => (202_i64, false, id),
        EmailOutcome::Duplicate { id } => (200, true, id),
    };
    let mut body = ok_body([("code", code.into()), ("id", id.as_str().into())]);
    if duplicate && let Value::Object(o) = &mut body {
        o.insert("duplicate".into(), Value::Bool(true));
    }
    Ok(Response::json(code as u16, &body))
}

/// A Message-ID fit for a header: no blanks, controls or angle brackets.
fn message_id(text: &str) -> Option<String> {
    let ok =
        !text.is_empty() && text.len() <= 998 && text.chars().all(|c| c.is_ascii_graphic() && c != '<' && c != '>');
    ok.then(|| format!("<{text}>"))
}

/// `In-Reply-To` and `References` for a reply to the email envelope `id` in `local`'s mailbox.
async fn thread_of<D: Db, N: Net>(
    house: &House<D, N>,
    local: &str,
    id: &str,
) -> Result<(Option<String>, Option<String>), Error> {
    check_id(id)?;
    let gateway = house.email().email_gateway()?;
    let text = house
        .email()
        .received(local, id, gateway.as_str())
        .await?
        .ok_or_else(|| Refusal::NoSuchEmail.because(format!("no email {id} in your mailbox to reply to")))?;
    // Its body was dropped a week after it was acknowledged (docs/SPEC.md §8c): the reply goes
    // out, just without the headers that thread it.
    if text.is_empty() {
        return Ok((None, None));
    }
    let env = Value::parse_str(&text)?;
    let ext = env
        .as_object()
        .and_then(|o| o.get("extensions"))
        .and_then(Value::as_object)
        .and_then(|x| x.get(EXT_EMAIL))
        .and_then(Value::as_object);
    let Some(mid) = ext.and_then(|e| e.get("message_id")).and_then(Value::as_str).and_then(message_id) else {
        return Ok((None, None));
    };
    let mut refs: Vec<String> = ext
        .and_then(|e| e.get("references"))
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r.as_str().and_then(message_id))
        .collect();
    refs.push(mid.clone());
    Ok((Some(mid), Some(refs.join(" "))))
}

/// POST /email/out `{to, subject?, body, in_reply_to?, id?}` — agent token. Queues the email
/// (202 `{ok, code, id, state: "pending", provider}`); the same `id` and request again answer
/// 200 with `exists: true`; `in_reply_to` names an email envelope in the agent's mailbox.
pub async fn post_out<D: Db, N: Net>(house: &House<D, N>, req: &Request) -> Result<Response, Error> {
    let card = house.registry().authenticate(req, Keys::Current).await?;
    if !house.config.email_enabled {
        return Err(Refusal::EmailBridgeOff.because("this house does not send email (its email bridge is off)"));
    }
    let body = json_body(req)?;
    for name in body.keys() {
        if !["to", "subject", "body", "in_reply_to", "id"].contains(&name.as_str()) {
            return Err(Refusal::BadMember.because(format!("unknown member `{name}`")));
        }
    }
    let to_text = field::str(&body, "to")?;
    let to = mail_address(to_text)
        .ok_or_else(|| Refusal::BadMember.because(format!("{to_text:?} is not an email address")))?;
    // An email is a message to the recipient's domain: a subagent's delegation binds it here as
    // on `POST /outbound` (docs/SPEC.md §4.3).
    let to_domain = to.rsplit_once('@').map_or("", |(_, d)| d);
    card.check_send("message", to_domain)?;
    let subject = field::opt_str(&body, "subject")?
        .and_then(header_text)
        .unwrap_or_else(|| format!("Message from {}", card.address()));
    let text = field::str(&body, "body")?;
    if text.len() > MAX_OUT_BODY_BYTES {
        return Err(Refusal::EmailTooLarge.because(format!("an email body may be {MAX_OUT_BODY_BYTES} bytes")));
    }
    let reply_to = field::opt_str(&body, "in_reply_to")?;
    let (in_reply_to, refs) = match reply_to {
        Some(id) => thread_of(house, card.address().local(), id).await?,
        None => (None, None),
    };
    let id = match field::opt_str(&body, "id")? {
        Some(id) => {
            check_id(id)?;
            id.to_owned()
        }
        None => house.new_id(),
    };
    let asked = Value::Object(obj([
        ("to", to.as_str().into()),
        ("subject", subject.as_str().into()),
        ("body", text.into()),
        ("in_reply_to", reply_to.map_or(Value::Null, Value::from)),
    ]));
    let request = hex(&sha256(&asked.canonical()));
    let now = house.now().millis();
    let mut email = NewEmail {
        id: &id,
        sender: card.address().as_str(),
        recipient: &to,
        subject: &subject,
        body: text,
        in_reply_to: in_reply_to.as_deref(),
        refs: refs.as_deref(),
        request: &request,
        now,
        deadline: now.saturating_add(house.config.retry.give_up_after_ms),
        judged: None,
    };
    let provider = outbound::has_provider(&house.config);
    let mut queued = house.email().queue_out(&email, card.address().local()).await?;
    // A held tree (docs/SPEC.md §7c): judge the email as a message to its recipient; one a hold
    // covers is refused (an email cannot wait as a draft), any other is queued under the version
    // judged.
    let version;
    if queued.is_err() {
        match house.drafts().judge_email(card.address(), &to).await? {
            Judgement::Pass { version: v } => {
                version = v;
                email.judged = Some(&version);
                queued = house.email().queue_out(&email, card.address().local()).await?;
            }
            Judgement::Hold { approvers, .. } => {
                return Err(Refusal::EmailHeld.because(format!(
                    "{}'s mail to {to} waits for approval by {}, and an email cannot wait: send it as an envelope, or \
                     ask them to lift the hold",
                    card.address(),
                    approvers.join(", ")
                )));
            }
        }
    }
    let Ok(queued) = queued else {
        return Err(Refusal::HoldChanged
            .because("the holds on this agent changed while the house judged the email; send it again"));
    };
    let (code, exists) = match queued {
        None => (202_i64, false),
        Some(row) => {
            if row.text("sender") != Some(card.address().as_str()) || row.text("request") != Some(request.as_str()) {
                return Err(Refusal::EmailIdTaken.because(format!("email id {id} is already used for another email")));
            }
            (200, true)
        }
    };
    let mut answer = ok_body([
        ("code", code.into()),
        ("id", id.as_str().into()),
        ("state", "pending".into()),
        ("provider", Value::Bool(provider)),
    ]);
    if let Value::Object(o) = &mut answer {
        if exists {
            o.insert("exists".into(), Value::Bool(true));
        }
        if !provider {
            o.insert("reason".into(), NO_PROVIDER.into());
        }
    }
    let resp = Response::json(code as u16, &answer);
    Ok(if provider && !exists { resp.kick() } else { resp })
}

/// What an email waits for at a house without a provider.
pub const NO_PROVIDER: &str = "this house has no email provider configured: the email stays pending until it has one";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_is_printable_ascii_without_brackets_and_fits_a_header() {
        assert_eq!(message_id("abc@x.test").as_deref(), Some("<abc@x.test>"));
        let longest = "m".repeat(998);
        assert_eq!(message_id(&longest), Some(format!("<{longest}>")));
        for bad in ["", "a b", "a<b", "a>b", "caf\u{e9}", "a\tb"] {
            assert_eq!(message_id(bad), None, "{bad:?}");
        }
        assert_eq!(message_id(&"m".repeat(999)), None);
    }
}
