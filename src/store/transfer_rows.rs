//! The rows export and import carry (docs/import-export.md): a session
//! with its references, events, runs, budget, snapshots and gates as
//! import inserts them, and the stored references and events export
//! reads. Plain data, shared by every backend; [`super::rows`] re-exports
//! them.

use super::rows::GateFull;
use crate::chain::{self, EventFields};
use crate::model::{ActorType, SessionStatus, Usage};
use serde_json::value::RawValue;

/// One linked reference: kind (`plan`, `operation`, `deployment`), id, and
/// the seq of the event that linked it. Its ordinal is its position among
/// the references of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRow {
    /// `plan`, `operation` or `deployment`.
    pub kind: &'static str,
    /// The referenced id.
    pub id: String,
    /// Seq of the event that linked it.
    pub linked_seq: i64,
}

/// One event to insert; its seq is its position in [`SessionRows::events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// Event type.
    pub event_type: String,
    /// ms since the Unix epoch (UTC).
    pub at_ms: i64,
    /// Writer.
    pub actor_type: ActorType,
    /// Redacted short text.
    pub detail: Option<String>,
    /// Redacted compact JSON object.
    pub data: Option<String>,
    /// Run id.
    pub run_id: Option<String>,
}

impl EventRow {
    /// The chain hash of this event of session `session_id` at `seq` after
    /// `prev` (docs/design.md, "Hash chain"; [`chain::event_hash`]): what an import stores, and
    /// what it and `verify --export` check a file's hashes against.
    pub fn hash(&self, session_id: &str, seq: i64, prev: &[u8; 32]) -> [u8; 32] {
        chain::event_hash(
            prev,
            &EventFields {
                session_id: session_id.as_bytes(),
                seq,
                event_type: self.event_type.as_bytes(),
                at_ms: self.at_ms,
                actor_type: self.actor_type.as_str().as_bytes(),
                detail: self.detail.as_deref().map(str::as_bytes),
                data: self.data.as_deref().map(str::as_bytes),
                run_id: self.run_id.as_deref().map(str::as_bytes),
            },
        )
    }
}

/// A whole validated, redacted session, ready to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRows {
    /// `ses_` + 16 hex.
    pub session_id: String,
    /// Status.
    pub status: SessionStatus,
    /// Title.
    pub title: String,
    /// Goal.
    pub goal: Option<String>,
    /// App.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Route.
    pub route: Option<String>,
    /// Stage.
    pub stage: Option<String>,
    /// Parent session id.
    pub parent_session_id: Option<String>,
    /// Tags, de-duplicated, in order.
    pub tags: Vec<String>,
    /// Compact JSON object.
    pub context: String,
    /// Compact JSON object.
    pub metadata: String,
    /// Actor type of the session.
    pub actor_type: ActorType,
    /// Actor id.
    pub actor_id: Option<String>,
    /// Revision.
    pub rev: i64,
    /// Seq of the latest checkpoint event.
    pub checkpoint_seq: Option<i64>,
    /// References in order (per kind).
    pub refs: Vec<RefRow>,
    /// Completion result.
    pub final_result: Option<String>,
    /// Fail / cancel reason.
    pub end_reason: Option<String>,
    /// Usage sums.
    pub usage: Usage,
    /// ms since the Unix epoch.
    pub created_at_ms: i64,
    /// ms since the Unix epoch.
    pub updated_at_ms: i64,
    /// ms since the Unix epoch, terminal sessions only.
    pub ended_at_ms: Option<i64>,
    /// Events in seq order (seq = index).
    pub events: Vec<EventRow>,
    /// Runs, budget, snapshots and gates (schema V3/V4).
    pub workflow: WorkflowRows,
}

/// One run with every column a rebuild needs. JSON columns are compact
/// JSON object text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// `run_` + 16 hex.
    pub run_id: String,
    /// Status name.
    pub status: String,
    /// Input object, or `None`.
    pub input: Option<String>,
    /// Output object, or `None`.
    pub output: Option<String>,
    /// Error code, or `None`.
    pub error_code: Option<String>,
    /// Error message, or `None`.
    pub error_message: Option<String>,
    /// Metadata object.
    pub metadata: String,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// API calls.
    pub api_calls: i64,
    /// Turns.
    pub turn_count: i64,
    /// ms since the Unix epoch.
    pub created_at_ms: i64,
    /// ms since the Unix epoch.
    pub updated_at_ms: i64,
    /// ms since the Unix epoch, once started.
    pub started_at_ms: Option<i64>,
    /// ms since the Unix epoch, once terminal.
    pub ended_at_ms: Option<i64>,
}

