//! Session verbs: create, transitions, checkpoint, custom events, show, list.
//!
//! Every mutation: validate (caps, characters), redact, then one IMMEDIATE
//! transaction: idempotency look-up, the conditional UPDATE (which on zero
//! rows reads the row to report exactly one of SESSION_NOT_FOUND,
//! SESSION_INVALID_TRANSITION or SESSION_CONFLICT), the event insert, and the
//! read-back of the whole session. Spec: §1, §2, §5.

use super::db;
use super::written::{Replayed, Written};
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{ActorType, Event, EventType, Session, SessionId, SessionStatus, Verb};
use crate::redact::{redact, redact_json, redact_opt};
use crate::resolve::{config_path, Resolvers};
use crate::store::events::{self as ev, KeyHit, NewEvent};
use crate::store::list::{self, ListQuery, Order};
use crate::store::sessions as ss;
use crate::validate::{self as v, Lines};
use rusqlite::{params, Connection};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Options shared by every mutation of an existing session.
#[derive(Debug, Clone, Default)]
pub struct Mutation {
    /// Apply only if the session is still at this rev (SESSION_CONFLICT
    /// otherwise).
    pub if_rev: Option<i64>,
    /// A retry with the same key on the same session applies nothing again;
    /// 1–128 characters.
    pub idempotency_key: Option<String>,
    /// The session's lease token (`lease_` + 64 hex, from
    /// [`Ledger::lock`]): apply only while that lease is held. Without it,
    /// a mutation of a session whose lease a live owner holds is refused
    /// with LEASE_HELD (issue 4 §6; see `ledger::leases`).
    pub lease: Option<String>,
}

/// A `create` request. Spec: §2 (Session), §5 (`session create`).
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

/// A `checkpoint` request: at least one of step, note or a reference.
#[derive(Debug, Clone, Default)]
pub struct CheckpointRequest {
    /// 1–200 characters, one line.
    pub step: Option<String>,
    /// Up to 4096 characters.
    pub note: Option<String>,
    /// Plan ids to link (each 1–128 characters, no whitespace).
    pub plan_ids: Vec<String>,
    /// Operation ids to link.
    pub operation_ids: Vec<String>,
    /// Deployment ids to link.
    pub deployment_ids: Vec<String>,
    /// A snapshot to store with the checkpoint: a JSON object, at most
    /// 256 KiB compact (issue 4 §3; `restore` and `fork` read it back).
    pub state: Option<Value>,
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

pub use crate::resolve::ResolvedState;

/// One entry of `show`'s `resolved` block.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    /// `session`, `plan`, `operation` or `deployment`.
    pub kind: &'static str,
    /// The referenced id.
    pub id: String,
    /// How it resolved.
    pub state: ResolvedState,
}

/// `show`: the session, its events in seq order, and its resolved references.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// The session.
    pub session: Session,
    /// All its events, by seq.
    pub events: Vec<Event>,
    /// Each referenced id and its state.
    pub resolved: Vec<Resolved>,
    /// Direct children by status (issue 4 §2).
    pub children: super::tree::ChildCounts,
    /// The pending gate a live session waits on, or null (issue 4 §4).
    pub blocking_gate: Option<crate::model::Gate>,
    /// The session's lease without its token, or null (issue 4 §6).
    pub lease: Option<super::leases::LeaseInfo>,
}

/// A `list` page.
#[derive(Debug, Clone, Serialize)]
pub struct SessionPage {
    /// The sessions, in the requested order.
    pub sessions: Vec<Session>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of one session's events.
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    /// Events by seq.
    pub events: Vec<Event>,
    /// Pass as `after_seq` for the next page; null on the last page.
    pub next_after_seq: Option<i64>,
}

