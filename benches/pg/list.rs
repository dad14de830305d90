//! `session list` at 1,000,000 sessions: PostgreSQL beside SQLite on the
//! same machine, the same rows (the generator of benches/report.rs, written
//! for both engines), the same library call.

use super::{db_url, drop_db, fresh_db, pct, Config};
use logbook::{Ledger, LedgerOptions, ListSessions, SessionStatus, SyncMode};
use std::path::Path;
use std::time::Instant;

/// Sessions 1..=n: 60% active, 10% each paused/completed/failed/cancelled
/// (by i mod 10), app `app{i mod 50}`, agent `agent{i mod 200}`, tag `t` on
/// every tenth, created 10 ms apart; each with its session_data row and its
/// `created` event. Column values are byte-identical on both engines.
const PG_LOAD: &str = "
BEGIN;
INSERT INTO sessions (insert_seq, session_id, status, title, app, agent_id, tags, actor_type, rev, created_at_ms, updated_at_ms, ended_at_ms)
SELECT i, 'ses_' || lpad(to_hex(i), 8, '0') || lpad(to_hex((i * 2654435761) % 4294967296), 8, '0'),
       CASE WHEN i % 10 < 6 THEN 'active' WHEN i % 10 = 6 THEN 'paused' WHEN i % 10 = 7 THEN 'completed' WHEN i % 10 = 8 THEN 'failed' ELSE 'cancelled' END,
       'session ' || i, 'app' || (i % 50), 'agent' || (i % 200), CASE WHEN i % 10 = 0 THEN '[\"t\"]' ELSE '[]' END, 'lib', 1,
       1700000000000 + i * 10, 1700000000000 + i * 10 + (i % 1000),
       CASE WHEN i % 10 >= 7 THEN 1700000000000 + i * 10 ELSE NULL END
FROM generate_series(1, $N) AS i;
INSERT INTO session_data (insert_seq, session_id) SELECT insert_seq, session_id FROM sessions;
INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) SELECT 't', created_at_ms, insert_seq, session_id FROM sessions WHERE tags <> '[]';
INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, prev_hash, hash)
SELECT session_id, 0, 'created', created_at_ms, 'lib', 'session created', decode(repeat('00', 32), 'hex'), sha256(convert_to(session_id, 'UTF8')) FROM sessions ORDER BY insert_seq;
SELECT setval(pg_get_serial_sequence('sessions', 'insert_seq'), $N);
COMMIT;
";

fn sqlite_load(path: &Path, n: i64) {
    drop(
        Ledger::open(LedgerOptions {
            sync: SyncMode::Normal,
            ..LedgerOptions::at(path)
        })
        .unwrap(),
    );
    let c = rusqlite::Connection::open(path).unwrap();
    c.pragma_update(None, "synchronous", "OFF").unwrap();
    c.execute_batch("BEGIN").unwrap();
    c.execute(
        "WITH RECURSIVE x(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM x WHERE i < ?1)
         INSERT INTO sessions (insert_seq, session_id, status, title, app, agent_id, tags, actor_type, rev, created_at_ms, updated_at_ms, ended_at_ms)
         SELECT i, printf('ses_%08x%08x', i, (i * 2654435761) % 4294967296),
                CASE WHEN i % 10 < 6 THEN 'active' WHEN i % 10 = 6 THEN 'paused' WHEN i % 10 = 7 THEN 'completed' WHEN i % 10 = 8 THEN 'failed' ELSE 'cancelled' END,
                'session ' || i, 'app' || (i % 50), 'agent' || (i % 200), CASE WHEN i % 10 = 0 THEN '[\"t\"]' ELSE '[]' END, 'lib', 1,
                1700000000000 + i * 10, 1700000000000 + i * 10 + (i % 1000),
                CASE WHEN i % 10 >= 7 THEN 1700000000000 + i * 10 ELSE NULL END
         FROM x",
        [n],
    )
    .unwrap();
    c.execute_batch(
        "INSERT INTO session_data (insert_seq, session_id) SELECT insert_seq, session_id FROM sessions;
         INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) SELECT 't', created_at_ms, insert_seq, session_id FROM sessions WHERE tags <> '[]';
         INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, prev_hash, hash) SELECT session_id, 0, 'created', created_at_ms, 'lib', 'session created', zeroblob(32), randomblob(32) FROM sessions;
         COMMIT; PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .unwrap();
}

