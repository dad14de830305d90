//! The stable code table (docs/errors.md): each [`ErrorCode`]'s wire string,
//! process exit code, retryable flag and description ([`CodeInfo`]),
//! given by one exhaustive `match` ([`ErrorCode::info`]) — a new code does
//! not compile until it has its row. `docs/errors.md` is rendered from this
//! table (a test in `tests/it/contracts.rs` fails when it differs).

use serde::Serialize;
use std::fmt;

/// A stable error code (docs/design.md, "Errors").
///
/// The wire string is the SCREAMING_SNAKE name. Codes are only ever appended;
/// none is renamed or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A bad flag value, malformed id, over-cap input, bad JSON or a control character
    /// (also an import with rejected sessions, and a `verify --export` file that
    /// proves nothing). Exit 2.
    InvalidArgument,
    /// No session has the given id. Exit 3.
    SessionNotFound,
    /// No run has the given id. Exit 3.
    RunNotFound,
    /// `--if-rev` did not match the session's current rev. Exit 4, retryable.
    SessionConflict,
    /// A live owner holds the session's lease. Exit 4, retryable.
    LeaseHeld,
    /// The database stayed locked past the busy timeout. Exit 4, retryable.
    StoreBusy,
    /// The verb is not allowed from the session's current status. Exit 5.
    SessionInvalidTransition,
    /// The verb is not allowed from the run's current status. Exit 5.
    RunInvalidTransition,
    /// The file is not a logbook SQLite database, or it is damaged. Exit 6.
    StoreCorrupt,
    /// The database's schema is newer than this binary knows. Exit 6.
    StoreVersionTooNew,
    /// An I/O failure: disk full, read-only file, permission denied. Exit 6.
    StoreIo,
    /// `verify` found an event whose hash chain does not hold. Exit 6.
    LedgerTampered,
    /// The session has no gate of that name. Exit 3.
    GateNotFound,
    /// The gate was already approved or rejected. Exit 5.
    GateAlreadyDecided,
    /// A gate of the session is waiting for a decision, so `resume` is
    /// refused (approve or reject the gate). Exit 5.
    GatePending,
    /// The session has no checkpoint snapshot at that seq (or none at all).
    /// Exit 3.
    CheckpointNotFound,
    /// `--lease TOKEN` names no live lease of the session: it expired, was
    /// released, or was never taken. Exit 3.
    LeaseNotFound,
    /// A bug or an unexpected condition. Exit 1.
    Internal,
    /// A long command (export, import, backup) stopped at a signal: SIGINT
    /// or SIGTERM. Exit 130 in the table; the CLI exits 128 + the signal's
    /// number (130 for SIGINT, 143 for SIGTERM). Retryable: running the
    /// command again redoes (export, backup) or continues (import) it.
    Interrupted,
    /// The PostgreSQL server cannot be reached (refused, timed out,
    /// shutting down), or the connection was lost after the write was sent
    /// (the outcome unknown: retry with the same idempotency key). Exit 4,
    /// retryable.
    StoreUnavailable,
}

/// One row of the code table: wire string, exit code, retryable,
/// description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeInfo {
    /// The code's wire string, e.g. `"SESSION_CONFLICT"`.
    pub wire: &'static str,
    /// The CLI's process exit code for this error (an interruption exits
    /// 128 + the signal's number instead: [`crate::Error::exit_code`]).
    pub exit: u8,
    /// Whether the same call may succeed if retried unchanged.
    pub retryable: bool,
    /// When the code is returned, in one sentence (`docs/errors.md`).
    pub description: &'static str,
}

impl ErrorCode {
    /// Every code, in declaration order (the order of the table in docs/errors.md as it
    /// grew; codes are only appended).
    pub const ALL: [ErrorCode; 20] = [
        Self::InvalidArgument,
        Self::SessionNotFound,
        Self::RunNotFound,
        Self::SessionConflict,
        Self::LeaseHeld,
        Self::StoreBusy,
        Self::SessionInvalidTransition,
        Self::RunInvalidTransition,
        Self::StoreCorrupt,
        Self::StoreVersionTooNew,
        Self::StoreIo,
        Self::LedgerTampered,
        Self::GateNotFound,
        Self::GateAlreadyDecided,
        Self::GatePending,
        Self::CheckpointNotFound,
        Self::LeaseNotFound,
        Self::Internal,
        Self::Interrupted,
        Self::StoreUnavailable,
    ];

    /// The whole code table (docs/errors.md), in declaration order: each code of
    /// [`ErrorCode::ALL`] with its [`ErrorCode::info`].
    pub const TABLE: &'static [(ErrorCode, CodeInfo)] = &Self::ROWS;

