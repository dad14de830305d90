//! Each error's `details` object (docs/design.md, "Errors" and "CLI"): one `#[derive(Serialize)]`
//! struct per variant shape, never `json!`.
//!
//! # Key order
//!
//! A struct serializes its fields in declaration order, so the order is
//! fixed by this file and by nothing else (not by serde_json's
//! `preserve_order` feature, which any dependency could switch on). The
//! fields of every shape are declared in **alphabetical order of their JSON
//! keys**: that is the order the details have always had on the wire (they
//! were built as `serde_json::Value` maps, which sort their keys), and the
//! envelope goldens (`tests/golden/envelopes/`) pin it. A new shape keeps
//! the rule.
//!
//! Two variants carry a whole report as a JSON value (`Unhealthy`: the
//! doctor report; `Incomplete`: the counts of an import or export that
//! stopped part-way, merged with its cause's details): those print as the
//! value holds them.

use super::{signal_name, Error, LatestEvent};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// An error's `details` object, ready to serialize: what
/// [`Error::wire_details`] returns and the envelope's `error.details`
/// ([`crate::envelope::ErrorBody`]).
///
/// Each variant of [`Error`] has its shape, a struct whose fields are its
/// keys in alphabetical order (the module docs say why); a report the
/// caller built ([`Details::report`]) prints as its value.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Details<'a>(Shape<'a>);

impl Details<'static> {
    /// Details that are a whole report built by the caller, e.g. the CLI's
    /// import report with its rejections (INVALID_ARGUMENT). It prints as
    /// the value holds it.
    pub fn report(value: Value) -> Self {
        Details(Shape::Owned(value))
    }
}

