//! The `Ledger` handle: the public behaviour the CLI and MCP both call.
//!
//! A `Ledger` owns one SQLite connection. Every mutation is one
//! `BEGIN IMMEDIATE` transaction; every multi-row read is one read
//! transaction; between calls the connection holds no transaction, so the WAL
//! can always checkpoint. Several handles in several processes may use one
//! file at once (SPEC §6).

mod admin;
mod budgets;
mod chain;
mod feed;
mod gates;
mod import;
mod leases;
mod query;
mod run_end;
mod runs;
mod sessions;
mod snapshots;
mod stages;
mod transfer;
mod tree;
mod written;

pub use admin::{BackupReport, CheckLevel, DoctorCheck, DoctorReport, WAL_PROBLEM_BYTES};
pub use budgets::{RecordUsage, SetBudget};
pub use chain::{ChainHead, VerifyReport};
pub use feed::{FeedPage, FeedQuery, FEED_LIMIT_DEFAULT, FEED_LIMIT_MAX};
pub use run_end::SESSION_ENDED;
pub use runs::{CreateRun, RunUsageDelta, RUN_ERROR_CODE_MAX, RUN_JSON_MAX_BYTES};
pub use stages::{StageAction, StageRequest, ATTEMPT_MAX};

pub use gates::GateList;
pub use leases::{
    hostname, pid_alive, validate_token, Lease, LeaseInfo, LockRequest, PreviousOwner,
    LEASE_TTL_DEFAULT_MS, LEASE_TTL_MAX_MS,
};
pub use snapshots::{ForkRequest, SnapshotInfo, SnapshotList};
pub use tree::{ChildCounts, SessionTree, TreeNode, TREE_MAX_NODES};
pub use written::{Replayed, Written};

pub use sessions::{
    AppendEvent, CheckpointRequest, CreateSession, EventPage, ListSessions, Mutation, Resolved,
    ResolvedState, SessionPage, SessionView,
};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::model::ActorType;
use crate::store::files::FileId;
use crate::store::tx::Tx;
use crate::store::{self, writelock::WriterLock, StoreConfig, SyncMode};
use rusqlite::Connection;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// A driver error inside a `Ledger` method's transaction, classified by
/// SQLite's code; the method's `fill_path` adds the path and busy timeout.
pub(super) fn db(e: rusqlite::Error) -> Error {
    Error::from_sqlite(e, 0)
}

/// WAL pages after which a checkpoint runs at `synchronous=NORMAL`: 5,000
/// (≈ 20 MiB of WAL), five times SQLite's default, so that each hot page is
/// copied once per 5,000 WAL pages instead of many times (as fast as 10,000
/// in BENCHMARKS.md). The checkpoint runs on a helper thread, outside every
/// caller's COMMIT (`store::checkpointer`), so no call waits for the copy;
/// only a WAL at twice this (the helper behind) is checkpointed inline.
pub const WAL_CHECKPOINT_PAGES_NORMAL: u32 = 5_000;

/// WAL pages after which a commit checkpoints at `synchronous=FULL`: 2,000,
/// inside the COMMIT that reaches it (≈ 4 ms). Every commit's fsync
/// dominates at FULL, and an fsync of a WAL that is still growing costs
/// ≈ 1.6× one overwritten in place, so a small WAL that wraps early is what
/// a fresh process needs; 2,000 measured as fast as 10,000 in the steady
/// state (BENCHMARKS.md, "A fresh process's first checkpoints").
pub const WAL_CHECKPOINT_PAGES_FULL: u32 = 2_000;

/// Default page cache of a [`Ledger`]: 16 MiB (SQLite's default is 2 MiB).
/// A checkpoint reads its session's previous event (the hash chain's link);
/// with 10,000 sessions written in random order that row lies ≈ 2.5 MB back
/// in the timeline, just past SQLite's default, and each miss is a `pread`
/// (BENCHMARKS.md, "Hash chain overhead"). Memory is taken only as pages are
/// read. The CLI, one command per process, keeps SQLite's default: a
/// streaming import or export would only fill a larger cache.
pub const DEFAULT_PAGE_CACHE_KIB: u32 = 16 * 1024;

