//! The `Ledger` handle: the public behaviour the CLI and MCP both call.
//!
//! A `Ledger` owns one [`Store`]: every mutation is one write transaction
//! of it, every multi-row read one read transaction; between calls it holds
//! no transaction. Several handles in several processes may use one
//! database at once (docs/design.md, "Library"). Nothing here names a driver: SQL, its
//! parameters and the storage engine's own terms live in `store/`.

mod admin;
mod budgets;
mod chain;
mod checkpoint;
mod doctor_server;
mod feed;
mod gates;
mod guards;
mod import;
mod leases;
mod new_session;
mod purge;
mod query;
mod request;
mod run_end;
mod runs;
mod sessions;
mod show;
mod snapshots;
mod stages;
mod transfer;
mod tree;
mod verify_export;
mod write;
mod written;

pub use admin::{BackupReport, CheckLevel, DoctorCheck, DoctorReport, WAL_PROBLEM_BYTES};
pub use budgets::{RecordUsage, SetBudget};
pub use chain::{ChainHead, VerifyReport};
pub use feed::{FeedPage, FeedQuery, FEED_LIMIT_DEFAULT, FEED_LIMIT_MAX};
pub use purge::{
    purge_pause, PurgeFilter, PurgePlan, PurgeProgressInfo, PurgeReport, PurgeRequest, PurgeSkips,
    PurgedSession, SpaceReport, PURGE_BATCH_EVENTS, PURGE_BATCH_SESSIONS, PURGE_SAMPLE,
    VACUUM_STEP_PAGES,
};
pub use run_end::SESSION_ENDED;
pub use runs::{CreateRun, RunUsageDelta, RUN_ERROR_CODE_MAX, RUN_JSON_MAX_BYTES};
pub use stages::{StageAction, StageRequest, ATTEMPT_MAX};

pub use gates::GateList;
pub use leases::{
    hostname, pid_alive, validate_token, Lease, LeaseInfo, LockRequest, PreviousOwner,
    LEASE_TTL_DEFAULT_MS, LEASE_TTL_MAX_MS,
};
pub use snapshots::{ForkRequest, Snapshot, SnapshotInfo, SnapshotList, PAYLOAD_MAX_BYTES};
pub use tree::{
    ChildCounts, ChildrenPurge, PurgedChildren, PurgedParent, SessionTree, TreeNode, TREE_MAX_NODES,
};
pub use verify_export::{ExportOutcome, ExportSession};
pub use written::{Replayed, Written};

pub use checkpoint::CheckpointRequest;
pub use request::Mutation;
pub use sessions::{AppendEvent, CreateSession};
pub use show::{
    EventPage, ListSessions, Resolved, ResolvedState, SessionPage, SessionView, LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::model::ActorType;
use crate::store::{self, OpenOptions, Store, SyncMode, Tx};
use std::path::{Path, PathBuf};

/// WAL pages after which a checkpoint runs at `synchronous=NORMAL`: 5,000
/// (≈ 20 MiB of WAL), five times SQLite's default, so that each hot page is
/// copied once per 5,000 WAL pages instead of many times (as fast as 10,000
/// in BENCHMARKS.md). The checkpoint runs on a helper thread, outside every
/// caller's COMMIT (the SQLite store's checkpointer), so no call waits for the copy;
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
/// `Debug` shows `path` with any password taken out.
///
/// Rule: docs/design.md, "Storage", "Library" and "Backends".
#[derive(Clone)]
pub struct LedgerOptions {
    /// The database: a SQLite file's path, or a PostgreSQL server's
    /// `postgres://` / `postgresql://` URL (docs/design.md, "Backends"). `None` resolves it
    /// as docs/design.md, "Storage", says: `$LOGBOOK_DB`, else `$XDG_DATA_HOME/logbook/logbook.db`,
    /// else `$HOME/.local/share/logbook/logbook.db`.
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
    /// INTERRUPTED (docs/design.md, "Interruption"). Default: never triggered.
    pub interrupt: crate::interrupt::Interrupt,
}

impl std::fmt::Debug for LedgerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self
            .path
            .as_ref()
            .map(|p| store::redacted_location(&p.to_string_lossy()));
        f.debug_struct("LedgerOptions")
            .field("path", &path)
            .field("busy_timeout_ms", &self.busy_timeout_ms)
            .field("sync", &self.sync)
            .field("actor", &self.actor)
            .field("clock", &self.clock)
            .field("wal_autocheckpoint_pages", &self.wal_autocheckpoint_pages)
            .field("page_cache_kib", &self.page_cache_kib)
            .field("interrupt", &self.interrupt)
            .finish()
    }
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

/// Resolves the database path (docs/design.md, "Storage"): `explicit`, else `$LOGBOOK_DB`, else
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
    store: Store,
    path: PathBuf,
    opts: LedgerOptions,
}

