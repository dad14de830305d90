//! Session usage and budgets (issue 4 §5; the Amber seed's budget tracker:
//! `trackUsage`, `checkBudget`, `resetBudget`, `budget.onExceed`).
//!
//! "Tokens" means input + output tokens. A budget counts the session's
//! usage since its last reset — `session usage` plus every run's usage,
//! which rolls into the session as it is recorded — against up to three
//! limits (tokens, API calls, reported duration in ms; never wall-clock
//! time). A limit is exceeded when usage is strictly over it.
//!
//! Exactly once: the write that takes usage over a limit while the budget
//! is not marked exceeded marks it (`exceeded_at_ms`), appends
//! `budget_exceeded` and applies the policy, all in its own `BEGIN
//! IMMEDIATE` transaction. Writers are serialized by that lock and each
//! decides on the state it read under it, so of any number of concurrent
//! writers exactly one sees "not marked, now over". Later writes see the
//! mark and append nothing more until `reset` clears it (or a new budget
//! leaves usage within every limit again).

use super::db;
use super::sessions::{key_digest, parse_session_id, read_back, replay, validate_key, VerbDigest};
use super::written::Written;
use super::{Ledger, Mutation};
use crate::error::{Error, Result};
use crate::model::{
    ActorType, Budget, BudgetFigures, BudgetRemaining, EventType, OnExceed, Session, SessionStatus,
    Usage, COUNT_MAX,
};
use crate::store::budgets::{self as sb, BudgetRow, SessionState};
use crate::store::events::{self as ev, NewEvent};
use rusqlite::{params, Connection};
use serde::Serialize;

/// A `session usage` request: amounts to add (each 0..=2^53−1; `None` adds
/// nothing). At least one must be given.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordUsage {
    /// Input tokens to add.
    pub input_tokens: Option<i64>,
    /// Output tokens to add.
    pub output_tokens: Option<i64>,
    /// API calls to add.
    pub api_calls: Option<i64>,
    /// Duration to add, ms.
    pub duration_ms: Option<i64>,
}

/// A `session budget` request: the limits and policy to set. A field left
/// `None` keeps the budget's current value (no limit, and `pause`, for a
/// new budget). At least one must be given.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetBudget {
    /// Token limit (input + output), 0..=2^53−1.
    pub max_tokens: Option<i64>,
    /// API-call limit, 0..=2^53−1.
    pub max_api_calls: Option<i64>,
    /// Limit on reported duration, ms, 0..=2^53−1.
    pub max_duration_ms: Option<i64>,
    /// What crossing a limit does.
    pub on_exceed: Option<OnExceed>,
}

