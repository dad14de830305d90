//! SQL for the global feed (PostgreSQL; SQLite's is `sqlite/sql/feed.rs`;
//! `docs/postgres.md`, "The feed").
//!
//! An event id is drawn from a sequence before COMMIT, so ids become
//! visible out of order; the feed is ordered by `(tx_id, event_id)` — the
//! inserting transaction's id first — and read only below the snapshot's
//! `pg_snapshot_xmin`: every transaction below it has ended, so no event
//! can still appear there, and every transaction still to write one has a
//! larger id. A position is `FeedPos { tx, event_id }`; `xid8` has no cast
//! to `bigint`, so it travels as text (`tx_id::text::bigint`,
//! `$1::text::xid8`).
//!
//! Pages are read in chunks with `LIMIT`, each resuming after the last row
//! read, so a filter that keeps little never holds more than one chunk.

use super::super::tx::PgTx;
use super::events::{event_columns, map_event};
use super::{col, int};
use crate::error::Result;
use crate::model::Event;
use crate::store::{EndedAbove, FeedPos, FeedScan, FeedStart};
use postgres::types::Type;

/// The horizon, then every event after a position and below it, in feed
/// order (index `events_by_tx`): one row of the horizon and NULLs when
/// there is none, so a page and the horizon that bounds it come from one
/// statement, one snapshot. $1 tx, $2 event id, $3 rows.
pub const FEED_ALL: &str = concat!(
    "SELECT h.x::text::bigint, e.tx_id::text::bigint, ",
    event_columns!(),
    " FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS x) h \
     LEFT JOIN LATERAL (SELECT * FROM events e \
     WHERE (e.tx_id, e.event_id) > ($1::text::xid8, $2) AND e.tx_id < h.x \
     ORDER BY e.tx_id, e.event_id LIMIT $3) e ON true \
     ORDER BY e.tx_id, e.event_id"
);

/// One session's events after a position and below the horizon, by seq
/// (index `events_by_session_seq`; within a session the feed order is the
/// seq order, `tx` module docs). $1 session, $2 after seq, $3 tx,
/// $4 event id, $5 rows.
pub const FEED_SESSION: &str = concat!(
    "SELECT e.tx_id::text::bigint, ",
    event_columns!(),
    " FROM events e WHERE e.session_id = $1 AND e.seq > $2 \
     AND (e.tx_id, e.event_id) > ($3::text::xid8, $4) \
     AND e.tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
     ORDER BY e.seq LIMIT $5"
);

/// The horizon: the oldest transaction still running when the snapshot
/// was taken (the next id when none is).
pub const HORIZON: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint";

/// Now in the feed: the horizon, the first unassigned transaction id and
/// the transactions running, all of one snapshot.
pub const START: &str = "SELECT pg_snapshot_xmin(s.s)::text::bigint, \
     pg_snapshot_xmax(s.s)::text::bigint, \
     ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s.s) x) \
     FROM (SELECT pg_current_snapshot() AS s) s";

/// The position of one event.
pub const POS_OF_EVENT: &str = "SELECT e.tx_id::text::bigint FROM events e WHERE e.event_id = $1";

/// Rows read per chunk once a filter has dropped some.
const CHUNK: usize = 256;

