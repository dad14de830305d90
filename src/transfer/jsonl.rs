//! logbook's JSON Lines format: one whole session per line, every column a
//! rebuild needs, events with their hash (hex), then the session's runs,
//! budget, snapshots and gates (schema V3/V4; each key left out when the
//! session has none, so a session without them exports exactly as before).
//! Keys in the fixed order of the structs below; compact. Export → import →
//! export is byte-identical.

use super::json::{object_text, object_text_max, Obj};
use super::{check_rows, event_type_ok, opt_name, opt_stage, opt_text, status, Bad};
use crate::ledger::{RUN_ERROR_CODE_MAX, RUN_JSON_MAX_BYTES};
use crate::model::{
    ActorType, GateKind, GateStatus, OnExceed, RunId, RunStatus, Session, Usage, COUNT_MAX,
};
use crate::redact::redact;
use crate::store::transfer::{
    BudgetFull, EventRow, GateFull, RefRow, RunRow, SessionRows, SnapshotFull, StoredEvent,
    StoredRef, WorkflowRows,
};
use crate::validate::{self as v, Lines};
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

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

/// Stored JSON text (compact, as `store::transfer` reads it) as a raw value.
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

const KEYS: &[&str] = &[
    "format",
    "session_id",
    "status",
    "title",
    "goal",
    "app",
    "agent_id",
    "route",
    "stage",
    "parent_session_id",
    "tags",
    "context",
    "metadata",
    "actor",
    "rev",
    "checkpoint_seq",
    "refs",
    "final_result",
    "end_reason",
    "usage",
    "created_at_ms",
    "updated_at_ms",
    "ended_at_ms",
    "events",
    "runs",
    "budget",
    "snapshots",
    "gates",
];

/// Names an unknown key only when it is a plain identifier (a key could
/// hold anything, a secret included).
fn unknown_key(path: &str, key: &str) -> Bad {
    let plain = key.len() <= 40
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && redact(key) == key;
    if plain {
        let field = if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        };
        return Bad::new(
            field,
            "is not a field of this format (from a newer logbook?)",
        );
    }
    Bad::new(
        if path.is_empty() { "line" } else { path },
        "holds a key this format does not know (from a newer logbook?); the key is not repeated",
    )
}

/// Reads the session id of a line as early as possible, for the report.
pub(crate) fn peek_id(o: &Obj<'_>) -> Option<String> {
    o.str_opt("session_id")
        .ok()
        .flatten()
        .filter(|id| id.parse::<crate::model::SessionId>().is_ok())
}

