//! The arithmetic of usage and budgets (docs/design.md, "Budgets"): each
//! amount and total checked against 2^53−1, usage counted from a budget's
//! base, the limits it is strictly over, and the one write that crosses a
//! limit (its mark, `budget_exceeded` and the policy). The verbs that set,
//! reset and read budgets are in [`super`].

use super::super::write::Write;
use crate::error::{Error, Result};
use crate::model::{
    BudgetFigures, BudgetRemaining, EventType, OnExceed, SessionStatus, Usage, COUNT_MAX,
};
use crate::store::rows::BudgetRow;
use crate::store::SessionChange;
use serde::Serialize;

/// Checks one amount: an integer in 0..=2^53−1.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub(in crate::ledger) fn check_count(field: &str, v: i64) -> Result<i64> {
    if (0..=COUNT_MAX).contains(&v) {
        Ok(v)
    } else {
        Err(Error::invalid(
            field,
            format!("must be an integer from 0 to {COUNT_MAX} (2^53 - 1)"),
        ))
    }
}

/// `total + add`, refused when it would pass 2^53−1 (never wrapped).
pub(in crate::ledger) fn add_total(field: &str, total: i64, add: i64) -> Result<i64> {
    match total.checked_add(add) {
        Some(t) if t <= COUNT_MAX => Ok(t),
        _ => Err(Error::invalid(
            field,
            format!(
                "would bring the total to more than {COUNT_MAX} (2^53 - 1); nothing was recorded"
            ),
        )),
    }
}

/// The session's usage after adding `add`, every total checked.
pub(in crate::ledger) fn add_usage(now: &Usage, add: &Usage) -> Result<Usage> {
    Ok(Usage {
        input_tokens: add_total("input_tokens", now.input_tokens, add.input_tokens)?,
        output_tokens: add_total("output_tokens", now.output_tokens, add.output_tokens)?,
        api_calls: add_total("api_calls", now.api_calls, add.api_calls)?,
        duration_ms: add_total("duration_ms", now.duration_ms, add.duration_ms)?,
    })
}

pub(in crate::ledger) fn figures(b: &BudgetRow, u: &Usage) -> BudgetFigures {
    // input + output ≤ 2 × (2^53 − 1): no i64 overflow.
    BudgetFigures {
        tokens: (u.input_tokens + u.output_tokens - b.base_tokens).max(0),
        api_calls: (u.api_calls - b.base_api_calls).max(0),
        duration_ms: (u.duration_ms - b.base_duration_ms).max(0),
    }
}

/// The limits `used` is strictly over.
pub(in crate::ledger) fn over(b: &BudgetRow, used: &BudgetFigures) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut check = |name, limit: Option<i64>, used: i64| {
        if limit.is_some_and(|l| used > l) {
            v.push(name);
        }
    };
    check("tokens", b.max_tokens, used.tokens);
    check("api_calls", b.max_api_calls, used.api_calls);
    check("duration_ms", b.max_duration_ms, used.duration_ms);
    v
}

/// A write that crossed a limit: what the events and the policy need.
#[derive(Debug, Clone)]
pub(in crate::ledger) struct Crossing {
    limits: Vec<&'static str>,
    used: BudgetFigures,
    max: BudgetRemaining,
    policy: OnExceed,
    reason: String,
    status_after: &'static str,
}

#[derive(Serialize)]
struct ExceededData<'a> {
    limits: &'a [&'static str],
    used: BudgetFigures,
    max: BudgetRemaining,
    on_exceed: OnExceed,
    status: &'static str,
}