fn time_list(l: &Ledger, q: &ListSessions, reps: usize) -> Vec<f64> {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(l.list_sessions(q).unwrap());
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

pub fn section(cfg: &Config, admin: &mut postgres::Client) {
    let n: i64 = super::env_num("LOGBOOK_BENCH_SESSIONS", 1_000_000);
    let db = "lbbench_list";
    fresh_db(admin, db);
    let url = db_url(&cfg.base, db);
    drop(Ledger::open(LedgerOptions::at(&url)).unwrap());
    let t = Instant::now();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(&PG_LOAD.replace("$N", &n.to_string()))
        .unwrap();
    // VACUUM refuses a multi-statement string (an implicit transaction).
    c.batch_execute("VACUUM ANALYZE").unwrap();
    drop(c);
    let pg_load = t.elapsed().as_secs_f64();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("list.db");
    let t = Instant::now();
    sqlite_load(&path, n);
    let sq_load = t.elapsed().as_secs_f64();
    let pg = Ledger::open(LedgerOptions::at(&url)).unwrap();
    let sq = Ledger::open(LedgerOptions::at(&path)).unwrap();
    let active = || ListSessions {
        statuses: vec![SessionStatus::Active],
        ..Default::default()
    };
    let cases: Vec<(&str, ListSessions)> = vec![
        ("no filter", ListSessions::default()),
        ("--status active", active()),
        (
            "--status active --app app3",
            ListSessions {
                app: Some("app3".into()),
                ..active()
            },
        ),
        (
            "--status active --app app7 (a pair with no rows)",
            ListSessions {
                app: Some("app7".into()),
                ..active()
            },
        ),
        (
            "--tag t (every tenth session)",
            ListSessions {
                tag: Some("t".into()),
                ..Default::default()
            },
        ),
        (
            "--tag t --status active",
            ListSessions {
                tag: Some("t".into()),
                ..active()
            },
        ),
        (
            "--order updated --tag t",
            ListSessions {
                tag: Some("t".into()),
                order_updated: true,
                ..Default::default()
            },
        ),
        (
            "--order updated --status active",
            ListSessions {
                order_updated: true,
                ..active()
            },
        ),
    ];
    println!("## `session list` on {n} sessions, limit 20: PostgreSQL beside SQLite\n");
    println!("The same rows on both (loaded by SQL in one transaction, the PostgreSQL triggers and foreign keys checking every row, then VACUUM ANALYZE: {pg_load:.1} s; SQLite {sq_load:.1} s), the same library call returning whole sessions; each engine's first page is asserted equal to the other's. Per query 50 warm-up calls each, then 2 × 500 calls per engine, alternating.\n");
    println!("| query | PostgreSQL p50 µs | p99 µs | SQLite p50 µs | p99 µs | p99 ratio |\n|---|---|---|---|---|---|");
    for (name, q) in cases {
        let a = pg.list_sessions(&q).unwrap();
        let b = sq.list_sessions(&q).unwrap();
        let ids = |p: &logbook::SessionPage| -> Vec<String> {
            p.sessions
                .iter()
                .map(|s| s.session_id.to_string())
                .collect()
        };
        assert_eq!(ids(&a), ids(&b), "{name}: the engines' first pages differ");
        time_list(&pg, &q, 50);
        time_list(&sq, &q, 50);
        let (mut p, mut s) = (Vec::new(), Vec::new());
        for round in 0..2 {
            if round == 0 {
                p.extend(time_list(&pg, &q, 500));
                s.extend(time_list(&sq, &q, 500));
            } else {
                s.extend(time_list(&sq, &q, 500));
                p.extend(time_list(&pg, &q, 500));
            }
        }
        let (p99, s99) = (pct(&mut p, 0.99), pct(&mut s, 0.99));
        println!(
            "| {name} ({} rows) | {:.0} | {p99:.0} | {:.0} | {s99:.0} | {:.2} |",
            a.sessions.len(),
            pct(&mut p, 0.5),
            pct(&mut s, 0.5),
            p99 / s99
        );
    }
    println!();
    drop(pg);
    drop_db(admin, db);
    // The peer: LangGraph's PostgresSaver listing one thread's newest 20 on
    // a checkpoints table of the same size.
    let py = super::venv();
    let lg = "lbbench_lglist";
    fresh_db(admin, lg);
    let out = std::process::Command::new(&py.0)
        .args([super::LG_SCRIPT, "list", &n.to_string()])
        .env("LOGBOOK_BENCH_LG_URL", db_url(&cfg.base, lg))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    println!(
        "Beside it, the peer: LangGraph `list(PostgresSaver.list(thread, limit=20))` of one thread's 20 newest checkpoints on a `checkpoints` table of {} rows (1,000 threads; copies of one real `put`'s row), from Python ({}), 50 warm-up calls then 1,000: p50 {} µs, p99 {} µs.\n",
        f[2],
        super::lg_versions(&py),
        f[0],
        f[1]
    );
    drop_db(admin, lg);
}
