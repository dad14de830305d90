//! SQL for `session_budgets` (schema V3) and for the session UPDATEs that
//! carry usage (`session usage`, `run usage`, a budget's policy).
//!
//! These verbs read the session's state first, inside the same `BEGIN
//! IMMEDIATE` transaction (so under the write lock: nothing can change
//! between the read and the write), decide in Rust, and then apply ONE
//! `UPDATE sessions … WHERE session_id = ?1 AND rev = ?N` with literal
//! statuses, which the rev term makes exact.

use super::codec::text;
use crate::model::{OnExceed, Usage};
use rusqlite::{params, Connection, OptionalExtension};

/// The state a usage-carrying verb decides on: status, rev, updated_at_ms
/// and the four usage sums.
pub const SELECT_SESSION_STATE: &str = "SELECT status, rev, updated_at_ms, input_tokens, \
     output_tokens, api_calls, duration_ms FROM sessions WHERE session_id = ?1";

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

/// A session mutation that sets the usage sums (status unchanged).
/// ?1 id, ?2 now ms, ?3 input, ?4 output, ?5 api calls, ?6 duration ms,
/// ?7 the rev read under the lock.
pub const UPDATE_SESSION_USAGE: &str = "UPDATE sessions SET rev = rev + 1, \
     updated_at_ms = max(updated_at_ms, ?2), input_tokens = ?3, output_tokens = ?4, \
     api_calls = ?5, duration_ms = ?6 WHERE session_id = ?1 AND rev = ?7 \
     AND (status = 'pending' OR status = 'active' OR status = 'paused')";

/// As [`UPDATE_SESSION_USAGE`], and the `pause` policy: active → paused.
pub const UPDATE_SESSION_USAGE_PAUSE: &str = "UPDATE sessions SET rev = rev + 1, \
     updated_at_ms = max(updated_at_ms, ?2), input_tokens = ?3, output_tokens = ?4, \
     api_calls = ?5, duration_ms = ?6, status = 'paused' WHERE session_id = ?1 AND rev = ?7 \
     AND status = 'active'";

/// As [`UPDATE_SESSION_USAGE`], and the `fail` policy: → failed with
/// ?8 as the end reason.
pub const UPDATE_SESSION_USAGE_FAIL: &str = "UPDATE sessions SET rev = rev + 1, \
     updated_at_ms = max(updated_at_ms, ?2), input_tokens = ?3, output_tokens = ?4, \
     api_calls = ?5, duration_ms = ?6, status = 'failed', \
     ended_at_ms = max(updated_at_ms, ?2), end_reason = ?8 WHERE session_id = ?1 AND rev = ?7 \
     AND (status = 'pending' OR status = 'active' OR status = 'paused')";

/// Every SQL const of this module (the prepare test walks them).
pub const ALL: &[&str] = &[
    SELECT_SESSION_STATE,
    SELECT_BUDGET,
    INSERT_BUDGET,
    UPDATE_BUDGET_LIMITS,
    UPDATE_BUDGET_EXCEEDED,
    UPDATE_BUDGET_RESET,
    UPDATE_SESSION_USAGE,
    UPDATE_SESSION_USAGE_PAUSE,
    UPDATE_SESSION_USAGE_FAIL,
];

/// A session's state as [`SELECT_SESSION_STATE`] reads it.
#[derive(Debug, Clone)]
pub struct SessionState {
    /// Status name as stored.
    pub status: String,
    /// Current rev.
    pub rev: i64,
    /// Latest mutation time, ms.
    pub updated_at_ms: i64,
    /// Usage sums.
    pub usage: Usage,
}

/// A budget row.
#[derive(Debug, Clone, Default)]
pub struct BudgetRow {
    /// Token limit (input + output).
    pub max_tokens: Option<i64>,
    /// API-call limit.
    pub max_api_calls: Option<i64>,
    /// Duration limit, ms.
    pub max_duration_ms: Option<i64>,
    /// The policy (`None` only for a row that breaks the CHECK).
    pub on_exceed: Option<OnExceed>,
    /// Tokens at the last reset.
    pub base_tokens: i64,
    /// API calls at the last reset.
    pub base_api_calls: i64,
    /// Duration at the last reset, ms.
    pub base_duration_ms: i64,
    /// When the crossing write committed, if the budget is marked exceeded.
    pub exceeded_at_ms: Option<i64>,
}

/// Reads a session's state, or `None`.
pub fn select_session_state(conn: &Connection, id: &str) -> rusqlite::Result<Option<SessionState>> {
    conn.prepare_cached(SELECT_SESSION_STATE)?
        .query_row(params![id], |r| {
            Ok(SessionState {
                status: text(r, 0)?,
                rev: r.get(1)?,
                updated_at_ms: r.get(2)?,
                usage: Usage {
                    input_tokens: r.get(3)?,
                    output_tokens: r.get(4)?,
                    api_calls: r.get(5)?,
                    duration_ms: r.get(6)?,
                },
            })
        })
        .optional()
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

/// Sets the usage sums on a session (one rev step), with an optional
/// policy: `Some(Pause)` also pauses it, `Some(Fail)` fails it with
/// `reason`. Whether a row matched.
pub fn update_session_usage(
    conn: &Connection,
    id: &str,
    now: i64,
    usage: &Usage,
    rev: i64,
    policy: Option<(OnExceed, &str)>,
) -> rusqlite::Result<bool> {
    let p = params![
        id,
        now,
        usage.input_tokens,
        usage.output_tokens,
        usage.api_calls,
        usage.duration_ms,
        rev
    ];
    let n = match policy {
        None | Some((OnExceed::Warn, _)) => {
            conn.prepare_cached(UPDATE_SESSION_USAGE)?.execute(p)?
        }
        Some((OnExceed::Pause, _)) => conn
            .prepare_cached(UPDATE_SESSION_USAGE_PAUSE)?
            .execute(p)?,
        Some((OnExceed::Fail, reason)) => {
            conn.prepare_cached(UPDATE_SESSION_USAGE_FAIL)?
                .execute(params![
                    id,
                    now,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.api_calls,
                    usage.duration_ms,
                    rev,
                    reason
                ])?
        }
    };
    Ok(n == 1)
}
