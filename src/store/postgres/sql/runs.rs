//! SQL for `runs` (PostgreSQL; SQLite's is `sqlite/sql/runs.rs`): insert, the
//! per-verb guarded UPDATEs (statuses as literals), reads in creation
//! order.

use super::super::tx::PgTx;
use super::col;
use crate::error::Result;
use crate::model::{Run, RunError, RunId, RunStatus, RunUsage};
use crate::store::codec::{empty_object, json_of_text};
use crate::store::RunChange;
use postgres::types::Type;
use postgres::Row;

macro_rules! run_select {
    ($where:literal) => {
        concat!(
            "SELECT run_id, session_id, status, input, output, error_code, error_message, \
             metadata, input_tokens, output_tokens, api_calls, turn_count, created_at_ms, \
             updated_at_ms, started_at_ms, ended_at_ms FROM runs ",
            $where
        )
    };
}

/// One run by id.
pub const SELECT_RUN: &str = run_select!("WHERE run_id = $1");

/// Every run of a session, in creation order.
pub const SELECT_RUNS_OF_SESSION: &str = run_select!("WHERE session_id = $1 ORDER BY insert_seq");

/// The session's running run.
pub const SELECT_RUNNING_RUN: &str = run_select!("WHERE session_id = $1 AND status = 'running'");

/// The pending and running runs' ids, in creation order.
pub const SELECT_OPEN_RUN_IDS: &str = "SELECT run_id FROM runs WHERE session_id = $1 \
     AND (status = 'pending' OR status = 'running') ORDER BY insert_seq";

/// A new pending run, unless its id is taken (then no row: checked first,
/// so no key error aborts the transaction and no trigger runs, as SQLite
/// answers `false` for a taken id whatever else is wrong; `ON CONFLICT`
/// covers a concurrent insert). $1 run, $2 session, $3 input, $4 metadata,
/// $5 ms.
pub const INSERT_RUN: &str = "INSERT INTO runs (run_id, session_id, status, input, metadata, \
     created_at_ms, updated_at_ms) SELECT $1, $2, 'pending', $3, $4, $5, $5 \
     WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = $1) ON CONFLICT (run_id) DO NOTHING";

/// pending → running. $1 run, $2 at.
pub const UPDATE_RUN_START: &str = "UPDATE runs SET status = 'running', started_at_ms = $2, \
     updated_at_ms = $2 WHERE run_id = $1 AND status = 'pending'";

/// running: add usage. $1 run, $2 at, $3 input, $4 output, $5 api calls.
pub const UPDATE_RUN_USAGE: &str = "UPDATE runs SET input_tokens = input_tokens + $3, \
     output_tokens = output_tokens + $4, api_calls = api_calls + $5, updated_at_ms = $2 \
     WHERE run_id = $1 AND status = 'running'";

/// running: one more turn. $1 run, $2 at.
pub const UPDATE_RUN_TURN: &str = "UPDATE runs SET turn_count = turn_count + 1, \
     updated_at_ms = $2 WHERE run_id = $1 AND status = 'running'";

/// running → completed. $1 run, $2 at, $3 output.
pub const UPDATE_RUN_COMPLETE: &str = "UPDATE runs SET status = 'completed', output = $3, \
     ended_at_ms = $2, updated_at_ms = $2 WHERE run_id = $1 AND status = 'running'";

/// pending | running → failed. $1 run, $2 at, $3 code, $4 message.
pub const UPDATE_RUN_FAIL: &str = "UPDATE runs SET status = 'failed', error_code = $3, \
     error_message = $4, ended_at_ms = $2, updated_at_ms = $2 \
     WHERE run_id = $1 AND (status = 'pending' OR status = 'running')";

/// pending | running → cancelled. $1 run, $2 at.
pub const UPDATE_RUN_CANCEL: &str = "UPDATE runs SET status = 'cancelled', ended_at_ms = $2, \
     updated_at_ms = $2 WHERE run_id = $1 AND (status = 'pending' OR status = 'running')";

/// pending | running → timeout. $1 run, $2 at.
pub const UPDATE_RUN_TIMEOUT: &str = "UPDATE runs SET status = 'timeout', ended_at_ms = $2, \
     updated_at_ms = $2 WHERE run_id = $1 AND (status = 'pending' OR status = 'running')";

/// pending | running → cancelled by the session's end. $1 run, $2 at,
/// $3 code, $4 message; `ended_at_ms` never below the run's latest change.
pub const UPDATE_RUN_SESSION_ENDED: &str = "UPDATE runs SET status = 'cancelled', \
     error_code = $3, error_message = $4, ended_at_ms = GREATEST(updated_at_ms, $2), \
     updated_at_ms = GREATEST(updated_at_ms, $2) \
     WHERE run_id = $1 AND (status = 'pending' OR status = 'running')";