/// A session's budget with every column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFull {
    /// Token limit, or `None`.
    pub max_tokens: Option<i64>,
    /// API-call limit, or `None`.
    pub max_api_calls: Option<i64>,
    /// Duration limit (ms), or `None`.
    pub max_duration_ms: Option<i64>,
    /// `pause`, `fail` or `warn`.
    pub on_exceed: String,
    /// Tokens at the last reset.
    pub base_tokens: i64,
    /// API calls at the last reset.
    pub base_api_calls: i64,
    /// Duration at the last reset, ms.
    pub base_duration_ms: i64,
    /// When a limit was crossed, if marked.
    pub exceeded_at_ms: Option<i64>,
    /// Last change, ms since the Unix epoch.
    pub updated_at_ms: i64,
}

/// A checkpoint snapshot with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFull {
    /// Seq of its `checkpoint` event.
    pub seq: i64,
    /// The checkpoint's step.
    pub step: Option<String>,
    /// The session's stage when it was taken.
    pub stage: Option<String>,
    /// Compact JSON object text.
    pub state: String,
    /// The binary payload stored beside the state (schema V11), if any.
    pub payload: Option<Vec<u8>>,
    /// ms since the Unix epoch.
    pub at_ms: i64,
}

/// A session's rows in the V3/V4 tables that export and import carry
/// (leases excluded: a lease is a live lock, not history).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowRows {
    /// Runs in creation order.
    pub runs: Vec<RunRow>,
    /// The budget, if one was set.
    pub budget: Option<BudgetFull>,
    /// Snapshots by seq.
    pub snapshots: Vec<SnapshotFull>,
    /// Gates in opening order.
    pub gates: Vec<GateFull>,
}

/// A stored reference, for export.
#[derive(Debug, Clone)]
pub struct StoredRef {
    /// `plan`, `operation` or `deployment`.
    pub kind: String,
    /// The referenced id.
    pub id: String,
    /// Its position among the session's references of its kind.
    pub ordinal: i64,
    /// Seq of the event that linked it.
    pub linked_seq: i64,
}

/// A stored event with its hash, for export.
#[derive(Debug)]
pub struct StoredEvent {
    /// Per-session seq.
    pub seq: i64,
    /// Type.
    pub event_type: String,
    /// ms since the Unix epoch.
    pub at_ms: i64,
    /// Writer.
    pub actor_type: String,
    /// Short text.
    pub detail: Option<String>,
    /// Compact JSON object as stored.
    pub data: Option<Box<RawValue>>,
    /// Run id.
    pub run_id: Option<String>,
    /// Stored hash, 32 bytes (empty if absent).
    pub hash: Vec<u8>,
}

impl SessionRows {
    /// The session row an import inserts first: a terminal session with
    /// runs goes in one step before its end (active, rev − 1), so that its
    /// runs can be inserted under the triggers, then ends; any other as
    /// recorded.
    pub fn first_row(&self) -> super::SessionRow<'_> {
        let staged = self.status.is_terminal() && !self.workflow.runs.is_empty();
        let (status, rev) = if staged {
            (SessionStatus::Active, self.rev - 1)
        } else {
            (self.status, self.rev)
        };
        super::SessionRow {
            session_id: &self.session_id,
            status,
            title: &self.title,
            goal: self.goal.as_deref(),
            app: self.app.as_deref(),
            agent_id: self.agent_id.as_deref(),
            route: self.route.as_deref(),
            stage: self.stage.as_deref(),
            parent_session_id: self.parent_session_id.as_deref(),
            tags: &self.tags,
            context: &self.context,
            metadata: &self.metadata,
            actor_type: self.actor_type,
            actor_id: self.actor_id.as_deref(),
            rev,
            checkpoint_seq: self.checkpoint_seq,
            final_result: self.final_result.as_deref(),
            end_reason: self.end_reason.as_deref(),
            usage: self.usage,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            ended_at_ms: self.ended_at_ms,
        }
    }
}
