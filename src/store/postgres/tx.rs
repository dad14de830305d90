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
//! [`Tx::select_session_state`], which locks the session's row (`FOR NO
//! KEY UPDATE`, the lock an UPDATE of non-key columns takes) until COMMIT:
//! the next seq (max + 1) and the chain's previous hash are then read under
//! that lock, each statement in a snapshot taken after it (READ
//! COMMITTED). It is also the statement that gives the transaction its id
//! (`events.tx_id`), and it must come before any other write: a row lock
//! waited for takes the id only once granted, so writers of one session
//! get increasing ids in the order they append, and the feed's `(tx_id,
//! event_id)` order agrees with each session's seq order (which
//! [`Tx::scan_feed_session`] relies on). A plain UPDATE that waits for a
//! row takes its id before waiting; the guarded UPDATE of `sessions` does
//! not, because the table has BEFORE UPDATE row triggers, for which
//! PostgreSQL locks the row first — so a write whose first statement is
//! that UPDATE (`fork`) keeps the order too
//! (`tests/it/pg_tx_concurrency.rs` pins both).
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

/// Named statements prepared on one connection, by SQL text (at most
/// `capacity`; beyond, statements run unnamed). A statement is parsed and
/// planned once per connection instead of at every call, which measured
/// about half of a checkpoint's server time (BENCHMARKS.md, "PostgreSQL").
/// They are protocol-level statements of the session: a pooler in
/// transaction mode needs `statement_cache_size=0` in the URL (or pgbouncer
/// ≥ 1.21 with `max_prepared_statements`), docs/postgres.md.
#[derive(Debug, Default)]
pub struct StatementCache {
    statements: std::collections::HashMap<String, postgres::Statement>,
    capacity: usize,
}

