//! Stages (docs/design.md, "Stages"; Amber's `stage_*` events).

use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::write::{read_back, OneEvent, Op};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Session, Verb};
use crate::redact::redact_opt;
use crate::store::SessionChange;
use crate::validate as v;
use serde::Serialize;

/// What happened to a stage: `session stage ID start|complete|fail|retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageAction {
    /// Event `stage_started`.
    Start,
    /// Event `stage_completed`.
    Complete,
    /// Event `stage_failed` (the session itself does not fail).
    Fail,
    /// Event `stage_retrying`.
    Retry,
}

impl StageAction {
    /// The event this action appends.
    pub fn event_type(self) -> EventType {
        match self {
            Self::Start => EventType::StageStarted,
            Self::Complete => EventType::StageCompleted,
            Self::Fail => EventType::StageFailed,
            Self::Retry => EventType::StageRetrying,
        }
    }
}

/// A stage request.
#[derive(Debug, Clone)]
pub struct StageRequest {
    /// Start, complete, fail or retry.
    pub action: StageAction,
    /// The stage's name (1–128 characters, one line); becomes the session's
    /// `stage`.
    pub name: String,
    /// Which attempt this is, 1..=1,000,000 (optional).
    pub attempt: Option<i64>,
    /// Why (e.g. what failed), up to 4096 characters; the event's `detail`.
    pub reason: Option<String>,
}

/// Largest `attempt`.
pub const ATTEMPT_MAX: i64 = 1_000_000;

#[derive(Serialize)]
struct StageData<'a> {
    stage: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<i64>,
}

impl Ledger {
    /// Records a stage event on an active session and sets its `stage` to
    /// the name, in one transaction (rev + 1). The event is
    /// `stage_started | stage_completed | stage_failed | stage_retrying`
    /// with `data = {"stage": NAME, "attempt": N?}` and the reason as
    /// `detail`. A failed stage does not fail the session.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (name, attempt, reason), SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION (not active), SESSION_CONFLICT,
    /// STORE_BUSY.
    pub fn stage(&self, id: &str, req: StageRequest, m: &Mutation) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        v::keyed_name("stage", &req.name, "stage names")?;
        if let Some(a) = req.attempt {
            if !(1..=ATTEMPT_MAX).contains(&a) {
                return Err(Error::invalid(
                    "attempt",
                    format!("must be from 1 to {ATTEMPT_MAX}"),
                ));
            }
        }
        if let Some(r) = &req.reason {
            v::prose("reason", r, v::REASON_MAX)?;
        }
        let reason = redact_opt(req.reason.as_deref());
        let data = serde_json::to_string(&StageData {
            stage: &req.name,
            attempt: req.attempt,
        })
        .map_err(|e| Error::internal(format!("cannot encode stage data: {e}")))?;
        let event_type = req.action.event_type();
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: event_type.as_str(),
                text: reason.as_deref(),
                step: Some(&req.name),
                data: Some(&data),
                if_rev: m.if_rev,
            },
        )?;
        let op = Op {
            id,
            verb: Verb::Stage,
            m,
            digest: dg.as_deref(),
        };
        let change = SessionChange {
            stage: Some(Some(&req.name)),
            ..SessionChange::default()
        };
        let pipeline = || {
            self.mutate(
                op,
                |_| Ok(()),
                |w, ()| {
                    w.update(change)?;
                    w.event(event_type.as_str(), reason.as_deref(), Some(&data), None)?;
                    w.session()
                },
                &mut |tx, _| read_back(tx, id),
            )
        };
        let one = OneEvent {
            change,
            event_type: event_type.as_str(),
            detail: reason.as_deref(),
            data: Some(&data),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }
}
