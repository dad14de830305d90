//! SQL for retention (PostgreSQL; SQLite's is `sqlite/sql/retention.rs`, whose
//! row types these fill): purge candidates, purge records, tombstones and
//! a purged session's deletes. The tombstone's `tx_id` is the column's
//! default, `pg_current_xact_id()`: the delete triggers allow exactly the
//! rows of sessions tombstoned by the deleting transaction.

use super::super::tx::PgTx;
use super::{col, int};
use crate::error::Result;
use crate::store::rows::{
    NewPurge, PurgeCandidate, PurgeEnd, PurgeEndRow, PurgeProgress, PurgeRecheck, PurgeRow,
    PurgeScan, PurgedChildRow, Tombstone,
};
use postgres::types::Type;
use postgres::Row;

const CANDIDATE_COLUMNS: &str = "s.session_id, s.insert_seq, s.title, s.status, s.app, \
     s.parent_session_id, s.created_at_ms, s.ended_at_ms, \
     (SELECT count(*) FROM events e WHERE e.session_id = s.session_id), \
     (SELECT e.event_id FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
     (SELECT e.hash FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
     ((SELECT coalesce(sum(64 + octet_length(coalesce(e.detail, '')) \
        + octet_length(coalesce(e.data, ''))), 0) FROM events e WHERE e.session_id = s.session_id) \
     + coalesce((SELECT octet_length(coalesce(d.goal, '')) + octet_length(d.context) \
        + octet_length(d.metadata) FROM session_data d WHERE d.insert_seq = s.insert_seq), 0) \
     + (SELECT coalesce(sum(octet_length(n.state)), 0) FROM session_snapshots n \
        WHERE n.session_id = s.session_id) \
     + (SELECT coalesce(sum(octet_length(coalesce(r.input, '')) \
        + octet_length(coalesce(r.output, '')) + octet_length(r.metadata)), 0) \
        FROM runs r WHERE r.session_id = s.session_id))::bigint";

/// $1 after this insert_seq, $2–$4 the statuses chosen, $5 ended before,
/// $6 the app (NULL: any).
const SCAN_WHERE: &str = "s.insert_seq > $1 \
     AND ((s.status = 'completed' AND $2) OR (s.status = 'failed' AND $3) \
          OR (s.status = 'cancelled' AND $4)) \
     AND s.ended_at_ms < $5 AND ($6::text IS NULL OR s.app = $6) \
     AND ($8::text IS NULL OR s.session_id IN (SELECT json_array_elements_text($8::json)))";

const KEEP_LAST_CUTOFFS: &str = "SELECT app, ended_at_ms, insert_seq FROM \
     (SELECT s.app, s.ended_at_ms, s.insert_seq, row_number() OVER \
        (PARTITION BY s.app ORDER BY s.ended_at_ms DESC, s.insert_seq DESC) AS n \
      FROM sessions s WHERE s.insert_seq > $1 \
      AND ((s.status = 'completed' AND $2) OR (s.status = 'failed' AND $3) \
           OR (s.status = 'cancelled' AND $4)) \
      AND s.ended_at_ms < $5 AND ($6::text IS NULL OR s.app = $6) \
      AND ($8::text IS NULL OR s.session_id IN (SELECT json_array_elements_text($8::json)))) AS ranked \
     WHERE n = $7";

const LIVE_ANCESTORS: &str = "WITH RECURSIVE up(id) AS ( \
     SELECT parent_session_id FROM sessions \
      WHERE status IN ('pending', 'active', 'paused') AND parent_session_id IS NOT NULL \
     UNION SELECT s.parent_session_id FROM sessions s JOIN up ON s.session_id = up.id \
      WHERE s.parent_session_id IS NOT NULL) \
     SELECT id FROM up";

const OPEN_PURGES: &str = "SELECT purge_id, sessions_chosen, sessions_purged, events_purged, \
     bytes_purged FROM v_purges WHERE filter = $1 AND done = 0 ORDER BY purge_id DESC";

const PURGE_PROGRESS: &str = "SELECT purge_id, sessions_chosen, sessions_purged, events_purged, \
     bytes_purged FROM v_purges WHERE purge_id = $1";

const INSERT_PURGE: &str = "INSERT INTO purges (at_ms, actor_type, actor_id, filter, sessions, \
     events, bytes) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING purge_id";

const INSERT_TOMBSTONE: &str = "INSERT INTO tombstones (session_id, insert_seq, purge_id, \
     title, status, app, parent_session_id, created_at_ms, ended_at_ms, events, last_event_id, \
     last_hash, bytes, purged_at_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

const TOMBSTONE_COLUMNS: &str = "session_id, insert_seq, title, status, app, parent_session_id, \
     created_at_ms, ended_at_ms, events, last_event_id, last_hash, bytes, purge_id, purged_at_ms";

/// As SQLite's `PURGED_CHILDREN`: per parent in the JSON array $1 and per
/// purge, the children it removed (newest tombstone of each id, none that
/// exists again).
const PURGED_CHILDREN: &str = "SELECT t.parent_session_id, t.purge_id, count(*), \
     max(t.purged_at_ms) FROM tombstones t \
     WHERE t.parent_session_id IN (SELECT json_array_elements_text($1::text::json)) \
     AND t.insert_seq = (SELECT max(n.insert_seq) FROM tombstones n WHERE n.session_id = t.session_id) \
     AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = t.session_id) \
     GROUP BY t.parent_session_id, t.purge_id ORDER BY t.parent_session_id, t.purge_id";

fn map_candidate(r: &Row) -> Result<PurgeCandidate> {
    Ok(PurgeCandidate {
        session_id: col(r, 0)?,
        insert_seq: col(r, 1)?,
        title: col(r, 2)?,
        status: col(r, 3)?,
        app: col(r, 4)?,
        parent_session_id: col(r, 5)?,
        created_at_ms: col(r, 6)?,
        ended_at_ms: col(r, 7)?,
        events: col(r, 8)?,
        last_event_id: col(r, 9)?,
        last_hash: col(r, 10)?,
        bytes: col(r, 11)?,
    })
}

fn map_tombstone(r: &Row) -> Result<Tombstone> {
    Ok(Tombstone {
        session: map_candidate(r)?,
        purge_id: col(r, 12)?,
        purged_at_ms: col(r, 13)?,
    })
}

fn map_progress(r: &Row) -> Result<PurgeProgress> {
    Ok(PurgeProgress {
        purge_id: col(r, 0)?,
        sessions_chosen: col(r, 1)?,
        sessions_purged: col(r, 2)?,
        events_purged: col(r, 3)?,
        bytes_purged: col(r, 4)?,
    })
}

/// Up to `limit` candidates after insert_seq `after`.
pub fn candidates(
    tx: &mut PgTx<'_>,
    f: &PurgeScan,
    after: i64,
    limit: usize,
) -> Result<Vec<PurgeCandidate>> {
    let sql = format!(
        "SELECT {CANDIDATE_COLUMNS} FROM sessions s WHERE {SCAN_WHERE} \
         ORDER BY s.insert_seq LIMIT $7"
    );
    let [c, fl, ca] = f.statuses;
    let limit = int(limit);
    tx.rows(
        &sql,
        &[
            (&after, Type::INT8),
            (&c, Type::BOOL),
            (&fl, Type::BOOL),
            (&ca, Type::BOOL),
            (&f.ended_before_ms, Type::INT8),
            (&f.app, Type::TEXT),
            (&limit, Type::INT8),
            (&f.sessions, Type::TEXT),
        ],
    )?
    .iter()
    .map(map_candidate)
    .collect()
}

/// One session as a candidate.
pub fn candidate(tx: &mut PgTx<'_>, id: &str) -> Result<Option<PurgeCandidate>> {
    let sql = format!("SELECT {CANDIDATE_COLUMNS} FROM sessions s WHERE s.session_id = $1");
    tx.row(&sql, &[(&id, Type::TEXT)])?
        .as_ref()
        .map(map_candidate)
        .transpose()
}

/// Per app, the key of the `n`-th newest ended session chosen.
pub fn keep_last_cutoffs(
    tx: &mut PgTx<'_>,
    f: &PurgeScan,
    n: i64,
) -> Result<Vec<(Option<String>, i64, i64)>> {
    let [c, fl, ca] = f.statuses;
    tx.rows(
        KEEP_LAST_CUTOFFS,
        &[
            (&0i64, Type::INT8),
            (&c, Type::BOOL),
            (&fl, Type::BOOL),
            (&ca, Type::BOOL),
            (&f.ended_before_ms, Type::INT8),
            (&f.app, Type::TEXT),
            (&n, Type::INT8),
            (&f.sessions, Type::TEXT),
        ],
    )?
    .iter()
    .map(|r| {
        Ok((
            col(r, 0)?,
            col::<Option<i64>>(r, 1)?.unwrap_or(i64::MIN),
            col(r, 2)?,
        ))
    })
    .collect()
}

/// The sessions with a live descendant.
pub fn live_ancestors(tx: &mut PgTx<'_>) -> Result<Vec<String>> {
    tx.rows(LIVE_ANCESTORS, &[])?
        .iter()
        .map(|r| col(r, 0))
        .collect()
}

/// Unfinished purges with this filter.
pub fn open_purges(tx: &mut PgTx<'_>, filter: &str) -> Result<Vec<PurgeProgress>> {
    tx.rows(OPEN_PURGES, &[(&filter, Type::TEXT)])?
        .iter()
        .map(map_progress)
        .collect()
}

/// One purge's progress.
pub fn purge_progress(tx: &mut PgTx<'_>, id: i64) -> Result<Option<PurgeProgress>> {
    tx.row(PURGE_PROGRESS, &[(&id, Type::INT8)])?
        .as_ref()
        .map(map_progress)
        .transpose()
}

/// Records a purge; its id.
pub fn insert_purge(tx: &mut PgTx<'_>, p: &NewPurge<'_>) -> Result<i64> {
    let r = tx.one(
        INSERT_PURGE,
        &[
            (&p.at_ms, Type::INT8),
            (&p.actor_type, Type::TEXT),
            (&p.actor_id, Type::TEXT),
            (&p.filter, Type::TEXT),
            (&p.sessions, Type::INT8),
            (&p.events, Type::INT8),
            (&p.bytes, Type::INT8),
        ],
    )?;
    col(&r, 0)
}

/// Writes the tombstone; its trigger deletes the session's rows in the
/// same statement.
pub fn purge_session(tx: &mut PgTx<'_>, t: &Tombstone) -> Result<()> {
    let s = &t.session;
    tx.exec(
        INSERT_TOMBSTONE,
        &[
            (&s.session_id, Type::TEXT),
            (&s.insert_seq, Type::INT8),
            (&t.purge_id, Type::INT8),
            (&s.title, Type::TEXT),
            (&s.status, Type::TEXT),
            (&s.app, Type::TEXT),
            (&s.parent_session_id, Type::TEXT),
            (&s.created_at_ms, Type::INT8),
            (&s.ended_at_ms, Type::INT8),
            (&s.events, Type::INT8),
            (&s.last_event_id, Type::INT8),
            (&s.last_hash, Type::BYTEA),
            (&s.bytes, Type::INT8),
            (&t.purged_at_ms, Type::INT8),
        ],
    )?;
    Ok(())
}

/// Takes the session's row FOR UPDATE (a create under it waits, and one
/// that holds it FOR KEY SHARE is waited for), so the statements after it
/// see every child committed before.
const LOCK_FOR_PURGE: &str = "SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE";

const LIVE_DESCENDANT: &str = "WITH RECURSIVE down(id) AS ( \
     SELECT session_id FROM sessions WHERE parent_session_id = $1 \
     UNION SELECT s.session_id FROM sessions s JOIN down ON s.parent_session_id = down.id) \
     SELECT EXISTS (SELECT 1 FROM sessions s JOIN down ON s.session_id = down.id \
      WHERE s.status IN ('pending', 'active', 'paused')), \
     EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id \
      AND s.insert_seq = t.insert_seq WHERE t.session_id = $1)";

/// The session as a purge finds it once its row is held.
pub fn recheck(tx: &mut PgTx<'_>, id: &str) -> Result<Option<PurgeRecheck>> {
    if tx.row(LOCK_FOR_PURGE, &[(&id, Type::TEXT)])?.is_none() {
        return Ok(None);
    }
    let Some(candidate) = candidate(tx, id)? else {
        return Ok(None);
    };
    let r = tx.one(LIVE_DESCENDANT, &[(&id, Type::TEXT)])?;
    Ok(Some(PurgeRecheck {
        candidate,
        live_descendant: col(&r, 0)?,
        stray_tombstone: col(&r, 1)?,
    }))
}

/// Once: a concurrent run of the same purge that ends too inserts nothing.
const INSERT_PURGE_END: &str = "INSERT INTO purge_ends (purge_id, at_ms, outcome, skipped) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (purge_id) DO NOTHING";

const OPEN_PURGES_ANY: &str =
    "SELECT purge_id, filter FROM v_purges WHERE done = 0 ORDER BY purge_id";

const STRAY_TOMBSTONES: &str = "SELECT t.session_id FROM tombstones t \
     JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq \
     ORDER BY t.session_id LIMIT $1";

/// Marks this transaction as logbook's own recording of a purge (the
/// triggers read `logbook.writer`; `SET LOCAL`, so it ends with the
/// transaction).
const DECLARE_WRITER: &str = "SELECT set_config('logbook.writer', $1, true)";

/// Records a purge's end.
pub fn insert_purge_end(tx: &mut PgTx<'_>, e: &PurgeEnd) -> Result<()> {
    tx.exec(
        INSERT_PURGE_END,
        &[
            (&e.purge_id, Type::INT8),
            (&e.at_ms, Type::INT8),
            (&e.outcome, Type::TEXT),
            (&e.skipped, Type::INT8),
        ],
    )?;
    Ok(())
}

/// Every unfinished purge's id and filter.
pub fn open_purges_any(tx: &mut PgTx<'_>) -> Result<Vec<(i64, String)>> {
    tx.rows(OPEN_PURGES_ANY, &[])?
        .iter()
        .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
        .collect()
}

/// Session ids of up to `limit` stray tombstones.
pub fn stray_tombstones(tx: &mut PgTx<'_>, limit: i64) -> Result<Vec<String>> {
    tx.rows(STRAY_TOMBSTONES, &[(&limit, Type::INT8)])?
        .iter()
        .map(|r| col(r, 0))
        .collect()
}

/// Declares this transaction logbook's own, as `actor` (`cli`, `mcp`,
/// `lib`).
pub fn declare_writer(tx: &mut PgTx<'_>, actor: &str) -> Result<()> {
    tx.row(DECLARE_WRITER, &[(&actor, Type::TEXT)])?;
    Ok(())
}

/// A session id's newest tombstone.
pub fn find_tombstone(tx: &mut PgTx<'_>, id: &str) -> Result<Option<Tombstone>> {
    let sql = format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE session_id = $1 \
         ORDER BY insert_seq DESC LIMIT 1"
    );
    tx.row(&sql, &[(&id, Type::TEXT)])?
        .as_ref()
        .map(map_tombstone)
        .transpose()
}

