//! SQL for export and import (docs/import-export.md): reading whole sessions with the
//! columns a rebuild needs, and inserting an imported session with all its
//! rows (session, data, tags, references, chained events, and the V3/V4
//! rows: runs, budget, snapshots, gates) as given. Leases are never
//! exported or imported (see `docs/import-export.md`).
//!
//! Validation and redaction happen before these functions are called
//! (`crate::transfer`); this module only binds values as `?N` parameters.

use crate::store::sqlite::codec::{opt_json, opt_text, text};

/// A JSON column as compact text (a hand-edited row with line breaks must
/// not break a JSON Lines export).
fn json_text(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    Ok(opt_json(r, idx)?.map(|v| v.get().to_owned()))
}
use crate::chain;
pub use crate::store::rows::{
    BudgetFull, EventRow, GateFull, RefRow, RunRow, SessionRows, SnapshotFull, StoredEvent,
    StoredRef, WorkflowRows,
};
use crate::store::sqlite::sql::events::INSERT_EVENT;
use crate::store::sqlite::sql::sessions::INSERT_REF;
use rusqlite::{params, Connection, OptionalExtension};

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

/// Every run of a session with every column (sorted by insert_seq in Rust).
pub const SELECT_RUNS_FULL: &str = "SELECT run_id, status, input, output, error_code, \
     error_message, metadata, input_tokens, output_tokens, api_calls, turn_count, created_at_ms, \
     updated_at_ms, started_at_ms, ended_at_ms, insert_seq FROM runs WHERE session_id = ?1";

/// Whether a run id is taken (by any session).
pub const SELECT_RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE run_id = ?1";

/// An imported run, inserted as the trigger `runs_insert_live_session`
/// demands: status `pending`, into a live session; every other column as
/// recorded. [`UPDATE_RUN_IMPORT_STATUS`] then sets its recorded status.
/// ?1 run_id, ?2 session_id, ?3 input, ?4 output, ?5 error_code,
/// ?6 error_message, ?7 metadata, ?8–?11 input_tokens, output_tokens,
/// api_calls, turn_count, ?12 created, ?13 updated, ?14 started, ?15 ended.
pub const INSERT_RUN_IMPORT: &str = "INSERT INTO runs (run_id, session_id, status, input, output, \
     error_code, error_message, metadata, input_tokens, output_tokens, api_calls, turn_count, \
     created_at_ms, updated_at_ms, started_at_ms, ended_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4, \
     ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";

/// pending → the recorded status of an imported run (the one UPDATE the
/// triggers allow: from pending, identity and counters kept). Import-only,
/// so binding `status` here (which can make SQLite re-prepare it, see
/// `store::runs`) costs nothing on a hot path. ?1 run_id, ?2 status.
pub const UPDATE_RUN_IMPORT_STATUS: &str =
    "UPDATE runs SET status = ?2 WHERE run_id = ?1 AND status = 'pending'";

/// A session's budget with every column.
pub const SELECT_BUDGET_FULL: &str = "SELECT max_tokens, max_api_calls, max_duration_ms, \
     on_exceed, base_tokens, base_api_calls, base_duration_ms, exceeded_at_ms, updated_at_ms \
     FROM session_budgets WHERE session_id = ?1";

/// An imported budget, every column as recorded. ?1 session, ?2–?4 limits,
/// ?5 on_exceed, ?6–?8 bases, ?9 exceeded_at_ms, ?10 updated_at_ms.
pub const INSERT_BUDGET_IMPORT: &str = "INSERT INTO session_budgets (session_id, max_tokens, \
     max_api_calls, max_duration_ms, on_exceed, base_tokens, base_api_calls, base_duration_ms, \
     exceeded_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// A session's snapshots with their state (sorted by seq in Rust).
pub const SELECT_SNAPSHOTS_FULL: &str =
    "SELECT seq, step, stage, state, at_ms, payload FROM session_snapshots WHERE session_id = ?1";

/// An imported snapshot (after its checkpoint event: trigger
/// `session_snapshots_append_only`). ?1 session, ?2 seq, ?3 step, ?4 stage,
/// ?5 state, ?6 size in bytes, ?7 at_ms.
pub const INSERT_SNAPSHOT_IMPORT: &str = "INSERT INTO session_snapshots (session_id, seq, step, \
     stage, state, size_bytes, at_ms, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// An imported gate, inserted with its recorded status and decision (no
