//! The write kernel: the one pipeline every mutation of an existing session
//! runs (docs/design.md, "Storage" and "CLI"), whatever module its verb lives in.
//!
//! In ONE write transaction:
//! 1. **replay**: a retry with the same idempotency key and request digest
//!    applies nothing and answers with the value as it stands now and what
//!    the first attempt did ([`Written::replay`]); the same key with other
//!    arguments is INVALID_ARGUMENT;
//! 2. the verb's own **pre-check**, for refusals that come first (a gate
//!    that is not pending, a checkpoint snapshot that does not exist);
//! 3. the session's **guard state** (status, rev, usage, lease) is read and
//!    the verb **diagnosed**: SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
//!    (the verb's [`Verb::allowed_from`]), SESSION_CONFLICT (`--if-rev`);
//! 4. the **guards** ([`super::guards`]): the lease rule for every verb but
//!    the lease verbs themselves, and no `resume` past a pending gate;
//! 5. the verb's **body** ([`Write`]): one guarded conditional UPDATE
//!    ([`Write::update`], diagnosed again should it match no row), its
//!    event(s) with their chain link ([`Write::event`]: the first carries
//!    the idempotency key), and its other rows;
//! 6. the **status rule**: a change of the session's status that the body
//!    did not record leaves the event of that status, last (docs/design.md, "Event order");
//! 7. COMMIT, and the value the body returned.
//!
//! Verbs differ only in their rules (data and small closures), never in
//! the pipeline.

use super::guards;
use super::written::{Replayed, Written};
use super::{Ledger, Mutation};
use crate::error::{Error, Result};
use crate::model::Usage;
use crate::model::{EventType, Session, SessionStatus, Verb};
use crate::store::rows::{KeyHit, NewEvent, SessionState};
use crate::store::OneOutcome;
use crate::store::{OneRunsEnd, OneWrite, SessionChange, SessionGuard, Tx};

/// A verb's body when it is one guarded UPDATE and its one event, and
/// nothing else: what a server may apply as one statement
/// (docs/postgres.md, "One round trip per write"). The verb builds it from
/// the same values as its body, and runs the pipeline when
/// [`Ledger::write_one`] did not apply it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OneEvent<'a> {
    /// What the UPDATE sets.
    pub change: SessionChange<'a>,
    /// The event's type.
    pub event_type: &'a str,
    /// The event's detail.
    pub detail: Option<&'a str>,
    /// The event's data.
    pub data: Option<&'a str>,
    /// The write ends the session as this status: its open runs are
    /// cancelled first (`super::run_end`).
    pub end_runs: Option<SessionStatus>,
    /// The verb is refused while a gate is pending (`resume`): apply only
    /// while none is.
    pub no_pending_gate: bool,
    /// A checkpoint's snapshot, stored with the event.
    pub snapshot: Option<crate::store::OneSnapshot<'a>>,
    /// Usage added to the session's sums (`session usage`).
    pub add_usage: Option<Usage>,
    /// The status change's event after the verb's own (a gate verb).
    pub follow: Option<(&'a str, Option<&'a str>)>,
    /// The gate, lease or budget row the verb writes.
    pub side: Option<crate::store::OneSide<'a>>,
}

/// One mutation of an existing session, as the kernel runs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Op<'a> {
    /// The session (a well-formed id).
    pub id: &'a str,
    /// The verb: its allowed statuses, its name in errors.
    pub verb: Verb,
    /// `--if-rev`, `--idempotency-key`, `--lease`.
    pub m: &'a Mutation,
    /// The request digest, when an idempotency key was given.
    pub digest: Option<&'a str>,
}

/// A mutation in progress inside its transaction: what a verb's body may
/// do.
pub(super) struct Write<'a, 't> {
    tx: &'t mut dyn Tx,
    ledger: &'a Ledger,
    op: Op<'a>,
    now: i64,
    /// The guard state read before the body.
    state: SessionState,
    /// The status the body's UPDATE set, if it changed it.
    new_status: Option<SessionStatus>,
    /// The idempotency key is still to be stored (with the first event).
    key_pending: bool,
    /// Types of the events appended so far.
    appended: Vec<String>,
}

impl<'a, 't> Write<'a, 't> {
    /// The open transaction, for the verb's own reads and rows.
    pub fn tx(&mut self) -> &mut dyn Tx {
        self.tx
    }

