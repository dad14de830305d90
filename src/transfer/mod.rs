//! Export and import formats (docs/import-export.md): logbook's own JSON Lines, the
//! Phelix data folder and the Amber `.amber/sessions` tree.
//! See `docs/import-export.md` for the formats and mappings.
//!
//! This module parses, validates and redacts input into the store's
//! [`SessionRows`](crate::store::rows::SessionRows) and renders
//! sessions in the export formats. It holds no SQL and opens no database;
//! the `Ledger` methods in `ledger::transfer` drive it.

pub(crate) mod amber;
pub(crate) mod json;
pub(crate) mod jsonl;
pub(crate) mod phelix;
pub(crate) mod source;
mod timeline;

pub(crate) use timeline::check_timeline;

use crate::error::Error;
use crate::model::SessionStatus;
use crate::redact::redact;
use crate::store::rows::SessionRows;
use crate::validate::{self as v, Lines};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Largest input accepted for one session, in bytes: a JSON Lines line, a
/// Phelix file, or an Amber manifest, timeline line or checkpoint file
/// (16 MiB). Larger input is rejected (never truncated) and is skipped
/// without being held in memory.
pub const MAX_SESSION_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// Largest Amber timeline in bytes (64 MiB); its events are one session.
pub const MAX_TIMELINE_BYTES: u64 = 64 * 1024 * 1024;

/// At most this many rejections are listed in an [`ImportReport`]; the
/// rest are counted in `rejections_omitted`.
pub const MAX_LISTED_REJECTIONS: usize = 100;

/// Sessions per `BEGIN IMMEDIATE` transaction of an import.
pub const IMPORT_BATCH_SESSIONS: usize = 256;

/// An import format. Rule: docs/import-export.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImportFormat {
    /// logbook's own JSON Lines export (one session per line).
    Jsonl,
    /// A Phelix data folder: `sessions/<ses_id>.json`.
    Phelix,
    /// An Amber tree: `.amber/sessions/<uuid>/…`.
    Amber,
}

impl ImportFormat {
    /// The format's name, as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Phelix => "phelix",
            Self::Amber => "amber",
        }
    }
}

impl FromStr for ImportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonl" => Ok(Self::Jsonl),
            "phelix" => Ok(Self::Phelix),
            "amber" => Ok(Self::Amber),
            _ => Err("expected jsonl, phelix or amber".to_owned()),
        }
    }
}

/// An export format. Rule: docs/import-export.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// One line per session, every column and event (round-trips exactly).
    Jsonl,
    /// `DIR/sessions/<ses_id>.json` in Phelix's schema.
    Phelix,
}

impl ExportFormat {
    /// The format's name, as the CLI spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonl => "jsonl",
            Self::Phelix => "phelix",
        }
    }
}

impl FromStr for ExportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonl" => Ok(Self::Jsonl),
            "phelix" => Ok(Self::Phelix),
            _ => Err("expected jsonl or phelix".to_owned()),
        }
    }
}

/// One rejected session of an import: where it was and what was wrong.
/// Never holds an input value (it could be a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// The input file (as given, or `-` for stdin).
    pub file: String,
    /// 1-based line of a JSON Lines input or Amber timeline, if any.
    pub line: Option<u64>,
    /// The session's (logbook) id, when it was read before the problem.
    pub session_id: Option<String>,
    /// The offending field, e.g. `events[3].at_ms` or `timeline.type`.
    pub field: String,
    /// What is wrong, naming the limit where there is one.
    pub reason: String,
}

/// The outcome of an import. Serializes in this field order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// The format read.
    pub format: ImportFormat,
    /// Sessions written by this import.
    pub imported: u64,
    /// Sessions whose id already existed before this import (left as they
    /// were).
    pub skipped: u64,
    /// Sessions refused; none of their rows was written.
    pub rejected: u64,
    /// Events written.
    pub events: u64,
    /// Purge records written (logbook JSON Lines' `logbook.purge.v1`
    /// lines; a record met again is not counted).
    pub purge_records: u64,
    /// Tombstones written under them (one already here is not counted).
    pub tombstones: u64,
    /// The first [`MAX_LISTED_REJECTIONS`] rejections, in input order.
    pub rejections: Vec<Rejection>,
    /// Rejections not listed.
    pub rejections_omitted: u64,
}

