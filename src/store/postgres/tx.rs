//! The PostgreSQL implementation of the store interface ([`crate::store::Tx`])
//! over one open transaction of a `postgres::Client`.
//!
//! The caller (the PostgreSQL Store) has sent `BEGIN` — a write:
//! `BEGIN` (READ COMMITTED); a read: `BEGIN ISOLATION LEVEL REPEATABLE READ
//! READ ONLY`, one snapshot for every statement — and sends `COMMIT` or
//! `ROLLBACK`; [`PgTx`] runs the typed operations inside it. The SQL lives
//! in [`super::sql`]; every statement is an unnamed `query_typed` /
//! `execute_typed` with its parameter types, one round trip each, nothing
//! prepared beyond it (pgbouncer in transaction mode works).
//!
//! ## Locking and the feed
//!
//! A write reads the session's guard state with
//! [`crate::store::Tx::select_session_state`], which locks the session's row (`FOR NO
//! KEY UPDATE`, the lock an UPDATE of non-key columns takes) until COMMIT:
//! the next seq (max + 1) and the chain's previous hash are then read under
//! that lock, each statement in a snapshot taken after it (READ
//! COMMITTED). It is also the statement that gives the transaction its id
//! (`events.tx_id`), and it must come before any other write: a row lock
//! waited for usually takes the id only once granted, so writers of one
//! session get increasing ids in the order they append, and the feed's
//! `(tx_id, event_id)` order agrees with each session's seq order (which
//! [`crate::store::Tx::scan_feed_session`] relies on). Not always: a writer
//! waiting behind two others may follow the row's update chain once the
//! first commits, taking its id there, and then lose the row to a writer
//! that came later and takes its id later. So the guarded UPDATE of a row
//! this transaction holds also reads whether the session's last event has
//! a higher transaction id than this one; if so the transaction is run
//! again (a retry, as for a deadlock), with an id taken after that event's.
//! A plain UPDATE that waits for a row takes its id before waiting; the
//! guarded UPDATE of `sessions` does not, because the table has BEFORE
//! UPDATE row triggers, for which PostgreSQL locks the row first
//! (`tests/it/pg_tx_concurrency.rs` pins it); every write locks the row
//! with its first statement anyway.
//!
//! ## Errors
//!
//! Driver errors go through [`super::errors::to_error`]: a serialization
//! failure or deadlock reaches the caller as STORE_BUSY (`timeout_ms` 0,
//! filled in by the Store), a lost connection as STORE_UNAVAILABLE, the
//! rest as their final error. Whatever the ledger does with the error,
//! [`PgTx::failure`] tells the Store what the failed statement means for
//! the transaction (PostgreSQL aborts a transaction at its first error).

use super::errors::{classify, is_refusal, is_stale_plan, to_error, Class};
use super::sql::Param;
use crate::error::{Error, Result};
use postgres::types::Type;
use postgres::{Client, Row};

/// What the first failed statement of a transaction (not undone by
/// [`crate::store::Tx::rollback_to_savepoint`]) means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A serialization failure, a deadlock or a lock timeout, or an
    /// idempotency key inserted meanwhile by a concurrent retry: roll back
    /// and run the whole transaction again.
    Retry,
    /// The connection is lost: reconnect, then run it again.
    Reconnect,
    /// Anything else: the transaction is aborted; roll it back.
    Aborted,
}

/// Named statements prepared on one connection, by SQL text: at most
/// `capacity`; a new statement beyond that replaces the one used least
/// recently (dropping it closes it on the server), so the statements in use
/// stay prepared however many shapes a long-lived client has sent (each
/// listing filter set and page size is one). A statement is parsed and
/// planned once per connection instead of at every call, which measured
/// about half of a checkpoint's server time (BENCHMARKS.md, "PostgreSQL").
/// They are protocol-level statements of the session: a pooler in
/// transaction mode needs `statement_cache_size=0` in the URL (or pgbouncer
/// ≥ 1.21 with `max_prepared_statements`), docs/postgres.md.
#[derive(Debug, Default)]
pub struct StatementCache {
    /// Each statement with the tick of its last use.
    statements: std::collections::HashMap<String, (postgres::Statement, u64)>,
    capacity: usize,
    tick: u64,
}

impl StatementCache {
    /// A cache of at most `capacity` statements (0: none prepared).
    pub fn new(capacity: usize) -> Self {
        StatementCache {
            statements: std::collections::HashMap::new(),
            capacity,
            tick: 0,
        }
    }

