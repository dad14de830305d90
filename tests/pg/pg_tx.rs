//! The PostgreSQL store interface (`PgTx`, docs/design.md, "Backends") against SQLite's
//! (`SqliteTx`): a differential harness runs one scripted sequence of
//! `Tx` calls — every method of the trait, the refusals included — on a
//! fresh SQLite database and on a fresh PostgreSQL database, with the same
//! ids and times, and compares every value returned (its Debug form) step
//! by step. The script also asserts the values themselves where they are
//! known (a taken id is `None`, a stale guard matches no row, …), so two
//! backends wrong in the same way fail too.
//!
//! What differs by design is compared apart: feed positions (SQLite's `tx`
//! is 0, PostgreSQL's the writing transaction's id), the horizon, the
//! position of an event id that does not exist, and ids drawn after a
//! rolled-back insert (a PostgreSQL sequence does not give them back).

use crate::pg::{pg_test_db, PgDb};
use logbook::store::postgres::tx::{Failure, PgTx};
use logbook::store::sqlite::tx::SqliteTx;
use logbook::store::sqlite::txn::Txn;
use logbook::store::{FeedPos, FeedScan, StoreConfig, SyncMode, Tx};
use std::fmt::Debug;

/// One backend of the harness, each transaction opened as its Store would.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    /// A fresh SQLite file (its folder kept until the end).
    Sqlite(rusqlite::Connection, #[allow(dead_code)] tempfile::TempDir),
    /// A fresh PostgreSQL database (dropped with the `PgDb`).
    Pg(postgres::Client, PgDb),
}

impl Backend {
    /// A migrated SQLite database.
    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let conn = logbook::store::open(&StoreConfig {
            path: dir.path().join("diff.db"),
            busy_timeout_ms: 5000,
            sync: SyncMode::Normal,
            wal_autocheckpoint_pages: 1000,
            page_cache_kib: 2000,
            create: true,
        })
        .unwrap();
        Backend::Sqlite(conn, dir)
    }

    /// A migrated PostgreSQL database, or `None` without a test server.
    pub fn pg() -> Option<Backend> {
        let db = pg_test_db()?;
        let mut client = db.connect();
        logbook::store::postgres::migrate::migrate(&mut client).unwrap();
        Some(Backend::Pg(client, db))
    }

    /// Whether this is the PostgreSQL backend.
    pub fn is_pg(&self) -> bool {
        matches!(self, Backend::Pg(..))
    }

    /// Runs `f` in a write transaction and commits it.
    pub fn write<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> T) -> T {
        self.write_then(f, true)
    }

    /// Runs `f` in a write transaction, then commits or rolls back.
    pub fn write_then<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> T, commit: bool) -> T {
        match self {
            Backend::Sqlite(conn, _) => {
                let tx = Txn::immediate(conn).unwrap();
                let out = f(&mut SqliteTx::new(&tx));
                if commit {
                    tx.commit().unwrap();
                } else {
                    tx.rollback().unwrap();
                }
                out
            }
            Backend::Pg(client, _) => {
                client.batch_execute("BEGIN").unwrap();
                let out = f(&mut PgTx::new(client, true));
                client
                    .batch_execute(if commit { "COMMIT" } else { "ROLLBACK" })
                    .unwrap();
                out
            }
        }
    }

    /// Runs `f` in a read transaction (one snapshot).
    pub fn read<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> T) -> T {
        match self {
            Backend::Sqlite(conn, _) => {
                let tx = Txn::read(conn).unwrap();
                let out = f(&mut SqliteTx::new(&tx));
                tx.rollback().unwrap();
                out
            }
            Backend::Pg(client, _) => {
                client
                    .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .unwrap();
                let out = f(&mut PgTx::new(client, false));
                client.batch_execute("ROLLBACK").unwrap();
                out
            }
        }
    }

    /// Waits until the feed's horizon is past every event written so far
    /// (PostgreSQL): the horizon is the oldest transaction running on the
    /// whole server, and other tests run transactions in their own
    /// databases meanwhile. Bounded; SQLite needs no wait.
    pub fn settle(&mut self) {
        let Backend::Pg(client, _) = self else { return };
        for _ in 0..6000 {
            let row = client
                .query_one(
                    "SELECT count(*) FROM events \
                     WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot())",
                    &[],
                )
                .unwrap();
            if row.get::<_, i64>(0) == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the feed's horizon never passed this test's writes");
    }

    /// The PostgreSQL database, if this is that backend.
    pub fn pg_db(&self) -> Option<&PgDb> {
        match self {
            Backend::Pg(_, db) => Some(db),
            Backend::Sqlite(..) => None,
        }
    }
}

/// The values a script returned, step by step, in their Debug form.
#[derive(Debug, Default)]
pub struct Log {
    /// `(step, value)`.
    pub steps: Vec<(String, String)>,
}

