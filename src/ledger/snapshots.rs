//! Checkpoint snapshots, restore and fork (docs/design.md, "Snapshots"; Amber's
//! checkpoint manager and "session forking (branch from checkpoint)").
//!
//! `session checkpoint … --state JSON` stores the (redacted) JSON object in
//! `session_snapshots`, keyed by the checkpoint event's seq, with the
//! session's `stage` at that moment; the checkpoint event's data records
//! `snapshot: {size_bytes, sha256}`, so the hash chain covers the snapshot.
//!
//! A snapshot's `state` is the context it restores: `restore` sets the
//! session's `context` to the state and its `stage` to the snapshot's stage
//! (event `checkpoint_restored`); usage is never rewound. `fork` creates a
//! child session (parent = the source) whose context and stage come from
//! the snapshot (event `forked` on both).

use super::new_session::{NewSession, CREATED_REPLAY};
use super::request::{
    key_digest, parse_session_id, redacted_json_text, validate_key, Mutation, VerbDigest,
};
use super::write::{diagnose, read_back, Op};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Session, SessionStatus, Verb};
use crate::redact::redact;
use crate::store::rows::{NewEvent, SnapshotRow};
use crate::store::{SessionChange, SessionGuard, Tx};
use crate::validate as v;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Most bytes of a snapshot's payload: 16 MiB (docs/design.md,
/// "Snapshots"; a CHECK of `session_snapshots.payload` holds it too).
pub const PAYLOAD_MAX_BYTES: usize = 16 * 1024 * 1024;

/// A validated, redacted snapshot state, ready to store.
#[derive(Debug, Clone)]
pub(super) struct PreparedState {
    /// Compact JSON text (redacted).
    pub(super) text: String,
    /// Its size in bytes.
    pub(super) size_bytes: i64,
    /// SHA-256 (hex) of the text.
    pub(super) sha256: String,
    /// The payload with its size and SHA-256 (hex), if any.
    pub(super) payload: Option<(Vec<u8>, i64, String)>,
}

/// Checks (a JSON object, ≤ 256 KiB compact as given) and redacts a
/// `--state` value, and checks its payload (≤ [`PAYLOAD_MAX_BYTES`]; only
/// beside a state). The payload is opaque: stored as given, never redacted.
///
/// # Errors
/// INVALID_ARGUMENT (field `state` or `payload`).
pub(super) fn prepare_state(
    state: &Option<Value>,
    payload: Option<&[u8]>,
) -> Result<Option<PreparedState>> {
    let Some(val) = state else {
        return match payload {
            Some(_) => Err(Error::invalid(
                "payload",
                "is stored with a snapshot: give a state with it",
            )),
            None => Ok(None),
        };
    };
    v::json_value("state", val)?;
    let payload = match payload {
        Some(p) if p.len() > PAYLOAD_MAX_BYTES => {
            return Err(Error::invalid(
                "payload",
                format!("has {} bytes; the limit is {PAYLOAD_MAX_BYTES}", p.len()),
            ))
        }
        Some(p) => Some((
            p.to_vec(),
            i64::try_from(p.len()).unwrap_or(i64::MAX),
            hex::encode(Sha256::digest(p)),
        )),
        None => None,
    };
    let Some(text) = redacted_json_text(state)? else {
        return Ok(None);
    };
    Ok(Some(PreparedState {
        size_bytes: i64::try_from(text.len()).unwrap_or(i64::MAX),
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
        text,
        payload,
    }))
}

/// One snapshot as `session checkpoints` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotInfo {
    /// Seq of the `checkpoint` event that stored it (the `--checkpoint`
    /// argument of restore and fork).
    pub seq: i64,
    /// The checkpoint's step, or null.
    pub step: Option<String>,
    /// When, ms since the Unix epoch (UTC).
    pub at_ms: i64,
    /// Bytes of the stored state (compact, redacted JSON).
    pub size_bytes: i64,
    /// Bytes of its payload (schema V11); left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<i64>,
    /// The session's stage when it was taken (restored with it), or null.
    pub stage: Option<String>,
}

/// `session checkpoints`: a session's snapshots by seq.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotList {
    /// The session.
    pub session_id: String,
    /// Its snapshots, oldest first.
    pub checkpoints: Vec<SnapshotInfo>,
}