impl ImportReport {
    pub(crate) fn new(format: ImportFormat) -> Self {
        ImportReport {
            format,
            imported: 0,
            skipped: 0,
            rejected: 0,
            events: 0,
            purge_records: 0,
            tombstones: 0,
            rejections: Vec::new(),
            rejections_omitted: 0,
        }
    }

    pub(crate) fn reject(&mut self, r: Rejection) {
        self.rejected += 1;
        if self.rejections.len() < MAX_LISTED_REJECTIONS {
            self.rejections.push(r);
        } else {
            self.rejections_omitted += 1;
        }
    }
}

/// The outcome of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    /// The format written.
    pub format: ExportFormat,
    /// Sessions written.
    pub sessions: u64,
    /// Events written.
    pub events: u64,
    /// Purge records written before the sessions (logbook JSON Lines):
    /// every one for a whole ledger; for chosen sessions, those whose
    /// tombstones a chosen session's purged ancestors are.
    pub purge_records: u64,
    /// Tombstones written in those records.
    pub tombstones: u64,
    /// The file or folder written; null for stdout.
    pub out: Option<String>,
}

/// Why one session's input is refused (crate-internal; becomes a
/// [`Rejection`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bad {
    pub field: String,
    pub reason: String,
    pub line: Option<u64>,
    /// The file within the input item (Amber: `timeline.jsonl`, …).
    pub file: Option<String>,
}

impl Bad {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Bad {
            field: field.into(),
            reason: reason.into(),
            line: None,
            file: None,
        }
    }

    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        if self.file.is_none() {
            self.file = Some(file.into());
        }
        self
    }

    pub fn at_line(mut self, line: u64) -> Self {
        self.line = Some(line);
        self
    }
}

impl From<Error> for Bad {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidArgument { field, reason } => Bad::new(field, reason),
            other => Bad::new("record", other.to_string()),
        }
    }
}

impl fmt::Display for Bad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.field, self.reason)
    }
}

/// The fixed event types logbook and its features emit (docs/design.md, "Model").
const BUILT_IN_TYPES: &[&str] = &[
    "created",
    "started",
    "paused",
    "resumed",
    "checkpoint",
    "completed",
    "failed",
    "cancelled",
    "checkpoint_restored",
    "usage_recorded",
    "forked",
];

/// Families of built-in types: the prefix, then `[a-z_]+`.
const BUILT_IN_FAMILIES: &[&str] = &["stage_", "gate_", "budget_", "run_", "lease_"];

/// Whether `t` is an event type logbook accepts on import: a built-in name,
/// a built-in family (`stage_*`, `gate_*`, `budget_*`, `run_*`, `lease_*`),
/// or a custom `x.` name.
pub(crate) fn event_type_ok(t: &str) -> bool {
    if BUILT_IN_TYPES.contains(&t) {
        return true;
    }
    if t.len() <= v::EVENT_TYPE_MAX {
        for f in BUILT_IN_FAMILIES {
            if let Some(rest) = t.strip_prefix(f) {
                if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    return true;
                }
            }
        }
    }
    v::custom_event_type(t).is_ok()
}

/// Checks and redacts optional free text.
pub(crate) fn opt_text(
    field: &str,
    value: Option<String>,
    max: usize,
    lines: Lines,
) -> Result<Option<String>, Bad> {
    match value {
        None => Ok(None),
        Some(t) => {
            v::text(field, &t, 0, max, lines)?;
            Ok(Some(redact(&t).into_owned()))
        }
    }
}

/// Checks an optional stage name, stored as given: one that looks like a
/// secret is refused, as `session stage` refuses it.
pub(crate) fn opt_stage(field: &str, value: Option<String>) -> Result<Option<String>, Bad> {
    match value {
        None => Ok(None),
        Some(t) => {
            v::keyed_name(field, &t, "stage names")?;
            Ok(Some(t))
        }
    }
}

/// Checks and redacts an optional name (app, agent_id, route).
pub(crate) fn opt_name(field: &str, value: Option<String>) -> Result<Option<String>, Bad> {
    match value {
        None => Ok(None),
        Some(t) => {
            v::name(field, &t)?;
            Ok(Some(redact(&t).into_owned()))
        }
    }
}

