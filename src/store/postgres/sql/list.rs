//! SQL for `session list` (PostgreSQL; SQLite's is `sqlite/sql/list.rs`): fixed
//! fragments, every value a `$N` parameter, one statement per page.
//!
//! The order is `ORDER BY ts DESC, s.insert_seq DESC` (`ts` the created or
//! updated time), which the list indexes `(…, created_at_ms, insert_seq)`
//! and `(updated_at_ms, insert_seq)` serve in order; the cursor is the row
//! comparison `(ts, s.insert_seq) < ($a, $b)`, SQLite's
//! `ts <= a AND (ts < a OR seq < b)`. A tag filter is an `EXISTS` probe of
//! `session_tags` (whose rows carry their session's creation time and
//! key), the same rows SQLite's tag walk yields.

use super::super::tx::PgTx;
use super::sessions::{map_session, rows_dyn, session_select, ORDER_COLUMN};
use super::{col, Params};
use crate::error::Result;
use crate::store::rows::{ListQuery, Order};
use crate::store::SessionsPage;
use postgres::types::Type;

/// Builds the SQL text and its parameters: `limit + 1` rows at most (the
/// extra one says whether a next page exists).
pub fn build(q: &ListQuery) -> (String, Params) {
    let mut params: Params = Vec::new();
    let mut p = |v: Box<dyn postgres::types::ToSql + Sync>, t: Type| {
        params.push((v, t));
        format!("${}", params.len())
    };
    let ts = match q.order {
        Order::Created => "s.created_at_ms",
        Order::Updated => "s.updated_at_ms",
    };
    let mut wh: Vec<String> = Vec::new();
    if let Some(tag) = &q.tag {
        wh.push(format!(
            "EXISTS (SELECT 1 FROM session_tags t WHERE t.tag = {} \
             AND t.created_at_ms = s.created_at_ms AND t.insert_seq = s.insert_seq)",
            p(Box::new(tag.clone()), Type::TEXT)
        ));
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
        wh.push(format!("({ts}, s.insert_seq) < ({a}, {b})"));
    }
    let want = i64::try_from(usize::try_from(q.limit).unwrap_or(0) + 1).unwrap_or(i64::MAX);
    let limit = p(Box::new(want), Type::INT8);
    let where_sql = if wh.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", wh.join(" AND "))
    };
    let sql = format!(
        "{}{where_sql} ORDER BY {ts} DESC, s.insert_seq DESC LIMIT {limit}",
        match q.order {
            Order::Created => session_select!(", s.created_at_ms"),
            Order::Updated => session_select!(", s.updated_at_ms"),
        }
    );
    (sql, params)
}

/// One page: the sessions and, when more follow, the key to resume after.
pub fn select_page(tx: &mut PgTx<'_>, q: &ListQuery) -> Result<SessionsPage> {
    let (sql, params) = build(q);
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
