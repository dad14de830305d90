//! The Amber session folder: `<uuid>/manifest.json`,
//! `timeline.jsonl`, `checkpoints/<checkpointId>.json`. Import only.
//!
//! Mapping (documented in `docs/import-export.md`): new id
//! `ses_` + the first 16 hex of SHA-256(`"amber:" + uuid`), so a re-import
//! finds the same session; states and event types per docs/import-export.md; every
//! other field of an event goes in its `data`; times that step back are
//! clamped to the previous event's (the original kept in `data.timestamp`).

use super::json::{
    is_duplicate_key, read_line_capped, reason_of, unique_value, value_text, Line, Obj,
    SAME_KEY_TWICE,
};
use super::source::open_regular;
use super::{
    check_rows, opt_name, opt_stage, opt_text, Bad, MAX_SESSION_INPUT_BYTES, MAX_TIMELINE_BYTES,
};
use crate::clock::parse_time;
use crate::model::{ActorType, SessionStatus, Usage};
use crate::redact::redact;
use crate::store::rows::{EventRow, SessionRows};
use crate::validate::{self as v, Lines};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::io::{BufReader, Read};
use std::path::Path;

/// The logbook id of the Amber session `uuid` (case-insensitive):
/// `ses_` + the first 16 hex digits of SHA-256(`"amber:" + lowercase uuid`).
pub fn session_id_for(uuid: &str) -> String {
    let h = Sha256::digest(format!("amber:{}", uuid.to_ascii_lowercase()).as_bytes());
    format!("ses_{}", &hex::encode(h)[..16])
}

/// Whether `s` is a UUID in its 8-4-4-4-12 hex form.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Amber's state → logbook's status, and the stage an active phase implies.
fn map_state(state: &str) -> Option<(SessionStatus, Option<&'static str>)> {
    Some(match state {
        "created" => (SessionStatus::Pending, None),
        "planning" => (SessionStatus::Active, Some("planning")),
        "executing" => (SessionStatus::Active, Some("executing")),
        "paused" => (SessionStatus::Paused, None),
        "completed" => (SessionStatus::Completed, None),
        "failed" => (SessionStatus::Failed, None),
        "aborted" => (SessionStatus::Cancelled, None),
        _ => return None,
    })
}

/// Amber event type → logbook event type; unknown well-formed names become
/// `x.amber.<type>`; `None` for a malformed name.
pub(crate) fn map_type(t: &str) -> Option<String> {
    let known = match t {
        "session_created" => "created",
        "session_started" => "started",
        "session_completed" => "completed",
        "session_failed" => "failed",
        "session_aborted" => "cancelled",
        "checkpoint_created" => "checkpoint",
        "gate_encountered" => "gate_opened",
        "stage_started"
        | "stage_completed"
        | "stage_failed"
        | "stage_retrying"
        | "gate_approved"
        | "gate_rejected"
        | "checkpoint_restored"
        | "budget_exceeded"
        | "budget_reset" => t,
        _ => {
            let well_formed = !t.is_empty()
                && t.len() <= v::EVENT_TYPE_MAX - "x.amber.".len()
                && t.as_bytes()[0].is_ascii_lowercase()
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            return well_formed.then(|| format!("x.amber.{t}"));
        }
    };
    Some(known.to_owned())
}

/// The title derived from a (redacted) goal: its first non-blank line,
/// runs of whitespace made one space, trimmed; over 200 characters, the
/// first 199 and `…`. A blank or missing goal gives `amber session <uuid>`.
pub fn derive_title(goal: Option<&str>, uuid: &str) -> String {
    let line = goal
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty());
    match line {
        None => format!("amber session {}", uuid.to_ascii_lowercase()),
        Some(l) if l.chars().count() > v::TITLE_MAX => {
            let mut t: String = l.chars().take(v::TITLE_MAX - 1).collect();
            t.push('…');
            t
        }
        Some(l) => l,
    }
}

