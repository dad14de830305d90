//! [`Store`]: one open database, whichever backend holds it — what a
//! [`crate::Ledger`] runs its transactions on.
//!
//! The ledger sees only this type and [`super::Tx`]: it opens a store from
//! a location, runs closures in write and read transactions, waits for
//! other writers' commits, and asks the SQLite store for the few things
//! only a file has (doctor's file checks, backup, pragmas).

use super::postgres::location::is_url;
use super::postgres::store::PgStore;
use super::rows::ListQuery;
use super::{SyncMode, Tx};
use crate::error::{Error, Result};
use crate::store::sqlite::store::{SqliteOpen, SqliteStore};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// A SQLite file's path, or a `postgres://` / `postgresql://` URL
    /// (docs/design.md, "Backends").
    pub path: PathBuf,
    /// How long a write waits for the lock (or retries a transient server
    /// error), in ms.
    pub busy_timeout_ms: u64,
    /// SQLite's `synchronous`.
    pub sync: SyncMode,
    /// SQLite's WAL checkpoint interval, pages (0: none).
    pub wal_autocheckpoint_pages: u32,
    /// SQLite's page cache, KiB.
    pub page_cache_kib: u32,
    /// Create the database when it is missing.
    pub create: bool,
    /// Open for reading only: never create, migrate or write.
    pub read_only: bool,
}

/// One open database.
// One per Ledger, opened once and never moved in a loop: the variants'
// sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Store {
    /// A SQLite file (docs/design.md, "Storage"): the embedded default.
    Sqlite(SqliteStore),
    /// A PostgreSQL database (docs/design.md, "Backends").
    Postgres(PgStore),
}

impl Store {
    /// Opens the database `o` names.
    ///
    /// # Errors
    /// STORE_IO, STORE_CORRUPT, STORE_VERSION_TOO_NEW, STORE_BUSY; on a
    /// server also INVALID_ARGUMENT (a malformed URL) and STORE_UNAVAILABLE.
    pub fn open(o: &OpenOptions) -> Result<Store> {
        if let Some(url) = o.path.to_str().filter(|p| is_url(p)) {
            return PgStore::open(url, o.busy_timeout_ms, o.create, o.read_only)
                .map(Store::Postgres);
        }
        if o.read_only {
            return SqliteStore::open_read_only(&o.path, o.busy_timeout_ms).map(Store::Sqlite);
        }
        SqliteStore::open(&SqliteOpen {
            path: o.path.clone(),
            busy_timeout_ms: o.busy_timeout_ms,
            sync: o.sync,
            wal_autocheckpoint_pages: o.wal_autocheckpoint_pages,
            page_cache_kib: o.page_cache_kib,
            create: o.create,
        })
        .map(Store::Sqlite)
    }

    /// The SQLite store, for what only a file has; `None` on a server.
    pub fn sqlite(&self) -> Option<&SqliteStore> {
        match self {
            Store::Sqlite(s) => Some(s),
            Store::Postgres(_) => None,
        }
    }

    /// The SQLite store or INVALID_ARGUMENT naming `what` (a verb only a
    /// SQLite file has).
    ///
    /// # Errors
    /// INVALID_ARGUMENT on a server.
    pub fn sqlite_for(&self, what: &str) -> Result<&SqliteStore> {
        self.sqlite().ok_or_else(|| {
            Error::invalid("db", format!("{what} works on a SQLite database file only"))
        })
    }