/// A `list` request. Spec: §5 (`session list`).
#[derive(Debug, Clone, Default)]
pub struct ListSessions {
    /// Any of these statuses.
    pub statuses: Vec<SessionStatus>,
    /// App name.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Parent session id.
    pub parent: Option<String>,
    /// Inclusive lower bound on the order's timestamp (created_at_ms, or
    /// updated_at_ms with `order_updated`), ms.
    pub since_ms: Option<i64>,
    /// Exclusive upper bound on the same timestamp, ms.
    pub until_ms: Option<i64>,
    /// Sort by `updated_at_ms` instead of creation. A session updated during
    /// a cursor walk moves to the top and may be missed by that walk.
    pub order_updated: bool,
    /// 1..=1000; default 20.
    pub limit: Option<i64>,
    /// An opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Default page size of `list`.
pub const LIST_LIMIT_DEFAULT: i64 = 20;
/// Largest page size of `list` and `events`.
pub const LIST_LIMIT_MAX: i64 = 1000;

pub(crate) fn parse_session_id(id: &str) -> Result<SessionId> {
    id.parse::<SessionId>()
        .map_err(|e| Error::invalid("session_id", e.to_string()))
}

fn opt_name(field: &str, value: &Option<String>) -> Result<()> {
    value.as_deref().map_or(Ok(()), |x| v::name(field, x))
}

fn check_json(field: &str, value: &Option<Value>) -> Result<()> {
    value.as_ref().map_or(Ok(()), |v| v::json_value(field, v))
}

pub(super) fn redacted_json_text(value: &Option<Value>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(val) => {
            let mut val = val.clone();
            redact_json(&mut val);
            serde_json::to_string(&val)
                .map(Some)
                .map_err(|e| Error::internal(e.to_string()))
        }
    }
}