/// Parses, validates and redacts one line.
pub(crate) fn parse(o: &Obj<'_>) -> Result<SessionRows, Bad> {
    if let Some(k) = o.keys().find(|k| !KEYS.contains(k)) {
        return Err(unknown_key("", k));
    }
    if o.str_req("format")? != FORMAT {
        return Err(Bad::new("format", format!("must be `{FORMAT}`")));
    }
    let session_id = o.str_req("session_id")?;
    session_id
        .parse::<crate::model::SessionId>()
        .map_err(|e| Bad::new("session_id", e.to_string()))?;
    let title = o.str_req("title")?;
    v::text("title", &title, 1, v::TITLE_MAX, Lines::Single)?;
    let parent = o.str_opt("parent_session_id")?;
    if let Some(p) = &parent {
        p.parse::<crate::model::SessionId>()
            .map_err(|e| Bad::new("parent_session_id", e.to_string()))?;
    }
    let raw_tags = o.str_list("tags")?;
    if raw_tags.len() > v::TAGS_MAX {
        return Err(Bad::new(
            "tags",
            format!("has {} tags; the limit is {}", raw_tags.len(), v::TAGS_MAX),
        ));
    }
    let mut tags: Vec<String> = Vec::with_capacity(raw_tags.len());
    for t in &raw_tags {
        v::name("tags", t)?;
        let t = redact(t).into_owned();
        if tags.contains(&t) {
            return Err(Bad::new("tags", "holds the same tag twice"));
        }
        tags.push(t);
    }
    let json_field = |key: &str| -> Result<String, Bad> {
        match o.raw(key) {
            None => Ok("{}".to_owned()),
            Some(r) => object_text(key, r),
        }
    };
    let context = json_field("context")?;
    let metadata = json_field("metadata")?;
    let actor = o
        .obj("actor")?
        .ok_or_else(|| Bad::new("actor", "is missing"))?;
    known_keys(&actor, "actor", ACTOR_KEYS)?;
    let actor_type = actor_type("actor.type", &actor.str_req("type")?)?;
    let actor_id = opt_name("actor.id", actor.str_opt("id")?)?;
    let usage = match o.obj("usage")? {
        None => Usage::default(),
        Some(u) => {
            known_keys(&u, "usage", USAGE_KEYS)?;
            Usage {
                input_tokens: count(&u, "input_tokens")?,
                output_tokens: count(&u, "output_tokens")?,
                api_calls: count(&u, "api_calls")?,
                duration_ms: count(&u, "duration_ms")?,
            }
        }
    };
    let mut refs = Vec::new();
    for (i, raw) in o.list("refs")?.into_iter().enumerate() {
        let path = format!("refs[{i}]");
        let r = Obj::parse(raw.get(), &path)?;
        known_keys(&r, &path, REF_KEYS)?;
        let kind = match r.str_req("kind")?.as_str() {
            "plan" => "plan",
            "operation" => "operation",
            "deployment" => "deployment",
            _ => {
                return Err(Bad::new(
                    r.name("kind"),
                    "must be plan, operation or deployment",
                ))
            }
        };
        let id = r.str_req("id")?;
        v::token(&r.name("id"), &id, v::REF_ID_MAX)?;
        refs.push(RefRow {
            kind,
            id: redact(&id).into_owned(),
            linked_seq: r.i64_req("linked_seq")?,
        });
    }
    let mut events = Vec::new();
    for (i, raw) in o.list("events")?.into_iter().enumerate() {
        events.push(parse_event(i, raw)?);
    }
    let mut runs = Vec::new();
    for (i, raw) in o.list("runs")?.into_iter().enumerate() {
        runs.push(parse_run(i, raw)?);
    }
    let budget = match o.obj("budget")? {
        None => None,
        Some(b) => Some(parse_budget(&b)?),
    };
    let mut snapshots = Vec::new();
    for (i, raw) in o.list("snapshots")?.into_iter().enumerate() {
        snapshots.push(parse_snapshot(i, raw)?);
    }
    let mut gates = Vec::new();
    for (i, raw) in o.list("gates")?.into_iter().enumerate() {
        gates.push(parse_gate(i, raw)?);
    }
    let rows = SessionRows {
        session_id,
        status: status("status", &o.str_req("status")?)?,
        title: redact(&title).into_owned(),
        goal: opt_text("goal", o.str_opt("goal")?, v::GOAL_MAX, Lines::Multi)?,
        app: opt_name("app", o.str_opt("app")?)?,
        agent_id: opt_name("agent_id", o.str_opt("agent_id")?)?,
        route: opt_name("route", o.str_opt("route")?)?,
        stage: opt_stage("stage", o.str_opt("stage")?)?,
        parent_session_id: parent,
        tags,
        context,
        metadata,
        actor_type,
        actor_id,
        rev: o.i64_req("rev")?,
        checkpoint_seq: o.i64_opt("checkpoint_seq")?,
        refs,
        final_result: opt_text(
            "final_result",
            o.str_opt("final_result")?,
            v::RESULT_MAX,
            Lines::Multi,
        )?,
        end_reason: opt_text(
            "end_reason",
            o.str_opt("end_reason")?,
            v::REASON_MAX,
            Lines::Multi,
        )?,
        usage,
        created_at_ms: o.i64_req("created_at_ms")?,
        updated_at_ms: o.i64_req("updated_at_ms")?,
        ended_at_ms: o.i64_opt("ended_at_ms")?,
        events,
        workflow: WorkflowRows {
            runs,
            budget,
            snapshots,
            gates,
        },
    };
    check_rows(&rows)?;
    check_workflow(&rows)?;
    Ok(rows)
}

pub(crate) fn actor_type(field: &str, s: &str) -> Result<ActorType, Bad> {
    s.parse::<ActorType>().map_err(|e| Bad::new(field, e))
}

/// The keys of a line's `actor`, `usage` and each `refs[i]` (unknown keys
/// are refused there too, as everywhere in a line).
const ACTOR_KEYS: &[&str] = &["type", "id", "authenticated"];
const USAGE_KEYS: &[&str] = &["input_tokens", "output_tokens", "api_calls", "duration_ms"];
const REF_KEYS: &[&str] = &["kind", "id", "linked_seq"];

const EVENT_KEYS: &[&str] = &[
    "seq",
    "type",
    "at_ms",
    "actor_type",
    "detail",
    "data",
    "run_id",
    "hash",
];

