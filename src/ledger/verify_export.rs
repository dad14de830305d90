//! `verify --export FILE`: each session of an export file, its chain
//! recomputed from the file, against what this ledger knows of it: a
//! tombstone that must agree (docs/design.md, "Retention"), the live session, or nothing
//! (README.md, "Retention: purging old sessions"; docs/import-export.md,
//! "Checking an export against the tombstones").

use super::Ledger;
use crate::chain::GENESIS;
use crate::error::{Error, Result};
use crate::store::Tx;
use crate::transfer::json::Obj;
use crate::transfer::jsonl;
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;

/// Tombstones read per page.
const PAGE: usize = 1000;

/// What `verify --export` found for one session of the file.
///
/// Serializes as its snake_case name: `"matched"`, `"not_purged_here"`,
/// `"no_tombstone"`. A session whose tombstone here disagrees with the
/// file has no outcome: the check fails with LEDGER_TAMPERED instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportOutcome {
    /// The session is gone from this ledger and its newest tombstone
    /// records the event count and head hash the file's chain ends in.
    Matched,
    /// The session exists in this ledger (never purged here, or imported
    /// again since): `verify` proves its chain from the database itself,
    /// and the file proves nothing about it.
    NotPurgedHere,
    /// This ledger has neither the session nor a tombstone of it: the file
    /// is not an export of this ledger's sessions.
    NoTombstone,
}

impl ExportOutcome {
    /// The wire name: `matched`, `not_purged_here` or `no_tombstone`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Matched => "matched",
            Self::NotPurgedHere => "not_purged_here",
            Self::NoTombstone => "no_tombstone",
        }
    }
}

/// One session of an export file and what `verify --export` found for it.
///
/// Serializes as `{"events","head_hash","line","outcome","session_id"}`
/// (keys in alphabetical order, as every error detail: it is also part of
/// the details of [`Error::ExportUnproven`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportSession {
    /// The session's number of events in the file.
    pub events: u64,
    /// Hex SHA-256 of its newest event, recomputed from the file (what a
    /// tombstone must record).
    pub head_hash: String,
    /// The 1-based line of the file that holds it.
    pub line: u64,
    /// What was found.
    pub outcome: ExportOutcome,
    /// The session (`ses_` + 16 hex).
    pub session_id: String,
}

/// Tombstones whose session is gone (not imported again).
pub(super) fn count_purged(tx: &mut dyn Tx) -> Result<u64> {
    let mut n = 0u64;
    let mut after = (String::new(), i64::MIN);
    loop {
        let page = tx.tombstones_page((&after.0, after.1), PAGE)?;
        for t in &page {
            if !tx.session_exists(&t.session.session_id)? {
                n += 1;
            }
        }
        let Some(last) = page.last() else {
            return Ok(n);
        };
        after = (last.session.session_id.clone(), last.session.insert_seq);
        if page.len() < PAGE {
            return Ok(n);
        }
    }
}

/// The reason of [`Error::ExportUnproven`]: how many sessions, by outcome.
fn unproven_reason(sessions: &[ExportSession]) -> String {
    let count = |o| sessions.iter().filter(|s| s.outcome == o).count();
    format!(
        "proves nothing about this ledger: none of its {} session(s) is purged here with a \
         tombstone that matches ({} not purged here, {} with no tombstone here)",
        sessions.len(),
        count(ExportOutcome::NotPurgedHere),
        count(ExportOutcome::NoTombstone)
    )
}

