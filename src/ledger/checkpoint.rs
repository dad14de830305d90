//! The checkpoint verb: a session's latest step and note, its linked
//! references and an optional snapshot, recorded as one `checkpoint` event
//! (docs/design.md, "Model" and "Snapshots"). A request is validated and
//! encoded once ([`PreparedCheckpoint`]), then applied by the write kernel
//! (`super::write`): on its own ([`Ledger::checkpoint`]) or as a new
//! session's first checkpoint in the create's transaction
//! ([`Ledger::create_session`] with [`super::CreateSession::checkpoint`]).

use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::snapshots::{prepare_state, PreparedState};
use super::write::{OneEvent, Op, Write};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Session, Verb};
use crate::redact::{redact, redact_opt};
use crate::store::{OneCheckpoint, OneSide, OneSnapshot, SessionChange, Tx};
use crate::validate::{self as v, Lines};
use serde::Serialize;
use serde_json::Value;

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
    /// 256 KiB compact (docs/design.md, "Snapshots"; `restore` and `fork` read it back).
    pub state: Option<Value>,
    /// Bytes stored with the snapshot, exactly as given and never redacted
    /// (at most 16 MiB; only with a `state`): a serializer's output that
    /// must come back byte for byte (docs/design.md, "Snapshots").
    pub payload: Option<Vec<u8>>,
}

/// A checkpoint request validated, redacted and encoded: what its write
/// applies and what its idempotency digest covers.
pub(super) struct PreparedCheckpoint {
    pub(super) step: Option<String>,
    pub(super) note: Option<String>,
    refs: Vec<(&'static str, Vec<String>)>,
    has_refs: bool,
    /// `refs` flattened: each reference's kind and id, in order.
    flat: (Vec<String>, Vec<String>),
    state: Option<PreparedState>,
    /// The event's `data`: `{step, plan_ids, …, snapshot}` (compact JSON).
    pub(super) data: String,
}

impl PreparedCheckpoint {
    /// Validates and redacts `req`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT: nothing to record, a field's characters or caps,
    /// more than 256 references of a kind, a state that is not a JSON
    /// object of at most 256 KiB.
    pub(super) fn new(req: &CheckpointRequest) -> Result<Self> {
        let has_refs = !(req.plan_ids.is_empty()
            && req.operation_ids.is_empty()
            && req.deployment_ids.is_empty());
        if req.step.is_none() && req.note.is_none() && !has_refs && req.state.is_none() {
            return Err(Error::invalid(
                "checkpoint",
                "give at least one of step, note, plan, operation, deployment or state",
            ));
        }
        if let Some(s) = &req.step {
            v::text("step", s, 1, v::STEP_MAX, Lines::Single)?;
            if s.trim().is_empty() {
                return Err(Error::invalid("step", "must not be only whitespace"));
            }
        }
        if let Some(n) = &req.note {
            v::prose("note", n, v::NOTE_MAX)?;
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
                v::ref_id(field, r)?;
                let r = redact(r).into_owned();
                if !uniq.contains(&r) {
                    uniq.push(r);
                }
            }
            refs.push((kind, uniq));
        }
        let step = redact_opt(req.step.as_deref());
        let note = redact_opt(req.note.as_deref());
        let state = prepare_state(&req.state, req.payload.as_deref())?;
        let data = checkpoint_data(step.as_deref(), &refs, state.as_ref())?;
        let flat = refs
            .iter()
            .flat_map(|(k, ids)| ids.iter().map(|i| ((*k).to_owned(), i.clone())))
            .unzip();
        Ok(PreparedCheckpoint {
            step,
            note,
            refs,
            has_refs,
            flat,
            state,
            data,
        })
    }