/// UPDATE: `session_gates_decide_once` is not involved). ?1 session,
/// ?2 name, ?3 round, ?4 kind, ?5 status, ?6 opened_seq, ?7 opened_at_ms,
/// ?8 decided_seq, ?9 decided_at_ms, ?10 reason, ?11 outcome.
pub const INSERT_GATE_IMPORT: &str = "INSERT INTO session_gates (session_id, name, round, kind, \
     status, opened_seq, opened_at_ms, decided_seq, decided_at_ms, reason, outcome) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// A terminal imported session that has runs is inserted live (`active`,
/// rev − 1) so that its runs can be inserted (`runs_insert_live_session`),
/// then given its recorded status and rev by this UPDATE (which
/// `sessions_rev_step` and `sessions_terminal_frozen` allow: rev + 1 from a
/// live status). ?1 id, ?2 status, ?3 rev.
pub const UPDATE_SESSION_IMPORT_FINISH: &str = "UPDATE sessions SET status = ?2, rev = ?3 \
     WHERE session_id = ?1 AND rev = ?3 - 1 AND status = 'active'";

/// Opens the per-session savepoint of an import batch.
pub const SAVEPOINT: &str = "SAVEPOINT logbook_import_session";
/// Keeps the session's rows (the batch's transaction commits them later).
pub const RELEASE: &str = "RELEASE logbook_import_session";
/// Undoes every row of the session, keeping the batch's other sessions.
pub const ROLLBACK_TO: &str = "ROLLBACK TO logbook_import_session";

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

/// Whether a run id is already taken.
pub fn run_exists(conn: &Connection, run_id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(SELECT_RUN_EXISTS)?
        .query_row(params![run_id], |_| Ok(()))
        .optional()
        .map(|o| o.is_some())
}

/// Inserts every row of one session; the events are chained afresh with
/// [`chain::event_hash`]. Call inside a transaction (and a savepoint).
///
/// Order, as the triggers allow it: the session (live, rev − 1, when it is
/// terminal and has runs: see [`UPDATE_SESSION_IMPORT_FINISH`]), its data,
/// tags, references and events; its runs (inserted pending, then given
/// their status); budget; snapshots (after their checkpoint events);
/// gates; and last the session's recorded status and rev. The caller has
/// checked that such a session's rev is at least 2.
pub fn insert_session_rows(conn: &Connection, s: &SessionRows) -> rusqlite::Result<()> {
    let staged = s.status.is_terminal() && !s.workflow.runs.is_empty();
    crate::store::sqlite::sql::sessions::insert_session(conn, &s.first_row())?;
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
    insert_workflow(conn, &s.session_id, &s.workflow)?;
    if staged {
        let n = conn
            .prepare_cached(UPDATE_SESSION_IMPORT_FINISH)?
            .execute(params![s.session_id, s.status.as_str(), s.rev])?;
        if n != 1 {
            return Err(rusqlite::Error::StatementChangedRows(n));
        }
    }
    Ok(())
}

/// Inserts a session's runs, budget, snapshots and gates (its session row,
/// live for the runs, and its events exist already).
fn insert_workflow(conn: &Connection, id: &str, w: &WorkflowRows) -> rusqlite::Result<()> {
    for r in &w.runs {
        conn.prepare_cached(INSERT_RUN_IMPORT)?.execute(params![
            r.run_id,
            id,
            r.input,
            r.output,
            r.error_code,
            r.error_message,
            r.metadata,
            r.input_tokens,
            r.output_tokens,
            r.api_calls,
            r.turn_count,
            r.created_at_ms,
            r.updated_at_ms,
            r.started_at_ms,
            r.ended_at_ms,
        ])?;
        if r.status != "pending" {
            conn.prepare_cached(UPDATE_RUN_IMPORT_STATUS)?
                .execute(params![r.run_id, r.status])?;
        }
    }
    if let Some(b) = &w.budget {
        conn.prepare_cached(INSERT_BUDGET_IMPORT)?.execute(params![
            id,
            b.max_tokens,
            b.max_api_calls,
            b.max_duration_ms,
            b.on_exceed,
            b.base_tokens,
            b.base_api_calls,
            b.base_duration_ms,
            b.exceeded_at_ms,
            b.updated_at_ms,
        ])?;
    }
    for sn in &w.snapshots {
        let size = i64::try_from(sn.state.len()).unwrap_or(i64::MAX);
        conn.prepare_cached(INSERT_SNAPSHOT_IMPORT)?
            .execute(params![
                id, sn.seq, sn.step, sn.stage, sn.state, size, sn.at_ms, sn.payload
            ])?;
    }
    for g in &w.gates {
        conn.prepare_cached(INSERT_GATE_IMPORT)?.execute(params![
            id,
            g.name,
            g.round,
            g.kind,
            g.status,
            g.opened_seq,
            g.opened_at_ms,
            g.decided_seq,
            g.decided_at_ms,
            g.reason,
            g.outcome,
        ])?;
    }
    Ok(())
}