fn parse_event(i: usize, raw: &RawValue) -> Result<EventRow, Bad> {
    let path = format!("events[{i}]");
    let e = Obj::parse(raw.get(), &path)?;
    if let Some(k) = e.keys().find(|k| !EVENT_KEYS.contains(k)) {
        return Err(unknown_key(&path, k));
    }
    let seq = e.i64_req("seq")?;
    if usize::try_from(seq).ok() != Some(i) {
        return Err(Bad::new(
            e.name("seq"),
            format!("must be {i}: seqs run 0, 1, 2, … in order"),
        ));
    }
    let event_type = e.str_req("type")?;
    if !event_type_ok(&event_type) {
        return Err(Bad::new(
            e.name("type"),
            "is not a logbook event type (built-in, or `x.` + lowercase name)",
        ));
    }
    v::not_secret(&e.name("type"), &event_type, "event types")?;
    let run_id = e.str_opt("run_id")?;
    if let Some(r) = &run_id {
        v::token(&e.name("run_id"), r, v::REF_ID_MAX)?;
    }
    Ok(EventRow {
        event_type,
        at_ms: e.i64_req("at_ms")?,
        actor_type: actor_type(&e.name("actor_type"), &e.str_req("actor_type")?)?,
        detail: opt_text(
            &e.name("detail"),
            e.str_opt("detail")?,
            v::DETAIL_MAX,
            Lines::Multi,
        )?,
        data: match e.raw("data") {
            None => None,
            Some(r) => Some(object_text(&e.name("data"), r)?),
        },
        run_id: run_id.map(|r| redact(&r).into_owned()),
    })
}

// ---- runs, budget, snapshots, gates (schema V3/V4) ----

/// Refuses keys a part of the line does not have.
fn known_keys(o: &Obj<'_>, path: &str, keys: &[&str]) -> Result<(), Bad> {
    match o.keys().find(|k| !keys.contains(k)) {
        Some(k) => Err(unknown_key(path, k)),
        None => Ok(()),
    }
}

/// An integer in 0..=2^53−1, as the verbs take counts and limits.
fn in_count_range(o: &Obj<'_>, key: &str, n: i64) -> Result<i64, Bad> {
    if (0..=COUNT_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(Bad::new(
            o.name(key),
            format!("must be an integer from 0 to {COUNT_MAX} (2^53 - 1)"),
        ))
    }
}

/// A count (0 when missing or null).
fn count(o: &Obj<'_>, key: &str) -> Result<i64, Bad> {
    in_count_range(o, key, o.i64_opt(key)?.unwrap_or(0))
}

/// An optional limit.
fn count_opt(o: &Obj<'_>, key: &str) -> Result<Option<i64>, Bad> {
    o.i64_opt(key)?
        .map(|n| in_count_range(o, key, n))
        .transpose()
}

/// Checked, redacted free text (`None` stays `None`).
fn checked_text(
    o: &Obj<'_>,
    key: &str,
    min: usize,
    max: usize,
    lines: Lines,
) -> Result<Option<String>, Bad> {
    match o.str_opt(key)? {
        None => Ok(None),
        Some(t) => {
            v::text(&o.name(key), &t, min, max, lines)?;
            Ok(Some(redact(&t).into_owned()))
        }
    }
}

const RUN_KEYS: &[&str] = &[
    "run_id",
    "status",
    "input",
    "output",
    "error_code",
    "error_message",
    "metadata",
    "usage",
    "turn_count",
    "created_at_ms",
    "updated_at_ms",
    "started_at_ms",
    "ended_at_ms",
];

const RUN_USAGE_KEYS: &[&str] = &["input_tokens", "output_tokens", "api_calls"];

