//! The operators' views give the same values on PostgreSQL as on SQLite
//! (docs/design.md, "Backends"; docs/schema.md, "Views"): a ledger written by the library
//! on SQLite is copied row for row into a PostgreSQL database, and every
//! view, read as text, must match SQLite's row for row — the RFC 3339 times,
//! the day buckets, the sums and the 0/1 counts included.

use crate::pg::pg_test_db;
use logbook::clock::Clock;
use logbook::{CheckpointRequest, RunUsageDelta};
use logbook::{CreateRun, CreateSession, Ledger, LedgerOptions, Mutation, RecordUsage, RunError};
use postgres::types::{ToSql, Type};
use std::sync::atomic::Ordering;

const DAY: i64 = 86_400_000;

/// A SQLite ledger with sessions over three UTC days: completed, failed,
/// cancelled and live ones, with and without an app, with usage and runs.
fn written() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    // 2023-11-14T22:13:20.123Z; later steps land on .000, .999 and the next days.
    let (clock, now) = Clock::fixed(1_700_000_000_123);
    let l = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(&path)
    })
    .unwrap();
    let m = Mutation::default();
    let create = |title: &str, app: Option<&str>| {
        l.create_session(CreateSession {
            app: app.map(str::to_owned),
            tags: vec!["t1".into()],
            ..CreateSession::titled(title)
        })
        .unwrap()
        .session_id
        .to_string()
    };
    let a = create("a", Some("billing"));
    let b = create("b", Some("billing"));
    now.store(1_700_006_399_999, Ordering::SeqCst); // 23:59:59.999 the same day
    let c = create("c", None);
    let d = create("d", Some("ops"));
    let step = |s: &str| CheckpointRequest {
        step: Some(s.into()),
        ..Default::default()
    };
    l.checkpoint(&a, step("one"), &m).unwrap();
    let usage = RecordUsage {
        input_tokens: Some(120),
        output_tokens: Some(30),
        api_calls: Some(2),
        duration_ms: Some(900),
    };
    l.record_usage(&a, usage, &m).unwrap();
    now.store(1_700_006_400_000, Ordering::SeqCst); // midnight, the next day
    l.complete(&a, "done", &m).unwrap();
    l.fail(&b, "broke", &m).unwrap();
    let run = l
        .create_run(&c, CreateRun::default(), &m)
        .unwrap()
        .run_id
        .to_string();
    l.start_run(&run, &m).unwrap();
    let delta = RunUsageDelta {
        input_tokens: Some(7),
        output_tokens: Some(5),
        api_calls: Some(1),
    };
    l.record_run_usage(&run, delta, &m).unwrap();
    l.complete_run(&run, Some(serde_json::json!({"ok": true})), &m)
        .unwrap();
    let failed = l
        .create_run(&c, CreateRun::default(), &m)
        .unwrap()
        .run_id
        .to_string();
    let error = RunError {
        code: "E1".into(),
        message: "no".into(),
    };
    l.fail_run(&failed, error, &m).unwrap();
    now.store(1_700_006_400_000 + DAY + 1, Ordering::SeqCst);
    l.cancel(&d, "stop", &m).unwrap();
    drop(l);
    let conn = rusqlite::Connection::open(&path).unwrap();
    (dir, conn)
}

/// Copies every row of every logbook table from SQLite into the migrated
/// PostgreSQL database, as stored (triggers off for the copy, as
/// pg_restore --disable-triggers does: the rows are already a ledger's).
fn copy(s: &rusqlite::Connection, pg: &mut postgres::Client) {
    let tables = [
        "sessions",
        "session_data",
        "session_tags",
        "session_refs",
        "events",
        "idempotency_keys",
        "runs",
        "session_budgets",
        "session_snapshots",
        "session_gates",
        "session_leases",
    ];
    let mut tx = pg.transaction().unwrap();
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    for t in tables {
        let cols: Vec<String> = s
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
            .unwrap()
            .query_map([t], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let list = cols.join(", ");
        let marks: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
        let insert = tx
            .prepare(&format!(
                "INSERT INTO {t} ({list}) VALUES ({})",
                marks.join(", ")
            ))
            .unwrap();
        let types = insert.params().to_vec();
        let mut st = s.prepare(&format!("SELECT {list} FROM {t}")).unwrap();
        let rows: Vec<Vec<rusqlite::types::Value>> = st
            .query_map([], |r| (0..cols.len()).map(|i| r.get(i)).collect())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for row in rows {
            let params: Vec<Box<dyn ToSql + Sync>> = row
                .into_iter()
                .zip(&types)
                .map(|(v, ty)| pg_value(v, ty))
                .collect();
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(AsRef::as_ref).collect();
            tx.execute(&insert, &refs).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn pg_value(v: rusqlite::types::Value, ty: &Type) -> Box<dyn ToSql + Sync> {
    use rusqlite::types::Value as V;
    match (ty, v) {
        (&Type::INT8, V::Integer(i)) => Box::new(Some(i)),
        (&Type::INT8, V::Null) => Box::new(None::<i64>),
        (&Type::TEXT, V::Text(t)) => Box::new(Some(t)),
        (&Type::TEXT, V::Null) => Box::new(None::<String>),
        (&Type::BYTEA, V::Blob(b)) => Box::new(Some(b)),
        (&Type::BYTEA, V::Null) => Box::new(None::<Vec<u8>>),
        (ty, v) => panic!("no mapping of {v:?} to {ty}"),
    }
}

type Rows = Vec<Vec<Option<String>>>;

#[test]
fn pg_views_give_sqlites_values() {
    let Some(db) = pg_test_db() else { return };
    let (_dir, s) = written();
    let mut pg = db.connect();
    logbook::store::postgres::migrate::migrate(&mut pg).unwrap();
    copy(&s, &mut pg);
    for (view, order_sqlite, order_pg) in [
        // PostgreSQL's keys qualified: the text casts are output columns of
        // the same names, which a bare name in ORDER BY would sort by.
        ("v_sessions", "session_id", "v.session_id"),
        ("v_events", "event_id", "v.event_id"),
        ("v_runs", "run_id", "v.run_id"),
        ("v_daily", "day, app", "v.day, v.app NULLS FIRST"),
    ] {
        let cols: Vec<String> = s
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
            .unwrap()
            .query_map([view], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let n = cols.len();
        let sqlite_list: Vec<String> = cols
            .iter()
            .map(|c| format!("CAST(\"{c}\" AS TEXT)"))
            .collect();
        let want: Rows = s
            .prepare(&format!(
                "SELECT {} FROM {view} ORDER BY {order_sqlite}",
                sqlite_list.join(", ")
            ))
            .unwrap()
            .query_map([], |r| (0..n).map(|i| r.get(i)).collect())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let pg_list: Vec<String> = cols.iter().map(|c| format!("\"{c}\"::text")).collect();
        let got: Rows = pg
            .query(
                &format!(
                    "SELECT {} FROM {view} v ORDER BY {order_pg}",
                    pg_list.join(", ")
                ),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (0..n).map(|i| r.get(i)).collect())
            .collect();
        assert!(want.len() >= 2, "{view}: {want:?}");
        assert_eq!(got, want, "{view} ({})", cols.join(", "));
    }
}