    /// The write's time, ms since the epoch.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// The session's id.
    pub fn id(&self) -> &'a str {
        self.op.id
    }

    /// The guard state read under the write lock (status, rev,
    /// `updated_at_ms`, usage, lease).
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The time a write that must not go below the session's last one
    /// uses: `max(now, updated_at_ms)`.
    pub fn at(&self) -> i64 {
        self.now.max(self.state.updated_at_ms)
    }

    /// The verb's guarded conditional UPDATE: statuses from the verb, rev
    /// from `--if-rev`; rev + 1 and `updated_at_ms` moved (never backwards).
    ///
    /// # Errors
    /// The diagnosis (SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION,
    /// SESSION_CONFLICT) when it matches no row.
    pub fn update(&mut self, change: SessionChange<'_>) -> Result<()> {
        let guard = SessionGuard {
            from: self.op.verb.allowed_from(),
            rev: self.op.m.if_rev,
        };
        self.update_guarded(guard, change)
    }

    /// The UPDATE of a verb that decided from the state it read: guarded by
    /// that rev, from the statuses `from`.
    ///
    /// # Errors
    /// As [`Write::update`].
    pub fn update_read(&mut self, from: &[SessionStatus], change: SessionChange<'_>) -> Result<()> {
        let guard = SessionGuard {
            from,
            rev: Some(self.state.rev),
        };
        self.update_guarded(guard, change)
    }

    fn update_guarded(&mut self, guard: SessionGuard<'_>, change: SessionChange<'_>) -> Result<()> {
        let change = SessionChange {
            now_ms: self.now,
            ..change
        };
        if self.tx.update_session(self.op.id, guard, &change)? {
            self.new_status = change.status;
            return Ok(());
        }
        Err(
            diagnose(self.tx, self.op.id, self.op.verb, self.op.m.if_rev)?.unwrap_or_else(|| {
                Error::internal(
                    "a conditional update matched no row although the session allows it",
                )
            }),
        )
    }

    /// Appends the verb's own event to the session (its seq and hash
    /// chained on), which stores the mutation's idempotency key (a replay
    /// reports its seq). Returns its seq.
    ///
    /// # Errors
    /// The store's.
    pub fn event(
        &mut self,
        event_type: &str,
        detail: Option<&str>,
        data: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<i64> {
        let keyed = std::mem::take(&mut self.key_pending);
        self.append(keyed, event_type, detail, data, run_id)
    }

    /// Appends an event that comes with the verb's own (a run its session's
    /// end cancelled, a budget crossing, a status change): no idempotency
    /// key. Returns its seq.
    ///
    /// # Errors
    /// The store's.
    pub fn side_event(
        &mut self,
        event_type: &str,
        detail: Option<&str>,
        data: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<i64> {
        self.append(false, event_type, detail, data, run_id)
    }

    fn append(
        &mut self,
        keyed: bool,
        event_type: &str,
        detail: Option<&str>,
        data: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<i64> {
        let key = if keyed {
            self.op.m.idempotency_key.as_deref().zip(self.op.digest)
        } else {
            None
        };
        let (_, seq) = self.tx.insert_event(&NewEvent {
            session_id: self.op.id,
            event_type,
            actor_type: self.ledger.opts.actor,
            detail,
            data,
            idempotency: key,
            run_id,
        })?;
        self.appended.push(event_type.to_owned());
        Ok(seq)
    }

    /// The whole session as the mutation leaves it.
    ///
    /// # Errors
    /// INTERNAL when it cannot be read back.
    pub fn session(&mut self) -> Result<Session> {
        read_back(self.tx, self.op.id)
    }
}

/// Reads the whole session after a mutation, in its transaction.
///
/// # Errors
/// INTERNAL when it is gone.
pub(super) fn read_back(tx: &mut dyn Tx, id: &str) -> Result<Session> {
    tx.find_session(id)?
        .ok_or_else(|| Error::internal("an updated session could not be read back"))
}

/// Why `verb` cannot apply to session `id` now: SESSION_NOT_FOUND,
/// SESSION_INVALID_TRANSITION or SESSION_CONFLICT (with the latest event,
/// CASES C28), or `None` when it can.
///
/// # Errors
/// The store's.
pub(super) fn diagnose(
    tx: &mut dyn Tx,
    id: &str,
    verb: Verb,
    if_rev: Option<i64>,
) -> Result<Option<Error>> {
    let Some((status, rev)) = tx.select_status_rev(id)? else {
        return Ok(Some(Error::SessionNotFound { id: id.to_owned() }));
    };
    refusal(tx, id, verb, if_rev, &status, rev)
}

/// The refusal a session at (`status`, `rev`) gives `verb`, if any.
fn refusal(
    tx: &mut dyn Tx,
    id: &str,
    verb: Verb,
    if_rev: Option<i64>,
    status: &str,
    rev: i64,
) -> Result<Option<Error>> {
    // The schema's CHECK admits only the statuses of the enum.
    let Ok(from) = status.parse::<SessionStatus>() else {
        return Err(Error::Corrupt {
            path: String::new(),
            reason: format!("session {id} has a status no logbook writes"),
        });
    };
    if !verb.allowed_from().contains(&from) {
        return Ok(Some(Error::invalid_transition(id, from, verb)));
    }
    match if_rev {
        Some(expected) if expected != rev => Ok(Some(Error::Conflict {
            id: id.to_owned(),
            expected_rev: expected,
            actual_rev: rev,
            latest_event: tx.latest_event(id)?,
        })),
        _ => Ok(None),
    }
}

/// The status event a change from `from` to `to` records: `started`,
/// `resumed`, `paused`, `completed`, `failed` or `cancelled`.
fn status_event(from: &str, to: SessionStatus) -> EventType {
    match to {
        SessionStatus::Active if from == SessionStatus::Paused.as_str() => EventType::Resumed,
        SessionStatus::Active | SessionStatus::Pending => EventType::Started,
        SessionStatus::Paused => EventType::Paused,
        SessionStatus::Completed => EventType::Completed,
        SessionStatus::Failed => EventType::Failed,
        SessionStatus::Cancelled => EventType::Cancelled,
    }
}

/// What a replay of a verb answers with: the value now, read in the
/// transaction, given the key's hit.
pub(super) type ReplayRead<'r, T> = dyn FnMut(&mut dyn Tx, &KeyHit) -> Result<T> + 'r;

impl Ledger {
    /// Runs `op` through the pipeline (module docs) in its own write
    /// transaction. `pre` runs first and hands its value to `body`;
    /// `replay` reads what a replay answers with.
    ///
    /// # Errors
    /// The pipeline's refusals and the body's errors; STORE_BUSY, STORE_IO.
    pub(super) fn mutate<P, T>(
        &self,
        op: Op<'_>,
        mut pre: impl FnMut(&mut dyn Tx) -> Result<P>,
        mut body: impl FnMut(&mut Write<'_, '_>, P) -> Result<T>,
        replay: &mut ReplayRead<'_, T>,
    ) -> Result<Written<T>> {
        self.write(|tx| self.mutate_in(tx, op, &mut pre, &mut body, replay))
            .map_err(|e| self.fill_path(e))
    }

    /// [`Ledger::mutate`] inside a write transaction the caller opened (a
    /// run verb finds its session first).
    ///
    /// # Errors
    /// As [`Ledger::mutate`].
    pub(super) fn mutate_in<P, T>(
        &self,
        tx: &mut dyn Tx,
        op: Op<'_>,
        mut pre: impl FnMut(&mut dyn Tx) -> Result<P>,
        mut body: impl FnMut(&mut Write<'_, '_>, P) -> Result<T>,
        replay: &mut ReplayRead<'_, T>,
    ) -> Result<Written<T>> {
        // The session's row first (a server locks it here): a replay check
        // after it sees a key that a concurrent attempt with the same key
        // committed while this one waited for the row.
        let state = tx.select_session_state(op.id)?;
        if let Some(hit) = replay_hit(tx, op.id, op.m.idempotency_key.as_deref(), op.digest)? {
            let value = replay(tx, &hit)?;
            return Ok(Written::replay(value, replayed(&hit)));
        }
        let pre = pre(tx)?;
        let Some(state) = state else {
            return Err(Error::SessionNotFound {
                id: op.id.to_owned(),
            });
        };
        if let Some(e) = refusal(tx, op.id, op.verb, op.m.if_rev, &state.status, state.rev)? {
            return Err(e);
        }
        let now = self.now_ms();
        if op.verb != Verb::Lease {
            guards::lease(op.id, &state, op.m.lease.as_deref(), now)?;
        }
        let before = state.status.clone();
        let mut w = Write {
            tx,
            ledger: self,
            op,
            now,
            state,
            new_status: None,
            key_pending: true,
            appended: Vec::new(),
        };
        let value = body(&mut w, pre)?;
        if let Some(to) = w.new_status.filter(|to| to.as_str() != before) {
            let ty = status_event(&before, to);
            if !w.appended.iter().any(|t| t == ty.as_str()) {
                // After the value was read: an event changes neither the
                // session's rev nor its columns.
                w.side_event(ty.as_str(), None, None, None)?;
            }
        }
        Ok(Written::applied(value))
    }
}

impl Ledger {
    /// Applies `one` as a single statement where the store can (a server)
    /// and the write allows it: it has an idempotency key (which resolves a
    /// reply lost on the way back) and presents no lease token; otherwise,
    /// or when the statement applied nothing, runs `pipeline` (the same
    /// write through the transaction, which diagnoses, replays or applies).
    /// After a lost reply the statement may have been applied: the
    /// pipeline then replays it by its key, or applies it once; if the
    /// pipeline cannot reach the server either, the outcome is unknown
    /// (STORE_UNAVAILABLE with `outcome: "unknown"`, not `"not_applied"`).
    ///
    /// # Errors
    /// The pipeline's; STORE_BUSY.
    pub(super) fn write_one_or(
        &self,
        op: Op<'_>,
        one: &OneEvent<'_>,
        pipeline: impl FnOnce() -> Result<Written<Session>>,
    ) -> Result<Written<Session>> {
        one_or(self.try_one(op, one)?, pipeline)
    }

    /// [`Ledger::write_one_or`]'s statement, where it may be sent.
    pub(super) fn try_one(&self, op: Op<'_>, one: &OneEvent<'_>) -> Result<OneOutcome> {
        self.try_one_with(op, one, |w| self.store.write_one(w))
    }

    /// [`Ledger::try_one`] with the store's call `send` (e.g.
    /// [`crate::store::Store::budget_one`]).
    pub(super) fn try_one_with<T>(
        &self,
        op: Op<'_>,
        one: &OneEvent<'_>,
        send: impl FnOnce(&OneWrite<'_>) -> Result<OneOutcome<T>>,
    ) -> Result<OneOutcome<T>> {
        let (Some(key), Some(digest)) = (op.m.idempotency_key.as_deref(), op.digest) else {
            return Ok(OneOutcome::NotApplied);
        };
        self.send_one(op, one, self.now_ms(), Some((key, digest)), send)
    }

    /// Sends `one` as a statement at time `now_ms` where the store can,
    /// through the store's call `send` ([`crate::store::Store::write_one`],
    /// `lease_one`, `budget_one`); `idempotency` is `None` only for a lease
    /// taken or renewed, whose token resolves a lost reply
    /// ([`crate::store::OneWrite::idempotency`]).
    pub(super) fn send_one<T>(
        &self,
        op: Op<'_>,
        one: &OneEvent<'_>,
        now_ms: i64,
        idempotency: Option<(&str, &str)>,
        send: impl FnOnce(&OneWrite<'_>) -> Result<OneOutcome<T>>,
    ) -> Result<OneOutcome<T>> {
        if !self.store.writes_one_statement() {
            return Ok(OneOutcome::NotApplied);
        }
        let lease = op.m.lease.as_deref().map(super::guards::token_sha256);
        let ended = one.end_runs.map(super::run_end::ended_message);
        let w = OneWrite {
            session_id: op.id,
            guard: SessionGuard {
                from: op.verb.allowed_from(),
                rev: op.m.if_rev,
            },
            change: SessionChange {
                now_ms,
                ..one.change
            },
            event_type: one.event_type,
            detail: one.detail,
            data: one.data,
            actor_type: self.opts.actor,
            idempotency,
            end_runs: ended.as_deref().map(|message| OneRunsEnd {
                code: super::run_end::SESSION_ENDED,
                message,
                data: super::run_end::ENDED_DATA,
            }),
            no_pending_gate: one.no_pending_gate,
            snapshot: one.snapshot,
            lease_sha256: lease.as_deref(),
            add_usage: one.add_usage,
            follow: one.follow,
            side: one.side,
        };
        send(&w).map_err(|e| self.fill_path(e))
    }
}

/// What a write sent as one statement came to, as the verb answers: the
/// value it returned, or the pipeline's answer when it applied nothing; when
/// its reply was lost, the pipeline's (which finds the key: a replay), or an
/// unknown outcome if the pipeline cannot reach the store either.
pub(super) fn one_or<T>(
    outcome: OneOutcome<T>,
    pipeline: impl FnOnce() -> Result<Written<T>>,
) -> Result<Written<T>> {
    match outcome {
        OneOutcome::Applied(v) => Ok(Written::applied(*v)),
        OneOutcome::NotApplied => pipeline(),
        OneOutcome::Unknown => pipeline().map_err(|e| match e {
            Error::Unavailable { location, .. } => Error::CommitUnknown { location },
            e => e,
        }),
    }
}

/// Checks the idempotency key inside the transaction: `Some(hit)` when
/// this is a retry of an applied request (apply nothing again).
///
/// # Errors
/// INVALID_ARGUMENT when the key was used on this session with other
/// arguments.
pub(super) fn replay_hit(
    tx: &mut dyn Tx,
    id: &str,
    key: Option<&str>,
    digest: Option<&str>,
) -> Result<Option<KeyHit>> {
    let (Some(key), Some(digest)) = (key, digest) else {
        return Ok(None);
    };
    match tx.find_key(key, id)? {
        None => Ok(None),
        Some(hit) if hit.digest == digest => Ok(Some(hit)),
        Some(_) => Err(key_reused()),
    }
}

/// What a replay reports of its first attempt.
pub(super) fn replayed(hit: &KeyHit) -> Replayed {
    Replayed {
        rev: hit.rev,
        seq: hit.seq,
    }
}

/// The same idempotency key with other arguments.
pub(super) fn key_reused() -> Error {
    Error::invalid(
        "idempotency_key",
        "was already used on this session with different arguments",
    )
}
