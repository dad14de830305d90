//! The tools an agent records the rest of its work with (docs/design.md, "MCP"):
//! one session's events in seq order, stages, session usage, its own `x.`
//! events, start (of a pending session), pause and resume, and opening a
//! gate. One [`ToolSpec`] per
//! `logbook session …` / `logbook gate open` verb, listed in
//! [`super::tools::TOOLS`].
//!
//! Inputs mirror the CLI's flags and arguments (`ID` → `session_id`, the
//! stage's positional `ACTION NAME` → `action`, `stage`, `--type` → `type`,
//! `--gate` → `gate`, …); `data` takes a JSON object directly. A mutation
//! returns the whole session after the change, as the verb's `--json`
//! prints it in `data`, and takes an `idempotency_key`; none takes
//! `if_rev`, a lease or an actor (the actor is `mcp`).
//!
//! Gate approve and reject are not tools: an agent must not decide its own
//! gate. A gate exists so that someone other than the agent says yes or no;
//! that decision is `logbook gate approve|reject` on the CLI.

use super::args::{Args, Field, Kind};
use super::tools::{mutation, to_json, written, Reply, ToolSpec};
use crate::error::{Error, Result};
use crate::ledger::{AppendEvent, Ledger, RecordUsage, StageAction, StageRequest};
use crate::model::GateKind;

const SESSION_ID: Field = Field::req("session_id", Kind::Text, "Session id: ses_ + 16 hex");
const KEY: Field = Field::opt(
    "idempotency_key",
    Kind::Text,
    "Up to 128 characters. A retry with the same key applies nothing again and returns the session; the same key with other arguments is INVALID_ARGUMENT",
);
const REASON: Field = Field::opt(
    "reason",
    Kind::Text,
    "Why, up to 4096 characters, not only whitespace",
);
const COUNT_DOC: &str = "An integer from 0 to 2^53-1 (9007199254740991) to add";

/// The stage actions, in [`StageAction`]'s order (the `action` enum).
const STAGE_ACTIONS: &[&str] = &["start", "complete", "fail", "retry"];

/// The gate kinds, in [`GateKind::VARIANTS`]' order (the `kind` enum).
const GATE_KINDS: &[&str] = &["auto", "user-approval", "step-confirm"];

/// `logbook_session_events`.
pub const EVENTS: ToolSpec = ToolSpec {
    name: "logbook_session_events",
    title: "Read a session's events",
    description: "Return {events, next_after_seq}: one session's events in seq order, those \
        with seq greater than `after_seq`. Pass `next_after_seq` as `after_seq` for the next \
        page; it is null on the last. Errors: INVALID_ARGUMENT (limit outside 1-1000, a \
        malformed id), SESSION_NOT_FOUND.",
    fields: &[
        SESSION_ID,
        Field::opt(
            "after_seq",
            Kind::Int,
            "Only events with seq greater than this; default: from the first event",
        ),
        Field::opt("limit", Kind::Int, "Page size, 1-1000; default 20"),
    ],
    read_only: true,
    run: events,
};

/// `logbook_session_stage`.
pub const STAGE: ToolSpec = ToolSpec {
    name: "logbook_session_stage",
    title: "Record a stage",
    description: "Record a stage of an active session: event stage_started, \
        stage_completed, stage_failed or stage_retrying with data {stage, attempt}, and the \
        session's `stage` set to the name. A failed stage does not fail the session. Returns \
        the session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION \
        (not active), LEASE_HELD, STORE_BUSY.",
    fields: &[
        SESSION_ID,
        Field::req(
            "action",
            Kind::Enum(STAGE_ACTIONS),
            "What happened to the stage",
        ),
        Field::req(
            "stage",
            Kind::Text,
            "Stage name, 1-128 characters, one line",
        ),
        Field::opt("attempt", Kind::Int, "Which attempt this is, 1-1000000"),
        REASON,
        KEY,
    ],
    read_only: false,
    run: stage,
};

