//! Import (docs/import-export.md): the `Ledger` methods behind `logbook import`.
//!
//! Import streams its input: it reads and parses a batch (at most
//! [`IMPORT_BATCH_SESSIONS`] sessions or 4 MiB of them) with no lock held,
//! then writes it in one `BEGIN IMMEDIATE` transaction (through the writer
//! queue), one SAVEPOINT per session: a session is written whole or not at
//! all, and the lock is never held while waiting for input. A signal is
//! acted on between batches; an import that stops part-way reports what the
//! committed batches did (docs/design.md, "Interruption"). Formats and mappings:
//! `docs/import-export.md`.

use super::Ledger;
use crate::error::{Error, Result};
use crate::store::Tx;
use crate::transfer::source::{DirSource, Item, JsonlSource, Loc, Source};
use crate::transfer::{
    check_not_future, check_timeline, Bad, ImportFormat, ImportReport, Rejection,
    IMPORT_BATCH_SESSIONS,
};
use std::io::BufRead;
use std::path::Path;

/// A session met before its parent: retried after the rest of the input.
struct Deferred {
    loc: Loc,
    /// A stdin line, until it is spilled (see `Source::spill`).
    raw: Option<Vec<u8>>,
    file: String,
    line: Option<u64>,
    session_id: Option<String>,
}

/// A rejection for the report. The file path comes from the input tree (a
/// folder or file name, an Amber checkpoint id), so it passes the redactor
/// like any other text that is printed.
fn rejection(file: &str, line: Option<u64>, session_id: Option<String>, b: Bad) -> Rejection {
    Rejection {
        file: crate::redact::redact(file).into_owned(),
        line: b.line.or(line),
        session_id,
        field: b.field,
        reason: b.reason,
    }
}