impl Ledger {
    /// Opens (creating and migrating if needed) the database.
    ///
    /// # Errors
    /// STORE_IO, STORE_CORRUPT, STORE_VERSION_TOO_NEW, STORE_BUSY,
    /// INVALID_ARGUMENT (no path could be resolved).
    pub fn open(opts: LedgerOptions) -> Result<Self> {
        Self::open_with(opts, true, false)
    }

    /// Opens (migrating if needed) a database that already exists: as
    /// [`Ledger::open`], but a missing file is STORE_IO ("cannot read PATH")
    /// and nothing is created — for checks (`doctor`, `verify`), where a
    /// mistyped path must not become a new, empty, healthy database.
    ///
    /// # Errors
    /// As [`Ledger::open`].
    pub fn open_existing(opts: LedgerOptions) -> Result<Self> {
        Self::open_with(opts, false, false)
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
        Self::open_with(opts, false, true)
    }

    fn open_with(opts: LedgerOptions, create: bool, read_only: bool) -> Result<Self> {
        let path = resolve_path(opts.path.as_deref())?;
        let store = Store::open(&OpenOptions {
            path: path.clone(),
            busy_timeout_ms: opts.busy_timeout_ms,
            sync: opts.sync,
            wal_autocheckpoint_pages: opts.wal_autocheckpoint_pages.unwrap_or(match opts.sync {
                SyncMode::Full => WAL_CHECKPOINT_PAGES_FULL,
                SyncMode::Normal => WAL_CHECKPOINT_PAGES_NORMAL,
            }),
            page_cache_kib: opts.page_cache_kib,
            create,
            read_only,
        })?;
        // A server's URL is kept without its password (path() is shown).
        let path = match store.path() {
            Some(_) => path,
            None => PathBuf::from(store.location()),
        };
        Ok(Ledger { store, path, opts })
    }

    /// A read-only handle on this handle's file alone, opened as immutable
    /// (its `-wal` ignored; `doctor`'s `wal_match` check).
    fn file_alone(&self) -> Result<Ledger> {
        let store = self
            .store
            .sqlite_for("doctor's wal_match check")?
            .file_alone()?;
        Ok(Ledger {
            store: Store::Sqlite(store),
            path: self.path.clone(),
            opts: self.opts.clone(),
        })
    }

    /// The WAL checkpoints this handle's helper thread has run, and those a
    /// COMMIT of this handle ran itself because the helper had fallen
    /// behind; both 0 at `synchronous=FULL`, where SQLite's autocheckpoint
    /// runs inside the COMMIT that reaches it (diagnostics, benchmarks), and
    /// on a server.
    pub fn wal_checkpoints(&self) -> (u64, u64) {
        self.store.sqlite().map_or((0, 0), |s| s.wal_checkpoints())
    }

    /// The database file this handle uses; on a server, its URL without
    /// the password.
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
    /// INVALID_ARGUMENT for a pragma name outside a fixed allow-list, or on
    /// a server.
    pub fn pragma(&self, name: &str) -> Result<String> {
        self.store.sqlite_for("pragma")?.pragma(name)
    }

    /// Fills this handle's busy timeout and location into an error raised
    /// with placeholders by code that does not know them.
    pub(super) fn fill_path(&self, e: Error) -> Error {
        self.store.fill(e)
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
        self.store.check_file()
    }

    fn now_ms(&self) -> i64 {
        self.opts.clock.now_ms()
    }

    /// The query plan of a listing (SQLite's `EXPLAIN QUERY PLAN`).
    ///
    /// # Errors
    /// The store's.
    fn explain_list_query(&self, q: &store::rows::ListQuery) -> Result<Vec<String>> {
        self.store.explain_list_query(q)
    }

    /// Runs `f` in one write transaction ([`Store::write`]).
    fn write<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.store.write(f).map_err(|e| self.purged_or(e))
    }

    /// Runs `f` in one read transaction (one consistent snapshot).
    fn read<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.store.read(f).map_err(|e| self.purged_or(e))
    }

    /// Runs `f`, a read of one statement ([`crate::store::Store::read_single`]).
    fn read_single<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.store.read_single(f).map_err(|e| self.purged_or(e))
    }

    /// Runs `f`, a read whose statements need not share a snapshot
    /// ([`crate::store::Store::read_each`]).
    fn read_each<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.store.read_each(f).map_err(|e| self.purged_or(e))
    }

    /// SESSION_NOT_FOUND for a session a purge removed says so
    /// ([`Error::SessionPurged`], docs/design.md, "Retention"); any other error is as it is.
    fn purged_or(&self, e: Error) -> Error {
        let Error::SessionNotFound { id } = &e else {
            return e;
        };
        match self.store.read(|tx| tx.find_tombstone(id)) {
            Ok(Some(t)) => Error::SessionPurged {
                id: id.clone(),
                purge_id: t.purge_id,
                purged_at_ms: t.purged_at_ms,
            },
            _ => e,
        }
    }
}
