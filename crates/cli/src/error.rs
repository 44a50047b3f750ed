//! Why a command failed: a one-line reason and the exit code it maps to.

use std::process::ExitCode;

/// Exit code for a document that does not verify or an envelope that does not open.
pub(crate) const EXIT_REJECTED: u8 = 1;
/// Exit code for bad arguments, unreadable files and malformed input.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code for a house or resolver that cannot be reached or answers 5xx: try again later.
pub(crate) const EXIT_NETWORK: u8 = 3;
/// Exit code for a request the house refused (a 4xx answer).
pub(crate) const EXIT_REFUSED: u8 = 4;

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    reason: String,
    /// The HTTP status when a house answered.
    status: Option<u16>,
    /// The refusal's stable name (the wire's `error`, `nyx5_proto::Refusal`): what the house
    /// answered, or the name of the protocol error a local check gave.
    name: Option<String>,
    /// What to do next, shown after the reason.
    hint: Option<String>,
}

/// What every verb returns.
pub(crate) type Outcome = Result<(), Failure>;

impl Failure {
    /// A usage or input error (exit 2).
    pub(crate) fn usage(reason: impl Into<String>) -> Failure {
        Failure { code: EXIT_USAGE, reason: reason.into(), status: None, name: None, hint: None }
    }

    /// A verification or decryption failure (exit 1).
    pub(crate) fn rejected(reason: impl Into<String>) -> Failure {
        Failure { code: EXIT_REJECTED, reason: reason.into(), status: None, name: None, hint: None }
    }

    /// A house or resolver that cannot be reached, or answers 5xx (exit 3).
    pub(crate) fn network(reason: impl Into<String>) -> Failure {
        Failure { code: EXIT_NETWORK, reason: reason.into(), status: None, name: None, hint: None }
    }

    /// An HTTP answer that is not a success: 4xx is a refusal (exit 4), anything else a failure
    /// to get through (exit 3). `name` is the wire `error` member, when the house sent one: it
    /// is passed on as it came (`--json`'s `error`, the MCP tools' failures).
    pub(crate) fn http(status: u16, name: &str, reason: impl Into<String>) -> Failure {
        let code = if (400..500).contains(&status) { EXIT_REFUSED } else { EXIT_NETWORK };
        Failure { code, reason: reason.into(), status: Some(status), name: Some(name.to_owned()), hint: None }
    }

    /// A refusal from the one table (`nyx5_proto::Refusal`), found by the client before or
    /// instead of the house's answer: its status and stable name are the table's.
    pub(crate) fn refusal(refusal: nyx5_proto::Refusal, reason: impl Into<String>) -> Failure {
        Failure::http(refusal.kind().code(), refusal.name(), reason)
    }

    /// The same failure carrying a refusal's stable name (a protocol error's `name`).
    pub(crate) fn named(mut self, name: &str) -> Failure {
        self.name = Some(name.to_owned());
        self
    }

    /// The refusal's stable name, when there is one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The same failure with another exit code (`email-in --sysexits`).
    pub(crate) fn with_code(mut self, code: u8) -> Failure {
        self.code = code;
        self
    }

    /// The exit code this failure maps to.
    pub(crate) fn code(&self) -> u8 {
        self.code
    }

    /// The HTTP status, when a house answered.
    pub(crate) fn status(&self) -> Option<u16> {
        self.status
    }

    /// The reason, with a prefix saying what was being done.
    pub(crate) fn context(mut self, what: &str) -> Failure {
        self.reason = format!("{what}: {}", self.reason);
        self
    }

    /// Sets what to do next (replacing any earlier hint).
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Failure {
        self.hint = Some(hint.into());
        self
    }

    /// The failure as one JSON document: `{"ok":false,"exit","reason","hint"?,"status"?,"error"?}`,
    /// `error` being the refusal's stable name whenever there is one.
    pub(crate) fn to_value(&self) -> nyx5_proto::Value {
        use nyx5_proto::Value;
        let mut o = nyx5_proto::json::obj([
            ("ok", Value::Bool(false)),
            ("exit", i64::from(self.code).into()),
            ("reason", self.reason.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().into()),
        ]);
        if let Some(h) = &self.hint {
            o.insert("hint".into(), h.as_str().into());
        }
        if let Some(status) = self.status {
            o.insert("status".into(), i64::from(status).into());
        }
        if let Some(name) = &self.name {
            o.insert("error".into(), name.as_str().into());
        }
        Value::Object(o)
    }

    /// Malformed input, with the protocol crate's reason behind `context`.
    pub(crate) fn input(context: &str, err: &nyx5_proto::Error) -> Failure {
        Failure::usage(format!("{context}: {}", err.reason)).named(err.name())
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }

    /// The reason (and what to do next) on one line: line breaks and tabs become spaces, and
    /// the rest goes through the one sanitiser ([`crate::sanitise::line`]), since a reason may
    /// quote what a house or a server said.
    pub(crate) fn one_line(&self) -> String {
        let text = match &self.hint {
            Some(h) => format!("{}; {h}", self.reason),
            None => self.reason.clone(),
        };
        crate::sanitise::line(&text.replace(['\n', '\r', '\t'], " "))
    }
}

#[cfg(test)]
mod tests {
    use super::{EXIT_REFUSED, Failure};
    use nyx5_proto::{Refusal, Value};

    /// `--json` (and an MCP tool's failure) carries the refusal's name: the house's as it came,
    /// or the name of the protocol error a local check gave.
    #[test]
    fn a_failure_passes_on_the_refusals_name() {
        let error = |f: &Failure| f.to_value().as_object().and_then(|o| o.get("error")).cloned();
        let f = Failure::http(429, "mailbox_full", "send: the mailbox is full (429)");
        assert_eq!(error(&f), Some(Value::from("mailbox_full")));
        assert_eq!(f.status(), Some(429));
        let f = Failure::input("--as", &Refusal::BadEmail.because("no"));
        assert_eq!((error(&f), f.status()), (Some(Value::from("bad_email")), None));
        assert_eq!(error(&Failure::usage("no profile")), None);
    }

    #[test]
    fn a_reason_a_server_wrote_reaches_the_terminal_escaped() {
        let f = Failure::usage("the house said: ok\u{202e}gnp.exe\u{1b}]0;owned\u{7}\nnext").hint("try \u{2066}again");
        let shown = f.one_line();
        assert_eq!(shown, "the house said: ok\\u{202e}gnp.exe\\u{1b}]0;owned\\u{7} next; try \\u{2066}again");
    }

    /// A refusal the client finds itself carries the table's status and name.
    #[test]
    fn a_refusal_found_by_the_client_is_the_tables() {
        let f = Failure::refusal(Refusal::EmailBridgeOff, "no bridge");
        assert_eq!((f.status(), f.name.as_deref(), f.code()), (Some(403), Some("email_bridge_off"), EXIT_REFUSED));
    }
}
