//! SQL for `verify` (PostgreSQL; SQLite's is `sqlite/sql/chain.rs`): walking
//! the hash chain in pages, the sessions page, the orphan and snapshot
//! checks. JSON paths are read with `json #>` and decoded as SQLite's
//! `json_extract` gives them ([`super::extracted_text`]).

use super::super::tx::PgTx;
use super::{col, int};
use crate::error::Result;
use crate::store::rows::ChainRow;
use crate::store::rows::SnapshotLink;
use postgres::types::Type;
use postgres::Row;

/// Rows per page of the chain walk.
const PAGE: i64 = 1000;

/// Every event after `($1, $2)` in chain order (session id, seq; index
/// `events_by_session_seq`). $3 rows.
pub const WALK_ALL: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id, prev_hash, hash FROM events WHERE (session_id, seq) > ($1, $2) \
     ORDER BY session_id, seq LIMIT $3";

/// One session's events after seq $2, by seq. $1 session, $3 rows.
pub const WALK_ONE: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id, prev_hash, hash FROM events WHERE session_id = $1 AND seq > $2 \
     ORDER BY seq LIMIT $3";

/// Up to $2 sessions' ids and revs after id $1, by id.
pub const SESSIONS_PAGE: &str =
    "SELECT session_id, rev FROM sessions WHERE session_id > $1 ORDER BY session_id LIMIT $2";

/// The first event of no session.
pub const FIRST_ORPHAN: &str = "SELECT e.session_id, e.seq FROM events e \
     WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = e.session_id) \
     ORDER BY e.event_id LIMIT 1";

/// A session's snapshots beside their events' records, by seq.
pub const SNAPSHOT_LINKS: &str = concat!(
    "SELECT s.seq, s.state, s.payload, ",
    super::workflow::snapshot_record_columns!("e.data"),
    " FROM session_snapshots s LEFT JOIN events e ON e.session_id = s.session_id AND e.seq = s.seq \
     WHERE s.session_id = $1 ORDER BY s.seq"
);

/// The first checkpoint event whose recorded snapshot (a non-null
/// `data.snapshot.sha256`) has no row.
pub const FIRST_MISSING_SNAPSHOT: &str = "SELECT min(e.seq) FROM events e \
     WHERE e.session_id = $1 AND e.type = 'checkpoint' \
     AND json_typeof(e.data::json #> '{snapshot,sha256}') <> 'null' \
     AND NOT EXISTS (SELECT 1 FROM session_snapshots s \
                     WHERE s.session_id = e.session_id AND s.seq = e.seq)";

fn map_row(row: &Row) -> Result<ChainRow> {
    let bytes = |i: usize| -> Result<Option<Vec<u8>>> {
        Ok(col::<Option<String>>(row, i)?.map(String::into_bytes))
    };
    Ok(ChainRow {
        event_id: col(row, 0)?,
        session_id: bytes(1)?.unwrap_or_default(),
        seq: col(row, 2)?,
        event_type: bytes(3)?.unwrap_or_default(),
        at_ms: col(row, 4)?,
        actor_type: bytes(5)?.unwrap_or_default(),
        detail: bytes(6)?,
        data: bytes(7)?,
        run_id: bytes(8)?,
        prev_hash: col(row, 9)?,
        hash: col(row, 10)?,
    })
}

/// Calls `f` on every event of `session` (or of all), in chain order, a
/// page at a time; stops when `f` returns `false`.
pub fn walk(
    tx: &mut PgTx<'_>,
    session: Option<&str>,
    f: &mut dyn FnMut(ChainRow) -> bool,
) -> Result<()> {
    // The last row seen: ("", MIN) precedes every event (ids are never
    // empty).
    let mut pos: (String, i64) = (session.unwrap_or("").to_owned(), i64::MIN);
    loop {
        let rows = match session {
            Some(id) => tx.rows(
                WALK_ONE,
                &[(&id, Type::TEXT), (&pos.1, Type::INT8), (&PAGE, Type::INT8)],
            )?,
            None => tx.rows(
                WALK_ALL,
                &[
                    (&pos.0, Type::TEXT),
                    (&pos.1, Type::INT8),
                    (&PAGE, Type::INT8),
                ],
            )?,
        };
        let n = rows.len();
        for row in &rows {
            let r = map_row(row)?;
            pos = (col(row, 1)?, r.seq);
            if !f(r) {
                return Ok(());
            }
        }
        if i64::try_from(n).unwrap_or(i64::MAX) < PAGE {
            return Ok(());
        }
    }
}

/// One page of sessions by id after `after`.
pub fn sessions_page(tx: &mut PgTx<'_>, after: &str, limit: usize) -> Result<Vec<(String, i64)>> {
    tx.rows(
        SESSIONS_PAGE,
        &[(&after, Type::TEXT), (&int(limit), Type::INT8)],
    )?
    .iter()
    .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
    .collect()
}

/// The first event whose session does not exist.
pub fn first_orphan(tx: &mut PgTx<'_>) -> Result<Option<(String, i64)>> {
    match tx.row(FIRST_ORPHAN, &[])? {
        Some(r) => Ok(Some((col(&r, 0)?, col(&r, 1)?))),
        None => Ok(None),
    }
}

/// A session's snapshots beside their checkpoint events' records.
pub fn snapshot_links(tx: &mut PgTx<'_>, id: &str) -> Result<Vec<SnapshotLink>> {
    tx.rows(SNAPSHOT_LINKS, &[(&id, Type::TEXT)])?
        .iter()
        .map(|r| {
            Ok(SnapshotLink {
                seq: col(r, 0)?,
                state: col::<String>(r, 1)?.into_bytes(),
                payload: col(r, 2)?,
                record: super::workflow::map_snapshot_record(r, 3)?,
            })
        })
        .collect()
}

/// The first checkpoint event whose recorded snapshot is gone.
pub fn first_missing_snapshot(tx: &mut PgTx<'_>, id: &str) -> Result<Option<i64>> {
    let r = tx.one(FIRST_MISSING_SNAPSHOT, &[(&id, Type::TEXT)])?;
    col(&r, 0)
}
