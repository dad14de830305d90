//! SQL for `session list`: fixed fragments, values as parameters.
//!
//! Every query walks one index in its order, so no temp B-tree is built for
//! ORDER BY and a page at any depth costs the same (a keyset cursor seeks):
//! - created order: `ORDER BY created_at_ms DESC, insert_seq DESC` over
//!   `sessions_by_created` or the filter's `(column, created_at_ms)` index,
//!   or driven from `session_tags` for `--tag`;
//! - updated order: `ORDER BY updated_at_ms DESC, insert_seq DESC` over
//!   `sessions_by_updated`, other filters checked per row (their columns are
//!   written `+col` so the planner does not pick an index that would need a
//!   sort).

use crate::model::Session;
pub use crate::store::rows::{ListQuery, Order};
use crate::store::sqlite::codec::text;
use crate::store::sqlite::sql::sessions::{
    complete_session, map_session, session_columns, SELECT_SESSION_BY_SEQ,
};
use rusqlite::types::Value;
use rusqlite::Connection;
use rusqlite::OptionalExtension;

/// What a listing query's rows hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Session columns, then the order's timestamp.
    Sessions,
    /// `(insert_seq, created_at_ms)` keys from `session_tags`; the sessions
    /// are read one by one.
    TagKeys,
}

/// Builds the SQL text and its parameters. Only fixed fragments go into the
/// text; every user value is a parameter. Every statement reads one table
/// (plus an EXISTS probe), so SQLite keeps it prepared between calls; the
/// page size is applied by the caller, which stops reading after
/// `limit + 1` rows (a `LIMIT ?` would make SQLite re-prepare the cached
/// statement on every call). For the same reason equality parameters are
/// written `col = +?N`: a bare `col = ?N` on an index prefix that also
/// serves the ORDER BY marks the statement for re-preparation whenever the
/// binding changes; the unary `+` keeps the plan and avoids that.
pub fn build(q: &ListQuery) -> (String, Vec<Value>, Rows) {
    let mut params: Vec<Value> = Vec::new();
    let mut p = |v: Value| {
        params.push(v);
        format!("?{}", params.len())
    };
    let other_filters =
        !q.statuses.is_empty() || q.app.is_some() || q.agent_id.is_some() || q.parent.is_some();
    if let (Some(tag), Order::Created, false) = (&q.tag, q.order, other_filters) {
        // Only a tag: walk `session_tags` in its key order.
        let mut wh = vec![format!("t.tag = +{}", p(Value::Text(tag.clone())))];
        push_bounds(&mut wh, &mut p, q, "t.created_at_ms", "t.insert_seq");
        let sql = format!(
            "SELECT t.insert_seq, t.created_at_ms FROM session_tags t WHERE {} \
             ORDER BY t.created_at_ms DESC, t.insert_seq DESC",
            wh.join(" AND ")
        );
        return (sql, params, Rows::TagKeys);
    }
    let ts = match q.order {
        Order::Created => "s.created_at_ms",
        Order::Updated => "s.updated_at_ms",
    };
    // In updated order, filter columns are prefixed with `+` so no filter
    // index competes with sessions_by_updated.
    let plus = if q.order == Order::Updated { "+" } else { "" };
    let mut wh: Vec<String> = Vec::new();
    if let Some(tag) = &q.tag {
        wh.push(format!(
            "EXISTS (SELECT 1 FROM session_tags t WHERE t.tag = +{} AND t.created_at_ms = s.created_at_ms AND t.insert_seq = s.insert_seq)",
            p(Value::Text(tag.clone()))
        ));
    }
    match q.statuses.len() {
        0 => {}
        1 => wh.push(format!(
            "{plus}s.status = +{}",
            p(Value::Text(q.statuses[0].clone()))
        )),
        _ => {
            // Several statuses: several index ranges cannot be merged in
            // order, so walk the order index and test status per row.
            let list: Vec<String> = q
                .statuses
                .iter()
                .map(|s| p(Value::Text(s.clone())))
                .collect();
            wh.push(format!("+s.status IN ({})", list.join(", ")));
        }
    }
    if let Some(app) = &q.app {
        wh.push(format!("{plus}s.app = +{}", p(Value::Text(app.clone()))));
    }
    if let Some(agent) = &q.agent_id {
        wh.push(format!(
            "{plus}s.agent_id = +{}",
            p(Value::Text(agent.clone()))
        ));
    }
    if let Some(parent) = &q.parent {
        wh.push(format!(
            "{plus}s.parent_session_id = +{}",
            p(Value::Text(parent.clone()))
        ));
    }
    push_bounds(&mut wh, &mut p, q, ts, "s.insert_seq");
    let where_sql = if wh.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", wh.join(" AND "))
    };
    let sql = format!(
        "SELECT {cols}, {ts} FROM sessions s{where_sql} ORDER BY {ts} DESC, s.insert_seq DESC",
        cols = session_columns!(),
    );
    (sql, params, Rows::Sessions)
}

