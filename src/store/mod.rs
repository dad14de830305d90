//! The storage layer: the only code that knows SQL or names a driver.
//!
//! [`Tx`] is the store interface: the typed operations the ledger runs
//! inside one transaction — rows in ([`rows`], [`writes`], [`purge_rows`],
//! [`transfer_rows`]),
//! model values out — each
//! owning its SQL and its parameters. The ledger decides (validation,
//! redaction, the state machine, the hash chain, the diagnosis of a refused
//! write); the store executes. [`Store`] ([`handle`]) is one open database
//! whichever backend holds it.
//!
//! Laid out by backend, the two mirroring each other file for file where
//! they do the same job:
//!
//! | job                                 | SQLite ([`sqlite`])        | PostgreSQL ([`postgres`])  |
//! |-------------------------------------|----------------------------|----------------------------|
//! | the open database, its transactions | `store.rs`                 | `store.rs`                 |
//! | `impl Tx` over one transaction      | `tx.rs`, `tx/interface.rs` | `tx.rs`, `tx/interface.rs` |
//! | the SQL, one module per table group | `sql/`                     | `sql/`                     |
//! | schema migrations                   | `migrate.rs`               | `migrate.rs`               |
//! | `logbook sql`                       | `query.rs`                 | `query.rs`                 |
//! | `doctor`'s backend checks           | `admin.rs` (+backup)       | `doctor.rs`                |
//! | reading the driver's values         | `codec.rs`                 | `sql/mod.rs` (`col`)       |
//! | where the database is               | `open.rs`, `files.rs`      | `location.rs`, `tls.rs`    |
//! | errors classified                   | `crate::error`             | `errors.rs`                |
//!
//! SQLite alone has a writer queue (`writelock.rs`), busy waits (`busy.rs`),
//! WAL checkpoints (`checkpointer.rs`) and a transaction helper (`txn.rs`).
//! The ledger names neither backend module: what it needs of one (a file's
//! checks, a server's facts) is re-exported here.

pub mod codec;
pub mod handle;
pub mod postgres;
pub mod purge_rows;
pub mod rows;
pub mod sqlite;
pub mod transfer_rows;
pub mod writes;

pub use writes::{
    BudgetLimits, LeaseTakenOver, OneCheckpoint, OneOutcome, OneRunChange, OneRunWrite, OneRunsEnd,
    OneSide, OneSnapshot, OneWrite, RunChange, SessionChange, SessionGuard, SessionRow,
};

pub use handle::{OpenOptions, Store};
pub use sqlite::open::{open, StoreConfig, SyncMode};

// What the ledger uses of one backend, so that it names neither backend
// module: SQLite's files (doctor's file checks, backup, the outputs that
// must not overwrite the database) and a server's location and triggers
// (doctor on a server).
pub use postgres::doctor::{expected_triggers, PgFacts};
pub use postgres::location::redacted as redacted_location;
pub use sqlite::admin::{Drift, DriftKind};
pub(crate) use sqlite::files::check_sqlite_name;
pub use sqlite::files::DbFiles;
pub(crate) use sqlite::open::{companion, create_private_dirs, header_says_wal, wal_has_frames};
pub use sqlite::open::{JOURNAL_SIZE_LIMIT_BYTES, SQLITE_DEFAULT_CACHE_KIB, WAL_MISMATCH};
pub use sqlite::store::SqliteStore;

/// The newest schema version this binary knows: the highest `V<N>` in
/// `migrations/sqlite/` and in `migrations/postgres/`, which have the same
/// versions. A constant so that opening a current database never builds
/// refinery's runner (which compiles a regex per process, about 1 ms of a
/// CLI call); `latest_version_matches_the_embedded_migrations` pins it, and
/// `postgres_migrations_end_at_the_shared_latest_version` the server's.
pub const LATEST_VERSION: i64 = 12;

