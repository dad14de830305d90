//! SQL for `events`: append, replay, idempotency look-ups.

use crate::error::LatestEvent;
use crate::model::{ActorType, Event};
use crate::store::codec::chain_link;
use crate::store::codec::key_sha256;
pub use crate::store::rows::{KeyHit, NewEvent};
use crate::store::sqlite::codec::{opt_json, opt_text, text};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// The next event's seq (the session's max + 1) and at_ms (the session's
/// `updated_at_ms`, which the mutation's UPDATE just moved, never
/// backwards). The subquery is correlated on `s.session_id` rather than
/// bound to `?1`: a bound `max(seq) … WHERE session_id = ?1` makes SQLite
/// re-prepare the statement on every call.
///
/// The third column is the previous event's `hash` (NULL before the first
/// event), the new event's `prev_hash`.
pub const SELECT_NEXT_EVENT: &str = "SELECT (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
     WHERE e.session_id = s.session_id), s.updated_at_ms, (SELECT e.hash FROM events e \
     WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1) \
     FROM sessions s WHERE s.session_id = ?1";

/// Appends one event. The `events_seq_contiguous` trigger refuses a seq that
/// is not the session's previous max + 1. (Not `INSERT … SELECT` from
/// `events`: SQLite would buffer that through a temp table on every call.)
///
/// The event_id is given, above every id ever handed out: the newest
/// event's and every purged session's newest (`tombstones_by_event`), so
/// an id is never reused after a purge removed the newest events (docs/design.md, "Retention":
/// a follower's cursor stays exact). Both are one seek to an index's end.
pub const INSERT_EVENT: &str = "INSERT INTO events (event_id, session_id, seq, type, at_ms, \
     actor_type, detail, data, run_id, prev_hash, hash) VALUES \
     (max((SELECT coalesce(max(event_id), 0) FROM events), \
          (SELECT coalesce(max(last_event_id), 0) FROM tombstones)) + 1, \
     ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// Records the idempotency key an event was produced with, and the rev the
/// mutation left (its session UPDATE has run: one per mutation, before its
/// events).
pub const INSERT_KEY: &str = "INSERT INTO idempotency_keys (key_sha256, session_id, event_id, \
     request_digest, rev) VALUES (?1, ?2, ?3, ?4, (SELECT rev FROM sessions WHERE session_id = ?2))";

/// Events of one session with `?2 < seq <= ?2 + ?3`. Seqs are contiguous
/// (trigger), so the range is the page; rows are sorted by seq in Rust. (An
/// `ORDER BY … LIMIT` here makes SQLite re-prepare the statement on every
/// binding.)
pub const SELECT_EVENTS: &str =
    "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id FROM events WHERE session_id = ?1 AND seq > ?2 AND seq <= ?2 + ?3";

/// The newest event of a session, for conflict details.
pub const SELECT_LATEST_EVENT: &str = "SELECT seq, type, json_extract(data, '$.step') FROM events \
     WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1";

/// What an idempotency key produced on a session: the request digest, the
/// seq and run of its event, and the rev the mutation left (NULL for keys
/// recorded before schema V6).
pub const SELECT_BY_KEY: &str = "SELECT k.request_digest, e.seq, k.rev, e.run_id \
     FROM idempotency_keys k JOIN events e ON e.event_id = k.event_id \
     WHERE k.key_sha256 = ?1 AND k.session_id = ?2";

/// The session a `create` with this idempotency key produced.
pub const SELECT_CREATED_BY_KEY: &str = "SELECT k.session_id, k.request_digest \
     FROM idempotency_keys k JOIN events e ON e.event_id = k.event_id \
     WHERE k.key_sha256 = ?1 AND e.seq = 0 LIMIT 1";

/// Appends an event; returns its `(event_id, seq)`.
pub fn insert_event(conn: &Connection, e: &NewEvent<'_>) -> rusqlite::Result<(i64, i64)> {
    // The previous hash is copied straight out of the row (no allocation).
    let (seq, at_ms, prev): (i64, i64, [u8; 32]) = conn
        .prepare_cached(SELECT_NEXT_EVENT)?
        .query_row(params![e.session_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                chain_link(r.get_ref(2)?.as_bytes_or_null()?),
            ))
        })?;
    let actor = e.actor_type.as_str();
    let hash = e.hash(&prev, seq, at_ms);
    conn.prepare_cached(INSERT_EVENT)?.execute(params![
        e.session_id,
        seq,
        e.event_type,
        at_ms,
        actor,
        e.detail,
        e.data,
        e.run_id,
        &prev[..],
        &hash[..],
    ])?;
    let event_id = conn.last_insert_rowid();
    if let Some((key, digest)) = e.idempotency {
        conn.prepare_cached(INSERT_KEY)?.execute(params![
            key_sha256(key),
            e.session_id,
            event_id,
            digest
        ])?;
    }
    Ok((event_id, seq))
}

/// Maps a row of [`SELECT_EVENTS`].
pub fn map_event(row: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        event_id: row.get(0)?,
        session_id: text(row, 1)?,
        seq: row.get(2)?,
        event_type: text(row, 3)?,
        at_ms: row.get(4)?,
        actor_type: text(row, 5)?.parse().unwrap_or(ActorType::Lib),
        detail: opt_text(row, 6)?,
        data: opt_json(row, 7)?,
        run_id: opt_text(row, 8)?,
    })
}

/// Events of a session with seq > `after_seq`, at most `limit`.
pub fn select_events(
    conn: &Connection,
    session_id: &str,
    after_seq: i64,
    limit: i64,
) -> rusqlite::Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(SELECT_EVENTS)?;
    let rows = stmt.query_map(params![session_id, after_seq, limit], map_event)?;
    let mut events = rows.collect::<rusqlite::Result<Vec<Event>>>()?;
    events.sort_by_key(|e| e.seq);
    Ok(events)
}

/// The newest event of a session.
pub fn latest_event(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<LatestEvent>> {
    conn.prepare_cached(SELECT_LATEST_EVENT)?
        .query_row(params![session_id], |r| {
            Ok(LatestEvent {
                seq: r.get(0)?,
                event_type: text(r, 1)?,
                step: opt_text(r, 2)?,
            })
        })
        .optional()
}

/// What `key` produced on `session_id`, if the key was used there.
pub fn find_by_key(
    conn: &Connection,
    key: &str,
    session_id: &str,
) -> rusqlite::Result<Option<KeyHit>> {
    conn.prepare_cached(SELECT_BY_KEY)?
        .query_row(params![key_sha256(key), session_id], |r| {
            Ok(KeyHit {
                digest: text(r, 0)?,
                seq: r.get(1)?,
                rev: r.get(2)?,
                run_id: opt_text(r, 3)?,
            })
        })
        .optional()
}

/// The session (and digest) a create with `key` produced, if any.
pub fn find_created_by_key(
    conn: &Connection,
    key: &str,
) -> rusqlite::Result<Option<(String, String)>> {
    conn.prepare_cached(SELECT_CREATED_BY_KEY)?
        .query_row(params![key_sha256(key)], |r| Ok((text(r, 0)?, text(r, 1)?)))
        .optional()
}