fn read_small(path: &Path, name: &str) -> Result<String, Bad> {
    let f = open_regular(path).map_err(|reason| Bad::new(name, reason))?;
    let mut text = String::new();
    let cap = u64::try_from(MAX_SESSION_INPUT_BYTES).unwrap_or(u64::MAX);
    let n = f
        .take(cap + 1)
        .read_to_string(&mut text)
        .map_err(|_| Bad::new(name, "is unreadable or not UTF-8"))?;
    if n > MAX_SESSION_INPUT_BYTES {
        return Err(Bad::new(
            name,
            format!("is larger than the limit of {MAX_SESSION_INPUT_BYTES} bytes"),
        ));
    }
    Ok(text)
}

/// The checkpoint file's snapshot, when `id` names one safely.
fn snapshot(dir: &Path, id: &str) -> Result<Option<Value>, Bad> {
    let safe = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !safe {
        return Ok(None);
    }
    let name = format!("checkpoints/{id}.json");
    let path = dir.join("checkpoints").join(format!("{id}.json"));
    if !path.is_file() {
        return Ok(None);
    }
    let text = read_small(&path, "checkpoint")?;
    v::exact_numbers("checkpoint", &text).map_err(|e| Bad::from(e).in_file(name.clone()))?;
    let value: Value = unique_value(text.as_bytes())
        .map_err(|e| Bad::new("checkpoint", reason_of(&e)).in_file(name.clone()))?;
    if !value.is_object() {
        return Err(Bad::new("checkpoint", "must be a JSON object").in_file(name));
    }
    Ok(Some(value))
}

/// Reads one Amber session folder. Returns the logbook id (when the
/// manifest named a valid uuid) and the rows, or why it is refused.
pub(crate) fn read_session(
    dir: &Path,
    actor: ActorType,
) -> (Option<String>, Result<SessionRows, Bad>) {
    let manifest_text = match read_small(&dir.join("manifest.json"), "manifest") {
        Ok(t) => t,
        Err(b) => return (None, Err(b.in_file("manifest.json"))),
    };
    let m = match Obj::parse(&manifest_text, "") {
        Ok(m) => m,
        Err(b) => return (None, Err(b.in_file("manifest.json"))),
    };
    let uuid = match m.str_req("sessionId") {
        Ok(u) if is_uuid(&u) => u.to_ascii_lowercase(),
        Ok(_) => {
            return (
                None,
                Err(Bad::new("sessionId", "must be a UUID (8-4-4-4-12 hex)")
                    .in_file("manifest.json")),
            )
        }
        Err(b) => return (None, Err(b.in_file("manifest.json"))),
    };
    let id = session_id_for(&uuid);
    let folder_ok = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.eq_ignore_ascii_case(&uuid));
    if !folder_ok {
        let b = Bad::new("sessionId", "does not match its folder's name").in_file("manifest.json");
        return (Some(id), Err(b));
    }
    let rows = build(dir, &m, &uuid, &id, actor);
    (Some(id), rows)
}

