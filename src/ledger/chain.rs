//! `verify`: recompute every session's hash chain (docs/design.md, "Hash chain").

use super::request::parse_session_id;
use super::Ledger;
use crate::chain::GENESIS;
use crate::error::{Error, Result};
use crate::store::Tx;
use serde::Serialize;

/// Sessions `verify` reads per page when it walks every session.
const VERIFY_PAGE: usize = 1000;

/// What `verify` checked, when every chain holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Sessions whose chains were recomputed.
    pub sessions: u64,
    /// Events recomputed.
    pub events: u64,
    /// For each session asked for by id: its event count and head hash
    /// (the hash of its newest event). Record a head elsewhere to anchor the
    /// chain: it is what makes a wholesale rewrite evident too.
    pub heads: Vec<ChainHead>,
    /// Sessions a purge removed (docs/design.md, "Retention"): with no ids, every tombstone
    /// whose session is gone; with ids, those of the ids. Purged, not
    /// missing: their tombstones keep their event count and head hash.
    pub purged: u64,
    /// For each purged session asked for by id: the event count and head
    /// hash its tombstone keeps.
    pub purged_heads: Vec<ChainHead>,
    /// With an export file: the purged sessions whose exported chain was
    /// recomputed and matched their tombstones (at least 1: a file with
    /// none is refused, [`crate::Error::ExportUnproven`]).
    pub export_checked: Option<u64>,
    /// With an export file: every session of the file, in file order, with
    /// what was found for it (matched, not purged here, no tombstone).
    pub export_sessions: Option<Vec<super::verify_export::ExportSession>>,
}

/// A session's chain head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainHead {
    /// The session.
    pub session_id: String,
    /// Its number of events.
    pub events: u64,
    /// Hex SHA-256 of its newest event.
    pub head_hash: String,
}

/// The first problem in one session's chain.
struct Break {
    seq: i64,
    problem: &'static str,
    expected: String,
    found: String,
}

/// Walks one session's chain; `(events, head, first break)`.
fn check_session(tx: &mut dyn Tx, id: &str, rev: i64) -> Result<(u64, [u8; 32], Option<Break>)> {
    let mut count = 0u64;
    let mut prev = GENESIS;
    let mut broken: Option<Break> = None;
    tx.walk_chain(Some(id), &mut |row| {
        let want_seq = i64::try_from(count).unwrap_or(i64::MAX);
        count += 1;
        let brk = |problem, expected: String, found: String| Break {
            seq: row.seq,
            problem,
            expected,
            found,
        };
        if row.seq != want_seq {
            broken = Some(Break {
                seq: want_seq,
                problem: "seq",
                expected: want_seq.to_string(),
                found: row.seq.to_string(),
            });
            return false;
        }
        let stored_prev = row.prev_hash.as_deref().unwrap_or_default();
        if stored_prev != prev {
            broken = Some(brk(
                "prev_hash",
                hex::encode(prev),
                hex::encode(stored_prev),
            ));
            return false;
        }
        let want = row.expected_hash(&prev);
        let found = row.hash.as_deref().unwrap_or_default();
        if found != want {
            broken = Some(brk("hash", hex::encode(want), hex::encode(found)));
            return false;
        }
        prev = want;
        true
    })?;
    // Snapshots are covered through their checkpoint events, which record
    // each one's SHA-256 and size.
    if broken.is_none() {
        for link in tx.snapshot_links(id)? {
            if let Some((expected, found)) = link.record.check(&link.state, link.payload.as_deref())
            {
                broken = Some(Break {
                    seq: link.seq,
                    problem: "snapshot",
                    expected,
                    found,
                });
                break;
            }
        }
    }
    if broken.is_none() {
        if let Some(seq) = tx.first_missing_snapshot(id)? {
            broken = Some(Break {
                seq,
                problem: "snapshot",
                expected: "the snapshot its checkpoint event records".into(),
                found: "no snapshot row".into(),
            });
        }
    }
    // Every mutation bumps rev by one and appends at least one event, so a
    // session with fewer events than its rev lost some from the end.
    if broken.is_none() && i64::try_from(count).unwrap_or(i64::MAX) < rev {
        broken = Some(Break {
            seq: i64::try_from(count).unwrap_or(i64::MAX),
            problem: "missing_events",
            expected: format!("at least {rev} events"),
            found: format!("{count} events"),
        });
    }
    Ok((count, prev, broken))
}

