//! SQL for export and import (issue 3 §4): reading whole sessions with the
//! columns a rebuild needs, and inserting an imported session with all its
//! rows (session, data, tags, references, chained events) as given.
//!
//! Validation and redaction happen before these functions are called
//! (`crate::transfer`); this module only binds values as `?N` parameters.

use super::codec::{opt_json, opt_text, text};
use super::events::INSERT_EVENT;
use super::sessions::{INSERT_REF, INSERT_SESSION_DATA, INSERT_TAG};
use crate::chain;
use crate::model::{ActorType, SessionStatus, Usage};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::value::RawValue;

/// Every session id, in id order (the export order).
pub const SELECT_IDS: &str = "SELECT session_id FROM sessions ORDER BY session_id";

/// The insertion key of one session (to tell "already there" from "inserted
/// by this import").
pub const SELECT_INSERT_SEQ: &str = "SELECT insert_seq FROM sessions WHERE session_id = ?1";

/// The largest insertion key so far (0 for an empty database).
pub const SELECT_MAX_INSERT_SEQ: &str = "SELECT coalesce(max(insert_seq), 0) FROM sessions";

/// A session's references with their order and the event that linked them.
pub const SELECT_REFS_FULL: &str =
    "SELECT kind, ref_id, ordinal, linked_seq FROM session_refs WHERE session_id = ?1";

/// A session's events with their stored hash, by seq.
pub const SELECT_EVENTS_FULL: &str = "SELECT seq, type, at_ms, actor_type, detail, data, run_id, \
     hash FROM events WHERE session_id = ?1 ORDER BY seq";

/// Inserts an imported session with every column given (no defaults, no
/// clamping: the import keeps the recorded values). `actor_authenticated`
/// is always 0: an import cannot vouch for an identity.
pub const INSERT_SESSION_IMPORT: &str = "INSERT INTO sessions (session_id, status, title, app, \
     agent_id, route, stage, parent_session_id, tags, actor_type, actor_id, actor_authenticated, \
     rev, checkpoint_seq, final_result, end_reason, input_tokens, output_tokens, api_calls, \
     duration_ms, created_at_ms, updated_at_ms, ended_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
     ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)";

/// Opens the per-session savepoint of an import batch.
pub const SAVEPOINT: &str = "SAVEPOINT logbook_import_session";
/// Keeps the session's rows (the batch's transaction commits them later).
pub const RELEASE: &str = "RELEASE logbook_import_session";
/// Undoes every row of the session, keeping the batch's other sessions.
pub const ROLLBACK_TO: &str = "ROLLBACK TO logbook_import_session";

/// One linked reference: kind (`plan`, `operation`, `deployment`), id, and
/// the seq of the event that linked it. Its ordinal is its position among
/// the references of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRow {
    /// `plan`, `operation` or `deployment`.
    pub kind: &'static str,
    /// The referenced id.
    pub id: String,
    /// Seq of the event that linked it.
    pub linked_seq: i64,
}

/// One event to insert; its seq is its position in [`SessionRows::events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// Event type.
    pub event_type: String,
    /// ms since the Unix epoch (UTC).
    pub at_ms: i64,
    /// Writer.
    pub actor_type: ActorType,
    /// Redacted short text.
    pub detail: Option<String>,
    /// Redacted compact JSON object.
    pub data: Option<String>,
    /// Run id.
    pub run_id: Option<String>,
}

