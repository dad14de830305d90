//! One-line human summaries of events, for the timelines (`session show`,
//! `session events`, `logbook events`).
//!
//! A summary is pure formatting of an event's `type`, `detail`, `data` and
//! `run_id`: each built-in type names what its data holds (stage and
//! attempt, gate and kind, token and call counts, run and status, lease
//! owner …), and an agent's `x.` type shows its detail. Parts are joined
//! with ` · `, so no id is ever followed by punctuation. Stored text is
//! escaped for the terminal (a newline shows as `\n`), so a summary is one
//! line; the table cuts it, on a character boundary and with `…`. JSON
//! output never passes through here: it stays whole.
//!
//! Data written by another tool (an import) may lack a field: a summary
//! leaves out what it cannot read, and never panics.

use super::render::clean;
use logbook::clock::format_ms;
use logbook::model::EventType;
use logbook::Event;
use serde_json::Value;

/// What a summary says when there is nothing to say (no detail, no data).
const NOTHING: &str = "-";

/// The one-line summary of `e` (uncut; see the module docs).
pub fn event_summary(e: &Event) -> String {
    let data: Value = e
        .data
        .as_ref()
        .and_then(|d| serde_json::from_str(d.get()).ok())
        .unwrap_or(Value::Null);
    let d = Data(&data);
    let detail = e.detail.as_deref().map(clean);
    let mut p = Parts::default();
    let Some(t) = EventType::from_name(&e.event_type) else {
        // An agent's `x.` type, or one of a built-in family an import
        // brought in: its detail.
        p.opt(detail);
        return p.finish();
    };
    match t {
        EventType::Created => {
            p.push(detail.unwrap_or_else(|| "session created".into()));
        }
        EventType::Started
        | EventType::Paused
        | EventType::Resumed
        | EventType::Completed
        | EventType::Failed
        | EventType::Cancelled => p.opt(detail),
        EventType::Checkpoint => {
            p.opt(d.text("step").map(|s| format!("step {s}")));
            for (key, kind) in [
                ("plan_ids", "plan"),
                ("operation_ids", "operation"),
                ("deployment_ids", "deployment"),
            ] {
                let ids = d.texts(key);
                if !ids.is_empty() {
                    p.push(format!("{kind} {}", ids.join(" ")));
                }
            }
            p.opt(
                d.at("snapshot")
                    .int("size_bytes")
                    .map(|n| format!("snapshot {n} bytes")),
            );
            p.opt(detail);
        }
        EventType::StageStarted
        | EventType::StageCompleted
        | EventType::StageFailed
        | EventType::StageRetrying => {
            p.opt(d.text("stage").map(|s| format!("stage {s}")));
            p.opt(d.int("attempt").map(|n| format!("attempt {n}")));
            p.opt(detail);
        }
        EventType::GateOpened | EventType::GateApproved | EventType::GateRejected => {
            p.opt(d.text("gate").map(|g| format!("gate {g}")));
            p.opt(d.text("kind"));
            p.opt(d.int("round").map(|n| format!("round {n}")));
            p.opt(d.text("outcome").map(|o| format!("session {o}")));
            p.opt(detail);
        }
        EventType::CheckpointRestored => {
            p.opt(
                d.int("checkpoint_seq")
                    .map(|n| format!("checkpoint seq {n}")),
            );
            p.opt(d.text("stage").map(|s| format!("stage {s}")));
            p.opt(d.int("size_bytes").map(|n| format!("{n} bytes")));
            p.opt(detail);
        }
        EventType::Forked => {
            p.opt(d.text("child_session_id").map(|s| format!("child {s}")));
            p.opt(d.text("parent_session_id").map(|s| format!("parent {s}")));
            p.opt(
                d.int("checkpoint_seq")
                    .map(|n| format!("checkpoint seq {n}")),
            );
            p.opt(detail);
        }
        EventType::LeaseAcquired | EventType::LeaseReleased | EventType::LeaseTakenOver => {
            p.opt(owner(&d));
            if t != EventType::LeaseReleased {
                p.opt(
                    d.int("expires_at_ms")
                        .map(|ms| format!("until {}", format_ms(ms))),
                );
            }
            if d.0.get("renewed").and_then(Value::as_bool) == Some(true) {
                p.push("renewed".into());
            }
            let prev = d.at("previous");
            if let Some(o) = owner(&prev) {
                let why = prev.text("reason").map(|r| format!(" ({r})"));
                p.push(format!("from {o}{}", why.unwrap_or_default()));
            }
            p.opt(detail);
        }
        EventType::RunCreated
        | EventType::RunStarted
        | EventType::RunCompleted
        | EventType::RunFailed
        | EventType::RunCancelled
        | EventType::RunTimeout => {
            let status = match t {
                EventType::RunCreated => "pending",
                EventType::RunStarted => "running",
                EventType::RunCompleted => "completed",
                EventType::RunFailed => "failed",
                EventType::RunCancelled => "cancelled",
                _ => "timeout",
            };
            p.push(match &e.run_id {
                Some(r) => format!("run {} → {status}", clean(r)),
                None => format!("run → {status}"),
            });
            p.opt(d.text("code"));
            p.opt(detail);
        }
        EventType::RunTurn => {
            p.opt(run(e));
            p.opt(d.int("turn_count").map(|n| format!("turn {n}")));
            p.opt(detail);
        }
        EventType::RunUsage | EventType::UsageRecorded => {
            p.opt(run(e));
            p.opt(usage(&d));
            p.opt(detail);
        }
        EventType::BudgetSet => {
            let limits: Vec<String> = [
                ("max_tokens", "tokens"),
                ("max_api_calls", "api_calls"),
                ("max_duration_ms", "duration_ms"),
            ]
            .into_iter()
            .filter_map(|(key, name)| d.int(key).map(|n| format!("{name} ≤ {n}")))
            .collect();
            if data.is_object() {
                p.push(if limits.is_empty() {
                    "no limits".into()
                } else {
                    limits.join(", ")
                });
            }
            p.opt(d.text("on_exceed").map(|o| format!("on_exceed {o}")));
            p.opt(detail);
        }
        EventType::BudgetReset => {
            let used: Vec<String> = ["tokens", "api_calls", "duration_ms"]
                .into_iter()
                .filter_map(|k| d.int(k).map(|n| format!("{k} {n}")))
                .collect();
            if !used.is_empty() {
                p.push(format!("used until now: {}", used.join(", ")));
            }
            p.opt(detail);
        }
        EventType::BudgetExceeded => {
            let (used, max) = (d.at("used"), d.at("max"));
            let over: Vec<String> = d
                .texts("limits")
                .into_iter()
                .map(|l| {
                    let n = |v: &Data<'_>| v.int(&l).map_or_else(|| "?".into(), |n| n.to_string());
                    format!("{l} {} > {}", n(&used), n(&max))
                })
                .collect();
            if over.is_empty() {
                // Not the data a verb writes: the detail says it in words.
                p.opt(detail);
            } else {
                p.push(over.join(", "));
                let policy = d.text("on_exceed");
                let status = d.text("status");
                p.opt(match (policy, status) {
                    (Some(o), Some(s)) => Some(format!("on_exceed {o} → {s}")),
                    (Some(o), None) => Some(format!("on_exceed {o}")),
                    (None, s) => s,
                });
            }
        }
    }
    p.finish()
}