impl StatementCache {
    /// A cache of at most `capacity` statements (0: none prepared).
    pub fn new(capacity: usize) -> Self {
        StatementCache {
            statements: std::collections::HashMap::new(),
            capacity,
        }
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
    /// The session whose row this transaction holds locked (a write's
    /// state read, guarded UPDATE or insert): only then is what a statement
    /// read of its events still true at the next one.
    locked: Option<String>,
    write: bool,
    location: &'c str,
    failure: Option<Failure>,
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
            locked: None,
            write,
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
    /// there yet; `None` when statements run unnamed (no cache, or full).
    fn prepared(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> Option<std::result::Result<postgres::Statement, postgres::Error>> {
        let cache = self.cache.as_mut()?;
        if let Some(st) = cache.statements.get(sql) {
            return Some(Ok(st.clone()));
        }
        if cache.statements.len() >= cache.capacity {
            return None;
        }
        let types: Vec<Type> = p.iter().map(|(_, t)| t.clone()).collect();
        Some(self.client.prepare_typed(sql, &types).inspect(|st| {
            cache.statements.insert(sql.to_owned(), st.clone());
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

    /// Runs a query, prepared or unnamed.
    fn query_raw(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        self.next_event = None;
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

use super::sql::{
    chain as pc, events as pe, feed as pf, list as pl, runs as pr, sessions as ps, transfer as pt,
    workflow as pw,
};
use crate::error::LatestEvent;
use crate::model::{Event, Run, Session, Usage};
use crate::store::rows::{
    BudgetRow, ChainRow, ChildRow, GateFull, GateRow, KeyHit, LeaseRow, ListQuery, NewEvent,
    NewGate, SessionRows, SessionState, SnapshotRow, StoredEvent, StoredRef, WorkflowRows,
};
use crate::store::{
    chain::SnapshotLink, BudgetLimits, FeedPos, FeedScan, RunChange, SessionChange, SessionGuard,
    SessionRow, SessionsPage, Tx,
};
use postgres::types::Type;

impl PgTx<'_> {
    /// Whether a statement keyed by one text value returns a row.
    fn exists(&mut self, sql: &str, key: &str) -> Result<bool> {
        Ok(self.row(sql, &[(&key, Type::TEXT)])?.is_some())
    }

    /// The BIGINT of the first column of a statement keyed by one text
    /// value (or of none), if it returns a row.
    fn int_of(&mut self, sql: &str, key: Option<&str>) -> Result<Option<Option<i64>>> {
        let row = match key {
            Some(k) => self.row(sql, &[(&k, Type::TEXT)])?,
            None => self.row(sql, &[])?,
        };
        row.map(|r| super::sql::col(&r, 0)).transpose()
    }

    /// Runs one of the fixed savepoint statements.
    fn savepoint_stmt(&mut self, sql: &str) -> Result<()> {
        self.exec(sql, &[]).map(|_| ())
    }
}

impl Tx for PgTx<'_> {
    fn find_session(&mut self, id: &str) -> Result<Option<Session>> {
        Ok(ps::find_session(self, id)?.map(|(s, _)| s))
    }

    fn session_exists(&mut self, id: &str) -> Result<bool> {
        self.exists(ps::SESSION_EXISTS, id)
    }

    fn select_status_rev(&mut self, id: &str) -> Result<Option<(String, i64)>> {
        ps::select_status_rev(self, id)
    }

    fn select_session_state(&mut self, id: &str) -> Result<Option<SessionState>> {
        ps::select_session_state(self, id)
    }

    fn newest_created_at_ms(&mut self) -> Result<Option<i64>> {
        Ok(self.int_of(ps::SELECT_MAX_CREATED, None)?.flatten())
    }

    fn insert_session(&mut self, row: &SessionRow<'_>) -> Result<Option<i64>> {
        ps::insert_session(self, row)
    }

    fn update_session(
        &mut self,
        id: &str,
        guard: SessionGuard<'_>,
        change: &SessionChange<'_>,
    ) -> Result<bool> {
        ps::update_session(self, id, guard, change)
    }

    fn update_context(&mut self, id: &str, context: &str) -> Result<()> {
        self.exec(
            pw::UPDATE_CONTEXT,
            &[(&id, Type::TEXT), (&context, Type::TEXT)],
        )
        .map(|_| ())
    }

    fn count_refs(&mut self, id: &str, kind: &str) -> Result<i64> {
        let r = self.one(ps::COUNT_REFS, &[(&id, Type::TEXT), (&kind, Type::TEXT)])?;
        super::sql::col(&r, 0)
    }

    fn ref_exists(&mut self, id: &str, kind: &str, ref_id: &str) -> Result<bool> {
        let p: [Param<'_>; 3] = [
            (&id, Type::TEXT),
            (&kind, Type::TEXT),
            (&ref_id, Type::TEXT),
        ];
        Ok(self.row(ps::REF_EXISTS, &p)?.is_some())
    }

    fn insert_ref(
        &mut self,
        id: &str,
        kind: &str,
        ref_id: &str,
        ordinal: i64,
        linked_seq: i64,
    ) -> Result<()> {
        let p: [Param<'_>; 5] = [
            (&id, Type::TEXT),
            (&kind, Type::TEXT),
            (&ref_id, Type::TEXT),
            (&ordinal, Type::INT8),
            (&linked_seq, Type::INT8),
        ];
        self.exec(ps::INSERT_REF, &p).map(|_| ())
    }

    fn select_children(&mut self, id: &str) -> Result<Vec<ChildRow>> {
        ps::select_children(self, id)
    }

    fn list_sessions(&mut self, q: &ListQuery) -> Result<SessionsPage> {
        pl::select_page(self, q)
    }

    fn insert_event(&mut self, e: &NewEvent<'_>) -> Result<(i64, i64)> {
        pe::insert_event(self, e)
    }

    fn select_events(&mut self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<Event>> {
        pe::select_events(self, id, after_seq, limit)
    }

    fn latest_event(&mut self, id: &str) -> Result<Option<LatestEvent>> {
        pe::latest_event(self, id)
    }

    fn find_key(&mut self, key: &str, id: &str) -> Result<Option<KeyHit>> {
        pe::find_key(self, key, id)
    }

    fn find_created_by_key(&mut self, key: &str) -> Result<Option<(String, String)>> {
        pe::find_created_by_key(self, key)
    }

    fn scan_feed(
        &mut self,
        after: FeedPos,
        limit: usize,
        max_scan: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<FeedScan> {
        pf::scan_all(self, after, limit, max_scan, keep)
    }

    fn scan_feed_session(
        &mut self,
        id: &str,
        after: FeedPos,
        limit: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Vec<(FeedPos, Event)>> {
        pf::scan_session(self, id, after, limit, keep)
    }

    fn feed_horizon(&mut self) -> Result<FeedPos> {
        pf::horizon(self)
    }

    fn feed_pos_of_event(&mut self, event_id: i64) -> Result<Option<FeedPos>> {
        pf::pos_of_event(self, event_id)
    }

    fn insert_snapshot(
        &mut self,
        id: &str,
        seq: i64,
        step: Option<&str>,
        state: &str,
    ) -> Result<()> {
        pw::insert_snapshot(self, id, seq, step, state)
    }

    fn select_snapshots(&mut self, id: &str) -> Result<Vec<SnapshotRow>> {
        pw::select_snapshots(self, id)
    }

    fn find_snapshot(&mut self, id: &str, seq: Option<i64>) -> Result<Option<SnapshotRow>> {
        pw::find_snapshot(self, id, seq)
    }

    fn select_gates(&mut self, id: &str) -> Result<Vec<GateFull>> {
        pw::select_gates(self, id)
    }

    fn find_latest_gate(&mut self, id: &str, name: &str) -> Result<Option<GateRow>> {
        pw::find_latest_gate(self, id, name)
    }

    fn find_pending_gate(&mut self, id: &str) -> Result<Option<GateFull>> {
        pw::find_pending_gate(self, id)
    }

    fn insert_gate(&mut self, g: &NewGate<'_>) -> Result<()> {
        pw::insert_gate(self, g)
    }

    fn decide_gate(
        &mut self,
        gate_id: i64,
        status: &str,
        seq: i64,
        at_ms: i64,
        reason: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<()> {
        pw::decide_gate(self, gate_id, status, seq, at_ms, reason, outcome)
    }

    fn find_lease(&mut self, id: &str) -> Result<Option<LeaseRow>> {
        pw::find_lease(self, id)
    }

    fn upsert_lease(&mut self, id: &str, l: &LeaseRow) -> Result<()> {
        pw::upsert_lease(self, id, l)
    }

    fn delete_lease(&mut self, id: &str) -> Result<()> {
        self.exec(pw::DELETE_LEASE, &[(&id, Type::TEXT)])
            .map(|_| ())
    }

    fn select_budget(&mut self, id: &str) -> Result<Option<BudgetRow>> {
        pw::select_budget(self, id)
    }

    fn upsert_budget(&mut self, id: &str, b: &BudgetLimits, new: bool, at_ms: i64) -> Result<()> {
        pw::upsert_budget(self, id, b, new, at_ms)
    }

    fn mark_budget_exceeded(&mut self, id: &str, at_ms: i64) -> Result<()> {
        self.exec(
            pw::UPDATE_BUDGET_EXCEEDED,
            &[(&id, Type::TEXT), (&at_ms, Type::INT8)],
        )
        .map(|_| ())
    }

    fn reset_budget(&mut self, id: &str, base: &Usage, at_ms: i64) -> Result<()> {
        pw::reset_budget(self, id, base, at_ms)
    }

    fn insert_run(
        &mut self,
        run_id: &str,
        session_id: &str,
        input: Option<&str>,
        metadata: &str,
        at_ms: i64,
    ) -> Result<bool> {
        pr::insert_run(self, run_id, session_id, input, metadata, at_ms)
    }

    fn find_run(&mut self, run_id: &str) -> Result<Option<Run>> {
        Ok(pr::select(self, pr::SELECT_RUN, run_id)?.into_iter().next())
    }

    fn find_running_run(&mut self, session_id: &str) -> Result<Option<Run>> {
        Ok(pr::select(self, pr::SELECT_RUNNING_RUN, session_id)?
            .into_iter()
            .next())
    }

    fn select_runs(&mut self, session_id: &str) -> Result<Vec<Run>> {
        pr::select(self, pr::SELECT_RUNS_OF_SESSION, session_id)
    }

    fn select_open_run_ids(&mut self, session_id: &str) -> Result<Vec<String>> {
        pr::select_open_run_ids(self, session_id)
    }

    fn update_run(&mut self, run_id: &str, change: RunChange<'_>, at_ms: i64) -> Result<usize> {
        pr::update_run(self, run_id, change, at_ms)
    }

    fn walk_chain(
        &mut self,
        session: Option<&str>,
        f: &mut dyn FnMut(ChainRow) -> bool,
    ) -> Result<()> {
        pc::walk(self, session, f)
    }

    fn sessions_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, i64)>> {
        pc::sessions_page(self, after, limit)
    }

    fn first_orphan_event(&mut self) -> Result<Option<(String, i64)>> {
        pc::first_orphan(self)
    }

    fn snapshot_links(&mut self, id: &str) -> Result<Vec<SnapshotLink>> {
        pc::snapshot_links(self, id)
    }

    fn first_missing_snapshot(&mut self, id: &str) -> Result<Option<i64>> {
        pc::first_missing_snapshot(self, id)
    }

    fn find_session_export(&mut self, id: &str) -> Result<Option<(Session, Option<i64>)>> {
        ps::find_session(self, id)
    }

    fn select_refs_full(&mut self, id: &str) -> Result<Vec<StoredRef>> {
        pt::select_refs(self, id)
    }

    fn select_events_full(&mut self, id: &str) -> Result<Vec<StoredEvent>> {
        pt::select_events_full(self, id)
    }

    fn select_workflow(&mut self, id: &str) -> Result<WorkflowRows> {
        pt::select_workflow(self, id)
    }

    fn find_insert_seq(&mut self, id: &str) -> Result<Option<i64>> {
        Ok(self.int_of(pt::SELECT_INSERT_SEQ, Some(id))?.flatten())
    }

    fn max_insert_seq(&mut self) -> Result<i64> {
        // Only an import batch asks; it needs the sessions table to itself
        // for the rest of its transaction (see LOCK_SESSIONS_FOR_IMPORT).
        self.exec(pt::LOCK_SESSIONS_FOR_IMPORT, &[])?;
        Ok(self
            .int_of(pt::SELECT_MAX_INSERT_SEQ, None)?
            .flatten()
            .unwrap_or(0))
    }

    fn run_exists(&mut self, run_id: &str) -> Result<bool> {
        self.exists(pt::SELECT_RUN_EXISTS, run_id)
    }

    fn insert_session_rows(&mut self, s: &SessionRows) -> Result<bool> {
        match pt::insert_session_rows(self, s) {
            Ok(inserted) => Ok(inserted),
            Err(pt::Stop::Db(e)) => self.refused(&e),
            Err(pt::Stop::Other(e)) => Err(e),
        }
    }

    fn savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::SAVEPOINT)
    }

    fn release_savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::RELEASE)
    }

    fn rollback_to_savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::ROLLBACK_TO)?;
        // The statements after the savepoint, and their error, are undone.
        self.failure = None;
        Ok(())
    }
}