use crate::error::{LatestEvent, Result};
use crate::model::{Event, Run, Session, Usage};
use rows::{
    BudgetRow, ChainRow, ChildRow, GateFull, GateRow, KeyHit, LeaseRow, ListQuery, NewEvent,
    NewGate, NewPurge, PurgeCandidate, PurgeProgress, PurgeScan, PurgedChildRow, SessionRows,
    SessionState, SnapshotRow, StoredEvent, StoredRef, Tombstone, WorkflowRows,
};

/// Whether a session's parent is there ([`ShowRows::parent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentRow {
    /// A session.
    Present,
    /// Gone, with a tombstone: a purge removed it.
    Purged,
    /// Neither (a row removed by hand, or an import that dropped it).
    Missing,
}

/// What `show` reads of one session in one snapshot
/// ([`Tx::show_rows`]).
#[derive(Debug, Clone)]
pub struct ShowRows {
    /// The whole session.
    pub session: Session,
    /// Its events, by seq.
    pub events: Vec<Event>,
    /// Its parent's state; `None` without a parent.
    pub parent: Option<ParentRow>,
    /// Its newest pending gate, if any (whatever the session's status).
    pub pending_gate: Option<GateFull>,
    /// Its lease row, live or not.
    pub lease: Option<LeaseRow>,
    /// Its children's statuses, in creation order.
    pub child_statuses: Vec<String>,
    /// Its children purges removed, per purge ([`Tx::purged_children`]).
    pub purged_children: Vec<PurgedChildRow>,
}

/// A position in the global feed (docs/design.md, "Feed"): a follower at `p` has seen
/// every event at or before it, in the feed's order `(tx, event_id)`.
///
/// On SQLite one writer commits at a time, so event ids become visible in
/// order and `tx` is always 0: the position is the last `event_id` seen.
/// On PostgreSQL ids are drawn before commit, so the feed is ordered by
/// the writing transaction's id first (`events.tx_id`) and read only below
/// the oldest transaction still running (`docs/postgres.md`, "The feed").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FeedPos {
    /// The writing transaction's id (`events.tx_id`); 0 on SQLite.
    pub tx: i64,
    /// The event's id.
    pub event_id: i64,
}

impl FeedPos {
    /// The position of the last event `event_id` on SQLite.
    pub const fn event(event_id: i64) -> Self {
        FeedPos { tx: 0, event_id }
    }
}

/// Where "now" is in the feed ([`Tx::feed_start`]): where a follower that
/// starts now begins, and which transactions above that point had already
/// ended (their events were written before now, and a follower that starts
/// now skips them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedStart {
    /// The feed's horizon ([`Tx::feed_horizon`]).
    pub pos: FeedPos,
    /// On a server: the transactions at or above the horizon that had
    /// ended; `None` on SQLite, where nothing above the horizon exists.
    pub ended: Option<EndedAbove>,
}

/// The transactions a server's snapshot saw as ended at or above its
/// horizon: every id below `xmax` that is not in `running`
/// (`pg_snapshot_xmax`, `pg_snapshot_xip`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndedAbove {
    /// The first transaction id not yet assigned then.
    pub xmax: i64,
    /// The transactions then running, at or above the horizon.
    pub running: Vec<i64>,
}

impl EndedAbove {
    /// Whether transaction `tx` had ended then.
    pub fn ended(&self, tx: i64) -> bool {
        tx < self.xmax && !self.running.contains(&tx)
    }
}

/// One page of the global feed: the events kept with their positions, the
/// position of the last event scanned (the cursor given when none was),
/// and whether the scan reached the end of what is visible.
pub type FeedScan = (Vec<(FeedPos, Event)>, FeedPos, bool);

/// One page of `session list`: the sessions and the next page's
/// `(timestamp ms, insert_seq)` key.
pub type SessionsPage = (Vec<Session>, Option<(i64, i64)>);

/// The store interface: typed operations inside one open transaction (a
/// read snapshot or a write transaction, as the caller opened it).
///
/// Errors are logbook's own, classified by the backend (busy, corrupt, I/O;
/// anything unexpected INTERNAL); a handle fills in its path and busy
/// timeout.
pub trait Tx {
    // ---- sessions ----