/// Default busy timeout: 5000 ms.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5000;

/// How to open a [`Ledger`].
///
/// Spec: §1 (storage), §6 (library).
#[derive(Debug, Clone)]
pub struct LedgerOptions {
    /// The database file. `None` resolves it as SPEC §1 says: `$LOGBOOK_DB`,
    /// else `$XDG_DATA_HOME/logbook/logbook.db`, else
    /// `$HOME/.local/share/logbook/logbook.db`.
    pub path: Option<PathBuf>,
    /// How long a write waits for the lock before STORE_BUSY, in ms.
    pub busy_timeout_ms: u64,
    /// `synchronous=FULL` (default) or `NORMAL`.
    pub sync: SyncMode,
    /// Recorded as the actor of every change: `Lib` unless the entry point
    /// says otherwise (the CLI uses `Cli`, the MCP server `Mcp`).
    pub actor: ActorType,
    /// Source of "now".
    pub clock: Clock,
    /// WAL pages after which a checkpoint runs. `None` (default): by the
    /// sync mode — [`WAL_CHECKPOINT_PAGES_FULL`] inside the COMMIT at FULL,
    /// [`WAL_CHECKPOINT_PAGES_NORMAL`] on a helper thread at NORMAL.
    /// `Some(n)`: `n` pages, in the same place; `Some(0)` disables
    /// checkpoints (benchmarks that count WAL frames).
    pub wal_autocheckpoint_pages: Option<u32>,
    /// Page cache in KiB; default [`DEFAULT_PAGE_CACHE_KIB`] (16 MiB).
    pub page_cache_kib: u32,
    /// Polled by the long operations (export, import, backup) between two
    /// sessions or batches: once triggered they stop there with
    /// INTERRUPTED (issue 13 §13). Default: never triggered.
    pub interrupt: crate::interrupt::Interrupt,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            path: None,
            busy_timeout_ms: DEFAULT_BUSY_TIMEOUT_MS,
            sync: SyncMode::Full,
            actor: ActorType::Lib,
            clock: Clock::System,
            wal_autocheckpoint_pages: None,
            page_cache_kib: DEFAULT_PAGE_CACHE_KIB,
            interrupt: crate::interrupt::Interrupt::default(),
        }
    }
}

impl LedgerOptions {
    /// Options for the file at `path`, other fields default.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        LedgerOptions {
            path: Some(path.into()),
            ..Self::default()
        }
    }

    /// Defaults overlaid with the environment: `LOGBOOK_DB`,
    /// `LOGBOOK_BUSY_TIMEOUT_MS`, `LOGBOOK_SYNC` (`full` or `normal`).
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a malformed `LOGBOOK_BUSY_TIMEOUT_MS` or
    /// `LOGBOOK_SYNC`.
    pub fn from_env() -> Result<Self> {
        let mut o = Self::default();
        if let Some(v) = env_nonempty("LOGBOOK_BUSY_TIMEOUT_MS") {
            o.busy_timeout_ms = parse_timeout("LOGBOOK_BUSY_TIMEOUT_MS", &v)?;
        }
        if let Some(v) = env_nonempty("LOGBOOK_SYNC") {
            o.sync = match v.to_ascii_lowercase().as_str() {
                "full" => SyncMode::Full,
                "normal" => SyncMode::Normal,
                _ => {
                    return Err(Error::invalid(
                        "LOGBOOK_SYNC",
                        "expected `full` or `normal`",
                    ))
                }
            };
        }
        Ok(o)
    }
}

/// Parses a busy timeout in ms: an integer in 0..=3,600,000.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn parse_timeout(field: &str, v: &str) -> Result<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n <= 3_600_000)
        .ok_or_else(|| Error::invalid(field, "expected an integer number of ms from 0 to 3600000"))
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Resolves the database path (SPEC §1): `explicit`, else `$LOGBOOK_DB`, else
/// `$XDG_DATA_HOME/logbook/logbook.db`, else
/// `$HOME/.local/share/logbook/logbook.db`.
///
/// # Errors
/// INVALID_ARGUMENT when none of them is set.
pub fn resolve_path(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = env_nonempty("LOGBOOK_DB") {
        return Ok(PathBuf::from(p));
    }
    if let Some(x) = env_nonempty("XDG_DATA_HOME") {
        if Path::new(&x).is_absolute() {
            return Ok(Path::new(&x).join("logbook").join("logbook.db"));
        }
    }
    if let Some(h) = env_nonempty("HOME") {
        return Ok(Path::new(&h).join(".local/share/logbook/logbook.db"));
    }
    Err(Error::invalid(
        "db",
        "no database path: pass --db, or set LOGBOOK_DB, XDG_DATA_HOME or HOME",
    ))
}