/// `logbook_session_usage`.
pub const USAGE: ToolSpec = ToolSpec {
    name: "logbook_session_usage",
    title: "Record session usage",
    description: "Add usage to a live session (event usage_recorded with the amounts \
        added); give at least one amount. A total that would pass 2^53-1 is \
        INVALID_ARGUMENT. A budget crossed by this write applies its policy (pause, fail or \
        warn). Returns the session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, \
        SESSION_INVALID_TRANSITION (the session has ended), LEASE_HELD, STORE_BUSY.",
    fields: &[
        SESSION_ID,
        Field::opt("input_tokens", Kind::Int, COUNT_DOC),
        Field::opt("output_tokens", Kind::Int, COUNT_DOC),
        Field::opt("api_calls", Kind::Int, COUNT_DOC),
        Field::opt(
            "duration_ms",
            Kind::Int,
            "Milliseconds, 0 to 2^53-1, to add",
        ),
        KEY,
    ],
    read_only: false,
    run: usage,
};

/// `logbook_session_event`.
pub const EVENT: ToolSpec = ToolSpec {
    name: "logbook_session_event",
    title: "Append an agent event",
    description: "Append the agent's own event, type x.NAME, to a live session. Returns the \
        session. Errors: INVALID_ARGUMENT (a type that is not x. followed by [a-z0-9_.-], \
        64 characters in all; caps; data not an object or over 256 KiB), SESSION_NOT_FOUND, \
        SESSION_INVALID_TRANSITION (the session has ended), LEASE_HELD, STORE_BUSY.",
    fields: &[
        SESSION_ID,
        Field::req("type", Kind::Text, "Event type: x. followed by [a-z0-9_.-]"),
        Field::opt("detail", Kind::Text, "Short text, up to 4096 characters"),
        Field::opt(
            "data",
            Kind::Object,
            "A JSON object, at most 256 KiB compact",
        ),
        KEY,
    ],
    read_only: false,
    run: event,
};

/// `logbook_session_start`: `logbook session start`, the way out of
/// `pending` for a session created with `pending: true`.
pub const START: ToolSpec = ToolSpec {
    name: "logbook_session_start",
    title: "Start a session",
    description: "Start a pending session (pending -> active; event started), as \
        `logbook session start` does: a session created with `pending: true` begins its work \
        here. Returns the session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, \
        SESSION_INVALID_TRANSITION (not pending), LEASE_HELD, STORE_BUSY.",
    fields: &[SESSION_ID, REASON, KEY],
    read_only: false,
    run: start,
};

/// `logbook_session_pause`.
pub const PAUSE: ToolSpec = ToolSpec {
    name: "logbook_session_pause",
    title: "Pause a session",
    description: "Pause an active session (active -> paused; event paused). Returns the \
        session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (not \
        active), LEASE_HELD, STORE_BUSY.",
    fields: &[SESSION_ID, REASON, KEY],
    read_only: false,
    run: pause,
};

/// `logbook_session_resume`.
pub const RESUME: ToolSpec = ToolSpec {
    name: "logbook_session_resume",
    title: "Resume a session",
    description: "Resume a paused session (paused -> active; event resumed). Refused with \
        GATE_PENDING while a gate waits for a decision, which only a person gives (on the \
        CLI). Returns the session. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, \
        SESSION_INVALID_TRANSITION (not paused), GATE_PENDING, LEASE_HELD, STORE_BUSY.",
    fields: &[SESSION_ID, REASON, KEY],
    read_only: false,
    run: resume,
};

