//! The writes the store interface takes: which session a guarded UPDATE
//! may change and what it sets, a write sent as one statement, a new
//! session's rows, a run's change and a budget's limits. Plain data, no
//! driver types; shared by every backend.

use crate::model::{SessionStatus, Usage};

/// Which sessions a guarded UPDATE may change: those whose status is one of
/// `from` and, with `rev`, whose rev is that (docs/design.md, "Storage": the conditional
/// UPDATE of every mutation).
#[derive(Debug, Clone, Copy)]
pub struct SessionGuard<'a> {
    /// The statuses the verb may start from.
    pub from: &'a [SessionStatus],
    /// Only at this rev (`--if-rev`, or the rev read under the write lock).
    pub rev: Option<i64>,
}

/// What a guarded UPDATE of a session sets besides `rev = rev + 1` and
/// `updated_at_ms = max(updated_at_ms, now_ms)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionChange<'a> {
    /// The write's time, ms since the epoch.
    pub now_ms: i64,
    /// The new status; a terminal one also sets `ended_at_ms` (never below
    /// `updated_at_ms`).
    pub status: Option<SessionStatus>,
    /// `final_result` (completion).
    pub final_result: Option<&'a str>,
    /// `end_reason` (fail, cancel, a rejected gate, a budget policy).
    pub end_reason: Option<&'a str>,
    /// `stage`: `Some(None)` clears it.
    pub stage: Option<Option<&'a str>>,
    /// `checkpoint_seq` becomes the seq of the event this mutation appends
    /// next.
    pub checkpoint_at_next_seq: bool,
    /// The usage sums (not deltas).
    pub usage: Option<Usage>,
}

/// A mutation of one session that is one guarded UPDATE, its event and
/// what comes with them — the open runs an end cancels first, the status
/// change's event after, the verb's own row ([`OneSide`]) — and nothing
/// else: what a backend may apply as a single statement (docs/postgres.md,
/// "One round trip per write"). The statement applies it only where the
/// whole write pipeline would apply exactly this: the guard matches, the
/// lease rule holds trivially (no live lease, or the presented token's
/// lease, live), the key is not recorded yet, (as asked) no gate is
/// pending, and the side's own rule holds. Anything else applies nothing,
/// and the caller runs the pipeline, which diagnoses.
#[derive(Debug, Clone, Copy)]
pub struct OneWrite<'a> {
    /// The session.
    pub session_id: &'a str,
    /// The verb's statuses and `--if-rev`.
    pub guard: SessionGuard<'a>,
    /// What the UPDATE sets (its `now_ms` is the write's time).
    pub change: SessionChange<'a>,
    /// The event's type.
    pub event_type: &'a str,
    /// The event's detail.
    pub detail: Option<&'a str>,
    /// The event's data (compact JSON text).
    pub data: Option<&'a str>,
    /// Who writes (`events.actor_type`).
    pub actor_type: crate::model::ActorType,
    /// (idempotency key, request digest): the key tells whether a
    /// statement whose reply was lost was applied. `None` only for a lease
    /// taken or renewed ([`OneSide::LeaseTake`]), whose token tells it.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// The SHA-256 (hex) of the lease token the write presents: apply only
    /// while the session's lease has it and has not expired at `now_ms`
    /// (docs/design.md, "Leases"); `None`: only while no lease is live at
    /// `now_ms` (an expired one is dead, whoever owns it). A lease verb ([`OneSide::LeaseTake`], [`OneSide::LeaseRelease`])
    /// has its own rule instead.
    pub lease_sha256: Option<&'a str>,
    /// Usage to add to the session's sums (`session usage`): apply only
    /// while the session has no budget (whose policy the pipeline applies)
    /// and no sum would pass 2^53−1.
    pub add_usage: Option<Usage>,
    /// The write ends the session: every run of it still pending or
    /// running is cancelled first, each with its `run_cancelled` event
    /// before the write's own (docs/design.md, "Runs"; the rule of
    /// `ledger::run_end`).
    pub end_runs: Option<OneRunsEnd<'a>>,
    /// Apply only while no gate of the session is pending (`resume`).
    pub no_pending_gate: bool,
    /// A snapshot stored with the event (a checkpoint's `state`), with the
    /// session's stage and the event's time, as the pipeline stores it.
    pub snapshot: Option<OneSnapshot<'a>>,
    /// A second event after the write's own, at the same time, with no
    /// data: the status change a gate verb causes (`paused`, `resumed`,
    /// `failed`, `cancelled`; docs/design.md, "Event order"). (type, detail).
    pub follow: Option<(&'a str, Option<&'a str>)>,
    /// The verb's own row, written with its event.
    pub side: Option<OneSide<'a>>,
}

