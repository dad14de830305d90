//! The MCP tool table: one [`ToolSpec`] per tool — name, description, input
//! fields, read-only flag and the one `Ledger` call it makes.
//!
//! Adding a tool is one entry in [`TOOLS`] plus its small `run` function;
//! the run tools live in [`super::runs`], the session events, stage, usage,
//! event, start, pause, resume and gate-open tools in [`super::record`], and all
//! are listed here. Inputs mirror the CLI's flags;
//! the output is the JSON the CLI prints under `--json` in `data`
//! (docs/design.md, "CLI"): a mutation returns the whole session after the change.
//! Session cancel and `--if-rev` are CLI-only (as in Phelix's format),
//! and so are gate approve and reject: an agent must not decide its own
//! gate.

use super::args::{Args, Field, Kind};
use super::{record, runs};
use crate::clock::parse_time;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::ledger::{
    CheckpointRequest, CreateSession, FeedQuery, Ledger, ListSessions, Mutation, Replayed, Written,
};
use crate::model::SessionStatus;
use serde::Serialize;
use serde_json::value::RawValue;

/// One tool: what `tools/list` advertises and what `tools/call` runs.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// The tool's name, `logbook_…`.
    pub name: &'static str,
    /// A short human title.
    pub title: &'static str,
    /// What it does, its output and its error codes.
    pub description: &'static str,
    /// The input fields; the `inputSchema` is built from them.
    pub fields: &'static [Field],
    /// Whether the tool only reads (`readOnlyHint`).
    pub read_only: bool,
    /// Runs the call on checked arguments; returns the `data` JSON text
    /// and, for an idempotent replay, what the first attempt did.
    pub run: fn(&Ledger, &Args) -> Result<Reply>,
}

const STATUSES: &[&str] = &[
    "pending",
    "active",
    "paused",
    "completed",
    "failed",
    "cancelled",
];

const SESSION_ID: Field = Field::req("session_id", Kind::Text, "Session id: ses_ + 16 hex");
const IDEMPOTENCY_KEY: Field = Field::opt(
    "idempotency_key",
    Kind::Text,
    "Up to 128 characters. A retry with the same key applies nothing again and returns the session; the same key with other arguments is INVALID_ARGUMENT",
);

