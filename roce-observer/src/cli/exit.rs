//! Exit statuses: one rule for every command, documented in `--help` and the man pages.
//!
//! A command-line error is 2, as clap makes it for what it refuses while parsing; the systemd
//! unit's `RestartPreventExitStatus=2` relies on it, so a bad value in the environment file is
//! not retried every few seconds. Anything that may go away by itself (a missing interface, a
//! busy port, an unreadable capture) is 1 and gets restarted.

use crate::{cli::EngineArgsError, fail_on::GateFailed};

/// Success.
pub const EXIT_OK: u8 = 0;
/// A runtime error: the message says what failed and what to do.
pub const EXIT_ERROR: u8 = 1;
/// A command-line error: a bad value, a missing or conflicting option.
pub const EXIT_USAGE: u8 = 2;
/// A `--fail-on` condition held (a verdict, not an error).
pub const EXIT_GATE: u8 = crate::fail_on::EXIT_GATE;

/// The exit statuses as `--help` and the man pages list them.
pub const EXIT_STATUSES: [(u8, &str); 4] = [
    (EXIT_OK, "done"),
    (
        EXIT_ERROR,
        "a runtime error (missing interface or privilege, unreadable capture, busy port)",
    ),
    (
        EXIT_USAGE,
        "a command-line error (a bad value, a missing or conflicting option)",
    ),
    (EXIT_GATE, "a --fail-on condition held"),
];

/// A command line that parses but cannot be used, found after parsing (the value parsers
/// refuse what they can on their own).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The exit status for an error a command returned.
pub fn status(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<GateFailed>()) {
        EXIT_GATE
    } else if err
        .chain()
        .any(|e| e.is::<UsageError>() || e.is::<EngineArgsError>() || e.is::<clap::Error>())
    {
        EXIT_USAGE
    } else {
        EXIT_ERROR
    }
}

/// The statuses as one line each, for `--help`.
pub fn statuses_text() -> String {
    EXIT_STATUSES
        .iter()
        .map(|(code, what)| format!("  {code}  {what}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;

    #[test]
    fn usage_errors_are_2_even_with_context() {
        let err = anyhow::Error::new(UsageError("--flow-log was replaced".into()))
            .context("starting the run");
        assert_eq!(status(&err), EXIT_USAGE);
        let err = anyhow::Error::new(EngineArgsError::LinkSpeed(0.0));
        assert_eq!(status(&err), EXIT_USAGE);
    }

    #[test]
    fn other_errors_are_1_and_a_tripped_gate_3() {
        let err: anyhow::Error = std::fs::File::open("/nonexistent/roce-observer")
            .context("cannot open capture")
            .expect_err("no such file");
        assert_eq!(status(&err), EXIT_ERROR);
        assert_eq!(
            status(&anyhow::Error::new(GateFailed(Vec::new()))),
            EXIT_GATE
        );
    }
}