impl Ledger {
    /// Imports sessions from `src` in `format`: a JSON Lines file, a Phelix
    /// data folder (`src/sessions/*.json`, or `src` itself holding the
    /// files) or an Amber tree (`src/.amber/sessions/<uuid>/`,
    /// `src/sessions/<uuid>/` or `src/<uuid>/`).
    ///
    /// Streams: at most one batch (256 sessions or 4 MiB) is in memory at a
    /// time. Idempotent: a session
    /// whose id already exists is counted as skipped and left untouched.
    /// All-or-nothing per session: a refused session writes no row and is
    /// listed (file, line, field, reason) in the report — among them, in
    /// every format, a session whose row disagrees with its own timeline
    /// (status, rev, `ended_at_ms`, `final_result`, `checkpoint_seq`;
    /// docs/import-export.md, "The row and its timeline"). `progress` is
    /// called after each committed batch with the counts so far.
    ///
    /// A signal ([`LedgerOptions::interrupt`](crate::LedgerOptions::interrupt))
    /// is acted on between batches: the import stops with INTERRUPTED.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (`src` is not a file/folder as the format needs),
    /// STORE_IO (the input cannot be read, or the disk fails), STORE_BUSY,
    /// INTERRUPTED. Batches committed before such an error stay; re-running
    /// the import skips them. Once the import has begun, the error is an
    /// [`Error::Incomplete`] whose details are the [`ImportReport`] of the
    /// committed batches (imported, skipped, rejected, events, rejections)
    /// plus the cause's own details.
    pub fn import(
        &self,
        format: ImportFormat,
        src: &Path,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<ImportReport> {
        match format {
            ImportFormat::Jsonl => {
                if !src.is_file() {
                    return Err(Error::invalid("SRC", "must be a file for --format jsonl"));
                }
                let mut source = JsonlSource::open(src)?;
                self.run_import(format, &mut source, progress)
            }
            _ => {
                let mut source = DirSource::open(format, src, self.opts.actor)?;
                self.run_import(format, &mut source, progress)
            }
        }
    }

    /// Imports logbook JSON Lines from a stream (e.g. stdin), labelled
    /// `label` in rejections. As [`Ledger::import`]; a session whose parent
    /// comes later in the stream waits in an unlinked 0600 temp file (a
    /// stream cannot be read twice), not in memory.
    ///
    /// # Errors
    /// As [`Ledger::import`].
    pub fn import_jsonl_stream(
        &self,
        reader: Box<dyn BufRead>,
        label: &str,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<ImportReport> {
        let mut source = JsonlSource::from_reader(reader, label);
        self.run_import(ImportFormat::Jsonl, &mut source, progress)
    }

    /// Runs an import; an error part-way (a disk or lock failure, a signal)
    /// becomes an [`Error::Incomplete`] carrying the report of what the
    /// batches committed before it did.
    fn run_import(
        &self,
        format: ImportFormat,
        source: &mut dyn Source,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<ImportReport> {
        let mut report = ImportReport::new(format);
        match self.import_batches(source, &mut report, progress) {
            Ok(()) => Ok(report),
            Err(e) => Err(Error::Incomplete {
                cause: Box::new(self.opts.interrupt.or(e)),
                progress: format!(
                    "imported {}, skipped {}, rejected {}, {} event(s) written before it stopped \
                     (the batches committed so far stay; running the import again skips them)",
                    report.imported, report.skipped, report.rejected, report.events
                ),
                report: Box::new(serde_json::to_value(&report).unwrap_or_default()),
            }),
        }
    }

    fn import_batches(
        &self,
        source: &mut dyn Source,
        report: &mut ImportReport,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<()> {
        let interrupt = &self.opts.interrupt;
        let mut written = Written::default();
        let mut deferred: Vec<Deferred> = Vec::new();
        // Each batch is read and parsed before its transaction opens, so the
        // writer lock is never held while waiting for input (a slow stdin).
        // A signal is acted on between batches: a batch is written whole.
        loop {
            interrupt.check()?;
            let batch = next_batch(source)?;
            if batch.is_empty() {
                break;
            }
            interrupt.check()?;
            self.write_batch(batch, &mut written, report, &mut deferred, progress)?;
            spill(source, &mut deferred)?;
        }
        // Children met before their parents, until a round imports nothing.
        while !deferred.is_empty() {
            let round = std::mem::take(&mut deferred);
            let before = report.imported;
            let mut pending = round.into_iter().peekable();
            while pending.peek().is_some() {
                interrupt.check()?;
                let mut batch = Vec::new();
                let mut bytes = 0;
                for d in pending.by_ref() {
                    match source.reload(&d.loc)? {
                        Some(item) => {
                            bytes += item_bytes(&item);
                            batch.push(item);
                        }
                        None => {
                            let b = Bad::new("record", "could not be read again");
                            report.reject(rejection(&d.file, d.line, d.session_id, b));
                        }
                    }
                    if batch.len() >= IMPORT_BATCH_SESSIONS || bytes >= IMPORT_BATCH_BYTES {
                        break;
                    }
                }
                interrupt.check()?;
                self.write_batch(batch, &mut written, report, &mut deferred, progress)?;
                spill(source, &mut deferred)?;
            }
            if report.imported == before {
                for d in deferred.drain(..) {
                    let b = Bad::new(
                        "parent_session_id",
                        "names no session of the database or of this input",
                    );
                    report.reject(rejection(&d.file, d.line, d.session_id, b));
                }
                progress(report);
            }
        }
        Ok(())
    }
}

/// Input bytes a parsed batch may hold before it is written (besides the
/// [`IMPORT_BATCH_SESSIONS`] count): 4 MiB.
const IMPORT_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Roughly how many bytes a parsed item holds.
fn item_bytes(item: &Item) -> usize {
    match &item.rows {
        Err(_) => 256,
        Ok(r) => {
            let opt = |o: &Option<String>| o.as_ref().map_or(0, String::len);
            let w = &r.workflow;
            w.runs
                .iter()
                .map(|r| 256 + opt(&r.input) + opt(&r.output) + r.metadata.len())
                .sum::<usize>()
                + w.snapshots
                    .iter()
                    .map(|s| 128 + s.state.len())
                    .sum::<usize>()
                + w.gates.len() * 256
                + r.context.len()
                + r.metadata.len()
                + opt(&r.goal)
                + r.events
                    .iter()
                    .map(|e| 128 + e.event_type.len() + opt(&e.detail) + opt(&e.data))
                    .sum::<usize>()
                + 512
        }
    }
}

/// Moves the raw stdin lines of newly deferred sessions to the source's
/// spill file, so memory does not hold them.
fn spill(source: &mut dyn Source, deferred: &mut [Deferred]) -> Result<()> {
    for d in deferred.iter_mut() {
        if let Some(raw) = d.raw.take() {
            d.loc = source.spill(&raw, d.line.unwrap_or(0))?;
        }
    }
    Ok(())
}

/// Reads the next batch: up to [`IMPORT_BATCH_SESSIONS`] items or
/// [`IMPORT_BATCH_BYTES`] of them, whichever comes first.
fn next_batch(source: &mut dyn Source) -> Result<Vec<Item>> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while batch.len() < IMPORT_BATCH_SESSIONS && bytes < IMPORT_BATCH_BYTES {
        let Some(item) = source.next_item()? else {
            break;
        };
        bytes += item_bytes(&item);
        batch.push(item);
    }
    Ok(batch)
}

/// The sessions this import has written, as ranges of their insertion keys:
/// one `(after, last)` range per committed batch. Within a batch's
/// transaction no other writer can insert, so its sessions take the keys
/// right after the largest one at its start. Another process's sessions
/// (a concurrent import of the same file) fall outside every range and are
/// reported as skipped, never as duplicates within this input.
#[derive(Debug, Default)]
struct Written {
    batches: Vec<(i64, i64)>,
}

impl Written {
    /// Whether `insert_seq` was written by this import: by a committed
    /// batch, or by the open one (keys after `open_after`).
    fn contains(&self, insert_seq: i64, open_after: i64) -> bool {
        insert_seq > open_after
            || self
                .batches
                .iter()
                .any(|&(after, last)| insert_seq > after && insert_seq <= last)
    }
}

impl Ledger {
    /// Writes one parsed batch in one `BEGIN IMMEDIATE` transaction.
    fn write_batch(
        &self,
        mut batch: Vec<Item>,
        written: &mut Written,
        report: &mut ImportReport,
        deferred: &mut Vec<Deferred>,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Every format, once converted: the row must agree with its own
        // timeline (docs/import-export.md, "The row and its timeline"), and
        // no time may lie far in the future, which would become every later
        // write's time (the clock never goes below the newest session's or
        // event's).
        let now = self.now_ms();
        for item in &mut batch {
            if let Err(b) = item.rows.as_ref().map_or(Ok(()), |r| {
                check_timeline(r).and_then(|()| check_not_future(r, now))
            }) {
                item.rows = Err(b);
            }
        }
        // Each attempt starts from the report and deferrals as they were:
        // a store may run the transaction again (a server's transient
        // error), and only the attempt that commits counts.
        let actor = self.opts.actor.as_str();
        // On SQLite a session whose parent was purged is written with the
        // parent foreign key off (as a purge deletes such a parent): only
        // batches that hold a child of a session not here need it.
        let orphan = batch
            .iter()
            .any(|i| matches!(&i.rows, Ok(r) if r.parent_session_id.is_some()))
            && self.read(|tx| {
                for i in &batch {
                    if let Ok(r) = &i.rows {
                        if let Some(p) = &r.parent_session_id {
                            if !tx.session_exists(p)? {
                                return Ok(true);
                            }
                        }
                    }
                }
                Ok(false)
            })?;
        let mut body = |tx: &mut dyn Tx| {
            let mut snapshot = report.clone();
            let mut later = Vec::new();
            let after = tx.max_insert_seq()?;
            for item in &batch {
                apply(tx, item, written, after, actor, &mut snapshot, &mut later)?;
            }
            Ok(((after, tx.max_insert_seq()?), snapshot, later))
        };
        let (range, snapshot, later) = if orphan {
            self.store.write_purge(&mut body)
        } else {
            self.write(&mut body)
        }
        .map_err(|e| self.fill_path(e))?;
        written.batches.push(range);
        *report = snapshot;
        deferred.extend(later);
        progress(report);
        Ok(())
    }
}

/// Applies one item inside the batch's transaction.
fn apply(
    tx: &mut dyn Tx,
    item: &Item,
    written: &Written,
    open_after: i64,
    actor: &str,
    report: &mut ImportReport,
    deferred: &mut Vec<Deferred>,
) -> Result<()> {
    let Item {
        file,
        line,
        session_id,
        rows,
        loc,
        raw,
        purge,
    } = item;
    let line = *line;
    if let Some(p) = purge {
        return apply_purge(tx, p, file, line, actor, report);
    }
    let rows = match rows {
        Ok(r) => r,
        Err(b) => {
            report.reject(rejection(file, line, session_id.clone(), b.clone()));
            return Ok(());
        }
    };
    let id = Some(rows.session_id.clone());
    match tx.find_insert_seq(&rows.session_id)? {
        Some(seq) if written.contains(seq, open_after) => {
            let b = Bad::new("session_id", "appears more than once in this input");
            report.reject(rejection(file, line, id, b));
            return Ok(());
        }
        Some(_) => {
            report.skipped += 1;
            return Ok(());
        }
        None => {}
    }
    if let Some(p) = &rows.parent_session_id {
        // A purged parent (its tombstone here, carried or not) is a parent
        // for an ended session; a live session's parent is a session.
        let purged = !tx.session_exists(p)? && tx.find_tombstone(p)?.is_some();
        if purged && !rows.status.is_terminal() {
            let b = Bad::new(
                "parent_session_id",
                "names a purged session: a live session's parent must be a session of the database",
            );
            report.reject(rejection(file, line, id, b));
            return Ok(());
        }
        if !purged && !tx.session_exists(p)? {
            deferred.push(Deferred {
                loc: loc.clone(),
                raw: raw.clone(),
                file: file.clone(),
                line,
                session_id: id,
            });
            return Ok(());
        }
    }
    for (i, r) in rows.workflow.runs.iter().enumerate() {
        if tx.run_exists(&r.run_id)? {
            let b = Bad::new(
                format!("runs[{i}].run_id"),
                "is already the id of a run in the database (of another session)",
            );
            report.reject(rejection(file, line, id, b));
            return Ok(());
        }
    }
    tx.savepoint()?;
    match tx.insert_session_rows(rows) {
        Ok(true) => {
            tx.release_savepoint()?;
            report.imported += 1;
            report.events += rows.events.len() as u64;
        }
        Ok(false) => {
            tx.rollback_to_savepoint()?;
            tx.release_savepoint()?;
            let b = Bad::new(
                "record",
                "was refused by the database (a constraint or trigger failed)",
            );
            report.reject(rejection(file, line, id, b));
        }
        Err(e) => {
            let _ = tx.rollback_to_savepoint();
            return Err(e);
        }
    }
    Ok(())
}

/// Applies one purge record's line: the record (met again: the one
/// already here), its end, and each tombstone not here yet, in one
/// savepoint (all of the line or none). A tombstone whose session id is a
/// session of this ledger cannot be carried (it would purge that session):
/// the line is refused, naming it.
fn apply_purge(
    tx: &mut dyn Tx,
    p: &crate::transfer::jsonl::PurgeLine,
    file: &str,
    line: Option<u64>,
    actor: &str,
    report: &mut ImportReport,
) -> Result<()> {
    use crate::store::rows::{NewPurge, PurgeEnd, Tombstone};
    let mut carried: Vec<&Tombstone> = Vec::new();
    for (i, t) in p.tombstones.iter().enumerate() {
        let s = &t.session;
        match tx.tombstone_at(&s.session_id, s.insert_seq)? {
            Some(here) if here.session == t.session && here.purged_at_ms == t.purged_at_ms => {}
            Some(_) => {
                let b = Bad::new(
                    format!("tombstones[{i}]"),
                    "differs from the tombstone of the same session incarnation in the database",
                );
                report.reject(rejection(file, line, Some(s.session_id.clone()), b));
                return Ok(());
            }
            None if tx.session_exists(&s.session_id)? => {
                let b = Bad::new(
                    format!("tombstones[{i}].session_id"),
                    "names a session of the database: its purge cannot be carried while the session is here",
                );
                report.reject(rejection(file, line, Some(s.session_id.clone()), b));
                return Ok(());
            }
            None => carried.push(t),
        }
    }
    let r = &p.purge;
    let rec = NewPurge {
        at_ms: r.at_ms,
        actor_type: &r.actor_type,
        actor_id: r.actor_id.as_deref(),
        filter: &r.filter,
        sessions: r.sessions,
        events: r.events,
        bytes: r.bytes,
    };
    tx.savepoint()?;
    let done = (|| -> Result<()> {
        tx.declare_writer(actor)?;
        let purge_id = match tx.find_purge_like(&rec)? {
            Some(id) => id,
            None => {
                report.purge_records += 1;
                tx.insert_purge(&rec)?
            }
        };
        if let Some(e) = &p.end {
            let ended = tx
                .purge_row(purge_id)?
                .is_some_and(|(_, end)| end.is_some());
            if !ended {
                tx.insert_purge_end(&PurgeEnd {
                    purge_id,
                    at_ms: e.at_ms,
                    outcome: if e.outcome == "superseded" {
                        "superseded"
                    } else {
                        "done"
                    },
                    skipped: e.skipped,
                })?;
            }
        }
        for t in &carried {
            tx.purge_session(&Tombstone {
                purge_id,
                ..(*t).clone()
            })?;
            report.tombstones += 1;
        }
        Ok(())
    })();
    match done {
        Ok(()) => tx.release_savepoint(),
        Err(e) => {
            let _ = tx.rollback_to_savepoint();
            Err(e)
        }
    }
}
