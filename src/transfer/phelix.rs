//! The Phelix session file: `sessions/<ses_id>.json`, one session
//! with its events inline. Export renders logbook's session in that schema;
//! import maps it back (see `docs/import-export.md` for what each field
//! becomes).

use super::json::{object_text, value_text, Obj};
use super::jsonl::actor_type;
use super::{check_rows, event_type_ok, opt_name, opt_text, status, Bad};
use crate::model::session::{PHELIX_CHECKPOINT_KEY, PHELIX_METADATA_KEY};
use crate::model::{Session, SessionStatus, Usage};
use crate::redact::redact;
use crate::store::rows::{EventRow, RefRow, SessionRows, StoredEvent};
use crate::validate::{self as v, Lines};
use serde::Serialize;
use serde_json::json;

/// The key, in a checkpoint event's `data`, where earlier logbook versions
/// kept the Phelix event's own `detail` (it replaced the detail with the
/// checkpoint note). Import no longer writes it; export still reads it, so
/// sessions imported then come back as their files were.
pub const PHELIX_DETAIL_KEY: &str = "phelix_detail";

#[derive(Serialize)]
struct PActor<'a> {
    #[serde(rename = "type")]
    actor_type: &'a str,
    id: Option<&'a str>,
    authenticated: bool,
}

#[derive(Serialize)]
struct PCheckpoint {
    step: Option<String>,
    note: Option<String>,
    at_ms: i64,
    seq: i64,
}

#[derive(Serialize)]
struct PEvent<'a> {
    seq: i64,
    #[serde(rename = "type")]
    event_type: &'a str,
    at_ms: i64,
    detail: Option<String>,
}

#[derive(Serialize)]
struct PSession<'a> {
    schema_version: &'static str,
    session_id: &'a str,
    status: &'a str,
    title: &'a str,
    app: Option<&'a str>,
    actor: PActor<'a>,
    rev: i64,
    plan_ids: &'a [String],
    operation_ids: &'a [String],
    deployment_ids: &'a [String],
    checkpoint: Option<PCheckpoint>,
    final_result: Option<&'a str>,
    events: Vec<PEvent<'a>>,
}

/// The detail a Phelix reader expects for an event: the kept Phelix detail
/// if the import stored one, else logbook's.
fn phelix_detail(e: &StoredEvent) -> Option<String> {
    if let Some(d) = &e.data {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(d.get()) {
            if let Some(s) = v.get(PHELIX_DETAIL_KEY).and_then(|x| x.as_str()) {
                return Some(s.to_owned());
            }
        }
    }
    e.detail.clone()
}

/// Renders one session as a Phelix file (compact, with a trailing `\n`).
pub(crate) fn render(s: &Session, events: &[StoredEvent]) -> serde_json::Result<String> {
    let p = PSession {
        schema_version: "1",
        session_id: s.session_id.as_str(),
        status: s.status.as_str(),
        title: &s.title,
        app: s.app.as_deref(),
        actor: PActor {
            actor_type: s.actor.actor_type.as_str(),
            id: s.actor.id.as_deref(),
            authenticated: s.actor.authenticated,
        },
        rev: s.rev,
        plan_ids: &s.plan_ids,
        operation_ids: &s.operation_ids,
        deployment_ids: &s.deployment_ids,
        // The session's checkpoint: the block a Phelix import kept while it
        // is still the latest (`Session::apply_kept_checkpoint`), else the
        // event's.
        checkpoint: s.checkpoint.as_ref().map(|c| PCheckpoint {
            step: c.step.clone(),
            note: c.note.clone(),
            at_ms: c.at_ms,
            seq: c.seq,
        }),
        final_result: s.final_result.as_deref(),
        events: events
            .iter()
            .map(|e| PEvent {
                seq: e.seq,
                event_type: &e.event_type,
                at_ms: e.at_ms,
                detail: phelix_detail(e),
            })
            .collect(),
    };
    let mut text = serde_json::to_string(&p)?;
    text.push('\n');
    Ok(text)
}

/// Reads the session id of a file as early as possible, for the report.
pub(crate) fn peek_id(o: &Obj<'_>) -> Option<String> {
    super::jsonl::peek_id(o)
}

