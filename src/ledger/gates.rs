//! Gates (docs/design.md, "Gates"; Amber's gate handler): open, approve,
//! reject, list.
//!
//! - `auto`: approved at once; one `gate_approved` event; the session stays
//!   active.
//! - `user-approval`, `step-confirm`: a `gate_opened` event, then `paused`;
//!   the session pauses with the gate pending (`show` names it as
//!   `blocking_gate`), and `session resume` is refused with GATE_PENDING
//!   until it is decided.
//! - approve: paused → active, a `gate_approved` event, then `resumed`.
//! - reject: paused → failed, or cancelled with `abort`; a `gate_rejected`
//!   event with `data.outcome`, then `failed` or `cancelled` (detail: the
//!   reason, which is also the `end_reason`).
//!
//! Every change of the session's status leaves the event of that status,
//! last, in the same transaction (docs/design.md, "Event order"), so a feed reader that
//! follows statuses by event type sees every one; rev goes up by 1.
//! - deciding a decided gate: GATE_ALREADY_DECIDED.
//!
//! A gate records a decision; it authorizes nothing.

use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::write::{read_back, OneEvent, Op};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Gate, GateKind, GateStatus, Session, SessionStatus, Verb};
use crate::redact::redact_opt;
use crate::store::rows::{GateFull, GateRow, NewGate};
use crate::store::{OneSide, SessionChange, Tx};
use crate::validate as v;
use serde::Serialize;

/// `gate list`: a session's gates in opening order.
#[derive(Debug, Clone, Serialize)]
pub struct GateList {
    /// The session.
    pub session_id: String,
    /// Its gates, oldest first.
    pub gates: Vec<Gate>,
}

#[derive(Serialize)]
struct GateData<'a> {
    gate: &'a str,
    kind: &'a str,
    round: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'a str>,
}

pub(super) fn to_gate(g: GateFull) -> Gate {
    Gate {
        kind: g.kind.parse().unwrap_or(GateKind::UserApproval),
        status: g.status.parse().unwrap_or(GateStatus::Pending),
        name: g.name,
        round: g.round,
        opened_seq: g.opened_seq,
        opened_at_ms: g.opened_at_ms,
        decided_seq: g.decided_seq,
        decided_at_ms: g.decided_at_ms,
        reason: g.reason,
        outcome: g.outcome,
    }
}

fn check_name(name: &str) -> Result<()> {
    v::keyed_name("gate", name, "gate names")
}

/// Finds the latest round of a gate and checks that it is pending.
fn pending_round(tx: &mut dyn Tx, id: &str, name: &str) -> Result<GateRow> {
    if !tx.session_exists(id)? {
        return Err(Error::SessionNotFound { id: id.to_owned() });
    }
    let Some(g) = tx.find_latest_gate(id, name)? else {
        return Err(Error::GateNotFound {
            id: id.to_owned(),
            gate: name.to_owned(),
        });
    };
    if g.gate.status != GateStatus::Pending.as_str() {
        return Err(Error::GateAlreadyDecided {
            id: id.to_owned(),
            gate: g.gate.name,
            status: g.gate.status,
            decided_seq: g.gate.decided_seq.unwrap_or(g.gate.opened_seq),
        });
    }
    Ok(g)
}

fn data_text(d: &GateData<'_>) -> Result<String> {
    serde_json::to_string(d).map_err(|e| Error::internal(e.to_string()))
}