fn build(
    dir: &Path,
    m: &Obj<'_>,
    uuid: &str,
    id: &str,
    actor: ActorType,
) -> Result<SessionRows, Bad> {
    let mf = |b: Bad| b.in_file("manifest.json");
    let state = m.str_req("state").map_err(mf)?;
    let (status, phase) =
        map_state(&state).ok_or_else(|| mf(Bad::new("state", "is not an Amber state")))?;
    let goal = opt_text(
        "goal",
        m.str_opt("goal").map_err(mf)?,
        v::GOAL_MAX,
        Lines::Multi,
    )
    .map_err(mf)?;
    let current = opt_stage("currentStage", m.str_opt("currentStage").map_err(mf)?).map_err(mf)?;
    let stage = match phase {
        Some("planning") => Some("planning".to_owned()),
        Some(p) => current.or_else(|| Some(p.to_owned())),
        None => current,
    };
    let route = opt_name("route", m.str_opt("route").map_err(mf)?).map_err(mf)?;
    let mut usage = Usage::default();
    if let Some(u) = m.obj("usage").map_err(mf)? {
        for (key, slot) in [
            ("apiCalls", &mut usage.api_calls),
            ("durationMs", &mut usage.duration_ms),
        ] {
            let n = u.i64_opt(key).map_err(mf)?.unwrap_or(0);
            if n < 0 {
                return Err(mf(Bad::new(u.name(key), "must be 0 or more")));
            }
            *slot = n;
        }
    }
    // Everything of the manifest not mapped to a column is kept, whole.
    let mut amber: Map<String, Value> = Map::new();
    amber.insert("session_id".into(), Value::String(uuid.to_owned()));
    for key in m
        .keys()
        .filter(|k| !matches!(*k, "sessionId" | "goal" | "route"))
    {
        if let Some(raw) = m.raw(key) {
            v::exact_numbers(&m.name(key), raw.get()).map_err(|e| mf(e.into()))?;
            let value: Value = unique_value(raw.get().as_bytes()).map_err(|e| {
                let why = if is_duplicate_key(&e) {
                    SAME_KEY_TWICE
                } else {
                    "holds a number out of range"
                };
                mf(Bad::new(m.name(key), why))
            })?;
            amber.insert(key.to_owned(), value);
        }
    }
    let mut meta = Map::new();
    meta.insert("amber".into(), Value::Object(amber));
    let metadata = value_text("metadata", Value::Object(meta)).map_err(mf)?;

    let events = read_timeline(dir, actor)?;
    let n = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let checkpoint_seq = events
        .iter()
        .rposition(|e| e.event_type == "checkpoint")
        .and_then(|i| i64::try_from(i).ok());
    let last = events.last();
    let last_at = last.map_or(0, |e| e.at_ms);
    let end_reason = match (status, last) {
        (SessionStatus::Failed, Some(e)) if e.event_type == "failed" => e.detail.clone(),
        (SessionStatus::Cancelled, Some(e)) if e.event_type == "cancelled" => e.detail.clone(),
        _ => None,
    };
    let final_result = match (status, last) {
        (SessionStatus::Completed, Some(e)) if e.event_type == "completed" => e.detail.clone(),
        _ => None,
    };
    let title = derive_title(goal.as_deref(), uuid);
    let rows = SessionRows {
        session_id: id.to_owned(),
        status,
        title,
        goal,
        app: None,
        agent_id: None,
        route,
        stage,
        parent_session_id: None,
        tags: Vec::new(),
        context: "{}".to_owned(),
        metadata,
        actor_type: actor,
        actor_id: None,
        rev: n,
        checkpoint_seq,
        refs: Vec::new(),
        final_result,
        end_reason,
        usage,
        created_at_ms: events.first().map_or(0, |e| e.at_ms),
        updated_at_ms: last_at,
        ended_at_ms: status.is_terminal().then_some(last_at),
        events,
        workflow: Default::default(),
    };
    check_rows(&rows).map_err(|b| b.in_file("timeline.jsonl"))?;
    Ok(rows)
}

/// The free text an Amber terminal event carries, if any.
fn text_of(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str).map(str::to_owned))
}

