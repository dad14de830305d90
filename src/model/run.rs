//! Runs: one execution inside a session (docs/design.md, "Runs"; the
//! AgentSessionManager's `Run`), and session budgets (Amber's).
//!
//! Plain data only: the transition table lives here, the SQL in
//! `store::sqlite::sql::runs` and the PostgreSQL twin, the behaviour in `ledger::runs`.

use super::event::EventType;
use super::ids::parse_prefixed_id;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::fmt;
use std::str::FromStr;

/// The largest token count, API-call count, duration or total logbook
/// stores: 2^53 − 1 = 9,007,199,254,740,991, the largest integer every JSON
/// reader holds exactly. A write whose total would pass it is refused
/// (INVALID_ARGUMENT), never wrapped or clamped.
pub const COUNT_MAX: i64 = (1 << 53) - 1;

/// A run id: `run_` followed by 16 lowercase hex digits (8 random bytes).
///
/// Rule: docs/design.md, "Runs".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// The id prefix.
    pub const PREFIX: &'static str = "run_";

    /// Builds an id from 8 bytes (hex-encoded, lowercase).
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        RunId(format!("{}{}", Self::PREFIX, hex::encode(bytes)))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RunId {
    type Err = super::ids::IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_prefixed_id(
            s,
            Self::PREFIX,
            "`run_` followed by 16 lowercase hex digits",
        )
        .map(RunId)
    }
}

impl TryFrom<String> for RunId {
    type Error = super::ids::IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A run's status (docs/design.md, "Runs"; the run model's state machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Created; waits for `start`.
    Pending,
    /// Executing; at most one per session.
    Running,
    /// Terminal: finished with an output.
    Completed,
    /// Terminal: ended with an error `{code, message}`.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: ran out of time.
    Timeout,
}

impl RunStatus {
    /// Every status, in the order of the schema's CHECK list.
    pub const VARIANTS: [RunStatus; 6] = [
        Self::Pending,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::Timeout,
    ];

    /// The stored and wire name, e.g. `"running"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
        }
    }

    /// Whether no transition leaves this status (ended_at_ms is set).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Cancelled | Self::Timeout
        )
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                "expected one of pending, running, completed, failed, cancelled, timeout".to_owned()
            })
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verb on an existing run, with its transition rule.
///
/// Rule: docs/design.md, "Runs": pending → running → completed | failed | cancelled |
/// timeout. A pending run may also be cancelled, failed or timed out (it
/// never started); usage and turns are recorded on a running run only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunVerb {
    /// pending → running (the run model's `update_status(run, :running)`).
    Start,
    /// running → running, adding token usage (the run model's `update_token_usage`).
    Usage,
    /// running → running, turn_count + 1 (the run model's `increment_turn`).
    Turn,
    /// running → completed with an output (the run model's `set_output`).
    Complete,
    /// pending | running → failed with an error (the run model's `set_error`).
    Fail,
    /// pending | running → cancelled (the run model's `cancel_run`).
    Cancel,
    /// pending | running → timeout.
    Timeout,
}

impl RunVerb {
    /// Every verb.
    pub const VARIANTS: [RunVerb; 7] = [
        Self::Start,
        Self::Usage,
        Self::Turn,
        Self::Complete,
        Self::Fail,
        Self::Cancel,
        Self::Timeout,
    ];

    /// The verb's name as used in messages and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Usage => "record usage of",
            Self::Turn => "count a turn of",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Cancel => "cancel",
            Self::Timeout => "time out",
        }
    }

    /// The statuses this verb may leave from.
    pub fn allowed_from(self) -> &'static [RunStatus] {
        use RunStatus::*;
        match self {
            Self::Start => &[Pending],
            Self::Usage | Self::Turn | Self::Complete => &[Running],
            Self::Fail | Self::Cancel | Self::Timeout => &[Pending, Running],
        }
    }

    /// The status after the verb.
    pub fn target(self) -> RunStatus {
        match self {
            Self::Start | Self::Usage | Self::Turn => RunStatus::Running,
            Self::Complete => RunStatus::Completed,
            Self::Fail => RunStatus::Failed,
            Self::Cancel => RunStatus::Cancelled,
            Self::Timeout => RunStatus::Timeout,
        }
    }

    /// The event the verb appends to the session's timeline.
    pub fn event_type(self) -> &'static str {
        match self {
            Self::Start => EventType::RunStarted,
            Self::Usage => EventType::RunUsage,
            Self::Turn => EventType::RunTurn,
            Self::Complete => EventType::RunCompleted,
            Self::Fail => EventType::RunFailed,
            Self::Cancel => EventType::RunCancelled,
            Self::Timeout => EventType::RunTimeout,
        }
        .as_str()
    }

    /// `Some(next status)` when the verb is allowed from `from`.
    pub fn apply(self, from: RunStatus) -> Option<RunStatus> {
        self.allowed_from().contains(&from).then(|| self.target())
    }
}

