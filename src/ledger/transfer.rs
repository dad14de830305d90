//! Export and import (issue 3 §4): the `Ledger` methods behind
//! `logbook export` and `logbook import`.
//!
//! Export reads in one snapshot and streams session by session. Import
//! streams its input: it reads and parses a batch (at most
//! [`IMPORT_BATCH_SESSIONS`] sessions or 4 MiB of them) with no lock held,
//! then writes it in one `BEGIN IMMEDIATE` transaction (through the writer
//! queue), one SAVEPOINT per session: a session is written whole or not at
//! all, and the lock is never held while waiting for input. Formats and mappings: `docs/import-export.md`.

use super::db;
use super::sessions::parse_session_id;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::Session;
use crate::store::sessions as ss;
use crate::store::transfer::{self as st, StoredEvent, StoredRef, WorkflowRows};
use crate::transfer::source::{DirSource, Item, JsonlSource, Loc, PrivateFile, Source};
use crate::transfer::{
    jsonl, phelix, Bad, ExportFormat, ExportReport, ImportFormat, ImportReport, Rejection,
    IMPORT_BATCH_SESSIONS,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::io::{self, BufRead, Write};
use std::path::Path;

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

fn read_full(conn: &Connection, id: &str, workflow: bool) -> Result<Option<Full>> {
    let found = conn
        .prepare_cached(ss::SELECT_SESSION)
        .and_then(|mut s| s.query_row(params![id], ss::map_session).optional())
        .map_err(db)?;
    let Some((mut session, insert_seq, checkpoint_seq)) = found else {
        return Ok(None);
    };
    ss::complete_session(conn, &mut session, insert_seq, checkpoint_seq).map_err(db)?;
    let refs = st::select_refs(conn, id).map_err(db)?;
    let events = st::select_events_full(conn, id).map_err(db)?;
    let w = if workflow {
        st::select_workflow(conn, id).map_err(db)?
    } else {
        WorkflowRows::default()
    };
    Ok(Some((session, checkpoint_seq, refs, events, w)))
}

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
    /// Walks the chosen sessions (all when `ids` is empty) in id order in
    /// one read snapshot, calling `f` with each whole session.
    fn walk_export(
        &self,
        ids: &[String],
        workflow: bool,
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
                st::for_each_id(tx, |id| match read_full(tx, id, workflow)? {
                    Some(full) => f(&full),
                    None => Ok(()),
                })
            } else {
                for id in &chosen {
                    if !ss::session_exists(tx, id).map_err(db)? {
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
    /// # Errors
    /// INVALID_ARGUMENT (a malformed id), SESSION_NOT_FOUND (nothing is
    /// written then), STORE_IO (the output cannot be written).
    pub fn export_jsonl(&self, ids: &[String], out: &mut dyn Write) -> Result<ExportReport> {
        let mut report = ExportReport {
            format: ExportFormat::Jsonl,
            sessions: 0,
            events: 0,
            out: None,
        };
        self.walk_export(ids, true, |(s, cs, refs, events, w)| {
            let mut line = jsonl::render(s, *cs, refs, events, w)
                .map_err(|e| Error::internal(format!("cannot render a session: {e}")))?;
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(write_err)?;
            report.sessions += 1;
            report.events += events.len() as u64;
            Ok(())
        })?;
        out.flush().map_err(write_err)?;
        Ok(report)
    }

    /// [`Ledger::export_jsonl`] into the file `path`: written whole to a
    /// temp file (mode 0600) beside it, then renamed over it; missing
    /// folders are created with mode 0700.
    ///
    /// # Errors
    /// As [`Ledger::export_jsonl`]; INVALID_ARGUMENT (field `out`), before
    /// anything is written, when `path` names the database or one of its
    /// companions ([`Ledger::own_files`]).
    pub fn export_jsonl_file(&self, ids: &[String], path: &Path) -> Result<ExportReport> {
        let mut file = PrivateFile::create(path, &self.own_files()?, "out")?;
        let mut report = self.export_jsonl(ids, file.writer())?;
        file.finish()?;
        report.out = Some(path.display().to_string());
        Ok(report)
    }

    /// Writes the chosen sessions (all when `ids` is empty) as a Phelix data
    /// folder: `dir/sessions/<session_id>.json`, each in the Phelix seed's
    /// schema, compact and deterministic. Files are 0600; folders created
    /// here 0700.
    ///
    /// # Errors
    /// As [`Ledger::export_jsonl`]; INVALID_ARGUMENT (field `out`) when
    /// `dir`, `dir/sessions` or a file to be written there names the
    /// database or one of its companions ([`Ledger::own_files`]).
    pub fn export_phelix(&self, ids: &[String], dir: &Path) -> Result<ExportReport> {
        let sessions_dir = dir.join("sessions");
        // A folder made at a companion's name breaks the database as surely
        // as a file written there.
        let guard = self.own_files()?;
        guard.refuse(dir, "out")?;
        guard.refuse(&sessions_dir, "out")?;
        crate::transfer::source::create_private_dirs(&sessions_dir)?;
        let mut report = ExportReport {
            format: ExportFormat::Phelix,
            sessions: 0,
            events: 0,
            out: Some(dir.display().to_string()),
        };
        self.walk_export(ids, false, |(s, _, _, events, _)| {
            let text = phelix::render(s, events)
                .map_err(|e| Error::internal(format!("cannot render a session: {e}")))?;
            let target = sessions_dir.join(format!("{}.json", s.session_id));
            let mut f = PrivateFile::create(&target, &guard, "out")?;
            f.writer().write_all(text.as_bytes()).map_err(write_err)?;
            f.finish()?;
            report.sessions += 1;
            report.events += events.len() as u64;
            Ok(())
        })?;
        Ok(report)
    }

    /// Imports sessions from `src` in `format`: a JSON Lines file, a Phelix
    /// data folder (`src/sessions/*.json`, or `src` itself holding the
    /// files) or an Amber tree (`src/.amber/sessions/<uuid>/`,
    /// `src/sessions/<uuid>/` or `src/<uuid>/`).
    ///
    /// Streams: at most one batch (256 sessions or 4 MiB) is in memory at a
    /// time. Idempotent: a session
    /// whose id already exists is counted as skipped and left untouched.
    /// All-or-nothing per session: a refused session writes no row and is
    /// listed (file, line, field, reason) in the report. `progress` is
    /// called after each committed batch with the counts so far.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (`src` is not a file/folder as the format needs),
    /// STORE_IO (the input cannot be read, or the disk fails), STORE_BUSY.
    /// Batches committed before such an error stay; re-running the import
    /// skips them.
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

    fn run_import(
        &self,
        format: ImportFormat,
        source: &mut dyn Source,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<ImportReport> {
        let mut report = ImportReport::new(format);
        let mut written = Written::default();
        let mut deferred: Vec<Deferred> = Vec::new();
        // Each batch is read and parsed before its transaction opens, so the
        // writer lock is never held while waiting for input (a slow stdin).
        loop {
            let batch = next_batch(source)?;
            if batch.is_empty() {
                break;
            }
            self.write_batch(batch, &mut written, &mut report, &mut deferred, progress)?;
            spill(source, &mut deferred)?;
        }
        // Children met before their parents, until a round imports nothing.
        while !deferred.is_empty() {
            let round = std::mem::take(&mut deferred);
            let before = report.imported;
            let mut pending = round.into_iter().peekable();
            while pending.peek().is_some() {
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
                self.write_batch(batch, &mut written, &mut report, &mut deferred, progress)?;
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
                progress(&report);
            }
        }
        Ok(report)
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
        batch: Vec<Item>,
        written: &mut Written,
        report: &mut ImportReport,
        deferred: &mut Vec<Deferred>,
        progress: &mut dyn FnMut(&ImportReport),
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut snapshot = report.clone();
        let range = self
            .write(|tx| {
                let after = st::max_insert_seq(tx).map_err(db)?;
                for item in batch {
                    apply(tx, item, written, after, &mut snapshot, deferred)?;
                }
                Ok((after, st::max_insert_seq(tx).map_err(db)?))
            })
            .map_err(|e| self.fill_path(e))?;
        written.batches.push(range);
        *report = snapshot;
        progress(report);
        Ok(())
    }
}

/// Applies one item inside the batch's transaction.
fn apply(
    tx: &Connection,
    item: Item,
    written: &Written,
    open_after: i64,
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
    } = item;
    let rows = match rows {
        Ok(r) => r,
        Err(b) => {
            report.reject(rejection(&file, line, session_id, b));
            return Ok(());
        }
    };
    let id = Some(rows.session_id.clone());
    match st::find_insert_seq(tx, &rows.session_id).map_err(db)? {
        Some(seq) if written.contains(seq, open_after) => {
            let b = Bad::new("session_id", "appears more than once in this input");
            report.reject(rejection(&file, line, id, b));
            return Ok(());
        }
        Some(_) => {
            report.skipped += 1;
            return Ok(());
        }
        None => {}
    }
    if let Some(p) = &rows.parent_session_id {
        if !ss::session_exists(tx, p).map_err(db)? {
            deferred.push(Deferred {
                loc,
                raw,
                file,
                line,
                session_id: id,
            });
            return Ok(());
        }
    }
    for (i, r) in rows.workflow.runs.iter().enumerate() {
        if st::run_exists(tx, &r.run_id).map_err(db)? {
            let b = Bad::new(
                format!("runs[{i}].run_id"),
                "is already the id of a run in the database (of another session)",
            );
            report.reject(rejection(&file, line, id, b));
            return Ok(());
        }
    }
    st::exec(tx, st::SAVEPOINT).map_err(db)?;
    match st::insert_session_rows(tx, &rows) {
        Ok(()) => {
            st::exec(tx, st::RELEASE).map_err(db)?;
            report.imported += 1;
            report.events += rows.events.len() as u64;
        }
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
            st::exec(tx, st::ROLLBACK_TO).map_err(db)?;
            st::exec(tx, st::RELEASE).map_err(db)?;
            let b = Bad::new(
                "record",
                "was refused by the database (a constraint or trigger failed)",
            );
            report.reject(rejection(&file, line, id, b));
        }
        Err(e) => {
            let _ = st::exec(tx, st::ROLLBACK_TO);
            return Err(db(e));
        }
    }
    Ok(())
}