    /// Where the database is, for messages and reports: the file's path,
    /// or the server's URL without its password.
    pub fn location(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path().display().to_string(),
            Store::Postgres(p) => p.location().to_owned(),
        }
    }

    /// The database file, when it is one.
    pub fn path(&self) -> Option<&Path> {
        self.sqlite().map(SqliteStore::path)
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        match self {
            Store::Sqlite(s) => s.is_read_only(),
            Store::Postgres(p) => p.is_read_only(),
        }
    }

    /// Fills the location and busy timeout into an error raised with
    /// placeholders.
    pub fn fill(&self, e: Error) -> Error {
        match self {
            Store::Sqlite(s) => s.fill(e),
            Store::Postgres(p) => p.fill(e),
        }
    }

    /// Checks that the store still is the one this handle opened (SQLite:
    /// the path names the same file).
    ///
    /// # Errors
    /// STORE_IO ([`Error::StoreFile`]).
    pub fn check_file(&self) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.check_file(),
            Store::Postgres(_) => Ok(()),
        }
    }

    /// Runs `f` in one write transaction; commits on `Ok`, rolls back on
    /// `Err`.
    ///
    /// `f` may run more than once: a server's transient failure
    /// (serialization, deadlock, a connection lost before COMMIT) rolls the
    /// transaction back and runs it again within the busy timeout. So `f`
    /// changes nothing outside the transaction but through what it
    /// returns.
    ///
    /// # Errors
    /// STORE_IO when read-only; STORE_BUSY; `f`'s.
    pub fn write<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        match self {
            Store::Sqlite(s) => s.write(f),
            Store::Postgres(p) => p.write(f),
        }
    }

    /// [`Store::write`] for one batch of a purge (docs/design.md, "Retention"): on SQLite with
    /// foreign-key enforcement off for the transaction
    /// ([`SqliteStore::write_purge`]); a server has no foreign key from a
    /// session to its parent (a trigger checks it at insert).
    ///
    /// # Errors
    /// As [`Store::write`].
    pub fn write_purge<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        match self {
            Store::Sqlite(s) => s.write_purge(f),
            Store::Postgres(p) => p.write(f),
        }
    }

    /// Runs `f`, a read of one statement: on a server without BEGIN and
    /// COMMIT around it (the statement is its own snapshot; one round trip
    /// instead of three); on SQLite as [`Store::read`].
    ///
    /// # Errors
    /// `f`'s; the store's; INTERNAL on a server if `f` runs more than one
    /// statement.
    pub fn read_single<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        match self {
            Store::Sqlite(s) => s.read(f),
            Store::Postgres(p) => p.read_single(f),
        }
    }

    /// Runs `f`, a read whose statements need not share one snapshot: on a
    /// server each statement on its own, without BEGIN and COMMIT; on
    /// SQLite as [`Store::read`]. Only for reads exact whatever commits
    /// between their statements (the feed below its horizon,
    /// docs/postgres.md, "Reads").
    ///
    /// # Errors
    /// `f`'s; the store's.
    pub fn read_each<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        match self {
            Store::Sqlite(s) => s.read(f),
            Store::Postgres(p) => p.read_each(f),
        }
    }

    /// Whether this backend applies writes as one statement
    /// ([`Store::write_one`], [`Store::create_one`]): a server does; SQLite
    /// does not, so a caller need not prepare one.
    pub fn writes_one_statement(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Applies `w` as one statement where the backend can: on a server,
    /// one round trip (docs/postgres.md, "One round trip per write"),
    /// returning the session as it now stands. `NotApplied` when nothing
    /// was applied this way: SQLite (whose write lock makes the transaction
    /// as cheap), or a write the statement leaves to the pipeline (a guard
    /// that does not match, a replay, a lease, a pending gate, an open run,
    /// contention on the row): the caller runs the pipeline then.
    /// `Unknown` when the reply was lost ([`super::OneOutcome::Unknown`]).
    ///
    /// # Errors
    /// STORE_BUSY (the session's row stayed locked for the busy timeout).
    pub fn write_one(&self, w: &super::OneWrite<'_>) -> Result<super::OneOutcome> {
        match self {
            Store::Sqlite(_) => Ok(super::OneOutcome::NotApplied),
            Store::Postgres(p) => p.write_one(w),
        }
    }

    /// Applies `lock`'s `w` as one statement where the backend can, as
    /// [`Store::write_one`]: the session as it now stands and the expired
    /// lease it took over, if it took one over
    /// ([`super::OneSide::LeaseTake`]).
    ///
    /// # Errors
    /// STORE_BUSY (the session's row stayed locked for the busy timeout).
    pub fn lease_one(
        &self,
        w: &super::OneWrite<'_>,
    ) -> Result<super::OneOutcome<(crate::model::Session, Option<super::LeaseTakenOver>)>> {
        match self {
            Store::Sqlite(_) => Ok(super::OneOutcome::NotApplied),
            Store::Postgres(p) => p.lease_one(w),
        }
    }

    /// Applies a budget verb's `w` as one statement where the backend can,
    /// as [`Store::write_one`]: the session as it now stands and the
    /// budget as the statement left it ([`super::OneSide::BudgetSet`],
    /// [`super::OneSide::BudgetReset`]).
    ///
    /// # Errors
    /// STORE_BUSY (the session's row stayed locked for the busy timeout).
    pub fn budget_one(
        &self,
        w: &super::OneWrite<'_>,
    ) -> Result<super::OneOutcome<(crate::model::Session, super::rows::BudgetRow)>> {
        match self {
            Store::Sqlite(_) => Ok(super::OneOutcome::NotApplied),
            Store::Postgres(p) => p.budget_one(w),
        }
    }

    /// Applies a run verb as one statement where the backend can, as
    /// [`Store::write_one`] (the statement's rules: [`super::OneRunWrite`]),
    /// returning the run as it now stands.
    ///
    /// # Errors
    /// STORE_BUSY (the session's row stayed locked for the busy timeout).
    pub fn run_one(
        &self,
        w: &super::OneRunWrite<'_>,
    ) -> Result<super::OneOutcome<crate::model::Run>> {
        match self {
            Store::Sqlite(_) => Ok(super::OneOutcome::NotApplied),
            Store::Postgres(p) => p.run_one(w),
        }
    }

    /// Inserts a new session `row` (with its parent, if any), its
    /// `created` event with `idempotency`'s (key, request digest) if given
    /// and, with `first`, its first checkpoint, as one statement where the
    /// backend can (see [`Store::write_one`]); `None` when it did not
    /// (SQLite; the id is taken; a create already used the key; the parent
    /// is missing): the caller creates it the usual way.
    ///
    /// # Errors
    /// STORE_BUSY; STORE_UNAVAILABLE.
    pub fn create_one(
        &self,
        row: &super::SessionRow<'_>,
        created_detail: &str,
        idempotency: Option<(&str, &str)>,
        first: Option<&super::OneCheckpoint<'_>>,
    ) -> Result<Option<crate::model::Session>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(p) => p.create_one(row, created_detail, idempotency, first),
        }
    }

    /// Runs `f` in one read transaction (one consistent snapshot).
    ///
    /// # Errors
    /// `f`'s; the store's.
    pub fn read<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        match self {
            Store::Sqlite(s) => s.read(f),
            Store::Postgres(p) => p.read(f),
        }
    }

    /// A mark that changes whenever another handle commits (SQLite:
    /// `PRAGMA data_version`; a server: the notifications received).
    ///
    /// # Errors
    /// The store's.
    pub fn change_mark(&self) -> Result<i64> {
        match self {
            Store::Sqlite(s) => s.data_version(),
            Store::Postgres(p) => p.change_mark(),
        }
    }

    /// Waits up to `poll` for a commit after `seen` (a [`Store::change_mark`]);
    /// whether one came.
    ///
    /// # Errors
    /// STORE_IO when the database file was replaced or removed (no more
    /// commits can come through this handle); the store's.
    pub fn wait_for_change(&self, seen: i64, poll: Duration) -> Result<bool> {
        match self {
            Store::Sqlite(s) => {
                std::thread::sleep(poll);
                // A replaced file gets no more commits through this
                // connection's file: without this a follower would go
                // silent instead of failing.
                s.check_file()?;
                Ok(s.data_version()? != seen)
            }
            Store::Postgres(p) => p.wait_for_change(seen, poll),
        }
    }

    /// The query plan of a listing.
    ///
    /// # Errors
    /// The store's.
    pub fn explain_list_query(&self, q: &ListQuery) -> Result<Vec<String>> {
        match self {
            Store::Sqlite(s) => s.explain_list_query(q),
            Store::Postgres(_) => Err(Error::invalid(
                "explain",
                "query plans are shown for a SQLite database only (on a server: EXPLAIN in psql)",
            )),
        }
    }

    /// Runs one read-only statement for `logbook sql` (SQLite: a
    /// `query_only` connection with a progress handler; a server: a READ
    /// ONLY transaction with `statement_timeout`), interrupted after
    /// `timeout_ms`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (a statement that would write or the engine
    /// rejects); STORE_BUSY; STORE_IO; STORE_UNAVAILABLE.
    pub fn query(&self, text: &str, timeout_ms: u64) -> Result<crate::store::rows::QueryResult> {
        match self {
            Store::Sqlite(s) => s.query(text, timeout_ms),
            Store::Postgres(p) => p.query(text, timeout_ms),
        }
    }

    /// What `doctor` checks on a server.
    ///
    /// # Errors
    /// INVALID_ARGUMENT on a SQLite file; STORE_UNAVAILABLE.
    pub fn server_facts(&self) -> Result<super::postgres::doctor::PgFacts> {
        match self {
            Store::Sqlite(_) => Err(Error::invalid(
                "db",
                "server facts need a PostgreSQL database",
            )),
            Store::Postgres(p) => p.doctor_facts(),
        }
    }
}