/// Up to `limit` tombstones after `(session_id, insert_seq)`.
pub fn tombstones_page(
    tx: &mut PgTx<'_>,
    after: (&str, i64),
    limit: usize,
) -> Result<Vec<Tombstone>> {
    let sql = format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE (session_id, insert_seq) > ($1, $3) \
         ORDER BY session_id, insert_seq LIMIT $2"
    );
    let limit = int(limit);
    tx.rows(
        &sql,
        &[
            (&after.0, Type::TEXT),
            (&limit, Type::INT8),
            (&after.1, Type::INT8),
        ],
    )?
    .iter()
    .map(map_tombstone)
    .collect()
}

const PURGE_ROWS_PAGE: &str = "SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, \
     p.filter, p.sessions, p.events, p.bytes, e.at_ms, e.outcome, e.skipped \
     FROM purges p LEFT JOIN purge_ends e ON e.purge_id = p.purge_id \
     WHERE p.purge_id > $1 ORDER BY p.purge_id LIMIT $2";

const PURGE_ROW: &str = "SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, \
     p.filter, p.sessions, p.events, p.bytes, e.at_ms, e.outcome, e.skipped \
     FROM purges p LEFT JOIN purge_ends e ON e.purge_id = p.purge_id WHERE p.purge_id = $1";