impl Details<'_> {
    /// The details as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| Value::Object(serde_json::Map::new()))
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Shape<'a> {
    FieldReason(FieldReason<'a>),
    ExportUnproven(ExportUnproven<'a>),
    Session(SessionRef<'a>),
    Purged(PurgedRef<'a>),
    Run(RunRef<'a>),
    Conflict(Conflict<'a>),
    LeaseHeld(LeaseHeld<'a>),
    Busy(Busy),
    Unavailable(Unavailable<'a>),
    SessionTransition(SessionTransition<'a>),
    RunTransition(RunTransition<'a>),
    RunAlreadyRunning(RunAlreadyRunning<'a>),
    Path(PathRef<'a>),
    VersionTooNew(VersionTooNew<'a>),
    StoreFile(StoreFile<'a>),
    Tampered(Tampered<'a>),
    Gate(GateRef<'a>),
    GateDecided(GateDecided<'a>),
    Checkpoint(CheckpointRef<'a>),
    Signal(Signal),
    Empty(Empty),
    /// A report held by the error (`Unhealthy`).
    Report(&'a Value),
    /// A report merged with its cause's details (`Incomplete`), keys sorted.
    Merged(BTreeMap<String, Value>),
    /// A report built by the caller ([`Details::report`]).
    Owned(Value),
}

/// INVALID_ARGUMENT.
#[derive(Debug, Clone, Serialize)]
struct FieldReason<'a> {
    field: &'a str,
    reason: &'a str,
}

/// INVALID_ARGUMENT of `verify --export` with a file that proves nothing:
/// the field and reason, and every session of the file with its outcome.
#[derive(Debug, Clone, Serialize)]
struct ExportUnproven<'a> {
    field: &'static str,
    reason: &'a str,
    sessions: &'a [crate::ledger::ExportSession],
}

/// SESSION_NOT_FOUND, LEASE_NOT_FOUND.
#[derive(Debug, Clone, Serialize)]
struct SessionRef<'a> {
    session_id: &'a str,
}

/// SESSION_NOT_FOUND for a purged session.
#[derive(Debug, Clone, Serialize)]
struct PurgedRef<'a> {
    purge_id: i64,
    purged_at_ms: i64,
    session_id: &'a str,
}

/// RUN_NOT_FOUND.
#[derive(Debug, Clone, Serialize)]
struct RunRef<'a> {
    run_id: &'a str,
}

/// SESSION_CONFLICT. [`LatestEvent`]'s own fields are declared in key
/// order too.
#[derive(Debug, Clone, Serialize)]
struct Conflict<'a> {
    current_rev: i64,
    expected_rev: i64,
    latest_event: Option<&'a LatestEvent>,
    session_id: &'a str,
}

/// LEASE_HELD.
#[derive(Debug, Clone, Serialize)]
struct LeaseHeld<'a> {
    expires_at_ms: i64,
    hostname: &'a str,
    pid: i64,
    session_id: &'a str,
}

/// STORE_BUSY.
#[derive(Debug, Clone, Serialize)]
struct Busy {
    busy_timeout_ms: u64,
}

/// STORE_UNAVAILABLE: `outcome` is `"not_applied"` (the server could not
/// be reached, nothing was written) or `"unknown"` (lost after COMMIT).
#[derive(Debug, Clone, Serialize)]
struct Unavailable<'a> {
    location: &'a str,
    outcome: &'static str,
}

/// SESSION_INVALID_TRANSITION.
#[derive(Debug, Clone, Serialize)]
struct SessionTransition<'a> {
    session_id: &'a str,
    status: &'a str,
    verb: &'a str,
}

/// RUN_INVALID_TRANSITION.
#[derive(Debug, Clone, Serialize)]
struct RunTransition<'a> {
    run_id: &'a str,
    status: &'a str,
    verb: &'a str,
}

/// RUN_INVALID_TRANSITION of `run start` while another run is running.
#[derive(Debug, Clone, Serialize)]
struct RunAlreadyRunning<'a> {
    run_id: &'a str,
    running_run_id: &'a str,
    session_id: &'a str,
    /// Always `pending`: only a pending run starts.
    status: &'static str,
    /// Always `start`.
    verb: &'static str,
}

/// STORE_CORRUPT.
#[derive(Debug, Clone, Serialize)]
struct PathRef<'a> {
    path: &'a str,
}

/// STORE_VERSION_TOO_NEW.
#[derive(Debug, Clone, Serialize)]
struct VersionTooNew<'a> {
    found: i64,
    path: &'a str,
    supported: i64,
}

/// STORE_IO found by logbook's own file checks.
#[derive(Debug, Clone, Serialize)]
struct StoreFile<'a> {
    hint: &'a str,
    path: &'a str,
}

/// LEDGER_TAMPERED.
#[derive(Debug, Clone, Serialize)]
struct Tampered<'a> {
    broken_sessions: u64,
    expected: &'a str,
    found: &'a str,
    problem: &'a str,
    seq: i64,
    session_id: &'a str,
}

/// GATE_NOT_FOUND, GATE_PENDING.
#[derive(Debug, Clone, Serialize)]
struct GateRef<'a> {
    gate: &'a str,
    session_id: &'a str,
}

/// GATE_ALREADY_DECIDED.
#[derive(Debug, Clone, Serialize)]
struct GateDecided<'a> {
    decided_seq: i64,
    gate: &'a str,
    session_id: &'a str,
    status: &'a str,
}

/// CHECKPOINT_NOT_FOUND.
#[derive(Debug, Clone, Serialize)]
struct CheckpointRef<'a> {
    seq: Option<i64>,
    session_id: &'a str,
}

/// INTERRUPTED: the signal's name (`SIGINT`, `SIGTERM`).
#[derive(Debug, Clone, Serialize)]
struct Signal {
    signal: String,
}

/// STORE_IO raised by the driver or the OS, INTERNAL: `{}`.
#[derive(Debug, Clone, Serialize)]
struct Empty {}

