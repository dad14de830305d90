//! Session verbs: create, the status transitions, checkpoint, an agent's
//! own events. Every mutation of an existing session runs the write kernel
//! (`super::write`); this module adds each verb's rules: its validation,
//! its UPDATE's change and its event. Rule: docs/design.md, "Storage", "Model" and "CLI".

use super::checkpoint::{CheckpointRequest, PreparedCheckpoint};
use super::new_session::{create_key_reused, CREATED_REPLAY};
use super::request::{
    check_json, digest, key_digest, opt_name, parse_session_id, redacted_json_text, validate_key,
    Mutation, VerbDigest,
};
use super::write::{read_back, OneEvent, Op};
use super::written::{Replayed, Written};
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Session, SessionStatus, Verb};
use crate::redact::{redact, redact_opt};
use crate::store::SessionChange;
use crate::validate::{self as v, Lines};
use serde::Serialize;
use serde_json::Value;

/// A `create` request. Rule: docs/design.md, "Model" and "CLI".
#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    /// 1–200 characters, one line.
    pub title: String,
    /// Up to 4096 characters; newline and tab allowed.
    pub goal: Option<String>,
    /// Names of up to 128 characters each.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Route.
    pub route: Option<String>,
    /// Stage.
    pub stage: Option<String>,
    /// An existing session's id.
    pub parent_session_id: Option<String>,
    /// Up to 32 names; duplicates are dropped, first occurrence kept.
    pub tags: Vec<String>,
    /// A JSON object, at most 256 KiB compact.
    pub context: Option<Value>,
    /// A JSON object, at most 256 KiB compact.
    pub metadata: Option<Value>,
    /// Start in `pending` instead of `active`.
    pub pending: bool,
    /// Idempotency key for the create.
    pub idempotency_key: Option<String>,
    /// The session's first checkpoint, recorded in the create's own
    /// transaction: event seq 1 after `created`, the session returned at
    /// rev 2 — one commit where a create and then a checkpoint are two
    /// (docs/design.md, "Model"). Not with `pending` (a pending session
    /// takes no checkpoint until it starts).
    pub checkpoint: Option<CheckpointRequest>,
}

impl CreateSession {
    /// A request with only a title.
    pub fn titled(title: impl Into<String>) -> Self {
        CreateSession {
            title: title.into(),
            ..Self::default()
        }
    }
}

/// An agent's own event (`x.` types).
#[derive(Debug, Clone, Default)]
pub struct AppendEvent {
    /// `x.` + name.
    pub event_type: String,
    /// Up to 4096 characters.
    pub detail: Option<String>,
    /// A JSON object, at most 256 KiB compact.
    pub data: Option<Value>,
}

#[derive(Serialize)]
struct CreateDigest<'a> {
    verb: &'static str,
    title: &'a str,
    goal: Option<&'a str>,
    app: Option<&'a str>,
    agent_id: Option<&'a str>,
    route: Option<&'a str>,
    stage: Option<&'a str>,
    parent: Option<&'a str>,
    tags: &'a [String],
    context: Option<&'a str>,
    metadata: Option<&'a str>,
    pending: bool,
    /// Absent for a create without a first checkpoint, so that such a
    /// create's digest is what it always was.
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<FirstCheckpoint<'a>>,
}

/// What a create's digest covers of its first checkpoint.
#[derive(Serialize)]
struct FirstCheckpoint<'a> {
    note: Option<&'a str>,
    data: &'a str,
}

