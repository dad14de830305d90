//! The audit trail's lines in logbook's JSON Lines format: one line per
//! purge record (`"format":"logbook.purge.v1"`) with its end and the
//! tombstones written under it (docs/import-export.md, "Purge records").
//! An export writes them before the sessions, so an import carries a
//! purge's tombstones before it meets a session of the same id again (a
//! later incarnation) or a child of a purged session.

use super::super::json::Obj;
use super::super::Bad;
use super::parse::unknown_key;
use crate::store::rows::{PurgeCandidate, PurgeEndRow, PurgeRow, Tombstone};
use serde::Serialize;
use serde_json::value::RawValue;

/// The `format` value of a purge record's line.
pub const PURGE_FORMAT: &str = "logbook.purge.v1";

#[derive(Serialize)]
struct LineEnd<'a> {
    at_ms: i64,
    outcome: &'a str,
    skipped: i64,
}

#[derive(Serialize)]
struct LineTombstone<'a> {
    session_id: &'a str,
    insert_seq: i64,
    title: &'a str,
    status: &'a str,
    app: Option<&'a str>,
    parent_session_id: Option<&'a str>,
    created_at_ms: i64,
    ended_at_ms: Option<i64>,
    events: i64,
    last_event_id: Option<i64>,
    last_hash: Option<String>,
    bytes: i64,
    purged_at_ms: i64,
}

#[derive(Serialize)]
struct LinePurge<'a> {
    format: &'static str,
    purge_id: i64,
    at_ms: i64,
    actor_type: &'a str,
    actor_id: Option<&'a str>,
    filter: &'a RawValue,
    sessions: i64,
    events: i64,
    bytes: i64,
    end: Option<LineEnd<'a>>,
    tombstones: Vec<LineTombstone<'a>>,
}

/// A purge record read from a line: the record (its id is the exporting
/// ledger's), its end, its tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeLine {
    /// The record.
    pub purge: PurgeRow,
    /// How it ended, if it did.
    pub end: Option<PurgeEndRow>,
    /// The tombstones written under it (those the export carries).
    pub tombstones: Vec<Tombstone>,
}

/// Renders a purge record, its end and `tombstones` as one line (without
/// the trailing `\n`).
pub(crate) fn render(
    p: &PurgeRow,
    end: Option<&PurgeEndRow>,
    tombstones: &[Tombstone],
) -> serde_json::Result<String> {
    let filter: &RawValue = serde_json::from_str(&p.filter)?;
    serde_json::to_string(&LinePurge {
        format: PURGE_FORMAT,
        purge_id: p.purge_id,
        at_ms: p.at_ms,
        actor_type: &p.actor_type,
        actor_id: p.actor_id.as_deref(),
        filter,
        sessions: p.sessions,
        events: p.events,
        bytes: p.bytes,
        end: end.map(|e| LineEnd {
            at_ms: e.at_ms,
            outcome: &e.outcome,
            skipped: e.skipped,
        }),
        tombstones: tombstones
            .iter()
            .map(|t| {
                let s = &t.session;
                LineTombstone {
                    session_id: &s.session_id,
                    insert_seq: s.insert_seq,
                    title: &s.title,
                    status: &s.status,
                    app: s.app.as_deref(),
                    parent_session_id: s.parent_session_id.as_deref(),
                    created_at_ms: s.created_at_ms,
                    ended_at_ms: s.ended_at_ms,
                    events: s.events,
                    last_event_id: s.last_event_id,
                    last_hash: s.last_hash.as_deref().map(hex::encode),
                    bytes: s.bytes,
                    purged_at_ms: t.purged_at_ms,
                }
            })
            .collect(),
    })
}

const KEYS: &[&str] = &[
    "format",
    "purge_id",
    "at_ms",
    "actor_type",
    "actor_id",
    "filter",
    "sessions",
    "events",
    "bytes",
    "end",
    "tombstones",
];

const TOMBSTONE_KEYS: &[&str] = &[
    "session_id",
    "insert_seq",
    "title",
    "status",
    "app",
    "parent_session_id",
    "created_at_ms",
    "ended_at_ms",
    "events",
    "last_event_id",
    "last_hash",
    "bytes",
    "purged_at_ms",
];

