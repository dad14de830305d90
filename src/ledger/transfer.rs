//! Export (docs/import-export.md): the `Ledger` methods behind `logbook export`.
//! Import is in `ledger::import`.
//!
//! Export reads in one snapshot and streams session by session. Each file
//! is written whole to a temp file and renamed into place; an export that
//! stops part-way (a signal, a failed write) removes its temp file and
//! reports the counts so far. Formats and mappings: `docs/import-export.md`.

use super::request::parse_session_id;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::Session;
use crate::store::rows::{StoredEvent, StoredRef, WorkflowRows};
use crate::store::Tx;
use crate::transfer::source::PrivateFile;
use crate::transfer::{jsonl, phelix, ExportFormat, ExportReport};
use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;

/// An export's error, and whether it came after writing began.
struct Failed {
    error: Error,
    midway: bool,
}

fn export_report(format: ExportFormat, out: Option<String>) -> ExportReport {
    ExportReport {
        format,
        sessions: 0,
        events: 0,
        purge_records: 0,
        tombstones: 0,
        out,
    }
}

/// Purge records read per page for a whole ledger's export.
const PURGE_PAGE: usize = 200;

fn write_err(e: io::Error) -> Error {
    Error::Io {
        context: "cannot write the export".to_owned(),
        source: e,
    }
}

/// One whole stored session: the session, its checkpoint seq, references,
/// events, and its runs, budget, snapshots and gates (read for jsonl only;
/// empty for Phelix, whose schema has no place for them).
type Full = (
    Session,
    Option<i64>,
    Vec<StoredRef>,
    Vec<StoredEvent>,
    WorkflowRows,
);

fn read_full(tx: &mut dyn Tx, id: &str, workflow: bool) -> Result<Option<Full>> {
    let Some((session, checkpoint_seq)) = tx.find_session_export(id)? else {
        return Ok(None);
    };
    let refs = tx.select_refs_full(id)?;
    let events = tx.select_events_full(id)?;
    let w = if workflow {
        tx.select_workflow(id)?
    } else {
        WorkflowRows::default()
    };
    Ok(Some((session, checkpoint_seq, refs, events, w)))
}

/// Sessions an export reads per page when it walks every session.
const EXPORT_PAGE: usize = 500;