/// A `fork` request.
#[derive(Debug, Clone, Default)]
pub struct ForkRequest {
    /// The snapshot's seq; `None`: the newest snapshot.
    pub checkpoint: Option<i64>,
    /// The child's title (1–200 characters); `None`: the source's.
    pub title: Option<String>,
}

fn info(s: SnapshotRow) -> SnapshotInfo {
    SnapshotInfo {
        seq: s.seq,
        step: s.step,
        at_ms: s.at_ms,
        size_bytes: s.size_bytes,
        payload_bytes: s.payload_bytes,
        stage: s.stage,
    }
}

/// The snapshot at `seq` (or the newest), checked against what its
/// checkpoint event records (the SHA-256 and size of its state and of its
/// payload, which the hash chain covers), or SESSION_NOT_FOUND /
/// CHECKPOINT_NOT_FOUND / LEDGER_TAMPERED (a state or payload replaced or
/// altered since it was taken is never handed back).
fn snapshot(tx: &mut dyn Tx, id: &str, seq: Option<i64>) -> Result<SnapshotRow> {
    match tx.find_snapshot(id, seq)? {
        Some(s) => {
            let record = tx.snapshot_record(id, s.seq)?.unwrap_or_default();
            if let Some((want, have)) = record.check(s.state.as_bytes(), s.payload.as_deref()) {
                return Err(Error::Tampered {
                    session_id: id.to_owned(),
                    seq: s.seq,
                    problem: "snapshot".into(),
                    expected: want,
                    found: have,
                    broken_sessions: 1,
                });
            }
            Ok(s)
        }
        None if !tx.session_exists(id)? => Err(Error::SessionNotFound { id: id.to_owned() }),
        None => Err(Error::CheckpointNotFound {
            id: id.to_owned(),
            seq,
        }),
    }
}

fn check_seq(seq: Option<i64>) -> Result<()> {
    match seq {
        Some(s) if s < 0 => Err(Error::invalid("checkpoint", "must be a seq of 0 or more")),
        _ => Ok(()),
    }
}

fn to_text<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(e.to_string()))
}

#[derive(Serialize)]
struct RestoreData<'a> {
    checkpoint_seq: i64,
    stage: Option<&'a str>,
    size_bytes: i64,
}

#[derive(Serialize)]
struct ForkData<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    child_session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_session_id: Option<&'a str>,
    checkpoint_seq: i64,
}

/// One checkpoint snapshot with its state: what [`Ledger::snapshot`]
/// returns (the Python package's `Ledger.snapshot`, docs/python.md).
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The session.
    pub session_id: String,
    /// The seq of its checkpoint event.
    pub seq: i64,
    /// The checkpoint's step.
    pub step: Option<String>,
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// Bytes of the stored state.
    pub size_bytes: i64,
    /// The session's stage when it was taken.
    pub stage: Option<String>,
    /// The stored state (redacted as it was written), a JSON object.
    pub state: Value,
    /// Bytes of its payload (schema V11); left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<i64>,
    /// The payload, exactly as given (not in the JSON shape: bytes have
    /// none; the Python package's `snapshot` returns them as `bytes`).
    #[serde(skip)]
    pub payload: Option<Vec<u8>>,
}