/// How a session's end cancels its open runs ([`OneWrite::end_runs`]):
/// each run's error and its event's detail and data.
#[derive(Debug, Clone, Copy)]
pub struct OneRunsEnd<'a> {
    /// The run's `error_code` (`SESSION_ENDED`).
    pub code: &'a str,
    /// The run's `error_message` and its event's detail.
    pub message: &'a str,
    /// The event's data (compact JSON text).
    pub data: &'a str,
}

/// The row a gate, lease or budget verb writes beside its session and
/// event ([`OneWrite::side`]), with the rule the statement adds for it.
/// Where the event's data depends on rows only the server has read (a
/// gate's round, a released lease's owner), the statement builds it, in
/// the exact text `serde_json` gives the pipeline's (keys in the same
/// order, no spaces).
#[derive(Debug, Clone, Copy)]
pub enum OneSide<'a> {
    /// `gate open`: the gate's next round (`{gate, kind, round}` as the
    /// event's data); applies only while no round of that name is pending.
    /// `approved` (an `auto` gate): decided at once.
    GateOpen {
        /// The gate's name.
        name: &'a str,
        /// Its kind (`auto`, `user-approval`, `step-confirm`).
        kind: &'a str,
        /// An `auto` gate: approved by its opening event.
        approved: bool,
    },
    /// `gate approve` / `reject`: the pending round of `name` decided
    /// (`{gate, kind, round, outcome?}` as the event's data); applies only
    /// while one is pending.
    GateDecide {
        /// The gate's name.
        name: &'a str,
        /// `approved` or `rejected`.
        status: &'a str,
        /// The note or reason (redacted).
        text: Option<&'a str>,
        /// A rejection's `failed` or `cancelled`.
        outcome: Option<&'a str>,
    },
    /// `lock` taking a free lease (`OneWrite::lease_sha256` `None`) or
    /// renewing the caller's live one (`lease_sha256` its token's): the
    /// row with this token, owner and expiry, acquired by the event. A
    /// free lease is no lease row, or one expired at the write's time,
    /// which is taken over (docs/design.md, "Leases"): the event is then
    /// `lease_taken_over` with the previous owner in its data (`previous`,
    /// reason `expired`), built by the statement, which returns that owner
    /// ([`super::Store::lease_one`]).
    LeaseTake {
        /// SHA-256 (hex) of the token.
        token_sha256: &'a str,
        /// The owner's pid.
        pid: i64,
        /// The owner's host.
        hostname: &'a str,
        /// When it expires, ms since the epoch.
        expires_at_ms: i64,
    },
    /// `unlock`: the lease with this token deleted (expired or not), its
    /// owner and expiry as the event's data; applies only while the
    /// session's lease has the token.
    LeaseRelease {
        /// SHA-256 (hex) of the token.
        token_sha256: &'a str,
    },
    /// A checkpoint's references (docs/design.md, "Model"), de-duplicated,
    /// in the order given: `kinds[i]` (`plan`, `operation`, `deployment`)
    /// and `ids[i]`. Those not linked yet are linked to the event, each
    /// kind numbered on from its count; applies only while no kind would
    /// pass 256 linked ids (the pipeline's INVALID_ARGUMENT).
    Refs {
        /// Each reference's kind.
        kinds: &'a [String],
        /// Each reference's id.
        ids: &'a [String],
    },
    /// `budget`: the limits and policy given, merged with the stored
    /// budget's (what is not given is kept; a new budget counts from no
    /// usage and its policy defaults to `pause`), written with the
    /// exceeded mark cleared, and `budget_set` with the merged budget as
    /// its data (built by the statement). Applies only while the usage
    /// counted from the budget's base is within every merged limit (a
    /// crossing marks the budget and applies its policy: the pipeline's).
    /// The statement returns the budget ([`super::Store::budget_one`]).
    BudgetSet {
        /// Token limit given.
        max_tokens: Option<i64>,
        /// API-call limit given.
        max_api_calls: Option<i64>,
        /// Duration limit given, ms.
        max_duration_ms: Option<i64>,
        /// Policy given.
        on_exceed: Option<crate::model::OnExceed>,
    },
    /// `budget --reset`: the budget's base moved to the session's usage and
    /// its mark cleared, with `budget_reset` (the usage counted until then
    /// as its data, built by the statement); applies only while the session
    /// has a budget. The statement returns the budget
    /// ([`super::Store::budget_one`]).
    BudgetReset,
}