impl Ledger {
    /// Recomputes the hash chain of the given sessions (all sessions when
    /// `ids` is empty) in one read snapshot.
    ///
    /// Checks, per session: seqs run 0, 1, 2, … with no gap; each
    /// `prev_hash` is the previous event's hash (zeros first); each `hash` is
    /// the SHA-256 of the encoding `logbook::chain` documents; and the
    /// session has at least `rev` events. With no ids it also looks for
    /// events of no session.
    ///
    /// # Errors
    /// LEDGER_TAMPERED with the first broken link (session, seq, problem,
    /// expected, found) and the number of broken sessions; INVALID_ARGUMENT
    /// for a malformed id; SESSION_NOT_FOUND.
    pub fn verify(&self, ids: &[String]) -> Result<VerifyReport> {
        for id in ids {
            parse_session_id(id)?;
        }
        self.read(|tx| {
            let mut report = VerifyReport {
                sessions: 0,
                events: 0,
                heads: Vec::new(),
                purged: 0,
                purged_heads: Vec::new(),
                export_checked: None,
                export_sessions: None,
            };
            let mut first: Option<(String, Break)> = None;
            let mut broken_sessions = 0u64;
            let mut one = |tx: &mut dyn Tx, id: String, rev: i64, head: bool| -> Result<()> {
                let (n, hash, brk) = check_session(tx, &id, rev)?;
                report.sessions += 1;
                report.events += n;
                if let Some(b) = brk {
                    broken_sessions += 1;
                    if first.is_none() {
                        first = Some((id.clone(), b));
                    }
                }
                if head {
                    report.heads.push(ChainHead {
                        session_id: id,
                        events: n,
                        head_hash: hex::encode(hash),
                    });
                }
                Ok(())
            };
            if ids.is_empty() {
                let mut after = String::new();
                loop {
                    let page = tx.sessions_page(&after, VERIFY_PAGE)?;
                    let Some((last, _)) = page.last() else { break };
                    after = last.clone();
                    for (id, rev) in page {
                        one(tx, id, rev, false)?;
                    }
                }
                report.purged = super::verify_export::count_purged(tx)?;
                if let Some((id, seq)) = tx.first_orphan_event()? {
                    broken_sessions += 1;
                    if first.is_none() {
                        first = Some((
                            id,
                            Break {
                                seq,
                                problem: "orphan_events",
                                expected: "no events".into(),
                                found: "events of a session that does not exist".into(),
                            },
                        ));
                    }
                }
            } else {
                for id in ids {
                    let Some((_, rev)) = tx.select_status_rev(id)? else {
                        let Some(t) = tx.find_tombstone(id)? else {
                            return Err(Error::SessionNotFound { id: id.clone() });
                        };
                        report.purged += 1;
                        report.purged_heads.push(ChainHead {
                            session_id: id.clone(),
                            events: u64::try_from(t.session.events).unwrap_or(0),
                            head_hash: hex::encode(t.session.last_hash.unwrap_or_default()),
                        });
                        continue;
                    };
                    one(tx, id.clone(), rev, true)?;
                }
            }
            match first {
                Some((session_id, b)) => Err(Error::Tampered {
                    session_id,
                    seq: b.seq,
                    problem: b.problem.into(),
                    expected: b.expected,
                    found: b.found,
                    broken_sessions,
                }),
                None => Ok(report),
            }
        })
    }
}
