//! What every request to the ledger shares: the mutation options, and
//! the checks, redaction and idempotency digests the verbs of every module
//! apply to their input before anything touches the store (docs/design.md, "Errors", "Redaction" and "CLI").

use crate::error::{Error, Result};
use crate::model::SessionId;
use crate::redact::redact_json;
use crate::validate as v;
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
    /// with LEASE_HELD (docs/design.md, "Leases"; see `ledger::leases`).
    pub lease: Option<String>,
}

/// Parses a session id.
///
/// # Errors
/// INVALID_ARGUMENT (`session_id`) for anything but `ses_` + 16 lowercase
/// hex.
pub(crate) fn parse_session_id(id: &str) -> Result<SessionId> {
    id.parse::<SessionId>()
        .map_err(|e| Error::invalid("session_id", e.to_string()))
}

/// Checks an optional name (app, agent, route, tag).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub(super) fn opt_name(field: &str, value: &Option<String>) -> Result<()> {
    value.as_deref().map_or(Ok(()), |x| v::name(field, x))
}

/// Checks an optional JSON object (≤ 256 KiB compact).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub(super) fn check_json(field: &str, value: &Option<Value>) -> Result<()> {
    value.as_ref().map_or(Ok(()), |v| v::json_value(field, v))
}

/// The redacted compact text of an optional JSON value.
///
/// # Errors
/// INTERNAL when it cannot be serialized.
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
///
/// # Errors
/// INTERNAL when it cannot be serialized.
pub(super) fn digest(parts: &impl Serialize) -> Result<String> {
    let bytes = serde_json::to_vec(parts).map_err(|e| Error::internal(e.to_string()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Checks a mutation's options: the key's shape, `if_rev` ≥ 1, the lease
/// token's shape.
///
/// # Errors
/// INVALID_ARGUMENT (`idempotency_key`, `if_rev`, `lease`).
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

/// The canonical parts of a mutation that its idempotency digest covers.
#[derive(Serialize)]
pub(super) struct VerbDigest<'a> {
    pub(super) verb: &'static str,
    pub(super) text: Option<&'a str>,
    pub(super) step: Option<&'a str>,
    pub(super) data: Option<&'a str>,
    pub(super) if_rev: Option<i64>,
}

/// The request digest, computed only when an idempotency key was given.
///
/// # Errors
/// INTERNAL when it cannot be serialized.
pub(super) fn key_digest(m: &Mutation, parts: &VerbDigest<'_>) -> Result<Option<String>> {
    match m.idempotency_key {
        Some(_) => digest(parts).map(Some),
        None => Ok(None),
    }
}
