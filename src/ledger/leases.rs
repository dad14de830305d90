//! Leases: Amber's session lock, as a row in `session_leases`
//! (docs/design.md, "Leases").
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
//!   Amber's lock "prevents concurrent modifications" — and applies
//!   when there is no lease or only a dead one.

use super::guards::{dead_reason, held, token_sha256, EXPIRED, OWNER_GONE};
use super::request::{key_digest, parse_session_id, validate_key, Mutation, VerbDigest};
use super::write::{one_or, read_back, OneEvent, Op, Write};
use super::written::Written;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{EventType, Session, Verb};
use crate::store::rows::LeaseRow;
use crate::store::{OneOutcome, OneSide, SessionChange, Tx};
use serde::Serialize;

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

fn new_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// The lease `show` reports.
pub(super) fn lease_info(l: LeaseRow, now: i64) -> LeaseInfo {
    LeaseInfo {
        live: dead_reason(&l, now, &hostname()).is_none(),
        pid: l.pid,
        hostname: l.hostname,
        acquired_at_ms: l.acquired_at_ms,
        expires_at_ms: l.expires_at_ms,
    }
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

fn lease_data(data: &LeaseData<'_>) -> Result<String> {
    serde_json::to_string(data).map_err(|e| Error::internal(e.to_string()))
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
    /// Rule: docs/design.md, "Leases"; Amber's session lock.
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
        let op = Op {
            id,
            verb: Verb::Lease,
            m,
            digest: None,
        };
        let refused = || Error::internal("lock takes no idempotency key, so nothing replays");
        let pipeline = |sent: Option<&Sent>| {
            self.mutate(
                op,
                |_| Ok(()),
                |w, ()| take(w, m, ttl, pid, &host, sent),
                &mut |_, _| Err(refused()),
            )
        };
        // On a server, a free lease (none, or an expired one, taken over)
        // or the caller's own live one: one statement (docs/postgres.md,
        // "One round trip per write"). It
        // takes no key: the token, new or presented, with the lease's time
        // and expiry, tells whether a statement whose reply was lost was
        // applied.
        let now = self.now_ms();
        let sent = Sent {
            token: match &m.lease {
                Some(t) => t.clone(),
                None => new_token()?,
            },
            now,
            expires_at_ms: now.saturating_add(ttl),
        };
        let renewed = m.lease.is_some();
        let data = lease_data(&LeaseData {
            pid,
            hostname: &host,
            expires_at_ms: sent.expires_at_ms,
            renewed,
            previous: None,
        })?;
        let sha = token_sha256(&sent.token);
        let one = OneEvent {
            event_type: EventType::LeaseAcquired.as_str(),
            data: Some(&data),
            side: Some(OneSide::LeaseTake {
                token_sha256: &sha,
                pid,
                hostname: &host,
                expires_at_ms: sent.expires_at_ms,
            }),
            ..OneEvent::default()
        };
        // With `--if-rev`, the transaction: after a lost reply its rev
        // check would come before the lease that tells the answer.
        if m.if_rev.is_some() {
            return pipeline(None).map(Written::into_inner);
        }
        let outcome = match self.send_one(op, &one, now, None, |w| self.store.lease_one(w))? {
            OneOutcome::Applied(taken) => {
                let (session, previous) = *taken;
                return Ok(Lease {
                    token: sent.token.clone(),
                    session_id: id.to_owned(),
                    pid,
                    hostname: host.clone(),
                    acquired_at_ms: now,
                    expires_at_ms: sent.expires_at_ms,
                    renewed,
                    taken_over_from: previous.map(|l| PreviousOwner {
                        pid: l.pid,
                        hostname: l.hostname,
                        expires_at_ms: l.expires_at_ms,
                        reason: EXPIRED,
                    }),
                    session,
                });
            }
            OneOutcome::NotApplied => return pipeline(None).map(Written::into_inner),
            OneOutcome::Unknown => OneOutcome::Unknown,
        };
        one_or(outcome, || pipeline(Some(&sent))).map(Written::into_inner)
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
    /// Rule: docs/design.md, "Leases".
    pub fn unlock(&self, id: &str, token: &str, m: &Mutation) -> Result<Written<Session>> {
        parse_session_id(id)?;
        validate_token("token", token)?;
        let m = Mutation {
            lease: None,
            ..m.clone()
        };
        validate_key(&m)?;
        let dg = key_digest(
            &m,
            &VerbDigest {
                verb: "unlock",
                text: None,
                step: None,
                data: Some(&token_sha256(token)),
                if_rev: m.if_rev,
            },
        )?;
        let host = hostname();
        let op = Op {
            id,
            verb: Verb::Lease,
            m: &m,
            digest: dg.as_deref(),
        };
        let pipeline = || {
            self.mutate(
                op,
                |_| Ok(()),
                |w, ()| release(w, token, &host),
                &mut |tx, _| read_back(tx, id),
            )
        };
        // On a server, with a key, while the lease has this token: one
        // statement (docs/postgres.md, "One round trip per write").
        let sha = token_sha256(token);
        let one = OneEvent {
            event_type: EventType::LeaseReleased.as_str(),
            side: Some(OneSide::LeaseRelease { token_sha256: &sha }),
            ..OneEvent::default()
        };
        self.write_one_or(op, &one, pipeline)
    }
}

/// What `lock` sent as one statement: its token, time and expiry, by which
/// the pipeline recognizes that statement's lease after a lost reply.
struct Sent {
    token: String,
    now: i64,
    expires_at_ms: i64,
}

/// The body of `lock`: the live-touch UPDATE, then the lease taken,
/// renewed or taken over (module docs), its event and row.
fn take(
    w: &mut Write<'_, '_>,
    m: &Mutation,
    ttl: i64,
    pid: i64,
    host: &str,
    sent: Option<&Sent>,
) -> Result<Lease> {
    let (id, now) = (w.id(), w.now());
    let current = w.state().lease.clone();
    if let Some(sent) = sent {
        // After a lost reply: the lease the statement would have written
        // tells whether it was applied. Another token's lease, or none
        // where a renewal was sent, cannot tell (that statement may have
        // been applied, then taken over or released): unknown, and nothing
        // is written. No lease where a new one was sent: it was not applied
        // (only its token, never shown, could release it), so it is now.
        let ours = current
            .as_ref()
            .is_some_and(|l| l.token_sha256 == token_sha256(&sent.token));
        if !ours && (current.is_some() || m.lease.is_some()) {
            return Err(Error::CommitUnknown {
                location: String::new(),
            });
        }
    }
    if let (Some(l), Some(sent)) = (&current, sent) {
        // The statement sent first was applied (its reply was lost): the
        // lease it wrote answers, and nothing is written again.
        if l.token_sha256 == token_sha256(&sent.token)
            && l.acquired_at_ms == sent.now
            && l.expires_at_ms == sent.expires_at_ms
            && l.pid == pid
            && l.hostname == host
        {
            return Ok(Lease {
                token: sent.token.clone(),
                session_id: id.to_owned(),
                pid,
                hostname: host.to_owned(),
                acquired_at_ms: sent.now,
                expires_at_ms: sent.expires_at_ms,
                renewed: m.lease.is_some(),
                taken_over_from: taken_over_by(w.tx(), id, l.acquired_seq)?,
                session: w.session()?,
            });
        }
    }
    w.update(SessionChange::default())?;
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
            match dead_reason(l, now, host) {
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
        // After a lost reply, the token that statement carried.
        let token = match sent {
            Some(s) => s.token.clone(),
            None => new_token()?,
        };
        (token, event)
    };
    let expires_at_ms = now.saturating_add(ttl);
    let data = lease_data(&LeaseData {
        pid,
        hostname: host,
        expires_at_ms,
        renewed: mine,
        previous: previous.as_ref(),
    })?;
    let seq = w.event(event.as_str(), None, Some(&data), None)?;
    w.tx().upsert_lease(
        id,
        &LeaseRow {
            token_sha256: token_sha256(&token),
            pid,
            hostname: host.to_owned(),
            acquired_at_ms: now,
            expires_at_ms,
            acquired_seq: seq,
        },
    )?;
    Ok(Lease {
        token,
        session_id: id.to_owned(),
        pid,
        hostname: host.to_owned(),
        acquired_at_ms: now,
        expires_at_ms,
        renewed: mine,
        taken_over_from: previous,
        session: w.session()?,
    })
}

/// The owner a lease's event (`lease_taken_over` at `seq`) names as the
/// one it took over, for a statement whose reply was lost; `None` for a
/// lease acquired or renewed.
///
/// # Errors
/// STORE_CORRUPT when the event's data is not the lease's.
fn taken_over_by(tx: &mut dyn Tx, id: &str, seq: i64) -> Result<Option<PreviousOwner>> {
    #[derive(serde::Deserialize)]
    struct Data {
        previous: Option<Previous>,
    }
    #[derive(serde::Deserialize)]
    struct Previous {
        pid: i64,
        hostname: String,
        expires_at_ms: i64,
        reason: String,
    }
    let Some(e) = tx.select_events(id, seq - 1, 1)?.into_iter().next() else {
        return Ok(None);
    };
    if e.seq != seq || e.event_type != EventType::LeaseTakenOver.as_str() {
        return Ok(None);
    }
    let data = e.data.as_deref().map(|d| d.get()).unwrap_or("{}");
    let corrupt = |why: String| Error::Corrupt {
        path: String::new(),
        reason: format!("the lease_taken_over event at seq {seq} of session {id}: {why}"),
    };
    let d: Data = serde_json::from_str(data).map_err(|e| corrupt(e.to_string()))?;
    d.previous
        .map(|p| {
            let reason = match p.reason.as_str() {
                EXPIRED => EXPIRED,
                OWNER_GONE => OWNER_GONE,
                other => return Err(corrupt(format!("reason {other:?} is none logbook writes"))),
            };
            Ok(PreviousOwner {
                pid: p.pid,
                hostname: p.hostname,
                expires_at_ms: p.expires_at_ms,
                reason,
            })
        })
        .transpose()
}

/// The body of `unlock`: the live-touch UPDATE, the lease event, the row
/// deleted.
fn release(w: &mut Write<'_, '_>, token: &str, host: &str) -> Result<Session> {
    let (id, now) = (w.id(), w.now());
    w.update(SessionChange::default())?;
    let l = match w.state().lease.clone() {
        Some(l) if l.token_sha256 == token_sha256(token) => l,
        Some(l) if dead_reason(&l, now, host).is_none() => return Err(held(id, &l)),
        _ => return Err(Error::LeaseNotFound { id: id.to_owned() }),
    };
    let data = lease_data(&LeaseData {
        pid: l.pid,
        hostname: &l.hostname,
        expires_at_ms: l.expires_at_ms,
        renewed: false,
        previous: None,
    })?;
    w.event(EventType::LeaseReleased.as_str(), None, Some(&data), None)?;
    w.tx().delete_lease(id)?;
    w.session()
}
