//! SQL for the global event feed: events in `event_id` order across
//! sessions, and the change counter a follower waits on.

use crate::model::Event;
use crate::store::sqlite::sql::events::map_event;
use rusqlite::{params, Connection};

/// Every event after a cursor, in `event_id` (rowid) order. No `LIMIT`: the
/// caller stops stepping once it has enough, and a rowid range scan costs
/// nothing for the rows it never reaches.
const FEED_ALL: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id FROM events WHERE event_id > ?1 ORDER BY event_id";

/// One session's events after a cursor. Within a session `event_id` rises
/// with `seq`, so the `(session_id, seq)` index yields them in feed order.
const FEED_SESSION: &str = "SELECT event_id, session_id, seq, type, at_ms, actor_type, detail, \
     data, run_id FROM events WHERE session_id = ?1 AND event_id > ?2 ORDER BY seq";

/// Up to `limit` events with `event_id > after` that `keep` accepts, the
/// last event_id examined (`after` when none was), and whether the scan
/// reached the end of the table. With `max_scan`, stops after examining that
/// many rows, so a filter that matches little cannot make one call read the
/// whole table.
pub fn scan_all(
    conn: &Connection,
    after: i64,
    limit: usize,
    max_scan: usize,
    mut keep: impl FnMut(&Event) -> bool,
) -> rusqlite::Result<(Vec<Event>, i64, bool)> {
    let mut stmt = conn.prepare_cached(FEED_ALL)?;
    let mut rows = stmt.query(params![after])?;
    let mut out = Vec::new();
    let mut last = after;
    let mut scanned = 0usize;
    while out.len() < limit && scanned < max_scan {
        let Some(row) = rows.next()? else {
            return Ok((out, last, true));
        };
        let e = map_event(row)?;
        last = e.event_id;
        scanned += 1;
        if keep(&e) {
            out.push(e);
        }
    }
    Ok((out, last, false))
}

/// Up to `limit` events of one session with `event_id > after`, in order.
pub fn scan_session(
    conn: &Connection,
    session_id: &str,
    after: i64,
    limit: usize,
    mut keep: impl FnMut(&Event) -> bool,
) -> rusqlite::Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(FEED_SESSION)?;
    let mut rows = stmt.query(params![session_id, after])?;
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(row) = rows.next()? else { break };
        let e = map_event(row)?;
        if keep(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// `PRAGMA data_version`: changes whenever another connection commits to
/// the file. Reading it takes no lasting lock and opens no transaction.
pub fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))
}

/// The largest `event_id` (0 when there are no events).
pub fn newest_event_id(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT coalesce(max(event_id), 0) FROM events")?
        .query_row([], |r| r.get(0))
}
