//! SQL for the workflow tables of schema V4: `session_snapshots`,
//! `session_gates`, `session_leases`, and the hierarchy reads on `sessions`
//! (docs/design.md, "Hierarchies", "Snapshots", "Gates" and "Leases").
//!
//! Same rules as `sessions.rs`: every statement is a `const` with
//! explicit columns and `?N` parameters, single-table where it is read per
//! mutation, no bound LIMIT, no RETURNING, statuses as `=` … `OR` literals.

use crate::store::sqlite::codec::{opt_text, text};
use rusqlite::{params, Connection, OptionalExtension};

pub use crate::store::rows::{
    ChildRow, GateFull, GateRow, LeaseRow, NewGate, SnapshotRecord, SnapshotRow,
};

/// Replaces a session's context (restore). ?1 id, ?2 context JSON text.
pub const UPDATE_CONTEXT: &str = "UPDATE session_data SET context = ?2 \
     WHERE insert_seq = (SELECT insert_seq FROM sessions WHERE session_id = ?1)";

// ---- snapshots ----

/// The session's current stage and time (`updated_at_ms`, the checkpoint
/// event's `at_ms`), which its snapshot records. ?1 id.
pub const SELECT_SNAPSHOT_CONTEXT: &str =
    "SELECT stage, updated_at_ms FROM sessions WHERE session_id = ?1";

/// Stores a snapshot for the checkpoint event at ?2. ?1 id, ?3 step, ?4
/// stage, ?5 state JSON, ?6 size in bytes, ?7 time, ?8 payload or NULL. A `VALUES` insert, not
/// `INSERT … SELECT`: on a table with triggers SQLite buffers the selected
/// rows through a temporary B-tree on every call
/// (`hot_statements_use_no_temp_btree`).
pub const INSERT_SNAPSHOT: &str = "INSERT INTO session_snapshots \
     (session_id, seq, step, stage, state, size_bytes, at_ms, payload) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// A session's snapshots without their state (sorted by seq in Rust).
pub const SELECT_SNAPSHOTS: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     length(payload) FROM session_snapshots WHERE session_id = ?1";

/// One snapshot with its state. ?1 id, ?2 seq.
pub const SELECT_SNAPSHOT: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     length(payload), state, payload FROM session_snapshots WHERE session_id = ?1 AND seq = ?2";

/// The newest snapshot with its state. ?1 id.
pub const SELECT_LATEST_SNAPSHOT: &str = "SELECT seq, step, stage, size_bytes, at_ms, \
     length(payload), state, payload FROM session_snapshots WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1";

fn map_snapshot(r: &rusqlite::Row<'_>, with_state: bool) -> rusqlite::Result<SnapshotRow> {
    Ok(SnapshotRow {
        seq: r.get(0)?,
        step: opt_text(r, 1)?,
        stage: opt_text(r, 2)?,
        size_bytes: r.get(3)?,
        at_ms: r.get(4)?,
        payload_bytes: r.get(5)?,
        state: if with_state {
            text(r, 6)?
        } else {
            String::new()
        },
        payload: if with_state { r.get(7)? } else { None },
    })
}

/// Stores a snapshot for the checkpoint event `seq`.
pub fn insert_snapshot(
    conn: &Connection,
    id: &str,
    seq: i64,
    step: Option<&str>,
    state: &str,
    payload: Option<&[u8]>,
) -> rusqlite::Result<()> {
    let size = i64::try_from(state.len()).unwrap_or(i64::MAX);
    let (stage, at_ms): (Option<String>, i64) = conn
        .prepare_cached(SELECT_SNAPSHOT_CONTEXT)?
        .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    conn.prepare_cached(INSERT_SNAPSHOT)?
        .execute(params![id, seq, step, stage, state, size, at_ms, payload])
        .map(|_| ())
}

/// A session's snapshots by seq, without state.
pub fn select_snapshots(conn: &Connection, id: &str) -> rusqlite::Result<Vec<SnapshotRow>> {
    let mut st = conn.prepare_cached(SELECT_SNAPSHOTS)?;
    let rows = st.query_map(params![id], |r| map_snapshot(r, false))?;
    let mut v = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    v.sort_by_key(|s| s.seq);
    Ok(v)
}

/// One snapshot with its state: at `seq`, or the newest with `None`.
pub fn find_snapshot(
    conn: &Connection,
    id: &str,
    seq: Option<i64>,
) -> rusqlite::Result<Option<SnapshotRow>> {
    match seq {
        Some(seq) => conn
            .prepare_cached(SELECT_SNAPSHOT)?
            .query_row(params![id, seq], |r| map_snapshot(r, true))
            .optional(),
        None => conn
            .prepare_cached(SELECT_LATEST_SNAPSHOT)?
            .query_row(params![id], |r| map_snapshot(r, true))
            .optional(),
    }
}

