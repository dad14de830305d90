//! `show`'s read as one statement (PostgreSQL; docs/postgres.md,
//! "Reads"): the session and everything its view holds, in one snapshot.
//! SQLite composes the same rows from its reads one by one
//! (`store::Tx::show_rows`' default).

use super::super::tx::PgTx;
use super::col;
use super::events::{event_columns, map_event};
use super::sessions::{map_session, session_select};
use super::workflow::{gate_at, lease_at};
use crate::error::{Error, Result};
use crate::store::rows::PurgedChildRow;
use crate::store::{ParentRow, ShowRows};
use postgres::types::Type;

/// `show`'s rows of one session as one statement
/// ([`crate::store::Tx::show_rows`]; docs/postgres.md, "Reads"): one row per
/// event, by seq, its columns last ([`EVENT_COLUMN`], as
/// `events::SELECT_EVENTS`); the first row, the `created` event's (seq 0,
/// which every session has), also carries the whole session as
/// `sessions::SELECT_SESSION` reads it (0–32), its parent's state (33:
/// `present`, `purged`, `missing`, or NULL without a parent), its newest
/// pending gate (34–43, the columns of `workflow::SELECT_PENDING_GATE`
/// after the id), its lease row (44–49, as `workflow::SELECT_LEASE`), its
/// children's statuses in creation order (50) and, per purge, the children
/// it removed (51–53: purge ids, counts, times; as
/// `retention::purged_children`). Events come as rows, not an array, so no
/// session's timeline meets a value's size limit.
pub const SELECT_SHOW: &str = concat!(
    // MATERIALIZED: the session's part is computed once, not once per
    // event the join meets (PostgreSQL 12+).
    "WITH x AS MATERIALIZED (",
    session_select!(
        ", CASE WHEN s.parent_session_id IS NULL THEN NULL \
           WHEN EXISTS (SELECT 1 FROM sessions ps WHERE ps.session_id = s.parent_session_id) \
             THEN 'present' \
           WHEN EXISTS (SELECT 1 FROM tombstones pt WHERE pt.session_id = s.parent_session_id) \
             THEN 'purged' \
           ELSE 'missing' END, \
         g.name, g.round, g.kind, g.status, g.opened_seq, g.opened_at_ms, g.decided_seq, \
         g.decided_at_ms, g.reason, g.outcome, \
         l.token_sha256, l.pid, l.hostname, l.acquired_at_ms, l.expires_at_ms, l.acquired_seq, \
         ch.statuses, pc.ids, pc.counts, pc.ats",
        "sessions s \
         LEFT JOIN LATERAL (SELECT gt.name, gt.round, gt.kind, gt.status, gt.opened_seq, \
           gt.opened_at_ms, gt.decided_seq, gt.decided_at_ms, gt.reason, gt.outcome \
           FROM session_gates gt WHERE gt.session_id = s.session_id AND gt.status = 'pending' \
           ORDER BY gt.gate_id DESC LIMIT 1) g ON true \
         LEFT JOIN session_leases l ON l.session_id = s.session_id \
         LEFT JOIN LATERAL (SELECT array_agg(k.status ORDER BY k.insert_seq) AS statuses \
           FROM sessions k WHERE k.parent_session_id = s.session_id) ch ON true \
         LEFT JOIN LATERAL (SELECT array_agg(q.purge_id ORDER BY q.purge_id) AS ids, \
           array_agg(q.n ORDER BY q.purge_id) AS counts, \
           array_agg(q.at ORDER BY q.purge_id) AS ats \
           FROM (SELECT t.purge_id, count(*) AS n, max(t.purged_at_ms) AS at FROM tombstones t \
             WHERE t.parent_session_id = s.session_id \
             AND t.insert_seq = (SELECT max(o.insert_seq) FROM tombstones o \
               WHERE o.session_id = t.session_id) \
             AND NOT EXISTS (SELECT 1 FROM sessions xs WHERE xs.session_id = t.session_id) \
             GROUP BY t.purge_id) q) pc ON true"
    ),
    " WHERE s.session_id = $1) SELECT x.*, ",
    event_columns!(),
    " FROM events e LEFT JOIN x ON e.seq = 0 WHERE e.session_id = $1 ORDER BY e.seq"
);

/// The column of [`SELECT_SHOW`]'s rows where the event's columns begin.
const EVENT_COLUMN: usize = 54;

/// [`SELECT_SHOW`]'s rows of session `id`, or `None`.
///
/// # Errors
/// STORE_CORRUPT when the session's first event is not seq 0.
pub fn show_rows(tx: &mut PgTx<'_>, id: &str) -> Result<Option<ShowRows>> {
    let rows = tx.rows(SELECT_SHOW, &[(&id, Type::TEXT)])?;
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    if col::<Option<String>>(r, 0)?.is_none() {
        // The session's row rides on its seq 0 event, which every session
        // has (the chain starts there).
        let seq: i64 = col(r, EVENT_COLUMN + 2)?;
        return Err(Error::Corrupt {
            path: String::new(),
            reason: format!("session {id}'s first event is seq {seq}, not 0"),
        });
    }
    let (session, _, _) = map_session(r)?;
    let events = rows
        .iter()
        .map(|row| map_event(row, EVENT_COLUMN))
        .collect::<Result<Vec<_>>>()?;
    let list =
        |i: usize| -> Result<Vec<i64>> { Ok(col::<Option<Vec<i64>>>(r, i)?.unwrap_or_default()) };
    let parent = match col::<Option<String>>(r, 33)?.as_deref() {
        None => None,
        Some("present") => Some(ParentRow::Present),
        Some("purged") => Some(ParentRow::Purged),
        Some(_) => Some(ParentRow::Missing),
    };
    let pending_gate = match col::<Option<String>>(r, 34)? {
        None => None,
        Some(_) => Some(gate_at(r, 34)?),
    };
    let lease = lease_at(r, 44)?;
    let child_statuses = col::<Option<Vec<String>>>(r, 50)?.unwrap_or_default();
    let (pids, counts, pats) = (list(51)?, list(52)?, list(53)?);
    let purged_children = pids
        .into_iter()
        .zip(counts)
        .zip(pats)
        .map(|((purge_id, sessions), purged_at_ms)| PurgedChildRow {
            parent_session_id: id.to_owned(),
            purge_id,
            sessions,
            purged_at_ms,
        })
        .collect();
    Ok(Some(ShowRows {
        session,
        events,
        parent,
        pending_gate,
        lease,
        child_statuses,
        purged_children,
    }))
}