fn known(o: &Obj<'_>, keys: &[&str], path: &str) -> Result<(), Bad> {
    match o.keys().find(|k| !keys.contains(k)) {
        Some(k) => Err(unknown_key(path, k)),
        None => Ok(()),
    }
}

fn count(o: &Obj<'_>, key: &str) -> Result<i64, Bad> {
    let n = o.i64_req(key)?;
    if n < 0 {
        return Err(Bad::new(o.name(key), "must be 0 or more"));
    }
    Ok(n)
}

/// Whether a parsed line is a purge record's.
pub(crate) fn is_purge_line(o: &Obj<'_>) -> bool {
    o.str_opt("format").ok().flatten().as_deref() == Some(PURGE_FORMAT)
}

fn tombstone(o: &Obj<'_>, path: &str) -> Result<Tombstone, Bad> {
    known(o, TOMBSTONE_KEYS, path)?;
    let session_id = o.str_req("session_id")?;
    if session_id.parse::<crate::model::SessionId>().is_err() {
        return Err(Bad::new(
            o.name("session_id"),
            "must be `ses_` followed by 16 lowercase hex digits",
        ));
    }
    let status = o.str_req("status")?;
    if !matches!(status.as_str(), "completed" | "failed" | "cancelled") {
        return Err(Bad::new(
            o.name("status"),
            "must be completed, failed or cancelled",
        ));
    }
    let last_hash = match o.str_opt("last_hash")? {
        None => None,
        Some(h) => match hex::decode(&h) {
            Ok(b) if b.len() == 32 => Some(b),
            _ => {
                return Err(Bad::new(
                    o.name("last_hash"),
                    "must be 64 hex digits or null",
                ))
            }
        },
    };
    Ok(Tombstone {
        session: PurgeCandidate {
            session_id,
            insert_seq: o.i64_req("insert_seq")?,
            title: o.str_req("title")?,
            status,
            app: o.str_opt("app")?,
            parent_session_id: o.str_opt("parent_session_id")?,
            created_at_ms: o.i64_req("created_at_ms")?,
            ended_at_ms: o.i64_opt("ended_at_ms")?,
            events: count(o, "events")?,
            last_event_id: o.i64_opt("last_event_id")?,
            last_hash,
            bytes: count(o, "bytes")?,
        },
        purge_id: 0,
        purged_at_ms: o.i64_req("purged_at_ms")?,
    })
}

/// Parses and checks a purge record's line.
pub(crate) fn parse(o: &Obj<'_>) -> Result<PurgeLine, Bad> {
    known(o, KEYS, "")?;
    let actor_type = o.str_req("actor_type")?;
    if !matches!(actor_type.as_str(), "cli" | "mcp" | "lib" | "sql") {
        return Err(Bad::new("actor_type", "must be cli, mcp, lib or sql"));
    }
    let filter = match o.raw("filter") {
        Some(r) if r.get().trim_start().starts_with('{') => r.get().to_owned(),
        _ => return Err(Bad::new("filter", "must be a JSON object")),
    };
    let end = match o.obj("end")? {
        None => None,
        Some(e) => {
            known(&e, &["at_ms", "outcome", "skipped"], "end")?;
            let outcome = e.str_req("outcome")?;
            if !matches!(outcome.as_str(), "done" | "superseded") {
                return Err(Bad::new("end.outcome", "must be done or superseded"));
            }
            Some(PurgeEndRow {
                at_ms: e.i64_req("at_ms")?,
                outcome,
                skipped: count(&e, "skipped")?,
            })
        }
    };
    let mut tombstones = Vec::new();
    for (i, raw) in o.list("tombstones")?.into_iter().enumerate() {
        let path = format!("tombstones[{i}]");
        let t = Obj::parse(raw.get(), &path)?;
        tombstones.push(tombstone(&t, &path)?);
    }
    Ok(PurgeLine {
        purge: PurgeRow {
            purge_id: o.i64_req("purge_id")?,
            at_ms: o.i64_req("at_ms")?,
            actor_type,
            actor_id: o.str_opt("actor_id")?,
            filter: super::super::json::minify(&filter),
            sessions: count(o, "sessions")?,
            events: count(o, "events")?,
            bytes: count(o, "bytes")?,
        },
        end,
        tombstones,
    })
}