const FIND_PURGE_LIKE: &str = "SELECT purge_id FROM purges WHERE at_ms = $1 \
     AND actor_type = $2 AND actor_id IS NOT DISTINCT FROM $3 AND filter = $4 \
     AND sessions = $5 AND events = $6 AND bytes = $7 ORDER BY purge_id LIMIT 1";

fn map_purge_row(r: &Row) -> Result<(PurgeRow, Option<PurgeEndRow>)> {
    let end = match col::<Option<i64>>(r, 8)? {
        Some(at_ms) => Some(PurgeEndRow {
            at_ms,
            outcome: col(r, 9)?,
            skipped: col(r, 10)?,
        }),
        None => None,
    };
    Ok((
        PurgeRow {
            purge_id: col(r, 0)?,
            at_ms: col(r, 1)?,
            actor_type: col(r, 2)?,
            actor_id: col(r, 3)?,
            filter: col(r, 4)?,
            sessions: col(r, 5)?,
            events: col(r, 6)?,
            bytes: col(r, 7)?,
        },
        end,
    ))
}

/// Up to `limit` purge records after `after`, by id, with their ends.
pub fn purge_rows_page(
    tx: &mut PgTx<'_>,
    after: i64,
    limit: usize,
) -> Result<Vec<(PurgeRow, Option<PurgeEndRow>)>> {
    let limit = int(limit);
    tx.rows(
        PURGE_ROWS_PAGE,
        &[(&after, Type::INT8), (&limit, Type::INT8)],
    )?
    .iter()
    .map(map_purge_row)
    .collect()
}

