//! The session record and its state machine (docs/design.md, "Model").

use super::ids::SessionId;
use serde::Serialize;
use serde_json::value::RawValue;
use std::fmt;
use std::str::FromStr;

/// A session's lifecycle status (docs/design.md, "Model": the state machine).
///
/// Amber's names map as: Amber `created` = `Pending`, `planning`/`executing` =
/// `Active` (the phase goes in `stage`), `aborted` = `Cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Created with `--pending`; waits for `start`.
    Pending,
    /// Working.
    Active,
    /// Paused; `resume` makes it active again.
    Paused,
    /// Terminal: finished, with a result.
    Completed,
    /// Terminal: ended in failure, with a reason.
    Failed,
    /// Terminal: abandoned, with a reason.
    Cancelled,
}

impl SessionStatus {
    /// Every status, in the order of the schema's CHECK list.
    pub const VARIANTS: [SessionStatus; 6] = [
        Self::Pending,
        Self::Active,
        Self::Paused,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The stored and wire name, e.g. `"active"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether no transition leaves this status.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl FromStr for SessionStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                "expected one of pending, active, paused, completed, failed, cancelled".to_owned()
            })
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state-changing verb on an existing session, with its transition rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// pending → active.
    Start,
    /// active → paused.
    Pause,
    /// paused → active.
    Resume,
    /// active → active, recording a step and/or references.
    Checkpoint,
    /// active → completed.
    Complete,
    /// pending | active | paused → failed.
    Fail,
    /// pending | active | paused → cancelled.
    Cancel,
    /// Appends an agent's own `x.` event; any non-terminal status, unchanged.
    AppendEvent,
    /// Records a stage event (`stage_started` …) and sets `stage`; active
    /// only, status unchanged (Amber's stages).
    Stage,
    /// Opens an `auto` gate, approved at once: active → active.
    GateAuto,
    /// Opens a `user-approval` or `step-confirm` gate: active → paused.
    GateWait,
    /// Approves the pending gate: paused → active.
    GateApprove,
    /// Rejects the pending gate: paused → failed.
    GateReject,
    /// Rejects the pending gate with `--abort`: paused → cancelled.
    GateAbort,
    /// Restores stage and context from a checkpoint snapshot; active |
    /// paused, status unchanged.
    Restore,
    /// Takes, renews, takes over or releases the lease; pending | active |
    /// paused, status unchanged.
    Lease,
    /// Records on the source that a child was forked from it; pending |
    /// active | paused, status unchanged (a terminal source is not touched).
    Fork,
    /// Adds usage (`session usage`); pending | active | paused, status
    /// unchanged unless a budget policy changes it.
    Usage,
    /// Sets the budget; pending | active | paused.
    SetBudget,
    /// Resets the budget; pending | active | paused.
    ResetBudget,
    /// Creates a run; pending | active | paused.
    CreateRun,
    /// Changes a run (start, usage, turn, end); pending | active | paused.
    ChangeRun,
}

impl Verb {
    /// Every verb.
    pub const VARIANTS: [Verb; 22] = [
        Self::Start,
        Self::Pause,
        Self::Resume,
        Self::Checkpoint,
        Self::Complete,
        Self::Fail,
        Self::Cancel,
        Self::AppendEvent,
        Self::Stage,
        Self::GateAuto,
        Self::GateWait,
        Self::GateApprove,
        Self::GateReject,
        Self::GateAbort,
        Self::Restore,
        Self::Lease,
        Self::Fork,
        Self::Usage,
        Self::SetBudget,
        Self::ResetBudget,
        Self::CreateRun,
        Self::ChangeRun,
    ];

    /// The verb's name as used in messages and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Checkpoint => "checkpoint",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Cancel => "cancel",
            Self::AppendEvent => "append an event to",
            Self::Stage => "record a stage of",
            Self::GateAuto | Self::GateWait => "open a gate on",
            Self::GateApprove => "approve a gate of",
            Self::GateReject | Self::GateAbort => "reject a gate of",
            Self::Restore => "restore",
            Self::Lease => "change the lease of",
            Self::Fork => "fork",
            Self::Usage => "record usage of",
            Self::SetBudget => "set the budget of",
            Self::ResetBudget => "reset the budget of",
            Self::CreateRun => "create a run in",
            Self::ChangeRun => "change a run of",
        }
    }

    /// The statuses this verb may leave from.
    pub fn allowed_from(self) -> &'static [SessionStatus] {
        use SessionStatus::*;
        match self {
            Self::Start => &[Pending],
            Self::Pause
            | Self::Checkpoint
            | Self::Complete
            | Self::Stage
            | Self::GateAuto
            | Self::GateWait => &[Active],
            Self::Resume | Self::GateApprove | Self::GateReject | Self::GateAbort => &[Paused],
            Self::Restore => &[Active, Paused],
            Self::Fail
            | Self::Cancel
            | Self::AppendEvent
            | Self::Lease
            | Self::Fork
            | Self::Usage
            | Self::SetBudget
            | Self::ResetBudget
            | Self::CreateRun
            | Self::ChangeRun => &[Pending, Active, Paused],
        }
    }

    /// The status after the verb, given the status before it.
    pub fn target(self, from: SessionStatus) -> SessionStatus {
        use SessionStatus::*;
        match self {
            Self::Start | Self::Resume | Self::GateApprove => Active,
            Self::Pause | Self::GateWait => Paused,
            Self::Checkpoint
            | Self::AppendEvent
            | Self::Stage
            | Self::GateAuto
            | Self::Restore
            | Self::Lease
            | Self::Fork
            | Self::Usage
            | Self::SetBudget
            | Self::ResetBudget
            | Self::CreateRun
            | Self::ChangeRun => from,
            Self::Complete => Completed,
            Self::Fail | Self::GateReject => Failed,
            Self::Cancel | Self::GateAbort => Cancelled,
        }
    }

    /// `Some(next status)` when the verb is allowed from `from`, else `None`.
    pub fn apply(self, from: SessionStatus) -> Option<SessionStatus> {
        self.allowed_from()
            .contains(&from)
            .then(|| self.target(from))
    }
}

/// Who made a change. Set by the entry point, never from user input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorType {
    /// The `logbook` CLI.
    Cli,
    /// The MCP server.
    Mcp,
    /// A library caller.
    Lib,
}

impl ActorType {
    /// Every actor type, in the order of the schema's CHECK list.
    pub const VARIANTS: [ActorType; 3] = [Self::Cli, Self::Mcp, Self::Lib];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cli => "cli",
            Self::Mcp => "mcp",
            Self::Lib => "lib",
        }
    }
}

impl FromStr for ActorType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| "expected cli, mcp or lib".to_owned())
    }
}

/// Provenance of a session: `{type, id, authenticated}` (Phelix's format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Actor {
    /// Which entry point created the session.
    #[serde(rename = "type")]
    pub actor_type: ActorType,
    /// An identity the entry point vouches for; null for the CLI.
    pub id: Option<String>,
    /// Whether `id` was authenticated.
    pub authenticated: bool,
}

/// The latest checkpoint: `{step, note, at_ms, seq}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    /// The step name, if one was given.
    pub step: Option<String>,
    /// The note, if one was given.
    pub note: Option<String>,
    /// When, in ms since the Unix epoch (UTC).
    pub at_ms: i64,
    /// The seq of the `checkpoint` event.
    pub seq: i64,
}

/// Accumulated usage: tokens, API calls and duration (sums).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// API calls.
    pub api_calls: i64,
    /// Duration in ms.
    pub duration_ms: i64,
}