/// SHA-256 (hex) of the redacted, canonical request, for idempotency keys.
fn digest(parts: &impl Serialize) -> Result<String> {
    let bytes = serde_json::to_vec(parts).map_err(|e| Error::internal(e.to_string()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

pub(super) fn validate_key(m: &Mutation) -> Result<()> {
    if let Some(k) = &m.idempotency_key {
        v::token("idempotency_key", k, v::IDEMPOTENCY_KEY_MAX)?;
    }
    if let Some(r) = m.if_rev {
        if r < 1 {
            return Err(Error::invalid("if_rev", "must be a revision of 1 or more"));
        }
    }
    if let Some(t) = &m.lease {
        super::leases::validate_token("lease", t)?;
    }
    Ok(())
}

fn key_reused() -> Error {
    Error::invalid(
        "idempotency_key",
        "was already used on this session with different arguments",
    )
}

/// Checks the idempotency key inside the transaction: `Some(hit)` when
/// this is a retry of an applied request (apply nothing again); the hit
/// says what the first attempt produced.
///
/// # Errors
/// INVALID_ARGUMENT when the key was used on this session with other
/// arguments.
pub(super) fn replay_hit(
    conn: &Connection,
    id: &str,
    key: Option<&str>,
    dg: Option<&str>,
) -> Result<Option<KeyHit>> {
    let (Some(key), Some(dg)) = (key, dg) else {
        return Ok(None);
    };
    match ev::find_by_key(conn, key, id).map_err(db)? {
        None => Ok(None),
        Some(hit) if hit.digest == dg => Ok(Some(hit)),
        Some(_) => Err(key_reused()),
    }
}

/// As [`replay_hit`], reduced to what the reply reports.
pub(super) fn replay(
    conn: &Connection,
    id: &str,
    key: Option<&str>,
    dg: Option<&str>,
) -> Result<Option<Replayed>> {
    Ok(replay_hit(conn, id, key, dg)?.map(|h| replayed(&h)))
}

/// What a replay reports of its first attempt.
pub(super) fn replayed(hit: &KeyHit) -> Replayed {
    Replayed {
        rev: hit.rev,
        seq: hit.seq,
    }
}

/// The replay of a create (or fork): the new session's rev 1 and its
/// `created` event, seq 0.
pub(super) const CREATED_REPLAY: Replayed = Replayed {
    rev: Some(1),
    seq: 0,
};

/// Reports why a conditional UPDATE changed no row.
pub(super) fn diagnose(
    conn: &Connection,
    id: &str,
    verb: Verb,
    if_rev: Option<i64>,
) -> Result<Error> {
    let Some((status, rev)) = ss::select_status_rev(conn, id).map_err(db)? else {
        return Ok(Error::SessionNotFound { id: id.to_owned() });
    };
    let allowed = status
        .parse::<SessionStatus>()
        .map(|s| verb.allowed_from().contains(&s))
        .unwrap_or(false);
    if !allowed {
        return Ok(Error::InvalidTransition {
            id: id.to_owned(),
            from: status,
            verb: verb.as_str().to_owned(),
        });
    }
    match if_rev {
        Some(expected) if expected != rev => Ok(Error::Conflict {
            id: id.to_owned(),
            expected_rev: expected,
            actual_rev: rev,
            latest_event: ev::latest_event(conn, id).map_err(db)?,
        }),
        _ => Ok(Error::internal(
            "a conditional update matched no row although the session allows it",
        )),
    }
}

pub(super) fn new_session_id() -> Result<SessionId> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(SessionId::from_bytes(bytes))
}

/// A new session's columns, validated and redacted (create and fork).
pub(super) struct NewSessionRow<'a> {
    pub status: SessionStatus,
    pub title: &'a str,
    pub app: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    pub route: Option<&'a str>,
    pub stage: Option<&'a str>,
    pub parent_session_id: Option<&'a str>,
    /// De-duplicated, in order.
    pub tags: &'a [String],
    pub goal: Option<&'a str>,
    /// Compact JSON object text.
    pub context: &'a str,
    /// Compact JSON object text.
    pub metadata: &'a str,
    pub actor: ActorType,
    /// The `detail` of its `created` event.
    pub created_detail: &'a str,
    /// (key hash, request digest) stored with the `created` event.
    pub idempotency: Option<(&'a str, &'a str)>,
}

/// Inserts a new session at rev 1: its row under a fresh id (retried on the
/// vanishingly rare collision of 64 random bits), its `session_data` and
/// tag rows, and its `created` event (seq 0). The creation time is `now`,
/// but never below the newest session's `created_at_ms`, however far the
/// clock stepped back (issue 13 §15: created order is insertion order, as
/// event times never go below their session's previous event). Returns the
/// new id.
pub(super) fn insert_session(
    tx: &Connection,
    now: i64,
    s: &NewSessionRow<'_>,
) -> Result<SessionId> {
    let newest: Option<i64> = tx
        .prepare_cached(ss::SELECT_MAX_CREATED)
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(db)?;
    let created_at_ms = match newest {
        Some(n) if n > now => n,
        _ => now,
    };
    let tags_json = serde_json::to_string(s.tags).map_err(|e| Error::internal(e.to_string()))?;
    let mut attempt = 0;
    let (id, insert_seq) = loop {
        let id = new_session_id()?;
        let res = tx.prepare_cached(ss::INSERT_SESSION).and_then(|mut st| {
            st.execute(params![
                id.as_str(),
                s.status.as_str(),
                s.title,
                s.app,
                s.agent_id,
                s.route,
                s.stage,
                s.parent_session_id,
                tags_json,
                s.actor.as_str(),
                Option::<&str>::None,
                0_i64,
                created_at_ms,
            ])
        });
        match res {
            Ok(_) => break (id, tx.last_insert_rowid()),
            Err(e)
                if attempt < 3
                    && e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) =>
            {
                attempt += 1;
            }
            Err(e) => return Err(db(e)),
        }
    };
    tx.prepare_cached(ss::INSERT_SESSION_DATA)
        .and_then(|mut st| {
            st.execute(params![
                insert_seq,
                id.as_str(),
                s.goal,
                s.context,
                s.metadata
            ])
        })
        .map_err(db)?;
    for t in s.tags {
        tx.prepare_cached(ss::INSERT_TAG)
            .and_then(|mut st| st.execute(params![t, created_at_ms, insert_seq, id.as_str()]))
            .map_err(db)?;
    }
    ev::insert_event(
        tx,
        &NewEvent {
            session_id: id.as_str(),
            event_type: EventType::Created.as_str(),
            actor_type: s.actor,
            detail: Some(s.created_detail),
            data: None,
            idempotency: s.idempotency,
            run_id: None,
        },
    )
    .map_err(db)?;
    Ok(id)
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
}

