//! Leases: the Amber seed's session lock, as a row in `session_leases`
//! (issue 4 §6).
//!
//! A lease is `{token, pid, hostname, expires_at_ms}`. The token is a
//! bearer credential: `lease_` + 64 lowercase hex (32 random bytes), printed
//! once by [`Ledger::lock`]; the database keeps only its SHA-256.
//!
//! A lease is **live** while it has not expired and, when its owner is on
//! this host, the owner process still exists (`kill(pid, 0)` is not ESRCH).
//! An owner on another host is judged by expiry alone.
//!
//! Semantics of every mutation of an existing session (checked inside its
//! write transaction, so a refusal changes nothing):
//! - with `Mutation::lease = Some(token)`: applies only if the session's
//!   lease has that token and has not expired (LEASE_NOT_FOUND otherwise,
//!   or LEASE_HELD when another live owner holds it);
//! - without a token: refused with LEASE_HELD while a live lease exists —
//!   a held lease blocks every writer that does not present its token, as
//!   the seed's lock "prevents concurrent modifications" — and applies
//!   when there is no lease or only a dead one.

use super::db;
use super::sessions::{diagnose, parse_session_id, read_back, validate_key};
use super::written::Written;
use super::{Ledger, Mutation};
use crate::error::{Error, Result};
use crate::model::{EventType, Session, Verb};
use crate::store::events::{self as ev, NewEvent};
use crate::store::workflow::{self as ws, LeaseRow};
use rusqlite::{params, Connection};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Default lease time to live: 300,000 ms (5 minutes).
pub const LEASE_TTL_DEFAULT_MS: i64 = 300_000;
/// Longest lease time to live: 604,800,000 ms (7 days).
pub const LEASE_TTL_MAX_MS: i64 = 604_800_000;

const TOKEN_PREFIX: &str = "lease_";

/// A `lock` request.
#[derive(Debug, Clone, Default)]
pub struct LockRequest {
    /// Time to live in ms, 1..=604,800,000; default 300,000.
    pub ttl_ms: Option<i64>,
    /// The owner process whose liveness keeps the lease (on this host);
    /// `None`: the calling process. The CLI passes its parent process (the
    /// agent that ran `logbook session lock`) unless `--owner-pid` says
    /// otherwise.
    pub owner_pid: Option<u32>,
}

/// The previous owner of a lease that was taken over.
#[derive(Debug, Clone, Serialize)]
pub struct PreviousOwner {
    /// Its pid.
    pub pid: i64,
    /// Its host.
    pub hostname: String,
    /// When its lease expired or would have, ms since the epoch.
    pub expires_at_ms: i64,
    /// `expired` or `owner_gone` (its process no longer exists).
    pub reason: &'static str,
}

/// A lease as returned by [`Ledger::lock`]: the only time the token is
/// shown.
#[derive(Debug, Clone, Serialize)]
pub struct Lease {
    /// The bearer token: `lease_` + 64 hex. Pass it as `--lease` to
    /// mutations and to `unlock`. Never stored; keep it secret.
    pub token: String,
    /// The session.
    pub session_id: String,
    /// The owner pid.
    pub pid: i64,
    /// The owner host.
    pub hostname: String,
    /// When it was taken (or renewed), ms since the epoch.
    pub acquired_at_ms: i64,
    /// When it expires, ms since the epoch.
    pub expires_at_ms: i64,
    /// Whether the caller renewed its own lease (presented its token).
    pub renewed: bool,
    /// The owner whose dead lease was taken over, if any.
    pub taken_over_from: Option<PreviousOwner>,
    /// The session after the change.
    pub session: Session,
}

/// A lease as `show` reports it (no token).
#[derive(Debug, Clone, Serialize)]
pub struct LeaseInfo {
    /// The owner pid.
    pub pid: i64,
    /// The owner host.
    pub hostname: String,
    /// ms since the epoch.
    pub acquired_at_ms: i64,
    /// ms since the epoch.
    pub expires_at_ms: i64,
    /// Whether it still blocks other writers (not expired, owner alive).
    pub live: bool,
}

/// This host's name: `/proc/sys/kernel/hostname`, else gethostname(2).
pub fn hostname() -> String {
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() {
            return h.to_owned();
        }
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether process `pid` exists on this host: `kill(pid, 0)` is anything
/// but ESRCH (EPERM means it exists under another user).
pub fn pid_alive(pid: i64) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Why a lease no longer blocks others: `None` while it is live.
fn dead_reason(l: &LeaseRow, now: i64, host: &str) -> Option<&'static str> {
    if l.expires_at_ms <= now {
        Some("expired")
    } else if l.hostname == host && !pid_alive(l.pid) {
        Some("owner_gone")
    } else {
        None
    }
}

