//! SQL for `runs` (schema V3): insert, the per-verb conditional UPDATEs,
//! reads, and the idempotency look-up that leads back to a run.
//!
//! No statement here binds `status`: the statuses are literals, so the
//! partial unique index `runs_one_running_per_session` (`WHERE status =
//! 'running'`) never makes SQLite re-prepare a cached statement (see V1 on
//! partial indexes). Lists are sorted in Rust, not with `ORDER BY` on a
//! bound statement, for the same reason.

use crate::model::{Run, RunError, RunId, RunStatus, RunUsage};
use crate::store::codec::empty_object;
use crate::store::sqlite::codec::{opt_json, opt_text, text};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Columns of a `runs` row, in the order [`map_run`] expects.
macro_rules! run_columns {
    () => {
        "run_id, session_id, status, input, output, error_code, error_message, metadata, \
         input_tokens, output_tokens, api_calls, turn_count, created_at_ms, updated_at_ms, \
         started_at_ms, ended_at_ms, insert_seq"
    };
}

/// One run by id.
pub const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = ?1");

/// Every run of a session (sorted by insert_seq in Rust).
pub const SELECT_RUNS_OF_SESSION: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE session_id = ?1"
);

/// The running run of a session (served by the partial unique index).
pub const SELECT_RUNNING_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE session_id = ?1 AND status = 'running'"
);

/// A new pending run. ?1 run_id, ?2 session_id, ?3 input, ?4 metadata,
/// ?5 created/updated ms.
pub const INSERT_RUN: &str = "INSERT INTO runs (run_id, session_id, status, input, metadata, \
     created_at_ms, updated_at_ms) VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?5)";

/// pending → running. ?1 run_id, ?2 at ms.
pub const UPDATE_RUN_START: &str = "UPDATE runs SET status = 'running', started_at_ms = ?2, \
     updated_at_ms = ?2 WHERE run_id = ?1 AND status = 'pending'";

/// running: add usage. ?1 run_id, ?2 at ms, ?3 input, ?4 output, ?5 api
/// calls (deltas; the caller has checked the totals stay ≤ 2^53 − 1).
pub const UPDATE_RUN_USAGE: &str = "UPDATE runs SET input_tokens = input_tokens + ?3, \
     output_tokens = output_tokens + ?4, api_calls = api_calls + ?5, updated_at_ms = ?2 \
     WHERE run_id = ?1 AND status = 'running'";

/// running: one more turn. ?1 run_id, ?2 at ms.
pub const UPDATE_RUN_TURN: &str = "UPDATE runs SET turn_count = turn_count + 1, \
     updated_at_ms = ?2 WHERE run_id = ?1 AND status = 'running'";

/// running → completed. ?1 run_id, ?2 at ms, ?3 output.
pub const UPDATE_RUN_COMPLETE: &str = "UPDATE runs SET status = 'completed', output = ?3, \
     ended_at_ms = ?2, updated_at_ms = ?2 WHERE run_id = ?1 AND status = 'running'";

/// pending | running → failed. ?1 run_id, ?2 at ms, ?3 code, ?4 message.
pub const UPDATE_RUN_FAIL: &str = "UPDATE runs SET status = 'failed', error_code = ?3, \
     error_message = ?4, ended_at_ms = ?2, updated_at_ms = ?2 \
     WHERE run_id = ?1 AND (status = 'pending' OR status = 'running')";

/// pending | running → cancelled. ?1 run_id, ?2 at ms.
pub const UPDATE_RUN_CANCEL: &str = "UPDATE runs SET status = 'cancelled', ended_at_ms = ?2, \
     updated_at_ms = ?2 WHERE run_id = ?1 AND (status = 'pending' OR status = 'running')";

/// pending | running → timeout. ?1 run_id, ?2 at ms.
pub const UPDATE_RUN_TIMEOUT: &str = "UPDATE runs SET status = 'timeout', ended_at_ms = ?2, \
     updated_at_ms = ?2 WHERE run_id = ?1 AND (status = 'pending' OR status = 'running')";

/// The pending and running runs of a session (sorted by insert_seq in
/// Rust): the runs a session's end cancels.
pub const SELECT_OPEN_RUNS_OF_SESSION: &str = "SELECT run_id, insert_seq FROM runs \
     WHERE session_id = ?1 AND (status = 'pending' OR status = 'running')";