/// A whole validated, redacted session, ready to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRows {
    /// `ses_` + 16 hex.
    pub session_id: String,
    /// Status.
    pub status: SessionStatus,
    /// Title.
    pub title: String,
    /// Goal.
    pub goal: Option<String>,
    /// App.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Route.
    pub route: Option<String>,
    /// Stage.
    pub stage: Option<String>,
    /// Parent session id.
    pub parent_session_id: Option<String>,
    /// Tags, de-duplicated, in order.
    pub tags: Vec<String>,
    /// Compact JSON object.
    pub context: String,
    /// Compact JSON object.
    pub metadata: String,
    /// Actor type of the session.
    pub actor_type: ActorType,
    /// Actor id.
    pub actor_id: Option<String>,
    /// Revision.
    pub rev: i64,
    /// Seq of the latest checkpoint event.
    pub checkpoint_seq: Option<i64>,
    /// References in order (per kind).
    pub refs: Vec<RefRow>,
    /// Completion result.
    pub final_result: Option<String>,
    /// Fail / cancel reason.
    pub end_reason: Option<String>,
    /// Usage sums.
    pub usage: Usage,
    /// ms since the Unix epoch.
    pub created_at_ms: i64,
    /// ms since the Unix epoch.
    pub updated_at_ms: i64,
    /// ms since the Unix epoch, terminal sessions only.
    pub ended_at_ms: Option<i64>,
    /// Events in seq order (seq = index).
    pub events: Vec<EventRow>,
}

/// Runs one of the fixed statements above that takes no parameter.
pub fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// The insertion key of `id`, if the session exists.
pub fn find_insert_seq(conn: &Connection, id: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(SELECT_INSERT_SEQ)?
        .query_row(params![id], |r| r.get(0))
        .optional()
}

/// The largest insertion key so far.
pub fn max_insert_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(SELECT_MAX_INSERT_SEQ)?
        .query_row([], |r| r.get(0))
}

/// Inserts every row of one session; the events are chained afresh with
/// [`chain::event_hash`]. Call inside a transaction (and a savepoint).
pub fn insert_session_rows(conn: &Connection, s: &SessionRows) -> rusqlite::Result<()> {
    let tags = serde_json::to_string(&s.tags)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached(INSERT_SESSION_IMPORT)?
        .execute(params![
            s.session_id,
            s.status.as_str(),
            s.title,
            s.app,
            s.agent_id,
            s.route,
            s.stage,
            s.parent_session_id,
            tags,
            s.actor_type.as_str(),
            s.actor_id,
            s.rev,
            s.checkpoint_seq,
            s.final_result,
            s.end_reason,
            s.usage.input_tokens,
            s.usage.output_tokens,
            s.usage.api_calls,
            s.usage.duration_ms,
            s.created_at_ms,
            s.updated_at_ms,
            s.ended_at_ms,
        ])?;
    let insert_seq = conn.last_insert_rowid();
    conn.prepare_cached(INSERT_SESSION_DATA)?.execute(params![
        insert_seq,
        s.session_id,
        s.goal,
        s.context,
        s.metadata
    ])?;
    for t in &s.tags {
        conn.prepare_cached(INSERT_TAG)?.execute(params![
            t,
            s.created_at_ms,
            insert_seq,
            s.session_id
        ])?;
    }
    let mut ordinals: [(&str, i64); 3] = [("plan", 0), ("operation", 0), ("deployment", 0)];
    for r in &s.refs {
        let Some(slot) = ordinals.iter_mut().find(|(k, _)| *k == r.kind) else {
            continue;
        };
        conn.prepare_cached(INSERT_REF)?.execute(params![
            s.session_id,
            r.kind,
            r.id,
            slot.1,
            r.linked_seq
        ])?;
        slot.1 += 1;
    }
    let mut prev = chain::GENESIS;
    for (seq, e) in s.events.iter().enumerate() {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let actor = e.actor_type.as_str();
        let hash = chain::event_hash(
            &prev,
            &chain::EventFields {
                session_id: s.session_id.as_bytes(),
                seq,
                event_type: e.event_type.as_bytes(),
                at_ms: e.at_ms,
                actor_type: actor.as_bytes(),
                detail: e.detail.as_deref().map(str::as_bytes),
                data: e.data.as_deref().map(str::as_bytes),
                run_id: e.run_id.as_deref().map(str::as_bytes),
            },
        );
        conn.prepare_cached(INSERT_EVENT)?.execute(params![
            s.session_id,
            seq,
            e.event_type,
            e.at_ms,
            actor,
            e.detail,
            e.data,
            e.run_id,
            &prev[..],
            &hash[..],
        ])?;
        prev = hash;
    }
    Ok(())
}