    const ROWS: [(ErrorCode, CodeInfo); 20] = {
        let mut rows = [(Self::Internal, Self::Internal.info()); 20];
        let mut i = 0;
        while i < rows.len() {
            rows[i] = (Self::ALL[i], Self::ALL[i].info());
            i += 1;
        }
        rows
    };

    /// This code's row of the table. Exhaustive on purpose (no `_` arm and
    /// no fallback): a new code does not compile until it has its row.
    pub const fn info(self) -> CodeInfo {
        match self {
            Self::InvalidArgument => row(
                "INVALID_ARGUMENT",
                2,
                false,
                "A bad flag value, malformed id, over-cap input, bad JSON or a control character; \
                 also clap's usage errors under `--json`, an import with rejected sessions, and a \
                 `verify --export` file that proves nothing (no session of it matches a tombstone).",
            ),
            Self::SessionNotFound => row(
                "SESSION_NOT_FOUND",
                3,
                false,
                "No session has the given id.",
            ),
            Self::RunNotFound => row("RUN_NOT_FOUND", 3, false, "No run has the given id."),
            Self::SessionConflict => row(
                "SESSION_CONFLICT",
                4,
                true,
                "`--if-rev` did not match the session's current rev; the details carry the \
                 current rev and the session's latest event.",
            ),
            Self::LeaseHeld => row(
                "LEASE_HELD",
                4,
                true,
                "A live owner other than the caller holds the session's lease.",
            ),
            Self::StoreBusy => row(
                "STORE_BUSY",
                4,
                true,
                "The database stayed locked past the busy timeout.",
            ),
            Self::SessionInvalidTransition => row(
                "SESSION_INVALID_TRANSITION",
                5,
                false,
                "The verb is not allowed from the session's current status.",
            ),
            Self::RunInvalidTransition => row(
                "RUN_INVALID_TRANSITION",
                5,
                false,
                "The verb is not allowed from the run's current status, or `run start` found \
                 another run of the session running.",
            ),
            Self::StoreCorrupt => row(
                "STORE_CORRUPT",
                6,
                false,
                "The file is not a logbook SQLite database, or it is damaged.",
            ),
            Self::StoreVersionTooNew => row(
                "STORE_VERSION_TOO_NEW",
                6,
                false,
                "The database's schema is newer than this binary knows.",
            ),
            Self::StoreIo => row(
                "STORE_IO",
                6,
                false,
                "An I/O failure: disk full, read-only file or storage, permission denied, a \
                 missing database file, a file replaced under an open handle, or a database file with \
                 more than one name (hard links).",
            ),
            Self::LedgerTampered => row(
                "LEDGER_TAMPERED",
                6,
                false,
                "`verify` found an event whose hash chain does not hold.",
            ),
            Self::GateNotFound => row(
                "GATE_NOT_FOUND",
                3,
                false,
                "The session has no gate of that name.",
            ),
            Self::GateAlreadyDecided => row(
                "GATE_ALREADY_DECIDED",
                5,
                false,
                "The gate was already approved or rejected.",
            ),
            Self::GatePending => row(
                "GATE_PENDING",
                5,
                false,
                "A gate of the session waits for a decision, so `resume` is refused.",
            ),
            Self::CheckpointNotFound => row(
                "CHECKPOINT_NOT_FOUND",
                3,
                false,
                "The session has no checkpoint snapshot at that seq (or none at all).",
            ),
            Self::LeaseNotFound => row(
                "LEASE_NOT_FOUND",
                3,
                false,
                "`--lease TOKEN` names no live lease of the session: it expired, was released, \
                 or was never taken.",
            ),
            Self::Internal => row("INTERNAL", 1, false, "A bug or an unexpected condition."),
            Self::Interrupted => row(
                "INTERRUPTED",
                130,
                true,
                "A long command (export, import, backup) stopped at SIGINT or SIGTERM; the CLI \
                 exits 128 + the signal's number (130, 143).",
            ),
            Self::StoreUnavailable => row(
                "STORE_UNAVAILABLE",
                4,
                true,
                "The PostgreSQL server cannot be reached (refused, timed out, shutting down), or \
                 the connection was lost after the write was sent: its outcome is unknown, \
                 so retry it with the same idempotency key.",
            ),
        }
    }

    /// The wire string, e.g. `"SESSION_NOT_FOUND"`.
    pub const fn as_str(self) -> &'static str {
        self.info().wire
    }

    /// The CLI exit code (docs/design.md, "Errors").
    pub const fn exit_code(self) -> u8 {
        self.info().exit
    }

    /// Whether retrying the same call may succeed.
    pub const fn retryable(self) -> bool {
        self.info().retryable
    }
}

const fn row(wire: &'static str, exit: u8, retryable: bool, description: &'static str) -> CodeInfo {
    CodeInfo {
        wire,
        exit,
        retryable,
        description,
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