    /// A create's first checkpoint as its one statement stores it (its
    /// event's detail and data, its references, its snapshot:
    /// [`crate::store::Store::create_one`]).
    pub(super) fn as_first(&self) -> OneCheckpoint<'_> {
        OneCheckpoint {
            refs: (&self.flat.0, &self.flat.1),
            ..self.as_one_linking()
        }
    }

    /// The checkpoint as a `checkpoint`'s one statement stores it (its
    /// event's detail and data, its snapshot); its references are linked
    /// by the statement's side ([`crate::store::OneSide::Refs`]).
    fn as_one_linking(&self) -> OneCheckpoint<'_> {
        OneCheckpoint {
            note: self.note.as_deref(),
            data: &self.data,
            snapshot: self.state.as_ref().map(|st| OneSnapshot {
                step: self.step.as_deref(),
                state: &st.text,
                payload: st.payload.as_ref().map(|(p, _, _)| &p[..]),
            }),
            refs: (&[], &[]),
        }
    }

    /// Records it through the write kernel: the session's change, the
    /// `checkpoint` event, its references and its snapshot. Returns the
    /// session as it now stands.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (a kind would pass 256 linked ids on the session);
    /// the store's.
    pub(super) fn apply(&self, w: &mut Write<'_, '_>) -> Result<Session> {
        w.update(change())?;
        let seq = w.event(
            EventType::Checkpoint.as_str(),
            self.note.as_deref(),
            Some(&self.data),
            None,
        )?;
        if self.has_refs {
            link_refs(w, seq, &self.refs)?;
        }
        if let Some(st) = &self.state {
            let id = w.id();
            w.tx().insert_snapshot(
                id,
                seq,
                self.step.as_deref(),
                &st.text,
                st.payload.as_ref().map(|(p, _, _)| &p[..]),
            )?;
        }
        w.session()
    }
}

/// A checkpoint's change of the session row: its `checkpoint_seq` becomes
/// the event's seq.
fn change() -> SessionChange<'static> {
    SessionChange {
        checkpoint_at_next_seq: true,
        ..SessionChange::default()
    }
}

impl Ledger {
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
        let cp = PreparedCheckpoint::new(&req)?;
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "checkpoint",
                text: cp.note.as_deref(),
                step: cp.step.as_deref(),
                data: Some(&cp.data),
                if_rev: m.if_rev,
            },
        )?;
        let op = Op {
            id,
            verb: Verb::Checkpoint,
            m,
            digest: dg.as_deref(),
        };
        let pipeline = || {
            self.mutate(op, |_| Ok(()), |w, ()| cp.apply(w), &mut |tx, _| {
                super::write::read_back(tx, id)
            })
        };
        let c = cp.as_one_linking();
        let one = OneEvent {
            change: change(),
            event_type: EventType::Checkpoint.as_str(),
            detail: c.note,
            data: Some(c.data),
            snapshot: c.snapshot,
            side: cp.has_refs.then_some(OneSide::Refs {
                kinds: &cp.flat.0,
                ids: &cp.flat.1,
            }),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }
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
        #[serde(skip_serializing_if = "Option::is_none")]
        payload_bytes: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        payload_sha256: Option<&'a str>,
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
            payload_bytes: s.payload.as_ref().map(|(_, n, _)| *n),
            payload_sha256: s.payload.as_ref().map(|(_, _, h)| &h[..]),
        }),
    })
    .map_err(|e| Error::internal(e.to_string()))
}

/// Links a checkpoint's references (de-duplicated, at most 256 per kind per
/// session) to the event at `seq`.
///
/// # Errors
/// INVALID_ARGUMENT when a kind would pass 256; the store's.
fn link_refs(w: &mut Write<'_, '_>, seq: i64, refs: &[(&'static str, Vec<String>)]) -> Result<()> {
    let id = w.id();
    let tx: &mut dyn Tx = w.tx();
    for (kind, ids) in refs {
        if ids.is_empty() {
            continue;
        }
        let mut count = tx.count_refs(id, kind)?;
        for r in ids {
            if tx.ref_exists(id, kind, r)? {
                continue;
            }
            if count >= v::REFS_MAX as i64 {
                return Err(Error::invalid(
                    format!("{kind}_ids"),
                    format!("would exceed {} linked ids on this session", v::REFS_MAX),
                ));
            }
            tx.insert_ref(id, kind, r, count, seq)?;
            count += 1;
        }
    }
    Ok(())
}