/// A session as stored and returned (docs/design.md, "Model"). Serializes in the field order
/// below, which is the fixed key order of the JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    /// Always `"1"`.
    pub schema_version: &'static str,
    /// `ses_` + 16 hex.
    pub session_id: SessionId,
    /// Current status.
    pub status: SessionStatus,
    /// 1–200 characters.
    pub title: String,
    /// Up to 4096 characters.
    pub goal: Option<String>,
    /// Application name, up to 128 characters.
    pub app: Option<String>,
    /// Agent id, up to 128 characters.
    pub agent_id: Option<String>,
    /// Route (workflow) name, up to 128 characters.
    pub route: Option<String>,
    /// Current stage, up to 128 characters.
    pub stage: Option<String>,
    /// Parent session, if any.
    pub parent_session_id: Option<String>,
    /// Tags, at most 32.
    pub tags: Vec<String>,
    /// Shared context: a JSON object, at most 256 KiB compact.
    pub context: Box<RawValue>,
    /// Caller metadata: a JSON object, at most 256 KiB compact.
    pub metadata: Box<RawValue>,
    /// Provenance.
    pub actor: Actor,
    /// Revision: 1 at creation, +1 on every successful mutation.
    pub rev: i64,
    /// Linked plan ids, de-duplicated, in first-linked order.
    pub plan_ids: Vec<String>,
    /// Linked operation ids.
    pub operation_ids: Vec<String>,
    /// Linked deployment ids.
    pub deployment_ids: Vec<String>,
    /// The latest checkpoint, or null.
    pub checkpoint: Option<Checkpoint>,
    /// The text given to `complete`.
    pub final_result: Option<String>,
    /// The text given to `fail` or `cancel`.
    pub end_reason: Option<String>,
    /// Accumulated usage.
    pub usage: Usage,
    /// Creation time, ms since the Unix epoch (UTC).
    pub created_at_ms: i64,
    /// Time of the latest mutation, ms since the Unix epoch (UTC).
    pub updated_at_ms: i64,
    /// Time the session became terminal, or null.
    pub ended_at_ms: Option<i64>,
}

