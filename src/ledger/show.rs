//! Session reads: `get`, `show` (session + events + resolved references,
//! one snapshot), one session's events by seq, and `list` with its keyset
//! cursor. Rule: docs/design.md, "CLI".

use super::request::{opt_name, parse_session_id};
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{Event, Session, SessionStatus};
use crate::resolve::{config_path, Resolvers};
use crate::store::rows::{ListQuery, Order};
use crate::store::{ParentRow, ShowRows};
use serde::Serialize;

pub use crate::resolve::ResolvedState;

/// One entry of `show`'s `resolved` block.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    /// `session`, `plan`, `operation` or `deployment`.
    pub kind: &'static str,
    /// The referenced id.
    pub id: String,
    /// How it resolved.
    pub state: ResolvedState,
}

/// `show`: the session, its events in seq order, and its resolved references.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// The session.
    pub session: Session,
    /// All its events, by seq.
    pub events: Vec<Event>,
    /// Each referenced id and its state.
    pub resolved: Vec<Resolved>,
    /// Direct children by status (docs/design.md, "Hierarchies").
    pub children: super::tree::ChildCounts,
    /// Direct children that purges removed, by purge (docs/design.md, "Retention"); not in
    /// `children`.
    pub purged_children: super::tree::PurgedChildren,
    /// The pending gate a live session waits on, or null (docs/design.md, "Gates").
    pub blocking_gate: Option<crate::model::Gate>,
    /// The session's lease without its token, or null (docs/design.md, "Leases").
    pub lease: Option<super::leases::LeaseInfo>,
}

/// A `list` page.
#[derive(Debug, Clone, Serialize)]
pub struct SessionPage {
    /// The sessions, in the requested order.
    pub sessions: Vec<Session>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of one session's events.
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    /// Events by seq.
    pub events: Vec<Event>,
    /// Pass as `after_seq` for the next page; null on the last page.
    pub next_after_seq: Option<i64>,
}

/// A `list` request. Rule: docs/design.md, "CLI".
#[derive(Debug, Clone, Default)]
pub struct ListSessions {
    /// Any of these statuses.
    pub statuses: Vec<SessionStatus>,
    /// App name.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Parent session id.
    pub parent: Option<String>,
    /// Inclusive lower bound on the order's timestamp (created_at_ms, or
    /// updated_at_ms with `order_updated`), ms.
    pub since_ms: Option<i64>,
    /// Exclusive upper bound on the same timestamp, ms.
    pub until_ms: Option<i64>,
    /// Sort by `updated_at_ms` instead of creation. A session updated during
    /// a cursor walk moves to the top and may be missed by that walk.
    pub order_updated: bool,
    /// 1..=1000; default 20.
    pub limit: Option<i64>,
    /// An opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Default page size of `list`.
pub const LIST_LIMIT_DEFAULT: i64 = 20;
/// Largest page size of `list` and `events`.
pub const LIST_LIMIT_MAX: i64 = 1000;

impl Ledger {
    /// The whole session, or SESSION_NOT_FOUND.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn get_session(&self, id: &str) -> Result<Session> {
        parse_session_id(id)?;
        self.read_single(|tx| {
            tx.find_session(id)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// `show`: the session, all its events by seq, and `resolved`, read in
    /// one snapshot.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn show_session(&self, id: &str) -> Result<SessionView> {
        parse_session_id(id)?;
        // One snapshot: on a server, one statement (docs/postgres.md, "Reads").
        self.read_single(|tx| {
            tx.show_rows(id)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })
        })
        .map(|mut rows| {
            let wf = super::tree::workflow_view(&mut rows, self.now_ms());
            let ShowRows {
                session,
                events,
                parent,
                ..
            } = rows;
            let mut resolved = Vec::new();
            if let (Some(p), Some(state)) = (&session.parent_session_id, parent) {
                resolved.push(Resolved {
                    kind: "session",
                    id: p.clone(),
                    state: match state {
                        ParentRow::Present => ResolvedState::Present,
                        ParentRow::Purged => ResolvedState::Purged,
                        ParentRow::Missing => ResolvedState::Missing,
                    },
                });
            }
            for (kind, ids) in [
                ("plan", &session.plan_ids),
                ("operation", &session.operation_ids),
                ("deployment", &session.deployment_ids),
            ] {
                for r in ids {
                    resolved.push(Resolved {
                        kind,
                        id: r.clone(),
                        state: ResolvedState::Unknown,
                    });
                }
            }
            SessionView {
                session,
                events,
                resolved,
                children: wf.children,
                purged_children: wf.purged_children,
                blocking_gate: wf.blocking_gate,
                lease: wf.lease,
            }
        })
        .map_err(|e| self.fill_path(e))
        .and_then(|mut view| {
            // External references: after the snapshot has ended, so no
            // read transaction waits on a resolver.
            let external: Vec<usize> = (0..view.resolved.len())
                .filter(|i| view.resolved[*i].kind != "session")
                .collect();
            if external.is_empty() {
                return Ok(view);
            }
            let resolvers = Resolvers::load(&config_path(self.store.path()))?;
            if resolvers.by_kind.is_empty() {
                return Ok(view);
            }
            let refs: Vec<(&str, &str)> = external
                .iter()
                .map(|i| (view.resolved[*i].kind, view.resolved[*i].id.as_str()))
                .collect();
            let states = resolvers.resolve(&refs);
            for (i, st) in external.into_iter().zip(states) {
                view.resolved[i].state = st;
            }
            Ok(view)
        })
    }

