//! `verify --export FILE`: each purged session's exported chain, recomputed
//! from the file, against its tombstone (SPEC §8).

use super::Ledger;
use crate::chain::GENESIS;
use crate::error::{Error, Result};
use crate::store::Tx;
use crate::transfer::json::Obj;
use crate::transfer::jsonl;
use std::io::BufRead;
use std::path::Path;

/// Tombstones read per page.
const PAGE: usize = 1000;

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

impl Ledger {
    /// [`Ledger::verify`], then, with `export`, every line of that JSON
    /// Lines file (a `purge --export` or `export` output) whose session has
    /// a tombstone: its chain recomputed from the file's events must end
    /// in the tombstone's event count and head hash.
    ///
    /// # Errors
    /// As [`Ledger::verify`]; STORE_IO (the file cannot be read);
    /// INVALID_ARGUMENT (a line is not logbook JSON Lines; field `export`,
    /// the line number in the reason); LEDGER_TAMPERED (problem
    /// `export_hash`: the file's own hashes do not hold; `tombstone`: the
    /// export and the tombstone disagree).
    pub fn verify_with_export(
        &self,
        ids: &[String],
        export: Option<&Path>,
    ) -> Result<super::VerifyReport> {
        let mut report = self.verify(ids)?;
        let Some(path) = export else {
            return Ok(report);
        };
        let file = std::fs::File::open(path).map_err(|e| Error::StoreIo {
            context: format!("cannot read {}: {e}", path.display()),
        })?;
        let mut checked = 0u64;
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
            let Some(t) = self.read(|tx| tx.find_tombstone(&rows.session_id))? else {
                continue;
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
            checked += 1;
        }
        report.export_checked = Some(checked);
        Ok(report)
    }
}