/// A lease as a one-statement `lock` found it and took it over
/// ([`super::Store::lease_one`]): its owner and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTakenOver {
    /// The previous owner's pid.
    pub pid: i64,
    /// The previous owner's host.
    pub hostname: String,
    /// When the previous lease expired, ms since the epoch.
    pub expires_at_ms: i64,
}

/// What a one-statement write came to ([`super::Store::write_one`],
/// [`super::Store::run_one`]).
#[derive(Debug)]
pub enum OneOutcome<T = crate::model::Session> {
    /// Applied: the session (or, for a run verb, the run) as it now stands.
    Applied(Box<T>),
    /// Nothing was applied this way (SQLite; or the statement matched no
    /// row, or the server refused it): the caller runs the pipeline.
    NotApplied,
    /// The connection ended before the reply: the statement may have been
    /// applied. The caller runs the pipeline, which finds the write's key
    /// (a replay) or applies it; if the pipeline cannot reach the server
    /// either, the outcome stays unknown ([`crate::Error::CommitUnknown`]).
    Unknown,
}

/// A run verb as one statement ([`super::Store::run_one`]): the run's
/// guarded UPDATE, its session's (rev + 1, `updated_at_ms`, for usage the
/// sums), the `run_*` event carrying the run's id, and the key. As with
/// [`OneWrite`] it applies only where the write pipeline would apply exactly
/// this: the session is live (pending, active, paused) and at `if_rev`, the
/// lease rule holds as for [`OneWrite`], the key is not recorded, the run is in a status its
/// verb starts from, and, for `Start`, no other run of the session is
/// running; for `Usage`, the session has no budget (whose policy the
/// pipeline applies) and no run or session total would pass 2^53−1.
/// Anything else applies nothing, and the caller runs the pipeline.
#[derive(Debug, Clone, Copy)]
pub struct OneRunWrite<'a> {
    /// The run (`run_` + 16 hex); its session is the run's, or the one
    /// [`OneRunChange::Create`] names.
    pub run_id: &'a str,
    /// The new run, or the run's UPDATE.
    pub change: OneRunChange<'a>,
    /// The write's time, ms since the epoch.
    pub now_ms: i64,
    /// `--if-rev` of the session.
    pub if_rev: Option<i64>,
    /// The event's type (`run_started`, …).
    pub event_type: &'a str,
    /// The event's detail.
    pub detail: Option<&'a str>,
    /// The event's data; for `Turn` the statement writes
    /// `{"turn_count":N}` with the run's new count instead.
    pub data: Option<&'a str>,
    /// Who writes (`events.actor_type`).
    pub actor_type: crate::model::ActorType,
    /// (idempotency key, request digest), as [`OneWrite::idempotency`].
    pub idempotency: (&'a str, &'a str),
    /// The presented lease token's SHA-256, as [`OneWrite::lease_sha256`].
    pub lease_sha256: Option<&'a str>,
}

/// What a [`OneRunWrite`] does to its run.
#[derive(Debug, Clone, Copy)]
pub enum OneRunChange<'a> {
    /// Inserts the run, pending, in this session (`run create`): applied
    /// only while no run has its id.
    Create {
        /// The session.
        session_id: &'a str,
        /// The input (compact JSON object text), if any.
        input: Option<&'a str>,
        /// The metadata (compact JSON object text).
        metadata: &'a str,
    },
    /// The run's UPDATE (not `SessionEnded`, which only a session's end
    /// makes).
    Change(RunChange<'a>),
}

/// The snapshot of a one-statement checkpoint ([`OneWrite::snapshot`]).
#[derive(Debug, Clone, Copy)]
pub struct OneSnapshot<'a> {
    /// The checkpoint's step.
    pub step: Option<&'a str>,
    /// The state: compact, redacted JSON object text.
    pub state: &'a str,
    /// The binary payload stored beside it (schema V11), if any.
    pub payload: Option<&'a [u8]>,
}

