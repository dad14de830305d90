//! SQL for `session list` (PostgreSQL; SQLite's is `sqlite/sql/list.rs`): fixed
//! fragments, every value a `$N` parameter, one statement per page.
//!
//! The order is `ORDER BY ts DESC, insert_seq DESC` (`ts` the created or
//! updated time), which the list indexes `(…, created_at_ms, insert_seq)`
//! and `(updated_at_ms, insert_seq)` serve in order; the cursor is the row
//! comparison `(ts, insert_seq) < ($a, $b)`, SQLite's
//! `ts <= a AND (ts < a OR seq < b)`.
//!
//! A tag filter yields the same rows as SQLite's, by the same walks: a tag
//! alone in created order is driven from `session_tags` in its key order
//! (its rows carry their session's creation time and key), so a rare tag
//! costs no more than a common one; otherwise the order's or the other
//! filter's index is walked and the tag probed per row with a scalar
//! subquery, which the planner cannot turn into a join of every tagged
//! session (an `EXISTS` became a hash join of all of them, then a sort:
//! ≈ 1 s at 1,000,000 sessions).
//!
//! The page size is in the text as an integer literal (`LIMIT 21`), not a
//! parameter: each filter combination and page size is one prepared
//! statement, and with its LIMIT known PostgreSQL's generic plan is the
//! index walk, which it keeps after five executions instead of planning
//! the join again on every call (≈ 0.7 ms of a ≈ 1 ms listing;
//! docs/postgres.md, "Reads"). The number is the ledger's validated page
//! size plus one, formatted from an integer, never caller text.

use super::super::tx::PgTx;
use super::sessions::{map_session, rows_dyn, session_select, ORDER_COLUMN};
use super::{col, Params};
use crate::error::{Error, Result};
use crate::store::rows::{ListQuery, Order};
use crate::store::SessionsPage;
use postgres::types::Type;

/// The largest page the ledger asks for (its `LIST_LIMIT_MAX`).
const PAGE_MAX: i64 = 1000;

/// Builds the SQL text and its parameters: `limit + 1` rows at most (the
/// extra one says whether a next page exists).
///
/// # Errors
/// INTERNAL for a page size outside 1..=1000 (the ledger validates it).
pub fn build(q: &ListQuery) -> Result<(String, Params)> {
    if !(1..=PAGE_MAX).contains(&q.limit) {
        return Err(Error::internal(format!(
            "a listing page of {} sessions (1..={PAGE_MAX})",
            q.limit
        )));
    }
    let want = q.limit + 1;
    let mut params: Params = Vec::new();
    let mut p = |v: Box<dyn postgres::types::ToSql + Sync>, t: Type| {
        params.push((v, t));
        format!("${}", params.len())
    };
    // A tag alone, in created order, drives the walk from `session_tags`
    // (as SQLite's does); with another filter, that filter's index is
    // walked and the tag probed per row.
    let other_filters =
        !q.statuses.is_empty() || q.app.is_some() || q.agent_id.is_some() || q.parent.is_some();
    let by_tag = q.order == Order::Created && q.tag.is_some() && !other_filters;
    let (ts, seq) = match q.order {
        Order::Created if by_tag => ("t.created_at_ms", "t.insert_seq"),
        Order::Created => ("s.created_at_ms", "s.insert_seq"),
        Order::Updated => ("s.updated_at_ms", "s.insert_seq"),
    };
    let mut wh: Vec<String> = Vec::new();
    if let Some(tag) = &q.tag {
        let tag = p(Box::new(tag.clone()), Type::TEXT);
        wh.push(if by_tag {
            format!("t.tag = {tag}")
        } else {
            format!(
                "(SELECT true FROM session_tags t WHERE t.tag = {tag} \
                 AND t.created_at_ms = s.created_at_ms AND t.insert_seq = s.insert_seq)"
            )
        });
    }
    match q.statuses.len() {
        0 => {}
        1 => wh.push(format!(
            "s.status = {}",
            p(Box::new(q.statuses[0].clone()), Type::TEXT)
        )),
        _ => wh.push(format!(
            "s.status = ANY({})",
            p(Box::new(q.statuses.clone()), Type::TEXT_ARRAY)
        )),
    }
    if let Some(app) = &q.app {
        wh.push(format!("s.app = {}", p(Box::new(app.clone()), Type::TEXT)));
    }
    if let Some(agent) = &q.agent_id {
        wh.push(format!(
            "s.agent_id = {}",
            p(Box::new(agent.clone()), Type::TEXT)
        ));
    }
    if let Some(parent) = &q.parent {
        wh.push(format!(
            "s.parent_session_id = {}",
            p(Box::new(parent.clone()), Type::TEXT)
        ));
    }
    if let Some(since) = q.since_ms {
        wh.push(format!("{ts} >= {}", p(Box::new(since), Type::INT8)));
    }
    if let Some(until) = q.until_ms {
        wh.push(format!("{ts} < {}", p(Box::new(until), Type::INT8)));
    }
    if let Some((k_ts, k_seq)) = q.after {
        let a = p(Box::new(k_ts), Type::INT8);
        let b = p(Box::new(k_seq), Type::INT8);
        wh.push(format!("({ts}, {seq}) < ({a}, {b})"));
    }
    let where_sql = if wh.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", wh.join(" AND "))
    };
    let select = match q.order {
        Order::Created if by_tag => session_select!(
            ", t.created_at_ms",
            "session_tags t JOIN sessions s ON s.insert_seq = t.insert_seq"
        ),
        Order::Created => session_select!(", s.created_at_ms"),
        Order::Updated => session_select!(", s.updated_at_ms"),
    };
    let sql = format!("{select}{where_sql} ORDER BY {ts} DESC, {seq} DESC LIMIT {want}");
    Ok((sql, params))
}

/// One page: the sessions and, when more follow, the key to resume after.
pub fn select_page(tx: &mut PgTx<'_>, q: &ListQuery) -> Result<SessionsPage> {
    let (sql, params) = build(q)?;
    let rows = rows_dyn(tx, &sql, &params)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let (s, insert_seq, _) = map_session(row)?;
        out.push((s, col::<i64>(row, ORDER_COLUMN)?, insert_seq));
    }
    let limit = usize::try_from(q.limit).unwrap_or(0);
    let next = if out.len() > limit {
        out.truncate(limit);
        out.last().map(|(_, ts, seq)| (*ts, *seq))
    } else {
        None
    };
    Ok((out.into_iter().map(|(s, _, _)| s).collect(), next))
}