/// One run: the caps and rules of the run verbs (id `run_` + 16 hex; input
/// and output objects ≤ 4 MiB, metadata ≤ 256 KiB, all redacted; error
/// code 1–128 one line and message 1–4096, redacted; counts in
/// 0..=2^53−1) and the state machine's shape (an error exactly on a failed
/// run, an output only on a completed one, `started_at_ms` on a running
/// one and never on a pending one, `ended_at_ms` exactly on a terminal one).
fn parse_run(i: usize, raw: &RawValue) -> Result<RunRow, Bad> {
    let path = format!("runs[{i}]");
    let r = Obj::parse(raw.get(), &path)?;
    known_keys(&r, &path, RUN_KEYS)?;
    let run_id = r.str_req("run_id")?;
    run_id
        .parse::<RunId>()
        .map_err(|e| Bad::new(r.name("run_id"), e.to_string()))?;
    let st = r
        .str_req("status")?
        .parse::<RunStatus>()
        .map_err(|e| Bad::new(r.name("status"), e))?;
    let big = |key: &str| -> Result<Option<String>, Bad> {
        match r.raw(key) {
            None => Ok(None),
            Some(v) => object_text_max(&r.name(key), v, RUN_JSON_MAX_BYTES).map(Some),
        }
    };
    let input = big("input")?;
    let output = big("output")?;
    let metadata = match r.raw("metadata") {
        None => "{}".to_owned(),
        Some(m) => object_text(&r.name("metadata"), m)?,
    };
    let error_code = checked_text(&r, "error_code", 1, RUN_ERROR_CODE_MAX, Lines::Single)?;
    let error_message = checked_text(&r, "error_message", 1, v::REASON_MAX, Lines::Multi)?;
    let (input_tokens, output_tokens, api_calls) = match r.obj("usage")? {
        None => (0, 0, 0),
        Some(u) => {
            known_keys(&u, &r.name("usage"), RUN_USAGE_KEYS)?;
            (
                count(&u, "input_tokens")?,
                count(&u, "output_tokens")?,
                count(&u, "api_calls")?,
            )
        }
    };
    let row = RunRow {
        run_id,
        status: st.as_str().to_owned(),
        input,
        output,
        error_code,
        error_message,
        metadata,
        input_tokens,
        output_tokens,
        api_calls,
        turn_count: count(&r, "turn_count")?,
        created_at_ms: r.i64_req("created_at_ms")?,
        updated_at_ms: r.i64_req("updated_at_ms")?,
        started_at_ms: r.i64_opt("started_at_ms")?,
        ended_at_ms: r.i64_opt("ended_at_ms")?,
    };
    // A failed run always carries its error; a run cancelled because its
    // session ended carries one too (`SESSION_ENDED`, see ledger::run_end);
    // no other status has one. Code and message come as a pair.
    let failed = st == RunStatus::Failed;
    let may_err = failed || st == RunStatus::Cancelled;
    for (key, val) in [
        ("error_code", &row.error_code),
        ("error_message", &row.error_message),
    ] {
        if (failed && val.is_none()) || (!may_err && val.is_some()) {
            return Err(Bad::new(
                r.name(key),
                "must be set on a failed run, may be set on a cancelled one, and nothing else",
            ));
        }
    }
    if row.error_code.is_some() != row.error_message.is_some() {
        return Err(Bad::new(
            r.name("error_message"),
            "must be set exactly when error_code is",
        ));
    }
    if row.output.is_some() && st != RunStatus::Completed {
        return Err(Bad::new(
            r.name("output"),
            "may only be set on a completed run",
        ));
    }
    let started_ok = match st {
        RunStatus::Pending => row.started_at_ms.is_none(),
        RunStatus::Running => row.started_at_ms.is_some(),
        _ => true,
    };
    if !started_ok {
        return Err(Bad::new(
            r.name("started_at_ms"),
            "must be set on a running run and null on a pending one",
        ));
    }
    if st.is_terminal() != row.ended_at_ms.is_some() {
        return Err(Bad::new(
            r.name("ended_at_ms"),
            "must be set exactly when the run's status is terminal",
        ));
    }
    if row.updated_at_ms < row.created_at_ms {
        return Err(Bad::new(
            r.name("updated_at_ms"),
            "is earlier than created_at_ms",
        ));
    }
    Ok(row)
}

const BUDGET_KEYS: &[&str] = &[
    "max_tokens",
    "max_api_calls",
    "max_duration_ms",
    "on_exceed",
    "base_tokens",
    "base_api_calls",
    "base_duration_ms",
    "exceeded_at_ms",
    "updated_at_ms",
];

/// The budget: limits and bases in 0..=2^53−1, a known policy.
fn parse_budget(b: &Obj<'_>) -> Result<BudgetFull, Bad> {
    known_keys(b, "budget", BUDGET_KEYS)?;
    let on_exceed = b
        .str_req("on_exceed")?
        .parse::<OnExceed>()
        .map_err(|e| Bad::new(b.name("on_exceed"), e))?;
    Ok(BudgetFull {
        max_tokens: count_opt(b, "max_tokens")?,
        max_api_calls: count_opt(b, "max_api_calls")?,
        max_duration_ms: count_opt(b, "max_duration_ms")?,
        on_exceed: on_exceed.as_str().to_owned(),
        base_tokens: count(b, "base_tokens")?,
        base_api_calls: count(b, "base_api_calls")?,
        base_duration_ms: count(b, "base_duration_ms")?,
        exceeded_at_ms: b.i64_opt("exceeded_at_ms")?,
        updated_at_ms: b.i64_req("updated_at_ms")?,
    })
}

