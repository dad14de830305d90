//! The rules a mutation must pass before it changes anything, beside the
//! state machine: leases (docs/design.md, "Leases") and gates (docs/design.md, "Gates"). The write
//! kernel (`super::write`) runs them before the verb's UPDATE.
//!
//! **Leases.** A lease is **live** while it has not expired and, when its
//! owner is on this host, the owner process still exists (`kill(pid, 0)` is
//! not ESRCH); an owner on another host is judged by expiry alone. Every
//! mutation of an existing session (but the lease verbs themselves):
//! - with a lease token (`Mutation::lease`): applies only if the session's
//!   lease has that token and has not expired (LEASE_NOT_FOUND otherwise,
//!   or LEASE_HELD when another live owner holds it);
//! - without one: refused with LEASE_HELD while a live lease exists — a
//!   held lease blocks every writer that does not present its token, as
//!   Amber's lock "prevents concurrent modifications" — and
//!   applies when there is no lease or only a dead one.
//!
//! **Gates.** `resume` is refused with GATE_PENDING while a gate of the
//! session waits for a decision: approve or reject the gate instead.

use crate::error::{Error, Result};
use crate::store::rows::{LeaseRow, SessionState};
use crate::store::Tx;
use sha2::{Digest, Sha256};

/// SHA-256 (hex) of a lease token: what the database keeps.
pub(super) fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The reason a lease past its expiry is dead ([`dead_reason`]); the
/// one-statement takeover writes the same word (docs/postgres.md, "One
/// round trip per write").
pub(super) const EXPIRED: &str = "expired";

/// The reason a lease whose owner's process (on this host) is gone is dead
/// before its expiry ([`dead_reason`]).
pub(super) const OWNER_GONE: &str = "owner_gone";

/// Why a lease no longer blocks others: `None` while it is live.
pub(super) fn dead_reason(l: &LeaseRow, now: i64, host: &str) -> Option<&'static str> {
    if l.expires_at_ms <= now {
        Some(EXPIRED)
    } else if l.hostname == host && !super::leases::pid_alive(l.pid) {
        Some(OWNER_GONE)
    } else {
        None
    }
}

/// LEASE_HELD for `l`.
pub(super) fn held(id: &str, l: &LeaseRow) -> Error {
    Error::LeaseHeld {
        id: id.to_owned(),
        expires_at_ms: l.expires_at_ms,
        pid: l.pid,
        hostname: l.hostname.clone(),
    }
}

/// The lease rule (module docs) on the session's guard state.
///
/// # Errors
/// LEASE_HELD, LEASE_NOT_FOUND.
pub(super) fn lease(id: &str, st: &SessionState, presented: Option<&str>, now: i64) -> Result<()> {
    let Some(l) = &st.lease else {
        return match presented {
            None => Ok(()),
            Some(_) => Err(Error::LeaseNotFound { id: id.to_owned() }),
        };
    };
    if let Some(t) = presented {
        if token_sha256(t) == l.token_sha256 {
            return if l.expires_at_ms > now {
                Ok(())
            } else {
                Err(Error::LeaseNotFound { id: id.to_owned() })
            };
        }
    }
    match (dead_reason(l, now, &super::leases::hostname()), presented) {
        (None, _) => Err(held(id, l)),
        (Some(_), Some(_)) => Err(Error::LeaseNotFound { id: id.to_owned() }),
        (Some(_), None) => Ok(()),
    }
}

/// Refuses `resume` while a gate is pending.
///
/// # Errors
/// GATE_PENDING.
pub(super) fn no_pending_gate(tx: &mut dyn Tx, id: &str) -> Result<()> {
    match tx.find_pending_gate(id)? {
        Some(g) => Err(Error::GatePending {
            id: id.to_owned(),
            gate: g.name,
        }),
        None => Ok(()),
    }
}