/// pending | running → cancelled because the run's session ended. ?1 run_id,
/// ?2 at ms, ?3 error code, ?4 error message. `ended_at_ms` never goes below
/// the run's own latest change.
pub const UPDATE_RUN_SESSION_ENDED: &str = "UPDATE runs SET status = 'cancelled', \
     error_code = ?3, error_message = ?4, ended_at_ms = max(updated_at_ms, ?2), \
     updated_at_ms = max(updated_at_ms, ?2) \
     WHERE run_id = ?1 AND (status = 'pending' OR status = 'running')";

/// Every SQL const of this module (the prepare test walks them).
pub const ALL: &[&str] = &[
    SELECT_RUN,
    SELECT_RUNS_OF_SESSION,
    SELECT_RUNNING_RUN,
    INSERT_RUN,
    UPDATE_RUN_START,
    UPDATE_RUN_USAGE,
    UPDATE_RUN_TURN,
    UPDATE_RUN_COMPLETE,
    UPDATE_RUN_FAIL,
    UPDATE_RUN_CANCEL,
    UPDATE_RUN_TIMEOUT,
    SELECT_OPEN_RUNS_OF_SESSION,
    UPDATE_RUN_SESSION_ENDED,
];

/// Maps a row of `run_columns!`; returns the run and its insert_seq.
pub fn map_run(row: &Row<'_>) -> rusqlite::Result<(Run, i64)> {
    let id = text(row, 0)?;
    let error = match (opt_text(row, 5)?, opt_text(row, 6)?) {
        (None, None) => None,
        (code, message) => Some(RunError {
            code: code.unwrap_or_default(),
            message: message.unwrap_or_default(),
        }),
    };
    let run = Run {
        // The schema's CHECK admits only well-formed ids.
        run_id: id
            .parse::<RunId>()
            .unwrap_or_else(|_| RunId::from_bytes([0; 8])),
        session_id: text(row, 1)?,
        status: text(row, 2)?.parse().unwrap_or(RunStatus::Failed),
        input: opt_json(row, 3)?,
        output: opt_json(row, 4)?,
        error,
        metadata: opt_json(row, 7)?.unwrap_or_else(empty_object),
        usage: RunUsage {
            input_tokens: row.get(8)?,
            output_tokens: row.get(9)?,
            api_calls: row.get(10)?,
        },
        turn_count: row.get(11)?,
        created_at_ms: row.get(12)?,
        updated_at_ms: row.get(13)?,
        started_at_ms: row.get(14)?,
        ended_at_ms: row.get(15)?,
    };
    Ok((run, row.get(16)?))
}

/// One run, or `None`.
pub fn find_run(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Run>> {
    conn.prepare_cached(SELECT_RUN)?
        .query_row(params![run_id], map_run)
        .optional()
        .map(|o| o.map(|(r, _)| r))
}

/// The running run of a session, or `None`.
pub fn find_running_run(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<Run>> {
    conn.prepare_cached(SELECT_RUNNING_RUN)?
        .query_row(params![session_id], map_run)
        .optional()
        .map(|o| o.map(|(r, _)| r))
}

/// Every run of a session, in creation order.
pub fn select_runs(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<Run>> {
    let mut st = conn.prepare_cached(SELECT_RUNS_OF_SESSION)?;
    let mut rows: Vec<(Run, i64)> = st
        .query_map(params![session_id], map_run)?
        .collect::<rusqlite::Result<_>>()?;
    rows.sort_by_key(|(_, seq)| *seq);
    Ok(rows.into_iter().map(|(r, _)| r).collect())
}

/// The ids of a session's pending and running runs, in creation order.
pub fn select_open_run_ids(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare_cached(SELECT_OPEN_RUNS_OF_SESSION)?;
    let mut rows: Vec<(i64, String)> = st
        .query_map(params![session_id], |r| Ok((r.get(1)?, text(r, 0)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.sort_unstable();
    Ok(rows.into_iter().map(|(_, id)| id).collect())
}

/// Inserts a pending run.
pub fn insert_run(
    conn: &Connection,
    run_id: &str,
    session_id: &str,
    input: Option<&str>,
    metadata: &str,
    at_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_RUN)?
        .execute(params![run_id, session_id, input, metadata, at_ms])
        .map(|_| ())
}