/// The identity of the file just opened at `path`, and the path made
/// absolute.
fn opened_id(path: &Path) -> Result<(FileId, PathBuf)> {
    let io = |e| Error::Io {
        context: format!("cannot read {}", path.display()),
        source: e,
    };
    let id = FileId::of(path).map_err(io)?;
    Ok((id, std::path::absolute(path).map_err(io)?))
}

/// A handle on one logbook database.
///
/// # Examples
/// ```
/// use logbook::{CreateSession, Ledger, LedgerOptions, Mutation};
/// let dir = tempfile::tempdir().unwrap();
/// let ledger = Ledger::open(LedgerOptions::at(dir.path().join("l.db"))).unwrap();
/// let s = ledger.create_session(CreateSession::titled("fix the login bug")).unwrap();
/// let done = ledger.complete(&s.session_id.to_string(), "fixed", &Mutation::default()).unwrap();
/// assert_eq!((done.rev, done.status.as_str()), (2, "completed"));
/// ```
#[derive(Debug)]
pub struct Ledger {
    /// Declared before `conn`: dropped (its helper stopped, its connection
    /// closed) before the writer's connection closes, so that one can be
    /// the last and checkpoint the WAL away.
    checkpointer: Option<store::checkpointer::Checkpointer>,
    conn: Connection,
    path: PathBuf,
    opts: LedgerOptions,
    writer_lock: RefCell<WriterLock>,
    /// Opened with [`Ledger::open_read_only`]: every write is refused
    /// before it touches anything (not even the writer lock file).
    read_only: bool,
    /// The (device, inode) of the file this handle opened, and its path made
    /// absolute at open (a later change of the current folder does not
    /// matter); every call checks that the path still names that file
    /// ([`Ledger::check_file`]).
    file_id: FileId,
    file_path: PathBuf,
}

impl Ledger {
    /// Opens (creating and migrating if needed) the database.
    ///
    /// # Errors
    /// STORE_IO, STORE_CORRUPT, STORE_VERSION_TOO_NEW, STORE_BUSY,
    /// INVALID_ARGUMENT (no path could be resolved).
    pub fn open(opts: LedgerOptions) -> Result<Self> {
        Self::open_with(opts, true)
    }

    /// Opens (migrating if needed) a database that already exists: as
    /// [`Ledger::open`], but a missing file is STORE_IO ("cannot read PATH")
    /// and nothing is created — for checks (`doctor`, `verify`), where a
    /// mistyped path must not become a new, empty, healthy database.
    ///
    /// # Errors
    /// As [`Ledger::open`].
    pub fn open_existing(opts: LedgerOptions) -> Result<Self> {
        Self::open_with(opts, false)
    }

    fn open_with(opts: LedgerOptions, create: bool) -> Result<Self> {
        let path = resolve_path(opts.path.as_deref())?;
        let pages = opts.wal_autocheckpoint_pages.unwrap_or(match opts.sync {
            SyncMode::Full => WAL_CHECKPOINT_PAGES_FULL,
            SyncMode::Normal => WAL_CHECKPOINT_PAGES_NORMAL,
        });
        let background = opts.sync == SyncMode::Normal && pages > 0;
        let mut conn = store::open(&StoreConfig {
            path: path.clone(),
            busy_timeout_ms: opts.busy_timeout_ms,
            sync: opts.sync,
            wal_autocheckpoint_pages: if background { 0 } else { pages },
            page_cache_kib: opts.page_cache_kib,
            create,
        })?;
        let checkpointer = if background {
            Some(
                store::checkpointer::Checkpointer::attach(&mut conn, &path, pages).map_err(
                    |e| {
                        store::open::with_path(
                            Error::from_sqlite(e, 0),
                            &path.display().to_string(),
                        )
                    },
                )?,
            )
        } else {
            None
        };
        let (file_id, file_path) = opened_id(&path)?;
        let writer_lock = RefCell::new(WriterLock::new(&path));
        Ok(Ledger {
            checkpointer,
            conn,
            path,
            opts,
            writer_lock,
            read_only: false,
            file_id,
            file_path,
        })
    }