fn read_timeline(dir: &Path, actor: ActorType) -> Result<Vec<EventRow>, Bad> {
    let tl = |b: Bad| b.in_file("timeline.jsonl");
    let path = dir.join("timeline.jsonl");
    let f = open_regular(&path).map_err(|reason| tl(Bad::new("timeline", reason)))?;
    if f.metadata().map(|m| m.len()).unwrap_or(0) > MAX_TIMELINE_BYTES {
        return Err(tl(Bad::new(
            "timeline",
            format!("is larger than the limit of {MAX_TIMELINE_BYTES} bytes"),
        )));
    }
    let mut r = BufReader::new(f);
    let mut buf = Vec::new();
    let mut events: Vec<EventRow> = Vec::new();
    let mut line_no = 0u64;
    loop {
        let got = read_line_capped(&mut r, &mut buf, MAX_SESSION_INPUT_BYTES)
            .map_err(|_| tl(Bad::new("timeline", "could not be read")))?;
        line_no += 1;
        let at = |b: Bad| tl(b.at_line(line_no));
        match got {
            Line::Eof => break,
            Line::TooLong(_) => {
                return Err(at(Bad::new(
                    "line",
                    format!("is longer than the limit of {MAX_SESSION_INPUT_BYTES} bytes"),
                )))
            }
            Line::Text(_) => {}
        }
        let text = std::str::from_utf8(&buf).map_err(|_| at(Bad::new("line", "is not UTF-8")))?;
        if text.trim().is_empty() {
            continue;
        }
        v::exact_numbers("line", text).map_err(|e| at(e.into()))?;
        let mut obj: Map<String, Value> = match unique_value(text.as_bytes()) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(at(Bad::new("line", "must be a JSON object"))),
            Err(e) => return Err(at(Bad::new("line", reason_of(&e)))),
        };
        let amber_type = match obj.remove("type") {
            Some(Value::String(t)) => t,
            Some(_) => return Err(at(Bad::new("type", "must be a string"))),
            None => return Err(at(Bad::new("type", "is missing"))),
        };
        let event_type = map_type(&amber_type).ok_or_else(|| {
            at(Bad::new(
                "type",
                "is not a well-formed event type (lowercase letters, digits and `_`, at most 56)",
            ))
        })?;
        v::not_secret("type", &event_type, "event types").map_err(|e| at(e.into()))?;
        if events.is_empty() && event_type != "created" {
            return Err(at(Bad::new(
                "type",
                "the first event must be session_created",
            )));
        }
        let stamp = match obj.remove("timestamp") {
            Some(Value::String(t)) => t,
            Some(_) => return Err(at(Bad::new("timestamp", "must be a string"))),
            None => return Err(at(Bad::new("timestamp", "is missing"))),
        };
        let mut at_ms = parse_time("timestamp", &stamp).map_err(|e| at(e.into()))?;
        if let Some(prev) = events.last() {
            if at_ms < prev.at_ms {
                // Clamped like logbook's own clock (docs/design.md, "Model"); the original
                // time stays in the event's data.
                at_ms = prev.at_ms;
                obj.insert("timestamp".into(), Value::String(stamp));
            }
        }
        let detail = match event_type.as_str() {
            "failed" | "cancelled" => text_of(&obj, &["reason", "error", "message"]),
            "completed" => text_of(&obj, &["result"]),
            _ => None,
        };
        let detail = opt_text("detail", detail, v::DETAIL_MAX, Lines::Multi).map_err(at)?;
        // logbook reads a checkpoint's step from `data.step`, and keeps the
        // checkpoint file in `data.snapshot`; both are added only where the
        // line has no field of that name (a line's own fields are never
        // replaced).
        if event_type == "checkpoint" {
            if let Some(Value::String(label)) = obj.get("label") {
                if !obj.contains_key("step")
                    && v::text("step", label, 1, v::STEP_MAX, Lines::Single).is_ok()
                {
                    let step = redact(label).into_owned();
                    obj.insert("step".into(), Value::String(step));
                }
            }
            if let Some(Value::String(cid)) = obj.get("checkpointId") {
                if !obj.contains_key("snapshot") {
                    if let Some(snap) = snapshot(dir, cid).map_err(at)? {
                        obj.insert("snapshot".into(), snap);
                    }
                }
            }
        }
        let data = if obj.is_empty() {
            None
        } else {
            Some(value_text("data", Value::Object(obj)).map_err(at)?)
        };
        events.push(EventRow {
            event_type,
            at_ms,
            actor_type: actor,
            detail,
            data,
            run_id: None,
        });
    }
    if events.is_empty() {
        return Err(tl(Bad::new("timeline", "holds no events")));
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_case_blind() {
        let a = session_id_for("550e8400-e29b-41d4-a716-446655440000");
        let b = session_id_for("550E8400-E29B-41D4-A716-446655440000");
        assert_eq!(a, b);
        assert!(a.parse::<crate::model::SessionId>().is_ok());
    }

    #[test]
    fn titles() {
        assert_eq!(
            derive_title(Some("\n  fix   login\tbug \nmore"), "u"),
            "fix login bug"
        );
        assert_eq!(derive_title(None, "U-1"), "amber session u-1");
        let long = "a".repeat(300);
        let t = derive_title(Some(&long), "u");
        assert_eq!(t.chars().count(), 200);
        assert!(t.ends_with('…'));
    }

    #[test]
    fn types() {
        assert_eq!(map_type("session_aborted").unwrap(), "cancelled");
        assert_eq!(map_type("gate_encountered").unwrap(), "gate_opened");
        assert_eq!(map_type("lint_ran").unwrap(), "x.amber.lint_ran");
        assert!(map_type("Bad Type").is_none());
        assert!(map_type("").is_none());
    }
}