/// Maps a row of `run_select!`.
pub fn map_run(row: &Row) -> Result<Run> {
    let id: String = col(row, 0)?;
    let error = match (
        col::<Option<String>>(row, 5)?,
        col::<Option<String>>(row, 6)?,
    ) {
        (None, None) => None,
        (code, message) => Some(RunError {
            code: code.unwrap_or_default(),
            message: message.unwrap_or_default(),
        }),
    };
    Ok(Run {
        // The schema's CHECK admits only well-formed ids.
        run_id: id
            .parse::<RunId>()
            .unwrap_or_else(|_| RunId::from_bytes([0; 8])),
        session_id: col(row, 1)?,
        status: col::<String>(row, 2)?.parse().unwrap_or(RunStatus::Failed),
        input: col::<Option<String>>(row, 3)?.map(json_of_text),
        output: col::<Option<String>>(row, 4)?.map(json_of_text),
        error,
        metadata: col::<Option<String>>(row, 7)?.map_or_else(empty_object, json_of_text),
        usage: RunUsage {
            input_tokens: col(row, 8)?,
            output_tokens: col(row, 9)?,
            api_calls: col(row, 10)?,
        },
        turn_count: col(row, 11)?,
        created_at_ms: col(row, 12)?,
        updated_at_ms: col(row, 13)?,
        started_at_ms: col(row, 14)?,
        ended_at_ms: col(row, 15)?,
    })
}

/// The runs a statement keyed by one text value returns.
pub fn select(tx: &mut PgTx<'_>, sql: &str, key: &str) -> Result<Vec<Run>> {
    tx.rows(sql, &[(&key, Type::TEXT)])?
        .iter()
        .map(map_run)
        .collect()
}

/// The ids of the session's pending and running runs.
pub fn select_open_run_ids(tx: &mut PgTx<'_>, session_id: &str) -> Result<Vec<String>> {
    tx.rows(SELECT_OPEN_RUN_IDS, &[(&session_id, Type::TEXT)])?
        .iter()
        .map(|r| col(r, 0))
        .collect()
}

/// Inserts a pending run: `false` when its id is taken.
pub fn insert_run(
    tx: &mut PgTx<'_>,
    run_id: &str,
    session_id: &str,
    input: Option<&str>,
    metadata: &str,
    at_ms: i64,
) -> Result<bool> {
    let n = tx.exec(
        INSERT_RUN,
        &[
            (&run_id, Type::TEXT),
            (&session_id, Type::TEXT),
            (&input, Type::TEXT),
            (&metadata, Type::TEXT),
            (&at_ms, Type::INT8),
        ],
    )?;
    Ok(n == 1)
}

/// A guarded run UPDATE: how many rows it changed.
pub fn update_run(
    tx: &mut PgTx<'_>,
    run_id: &str,
    change: RunChange<'_>,
    at: i64,
) -> Result<usize> {
    let (id, at) = (&run_id, &at);
    let n = match change {
        RunChange::Start => tx.exec(UPDATE_RUN_START, &[(id, Type::TEXT), (at, Type::INT8)]),
        RunChange::Usage {
            input_tokens,
            output_tokens,
            api_calls,
        } => tx.exec(
            UPDATE_RUN_USAGE,
            &[
                (id, Type::TEXT),
                (at, Type::INT8),
                (&input_tokens, Type::INT8),
                (&output_tokens, Type::INT8),
                (&api_calls, Type::INT8),
            ],
        ),
        RunChange::Turn => tx.exec(UPDATE_RUN_TURN, &[(id, Type::TEXT), (at, Type::INT8)]),
        RunChange::Complete(output) => tx.exec(
            UPDATE_RUN_COMPLETE,
            &[(id, Type::TEXT), (at, Type::INT8), (&output, Type::TEXT)],
        ),
        RunChange::Fail { code, message } => tx.exec(
            UPDATE_RUN_FAIL,
            &[
                (id, Type::TEXT),
                (at, Type::INT8),
                (&code, Type::TEXT),
                (&message, Type::TEXT),
            ],
        ),
        RunChange::Cancel => tx.exec(UPDATE_RUN_CANCEL, &[(id, Type::TEXT), (at, Type::INT8)]),
        RunChange::Timeout => tx.exec(UPDATE_RUN_TIMEOUT, &[(id, Type::TEXT), (at, Type::INT8)]),
        RunChange::SessionEnded { code, message } => tx.exec(
            UPDATE_RUN_SESSION_ENDED,
            &[
                (id, Type::TEXT),
                (at, Type::INT8),
                (&code, Type::TEXT),
                (&message, Type::TEXT),
            ],
        ),
    }?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