impl Log {
    /// Records a step's value and hands it back.
    pub fn put<T: Debug>(&mut self, step: &str, v: T) -> T {
        self.steps.push((step.to_owned(), format!("{v:#?}")));
        v
    }
}

/// A feed page with each position reduced to its event id, after checking
/// that positions only grow and that `tx` is 0 on SQLite and a transaction
/// id on PostgreSQL.
pub fn feed_norm(pg: bool, scan: &FeedScan) -> String {
    let (events, last, at_end) = scan;
    let mut prev = FeedPos::default();
    for (pos, e) in events {
        assert_eq!(pos.event_id, e.event_id);
        assert!(*pos > prev, "positions grow: {pos:?} after {prev:?}");
        assert_eq!(pos.tx > 0, pg, "{pos:?}");
        prev = *pos;
    }
    let events: Vec<_> = events.iter().map(|(_, e)| e).collect();
    format!("{events:#?} last={} at_end={at_end}", last.event_id)
}

/// Runs the script on both backends and compares them step by step.
fn differential(script: fn(&mut Backend, &mut Log)) {
    let Some(mut pg) = Backend::pg() else { return };
    let mut lite = Backend::sqlite();
    let (mut a, mut b) = (Log::default(), Log::default());
    script(&mut lite, &mut a);
    script(&mut pg, &mut b);
    assert_eq!(a.steps.len(), b.steps.len());
    for ((step, want), (_, got)) in a.steps.iter().zip(&b.steps) {
        assert_eq!(want, got, "step `{step}`: PostgreSQL differs from SQLite");
    }
}

#[test]
fn pg_tx_sessions_events_and_refusals_match_sqlite() {
    differential(crate::pg_tx_script::sessions_and_events);
}

#[test]
fn pg_tx_runs_budgets_leases_and_gates_match_sqlite() {
    differential(crate::pg_tx_script::workflow);
}

#[test]
fn pg_tx_listing_reads_and_feed_match_sqlite() {
    differential(crate::pg_tx_reads::listing_and_reads);
}

#[test]
fn pg_tx_export_and_import_match_sqlite() {
    differential(crate::pg_tx_reads::export_and_import);
}

/// A statement refused by a trigger fails with SQLite's error on both
/// backends, and PostgreSQL's transaction is then marked aborted.
#[test]
fn pg_tx_trigger_refusal_is_the_same_error_and_aborts() {
    let Some(mut pg) = Backend::pg() else { return };
    let mut lite = Backend::sqlite();
    let mut errors = Vec::new();
    for b in [&mut lite, &mut pg] {
        let mut log = Log::default();
        crate::pg_tx_script::seed(b, &mut log);
        let is_pg = b.is_pg();
        let e = b.write_then(
            |tx| {
                let e = tx
                    .insert_snapshot(crate::pg_tx_script::S1, 0, None, "{}", None)
                    .unwrap_err();
                if is_pg {
                    // Not a checkpoint event: the transaction is aborted.
                    assert!(tx.session_exists(crate::pg_tx_script::S1).is_err());
                }
                e
            },
            false,
        );
        errors.push(format!("{e:?}"));
    }
    assert_eq!(
        errors[0],
        "Internal { message: \"database error: logbook: a snapshot belongs to an existing \
         checkpoint event and cannot replace another\" }"
    );
    assert_eq!(errors[0], errors[1]);
}

/// `PgTx::failure` tells the Store what a failed statement means: none
/// after a refused import undone by ROLLBACK TO, `Aborted` after a
/// trigger's refusal.
#[test]
fn pg_tx_failure_is_cleared_by_rollback_to_savepoint() {
    let Some(mut b) = Backend::pg() else { return };
    crate::pg_tx_script::seed(&mut b, &mut Log::default());
    let Backend::Pg(client, _) = &mut b else {
        unreachable!()
    };
    client.batch_execute("BEGIN").unwrap();
    let mut tx = PgTx::new(client, true);
    assert_eq!(tx.failure(), None);
    tx.savepoint().unwrap();
    let bad = crate::pg_tx_reads::refused_import();
    assert!(!tx.insert_session_rows(&bad).unwrap());
    assert_eq!(tx.failure(), Some(Failure::Aborted));
    // Aborted until the savepoint is rolled back to.
    assert!(tx.session_exists(&bad.session_id).is_err());
    tx.rollback_to_savepoint().unwrap();
    assert_eq!(tx.failure(), None);
    tx.release_savepoint().unwrap();
    assert!(!tx.session_exists(&bad.session_id).unwrap());
    let s1 = crate::pg_tx_script::S1;
    let e = tx.insert_snapshot(s1, 0, None, "{}", None).unwrap_err();
    assert_eq!(e.code(), logbook::ErrorCode::Internal);
    assert_eq!(tx.failure(), Some(Failure::Aborted));
    client.batch_execute("ROLLBACK").unwrap();
}
