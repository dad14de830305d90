//! One open SQLite database: its connection, its writer queue, its WAL
//! checkpointer and the identity of its file — what a [`crate::store::Store`]
//! holds for a SQLite path.
//!
//! A `SqliteStore` owns one connection. Every write is one
//! `BEGIN IMMEDIATE` transaction behind the writer queue
//! ([`crate::store::sqlite::writelock`]); every multi-row read is one read transaction;
//! between calls the connection holds no transaction, so the WAL can always
//! checkpoint. Errors leave here as logbook's own, with the path and the
//! busy timeout filled in.

use super::sql::list;
use super::{admin, open, query};
use crate::error::{Error, Result};
use crate::store::rows::ListQuery;
use crate::store::sqlite::checkpointer::Checkpointer;
use crate::store::sqlite::files::{refuse_hard_links, FileId};
use crate::store::sqlite::tx::SqliteTx;
use crate::store::sqlite::txn::Txn;
use crate::store::sqlite::writelock::WriterLock;
use crate::store::{StoreConfig, SyncMode, Tx};
use rusqlite::Connection;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// How to open a SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteOpen {
    /// The database file.
    pub path: PathBuf,
    /// How long a write waits for the lock, in ms.
    pub busy_timeout_ms: u64,
    /// `synchronous=FULL` or `NORMAL`.
    pub sync: SyncMode,
    /// WAL pages after which a checkpoint runs (inside the COMMIT at FULL,
    /// on a helper thread at NORMAL); 0 disables checkpoints.
    pub wal_autocheckpoint_pages: u32,
    /// Page cache, KiB.
    pub page_cache_kib: u32,
    /// Create the file when it is missing.
    pub create: bool,
}

/// An open SQLite database.
#[derive(Debug)]
pub struct SqliteStore {
    /// Declared before `conn`: dropped (its helper stopped, its connection
    /// closed) before the writer's connection closes, so that one can be
    /// the last and checkpoint the WAL away.
    checkpointer: Option<Checkpointer>,
    conn: Connection,
    path: PathBuf,
    busy_timeout_ms: u64,
    writer_lock: RefCell<WriterLock>,
    /// Opened read-only: every write is refused before it touches anything
    /// (not even the writer lock file).
    read_only: bool,
    /// The (device, inode) of the file this handle opened, and its path made
    /// absolute at open (a later change of the current folder does not
    /// matter); every call checks that the path still names that file.
    file_id: FileId,
    file_path: PathBuf,
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

impl SqliteStore {
    /// Opens (creating if asked, and migrating) the database.
    ///
    /// # Errors
    /// STORE_IO, STORE_CORRUPT, STORE_VERSION_TOO_NEW, STORE_BUSY.
    pub fn open(o: &SqliteOpen) -> Result<Self> {
        let background = o.sync == SyncMode::Normal && o.wal_autocheckpoint_pages > 0;
        let mut conn = open::open(&StoreConfig {
            path: o.path.clone(),
            busy_timeout_ms: o.busy_timeout_ms,
            sync: o.sync,
            wal_autocheckpoint_pages: if background {
                0
            } else {
                o.wal_autocheckpoint_pages
            },
            page_cache_kib: o.page_cache_kib,
            create: o.create,
        })?;
        let checkpointer = if background {
            Some(
                Checkpointer::attach(&mut conn, &o.path, o.wal_autocheckpoint_pages).map_err(
                    |e| open::with_path(Error::from_sqlite(e, 0), &o.path.display().to_string()),
                )?,
            )
        } else {
            None
        };
        let (file_id, file_path) = opened_id(&o.path)?;
        Ok(SqliteStore {
            checkpointer,
            conn,
            path: o.path.clone(),
            busy_timeout_ms: o.busy_timeout_ms,
            writer_lock: RefCell::new(WriterLock::new(&o.path)),
            read_only: false,
            file_id,
            file_path,
        })
    }

