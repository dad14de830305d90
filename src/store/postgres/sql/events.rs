//! SQL for `events` and `idempotency_keys` (PostgreSQL; SQLite's is
//! `sqlite/sql/events.rs`): append with the chain link, replay, key look-ups.

use super::super::errors::is_unique_violation;
use super::super::tx::{Failure, PgTx};
use super::{col, extracted_text};
use crate::error::{Error, LatestEvent, Result};
use crate::model::{ActorType, Event};
use crate::store::codec::chain_link;
use crate::store::codec::json_of_text;
use crate::store::codec::key_sha256;
use crate::store::rows::{KeyHit, NewEvent};
use postgres::types::Type;
use postgres::Row;

/// The next event's seq (the session's max + 1), its at_ms (the session's
/// `updated_at_ms`, which the mutation's UPDATE just moved) and the
/// previous event's hash (NULL before the first): read under the session's
/// row lock, in a snapshot taken after it.
pub const SELECT_NEXT_EVENT: &str = "SELECT (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
     WHERE e.session_id = s.session_id), s.updated_at_ms, (SELECT e.hash FROM events e \
     WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1) \
     FROM sessions s WHERE s.session_id = $1";

/// Appends one event; `tx_id` takes its default, the transaction's id.
/// $1 session, $2 seq, $3 type, $4 at, $5 actor, $6 detail, $7 data,
/// $8 run, $9 prev_hash, $10 hash.
pub const INSERT_EVENT: &str = "INSERT INTO events (session_id, seq, type, at_ms, actor_type, \
     detail, data, run_id, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     RETURNING event_id";

/// [`INSERT_EVENT`] and its idempotency key with the rev the mutation
/// left, in one statement. $11 key SHA-256, $12 request digest.
pub const INSERT_EVENT_KEYED: &str = "WITH e AS (INSERT INTO events (session_id, seq, type, \
     at_ms, actor_type, detail, data, run_id, prev_hash, hash) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING event_id) \
     INSERT INTO idempotency_keys (key_sha256, session_id, event_id, request_digest, rev) \
     SELECT $11, $1, e.event_id, $12, (SELECT s.rev FROM sessions s WHERE s.session_id = $1) \
     FROM e RETURNING event_id";

/// The key's primary key: a concurrent retry with the same key got there
/// first.
const KEY_PRIMARY_KEY: &str = "idempotency_keys_pkey";

/// The columns [`map_event`] reads, from `events e`.
macro_rules! event_columns {
    () => {
        "e.event_id, e.session_id, e.seq, e.type, e.at_ms, e.actor_type, e.detail, e.data, \
         e.run_id"
    };
}
pub(crate) use event_columns;

/// Events of one session with `$2 < seq <= $3`, by seq.
pub const SELECT_EVENTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events e WHERE e.session_id = $1 AND e.seq > $2 AND e.seq <= $3 ORDER BY e.seq"
);

/// The newest event of a session.
pub const SELECT_LATEST_EVENT: &str = "SELECT seq, type, (data::json -> 'step')::text \
     FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1";

/// What a key produced on a session.
pub const SELECT_BY_KEY: &str = "SELECT k.request_digest, e.seq, k.rev, e.run_id \
     FROM idempotency_keys k JOIN events e ON e.event_id = k.event_id \
     WHERE k.key_sha256 = $1 AND k.session_id = $2";

/// The session a create with this key produced. The key's rows are found
/// by the primary key and each one's event by its id (a subquery per row,
/// which the planner cannot turn into a join): a join lets a planner
/// without fresh statistics scan every `created` event instead (≈ 30 ms a
/// create on a bench's ledger).
pub const SELECT_CREATED_BY_KEY: &str = "SELECT k.session_id, k.request_digest \
     FROM idempotency_keys k WHERE k.key_sha256 = $1 \
     AND (SELECT e.seq FROM events e WHERE e.event_id = k.event_id) = 0 LIMIT 1";

/// Serializes creates that carry the same idempotency key until COMMIT (a
/// transaction-level advisory lock, which takes no transaction id): the
/// second then sees the first's key, as SQLite's single writer does. The
/// class is `LGBK` (0x4C47424B); the migration lock is a one-key lock,
/// another key space.
pub const LOCK_CREATE_KEY: &str = "SELECT pg_advisory_xact_lock(1279738443, hashtext($1))";

/// Maps a row of [`event_columns`] from column `base` on.
pub fn map_event(row: &Row, base: usize) -> Result<Event> {
    Ok(Event {
        event_id: col(row, base)?,
        session_id: col(row, base + 1)?,
        seq: col(row, base + 2)?,
        event_type: col(row, base + 3)?,
        at_ms: col(row, base + 4)?,
        actor_type: col::<String>(row, base + 5)?
            .parse()
            .unwrap_or(ActorType::Lib),
        detail: col(row, base + 6)?,
        data: col::<Option<String>>(row, base + 7)?.map(json_of_text),
        run_id: col(row, base + 8)?,
    })
}

/// Appends an event with its chain link and key: `(event_id, seq)`.
/// What the next event of a session needs: its seq, its time (the
/// session's `updated_at_ms`) and the chain's last hash.
#[derive(Debug, Clone, Copy)]
pub struct NextEvent {
    /// max(seq) + 1, or 0.
    pub seq: i64,
    /// The session's `updated_at_ms`.
    pub at_ms: i64,
    /// The last event's hash (32 zero bytes before the first).
    pub prev: [u8; 32],
}