#[derive(Serialize)]
pub(super) struct VerbDigest<'a> {
    pub(super) verb: &'static str,
    pub(super) text: Option<&'a str>,
    pub(super) step: Option<&'a str>,
    pub(super) data: Option<&'a str>,
    pub(super) if_rev: Option<i64>,
}

/// The request digest, computed only when an idempotency key was given.
pub(super) fn key_digest(m: &Mutation, parts: &VerbDigest<'_>) -> Result<Option<String>> {
    match m.idempotency_key {
        Some(_) => digest(parts).map(Some),
        None => Ok(None),
    }
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
    /// Spec: §2, §5 `session create`.
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
            })?),
            None => None,
        };
        let now = self.now_ms();
        let actor = self.opts.actor;

        self.write(|tx| {
            if let (Some(key), Some(dg)) = (&req.idempotency_key, &dg) {
                if let Some((sid, stored)) = ev::find_created_by_key(tx, key).map_err(db)? {
                    if &stored != dg {
                        return Err(key_reused());
                    }
                    return ss::find_session(tx, &sid)
                        .map_err(db)?
                        .map(|s| Written::replay(s, CREATED_REPLAY))
                        .ok_or_else(|| Error::internal("an idempotent create lost its session"));
                }
            }
            if let Some(p) = &req.parent_session_id {
                if !ss::session_exists(tx, p).map_err(db)? {
                    return Err(Error::SessionNotFound { id: p.clone() });
                }
            }
            let id = insert_session(
                tx,
                now,
                &NewSessionRow {
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
                    actor,
                    created_detail: "session created",
                    idempotency: req.idempotency_key.as_deref().zip(dg.as_deref()),
                },
            )?;
            ss::find_session(tx, id.as_str())
                .map_err(db)?
                .map(Written::applied)
                .ok_or_else(|| Error::internal("a created session could not be read back"))
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Runs a session mutation in one write transaction. A retry of an
    /// applied request (same idempotency key, same request digest `dg`)
    /// returns the session as it stands, says what the first attempt
    /// produced, and applies nothing again (SPEC §5); otherwise `f` runs.
    /// Errors carry this handle's path and busy timeout.
    pub(super) fn mutate(
        &self,
        id: &str,
        m: &Mutation,
        dg: Option<&str>,
        f: impl FnOnce(&Connection) -> Result<Session>,
    ) -> Result<Written<Session>> {
        self.write(
            |tx| match replay(tx, id, m.idempotency_key.as_deref(), dg)? {
                Some(r) => Ok(Written::replay(read_back(tx, id)?, r)),
                None => f(tx).map(Written::applied),
            },
        )
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
            v::text(
                text_field,
                t,
                1,
                if verb == Verb::Complete {
                    v::RESULT_MAX
                } else {
                    v::REASON_MAX
                },
                Lines::Multi,
            )?;
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
        let (event_type, sql) = match verb {
            Verb::Start => (EventType::Started, ss::UPDATE_START),
            Verb::Pause => (EventType::Paused, ss::UPDATE_PAUSE),
            Verb::Resume => (EventType::Resumed, ss::UPDATE_RESUME),
            Verb::Complete => (EventType::Completed, ss::UPDATE_COMPLETE),
            Verb::Fail => (EventType::Failed, ss::UPDATE_FAIL),
            Verb::Cancel => (EventType::Cancelled, ss::UPDATE_CANCEL),
            _ => return Err(Error::internal("transition() called for a non-status verb")),
        };
        // The stored text: the result or reason (start/pause/resume store
        // their reason in the event only).
        let stored = match verb {
            Verb::Complete | Verb::Fail | Verb::Cancel => text.clone(),
            _ => None,
        };
        let now = self.now_ms();
        self.mutate(id, m, dg.as_deref(), |tx| {
            if verb == Verb::Resume {
                super::gates::refuse_if_pending(tx, id)?;
            }
            if !conditional_update(tx, sql, id, now, stored.as_deref(), m.if_rev)? {
                return Err(diagnose(tx, id, verb, m.if_rev)?);
            }
            let ended = match verb {
                Verb::Complete => Some("completed"),
                Verb::Fail => Some("failed"),
                Verb::Cancel => Some("cancelled"),
                _ => None,
            };
            if let Some(ended) = ended {
                // Before the terminal event, so that event stays last.
                super::run_end::cancel_open_runs(tx, self.opts.actor, id, ended, now)?;
            }
            self.append(
                tx,
                id,
                event_type.as_str(),
                text.as_deref(),
                None,
                m,
                dg.as_deref(),
            )?;
            read_back(tx, id)
        })
    }

    /// Appends the mutation's event; returns its seq.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn append(
        &self,
        tx: &Connection,
        id: &str,
        event_type: &str,
        detail: Option<&str>,
        data: Option<&str>,
        m: &Mutation,
        dg: Option<&str>,
    ) -> Result<i64> {
        super::leases::check_lease(tx, id, m.lease.as_deref(), self.now_ms())?;
        let (_, seq) = ev::insert_event(
            tx,
            &NewEvent {
                session_id: id,
                event_type,
                actor_type: self.opts.actor,
                detail,
                data,
                idempotency: m.idempotency_key.as_deref().zip(dg),
                run_id: None,
            },
        )
        .map_err(db)?;
        Ok(seq)
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

    /// Records a checkpoint on an active session: the latest step and note,
    /// and links references (de-duplicated, at most 256 per kind). Event
    /// `checkpoint` with `detail` = note and `data` = `{step, plan_ids, …}`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (nothing to record, caps), SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION, SESSION_CONFLICT, STORE_BUSY.
    pub fn checkpoint(
        &self,
        id: &str,
        req: CheckpointRequest,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        let has_refs = !(req.plan_ids.is_empty()
            && req.operation_ids.is_empty()
            && req.deployment_ids.is_empty());
        if req.step.is_none() && req.note.is_none() && !has_refs && req.state.is_none() {
            return Err(Error::invalid(
                "checkpoint",
                "give at least one of --step, --note, --plan, --operation, --deployment or --state",
            ));
        }
        if let Some(s) = &req.step {
            v::text("step", s, 1, v::STEP_MAX, Lines::Single)?;
            if s.trim().is_empty() {
                return Err(Error::invalid("step", "must not be only whitespace"));
            }
        }
        if let Some(n) = &req.note {
            v::text("note", n, 1, v::NOTE_MAX, Lines::Multi)?;
        }
        let kinds: [(&'static str, &'static str, &Vec<String>); 3] = [
            ("plan", "plan_ids", &req.plan_ids),
            ("operation", "operation_ids", &req.operation_ids),
            ("deployment", "deployment_ids", &req.deployment_ids),
        ];
        let mut refs: Vec<(&'static str, Vec<String>)> = Vec::new();
        for (kind, field, ids) in kinds {
            if ids.len() > v::REFS_MAX {
                return Err(Error::invalid(
                    field,
                    format!("has {} ids; the limit is {}", ids.len(), v::REFS_MAX),
                ));
            }
            let mut uniq: Vec<String> = Vec::new();
            for r in ids {
                v::token(field, r, v::REF_ID_MAX)?;
                let r = redact(r).into_owned();
                if !uniq.contains(&r) {
                    uniq.push(r);
                }
            }
            refs.push((kind, uniq));
        }
        let step = redact_opt(req.step.as_deref());
        let note = redact_opt(req.note.as_deref());
        let state = super::snapshots::prepare_state(&req.state)?;
        let data = checkpoint_data(step.as_deref(), &refs, state.as_ref())?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "checkpoint",
                text: note.as_deref(),
                step: step.as_deref(),
                data: Some(&data),
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.mutate(id, m, dg.as_deref(), |tx| {
            if !conditional_update(tx, ss::UPDATE_CHECKPOINT, id, now, None, m.if_rev)? {
                return Err(diagnose(tx, id, Verb::Checkpoint, m.if_rev)?);
            }
            let seq = self.append(
                tx,
                id,
                EventType::Checkpoint.as_str(),
                note.as_deref(),
                Some(&data),
                m,
                dg.as_deref(),
            )?;
            if has_refs {
                link_refs(tx, id, seq, &refs)?;
            }
            if let Some(st) = &state {
                crate::store::workflow::insert_snapshot(tx, id, seq, step.as_deref(), &st.text)
                    .map_err(db)?;
            }
            read_back(tx, id)
        })
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
        let now = self.now_ms();
        self.mutate(id, m, dg.as_deref(), |tx| {
            if !conditional_update(tx, ss::UPDATE_TOUCH, id, now, None, m.if_rev)? {
                return Err(diagnose(tx, id, Verb::AppendEvent, m.if_rev)?);
            }
            self.append(
                tx,
                id,
                &req.event_type,
                detail.as_deref(),
                data.as_deref(),
                m,
                dg.as_deref(),
            )?;
            read_back(tx, id)
        })
    }

    /// The whole session, or SESSION_NOT_FOUND.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn get_session(&self, id: &str) -> Result<Session> {
        parse_session_id(id)?;
        self.read(|tx| {
            ss::find_session(tx, id)
                .map_err(db)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// `show`: the session, all its events by seq, and `resolved`, read in
    /// one snapshot.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn show_session(&self, id: &str) -> Result<SessionView> {
        parse_session_id(id)?;
        self.read(|tx| {
            let session = ss::find_session(tx, id)
                .map_err(db)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
            let events = ev::select_events(tx, id, -1, i64::MAX).map_err(db)?;
            let mut resolved = Vec::new();
            if let Some(p) = &session.parent_session_id {
                let present = ss::session_exists(tx, p).map_err(db)?;
                resolved.push(Resolved {
                    kind: "session",
                    id: p.clone(),
                    state: if present {
                        ResolvedState::Present
                    } else {
                        ResolvedState::Missing
                    },
                });
            }
            for (kind, ids) in [
                ("plan", &session.plan_ids),
                ("operation", &session.operation_ids),
                ("deployment", &session.deployment_ids),
            ] {
                for r in ids {
                    resolved.push(Resolved {
                        kind,
                        id: r.clone(),
                        state: ResolvedState::Unknown,
                    });
                }
            }
            let wf = super::tree::workflow_view(tx, &session, self.now_ms())?;
            Ok(SessionView {
                session,
                events,
                resolved,
                children: wf.children,
                blocking_gate: wf.blocking_gate,
                lease: wf.lease,
            })
        })
        .map_err(|e| self.fill_path(e))
        .and_then(|mut view| {
            // External references: after the snapshot has ended, so no
            // read transaction waits on a resolver.
            let external: Vec<usize> = (0..view.resolved.len())
                .filter(|i| view.resolved[*i].kind != "session")
                .collect();
            if external.is_empty() {
                return Ok(view);
            }
            let resolvers = Resolvers::load(&config_path(&self.path))?;
            if resolvers.by_kind.is_empty() {
                return Ok(view);
            }
            let refs: Vec<(&str, &str)> = external
                .iter()
                .map(|i| (view.resolved[*i].kind, view.resolved[*i].id.as_str()))
                .collect();
            let states = resolvers.resolve(&refs);
            for (i, st) in external.into_iter().zip(states) {
                view.resolved[i].state = st;
            }
            Ok(view)
        })
    }

    /// A page of a session's events with seq > `after_seq`, by seq.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id, limit outside 1..=1000, negative
    /// after_seq), SESSION_NOT_FOUND.
    pub fn session_events(
        &self,
        id: &str,
        after_seq: Option<i64>,
        limit: Option<i64>,
    ) -> Result<EventPage> {
        parse_session_id(id)?;
        let limit = check_limit(limit, LIST_LIMIT_MAX)?;
        let after = after_seq.unwrap_or(-1);
        if after < -1 {
            return Err(Error::invalid("after_seq", "must be 0 or more"));
        }
        self.read(|tx| {
            if !ss::session_exists(tx, id).map_err(db)? {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            }
            let mut events = ev::select_events(tx, id, after, limit + 1).map_err(db)?;
            let more = events.len() > usize::try_from(limit).unwrap_or(usize::MAX);
            events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            let next_after_seq = if more {
                events.last().map(|e| e.seq)
            } else {
                None
            };
            Ok(EventPage {
                events,
                next_after_seq,
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// A page of sessions. Default order: newest created first, on an
    /// immutable key, so a cursor walk returns every session that existed
    /// when it began exactly once, whatever is inserted or updated meanwhile.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (limit outside 1..=1000, malformed cursor or names).
    pub fn list_sessions(&self, req: &ListSessions) -> Result<SessionPage> {
        let q = list_query(req)?;
        self.read(|tx| {
            let (sessions, next) = list::select_page(tx, &q).map_err(db)?;
            Ok(SessionPage {
                sessions,
                next_cursor: next.map(|k| encode_cursor(q.order, k)),
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// The query plan of a listing (diagnostics; used by the index tests).
    ///
    /// # Errors
    /// As [`Ledger::list_sessions`].
    pub fn explain_list(&self, req: &ListSessions) -> Result<Vec<String>> {
        let q = list_query(req)?;
        list::explain(&self.conn, &q).map_err(|e| self.db_err(e))
    }
}

/// Validates a listing request and turns it into the store's query.
fn list_query(req: &ListSessions) -> Result<ListQuery> {
    let limit = check_limit(req.limit, LIST_LIMIT_MAX)?;
    opt_name("app", &req.app)?;
    opt_name("agent_id", &req.agent_id)?;
    opt_name("tag", &req.tag)?;
    if let Some(p) = &req.parent {
        parse_session_id(p).map_err(|e| Error::invalid("parent", e.to_string()))?;
    }
    let order = if req.order_updated {
        Order::Updated
    } else {
        Order::Created
    };
    let after = match &req.cursor {
        Some(c) => Some(decode_cursor(c, order)?),
        None => None,
    };
    let mut statuses: Vec<String> = Vec::new();
    for s in &req.statuses {
        if !statuses.iter().any(|x| x == s.as_str()) {
            statuses.push(s.as_str().to_owned());
        }
    }
    Ok(ListQuery {
        statuses,
        app: req.app.clone(),
        agent_id: req.agent_id.clone(),
        tag: req.tag.clone(),
        parent: req.parent.clone(),
        since_ms: req.since_ms,
        until_ms: req.until_ms,
        order,
        limit,
        after,
    })
}

/// Reads the whole session after a mutation, in its transaction.
pub(super) fn read_back(tx: &Connection, id: &str) -> Result<Session> {
    ss::find_session(tx, id)
        .map_err(db)?
        .ok_or_else(|| Error::internal("an updated session could not be read back"))
}

/// Runs one verb's conditional UPDATE (`sql[0]` unguarded, `sql[1]` with
/// `--if-rev`); whether a row matched.
pub(super) fn conditional_update(
    tx: &Connection,
    sql: [&str; 2],
    id: &str,
    now: i64,
    text: Option<&str>,
    if_rev: Option<i64>,
) -> Result<bool> {
    let n = match (text, if_rev) {
        (None, None) => tx
            .prepare_cached(sql[0])
            .and_then(|mut st| st.execute(params![id, now])),
        (None, Some(r)) => tx
            .prepare_cached(sql[1])
            .and_then(|mut st| st.execute(params![id, now, r])),
        (Some(t), None) => tx
            .prepare_cached(sql[0])
            .and_then(|mut st| st.execute(params![id, now, t])),
        (Some(t), Some(r)) => tx
            .prepare_cached(sql[1])
            .and_then(|mut st| st.execute(params![id, now, t, r])),
    };
    n.map(|n| n == 1).map_err(db)
}

fn checkpoint_data(
    step: Option<&str>,
    refs: &[(&'static str, Vec<String>)],
    state: Option<&super::snapshots::PreparedState>,
) -> Result<String> {
    #[derive(Serialize)]
    struct Snapshot<'a> {
        size_bytes: i64,
        sha256: &'a str,
    }
    #[derive(Serialize)]
    struct Data<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        step: Option<&'a str>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        plan_ids: &'a [String],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        operation_ids: &'a [String],
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        deployment_ids: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<Snapshot<'a>>,
    }
    let get = |k: &str| {
        refs.iter()
            .find(|(kind, _)| *kind == k)
            .map_or(&[][..], |(_, v)| &v[..])
    };
    serde_json::to_string(&Data {
        step,
        plan_ids: get("plan"),
        operation_ids: get("operation"),
        deployment_ids: get("deployment"),
        snapshot: state.map(|s| Snapshot {
            size_bytes: s.size_bytes,
            sha256: &s.sha256,
        }),
    })
    .map_err(|e| Error::internal(e.to_string()))
}

fn link_refs(
    tx: &Connection,
    id: &str,
    seq: i64,
    refs: &[(&'static str, Vec<String>)],
) -> Result<()> {
    for (kind, ids) in refs {
        if ids.is_empty() {
            continue;
        }
        let mut count: i64 = tx
            .prepare_cached(ss::COUNT_REFS)
            .and_then(|mut st| st.query_row(params![id, kind], |r| r.get(0)))
            .map_err(db)?;
        for r in ids {
            let exists = tx
                .prepare_cached(ss::REF_EXISTS)
                .and_then(|mut st| st.exists(params![id, kind, r]))
                .map_err(db)?;
            if exists {
                continue;
            }
            if count >= v::REFS_MAX as i64 {
                return Err(Error::invalid(
                    format!("{kind}_ids"),
                    format!("would exceed {} linked ids on this session", v::REFS_MAX),
                ));
            }
            tx.prepare_cached(ss::INSERT_REF)
                .and_then(|mut st| st.execute(params![id, kind, r, count, seq]))
                .map_err(db)?;
            count += 1;
        }
    }
    Ok(())
}

fn check_limit(limit: Option<i64>, max: i64) -> Result<i64> {
    let l = limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if (1..=max).contains(&l) {
        Ok(l)
    } else {
        Err(Error::invalid("limit", format!("must be from 1 to {max}")))
    }
}

const CURSOR_VERSION: &str = "lb1";

fn encode_cursor(order: Order, (ts, seq): (i64, i64)) -> String {
    let o = match order {
        Order::Created => "c",
        Order::Updated => "u",
    };
    hex::encode(format!("{CURSOR_VERSION}|{o}|{ts}|{seq}"))
}

fn decode_cursor(c: &str, order: Order) -> Result<(i64, i64)> {
    let bad = || Error::invalid("cursor", "is not a cursor returned by `session list`");
    if c.len() > 200 {
        return Err(bad());
    }
    let bytes = hex::decode(c).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let parts: Vec<&str> = text.split('|').collect();
    let [ver, o, ts, seq] = parts[..] else {
        return Err(bad());
    };
    if ver != CURSOR_VERSION {
        return Err(bad());
    }
    let want = match order {
        Order::Created => "c",
        Order::Updated => "u",
    };
    if o != want {
        return Err(Error::invalid(
            "cursor",
            "was issued for a different --order; restart the walk without --cursor",
        ));
    }
    Ok((
        ts.parse().map_err(|_| bad())?,
        seq.parse().map_err(|_| bad())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cursor_round_trip(ts in any::<i64>(), seq in any::<i64>(), upd in any::<bool>()) {
            let order = if upd { Order::Updated } else { Order::Created };
            let c = encode_cursor(order, (ts, seq));
            prop_assert_eq!(decode_cursor(&c, order).unwrap(), (ts, seq));
        }
    }

    #[test]
    fn cursor_rejects_garbage_and_the_other_order() {
        assert!(decode_cursor("zz", Order::Created).is_err());
        let c = encode_cursor(Order::Updated, (1, 2));
        assert!(decode_cursor(&c, Order::Created).is_err());
    }
}
