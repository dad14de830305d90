//! SQL for retention (docs/design.md, "Retention"): choosing the sessions a purge removes,
//! purge records, tombstones, and deleting one purged session's rows.
//! The row types are shared with the PostgreSQL store.

use crate::store::rows::{
    NewPurge, PurgeCandidate, PurgeEnd, PurgeEndRow, PurgeProgress, PurgeRecheck, PurgeRow,
    PurgeScan, PurgedChildRow, Tombstone,
};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// The columns of a candidate: `s` a session row; the event count, the
/// newest event's id and hash, and the bytes by correlated subqueries over
/// the session's indexes.
const CANDIDATE_COLUMNS: &str = "s.session_id, s.insert_seq, s.title, s.status, s.app, \
     s.parent_session_id, s.created_at_ms, s.ended_at_ms, \
     (SELECT count(*) FROM events e WHERE e.session_id = s.session_id), \
     (SELECT e.event_id FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
     (SELECT e.hash FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
     (SELECT coalesce(sum(64 + length(CAST(coalesce(e.detail, '') AS BLOB)) \
        + length(CAST(coalesce(e.data, '') AS BLOB))), 0) \
        FROM events e WHERE e.session_id = s.session_id) \
     + coalesce((SELECT length(CAST(coalesce(d.goal, '') AS BLOB)) + length(CAST(d.context AS BLOB)) \
        + length(CAST(d.metadata AS BLOB)) FROM session_data d WHERE d.insert_seq = s.insert_seq), 0) \
     + (SELECT coalesce(sum(length(CAST(n.state AS BLOB))), 0) FROM session_snapshots n \
        WHERE n.session_id = s.session_id) \
     + (SELECT coalesce(sum(length(CAST(coalesce(r.input, '') AS BLOB)) \
        + length(CAST(coalesce(r.output, '') AS BLOB)) + length(CAST(r.metadata AS BLOB))), 0) \
        FROM runs r WHERE r.session_id = s.session_id)";

/// The filter's WHERE over `s`: ?1 after this insert_seq, ?2–?4 the
/// statuses chosen, ?5 ended before, ?6 the app (NULL: any), ?8 the
/// sessions (a JSON array; NULL: any).
const SCAN_WHERE: &str = "s.insert_seq > ?1 \
     AND ((s.status = 'completed' AND ?2) OR (s.status = 'failed' AND ?3) \
          OR (s.status = 'cancelled' AND ?4)) \
     AND s.ended_at_ms < ?5 AND (?6 IS NULL OR s.app = ?6) \
     AND (?8 IS NULL OR s.session_id IN (SELECT value FROM json_each(?8)))";

/// Up to ?7 candidates after insert_seq ?1, by insert_seq.
fn candidates_sql() -> String {
    format!(
        "SELECT {CANDIDATE_COLUMNS} FROM sessions s WHERE {SCAN_WHERE} \
         ORDER BY s.insert_seq LIMIT ?7"
    )
}

/// Per app, the `(ended_at_ms, insert_seq)` of the ?7-th newest ended
/// session the filter chooses (newest ended first): `--keep-last` keeps it
/// and every newer one.
const KEEP_LAST_CUTOFFS: &str = "SELECT app, ended_at_ms, insert_seq FROM \
     (SELECT s.app, s.ended_at_ms, s.insert_seq, row_number() OVER \
        (PARTITION BY s.app ORDER BY s.ended_at_ms DESC, s.insert_seq DESC) AS n \
      FROM sessions s WHERE s.insert_seq > ?1 \
      AND ((s.status = 'completed' AND ?2) OR (s.status = 'failed' AND ?3) \
           OR (s.status = 'cancelled' AND ?4)) \
      AND s.ended_at_ms < ?5 AND (?6 IS NULL OR s.app = ?6) \
      AND (?8 IS NULL OR s.session_id IN (SELECT value FROM json_each(?8)))) \
     WHERE n = ?7";

/// Every session with a live (pending, active, paused) descendant: the
/// ancestors of the live sessions.
pub const LIVE_ANCESTORS: &str = "WITH RECURSIVE up(id) AS ( \
     SELECT parent_session_id FROM sessions \
      WHERE (status = 'pending' OR status = 'active' OR status = 'paused') \
        AND parent_session_id IS NOT NULL \
     UNION SELECT s.parent_session_id FROM sessions s JOIN up ON s.session_id = up.id \
      WHERE s.parent_session_id IS NOT NULL) \
     SELECT id FROM up";

/// Purges with this filter that have not tombstoned every session they
/// chose, newest first.
pub const OPEN_PURGES: &str = "SELECT purge_id, sessions_chosen, sessions_purged, \
     events_purged, bytes_purged FROM v_purges WHERE filter = ?1 AND done = 0 \
     ORDER BY purge_id DESC";

/// One purge's progress.
pub const PURGE_PROGRESS: &str = "SELECT purge_id, sessions_chosen, sessions_purged, \
     events_purged, bytes_purged FROM v_purges WHERE purge_id = ?1";

/// A new purge record.
pub const INSERT_PURGE: &str = "INSERT INTO purges (at_ms, actor_type, actor_id, filter, \
     sessions, events, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// A tombstone. The `tombstones_truthful` trigger checks it against the
/// session.
pub const INSERT_TOMBSTONE: &str = "INSERT INTO tombstones (session_id, insert_seq, purge_id, \
     title, status, app, parent_session_id, created_at_ms, ended_at_ms, events, last_event_id, \
     last_hash, bytes, purged_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// The tombstones of a session id, newest incarnation first.
const TOMBSTONE_COLUMNS: &str = "session_id, insert_seq, title, status, app, parent_session_id, \
     created_at_ms, ended_at_ms, events, last_event_id, last_hash, bytes, purge_id, purged_at_ms";

/// A session id's newest tombstone.
fn find_tombstone_sql() -> String {
    format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE session_id = ?1 \
         ORDER BY insert_seq DESC LIMIT 1"
    )
}