    /// The statement prepared for `sql`, marked as just used.
    fn get(&mut self, sql: &str) -> Option<postgres::Statement> {
        self.tick += 1;
        let tick = self.tick;
        self.statements.get_mut(sql).map(|(st, used)| {
            *used = tick;
            st.clone()
        })
    }

    /// Makes room for one more statement: forgets the least recently used
    /// when the cache is full. False when it holds none (capacity 0).
    fn make_room(&mut self) -> bool {
        if self.capacity == 0 {
            return false;
        }
        if self.statements.len() >= self.capacity {
            let oldest = self
                .statements
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(sql, _)| sql.clone());
            if let Some(sql) = oldest {
                self.statements.remove(&sql);
            }
        }
        true
    }

    fn insert(&mut self, sql: &str, st: postgres::Statement) {
        self.tick += 1;
        self.statements.insert(sql.to_owned(), (st, self.tick));
    }

    /// How many statements are prepared.
    pub fn len(&self) -> usize {
        self.statements.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// The store interface over one open PostgreSQL transaction of a client.
pub struct PgTx<'c> {
    client: &'c mut Client,
    cache: Option<&'c mut StatementCache>,
    /// What the next event of one session needs, as the statement just
    /// run left it (a guarded UPDATE's RETURNING, or the last event
    /// insert); any other statement forgets it.
    next_event: Option<(String, super::sql::events::NextEvent)>,
    /// The feed's horizon as the statement just run read it (a feed scan's);
    /// any other statement forgets it.
    horizon: Option<crate::store::FeedPos>,
    /// The session whose row this transaction holds locked (a write's
    /// state read, guarded UPDATE or insert): only then is what a statement
    /// read of its events still true at the next one.
    locked: Option<String>,
    write: bool,
    location: &'c str,
    failure: Option<Failure>,
    /// Statements run so far.
    statements: usize,
}

