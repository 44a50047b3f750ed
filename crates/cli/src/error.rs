//! Why a command failed: a one-line reason and the exit code it maps to.

use std::process::ExitCode;

/// Exit code for a document that does not verify or an envelope that does not open.
pub(crate) const EXIT_REJECTED: u8 = 1;
/// Exit code for bad arguments, unreadable files and malformed input.
pub(crate) const EXIT_USAGE: u8 = 2;

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    reason: String,
}

/// What every verb returns.
pub(crate) type Outcome = Result<(), Failure>;

impl Failure {
    /// A usage or input error (exit 2).
    pub(crate) fn usage(reason: impl Into<String>) -> Failure {
        Failure { code: EXIT_USAGE, reason: reason.into() }
    }

    /// A verification or decryption failure (exit 1).
    pub(crate) fn rejected(reason: impl Into<String>) -> Failure {
        Failure { code: EXIT_REJECTED, reason: reason.into() }
    }

    /// Malformed input, with the protocol crate's reason behind `context`.
    pub(crate) fn input(context: &str, err: &nyx5_proto::Error) -> Failure {
        Failure::usage(format!("{context}: {}", err.reason))
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }

    /// The reason on one line: control characters (newlines included) become spaces.
    pub(crate) fn one_line(&self) -> String {
        self.reason.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
    }
}