fn push_bounds(
    wh: &mut Vec<String>,
    p: &mut impl FnMut(Value) -> String,
    q: &ListQuery,
    ts: &str,
    seq: &str,
) {
    if let Some(since) = q.since_ms {
        wh.push(format!("{ts} >= {}", p(Value::Integer(since))));
    }
    if let Some(until) = q.until_ms {
        wh.push(format!("{ts} < {}", p(Value::Integer(until))));
    }
    if let Some((k_ts, k_seq)) = q.after {
        let a = p(Value::Integer(k_ts));
        let b = p(Value::Integer(k_seq));
        wh.push(format!("{ts} <= {a} AND ({ts} < {a} OR {seq} < {b})"));
    }
}

/// A `(timestamp ms, insert_seq)` keyset position.
pub type Key = (i64, i64);

/// One page: the sessions and, when more follow, the key to resume after.
pub fn select_page(
    conn: &Connection,
    q: &ListQuery,
) -> rusqlite::Result<(Vec<Session>, Option<Key>)> {
    let (sql, params, kind) = build(q);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
    // (session, key timestamp, insert_seq, checkpoint seq)
    let mut out: Vec<(Option<Session>, i64, i64, Option<i64>)> = Vec::new();
    let want = usize::try_from(q.limit).unwrap_or(0) + 1;
    while out.len() < want {
        let Some(row) = rows.next()? else { break };
        match kind {
            Rows::Sessions => {
                let (s, insert_seq, cp) = map_session(row)?;
                out.push((Some(s), row.get(24)?, insert_seq, cp));
            }
            Rows::TagKeys => out.push((None, row.get(1)?, row.get(0)?, None)),
        }
    }
    drop(rows);
    let limit = usize::try_from(q.limit).unwrap_or(0);
    let next = if out.len() > limit {
        out.truncate(limit);
        out.last().map(|(_, ts, seq, _)| (*ts, *seq))
    } else {
        None
    };
    let mut sessions = Vec::with_capacity(out.len());
    for (s, _, insert_seq, cp) in out {
        let (mut s, cp) = match s {
            Some(s) => (s, cp),
            None => {
                let found = conn
                    .prepare_cached(SELECT_SESSION_BY_SEQ)?
                    .query_row(rusqlite::params![insert_seq], map_session)
                    .optional()?;
                match found {
                    Some((s, _, cp)) => (s, cp),
                    None => continue,
                }
            }
        };
        complete_session(conn, &mut s, insert_seq, cp)?;
        sessions.push(s);
    }
    Ok((sessions, next))
}

/// `EXPLAIN QUERY PLAN` detail lines of a listing query (for tests).
pub fn explain(conn: &Connection, q: &ListQuery) -> rusqlite::Result<Vec<String>> {
    let (sql, params, _) = build(q);
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let rows = stmt.query_map(rusqlite::params_from_iter(params.iter()), |r| text(r, 3))?;
    rows.collect()
}