/// Every tool the server offers, in `tools/list` order.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "logbook_session_create",
        title: "Create a session",
        description: "Create a session (active, or pending with `pending: true`) and return it. \
            The actor is recorded as `mcp`. Errors: INVALID_ARGUMENT (caps, bad JSON, control \
            characters), SESSION_NOT_FOUND (`parent` does not exist), STORE_BUSY.",
        fields: &[
            Field::req("title", Kind::Text, "Title, 1-200 characters, one line"),
            Field::opt("app", Kind::Text, "Application name, up to 128 characters"),
            Field::opt("goal", Kind::Text, "Goal, 1–4096 characters"),
            Field::opt("agent_id", Kind::Text, "Agent id, up to 128 characters"),
            Field::opt(
                "route",
                Kind::Text,
                "Route (workflow) name, up to 128 characters",
            ),
            Field::opt("stage", Kind::Text, "Current stage, up to 128 characters"),
            Field::opt("tags", Kind::TextList, "Tags, at most 32 names"),
            Field::opt(
                "context",
                Kind::Object,
                "A JSON object, at most 256 KiB compact",
            ),
            Field::opt(
                "metadata",
                Kind::Object,
                "A JSON object, at most 256 KiB compact",
            ),
            Field::opt(
                "pending",
                Kind::Bool,
                "Create in `pending` instead of `active`",
            ),
            Field::opt("parent", Kind::Text, "Parent session id (must exist)"),
            IDEMPOTENCY_KEY,
        ],
        read_only: false,
        run: create,
    },
    ToolSpec {
        name: "logbook_session_show",
        title: "Show a session",
        description: "Return {session, events, resolved, children, purged_children, blocking_gate, \
            lease} (as `session show --json`): the session, all its events by seq, each referenced \
            id with its state, its direct children by status, the children purges removed (by \
            purge), the pending gate it waits on (or null) and its lease without the token (or \
            null). Errors: INVALID_ARGUMENT (also field `config`: a logbook.toml that does not \
            parse or that another user can change), SESSION_NOT_FOUND.",
        fields: &[SESSION_ID],
        read_only: true,
        run: show,
    },
    ToolSpec {
        name: "logbook_session_list",
        title: "List sessions",
        description: "Return {sessions, next_cursor}: newest created first (or most recently \
            updated with `order: updated`). Pass `next_cursor` as `cursor` for the next page; it \
            is null on the last. Errors: INVALID_ARGUMENT.",
        fields: &[
            Field::opt("status", Kind::EnumList(STATUSES), "Any of these statuses"),
            Field::opt("app", Kind::Text, "App filter"),
            Field::opt("agent_id", Kind::Text, "Agent filter"),
            Field::opt("tag", Kind::Text, "Tag filter"),
            Field::opt("parent", Kind::Text, "Parent session filter"),
            Field::opt(
                "since",
                Kind::TextOrInt,
                "At or after: RFC 3339 with offset, or epoch ms",
            ),
            Field::opt(
                "until",
                Kind::TextOrInt,
                "Before: RFC 3339 with offset, or epoch ms",
            ),
            Field::opt(
                "order",
                Kind::Enum(&["created", "updated"]),
                "Sort order; default created",
            ),
            Field::opt("limit", Kind::Int, "Page size, 1-1000; default 20"),
            Field::opt("cursor", Kind::Text, "The next_cursor of the previous page"),
        ],
        read_only: true,
        run: list,
    },
    ToolSpec {
        name: "logbook_session_checkpoint",
        title: "Checkpoint a session",
        description: "Record a step and/or link references on an active session; needs at \
            least one of step, note or a reference. Returns the session. Errors: \
            INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (not active), \
            STORE_BUSY.",
        fields: &[
            SESSION_ID,
            Field::opt("step", Kind::Text, "Step name, 1-200 characters"),
            Field::opt("note", Kind::Text, "Note, 1–4096 characters, not only whitespace"),
            Field::opt("plan_ids", Kind::TextList, "Plan ids to link (none may begin with `-`)"),
            Field::opt("operation_ids", Kind::TextList, "Operation ids to link (none may begin with `-`)"),
            Field::opt("deployment_ids", Kind::TextList, "Deployment ids to link (none may begin with `-`)"),
            Field::opt(
                "state",
                Kind::Object,
                "A snapshot of the agent's state (JSON object, at most 256 KiB compact); restore and fork read it",
            ),
            IDEMPOTENCY_KEY,
        ],
        read_only: false,
        run: checkpoint,
    },
    ToolSpec {
        name: "logbook_session_complete",
        title: "Complete a session",
        description: "Complete an active session with a result (terminal). Returns the \
            session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION, \
            STORE_BUSY.",
        fields: &[
            SESSION_ID,
            Field::req("result", Kind::Text, "The outcome, 1-4096 characters, not only whitespace"),
            IDEMPOTENCY_KEY,
        ],
        read_only: false,
        run: complete,
    },
    ToolSpec {
        name: "logbook_session_fail",
        title: "Fail a session",
        description: "Fail a pending, active or paused session with a reason (terminal): record \
            a non-success outcome honestly. Returns the session. Errors: INVALID_ARGUMENT, \
            SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION, STORE_BUSY.",
        fields: &[
            SESSION_ID,
            Field::req("reason", Kind::Text, "Why, 1-4096 characters, not only whitespace"),
            IDEMPOTENCY_KEY,
        ],
        read_only: false,
        run: fail,
    },
    record::EVENTS,
    record::STAGE,
    record::USAGE,
    record::EVENT,
    record::START,
    record::PAUSE,
    record::RESUME,
    record::GATE_OPEN,
    ToolSpec {
        name: "logbook_events",
        title: "Read the event feed",
        description: "Return {events, next_cursor}: every session's events by event_id after \
            the cursor. Pass `next_cursor` as `after` to go on. Errors: INVALID_ARGUMENT, \
            SESSION_NOT_FOUND.",
        fields: &[
            Field::opt(
                "after",
                Kind::TextOrInt,
                "Cursor: the last event_id seen; default 0 (from the first event)",
            ),
            Field::opt("sessions", Kind::TextList, "Only these sessions' events"),
            Field::opt(
                "types",
                Kind::TextList,
                "Only these event types, e.g. checkpoint",
            ),
            Field::opt("limit", Kind::Int, "Page size, 1-1000; default 100"),
        ],
        read_only: true,
        run: events,
    },
    runs::CREATE,
    runs::START,
    runs::USAGE,
    runs::TURN,
    runs::COMPLETE,
    runs::FAIL,
    runs::CANCEL,
    runs::TIMEOUT,
    runs::SHOW,
    runs::LIST,
    runs::ACTIVE,
];

/// The tool called `name`, if any.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

/// A tool's successful result: the `data` JSON, and for an idempotent
/// replay what the first attempt did (docs/design.md, "CLI"), which the result carries as
/// `_meta.replayed` and as a second text block `{"replayed":{…}}`.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The JSON the CLI prints in `data` under `--json`, as its text.
    pub data: Box<RawValue>,
    /// `Some` when the call was a replay and applied nothing.
    pub replayed: Option<Replayed>,
}

