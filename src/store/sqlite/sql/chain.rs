//! SQL for the hash chain: walking every event in chain order, filling in
//! the hashes of rows older than schema V2, and reading each session's head.

use crate::chain;
pub use crate::store::rows::ChainRow;
use crate::store::rows::SnapshotLink;
use rusqlite::{params, Connection, Row};

/// Every event of every session (or of one session, `?1`), in chain order.
/// Reads the `(session_id, seq)` index, so the walk streams.
const WALK_ALL: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id, prev_hash, hash FROM events ORDER BY session_id, seq";
const WALK_ONE: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id, prev_hash, hash FROM events WHERE session_id = ?1 ORDER BY seq";

fn bytes(row: &Row<'_>, i: usize) -> rusqlite::Result<Vec<u8>> {
    Ok(opt_bytes(row, i)?.unwrap_or_default())
}

fn opt_bytes(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(b.to_vec()),
        ValueRef::Integer(n) => Some(n.to_string().into_bytes()),
        ValueRef::Real(f) => Some(f.to_string().into_bytes()),
    })
}

fn int(row: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(i)? {
        ValueRef::Integer(n) => n,
        _ => i64::MIN,
    })
}

fn map_row(row: &Row<'_>) -> rusqlite::Result<ChainRow> {
    Ok(ChainRow {
        event_id: int(row, 0)?,
        session_id: bytes(row, 1)?,
        seq: int(row, 2)?,
        event_type: bytes(row, 3)?,
        at_ms: int(row, 4)?,
        actor_type: bytes(row, 5)?,
        detail: opt_bytes(row, 6)?,
        data: opt_bytes(row, 7)?,
        run_id: opt_bytes(row, 8)?,
        prev_hash: opt_bytes(row, 9)?,
        hash: opt_bytes(row, 10)?,
    })
}

/// Calls `f` on every event of `session` (or of all sessions), in chain
/// order: by session id, then seq. Stops early when `f` returns `false`.
pub fn walk(
    conn: &Connection,
    session: Option<&str>,
    mut f: impl FnMut(ChainRow) -> bool,
) -> rusqlite::Result<()> {
    let mut stmt;
    let mut rows = match session {
        Some(id) => {
            stmt = conn.prepare_cached(WALK_ONE)?;
            stmt.query(params![id])?
        }
        None => {
            stmt = conn.prepare_cached(WALK_ALL)?;
            stmt.query([])?
        }
    };
    while let Some(row) = rows.next()? {
        if !f(map_row(row)?) {
            break;
        }
    }
    Ok(())
}

/// Fills `prev_hash` and `hash` of every event that has none (rows written
/// before schema V2), in chain order. Runs inside the migration's
/// transaction; the V2 `events_no_update` trigger allows exactly this.
pub fn backfill(conn: &Connection) -> rusqlite::Result<u64> {
    let mut update =
        conn.prepare("UPDATE events SET prev_hash = ?2, hash = ?3 WHERE event_id = ?1")?;
    let mut pending: Vec<(i64, [u8; 32], [u8; 32])> = Vec::new();
    let mut filled = 0u64;
    let mut session: Vec<u8> = Vec::new();
    let mut prev = chain::GENESIS;
    // Collected first, applied after the walk: no statement reads rows that
    // another statement is changing. (About 80 bytes per event, once.)
    walk(conn, None, |row| {
        if row.session_id != session {
            session.clone_from(&row.session_id);
            prev = chain::GENESIS;
        }
        let hash = match row.hash.as_deref() {
            Some(h) => crate::store::codec::chain_link(Some(h)),
            None => {
                let h = row.expected_hash(&prev);
                pending.push((row.event_id, prev, h));
                h
            }
        };
        prev = hash;
        true
    })?;
    for (event_id, prev_hash, hash) in pending {
        update.execute(params![event_id, &prev_hash[..], &hash[..]])?;
        filled += 1;
    }
    Ok(filled)
}

/// Up to ?2 sessions' ids and revs after id ?1, by id (the `session_id`
/// index: `verify` pages through every session).
pub const SESSIONS_PAGE: &str =
    "SELECT session_id, rev FROM sessions WHERE session_id > ?1 ORDER BY session_id LIMIT ?2";

/// One page of sessions by id after `after`.
pub fn sessions_page(
    conn: &Connection,
    after: &str,
    limit: usize,
) -> rusqlite::Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare_cached(SESSIONS_PAGE)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![after, limit], |r| {
        Ok((crate::store::sqlite::codec::text(r, 0)?, r.get(1)?))
    })?;
    rows.collect()
}

/// The first event whose session does not exist (only possible with the
/// triggers and foreign keys off): `(session_id, seq)`.
pub fn first_orphan(conn: &Connection) -> rusqlite::Result<Option<(String, i64)>> {
    use rusqlite::OptionalExtension;
    conn.query_row(
        "SELECT e.session_id, e.seq FROM events e \
         WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = e.session_id) \
         ORDER BY e.event_id LIMIT 1",
        [],
        |r| Ok((crate::store::sqlite::codec::text(r, 0)?, r.get(1)?)),
    )
    .optional()
}

/// A session's snapshots beside what their checkpoint events recorded
/// (all `None` when no event at that seq records a snapshot), by seq.
pub fn snapshot_links(conn: &Connection, session_id: &str) -> rusqlite::Result<Vec<SnapshotLink>> {
    let mut st = conn.prepare_cached(
        "SELECT s.seq, CAST(s.state AS BLOB), s.payload, json_extract(e.data, '$.snapshot.sha256'), \
                json_extract(e.data, '$.snapshot.size_bytes'), \
                json_extract(e.data, '$.snapshot.payload_sha256'), \
                json_extract(e.data, '$.snapshot.payload_bytes') \
         FROM session_snapshots s LEFT JOIN events e ON e.session_id = s.session_id AND e.seq = s.seq \
         WHERE s.session_id = ?1",
    )?;
    let rows = st.query_map(params![session_id], |r| {
        Ok(SnapshotLink {
            seq: r.get(0)?,
            state: r.get(1)?,
            payload: r.get(2)?,
            record: super::workflow::map_snapshot_record(r, 3),
        })
    })?;
    let mut out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    out.sort_by_key(|r| r.seq);
    Ok(out)
}

/// The first checkpoint event of a session that records a snapshot (its
/// `data.snapshot.sha256`) whose row is gone. (An imported Amber checkpoint
/// keeps its file under `data.snapshot` without a hash: not a snapshot row.)
pub fn first_missing_snapshot(
    conn: &Connection,
    session_id: &str,
) -> rusqlite::Result<Option<i64>> {
    use rusqlite::OptionalExtension;
    conn.prepare_cached(
        "SELECT min(e.seq) FROM events e WHERE e.session_id = ?1 AND e.type = 'checkpoint' \
         AND json_extract(e.data, '$.snapshot.sha256') IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM session_snapshots s WHERE s.session_id = e.session_id AND s.seq = e.seq)",
    )?
    .query_row(params![session_id], |r| r.get::<_, Option<i64>>(0))
    .optional()
    .map(Option::flatten)
}
