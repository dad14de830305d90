//! logbook's JSON Lines format: one whole session per line, every column a
//! rebuild needs, events with their hash (hex). Keys in the fixed order of
//! the structs below; compact. Export → import → export is byte-identical.

use super::json::{object_text, Obj};
use super::{check_rows, event_type_ok, opt_name, opt_text, status, Bad};
use crate::model::{ActorType, Session, Usage};
use crate::redact::redact;
use crate::store::transfer::{EventRow, RefRow, SessionRows, StoredEvent, StoredRef};
use crate::validate::{self as v, Lines};
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
}

/// Renders one session as its line (without the trailing `\n`).
pub(crate) fn render(
    s: &Session,
    checkpoint_seq: Option<i64>,
    refs: &[StoredRef],
    events: &[StoredEvent],
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
];

/// Names an unknown key only when it is a plain identifier (a key could
/// hold anything, a secret included).
fn unknown_key(path: &str, key: &str) -> Bad {
    let plain = key.len() <= 40
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let field = if plain {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    } else {
        path.to_owned()
    };
    Bad::new(
        field,
        "is not a field of this format (from a newer logbook?)",
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
    let actor_type = actor_type("actor.type", &actor.str_req("type")?)?;
    let actor_id = opt_name("actor.id", actor.str_opt("id")?)?;
    let usage = match o.obj("usage")? {
        None => Usage::default(),
        Some(u) => Usage {
            input_tokens: non_negative(&u, "input_tokens")?,
            output_tokens: non_negative(&u, "output_tokens")?,
            api_calls: non_negative(&u, "api_calls")?,
            duration_ms: non_negative(&u, "duration_ms")?,
        },
    };
    let mut refs = Vec::new();
    for (i, raw) in o.list("refs")?.into_iter().enumerate() {
        let r = Obj::parse(raw.get(), &format!("refs[{i}]"))?;
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
    let rows = SessionRows {
        session_id,
        status: status("status", &o.str_req("status")?)?,
        title: redact(&title).into_owned(),
        goal: opt_text("goal", o.str_opt("goal")?, v::GOAL_MAX, Lines::Multi)?,
        app: opt_name("app", o.str_opt("app")?)?,
        agent_id: opt_name("agent_id", o.str_opt("agent_id")?)?,
        route: opt_name("route", o.str_opt("route")?)?,
        stage: opt_name("stage", o.str_opt("stage")?)?,
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
    };
    check_rows(&rows)?;
    Ok(rows)
}

fn non_negative(o: &Obj<'_>, key: &str) -> Result<i64, Bad> {
    let n = o.i64_opt(key)?.unwrap_or(0);
    if n < 0 {
        return Err(Bad::new(o.name(key), "must be 0 or more"));
    }
    Ok(n)
}

pub(crate) fn actor_type(field: &str, s: &str) -> Result<ActorType, Bad> {
    s.parse::<ActorType>().map_err(|e| Bad::new(field, e))
}

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
