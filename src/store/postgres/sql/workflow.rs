//! SQL for snapshots, gates, leases and budgets, and the context update of
//! `restore` (PostgreSQL; SQLite's are `sqlite/sql/workflow.rs` and
//! `sqlite/sql/budgets.rs`). Lists are ordered in SQL (SQLite sorts in Rust
//! only to keep its statements prepared).

use super::super::tx::PgTx;
use super::col;
use crate::error::Result;
use crate::model::Usage;
use crate::store::rows::{
    BudgetRow, GateFull, GateRow, LeaseRow, NewGate, SnapshotRecord, SnapshotRow,
};
use crate::store::BudgetLimits;
use postgres::types::Type;
use postgres::Row;

/// Replaces a session's context. $1 id, $2 context.
pub const UPDATE_CONTEXT: &str = "UPDATE session_data SET context = $2 \
     WHERE insert_seq = (SELECT insert_seq FROM sessions WHERE session_id = $1)";

/// Stores a snapshot of the checkpoint event at $2 with the session's
/// stage and time. $1 id, $3 step, $4 state, $5 size in bytes, $6 payload
/// or NULL.
pub const INSERT_SNAPSHOT: &str = "INSERT INTO session_snapshots \
     (session_id, seq, step, stage, state, size_bytes, at_ms, payload) \
     SELECT $1, $2, $3, s.stage, $4, $5, s.updated_at_ms, $6 FROM sessions s WHERE s.session_id = $1";

/// A session's snapshots without state, by seq.
pub const SELECT_SNAPSHOTS: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     octet_length(payload)::int8 FROM session_snapshots WHERE session_id = $1 ORDER BY seq";

/// One snapshot with its state. $1 id, $2 seq.
pub const SELECT_SNAPSHOT: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     octet_length(payload)::int8, state, payload FROM session_snapshots WHERE session_id = $1 AND seq = $2";

/// The newest snapshot with its state.
pub const SELECT_LATEST_SNAPSHOT: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     octet_length(payload)::int8, state, payload FROM session_snapshots WHERE session_id = $1 ORDER BY seq DESC LIMIT 1";

macro_rules! gate_columns {
    () => {
        "SELECT gate_id, name, round, kind, status, opened_seq, opened_at_ms, decided_seq, \
         decided_at_ms, reason, outcome FROM session_gates "
    };
}

/// Every gate of a session, in opening order.
pub const SELECT_GATES: &str = concat!(gate_columns!(), "WHERE session_id = $1 ORDER BY gate_id");

/// The latest round of a gate name. $1 id, $2 name.
pub const SELECT_LATEST_GATE: &str = concat!(
    gate_columns!(),
    "WHERE session_id = $1 AND name = $2 ORDER BY round DESC LIMIT 1"
);

/// The newest pending gate (as SQLite: the largest gate_id).
pub const SELECT_PENDING_GATE: &str = concat!(
    gate_columns!(),
    "WHERE session_id = $1 AND status = 'pending' ORDER BY gate_id DESC LIMIT 1"
);

/// Opens a gate. $1 id, $2 name, $3 round, $4 kind, $5 status, $6 opened
/// seq, $7 opened at, $8 decided seq, $9 decided at.
pub const INSERT_GATE: &str = "INSERT INTO session_gates (session_id, name, round, kind, status, \
     opened_seq, opened_at_ms, decided_seq, decided_at_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Decides a gate. $1 gate_id, $2 status, $3 seq, $4 at, $5 reason,
/// $6 outcome.
pub const UPDATE_GATE_DECIDE: &str = "UPDATE session_gates SET status = $2, decided_seq = $3, \
     decided_at_ms = $4, reason = $5, outcome = $6 WHERE gate_id = $1";

/// The session's lease row.
pub const SELECT_LEASE: &str = "SELECT token_sha256, pid, hostname, acquired_at_ms, \
     expires_at_ms, acquired_seq FROM session_leases WHERE session_id = $1";

/// Takes, renews or takes over the lease (`session_leases` is current
/// state: no trigger refuses this UPDATE). $1 id, $2 token SHA-256, $3 pid,
/// $4 host, $5 acquired, $6 expires, $7 seq.
pub const UPSERT_LEASE: &str = "INSERT INTO session_leases (session_id, token_sha256, pid, \
     hostname, acquired_at_ms, expires_at_ms, acquired_seq) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (session_id) DO UPDATE SET token_sha256 = excluded.token_sha256, \
     pid = excluded.pid, hostname = excluded.hostname, acquired_at_ms = excluded.acquired_at_ms, \
     expires_at_ms = excluded.expires_at_ms, acquired_seq = excluded.acquired_seq";

