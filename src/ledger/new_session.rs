//! A new session's rows, as create and fork insert them: its id, its
//! columns, its `created` event, and what a replay of a create answers
//! (docs/design.md, "Model"). The write kernel for existing sessions is
//! [`super::write`].

use super::written::Replayed;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, SessionId, SessionStatus, Usage};
use crate::store::rows::NewEvent;
use crate::store::{SessionRow, Tx};

/// The replay of a create (or fork): the new session's rev 1 and its
/// `created` event, seq 0.
pub(super) const CREATED_REPLAY: Replayed = Replayed {
    rev: Some(1),
    seq: 0,
};

/// A create's (or fork's) idempotency key that created `session` from
/// other arguments (a create's key is the ledger's, not one session's).
pub(super) fn create_key_reused(session: &str) -> Error {
    Error::invalid(
        "idempotency_key",
        format!("was already used to create {session} with different arguments"),
    )
}

/// A fresh random session id (8 bytes from the OS).
///
/// # Errors
/// INTERNAL when the OS has no randomness to give.
pub(super) fn new_session_id() -> Result<SessionId> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(SessionId::from_bytes(bytes))
}

/// A new session's columns, validated and redacted (create and fork).
pub(super) struct NewSession<'a> {
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
    /// The `detail` of its `created` event.
    pub created_detail: &'a str,
    /// (key, request digest) stored with the `created` event.
    pub idempotency: Option<(&'a str, &'a str)>,
}

impl Ledger {
    /// Inserts a new session at rev 1 — its row under a fresh id (retried
    /// on the vanishingly rare collision of 64 random bits), its data and
    /// tags — and its `created` event (seq 0). The creation time is `now`,
    /// but never below the newest session's `created_at_ms`, however far
    /// the clock stepped back (docs/design.md, "Clock": created order is insertion
    /// order, as event times never go below their session's previous
    /// event). Returns the new id.
    ///
    /// # Errors
    /// The store's; INTERNAL after four id collisions in a row.
    pub(super) fn insert_new_session(
        &self,
        tx: &mut dyn Tx,
        now: i64,
        s: &NewSession<'_>,
    ) -> Result<SessionId> {
        let created_at_ms = tx.newest_created_at_ms()?.map_or(now, |n| n.max(now));
        let mut attempt = 0;
        let id = loop {
            let id = new_session_id()?;
            let row = self.new_session_row(id.as_str(), created_at_ms, s);
            match tx.insert_session(&row)? {
                Some(_) => break id,
                None if attempt < 3 => attempt += 1,
                None => {
                    return Err(Error::internal(
                        "four random session ids in a row were taken",
                    ))
                }
            }
        };
        tx.insert_event(&NewEvent {
            session_id: id.as_str(),
            event_type: EventType::Created.as_str(),
            actor_type: self.opts.actor,
            detail: Some(s.created_detail),
            data: None,
            idempotency: s.idempotency,
            run_id: None,
        })?;
        Ok(id)
    }

    /// The row of a new session `id` created at `created_at_ms`: rev 1,
    /// no usage, by this ledger's actor.
    pub(super) fn new_session_row<'s>(
        &self,
        id: &'s str,
        created_at_ms: i64,
        s: &NewSession<'s>,
    ) -> SessionRow<'s> {
        SessionRow {
            session_id: id,
            status: s.status,
            title: s.title,
            goal: s.goal,
            app: s.app,
            agent_id: s.agent_id,
            route: s.route,
            stage: s.stage,
            parent_session_id: s.parent_session_id,
            tags: s.tags,
            context: s.context,
            metadata: s.metadata,
            actor_type: self.opts.actor,
            actor_id: None,
            rev: 1,
            checkpoint_seq: None,
            final_result: None,
            end_reason: None,
            usage: Usage::default(),
            created_at_ms,
            updated_at_ms: created_at_ms,
            ended_at_ms: None,
        }
    }
}
