//! Errors: the stable code table (docs/errors.md) and the one `Error` enum.
//!
//! Every failure the library can report is an [`Error`] variant; each variant
//! maps to exactly one [`ErrorCode`], and each code to a wire string, a process
//! exit code and a retryable flag through [`ErrorCode::info`] (module `code`).
//! Each variant's `details` object is a `Serialize` struct ([`Details`],
//! module `details`). Driver errors are classified here by SQLite's numeric
//! result codes, never by their text.

use crate::model::{SessionStatus, Verb};
use serde::Serialize;

mod classify;
mod code;
mod details;
mod stopped;
pub use code::{CodeInfo, ErrorCode};
pub use details::Details;
use stopped::chain;
pub use stopped::signal_name;

/// The latest event of a session, reported with a conflict so a caller can see
/// whether its own write landed (CASES C28).
///
/// Serializes as `{"seq","step","type"}`: fields in the alphabetical order
/// of their keys, as every object of the error details (module `details`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatestEvent {
    /// The event's per-session sequence number.
    pub seq: i64,
    /// The checkpoint step the event recorded, if any.
    pub step: Option<String>,
    /// The event's type, e.g. `"checkpoint"`.
    #[serde(rename = "type")]
    pub event_type: String,
}

/// Every error logbook reports. Variants map 1:1 onto [`ErrorCode`]s.
///
/// Messages name the field and the rule, never the rejected value (docs/design.md, "Errors":
/// a rejected value may hold a secret).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// INVALID_ARGUMENT: `field` broke `reason`.
    #[error("invalid `{field}`: {reason}")]
    InvalidArgument {
        /// The field or flag, e.g. `"title"`.
        field: String,
        /// What is wrong, naming the limit where there is one.
        reason: String,
    },
    /// SESSION_NOT_FOUND.
    #[error("session {id} not found")]
    SessionNotFound {
        /// The id asked for (always a well-formed `ses_` id).
        id: String,
    },
    /// SESSION_NOT_FOUND for a session that a purge removed (docs/design.md, "Retention"): its
    /// tombstone names the purge and when.
    #[error("session {id} was purged (purge {purge_id}); its tombstone remains")]
    SessionPurged {
        /// The id asked for.
        id: String,
        /// The purge that removed it.
        purge_id: i64,
        /// When, ms since the epoch.
        purged_at_ms: i64,
    },
    /// RUN_NOT_FOUND.
    #[error("run {id} not found")]
    RunNotFound {
        /// The id asked for.
        id: String,
    },
    /// SESSION_CONFLICT: the `--if-rev` guard failed.
    #[error("session {id} is at rev {actual_rev}, not the expected rev {expected_rev}")]
    Conflict {
        /// The session.
        id: String,
        /// The rev the caller required.
        expected_rev: i64,
        /// The session's current rev.
        actual_rev: i64,
        /// The session's newest event.
        latest_event: Option<LatestEvent>,
    },
    /// LEASE_HELD: a live owner other than the caller holds the session's
    /// lease (docs/design.md, "Leases").
    #[error("session {id} is leased by pid {pid} on {hostname} until {}; present its --lease token, or wait until it is released or expires", crate::clock::format_ms(*expires_at_ms))]
    LeaseHeld {
        /// The session.
        id: String,
        /// When the current lease expires, ms since the Unix epoch.
        expires_at_ms: i64,
        /// The owner's process id.
        pid: i64,
        /// The owner's host name.
        hostname: String,
    },
    /// STORE_BUSY: the write lock was not had within the busy timeout.
    #[error("the database stayed locked for longer than the busy timeout ({timeout_ms} ms)")]
    Busy {
        /// The busy timeout in force, in ms.
        timeout_ms: u64,
    },
    /// STORE_UNAVAILABLE: the PostgreSQL server cannot be reached
    /// (docs/design.md, "Backends"): refused, timed out, shutting down or restarting.
    #[error("cannot reach the PostgreSQL server {location}: {reason}")]
    Unavailable {
        /// The server's location without its password
        /// (`postgres://user@host:port/db`).
        location: String,
        /// What failed, e.g. "connection refused".
        reason: String,
    },
    /// STORE_UNAVAILABLE: the connection was lost after the write's COMMIT
    /// (or its one statement) was sent (docs/design.md, "Backends"), so
    /// whether it was applied is unknown. Retrying with the same
    /// idempotency key is safe: it either replays the applied write or
    /// applies it once; a write without a key may be applied twice.
    #[error("the connection to the PostgreSQL server {location} was lost after the write was sent: it may or may not have been applied; retry it with the same idempotency key (without one, read the session's events first: a retry may apply it twice)")]
    CommitUnknown {
        /// The server's location without its password.
        location: String,
    },
    /// SESSION_INVALID_TRANSITION: the verb is not allowed from the
    /// session's status ([`Verb::allowed_from`]).
    #[error("cannot {} session {id}: it is {}", verb.as_str(), from.as_str())]
    InvalidTransition {
        /// The session.
        id: String,
        /// Its current status.
        from: SessionStatus,
        /// The refused verb (its wire name, e.g. `"complete"`, is
        /// `Verb::as_str`).
        verb: Verb,
    },
    /// RUN_INVALID_TRANSITION.
    #[error("cannot {verb} run {id}: it is {from}")]
    RunInvalidTransition {
        /// The run.
        id: String,
        /// Its current status.
        from: String,
        /// The refused verb.
        verb: String,
    },
    /// STORE_CORRUPT.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The database path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// STORE_VERSION_TOO_NEW.
    #[error("{path}: schema version {found} is newer than this logbook supports (up to {supported}); upgrade logbook")]
    VersionTooNew {
        /// The database path.
        path: String,
        /// The schema version recorded in the file.
        found: i64,
        /// The newest version this binary knows.
        supported: i64,
    },
    /// STORE_IO.
    #[error("{context}")]
    Io {
        /// What was being done, e.g. "cannot create the database folder /x".
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// STORE_IO raised by SQLite itself (disk full, read-only, cannot open).
    #[error("storage error: {context}")]
    StoreIo {
        /// What SQLite reported, classified.
        context: String,
    },
    /// LEDGER_TAMPERED: the first broken link `verify` found.
    #[error("session {session_id}: the event chain breaks at seq {seq} ({problem}; expected {expected}, found {found}); {broken_sessions} session(s) broken in all")]
    Tampered {
        /// The session whose chain breaks.
        session_id: String,
        /// The seq at which it breaks (the first event that does not hold).
        seq: i64,
        /// What does not hold: `hash`, `prev_hash`, `seq` (a gap or
        /// reordering), `snapshot` (a checkpoint snapshot that does not
        /// match the SHA-256 and size its event recorded, or is gone),
        /// `missing_events` (fewer events than the session's rev), or
        /// `orphan_events` (events of no session).
        problem: String,
        /// What the chain requires there (hex hash, or a seq / count).
        expected: String,
        /// What the database holds.
        found: String,
        /// How many sessions have a broken chain.
        broken_sessions: u64,
    },
    /// `doctor` found problems: the code is its first failing check's
    /// (STORE_CORRUPT, LEDGER_TAMPERED or STORE_IO); the details hold the
    /// whole report.
    #[error("doctor found {problems} problem(s); the first: {first}")]
    Unhealthy {
        /// The first failing check's code.
        code: ErrorCode,
        /// How many checks failed.
        problems: usize,
        /// The first failing check, in words.
        first: String,
        /// The full report (`DoctorReport` as JSON).
        report: Box<serde_json::Value>,
    },
    /// GATE_NOT_FOUND.
    #[error("session {id} has no gate named `{gate}`")]
    GateNotFound {
        /// The session.
        id: String,
        /// The gate's name.
        gate: String,
    },
    /// GATE_ALREADY_DECIDED.
    #[error("gate `{gate}` of session {id} was already {status}")]
    GateAlreadyDecided {
        /// The session.
        id: String,
        /// The gate's name.
        gate: String,
        /// `approved` or `rejected`.
        status: String,
        /// The seq of the event that decided it.
        decided_seq: i64,
    },
    /// GATE_PENDING.
    #[error("session {id} waits on gate `{gate}`; approve or reject the gate instead of resuming")]
    GatePending {
        /// The session.
        id: String,
        /// The pending gate's name.
        gate: String,
    },
    /// CHECKPOINT_NOT_FOUND.
    #[error("session {id} has no checkpoint snapshot{}", seq.map(|s| format!(" at seq {s}")).unwrap_or_default())]
    CheckpointNotFound {
        /// The session.
        id: String,
        /// The seq asked for; `None`: the latest was asked for.
        seq: Option<i64>,
    },
    /// LEASE_NOT_FOUND.
    #[error("no live lease of session {id} matches the given token: it expired, was released or was taken over; take a new one with `session lock`")]
    LeaseNotFound {
        /// The session.
        id: String,
    },
    /// INTERNAL.
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
    /// INTERRUPTED: a signal arrived (SIGINT, SIGTERM); the operation
    /// stopped between two sessions or batches, its temp files removed.
    #[error("interrupted by {}", signal_name(*signal))]
    Interrupted {
        /// The signal's number (2 = SIGINT, 15 = SIGTERM).
        signal: i32,
    },
    /// An import or export that stopped part-way — at a signal, or at a
    /// disk or lock failure. The code is its cause's; the details are the
    /// counts of what was done before it stopped (the summary a complete
    /// run prints) plus the cause's own details.
    #[error("{}; {progress}", chain(cause))]
    Incomplete {
        /// Why it stopped.
        cause: Box<Error>,
        /// What was done before it stopped, in words.
        progress: String,
        /// The counts so far: the command's summary as a JSON object.
        report: Box<serde_json::Value>,
    },
    /// RUN_INVALID_TRANSITION for `run start`: the session already has a
    /// running run (at most one per session, docs/design.md, "Runs").
    #[error(
        "cannot start run {id}: session {session_id} already has running run {running_run_id}"
    )]
    RunAlreadyRunning {
        /// The pending run that was to start.
        id: String,
        /// Its session.
        session_id: String,
        /// The session's running run.
        running_run_id: String,
    },
    /// STORE_IO found by logbook's own checks of the database's files, with
    /// what to do: the file was replaced or removed under an open handle,
    /// or it lies where this open cannot use it (read-only storage), or its
    /// WAL cannot be read there (docs/design.md, "Database files").
    #[error("{path}: {reason}")]
    StoreFile {
        /// The database path.
        path: String,
        /// What was found.
        reason: String,
        /// What to do about it (the CLI prints it as a `hint:` line; the
        /// JSON envelope carries it in `details.hint`).
        hint: String,
    },
    /// INVALID_ARGUMENT (field `export`): `verify --export FILE` found no
    /// session of the file that is purged here with a tombstone that
    /// matches it, so the file proves nothing about this ledger. The
    /// details are `{"field":"export","reason","sessions"}`, `sessions`
    /// every session of the file with its outcome (README.md, "Retention:
    /// purging old sessions").
    #[error("invalid `export`: {reason}")]
    ExportUnproven {
        /// What was found, in words: how many sessions, by outcome.
        reason: String,
        /// Every session of the file, in file order, with its outcome
        /// (none is `matched`).
        sessions: Vec<crate::ledger::ExportSession>,
    },
}