    /// Opens an existing database for reading only (the CLI's `--read-only`):
    /// it never creates, migrates or writes the file, so it works on a file
    /// the user may only read. Every mutation through this handle fails with
    /// STORE_IO ("the database is read-only") and changes nothing.
    ///
    /// # Errors
    /// STORE_IO (missing, unreadable, or needing a migration), STORE_CORRUPT,
    /// STORE_VERSION_TOO_NEW, INVALID_ARGUMENT (no path could be resolved).
    pub fn open_read_only(opts: LedgerOptions) -> Result<Self> {
        let path = resolve_path(opts.path.as_deref())?;
        let conn = store::open::open_read_only(&path, opts.busy_timeout_ms)?;
        let (file_id, file_path) = opened_id(&path)?;
        let writer_lock = RefCell::new(WriterLock::new(&path));
        Ok(Ledger {
            checkpointer: None,
            conn,
            path,
            opts,
            writer_lock,
            read_only: true,
            file_id,
            file_path,
        })
    }

    /// A read-only handle on this handle's file alone, opened as immutable
    /// (its `-wal` ignored; `doctor`'s `wal_match` check).
    fn file_alone(&self) -> Result<Ledger> {
        let conn = store::open::open_file_alone(&self.path).map_err(|e| self.db_err(e))?;
        Ok(Ledger {
            checkpointer: None,
            conn,
            path: self.path.clone(),
            opts: self.opts.clone(),
            writer_lock: RefCell::new(WriterLock::new(&self.path)),
            read_only: true,
            file_id: self.file_id,
            file_path: self.file_path.clone(),
        })
    }

    /// The WAL checkpoints this handle's helper thread has run, and those a
    /// COMMIT of this handle ran itself because the helper had fallen
    /// behind; both 0 at `synchronous=FULL`, where SQLite's autocheckpoint
    /// runs inside the COMMIT that reaches it (diagnostics, benchmarks).
    pub fn wal_checkpoints(&self) -> (u64, u64) {
        self.checkpointer
            .as_ref()
            .map_or((0, 0), |c| (c.runs(), c.inline_runs()))
    }