/// A run's error: `{code, message}` (the run model's `set_error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunError {
    /// A short machine-readable code, e.g. `provider_timeout` (1–128
    /// characters, one line).
    pub code: String,
    /// What happened (1–4096 characters; redacted).
    pub message: String,
}

/// A run's token usage (sums).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunUsage {
    /// Input (prompt) tokens, 0..=2^53−1.
    pub input_tokens: i64,
    /// Output (completion) tokens, 0..=2^53−1.
    pub output_tokens: i64,
    /// API calls, 0..=2^53−1.
    pub api_calls: i64,
}

/// One run, as `run show` prints it and `Run.to_map` gives it in the run model.
///
/// Serializes in the field order below (the fixed JSON key order).
/// Round-trips through JSON: [`Run::from_json`] reads what `Serialize` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// `run_` + 16 hex.
    pub run_id: RunId,
    /// The session the run belongs to.
    pub session_id: String,
    /// Its status.
    pub status: RunStatus,
    /// The input given at creation (a JSON object ≤ 4 MiB compact), or null.
    pub input: Option<Box<RawValue>>,
    /// The output given to `complete` (a JSON object ≤ 4 MiB), or null.
    pub output: Option<Box<RawValue>>,
    /// The error given to `fail`, or null.
    pub error: Option<RunError>,
    /// Caller metadata (a JSON object ≤ 256 KiB).
    pub metadata: Box<RawValue>,
    /// Accumulated token usage; rolled into the session's usage as it is
    /// recorded.
    pub usage: RunUsage,
    /// Turns counted with `turn`.
    pub turn_count: i64,
    /// Creation time, ms since the Unix epoch (UTC).
    pub created_at_ms: i64,
    /// Time of the run's latest change, ms since the Unix epoch (UTC).
    pub updated_at_ms: i64,
    /// When it started running, or null.
    pub started_at_ms: Option<i64>,
    /// When it reached a terminal status, or null.
    pub ended_at_ms: Option<i64>,
}

/// The owned, deserializable form of a [`Run`]'s JSON map (the run model's
/// `Run.from_map`).
#[derive(Debug, Clone, Deserialize)]
struct RunMap {
    run_id: RunId,
    session_id: String,
    status: RunStatus,
    input: Option<Box<RawValue>>,
    output: Option<Box<RawValue>>,
    error: Option<RunErrorMap>,
    metadata: Box<RawValue>,
    usage: RunUsageMap,
    turn_count: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    started_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
struct RunErrorMap {
    code: String,
    message: String,
}

#[derive(Debug, Clone, Deserialize)]
struct RunUsageMap {
    input_tokens: i64,
    output_tokens: i64,
    api_calls: i64,
}

impl Run {
    /// The run as a JSON map (the run model's `Run.to_map`): the same text `run
    /// show --json` prints as `data`.
    ///
    /// # Errors
    /// A serde error (it cannot fail for a run read from the ledger).
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }

    /// Rebuilds a run from [`Run::to_json`]'s map (the run model's
    /// `Run.from_map`).
    ///
    /// # Errors
    /// A serde error for text that is not such a map (a malformed id or
    /// status included).
    pub fn from_json(text: &str) -> serde_json::Result<Run> {
        let m: RunMap = serde_json::from_str(text)?;
        Ok(Run {
            run_id: m.run_id,
            session_id: m.session_id,
            status: m.status,
            input: m.input,
            output: m.output,
            error: m.error.map(|e| RunError {
                code: e.code,
                message: e.message,
            }),
            metadata: m.metadata,
            usage: RunUsage {
                input_tokens: m.usage.input_tokens,
                output_tokens: m.usage.output_tokens,
                api_calls: m.usage.api_calls,
            },
            turn_count: m.turn_count,
            created_at_ms: m.created_at_ms,
            updated_at_ms: m.updated_at_ms,
            started_at_ms: m.started_at_ms,
            ended_at_ms: m.ended_at_ms,
        })
    }
}