impl Ledger {
    /// Opens gate `name` of `kind` on an active session (rev + 1). `auto`:
    /// approved at once (event `gate_approved`), the session stays active.
    /// Other kinds: event `gate_opened`, then `paused`: the session pauses
    /// with the gate pending. Event data: `{"gate", "kind",
    /// "round"}`. A name may be opened again once its previous round is
    /// decided.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (name: 1–128 characters, no secrets);
    /// SESSION_NOT_FOUND; SESSION_INVALID_TRANSITION (not active);
    /// SESSION_CONFLICT; GATE_PENDING (the name's previous round is still
    /// pending); LEASE_HELD / LEASE_NOT_FOUND; STORE_BUSY.
    ///
    /// Rule: docs/design.md, "Gates".
    pub fn open_gate(
        &self,
        id: &str,
        name: &str,
        kind: GateKind,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        check_name(name)?;
        let event_type = if kind.blocks() {
            EventType::GateOpened
        } else {
            EventType::GateApproved
        };
        let (status, verb) = if kind.blocks() {
            (Some(SessionStatus::Paused), Verb::GateWait)
        } else {
            (None, Verb::GateAuto)
        };
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: "gate_open",
                text: None,
                step: Some(name),
                data: Some(kind.as_str()),
                if_rev: m.if_rev,
            },
        )?;
        let op = Op {
            id,
            verb,
            m,
            digest: dg.as_deref(),
        };
        let pipeline = || self.open_gate_in(op, name, kind, status, event_type);
        // On a server, with a key: one statement (docs/postgres.md, "One
        // round trip per write").
        let one = OneEvent {
            change: SessionChange {
                status,
                ..SessionChange::default()
            },
            event_type: event_type.as_str(),
            follow: kind.blocks().then_some((EventType::Paused.as_str(), None)),
            side: Some(OneSide::GateOpen {
                name,
                kind: kind.as_str(),
                approved: !kind.blocks(),
            }),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }

    /// [`Ledger::open_gate`] through the pipeline's transaction.
    fn open_gate_in(
        &self,
        op: Op<'_>,
        name: &str,
        kind: GateKind,
        status: Option<SessionStatus>,
        event_type: EventType,
    ) -> Result<Written<Session>> {
        let id = op.id;
        self.mutate(
            op,
            |_| Ok(()),
            |w, ()| {
                // A blocking gate pauses the session: the kernel then
                // records `paused` after `gate_opened` (docs/design.md, "Event order").
                w.update(SessionChange {
                    status,
                    ..SessionChange::default()
                })?;
                let round = match w.tx().find_latest_gate(id, name)? {
                    Some(g) if g.gate.status == GateStatus::Pending.as_str() => {
                        return Err(Error::GatePending {
                            id: id.to_owned(),
                            gate: g.gate.name,
                        })
                    }
                    Some(g) => g.gate.round + 1,
                    None => 1,
                };
                let data = data_text(&GateData {
                    gate: name,
                    kind: kind.as_str(),
                    round,
                    outcome: None,
                })?;
                let seq = w.event(event_type.as_str(), None, Some(&data), None)?;
                let s = w.session()?;
                w.tx().insert_gate(&NewGate {
                    session_id: id,
                    name,
                    round,
                    kind: kind.as_str(),
                    seq,
                    at_ms: s.updated_at_ms,
                    approved: !kind.blocks(),
                })?;
                Ok(s)
            },
            &mut |tx, _| read_back(tx, id),
        )
    }

    /// Approves the pending gate `name`: the session resumes (paused →
    /// active): a `gate_approved` event whose `detail` is the note, then
    /// `resumed`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT; SESSION_NOT_FOUND; GATE_NOT_FOUND;
    /// GATE_ALREADY_DECIDED (exit 5); SESSION_INVALID_TRANSITION (the
    /// session is not paused, e.g. terminal); SESSION_CONFLICT; LEASE_HELD /
    /// LEASE_NOT_FOUND; STORE_BUSY.
    ///
    /// Rule: docs/design.md, "Gates".
    pub fn approve_gate(
        &self,
        id: &str,
        name: &str,
        note: Option<String>,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        self.decide_gate(id, name, note, None, m)
    }

    /// Rejects the pending gate `name` with `reason`: the session fails
    /// (paused → failed), or is cancelled with `abort`: a `gate_rejected`
    /// event (`detail` = reason, `data.outcome` = `failed` | `cancelled`),
    /// then `failed` or `cancelled` (detail = reason); the reason becomes
    /// the session's `end_reason`.
    ///
    /// # Errors
    /// As [`Ledger::approve_gate`]; INVALID_ARGUMENT for a reason outside
    /// 1–4096 characters.
    pub fn reject_gate(
        &self,
        id: &str,
        name: &str,
        reason: &str,
        abort: bool,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        self.decide_gate(id, name, Some(reason.to_owned()), Some(abort), m)
    }

    /// `reject`: `Some(abort)`; approve: `None`.
    fn decide_gate(
        &self,
        id: &str,
        name: &str,
        text: Option<String>,
        reject: Option<bool>,
        m: &Mutation,
    ) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_key(m)?;
        check_name(name)?;
        let field = if reject.is_some() { "reason" } else { "note" };
        if let Some(t) = &text {
            v::prose(field, t, v::REASON_MAX)?;
        }
        let text = redact_opt(text.as_deref());
        let (verb, event_type, status, outcome, to) = match reject {
            None => (
                Verb::GateApprove,
                EventType::GateApproved,
                GateStatus::Approved,
                None,
                SessionStatus::Active,
            ),
            Some(false) => (
                Verb::GateReject,
                EventType::GateRejected,
                GateStatus::Rejected,
                Some("failed"),
                SessionStatus::Failed,
            ),
            Some(true) => (
                Verb::GateAbort,
                EventType::GateRejected,
                GateStatus::Rejected,
                Some("cancelled"),
                SessionStatus::Cancelled,
            ),
        };
        let dg = key_digest(
            m,
            &VerbDigest {
                verb: verb.as_str(),
                text: text.as_deref(),
                step: Some(name),
                data: outcome,
                if_rev: m.if_rev,
            },
        )?;
        // The reason is stored as end_reason by a rejection only.
        let stored = reject.and(text.as_deref());
        let op = Op {
            id,
            verb,
            m,
            digest: dg.as_deref(),
        };
        let follow = match to {
            SessionStatus::Failed => EventType::Failed,
            SessionStatus::Cancelled => EventType::Cancelled,
            _ => EventType::Resumed,
        };
        let text = text.as_deref();
        let pipeline = || {
            self.decide_gate_in(
                op,
                name,
                text,
                stored,
                (event_type, status, outcome, to),
                follow,
            )
        };
        // On a server, with a key: one statement (docs/postgres.md, "One
        // round trip per write"); a rejection only while no run is open
        // (the pipeline ends them first).
        let one = OneEvent {
            change: SessionChange {
                status: Some(to),
                end_reason: stored,
                ..SessionChange::default()
            },
            event_type: event_type.as_str(),
            detail: text,
            end_runs: to.is_terminal().then_some(to),
            follow: Some((follow.as_str(), stored)),
            side: Some(OneSide::GateDecide {
                name,
                status: status.as_str(),
                text,
                outcome,
            }),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }

    /// A gate's decision through the pipeline's transaction: (the event,
    /// the gate's new status, a rejection's outcome, the session's new
    /// status), and the status change's event.
    fn decide_gate_in(
        &self,
        op: Op<'_>,
        name: &str,
        text: Option<&str>,
        stored: Option<&str>,
        (event_type, status, outcome, to): (EventType, GateStatus, Option<&str>, SessionStatus),
        follow: EventType,
    ) -> Result<Written<Session>> {
        let id = op.id;
        self.mutate(
            op,
            |tx| pending_round(tx, id, name),
            |w, g| {
                w.update(SessionChange {
                    status: Some(to),
                    end_reason: stored,
                    ..SessionChange::default()
                })?;
                if to.is_terminal() {
                    // A rejection ends the session: its open runs end first.
                    super::run_end::cancel_open_runs(w, to)?;
                }
                let data = data_text(&GateData {
                    gate: name,
                    kind: &g.gate.kind,
                    round: g.gate.round,
                    outcome,
                })?;
                let seq = w.event(event_type.as_str(), text, Some(&data), None)?;
                // The status change's own event, last: `resumed`, or
                // `failed` / `cancelled` with the rejection's reason.
                w.side_event(follow.as_str(), stored, None, None)?;
                let s = w.session()?;
                w.tx().decide_gate(
                    g.gate_id,
                    status.as_str(),
                    seq,
                    s.updated_at_ms,
                    text,
                    outcome,
                )?;
                Ok(s)
            },
            &mut |tx, _| read_back(tx, id),
        )
    }

    /// `gate list`: every gate of a session, oldest first.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    pub fn list_gates(&self, id: &str) -> Result<GateList> {
        parse_session_id(id)?;
        self.read(|tx| {
            if !tx.session_exists(id)? {
                return Err(Error::SessionNotFound { id: id.to_owned() });
            }
            let gates = tx.select_gates(id)?.into_iter().map(to_gate).collect();
            Ok(GateList {
                session_id: id.to_owned(),
                gates,
            })
        })
        .map_err(|e| self.fill_path(e))
    }
}