/// Largest time logbook accepts, ms since the epoch: 2^53 − 1, so every
/// JSON reader holds it exactly.
pub const TIME_MAX_MS: i64 = 9_007_199_254_740_991;

/// How far after now (the ledger's clock) an imported time may lie: 24
/// hours, in ms. An imported session with a time later than that is
/// rejected (INVALID_ARGUMENT, naming the field): the live clock never lets
/// a new session or event go below the newest one's time, so one session
/// from the far future would stamp every session created after it with
/// that future time, for good (attack report #3). 24 hours covers clocks
/// that run a little ahead on the exporting host and any time-zone
/// mistake (UTC offsets are at most 14 hours).
pub const IMPORT_MAX_FUTURE_MS: i64 = 24 * 60 * 60 * 1000;

/// Refuses a session any of whose times — its own, its events', runs',
/// budget's, snapshots' or gates' — lies more than
/// [`IMPORT_MAX_FUTURE_MS`] after `now_ms`; names the first such field
/// (logbook's names, as [`check_rows`] does, whatever the format).
pub(crate) fn check_not_future(s: &SessionRows, now_ms: i64) -> Result<(), Bad> {
    let limit = now_ms.saturating_add(IMPORT_MAX_FUTURE_MS);
    let mut times: Vec<(String, Option<i64>)> = vec![
        ("created_at_ms".into(), Some(s.created_at_ms)),
        ("updated_at_ms".into(), Some(s.updated_at_ms)),
        ("ended_at_ms".into(), s.ended_at_ms),
    ];
    for (i, e) in s.events.iter().enumerate() {
        times.push((format!("events[{i}].at_ms"), Some(e.at_ms)));
    }
    let w = &s.workflow;
    for (i, r) in w.runs.iter().enumerate() {
        for (name, t) in [
            ("created_at_ms", Some(r.created_at_ms)),
            ("updated_at_ms", Some(r.updated_at_ms)),
            ("started_at_ms", r.started_at_ms),
            ("ended_at_ms", r.ended_at_ms),
        ] {
            times.push((format!("runs[{i}].{name}"), t));
        }
    }
    if let Some(b) = &w.budget {
        times.push(("budget.exceeded_at_ms".into(), b.exceeded_at_ms));
        times.push(("budget.updated_at_ms".into(), Some(b.updated_at_ms)));
    }
    for (i, sn) in w.snapshots.iter().enumerate() {
        times.push((format!("snapshots[{i}].at_ms"), Some(sn.at_ms)));
    }
    for (i, g) in w.gates.iter().enumerate() {
        times.push((format!("gates[{i}].opened_at_ms"), Some(g.opened_at_ms)));
        times.push((format!("gates[{i}].decided_at_ms"), g.decided_at_ms));
    }
    match times.into_iter().find(|(_, t)| t.is_some_and(|t| t > limit)) {
        Some((field, _)) => Err(Bad::new(
            field,
            format!(
                "lies more than {} hours after now (the ledger's clock): every session and event written after it would take its time, so it is refused",
                IMPORT_MAX_FUTURE_MS / 3_600_000
            ),
        )),
        None => Ok(()),
    }
}