    /// The whole session (with data, latest checkpoint and references).
    fn find_session(&mut self, id: &str) -> Result<Option<Session>>;
    /// Whether the session exists.
    fn session_exists(&mut self, id: &str) -> Result<bool>;
    /// Whether a session exists, holding it (on PostgreSQL, FOR KEY SHARE
    /// until the transaction ends) so that a purge cannot remove it while
    /// a child is created under it. In write transactions only.
    fn lock_session_key(&mut self, id: &str) -> Result<bool>;
    /// The session's status (as stored) and rev.
    fn select_status_rev(&mut self, id: &str) -> Result<Option<(String, i64)>>;
    /// Status, rev, `updated_at_ms` and usage sums.
    fn select_session_state(&mut self, id: &str) -> Result<Option<SessionState>>;
    /// The newest `created_at_ms` of any session.
    fn newest_created_at_ms(&mut self) -> Result<Option<i64>>;
    /// Inserts a session row, its data and tags; `Ok(None)` when its id is
    /// taken (nothing inserted).
    fn insert_session(&mut self, row: &SessionRow<'_>) -> Result<Option<i64>>;
    /// The guarded conditional UPDATE: whether a row matched.
    fn update_session(
        &mut self,
        id: &str,
        guard: SessionGuard<'_>,
        change: &SessionChange<'_>,
    ) -> Result<bool>;
    /// Replaces the session's context (restore).
    fn update_context(&mut self, id: &str, context: &str) -> Result<()>;
    /// How many references of `kind` the session has.
    fn count_refs(&mut self, id: &str, kind: &str) -> Result<i64>;
    /// Whether the reference is linked already.
    fn ref_exists(&mut self, id: &str, kind: &str, ref_id: &str) -> Result<bool>;
    /// Links a reference at `ordinal`, by the event at `linked_seq`.
    fn insert_ref(
        &mut self,
        id: &str,
        kind: &str,
        ref_id: &str,
        ordinal: i64,
        linked_seq: i64,
    ) -> Result<()>;
    /// The session's direct children, in creation order.
    fn select_children(&mut self, id: &str) -> Result<Vec<ChildRow>>;
    /// A page of `session list`: the sessions and the next page's key.
    fn list_sessions(&mut self, q: &ListQuery) -> Result<SessionsPage>;

    // ---- events ----

    /// Appends an event with its chain link (and idempotency key); returns
    /// `(event_id, seq)`.
    fn insert_event(&mut self, e: &NewEvent<'_>) -> Result<(i64, i64)>;
    /// The session's events with `after_seq < seq <= after_seq + limit`.
    fn select_events(&mut self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<Event>>;
    /// The session's newest event.
    fn latest_event(&mut self, id: &str) -> Result<Option<LatestEvent>>;
    /// What an idempotency key produced on a session.
    fn find_key(&mut self, key: &str, id: &str) -> Result<Option<KeyHit>>;
    /// The session (and request digest) a create with this key produced.
    fn find_created_by_key(&mut self, key: &str) -> Result<Option<(String, String)>>;
    /// Events of every session after `after`, in feed order: at most
    /// `limit` kept by `keep`, at most `max_scan` scanned.
    fn scan_feed(
        &mut self,
        after: FeedPos,
        limit: usize,
        max_scan: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<FeedScan>;
    /// One session's events after `after`, in feed order, at most `limit`
    /// kept.
    fn scan_feed_session(
        &mut self,
        id: &str,
        after: FeedPos,
        limit: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Vec<(FeedPos, Event)>>;
    /// The feed's horizon: every event at or before it is visible now, and
    /// every event still to come will be after it (SQLite: the newest
    /// event; PostgreSQL: the oldest running transaction, event id 0).
    fn feed_horizon(&mut self) -> Result<FeedPos>;
    /// Where a follower that starts now begins ([`FeedStart`]). By default
    /// the horizon alone (SQLite's exact answer: ids become visible in
    /// order).
    fn feed_start(&mut self) -> Result<FeedStart> {
        Ok(FeedStart {
            pos: self.feed_horizon()?,
            ended: None,
        })
    }
    /// The position of event `event_id` (an integer cursor), `None` when
    /// there is no such event. SQLite: `(0, event_id)` whatever it holds.
    fn feed_pos_of_event(&mut self, event_id: i64) -> Result<Option<FeedPos>>;

    // ---- snapshots, gates, leases ----

    /// Stores the snapshot of the checkpoint event at `seq`: its state
    /// (compact JSON object text) and its binary payload, if any.
    fn insert_snapshot(
        &mut self,
        id: &str,
        seq: i64,
        step: Option<&str>,
        state: &str,
        payload: Option<&[u8]>,
    ) -> Result<()>;
    /// The session's snapshots by seq, without state.
    fn select_snapshots(&mut self, id: &str) -> Result<Vec<SnapshotRow>>;
    /// The snapshot at `seq` (or the newest), with its state.
    fn find_snapshot(&mut self, id: &str, seq: Option<i64>) -> Result<Option<SnapshotRow>>;
    /// What the checkpoint event at `seq` records of its snapshot; `None`
    /// when there is no such event.
    fn snapshot_record(&mut self, id: &str, seq: i64) -> Result<Option<rows::SnapshotRecord>>;
    /// The session's gates, oldest first.
    fn select_gates(&mut self, id: &str) -> Result<Vec<GateFull>>;
    /// The newest round of gate `name`.
    fn find_latest_gate(&mut self, id: &str, name: &str) -> Result<Option<GateRow>>;
    /// The newest pending gate.
    fn find_pending_gate(&mut self, id: &str) -> Result<Option<GateFull>>;
    /// Opens a gate.
    fn insert_gate(&mut self, g: &NewGate<'_>) -> Result<()>;
    /// Records a gate's decision.
    #[allow(clippy::too_many_arguments)]
    fn decide_gate(
        &mut self,
        gate_id: i64,
        status: &str,
        seq: i64,
        at_ms: i64,
        reason: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<()>;
    /// The session's lease row.
    fn find_lease(&mut self, id: &str) -> Result<Option<LeaseRow>>;
    /// Takes, renews or takes over the lease.
    fn upsert_lease(&mut self, id: &str, l: &LeaseRow) -> Result<()>;
    /// Releases the lease.
    fn delete_lease(&mut self, id: &str) -> Result<()>;

    // ---- budgets ----

    /// The session's budget.
    fn select_budget(&mut self, id: &str) -> Result<Option<BudgetRow>>;
    /// Sets a budget's limits and policy (a new one when `new`).
    fn upsert_budget(&mut self, id: &str, b: &BudgetLimits, new: bool, at_ms: i64) -> Result<()>;
    /// Marks the write that crossed a limit.
    fn mark_budget_exceeded(&mut self, id: &str, at_ms: i64) -> Result<()>;
    /// Moves the budget's base to the given usage and re-arms it.
    fn reset_budget(&mut self, id: &str, base: &Usage, at_ms: i64) -> Result<()>;

    // ---- runs ----

    /// Inserts a pending run; `Ok(false)` when its id is taken.
    fn insert_run(
        &mut self,
        run_id: &str,
        session_id: &str,
        input: Option<&str>,
        metadata: &str,
        at_ms: i64,
    ) -> Result<bool>;
    /// One run.
    fn find_run(&mut self, run_id: &str) -> Result<Option<Run>>;
    /// The session's running run.
    fn find_running_run(&mut self, session_id: &str) -> Result<Option<Run>>;
    /// The session's runs in creation order.
    fn select_runs(&mut self, session_id: &str) -> Result<Vec<Run>>;
    /// The session's pending and running runs' ids, in creation order.
    fn select_open_run_ids(&mut self, session_id: &str) -> Result<Vec<String>>;
    /// A guarded run UPDATE at `at_ms`: how many rows it changed.
    fn update_run(&mut self, run_id: &str, change: RunChange<'_>, at_ms: i64) -> Result<usize>;

    // ---- the hash chain (verify) ----

    /// Every event (of one session, or all) in chain order; `f` returns
    /// `false` to stop.
    fn walk_chain(
        &mut self,
        session: Option<&str>,
        f: &mut dyn FnMut(ChainRow) -> bool,
    ) -> Result<()>;
    /// Up to `limit` sessions' ids and revs after id `after` (`""`: from
    /// the first), by id.
    fn sessions_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, i64)>>;
    /// The first event of no session: its session id and seq.
    fn first_orphan_event(&mut self) -> Result<Option<(String, i64)>>;
    /// The session's snapshots beside their events' records.
    fn snapshot_links(&mut self, id: &str) -> Result<Vec<rows::SnapshotLink>>;
    /// The first checkpoint event whose recorded snapshot is gone.
    fn first_missing_snapshot(&mut self, id: &str) -> Result<Option<i64>>;

    // ---- export and import ----

    /// The whole session (as [`Tx::find_session`]) and its checkpoint seq.
    fn find_session_export(&mut self, id: &str) -> Result<Option<(Session, Option<i64>)>>;
    /// A session's references with their order.
    fn select_refs_full(&mut self, id: &str) -> Result<Vec<StoredRef>>;
    /// A session's events with their stored hashes.
    fn select_events_full(&mut self, id: &str) -> Result<Vec<StoredEvent>>;
    /// A session's runs, budget, snapshots and gates.
    fn select_workflow(&mut self, id: &str) -> Result<WorkflowRows>;
    /// The insertion key of a session.
    fn find_insert_seq(&mut self, id: &str) -> Result<Option<i64>>;
    /// The largest insertion key. Asked by an import batch first thing in
    /// its transaction: from then until it commits no other writer may
    /// insert a session (SQLite's `BEGIN IMMEDIATE` holds every writer
    /// off; PostgreSQL locks the sessions table against writers).
    fn max_insert_seq(&mut self) -> Result<i64>;
    /// Whether a run id is taken.
    fn run_exists(&mut self, run_id: &str) -> Result<bool>;
    /// Inserts every row of an imported session; `Ok(false)` when a key,
    /// constraint or trigger refused one (the caller rolls back to its
    /// savepoint).
    fn insert_session_rows(&mut self, s: &SessionRows) -> Result<bool>;
    /// Opens the savepoint of one imported session.
    fn savepoint(&mut self) -> Result<()>;
    /// Keeps the savepoint's rows.
    fn release_savepoint(&mut self) -> Result<()>;
    /// Undoes the savepoint's rows.
    fn rollback_to_savepoint(&mut self) -> Result<()>;

    // Retention (docs/design.md, "Retention").

    /// Up to `limit` sessions the filter's SQL part chooses, after
    /// insert_seq `after`, by insert_seq.
    fn purge_candidates(
        &mut self,
        f: &PurgeScan,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PurgeCandidate>>;
    /// One session as a purge candidate, whatever its status.
    fn purge_candidate(&mut self, id: &str) -> Result<Option<PurgeCandidate>>;
    /// Per app, `(app, ended_at_ms, insert_seq)` of the `n`-th newest ended
    /// session the filter chooses.
    fn keep_last_cutoffs(
        &mut self,
        f: &PurgeScan,
        n: i64,
    ) -> Result<Vec<(Option<String>, i64, i64)>>;
    /// The sessions that have a live descendant.
    fn live_ancestors(&mut self) -> Result<Vec<String>>;
    /// Unfinished purges recorded with exactly this filter, newest first.
    fn open_purges(&mut self, filter: &str) -> Result<Vec<PurgeProgress>>;
    /// One purge's progress.
    fn purge_progress(&mut self, purge_id: i64) -> Result<Option<PurgeProgress>>;
    /// Records a purge; its id.
    fn insert_purge(&mut self, p: &NewPurge<'_>) -> Result<i64>;
    /// Writes the tombstone; its trigger checks it and deletes the
    /// session's rows in the same statement (docs/schema.md, "Retention").
    fn purge_session(&mut self, t: &Tombstone) -> Result<()>;
    /// The session `id` as a purge finds it now, inside its write
    /// transaction; `None` once it is gone. On PostgreSQL this first takes
    /// its row FOR UPDATE, so a create under it (which holds the parent FOR
    /// KEY SHARE) is either seen here or waits for the purge.
    fn purge_recheck(&mut self, id: &str) -> Result<Option<rows::PurgeRecheck>>;
    /// Records how a purge ended.
    fn insert_purge_end(&mut self, e: &rows::PurgeEnd) -> Result<()>;
    /// Every unfinished purge: `(purge_id, filter)`, oldest first.
    fn open_purges_any(&mut self) -> Result<Vec<(i64, String)>>;
    /// Session ids of up to `limit` tombstones whose session incarnation
    /// still exists (written without their deletes, before V8).
    fn stray_tombstones(&mut self, limit: i64) -> Result<Vec<String>>;
    /// Declares this write transaction logbook's own recording of a purge
    /// or an imported audit trail, as `actor` (`cli`, `mcp`, `lib`): the
    /// schema refuses a purge record claiming logbook from raw SQL
    /// (docs/schema.md, "Retention"). SQLite knows logbook's connections
    /// by the function they define; PostgreSQL by `SET LOCAL
    /// logbook.writer`.
    fn declare_writer(&mut self, actor: &str) -> Result<()>;
    /// Up to `limit` purge records after purge id `after`, by id, each
    /// with its end.
    fn purge_rows_page(
        &mut self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(rows::PurgeRow, Option<rows::PurgeEndRow>)>>;
    /// One purge record with its end.
    fn purge_row(
        &mut self,
        purge_id: i64,
    ) -> Result<Option<(rows::PurgeRow, Option<rows::PurgeEndRow>)>>;
    /// The id of a purge record equal to `p` in every column (a record
    /// imported again).
    fn find_purge_like(&mut self, p: &NewPurge<'_>) -> Result<Option<i64>>;
    /// A purge's tombstones, by session id.
    fn purge_tombstones(&mut self, purge_id: i64) -> Result<Vec<Tombstone>>;
    /// The tombstone of one session incarnation.
    fn tombstone_at(&mut self, id: &str, insert_seq: i64) -> Result<Option<Tombstone>>;
    /// A session id's newest tombstone.
    fn find_tombstone(&mut self, id: &str) -> Result<Option<Tombstone>>;
    /// Up to `limit` tombstones after `(session_id, insert_seq)`.
    fn tombstones_page(&mut self, after: (&str, i64), limit: usize) -> Result<Vec<Tombstone>>;
    /// Per parent among `parents` and per purge, the parent's direct
    /// children that purge removed (each child under its newest tombstone;
    /// none whose id is a session again), by parent then purge id.
    fn purged_children(&mut self, parents: &[String]) -> Result<Vec<PurgedChildRow>>;

    // ---- show ----

    /// What `show` reads of session `id` (`None`: no such session), to be
    /// read in one snapshot: the session, its events by seq, whether its
    /// parent is there, its newest pending gate, its lease row, its
    /// children's statuses in creation order and its purged children. A
    /// server answers it in one statement (docs/postgres.md, "Reads"); this
    /// default composes the reads above in the caller's transaction.
    ///
    /// # Errors
    /// The store's.
    fn show_rows(&mut self, id: &str) -> Result<Option<ShowRows>> {
        let Some(session) = self.find_session(id)? else {
            return Ok(None);
        };
        let events = self.select_events(id, -1, i64::MAX)?;
        let parent = match &session.parent_session_id {
            None => None,
            Some(p) if self.session_exists(p)? => Some(ParentRow::Present),
            Some(p) if self.find_tombstone(p)?.is_some() => Some(ParentRow::Purged),
            Some(_) => Some(ParentRow::Missing),
        };
        Ok(Some(ShowRows {
            events,
            parent,
            pending_gate: self.find_pending_gate(id)?,
            lease: self.find_lease(id)?,
            child_statuses: self
                .select_children(id)?
                .into_iter()
                .map(|c| c.status)
                .collect(),
            purged_children: self.purged_children(&[id.to_owned()])?,
            session,
        }))
    }
}