    /// Opens an existing database for reading only: it never creates,
    /// migrates or writes the file.
    ///
    /// # Errors
    /// STORE_IO (missing, unreadable, or needing a migration), STORE_CORRUPT,
    /// STORE_VERSION_TOO_NEW.
    pub fn open_read_only(path: &Path, busy_timeout_ms: u64) -> Result<Self> {
        let conn = open::open_read_only(path, busy_timeout_ms)?;
        let (file_id, file_path) = opened_id(path)?;
        Ok(SqliteStore {
            checkpointer: None,
            conn,
            path: path.to_path_buf(),
            busy_timeout_ms,
            writer_lock: RefCell::new(WriterLock::new(path)),
            read_only: true,
            file_id,
            file_path,
        })
    }

    /// A read-only handle on this handle's file alone, opened as immutable
    /// (its `-wal` ignored; `doctor`'s `wal_match` check).
    ///
    /// # Errors
    /// The store's.
    pub fn file_alone(&self) -> Result<Self> {
        let conn = open::open_file_alone(&self.path).map_err(|e| self.db_err(e))?;
        Ok(SqliteStore {
            checkpointer: None,
            conn,
            path: self.path.clone(),
            busy_timeout_ms: self.busy_timeout_ms,
            writer_lock: RefCell::new(WriterLock::new(&self.path)),
            read_only: true,
            file_id: self.file_id,
            file_path: self.file_path.clone(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The WAL checkpoints the helper thread ran, and those a COMMIT ran
    /// itself because the helper had fallen behind.
    pub fn wal_checkpoints(&self) -> (u64, u64) {
        self.checkpointer
            .as_ref()
            .map_or((0, 0), |c| (c.runs(), c.inline_runs()))
    }

    /// Reads a pragma of the connection (diagnostics and tests).
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
                    self.busy_timeout_ms.to_string()
                } else {
                    i.to_string()
                }
            }
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
    }

    fn db_err(&self, e: rusqlite::Error) -> Error {
        self.fill(Error::from_sqlite(e, self.busy_timeout_ms))
    }

    /// Fills the busy timeout and path into an error raised with
    /// placeholders by code that does not know them.
    pub fn fill(&self, e: Error) -> Error {
        match e {
            Error::Busy { .. } => Error::Busy {
                timeout_ms: self.busy_timeout_ms,
            },
            Error::Corrupt { reason, .. } => {
                // Closing would checkpoint the WAL into the file: never
                // copy frames into a file that reads as damaged (they may
                // be a mismatched WAL's; `doctor` tells).
                open::keep_wal_on_close(&self.conn);
                Error::Corrupt {
                    path: self.path.display().to_string(),
                    reason,
                }
            }
            other => other,
        }
    }

    /// Checks that the path still names the file this handle opened (one
    /// `stat`, compared by device and inode), and that the file has not
    /// been given a second name (a hard link) since.
    ///
    /// # Errors
    /// STORE_IO ([`Error::StoreFile`]) when the path names another file or
    /// nothing, or the file has more than one name.
    pub fn check_file(&self) -> Result<()> {
        let meta = std::fs::metadata(&self.file_path);
        let now = meta.as_ref().map(FileId::from_meta);
        if now.as_ref().ok() == Some(&self.file_id) {
            return meta.map_or(Ok(()), |m| refuse_hard_links(&self.path, &m));
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

    /// `PRAGMA data_version`: changes whenever another connection commits.
    ///
    /// # Errors
    /// The store's.
    pub fn data_version(&self) -> Result<i64> {
        crate::store::sqlite::sql::feed::data_version(&self.conn).map_err(|e| self.db_err(e))
    }

    /// The query plan of a listing (`EXPLAIN QUERY PLAN`).
    ///
    /// # Errors
    /// The store's.
    pub fn explain_list_query(&self, q: &ListQuery) -> Result<Vec<String>> {
        list::explain(&self.conn, q).map_err(|e| self.db_err(e))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction; commits on `Ok`, rolls
    /// back on `Err` (before returning).
    ///
    /// Writers of this and other logbook processes queue on the sidecar
    /// writer lock first (see `store::writelock`), held from before
    /// `BEGIN IMMEDIATE` to after `COMMIT`/`ROLLBACK` and never between
    /// writes; the whole wait, queue and SQLite lock together, is bounded by
    /// the busy timeout.
    ///
    /// # Errors
    /// STORE_IO when opened read-only; STORE_BUSY; `f`'s.
    pub fn write<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.write_conn(|conn| f(&mut SqliteTx::new(conn)))
    }

    /// [`SqliteStore::write`] with foreign-key enforcement off on this
    /// connection for the transaction: a purge deletes a parent whose
    /// (ended, frozen) children remain and keep naming it; the tombstone
    /// and delete triggers still check every row (docs/design.md, "Retention").
    ///
    /// # Errors
    /// As [`SqliteStore::write`].
    pub fn write_purge<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.conn
            .pragma_update(None, "foreign_keys", false)
            .map_err(|e| self.db_err(e))?;
        let out = self.write(f);
        let on = self
            .conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(|e| self.db_err(e));
        let v = out?;
        on?;
        Ok(v)
    }

    /// Returns up to `pages` free pages to the file system in one write
    /// transaction (`PRAGMA incremental_vacuum`); the pages still free
    /// after it, and how long it held the write lock (from inside the
    /// transaction to COMMIT returning). A file without
    /// `auto_vacuum=INCREMENTAL` returns none.
    ///
    /// # Errors
    /// As [`SqliteStore::write`].
    pub fn incremental_vacuum(&self, pages: u32) -> Result<(i64, std::time::Duration)> {
        let mut locked_at = std::time::Instant::now();
        let left = self.write_conn(|conn| {
            locked_at = std::time::Instant::now();
            let sql = format!("PRAGMA incremental_vacuum({pages})");
            let mut stmt = conn.prepare(&sql).map_err(crate::store::sqlite::tx::db)?;
            let mut rows = stmt.query([]).map_err(crate::store::sqlite::tx::db)?;
            while rows.next().map_err(crate::store::sqlite::tx::db)?.is_some() {}
            conn.pragma_query_value(None, "freelist_count", |r| r.get(0))
                .map_err(crate::store::sqlite::tx::db)
        })?;
        Ok((left, locked_at.elapsed()))
    }

    /// `(auto_vacuum mode, free pages, page size)`: the mode 0 none, 1
    /// full, 2 incremental.
    ///
    /// # Errors
    /// The store's.
    pub fn free_space(&self) -> Result<(i64, i64, i64)> {
        let q = |name: &str| -> Result<i64> {
            self.conn
                .pragma_query_value(None, name, |r| r.get(0))
                .map_err(|e| self.db_err(e))
        };
        Ok((q("auto_vacuum")?, q("freelist_count")?, q("page_size")?))
    }

    fn write_conn<T>(&self, f: impl FnMut(&Connection) -> Result<T>) -> Result<T> {
        if self.read_only {
            return Err(Error::StoreIo {
                context: "the database was opened read-only (--read-only); this command writes"
                    .into(),
            });
        }
        let deadline = crate::store::sqlite::busy::deadline(self.busy_timeout_ms);
        let held = match self.writer_lock.borrow_mut().acquire(deadline) {
            Ok(Some(h)) => Some(h),
            Ok(None) => {
                return Err(Error::Busy {
                    timeout_ms: self.busy_timeout_ms,
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
        mut f: impl FnMut(&Connection) -> Result<T>,
        deadline: std::time::Instant,
    ) -> Result<T> {
        // SQLite's lock gets what is left of the busy timeout.
        let tx =
            crate::store::sqlite::busy::begin_immediate(&self.conn, deadline, self.busy_timeout_ms)
                .map_err(|e| self.db_err(e))?;
        // Inside the write transaction: a replaced file is refused before
        // anything is written, and the check cannot be overtaken by a
        // write of this handle.
        match self.check_file().and_then(|()| f(&tx)) {
            Ok(v) => tx.commit().map(|()| v).map_err(|e| self.db_err(e)),
            Err(e) => {
                let _ = tx.rollback();
                Err(self.fill(e))
            }
        }
    }

    /// Runs `f` in one read transaction (one consistent snapshot).
    ///
    /// # Errors
    /// STORE_IO when the file was replaced; `f`'s.
    pub fn read<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let tx = Txn::read(&self.conn).map_err(|e| self.db_err(e))?;
        let out = self
            .check_file()
            .and_then(|()| f(&mut SqliteTx::new(&tx)))
            .map_err(|e| self.fill(e));
        // Ending a read transaction cannot lose anything; ignore its result.
        let _ = tx.rollback();
        out
    }

    // ---- doctor and backup (SQLite's own checks) ----

    /// `(user_version, newest version in refinery's history)`.
    ///
    /// # Errors
    /// The store's.
    pub fn schema_versions(&self) -> Result<(i64, i64)> {
        admin::schema_versions(&self.conn).map_err(|e| self.db_err(e))
    }

    /// `(sessions, events, page_size, page_count, freelist_count,
    /// journal_mode)`.
    ///
    /// # Errors
    /// The store's.
    pub fn sizes(&self) -> Result<(i64, i64, i64, i64, i64, String)> {
        admin::sizes(&self.conn).map_err(|e| self.db_err(e))
    }

    /// `PRAGMA integrity_check`, at most 10 messages (`["ok"]` when sound).
    ///
    /// # Errors
    /// STORE_CORRUPT when SQLite cannot read the file at all.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        admin::integrity_check(&self.conn).map_err(|e| self.db_err(e))
    }

    /// Rows that break a foreign key: the count and at most 10 of them.
    ///
    /// # Errors
    /// The store's.
    pub fn foreign_key_violations(&self) -> Result<(i64, Vec<String>)> {
        admin::foreign_key_violations(&self.conn).map_err(|e| self.db_err(e))
    }

    /// The schema's objects that differ from the migrations'.
    ///
    /// # Errors
    /// The store's.
    pub fn schema_drift(&self) -> Result<Vec<admin::Drift>> {
        admin::schema_drift(&self.conn).map_err(|e| self.db_err(e))
    }

    /// This connection will not checkpoint the WAL into the file when it
    /// closes.
    pub fn keep_wal_on_close(&self) {
        open::keep_wal_on_close(&self.conn);
    }

    /// Copies the database, as of one snapshot, to a new file at `dest`:
    /// `(pages, sessions, events)`.
    ///
    /// # Errors
    /// The store's.
    pub fn backup_to(&self, dest: &Path) -> Result<(i64, i64, i64)> {
        admin::backup_to(&self.conn, dest).map_err(|e| self.db_err(e))
    }

    /// Runs one read-only SQL statement on a connection opened read-only
    /// (this handle's own when it was opened read-only, else a fresh one).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (field `sql`) for what [`query::run`] refuses or
    /// SQLite rejects (its message, redacted); STORE_BUSY; STORE_IO;
    /// STORE_CORRUPT.
    pub fn query(&self, text: &str, timeout_ms: u64) -> Result<crate::store::rows::QueryResult> {
        self.check_file()?;
        let own;
        let conn = if self.read_only {
            &self.conn
        } else {
            own = open::open_read_only(&self.path, self.busy_timeout_ms)?;
            &own
        };
        query::run(conn, text, timeout_ms).map_err(|e| match e {
            query::QueryError::Refused(why) => Error::invalid("sql", why),
            query::QueryError::Db(e) => match e.sqlite_error_code() {
                Some(rusqlite::ffi::ErrorCode::DatabaseBusy)
                | Some(rusqlite::ffi::ErrorCode::DatabaseLocked)
                | Some(rusqlite::ffi::ErrorCode::DatabaseCorrupt)
                | Some(rusqlite::ffi::ErrorCode::NotADatabase)
                | Some(rusqlite::ffi::ErrorCode::SystemIoFailure) => self.db_err(e),
                // SQLite's own words and where, without the statement
                // (docs/errors.md: a message never repeats the rejected value).
                _ => Error::invalid(
                    "sql",
                    crate::redact::redact(&query::reason(&e)).into_owned(),
                ),
            },
        })
    }
}