const SNAPSHOT_KEYS: &[&str] = &["seq", "step", "stage", "state", "at_ms"];

/// One snapshot: the checkpoint verb's caps (step 1–200 one line, stage a
/// name, state an object ≤ 256 KiB), redacted.
fn parse_snapshot(i: usize, raw: &RawValue) -> Result<SnapshotFull, Bad> {
    let path = format!("snapshots[{i}]");
    let o = Obj::parse(raw.get(), &path)?;
    known_keys(&o, &path, SNAPSHOT_KEYS)?;
    let state = match o.raw("state") {
        None => return Err(Bad::new(o.name("state"), "is missing")),
        Some(s) => object_text(&o.name("state"), s)?,
    };
    Ok(SnapshotFull {
        seq: o.i64_req("seq")?,
        step: checked_text(&o, "step", 1, v::STEP_MAX, Lines::Single)?,
        stage: opt_stage(&o.name("stage"), o.str_opt("stage")?)?,
        state,
        at_ms: o.i64_req("at_ms")?,
    })
}

const GATE_KEYS: &[&str] = &[
    "name",
    "round",
    "kind",
    "status",
    "opened_seq",
    "opened_at_ms",
    "decided_seq",
    "decided_at_ms",
    "reason",
    "outcome",
];

/// One gate: the gate verbs' rules (a name of 1–128 characters that holds
/// no secret, round ≥ 1, known kind and status, a decision exactly when
/// not pending, a reason only with a decision, an outcome exactly on a
/// rejection, an `auto` gate approved when opened).
fn parse_gate(i: usize, raw: &RawValue) -> Result<GateFull, Bad> {
    let path = format!("gates[{i}]");
    let o = Obj::parse(raw.get(), &path)?;
    known_keys(&o, &path, GATE_KEYS)?;
    let name = o.str_req("name")?;
    v::keyed_name(&o.name("name"), &name, "gate names")?;
    let round = o.i64_req("round")?;
    if round < 1 {
        return Err(Bad::new(o.name("round"), "must be 1 or more"));
    }
    let kind = o
        .str_req("kind")?
        .parse::<GateKind>()
        .map_err(|e| Bad::new(o.name("kind"), e))?;
    let st = o
        .str_req("status")?
        .parse::<GateStatus>()
        .map_err(|e| Bad::new(o.name("status"), e))?;
    let outcome = match o.str_opt("outcome")?.as_deref() {
        None => None,
        Some("failed") => Some("failed"),
        Some("cancelled") => Some("cancelled"),
        Some(_) => {
            return Err(Bad::new(
                o.name("outcome"),
                "must be failed, cancelled or null",
            ))
        }
    };
    let g = GateFull {
        name,
        round,
        kind: kind.as_str().to_owned(),
        status: st.as_str().to_owned(),
        opened_seq: o.i64_req("opened_seq")?,
        opened_at_ms: o.i64_req("opened_at_ms")?,
        decided_seq: o.i64_opt("decided_seq")?,
        decided_at_ms: o.i64_opt("decided_at_ms")?,
        reason: checked_text(&o, "reason", 1, v::REASON_MAX, Lines::Multi)?,
        outcome: outcome.map(str::to_owned),
    };
    let pending = st == GateStatus::Pending;
    for (key, set) in [
        ("decided_seq", g.decided_seq.is_some()),
        ("decided_at_ms", g.decided_at_ms.is_some()),
    ] {
        if pending == set {
            return Err(Bad::new(
                o.name(key),
                "must be set exactly when the gate is decided",
            ));
        }
    }
    if pending && g.reason.is_some() {
        return Err(Bad::new(o.name("reason"), "must be null on a pending gate"));
    }
    if (st == GateStatus::Rejected) != g.outcome.is_some() {
        return Err(Bad::new(
            o.name("outcome"),
            "must be set exactly when the gate is rejected",
        ));
    }
    if kind == GateKind::Auto && (st != GateStatus::Approved || g.decided_seq != Some(g.opened_seq))
    {
        return Err(Bad::new(
            o.name("status"),
            "an auto gate is approved by the event that opens it",
        ));
    }
    Ok(g)
}