/// `logbook_gate_open`.
pub const GATE_OPEN: ToolSpec = ToolSpec {
    name: "logbook_gate_open",
    title: "Open a gate",
    description: "Open a gate on an active session. auto: approved at once (event \
        gate_approved), the session stays active. user-approval, step-confirm: event \
        gate_opened, the session pauses with the gate pending until a person approves or \
        rejects it with `logbook gate approve|reject` on the CLI. Approve and reject are not \
        MCP tools: an agent must not decide its own gate. Returns the session. Errors: \
        INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (not active), \
        GATE_PENDING (this gate's previous round is undecided), LEASE_HELD, STORE_BUSY.",
    fields: &[
        SESSION_ID,
        Field::req("gate", Kind::Text, "Gate name, 1-128 characters"),
        Field::req(
            "kind",
            Kind::Enum(GATE_KINDS),
            "auto, user-approval or step-confirm",
        ),
        KEY,
    ],
    read_only: false,
    run: gate_open,
};

fn events(l: &Ledger, a: &Args) -> Result<Reply> {
    let page = l.session_events(
        &a.required_text("session_id")?,
        a.int("after_seq"),
        a.int("limit"),
    )?;
    to_json(&page)
}

fn stage(l: &Ledger, a: &Args) -> Result<Reply> {
    let action = stage_action(&a.required_text("action")?)
        .ok_or_else(|| Error::invalid("action", "not a stage action"))?;
    let req = StageRequest {
        action,
        name: a.required_text("stage")?,
        attempt: a.int("attempt"),
        reason: a.text("reason"),
    };
    written(&l.stage(&a.required_text("session_id")?, req, &mutation(a))?)
}

/// The action an `action` value names (the CLI's `StageActionArg`).
fn stage_action(s: &str) -> Option<StageAction> {
    Some(match s {
        "start" => StageAction::Start,
        "complete" => StageAction::Complete,
        "fail" => StageAction::Fail,
        "retry" => StageAction::Retry,
        _ => return None,
    })
}

fn usage(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = RecordUsage {
        input_tokens: a.int("input_tokens"),
        output_tokens: a.int("output_tokens"),
        api_calls: a.int("api_calls"),
        duration_ms: a.int("duration_ms"),
    };
    written(&l.record_usage(&a.required_text("session_id")?, req, &mutation(a))?)
}

fn event(l: &Ledger, a: &Args) -> Result<Reply> {
    let req = AppendEvent {
        event_type: a.required_text("type")?,
        detail: a.text("detail"),
        data: a.object("data"),
    };
    written(&l.append_event(&a.required_text("session_id")?, req, &mutation(a))?)
}

fn start(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.start(
        &a.required_text("session_id")?,
        a.text("reason"),
        &mutation(a),
    )?)
}

fn pause(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.pause(
        &a.required_text("session_id")?,
        a.text("reason"),
        &mutation(a),
    )?)
}

fn resume(l: &Ledger, a: &Args) -> Result<Reply> {
    written(&l.resume(
        &a.required_text("session_id")?,
        a.text("reason"),
        &mutation(a),
    )?)
}

fn gate_open(l: &Ledger, a: &Args) -> Result<Reply> {
    let kind = a
        .required_text("kind")?
        .parse::<GateKind>()
        .map_err(|_| Error::invalid("kind", "not a gate kind"))?;
    let s = l.open_gate(
        &a.required_text("session_id")?,
        &a.required_text("gate")?,
        kind,
        &mutation(a),
    )?;
    written(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_match_the_model() {
        let kinds: Vec<&str> = GateKind::VARIANTS.iter().map(|k| k.as_str()).collect();
        assert_eq!(GATE_KINDS, kinds.as_slice());
        let events: Vec<&str> = STAGE_ACTIONS
            .iter()
            .map(|a| {
                stage_action(a)
                    .expect("every listed action maps")
                    .event_type()
                    .as_str()
            })
            .collect();
        assert_eq!(
            events,
            [
                "stage_started",
                "stage_completed",
                "stage_failed",
                "stage_retrying"
            ]
        );
    }

    #[test]
    fn mutations_take_a_key_and_reads_do_not() {
        for t in [EVENTS, STAGE, USAGE, EVENT, START, PAUSE, RESUME, GATE_OPEN] {
            let keyed = t.fields.iter().any(|f| f.name == "idempotency_key");
            assert_eq!(keyed, !t.read_only, "{}", t.name);
        }
    }
}