/// One purge record with its end.
pub fn purge_row(tx: &mut PgTx<'_>, id: i64) -> Result<Option<(PurgeRow, Option<PurgeEndRow>)>> {
    tx.row(PURGE_ROW, &[(&id, Type::INT8)])?
        .as_ref()
        .map(map_purge_row)
        .transpose()
}

/// The id of a purge record equal to `p` but for its id.
pub fn find_purge_like(tx: &mut PgTx<'_>, p: &NewPurge<'_>) -> Result<Option<i64>> {
    tx.row(
        FIND_PURGE_LIKE,
        &[
            (&p.at_ms, Type::INT8),
            (&p.actor_type, Type::TEXT),
            (&p.actor_id, Type::TEXT),
            (&p.filter, Type::TEXT),
            (&p.sessions, Type::INT8),
            (&p.events, Type::INT8),
            (&p.bytes, Type::INT8),
        ],
    )?
    .map(|r| col(&r, 0))
    .transpose()
}

/// A purge's tombstones, by session id.
pub fn purge_tombstones(tx: &mut PgTx<'_>, purge_id: i64) -> Result<Vec<Tombstone>> {
    let sql = format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE purge_id = $1 \
         ORDER BY session_id, insert_seq"
    );
    tx.rows(&sql, &[(&purge_id, Type::INT8)])?
        .iter()
        .map(map_tombstone)
        .collect()
}

/// The tombstone of one session incarnation.
pub fn tombstone_at(tx: &mut PgTx<'_>, id: &str, insert_seq: i64) -> Result<Option<Tombstone>> {
    let sql = format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE session_id = $1 AND insert_seq = $2"
    );
    tx.row(&sql, &[(&id, Type::TEXT), (&insert_seq, Type::INT8)])?
        .as_ref()
        .map(map_tombstone)
        .transpose()
}
/// Per parent among `parents_json` (a JSON array of session ids) and per
/// purge, the children that purge removed, by parent then purge.
pub fn purged_children(tx: &mut PgTx<'_>, parents_json: &str) -> Result<Vec<PurgedChildRow>> {
    tx.rows(PURGED_CHILDREN, &[(&parents_json, Type::TEXT)])?
        .iter()
        .map(|r| {
            Ok(PurgedChildRow {
                parent_session_id: col(r, 0)?,
                purge_id: col(r, 1)?,
                sessions: col(r, 2)?,
                purged_at_ms: col(r, 3)?,
            })
        })
        .collect()
}