    /// A page of a session's events with seq > `after_seq`, by seq.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id, limit outside 1..=1000, negative
    /// after_seq), SESSION_NOT_FOUND.
    pub fn session_events(
        &self,
        id: &str,
        after_seq: Option<i64>,
        limit: Option<i64>,
    ) -> Result<EventPage> {
        parse_session_id(id)?;
        let limit = check_limit(limit, LIST_LIMIT_MAX)?;
        let after = after_seq.unwrap_or(-1);
        if after < -1 {
            return Err(Error::invalid(
                "after_seq",
                "must be -1 or more (-1, the default, starts at the first event)",
            ));
        }
        self.read(|tx| {
            if !tx.session_exists(id)? {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            }
            let mut events = tx.select_events(id, after, limit + 1)?;
            let more = events.len() > usize::try_from(limit).unwrap_or(usize::MAX);
            events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            let next_after_seq = if more {
                events.last().map(|e| e.seq)
            } else {
                None
            };
            Ok(EventPage {
                events,
                next_after_seq,
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// A page of sessions. Default order: newest created first, on an
    /// immutable key, so a cursor walk returns every session that existed
    /// when it began exactly once, whatever is inserted or updated meanwhile.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (limit outside 1..=1000, malformed cursor or names).
    pub fn list_sessions(&self, req: &ListSessions) -> Result<SessionPage> {
        let q = list_query(req)?;
        self.read_single(|tx| {
            let (sessions, next) = tx.list_sessions(&q)?;
            Ok(SessionPage {
                sessions,
                next_cursor: next.map(|k| encode_cursor(q.order, k)),
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The query plan of a listing (diagnostics; used by the index tests).
    ///
    /// # Errors
    /// As [`Ledger::list_sessions`].
    pub fn explain_list(&self, req: &ListSessions) -> Result<Vec<String>> {
        let q = list_query(req)?;
        self.explain_list_query(&q)
    }
}

/// Validates a listing request and turns it into the store's query.
fn list_query(req: &ListSessions) -> Result<ListQuery> {
    let limit = check_limit(req.limit, LIST_LIMIT_MAX)?;
    opt_name("app", &req.app)?;
    opt_name("agent_id", &req.agent_id)?;
    opt_name("tag", &req.tag)?;
    if let Some(p) = &req.parent {
        parse_session_id(p).map_err(|e| Error::invalid("parent", e.to_string()))?;
    }
    let order = if req.order_updated {
        Order::Updated
    } else {
        Order::Created
    };
    let after = match &req.cursor {
        Some(c) => Some(decode_cursor(c, order)?),
        None => None,
    };
    let mut statuses: Vec<String> = Vec::new();
    for s in &req.statuses {
        if !statuses.iter().any(|x| x == s.as_str()) {
            statuses.push(s.as_str().to_owned());
        }
    }
    Ok(ListQuery {
        statuses,
        app: req.app.clone(),
        agent_id: req.agent_id.clone(),
        tag: req.tag.clone(),
        parent: req.parent.clone(),
        since_ms: req.since_ms,
        until_ms: req.until_ms,
        order,
        limit,
        after,
    })
}

fn check_limit(limit: Option<i64>, max: i64) -> Result<i64> {
    let l = limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if (1..=max).contains(&l) {
        Ok(l)
    } else {
        Err(Error::invalid("limit", format!("must be from 1 to {max}")))
    }
}

const CURSOR_VERSION: &str = "lb1";

fn encode_cursor(order: Order, (ts, seq): (i64, i64)) -> String {
    let o = match order {
        Order::Created => "c",
        Order::Updated => "u",
    };
    hex::encode(format!("{CURSOR_VERSION}|{o}|{ts}|{seq}"))
}

fn decode_cursor(c: &str, order: Order) -> Result<(i64, i64)> {
    let bad = || Error::invalid("cursor", "is not a cursor returned by `session list`");
    if c.len() > 200 {
        return Err(bad());
    }
    let bytes = hex::decode(c).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let parts: Vec<&str> = text.split('|').collect();
    let [ver, o, ts, seq] = parts[..] else {
        return Err(bad());
    };
    if ver != CURSOR_VERSION {
        return Err(bad());
    }
    let want = match order {
        Order::Created => "c",
        Order::Updated => "u",
    };
    if o != want {
        return Err(Error::invalid(
            "cursor",
            "was issued for a different --order; restart the walk without --cursor",
        ));
    }
    Ok((
        ts.parse().map_err(|_| bad())?,
        seq.parse().map_err(|_| bad())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cursor_round_trip(ts in any::<i64>(), seq in any::<i64>(), upd in any::<bool>()) {
            let order = if upd { Order::Updated } else { Order::Created };
            let c = encode_cursor(order, (ts, seq));
            prop_assert_eq!(decode_cursor(&c, order).unwrap(), (ts, seq));
        }
    }

    #[test]
    fn cursor_rejects_garbage_and_the_other_order() {
        assert!(decode_cursor("zz", Order::Created).is_err());
        let c = encode_cursor(Order::Updated, (1, 2));
        assert!(decode_cursor(&c, Order::Created).is_err());
    }
}