/// Cross-checks the runs, snapshots and gates against the session and its
/// events (what the triggers would otherwise refuse without naming a
/// field, and what `restore`, `gate` and `run` rely on).
fn check_workflow(s: &SessionRows) -> Result<(), Bad> {
    let w = &s.workflow;
    let event_type = |seq: i64| {
        usize::try_from(seq)
            .ok()
            .and_then(|i| s.events.get(i))
            .map(|e| e.event_type.as_str())
    };
    // Runs.
    for (i, r) in w.runs.iter().enumerate() {
        if w.runs[..i].iter().any(|o| o.run_id == r.run_id) {
            return Err(Bad::new(
                format!("runs[{i}].run_id"),
                "holds the same run twice",
            ));
        }
    }
    if w.runs.iter().filter(|r| r.status == "running").count() > 1 {
        return Err(Bad::new(
            "runs",
            "holds more than one running run (a session runs at most one at a time)",
        ));
    }
    if !w.runs.is_empty() {
        if s.status.is_terminal() && s.rev < 2 {
            return Err(Bad::new(
                "rev",
                "must be 2 or more for a terminal session with runs",
            ));
        }
        for (i, e) in s.events.iter().enumerate() {
            if let Some(id) = &e.run_id {
                if !w.runs.iter().any(|r| &r.run_id == id) {
                    return Err(Bad::new(
                        format!("events[{i}].run_id"),
                        "names no run of this session's `runs`",
                    ));
                }
            }
        }
    }
    // Snapshots: by seq, each for a checkpoint event that records it.
    let mut last_seq = -1;
    for (i, sn) in w.snapshots.iter().enumerate() {
        let field = |k: &str| format!("snapshots[{i}].{k}");
        if sn.seq <= last_seq {
            return Err(Bad::new(
                field("seq"),
                "must be greater than the previous snapshot's (snapshots by seq, one per checkpoint)",
            ));
        }
        last_seq = sn.seq;
        let event = usize::try_from(sn.seq).ok().and_then(|i| s.events.get(i));
        let Some(event) = event.filter(|e| e.event_type == "checkpoint") else {
            return Err(Bad::new(
                field("seq"),
                "must be the seq of a `checkpoint` event",
            ));
        };
        let recorded = event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|d| d.get("snapshot").cloned());
        let sha = hex::encode(Sha256::digest(sn.state.as_bytes()));
        let size = i64::try_from(sn.state.len()).unwrap_or(i64::MAX);
        let matches = recorded.is_some_and(|r| {
            r.get("sha256").and_then(|v| v.as_str()) == Some(sha.as_str())
                && r.get("size_bytes").and_then(|v| v.as_i64()) == Some(size)
        });
        if !matches {
            return Err(Bad::new(
                field("state"),
                "does not match the snapshot (size_bytes, sha256) its checkpoint event records",
            ));
        }
    }
    // Gates: rounds 1, 2, … per name in opening order, at most one pending,
    // each seq naming the event that opened or decided it.
    for (i, g) in w.gates.iter().enumerate() {
        let field = |k: &str| format!("gates[{i}].{k}");
        let before = w.gates[..i].iter().filter(|o| o.name == g.name).count();
        if usize::try_from(g.round).ok() != Some(before + 1) {
            return Err(Bad::new(
                field("round"),
                format!(
                    "must be {}: a name's rounds run 1, 2, … in opening order",
                    before + 1
                ),
            ));
        }
        if g.status == "pending" && w.gates[..i].iter().any(|o| o.status == "pending") {
            return Err(Bad::new(
                field("status"),
                "a session waits on at most one pending gate",
            ));
        }
        let opened = if g.kind == "auto" {
            "gate_approved"
        } else {
            "gate_opened"
        };
        if event_type(g.opened_seq) != Some(opened) {
            return Err(Bad::new(
                field("opened_seq"),
                format!("must be the seq of a `{opened}` event"),
            ));
        }
        if let Some(d) = g.decided_seq {
            let want = if g.status == "rejected" {
                "gate_rejected"
            } else {
                "gate_approved"
            };
            if event_type(d) != Some(want) || (g.kind != "auto" && d <= g.opened_seq) {
                return Err(Bad::new(
                    field("decided_seq"),
                    format!("must be the seq of a `{want}` event after the gate opened"),
                ));
            }
        }
    }
    Ok(())
}