impl std::fmt::Debug for PgTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTx")
            .field("write", &self.write)
            .field("location", &self.location)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl<'c> PgTx<'c> {
    /// Wraps a client whose transaction the caller opened (`write`: a
    /// READ COMMITTED write transaction that has written nothing yet; else
    /// a REPEATABLE READ READ ONLY one) and ends.
    pub fn new(client: &'c mut Client, write: bool) -> Self {
        PgTx {
            client,
            cache: None,
            next_event: None,
            horizon: None,
            locked: None,
            write,
            statements: 0,
            location: "",
            failure: None,
        }
    }

    /// Runs statements as named ones prepared once on this connection
    /// ([`StatementCache`]); without it every statement is unnamed.
    pub fn with_cache(mut self, cache: &'c mut StatementCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Names the server in errors ([`super::location::PgLocation::display`];
    /// without it STORE_UNAVAILABLE's location is empty for the Store to
    /// fill in).
    pub fn with_location(mut self, location: &'c str) -> Self {
        self.location = location;
        self
    }

    /// Whether this is a write transaction.
    pub fn is_write(&self) -> bool {
        self.write
    }

    /// What the first failed statement meant for the transaction, if one
    /// failed (and no savepoint rollback undid it): the Store rolls back,
    /// and retries on [`Failure::Retry`] or [`Failure::Reconnect`].
    pub fn failure(&self) -> Option<Failure> {
        self.failure
    }

    /// The client (for what the Store runs beside the interface).
    pub fn client(&mut self) -> &mut Client {
        self.client
    }

    /// Records a driver error and returns the caller's error for it.
    pub(crate) fn fail(&mut self, e: &postgres::Error) -> Error {
        if is_stale_plan(e) {
            // A migration changed a table under a prepared statement: run
            // the transaction again with statements prepared anew.
            if let Some(c) = self.cache.as_mut() {
                c.statements.clear();
            }
            self.note(Failure::Retry);
            return Error::Busy { timeout_ms: 0 };
        }
        let class = classify(e, self.location);
        self.note(match class {
            Class::Transient => Failure::Retry,
            Class::Lost(_) => Failure::Reconnect,
            Class::Final(_) => Failure::Aborted,
        });
        to_error(e, self.location)
    }

    /// Records a failure that is not a driver error's own class.
    pub(crate) fn note(&mut self, f: Failure) {
        self.failure.get_or_insert(f);
    }

    /// A refusal by a key, constraint or trigger (import): recorded as
    /// [`Failure::Aborted`] (the caller rolls back to its savepoint); any
    /// other driver error is returned.
    pub(crate) fn refused(&mut self, e: &postgres::Error) -> Result<bool> {
        if is_refusal(e) {
            self.note(Failure::Aborted);
            Ok(false)
        } else {
            Err(self.fail(e))
        }
    }

    /// The statement for `sql` from the cache, prepared now if it is not
    /// there yet; `None` when statements run unnamed (`statement_cache_size=0`).
    fn prepared(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> Option<std::result::Result<postgres::Statement, postgres::Error>> {
        let cache = self.cache.as_mut()?;
        if let Some(st) = cache.get(sql) {
            return Some(Ok(st));
        }
        if !cache.make_room() {
            return None;
        }
        let types: Vec<Type> = p.iter().map(|(_, t)| t.clone()).collect();
        Some(self.client.prepare_typed(sql, &types).inspect(|st| {
            cache.insert(sql, st.clone());
        }))
    }

    /// Keeps what the next event of `session` needs (see the field), if
    /// this transaction holds the session's row.
    pub(crate) fn keep_next_event(&mut self, session: &str, n: super::sql::events::NextEvent) {
        if self.holds_lock(session) {
            self.next_event = Some((session.to_owned(), n));
        }
    }

    /// Records that this transaction holds `session`'s row (locked, updated
    /// or inserted by it) until it ends.
    pub(crate) fn note_locked(&mut self, session: &str) {
        if self.write {
            self.locked = Some(session.to_owned());
        }
    }

    /// Whether this transaction holds `session`'s row.
    pub(crate) fn holds_lock(&self, session: &str) -> bool {
        self.locked.as_deref() == Some(session)
    }

    /// What the next event of `session` needs, if the last statement left
    /// it; taken.
    pub(crate) fn take_next_event(
        &mut self,
        session: &str,
    ) -> Option<super::sql::events::NextEvent> {
        match self.next_event.take() {
            Some((s, n)) if s == session => Some(n),
            _ => None,
        }
    }

    /// Keeps the feed's horizon the statement just run read.
    pub(crate) fn keep_horizon(&mut self, h: crate::store::FeedPos) {
        self.horizon = Some(h);
    }

    /// The feed's horizon, if the statement just run read it; taken.
    pub(crate) fn take_horizon(&mut self) -> Option<crate::store::FeedPos> {
        self.horizon.take()
    }

    /// How many statements this transaction has run.
    pub fn statements_run(&self) -> usize {
        self.statements
    }

    /// Runs a query, prepared or unnamed.
    fn query_raw(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        self.next_event = None;
        self.horizon = None;
        self.statements += 1;
        match self.prepared(sql, p) {
            Some(Ok(st)) => {
                let values: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    p.iter().map(|(v, _)| *v).collect();
                self.client.query(&st, &values)
            }
            Some(Err(e)) => Err(e),
            None => self.client.query_typed(sql, p),
        }
    }

    /// Runs a statement, prepared or unnamed; the rows it changed.
    fn execute_raw(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> std::result::Result<u64, postgres::Error> {
        self.next_event = None;
        self.horizon = None;
        self.statements += 1;
        match self.prepared(sql, p) {
            Some(Ok(st)) => {
                let values: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    p.iter().map(|(v, _)| *v).collect();
                self.client.execute(&st, &values)
            }
            Some(Err(e)) => Err(e),
            None => self.client.execute_typed(sql, p),
        }
    }

    /// The rows of a statement.
    pub(crate) fn rows(&mut self, sql: &str, p: &[Param<'_>]) -> Result<Vec<Row>> {
        match self.query_raw(sql, p) {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.fail(&e)),
        }
    }

    /// The first row of a statement, if any.
    pub(crate) fn row(&mut self, sql: &str, p: &[Param<'_>]) -> Result<Option<Row>> {
        self.rows(sql, p).map(|r| r.into_iter().next())
    }

    /// The first row of a statement that always returns one (an aggregate).
    pub(crate) fn one(&mut self, sql: &str, p: &[Param<'_>]) -> Result<Row> {
        self.row(sql, p)?
            .ok_or_else(|| Error::internal("database error: Query returned no rows"))
    }

    /// Runs a statement; returns the rows it changed.
    pub(crate) fn exec(&mut self, sql: &str, p: &[Param<'_>]) -> Result<u64> {
        match self.execute_raw(sql, p) {
            Ok(n) => Ok(n),
            Err(e) => Err(self.fail(&e)),
        }
    }

    /// As [`PgTx::rows`], returning the driver's error unrecorded (the
    /// caller decides whether it is a refusal).
    pub(crate) fn try_rows(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        self.query_raw(sql, p)
    }

    /// As [`PgTx::exec`], returning the driver's error unrecorded.
    pub(crate) fn try_exec(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> std::result::Result<u64, postgres::Error> {
        self.execute_raw(sql, p)
    }
}

// The store interface's methods, one typed statement each (or a few), in
// a file of their own.
mod interface;