/// Up to ?2 tombstones after session id ?1 (then insert_seq ?3), by id.
fn tombstones_page_sql() -> String {
    format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE (session_id, insert_seq) > (?1, ?3) \
         ORDER BY session_id, insert_seq LIMIT ?2"
    )
}

/// Per parent in the JSON array ?1 of session ids and per purge, the
/// children that purge removed: a child counts under its newest tombstone,
/// and not at all while a session of its id exists again (imported back).
/// Until `tombstones` has an index on `parent_session_id`, this reads every
/// tombstone once.
pub const PURGED_CHILDREN: &str = "SELECT t.parent_session_id, t.purge_id, count(*), \
     max(t.purged_at_ms) FROM tombstones t \
     WHERE t.parent_session_id IN (SELECT value FROM json_each(?1)) \
     AND t.insert_seq = (SELECT max(n.insert_seq) FROM tombstones n WHERE n.session_id = t.session_id) \
     AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = t.session_id) \
     GROUP BY t.parent_session_id, t.purge_id ORDER BY t.parent_session_id, t.purge_id";

fn map_candidate(r: &Row<'_>) -> rusqlite::Result<PurgeCandidate> {
    Ok(PurgeCandidate {
        session_id: r.get(0)?,
        insert_seq: r.get(1)?,
        title: r.get(2)?,
        status: r.get(3)?,
        app: r.get(4)?,
        parent_session_id: r.get(5)?,
        created_at_ms: r.get(6)?,
        ended_at_ms: r.get(7)?,
        events: r.get(8)?,
        last_event_id: r.get(9)?,
        last_hash: r.get(10)?,
        bytes: r.get(11)?,
    })
}

fn map_tombstone(r: &Row<'_>) -> rusqlite::Result<Tombstone> {
    Ok(Tombstone {
        session: map_candidate(r)?,
        purge_id: r.get(12)?,
        purged_at_ms: r.get(13)?,
    })
}

