//! `nyx5 settings` — what the agent's house keeps about it privately: the webhook, the allow and
//! block lists, and the quotas its mailbox lives under (`GET /agents/:local/settings`,
//! docs/SPEC.md §8b "Private settings").

use nyx5_proto::json::{Object, Value, obj};

use super::Ctx;
use super::output::{list_shown, safe, text};
use crate::error::Failure;

/// `nyx5 settings`: the acting agent's private settings, read with its current key.
pub(crate) fn settings(ctx: &Ctx) -> Result<Value, Failure> {
    let me = ctx.me()?;
    let target = format!("/agents/{}/settings", me.address.local());
    let (_, answer) = ctx.call(&me, "GET", &target, None, &format!("reading the settings of {}", me.address))?;
    let member = |name: &str| answer.get(name).cloned().unwrap_or(Value::Null);
    Ok(Value::Object(obj([
        ("agent", me.address.as_str().into()),
        ("webhook", member("webhook")),
        ("lists", member("lists")),
        ("quotas", member("quotas")),
    ])))
}

pub(crate) fn settings_human(v: &Value) -> String {
    let o = v.as_object().cloned().unwrap_or_default();
    let mut s = format!("{}: private settings (only you and your house's operator see them)\n", text(&o, "agent"));
    match o.get("webhook") {
        Some(Value::String(url)) => s.push_str(&format!("  webhook: {}\n", safe(url))),
        _ => s.push_str("  webhook: none (new envelopes are not pushed)\n"),
    }
    let lists = o.get("lists").and_then(Value::as_object).cloned().unwrap_or_default();
    for kind in ["allow", "block"] {
        s.push_str(&format!("  {:<8} {}\n", format!("{kind}:"), list_shown(&lists, kind)));
    }
    let quotas: Object = o.get("quotas").and_then(Value::as_object).cloned().unwrap_or_default();
    if !quotas.is_empty() {
        s.push_str("  quotas:\n");
        for (name, value) in &quotas {
            let shown = match value {
                Value::String(t) => safe(t),
                other => other.canonical_string(),
            };
            s.push_str(&format!("    {}: {shown}\n", safe(name)));
        }
    }
    s
}
