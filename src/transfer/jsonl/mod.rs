//! logbook's JSON Lines format: one whole session per line, every column a
//! rebuild needs, events with their hash (hex), then the session's runs,
//! budget, snapshots and gates (schema V3/V4; each key left out when the
//! session has none, so a session without them exports exactly as before).
//! Keys in the fixed order of the structs below; compact. Export → import →
//! export is byte-identical.

mod audit;
mod parse;
mod workflow;

use crate::model::{Session, Usage};
use crate::store::rows::{
    BudgetFull, GateFull, RunRow, SnapshotFull, StoredEvent, StoredRef, WorkflowRows,
};
pub use audit::PurgeLine;
pub(crate) use audit::{is_purge_line, parse as parse_purge, render as render_purge};
pub(crate) use parse::{actor_type, parse, peek_id};
use serde::Serialize;
use serde_json::value::RawValue;

/// The `format` value of every line.
pub const FORMAT: &str = "logbook.session.v1";

#[derive(Serialize)]
struct LineActor<'a> {
    #[serde(rename = "type")]
    actor_type: &'a str,
    id: Option<&'a str>,
    authenticated: bool,
}

#[derive(Serialize)]
struct LineRef<'a> {
    kind: &'a str,
    id: &'a str,
    linked_seq: i64,
}

#[derive(Serialize)]
struct LineEvent<'a> {
    seq: i64,
    #[serde(rename = "type")]
    event_type: &'a str,
    at_ms: i64,
    actor_type: &'a str,
    detail: Option<&'a str>,
    data: Option<&'a RawValue>,
    run_id: Option<&'a str>,
    hash: String,
}

#[derive(Serialize)]
struct LineRunUsage {
    input_tokens: i64,
    output_tokens: i64,
    api_calls: i64,
}

#[derive(Serialize)]
struct LineRun<'a> {
    run_id: &'a str,
    status: &'a str,
    input: Option<&'a RawValue>,
    output: Option<&'a RawValue>,
    error_code: Option<&'a str>,
    error_message: Option<&'a str>,
    metadata: &'a RawValue,
    usage: LineRunUsage,
    turn_count: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    started_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
}

#[derive(Serialize)]
struct LineBudget<'a> {
    max_tokens: Option<i64>,
    max_api_calls: Option<i64>,
    max_duration_ms: Option<i64>,
    on_exceed: &'a str,
    base_tokens: i64,
    base_api_calls: i64,
    base_duration_ms: i64,
    exceeded_at_ms: Option<i64>,
    updated_at_ms: i64,
}

#[derive(Serialize)]
struct LineSnapshot<'a> {
    seq: i64,
    step: Option<&'a str>,
    stage: Option<&'a str>,
    state: &'a RawValue,
    at_ms: i64,
    /// The payload (schema V11) as lowercase hex; left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
}

#[derive(Serialize)]
struct LineGate<'a> {
    name: &'a str,
    round: i64,
    kind: &'a str,
    status: &'a str,
    opened_seq: i64,
    opened_at_ms: i64,
    decided_seq: Option<i64>,
    decided_at_ms: Option<i64>,
    reason: Option<&'a str>,
    outcome: Option<&'a str>,
}

#[derive(Serialize)]
struct LineSession<'a> {
    format: &'static str,
    session_id: &'a str,
    status: &'a str,
    title: &'a str,
    goal: Option<&'a str>,
    app: Option<&'a str>,
    agent_id: Option<&'a str>,
    route: Option<&'a str>,
    stage: Option<&'a str>,
    parent_session_id: Option<&'a str>,
    tags: &'a [String],
    context: &'a RawValue,
    metadata: &'a RawValue,
    actor: LineActor<'a>,
    rev: i64,
    checkpoint_seq: Option<i64>,
    refs: Vec<LineRef<'a>>,
    final_result: Option<&'a str>,
    end_reason: Option<&'a str>,
    usage: Usage,
    created_at_ms: i64,
    updated_at_ms: i64,
    ended_at_ms: Option<i64>,
    events: Vec<LineEvent<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    runs: Vec<LineRun<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<LineBudget<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    snapshots: Vec<LineSnapshot<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gates: Vec<LineGate<'a>>,
}

/// Stored JSON text (compact, as the store reads it) as a raw value.
fn raw(text: &str) -> serde_json::Result<&RawValue> {
    serde_json::from_str(text)
}