/// A stored reference, for export.
#[derive(Debug, Clone)]
pub struct StoredRef {
    /// `plan`, `operation` or `deployment`.
    pub kind: String,
    /// The referenced id.
    pub id: String,
    /// Its position among the session's references of its kind.
    pub ordinal: i64,
    /// Seq of the event that linked it.
    pub linked_seq: i64,
}

/// A stored event with its hash, for export.
#[derive(Debug)]
pub struct StoredEvent {
    /// Per-session seq.
    pub seq: i64,
    /// Type.
    pub event_type: String,
    /// ms since the Unix epoch.
    pub at_ms: i64,
    /// Writer.
    pub actor_type: String,
    /// Short text.
    pub detail: Option<String>,
    /// Compact JSON object as stored.
    pub data: Option<Box<RawValue>>,
    /// Run id.
    pub run_id: Option<String>,
    /// Stored hash, 32 bytes (empty if absent).
    pub hash: Vec<u8>,
}

/// Every session id in id order, passed to `f` one at a time (streams; `f`
/// returning an error stops the walk).
///
/// # Errors
/// Driver errors, classified; or `f`'s.
pub fn for_each_id(
    conn: &Connection,
    mut f: impl FnMut(&str) -> crate::Result<()>,
) -> crate::Result<()> {
    let db = |e| crate::Error::from_sqlite(e, 0);
    let mut st = conn.prepare(SELECT_IDS).map_err(db)?;
    let mut rows = st.query([]).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let id = text(row, 0).map_err(db)?;
        f(&id)?;
    }
    Ok(())
}

/// A session's references, by kind then ordinal.
pub fn select_refs(conn: &Connection, id: &str) -> rusqlite::Result<Vec<StoredRef>> {
    let mut st = conn.prepare_cached(SELECT_REFS_FULL)?;
    let rows = st.query_map(params![id], |r| {
        Ok(StoredRef {
            kind: text(r, 0)?,
            id: text(r, 1)?,
            ordinal: r.get(2)?,
            linked_seq: r.get(3)?,
        })
    })?;
    let mut refs = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    let rank = |k: &str| match k {
        "plan" => 0,
        "operation" => 1,
        _ => 2,
    };
    refs.sort_by_key(|r| (rank(&r.kind), r.ordinal));
    Ok(refs)
}

/// A session's events with hashes, by seq.
pub fn select_events_full(conn: &Connection, id: &str) -> rusqlite::Result<Vec<StoredEvent>> {
    let mut st = conn.prepare_cached(SELECT_EVENTS_FULL)?;
    let rows = st.query_map(params![id], |r| {
        Ok(StoredEvent {
            seq: r.get(0)?,
            event_type: text(r, 1)?,
            at_ms: r.get(2)?,
            actor_type: text(r, 3)?,
            detail: opt_text(r, 4)?,
            data: opt_json(r, 5)?,
            run_id: opt_text(r, 6)?,
            hash: r.get::<_, Option<Vec<u8>>>(7)?.unwrap_or_default(),
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement here prepares against a freshly migrated database.
    #[test]
    fn statements_prepare() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::open(&crate::store::StoreConfig {
            path: dir.path().join("t.db"),
            busy_timeout_ms: 1000,
            sync: crate::store::SyncMode::Normal,
            wal_autocheckpoint_pages: 1000,
        })
        .unwrap();
        for sql in [
            SELECT_IDS,
            SELECT_INSERT_SEQ,
            SELECT_MAX_INSERT_SEQ,
            SELECT_REFS_FULL,
            SELECT_EVENTS_FULL,
            INSERT_SESSION_IMPORT,
        ] {
            conn.prepare(sql).unwrap();
        }
    }
}