/// The key of a session's `metadata` under which a Phelix import keeps
/// what the file records beside its events: `{"phelix": {"checkpoint":
/// {step, note, at_ms, seq}}}`, the file's checkpoint block
/// (docs/import-export.md, "Phelix mapping").
pub const PHELIX_METADATA_KEY: &str = "phelix";

/// The key, under [`PHELIX_METADATA_KEY`], of the checkpoint block.
pub const PHELIX_CHECKPOINT_KEY: &str = "checkpoint";

impl Session {
    /// Makes the checkpoint block a Phelix import kept in `metadata` the
    /// session's checkpoint while it is still the latest one, so `show`,
    /// `list` and the MCP tools give the file's step and note
    /// (docs/import-export.md, "Phelix mapping"); the event it points at
    /// keeps the file's own detail.
    ///
    /// The block counts only when its `seq` and `at_ms` are those of the
    /// checkpoint read from the event `checkpoint_seq` names (a checkpoint
    /// made here afterwards takes over) and its `step` (1–200 characters,
    /// one line) and `note` (at most 4096) pass the checkpoint verb's
    /// caps; otherwise the checkpoint stays the event's (`data.step`,
    /// `detail`). Both stores call it on every session they read.
    pub(crate) fn apply_kept_checkpoint(&mut self) {
        use crate::validate::{self as v, Lines};
        use serde_json::Value;
        let Some(latest) = &self.checkpoint else {
            return;
        };
        let text = self.metadata.get();
        // Nearly every session has no such key: skip the parse.
        if !text.contains("\"phelix\"") {
            return;
        }
        let Ok(meta) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(block) = meta
            .get(PHELIX_METADATA_KEY)
            .and_then(|p| p.get(PHELIX_CHECKPOINT_KEY))
        else {
            return;
        };
        let int = |k: &str| block.get(k).and_then(Value::as_i64);
        if int("seq") != Some(latest.seq) || int("at_ms") != Some(latest.at_ms) {
            return;
        }
        let text_of = |k: &str, min: usize, max: usize, lines: Lines| match block.get(k) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(t)) if v::text(k, t, min, max, lines).is_ok() => {
                Some(Some(t.clone()))
            }
            Some(_) => None,
        };
        let (Some(step), Some(note)) = (
            text_of("step", 1, v::STEP_MAX, Lines::Single),
            text_of("note", 0, v::NOTE_MAX, Lines::Multi),
        ) else {
            return;
        };
        self.checkpoint = Some(Checkpoint {
            step,
            note,
            at_ms: latest.at_ms,
            seq: latest.seq,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStatus::*;

    #[test]
    fn transition_table_is_the_spec_state_machine() {
        let expect = |v: Verb, from: SessionStatus| v.apply(from);
        assert_eq!(expect(Verb::Start, Pending), Some(Active));
        assert_eq!(expect(Verb::Pause, Active), Some(Paused));
        assert_eq!(expect(Verb::Resume, Paused), Some(Active));
        assert_eq!(expect(Verb::Checkpoint, Active), Some(Active));
        assert_eq!(expect(Verb::Complete, Active), Some(Completed));
        for s in [Pending, Active, Paused] {
            assert_eq!(expect(Verb::Fail, s), Some(Failed));
            assert_eq!(expect(Verb::Cancel, s), Some(Cancelled));
        }
        assert_eq!(expect(Verb::Complete, Paused), None);
        assert_eq!(expect(Verb::Checkpoint, Paused), None);
        assert_eq!(expect(Verb::Start, Active), None);
        for s in [Completed, Failed, Cancelled] {
            for v in Verb::VARIANTS {
                assert_eq!(v.apply(s), None, "{v:?} from {s:?}");
            }
        }
    }

    #[test]
    fn status_names_round_trip() {
        for s in SessionStatus::VARIANTS {
            assert_eq!(s.as_str().parse::<SessionStatus>().unwrap(), s);
        }
        assert!("aborted".parse::<SessionStatus>().is_err());
    }
}