    /// The database file this handle uses.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &LedgerOptions {
        &self.opts
    }

    /// Reads a pragma of this handle's connection (diagnostics and tests),
    /// e.g. `journal_mode`, `synchronous`, `busy_timeout`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a pragma name outside a fixed allow-list.
    pub fn pragma(&self, name: &str) -> Result<String> {
        const ALLOWED: &[&str] = &[
            "journal_mode",
            "synchronous",
            "busy_timeout",
            "foreign_keys",
            "journal_size_limit",
            "user_version",
            "application_id",
            "wal_autocheckpoint",
            "cache_size",
        ];
        let Some(name) = ALLOWED.iter().find(|a| **a == name) else {
            return Err(Error::invalid("pragma", "not an inspectable pragma"));
        };
        let v: rusqlite::types::Value = self
            .conn
            .pragma_query_value(None, name, |r| r.get(0))
            .map_err(|e| self.db_err(e))?;
        Ok(match v {
            rusqlite::types::Value::Integer(i) => {
                if *name == "busy_timeout" {
                    // The custom handler replaces SQLite's timer; report ours.
                    self.opts.busy_timeout_ms.to_string()
                } else {
                    i.to_string()
                }
            }
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
    }

    fn db_err(&self, e: rusqlite::Error) -> Error {
        self.fill_path(Error::from_sqlite(e, self.opts.busy_timeout_ms))
    }

    /// Fills this handle's busy timeout and path into an error raised with
    /// placeholders by code that does not know them (the `db` mapper).
    pub(super) fn fill_path(&self, e: Error) -> Error {
        match e {
            Error::Busy { .. } => Error::Busy {
                timeout_ms: self.opts.busy_timeout_ms,
            },
            Error::Corrupt { reason, .. } => {
                // Closing would checkpoint the WAL into the file: never
                // copy frames into a file that reads as damaged (they may
                // be a mismatched WAL's; `doctor` tells).
                store::open::keep_wal_on_close(&self.conn);
                Error::Corrupt {
                    path: self.path.display().to_string(),
                    reason,
                }
            }
            other => other,
        }
    }

    /// Checks that this handle's path still names the file it opened (one
    /// `stat`, compared by device and inode). A file moved over it (a backup
    /// restored while this handle was open) or removed would otherwise go
    /// on receiving this handle's writes, acknowledged, into a file no
    /// other process sees — and its WAL would be applied to the new file.
    /// Every read and write calls this; writes call it inside their
    /// `BEGIN IMMEDIATE`, so no commit follows a failed check.
    ///
    /// # Errors
    /// STORE_IO ([`Error::StoreFile`]) when the path names another file or
    /// nothing: the handle is done; open a new one (after the restore steps
    /// in README, "Backup and restore").
    pub fn check_file(&self) -> Result<()> {
        let now = FileId::of(&self.file_path);
        if now.as_ref().ok() == Some(&self.file_id) {
            return Ok(());
        }
        let what = match now {
            Ok(_) => "was replaced by another file",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "was removed",
            Err(_) => "can no longer be read",
        };
        Err(Error::StoreFile {
            path: self.path.display().to_string(),
            reason: format!("the database file {what} since this handle opened it; nothing was read or written through the stale handle"),
            hint: "open the database again (restart the command or `logbook mcp serve`); if a backup was moved into place while logbook ran, see README \"Backup and restore\" first".into(),
        })
    }

    fn now_ms(&self) -> i64 {
        self.opts.clock.now_ms()
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction; commits on `Ok`, rolls
    /// back on `Err` (before returning).
    ///
    /// Writers of this and other logbook processes queue on the sidecar
    /// writer lock first (see `store::writelock`), held from before
    /// `BEGIN IMMEDIATE` to after `COMMIT`/`ROLLBACK` and never between
    /// writes; the whole wait, queue and SQLite lock together, is bounded by
    /// the busy timeout.
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        if self.read_only {
            return Err(Error::StoreIo {
                context: "the database was opened read-only (--read-only); this command writes"
                    .into(),
            });
        }
        let deadline = store::busy::deadline(self.opts.busy_timeout_ms);
        let held = match self.writer_lock.borrow_mut().acquire(deadline) {
            Ok(Some(h)) => Some(h),
            Ok(None) => {
                return Err(Error::Busy {
                    timeout_ms: self.opts.busy_timeout_ms,
                })
            }
            // The lock file cannot be used (e.g. a read-only folder): go on
            // with SQLite's own locking alone.
            Err(_) => None,
        };
        let out = self.write_locked(f, deadline);
        // Released after COMMIT: handing the queue over earlier lets the next
        // writer poll SQLite's lock during this commit, which measured slower.
        drop(held);
        out
    }

    fn write_locked<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T>,
        deadline: std::time::Instant,
    ) -> Result<T> {
        // SQLite's lock gets what is left of the busy timeout.
        let tx = store::busy::begin_immediate(&self.conn, deadline, self.opts.busy_timeout_ms)
            .map_err(|e| self.db_err(e))?;
        // Inside the write transaction: a replaced file is refused before
        // anything is written, and the check cannot be overtaken by a
        // write of this handle.
        match self.check_file().and_then(|()| f(&tx)) {
            Ok(v) => tx.commit().map(|()| v).map_err(|e| self.db_err(e)),
            Err(e) => {
                let _ = tx.rollback();
                Err(e)
            }
        }
    }

    /// Runs `f` in one read transaction (one consistent snapshot).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let tx = Tx::read(&self.conn).map_err(|e| self.db_err(e))?;
        let out = self.check_file().and_then(|()| f(&tx));
        // Ending a read transaction cannot lose anything; ignore its result.
        let _ = tx.rollback();
        out
    }
}