impl Ledger {
    /// Walks the chosen sessions (all when `ids` is empty) in id order in
    /// one read snapshot, calling `f` with each whole session.
    fn walk_export(
        &self,
        ids: &[String],
        workflow: bool,
        skip_missing: bool,
        mut f: impl FnMut(&Full) -> Result<()>,
    ) -> Result<()> {
        let mut chosen: Vec<String> = Vec::with_capacity(ids.len());
        for id in ids {
            parse_session_id(id)?;
            chosen.push(id.clone());
        }
        chosen.sort();
        chosen.dedup();
        self.read(|tx| {
            if chosen.is_empty() {
                let mut after = String::new();
                loop {
                    let page = tx.sessions_page(&after, EXPORT_PAGE)?;
                    let Some((last, _)) = page.last() else {
                        return Ok(());
                    };
                    after = last.clone();
                    for (id, _) in &page {
                        if let Some(full) = read_full(tx, id, workflow)? {
                            f(&full)?;
                        }
                    }
                }
            } else {
                for id in chosen.iter().filter(|_| !skip_missing) {
                    if !tx.session_exists(id)? {
                        return Err(Error::SessionNotFound { id: id.clone() });
                    }
                }
                for id in &chosen {
                    if let Some(full) = read_full(tx, id, workflow)? {
                        f(&full)?;
                    }
                }
                Ok(())
            }
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Writes the chosen sessions (all when `ids` is empty) as logbook JSON
    /// Lines to `out`: one compact line per session, in session id order,
    /// every column and event (with its hash, hex), the session's runs,
    /// budget, checkpoint snapshots and gates, keys in a fixed order. Leases
    /// are not exported (a lease is a live lock held by a process).
    /// Importing the output into an empty database and exporting again
    /// gives the same bytes.
    ///
    /// Stops before the next session once
    /// [`LedgerOptions::interrupt`](crate::LedgerOptions::interrupt) is
    /// triggered.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (a malformed id), SESSION_NOT_FOUND (nothing is
    /// written then), STORE_IO (the output cannot be written), INTERRUPTED.
    /// An error after writing began is an [`Error::Incomplete`] whose
    /// details are the [`ExportReport`] of the sessions written so far.
    pub fn export_jsonl(&self, ids: &[String], out: &mut dyn Write) -> Result<ExportReport> {
        let mut report = export_report(ExportFormat::Jsonl, None);
        match self.jsonl_into(ids, out, &mut report, None) {
            Ok(()) => Ok(report),
            Err(f) => {
                let progress = format!(
                    "{} session(s) with {} event(s) were written before it stopped",
                    report.sessions, report.events
                );
                Err(self.export_stopped(f, &report, progress))
            }
        }
    }

    fn jsonl_into(
        &self,
        ids: &[String],
        out: &mut dyn Write,
        report: &mut ExportReport,
        mut present: Option<&mut HashSet<String>>,
    ) -> std::result::Result<(), Failed> {
        let mut midway = false;
        // The audit trail first: an import then meets a purged parent's
        // tombstone before its child, and an old incarnation's before a
        // new one of the same id.
        let audit = self.audit_lines(ids).map_err(|error| Failed {
            error,
            midway: false,
        })?;
        for (line, tombstones) in &audit {
            midway = true;
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| Failed {
                    error: write_err(e),
                    midway: true,
                })?;
            report.purge_records += 1;
            report.tombstones += tombstones;
        }
        let skip_missing = present.is_some();
        let walked = self.walk_export(ids, true, skip_missing, |(s, cs, refs, events, w)| {
            midway = true;
            if let Some(p) = present.as_deref_mut() {
                p.insert(s.session_id.to_string());
            }
            self.opts.interrupt.check()?;
            let mut line = jsonl::render(s, *cs, refs, events, w)
                .map_err(|e| Error::internal(format!("cannot render a session: {e}")))?;
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(write_err)?;
            report.sessions += 1;
            report.events += events.len() as u64;
            Ok(())
        });
        if let Err(error) = walked {
            return Err(Failed { error, midway });
        }
        out.flush().map_err(|e| Failed {
            error: write_err(e),
            midway: true,
        })
    }

    /// The purge records an export of `ids` carries (every one when `ids`
    /// is empty; else those holding the tombstones of the chosen sessions'
    /// purged ancestors, with just those tombstones), rendered, each with
    /// its tombstone count.
    fn audit_lines(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        use crate::store::rows::Tombstone;
        use std::collections::BTreeMap;
        let render = |p: &crate::store::rows::PurgeRow,
                      end: Option<&crate::store::rows::PurgeEndRow>,
                      t: &[Tombstone]| {
            jsonl::render_purge(p, end, t)
                .map(|l| (l, t.len() as u64))
                .map_err(|e| Error::internal(format!("cannot render a purge record: {e}")))
        };
        self.read(|tx| {
            let mut lines = Vec::new();
            if ids.is_empty() {
                let mut after = 0;
                loop {
                    let page = tx.purge_rows_page(after, PURGE_PAGE)?;
                    let Some((last, _)) = page.last() else {
                        return Ok(lines);
                    };
                    after = last.purge_id;
                    for (p, end) in &page {
                        let t = tx.purge_tombstones(p.purge_id)?;
                        lines.push(render(p, end.as_ref(), &t)?);
                    }
                }
            }
            // The purged ancestors of the chosen sessions, by purge.
            let mut by_purge: BTreeMap<i64, BTreeMap<(String, i64), Tombstone>> = BTreeMap::new();
            for id in ids {
                let mut parent = match tx.find_session(id)? {
                    Some(s) => s.parent_session_id,
                    None => None,
                };
                while let Some(p) = parent {
                    if tx.session_exists(&p)? {
                        break;
                    }
                    let Some(t) = tx.find_tombstone(&p)? else {
                        break;
                    };
                    parent = t.session.parent_session_id.clone();
                    let key = (t.session.session_id.clone(), t.session.insert_seq);
                    let held = by_purge.entry(t.purge_id).or_default();
                    if held.insert(key, t).is_some() {
                        break;
                    }
                }
            }
            for (purge_id, tombstones) in by_purge {
                if let Some((p, end)) = tx.purge_row(purge_id)? {
                    let t: Vec<Tombstone> = tombstones.into_values().collect();
                    lines.push(render(&p, end.as_ref(), &t)?);
                }
            }
            Ok(lines)
        })
    }

    /// An export error: as it is when nothing was written yet, else an
    /// [`Error::Incomplete`] with the counts so far (and INTERRUPTED as its
    /// cause when a signal stopped it).
    fn export_stopped(&self, f: Failed, report: &ExportReport, progress: String) -> Error {
        if !f.midway {
            return f.error;
        }
        Error::Incomplete {
            cause: Box::new(self.opts.interrupt.or(f.error)),
            progress,
            report: Box::new(serde_json::to_value(report).unwrap_or_default()),
        }
    }

    /// [`Ledger::export_jsonl`] into the file `path`: written whole to a
    /// temp file (mode 0600) beside it, then renamed over it; missing
    /// folders are created with mode 0700. On any error, the temp file is
    /// removed and `path` is left as it was.
    ///
    /// # Errors
    /// As [`Ledger::export_jsonl`]; INVALID_ARGUMENT (field `out`), before
    /// anything is read or written, when `path` is an existing folder or
    /// names the database or one of its companions ([`Ledger::own_files`]);
    /// an [`Error::Incomplete`]'s report
    /// then has `out` null (nothing was written to `path`).
    pub fn export_jsonl_file(&self, ids: &[String], path: &Path) -> Result<ExportReport> {
        self.jsonl_file(ids, path, "out", None)
    }

    /// [`Ledger::export_jsonl_file`] of those of `ids` that still exist
    /// (a purge's export: a session another purge removed since the plan
    /// is left out, not an error), its INVALID_ARGUMENT errors naming
    /// `export`; the report, and the ids written.
    pub(super) fn export_present_jsonl_file(
        &self,
        ids: &[String],
        path: &Path,
    ) -> Result<(ExportReport, HashSet<String>)> {
        let mut present = HashSet::new();
        let report = self.jsonl_file(ids, path, "export", Some(&mut present))?;
        Ok((report, present))
    }

    /// The jsonl export into a file; INVALID_ARGUMENT errors name `field`.
    fn jsonl_file(
        &self,
        ids: &[String],
        path: &Path,
        field: &str,
        present: Option<&mut HashSet<String>>,
    ) -> Result<ExportReport> {
        // Before anything is read: a folder cannot be renamed over, so the
        // whole export would be done for nothing (attack report #13).
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            let phelix = if field == "out" {
                ", or use --format phelix to write a folder"
            } else {
                ""
            };
            return Err(Error::invalid(
                field,
                format!(
                    "{} is a folder; a jsonl export is one file: name a file (in that folder, if you like){phelix}",
                    path.display()
                ),
            ));
        }
        let mut file = PrivateFile::create(path, &self.own_files()?, field)?;
        let mut report = export_report(ExportFormat::Jsonl, None);
        let done = self
            .jsonl_into(ids, file.writer(), &mut report, present)
            .and_then(|()| {
                file.finish().map_err(|error| Failed {
                    error,
                    midway: true,
                })
            });
        if let Err(f) = done {
            // Removes the temp file.
            drop(file);
            let progress = format!(
                "{} session(s) with {} event(s) were exported before it stopped; {} was not written (the temp file is removed)",
                report.sessions,
                report.events,
                path.display()
            );
            return Err(self.export_stopped(f, &report, progress));
        }
        report.out = Some(path.display().to_string());
        Ok(report)
    }

    /// Writes the chosen sessions (all when `ids` is empty) as a Phelix data
    /// folder: `dir/sessions/<session_id>.json`, each in Phelix's
    /// schema, compact and deterministic. Files are 0600; folders created
    /// here 0700. Each file is written whole (temp file, then rename), so a
    /// stopped export leaves whole files only.
    ///
    /// # Errors
    /// As [`Ledger::export_jsonl`]; INVALID_ARGUMENT (field `out`) when
    /// `dir`, `dir/sessions` or a file to be written there names the
    /// database or one of its companions ([`Ledger::own_files`]); an
    /// [`Error::Incomplete`]'s report counts the files written.
    pub fn export_phelix(&self, ids: &[String], dir: &Path) -> Result<ExportReport> {
        let sessions_dir = dir.join("sessions");
        // A folder made at a companion's name breaks the database as surely
        // as a file written there.
        let guard = self.own_files()?;
        guard.refuse(dir, "out")?;
        guard.refuse(&sessions_dir, "out")?;
        crate::transfer::source::create_private_dirs(&sessions_dir)?;
        let mut report = export_report(ExportFormat::Phelix, Some(dir.display().to_string()));
        let mut midway = false;
        let walked = self.walk_export(ids, false, false, |(s, _, _, events, _)| {
            midway = true;
            self.opts.interrupt.check()?;
            let text = phelix::render(s, events)
                .map_err(|e| Error::internal(format!("cannot render a session: {e}")))?;
            let target = sessions_dir.join(format!("{}.json", s.session_id));
            let mut f = PrivateFile::create(&target, &guard, "out")?;
            f.writer().write_all(text.as_bytes()).map_err(write_err)?;
            f.finish()?;
            report.sessions += 1;
            report.events += events.len() as u64;
            Ok(())
        });
        if let Err(error) = walked {
            let progress = format!(
                "{} session file(s) with {} event(s) were written to {} before it stopped",
                report.sessions,
                report.events,
                dir.display()
            );
            return Err(self.export_stopped(Failed { error, midway }, &report, progress));
        }
        Ok(report)
    }
}