fn crossing_of(b: &BudgetRow, usage: &Usage, status: &str) -> Option<Crossing> {
    if b.exceeded_at_ms.is_some() {
        return None;
    }
    let used = figures(b, usage);
    let limits = over(b, &used);
    if limits.is_empty() {
        return None;
    }
    let policy = b.on_exceed.unwrap_or(OnExceed::Pause);
    let parts: Vec<String> = limits
        .iter()
        .map(|l| {
            let (u, m) = match *l {
                "tokens" => (used.tokens, b.max_tokens),
                "api_calls" => (used.api_calls, b.max_api_calls),
                _ => (used.duration_ms, b.max_duration_ms),
            };
            format!("{l} {u} > {}", m.unwrap_or(0))
        })
        .collect();
    let status_after = match (policy, status) {
        (OnExceed::Fail, _) => "failed",
        (OnExceed::Pause, "active") => "paused",
        (_, s) => SessionStatus::VARIANTS
            .into_iter()
            .find(|v| v.as_str() == s)
            .map_or("active", SessionStatus::as_str),
    };
    Some(Crossing {
        limits,
        used,
        max: BudgetRemaining {
            tokens: b.max_tokens,
            api_calls: b.max_api_calls,
            duration_ms: b.max_duration_ms,
        },
        policy,
        reason: format!("budget exceeded: {}", parts.join(", ")),
        status_after,
    })
}

/// Writes new usage sums on the session (its UPDATE, guarded by the rev
/// read under the lock), first marking the budget and choosing the policy
/// if this write crosses a limit. The caller appends its own event, then
/// [`append_crossing`].
///
/// # Errors
/// The store's; INTERNAL if the session changed under the write lock.
pub(in crate::ledger) fn apply_usage(
    w: &mut Write<'_, '_>,
    usage: &Usage,
) -> Result<Option<Crossing>> {
    let (id, at) = (w.id(), w.at());
    let status = w.state().status.clone();
    let crossing = w
        .tx()
        .select_budget(id)?
        .and_then(|b| crossing_of(&b, usage, &status));
    if crossing.is_some() {
        // Before the session UPDATE: a budget is frozen once its session is
        // terminal (trigger), and the `fail` policy makes it so.
        w.tx().mark_budget_exceeded(id, at)?;
    }
    use SessionStatus::{Active, Failed, Paused, Pending};
    let live: &[SessionStatus] = &[Pending, Active, Paused];
    let (from, status, end_reason) = match crossing.as_ref() {
        Some(c) if c.policy == OnExceed::Fail => (live, Some(Failed), Some(c.reason.as_str())),
        Some(c)
            if c.policy == OnExceed::Pause && c.status_after == "paused" && status == "active" =>
        {
            (&[Active][..], Some(Paused), None)
        }
        _ => (live, None, None),
    };
    let change = SessionChange {
        status,
        end_reason,
        usage: Some(*usage),
        ..SessionChange::default()
    };
    w.update_read(from, change).map_err(|_| {
        Error::internal("a session read under the write lock changed before its update")
    })?;
    Ok(crossing)
}

/// Appends `budget_exceeded` (data `{limits, used, max, on_exceed,
/// status}`, detail `budget exceeded: tokens 1200 > 1000`) and, when the
/// policy changed the status, `paused` or `failed` (detail = the same
/// text; a failed session's `end_reason` too); a failed session's open
/// runs end first.
///
/// # Errors
/// The store's.
pub(in crate::ledger) fn append_crossing(w: &mut Write<'_, '_>, c: &Crossing) -> Result<()> {
    let data = to_json(&ExceededData {
        limits: &c.limits,
        used: c.used,
        max: c.max,
        on_exceed: c.policy,
        status: c.status_after,
    })?;
    w.side_event(
        EventType::BudgetExceeded.as_str(),
        Some(&c.reason),
        Some(&data),
        None,
    )?;
    let follow = match (c.policy, c.status_after) {
        (OnExceed::Fail, _) => Some(SessionStatus::Failed),
        (OnExceed::Pause, "paused") => Some(SessionStatus::Paused),
        _ => None,
    };
    if let Some(t) = follow {
        if t == SessionStatus::Failed {
            // The session has ended: no run stays pending or running.
            super::super::run_end::cancel_open_runs(w, t)?;
        }
        w.side_event(t.as_str(), Some(&c.reason), None, None)?;
    }
    Ok(())
}

pub(super) fn to_json(v: &impl Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode event data: {e}")))
}