impl Error {
    /// The structured details of the JSON envelope's `error.details`, as a
    /// `Serialize` value with its keys in a fixed order (see [`Details`]).
    pub fn wire_details(&self) -> Details<'_> {
        Details(match self {
            Error::InvalidArgument { field, reason } => {
                Shape::FieldReason(FieldReason { field, reason })
            }
            Error::ExportUnproven { reason, sessions } => Shape::ExportUnproven(ExportUnproven {
                field: "export",
                reason,
                sessions,
            }),
            Error::SessionNotFound { id } | Error::LeaseNotFound { id } => {
                Shape::Session(SessionRef { session_id: id })
            }
            Error::SessionPurged {
                id,
                purge_id,
                purged_at_ms,
            } => Shape::Purged(PurgedRef {
                purge_id: *purge_id,
                purged_at_ms: *purged_at_ms,
                session_id: id,
            }),
            Error::RunNotFound { id } => Shape::Run(RunRef { run_id: id }),
            Error::Conflict {
                id,
                expected_rev,
                actual_rev,
                latest_event,
            } => Shape::Conflict(Conflict {
                current_rev: *actual_rev,
                expected_rev: *expected_rev,
                latest_event: latest_event.as_ref(),
                session_id: id,
            }),
            Error::LeaseHeld {
                id,
                expires_at_ms,
                pid,
                hostname,
            } => Shape::LeaseHeld(LeaseHeld {
                expires_at_ms: *expires_at_ms,
                hostname,
                pid: *pid,
                session_id: id,
            }),
            Error::Busy { timeout_ms } => Shape::Busy(Busy {
                busy_timeout_ms: *timeout_ms,
            }),
            Error::Unavailable { location, .. } => Shape::Unavailable(Unavailable {
                location,
                outcome: "not_applied",
            }),
            Error::CommitUnknown { location } => Shape::Unavailable(Unavailable {
                location,
                outcome: "unknown",
            }),
            Error::InvalidTransition { id, from, verb } => {
                Shape::SessionTransition(SessionTransition {
                    session_id: id,
                    status: from.as_str(),
                    verb: verb.as_str(),
                })
            }
            Error::RunInvalidTransition { id, from, verb } => Shape::RunTransition(RunTransition {
                run_id: id,
                status: from,
                verb,
            }),
            Error::RunAlreadyRunning {
                id,
                session_id,
                running_run_id,
            } => Shape::RunAlreadyRunning(RunAlreadyRunning {
                run_id: id,
                running_run_id,
                session_id,
                status: "pending",
                verb: "start",
            }),
            Error::Corrupt { path, .. } => Shape::Path(PathRef { path }),
            Error::VersionTooNew {
                path,
                found,
                supported,
            } => Shape::VersionTooNew(VersionTooNew {
                found: *found,
                path,
                supported: *supported,
            }),
            Error::StoreFile { path, hint, .. } => Shape::StoreFile(StoreFile { hint, path }),
            Error::Tampered {
                session_id,
                seq,
                problem,
                expected,
                found,
                broken_sessions,
            } => Shape::Tampered(Tampered {
                broken_sessions: *broken_sessions,
                expected,
                found,
                problem,
                seq: *seq,
                session_id,
            }),
            Error::Unhealthy { report, .. } => Shape::Report(report),
            Error::GateNotFound { id, gate } | Error::GatePending { id, gate } => {
                Shape::Gate(GateRef {
                    gate,
                    session_id: id,
                })
            }
            Error::GateAlreadyDecided {
                id,
                gate,
                status,
                decided_seq,
            } => Shape::GateDecided(GateDecided {
                decided_seq: *decided_seq,
                gate,
                session_id: id,
                status,
            }),
            Error::CheckpointNotFound { id, seq } => Shape::Checkpoint(CheckpointRef {
                seq: *seq,
                session_id: id,
            }),
            Error::Io { .. } | Error::StoreIo { .. } | Error::Internal { .. } => {
                Shape::Empty(Empty {})
            }
            Error::Interrupted { signal } => Shape::Signal(Signal {
                signal: signal_name(*signal),
            }),
            Error::Incomplete { cause, report, .. } => incomplete(cause, report),
        })
    }

    /// The same details as a JSON value, for reading them in code (e.g.
    /// `e.details()["field"]`). The envelopes serialize
    /// [`Error::wire_details`] directly.
    pub fn details(&self) -> Value {
        self.wire_details().to_value()
    }
}

/// The counts of an operation that stopped part-way, with each key of its
/// cause's details that the counts do not have (the counts win a clash),
/// keys sorted; a report that is not an object prints as it is.
fn incomplete<'a>(cause: &Error, report: &'a Value) -> Shape<'a> {
    let Value::Object(counts) = report else {
        return Shape::Report(report);
    };
    let mut merged: BTreeMap<String, Value> =
        counts.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Value::Object(extra) = cause.details() {
        for (k, v) in extra {
            merged.entry(k).or_insert(v);
        }
    }
    Shape::Merged(merged)
}
