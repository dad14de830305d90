//! SQL for `session_budgets` (schema V3) and for the session UPDATEs that
//! carry usage (`session usage`, `run usage`, a budget's policy).
//!
//! These verbs read the session's state first, inside the same `BEGIN
//! IMMEDIATE` transaction (so under the write lock: nothing can change
//! between the read and the write), decide in Rust, and then apply ONE
//! `UPDATE sessions … WHERE session_id = ?1 AND rev = ?N` with literal
//! statuses, which the rev term makes exact.

use crate::model::Usage;
pub use crate::store::rows::{BudgetRow, SessionState};
use crate::store::sqlite::codec::text;
use rusqlite::{params, Connection, OptionalExtension};

/// The state a usage-carrying verb decides on: status, rev, updated_at_ms
/// and the four usage sums.
///
/// It is also every mutation's guard read: a correlated probe says whether
/// the session has a lease (whose row is then read by its key, so the
/// common case costs no statement of its own). Correlated on
/// `s.session_id`, not a join on the bound id: SQLite re-prepares a cached
/// join every time its binding changes.
pub const SELECT_SESSION_STATE: &str = "SELECT s.status, s.rev, s.updated_at_ms, \
     s.input_tokens, s.output_tokens, s.api_calls, s.duration_ms, \
     EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = s.session_id) \
     FROM sessions s WHERE s.session_id = ?1";

/// A session's budget.
pub const SELECT_BUDGET: &str = "SELECT max_tokens, max_api_calls, max_duration_ms, on_exceed, \
     base_tokens, base_api_calls, base_duration_ms, exceeded_at_ms FROM session_budgets \
     WHERE session_id = ?1";

/// A new budget. ?1 session, ?2–?4 limits, ?5 policy, ?6 exceeded_at_ms,
/// ?7 now.
pub const INSERT_BUDGET: &str = "INSERT INTO session_budgets (session_id, max_tokens, \
     max_api_calls, max_duration_ms, on_exceed, exceeded_at_ms, updated_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// New limits and policy. ?1 session, ?2–?4 limits, ?5 policy,
/// ?6 exceeded_at_ms, ?7 now.
pub const UPDATE_BUDGET_LIMITS: &str = "UPDATE session_budgets SET max_tokens = ?2, \
     max_api_calls = ?3, max_duration_ms = ?4, on_exceed = ?5, exceeded_at_ms = ?6, \
     updated_at_ms = ?7 WHERE session_id = ?1";

/// Marks the crossing write. ?1 session, ?2 at ms.
pub const UPDATE_BUDGET_EXCEEDED: &str = "UPDATE session_budgets SET exceeded_at_ms = ?2, \
     updated_at_ms = ?2 WHERE session_id = ?1";

/// A reset: the base moves to the current usage, the crossing mark clears.
/// ?1 session, ?2 tokens, ?3 api calls, ?4 duration ms, ?5 at ms.
pub const UPDATE_BUDGET_RESET: &str = "UPDATE session_budgets SET base_tokens = ?2, \
     base_api_calls = ?3, base_duration_ms = ?4, exceeded_at_ms = NULL, updated_at_ms = ?5 \
     WHERE session_id = ?1";

/// Every SQL const of this module (the prepare test walks them).
pub const ALL: &[&str] = &[
    SELECT_SESSION_STATE,
    SELECT_BUDGET,
    INSERT_BUDGET,
    UPDATE_BUDGET_LIMITS,
    UPDATE_BUDGET_EXCEEDED,
    UPDATE_BUDGET_RESET,
];

/// Reads a session's state, or `None`.
pub fn select_session_state(conn: &Connection, id: &str) -> rusqlite::Result<Option<SessionState>> {
    let found = conn
        .prepare_cached(SELECT_SESSION_STATE)?
        .query_row(params![id], |r| {
            let state = SessionState {
                status: text(r, 0)?,
                rev: r.get(1)?,
                updated_at_ms: r.get(2)?,
                usage: Usage {
                    input_tokens: r.get(3)?,
                    output_tokens: r.get(4)?,
                    api_calls: r.get(5)?,
                    duration_ms: r.get(6)?,
                },
                lease: None,
            };
            Ok((state, r.get::<_, bool>(7)?))
        })
        .optional()?;
    match found {
        Some((mut state, true)) => {
            state.lease = crate::store::sqlite::sql::workflow::find_lease(conn, id)?;
            Ok(Some(state))
        }
        Some((state, false)) => Ok(Some(state)),
        None => Ok(None),
    }
}

/// Reads a session's budget, or `None`.
pub fn select_budget(conn: &Connection, id: &str) -> rusqlite::Result<Option<BudgetRow>> {
    conn.prepare_cached(SELECT_BUDGET)?
        .query_row(params![id], |r| {
            Ok(BudgetRow {
                max_tokens: r.get(0)?,
                max_api_calls: r.get(1)?,
                max_duration_ms: r.get(2)?,
                on_exceed: text(r, 3)?.parse().ok(),
                base_tokens: r.get(4)?,
                base_api_calls: r.get(5)?,
                base_duration_ms: r.get(6)?,
                exceeded_at_ms: r.get(7)?,
            })
        })
        .optional()
}
