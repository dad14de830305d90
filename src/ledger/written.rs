//! What a mutation returns: the value after the call, and whether the call
//! was an idempotent replay (docs/design.md, "CLI").
//!
//! A retry with the same idempotency key applies nothing again. It still
//! answers with the value as it stands now, and says that it was a replay
//! and what the first attempt produced: the rev it left and the seq of the
//! event it wrote. The CLI's envelope and MCP tool results carry that as
//! `"replayed":{"rev":R,"seq":S}` beside `data`; a first attempt has no
//! `replayed` member.

use serde::Serialize;
use std::ops::Deref;

/// What the first attempt of a replayed call produced.
///
/// Rule: docs/design.md, "CLI".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replayed {
    /// The session's rev the first attempt left. `None` (JSON `null`) for a
    /// key recorded before schema version 6, which did not store it.
    pub rev: Option<i64>,
    /// The seq of the event the first attempt wrote (the verb's own event;
    /// `0`, `created`, for a create).
    pub seq: i64,
}

/// A mutation's result: its value (the session, run or budget after the
/// call) and, for an idempotent replay, what the first attempt produced.
///
/// Derefs to the value, so `ledger.checkpoint(…)?.rev` reads the session's
/// rev as before.
#[derive(Debug, Clone)]
pub struct Written<T> {
    /// The value after the call: for a replay, as it stands now.
    pub value: T,
    /// `Some` when this call was a replay and applied nothing.
    pub replayed: Option<Replayed>,
}

impl<T> Written<T> {
    /// A first attempt's result.
    pub fn applied(value: T) -> Self {
        Written {
            value,
            replayed: None,
        }
    }

    /// A replay's result.
    pub fn replay(value: T, replayed: Replayed) -> Self {
        Written {
            value,
            replayed: Some(replayed),
        }
    }

    /// The value, dropping the replay information.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> Deref for Written<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}