fn line_run(r: &RunRow) -> serde_json::Result<LineRun<'_>> {
    Ok(LineRun {
        run_id: &r.run_id,
        status: &r.status,
        input: r.input.as_deref().map(raw).transpose()?,
        output: r.output.as_deref().map(raw).transpose()?,
        error_code: r.error_code.as_deref(),
        error_message: r.error_message.as_deref(),
        metadata: raw(&r.metadata)?,
        usage: LineRunUsage {
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            api_calls: r.api_calls,
        },
        turn_count: r.turn_count,
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        started_at_ms: r.started_at_ms,
        ended_at_ms: r.ended_at_ms,
    })
}

fn line_budget(b: &BudgetFull) -> LineBudget<'_> {
    LineBudget {
        max_tokens: b.max_tokens,
        max_api_calls: b.max_api_calls,
        max_duration_ms: b.max_duration_ms,
        on_exceed: &b.on_exceed,
        base_tokens: b.base_tokens,
        base_api_calls: b.base_api_calls,
        base_duration_ms: b.base_duration_ms,
        exceeded_at_ms: b.exceeded_at_ms,
        updated_at_ms: b.updated_at_ms,
    }
}

fn line_snapshot(sn: &SnapshotFull) -> serde_json::Result<LineSnapshot<'_>> {
    Ok(LineSnapshot {
        seq: sn.seq,
        step: sn.step.as_deref(),
        stage: sn.stage.as_deref(),
        state: raw(&sn.state)?,
        at_ms: sn.at_ms,
        payload_hex: sn.payload.as_deref().map(hex::encode),
    })
}

fn line_gate(g: &GateFull) -> LineGate<'_> {
    LineGate {
        name: &g.name,
        round: g.round,
        kind: &g.kind,
        status: &g.status,
        opened_seq: g.opened_seq,
        opened_at_ms: g.opened_at_ms,
        decided_seq: g.decided_seq,
        decided_at_ms: g.decided_at_ms,
        reason: g.reason.as_deref(),
        outcome: g.outcome.as_deref(),
    }
}

/// Renders one session as its line (without the trailing `\n`).
pub(crate) fn render(
    s: &Session,
    checkpoint_seq: Option<i64>,
    refs: &[StoredRef],
    events: &[StoredEvent],
    w: &WorkflowRows,
) -> serde_json::Result<String> {
    let line = LineSession {
        format: FORMAT,
        session_id: s.session_id.as_str(),
        status: s.status.as_str(),
        title: &s.title,
        goal: s.goal.as_deref(),
        app: s.app.as_deref(),
        agent_id: s.agent_id.as_deref(),
        route: s.route.as_deref(),
        stage: s.stage.as_deref(),
        parent_session_id: s.parent_session_id.as_deref(),
        tags: &s.tags,
        context: &s.context,
        metadata: &s.metadata,
        actor: LineActor {
            actor_type: s.actor.actor_type.as_str(),
            id: s.actor.id.as_deref(),
            authenticated: s.actor.authenticated,
        },
        rev: s.rev,
        checkpoint_seq,
        refs: refs
            .iter()
            .map(|r| LineRef {
                kind: &r.kind,
                id: &r.id,
                linked_seq: r.linked_seq,
            })
            .collect(),
        final_result: s.final_result.as_deref(),
        end_reason: s.end_reason.as_deref(),
        usage: s.usage,
        created_at_ms: s.created_at_ms,
        updated_at_ms: s.updated_at_ms,
        ended_at_ms: s.ended_at_ms,
        events: events
            .iter()
            .map(|e| LineEvent {
                seq: e.seq,
                event_type: &e.event_type,
                at_ms: e.at_ms,
                actor_type: &e.actor_type,
                detail: e.detail.as_deref(),
                data: e.data.as_deref(),
                run_id: e.run_id.as_deref(),
                hash: hex::encode(&e.hash),
            })
            .collect(),
        runs: w.runs.iter().map(line_run).collect::<Result<_, _>>()?,
        budget: w.budget.as_ref().map(line_budget),
        snapshots: w
            .snapshots
            .iter()
            .map(line_snapshot)
            .collect::<Result<_, _>>()?,
        gates: w.gates.iter().map(line_gate).collect(),
    };
    serde_json::to_string(&line)
}