/// Shorthand for `std::result::Result<T, logbook::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable code for this error. Exhaustive on purpose: a new variant
    /// does not compile until it is given a code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidArgument { .. } | Error::ExportUnproven { .. } => {
                ErrorCode::InvalidArgument
            }
            Error::SessionNotFound { .. } | Error::SessionPurged { .. } => {
                ErrorCode::SessionNotFound
            }
            Error::RunNotFound { .. } => ErrorCode::RunNotFound,
            Error::Conflict { .. } => ErrorCode::SessionConflict,
            Error::LeaseHeld { .. } => ErrorCode::LeaseHeld,
            Error::Busy { .. } => ErrorCode::StoreBusy,
            Error::Unavailable { .. } | Error::CommitUnknown { .. } => ErrorCode::StoreUnavailable,
            Error::InvalidTransition { .. } => ErrorCode::SessionInvalidTransition,
            Error::RunInvalidTransition { .. } => ErrorCode::RunInvalidTransition,
            Error::Corrupt { .. } => ErrorCode::StoreCorrupt,
            Error::VersionTooNew { .. } => ErrorCode::StoreVersionTooNew,
            Error::Io { .. } | Error::StoreIo { .. } => ErrorCode::StoreIo,
            Error::Tampered { .. } => ErrorCode::LedgerTampered,
            Error::Unhealthy { code, .. } => *code,
            Error::GateNotFound { .. } => ErrorCode::GateNotFound,
            Error::GateAlreadyDecided { .. } => ErrorCode::GateAlreadyDecided,
            Error::GatePending { .. } => ErrorCode::GatePending,
            Error::CheckpointNotFound { .. } => ErrorCode::CheckpointNotFound,
            Error::LeaseNotFound { .. } => ErrorCode::LeaseNotFound,
            Error::Internal { .. } => ErrorCode::Internal,
            Error::RunAlreadyRunning { .. } => ErrorCode::RunInvalidTransition,
            Error::StoreFile { .. } => ErrorCode::StoreIo,
            Error::Interrupted { .. } => ErrorCode::Interrupted,
            Error::Incomplete { cause, .. } => cause.code(),
        }
    }

    /// Builds an INVALID_ARGUMENT error.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Builds a SESSION_INVALID_TRANSITION error: `verb` is not allowed
    /// from the session's status `from` (the status and verb names of
    /// [`SessionStatus::as_str`] and [`Verb::as_str`]).
    pub fn invalid_transition(id: impl Into<String>, from: SessionStatus, verb: Verb) -> Self {
        Error::InvalidTransition {
            id: id.into(),
            from,
            verb,
        }
    }

    /// Builds an INTERNAL error.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests;