fn held(id: &str, l: &LeaseRow) -> Error {
    Error::LeaseHeld {
        id: id.to_owned(),
        expires_at_ms: l.expires_at_ms,
        pid: l.pid,
        hostname: l.hostname.clone(),
    }
}

/// Checks a lease token's shape (never echoing it).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn validate_token(field: &str, token: &str) -> Result<()> {
    let ok = token.len() == TOKEN_PREFIX.len() + 64
        && token.starts_with(TOKEN_PREFIX)
        && token[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            "expected a lease token: `lease_` followed by 64 lowercase hex digits",
        ))
    }
}

fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn new_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// The lease rule every mutation of an existing session applies inside its
/// transaction (see the module docs).
///
/// # Errors
/// LEASE_HELD, LEASE_NOT_FOUND.
pub(super) fn check_lease(
    tx: &Connection,
    id: &str,
    presented: Option<&str>,
    now: i64,
) -> Result<()> {
    let row = ws::find_lease(tx, id).map_err(db)?;
    let Some(l) = row else {
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
    match (dead_reason(&l, now, &hostname()), presented) {
        (None, _) => Err(held(id, &l)),
        (Some(_), Some(_)) => Err(Error::LeaseNotFound { id: id.to_owned() }),
        (Some(_), None) => Ok(()),
    }
}

/// The lease `show` reports.
pub(super) fn lease_info(tx: &Connection, id: &str, now: i64) -> Result<Option<LeaseInfo>> {
    Ok(ws::find_lease(tx, id).map_err(db)?.map(|l| LeaseInfo {
        live: dead_reason(&l, now, &hostname()).is_none(),
        pid: l.pid,
        hostname: l.hostname,
        acquired_at_ms: l.acquired_at_ms,
        expires_at_ms: l.expires_at_ms,
    }))
}

#[derive(Serialize)]
struct LeaseData<'a> {
    pid: i64,
    hostname: &'a str,
    expires_at_ms: i64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    renewed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous: Option<&'a PreviousOwner>,
}

fn append_lease_event(
    ledger: &Ledger,
    tx: &Connection,
    id: &str,
    event_type: EventType,
    data: &LeaseData<'_>,
    m: Option<(&str, &str)>,
) -> Result<i64> {
    let data = serde_json::to_string(data).map_err(|e| Error::internal(e.to_string()))?;
    ev::insert_event(
        tx,
        &NewEvent {
            run_id: None,
            session_id: id,
            event_type: event_type.as_str(),
            actor_type: ledger.opts.actor,
            detail: None,
            data: Some(&data),
            idempotency: m,
        },
    )
    .map(|(_, seq)| seq)
    .map_err(db)
}

fn touch(tx: &Connection, id: &str, now: i64, if_rev: Option<i64>) -> Result<bool> {
    let n = match if_rev {
        None => tx
            .prepare_cached(ws::UPDATE_LIVE_TOUCH[0])
            .and_then(|mut st| st.execute(params![id, now])),
        Some(r) => tx
            .prepare_cached(ws::UPDATE_LIVE_TOUCH[1])
            .and_then(|mut st| st.execute(params![id, now, r])),
    };
    n.map(|n| n == 1).map_err(db)
}

