//! Reading a line of logbook's JSON Lines format back into a session's
//! rows: every key known, every value checked as the verbs check theirs,
//! nothing rewritten (docs/design.md, "Import formats").

use super::super::json::{object_text, Obj};
use super::super::{check_rows, event_type_ok, opt_name, opt_stage, opt_text, status, Bad};
use super::workflow::{check_workflow, parse_budget, parse_gate, parse_run, parse_snapshot};
use super::FORMAT;
use crate::model::{ActorType, Usage, COUNT_MAX};
use crate::redact::redact;
use crate::store::rows::{EventRow, RefRow, SessionRows, WorkflowRows};
use crate::validate::{self as v, Lines};
use serde_json::value::RawValue;

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
pub(super) fn unknown_key(path: &str, key: &str) -> Bad {
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
    let mut hashes = Vec::new();
    for (i, raw) in o.list("events")?.into_iter().enumerate() {
        let (e, hash) = parse_event(i, raw)?;
        events.push(e);
        hashes.push(hash);
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
    // Last: a field that is wrong in itself is named as such first.
    check_chain(&rows.session_id, &rows.events, &hashes)?;
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

/// The hash chain verified on arrival (docs/design.md, "Backends"): when the file carries
/// hashes (an `export`), each event's must be the one its content and the
/// chain before it give, so an export edited after it was written is
/// rejected. A file with no hashes at all (every `hash` empty or absent:
/// written by hand or by another tool) gets its chain on arrival.
fn check_chain(
    session_id: &str,
    events: &[EventRow],
    hashes: &[Option<String>],
) -> Result<(), Bad> {
    if hashes
        .iter()
        .all(|h| h.as_deref().is_none_or(str::is_empty))
    {
        return Ok(());
    }
    let mut prev = crate::chain::GENESIS;
    for (seq, (e, given)) in events.iter().zip(hashes).enumerate() {
        prev = e.hash(session_id, i64::try_from(seq).unwrap_or(i64::MAX), &prev);
        if given.as_deref() != Some(hex::encode(prev).as_str()) {
            return Err(Bad::new(
                format!("events[{seq}].hash"),
                "does not match the event and the chain before it: the file was changed after it was exported (or every hash must be left out)",
            ));
        }
    }
    Ok(())
}

fn parse_event(i: usize, raw: &RawValue) -> Result<(EventRow, Option<String>), Bad> {
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
    let hash = e.str_opt("hash")?;
    let row = EventRow {
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
    };
    Ok((row, hash))
}

// ---- runs, budget, snapshots, gates (schema V3/V4) ----

/// Refuses keys a part of the line does not have.
pub(super) fn known_keys(o: &Obj<'_>, path: &str, keys: &[&str]) -> Result<(), Bad> {
    match o.keys().find(|k| !keys.contains(k)) {
        Some(k) => Err(unknown_key(path, k)),
        None => Ok(()),
    }
}

/// An integer in 0..=2^53−1, as the verbs take counts and limits.
pub(super) fn in_count_range(o: &Obj<'_>, key: &str, n: i64) -> Result<i64, Bad> {
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
pub(super) fn count(o: &Obj<'_>, key: &str) -> Result<i64, Bad> {
    in_count_range(o, key, o.i64_opt(key)?.unwrap_or(0))
}

/// An optional limit.
pub(super) fn count_opt(o: &Obj<'_>, key: &str) -> Result<Option<i64>, Bad> {
    o.i64_opt(key)?
        .map(|n| in_count_range(o, key, n))
        .transpose()
}

/// Checked, redacted free text (`None` stays `None`).
pub(super) fn checked_text(
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