/// Releases the lease.
pub const DELETE_LEASE: &str = "DELETE FROM session_leases WHERE session_id = $1";

/// A session's budget.
pub const SELECT_BUDGET: &str = "SELECT max_tokens, max_api_calls, max_duration_ms, on_exceed, \
     base_tokens, base_api_calls, base_duration_ms, exceeded_at_ms FROM session_budgets \
     WHERE session_id = $1";

/// A new budget. $1 session, $2–$4 limits, $5 policy, $6 exceeded, $7 now.
pub const INSERT_BUDGET: &str = "INSERT INTO session_budgets (session_id, max_tokens, \
     max_api_calls, max_duration_ms, on_exceed, exceeded_at_ms, updated_at_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// New limits and policy; parameters as [`INSERT_BUDGET`].
pub const UPDATE_BUDGET_LIMITS: &str = "UPDATE session_budgets SET max_tokens = $2, \
     max_api_calls = $3, max_duration_ms = $4, on_exceed = $5, exceeded_at_ms = $6, \
     updated_at_ms = $7 WHERE session_id = $1";

/// Marks the crossing write. $1 session, $2 at.
pub const UPDATE_BUDGET_EXCEEDED: &str = "UPDATE session_budgets SET exceeded_at_ms = $2, \
     updated_at_ms = $2 WHERE session_id = $1";

/// A reset. $1 session, $2 tokens, $3 api calls, $4 duration, $5 at.
pub const UPDATE_BUDGET_RESET: &str = "UPDATE session_budgets SET base_tokens = $2, \
     base_api_calls = $3, base_duration_ms = $4, exceeded_at_ms = NULL, updated_at_ms = $5 \
     WHERE session_id = $1";

fn map_snapshot(r: &Row, with_state: bool) -> Result<SnapshotRow> {
    Ok(SnapshotRow {
        seq: col(r, 0)?,
        step: col(r, 1)?,
        stage: col(r, 2)?,
        size_bytes: col(r, 3)?,
        at_ms: col(r, 4)?,
        payload_bytes: col(r, 5)?,
        state: if with_state {
            col(r, 6)?
        } else {
            String::new()
        },
        payload: if with_state { col(r, 7)? } else { None },
    })
}

/// Stores the snapshot of the checkpoint event `seq`.
pub fn insert_snapshot(
    tx: &mut PgTx<'_>,
    id: &str,
    seq: i64,
    step: Option<&str>,
    state: &str,
    payload: Option<&[u8]>,
) -> Result<()> {
    let size = i64::try_from(state.len()).unwrap_or(i64::MAX);
    tx.exec(
        INSERT_SNAPSHOT,
        &[
            (&id, Type::TEXT),
            (&seq, Type::INT8),
            (&step, Type::TEXT),
            (&state, Type::TEXT),
            (&size, Type::INT8),
            (&payload, Type::BYTEA),
        ],
    )
    .map(|_| ())
}