impl Ledger {
    /// Takes the session's lease (event `lease_acquired`), renews the
    /// caller's own (`m.lease` = its token: same token, new expiry), or
    /// takes over a dead one (event `lease_taken_over`, naming the previous
    /// owner). rev + 1. Returns the token — the only time it is shown.
    ///
    /// Allowed on pending, active and paused sessions. `m.idempotency_key`
    /// is refused: a replay could not return the token.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (ttl outside 1..=604,800,000 ms, owner pid 0, a
    /// malformed token, an idempotency key); SESSION_NOT_FOUND;
    /// SESSION_INVALID_TRANSITION (terminal); SESSION_CONFLICT; LEASE_HELD
    /// (a live owner holds it; retryable); LEASE_NOT_FOUND (`m.lease` names
    /// no current lease); STORE_BUSY.
    ///
    /// Spec: issue 4 §6; Amber seed, "Session Lock".
    pub fn lock(&self, id: &str, req: &LockRequest, m: &Mutation) -> Result<Lease> {
        parse_session_id(id)?;
        validate_key(m)?;
        if m.idempotency_key.is_some() {
            return Err(Error::invalid(
                "idempotency_key",
                "is not accepted by lock: a replay could not return the token, which is shown once",
            ));
        }
        let ttl = req.ttl_ms.unwrap_or(LEASE_TTL_DEFAULT_MS);
        if !(1..=LEASE_TTL_MAX_MS).contains(&ttl) {
            return Err(Error::invalid(
                "ttl_ms",
                format!("must be from 1 to {LEASE_TTL_MAX_MS} ms"),
            ));
        }
        let pid = i64::from(req.owner_pid.unwrap_or_else(std::process::id));
        if pid <= 0 || i32::try_from(pid).is_err() {
            return Err(Error::invalid(
                "owner_pid",
                "must be a process id of 1 or more",
            ));
        }
        let host = hostname();
        let now = self.now_ms();
        self.write(|tx| {
            if !touch(tx, id, now, m.if_rev)? {
                return Err(diagnose(tx, id, Verb::Lease, m.if_rev)?);
            }
            let current = ws::find_lease(tx, id).map_err(db)?;
            let mine = match (&current, m.lease.as_deref()) {
                (Some(l), Some(t)) => token_sha256(t) == l.token_sha256,
                _ => false,
            };
            let mut previous = None;
            let (token, event) = if mine {
                let t = m.lease.clone().unwrap_or_default();
                if current.as_ref().is_some_and(|l| l.expires_at_ms <= now) {
                    return Err(Error::LeaseNotFound { id: id.to_owned() });
                }
                (t, EventType::LeaseAcquired)
            } else {
                if let Some(l) = &current {
                    match dead_reason(l, now, &host) {
                        None => return Err(held(id, l)),
                        Some(reason) => {
                            previous = Some(PreviousOwner {
                                pid: l.pid,
                                hostname: l.hostname.clone(),
                                expires_at_ms: l.expires_at_ms,
                                reason,
                            });
                        }
                    }
                }
                if m.lease.is_some() {
                    return Err(Error::LeaseNotFound { id: id.to_owned() });
                }
                let event = if previous.is_some() {
                    EventType::LeaseTakenOver
                } else {
                    EventType::LeaseAcquired
                };
                (new_token()?, event)
            };
            let expires_at_ms = now.saturating_add(ttl);
            let seq = append_lease_event(
                self,
                tx,
                id,
                event,
                &LeaseData {
                    pid,
                    hostname: &host,
                    expires_at_ms,
                    renewed: mine,
                    previous: previous.as_ref(),
                },
                None,
            )?;
            ws::upsert_lease(
                tx,
                id,
                &LeaseRow {
                    token_sha256: token_sha256(&token),
                    pid,
                    hostname: host.clone(),
                    acquired_at_ms: now,
                    expires_at_ms,
                    acquired_seq: seq,
                },
            )
            .map_err(db)?;
            Ok(Lease {
                token,
                session_id: id.to_owned(),
                pid,
                hostname: host.clone(),
                acquired_at_ms: now,
                expires_at_ms,
                renewed: mine,
                taken_over_from: previous,
                session: read_back(tx, id)?,
            })
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Releases the session's lease held with `token` (expired or not, as
    /// long as nobody took it over); event `lease_released`, rev + 1.
    /// `m.lease` is ignored (the token is the argument).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed token); SESSION_NOT_FOUND;
    /// SESSION_INVALID_TRANSITION (terminal); SESSION_CONFLICT; LEASE_HELD
    /// (another live owner holds it); LEASE_NOT_FOUND (no lease with that
    /// token); STORE_BUSY.
    ///
    /// Spec: issue 4 §6.
    pub fn unlock(&self, id: &str, token: &str, m: &Mutation) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_token("token", token)?;
        let m = Mutation {
            lease: None,
            ..m.clone()
        };
        validate_key(&m)?;
        let dg = super::sessions::key_digest(
            &m,
            &super::sessions::VerbDigest {
                verb: "unlock",
                text: None,
                step: None,
                data: Some(&token_sha256(token)),
                if_rev: m.if_rev,
            },
        )?;
        let host = hostname();
        let now = self.now_ms();
        self.mutate(id, &m, dg.as_deref(), |tx| {
            if !touch(tx, id, now, m.if_rev)? {
                return Err(diagnose(tx, id, Verb::Lease, m.if_rev)?);
            }
            let l = match ws::find_lease(tx, id).map_err(db)? {
                Some(l) if l.token_sha256 == token_sha256(token) => l,
                Some(l) if dead_reason(&l, now, &host).is_none() => return Err(held(id, &l)),
                _ => return Err(Error::LeaseNotFound { id: id.to_owned() }),
            };
            append_lease_event(
                self,
                tx,
                id,
                EventType::LeaseReleased,
                &LeaseData {
                    pid: l.pid,
                    hostname: &l.hostname,
                    expires_at_ms: l.expires_at_ms,
                    renewed: false,
                    previous: None,
                },
                m.idempotency_key.as_deref().zip(dg.as_deref()),
            )?;
            ws::delete_lease(tx, id).map_err(db)?;
            read_back(tx, id)
        })
    }
}