/// Parses, validates and redacts one Phelix session file.
pub(crate) fn parse(o: &Obj<'_>) -> Result<SessionRows, Bad> {
    if o.str_req("schema_version")? != "1" {
        return Err(Bad::new("schema_version", "must be \"1\""));
    }
    let session_id = o.str_req("session_id")?;
    session_id
        .parse::<crate::model::SessionId>()
        .map_err(|e| Bad::new("session_id", e.to_string()))?;
    let st = status("status", &o.str_req("status")?)?;
    let title = o.str_req("title")?;
    v::text("title", &title, 1, v::TITLE_MAX, Lines::Single)?;
    let actor = o
        .obj("actor")?
        .ok_or_else(|| Bad::new("actor", "is missing"))?;
    let actor_type = actor_type("actor.type", &actor.str_req("type")?)?;
    let actor_id = opt_name("actor.id", actor.str_opt("id")?)?;

    let mut events = Vec::new();
    for (i, raw) in o.list("events")?.into_iter().enumerate() {
        let e = Obj::parse(raw.get(), &format!("events[{i}]"))?;
        let seq = e.i64_req("seq")?;
        if usize::try_from(seq).ok() != Some(i) {
            return Err(Bad::new(
                e.name("seq"),
                format!("must be {i}: seqs run 0, 1, 2, … in order"),
            ));
        }
        let event_type = e.str_req("type")?;
        if !event_type_ok(&event_type) {
            return Err(Bad::new(e.name("type"), "is not a logbook event type"));
        }
        v::not_secret(&e.name("type"), &event_type, "event types")?;
        events.push(EventRow {
            event_type,
            at_ms: e.i64_req("at_ms")?,
            actor_type,
            detail: opt_text(
                &e.name("detail"),
                e.str_opt("detail")?,
                v::DETAIL_MAX,
                Lines::Multi,
            )?,
            // Not in Phelix's schema, but kept when a file has it.
            data: match e.raw("data") {
                None => None,
                Some(r) => Some(object_text(&e.name("data"), r)?),
            },
            run_id: None,
        });
    }

    // The checkpoint block is the session's checkpoint: it is kept whole in
    // `metadata.phelix.checkpoint`, which every read of the session takes
    // as its checkpoint while it is the latest
    // (`Session::apply_kept_checkpoint`) and Phelix export writes back.
    // The event it points at is kept exactly as the file has it (in Phelix
    // its detail says "step …"; logbook would read the step from the
    // event's `data.step` and the note from its `detail`).
    let mut checkpoint_seq = None;
    let mut metadata = "{}".to_owned();
    if let Some(c) = o.obj("checkpoint")? {
        let seq = c.i64_req("seq")?;
        let step = c.str_opt("step")?;
        if let Some(s) = &step {
            v::text("checkpoint.step", s, 1, v::STEP_MAX, Lines::Single)?;
        }
        let note = c.str_opt("note")?;
        if let Some(n) = &note {
            v::text("checkpoint.note", n, 0, v::NOTE_MAX, Lines::Multi)?;
        }
        let at_ms = c.i64_req("at_ms")?;
        let Some(ev) = usize::try_from(seq).ok().and_then(|i| events.get(i)) else {
            return Err(Bad::new(
                "checkpoint.seq",
                "must be the seq of a `checkpoint` event",
            ));
        };
        if ev.event_type != "checkpoint" {
            return Err(Bad::new(
                "checkpoint.seq",
                "must be the seq of a `checkpoint` event",
            ));
        }
        if ev.at_ms != at_ms {
            return Err(Bad::new("checkpoint.at_ms", "must equal its event's at_ms"));
        }
        let block = json!({"step": step, "note": note, "at_ms": at_ms, "seq": seq});
        metadata = value_text(
            "checkpoint",
            json!({ PHELIX_METADATA_KEY: { PHELIX_CHECKPOINT_KEY: block } }),
        )?;
        checkpoint_seq = Some(seq);
    }

    // References were linked by checkpoints Phelix does not record one by
    // one: they are attributed to the latest checkpoint (or `created`).
    let linked_seq = checkpoint_seq.unwrap_or(0);
    let mut refs = Vec::new();
    for (kind, key) in [
        ("plan", "plan_ids"),
        ("operation", "operation_ids"),
        ("deployment", "deployment_ids"),
    ] {
        for id in o.str_list(key)? {
            v::token(key, &id, v::REF_ID_MAX)?;
            refs.push(RefRow {
                kind,
                id: redact(&id).into_owned(),
                linked_seq,
            });
        }
    }

    let first = events.first().map_or(0, |e| e.at_ms);
    let last = events.last().map_or(0, |e| e.at_ms);
    let end_reason = match (st, events.last()) {
        (SessionStatus::Failed, Some(e)) if e.event_type == "failed" => e.detail.clone(),
        (SessionStatus::Cancelled, Some(e)) if e.event_type == "cancelled" => e.detail.clone(),
        _ => None,
    };
    let rows = SessionRows {
        session_id,
        status: st,
        title: redact(&title).into_owned(),
        goal: None,
        app: opt_name("app", o.str_opt("app")?)?,
        agent_id: None,
        route: None,
        stage: None,
        parent_session_id: None,
        tags: Vec::new(),
        context: "{}".to_owned(),
        metadata,
        actor_type,
        actor_id,
        rev: o.i64_req("rev")?,
        checkpoint_seq,
        refs,
        final_result: opt_text(
            "final_result",
            o.str_opt("final_result")?,
            v::RESULT_MAX,
            Lines::Multi,
        )?,
        end_reason,
        usage: Usage::default(),
        created_at_ms: first,
        updated_at_ms: last,
        ended_at_ms: st.is_terminal().then_some(last),
        events,
        workflow: Default::default(),
    };
    check_rows(&rows)?;
    Ok(rows)
}