/// A session's snapshots by seq, without state.
pub fn select_snapshots(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<SnapshotRow>> {
    tx.rows(SELECT_SNAPSHOTS, &[(&id, Type::TEXT)])?
        .iter()
        .map(|r| map_snapshot(r, false))
        .collect()
}

/// The snapshot at `seq`, or the newest, with its state.
pub fn find_snapshot(tx: &mut PgTx<'_>, id: &str, seq: Option<i64>) -> Result<Option<SnapshotRow>> {
    let row = match seq {
        Some(seq) => tx.row(SELECT_SNAPSHOT, &[(&id, Type::TEXT), (&seq, Type::INT8)])?,
        None => tx.row(SELECT_LATEST_SNAPSHOT, &[(&id, Type::TEXT)])?,
    };
    row.map(|r| map_snapshot(&r, true)).transpose()
}

/// The four fields of a checkpoint event's snapshot record, as text
/// (`#>>`), from its `data` column named by the macro's argument.
macro_rules! snapshot_record_columns {
    ($data:literal) => {
        concat!(
            "(",
            $data,
            "::json #>> '{snapshot,sha256}'), (",
            $data,
            "::json #>> '{snapshot,size_bytes}'), (",
            $data,
            "::json #>> '{snapshot,payload_sha256}'), (",
            $data,
            "::json #>> '{snapshot,payload_bytes}')"
        )
    };
}
pub(crate) use snapshot_record_columns;

const SELECT_SNAPSHOT_RECORD: &str = concat!(
    "SELECT ",
    snapshot_record_columns!("data"),
    " FROM events WHERE session_id = $1 AND seq = $2 AND type = 'checkpoint'"
);

/// Reads [`snapshot_record_columns`] from column `first` on; a size that
/// is not an integer is no record.
pub fn map_snapshot_record(r: &Row, first: usize) -> Result<SnapshotRecord> {
    let int = |s: Option<String>| s.and_then(|s| s.parse().ok());
    Ok(SnapshotRecord {
        sha256: col(r, first)?,
        size_bytes: int(col(r, first + 1)?),
        payload_sha256: col(r, first + 2)?,
        payload_bytes: int(col(r, first + 3)?),
    })
}

/// What the checkpoint event at `seq` records of its snapshot.
pub fn snapshot_record(tx: &mut PgTx<'_>, id: &str, seq: i64) -> Result<Option<SnapshotRecord>> {
    tx.row(
        SELECT_SNAPSHOT_RECORD,
        &[(&id, Type::TEXT), (&seq, Type::INT8)],
    )?
    .map(|r| map_snapshot_record(&r, 0))
    .transpose()
}

fn map_gate(r: &Row) -> Result<GateRow> {
    Ok(GateRow {
        gate_id: col(r, 0)?,
        gate: gate_at(r, 1)?,
    })
}

/// A gate's columns from `base` on, in the order of [`SELECT_PENDING_GATE`]'s
/// after the id (name, round, kind, status, opened seq and time, decided
/// seq and time, reason, outcome).
pub fn gate_at(r: &Row, base: usize) -> Result<GateFull> {
    Ok(GateFull {
        name: col(r, base)?,
        round: col(r, base + 1)?,
        kind: col(r, base + 2)?,
        status: col(r, base + 3)?,
        opened_seq: col(r, base + 4)?,
        opened_at_ms: col(r, base + 5)?,
        decided_seq: col(r, base + 6)?,
        decided_at_ms: col(r, base + 7)?,
        reason: col(r, base + 8)?,
        outcome: col(r, base + 9)?,
    })
}

/// Every gate of a session, in opening order.
pub fn select_gates(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<GateFull>> {
    tx.rows(SELECT_GATES, &[(&id, Type::TEXT)])?
        .iter()
        .map(|r| map_gate(r).map(|g| g.gate))
        .collect()
}

/// The latest round of gate `name`.
pub fn find_latest_gate(tx: &mut PgTx<'_>, id: &str, name: &str) -> Result<Option<GateRow>> {
    tx.row(
        SELECT_LATEST_GATE,
        &[(&id, Type::TEXT), (&name, Type::TEXT)],
    )?
    .map(|r| map_gate(&r))
    .transpose()
}

/// The newest pending gate.
pub fn find_pending_gate(tx: &mut PgTx<'_>, id: &str) -> Result<Option<GateFull>> {
    tx.row(SELECT_PENDING_GATE, &[(&id, Type::TEXT)])?
        .map(|r| map_gate(&r).map(|g| g.gate))
        .transpose()
}

/// Opens a gate (already approved when `approved`).
pub fn insert_gate(tx: &mut PgTx<'_>, g: &NewGate<'_>) -> Result<()> {
    let (status, dseq, dat) = if g.approved {
        ("approved", Some(g.seq), Some(g.at_ms))
    } else {
        ("pending", None, None)
    };
    tx.exec(
        INSERT_GATE,
        &[
            (&g.session_id, Type::TEXT),
            (&g.name, Type::TEXT),
            (&g.round, Type::INT8),
            (&g.kind, Type::TEXT),
            (&status, Type::TEXT),
            (&g.seq, Type::INT8),
            (&g.at_ms, Type::INT8),
            (&dseq, Type::INT8),
            (&dat, Type::INT8),
        ],
    )
    .map(|_| ())
}

/// Records a gate's decision.
#[allow(clippy::too_many_arguments)]
pub fn decide_gate(
    tx: &mut PgTx<'_>,
    gate_id: i64,
    status: &str,
    seq: i64,
    at_ms: i64,
    reason: Option<&str>,
    outcome: Option<&str>,
) -> Result<()> {
    tx.exec(
        UPDATE_GATE_DECIDE,
        &[
            (&gate_id, Type::INT8),
            (&status, Type::TEXT),
            (&seq, Type::INT8),
            (&at_ms, Type::INT8),
            (&reason, Type::TEXT),
            (&outcome, Type::TEXT),
        ],
    )
    .map(|_| ())
}

/// The lease columns of `row` from column `base` on (`token_sha256`, pid,
/// hostname, acquired, expires, seq), `None` when the token is NULL (no
/// lease row joined).
pub fn lease_at(row: &Row, base: usize) -> Result<Option<LeaseRow>> {
    let Some(token_sha256) = col::<Option<String>>(row, base)? else {
        return Ok(None);
    };
    Ok(Some(LeaseRow {
        token_sha256,
        pid: col(row, base + 1)?,
        hostname: col(row, base + 2)?,
        acquired_at_ms: col(row, base + 3)?,
        expires_at_ms: col(row, base + 4)?,
        acquired_seq: col(row, base + 5)?,
    }))
}

/// The session's lease row.
pub fn find_lease(tx: &mut PgTx<'_>, id: &str) -> Result<Option<LeaseRow>> {
    match tx.row(SELECT_LEASE, &[(&id, Type::TEXT)])? {
        Some(r) => lease_at(&r, 0),
        None => Ok(None),
    }
}

/// Writes the lease row.
pub fn upsert_lease(tx: &mut PgTx<'_>, id: &str, l: &LeaseRow) -> Result<()> {
    tx.exec(
        UPSERT_LEASE,
        &[
            (&id, Type::TEXT),
            (&l.token_sha256, Type::TEXT),
            (&l.pid, Type::INT8),
            (&l.hostname, Type::TEXT),
            (&l.acquired_at_ms, Type::INT8),
            (&l.expires_at_ms, Type::INT8),
            (&l.acquired_seq, Type::INT8),
        ],
    )
    .map(|_| ())
}

/// The session's budget.
pub fn select_budget(tx: &mut PgTx<'_>, id: &str) -> Result<Option<BudgetRow>> {
    let Some(r) = tx.row(SELECT_BUDGET, &[(&id, Type::TEXT)])? else {
        return Ok(None);
    };
    Ok(Some(BudgetRow {
        max_tokens: col(&r, 0)?,
        max_api_calls: col(&r, 1)?,
        max_duration_ms: col(&r, 2)?,
        on_exceed: col::<String>(&r, 3)?.parse().ok(),
        base_tokens: col(&r, 4)?,
        base_api_calls: col(&r, 5)?,
        base_duration_ms: col(&r, 6)?,
        exceeded_at_ms: col(&r, 7)?,
    }))
}

/// Sets a budget's limits and policy (a new row when `new`).
pub fn upsert_budget(
    tx: &mut PgTx<'_>,
    id: &str,
    b: &BudgetLimits,
    new: bool,
    at_ms: i64,
) -> Result<()> {
    let sql = if new {
        INSERT_BUDGET
    } else {
        UPDATE_BUDGET_LIMITS
    };
    let policy = b.on_exceed.as_str();
    tx.exec(
        sql,
        &[
            (&id, Type::TEXT),
            (&b.max_tokens, Type::INT8),
            (&b.max_api_calls, Type::INT8),
            (&b.max_duration_ms, Type::INT8),
            (&policy, Type::TEXT),
            (&b.exceeded_at_ms, Type::INT8),
            (&at_ms, Type::INT8),
        ],
    )
    .map(|_| ())
}

/// Moves the budget's base to `base` and re-arms it.
pub fn reset_budget(tx: &mut PgTx<'_>, id: &str, base: &Usage, at_ms: i64) -> Result<()> {
    let tokens = base.input_tokens + base.output_tokens;
    tx.exec(
        UPDATE_BUDGET_RESET,
        &[
            (&id, Type::TEXT),
            (&tokens, Type::INT8),
            (&base.api_calls, Type::INT8),
            (&base.duration_ms, Type::INT8),
            (&at_ms, Type::INT8),
        ],
    )
    .map(|_| ())
}