impl Ledger {
    /// Reads one checkpoint snapshot with its state: the one at `seq`, or
    /// the newest with `None`. The state is checked against the SHA-256 and
    /// size its checkpoint event recorded, as `restore` and `fork` check it.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id, negative seq), SESSION_NOT_FOUND,
    /// CHECKPOINT_NOT_FOUND, LEDGER_TAMPERED (the state does not match its
    /// event).
    pub fn snapshot(&self, id: &str, seq: Option<i64>) -> Result<Snapshot> {
        parse_session_id(id)?;
        check_seq(seq)?;
        self.read(|tx| {
            let s = snapshot(tx, id, seq)?;
            let state = serde_json::from_str(&s.state)
                .map_err(|e| Error::internal(format!("cannot read a snapshot's state: {e}")))?;
            Ok(Snapshot {
                session_id: id.to_owned(),
                seq: s.seq,
                step: s.step,
                at_ms: s.at_ms,
                size_bytes: s.size_bytes,
                stage: s.stage,
                state,
                payload_bytes: s.payload_bytes,
                payload: s.payload,
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// A session's checkpoint snapshots: seq, step, at_ms, size_bytes
    /// (and stage), oldest first.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    ///
    /// Rule: docs/design.md, "Snapshots".
    pub fn list_snapshots(&self, id: &str) -> Result<SnapshotList> {
        parse_session_id(id)?;
        self.read(|tx| {
            if !tx.session_exists(id)? {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            }
            let checkpoints = tx.select_snapshots(id)?.into_iter().map(info).collect();
            Ok(SnapshotList {
                session_id: id.to_owned(),
                checkpoints,
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Restores `stage` and `context` of an active or paused session from
    /// the snapshot of checkpoint `seq` (rev + 1, event
    /// `checkpoint_restored` with data `{checkpoint_seq, stage,
    /// size_bytes}`). Status, usage, references and the latest checkpoint
    /// are left as they are: usage is never rewound.
    ///
    /// # Errors
    /// INVALID_ARGUMENT; SESSION_NOT_FOUND; CHECKPOINT_NOT_FOUND (no
    /// snapshot at that seq); SESSION_INVALID_TRANSITION (pending or
    /// terminal); SESSION_CONFLICT; LEASE_HELD / LEASE_NOT_FOUND;
    /// STORE_BUSY.
    ///
    /// Rule: docs/design.md, "Snapshots".
    pub fn restore(&self, id: &str, seq: i64, m: &Mutation) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        check_seq(Some(seq))?;
        let seq_text = seq.to_string();
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "restore",
                text: None,
                step: None,
                data: Some(&seq_text),
                if_rev: m.if_rev,
            },
        )?;
        let op = Op {
            id,
            verb: Verb::Restore,
            m,
            digest: dg.as_deref(),
        };
        self.mutate(
            op,
            |tx| snapshot(tx, id, Some(seq)),
            |w, snap| {
                w.update(SessionChange {
                    stage: Some(snap.stage.as_deref()),
                    ..SessionChange::default()
                })?;
                w.tx().update_context(id, &snap.state)?;
                let data = to_text(&RestoreData {
                    checkpoint_seq: snap.seq,
                    stage: snap.stage.as_deref(),
                    size_bytes: snap.size_bytes,
                })?;
                w.event(
                    EventType::CheckpointRestored.as_str(),
                    None,
                    Some(&data),
                    None,
                )?;
                w.session()
            },
            &mut |tx, _| read_back(tx, id),
        )
    }

    /// Forks a child session from a snapshot of `id` (the newest, or
    /// `req.checkpoint`). The child: active, parent = `id`, title =
    /// `req.title` or the source's, goal, app, agent, route, tags and
    /// metadata copied from the source, `context` = the snapshot's state,
    /// `stage` = the snapshot's stage, usage zero; events `created` and
    /// `forked` (rev 2). The source gets a `forked` event (rev + 1) naming
    /// the child — unless it is terminal: a terminal session is frozen, so
    /// a fork of it is recorded on the child only. Returns the child.
    ///
    /// `m.if_rev` and `m.lease` apply to the source; `m.idempotency_key`
    /// makes a retry return the same child.
    ///
    /// # Errors
    /// INVALID_ARGUMENT; SESSION_NOT_FOUND; CHECKPOINT_NOT_FOUND;
    /// SESSION_CONFLICT; LEASE_HELD / LEASE_NOT_FOUND; STORE_BUSY.
    ///
    /// Rule: docs/design.md, "Snapshots".
    pub fn fork(&self, id: &str, req: &ForkRequest, m: &Mutation) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        check_seq(req.checkpoint)?;
        if let Some(t) = &req.title {
            v::title("title", t)?;
        }
        let title = req.title.as_deref().map(|t| redact(t).into_owned());
        let seq_text = req.checkpoint.map(|s| s.to_string());
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "fork",
                text: title.as_deref(),
                step: Some(id),
                data: seq_text.as_deref(),
                if_rev: m.if_rev,
            },
        )?;
        let now = self.now_ms();
        self.write(|tx| {
            if let (Some(key), Some(dg)) = (&m.idempotency_key, &dg) {
                if let Some((sid, stored)) = tx.find_created_by_key(key)? {
                    if &stored != dg {
                        return Err(super::new_session::create_key_reused(&sid));
                    }
                    return read_back(tx, &sid).map(|s| Written::replay(s, CREATED_REPLAY));
                }
            }
            // The source's row, locked until COMMIT (a server takes it
            // here): the session and the snapshot read next are what the
            // fork's event follows, not what a writer that commits while
            // this one waits replaces, and a purge of the source waits for
            // the fork.
            let Some(state) = tx.select_session_state(id)? else {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            };
            let source = tx
                .find_session(id)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
            let snap = snapshot(tx, id, req.checkpoint)?;
            // A terminal source is frozen: the fork is recorded on the
            // child only, and only `--if-rev` is checked against it.
            let live = !source.status.is_terminal();
            if live {
                let guard = SessionGuard {
                    from: Verb::Fork.allowed_from(),
                    rev: m.if_rev,
                };
                let touch = SessionChange {
                    now_ms: now,
                    ..SessionChange::default()
                };
                if !tx.update_session(id, guard, &touch)? {
                    return Err(diagnose(tx, id, Verb::Fork, m.if_rev)?.unwrap_or_else(|| {
                        Error::internal("a conditional update matched no row")
                    }));
                }
                super::guards::lease(id, &state, m.lease.as_deref(), now)?;
            } else if let Some(r) = m.if_rev.filter(|r| *r != source.rev) {
                return Err(Error::Conflict {
                    id: id.to_owned(),
                    expected_rev: r,
                    actual_rev: source.rev,
                    latest_event: tx.latest_event(id)?,
                });
            }
            let child = self.insert_fork_child(
                tx,
                &source,
                title.as_deref().unwrap_or(&source.title),
                &snap,
                now,
                m.idempotency_key.as_deref().zip(dg.as_deref()),
            )?;
            if live {
                let data = to_text(&ForkData {
                    child_session_id: Some(&child),
                    parent_session_id: None,
                    checkpoint_seq: snap.seq,
                })?;
                self.insert_plain_event(tx, id, EventType::Forked, Some(&data))?;
            }
            read_back(tx, &child).map(Written::applied)
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Appends an event without an idempotency key.
    fn insert_plain_event(
        &self,
        tx: &mut dyn Tx,
        id: &str,
        event_type: EventType,
        data: Option<&str>,
    ) -> Result<()> {
        tx.insert_event(&NewEvent {
            run_id: None,
            session_id: id,
            event_type: event_type.as_str(),
            actor_type: self.opts.actor,
            detail: None,
            data,
            idempotency: None,
        })
        .map(|_| ())
    }

    /// Inserts the child of a fork with its `created` and `forked` events
    /// (rev 2); returns its id.
    fn insert_fork_child(
        &self,
        tx: &mut dyn Tx,
        source: &Session,
        title: &str,
        snap: &SnapshotRow,
        now: i64,
        key: Option<(&str, &str)>,
    ) -> Result<String> {
        let parent = source.session_id.to_string();
        let child = self
            .insert_new_session(
                tx,
                now,
                &NewSession {
                    status: SessionStatus::Active,
                    title,
                    app: source.app.as_deref(),
                    agent_id: source.agent_id.as_deref(),
                    route: source.route.as_deref(),
                    stage: snap.stage.as_deref(),
                    parent_session_id: Some(&parent),
                    tags: &source.tags,
                    goal: source.goal.as_deref(),
                    context: &snap.state,
                    metadata: source.metadata.get(),
                    created_detail: "session created by fork",
                    idempotency: key,
                },
            )?
            .to_string();
        let guard = SessionGuard {
            from: Verb::Fork.allowed_from(),
            rev: None,
        };
        let touch = SessionChange {
            now_ms: now,
            ..SessionChange::default()
        };
        if !tx.update_session(&child, guard, &touch)? {
            return Err(Error::internal("a forked child could not be updated"));
        }
        let data = to_text(&ForkData {
            child_session_id: None,
            parent_session_id: Some(&parent),
            checkpoint_seq: snap.seq,
        })?;
        self.insert_plain_event(tx, &child, EventType::Forked, Some(&data))?;
        Ok(child)
    }
}
