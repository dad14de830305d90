//! Timeline events (SPEC §2, Event).

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

/// The event types logbook itself emits for the core verbs.
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
    /// A stage began (Amber seed).
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
}

impl EventType {
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
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
