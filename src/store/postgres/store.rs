//! One open PostgreSQL database (docs/design.md, "Backends"): a connection that comes back
//! after the server closed it, transactions run again after a transient
//! failure, and followers that poll the feed with one cheap probe.
//!
//! Every write is one READ COMMITTED transaction whose first statement
//! locks the session row (`SELECT … FOR UPDATE`, [`super::tx::PgTx`]), with
//! `lock_timeout` set to what is left of the busy timeout; every read is one
//! `REPEATABLE READ READ ONLY` transaction (one snapshot, like SQLite's read
//! transaction). A failure the server reports for reasons that pass —
//! serialization failure, deadlock, a lock not had in time, the connection
//! lost or the server restarting before COMMIT was sent — rolls the
//! transaction back and runs it again, with a short growing sleep, until the
//! busy timeout; then STORE_BUSY (contention) or STORE_UNAVAILABLE (no
//! server). A connection lost after COMMIT was sent is
//! [`Error::CommitUnknown`]: the write may have been applied, and only the
//! caller's idempotency key can tell.

use super::errors::{classify, final_error, Class};
use super::location::PgLocation;
use super::migrate;
use super::tls;
use super::tx::{Failure, PgTx, StatementCache};
use crate::error::{Error, Result};
use crate::store::Tx;
use postgres::{Client, NoTls};
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};
use tokio_postgres_rustls::MakeRustlsConnect;

// Writes sent as one statement (docs/postgres.md, "One round trip per
// write").
mod follow;
mod once;

/// How long a connection attempt may take when the URL sets no
/// `connect_timeout`: 10 s (libpq waits forever).
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// The `application_name` logbook sets when the URL sets none.
pub const APPLICATION_NAME: &str = "logbook";

/// A connection and what it has been told.
struct Conn {
    client: Client,
    /// The statements prepared on this connection.
    cache: StatementCache,
}

/// An open PostgreSQL database.
pub struct PgStore {
    loc: PgLocation,
    tls: Option<MakeRustlsConnect>,
    conn: RefCell<Option<Conn>>,
    busy_timeout_ms: u64,
    read_only: bool,
    /// Changes [`PgStore::probe`] has seen (the mark followers wait on).
    changes: Cell<i64>,
    /// The horizon the last probe read (`None` before the first, and
    /// after a lost connection).
    last_horizon: Cell<Option<i64>>,
    /// The newest event_id the last probe read (likewise).
    last_newest: Cell<Option<i64>>,
    /// Probes in a row that found no change (a follower's back-off).
    idle_probes: Cell<u32>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.loc.display)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// What [`PgStore::run`] runs: a write transaction, a read transaction,
/// one read statement on its own, or read statements each on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Write,
    Read,
    ReadSingle,
    ReadEach,
}

/// Why one attempt of a transaction failed.
enum Failed {
    /// Roll back, then run it again (if time is left).
    Again(Class),
    /// The call fails.
    Done(Error),
}