impl Ledger {
    /// [`Ledger::verify`], then, with `export`, every session of that JSON
    /// Lines file (a `purge --export` or `export` output), each with its
    /// outcome ([`ExportOutcome`]) in [`VerifyReport::export_sessions`]
    /// (file order) and the matched ones counted in
    /// [`VerifyReport::export_checked`]: a session gone from this ledger
    /// must have a tombstone whose event count and head hash are those its
    /// chain, recomputed from the file's events, ends in.
    ///
    /// Succeeds only when at least one session matched and none
    /// mismatched: a file none of whose sessions matches proves nothing.
    ///
    /// # Errors
    /// As [`Ledger::verify`]; STORE_IO (the file cannot be read);
    /// INVALID_ARGUMENT (field `export`: a line is not logbook JSON Lines,
    /// the line number in the reason; or [`Error::ExportUnproven`], no
    /// session of the file matched — every session is then in its
    /// details); LEDGER_TAMPERED (problem `export_hash`: the file's own
    /// hashes do not hold; `tombstone`: the export and a tombstone
    /// disagree; the first such session stops the check).
    ///
    /// [`VerifyReport::export_sessions`]: super::VerifyReport::export_sessions
    /// [`VerifyReport::export_checked`]: super::VerifyReport::export_checked
    pub fn verify_with_export(
        &self,
        ids: &[String],
        export: Option<&Path>,
    ) -> Result<super::VerifyReport> {
        let mut report = self.verify(ids)?;
        let Some(path) = export else {
            return Ok(report);
        };
        let sessions = self.check_export(path)?;
        let matched = sessions
            .iter()
            .filter(|s| s.outcome == ExportOutcome::Matched)
            .count();
        if matched == 0 {
            return Err(Error::ExportUnproven {
                reason: unproven_reason(&sessions),
                sessions,
            });
        }
        report.export_checked = Some(u64::try_from(matched).unwrap_or(u64::MAX));
        report.export_sessions = Some(sessions);
        Ok(report)
    }

    /// Every session of the export file at `path` with its outcome, in
    /// file order; the first mismatch stops it (LEDGER_TAMPERED).
    fn check_export(&self, path: &Path) -> Result<Vec<ExportSession>> {
        let file = std::fs::File::open(path).map_err(|e| Error::StoreIo {
            context: format!("cannot read {}: {e}", path.display()),
        })?;
        let mut sessions = Vec::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| Error::StoreIo {
                context: format!("cannot read {}: {e}", path.display()),
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let bad =
                |reason: String| Error::invalid("export", format!("line {}: {reason}", i + 1));
            let o = Obj::parse(&line, "").map_err(|b| bad(format!("{} {}", b.field, b.reason)))?;
            // A purge record's line (the audit trail an export carries)
            // names no session of the file.
            if jsonl::is_purge_line(&o) {
                continue;
            }
            let rows = match jsonl::parse(&o) {
                Ok(rows) => rows,
                // The file's own chain does not hold: it was changed.
                Err(b) if b.field.ends_with("].hash") => {
                    return Err(Error::Tampered {
                        session_id: jsonl::peek_id(&o).unwrap_or_default(),
                        seq: b
                            .field
                            .trim_start_matches("events[")
                            .split(']')
                            .next()
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(0),
                        problem: "export_hash".into(),
                        expected: "the hash its event and the chain before it give".into(),
                        found: format!(
                            "another in {} (the file was changed after it was written)",
                            path.display()
                        ),
                        broken_sessions: 1,
                    })
                }
                Err(b) => return Err(bad(format!("`{}` {}", b.field, b.reason))),
            };
            let mut prev = GENESIS;
            for (seq, e) in rows.events.iter().enumerate() {
                prev = e.hash(
                    &rows.session_id,
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    &prev,
                );
            }
            let n = i64::try_from(rows.events.len()).unwrap_or(i64::MAX);
            let id = &rows.session_id;
            let (exists, tombstone) =
                self.read(|tx| Ok((tx.session_exists(id)?, tx.find_tombstone(id)?)))?;
            let outcome = match tombstone {
                _ if exists => ExportOutcome::NotPurgedHere,
                None => ExportOutcome::NoTombstone,
                Some(t) => {
                    let want = t.session.last_hash.clone().unwrap_or_default();
                    if n != t.session.events || prev[..] != want[..] {
                        return Err(Error::Tampered {
                            session_id: rows.session_id.clone(),
                            seq: n - 1,
                            problem: "tombstone".into(),
                            expected: format!(
                                "{} events ending in {}",
                                t.session.events,
                                hex::encode(&want)
                            ),
                            found: format!(
                                "{n} events ending in {} in {}",
                                hex::encode(prev),
                                path.display()
                            ),
                            broken_sessions: 1,
                        });
                    }
                    ExportOutcome::Matched
                }
            };
            sessions.push(ExportSession {
                events: u64::try_from(n).unwrap_or(0),
                head_hash: hex::encode(prev),
                line: u64::try_from(i + 1).unwrap_or(u64::MAX),
                outcome,
                session_id: rows.session_id,
            });
        }
        Ok(sessions)
    }
}