impl Reply {
    /// The success envelope of this reply, which the server turns into the
    /// tool result.
    pub fn envelope(&self) -> Envelope<'_, RawValue> {
        Envelope::Success {
            data: &self.data,
            replayed: self.replayed,
        }
    }
}

/// A read's reply: `value` as the data JSON.
pub(super) fn to_json<T: Serialize>(value: &T) -> Result<Reply> {
    Ok(Reply {
        data: serde_json::value::to_raw_value(value)
            .map_err(|e| Error::internal(format!("cannot serialize: {e}")))?,
        replayed: None,
    })
}

/// A mutation's reply: its value as the data JSON, and its replay, if any.
pub(super) fn written<T: Serialize>(w: &Written<T>) -> Result<Reply> {
    Ok(Reply {
        replayed: w.replayed,
        ..to_json(&w.value)?
    })
}

pub(super) fn mutation(a: &Args) -> Mutation {
    Mutation {
        if_rev: None,
        idempotency_key: a.text("idempotency_key"),
        // Leases are taken and presented from the CLI; an MCP client that
        // writes to a leased session is refused with LEASE_HELD.
        lease: None,
    }
}

fn create(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = CreateSession {
        title: a.required_text("title")?,
        goal: a.text("goal"),
        app: a.text("app"),
        agent_id: a.text("agent_id"),
        route: a.text("route"),
        stage: a.text("stage"),
        parent_session_id: a.text("parent"),
        tags: a.list("tags"),
        context: a.object("context"),
        metadata: a.object("metadata"),
        pending: a.flag("pending"),
        idempotency_key: a.text("idempotency_key"),
        checkpoint: None,
    };
    written(&l.create_session(req)?)
}

fn show(l: &Ledger, a: &Args) -> Result<Reply> {
    to_json(&l.show_session(&a.required_text("session_id")?)?)
}

fn list(l: &Ledger, a: &Args) -> Result<Reply> {
    let statuses = a
        .list("status")
        .iter()
        .map(|s| {
            s.parse::<SessionStatus>()
                .map_err(|_| Error::invalid("status", "not a session status"))
        })
        .collect::<Result<Vec<_>>>()?;
    let time = |field: &str| {
        a.text_or_int(field)
            .map(|t| parse_time(field, &t))
            .transpose()
    };
    let req = ListSessions {
        statuses,
        app: a.text("app"),
        agent_id: a.text("agent_id"),
        tag: a.text("tag"),
        parent: a.text("parent"),
        since_ms: time("since")?,
        until_ms: time("until")?,
        order_updated: a.text("order").as_deref() == Some("updated"),
        limit: a.int("limit"),
        cursor: a.text("cursor"),
    };
    to_json(&l.list_sessions(&req)?)
}

fn checkpoint(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = CheckpointRequest {
        step: a.text("step"),
        note: a.text("note"),
        plan_ids: a.list("plan_ids"),
        operation_ids: a.list("operation_ids"),
        deployment_ids: a.list("deployment_ids"),
        state: a.object("state"),
        payload: None,
    };
    written(&l.checkpoint(&a.required_text("session_id")?, req, &mutation(a))?)
}

fn complete(l: &Ledger, a: &Args) -> Result<Reply> {
    let s = l.complete(
        &a.required_text("session_id")?,
        &a.required_text("result")?,
        &mutation(a),
    )?;
    written(&s)
}

fn fail(l: &Ledger, a: &Args) -> Result<Reply> {
    let s = l.fail(
        &a.required_text("session_id")?,
        &a.required_text("reason")?,
        &mutation(a),
    )?;
    written(&s)
}

fn events(l: &Ledger, a: &Args) -> Result<Reply> {
    let q = FeedQuery {
        after: a.text_or_int("after"),
        sessions: a.list("sessions"),
        types: a.list("types"),
        limit: a.int("limit"),
        from_now: false,
    };
    to_json(&l.feed(&q)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len());
        assert!(TOOLS.iter().all(|t| t.name.starts_with("logbook_")));
    }

    #[test]
    fn status_enum_matches_the_model() {
        let model: Vec<&str> = SessionStatus::VARIANTS.iter().map(|s| s.as_str()).collect();
        assert_eq!(STATUSES, model.as_slice());
    }

    #[test]
    fn no_tool_decides_a_gate() {
        assert!(TOOLS
            .iter()
            .all(|t| !t.name.contains("approve") && !t.name.contains("reject")));
    }

    #[test]
    fn no_tool_takes_an_actor_or_if_rev() {
        for t in TOOLS {
            assert!(t
                .fields
                .iter()
                .all(|f| f.name != "actor" && f.name != "if_rev"));
        }
    }
}
