//! Timeline events (docs/design.md, "Model").

use super::session::ActorType;
use serde::Serialize;
use serde_json::value::RawValue;
use std::fmt;

/// One event of a session's append-only timeline.
///
/// Serializes in the field order below (the fixed JSON key order).
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// The global, durable cursor across all sessions.
    pub event_id: i64,
    /// The session the event belongs to.
    pub session_id: String,
    /// Per-session sequence number, contiguous from 0.
    pub seq: i64,
    /// The event type, e.g. `"checkpoint"` or an agent's `"x.build"`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When, in ms since the Unix epoch (UTC); never below the previous
    /// event's of the same session.
    pub at_ms: i64,
    /// Which entry point wrote it.
    pub actor_type: ActorType,
    /// Short text, e.g. a checkpoint note or a reason.
    pub detail: Option<String>,
    /// A JSON object, or null.
    pub data: Option<Box<RawValue>>,
    /// The run the event belongs to, if any.
    pub run_id: Option<String>,
}

/// The event types logbook itself emits (docs/design.md, "Model"): the core verbs' and
/// those of stages, gates, snapshots, leases, runs, usage and budgets.
///
/// Every type a verb writes is one of these, so a match over them (the
/// CLI's one-line summaries) is exhaustive; agents' own types start with
/// `x.` and are not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Session created.
    Created,
    /// pending → active.
    Started,
    /// active → paused.
    Paused,
    /// paused → active.
    Resumed,
    /// A checkpoint was recorded.
    Checkpoint,
    /// The session completed.
    Completed,
    /// The session failed.
    Failed,
    /// The session was cancelled.
    Cancelled,
    /// A stage began (as in Amber's format).
    StageStarted,
    /// A stage finished.
    StageCompleted,
    /// A stage failed (the session does not).
    StageFailed,
    /// A stage is being tried again.
    StageRetrying,
    /// A `user-approval` or `step-confirm` gate was opened; the session
    /// paused on it.
    GateOpened,
    /// A gate was approved (an `auto` gate at once, when opened).
    GateApproved,
    /// A gate was rejected; the session failed or was cancelled.
    GateRejected,
    /// Stage and context were restored from a checkpoint snapshot.
    CheckpointRestored,
    /// A child session was forked from this one (on the source), or this
    /// session was forked from another (on the child).
    Forked,
    /// A lease was taken (or renewed by its holder).
    LeaseAcquired,
    /// A lease was released by its holder.
    LeaseReleased,
    /// An expired lease, or one whose owner process is gone, was taken over.
    LeaseTakenOver,
    /// A run was created (pending); the event's `run_id` names it.
    RunCreated,
    /// A run started (pending → running).
    RunStarted,
    /// Usage was added to a running run (data: the amounts added).
    RunUsage,
    /// A running run counted a turn (data: the new `turn_count`).
    RunTurn,
    /// A run completed.
    RunCompleted,
    /// A run failed (detail: its message; data: its `code`).
    RunFailed,
    /// A run was cancelled (by its verb, or because its session ended).
    RunCancelled,
    /// A run timed out.
    RunTimeout,
    /// Usage was added to a session (data: the amounts added).
    UsageRecorded,
    /// A session's budget was set (data: the whole budget).
    BudgetSet,
    /// A session's budget was reset (data: the usage counted until then).
    BudgetReset,
    /// A write took usage over a budget limit (data: limits, used, max,
    /// policy, status after).
    BudgetExceeded,
}

impl EventType {
    /// Every built-in type.
    pub const VARIANTS: [EventType; 32] = [
        Self::Created,
        Self::Started,
        Self::Paused,
        Self::Resumed,
        Self::Checkpoint,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::StageStarted,
        Self::StageCompleted,
        Self::StageFailed,
        Self::StageRetrying,
        Self::GateOpened,
        Self::GateApproved,
        Self::GateRejected,
        Self::CheckpointRestored,
        Self::Forked,
        Self::LeaseAcquired,
        Self::LeaseReleased,
        Self::LeaseTakenOver,
        Self::RunCreated,
        Self::RunStarted,
        Self::RunUsage,
        Self::RunTurn,
        Self::RunCompleted,
        Self::RunFailed,
        Self::RunCancelled,
        Self::RunTimeout,
        Self::UsageRecorded,
        Self::BudgetSet,
        Self::BudgetReset,
        Self::BudgetExceeded,
    ];

    /// The built-in type stored as `name`, or `None` (an `x.` type, or
    /// one an import brought in from a built-in family, e.g. `stage_foo`).
    pub fn from_name(name: &str) -> Option<EventType> {
        Self::VARIANTS.into_iter().find(|t| t.as_str() == name)
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Started => "started",
            Self::Paused => "paused",
            Self::Resumed => "resumed",
            Self::Checkpoint => "checkpoint",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::StageStarted => "stage_started",
            Self::StageCompleted => "stage_completed",
            Self::StageFailed => "stage_failed",
            Self::StageRetrying => "stage_retrying",
            Self::GateOpened => "gate_opened",
            Self::GateApproved => "gate_approved",
            Self::GateRejected => "gate_rejected",
            Self::CheckpointRestored => "checkpoint_restored",
            Self::Forked => "forked",
            Self::LeaseAcquired => "lease_acquired",
            Self::LeaseReleased => "lease_released",
            Self::LeaseTakenOver => "lease_taken_over",
            Self::RunCreated => "run_created",
            Self::RunStarted => "run_started",
            Self::RunUsage => "run_usage",
            Self::RunTurn => "run_turn",
            Self::RunCompleted => "run_completed",
            Self::RunFailed => "run_failed",
            Self::RunCancelled => "run_cancelled",
            Self::RunTimeout => "run_timeout",
            Self::UsageRecorded => "usage_recorded",
            Self::BudgetSet => "budget_set",
            Self::BudgetReset => "budget_reset",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_round_trips_through_its_name() {
        let mut names: Vec<&str> = EventType::VARIANTS.iter().map(|t| t.as_str()).collect();
        for t in EventType::VARIANTS {
            assert_eq!(EventType::from_name(t.as_str()), Some(t));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            EventType::VARIANTS.len(),
            "a name is used twice"
        );
        assert_eq!(EventType::from_name("x.build"), None);
        assert_eq!(EventType::from_name("stage_foo"), None);
    }
}