/// What the checkpoint event at ?2 records of its snapshot: the state's
/// SHA-256 hex and size in bytes, the payload's. ?1 id.
pub const SELECT_SNAPSHOT_RECORD: &str = "SELECT json_extract(data, '$.snapshot.sha256'), \
     json_extract(data, '$.snapshot.size_bytes'), json_extract(data, '$.snapshot.payload_sha256'), \
     json_extract(data, '$.snapshot.payload_bytes') FROM events \
     WHERE session_id = ?1 AND seq = ?2 AND type = 'checkpoint'";

/// Reads the four columns of a snapshot's record from `first` on (a value
/// of another type than recorded is no record).
pub fn map_snapshot_record(r: &rusqlite::Row<'_>, first: usize) -> SnapshotRecord {
    SnapshotRecord {
        sha256: r.get::<_, Option<String>>(first).unwrap_or(None),
        size_bytes: r.get::<_, Option<i64>>(first + 1).unwrap_or(None),
        payload_sha256: r.get::<_, Option<String>>(first + 2).unwrap_or(None),
        payload_bytes: r.get::<_, Option<i64>>(first + 3).unwrap_or(None),
    }
}

/// What the checkpoint event at `seq` records of its snapshot.
pub fn snapshot_record(
    conn: &Connection,
    id: &str,
    seq: i64,
) -> rusqlite::Result<Option<SnapshotRecord>> {
    conn.prepare_cached(SELECT_SNAPSHOT_RECORD)?
        .query_row(params![id, seq], |r| Ok(map_snapshot_record(r, 0)))
        .optional()
}

// ---- gates ----

/// Every gate of a session (sorted by gate_id in Rust).
pub const SELECT_GATES: &str = "SELECT gate_id, name, round, kind, status, opened_seq, \
     opened_at_ms, decided_seq, decided_at_ms, reason, outcome FROM session_gates \
     WHERE session_id = ?1";

/// The latest round of a gate name. ?1 id, ?2 name.
pub const SELECT_LATEST_GATE: &str = "SELECT gate_id, name, round, kind, status, opened_seq, \
     opened_at_ms, decided_seq, decided_at_ms, reason, outcome FROM session_gates \
     WHERE session_id = ?1 AND name = ?2 ORDER BY round DESC LIMIT 1";

/// The session's pending gate, if any (at most one: a blocking gate pauses
/// the session, and gates open only on active sessions; the newest wins if
/// raw SQL planted more). The newest is found with `max(gate_id)` over the
/// `(session_id, name, round)` index: `ORDER BY gate_id DESC LIMIT 1` would
/// sort in a temp B-tree, whose page cache costs every `session show`
/// process ~20 page faults. `+?1` keeps SQLite from planning on the bound
/// value, which would re-prepare the cached statement whenever it changes.
/// ?1 id.
pub const SELECT_PENDING_GATE: &str = "SELECT gate_id, name, round, kind, status, opened_seq, \
     opened_at_ms, decided_seq, decided_at_ms, reason, outcome FROM session_gates \
     WHERE gate_id = (SELECT max(gate_id) FROM session_gates \
                      WHERE session_id = +?1 AND status = 'pending')";

/// Opens a gate. ?1 id, ?2 name, ?3 round, ?4 kind, ?5 status, ?6 opened
/// seq, ?7 opened at ms, ?8 decided seq, ?9 decided at ms.
pub const INSERT_GATE: &str = "INSERT INTO session_gates (session_id, name, round, kind, status, \
     opened_seq, opened_at_ms, decided_seq, decided_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// Decides a pending gate. ?1 gate_id, ?2 status, ?3 seq, ?4 at ms,
/// ?5 reason, ?6 outcome.
pub const UPDATE_GATE_DECIDE: &str = "UPDATE session_gates SET status = ?2, decided_seq = ?3, \
     decided_at_ms = ?4, reason = ?5, outcome = ?6 WHERE gate_id = ?1";

fn map_gate(r: &rusqlite::Row<'_>) -> rusqlite::Result<GateRow> {
    Ok(GateRow {
        gate_id: r.get(0)?,
        gate: GateFull {
            name: text(r, 1)?,
            round: r.get(2)?,
            kind: text(r, 3)?,
            status: text(r, 4)?,
            opened_seq: r.get(5)?,
            opened_at_ms: r.get(6)?,
            decided_seq: r.get(7)?,
            decided_at_ms: r.get(8)?,
            reason: opt_text(r, 9)?,
            outcome: opt_text(r, 10)?,
        },
    })
}

/// Every gate of a session, in opening order.
pub fn select_gates(conn: &Connection, id: &str) -> rusqlite::Result<Vec<GateFull>> {
    let mut st = conn.prepare_cached(SELECT_GATES)?;
    let rows = st.query_map(params![id], map_gate)?;
    let mut v = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    v.sort_by_key(|g| g.gate_id);
    Ok(v.into_iter().map(|g| g.gate).collect())
}