/// `run RUN_ID`, when the event belongs to a run.
fn run(e: &Event) -> Option<String> {
    e.run_id.as_deref().map(|r| format!("run {}", clean(r)))
}

/// `pid N on HOST` of a lease's data (or of its `previous` owner).
fn owner(d: &Data<'_>) -> Option<String> {
    let pid = d.int("pid")?;
    Some(match d.text("hostname") {
        Some(h) => format!("pid {pid} on {h}"),
        None => format!("pid {pid}"),
    })
}

/// `added 800 in / 200 out tokens, 1 call, 300 ms`: the amounts a usage
/// event added (duration only for a session's, which has one).
fn usage(d: &Data<'_>) -> Option<String> {
    let (i, o) = (d.int("input_tokens"), d.int("output_tokens"));
    let calls = d.int("api_calls");
    if i.is_none() && o.is_none() && calls.is_none() {
        return None;
    }
    let mut s = format!(
        "added {} in / {} out tokens",
        i.unwrap_or(0),
        o.unwrap_or(0)
    );
    if let Some(c) = calls {
        s.push_str(&format!(", {c} call{}", if c == 1 { "" } else { "s" }));
    }
    if let Some(ms) = d.int("duration_ms") {
        s.push_str(&format!(", {ms} ms"));
    }
    Some(s)
}

/// Read access to an event's data that never fails: a missing or mistyped
/// field is `None`. Text comes back escaped for the terminal.
struct Data<'a>(&'a Value);

impl Data<'_> {
    fn at(&self, key: &str) -> Data<'_> {
        static NULL: Value = Value::Null;
        Data(self.0.get(key).unwrap_or(&NULL))
    }

    fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(Value::as_str).map(clean)
    }

    fn int(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(Value::as_i64)
    }

    fn texts(&self, key: &str) -> Vec<String> {
        self.0
            .get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(clean).collect())
            .unwrap_or_default()
    }
}

/// The parts of a summary, joined with ` · `.
#[derive(Default)]
struct Parts(Vec<String>);

impl Parts {
    fn push(&mut self, s: String) {
        if !s.is_empty() {
            self.0.push(s);
        }
    }

    fn opt(&mut self, s: Option<String>) {
        if let Some(s) = s {
            self.push(s);
        }
    }

    fn finish(self) -> String {
        if self.0.is_empty() {
            NOTHING.to_owned()
        } else {
            self.0.join(" · ")
        }
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
