//! Operations that stop part-way (docs/design.md, "Interruption"): the signal names of
//! [`Error::Interrupted`], and the message, root cause and exit code of an
//! [`Error::Incomplete`].

use super::Error;

/// The name of a signal, as shells print it: `SIGINT`, `SIGTERM`,
/// `SIGHUP`, else `signal N`.
pub fn signal_name(signal: i32) -> String {
    match signal {
        1 => "SIGHUP".to_owned(),
        2 => "SIGINT".to_owned(),
        15 => "SIGTERM".to_owned(),
        n => format!("signal {n}"),
    }
}

/// An error's message followed by each of its sources': the message of an
/// [`Error::Incomplete`], which has no source of its own (its cause is
/// part of its message).
pub(super) fn chain(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(&format!(": {x}"));
        src = x.source();
    }
    s
}

impl Error {
    /// The error behind any [`Error::Incomplete`] wrapping: what actually
    /// stopped the operation.
    pub fn root(&self) -> &Error {
        match self {
            Error::Incomplete { cause, .. } => cause.root(),
            other => other,
        }
    }

    /// The process exit code for this error: its code's (docs/design.md, "Errors"), except
    /// that an interruption exits 128 + the signal's number, as a shell
    /// reports a process a signal ended (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(&self) -> u8 {
        match self.root() {
            Error::Interrupted { signal } => u8::try_from(128 + signal).unwrap_or(130),
            other => other.code().exit_code(),
        }
    }
}