/// The latest round of a gate name.
pub fn find_latest_gate(
    conn: &Connection,
    id: &str,
    name: &str,
) -> rusqlite::Result<Option<GateRow>> {
    conn.prepare_cached(SELECT_LATEST_GATE)?
        .query_row(params![id, name], map_gate)
        .optional()
}

/// The session's pending gate.
pub fn find_pending_gate(conn: &Connection, id: &str) -> rusqlite::Result<Option<GateFull>> {
    Ok(conn
        .prepare_cached(SELECT_PENDING_GATE)?
        .query_row(params![id], map_gate)
        .optional()?
        .map(|g| g.gate))
}

/// Inserts a gate.
pub fn insert_gate(conn: &Connection, g: &NewGate<'_>) -> rusqlite::Result<()> {
    let (status, dseq, dat) = if g.approved {
        ("approved", Some(g.seq), Some(g.at_ms))
    } else {
        ("pending", None, None)
    };
    conn.prepare_cached(INSERT_GATE)?
        .execute(params![
            g.session_id,
            g.name,
            g.round,
            g.kind,
            status,
            g.seq,
            g.at_ms,
            dseq,
            dat
        ])
        .map(|_| ())
}

/// Decides a pending gate.
pub fn decide_gate(
    conn: &Connection,
    gate_id: i64,
    status: &str,
    seq: i64,
    at_ms: i64,
    reason: Option<&str>,
    outcome: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(UPDATE_GATE_DECIDE)?
        .execute(params![gate_id, status, seq, at_ms, reason, outcome])
        .map(|_| ())
}

// ---- leases ----

/// The session's lease row (hot: read by every mutation; a primary-key
/// look-up on a WITHOUT ROWID table). ?1 id.
pub const SELECT_LEASE: &str = "SELECT token_sha256, pid, hostname, acquired_at_ms, \
     expires_at_ms, acquired_seq FROM session_leases WHERE session_id = ?1";

/// Takes, renews or takes over the lease. ?1 id, ?2 token SHA-256 hex,
/// ?3 pid, ?4 hostname, ?5 acquired at ms, ?6 expires at ms, ?7 event seq.
pub const UPSERT_LEASE: &str = "INSERT INTO session_leases (session_id, token_sha256, pid, \
     hostname, acquired_at_ms, expires_at_ms, acquired_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
     ON CONFLICT (session_id) DO UPDATE SET token_sha256 = excluded.token_sha256, \
     pid = excluded.pid, hostname = excluded.hostname, acquired_at_ms = excluded.acquired_at_ms, \
     expires_at_ms = excluded.expires_at_ms, acquired_seq = excluded.acquired_seq";

/// Releases the lease. ?1 id.
pub const DELETE_LEASE: &str = "DELETE FROM session_leases WHERE session_id = ?1";

/// The session's lease row, if any.
pub fn find_lease(conn: &Connection, id: &str) -> rusqlite::Result<Option<LeaseRow>> {
    conn.prepare_cached(SELECT_LEASE)?
        .query_row(params![id], |r| {
            Ok(LeaseRow {
                token_sha256: text(r, 0)?,
                pid: r.get(1)?,
                hostname: text(r, 2)?,
                acquired_at_ms: r.get(3)?,
                expires_at_ms: r.get(4)?,
                acquired_seq: r.get(5)?,
            })
        })
        .optional()
}

/// Writes the lease row.
pub fn upsert_lease(conn: &Connection, id: &str, l: &LeaseRow) -> rusqlite::Result<()> {
    conn.prepare_cached(UPSERT_LEASE)?
        .execute(params![
            id,
            l.token_sha256,
            l.pid,
            l.hostname,
            l.acquired_at_ms,
            l.expires_at_ms,
            l.acquired_seq
        ])
        .map(|_| ())
}

/// Deletes the lease row.
pub fn delete_lease(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(DELETE_LEASE)?
        .execute(params![id])
        .map(|_| ())
}

// ---- hierarchy ----

/// Direct children of a session (sorted by insert_seq in Rust). ?1 id.
pub const SELECT_CHILDREN: &str = "SELECT session_id, status, title, created_at_ms, insert_seq \
     FROM sessions WHERE parent_session_id = ?1";

/// Direct children, in creation order.
pub fn select_children(conn: &Connection, id: &str) -> rusqlite::Result<Vec<ChildRow>> {
    let mut st = conn.prepare_cached(SELECT_CHILDREN)?;
    let rows = st.query_map(params![id], |r| {
        Ok(ChildRow {
            session_id: text(r, 0)?,
            status: text(r, 1)?,
            title: text(r, 2)?,
            created_at_ms: r.get(3)?,
            insert_seq: r.get(4)?,
        })
    })?;
    let mut v = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    v.sort_by_key(|c| c.insert_seq);
    Ok(v)
}

/// Replaces the context of a session (restore).
pub fn update_context(conn: &Connection, id: &str, context: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(UPDATE_CONTEXT)?
        .execute(params![id, context])
}
