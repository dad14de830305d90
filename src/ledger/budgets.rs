//! Session usage and budgets (docs/design.md, "Budgets"; Amber's budget tracker:
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

use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::write::{read_back, OneEvent, Op};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{Budget, BudgetRemaining, EventType, OnExceed, Session, Usage, Verb};
use crate::store::rows::BudgetRow;
use crate::store::{BudgetLimits, OneOutcome, OneSide, SessionChange, Tx};
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

mod crossing;

pub(super) use crossing::{add_total, add_usage, append_crossing, apply_usage, check_count};
use crossing::{figures, over, to_json};

/// `budget_set`'s data: the whole budget, `{max_tokens, max_api_calls,
/// max_duration_ms, on_exceed}`.
fn budget_data(b: &BudgetRow) -> Result<String> {
    to_json(&BudgetData {
        max_tokens: b.max_tokens,
        max_api_calls: b.max_api_calls,
        max_duration_ms: b.max_duration_ms,
        on_exceed: b.on_exceed.unwrap_or(OnExceed::Pause),
    })
}

/// The budget as `check` shows it: the row (none: no limits) against the
/// session's `usage`, with its `status` and `rev`.
fn budget_view(id: &str, b: Option<&BudgetRow>, status: &str, rev: i64, usage: &Usage) -> Budget {
    let empty = BudgetRow::default();
    let b = b.unwrap_or(&empty);
    let used = figures(b, usage);
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
        session_status: status.to_owned(),
        session_rev: rev,
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
    /// Adds usage to a live session (`session usage`; Amber's
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
                "give at least one of input_tokens, output_tokens, api_calls or duration_ms",
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
        let op = Op {
            id,
            verb: Verb::Usage,
            m,
            digest: dg.as_deref(),
        };
        let pipeline = || {
            self.mutate(
                op,
                |_| Ok(()),
                |w, ()| {
                    let usage = add_usage(&w.state().usage, &add)?;
                    let crossing = apply_usage(w, &usage)?;
                    w.event(EventType::UsageRecorded.as_str(), None, Some(&data), None)?;
                    if let Some(c) = &crossing {
                        append_crossing(w, c)?;
                    }
                    w.session()
                },
                &mut |tx, _| read_back(tx, id),
            )
        };
        // On a server, with a key, while the session has no budget: one
        // statement that adds the amounts (docs/postgres.md, "One round
        // trip per write").
        let one = OneEvent {
            event_type: EventType::UsageRecorded.as_str(),
            data: Some(&data),
            add_usage: Some(add),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }

    /// The session's budget and where usage stands against it (`session
    /// budget ID --check`; Amber's `checkBudget` → `{exceeded,
    /// remaining}`). A session without a budget reports null limits and
    /// `exceeded: false`. Read-only.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn check_budget(&self, id: &str) -> Result<Budget> {
        parse_session_id(id)?;
        self.read(|tx| check_in(tx, id))
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
                "give at least one of max_tokens, max_api_calls, max_duration_ms or on_exceed",
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
        let op = Op {
            id,
            verb: Verb::SetBudget,
            m,
            digest: dg.as_deref(),
        };
        let pipeline = || self.set_budget_in(op, req);
        // On a server, with a key, while usage is within the merged limits:
        // one statement (docs/postgres.md, "One round trip per write"),
        // which returns the budget it wrote.
        let one = OneEvent {
            event_type: EventType::BudgetSet.as_str(),
            side: Some(OneSide::BudgetSet {
                max_tokens: req.max_tokens,
                max_api_calls: req.max_api_calls,
                max_duration_ms: req.max_duration_ms,
                on_exceed: req.on_exceed,
            }),
            ..OneEvent::default()
        };
        self.budget_one_or(op, &one, pipeline)
    }

    /// A budget verb's statement `one` where it may be sent (on a server,
    /// with a key), answered with the budget it wrote; the pipeline's
    /// answer when it applied nothing, or after a lost reply (which finds
    /// the key: a replay).
    fn budget_one_or(
        &self,
        op: Op<'_>,
        one: &OneEvent<'_>,
        pipeline: impl FnOnce() -> Result<Written<Budget>>,
    ) -> Result<Written<Budget>> {
        let outcome = match self.try_one_with(op, one, |w| self.store.budget_one(w))? {
            OneOutcome::Applied(b) => {
                let (s, row) = *b;
                OneOutcome::Applied(Box::new(budget_view(
                    op.id,
                    Some(&row),
                    s.status.as_str(),
                    s.rev,
                    &s.usage,
                )))
            }
            OneOutcome::NotApplied => OneOutcome::NotApplied,
            OneOutcome::Unknown => OneOutcome::Unknown,
        };
        super::write::one_or(outcome, pipeline)
    }

    /// [`Ledger::reset_budget`] through the pipeline's transaction.
    fn reset_budget_in(&self, op: Op<'_>) -> Result<Written<Budget>> {
        let id = op.id;
        self.mutate(
            op,
            |_| Ok(()),
            |w, ()| {
                let Some(b) = w.tx().select_budget(id)? else {
                    return Err(Error::invalid(
                        "budget",
                        "the session has no budget to reset; set one with `session budget ID --max-tokens N`",
                    ));
                };
                let u = w.state().usage;
                let used = figures(&b, &u);
                let at = w.at();
                w.tx().reset_budget(id, &u, at)?;
                w.update_read(
                    Verb::ResetBudget.allowed_from(),
                    SessionChange {
                        usage: Some(u),
                        ..SessionChange::default()
                    },
                )
                .map_err(|_| {
                    Error::internal("a session read under the write lock changed before its update")
                })?;
                let data = to_json(&used)?;
                w.event(EventType::BudgetReset.as_str(), None, Some(&data), None)?;
                check_in(w.tx(), id)
            },
            &mut |tx, _| check_in(tx, id),
        )
    }

    /// [`Ledger::set_budget`] through the pipeline's transaction.
    fn set_budget_in(&self, op: Op<'_>, req: SetBudget) -> Result<Written<Budget>> {
        let id = op.id;
        self.mutate(
            op,
            |_| Ok(()),
            |w, ()| {
                let old = w.tx().select_budget(id)?;
                let mut b = old.clone().unwrap_or_default();
                b.max_tokens = req.max_tokens.or(b.max_tokens);
                b.max_api_calls = req.max_api_calls.or(b.max_api_calls);
                b.max_duration_ms = req.max_duration_ms.or(b.max_duration_ms);
                let policy = req.on_exceed.or(b.on_exceed).unwrap_or(OnExceed::Pause);
                b.on_exceed = Some(policy);
                let data = budget_data(&b)?;
                // Within every limit again: re-armed.
                let usage = w.state().usage;
                if over(&b, &figures(&b, &usage)).is_empty() {
                    b.exceeded_at_ms = None;
                }
                let limits = BudgetLimits {
                    max_tokens: b.max_tokens,
                    max_api_calls: b.max_api_calls,
                    max_duration_ms: b.max_duration_ms,
                    on_exceed: policy,
                    exceeded_at_ms: b.exceeded_at_ms,
                };
                let at = w.at();
                w.tx().upsert_budget(id, &limits, old.is_none(), at)?;
                let crossing = apply_usage(w, &usage)?;
                w.event(EventType::BudgetSet.as_str(), None, Some(&data), None)?;
                if let Some(c) = &crossing {
                    append_crossing(w, c)?;
                }
                check_in(w.tx(), id)
            },
            &mut |tx, _| check_in(tx, id),
        )
    }

    /// Resets a live session's budget (`session budget ID --reset`; the
    /// Amber's `resetBudget`): the budget counts usage from now on (its
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
        let op = Op {
            id,
            verb: Verb::ResetBudget,
            m,
            digest: dg.as_deref(),
        };
        let pipeline = || self.reset_budget_in(op);
        // On a server, with a key, on a session with a budget: one
        // statement (docs/postgres.md, "One round trip per write").
        let one = OneEvent {
            event_type: EventType::BudgetReset.as_str(),
            side: Some(OneSide::BudgetReset),
            ..OneEvent::default()
        };
        self.budget_one_or(op, &one, pipeline)
    }
}

/// The session's budget view, read in the transaction.
///
/// # Errors
/// SESSION_NOT_FOUND; the store's.
fn check_in(tx: &mut dyn Tx, id: &str) -> Result<Budget> {
    let st = tx
        .select_session_state(id)?
        .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
    let b = tx.select_budget(id)?;
    Ok(budget_view(id, b.as_ref(), &st.status, st.rev, &st.usage))
}