/// What a budget does when a write crosses one of its limits (the Amber
/// Amber's `budget.onExceed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExceed {
    /// Pause the session (if it is active; a pending or paused one stays as
    /// it is). The default, as in Amber's budgets.
    Pause,
    /// Fail the session, with the end reason `budget exceeded: …`.
    Fail,
    /// Only append `budget_exceeded`.
    Warn,
}

impl OnExceed {
    /// Every policy, in the order of the schema's CHECK list.
    pub const VARIANTS: [OnExceed; 3] = [Self::Pause, Self::Fail, Self::Warn];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Fail => "fail",
            Self::Warn => "warn",
        }
    }
}

impl FromStr for OnExceed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| "expected one of pause, fail, warn".to_owned())
    }
}

/// A session's budget and where its usage stands (`session budget ID
/// --check`).
///
/// "Tokens" means input + output tokens. Every figure counts the session's
/// usage since the budget's last reset (`session usage` plus every run's
/// usage). Durations are the `duration_ms` reported with `session usage`,
/// not wall-clock time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The session.
    pub session_id: String,
    /// Token limit (input + output), or null.
    pub max_tokens: Option<i64>,
    /// API-call limit, or null.
    pub max_api_calls: Option<i64>,
    /// Limit on reported duration, ms, or null.
    pub max_duration_ms: Option<i64>,
    /// What crossing a limit does; null when the session has no budget.
    pub on_exceed: Option<OnExceed>,
    /// Usage counted against the limits (since the last reset).
    pub used: BudgetFigures,
    /// What is left under each limit (never below 0), or null where no
    /// limit is set.
    pub remaining: BudgetRemaining,
    /// Whether any limit is exceeded now.
    pub exceeded: bool,
    /// The limits exceeded now: `tokens`, `api_calls`, `duration_ms`.
    pub exceeded_limits: Vec<&'static str>,
    /// When the write that crossed a limit committed (ms since the Unix
    /// epoch), or null: set once per crossing, cleared by a reset.
    pub exceeded_at_ms: Option<i64>,
    /// The session's status now (a `pause` or `fail` policy changes it).
    pub session_status: String,
    /// The session's rev now (for a following `--if-rev`).
    pub session_rev: i64,
}

/// Usage figures counted against a budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BudgetFigures {
    /// Input + output tokens.
    pub tokens: i64,
    /// API calls.
    pub api_calls: i64,
    /// Reported duration, ms.
    pub duration_ms: i64,
}

/// What is left under each limit; null where no limit is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BudgetRemaining {
    /// Tokens left (input + output).
    pub tokens: Option<i64>,
    /// API calls left.
    pub api_calls: Option<i64>,
    /// Duration left, ms.
    pub duration_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunStatus::*;

    #[test]
    fn run_transition_table_is_the_seed_state_machine() {
        assert_eq!(RunVerb::Start.apply(Pending), Some(Running));
        assert_eq!(RunVerb::Start.apply(Running), None);
        for v in [RunVerb::Usage, RunVerb::Turn] {
            assert_eq!(v.apply(Running), Some(Running));
            assert_eq!(v.apply(Pending), None);
        }
        assert_eq!(RunVerb::Complete.apply(Running), Some(Completed));
        assert_eq!(RunVerb::Complete.apply(Pending), None);
        for (v, t) in [
            (RunVerb::Fail, Failed),
            (RunVerb::Cancel, Cancelled),
            (RunVerb::Timeout, Timeout),
        ] {
            assert_eq!(v.apply(Pending), Some(t));
            assert_eq!(v.apply(Running), Some(t));
        }
        for s in RunStatus::VARIANTS.into_iter().filter(|s| s.is_terminal()) {
            for v in RunVerb::VARIANTS {
                assert_eq!(v.apply(s), None, "{v:?} from {s:?}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for s in RunStatus::VARIANTS {
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), s);
        }
        for p in OnExceed::VARIANTS {
            assert_eq!(p.as_str().parse::<OnExceed>().unwrap(), p);
        }
        assert!("run_0123456789abcdef".parse::<RunId>().is_ok());
        assert!("ses_0123456789abcdef".parse::<RunId>().is_err());
        assert_eq!(COUNT_MAX, 9_007_199_254_740_991);
    }
}