/// Checks the parts of a session every format must satisfy before insert:
/// at least one event, the first `created`; seqs implied by position;
/// `at_ms` never decreasing; 1 ≤ rev ≤ number of events (so `verify`
/// holds); the checkpoint seq names a `checkpoint` event; `ended_at_ms`
/// set exactly for terminal statuses; times within 0..=2^53−1 and
/// consistent with the events; references within caps.
pub(crate) fn check_rows(s: &SessionRows) -> Result<(), Bad> {
    let Some(first) = s.events.first() else {
        return Err(Bad::new("events", "must hold at least the `created` event"));
    };
    if first.event_type != "created" {
        return Err(Bad::new("events[0].type", "must be `created`"));
    }
    for (i, pair) in s.events.windows(2).enumerate() {
        if pair[1].at_ms < pair[0].at_ms {
            return Err(Bad::new(
                format!("events[{}].at_ms", i + 1),
                "is earlier than the previous event's (times never decrease within a session)",
            ));
        }
    }
    // Times: within 0..=2^53−1 ms, and consistent with the events, because
    // the live clock never lets a new event go below `updated_at_ms` — an
    // `updated_at_ms` under the last event's time would let the next write
    // go back in time.
    let in_range = |t: i64| (0..=TIME_MAX_MS).contains(&t);
    for (i, e) in s.events.iter().enumerate() {
        if !in_range(e.at_ms) {
            return Err(Bad::new(
                format!("events[{i}].at_ms"),
                "must be from 0 to 2^53 − 1 ms since the epoch",
            ));
        }
    }
    let last_at = s.events.last().map_or(0, |e| e.at_ms);
    for (field, t) in [
        ("created_at_ms", Some(s.created_at_ms)),
        ("updated_at_ms", Some(s.updated_at_ms)),
        ("ended_at_ms", s.ended_at_ms),
    ] {
        if t.is_some_and(|t| !in_range(t)) {
            return Err(Bad::new(
                field,
                "must be from 0 to 2^53 − 1 ms since the epoch",
            ));
        }
    }
    if s.created_at_ms > first.at_ms {
        return Err(Bad::new(
            "created_at_ms",
            "is later than the `created` event's at_ms",
        ));
    }
    if s.updated_at_ms < last_at {
        return Err(Bad::new(
            "updated_at_ms",
            "is earlier than the last event's at_ms",
        ));
    }
    if s.ended_at_ms
        .is_some_and(|t| t < s.created_at_ms || t > s.updated_at_ms)
    {
        return Err(Bad::new(
            "ended_at_ms",
            "must lie between created_at_ms and updated_at_ms",
        ));
    }
    let n = i64::try_from(s.events.len()).unwrap_or(i64::MAX);
    if s.rev < 1 || s.rev > n {
        return Err(Bad::new(
            "rev",
            format!("must be from 1 to the number of events ({n})"),
        ));
    }
    if let Some(cs) = s.checkpoint_seq {
        let ok = usize::try_from(cs)
            .ok()
            .and_then(|i| s.events.get(i))
            .is_some_and(|e| e.event_type == "checkpoint");
        if !ok {
            return Err(Bad::new(
                "checkpoint_seq",
                "must be the seq of a `checkpoint` event",
            ));
        }
    }
    if s.status.is_terminal() != s.ended_at_ms.is_some() {
        return Err(Bad::new(
            "ended_at_ms",
            "must be set exactly when the status is terminal",
        ));
    }
    for kind in ["plan", "operation", "deployment"] {
        let of_kind: Vec<&str> = s
            .refs
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.id.as_str())
            .collect();
        if of_kind.len() > v::REFS_MAX {
            return Err(Bad::new(
                format!("{kind}_ids"),
                format!("has {} ids; the limit is {}", of_kind.len(), v::REFS_MAX),
            ));
        }
        for (i, id) in of_kind.iter().enumerate() {
            if of_kind[..i].contains(id) {
                return Err(Bad::new(format!("{kind}_ids"), "holds the same id twice"));
            }
        }
    }
    if s.refs.iter().any(|r| r.linked_seq < 0 || r.linked_seq >= n) {
        return Err(Bad::new("refs.linked_seq", "must be the seq of an event"));
    }
    if s.parent_session_id.as_deref() == Some(s.session_id.as_str()) {
        return Err(Bad::new(
            "parent_session_id",
            "must not be the session itself",
        ));
    }
    Ok(())
}

/// Parses a status name of logbook's state machine.
pub(crate) fn status(field: &str, s: &str) -> Result<SessionStatus, Bad> {
    s.parse::<SessionStatus>().map_err(|e| Bad::new(field, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types() {
        for ok in [
            "created",
            "stage_started",
            "gate_opened",
            "x.build",
            "run_timeout",
        ] {
            assert!(event_type_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "Created",
            "stage_",
            "session_created",
            "x.",
            "gate_Open",
        ] {
            assert!(!event_type_ok(bad), "{bad}");
        }
    }

    /// An export of any session imports again: every type a verb writes is
    /// accepted.
    #[test]
    fn every_built_in_event_type_imports() {
        for t in crate::model::EventType::VARIANTS {
            assert!(event_type_ok(t.as_str()), "{t}");
        }
    }
}