/// A checkpoint as a one-statement write stores it: its event's detail and
/// data, its snapshot and (a create's first) its references. As a new
/// session's first
/// ([`super::Store::create_one`]) it is the event at seq 1, and the session is
/// left at rev 2 with `checkpoint_seq` 1, the rows a create followed by a
/// checkpoint in one transaction leaves.
#[derive(Debug, Clone, Copy)]
pub struct OneCheckpoint<'a> {
    /// The event's detail (the checkpoint's note).
    pub note: Option<&'a str>,
    /// The event's data (compact JSON text: `{step, …, snapshot}`).
    pub data: &'a str,
    /// The snapshot, when the checkpoint has a state.
    pub snapshot: Option<OneSnapshot<'a>>,
    /// A create's first checkpoint's references, flattened in order: each
    /// one's kind and id (empty: none). A new session has none linked, so
    /// each is linked once, each kind numbered from 0 in order. A
    /// `checkpoint` on an existing session links its references through
    /// [`OneSide::Refs`] instead.
    pub refs: (&'a [String], &'a [String]),
}

/// A new session row (create, fork and import): the `sessions` row, its
/// `session_data` and its tags.
#[derive(Debug, Clone, Copy)]
pub struct SessionRow<'a> {
    /// `ses_` + 16 hex.
    pub session_id: &'a str,
    /// Status.
    pub status: SessionStatus,
    /// Title.
    pub title: &'a str,
    /// Goal.
    pub goal: Option<&'a str>,
    /// App.
    pub app: Option<&'a str>,
    /// Agent id.
    pub agent_id: Option<&'a str>,
    /// Route.
    pub route: Option<&'a str>,
    /// Stage.
    pub stage: Option<&'a str>,
    /// Parent session.
    pub parent_session_id: Option<&'a str>,
    /// Tags, de-duplicated, in order.
    pub tags: &'a [String],
    /// Compact JSON object text.
    pub context: &'a str,
    /// Compact JSON object text.
    pub metadata: &'a str,
    /// Actor type.
    pub actor_type: crate::model::ActorType,
    /// Actor id.
    pub actor_id: Option<&'a str>,
    /// Revision (1 for a new session).
    pub rev: i64,
    /// Seq of the latest checkpoint event.
    pub checkpoint_seq: Option<i64>,
    /// Completion result.
    pub final_result: Option<&'a str>,
    /// Fail / cancel reason.
    pub end_reason: Option<&'a str>,
    /// Usage sums.
    pub usage: Usage,
    /// ms since the epoch.
    pub created_at_ms: i64,
    /// ms since the epoch.
    pub updated_at_ms: i64,
    /// ms since the epoch, terminal sessions only.
    pub ended_at_ms: Option<i64>,
}

/// A run UPDATE (the run verbs and a session's end); each is guarded by
/// the run statuses its verb starts from.
#[derive(Debug, Clone, Copy)]
pub enum RunChange<'a> {
    /// pending → running.
    Start,
    /// Usage added: the amounts to add to the run's sums.
    Usage {
        /// Input tokens.
        input_tokens: i64,
        /// Output tokens.
        output_tokens: i64,
        /// API calls.
        api_calls: i64,
    },
    /// One more turn.
    Turn,
    /// → completed, with the output object text.
    Complete(Option<&'a str>),
    /// → failed, with the error.
    Fail {
        /// Error code.
        code: &'a str,
        /// Error message.
        message: &'a str,
    },
    /// → cancelled.
    Cancel,
    /// → timeout.
    Timeout,
    /// → cancelled because its session ended (`SESSION_ENDED`).
    SessionEnded {
        /// The error code, `SESSION_ENDED`.
        code: &'a str,
        /// The error message.
        message: &'a str,
    },
}

/// A budget's limits and policy as `session budget` sets them.
#[derive(Debug, Clone, Copy)]
pub struct BudgetLimits {
    /// Token limit.
    pub max_tokens: Option<i64>,
    /// API-call limit.
    pub max_api_calls: Option<i64>,
    /// Duration limit, ms.
    pub max_duration_ms: Option<i64>,
    /// `pause`, `fail` or `warn`.
    pub on_exceed: crate::model::OnExceed,
    /// When a limit was crossed, or `None` (re-armed).
    pub exceeded_at_ms: Option<i64>,
}