/// Checks one amount: an integer in 0..=2^53−1.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub(super) fn check_count(field: &str, v: i64) -> Result<i64> {
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
pub(super) fn add_total(field: &str, total: i64, add: i64) -> Result<i64> {
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

/// [`live_state`] for a write: also refuses LEASE_HELD / LEASE_NOT_FOUND
/// when someone else's live lease holds the session (issue 4 §6), as
/// every session mutation does.
pub(super) fn writable_state(
    tx: &Connection,
    id: &str,
    verb: &str,
    if_rev: Option<i64>,
    lease: Option<&str>,
    now: i64,
) -> Result<SessionState> {
    let st = live_state(tx, id, verb, if_rev)?;
    super::leases::check_lease(tx, id, lease, now)?;
    Ok(st)
}

/// Reads the session's state under the write lock and refuses what a
/// session mutation refuses: SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
/// (terminal), SESSION_CONFLICT (`--if-rev`).
pub(super) fn live_state(
    tx: &Connection,
    id: &str,
    verb: &str,
    if_rev: Option<i64>,
) -> Result<SessionState> {
    let Some(st) = sb::select_session_state(tx, id).map_err(db)? else {
        return Err(Error::SessionNotFound { id: id.to_owned() });
    };
    let terminal = st
        .status
        .parse::<SessionStatus>()
        .map_or(true, SessionStatus::is_terminal);
    if terminal {
        return Err(Error::InvalidTransition {
            id: id.to_owned(),
            from: st.status,
            verb: verb.to_owned(),
        });
    }
    if let Some(expected) = if_rev {
        if expected != st.rev {
            return Err(Error::Conflict {
                id: id.to_owned(),
                expected_rev: expected,
                actual_rev: st.rev,
                latest_event: ev::latest_event(tx, id).map_err(db)?,
            });
        }
    }
    Ok(st)
}

/// The session's usage after adding `add`, every total checked.
pub(super) fn add_usage(now: &Usage, add: &Usage) -> Result<Usage> {
    Ok(Usage {
        input_tokens: add_total("input_tokens", now.input_tokens, add.input_tokens)?,
        output_tokens: add_total("output_tokens", now.output_tokens, add.output_tokens)?,
        api_calls: add_total("api_calls", now.api_calls, add.api_calls)?,
        duration_ms: add_total("duration_ms", now.duration_ms, add.duration_ms)?,
    })
}

fn figures(b: &BudgetRow, u: &Usage) -> BudgetFigures {
    // input + output ≤ 2 × (2^53 − 1): no i64 overflow.
    BudgetFigures {
        tokens: (u.input_tokens + u.output_tokens - b.base_tokens).max(0),
        api_calls: (u.api_calls - b.base_api_calls).max(0),
        duration_ms: (u.duration_ms - b.base_duration_ms).max(0),
    }
}

/// The limits `used` is strictly over.
fn over(b: &BudgetRow, used: &BudgetFigures) -> Vec<&'static str> {
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
pub(super) struct Crossing {
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

/// Writes new usage sums on the session (rev + 1), first marking the
/// budget and choosing the policy if this write crosses a limit. The
/// caller appends its own event, then [`Ledger::append_crossing`].
pub(super) fn apply_usage(
    tx: &Connection,
    id: &str,
    st: &SessionState,
    usage: &Usage,
    at: i64,
) -> Result<Option<Crossing>> {
    let crossing = sb::select_budget(tx, id)
        .map_err(db)?
        .and_then(|b| crossing_of(&b, usage, &st.status));
    if crossing.is_some() {
        // Before the session UPDATE: a budget is frozen once its session is
        // terminal (trigger), and the `fail` policy makes it so.
        tx.prepare_cached(sb::UPDATE_BUDGET_EXCEEDED)
            .and_then(|mut s| s.execute(params![id, at]))
            .map_err(db)?;
    }
    let policy = crossing
        .as_ref()
        .and_then(|c| match (c.policy, c.status_after) {
            (OnExceed::Fail, _) => Some((OnExceed::Fail, c.reason.as_str())),
            (OnExceed::Pause, "paused") if st.status == "active" => {
                Some((OnExceed::Pause, c.reason.as_str()))
            }
            _ => None,
        });
    if !sb::update_session_usage(tx, id, at, usage, st.rev, policy).map_err(db)? {
        return Err(Error::internal(
            "a session read under the write lock changed before its update",
        ));
    }
    Ok(crossing)
}

/// Appends one event (no idempotency key unless given).
#[allow(clippy::too_many_arguments)]
pub(super) fn push_event(
    tx: &Connection,
    actor: ActorType,
    id: &str,
    event_type: &str,
    detail: Option<&str>,
    data: Option<&str>,
    run_id: Option<&str>,
    idempotency: Option<(&str, &str)>,
) -> Result<()> {
    ev::insert_event(
        tx,
        &NewEvent {
            session_id: id,
            event_type,
            actor_type: actor,
            detail,
            data,
            idempotency,
            run_id,
        },
    )
    .map(|_| ())
    .map_err(db)
}

fn to_json(v: &impl Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(format!("cannot encode event data: {e}")))
}

fn budget_view(id: &str, b: Option<&BudgetRow>, st: &SessionState) -> Budget {
    let empty = BudgetRow::default();
    let b = b.unwrap_or(&empty);
    let used = figures(b, &st.usage);
    let left = |limit: Option<i64>, used: i64| limit.map(|l| (l - used).max(0));
    Budget {
        session_id: id.to_owned(),
        max_tokens: b.max_tokens,
        max_api_calls: b.max_api_calls,
        max_duration_ms: b.max_duration_ms,
        on_exceed: b.on_exceed,
        used,
        remaining: BudgetRemaining {
            tokens: left(b.max_tokens, used.tokens),
            api_calls: left(b.max_api_calls, used.api_calls),
            duration_ms: left(b.max_duration_ms, used.duration_ms),
        },
        exceeded: !over(b, &used).is_empty(),
        exceeded_limits: over(b, &used),
        exceeded_at_ms: b.exceeded_at_ms,
        session_status: st.status.clone(),
        session_rev: st.rev,
    }
}

#[derive(Serialize)]
struct UsageData {
    input_tokens: i64,
    output_tokens: i64,
    api_calls: i64,
    duration_ms: i64,
}

#[derive(Serialize)]
struct BudgetData {
    max_tokens: Option<i64>,
    max_api_calls: Option<i64>,
    max_duration_ms: Option<i64>,
    on_exceed: OnExceed,
}

impl Ledger {
    /// Appends `budget_exceeded` (data `{limits, used, max, on_exceed,
    /// status}`, detail `budget exceeded: tokens 1200 > 1000`) and, when the
    /// policy changed the status, `paused` or `failed` (detail = the same
    /// text; a failed session's `end_reason` too).
    pub(super) fn append_crossing(&self, tx: &Connection, id: &str, c: &Crossing) -> Result<()> {
        let data = to_json(&ExceededData {
            limits: &c.limits,
            used: c.used,
            max: c.max,
            on_exceed: c.policy,
            status: c.status_after,
        })?;
        let actor = self.opts.actor;
        push_event(
            tx,
            actor,
            id,
            EventType::BudgetExceeded.as_str(),
            Some(&c.reason),
            Some(&data),
            None,
            None,
        )?;
        let follow = match (c.policy, c.status_after) {
            (OnExceed::Fail, _) => Some("failed"),
            (OnExceed::Pause, "paused") => Some("paused"),
            _ => None,
        };
        if let Some(t) = follow {
            if t == "failed" {
                // The session has ended: no run stays pending or running.
                super::run_end::cancel_open_runs(tx, actor, id, t, self.now_ms())?;
            }
            push_event(tx, actor, id, t, Some(&c.reason), None, None, None)?;
        }
        Ok(())
    }

    /// Adds usage to a live session (`session usage`; the seed's
    /// `trackUsage`): one `usage_recorded` event with the amounts added
    /// (`{input_tokens, output_tokens, api_calls, duration_ms}`), rev + 1.
    /// If this write takes the budget over a limit, `budget_exceeded` and
    /// the policy follow in the same transaction (module docs). Returns the
    /// whole session.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (nothing given, an amount outside 0..=2^53−1, a
    /// total that would pass 2^53−1), SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION (terminal session), SESSION_CONFLICT,
    /// STORE_BUSY.
    pub fn record_usage(
        &self,
        id: &str,
        req: RecordUsage,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        if req.input_tokens.is_none()
            && req.output_tokens.is_none()
            && req.api_calls.is_none()
            && req.duration_ms.is_none()
        {
            return Err(Error::invalid(
                "usage",
                "give at least one of --input-tokens, --output-tokens, --api-calls or --duration-ms",
            ));
        }
        let add = Usage {
            input_tokens: check_count("input_tokens", req.input_tokens.unwrap_or(0))?,
            output_tokens: check_count("output_tokens", req.output_tokens.unwrap_or(0))?,
            api_calls: check_count("api_calls", req.api_calls.unwrap_or(0))?,
            duration_ms: check_count("duration_ms", req.duration_ms.unwrap_or(0))?,
        };
        let data = to_json(&UsageData {
            input_tokens: add.input_tokens,
            output_tokens: add.output_tokens,
            api_calls: add.api_calls,
            duration_ms: add.duration_ms,
        })?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "usage",
                text: None,
                step: None,
                data: Some(&data),
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.mutate(id, m, dg.as_deref(), |tx| {
            let st = writable_state(tx, id, "record usage of", m.if_rev, m.lease.as_deref(), now)?;
            let usage = add_usage(&st.usage, &add)?;
            let at = now.max(st.updated_at_ms);
            let crossing = apply_usage(tx, id, &st, &usage, at)?;
            let key = m.idempotency_key.as_deref().zip(dg.as_deref());
            push_event(
                tx,
                self.opts.actor,
                id,
                EventType::UsageRecorded.as_str(),
                None,
                Some(&data),
                None,
                key,
            )?;
            if let Some(c) = &crossing {
                self.append_crossing(tx, id, c)?;
            }
            read_back(tx, id)
        })
    }

    /// The session's budget and where usage stands against it (`session
    /// budget ID --check`; the seed's `checkBudget` → `{exceeded,
    /// remaining}`). A session without a budget reports null limits and
    /// `exceeded: false`. Read-only.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn check_budget(&self, id: &str) -> Result<Budget> {
        parse_session_id(id)?;
        self.read(|tx| {
            let Some(st) = sb::select_session_state(tx, id).map_err(db)? else {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            };
            let b = sb::select_budget(tx, id).map_err(db)?;
            Ok(budget_view(id, b.as_ref(), &st))
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Sets a live session's budget limits and policy (`session budget ID
    /// --max-tokens N …`): event `budget_set` with the whole budget as
    /// data, rev + 1. If usage is already over a new limit and the budget is
    /// not marked exceeded, this write is the crossing one
    /// (`budget_exceeded` and the policy follow); if usage is within every
    /// limit again, the mark clears. Returns the budget as
    /// [`Ledger::check_budget`] does.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (nothing given, a limit outside 0..=2^53−1),
    /// SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (terminal),
    /// SESSION_CONFLICT, STORE_BUSY.
    pub fn set_budget(&self, id: &str, req: SetBudget, m: &Mutation) -> Result<Written<Budget>> {
        parse_session_id(id)?;
        validate_key(m)?;
        if req.max_tokens.is_none()
            && req.max_api_calls.is_none()
            && req.max_duration_ms.is_none()
            && req.on_exceed.is_none()
        {
            return Err(Error::invalid(
                "budget",
                "give at least one of --max-tokens, --max-api-calls, --max-duration-ms or --on-exceed",
            ));
        }
        for (f, v) in [
            ("max_tokens", req.max_tokens),
            ("max_api_calls", req.max_api_calls),
            ("max_duration_ms", req.max_duration_ms),
        ] {
            if let Some(v) = v {
                check_count(f, v)?;
            }
        }
        let req_data = to_json(&(
            req.max_tokens,
            req.max_api_calls,
            req.max_duration_ms,
            req.on_exceed.map(OnExceed::as_str),
        ))?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "budget",
                text: None,
                step: None,
                data: Some(&req_data),
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.write(|tx| {
            if let Some(r) = replay(tx, id, m.idempotency_key.as_deref(), dg.as_deref())? {
                return self.check_in(tx, id).map(|b| Written::replay(b, r));
            }
            let st = writable_state(
                tx,
                id,
                "set the budget of",
                m.if_rev,
                m.lease.as_deref(),
                now,
            )?;
            let old = sb::select_budget(tx, id).map_err(db)?;
            let mut b = old.clone().unwrap_or_default();
            b.max_tokens = req.max_tokens.or(b.max_tokens);
            b.max_api_calls = req.max_api_calls.or(b.max_api_calls);
            b.max_duration_ms = req.max_duration_ms.or(b.max_duration_ms);
            let policy = req.on_exceed.or(b.on_exceed).unwrap_or(OnExceed::Pause);
            b.on_exceed = Some(policy);
            let data = to_json(&BudgetData {
                max_tokens: b.max_tokens,
                max_api_calls: b.max_api_calls,
                max_duration_ms: b.max_duration_ms,
                on_exceed: policy,
            })?;
            let at = now.max(st.updated_at_ms);
            // Within every limit again: re-armed.
            if over(&b, &figures(&b, &st.usage)).is_empty() {
                b.exceeded_at_ms = None;
            }
            let sql = if old.is_some() {
                sb::UPDATE_BUDGET_LIMITS
            } else {
                sb::INSERT_BUDGET
            };
            tx.prepare_cached(sql)
                .and_then(|mut s| {
                    s.execute(params![
                        id,
                        b.max_tokens,
                        b.max_api_calls,
                        b.max_duration_ms,
                        policy.as_str(),
                        b.exceeded_at_ms,
                        at
                    ])
                })
                .map_err(db)?;
            let crossing = apply_usage(tx, id, &st, &st.usage, at)?;
            let key = m.idempotency_key.as_deref().zip(dg.as_deref());
            push_event(
                tx,
                self.opts.actor,
                id,
                EventType::BudgetSet.as_str(),
                None,
                Some(&data),
                None,
                key,
            )?;
            if let Some(c) = &crossing {
                self.append_crossing(tx, id, c)?;
            }
            let b = sb::select_budget(tx, id).map_err(db)?;
            let st = sb::select_session_state(tx, id)
                .map_err(db)?
                .ok_or_else(|| Error::internal("an updated session could not be read back"))?;
            Ok(Written::applied(budget_view(id, b.as_ref(), &st)))
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Resets a live session's budget (`session budget ID --reset`; the
    /// seed's `resetBudget`): the budget counts usage from now on (its
    /// base moves to the session's current usage; the session's usage sums
    /// stay, they are history) and the exceeded mark clears, so the next
    /// crossing appends `budget_exceeded` again. Event `budget_reset` with
    /// the usage counted until then as data, rev + 1. A session the budget
    /// paused stays paused: resume it with `session resume`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (the session has no budget), SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION (terminal), SESSION_CONFLICT, STORE_BUSY.
    pub fn reset_budget(&self, id: &str, m: &Mutation) -> Result<Written<Budget>> {
        parse_session_id(id)?;
        validate_key(m)?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "budget_reset",
                text: None,
                step: None,
                data: None,
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.write(|tx| {
            if let Some(r) = replay(tx, id, m.idempotency_key.as_deref(), dg.as_deref())? {
                return self.check_in(tx, id).map(|b| Written::replay(b, r));
            }
            let st = writable_state(tx, id, "reset the budget of", m.if_rev, m.lease.as_deref(), now)?;
            let Some(b) = sb::select_budget(tx, id).map_err(db)? else {
                return Err(Error::invalid(
                    "budget",
                    "the session has no budget to reset; set one with `session budget ID --max-tokens N`",
                ));
            };
            let used = figures(&b, &st.usage);
            let at = now.max(st.updated_at_ms);
            let u = &st.usage;
            tx.prepare_cached(sb::UPDATE_BUDGET_RESET)
                .and_then(|mut s| {
                    s.execute(params![
                        id,
                        u.input_tokens + u.output_tokens,
                        u.api_calls,
                        u.duration_ms,
                        at
                    ])
                })
                .map_err(db)?;
            if !sb::update_session_usage(tx, id, at, u, st.rev, None).map_err(db)? {
                return Err(Error::internal(
                    "a session read under the write lock changed before its update",
                ));
            }
            let data = to_json(&used)?;
            let key = m.idempotency_key.as_deref().zip(dg.as_deref());
            push_event(
                tx,
                self.opts.actor,
                id,
                EventType::BudgetReset.as_str(),
                None,
                Some(&data),
                None,
                key,
            )?;
            self.check_in(tx, id).map(Written::applied)
        })
        .map_err(|e| self.fill_path(e))
    }

    fn check_in(&self, tx: &Connection, id: &str) -> Result<Budget> {
        let st = sb::select_session_state(tx, id)
            .map_err(db)?
            .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
        let b = sb::select_budget(tx, id).map_err(db)?;
        Ok(budget_view(id, b.as_ref(), &st))
    }
}