fn map_progress(r: &Row<'_>) -> rusqlite::Result<PurgeProgress> {
    Ok(PurgeProgress {
        purge_id: r.get(0)?,
        sessions_chosen: r.get(1)?,
        sessions_purged: r.get(2)?,
        events_purged: r.get(3)?,
        bytes_purged: r.get(4)?,
    })
}

/// Up to `limit` candidates after `after` (insert_seq), by insert_seq.
pub fn candidates(
    conn: &Connection,
    f: &PurgeScan,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<PurgeCandidate>> {
    let [c, fl, ca] = f.statuses;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(&candidates_sql())?;
    let rows = stmt.query_map(
        params![
            after,
            c,
            fl,
            ca,
            f.ended_before_ms,
            f.app,
            limit,
            f.sessions
        ],
        map_candidate,
    )?;
    rows.collect()
}

/// Per app, the key of the `n`-th newest ended session the filter chooses.
pub fn keep_last_cutoffs(
    conn: &Connection,
    f: &PurgeScan,
    n: i64,
) -> rusqlite::Result<Vec<(Option<String>, i64, i64)>> {
    let [c, fl, ca] = f.statuses;
    let mut stmt = conn.prepare_cached(KEEP_LAST_CUTOFFS)?;
    let rows = stmt.query_map(
        params![0i64, c, fl, ca, f.ended_before_ms, f.app, n, f.sessions],
        |r| {
            Ok((
                r.get(0)?,
                r.get::<_, Option<i64>>(1)?.unwrap_or(i64::MIN),
                r.get(2)?,
            ))
        },
    )?;
    rows.collect()
}

/// The sessions with a live descendant.
pub fn live_ancestors(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(LIVE_ANCESTORS)?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

/// Unfinished purges with this filter, newest first.
pub fn open_purges(conn: &Connection, filter: &str) -> rusqlite::Result<Vec<PurgeProgress>> {
    let mut stmt = conn.prepare_cached(OPEN_PURGES)?;
    let rows = stmt.query_map([filter], map_progress)?;
    rows.collect()
}

/// One purge's progress.
pub fn purge_progress(conn: &Connection, id: i64) -> rusqlite::Result<Option<PurgeProgress>> {
    conn.prepare_cached(PURGE_PROGRESS)?
        .query_row([id], map_progress)
        .optional()
}

/// Records a purge; its id.
pub fn insert_purge(conn: &Connection, p: &NewPurge<'_>) -> rusqlite::Result<i64> {
    conn.prepare_cached(INSERT_PURGE)?.execute(params![
        p.at_ms,
        p.actor_type,
        p.actor_id,
        p.filter,
        p.sessions,
        p.events,
        p.bytes
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Writes `t`'s tombstone; its `tombstones_purge_rows` trigger deletes
/// the session's rows in the same statement.
pub fn purge_session(conn: &Connection, t: &Tombstone) -> rusqlite::Result<()> {
    let s = &t.session;
    conn.prepare_cached(INSERT_TOMBSTONE)?.execute(params![
        s.session_id,
        s.insert_seq,
        t.purge_id,
        s.title,
        s.status,
        s.app,
        s.parent_session_id,
        s.created_at_ms,
        s.ended_at_ms,
        s.events,
        s.last_event_id,
        s.last_hash,
        s.bytes,
        t.purged_at_ms
    ])?;
    Ok(())
}

/// Whether a session has a live descendant (?1 the session).
pub const LIVE_DESCENDANT: &str = "WITH RECURSIVE down(id) AS ( \
     SELECT session_id FROM sessions WHERE parent_session_id = ?1 \
     UNION SELECT s.session_id FROM sessions s JOIN down ON s.parent_session_id = down.id) \
     SELECT EXISTS (SELECT 1 FROM sessions s JOIN down ON s.session_id = down.id \
      WHERE s.status = 'pending' OR s.status = 'active' OR s.status = 'paused')";

/// Whether a tombstone of (?1, ?2) exists.
pub const TOMBSTONE_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM tombstones WHERE session_id = ?1 AND insert_seq = ?2)";

/// The session `id` as a purge finds it now (see [`PurgeRecheck`]).
pub fn recheck(conn: &Connection, id: &str) -> rusqlite::Result<Option<PurgeRecheck>> {
    let Some(candidate) = candidate(conn, id)? else {
        return Ok(None);
    };
    let live_descendant = conn
        .prepare_cached(LIVE_DESCENDANT)?
        .query_row([id], |r| r.get(0))?;
    let stray_tombstone = conn
        .prepare_cached(TOMBSTONE_EXISTS)?
        .query_row(params![id, candidate.insert_seq], |r| r.get(0))?;
    Ok(Some(PurgeRecheck {
        candidate,
        live_descendant,
        stray_tombstone,
    }))
}

/// Records a purge's end.
/// Records a purge's end, once (a second end of the same purge, by a
/// concurrent run of it, inserts nothing).
pub const INSERT_PURGE_END: &str = "INSERT INTO purge_ends (purge_id, at_ms, outcome, skipped) \
     SELECT ?1, ?2, ?3, ?4 WHERE NOT EXISTS (SELECT 1 FROM purge_ends WHERE purge_id = ?1)";

/// Every unfinished purge: its id and filter, oldest first.
pub const OPEN_PURGES_ANY: &str =
    "SELECT purge_id, filter FROM v_purges WHERE done = 0 ORDER BY purge_id";

/// Records a purge's end.
pub fn insert_purge_end(conn: &Connection, e: &PurgeEnd) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_PURGE_END)?
        .execute(params![e.purge_id, e.at_ms, e.outcome, e.skipped])?;
    Ok(())
}

/// Every unfinished purge's id and filter.
pub fn open_purges_any(conn: &Connection) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut stmt = conn.prepare_cached(OPEN_PURGES_ANY)?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Tombstones whose session incarnation still exists (written before V8
/// by raw SQL without their deletes): up to `limit`, by session id.
pub const STRAY_TOMBSTONES: &str = "SELECT t.session_id FROM tombstones t \
     JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq \
     ORDER BY t.session_id LIMIT ?1";

/// Session ids of up to `limit` stray tombstones.
pub fn stray_tombstones(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(STRAY_TOMBSTONES)?;
    let rows = stmt.query_map([limit], |r| r.get(0))?;
    rows.collect()
}

/// A session id's newest tombstone.
pub fn find_tombstone(conn: &Connection, id: &str) -> rusqlite::Result<Option<Tombstone>> {
    conn.prepare_cached(&find_tombstone_sql())?
        .query_row([id], map_tombstone)
        .optional()
}

/// Up to `limit` tombstones after `(id, insert_seq)`, by id.
pub fn tombstones_page(
    conn: &Connection,
    after: (&str, i64),
    limit: usize,
) -> rusqlite::Result<Vec<Tombstone>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(&tombstones_page_sql())?;
    let rows = stmt.query_map(params![after.0, limit, after.1], map_tombstone)?;
    rows.collect()
}

/// The candidate row of one session, whatever the filter (the purge
/// re-reads it inside its write transaction).
pub fn candidate(conn: &Connection, id: &str) -> rusqlite::Result<Option<PurgeCandidate>> {
    conn.prepare_cached(&format!(
        "SELECT {CANDIDATE_COLUMNS} FROM sessions s WHERE s.session_id = ?1"
    ))?
    .query_row([id], map_candidate)
    .optional()
}

/// Up to ?2 purge records after purge id ?1, with their ends, by id.
pub const PURGE_ROWS_PAGE: &str = "SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, \
     p.filter, p.sessions, p.events, p.bytes, e.at_ms, e.outcome, e.skipped \
     FROM purges p LEFT JOIN purge_ends e ON e.purge_id = p.purge_id \
     WHERE p.purge_id > ?1 ORDER BY p.purge_id LIMIT ?2";

/// One purge record with its end.
pub const PURGE_ROW: &str = "SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, \
     p.filter, p.sessions, p.events, p.bytes, e.at_ms, e.outcome, e.skipped \
     FROM purges p LEFT JOIN purge_ends e ON e.purge_id = p.purge_id WHERE p.purge_id = ?1";

/// The id of a purge record equal to the given one in every column but
/// its id (an imported record met again). ?1–?7 as [`INSERT_PURGE`].
pub const FIND_PURGE_LIKE: &str = "SELECT purge_id FROM purges WHERE at_ms = ?1 \
     AND actor_type = ?2 AND actor_id IS ?3 AND filter = ?4 AND sessions = ?5 \
     AND events = ?6 AND bytes = ?7 ORDER BY purge_id LIMIT 1";

/// A purge's tombstones, by session id.
fn purge_tombstones_sql() -> String {
    format!(
        "SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE purge_id = ?1 \
         ORDER BY session_id, insert_seq"
    )
}

/// The tombstone of one session incarnation.
fn tombstone_at_sql() -> String {
    format!("SELECT {TOMBSTONE_COLUMNS} FROM tombstones WHERE session_id = ?1 AND insert_seq = ?2")
}

fn map_purge_row(r: &Row<'_>) -> rusqlite::Result<(PurgeRow, Option<PurgeEndRow>)> {
    let end = match r.get::<_, Option<i64>>(8)? {
        Some(at_ms) => Some(PurgeEndRow {
            at_ms,
            outcome: r.get(9)?,
            skipped: r.get(10)?,
        }),
        None => None,
    };
    Ok((
        PurgeRow {
            purge_id: r.get(0)?,
            at_ms: r.get(1)?,
            actor_type: r.get(2)?,
            actor_id: r.get(3)?,
            filter: r.get(4)?,
            sessions: r.get(5)?,
            events: r.get(6)?,
            bytes: r.get(7)?,
        },
        end,
    ))
}

/// Up to `limit` purge records after `after`, by id, with their ends.
pub fn purge_rows_page(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(PurgeRow, Option<PurgeEndRow>)>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(PURGE_ROWS_PAGE)?;
    let rows = stmt.query_map(params![after, limit], map_purge_row)?;
    rows.collect()
}

/// One purge record with its end.
pub fn purge_row(
    conn: &Connection,
    id: i64,
) -> rusqlite::Result<Option<(PurgeRow, Option<PurgeEndRow>)>> {
    conn.prepare_cached(PURGE_ROW)?
        .query_row([id], map_purge_row)
        .optional()
}

/// The id of a purge record equal to `p` but for its id.
pub fn find_purge_like(conn: &Connection, p: &NewPurge<'_>) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(FIND_PURGE_LIKE)?
        .query_row(
            params![
                p.at_ms,
                p.actor_type,
                p.actor_id,
                p.filter,
                p.sessions,
                p.events,
                p.bytes
            ],
            |r| r.get(0),
        )
        .optional()
}

/// A purge's tombstones.
pub fn purge_tombstones(conn: &Connection, purge_id: i64) -> rusqlite::Result<Vec<Tombstone>> {
    let mut stmt = conn.prepare_cached(&purge_tombstones_sql())?;
    let rows = stmt.query_map([purge_id], map_tombstone)?;
    rows.collect()
}

/// The tombstone of one session incarnation.
pub fn tombstone_at(
    conn: &Connection,
    id: &str,
    insert_seq: i64,
) -> rusqlite::Result<Option<Tombstone>> {
    conn.prepare_cached(&tombstone_at_sql())?
        .query_row(params![id, insert_seq], map_tombstone)
        .optional()
}

/// Per parent among `parents_json` (a JSON array of session ids) and per
/// purge, the children that purge removed ([`PURGED_CHILDREN`]), by parent
/// then purge.
pub fn purged_children(
    conn: &Connection,
    parents_json: &str,
) -> rusqlite::Result<Vec<PurgedChildRow>> {
    let mut stmt = conn.prepare_cached(PURGED_CHILDREN)?;
    let rows = stmt.query_map([parents_json], |r| {
        Ok(PurgedChildRow {
            parent_session_id: r.get(0)?,
            purge_id: r.get(1)?,
            sessions: r.get(2)?,
            purged_at_ms: r.get(3)?,
        })
    })?;
    rows.collect()
}