/// Appends one event with its chain link; `(event_id, seq)`. The next
/// seq, time and last hash come from what the statement before left
/// ([`PgTx::take_next_event`]: the guarded UPDATE, or this session's last
/// insert), else from one read under the session's row lock.
pub fn insert_event(tx: &mut PgTx<'_>, e: &NewEvent<'_>) -> Result<(i64, i64)> {
    let NextEvent { seq, at_ms, prev } = match tx.take_next_event(e.session_id) {
        Some(n) => n,
        None => {
            let next = tx
                .row(SELECT_NEXT_EVENT, &[(&e.session_id, Type::TEXT)])?
                .ok_or_else(|| Error::internal("database error: Query returned no rows"))?;
            NextEvent {
                seq: col(&next, 0)?,
                at_ms: col(&next, 1)?,
                prev: chain_link(col::<Option<&[u8]>>(&next, 2)?),
            }
        }
    };
    let actor = e.actor_type.as_str();
    let hash = e.hash(&prev, seq, at_ms);
    let (prev, hash) = (&prev[..], &hash[..]);
    let key = e.idempotency.map(|(k, d)| (key_sha256(k), d));
    let mut p: Vec<super::Param<'_>> = vec![
        (&e.session_id, Type::TEXT),
        (&seq, Type::INT8),
        (&e.event_type, Type::TEXT),
        (&at_ms, Type::INT8),
        (&actor, Type::TEXT),
        (&e.detail, Type::TEXT),
        (&e.data, Type::TEXT),
        (&e.run_id, Type::TEXT),
        (&prev, Type::BYTEA),
        (&hash, Type::BYTEA),
    ];
    let sql = match &key {
        Some((k, d)) => {
            p.push((k, Type::TEXT));
            p.push((d, Type::TEXT));
            INSERT_EVENT_KEYED
        }
        None => INSERT_EVENT,
    };
    let rows = match tx.try_rows(sql, &p) {
        Ok(rows) => rows,
        Err(err) if is_unique_violation(&err, KEY_PRIMARY_KEY) => {
            // Another attempt with this key committed after this one looked
            // for it (SQLite's writer would have seen it): run the whole
            // transaction again, which then replays.
            tx.note(Failure::Retry);
            return Err(Error::Busy { timeout_ms: 0 });
        }
        Err(err) => return Err(tx.fail(&err)),
    };
    let event_id = match rows.first() {
        Some(r) => col(r, 0)?,
        None => return Err(Error::internal("database error: Query returned no rows")),
    };
    // Nothing else wrote since: the next event of this session follows it.
    let mut next_prev = [0u8; 32];
    next_prev.copy_from_slice(hash);
    tx.keep_next_event(
        e.session_id,
        NextEvent {
            seq: seq + 1,
            at_ms,
            prev: next_prev,
        },
    );
    Ok((event_id, seq))
}

/// The session's events with `after_seq < seq <= after_seq + limit`.
pub fn select_events(tx: &mut PgTx<'_>, id: &str, after: i64, limit: i64) -> Result<Vec<Event>> {
    // SQLite computes the bound in floating point past i64::MAX: the same
    // as saturating here.
    let hi = after.saturating_add(limit);
    tx.rows(
        SELECT_EVENTS,
        &[(&id, Type::TEXT), (&after, Type::INT8), (&hi, Type::INT8)],
    )?
    .iter()
    .map(|r| map_event(r, 0))
    .collect()
}

/// The session's newest event.
pub fn latest_event(tx: &mut PgTx<'_>, id: &str) -> Result<Option<LatestEvent>> {
    let Some(r) = tx.row(SELECT_LATEST_EVENT, &[(&id, Type::TEXT)])? else {
        return Ok(None);
    };
    Ok(Some(LatestEvent {
        seq: col(&r, 0)?,
        event_type: col(&r, 1)?,
        step: extracted_text(col(&r, 2)?),
    }))
}

/// What `key` produced on `session_id`.
pub fn find_key(tx: &mut PgTx<'_>, key: &str, session_id: &str) -> Result<Option<KeyHit>> {
    let k = key_sha256(key);
    let Some(r) = tx.row(
        SELECT_BY_KEY,
        &[(&k, Type::TEXT), (&session_id, Type::TEXT)],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(KeyHit {
        digest: col(&r, 0)?,
        seq: col(&r, 1)?,
        rev: col(&r, 2)?,
        run_id: col(&r, 3)?,
    }))
}

/// The session (and digest) a create with `key` produced; in a write
/// transaction, after [`LOCK_CREATE_KEY`].
pub fn find_created_by_key(tx: &mut PgTx<'_>, key: &str) -> Result<Option<(String, String)>> {
    let k = key_sha256(key);
    if tx.is_write() {
        tx.rows(LOCK_CREATE_KEY, &[(&k, Type::TEXT)])?;
    }
    match tx.row(SELECT_CREATED_BY_KEY, &[(&k, Type::TEXT)])? {
        Some(r) => Ok(Some((col(&r, 0)?, col(&r, 1)?))),
        None => Ok(None),
    }
}