impl PgStore {
    /// Connects to the server `url` names and brings its schema to this
    /// logbook's version (under the migration lock); with `read_only`, only
    /// checks that the schema is current; without `create`, refuses a
    /// database that holds no ledger yet.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (a malformed URL); STORE_UNAVAILABLE (no server);
    /// STORE_IO (login refused, TLS, missing database or privilege, no
    /// ledger, a schema needing a migration on a read-only open);
    /// STORE_CORRUPT; STORE_VERSION_TOO_NEW.
    pub fn open(url: &str, busy_timeout_ms: u64, create: bool, read_only: bool) -> Result<Self> {
        let mut loc = PgLocation::parse(url)?;
        if loc.config.get_connect_timeout().is_none() {
            loc.config.connect_timeout(CONNECT_TIMEOUT_DEFAULT);
        }
        if loc.config.get_application_name().is_none() {
            loc.config.application_name(APPLICATION_NAME);
        }
        let tls = tls::connector(&loc)?;
        let store = PgStore {
            loc,
            tls,
            conn: RefCell::new(None),
            busy_timeout_ms,
            read_only,
            changes: Cell::new(0),
            last_horizon: Cell::new(None),
            last_newest: Cell::new(None),
            idle_probes: Cell::new(0),
        };
        // A server that is restarting (connection refused, "starting up",
        // the connection lost while the schema is checked) is waited for
        // within the busy timeout, as a write would be.
        let deadline = Instant::now() + Duration::from_millis(busy_timeout_ms);
        let client = loop {
            match store.open_schema(create, deadline) {
                Err(Error::Unavailable { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.map_err(|e| store.fill(e))?,
            }
        };
        *store.conn.borrow_mut() = Some(Conn {
            client,
            cache: StatementCache::new(store.loc.statement_cache_size),
        });
        Ok(store)
    }

    /// Connects and checks the schema: migrates it (under the migration
    /// lock) unless read-only or told not to `create` a ledger that is not
    /// there.
    fn open_schema(&self, create: bool, deadline: Instant) -> Result<Client> {
        let place = &self.loc.display;
        let busy_timeout_ms = self.busy_timeout_ms;
        let mut client = self
            .connect_within(deadline)
            .map_err(|c| final_error(c, place, busy_timeout_ms))?;
        if self.read_only || !create {
            if !migrate::is_current(&mut client)? {
                let has_ledger = client
                    .query_typed_one("SELECT pg_catalog.to_regclass('sessions') IS NOT NULL", &[])
                    .map(|r| r.get::<_, bool>(0))
                    .map_err(|e| final_error(classify(&e, place), place, busy_timeout_ms))?;
                if !has_ledger {
                    return Err(Error::StoreIo {
                        context: format!(
                            "{place} holds no logbook ledger (a writing command creates one)"
                        ),
                    });
                }
                if self.read_only {
                    return Err(Error::StoreIo {
                        context: format!("{place} needs a schema migration, which a read-only open cannot make: open it once without --read-only"),
                    });
                }
                migrate::migrate(&mut client)?;
            }
        } else {
            migrate::migrate(&mut client)?;
        }
        Ok(client)
    }

    /// [`PgStore::connect`], tried again after a short growing sleep while
    /// the server cannot be reached, until `deadline`.
    fn connect_within(&self, deadline: Instant) -> std::result::Result<Client, Class> {
        let mut sleep = Duration::from_millis(2);
        loop {
            match self.connect() {
                Err(Class::Lost(why)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(Class::Lost(why));
                    }
                    let jitter = Duration::from_micros(u64::from(random_u16()) % 1000);
                    std::thread::sleep((sleep + jitter).min(deadline - now));
                    sleep = (sleep * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn connect(&self) -> std::result::Result<Client, Class> {
        let r = match &self.tls {
            Some(t) => self.loc.config.connect(t.clone()),
            None => self.loc.config.connect(NoTls),
        };
        r.map_err(|e| {
            // The server refused a setting the URL's `options` carried (an
            // unknown parameter, a bad value): the URL's fault.
            if let Some(db) = e.as_db_error() {
                if matches!(db.code().code(), "22023" | "42704" | "22P02") {
                    return Class::Final(Error::invalid(
                        "db",
                        format!(
                            "the server refused a setting of the URL's options: {}",
                            db.message()
                        ),
                    ));
                }
            }
            classify(&e, &self.loc.display)
        })
    }

    /// `postgres://user@host:port/db`: the location without its password.
    pub fn location(&self) -> &str {
        &self.loc.display
    }

    /// Whether the handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Fills the location and busy timeout into an error raised with
    /// placeholders.
    pub fn fill(&self, e: Error) -> Error {
        match e {
            Error::Busy { .. } => Error::Busy {
                timeout_ms: self.busy_timeout_ms,
            },
            Error::Corrupt { path, reason } if path.is_empty() => Error::Corrupt {
                path: self.loc.display.clone(),
                reason,
            },
            Error::Unavailable { location, reason } if location.is_empty() => Error::Unavailable {
                location: self.loc.display.clone(),
                reason,
            },
            Error::CommitUnknown { location } if location.is_empty() => Error::CommitUnknown {
                location: self.loc.display.clone(),
            },
            other => other,
        }
    }

    /// Runs `f` in one write transaction; commits on `Ok`, rolls back on
    /// `Err`; runs it again after a transient failure (module docs).
    ///
    /// # Errors
    /// STORE_IO when opened read-only; STORE_BUSY; STORE_UNAVAILABLE
    /// (including [`Error::CommitUnknown`]); `f`'s.
    pub fn write<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        if self.read_only {
            return Err(Error::StoreIo {
                context: "the database was opened read-only (--read-only); this command writes"
                    .into(),
            });
        }
        self.run(Mode::Write, &mut f)
    }

    /// Runs `f` in one read transaction (one snapshot).
    ///
    /// # Errors
    /// STORE_UNAVAILABLE; `f`'s.
    pub fn read<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.run(Mode::Read, &mut f)
    }

    /// Runs `f`, a read of ONE statement, on its own: the statement is its
    /// own snapshot, so no BEGIN and COMMIT are sent around it (one round
    /// trip instead of three). A closure that runs a second statement is
    /// INTERNAL (its statements would not share a snapshot).
    ///
    /// # Errors
    /// STORE_UNAVAILABLE; `f`'s; INTERNAL as above.
    pub fn read_single<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.run(Mode::ReadSingle, &mut f)
    }

    /// Runs `f`, a read whose statements need not share a snapshot, each
    /// statement on its own: no BEGIN and COMMIT (one round trip per
    /// statement). For reads that are exact whatever commits between their
    /// statements: the feed below its horizon (docs/postgres.md, "Reads").
    ///
    /// # Errors
    /// STORE_UNAVAILABLE; `f`'s.
    pub fn read_each<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        self.run(Mode::ReadEach, &mut f)
    }

    fn run<T>(&self, mode: Mode, f: &mut dyn FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(self.busy_timeout_ms);
        let mut sleep = Duration::from_millis(2);
        let mut first_loss = true;
        loop {
            let class = match self.attempt(mode, deadline, f) {
                Ok(v) => return Ok(v),
                Err(Failed::Done(e)) => return Err(self.fill(e)),
                Err(Failed::Again(class)) => class,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(final_error(class, &self.loc.display, self.busy_timeout_ms));
            }
            // A connection the server closed while idle (a proxy's timeout)
            // is replaced at once; anything else waits a little, longer
            // each time, so that retries do not pile onto a busy server.
            if matches!(class, Class::Lost(_)) && first_loss {
                first_loss = false;
                continue;
            }
            let jitter = Duration::from_micros(u64::from(random_u16()) % 1000);
            std::thread::sleep((sleep + jitter).min(deadline - now));
            sleep = (sleep * 2).min(Duration::from_millis(100));
        }
    }

    /// One attempt: (re)connect if needed, BEGIN, `f`, COMMIT.
    fn attempt<T>(
        &self,
        mode: Mode,
        deadline: Instant,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T>,
    ) -> std::result::Result<T, Failed> {
        let mut slot = self.conn.borrow_mut();
        if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot = None;
            let client = self.connect().map_err(|c| match c {
                Class::Final(e) => Failed::Done(e),
                c => Failed::Again(c),
            })?;
            *slot = Some(Conn {
                client,
                cache: StatementCache::new(self.loc.statement_cache_size),
            });
        }
        let Some(conn) = slot.as_mut() else {
            return Err(Failed::Done(Error::internal(
                "no connection after connecting",
            )));
        };
        let Conn { client, cache, .. } = conn;
        let write = mode == Mode::Write;
        let single = matches!(mode, Mode::ReadSingle | Mode::ReadEach);
        let begin = if write {
            // The row locks a write waits for get what is left of the busy
            // timeout (a number of ms logbook computed, not input).
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .max(1);
            format!("BEGIN; SET LOCAL lock_timeout = {left}")
        } else {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned()
        };
        let lost = |slot: &mut Option<Conn>, class: Class| {
            if matches!(class, Class::Lost(_)) {
                *slot = None;
            }
            class
        };
        if single {
            // No transaction: the one statement is its own snapshot.
        } else if let Err(e) = client.batch_execute(&begin) {
            let class = classify(&e, &self.loc.display);
            return Err(match class {
                Class::Final(e) => Failed::Done(e),
                c => Failed::Again(lost(&mut slot, c)),
            });
        }
        let mut tx = PgTx::new(client, write)
            .with_location(&self.loc.display)
            .with_cache(cache);
        let mut out = f(&mut tx);
        let failure = tx.failure();
        if single {
            let ran = tx.statements_run();
            if mode == Mode::ReadSingle && ran > 1 && out.is_ok() {
                out = Err(Error::internal(format!(
                    "a single-statement read ran {ran} statements"
                )));
            }
            return match (out, failure) {
                (_, Some(Failure::Reconnect)) => {
                    *slot = None;
                    Err(Failed::Again(Class::Lost(
                        "the connection was lost during the read".into(),
                    )))
                }
                (_, Some(Failure::Retry)) => Err(Failed::Again(Class::Transient)),
                (Ok(v), None) => Ok(v),
                (Ok(_), Some(Failure::Aborted)) => Err(Failed::Done(Error::internal(
                    "a statement failed and its error was not returned",
                ))),
                (Err(e), _) => Err(Failed::Done(e)),
            };
        }
        match (out, failure) {
            (_, Some(Failure::Reconnect)) => {
                *slot = None;
                Err(Failed::Again(Class::Lost(
                    "the connection was lost during the transaction".into(),
                )))
            }
            (_, Some(Failure::Retry)) => {
                let _ = client.batch_execute("ROLLBACK");
                Err(Failed::Again(Class::Transient))
            }
            (Err(e), _) => {
                let _ = client.batch_execute("ROLLBACK");
                Err(Failed::Done(e))
            }
            // PostgreSQL answers COMMIT of an aborted transaction with a
            // ROLLBACK: never acknowledge what a failed statement undid.
            (Ok(_), Some(Failure::Aborted)) => {
                let _ = client.batch_execute("ROLLBACK");
                Err(Failed::Done(Error::internal(
                    "a statement failed inside the transaction and its error was not returned",
                )))
            }
            (Ok(v), None) => {
                if client.is_closed() {
                    // Lost before COMMIT could be sent: nothing was applied.
                    *slot = None;
                    return Err(Failed::Again(Class::Lost(
                        "the connection closed before COMMIT".into(),
                    )));
                }
                match client.batch_execute("COMMIT") {
                    Ok(()) => Ok(v),
                    Err(e) => match classify(&e, &self.loc.display) {
                        Class::Lost(_) if write => {
                            *slot = None;
                            Err(Failed::Done(Error::CommitUnknown {
                                location: self.loc.display.clone(),
                            }))
                        }
                        Class::Final(e) => Err(Failed::Done(e)),
                        c => Err(Failed::Again(lost(&mut slot, c))),
                    },
                }
            }
        }
    }

    /// What `doctor` checks on the server ([`super::doctor::facts`]).
    ///
    /// # Errors
    /// STORE_UNAVAILABLE; the server's.
    pub fn doctor_facts(&self) -> Result<super::doctor::PgFacts> {
        self.with_client(super::doctor::facts)
    }

    /// Runs `f` on the connection's client: see [`PgStore::with_conn`].
    fn with_client<T>(&self, mut f: impl FnMut(&mut Client, &str) -> Result<T>) -> Result<T> {
        self.with_conn(|conn, place| f(&mut conn.client, place))
    }

    /// Runs `f` on the connection, connecting first if there is none; when
    /// a connection kept from before turns out lost (a server or proxy
    /// closed it while idle), runs `f` once more on a new one.
    fn with_conn<T>(&self, mut f: impl FnMut(&mut Conn, &str) -> Result<T>) -> Result<T> {
        let mut slot = self.conn.borrow_mut();
        let mut reused = true;
        loop {
            if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
                reused = false;
                *slot = None;
                let client = self
                    .connect()
                    .map_err(|c| final_error(c, &self.loc.display, self.busy_timeout_ms))?;
                *slot = Some(Conn {
                    client,
                    cache: StatementCache::new(self.loc.statement_cache_size),
                });
            }
            let Some(conn) = slot.as_mut() else {
                return Err(Error::internal("no connection after connecting"));
            };
            match f(conn, &self.loc.display) {
                Err(Error::Unavailable { .. }) if reused => {
                    *slot = None;
                }
                r => return r.map_err(|e| self.fill(e)),
            }
        }
    }

    /// Runs one read-only statement (`logbook sql`): see [`super::query`].
    ///
    /// # Errors
    /// As [`super::query::run`].
    pub fn query(&self, text: &str, timeout_ms: u64) -> Result<crate::store::rows::QueryResult> {
        self.with_client(|client, place| super::query::run(client, text, timeout_ms, place))
    }
}

/// 16 random bits (a retry's jitter).
fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    u16::from_le_bytes(b)
}