impl Ledger {
    /// Creates a session (`active`, or `pending` with `req.pending`) and its
    /// `created` event (seq 0). Returns the whole session at rev 1.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (caps, characters, JSON, an idempotency key reused
    /// with other arguments); SESSION_NOT_FOUND (the parent does not exist);
    /// STORE_BUSY; STORE_IO.
    ///
    /// Rule: docs/design.md, "Model" and "CLI".
    pub fn create_session(&self, req: CreateSession) -> Result<Written<Session>> {
        v::title("title", &req.title)?;
        if let Some(g) = &req.goal {
            v::text("goal", g, 1, v::GOAL_MAX, Lines::Multi)?;
        }
        opt_name("app", &req.app)?;
        opt_name("agent_id", &req.agent_id)?;
        opt_name("route", &req.route)?;
        // The same rule as `session stage`: a stage name is stored as given.
        if let Some(st) = &req.stage {
            v::keyed_name("stage", st, "stage names")?;
        }
        if let Some(p) = &req.parent_session_id {
            parse_session_id(p).map_err(|_| {
                Error::invalid(
                    "parent_session_id",
                    "expected `ses_` followed by 16 lowercase hex digits",
                )
            })?;
        }
        if req.tags.len() > v::TAGS_MAX {
            return Err(Error::invalid(
                "tags",
                format!("has {} tags; the limit is {}", req.tags.len(), v::TAGS_MAX),
            ));
        }
        for t in &req.tags {
            v::name("tag", t)?;
        }
        check_json("context", &req.context)?;
        check_json("metadata", &req.metadata)?;
        if let Some(k) = &req.idempotency_key {
            v::token("idempotency_key", k, v::IDEMPOTENCY_KEY_MAX)?;
        }
        if req.pending && req.checkpoint.is_some() {
            return Err(Error::invalid(
                "checkpoint",
                "a pending session takes no checkpoint until it starts; create it active",
            ));
        }
        let first = req
            .checkpoint
            .as_ref()
            .map(PreparedCheckpoint::new)
            .transpose()?;

        let title = redact(&req.title).into_owned();
        let goal = redact_opt(req.goal.as_deref());
        let red = |x: &Option<String>| redact_opt(x.as_deref());
        let (app, agent_id, route, stage) = (
            red(&req.app),
            red(&req.agent_id),
            red(&req.route),
            req.stage.clone(),
        );
        let mut tags: Vec<String> = Vec::with_capacity(req.tags.len());
        for t in &req.tags {
            let t = redact(t).into_owned();
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let context = redacted_json_text(&req.context)?;
        let metadata = redacted_json_text(&req.metadata)?;
        let status = if req.pending {
            SessionStatus::Pending
        } else {
            SessionStatus::Active
        };
        let dg = match &req.idempotency_key {
            Some(_) => Some(digest(&CreateDigest {
                verb: "create",
                title: &title,
                goal: goal.as_deref(),
                app: app.as_deref(),
                agent_id: agent_id.as_deref(),
                route: route.as_deref(),
                stage: stage.as_deref(),
                parent: req.parent_session_id.as_deref(),
                tags: &tags,
                context: context.as_deref(),
                metadata: metadata.as_deref(),
                pending: req.pending,
                checkpoint: first.as_ref().map(|cp| FirstCheckpoint {
                    note: cp.note.as_deref(),
                    data: &cp.data,
                }),
            })?),
            None => None,
        };
        let now = self.now_ms();
        let new = super::new_session::NewSession {
            status,
            title: &title,
            app: app.as_deref(),
            agent_id: agent_id.as_deref(),
            route: route.as_deref(),
            stage: stage.as_deref(),
            parent_session_id: req.parent_session_id.as_deref(),
            tags: &tags,
            goal: goal.as_deref(),
            context: context.as_deref().unwrap_or("{}"),
            metadata: metadata.as_deref().unwrap_or("{}"),
            created_detail: "session created",
            idempotency: req.idempotency_key.as_deref().zip(dg.as_deref()),
        };
        // The first checkpoint as the statement writes it.
        let first_one = first.as_ref().map(PreparedCheckpoint::as_first);
        if self.store.writes_one_statement() {
            // One statement on a server (docs/postgres.md, "One round trip
            // per write"); a lost reply is resolved by the new id. A key a
            // create already used, or a parent that is not there, applies
            // nothing: the transaction below replays or diagnoses.
            let id = super::new_session::new_session_id()?;
            let row = self.new_session_row(id.as_str(), now, &new);
            if let Some(s) = self
                .store
                .create_one(
                    &row,
                    new.created_detail,
                    new.idempotency,
                    first_one.as_ref(),
                )
                .map_err(|e| self.fill_path(e))?
            {
                return Ok(Written::applied(s));
            }
        }
        self.write(|tx| {
            if let (Some(key), Some(dg)) = (&req.idempotency_key, &dg) {
                if let Some((sid, stored)) = tx.find_created_by_key(key)? {
                    if &stored != dg {
                        return Err(create_key_reused(&sid));
                    }
                    // What the first attempt left: rev 1 and its `created`
                    // event, or rev 2 and its first checkpoint's.
                    let first_left = if first.is_some() {
                        Replayed {
                            rev: Some(2),
                            seq: 1,
                        }
                    } else {
                        CREATED_REPLAY
                    };
                    return tx
                        .find_session(&sid)?
                        .map(|s| Written::replay(s, first_left))
                        .ok_or_else(|| Error::internal("an idempotent create lost its session"));
                }
            }
            if let Some(p) = &req.parent_session_id {
                // Held until COMMIT: a purge of the parent waits for this
                // create, then sees its child (docs/schema.md, "Retention").
                if !tx.lock_session_key(p)? {
                    return Err(Error::SessionNotFound { id: p.clone() });
                }
            }
            let id = self.insert_new_session(tx, now, &new)?;
            if let Some(cp) = &first {
                // The write kernel, as a checkpoint of its own would run it,
                // in this transaction (rev 2, seq 1).
                let op = Op {
                    id: id.as_str(),
                    verb: Verb::Checkpoint,
                    m: &Mutation::default(),
                    digest: None,
                };
                let read = &mut |tx: &mut dyn crate::store::Tx, _: &_| read_back(tx, id.as_str());
                return self.mutate_in(tx, op, |_| Ok(()), |w, ()| cp.apply(w), read);
            }
            tx.find_session(id.as_str())?
                .map(Written::applied)
                .ok_or_else(|| Error::internal("a created session could not be read back"))
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The shared transition: conditional UPDATE of status, then one event.
    fn transition(
        &self,
        id: &str,
        verb: Verb,
        text: Option<String>,
        text_field: &'static str,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        if let Some(t) = &text {
            let max = if verb == Verb::Complete {
                v::RESULT_MAX
            } else {
                v::REASON_MAX
            };
            v::prose(text_field, t, max)?;
        }
        let text = redact_opt(text.as_deref());
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: verb.as_str(),
                text: text.as_deref(),
                step: None,
                data: None,
                if_rev: m.if_rev,
            },
        )?;
        let (event_type, status) = match verb {
            Verb::Start => (EventType::Started, SessionStatus::Active),
            Verb::Pause => (EventType::Paused, SessionStatus::Paused),
            Verb::Resume => (EventType::Resumed, SessionStatus::Active),
            Verb::Complete => (EventType::Completed, SessionStatus::Completed),
            Verb::Fail => (EventType::Failed, SessionStatus::Failed),
            Verb::Cancel => (EventType::Cancelled, SessionStatus::Cancelled),
            _ => return Err(Error::internal("transition() called for a non-status verb")),
        };
        // The stored text: the result or reason (start/pause/resume store
        // their reason in the event only).
        let change = SessionChange {
            status: Some(status),
            final_result: if verb == Verb::Complete {
                text.as_deref()
            } else {
                None
            },
            end_reason: if matches!(verb, Verb::Fail | Verb::Cancel) {
                text.as_deref()
            } else {
                None
            },
            ..SessionChange::default()
        };
        let op = Op {
            id,
            verb,
            m,
            digest: dg.as_deref(),
        };
        let one = OneEvent {
            change,
            event_type: event_type.as_str(),
            detail: text.as_deref(),
            end_runs: status.is_terminal().then_some(status),
            no_pending_gate: verb == Verb::Resume,
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, || {
            self.transition_pipeline(op, verb, status, change, event_type, text.as_deref())
        })
    }

    /// A status verb through the write transaction.
    fn transition_pipeline(
        &self,
        op: Op<'_>,
        verb: Verb,
        status: SessionStatus,
        change: SessionChange<'_>,
        event_type: EventType,
        text: Option<&str>,
    ) -> Result<Written<Session>> {
        let id = op.id;
        self.mutate(
            op,
            |tx| {
                if verb == Verb::Resume {
                    super::guards::no_pending_gate(tx, id)?;
                }
                Ok(())
            },
            |w, ()| {
                w.update(change)?;
                if status.is_terminal() {
                    // Before the terminal event, so that event stays last.
                    super::run_end::cancel_open_runs(w, status)?;
                }
                w.event(event_type.as_str(), text, None, None)?;
                w.session()
            },
            &mut |tx, _| super::write::read_back(tx, id),
        )
    }

    /// pending → active; event `started`. `reason` is optional free text.
    ///
    /// # Errors
    /// INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION,
    /// SESSION_CONFLICT, STORE_BUSY.
    pub fn start(
        &self,
        id: &str,
        reason: Option<String>,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        self.transition(id, Verb::Start, reason, "reason", m)
    }

    /// active → paused; event `paused`.
    ///
    /// # Errors
    /// As [`Ledger::start`].
    pub fn pause(
        &self,
        id: &str,
        reason: Option<String>,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        self.transition(id, Verb::Pause, reason, "reason", m)
    }

    /// paused → active; event `resumed`.
    ///
    /// # Errors
    /// As [`Ledger::start`].
    pub fn resume(
        &self,
        id: &str,
        reason: Option<String>,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        self.transition(id, Verb::Resume, reason, "reason", m)
    }

    /// active → completed with `result` (1–4096 characters); event `completed`.
    /// Pending and running runs of the session are cancelled first, each with
    /// a `run_cancelled` event (error `SESSION_ENDED`; see [`crate::ledger::SESSION_ENDED`]);
    /// rev + 1 for the whole change.
    ///
    /// # Errors
    /// As [`Ledger::start`].
    pub fn complete(&self, id: &str, result: &str, m: &Mutation) -> Result<Written<Session>> {
        self.transition(id, Verb::Complete, Some(result.to_owned()), "result", m)
    }

    /// pending | active | paused → failed with `reason`; event `failed`.
    /// Open runs end as for [`Ledger::complete`].
    ///
    /// # Errors
    /// As [`Ledger::start`].
    pub fn fail(&self, id: &str, reason: &str, m: &Mutation) -> Result<Written<Session>> {
        self.transition(id, Verb::Fail, Some(reason.to_owned()), "reason", m)
    }

    /// pending | active | paused → cancelled with `reason`; event `cancelled`.
    /// Open runs end as for [`Ledger::complete`].
    ///
    /// # Errors
    /// As [`Ledger::start`].
    pub fn cancel(&self, id: &str, reason: &str, m: &Mutation) -> Result<Written<Session>> {
        self.transition(id, Verb::Cancel, Some(reason.to_owned()), "reason", m)
    }
    /// Appends an agent's own `x.` event to a live session (rev + 1).
    ///
    /// # Errors
    /// INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (terminal session), SESSION_CONFLICT, STORE_BUSY.
    pub fn append_event(
        &self,
        id: &str,
        req: AppendEvent,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        v::custom_event_type(&req.event_type)?;
        v::not_secret("type", &req.event_type, "event types")?;
        if let Some(d) = &req.detail {
            v::text("detail", d, 1, v::DETAIL_MAX, Lines::Multi)?;
        }
        check_json("data", &req.data)?;
        let detail = redact_opt(req.detail.as_deref());
        let data = redacted_json_text(&req.data)?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "event",
                text: detail.as_deref(),
                step: Some(&req.event_type),
                data: data.as_deref(),
                if_rev: m.if_rev,
            },
        )?;
        let op = Op {
            id,
            verb: Verb::AppendEvent,
            m,
            digest: dg.as_deref(),
        };
        let one = OneEvent {
            event_type: &req.event_type,
            detail: detail.as_deref(),
            data: data.as_deref(),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, || {
            self.mutate(
                op,
                |_| Ok(()),
                |w, ()| {
                    w.update(SessionChange::default())?;
                    w.event(&req.event_type, detail.as_deref(), data.as_deref(), None)?;
                    w.session()
                },
                &mut |tx, _| super::write::read_back(tx, id),
            )
        })
    }
}