/// A session's runs, budget, snapshots (with state) and gates, for export.
pub fn select_workflow(conn: &Connection, id: &str) -> rusqlite::Result<WorkflowRows> {
    let mut st = conn.prepare_cached(SELECT_RUNS_FULL)?;
    let rows = st.query_map(params![id], |r| {
        Ok((
            RunRow {
                run_id: text(r, 0)?,
                status: text(r, 1)?,
                input: json_text(r, 2)?,
                output: json_text(r, 3)?,
                error_code: opt_text(r, 4)?,
                error_message: opt_text(r, 5)?,
                metadata: json_text(r, 6)?.unwrap_or_else(|| "{}".to_owned()),
                input_tokens: r.get(7)?,
                output_tokens: r.get(8)?,
                api_calls: r.get(9)?,
                turn_count: r.get(10)?,
                created_at_ms: r.get(11)?,
                updated_at_ms: r.get(12)?,
                started_at_ms: r.get(13)?,
                ended_at_ms: r.get(14)?,
            },
            r.get::<_, i64>(15)?,
        ))
    })?;
    let mut runs = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    runs.sort_by_key(|(_, seq)| *seq);
    let budget = conn
        .prepare_cached(SELECT_BUDGET_FULL)?
        .query_row(params![id], |r| {
            Ok(BudgetFull {
                max_tokens: r.get(0)?,
                max_api_calls: r.get(1)?,
                max_duration_ms: r.get(2)?,
                on_exceed: text(r, 3)?,
                base_tokens: r.get(4)?,
                base_api_calls: r.get(5)?,
                base_duration_ms: r.get(6)?,
                exceeded_at_ms: r.get(7)?,
                updated_at_ms: r.get(8)?,
            })
        })
        .optional()?;
    let mut st = conn.prepare_cached(SELECT_SNAPSHOTS_FULL)?;
    let rows = st.query_map(params![id], |r| {
        Ok(SnapshotFull {
            seq: r.get(0)?,
            step: opt_text(r, 1)?,
            stage: opt_text(r, 2)?,
            state: json_text(r, 3)?.unwrap_or_else(|| "{}".to_owned()),
            at_ms: r.get(4)?,
            payload: r.get(5)?,
        })
    })?;
    let mut snapshots = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    snapshots.sort_by_key(|s| s.seq);
    let gates = crate::store::sqlite::sql::workflow::select_gates(conn, id)?;
    Ok(WorkflowRows {
        runs: runs.into_iter().map(|(r, _)| r).collect(),
        budget,
        snapshots,
        gates,
    })
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
            page_cache_kib: crate::store::sqlite::open::SQLITE_DEFAULT_CACHE_KIB,
            create: true,
        })
        .unwrap();
        for sql in [
            SELECT_IDS,
            SELECT_INSERT_SEQ,
            SELECT_MAX_INSERT_SEQ,
            SELECT_REFS_FULL,
            SELECT_EVENTS_FULL,
            SELECT_RUNS_FULL,
            SELECT_RUN_EXISTS,
            INSERT_RUN_IMPORT,
            UPDATE_RUN_IMPORT_STATUS,
            SELECT_BUDGET_FULL,
            INSERT_BUDGET_IMPORT,
            SELECT_SNAPSHOTS_FULL,
            INSERT_SNAPSHOT_IMPORT,
            INSERT_GATE_IMPORT,
            UPDATE_SESSION_IMPORT_FINISH,
        ] {
            conn.prepare(sql).unwrap();
        }
    }
}