/// Up to `limit` events after `after` that `keep` accepts, at most
/// `max_scan` examined; the position of the last examined (`after` when
/// none was) and whether the scan reached the end of what is visible —
/// exactly as SQLite's `feed::scan_all` stops.
pub fn scan_all(
    tx: &mut PgTx<'_>,
    after: FeedPos,
    limit: usize,
    max_scan: usize,
    keep: &mut dyn FnMut(&Event) -> bool,
) -> Result<FeedScan> {
    let mut out = Vec::new();
    let mut last = after;
    let mut scanned = 0usize;
    let mut chunk = limit;
    while out.len() < limit && scanned < max_scan {
        let want = chunk.min(max_scan - scanned).max(1);
        let tx_text = last.tx.to_string();
        let rows = tx.rows(
            FEED_ALL,
            &[
                (&tx_text, Type::TEXT),
                (&last.event_id, Type::INT8),
                (&int(want), Type::INT8),
            ],
        )?;
        // The first row holds the horizon; a NULL tx_id means no event.
        if let Some(first) = rows.first() {
            tx.keep_horizon(FeedPos {
                tx: col(first, 0)?,
                event_id: 0,
            });
        }
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            if col::<Option<i64>>(&row, 1)?.is_some() {
                events.push(row);
            }
        }
        let rows = events;
        let n = rows.len();
        for row in &rows {
            let e = map_event(row, 2)?;
            last = FeedPos {
                tx: col(row, 1)?,
                event_id: e.event_id,
            };
            scanned += 1;
            if keep(&e) {
                out.push((last, e));
            }
            if out.len() >= limit || scanned >= max_scan {
                return Ok((out, last, false));
            }
        }
        if n < want {
            return Ok((out, last, true));
        }
        chunk = (limit - out.len()).max(CHUNK);
    }
    Ok((out, last, false))
}

/// Up to `limit` events of one session after `after` that `keep` accepts,
/// in order.
pub fn scan_session(
    tx: &mut PgTx<'_>,
    id: &str,
    after: FeedPos,
    limit: usize,
    keep: &mut dyn FnMut(&Event) -> bool,
) -> Result<Vec<(FeedPos, Event)>> {
    let mut out = Vec::new();
    let mut seq = -1i64;
    let tx_text = after.tx.to_string();
    let mut chunk = limit;
    while out.len() < limit {
        let want = chunk.max(1);
        let rows = tx.rows(
            FEED_SESSION,
            &[
                (&id, Type::TEXT),
                (&seq, Type::INT8),
                (&tx_text, Type::TEXT),
                (&after.event_id, Type::INT8),
                (&int(want), Type::INT8),
            ],
        )?;
        let n = rows.len();
        for row in &rows {
            let e = map_event(row, 1)?;
            seq = e.seq;
            if keep(&e) {
                let pos = FeedPos {
                    tx: col(row, 0)?,
                    event_id: e.event_id,
                };
                out.push((pos, e));
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
        if n < want {
            break;
        }
        chunk = (limit - out.len()).max(CHUNK);
    }
    Ok(out)
}

/// The feed's horizon: `(pg_snapshot_xmin, 0)`; the one the statement
/// just run read, if it was a feed scan (no round trip).
pub fn horizon(tx: &mut PgTx<'_>) -> Result<FeedPos> {
    if let Some(h) = tx.take_horizon() {
        return Ok(h);
    }
    let row = tx.one(HORIZON, &[])?;
    Ok(FeedPos {
        tx: col(&row, 0)?,
        event_id: 0,
    })
}

/// Now in the feed: its horizon, and which transactions at or above it
/// had ended ([`FeedStart`]), from this transaction's snapshot.
pub fn start(tx: &mut PgTx<'_>) -> Result<FeedStart> {
    let row = tx.one(START, &[])?;
    let running: Vec<i64> = row
        .try_get(2)
        .map_err(|e| crate::error::Error::internal(format!("the feed start: {e}")))?;
    Ok(FeedStart {
        pos: FeedPos {
            tx: col(&row, 0)?,
            event_id: 0,
        },
        ended: Some(EndedAbove {
            xmax: col(&row, 1)?,
            running,
        }),
    })
}

/// The position of event `event_id`, if it exists.
pub fn pos_of_event(tx: &mut PgTx<'_>, event_id: i64) -> Result<Option<FeedPos>> {
    Ok(match tx.row(POS_OF_EVENT, &[(&event_id, Type::INT8)])? {
        Some(r) => Some(FeedPos {
            tx: col(&r, 0)?,
            event_id,
        }),
        None => None,
    })
}
