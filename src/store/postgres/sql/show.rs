//! `show`'s read as one statement (PostgreSQL; docs/postgres.md,
//! "Reads"): the session and everything its view holds, in one snapshot.
//! SQLite composes the same rows from its reads one by one
//! (`store::Tx::show_rows`' default).

use super::super::tx::PgTx;
use super::col;
use super::sessions::{map_session, session_select};
use super::workflow::{gate_at, lease_at};
use crate::error::{Error, Result};
use crate::model::{ActorType, Event};
use crate::store::codec::json_of_text;
use crate::store::rows::PurgedChildRow;
use crate::store::{ParentRow, ShowRows};
use postgres::types::Type;

/// `show`'s rows of one session as one statement
/// ([`crate::store::Tx::show_rows`]; docs/postgres.md, "Reads"): the whole
/// session as `sessions::SELECT_SESSION` reads it, then its events' columns as
/// arrays by seq (33–40: ids, seqs, types, times, actor types, details,
/// data, run ids), its parent's state (41: `present`, `purged`, `missing`,
/// or NULL without a parent), its newest pending gate (42–51, the columns
/// of `workflow::SELECT_PENDING_GATE` after the id), its lease row (52–57,
/// as `workflow::SELECT_LEASE`), its children's statuses in creation order
/// (58) and, per purge, the children it removed (59–61: purge ids, counts,
/// times; as `retention::purged_children`).
pub const SELECT_SHOW: &str = concat!(
    session_select!(
        ", ev.ids, ev.seqs, ev.types, ev.ats, ev.actors, ev.details, ev.datas, ev.runs, \
         CASE WHEN s.parent_session_id IS NULL THEN NULL \
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
         LEFT JOIN LATERAL (SELECT array_agg(e.event_id ORDER BY e.seq) AS ids, \
           array_agg(e.seq ORDER BY e.seq) AS seqs, array_agg(e.type ORDER BY e.seq) AS types, \
           array_agg(e.at_ms ORDER BY e.seq) AS ats, \
           array_agg(e.actor_type ORDER BY e.seq) AS actors, \
           array_agg(e.detail ORDER BY e.seq) AS details, \
           array_agg(e.data ORDER BY e.seq) AS datas, \
           array_agg(e.run_id ORDER BY e.seq) AS runs \
           FROM events e WHERE e.session_id = s.session_id) ev ON true \
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
    " WHERE s.session_id = $1"
);

/// [`SELECT_SHOW`]'s rows of session `id`, or `None`.
pub fn show_rows(tx: &mut PgTx<'_>, id: &str) -> Result<Option<ShowRows>> {
    let Some(r) = tx.row(SELECT_SHOW, &[(&id, Type::TEXT)])? else {
        return Ok(None);
    };
    let (session, _, _) = map_session(&r)?;
    let list =
        |i: usize| -> Result<Vec<i64>> { Ok(col::<Option<Vec<i64>>>(&r, i)?.unwrap_or_default()) };
    let texts = |i: usize| -> Result<Vec<Option<String>>> {
        Ok(col::<Option<Vec<Option<String>>>>(&r, i)?.unwrap_or_default())
    };
    let (ids, seqs, ats) = (list(33)?, list(34)?, list(36)?);
    let (types, actors, details, datas, runs) =
        (texts(35)?, texts(37)?, texts(38)?, texts(39)?, texts(40)?);
    let n = ids.len();
    if [
        seqs.len(),
        ats.len(),
        types.len(),
        actors.len(),
        details.len(),
        datas.len(),
        runs.len(),
    ]
    .iter()
    .any(|l| *l != n)
    {
        return Err(Error::internal(
            "a session's events came back in arrays of other lengths",
        ));
    }
    let mut events = Vec::with_capacity(n);
    for (i, ((((((event_id, seq), at_ms), ty), actor), detail), (data, run_id))) in ids
        .into_iter()
        .zip(seqs)
        .zip(ats)
        .zip(types)
        .zip(actors)
        .zip(details)
        .zip(datas.into_iter().zip(runs))
        .enumerate()
    {
        let (Some(event_type), Some(actor)) = (ty, actor) else {
            return Err(Error::internal(format!(
                "event {i} of a session has no type or actor"
            )));
        };
        events.push(Event {
            event_id,
            session_id: id.to_owned(),
            seq,
            event_type,
            at_ms,
            actor_type: actor.parse().unwrap_or(ActorType::Lib),
            detail,
            data: data.map(json_of_text),
            run_id,
        });
    }
    let parent = match col::<Option<String>>(&r, 41)?.as_deref() {
        None => None,
        Some("present") => Some(ParentRow::Present),
        Some("purged") => Some(ParentRow::Purged),
        Some(_) => Some(ParentRow::Missing),
    };
    let pending_gate = match col::<Option<String>>(&r, 42)? {
        None => None,
        Some(_) => Some(gate_at(&r, 42)?),
    };
    let lease = lease_at(&r, 52)?;
    let child_statuses = col::<Option<Vec<String>>>(&r, 58)?.unwrap_or_default();
    let (pids, counts, pats) = (list(59)?, list(60)?, list(61)?);
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
